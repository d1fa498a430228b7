#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <random>
#include <set>

#include "base/backoff.h"

namespace tpujob {
namespace TPUJOB_TEST_NS {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(BackoffTest, GrowsByFactorUntilCappedAtMax) {
  Backoff backoff(BackoffPolicy{.initial = milliseconds(100), .max = seconds(1), .factor = 2.0});
  EXPECT_EQ(backoff.Delay(0), milliseconds(100));
  EXPECT_EQ(backoff.Delay(1), milliseconds(200));
  EXPECT_EQ(backoff.Delay(2), milliseconds(400));
  EXPECT_EQ(backoff.Delay(3), milliseconds(800));
  EXPECT_EQ(backoff.Delay(4), seconds(1));
  EXPECT_EQ(backoff.Delay(50), seconds(1));
}

TEST(BackoffTest, HugeFailureCountsAreCappedWithoutOverflow) {
  Backoff doubling(BackoffPolicy{.initial = milliseconds(5), .max = seconds(1000)});
  EXPECT_EQ(doubling.Delay(64), seconds(1000));
  EXPECT_EQ(doubling.Delay(std::numeric_limits<uint32_t>::max()), seconds(1000));
  // With factor 1 the old multiply loop never reached max and ran 2^32 times.
  Backoff constant(BackoffPolicy{.initial = milliseconds(7), .max = seconds(1), .factor = 1.0});
  EXPECT_EQ(constant.Delay(std::numeric_limits<uint32_t>::max()), milliseconds(7));
}

TEST(BackoffTest, InitialAboveMaxIsCapped) {
  Backoff backoff(BackoffPolicy{.initial = seconds(5), .max = seconds(2)});
  EXPECT_EQ(backoff.Delay(0), seconds(2));
}

TEST(BackoffTest, JitterStaysWithinBoundsAndVaries) {
  const BackoffPolicy policy{
      .initial = milliseconds(100), .max = seconds(10), .factor = 2.0, .jitter = 0.5};
  Backoff backoff(policy, /*seed=*/42);
  for (uint32_t failures = 0; failures < 10; ++failures) {
    const Duration base = std::min<Duration>(milliseconds(100) * (1 << failures), seconds(10));
    const Duration high = std::min<Duration>(base + base / 2, seconds(10));
    std::set<Duration::rep> seen;
    for (int sample = 0; sample < 200; ++sample) {
      const Duration delay = backoff.Delay(failures);
      ASSERT_GE(delay, base) << "failures=" << failures;
      ASSERT_LE(delay, high) << "failures=" << failures;
      seen.insert(delay.count());
    }
    if (base < seconds(10)) {
      EXPECT_GT(seen.size(), 100u) << "jitter not applied at failures=" << failures;
    } else {
      EXPECT_EQ(seen.size(), 1u) << "capped delays must all equal max";
    }
  }
}

TEST(BackoffTest, SameSeedGivesSameJitter) {
  const BackoffPolicy policy{.initial = milliseconds(100), .jitter = 1.0};
  Backoff a(policy, 7);
  Backoff b(policy, 7);
  for (uint32_t i = 0; i < 5; ++i) EXPECT_EQ(a.Delay(i), b.Delay(i));
}

TEST(BackoffTest, NextCountsFailuresAndResetStartsOver) {
  Backoff backoff(BackoffPolicy{.initial = milliseconds(10), .max = seconds(1)});
  EXPECT_EQ(backoff.failures(), 0u);
  EXPECT_EQ(backoff.Next(), milliseconds(10));
  EXPECT_EQ(backoff.Next(), milliseconds(20));
  EXPECT_EQ(backoff.Next(), milliseconds(40));
  EXPECT_EQ(backoff.failures(), 3u);
  backoff.Reset();
  EXPECT_EQ(backoff.failures(), 0u);
  EXPECT_EQ(backoff.Next(), milliseconds(10));
}

TEST(BackoffTest, RandomBetweenStaysInRange) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000; ++i) {
    const Duration d = RandomBetween(seconds(5), seconds(10), rng);
    ASSERT_GE(d, seconds(5));
    ASSERT_LE(d, seconds(10));
  }
  EXPECT_EQ(RandomBetween(seconds(5), seconds(3), rng), seconds(5));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob
