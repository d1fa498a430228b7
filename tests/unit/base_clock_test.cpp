#include "base/clock.h"

#include <gtest/gtest.h>

namespace tpujob {
namespace {

TEST(FakeClockTest, AdvanceMovesBothClocks) {
  FakeClock clock;
  const TimePoint start = clock.Now();
  const WallTime wall_start = clock.WallNow();
  clock.Advance(std::chrono::seconds(5));
  EXPECT_EQ(clock.Now() - start, std::chrono::seconds(5));
  EXPECT_EQ(clock.WallNow() - wall_start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace tpujob
