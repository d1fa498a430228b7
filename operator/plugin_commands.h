// The decisions behind the `kubectl tpujob` subcommands that change or follow a job (run, wait,
// suspend/resume, list --status, logs, completion), as pure functions: flags and objects in,
// objects, text or a verdict out. kubectl_plugin.cpp parses the command line, talks to the API
// server and prints; everything here is tested without a cluster (tests/unit/plugin_commands_test).
//
// None of these functions keeps state or touches the network; all are safe to call from any
// thread. Errors are values: a message meant for the user, printed after "error: ".
#pragma once

#include <chrono>
#include <expected>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tpujob::plugin {

// ---- reading objects -------------------------------------------------------------------------

// The field of `object` at `at` as text: a string as it is, an integer or a bool written out
// ("3", "true"); `fallback` when the field is absent or of another type.
std::string TextAt(const nlohmann::json& object, const nlohmann::json::json_pointer& at,
                   const std::string& fallback = "");
std::string TextAt(const nlohmann::json& object, const char* at, const std::string& fallback = "");

// ---- run -------------------------------------------------------------------------------------

// What `kubectl tpujob run` was given.
struct RunRequest {
  std::string name;
  std::string ns;  // empty: leave metadata.namespace out (the request's namespace applies)
  std::string tpu_type;
  std::optional<int> slices;
  std::string image;
  std::optional<int> priority;
  std::string priority_class;
  std::optional<int> max_restarts;
  std::string queue;
  std::vector<std::string> env;      // "KEY=VALUE" each
  std::vector<std::string> command;  // COMMAND then its ARGS (what follows `--`)
};

// The name of the job's one container, as in examples/: the operator gives the TPU chips to the
// first container of the Worker template, whatever its name.
inline constexpr std::string_view kContainerName = "trainer";

// The TPUJob `run` creates, or why it cannot: a missing name, --tpu-type, --image or command, a
// name that is not a DNS-1035 label of at most 45 characters, both --priority and
// --priority-class, an --env without '=' or with an empty key, --slices or --max-restarts out of
// bounds. The TPU type is sent as written: the API server knows the types and refuses unknown
// ones with its own message.
std::expected<nlohmann::json, std::string> BuildJob(const RunRequest& request);

// `object` as YAML that `kubectl apply -f -` reads back as the same JSON: block style, keys sorted
// (apiVersion, kind, metadata, spec), and every string that YAML would read as something else (a
// number, a bool, null, empty) double-quoted.
std::string ToYaml(const nlohmann::json& object);

// ---- wait ------------------------------------------------------------------------------------

enum class WaitCondition { kCompletion, kRunning };

// "completion" or "running" (the value of --for).
std::expected<WaitCondition, std::string> ParseWaitCondition(std::string_view text);

// A duration as kubectl writes one: a number and a unit, possibly several ("30s", "5m", "1h",
// "1h30m", "250ms" rounds up to whole seconds); a bare "0" is zero.
std::expected<std::chrono::seconds, std::string> ParseDuration(std::string_view text);

// What one look at the job says about the wait.
struct WaitVerdict {
  enum Kind { kKeepWaiting, kMet, kFailed } kind = kKeepWaiting;
  std::string message;  // for kFailed: the reason and message, and the last fault
};

// kMet: --for=completion and the job Succeeded; --for=running and the job is Running, or already
// Succeeded (it ran, perhaps too briefly to be seen Running). kFailed: the job Failed (the
// message: the Failed condition's reason and message and the last entry of status.faults), for
// either condition. Any other phase (a suspended job too): kKeepWaiting.
WaitVerdict DecideWait(const nlohmann::json& job, WaitCondition condition);

// "reason: message; last fault: ..." from a job's Failed condition and status.faults; "" when the
// job has neither.
std::string FailureSummary(const nlohmann::json& job);

// ---- suspend / resume ------------------------------------------------------------------------

// The merge patch (application/merge-patch+json) that sets spec.suspend.
nlohmann::json SuspendPatch(bool suspend);

// ---- list --status ---------------------------------------------------------------------------

// The phases of status.phase (docs/api.md), in the order a job usually passes through them.
inline constexpr std::string_view kPhases[] = {"Queued",    "Starting",  "Running", "Restarting",
                                               "Suspended", "Succeeded", "Failed"};

// The phase named by `text`, in any case ("running" -> "Running"), or an error listing the valid
// phases.
std::expected<std::string, std::string> ParsePhase(std::string_view text);

// The phase a job is in; a job the operator has not written a status for yet counts as Queued,
// as `list` shows it.
std::string PhaseOf(const nlohmann::json& job);

// The jobs in `phase`, in their order.
std::vector<nlohmann::json> FilterByPhase(std::vector<nlohmann::json> jobs,
                                          const std::string& phase);

// ---- completion ------------------------------------------------------------------------------

// The completion script `kubectl tpujob completion SHELL` prints for "bash" or "zsh", or an error
// naming the shells. Both complete the command `kubectl-tpujob` by asking the binary itself
// (`kubectl-tpujob __complete WORDS...`), so they know exactly its subcommands and flags.
std::expected<std::string, std::string> CompletionScript(std::string_view shell);

// What may follow on the command line. `words` are the arguments after the program name, the
// last being the word being completed (empty when the cursor follows a space). Subcommands,
// then each subcommand's flags (when the word starts with '-'), the values of --for, --status,
// -o, --dry-run and of `completion`, and for a subcommand that takes a NAME and has none yet,
// `job_names()` (called only then). Handles `--flag=value` in one word (zsh, kubectl) and in
// three (bash splits "--for=ru" into "--for", "=", "ru"). Only candidates that start with the
// word are returned.
std::vector<std::string> CompletionCandidates(
    const std::vector<std::string>& words,
    const std::function<std::vector<std::string>()>& job_names);

// The same answer in Cobra's format, which kubectl ≥ 1.26 expects from the executable
// `kubectl_complete-tpujob` and the scripts read: one candidate a line, then ":4" (no file
// names).
std::string CompletionOutput(const std::vector<std::string>& candidates);

// ---- logs ------------------------------------------------------------------------------------
//
// Pods are named by where they run, the way the job's environment names them: `worker-W` is the
// worker with TPU_WORKER_ID W (its index within its slice), `slice-S/worker-W` in a multislice
// job (label tpujob.dev/slice-index S), `master-0` the Master. Every log line is printed as
// "[<that name>] <line>".

// Which pods `logs` reads. Unset fields select everything; --worker or --slice leave the Master
// out.
struct LogSelection {
  std::optional<int> worker;  // TPU_WORKER_ID, the index within the slice
  std::optional<int> slice;
  std::optional<int> attempt;  // unset: the job's current attempt
};

// One pod whose log is read.
struct LogSource {
  std::string pod;
  std::string uid;
  std::string container;  // the pod's first container: the program the operator gives the chips
  std::string prefix;     // "[worker-3] ", "[slice-1/worker-3] ", "[master-0] "
  bool started = false;   // a container has started (before that the server refuses the log)
};

// The label selector of a job's pods: "tpujob.dev/job-name=NAME".
std::string JobPodSelector(std::string_view job_name);

// status.attempt, or 1 before the operator wrote one.
int CurrentAttempt(const nlohmann::json& job);

// The "[...] " prefix of a pod's lines (see above).
std::string LogPrefix(const nlohmann::json& pod);

// The pods of `attempt` (label tpujob.dev/attempt) that `selection` names, the Master first, then
// the workers by slice and index within the slice; pods being deleted are kept (their logs are
// still there).
std::vector<LogSource> SelectLogSources(const std::vector<nlohmann::json>& pods, int attempt,
                                        const LogSelection& selection);

// Splits a stream of bytes into lines. Not thread-safe; one per stream.
class LineSplitter {
 public:
  // The lines completed by `chunk`, without their '\n' (a trailing '\r' is kept: it is the
  // program's).
  std::vector<std::string> Feed(std::string_view chunk);
  // What is left after the last '\n' (a last line without one), and forgets it.
  std::optional<std::string> Flush();

 private:
  std::string partial_;
};

// The line printed when following moves on from attempt `ended` to `next`: "--- attempt 1 ended
// (NodeUnhealthy on node n1: ...); following attempt 2 ---", the reason from the job's last
// fault of that attempt, else its Ready condition.
std::string AttemptBanner(const nlohmann::json& job, int ended, int next);

}  // namespace tpujob::plugin
