// WorkQueue: the controller's queue of object keys ("namespace/name"), after client-go's
// util/workqueue (the plain, delaying and rate-limiting queues in one type).
//
// Contract, the same as client-go's:
//  - Dedupe. A key waiting in the queue is held once, however often it is added.
//  - Exclusive processing. Get hands a key to one caller, who owns it until Done(key). A key
//    added while it is owned is marked dirty and queued again by Done, so no key is processed
//    by two workers at once and no change that arrived during processing is lost.
//  - FIFO among ready keys (a re-added key keeps its place; a dirty key goes to the back on
//    Done).
//  - AddAfter(key, d) adds the key once the injected clock reaches Now() + d; d <= 0 adds it
//    now. While a key waits, another AddAfter only moves its deadline earlier: the earliest
//    deadline wins. Delays are measured on the Clock, so tests advance a FakeClock.
//  - AddRateLimited(key) is AddAfter(key, limiter.When(key)). After a key was handled
//    successfully the worker calls Forget(key) so its next failure starts from the smallest
//    delay again.
//  - ShutDown: later adds are ignored and pending delayed adds are dropped; Get keeps returning
//    the keys already queued and then std::nullopt. ShutDownWithDrain does the same and also
//    blocks until every key handed out by Get is Done (or until ShutDown is called).
//
// Delayed adds need no background thread: every call first moves the keys whose deadline has
// passed into the queue, and a Get with nothing ready waits on the clock until the earliest
// deadline.
//
// Typical worker:
//   while (auto key = queue.Get()) {
//     if (Reconcile(*key).ok()) queue.Forget(*key); else queue.AddRateLimited(*key);
//     queue.Done(*key);
//   }
//
// Thread-safety: all methods may be called concurrently. The queue must outlive every thread
// that uses it; shut it down and join the workers before destroying it. The observers in
// WorkQueueOptions run on the calling thread without the queue's lock held.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/clock.h"
#include "workqueue/rate_limiter.h"

namespace tpujob::workqueue {

struct WorkQueueOptions {
  // Called by Get with how long the key waited in the queue: from the Add that made it dirty
  // (for a delayed add, from when its deadline passed) until Get returned it.
  std::function<void(Duration)> on_queue_latency;
  // Called by Done with how long the key was processed: from Get until Done.
  std::function<void(Duration)> on_work_duration;
};

// A snapshot of the queue's counters, for metrics.
struct WorkQueueStats {
  uint64_t adds_total = 0;     // adds that queued or dirtied a key (deduplicated adds excluded)
  uint64_t retries_total = 0;  // AddRateLimited calls made before shutdown
  size_t depth = 0;            // keys ready for Get
  size_t delayed = 0;          // keys waiting for an AddAfter deadline
  size_t in_flight = 0;        // keys handed out by Get and not yet Done
  // How long the keys handed out by Get and not yet Done have been out, summed; 0 when none.
  // Grows by the number of stuck workers every second (client-go's unfinished_work_seconds).
  Duration unfinished_work{};
  // How long the longest of those keys has been out; 0 when none.
  Duration longest_running{};
};

class WorkQueue {
 public:
  // `clock` must outlive the queue. A null `limiter` means DefaultControllerRateLimiter(clock).
  explicit WorkQueue(Clock& clock = Clock::Real(), std::unique_ptr<RateLimiter> limiter = nullptr,
                     WorkQueueOptions options = {});
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `key` unless it is already queued; if it is being processed, queues it on Done.
  // Ignored after shutdown.
  void Add(const std::string& key);
  // Adds `key` once `delay` has passed on the clock (now if delay <= 0). If `key` already waits
  // for a deadline, the earlier of the two is kept. Ignored after shutdown.
  void AddAfter(const std::string& key, Duration delay);
  // AddAfter(key, limiter.When(key)): a retry after a failure, with per-key backoff.
  void AddRateLimited(const std::string& key);
  // Clears the limiter's history of `key`. Does not remove the key from the queue.
  void Forget(const std::string& key);
  // Failures of `key` counted by the limiter since the last Forget.
  int NumRequeues(const std::string& key);

  // Blocks until a key is ready and returns it; the caller owns it until Done(key). Returns
  // std::nullopt once the queue is shut down and no key is ready.
  std::optional<std::string> Get();
  // Ends processing of a key returned by Get; queues it again if it was added meanwhile. A key
  // not currently handed out is ignored.
  void Done(const std::string& key);

  // Number of keys ready for Get (not counting delayed or in-flight keys).
  size_t Len();

  void ShutDown();
  void ShutDownWithDrain();
  bool ShuttingDown();

  WorkQueueStats Stats();

  // How long the key handed out longest ago by Get, and not yet Done, has been out, on the
  // clock: the age of the oldest reconcile still running. Duration::zero() when none is out.
  Duration LongestRunningProcessor();

 private:
  using Deadlines = std::multimap<TimePoint, std::string>;

  // All *Locked methods require mu_.
  void AddLocked(const std::string& key, TimePoint now);
  void AddAfterLocked(const std::string& key, Duration delay);
  void PromoteDueLocked(TimePoint now);
  void ShutDownLocked(bool drain);
  // The sum and the longest of the processing times so far of the keys handed out (mu_ held).
  std::pair<Duration, Duration> ProcessingLocked(TimePoint now) const;

  Clock& clock_;
  const std::unique_ptr<RateLimiter> limiter_;
  const WorkQueueOptions options_;

  std::mutex mu_;
  std::condition_variable work_available_;  // Get waits here (on the clock when keys are delayed)
  std::condition_variable drained_;         // ShutDownWithDrain waits here

  std::deque<std::string> queue_;               // ready keys, in order; each also in dirty_
  std::unordered_set<std::string> dirty_;       // keys that need processing
  std::unordered_set<std::string> processing_;  // keys handed out by Get, not yet Done
  Deadlines waiting_;                           // delayed keys by deadline, FIFO among equals
  std::unordered_map<std::string, Deadlines::iterator> waiting_by_key_;
  std::unordered_map<std::string, TimePoint> added_at_;    // for on_queue_latency
  std::unordered_map<std::string, TimePoint> started_at_;  // per key in processing_, from Get
  bool shutting_down_ = false;
  bool drain_ = false;
  uint64_t adds_total_ = 0;
  uint64_t retries_total_ = 0;
};

}  // namespace tpujob::workqueue
