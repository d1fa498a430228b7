#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "base/token_bucket.h"

namespace tpujob {
namespace TPUJOB_TEST_NS {

using std::chrono::milliseconds;

TEST(TokenBucketTest, BurstThenRefillsAtQps) {
  FakeClock clock;
  TokenBucket bucket(/*qps=*/10, /*burst=*/3, clock);
  EXPECT_TRUE(bucket.TryAccept());
  EXPECT_TRUE(bucket.TryAccept());
  EXPECT_TRUE(bucket.TryAccept());
  EXPECT_FALSE(bucket.TryAccept());
  clock.Advance(milliseconds(99));
  EXPECT_FALSE(bucket.TryAccept());
  clock.Advance(milliseconds(1));
  EXPECT_TRUE(bucket.TryAccept());
  EXPECT_FALSE(bucket.TryAccept());
}

TEST(TokenBucketTest, RefillIsCappedAtBurst) {
  FakeClock clock;
  TokenBucket bucket(/*qps=*/10, /*burst=*/2, clock);
  clock.Advance(std::chrono::hours(1));
  EXPECT_TRUE(bucket.TryAccept());
  EXPECT_TRUE(bucket.TryAccept());
  EXPECT_FALSE(bucket.TryAccept());
}

TEST(TokenBucketTest, ReserveBorrowsFromTheFuture) {
  FakeClock clock;
  TokenBucket bucket(/*qps=*/10, /*burst=*/2, clock);
  EXPECT_EQ(bucket.Reserve(), Duration::zero());
  EXPECT_EQ(bucket.Reserve(), Duration::zero());
  EXPECT_EQ(bucket.Reserve(), milliseconds(100));
  EXPECT_EQ(bucket.Reserve(), milliseconds(200));
  // The borrowed tokens must be paid back before TryAccept succeeds again.
  clock.Advance(milliseconds(200));
  EXPECT_FALSE(bucket.TryAccept());
  clock.Advance(milliseconds(100));
  EXPECT_TRUE(bucket.TryAccept());
}

TEST(TokenBucketTest, ReserveRoundsUpSoTheTokenIsThere) {
  FakeClock clock;
  TokenBucket bucket(/*qps=*/3, /*burst=*/1, clock);
  EXPECT_EQ(bucket.Reserve(), Duration::zero());
  const Duration delay = bucket.Reserve();
  EXPECT_GE(delay, std::chrono::nanoseconds(333'333'333));
  EXPECT_LE(delay, std::chrono::nanoseconds(333'333'334));
  clock.Advance(2 * delay);  // pays back the borrowed token and earns the next one
  EXPECT_TRUE(bucket.TryAccept());
}

TEST(TokenBucketTest, NonPositiveQpsIsUnlimited) {
  FakeClock clock;
  TokenBucket bucket(/*qps=*/0, /*burst=*/1, clock);
  EXPECT_TRUE(bucket.unlimited());
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(bucket.TryAccept());
  EXPECT_EQ(bucket.Reserve(), Duration::zero());
  bucket.Wait();  // must not block
}

TEST(TokenBucketTest, WaitReturnsAtOnceWhenATokenIsAvailable) {
  FakeClock clock;
  TokenBucket bucket(/*qps=*/1, /*burst=*/1, clock);
  bucket.Wait();
  EXPECT_EQ(clock.Waiters(), 0);
  EXPECT_FALSE(bucket.TryAccept());
}

TEST(TokenBucketTest, WaitBlocksUntilTheFakeClockReachesTheToken) {
  FakeClock clock;
  TokenBucket bucket(/*qps=*/10, /*burst=*/1, clock);
  ASSERT_TRUE(bucket.TryAccept());
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    bucket.Wait();
    returned = true;
  });
  EXPECT_TRUE(clock.AwaitWaiters(1));
  EXPECT_FALSE(returned);
  clock.Advance(milliseconds(50));
  EXPECT_TRUE(clock.AwaitWaiters(1));
  EXPECT_FALSE(returned);
  clock.Advance(milliseconds(50));
  waiter.join();
  EXPECT_TRUE(returned);
  // The waiter used the token that accrued; none is left.
  EXPECT_FALSE(bucket.TryAccept());
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob
