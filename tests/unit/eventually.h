// Eventually: polls a condition for the unit tests whose code under test changes state from a
// background thread without any other signal (a reflector filling its store, a manager's
// workers creating pods). Real time, bounded; the bound is never reached when the code works.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace tpujob::testing_util {

inline bool Eventually(const std::function<bool()>& condition,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace tpujob::testing_util
