// The node agent: the loop of `tpujob-operator node-agent` that checks one node's hardware every
// interval and writes the verdict into a node condition. It is the second of the operator's two
// hardware checks, the periodic one of the nodes; the first is the pre-flight check in every
// worker before the program starts (docs/preflight.md). docs/node-agent.md describes both the
// agent and how to deploy it.
//
// One agent runs on every TPU node (a DaemonSet in the Helm chart). Every --interval it runs a
// round (node_agent_round.h: the node's TPU device nodes and, when asked, the root disk and the
// ulimits, reusing the pre-flight checks) and writes the result into a node condition (default
// TPUUnhealthy, the operator's default hardware condition) with a strategic merge patch of the
// node's status subresource, as node-problem-detector does. The operator then treats the node as
// unhealthy: it cordons it and re-issues the jobs that run there.
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
// The pure parts are free functions, unit-tested without a cluster: the round
// (node_agent_round.h), which pod updates trigger a round and the health verdict (here), the
// flags and exit codes (node_agent_command.h). NodeAgent does the I/O through an injected
// kube::Client and Clock.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "cache/objects.h"
#include "kube/client.h"
#include "node_agent_round.h"

namespace CLI {
class App;
}

namespace tpujob {

namespace cache {
template <typename T>
class Informer;
}  // namespace cache

// Registers the `node-agent` subcommand on `app` (its flags: node_agent_command.h, where it is
// defined). Like `preflight`, its callback runs the agent while app.parse() is on the stack and
// then throws CLI::RuntimeError(exit_code), which CLI11_PARSE in main() turns into the process's
// exit code.
void AddNodeAgentCommand(CLI::App& app);

namespace agent {

// A worker's abnormal exit on the node: a container or init container of a TPUJob pod terminated
// with a non-zero exit code (signals included: 128+N). It makes the agent run a round at once.
// Or the operator's request for a round: a new value of the pod's annotation
// cache::kHardwareCheckAnnotation, set on every pod of a job whose program stalled
// (`hardware_check`, the value; `container` is then empty).
struct Trigger {
  std::string pod;  // "namespace/name"
  std::string uid;
  std::string container;
  bool init_container = false;
  int32_t exit_code = 0;
  std::string hardware_check;

  // What the agent remembers it by, so that later updates of the same pod do not trigger again:
  // "<pod uid>/<container name>" (names are unique among a pod's containers and init containers),
  // or "<pod uid>/check:<value>" (':' is in no container name).
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
// nothing about the node. Then the hardware check the pod's annotation asks for, if its value is
// not in `seen` either.
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

}  // namespace agent
}  // namespace tpujob
