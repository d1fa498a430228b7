#include "workqueue/rate_limiter.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace tpujob::workqueue {

ItemExponentialRateLimiter::ItemExponentialRateLimiter(Duration base, Duration max)
    : backoff_(BackoffPolicy{.initial = base, .max = max, .factor = 2.0, .jitter = 0.0}) {}

Duration ItemExponentialRateLimiter::When(const std::string& key) {
  std::lock_guard<std::mutex> guard(mu_);
  int& failures = failures_[key];
  const Duration delay = backoff_.Delay(static_cast<uint32_t>(failures));
  if (failures < std::numeric_limits<int>::max()) ++failures;
  return delay;
}

void ItemExponentialRateLimiter::Forget(const std::string& key) {
  std::lock_guard<std::mutex> guard(mu_);
  failures_.erase(key);
}

int ItemExponentialRateLimiter::NumRequeues(const std::string& key) {
  std::lock_guard<std::mutex> guard(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

BucketRateLimiter::BucketRateLimiter(Clock& clock, double qps, int burst)
    : bucket_(qps, burst, clock) {}

Duration BucketRateLimiter::When(const std::string& /*key*/) { return bucket_.Reserve(); }

void BucketRateLimiter::Forget(const std::string& /*key*/) {}

int BucketRateLimiter::NumRequeues(const std::string& /*key*/) { return 0; }

MaxOfRateLimiter::MaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> limiters)
    : limiters_(std::move(limiters)) {}

Duration MaxOfRateLimiter::When(const std::string& key) {
  Duration longest = Duration::zero();
  // Every child is asked, not just until one is large: each must count the failure.
  for (const auto& limiter : limiters_) longest = std::max(longest, limiter->When(key));
  return longest;
}

void MaxOfRateLimiter::Forget(const std::string& key) {
  for (const auto& limiter : limiters_) limiter->Forget(key);
}

int MaxOfRateLimiter::NumRequeues(const std::string& key) {
  int most = 0;
  for (const auto& limiter : limiters_) most = std::max(most, limiter->NumRequeues(key));
  return most;
}

std::unique_ptr<RateLimiter> DefaultControllerRateLimiter(Clock& clock) {
  std::vector<std::unique_ptr<RateLimiter>> limiters;
  limiters.push_back(std::make_unique<ItemExponentialRateLimiter>(std::chrono::milliseconds(5),
                                                                  std::chrono::seconds(1000)));
  limiters.push_back(std::make_unique<BucketRateLimiter>(clock, 10.0, 100));
  return std::make_unique<MaxOfRateLimiter>(std::move(limiters));
}

}  // namespace tpujob::workqueue
