#include "weft/core/units.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

TEST(Units, DivisionGivesTime) {
  EXPECT_DOUBLE_EQ((GB(2) / GBps(4)).value(), 0.5);
  EXPECT_DOUBLE_EQ((Flops(312e12) / TFLOPs(312)).value(), 1.0);
}

TEST(Units, BinaryAndDecimalDiffer) {
  EXPECT_DOUBLE_EQ(GiB(1).value(), 1073741824.0);
  EXPECT_DOUBLE_EQ(GB(1).value(), 1e9);
  EXPECT_GT(GiB(1), GB(1));
  EXPECT_DOUBLE_EQ(to_gib(MiB(512)), 0.5);
}

TEST(Units, ArithmeticAndRatio) {
  Seconds a = ms(3), b = ms(1);
  EXPECT_DOUBLE_EQ((a + b).value(), 0.004);
  EXPECT_DOUBLE_EQ((a - b).value(), 0.002);
  EXPECT_DOUBLE_EQ(a / b, 3.0);
  EXPECT_DOUBLE_EQ((a * 2.0).value(), 0.006);
  EXPECT_DOUBLE_EQ((GBps(10) * sec(2)).value(), 20e9);
}

}  // namespace
}  // namespace weft
