#include "workqueue/queue.h"

#include <algorithm>
#include <utility>

namespace tpujob::workqueue {

WorkQueue::WorkQueue(Clock& clock, std::unique_ptr<RateLimiter> limiter, WorkQueueOptions options)
    : clock_(clock),
      limiter_(limiter ? std::move(limiter) : DefaultControllerRateLimiter(clock)),
      options_(std::move(options)) {}

void WorkQueue::Add(const std::string& key) {
  std::lock_guard<std::mutex> guard(mu_);
  const TimePoint now = clock_.Now();
  PromoteDueLocked(now);
  AddLocked(key, now);
}

void WorkQueue::AddAfter(const std::string& key, Duration delay) {
  std::lock_guard<std::mutex> guard(mu_);
  AddAfterLocked(key, delay);
}

void WorkQueue::AddRateLimited(const std::string& key) {
  // The limiter is thread-safe and may be slow-ish (it takes its own locks); ask it first.
  const Duration delay = limiter_->When(key);
  std::lock_guard<std::mutex> guard(mu_);
  if (shutting_down_) return;
  ++retries_total_;
  AddAfterLocked(key, delay);
}

void WorkQueue::Forget(const std::string& key) { limiter_->Forget(key); }

int WorkQueue::NumRequeues(const std::string& key) { return limiter_->NumRequeues(key); }

std::optional<std::string> WorkQueue::Get() {
  std::unique_lock<std::mutex> lock(mu_);
  TimePoint now = clock_.Now();
  PromoteDueLocked(now);
  while (queue_.empty()) {
    if (shutting_down_) return std::nullopt;
    if (waiting_.empty()) {
      work_available_.wait(lock);
    } else {
      clock_.WaitUntil(work_available_, lock, waiting_.begin()->first);
    }
    now = clock_.Now();
    PromoteDueLocked(now);
  }
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  processing_.insert(key);
  dirty_.erase(key);
  started_at_[key] = now;
  std::optional<Duration> latency;
  if (auto it = added_at_.find(key); it != added_at_.end()) {
    latency = now - it->second;
    added_at_.erase(it);
  }
  lock.unlock();
  if (latency && options_.on_queue_latency) options_.on_queue_latency(*latency);
  return key;
}

void WorkQueue::Done(const std::string& key) {
  std::unique_lock<std::mutex> lock(mu_);
  // client-go re-queues a dirty key even if it was not being processed, which duplicates a key
  // that is already queued; a stray Done is ignored here instead.
  if (processing_.erase(key) == 0) return;
  const TimePoint now = clock_.Now();
  std::optional<Duration> work_duration;
  if (auto it = started_at_.find(key); it != started_at_.end()) {
    work_duration = now - it->second;
    started_at_.erase(it);
  }
  PromoteDueLocked(now);
  // Re-queued even after shutdown, like client-go: the add happened before shutdown.
  if (dirty_.contains(key)) {
    queue_.push_back(key);
    work_available_.notify_one();
  }
  if (processing_.empty()) drained_.notify_all();
  lock.unlock();
  if (work_duration && options_.on_work_duration) options_.on_work_duration(*work_duration);
}

size_t WorkQueue::Len() {
  std::lock_guard<std::mutex> guard(mu_);
  PromoteDueLocked(clock_.Now());
  return queue_.size();
}

void WorkQueue::ShutDown() {
  std::lock_guard<std::mutex> guard(mu_);
  ShutDownLocked(/*drain=*/false);
}

void WorkQueue::ShutDownWithDrain() {
  std::unique_lock<std::mutex> lock(mu_);
  ShutDownLocked(/*drain=*/true);
  // A plain ShutDown meanwhile clears drain_ and lets us return early, as in client-go.
  drained_.wait(lock, [&] { return processing_.empty() || !drain_; });
}

bool WorkQueue::ShuttingDown() {
  std::lock_guard<std::mutex> guard(mu_);
  return shutting_down_;
}

WorkQueueStats WorkQueue::Stats() {
  std::lock_guard<std::mutex> guard(mu_);
  const TimePoint now = clock_.Now();
  PromoteDueLocked(now);
  const auto [unfinished, longest] = ProcessingLocked(now);
  return WorkQueueStats{
      .adds_total = adds_total_,
      .retries_total = retries_total_,
      .depth = queue_.size(),
      .delayed = waiting_.size(),
      .in_flight = processing_.size(),
      .unfinished_work = unfinished,
      .longest_running = longest,
  };
}

Duration WorkQueue::LongestRunningProcessor() {
  std::lock_guard<std::mutex> guard(mu_);
  return ProcessingLocked(clock_.Now()).second;
}

std::pair<Duration, Duration> WorkQueue::ProcessingLocked(TimePoint now) const {
  Duration sum{};
  Duration longest{};
  for (const auto& [key, started] : started_at_) {
    const Duration running = std::max(Duration::zero(), now - started);
    sum += running;
    longest = std::max(longest, running);
  }
  return {sum, longest};
}

void WorkQueue::AddLocked(const std::string& key, TimePoint now) {
  if (shutting_down_ || dirty_.contains(key)) return;
  ++adds_total_;
  dirty_.insert(key);
  added_at_.emplace(key, now);
  if (processing_.contains(key)) return;  // Done queues it
  queue_.push_back(key);
  work_available_.notify_one();
}

void WorkQueue::AddAfterLocked(const std::string& key, Duration delay) {
  if (shutting_down_) return;
  const TimePoint now = clock_.Now();
  PromoteDueLocked(now);
  if (delay <= Duration::zero()) {
    AddLocked(key, now);
    return;
  }
  const TimePoint deadline = now + delay;
  if (auto it = waiting_by_key_.find(key); it != waiting_by_key_.end()) {
    if (it->second->first <= deadline) return;  // the earlier deadline wins
    waiting_.erase(it->second);
    waiting_by_key_.erase(it);
  }
  auto entry = waiting_.emplace(deadline, key);
  waiting_by_key_.emplace(key, entry);
  // Idle workers wait for the earliest deadline; if that just moved, they must wait anew.
  if (entry == waiting_.begin()) work_available_.notify_all();
}

void WorkQueue::PromoteDueLocked(TimePoint now) {
  while (!waiting_.empty() && waiting_.begin()->first <= now) {
    auto node = waiting_.extract(waiting_.begin());
    waiting_by_key_.erase(node.mapped());
    // Latency counts from the deadline, not from whenever a call noticed it had passed.
    AddLocked(node.mapped(), node.key());
  }
}

void WorkQueue::ShutDownLocked(bool drain) {
  shutting_down_ = true;
  drain_ = drain;
  waiting_.clear();
  waiting_by_key_.clear();
  work_available_.notify_all();
  drained_.notify_all();
}

}  // namespace tpujob::workqueue
