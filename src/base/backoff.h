// Exponential backoff with jitter, shared by the API client's retries, the reflector's relists
// and the work queue's per-item limiter.
//
// Delay(n) for the n-th consecutive failure (n starts at 0) is
//   min(max, initial * factor^n) * (1 + jitter * u),   u uniform in [0, 1)
// and then capped at `max` again, so it is never below the un-jittered value and never above
// `max`. Not thread-safe: each user keeps its own instance, or guards it.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <random>

#include "base/clock.h"

namespace tpujob {

struct BackoffPolicy {
  Duration initial = std::chrono::milliseconds(100);
  Duration max = std::chrono::seconds(30);
  double factor = 2.0;
  double jitter = 0.0;  // fraction of the delay added at random, 0 = none
};

class Backoff {
 public:
  explicit Backoff(BackoffPolicy policy, uint64_t seed = std::random_device{}());

  // Delay before attempt number `failures` + 1, given `failures` consecutive failures so far.
  Duration Delay(uint32_t failures);

  // Convenience for the common loop: returns the next delay and counts one more failure.
  // The count saturates instead of wrapping back to zero.
  Duration Next() {
    const Duration delay = Delay(failures_);
    if (failures_ != std::numeric_limits<uint32_t>::max()) ++failures_;
    return delay;
  }
  void Reset() { failures_ = 0; }
  uint32_t failures() const { return failures_; }
  const BackoffPolicy& policy() const { return policy_; }

 private:
  BackoffPolicy policy_;
  std::mt19937_64 rng_;
  uint32_t failures_ = 0;
};

// Uniformly random duration in [low, high]; used to spread watch timeouts.
Duration RandomBetween(Duration low, Duration high, std::mt19937_64& rng);

}  // namespace tpujob
