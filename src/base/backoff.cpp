#include "base/backoff.h"

#include <algorithm>
#include <cmath>

namespace tpujob {

Backoff::Backoff(BackoffPolicy policy, uint64_t seed) : policy_(policy), rng_(seed) {}

Duration Backoff::Delay(uint32_t failures) {
  const double initial = static_cast<double>(policy_.initial.count());
  const double max = static_cast<double>(policy_.max.count());
  if (initial <= 0 || max <= 0) return Duration::zero();
  // pow instead of a multiply loop: a loop would spin up to 2^32 times when factor <= 1, and
  // pow saturates at infinity (clamped by min below) rather than overflowing.
  double base = initial * std::pow(policy_.factor, static_cast<double>(failures));
  if (!(base < max)) base = max;  // also catches NaN
  double jittered = base;
  if (policy_.jitter > 0) {
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    jittered = base * (1.0 + policy_.jitter * unit(rng_));
  }
  jittered = std::min(jittered, max);
  return Duration(static_cast<Duration::rep>(std::llround(jittered)));
}

Duration RandomBetween(Duration low, Duration high, std::mt19937_64& rng) {
  if (high <= low) return low;
  std::uniform_int_distribution<Duration::rep> dist(low.count(), high.count());
  return Duration(dist(rng));
}

}  // namespace tpujob
