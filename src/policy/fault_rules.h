// The fault rules of the lifecycle, in the order Decide checks them (docs/architecture.md,
// "Faults, in the order the policy checks them"), as pure functions: each reads a snapshot of
// what it needs and returns a verdict; none writes the plan. The lifecycle (policy/lifecycle.cpp,
// ApplyFaultRules) applies the verdicts in one place, through the fault table
// (policy/fault_table.h), and stops at the first rule that decides the attempt.
//
//   1. CheckMaintenance        a pod's node is under maintenance: re-issue, no retry used.
//   2. CheckFaultyNodes        a pod's node is unhealthy or lost: cordon it, re-issue against
//                              maxJobRetries. It decides before rule 1 when both apply.
//   3. CheckPinnedUnschedulable a restarted worker pinned to its node cannot be scheduled there:
//                              delete it and forget the pin.
//   4. CheckUnschedulable      a pod of the attempt is still unschedulable kUnschedulableRelease
//                              after admission: release the admission.
//   5. CheckPreflight          failed pre-flight init containers (policy/preflight_verdict.h):
//                              wait for the peers' verdicts, then fail the job (the job's own
//                              settings) or cordon and re-issue.
//   6. CheckPermanentExits     a permanent exit fails the job once its node has had the fault
//                              attribution window to be found faulty; until then it is held.
//   7. CheckStalls             a supervisor stopped a program that made no progress
//                              (policy/stall_rules.h): hardware rounds on every node, then
//                              restart the gang, re-issue off a suspect node, or fail the job.
//   8. CheckSuccessOrPreemption the success policy is met, else the queue's preemption order;
//                              neither while a permanent exit is held.
//   9. CheckRetryableExits     per failed replica: restart it (in place, or its pod) within
//                              maxWorkerRestarts, else re-issue the job.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "policy/fault_table.h"
#include "policy/job_spec.h"
#include "policy/job_status.h"
#include "policy/node_health.h"
#include "policy/plan.h"
#include "policy/pod_observation.h"

namespace tpujob::policy {

// --- Rules 1 and 2: the nodes the attempt's pods run on ---------------------------------------

// A pod of the attempt on a node: scheduled, not being deleted, not Succeeded.
struct PodOnNode {
  const ObservedPod* pod = nullptr;
  NodeHealth health;  // of its node
  PodState state = PodState::kPending;
  Termination exit;  // when state is kFailed
};

struct NodeFaultSnapshot {
  std::vector<PodOnNode> pods;
  std::string job_uid;  // for the cordons' evidence
  int32_t attempt = 0;
  bool cordon_faulty_nodes = true;  // spec.faultTolerance.cordonFaultyNodes
};

// Rule 1. Applies when a running pod, or one whose program failed, is on a node under
// maintenance; `recheck_in` is set whatever the verdict when a node announces maintenance ahead.
struct MaintenanceVerdict {
  const PodOnNode* culprit = nullptr;       // the first such pod; nullptr: the rule does not apply
  std::vector<const ObservedPod*> touched;  // every such pod
  Termination termination;                  // NodeVerdictAfterExit of the culprit
  std::optional<Duration> recheck_in;
};
MaintenanceVerdict CheckMaintenance(const NodeFaultSnapshot& snapshot);

// Rule 2. Applies when a pod is on a node found unhealthy, lost or deleted.
struct FaultyNodeVerdict {
  // A pod whose program failed on such a node, else the first pod on one; nullptr: the rule
  // does not apply.
  const PodOnNode* culprit = nullptr;
  FaultKind kind = FaultKind::kNodeUnhealthy;  // kNodeLost when the culprit's node is unreachable
  bool lost_any = false;                       // one of the nodes is unreachable
  std::vector<const ObservedPod*> touched;     // every pod on such a node
  std::vector<NodeToCordon> cordon;            // the nodes to cordon (not a deleted one)
  // One pod on each such node other than the culprit's (the first): each node is a fault of its
  // own, recorded with the culprit's.
  std::vector<const PodOnNode*> others;
  Termination termination;  // NodeVerdictAfterExit of the culprit
};
FaultyNodeVerdict CheckFaultyNodes(const NodeFaultSnapshot& snapshot);

// The termination recorded when a node's verdict decides a pod's fault: the node's reason and
// message, with the program's exit (container, code) when it exited, the message naming both.
Termination NodeVerdictAfterExit(const PodOnNode& pod);

// --- Rule 3: a restarted worker pinned where it cannot be scheduled ---------------------------

struct PinnedPodSnapshot {
  std::vector<const ObservedPod*> pods;  // the attempt's pods, by replica
  const std::map<std::string, RestartRecord, std::less<>>* worker_restarts = nullptr;
};
struct Unpin {
  const ObservedPod* pod = nullptr;
  std::string key;   // ReplicaKey: its record in status.workerRestarts
  std::string node;  // the node it was pinned to
};
// Every pinned pod to delete and unpin; empty: the rule does not apply.
std::vector<Unpin> CheckPinnedUnschedulable(const PinnedPodSnapshot& snapshot);

// --- Rule 4: the admission's capacity was taken ------------------------------------------------

struct UnschedulableSnapshot {
  std::vector<const ObservedPod*> pods;  // the attempt's pods, by replica
  std::vector<std::string> removing;     // uids the plan deletes already
  bool release_unschedulable = true;     // LifecycleInput::release_unschedulable
  std::optional<WallTime> admitted_at;
  WallTime now{};
};
// The first pod still unschedulable kUnschedulableRelease after admission; nullptr: the rule
// does not apply.
const ObservedPod* CheckUnschedulable(const UnschedulableSnapshot& snapshot);

// --- Rule 6: permanent exits and fault attribution ---------------------------------------------

// A failed replica of the attempt, as rules 5, 6 and 8 read it.
struct ReplicaFailure {
  const ObservedPod* pod = nullptr;
  Termination termination;
  bool counted = false;  // the failure was counted already (status.workerRestarts)
};

struct PermanentExitSnapshot {
  const std::vector<ReplicaFailure>* failures = nullptr;
  const ExitCodeRules* exit_codes = nullptr;  // spec.faultTolerance.exitCodes
  int64_t fault_attribution_seconds = 0;
  WallTime now{};
};
struct PermanentExitVerdict {
  // Held: permanent exits whose node may still be found faulty, and when the first hold ends.
  std::vector<const ReplicaFailure*> held;
  std::optional<Duration> recheck_in;
  // The exit that fails the job; nullptr: the rule does not decide.
  const ReplicaFailure* fails = nullptr;
  bool waited = false;  // it was held for the window first (its node is to be confirmed)
  // The nodes to read again before the failure stands: its node, then every failed pod's.
  std::vector<std::string> confirm_nodes;
};
PermanentExitVerdict CheckPermanentExits(const PermanentExitSnapshot& snapshot);

// When a permanent exit is decided if its node is not found faulty first: the container's
// finishedAt plus the window. std::nullopt: at once (no window, OOMKilled, no finishedAt, or the
// pod never ran on a node).
std::optional<WallTime> AttributionDeadline(const ObservedPod& pod, const Termination& t,
                                            int64_t fault_attribution_seconds);

// --- Rule 8: success, then preemption ----------------------------------------------------------

struct SuccessSnapshot {
  bool exit_held = false;  // rule 6 holds a permanent exit
  SuccessPolicy success_policy = SuccessPolicy::kAllWorkers;
  bool has_master = false;
  bool success_decider_succeeded = false;  // the master (or worker 0 without one) exited 0
  int32_t workers = 0;
  int32_t workers_succeeded = 0;
  int32_t replicas = 0;  // masters and workers
  const std::optional<PreemptOrder>* preempt = nullptr;
  int32_t attempt = 0;
};
struct SuccessVerdict {
  enum class Outcome { kNone, kSucceeded, kPreempted } outcome = Outcome::kNone;
  std::string reason;   // kSucceeded: "MasterSucceeded" or "AllWorkersSucceeded"
  std::string message;  // kSucceeded
};
SuccessVerdict CheckSuccessOrPreemption(const SuccessSnapshot& snapshot);

// --- Rule 9: retryable exits -------------------------------------------------------------------

struct RetrySnapshot {
  const std::vector<ReplicaFailure>* failures = nullptr;
  const std::vector<const ReplicaFailure*>* held = nullptr;  // rule 6's
  const std::map<std::string, RestartRecord, std::less<>>* worker_restarts = nullptr;
  bool in_place = false;  // spec.faultTolerance.restart InPlace
  int32_t max_worker_restarts = 0;
};
struct RetryVerdict {
  enum class Step {
    kDeleteCounted,   // counted already: the failed pod goes (its restart was decided)
    kRestartInPlace,  // restart the program in every pod (FaultAction::kRestartInPlace)
    kRestartWorker,   // create the worker's pod again (FaultAction::kRestartWorker)
    kReissue,         // out of restarts: re-issue the job; the last step
  };
  const ReplicaFailure* failure = nullptr;
  Step step = Step::kDeleteCounted;
  bool delete_pod = false;  // kDeleteCounted, kRestartInPlace: whether the pod is deleted
};
// One step per failure that rule 9 acts on, in order, ending at the first kReissue; empty: the
// rule does not apply.
std::vector<RetryVerdict> CheckRetryableExits(const RetrySnapshot& snapshot);

// --- The text of faults, conditions and Events -------------------------------------------------

// "worker-3 (pod j-worker-3)"; for a multislice job "worker-7 (slice 1, pod j-worker-1-3)".
std::string DescribeReplica(const ObservedPod& pod, const JobSpec* spec);
// "container c exited with code 3 (Error): message", "pod failed (Evicted): message".
std::string DescribeExit(const Termination& t);
// Messages end up in conditions, Events and faults[]: at most kMaxMessage bytes, cut at a
// character boundary.
inline constexpr size_t kMaxMessage = 1024;
std::string BoundedMessage(std::string text);

// The program's own container failed (not the pod, not an init container).
bool ProgramFailure(const Termination& t);

// The kind of fault a termination is when nothing else names it: a pod failed for a Node*
// reason is its node's, a failed init container pre-flight's or its own, else the program's.
FaultKind KindOfTermination(const Termination& t);

}  // namespace tpujob::policy
