#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "base/clock.h"

namespace tpujob {
namespace TPUJOB_TEST_NS {

using std::chrono::seconds;

TEST(FakeClockTest, AdvanceMovesBothClocks) {
  FakeClock clock;
  const TimePoint start = clock.Now();
  const WallTime wall_start = clock.WallNow();
  clock.Advance(std::chrono::seconds(5));
  EXPECT_EQ(clock.Now() - start, std::chrono::seconds(5));
  EXPECT_EQ(clock.WallNow() - wall_start, std::chrono::seconds(5));
}

TEST(FakeClockTest, WaitUntilReturnsAtOnceWhenDeadlinePassed) {
  FakeClock clock;
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock<std::mutex> lock(mu);
  clock.WaitUntil(cv, lock, clock.Now());  // would block forever if it waited
  EXPECT_TRUE(lock.owns_lock());
  EXPECT_EQ(clock.Waiters(), 0);
}

// A waiter loops on its deadline as callers are told to; it returns only once Advance has
// carried the clock past the deadline.
TEST(FakeClockTest, WaitUntilWakesWhenAdvancedPastDeadline) {
  FakeClock clock;
  const TimePoint deadline = clock.Now() + seconds(10);
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    std::mutex mu;
    std::condition_variable cv;
    std::unique_lock<std::mutex> lock(mu);
    while (clock.Now() < deadline) clock.WaitUntil(cv, lock, deadline);
    EXPECT_TRUE(lock.owns_lock());
    returned = true;
  });
  EXPECT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(seconds(9));
  // The waiter wakes, sees it is early and parks again, still not returned.
  EXPECT_TRUE(clock.AwaitWaiters(1));
  EXPECT_FALSE(returned);
  clock.Advance(seconds(1));
  waiter.join();
  EXPECT_TRUE(returned);
  EXPECT_EQ(clock.Waiters(), 0);
}

TEST(FakeClockTest, NotifyWakesWaiterAndDeregistersIt) {
  FakeClock clock;
  std::mutex mu;
  std::condition_variable cv;
  bool poked = false;
  std::thread waiter([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (!poked) clock.WaitUntil(cv, lock, clock.Now() + seconds(100));
  });
  EXPECT_TRUE(clock.AwaitWaiters(1));
  {
    std::lock_guard<std::mutex> guard(mu);
    poked = true;
  }
  cv.notify_all();
  waiter.join();
  EXPECT_EQ(clock.Waiters(), 0);
}

TEST(FakeClockTest, AwaitWaitersTimesOutWhenNobodyWaits) {
  FakeClock clock;
  EXPECT_FALSE(clock.AwaitWaiters(1, std::chrono::milliseconds(1)));
}

// Waiters whose cv and mutex live on their stack, woken both by Advance and by their own
// notifier, while another thread keeps advancing. Before WaitUntil waited for in-flight
// Advance calls, an Advance could lock a mutex whose owner had already returned (caught by
// ASan/TSan; here we assert that everyone finishes).
TEST(FakeClockTest, ShortLivedWaitersSurviveConcurrentAdvance) {
  FakeClock clock;
  constexpr int kWaiters = 4;
  constexpr int kRounds = 200;
  std::atomic<int> finished{0};
  std::atomic<bool> stop{false};
  std::thread advancer([&] {
    while (!stop) clock.Advance(std::chrono::milliseconds(1));
  });
  std::vector<std::thread> waiters;
  for (int w = 0; w < kWaiters; ++w) {
    waiters.emplace_back([&] {
      for (int round = 0; round < kRounds; ++round) {
        std::mutex mu;
        std::condition_variable cv;
        std::unique_lock<std::mutex> lock(mu);
        const TimePoint deadline = clock.Now() + std::chrono::milliseconds(2);
        while (clock.Now() < deadline) clock.WaitUntil(cv, lock, deadline);
      }
      ++finished;
    });
  }
  for (auto& t : waiters) t.join();
  stop = true;
  advancer.join();
  EXPECT_EQ(finished, kWaiters);
  EXPECT_EQ(clock.Waiters(), 0);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob
