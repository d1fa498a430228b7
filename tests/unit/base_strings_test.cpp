#include <gtest/gtest.h>

#include "base/strings.h"

namespace tpujob {
namespace TPUJOB_TEST_NS {

TEST(BaseStringsTest, TrimDropsWhitespaceAtBothEndsOnly) {
  EXPECT_EQ(Trim("  a b\t\r\n"), "a b");
  EXPECT_EQ(Trim("\v\fx\f\v"), "x");  // what std::isspace accepts
  EXPECT_EQ(Trim(" \t\n "), "");
  EXPECT_EQ(Trim(""), "");
  EXPECT_EQ(Trim("a"), "a");
}

TEST(BaseStringsTest, TrimTakesTheCharactersToDrop) {
  EXPECT_EQ(Trim(" \tvalue\t ", " \t"), "value");
  EXPECT_EQ(Trim("\r\nvalue\r\n", " \t"), "\r\nvalue\r\n");  // HTTP's optional whitespace only
}

TEST(BaseStringsTest, JoinPutsTheSeparatorBetweenParts) {
  EXPECT_EQ(Join({}, ","), "");
  EXPECT_EQ(Join({"a"}, ","), "a");
  EXPECT_EQ(Join({"a", "b", "c"}, ", "), "a, b, c");
}

TEST(BaseStringsTest, IsIpAddressTellsAddressesFromNames) {
  EXPECT_TRUE(IsIpAddress("127.0.0.1"));
  EXPECT_TRUE(IsIpAddress("::1"));
  EXPECT_TRUE(IsIpAddress("fd00::10:96:0:1"));
  EXPECT_FALSE(IsIpAddress("localhost"));
  EXPECT_FALSE(IsIpAddress("kubernetes.default.svc"));
  EXPECT_FALSE(IsIpAddress("10.0.0.256"));
  EXPECT_FALSE(IsIpAddress(""));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob
