// `kubectl tpujob`: a kubectl plugin that shows TPUJobs the way the operator sees them.
//
// kubectl runs an executable named `kubectl-tpujob` found on the PATH for `kubectl tpujob ...`;
// that name is a symbolic link to tpujob-operator, which dispatches on it (main.cpp).
//
//   kubectl tpujob list [-n NS | -A]   the queue in order, then the admitted and finished jobs
//   kubectl tpujob describe NAME [-n NS]
//                                      phase, conditions, attempts, faults with their nodes and
//                                      pre-flight items, cordoned nodes, pods, and for a waiting
//                                      job its place in the queue and why it waits
//   kubectl tpujob run | wait | suspend | resume | logs | completion
//                                      a job from a command line, waited for, followed; the
//                                      decisions behind them are in plugin_commands.h
//
// The queue order and the reasons are the operator's own: the position it wrote to
// status.queuePosition with the order of src/policy/queue.h (re-issued first, then priority,
// then time queued) and the message of the Admitted condition. The rendering functions are pure
// (objects and `now` in, text out) so they are tested without a cluster.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/clock.h"

namespace tpujob::plugin {

// The table of `list`: waiting jobs first in queue order, then the others by namespace and name.
std::string RenderList(const std::vector<nlohmann::json>& jobs, WallTime now, bool all_namespaces);

// The text of `describe` for one job and its pods.
std::string RenderDescribe(const nlohmann::json& job, const std::vector<nlohmann::json>& pods,
                           WallTime now);

// "3m12s", "2h5m", "4d1h": the age from an RFC 3339 time to `now`; "<unknown>" if unparsable.
std::string Age(const std::string& rfc3339, WallTime now);

// Runs the plugin with kubectl's arguments (argv[0] is the program name); returns the exit code.
int Run(int argc, char** argv);

// Answers a shell's or kubectl's completion request for `words` (the arguments typed so far, the
// last being the word under the cursor) in Cobra's format; lists the namespace's jobs when a job
// name may come next. What `kubectl-tpujob __complete WORDS...` and, under the name
// kubectl_complete-tpujob, `kubectl_complete-tpujob WORDS...` run. Always returns 0.
int Complete(const std::vector<std::string>& words);

}  // namespace tpujob::plugin
