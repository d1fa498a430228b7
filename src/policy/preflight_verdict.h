// Rule 5 of the fault rules (policy/fault_rules.h): what the failed pre-flight init containers
// of one attempt, taken together, say. A pure function of the failures, the attempt's pods and
// the spec; the lifecycle applies the verdict.
//
//   1. kWait      a failure is seen while scheduled peers of the attempt are still running their
//                 checks, less than kPreflightSettle after admission: wait for their verdicts
//                 (the same item failing on many nodes at once is a configuration problem, and
//                 the circuit breaker must see all of them together).
//   2. kFailJob   every report is readable and every failed item is the job's own settings
//                 (exit 11, and no item PreflightItemBlamesNode): a re-issue would fail the same
//                 way on any node, so the job fails (PreflightConfigError), no retry used.
//   3. kReissue   otherwise: the nodes at fault (hardware, exit 10; or environment, exit 11 with
//                 an item about the node) are cordoned in one batch, when
//                 spec.faultTolerance.cordonFaultyNodes, and the job is re-issued once.
// The verdict is PreflightVerdict; kNone when no pre-flight check failed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "policy/fault_rules.h"
#include "policy/job_spec.h"
#include "policy/plan.h"
#include "policy/pod_observation.h"
#include "preflight/report.h"

namespace tpujob::policy {

struct PreflightSnapshot {
  std::vector<const ReplicaFailure*> failed;  // pre-flight failures not counted yet
  std::vector<const ObservedPod*> pods;       // the attempt's pods, by replica
  const JobSpec* spec = nullptr;
  std::optional<WallTime> admitted_at;
  WallTime now{};
};

struct PreflightVerdict {
  enum class Outcome { kNone, kWait, kFailJob, kReissue } outcome = Outcome::kNone;
  Duration wait{};  // kWait
  // kFailJob, kReissue: the pod named in faults[] (a node at fault first, then the first
  // failure), its termination as recorded, its failed items and the message.
  const ObservedPod* culprit = nullptr;
  Termination shown;
  std::string items;
  std::string why;
  std::vector<NodeToCordon> cordon;         // kReissue
  std::vector<const ObservedPod*> touched;  // kReissue: every pod that failed pre-flight
};
PreflightVerdict CheckPreflight(const PreflightSnapshot& snapshot);

// Whether a failed pre-flight item isolates the node it ran on (cases 1 and 2 of docs/api.md's
// "The four cases": the node's hardware or environment at fault). Not for `config` (the job's
// settings are invalid) nor for `disk-size shm` when the replica's template mounts no volume at
// /dev/shm (Kubernetes' 64 MB default: the template's doing, the same on every node).
bool PreflightItemBlamesNode(const preflight::ItemResult& item, const ReplicaSpec& replica);

}  // namespace tpujob::policy
