// Enum <-> name tables (weft/core/enum_names.h).
#include "weft/core/enum_names.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

enum class Colour { kRed, kGreen, kBlue, kUnnamed };
constexpr EnumName<Colour> kColourNames[] = {
    {Colour::kRed, "red"}, {Colour::kGreen, "green"}, {Colour::kBlue, "blue"}};

TEST(EnumNames, NamesBothWays) {
  EXPECT_STREQ(enum_name(kColourNames, Colour::kGreen), "green");
  EXPECT_STREQ(enum_name(kColourNames, Colour::kUnnamed), "?");
  EXPECT_EQ(enum_value(kColourNames, "blue"), Colour::kBlue);
  EXPECT_EQ(enum_value(kColourNames, "Blue"), std::nullopt);
  auto r = enum_from_name(kColourNames, "red", "colour");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Colour::kRed);
}

TEST(EnumNames, ListsForMessages) {
  EXPECT_EQ(enum_names_list(kColourNames), "red, green or blue");
  EXPECT_EQ(enum_names_joined(kColourNames, ", "), "red, green, blue");
  EXPECT_EQ(enum_names_joined(kColourNames, "|"), "red|green|blue");
  auto bad = enum_from_name(kColourNames, "mauve", "colour");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kBadInput);
  EXPECT_EQ(bad.error().message, "colour: unknown value \"mauve\" (expected red, green or blue)");
}

}  // namespace
}  // namespace weft
