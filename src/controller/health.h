// Liveness of a running manager: what /healthz reports.
//
// A process can be up and answering HTTP while doing nothing useful: a reconcile stuck on a
// call that never returns holds its key forever, and a watch whose connection went silent (a
// half-open TCP connection, a proxy that dropped its state) delivers no events, no error and no
// end. Neither shows in /readyz. The kubelet restarts a container whose liveness probe fails,
// and a restarted operator relists everything, so reporting both here turns a silent wedge into
// a restart.
//
// HealthProblems is a pure function of a snapshot, so the rules are tested without threads or
// sleeps; the manager gathers the snapshot at every probe.
#pragma once

#include <string>
#include <vector>

#include "base/clock.h"

namespace tpujob::controller {

struct HealthLimits {
  // A reconcile running longer than this is taken for stuck. Reconciles take milliseconds; the
  // slowest legitimate one is a write retried with backoff (5 retries, at most 10 s apart).
  Duration max_reconcile = std::chrono::minutes(5);
  // A watch that brought nothing (no event, no bookmark, no new watch or list) for longer than
  // this is taken for silent. The server ends every watch after 5-10 minutes (the reflector's
  // timeoutSeconds) and sends a bookmark about every minute, so a healthy watch is never quiet
  // for longer than 10 minutes; one more minute of slack.
  Duration max_watch_silence = std::chrono::minutes(11);
};

struct WatchActivity {
  std::string name;         // "pods", "nodes", "tpujobs"
  TimePoint last_activity;  // TimePoint{} when nothing was heard yet
};

struct QueueActivity {
  std::string name;            // the work queue's name
  Duration longest_running{};  // the longest reconcile still in progress; 0 when idle
};

// One line per problem; empty when healthy. `watching_since` is when the informers started:
// a watch that has heard nothing yet is judged from then.
std::vector<std::string> HealthProblems(const std::vector<WatchActivity>& watches,
                                        const std::vector<QueueActivity>& queues,
                                        TimePoint watching_since, TimePoint now,
                                        const HealthLimits& limits);

}  // namespace tpujob::controller
