// SignalWaiter: SIGTERM and SIGINT handled as ordinary code on a thread of their own.
//
// The constructor blocks both signals in the calling thread, and so in every thread it starts
// afterwards; OnSignal() starts a thread that waits for one of them with sigwait() and then
// calls the given function. Shutdown thus runs with locks, logging and allocation allowed,
// never inside an asynchronous signal handler. Construct it before any other thread starts.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <thread>

namespace tpujob {

class SignalWaiter {
 public:
  SignalWaiter() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  }
  SignalWaiter(const SignalWaiter&) = delete;
  SignalWaiter& operator=(const SignalWaiter&) = delete;

  // `on_signal(int signal)` runs on the returned thread once either signal arrives.
  template <typename F>
  std::thread OnSignal(F on_signal) {
    return std::thread([this, on_signal] {
      int signal = 0;
      sigwait(&set_, &signal);
      on_signal(signal);
    });
  }

 private:
  sigset_t set_{};
};

}  // namespace tpujob
