// Clock: the one source of time for everything that waits or schedules.
//
// Production code takes a `Clock&` instead of calling std::chrono directly so that tests can
// drive time with FakeClock and never sleep. Two kinds of time are offered: a monotonic one
// (`Now`, for deadlines, rate limits and backoff) and the wall clock (`WallNow`, for
// timestamps written to the API server).
//
// Thread-safety: all methods of both implementations are safe to call concurrently.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace tpujob {

using Duration = std::chrono::steady_clock::duration;
using TimePoint = std::chrono::steady_clock::time_point;
using WallTime = std::chrono::system_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;

  virtual TimePoint Now() const = 0;
  virtual WallTime WallNow() const = 0;

  // Blocks the caller, who holds `lock` (a lock on `mutex`), until Now() >= deadline or `cv` is
  // notified, whichever comes first. Spurious wake-ups are allowed: callers re-check their
  // predicate in a loop. `lock` is held again on return.
  virtual void WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                         TimePoint deadline) = 0;

  // The process-wide real clock.
  static Clock& Real();
};

class RealClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  WallTime WallNow() const override { return std::chrono::system_clock::now(); }
  void WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 TimePoint deadline) override {
    cv.wait_until(lock, deadline);
  }
};

// FakeClock only moves when a test calls Advance. Waiters blocked in WaitUntil are woken on
// every move so they can re-check their deadline; a waiter never misses a move because Advance
// takes the waiter's mutex before notifying it. Consequently Advance must not be called while
// holding a mutex that some thread passes to WaitUntil. WaitUntil returns only once no Advance
// still refers to its cv and mutex, so both may live on the waiter's stack.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimePoint start = TimePoint{} + std::chrono::hours(1),
                     WallTime wall_start = WallTime{} + std::chrono::hours(24 * 365 * 50));

  TimePoint Now() const override;
  WallTime WallNow() const override;
  void WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 TimePoint deadline) override;

  // Moves both clocks forward by `d` and wakes every waiter.
  void Advance(Duration d);

  // Number of threads currently blocked in WaitUntil. Lets a test wait until a background
  // thread has parked before it advances time.
  int Waiters() const;

  // Blocks (in real time, bounded by `timeout`) until at least `n` threads wait. Returns
  // whether that happened.
  bool AwaitWaiters(int n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

 private:
  struct Waiter {
    std::condition_variable* cv;
    std::mutex* mutex;
  };
  mutable std::mutex mu_;
  mutable std::condition_variable waiters_changed_;
  TimePoint now_;
  WallTime wall_now_;
  std::vector<Waiter> waiters_;
  int notifying_ = 0;  // Advance calls between copying waiters_ and notifying the last of them
};

}  // namespace tpujob
