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

Duration TokenBucket::Reserve() {
  if (unlimited()) return Duration::zero();
  std::lock_guard<std::mutex> guard(mu_);
  Refill(clock_.Now());
  tokens_ -= 1.0;
  if (tokens_ >= 0) return Duration::zero();
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(-tokens_ / qps_));
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
  const Duration delay = Reserve();
  if (delay <= Duration::zero()) return;
  const TimePoint deadline = clock_.Now() + delay;
  std::mutex wait_mu;
  std::unique_lock<std::mutex> lock(wait_mu);
  std::condition_variable cv;
  while (clock_.Now() < deadline) clock_.WaitUntil(cv, lock, deadline);
}

}  // namespace tpujob
