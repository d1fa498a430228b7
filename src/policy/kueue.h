// Kueue interop as pure functions: how a TPUJob maps onto the Kueue Workload it is admitted
// through, what Kueue's answer on that Workload means for the job, and the Workload status
// writes Kueue expects from the controller of a job kind it does not know
// (integrations.externalFrameworks). No I/O, no clock: the caller passes snapshots and `now`.
//
// The protocol, as Kueue's own job integrations follow it:
//   - A job labelled kueue.x-k8s.io/queue-name creates a Workload (owned by the job, so the
//     garbage collector deletes it with the job) describing its pod sets, and starts nothing
//     until the Workload is admitted: conditions QuotaReserved=True and Admitted=True, with
//     status.admission naming the ResourceFlavor assigned to each pod set.
//   - Kueue stops an admitted job by setting Evicted=True (preemption, a ClusterQueue stopped,
//     spec.active false, a pods-ready timeout, node failures). The job stops its pods, and once
//     they are gone gives the quota back: status.admission cleared, QuotaReserved=False,
//     Admitted=False, and Requeued=True when the eviction was a preemption or node failures
//     (the reasons after which Kueue queues the Workload again at once).
//   - While admitted, the job keeps the Workload's PodsReady condition: True (Started, or
//     Recovered after a restart) while every pod is ready, False (WaitForStart, or
//     WaitForRecovery) otherwise; Kueue's waitForPodsReady evicts a Workload that stays without
//     it too long.
//   - A finished job sets Finished=True; Kueue then stops counting its quota.
//
// What this operator decides on top (docs/kueue.md):
//   - A re-issue after a fault keeps the admission: the Workload's quota still stands, the next
//     attempt starts on the same flavors without queueing in Kueue again. Kueue never sees the
//     re-issue; its usage does not change.
//   - The job's own queue timeout (spec.queueTimeoutSeconds, 30 minutes after a re-issue) counts
//     the time in phase Queued, whoever admits: waiting on Kueue's quota counts. A job evicted
//     by Kueue is preempted, and a preempted job never times out waiting (as in the operator's
//     own queue).
//   - spec.suspend sets the Workload's spec.active to false (and marks it so), so Kueue neither
//     admits it nor counts it; clearing suspend sets it back. A Workload deactivated by someone
//     else (Kueue after too many requeues, an administrator) is left inactive: the job waits.
//   - An admitted job whose Workload is gone, or no longer holds quota, is stopped as if evicted:
//     it runs only on quota.
//   - A waiting job whose pod sets or LocalQueue changed gets a new Workload (pod sets are
//     immutable in Kueue).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/clock.h"
#include "cache/objects.h"
#include "policy/job_spec.h"
#include "policy/job_status.h"

namespace tpujob::policy::kueue {

using Json = nlohmann::json;

// The label naming the LocalQueue a job is submitted to.
inline constexpr std::string_view kQueueNameLabel = "kueue.x-k8s.io/queue-name";
// The label Kueue's own integrations put on a Workload: the uid of the job it is for.
inline constexpr std::string_view kJobUidLabel = "kueue.x-k8s.io/job-uid";
// MultiKueue: spec.managedBy naming it marks the job a manager cluster only queues; MultiKueue
// runs a copy (without managedBy) in the worker cluster that admitted it, labelled with the name
// of the Workload MultiKueue created for it there, and copies the copy's status back.
inline constexpr std::string_view kMultiKueueControllerName = "kueue.x-k8s.io/multikueue";
inline constexpr std::string_view kPrebuiltWorkloadLabel = "kueue.x-k8s.io/prebuilt-workload-name";
// The reason of the Finished condition Kueue's own integrations give a prebuilt Workload that
// does not describe its job.
inline constexpr std::string_view kFinishedOutOfSync = "OutOfSync";
inline constexpr std::string_view kApiVersion = "kueue.x-k8s.io/v1beta2";
// A Workload has at most this many pod sets (the CRD's limit).
inline constexpr int32_t kMaxPodSets = 8;
// Annotations the operator puts on its Workloads: a digest of the pod sets and LocalQueue they
// were created for, and the mark of a deactivation it made for spec.suspend.
inline constexpr std::string_view kSpecDigestAnnotation = "tpujob.dev/workload-spec-digest";
inline constexpr std::string_view kSuspendedAnnotation = "tpujob.dev/deactivated-for-suspend";

// The digest of a Workload spec's pod sets and queue name (what a new Workload is needed for).
std::string SpecDigest(const Json& workload_spec);

// The LocalQueue the job names ("" when it names none: the operator's own queue admits it).
std::string QueueName(const cache::TPUJobInfo& job);

// Whether the job's spec.managedBy names MultiKueue (the manager cluster's side).
bool DispatchedByMultiKueue(const cache::TPUJobInfo& job);

// The Workload MultiKueue made for the job in this worker cluster (kPrebuiltWorkloadLabel; ""
// when it has none: the operator creates the job's Workload itself).
std::string PrebuiltWorkloadName(const cache::TPUJobInfo& job);

// "tpujob-<job>-<5 hex digits of the job's uid>", at most 253 characters: one Workload name per
// job incarnation, so a job deleted and created again under its name never takes the old
// Workload (still being garbage-collected) for its own.
std::string WorkloadName(std::string_view job_name, std::string_view job_uid);

// The pod set of a replica: "master"; for workers, "workers" for a single slice, "slice-<i>"
// for slice i of a multislice job, or "workers" again (every slice together, one flavor) when
// the job has more slices than a Workload has room for pod sets.
std::string PodSetName(const JobSpec& spec, ReplicaType type, int32_t index);

// What the job's Workload says, read from its spec and status.
struct WorkloadState {
  std::string name;
  std::string owner_uid;  // the controlling owner's uid
  int64_t generation = 0;
  bool active = true;                    // spec.active
  bool deactivated_for_suspend = false;  // kSuspendedAnnotation
  std::string spec_digest;               // kSpecDigestAnnotation
  bool quota_reserved = false;           // QuotaReserved=True
  bool admitted = false;                 // Admitted=True
  bool has_admission = false;            // status.admission is set
  bool evicted = false;                  // Evicted=True
  std::string evicted_reason;
  std::string evicted_message;
  bool finished = false;  // Finished=True
  std::string finished_reason;
  std::string finished_message;
  std::string cluster_queue;       // status.admission.clusterQueue
  std::string pending_message;     // QuotaReserved=False's message: why Kueue has not admitted it
  std::optional<bool> pods_ready;  // PodsReady, when present
  std::string pods_ready_reason;
  // status.admission.podSetAssignments: pod set -> resource -> ResourceFlavor.
  std::map<std::string, std::map<std::string, std::string>> flavors;

  bool HoldsQuota() const { return quota_reserved || has_admission; }
};
WorkloadState ReadWorkload(const cache::WorkloadInfo& workload);

// What a ResourceFlavor adds to the pods placed on it: its spec.nodeLabels as node selectors
// and its spec.tolerations (tolerations of its spec.nodeTaints are the user's to write, as with
// Kueue's own integrations).
struct Placement {
  std::map<std::string, std::string> node_labels;
  Json tolerations = Json::array();
  friend bool operator==(const Placement&, const Placement&) = default;
};
Placement FlavorPlacement(const Json& resource_flavor);

struct KueueInput {
  const WorkloadState* workload = nullptr;  // nullptr: the cache has none for this job
  const JobStatus* status = nullptr;        // the job's last written status
  const JobSpec* spec = nullptr;            // nullptr: the spec is invalid
  bool pods_left = false;                   // a pod of the job exists (deleting or not)
  // SpecDigest of the Workload the job would get now ("": not computed, never stale).
  std::string wanted_digest;
  // The prebuilt Workload's name (PrebuiltWorkloadName): the job uses that one and never creates
  // or replaces its own.
  std::string prebuilt;
};

struct KueueVerdict {
  bool create_workload = false;
  // Whether the queued attempt may start; if not, the Admitted condition's reason and message.
  bool admit = false;
  std::string reason;
  std::string message;
  // Kueue evicted the admitted attempt: stop it like a preemption, with this message.
  std::optional<std::string> evict;
  // The attempt waits for Kueue to admit it again after an eviction: like a preempted job in the
  // operator's own queue, it never times out waiting.
  bool readmission = false;
  bool release_quota = false;      // write ReleaseQuotaPatch
  std::optional<bool> finish;      // Finished=True (true: reason Succeeded, false: Failed)
  std::optional<bool> set_active;  // patch spec.active to this (and kSuspendedAnnotation)
  bool recreate = false;           // delete the Workload (a new one follows): it is stale
  // A prebuilt Workload no job controls yet: make the job its controlling owner (and set
  // kJobUidLabel), as Kueue's own integrations adopt one; nothing else is decided before.
  bool adopt = false;
  // A prebuilt Workload that does not describe the job: Finished=True, reason
  // kFinishedOutOfSync (Kueue's answer; MultiKueue then finishes the manager's Workload too,
  // and the manager's job fails: see DispatchStatus).
  bool out_of_sync = false;
  // Write PodsReady with this status and reason.
  std::optional<bool> pods_ready;
  std::string pods_ready_reason;
};
KueueVerdict DecideKueue(const KueueInput& in);

// The manager cluster's side of MultiKueue, for a job whose spec.managedBy names it: the job
// queues in Kueue through its Workload as any other, but nothing of it runs here. MultiKueue
// runs the copy in a worker cluster and writes that copy's status onto this job (in.status), and
// stops the copy when this Workload loses its quota. So the operator only creates the Workload,
// keeps spec.active in step with spec.suspend, replaces a stale one that holds no quota, gives
// the quota back after an eviction once the copied status shows no running attempt (MultiKueue
// deactivates the copy in the worker, whose pods stop with their grace period; at once when no
// copy runs) and marks it Finished once the copied status is terminal. Never admit, evict or
// pods_ready; in.pods_left is ignored.
KueueVerdict DecideDispatch(const KueueInput& in);

// What a manager cluster's job reads while no copy of it runs in a worker (before its first
// dispatch, and after an eviction, when MultiKueue has deleted the copy and copies no status
// until it dispatches the job again): phase Queued (Suspended with spec.suspend), condition
// Admitted=False with the reason and message of DecideDispatch's verdict, the rest of the last
// copied status kept (attempts, faults, goodput). Failed when the Workload is finished and the
// copied status is not (Kueue admits it no more). std::nullopt while the Workload is admitted,
// or holds quota while the copied status shows a running attempt (the copy's status is
// MultiKueue's to write), once the job is finished, or when the job reads so already.
std::optional<JobStatus> DispatchStatus(const KueueInput& in, const KueueVerdict& verdict,
                                        int64_t generation, WallTime now);

// The Workload status merge patches (with the Workload's resourceVersion as a precondition, as
// `status` was read at it). Conditions are replaced as a whole list, each changed one keeping
// Kueue's metav1.Condition conventions (lastTransitionTime moves only when the status does).
// ReleaseQuotaPatch: the quota given back after an eviction, as described above.
Json ReleaseQuotaPatch(const WorkloadState& workload, const Json& status,
                       std::string_view resource_version, WallTime now);
// ConditionPatch: condition `type` set (Finished=True with reason Succeeded or Failed;
// PodsReady), the other conditions kept.
Json ConditionPatch(const WorkloadState& workload, const Json& status,
                    std::string_view resource_version, std::string_view type, bool value,
                    std::string_view reason, std::string_view message, WallTime now);

}  // namespace tpujob::policy::kueue
