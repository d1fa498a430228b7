// Rate limiters for the work queue, after client-go's util/workqueue/default_rate_limiters.go.
//
// A RateLimiter answers "how long should this key wait before it is retried?". The work queue
// calls When(key) on every AddRateLimited(key) and Forget(key) once the key has been handled
// successfully, so per-key history (the failure count) starts again from zero.
//
//   ItemExponentialRateLimiter  per key: base * 2^failures, capped at max (5ms .. 1000s).
//   BucketRateLimiter           one token bucket for all keys (10 qps, burst 100): bounds the
//                               overall retry rate when many keys fail at once.
//   MaxOfRateLimiter            the longest delay any child asks for; Forget goes to all.
//   DefaultControllerRateLimiter()  MaxOf(ItemExponential(5ms, 1000s), Bucket(10 qps, 100)),
//                               the same default as client-go's controllers.
//
// Thread-safety: every implementation here is safe to call concurrently.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/backoff.h"
#include "base/clock.h"
#include "base/token_bucket.h"

namespace tpujob::workqueue {

class RateLimiter {
 public:
  virtual ~RateLimiter() = default;

  // How long `key` should wait before it is processed again. Counts as one more failure.
  virtual Duration When(const std::string& key) = 0;
  // Drops the history of `key`: the next When starts from the smallest delay again.
  virtual void Forget(const std::string& key) = 0;
  // Failures of `key` counted since the last Forget.
  virtual int NumRequeues(const std::string& key) = 0;
};

// Per-key exponential backoff: the n-th When for a key (n from 0) returns min(base * 2^n, max).
class ItemExponentialRateLimiter final : public RateLimiter {
 public:
  explicit ItemExponentialRateLimiter(Duration base = std::chrono::milliseconds(5),
                                      Duration max = std::chrono::seconds(1000));

  Duration When(const std::string& key) override;
  void Forget(const std::string& key) override;
  int NumRequeues(const std::string& key) override;

 private:
  std::mutex mu_;
  Backoff backoff_;  // jitter-free, so only its delay formula is used; guarded by mu_
  std::unordered_map<std::string, int> failures_;
};

// Overall limit shared by all keys: When takes a token from the bucket and returns how long
// until it is available. Keeps no per-key state, so Forget does nothing and NumRequeues is 0.
class BucketRateLimiter final : public RateLimiter {
 public:
  explicit BucketRateLimiter(Clock& clock, double qps = 10, int burst = 100);

  Duration When(const std::string& key) override;
  void Forget(const std::string& key) override;
  int NumRequeues(const std::string& key) override;

 private:
  TokenBucket bucket_;
};

// Combination: When asks every child (each counts the failure) and returns the longest delay;
// NumRequeues is the largest child count; Forget is forwarded to every child.
class MaxOfRateLimiter final : public RateLimiter {
 public:
  explicit MaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> limiters);

  Duration When(const std::string& key) override;
  void Forget(const std::string& key) override;
  int NumRequeues(const std::string& key) override;

 private:
  const std::vector<std::unique_ptr<RateLimiter>> limiters_;
};

// client-go's DefaultControllerRateLimiter: per-key 5ms..1000s backoff, and 10 qps / burst 100
// overall. `clock` drives the token bucket and must outlive the limiter.
std::unique_ptr<RateLimiter> DefaultControllerRateLimiter(Clock& clock);

}  // namespace tpujob::workqueue
