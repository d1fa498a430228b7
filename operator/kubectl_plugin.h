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
// then time queued) and the message of the Admitted condition.
//
// The pieces: plugin_subcommands.h, the table of subcommands and flags that both the command
// line (CLI11) and completion are built from; kubectl_plugin.cpp, one options struct and one
// function per subcommand; plugin_render.h, the texts of list and describe (pure);
// plugin_follow.h, following a job and its logs over time; plugin_commands.h, the other
// decisions (pure).
#pragma once

#include <string>
#include <vector>

namespace tpujob::plugin {

// Runs the plugin with kubectl's arguments (argv[0] is the program name); returns the exit code:
// 0, 1 for a usage error or a failure, 2 for `wait --timeout`; --help exits 0.
int Run(int argc, char** argv);

// Answers a shell's or kubectl's completion request for `words` (the arguments typed so far, the
// last being the word under the cursor) in Cobra's format; lists the namespace's jobs when a job
// name may come next. What `kubectl-tpujob __complete WORDS...` and, under the name
// kubectl_complete-tpujob, `kubectl_complete-tpujob WORDS...` run. Always returns 0.
int Complete(const std::vector<std::string>& words);

}  // namespace tpujob::plugin
