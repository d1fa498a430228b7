#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "workqueue/rate_limiter.h"

namespace tpujob::workqueue {
namespace TPUJOB_TEST_NS {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(WorkqueueRateLimiterTest, ItemExponentialDoublesPerKeyFrom5ms) {
  ItemExponentialRateLimiter limiter;
  EXPECT_EQ(limiter.When("ns/a"), milliseconds(5));
  EXPECT_EQ(limiter.When("ns/a"), milliseconds(10));
  EXPECT_EQ(limiter.When("ns/a"), milliseconds(20));
  EXPECT_EQ(limiter.When("ns/a"), milliseconds(40));
  EXPECT_EQ(limiter.NumRequeues("ns/a"), 4);
  // Keys are independent.
  EXPECT_EQ(limiter.NumRequeues("ns/b"), 0);
  EXPECT_EQ(limiter.When("ns/b"), milliseconds(5));
}

TEST(WorkqueueRateLimiterTest, ItemExponentialIsCappedAt1000s) {
  ItemExponentialRateLimiter limiter;
  Duration last{};
  for (int i = 0; i < 100; ++i) last = limiter.When("ns/a");
  EXPECT_EQ(last, seconds(1000));
  // 5ms * 2^17 = 655.36s, 5ms * 2^18 = 1310.72s > 1000s.
  ItemExponentialRateLimiter fresh;
  for (int i = 0; i < 17; ++i) fresh.When("k");
  EXPECT_EQ(fresh.When("k"), milliseconds(655'360));
  EXPECT_EQ(fresh.When("k"), seconds(1000));
  EXPECT_EQ(fresh.NumRequeues("k"), 19);
}

TEST(WorkqueueRateLimiterTest, ItemExponentialForgetResets) {
  ItemExponentialRateLimiter limiter(milliseconds(1), seconds(1));
  limiter.When("k");
  limiter.When("k");
  limiter.When("other");
  limiter.Forget("k");
  EXPECT_EQ(limiter.NumRequeues("k"), 0);
  EXPECT_EQ(limiter.When("k"), milliseconds(1));
  EXPECT_EQ(limiter.NumRequeues("other"), 1);
}

TEST(WorkqueueRateLimiterTest, ItemExponentialCountsEveryConcurrentFailure) {
  ItemExponentialRateLimiter limiter;
  constexpr int kThreads = 4;
  constexpr int kCalls = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i) limiter.When("shared");
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(limiter.NumRequeues("shared"), kThreads * kCalls);
}

TEST(WorkqueueRateLimiterTest, BucketAllowsBurstThenQps) {
  FakeClock clock;
  BucketRateLimiter limiter(clock, /*qps=*/10, /*burst=*/100);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(limiter.When("k" + std::to_string(i)), Duration::zero()) << i;
  }
  // Past the burst every token is 100ms further out.
  EXPECT_EQ(limiter.When("x"), milliseconds(100));
  EXPECT_EQ(limiter.When("y"), milliseconds(200));
  clock.Advance(milliseconds(200));
  EXPECT_EQ(limiter.When("z"), milliseconds(100));
  EXPECT_EQ(limiter.NumRequeues("x"), 0);
  limiter.Forget("x");  // no per-key state: nothing to reset, the bucket is unchanged
  EXPECT_EQ(limiter.When("w"), milliseconds(200));
}

// A child whose answers are scripted, to check how MaxOf combines them.
class ScriptedLimiter final : public RateLimiter {
 public:
  explicit ScriptedLimiter(Duration delay) : delay_(delay) {}
  Duration When(const std::string&) override {
    ++whens;
    return delay_;
  }
  void Forget(const std::string&) override { ++forgets; }
  int NumRequeues(const std::string&) override { return whens; }
  int whens = 0;
  int forgets = 0;

 private:
  Duration delay_;
};

TEST(WorkqueueRateLimiterTest, MaxOfReturnsLongestAndForwardsToAll) {
  auto small = std::make_unique<ScriptedLimiter>(milliseconds(3));
  auto large = std::make_unique<ScriptedLimiter>(milliseconds(30));
  ScriptedLimiter* small_ptr = small.get();
  ScriptedLimiter* large_ptr = large.get();
  std::vector<std::unique_ptr<RateLimiter>> children;
  children.push_back(std::move(large));
  children.push_back(std::move(small));
  MaxOfRateLimiter limiter(std::move(children));
  EXPECT_EQ(limiter.When("k"), milliseconds(30));
  EXPECT_EQ(small_ptr->whens, 1);  // every child counts the failure
  EXPECT_EQ(large_ptr->whens, 1);
  small_ptr->whens = 5;
  EXPECT_EQ(limiter.NumRequeues("k"), 5);
  limiter.Forget("k");
  EXPECT_EQ(small_ptr->forgets, 1);
  EXPECT_EQ(large_ptr->forgets, 1);
}

TEST(WorkqueueRateLimiterTest, MaxOfWithNoChildrenIsZero) {
  MaxOfRateLimiter limiter({});
  EXPECT_EQ(limiter.When("k"), Duration::zero());
  EXPECT_EQ(limiter.NumRequeues("k"), 0);
}

TEST(WorkqueueRateLimiterTest, DefaultCombinesPerItemBackoffAndOverallBucket) {
  FakeClock clock;
  auto limiter = DefaultControllerRateLimiter(clock);
  // Within the burst of 100 the per-item 5ms dominates.
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(limiter->When("ns/job-" + std::to_string(i)), milliseconds(5)) << i;
  }
  // The bucket is now empty: a fresh key waits for the next token (100ms at 10 qps).
  EXPECT_EQ(limiter->When("ns/fresh"), milliseconds(100));
  EXPECT_EQ(limiter->NumRequeues("ns/fresh"), 1);
  // Once the bucket has refilled, the per-item backoff dominates again.
  clock.Advance(seconds(100));
  const std::string key = "ns/job-0";  // one failure so far
  EXPECT_EQ(limiter->When(key), milliseconds(10));
  EXPECT_EQ(limiter->When(key), milliseconds(20));
  EXPECT_EQ(limiter->NumRequeues(key), 3);
  limiter->Forget(key);
  EXPECT_EQ(limiter->NumRequeues(key), 0);
  EXPECT_EQ(limiter->When(key), milliseconds(5));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::workqueue
