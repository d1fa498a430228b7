// The fault table: every kind of fault the lifecycle records in status.faults[] and every action
// it takes on one, with how each is treated, as data. The JSON strings (status.faults[].kind and
// .action) are the names below and never change: readers (kubectl tpujob, dashboards, the
// operator's metrics) match on them.
//
// Treatment of a kind (kFaultKinds), as docs/architecture.md describes it rule by rule ("Faults,
// in the order the policy checks them"):
//   1. uses_retry  a re-issue for it counts against spec.faultTolerance.maxJobRetries; a
//                  disruption (maintenance, preemption) does not.
//   2. grace       the grace period the pods of the attempt it ends are deleted with: their own
//                  terminationGracePeriodSeconds, or faultTolerance.maintenanceGracePeriodSeconds
//                  so that the program can checkpoint.
//   3. cordon      whether the node at fault is cordoned (spec.faultTolerance.cordonFaultyNodes
//                  and the Cordoner's safety rules still apply): the node the fault names, which
//                  a re-issued attempt cordons again if the first cordon was lost, or the nodes
//                  the pre-flight reports blame.
//
// Treatment of an action (kFaultActions):
//   1. restarts_worker  a worker's program or pod was restarted within the attempt (what
//                       tpujob_job_restarts_total is to count: RestartsWorker).
//   2. reissues_job     the attempt ended for a fault and the job, or one slice of it, queues
//                       again first (not a preemption, after which it queues by priority).
//   3. fails_job        the job ended Failed.
//
// The verdict type is the row: FaultKindTreatment or FaultActionTreatment.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace tpujob::policy {

enum class FaultKind {
  kContainerFailed,      // a main container exited non-zero
  kInitContainerFailed,  // an init container other than pre-flight exited non-zero
  kPodFailed,            // the pod failed without a container exit (an eviction)
  kPreflightFailed,      // the pre-flight init container failed
  kNodeUnhealthy,        // the pod's node is unhealthy (or the pod failed for a Node* reason)
  kNodeLost,             // the pod's node is unreachable or deleted
  kMaintenance,          // the pod's node is under maintenance
  kPreempted,            // the queue preempted the job
  kStalled,              // the program made no progress (spec.faultTolerance.progress)
};

enum class FaultAction {
  kRestartWorker,      // the failed worker's pod is created again
  kRestartInPlace,     // the program restarts in every pod of the attempt, behind a barrier
  kReissueJob,         // the attempt ends; the job queues again
  kReplaceSlice,       // the attempt ends; one slice queues again, the others keep their pools
  kFailJob,            // the job fails
  kPreemptJob,         // the attempt is stopped for a job of higher priority; it queues again
  kRestartAllWorkers,  // every pod of the attempt is deleted and created again (a stall, Recreate)
};

enum class FaultGrace { kPodsOwn, kMaintenance };
enum class FaultCordon { kNone, kTheNode, kNodesAtFault };

struct FaultKindTreatment {
  FaultKind kind;
  std::string_view name;
  bool uses_retry;
  FaultGrace grace;
  FaultCordon cordon;
};

struct FaultActionTreatment {
  FaultAction action;
  std::string_view name;
  bool restarts_worker;
  bool reissues_job;
  bool fails_job;
};

inline constexpr std::array<FaultKindTreatment, 9> kFaultKinds{{
    // {kind, name, uses_retry, grace, cordon}
    {FaultKind::kContainerFailed, "ContainerFailed", true, FaultGrace::kPodsOwn,
     FaultCordon::kNone},
    {FaultKind::kInitContainerFailed, "InitContainerFailed", true, FaultGrace::kPodsOwn,
     FaultCordon::kNone},
    {FaultKind::kPodFailed, "PodFailed", true, FaultGrace::kPodsOwn, FaultCordon::kNone},
    {FaultKind::kPreflightFailed, "PreflightFailed", true, FaultGrace::kPodsOwn,
     FaultCordon::kNodesAtFault},
    {FaultKind::kNodeUnhealthy, "NodeUnhealthy", true, FaultGrace::kPodsOwn, FaultCordon::kTheNode},
    {FaultKind::kNodeLost, "NodeLost", true, FaultGrace::kPodsOwn, FaultCordon::kTheNode},
    {FaultKind::kMaintenance, "Maintenance", false, FaultGrace::kMaintenance, FaultCordon::kNone},
    {FaultKind::kPreempted, "Preempted", false, FaultGrace::kMaintenance, FaultCordon::kNone},
    // A stall restarts the gang without a retry; a retry is used only when the job is re-issued
    // off a suspect node (policy/stall_rules.h), whose cordon the stall rule decides itself.
    {FaultKind::kStalled, "Stalled", true, FaultGrace::kPodsOwn, FaultCordon::kNone},
}};

inline constexpr std::array<FaultActionTreatment, 7> kFaultActions{{
    // {action, name, restarts_worker, reissues_job, fails_job}
    {FaultAction::kRestartWorker, "RestartWorker", true, false, false},
    {FaultAction::kRestartInPlace, "RestartInPlace", true, false, false},
    {FaultAction::kReissueJob, "ReissueJob", false, true, false},
    {FaultAction::kReplaceSlice, "ReplaceSlice", false, true, false},
    {FaultAction::kFailJob, "FailJob", false, false, true},
    {FaultAction::kPreemptJob, "PreemptJob", false, false, false},
    {FaultAction::kRestartAllWorkers, "RestartAllWorkers", true, false, false},
}};

// The row of a kind or an action (the tables are in enumerator order, checked below).
constexpr const FaultKindTreatment& Treatment(FaultKind kind) {
  return kFaultKinds[static_cast<size_t>(kind)];
}
constexpr const FaultActionTreatment& Treatment(FaultAction action) {
  return kFaultActions[static_cast<size_t>(action)];
}

// The JSON string of a kind or an action.
constexpr std::string_view FaultKindName(FaultKind kind) { return Treatment(kind).name; }
constexpr std::string_view FaultActionName(FaultAction action) { return Treatment(action).name; }

// The kind or action a JSON string names; std::nullopt for any other string (a record written by
// a later version of the operator).
constexpr std::optional<FaultKind> ParseFaultKind(std::string_view name) {
  for (const FaultKindTreatment& row : kFaultKinds) {
    if (row.name == name) return row.kind;
  }
  return std::nullopt;
}
constexpr std::optional<FaultAction> ParseFaultAction(std::string_view name) {
  for (const FaultActionTreatment& row : kFaultActions) {
    if (row.name == name) return row.action;
  }
  return std::nullopt;
}

// Whether an action restarted a worker within its attempt (RestartWorker, RestartInPlace). For
// status.faults[].action: an unknown string restarts nothing.
constexpr bool RestartsWorker(FaultAction action) { return Treatment(action).restarts_worker; }
constexpr bool RestartsWorker(std::string_view action) {
  const std::optional<FaultAction> parsed = ParseFaultAction(action);
  return parsed && RestartsWorker(*parsed);
}

constexpr bool UsesRetry(FaultKind kind) { return Treatment(kind).uses_retry; }

// Every row is where its enumerator says, so the table is complete and unambiguous.
consteval bool FaultTableIsComplete() {
  for (size_t i = 0; i < kFaultKinds.size(); ++i) {
    if (static_cast<size_t>(kFaultKinds[i].kind) != i) return false;
  }
  for (size_t i = 0; i < kFaultActions.size(); ++i) {
    if (static_cast<size_t>(kFaultActions[i].action) != i) return false;
  }
  return true;
}
static_assert(FaultTableIsComplete());

}  // namespace tpujob::policy
