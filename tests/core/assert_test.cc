// WEFT_ASSERT is always on: this file is compiled as a Release build is (NDEBUG defined, so a plain
// assert() would vanish) whatever the build type, and the check must still abort with its message.
#ifndef NDEBUG
#define NDEBUG 1
#endif

#include "weft/core/assert.h"

#include <gtest/gtest.h>

#include <string>

namespace weft {
namespace {

int checks_of(int layer, int layers) {
  WEFT_ASSERT(layer < layers, "layer " + std::to_string(layer) + " of " + std::to_string(layers));
  return layer;
}

TEST(Assert, AbortsWithFileLineConditionAndMessage) {
  EXPECT_DEATH(checks_of(7, 4),
               "weft: internal error: .*assert_test\\.cc:[0-9]+: check failed: layer < layers: layer 7 of 4");
  EXPECT_DEATH(WEFT_ASSERT(1 + 1 == 3, "a literal message"), "check failed: 1 \\+ 1 == 3: a literal message");
}

TEST(Assert, PassesWithoutBuildingTheMessage) {
  int evaluated = 0, built = 0;
  auto message = [&] {
    ++built;
    return std::string("never shown");
  };
  WEFT_ASSERT(++evaluated == 1, message());
  EXPECT_EQ(evaluated, 1);  // the condition runs once
  EXPECT_EQ(built, 0);      // the message only on failure
  EXPECT_EQ(checks_of(3, 4), 3);
}

}  // namespace
}  // namespace weft
