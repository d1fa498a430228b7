// TokenBucket: the classic rate limiter (rate `qps`, capacity `burst`), used for the API
// client's QPS/burst limit and the work queue's overall limit.
//
// Reserve() never blocks: it takes a token now (possibly borrowing from the future) and
// returns how long the caller must wait before acting on it. Wait() does the waiting on the
// injected clock. A bucket with qps <= 0 is unlimited.
//
// Thread-safety: all methods are safe to call concurrently.
#pragma once

#include <mutex>

#include "base/clock.h"

namespace tpujob {

class TokenBucket {
 public:
  TokenBucket(double qps, int burst, Clock& clock = Clock::Real());

  // Takes one token and returns the delay until it is available (zero when available now).
  Duration Reserve();

  // Takes one token only if one is available now.
  bool TryAccept();

  // Takes one token and blocks until it is available.
  void Wait();

  bool unlimited() const { return qps_ <= 0; }

 private:
  void Refill(TimePoint now);
  // Takes one token at `now` and returns the time from which it may be used.
  TimePoint ReserveAt(TimePoint now);

  const double qps_;
  const double burst_;
  Clock& clock_;
  std::mutex mu_;
  double tokens_;
  TimePoint last_;
};

}  // namespace tpujob
