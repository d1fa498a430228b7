#include "base/clock.h"

#include <algorithm>

namespace tpujob {

Clock& Clock::Real() {
  static RealClock clock;
  return clock;
}

FakeClock::FakeClock(TimePoint start, WallTime wall_start) : now_(start), wall_now_(wall_start) {}

TimePoint FakeClock::Now() const {
  std::lock_guard<std::mutex> guard(mu_);
  return now_;
}

WallTime FakeClock::WallNow() const {
  std::lock_guard<std::mutex> guard(mu_);
  return wall_now_;
}

void FakeClock::WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                          TimePoint deadline) {
  {
    std::lock_guard<std::mutex> guard(mu_);
    if (now_ >= deadline) return;
    waiters_.push_back(Waiter{&cv, lock.mutex()});
  }
  waiters_changed_.notify_all();
  // Advance locks our mutex before notifying, and we hold it until wait() releases it
  // atomically, so a move between registration and wait() cannot be lost.
  cv.wait(lock);
  // We may have been woken by someone else while an Advance holds a copy of our entry and is
  // about to lock our mutex and notify our cv. Both may be destroyed as soon as we return (they
  // often live on the caller's stack), so deregister and wait until no Advance is mid-notify.
  // Our mutex is released meanwhile, or that Advance could never finish.
  std::mutex* mutex = lock.mutex();
  lock.unlock();
  {
    std::unique_lock<std::mutex> guard(mu_);
    auto it = std::find_if(waiters_.begin(), waiters_.end(),
                           [&](const Waiter& w) { return w.cv == &cv && w.mutex == mutex; });
    if (it != waiters_.end()) waiters_.erase(it);
    waiters_changed_.wait(guard, [&] { return notifying_ == 0; });
  }
  waiters_changed_.notify_all();
  lock.lock();
}

void FakeClock::Advance(Duration d) {
  std::vector<Waiter> to_wake;
  {
    std::lock_guard<std::mutex> guard(mu_);
    now_ += d;
    wall_now_ += std::chrono::duration_cast<WallTime::duration>(d);
    to_wake = waiters_;
    ++notifying_;
  }
  for (const Waiter& w : to_wake) {
    std::lock_guard<std::mutex> waiter_lock(*w.mutex);
    w.cv->notify_all();
  }
  {
    std::lock_guard<std::mutex> guard(mu_);
    --notifying_;
  }
  waiters_changed_.notify_all();
}

int FakeClock::Waiters() const {
  std::lock_guard<std::mutex> guard(mu_);
  return static_cast<int>(waiters_.size());
}

bool FakeClock::AwaitWaiters(int n, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return waiters_changed_.wait_for(lock, timeout,
                                   [&] { return static_cast<int>(waiters_.size()) >= n; });
}

}  // namespace tpujob
