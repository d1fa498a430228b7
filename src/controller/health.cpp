#include "controller/health.h"

#include <chrono>

namespace tpujob::controller {
namespace {

std::string Seconds(Duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + "s";
}

}  // namespace

std::vector<std::string> HealthProblems(const std::vector<WatchActivity>& watches,
                                        const std::vector<QueueActivity>& queues,
                                        TimePoint watching_since, TimePoint now,
                                        const HealthLimits& limits) {
  std::vector<std::string> problems;
  for (const QueueActivity& queue : queues) {
    if (queue.longest_running > limits.max_reconcile) {
      problems.push_back("work queue " + queue.name + ": a reconcile has been running for " +
                         Seconds(queue.longest_running) + " (limit " +
                         Seconds(limits.max_reconcile) + ")");
    }
  }
  for (const WatchActivity& watch : watches) {
    const TimePoint last =
        watch.last_activity == TimePoint{} ? watching_since : watch.last_activity;
    if (now - last > limits.max_watch_silence) {
      problems.push_back("watch " + watch.name + ": nothing heard from the API server for " +
                         Seconds(now - last) + " (limit " + Seconds(limits.max_watch_silence) +
                         ")");
    }
  }
  return problems;
}

}  // namespace tpujob::controller
