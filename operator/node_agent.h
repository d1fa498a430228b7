// `tpujob-operator node-agent`: the periodic hardware check of a node (DESIGN.md section 1, the
// second check of the fault-tolerance source; docs/node-agent.md).
//
// One agent runs on every TPU node (a DaemonSet in the Helm chart). Every --interval it counts
// the node's TPU device nodes (and, when asked, the root disk and the ulimits), reusing the
// pre-flight checks, and writes the result into a node condition (default TPUUnhealthy, the
// operator's default hardware condition) with a strategic merge patch of the node's status
// subresource, as node-problem-detector does. The operator then treats the node as unhealthy:
// it cordons it and re-issues the jobs that run there.
//
// The agent needs `patch` on `nodes/status`: it learns the node's google.com/tpu capacity and
// the condition's current value from the answer to its patches (a patch answers with the whole
// node), the first one an empty patch that changes nothing.
//
// A dying chip usually kills the training program before it fails a check, so the agent also
// watches the TPUJob pods on its node (`list` and `watch` on pods; --watch-pods): when a
// container of one exits with a non-zero code, it runs a round at once instead of waiting for
// the next interval, and such a round that fails sets the condition True at once, whatever
// --fail-after says (the program's exit is the second witness). Without the permission it logs
// one warning and keeps its periodic rounds.
//
// The pure parts (flag validation, capacity parsing, the verdict of a round, the hysteresis, the
// patch body and which pod updates trigger a round) are free functions, unit-tested without a
// cluster; NodeAgent does the I/O through an injected kube::Client and Clock.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "cache/objects.h"
#include "kube/client.h"
#include "preflight/checks.h"
#include "preflight/options.h"

namespace CLI {
class App;
}

namespace tpujob {

namespace cache {
template <typename T>
class Informer;
}  // namespace cache

// Registers the `node-agent` subcommand on `app`. Like `preflight`, its callback runs the agent
// while app.parse() is on the stack and then throws CLI::RuntimeError(exit_code), which
// CLI11_PARSE in main() turns into the process's exit code.
void AddNodeAgentCommand(CLI::App& app);

namespace agent {

// The extended resource whose capacity says how many TPU chips the node has.
inline constexpr std::string_view kTpuResource = "google.com/tpu";

// Reasons of the condition. True: the first failing item's reason, or kReasonRecovering while
// passing rounds accumulate towards --pass-after. False: kReasonHealthy, or kReasonSuspect while
// failing rounds accumulate towards --fail-after.
inline constexpr std::string_view kReasonAcceleratorMissing = "AcceleratorMissing";
inline constexpr std::string_view kReasonDiskTooSmall = "DiskTooSmall";
inline constexpr std::string_view kReasonUlimitTooLow = "UlimitTooLow";
inline constexpr std::string_view kReasonRecovering = "HardwareRecovering";
inline constexpr std::string_view kReasonHealthy = "HardwareHealthy";
inline constexpr std::string_view kReasonSuspect = "HardwareSuspect";

// Exit codes of `node-agent --once` (the loop exits 0 on SIGTERM/SIGINT, 2 on invalid flags).
inline constexpr int kExitPassed = 0;    // every item passed
inline constexpr int kExitFailed = 1;    // an item failed
inline constexpr int kExitInvalid = 2;   // invalid flags or configuration; an item not measurable
inline constexpr int kExitApiError = 3;  // the node could not be read or written

// The command line as typed.
struct Flags {
  std::string kubeconfig;  // "" = $KUBECONFIG, then in-cluster, then ~/.kube/config
  std::string node_name;   // "" = $NODE_NAME
  int interval_seconds = 60;
  std::string checks = "accelerator";
  std::string dev_root = "/dev";
  std::string root_path = "/";
  double root_min_gb = 32;
  std::string condition_type = "TPUUnhealthy";
  int fail_after = 1;
  int pass_after = 3;
  bool once = false;
  bool watch_pods = true;
  std::string log_level = "info";
  std::string log_format = "logfmt";
  std::string health_address;  // "" = no health endpoint
};

// The validated settings a NodeAgent runs with.
struct Settings {
  std::string node_name;
  Duration interval = std::chrono::seconds(60);
  // Each check at most once, in the order accelerator, disk, ulimit (dns is not a node check).
  std::vector<preflight::Check> checks = {preflight::Check::kAccelerator};
  std::string dev_root = "/dev";
  std::string root_path = "/";
  double root_min_gb = 32;
  preflight::UlimitOptions ulimit;
  std::string condition_type = "TPUUnhealthy";
  int fail_after = 1;
  int pass_after = 3;
  // Watch the TPUJob pods on the node and run a round at once when a container exits abnormally
  // (--watch-pods, never with --once).
  bool watch_pods = true;
};

// Checks every flag and returns all problems together, each naming its flag. `env` supplies
// NODE_NAME when --node-name is not given.
std::expected<Settings, std::vector<std::string>> Validate(const Flags& flags,
                                                           const preflight::EnvironmentLookup& env);

// "accelerator,disk" -> the checks in canonical order; an error names an unknown entry.
std::expected<std::vector<preflight::Check>, std::string> ParseChecks(std::string_view list);

// The node's status.capacity["google.com/tpu"]: 0 when the node has none. An error when the
// value is not a whole number of chips.
std::expected<int64_t, std::string> TpuCapacity(const kube::Json& node);

// A condition of a node's status, as read from the node.
struct NodeCondition {
  std::string status;  // "True", "False", "Unknown"
  std::string reason;
  std::string message;
  std::string last_transition_time;  // RFC 3339, "" when absent
};
std::optional<NodeCondition> FindCondition(const kube::Json& node, std::string_view type);

// What one round of checks found.
struct RoundResult {
  // False when an item could not be measured at all (the device directory or the root path does
  // not exist, the capacity is unreadable) and no other item failed: the agent's own
  // configuration is wrong, which says nothing about the hardware, so the round neither sets nor
  // clears the condition.
  bool conclusive = true;
  bool passed = true;
  std::string reason;        // the first failing item's reason; kReasonHealthy when passed
  std::string message;       // every item, e.g. "3 of 4 TPU devices present under /dev (...)"
  std::string failed_items;  // "accelerator,disk-size root"; "" when passed
  std::vector<preflight::ItemResult> items;
};

// The system probes the checks use; tests replace them.
struct Probes {
  preflight::FilesystemProbe filesystem = preflight::SystemFilesystemProbe();
  preflight::LimitsProvider limits = preflight::SystemLimits();
};

// Runs the checks of `settings` against a node with `tpu_capacity` chips (0: at least one
// device is needed).
RoundResult CheckNode(const Settings& settings, int64_t tpu_capacity, const Probes& probes);

// The hysteresis between rounds and the condition. A failing round counts towards --fail-after
// and resets the passes; a passing round counts towards --pass-after and resets the failures.
// The condition turns True after fail_after failing rounds in a row and back to False only after
// pass_after passing rounds in a row, so a flapping device does not flap the condition.
struct Hysteresis {
  bool unhealthy = false;  // the condition's status: True
  int failures = 0;        // failing rounds in a row
  int passes = 0;          // passing rounds in a row
};

// The state an agent starts from: the node's condition, so a restarted agent that finds it True
// needs pass_after passing rounds to clear it. Nothing else survives a restart.
Hysteresis InitialState(const std::optional<NodeCondition>& condition);

Hysteresis Step(Hysteresis state, bool passed, int fail_after, int pass_after);

// The condition a round writes.
struct ConditionUpdate {
  bool unhealthy = false;
  std::string reason;
  std::string message;
};
ConditionUpdate DescribeCondition(const Hysteresis& state, const RoundResult& round, int fail_after,
                                  int pass_after);

// The strategic merge patch of the node's status: the one condition, merged by `type`, with
// lastHeartbeatTime `now` and lastTransitionTime kept from `previous` when the status is
// unchanged, else `now`.
kube::Json ConditionPatch(std::string_view type, const ConditionUpdate& update,
                          const std::optional<NodeCondition>& previous, WallTime now);

// A worker's abnormal exit on the node: a container or init container of a TPUJob pod terminated
// with a non-zero exit code (signals included: 128+N). It makes the agent run a round at once.
struct Trigger {
  std::string pod;  // "namespace/name"
  std::string uid;
  std::string container;
  bool init_container = false;
  int32_t exit_code = 0;

  // What the agent remembers it by, so that later updates of the same pod do not trigger again:
  // "<pod uid>/<container name>" (names are unique among a pod's containers and init containers).
  std::string Key() const;
  friend bool operator==(const Trigger&, const Trigger&) = default;
};

// Exits that finished longer ago than this trigger nothing: no operator decision waits for them
// (the longest fault attribution window is 600 s). The agent's pod watch starts with every pod
// on the node, failed pods of long-finished jobs included (they stay for their logs); without
// this, each start of the agent would run a triggered round for them.
inline constexpr Duration kStaleExit = std::chrono::minutes(10);

// The abnormal exits of `pod` whose Key() is not in `seen`: every container and init container
// terminated with a non-zero exit code, init containers first, each in spec order, except those
// whose finishedAt is before `not_before` (an exit without finishedAt counts). None for a pod
// being deleted: its containers were stopped on purpose (SIGTERM, then SIGKILL), which says
// nothing about the node.
std::vector<Trigger> AbnormalExits(const cache::PodInfo& pod, const std::set<std::string>& seen,
                                   std::optional<WallTime> not_before = std::nullopt);

// What a triggered round adds to the condition's message: "checked at once after container
// trainer of pod ns/name exited with code 1".
std::string DescribeTrigger(const Trigger& trigger);

// /healthz of a running agent: healthy while the last successful write (or the start, before
// the first) is at most 3 intervals plus 30 s old.
bool Healthy(TimePoint last_success, TimePoint now, Duration interval);

// One node's agent: rounds of checks and the condition patches, and (Run with
// settings.watch_pods) the watch of the node's TPUJob pods that wakes a round early.
// Thread-safety: RunRound and Run are called from one thread; Stop, NotePod, ForgetPod,
// pod_watch and last_success from any.
class NodeAgent {
 public:
  NodeAgent(kube::Client& client, Settings settings, Probes probes, Clock& clock);
  ~NodeAgent();

  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  enum class Outcome { kPassed, kFailed, kInconclusive, kApiError };
  struct Round {
    Outcome outcome = Outcome::kApiError;
    bool condition_true = false;  // the condition's status after the round (as written)
    std::string reason;
    std::string message;
    bool triggered = false;  // run at once for an abnormal exit
  };

  // One round: learns the node with an empty patch if it is not known yet, runs the checks and
  // writes the condition. Never throws; API errors are logged and returned. With `trigger` (the
  // abnormal exit that woke it), a failing round sets the condition True at once, whatever
  // fail_after says, and the message names the exit; a passing one counts as any other.
  Round RunRound(const std::optional<Trigger>& trigger = std::nullopt);

  // Runs a round every interval until Stop(). Transient API errors are retried next round. With
  // settings.watch_pods it also watches the node's TPUJob pods (started after the first round)
  // and runs a round at once after an abnormal exit; the periodic rounds keep their schedule,
  // interval after the previous periodic round (a triggered round that falls due with one counts
  // as both).
  void Run();
  void Stop();

  // The pod watch's handlers (public for tests). NotePod remembers the pod's new abnormal exits
  // (AbnormalExits against those already remembered) and returns them; unless a round is already
  // due for an earlier one, the first wakes Run() for a round at once. ForgetPod forgets a
  // deleted pod's exits, so that what is remembered stays bounded by the pods on the node.
  std::vector<Trigger> NotePod(const cache::PodInfo& pod);
  void ForgetPod(const cache::PodInfo& pod);

  // Where the pod watch stands.
  enum class PodWatch {
    kOff,        // not asked for (or Run has not started it yet)
    kStarting,   // checking the permission
    kWatching,   // the informer runs
    kForbidden,  // 403 on list or watch: periodic rounds only
  };
  PodWatch pod_watch() const { return pod_watch_.load(); }

  // When a patch last succeeded (the agent's start before the first).
  TimePoint last_success() const;

 private:
  bool Learn();
  kube::PatchOptions WriteOptions() const;
  // On its own thread: checks that pods may be listed and watched, then starts the informer; a
  // 403 is logged once and leaves the agent to its periodic rounds.
  void StartPodWatch();
  void StopPodWatch();

  kube::Client& client_;
  Settings settings_;
  Probes probes_;
  Clock& clock_;
  std::optional<kube::Json> node_;  // the latest answer of the API server
  Hysteresis state_;
  std::optional<bool> last_passed_;  // the previous conclusive round's verdict
  std::atomic<TimePoint::rep> last_success_;
  std::mutex mu_;  // guards stopped_, pending_ and seen_; Run() waits on cv_
  std::condition_variable cv_;
  bool stopped_ = false;
  std::optional<Trigger> pending_;  // an abnormal exit waiting for its round
  std::set<std::string> seen_;      // Trigger::Key() of every exit reacted to, until the pod goes
  std::atomic<bool> stopping_{false};

  std::atomic<PodWatch> pod_watch_{PodWatch::kOff};
  std::thread pod_watch_starter_;  // runs StartPodWatch; joined by StopPodWatch
  std::mutex pods_mu_;             // guards pods_
  std::unique_ptr<cache::Informer<cache::PodInfo>> pods_;
};

int ExitCode(NodeAgent::Outcome outcome);

}  // namespace agent
}  // namespace tpujob
