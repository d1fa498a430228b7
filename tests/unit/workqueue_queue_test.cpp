#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "workqueue/queue.h"
#include "workqueue/rate_limiter.h"

namespace tpujob::workqueue {
namespace TPUJOB_TEST_NS {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Get for a test's own thread: a broken queue must fail the test, not hang it. Returns
// kWouldBlock instead of calling Get when Get would wait (nothing ready, not shut down).
constexpr char kWouldBlock[] = "<Get would block>";
std::optional<std::string> GetNow(WorkQueue& queue) {
  if (queue.Len() == 0 && !queue.ShuttingDown()) return kWouldBlock;
  return queue.Get();
}

// A thread using the queue. Join() waits for it; should it still be blocked after 10s of real
// time (a broken queue), Join records a failure and shuts the queue down to release it. The
// destructor does the same when the test returned early (a failed ASSERT). Either way the test
// fails instead of hanging or aborting; a correct queue never reaches the timeout.
class QueueThread {
 public:
  QueueThread(WorkQueue& queue, std::function<void()> body)
      : queue_(queue), thread_([this, body = std::move(body)] {
          body();
          std::lock_guard<std::mutex> guard(mu_);
          finished_ = true;
          finished_cv_.notify_all();
        }) {}
  ~QueueThread() {
    if (!thread_.joinable()) return;
    queue_.ShutDown();
    thread_.join();
  }
  void Join() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!finished_cv_.wait_for(lock, seconds(10), [&] { return finished_; })) {
        ADD_FAILURE() << "thread still blocked after 10s; shutting the queue down";
        queue_.ShutDown();
      }
    }
    thread_.join();
  }

 private:
  WorkQueue& queue_;
  std::mutex mu_;
  std::condition_variable finished_cv_;
  bool finished_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

// --- Basic queue semantics ---------------------------------------------------------------------

TEST(WorkqueueQueueTest, AddDedupesQueuedKeys) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.Add("ns/a");
  queue.Add("ns/b");
  queue.Add("ns/a");
  queue.Add("ns/a");
  EXPECT_EQ(queue.Len(), 2u);
  EXPECT_EQ(GetNow(queue), "ns/a");
  EXPECT_EQ(GetNow(queue), "ns/b");
  EXPECT_EQ(queue.Len(), 0u);
  EXPECT_EQ(queue.Stats().adds_total, 2u);
}

TEST(WorkqueueQueueTest, GetReturnsKeysInFifoOrder) {
  FakeClock clock;
  WorkQueue queue(clock);
  for (const char* key : {"ns/c", "ns/a", "ns/b"}) queue.Add(key);
  queue.Add("ns/c");  // a duplicate keeps its original place
  EXPECT_EQ(GetNow(queue), "ns/c");
  EXPECT_EQ(GetNow(queue), "ns/a");
  EXPECT_EQ(GetNow(queue), "ns/b");
}

TEST(WorkqueueQueueTest, ReAddDuringProcessingIsQueuedOnlyAfterDone) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.Add("ns/a");
  ASSERT_EQ(GetNow(queue), "ns/a");
  queue.Add("ns/a");
  queue.Add("ns/a");  // still one pending re-run, not two
  EXPECT_EQ(queue.Len(), 0u) << "a key being processed must not be handed out again";
  EXPECT_EQ(queue.Stats().in_flight, 1u);
  queue.Done("ns/a");
  EXPECT_EQ(queue.Len(), 1u);
  EXPECT_EQ(GetNow(queue), "ns/a");
  queue.Done("ns/a");
  EXPECT_EQ(queue.Len(), 0u) << "a key not re-added must not come back after Done";
}

TEST(WorkqueueQueueTest, DoneWithoutReAddDoesNotRequeue) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.Add("ns/a");
  ASSERT_EQ(GetNow(queue), "ns/a");
  queue.Done("ns/a");
  EXPECT_EQ(queue.Len(), 0u);
  EXPECT_EQ(queue.Stats().in_flight, 0u);
}

TEST(WorkqueueQueueTest, StrayDoneDoesNotDuplicateQueuedKey) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.Add("ns/a");
  queue.Done("ns/a");  // never handed out: ignored
  EXPECT_EQ(queue.Len(), 1u);
  EXPECT_EQ(GetNow(queue), "ns/a");
  EXPECT_EQ(queue.Len(), 0u);
}

// A second worker blocks in Get while the only key is being processed, and receives it only
// after the first worker's Done.
TEST(WorkqueueQueueTest, KeyInProcessingIsNotHandedToSecondWorker) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.Add("ns/a");
  ASSERT_EQ(GetNow(queue), "ns/a");
  queue.Add("ns/a");
  // A far-off delayed key makes an idle Get wait on the clock, so the test can see it park.
  queue.AddAfter("ns/later", hours(1));
  std::atomic<bool> got{false};
  std::optional<std::string> second;
  QueueThread worker(queue, [&] {
    second = queue.Get();
    got = true;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_FALSE(got) << "second worker got a key that is still being processed";
  queue.Done("ns/a");
  worker.Join();
  EXPECT_EQ(second, "ns/a");
}

TEST(WorkqueueQueueTest, GetBlocksUntilAdd) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.AddAfter("ns/later", hours(1));  // lets the test observe the idle Get
  std::optional<std::string> got;
  QueueThread worker(queue, [&] { got = queue.Get(); });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  queue.Add("ns/a");
  worker.Join();
  EXPECT_EQ(got, "ns/a");
}

// --- Concurrency -------------------------------------------------------------------------------

// Many producers and workers on few keys. Asserts that no key is ever processed by two workers
// at once, and that every add is followed by a processing run that sees it (no lost updates).
TEST(WorkqueueConcurrencyTest, NoKeyProcessedConcurrentlyAndNoAddLost) {
  WorkQueue queue(Clock::Real());
  constexpr int kKeys = 8;
  constexpr int kWorkers = 8;
  constexpr int kProducers = 4;
  constexpr int kAddsPerProducer = 3000;

  std::mutex mu;
  std::set<std::string> in_progress;
  std::map<std::string, int> version;    // bumped by producers before each Add
  std::map<std::string, int> last_seen;  // version seen by the latest run of each key
  int overlaps = 0;
  int runs = 0;

  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&] {
      while (auto key = queue.Get()) {
        {
          std::lock_guard<std::mutex> guard(mu);
          if (!in_progress.insert(*key).second) ++overlaps;
          last_seen[*key] = version[*key];
          ++runs;
        }
        for (int i = 0; i < 20; ++i) std::this_thread::yield();  // widen the window
        {
          std::lock_guard<std::mutex> guard(mu);
          in_progress.erase(*key);
        }
        queue.Done(*key);
      }
    });
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kAddsPerProducer; ++i) {
        const std::string key = "ns/key-" + std::to_string((i + p) % kKeys);
        {
          std::lock_guard<std::mutex> guard(mu);
          ++version[key];
        }
        queue.Add(key);
        if (i % 64 == 0) std::this_thread::yield();
      }
    });
  }
  for (auto& t : producers) t.join();
  queue.ShutDown();  // workers finish what is queued or dirty, then Get returns nullopt
  for (auto& t : workers) t.join();

  EXPECT_EQ(overlaps, 0);
  EXPECT_GT(runs, 0);
  ASSERT_EQ(version.size(), static_cast<size_t>(kKeys));
  for (const auto& [key, final_version] : version) {
    EXPECT_EQ(last_seen[key], final_version) << key << " lost its last update";
  }
  const WorkQueueStats stats = queue.Stats();
  EXPECT_EQ(stats.depth, 0u);
  EXPECT_EQ(stats.in_flight, 0u);
  EXPECT_LE(static_cast<int>(stats.adds_total), kProducers * kAddsPerProducer);
  EXPECT_EQ(static_cast<int>(stats.adds_total), runs);  // each non-deduped add is one run
}

// --- Delayed adds ------------------------------------------------------------------------------

TEST(WorkqueueDelayTest, AddAfterFiresOnlyOnceClockPassesDeadline) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.AddAfter("ns/a", seconds(5));
  EXPECT_EQ(queue.Len(), 0u);
  EXPECT_EQ(queue.Stats().delayed, 1u);
  clock.Advance(milliseconds(4999));
  EXPECT_EQ(queue.Len(), 0u);
  clock.Advance(milliseconds(1));
  EXPECT_EQ(queue.Len(), 1u);
  EXPECT_EQ(queue.Stats().delayed, 0u);
  EXPECT_EQ(GetNow(queue), "ns/a");
}

TEST(WorkqueueDelayTest, NonPositiveDelayAddsNow) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.AddAfter("ns/a", Duration::zero());
  queue.AddAfter("ns/b", -seconds(1));
  EXPECT_EQ(queue.Len(), 2u);
}

TEST(WorkqueueDelayTest, EarliestDeadlineWins) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.AddAfter("ns/a", seconds(10));
  queue.AddAfter("ns/a", seconds(5));  // earlier: replaces
  queue.AddAfter("ns/a", seconds(8));  // later: ignored
  EXPECT_EQ(queue.Stats().delayed, 1u);
  clock.Advance(seconds(5));
  EXPECT_EQ(queue.Len(), 1u);
  ASSERT_EQ(GetNow(queue), "ns/a");
  queue.Done("ns/a");
  clock.Advance(seconds(10));
  EXPECT_EQ(queue.Len(), 0u) << "the replaced 10s/8s deadlines must not fire again";
}

TEST(WorkqueueDelayTest, DelayedKeysFireInDeadlineOrder) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.AddAfter("ns/c", seconds(3));
  queue.AddAfter("ns/a", seconds(1));
  queue.AddAfter("ns/b", seconds(2));
  queue.AddAfter("ns/d", seconds(2));  // same deadline as b: FIFO
  clock.Advance(seconds(3));
  EXPECT_EQ(GetNow(queue), "ns/a");
  EXPECT_EQ(GetNow(queue), "ns/b");
  EXPECT_EQ(GetNow(queue), "ns/d");
  EXPECT_EQ(GetNow(queue), "ns/c");
}

TEST(WorkqueueDelayTest, FiredDelayedAddIsDedupedWithQueuedKey) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.AddAfter("ns/a", seconds(1));
  queue.Add("ns/a");
  clock.Advance(seconds(1));
  EXPECT_EQ(queue.Len(), 1u);
  EXPECT_EQ(queue.Stats().adds_total, 1u);
}

TEST(WorkqueueDelayTest, DelayedKeyAddedWhileProcessingWaitsForDone) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.Add("ns/a");
  ASSERT_EQ(GetNow(queue), "ns/a");
  queue.AddAfter("ns/a", seconds(1));
  clock.Advance(seconds(1));
  EXPECT_EQ(queue.Len(), 0u);
  queue.Done("ns/a");
  EXPECT_EQ(GetNow(queue), "ns/a");
}

// A worker idle in Get is woken by the fake clock, not by real time.
TEST(WorkqueueDelayTest, BlockedGetWakesWhenClockReachesDeadline) {
  FakeClock clock;
  WorkQueue queue(clock);
  std::atomic<bool> got_key{false};
  std::optional<std::string> got;
  QueueThread worker(queue, [&] {
    got = queue.Get();
    got_key = true;
  });
  queue.AddAfter("ns/a", seconds(5));
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(seconds(4));
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_FALSE(got_key);
  clock.Advance(seconds(1));
  worker.Join();
  EXPECT_EQ(got, "ns/a");
}

// An idle Get waiting for a far deadline must switch to an earlier one added later.
TEST(WorkqueueDelayTest, BlockedGetPicksUpEarlierDeadline) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.AddAfter("ns/far", hours(1));
  std::optional<std::string> got;
  QueueThread worker(queue, [&] { got = queue.Get(); });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  queue.AddAfter("ns/near", seconds(1));
  clock.Advance(seconds(1));
  worker.Join();
  EXPECT_EQ(got, "ns/near");
}

// --- Rate-limited adds -------------------------------------------------------------------------

TEST(WorkqueueRateLimitedTest, BackoffGrowsAndForgetResets) {
  FakeClock clock;
  WorkQueue queue(clock, std::make_unique<ItemExponentialRateLimiter>());
  const std::string key = "ns/a";
  Duration expected = milliseconds(5);
  for (int failure = 0; failure < 4; ++failure) {
    queue.AddRateLimited(key);
    EXPECT_EQ(queue.NumRequeues(key), failure + 1);
    clock.Advance(expected - std::chrono::nanoseconds(1));
    ASSERT_EQ(queue.Len(), 0u) << "fired before " << expected.count() << "ns";
    clock.Advance(std::chrono::nanoseconds(1));
    ASSERT_EQ(queue.Len(), 1u) << "did not fire at " << expected.count() << "ns";
    ASSERT_EQ(GetNow(queue), key);
    queue.Done(key);
    expected *= 2;
  }
  queue.Forget(key);
  EXPECT_EQ(queue.NumRequeues(key), 0);
  queue.AddRateLimited(key);
  clock.Advance(milliseconds(5));
  EXPECT_EQ(queue.Len(), 1u);
  EXPECT_EQ(queue.Stats().retries_total, 5u);
}

TEST(WorkqueueRateLimitedTest, BackoffIsCappedAt1000s) {
  FakeClock clock;
  WorkQueue queue(clock, std::make_unique<ItemExponentialRateLimiter>());
  // Fail many times while the key still waits; the earliest deadline stays, so only count.
  for (int i = 0; i < 30; ++i) queue.AddRateLimited("ns/a");
  ASSERT_EQ(queue.NumRequeues("ns/a"), 30);
  clock.Advance(milliseconds(5));  // the first failure's deadline
  ASSERT_EQ(GetNow(queue), "ns/a");
  queue.Done("ns/a");
  queue.AddRateLimited("ns/a");
  clock.Advance(seconds(1000) - milliseconds(1));
  EXPECT_EQ(queue.Len(), 0u);
  clock.Advance(milliseconds(1));
  EXPECT_EQ(queue.Len(), 1u);
}

TEST(WorkqueueRateLimitedTest, DefaultLimiterBoundsOverallRate) {
  FakeClock clock;
  WorkQueue queue(clock);  // DefaultControllerRateLimiter
  for (int i = 0; i < 110; ++i) queue.AddRateLimited("ns/k" + std::to_string(i));
  clock.Advance(milliseconds(5));
  EXPECT_EQ(queue.Len(), 100u) << "the burst of 100 fires after the 5ms per-item delay";
  clock.Advance(milliseconds(95));  // t = 100ms: the first token past the burst
  EXPECT_EQ(queue.Len(), 101u);
  clock.Advance(milliseconds(900));  // t = 1s: all 10 extra keys at 10 qps
  EXPECT_EQ(queue.Len(), 110u);
}

// --- Shutdown ----------------------------------------------------------------------------------

TEST(WorkqueueShutdownTest, GetDrainsQueuedKeysThenReturnsNullopt) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.Add("ns/a");
  queue.Add("ns/b");
  queue.ShutDown();
  EXPECT_TRUE(queue.ShuttingDown());
  queue.Add("ns/c");  // ignored
  EXPECT_EQ(GetNow(queue), "ns/a");
  EXPECT_EQ(GetNow(queue), "ns/b");
  EXPECT_EQ(GetNow(queue), std::nullopt);
  EXPECT_EQ(GetNow(queue), std::nullopt);
}

TEST(WorkqueueShutdownTest, ShutDownDropsDelayedAndIgnoresNewAdds) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.AddAfter("ns/a", seconds(1));
  queue.ShutDown();
  queue.AddAfter("ns/b", seconds(1));
  queue.AddAfter("ns/c", Duration::zero());
  queue.AddRateLimited("ns/d");
  clock.Advance(hours(1));
  EXPECT_EQ(queue.Len(), 0u);
  EXPECT_EQ(GetNow(queue), std::nullopt);
  EXPECT_EQ(queue.Stats().retries_total, 0u);
}

TEST(WorkqueueShutdownTest, ShutDownWakesBlockedGet) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.AddAfter("ns/later", hours(1));  // lets the test observe the idle Get
  std::atomic<bool> returned{false};
  std::optional<std::string> got = "unset";
  QueueThread worker(queue, [&] {
    got = queue.Get();
    returned = true;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_FALSE(returned);
  queue.ShutDown();
  worker.Join();
  EXPECT_EQ(got, std::nullopt);
}

TEST(WorkqueueShutdownTest, DirtyKeyIsStillReturnedAfterShutDown) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.Add("ns/a");
  ASSERT_EQ(GetNow(queue), "ns/a");
  queue.Add("ns/a");  // before shutdown: must not be lost
  queue.ShutDown();
  queue.Done("ns/a");
  EXPECT_EQ(GetNow(queue), "ns/a");
  queue.Done("ns/a");
  EXPECT_EQ(GetNow(queue), std::nullopt);
}

TEST(WorkqueueShutdownTest, ShutDownWithDrainWaitsForDone) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.Add("ns/a");
  ASSERT_EQ(GetNow(queue), "ns/a");
  std::atomic<bool> done_called{false};
  std::atomic<bool> drained{false};
  std::atomic<bool> drained_before_done{false};
  QueueThread drainer(queue, [&] {
    queue.ShutDownWithDrain();
    drained_before_done = !done_called;
    drained = true;
  });
  while (!queue.ShuttingDown()) std::this_thread::yield();
  // Give a wrong implementation every chance to return early.
  for (int i = 0; i < 10000 && !drained; ++i) std::this_thread::yield();
  EXPECT_FALSE(drained);
  EXPECT_EQ(GetNow(queue), std::nullopt);  // shutting down, nothing queued
  done_called = true;
  queue.Done("ns/a");
  drainer.Join();
  EXPECT_TRUE(drained);
  EXPECT_FALSE(drained_before_done);
}

TEST(WorkqueueShutdownTest, ShutDownWithDrainReturnsAtOnceWhenIdle) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.ShutDownWithDrain();  // nothing in flight: must not block
  EXPECT_TRUE(queue.ShuttingDown());
  EXPECT_EQ(GetNow(queue), std::nullopt);
}

TEST(WorkqueueShutdownTest, ShutDownReleasesDrain) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.Add("ns/a");
  ASSERT_EQ(GetNow(queue), "ns/a");
  QueueThread drainer(queue, [&] { queue.ShutDownWithDrain(); });
  while (!queue.ShuttingDown()) std::this_thread::yield();
  queue.ShutDown();  // abandons the drain, as in client-go
  drainer.Join();
  EXPECT_EQ(queue.Stats().in_flight, 1u);
}

// --- Metrics -----------------------------------------------------------------------------------

TEST(WorkqueueMetricsTest, ObserversSeeQueueLatencyAndWorkDuration) {
  FakeClock clock;
  std::vector<Duration> latencies;
  std::vector<Duration> durations;
  WorkQueueOptions options{
      .on_queue_latency = [&](Duration d) { latencies.push_back(d); },
      .on_work_duration = [&](Duration d) { durations.push_back(d); },
  };
  WorkQueue queue(clock, nullptr, std::move(options));
  queue.Add("ns/a");
  clock.Advance(seconds(3));
  queue.Add("ns/a");  // deduped: latency still counts from the first add
  clock.Advance(seconds(1));
  ASSERT_EQ(GetNow(queue), "ns/a");
  clock.Advance(seconds(2));
  queue.Done("ns/a");
  // A delayed add counts from its deadline.
  queue.AddAfter("ns/b", seconds(10));
  clock.Advance(seconds(15));
  ASSERT_EQ(GetNow(queue), "ns/b");
  EXPECT_EQ(latencies, (std::vector<Duration>{seconds(4), seconds(5)}));
  EXPECT_EQ(durations, (std::vector<Duration>{seconds(2)}));
}

TEST(WorkqueueMetricsTest, StatsCountAddsRetriesDepth) {
  FakeClock clock;
  WorkQueue queue(clock, std::make_unique<ItemExponentialRateLimiter>());
  queue.Add("ns/a");
  queue.Add("ns/a");
  queue.Add("ns/b");
  queue.AddRateLimited("ns/c");
  queue.AddRateLimited("ns/c");
  WorkQueueStats stats = queue.Stats();
  EXPECT_EQ(stats.adds_total, 2u);
  EXPECT_EQ(stats.retries_total, 2u);
  EXPECT_EQ(stats.depth, 2u);
  EXPECT_EQ(stats.delayed, 1u);
  EXPECT_EQ(stats.in_flight, 0u);
  clock.Advance(seconds(1));
  ASSERT_EQ(GetNow(queue), "ns/a");
  stats = queue.Stats();
  EXPECT_EQ(stats.adds_total, 3u);  // the delayed add fired
  EXPECT_EQ(stats.depth, 2u);
  EXPECT_EQ(stats.delayed, 0u);
  EXPECT_EQ(stats.in_flight, 1u);
}

TEST(WorkqueueMetricsTest, UnfinishedWorkSumsAndLongestRunningTakesTheOldestKeyInProcessing) {
  FakeClock clock;
  WorkQueue queue(clock);
  EXPECT_EQ(queue.LongestRunningProcessor(), Duration::zero());
  EXPECT_EQ(queue.Stats().unfinished_work, Duration::zero());

  queue.Add("ns/a");
  queue.Add("ns/b");
  queue.Add("ns/c");
  clock.Advance(seconds(5));  // waiting in the queue is not work
  EXPECT_EQ(queue.Stats().unfinished_work, Duration::zero());
  ASSERT_EQ(GetNow(queue), "ns/a");
  clock.Advance(seconds(3));
  ASSERT_EQ(GetNow(queue), "ns/b");
  clock.Advance(seconds(2));
  // a: out for 5s, b: out for 2s, c: still queued.
  WorkQueueStats stats = queue.Stats();
  EXPECT_EQ(stats.unfinished_work, seconds(7));
  EXPECT_EQ(stats.longest_running, seconds(5));
  EXPECT_EQ(queue.LongestRunningProcessor(), seconds(5));

  queue.Done("ns/a");  // the oldest finishes: b is now the longest
  stats = queue.Stats();
  EXPECT_EQ(stats.unfinished_work, seconds(2));
  EXPECT_EQ(stats.longest_running, seconds(2));
  EXPECT_EQ(queue.LongestRunningProcessor(), seconds(2));

  // A key re-added while out and handed out again counts from its new Get.
  queue.Add("ns/b");
  queue.Done("ns/b");
  ASSERT_EQ(GetNow(queue), "ns/c");
  ASSERT_EQ(GetNow(queue), "ns/b");
  clock.Advance(seconds(1));
  stats = queue.Stats();
  EXPECT_EQ(stats.unfinished_work, seconds(2));
  EXPECT_EQ(stats.longest_running, seconds(1));

  queue.Done("ns/b");
  queue.Done("ns/c");
  EXPECT_EQ(queue.LongestRunningProcessor(), Duration::zero());
  EXPECT_EQ(queue.Stats().unfinished_work, Duration::zero());
}

TEST(WorkqueueMetricsTest, AKeyStillOutAfterShutDownKeepsCounting) {
  FakeClock clock;
  WorkQueue queue(clock);
  queue.Add("ns/a");
  ASSERT_EQ(GetNow(queue), "ns/a");
  queue.ShutDown();
  clock.Advance(std::chrono::minutes(10));
  EXPECT_EQ(queue.LongestRunningProcessor(), std::chrono::minutes(10));
  queue.Done("ns/a");
  EXPECT_EQ(queue.LongestRunningProcessor(), Duration::zero());
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::workqueue
