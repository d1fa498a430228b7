#include "base/token_bucket.h"

#include <algorithm>
#include <chrono>

namespace tpujob {

TokenBucket::TokenBucket(double qps, int burst, Clock& clock)
    : qps_(qps),
      burst_(std::max(1, burst)),
      clock_(clock),
      tokens_(std::max(1, burst)),
      last_(clock.Now()) {}

void TokenBucket::Refill(TimePoint now) {
  if (now <= last_) return;
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(burst_, tokens_ + elapsed * qps_);
  last_ = now;
}

TimePoint TokenBucket::ReserveAt(TimePoint now) {
  std::lock_guard<std::mutex> guard(mu_);
  Refill(now);
  tokens_ -= 1.0;
  if (tokens_ >= 0) return now;
  // Round up: a delay rounded down would hand out the token a fraction of a token early, and a
  // TryAccept at exactly the returned time would then fail.
  const double seconds = -tokens_ / qps_;
  return now + std::chrono::ceil<Duration>(std::chrono::duration<double>(seconds));
}

Duration TokenBucket::Reserve() {
  if (unlimited()) return Duration::zero();
  const TimePoint now = clock_.Now();
  return ReserveAt(now) - now;
}

bool TokenBucket::TryAccept() {
  if (unlimited()) return true;
  std::lock_guard<std::mutex> guard(mu_);
  Refill(clock_.Now());
  if (tokens_ < 1.0) return false;
  tokens_ -= 1.0;
  return true;
}

void TokenBucket::Wait() {
  if (unlimited()) return;
  // The deadline comes from the same instant the reservation was made at; reading the clock
  // again afterwards would add the time spent in between to the wait.
  const TimePoint deadline = ReserveAt(clock_.Now());
  std::mutex wait_mu;
  std::unique_lock<std::mutex> lock(wait_mu);
  std::condition_variable cv;
  while (clock_.Now() < deadline) clock_.WaitUntil(cv, lock, deadline);
}

}  // namespace tpujob
