// The types of the lifecycle decision, and nothing else: what Decide (policy/lifecycle.h) reads
// about one job (LifecycleInput, ObservedPod, PreemptOrder) and what it returns (Plan and the
// orders in it), with the constants the decision is tuned by. No function lives here, so every
// file of the decision (pod_observation, fault_rules, slice_recovery, in_place, deadlines,
// lifecycle) can include it without including each other.
//
// The contract of a Plan:
//   1. Plan::status is the whole status to write; the caller skips the write when it equals the
//      status it read.
//   2. The caller commits the status first, with the job's resourceVersion as a precondition,
//      and acts on the other orders only once it is written (policy/lifecycle.h).
//   3. Every order names what it acts on by name and uid, so an order decided on a stale cache
//      never acts on a newer object of the same name.
//   4. confirm_nodes, when not empty, makes the plan provisional: the caller reads those nodes
//      from the API server and decides again before committing anything.
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "cache/objects.h"
#include "policy/job_spec.h"
#include "policy/job_status.h"
#include "policy/node_health.h"

namespace tpujob::policy {

// A pod of the job, with the identity its labels carry.
struct ObservedPod {
  const cache::PodInfo* pod = nullptr;
  ReplicaType type = ReplicaType::kWorker;
  int32_t index = 0;
  int32_t attempt = 0;
};

// The queue's order to preempt a running job.
struct PreemptOrder {
  std::string by;            // the preemptor, "namespace/name" ("": Kueue evicted the job)
  std::string message;       // Preemption::victim_message
  int32_t attempt = 0;       // the attempt to preempt; an order for another one is ignored
  std::string head_message;  // Preemption::message, for the preemptor while the order stands
};

struct LifecycleInput {
  const cache::TPUJobInfo* job = nullptr;
  const std::expected<JobSpec, std::string>* spec = nullptr;
  // Pods controlled by this job (owner uid matches) whose labels identify them.
  std::vector<ObservedPod> pods;
  // Pods controlled by this job whose labels do not identify them: removed.
  std::vector<const cache::PodInfo*> strays;
  WallTime now{};
  // The health of a node, by name; empty: every node is healthy.
  std::function<NodeHealth(std::string_view node)> node_health;
  // Whether a node is unschedulable now; empty: never asked (lost cordons are not redone).
  std::function<bool(std::string_view node)> node_cordoned;
  // Whether the queue admits the current attempt now, and if not, why.
  bool admit = true;
  std::string not_admitted_reason = "Queued";
  std::string not_admitted_message = "waiting for capacity";
  // Admitted: per slice, the node pool to pin the slice's workers to ("" = no pinning).
  std::vector<std::string> admit_pools;
  // Admitted: what the queue adds to the Admitted condition's message, e.g. "after preempting
  // team/low (priority 1) in node pool p" ("" = nothing).
  std::string admitted_message;
  // Elastic slices, running degraded: the queue has these pools for the missing slices (one per
  // slice, for slices ActiveSlices()..spec.tpu.slices-1); empty: none (policy/elastic.h).
  std::vector<std::string> grow_pools;
  // ... and when it has none, why (the Degraded condition shows it).
  std::string grow_message;
  // Waiting: the job's place in the queue (status.queuePosition).
  std::optional<int32_t> queue_position;
  // The queue preempts this admitted job for a waiting job of higher priority
  // (policy/preemption.h): it is stopped like a maintenance event and queues again.
  std::optional<PreemptOrder> preempt;
  // Whether an attempt whose pods stay unschedulable for kUnschedulableRelease gives its
  // admission back (the operator's own queue counted capacity that was taken). false for a job
  // Kueue admits: its admission is quota, not capacity, and its pods wait for the scheduler
  // (Kueue's waitForPodsReady bounds that wait where it is configured).
  bool release_unschedulable = true;
  // Whether the queue timeout applies to a waiting attempt. false for a job Kueue evicted that
  // waits to be admitted again: a preempted job never times out waiting.
  bool queue_timeout = true;
  // Whether a fault confined to one slice of a multislice job may replace that slice alone
  // (spec.faultTolerance.recovery Slice). false for a job Kueue admits: its Workload is
  // admitted as a whole.
  bool replace_slices = true;
  // Nodes the cache shows cordoned by the operator on this job's evidence; merged into
  // status.cordonedNodes (which keeps them after they are uncordoned: it is the job's record).
  std::vector<std::string> cordoned_nodes;
};

// How long the pods of an attempt may take to finish their pre-flight checks once one of them
// failed, counted from the attempt's admission. A failure is acted on when every scheduled peer
// has a verdict or this has passed: the same item failing on many nodes at once is a
// configuration problem (the circuit breaker sees all of them together), not faulty hardware.
inline constexpr Duration kPreflightSettle = std::chrono::minutes(3);

// How long pods of an admitted attempt may stay unschedulable (the capacity the queue counted
// was taken by someone else in the meantime) before the admission is released and the job
// queues again at the head, counted from the admission.
inline constexpr Duration kUnschedulableRelease = std::chrono::seconds(30);

// Queue timeout of a re-issued attempt when spec.queueTimeoutSeconds is not set. A new job has
// none unless the spec sets one.
inline constexpr int64_t kDefaultReissueQueueTimeoutSeconds = 1800;

// Kubernetes' default grace period, for deletions where the pods' own (the maintenance grace
// period, up to an hour) would only delay what comes next: pods on a lost node (Ready Unknown),
// whose kubelet cannot deliver SIGTERM and which are force-deleted once it is over, and the pods
// of an attempt whose admission was released, which never ran as a whole gang.
inline constexpr int64_t kBriefGraceSeconds = 30;

// status.cordonedNodes keeps at most this many names.
inline constexpr size_t kMaxCordonedNodes = 64;

struct PodToCreate {
  ReplicaType type = ReplicaType::kWorker;
  int32_t index = 0;
  // Pin the pod to this node ("" = the scheduler chooses): a worker restarted after a retryable
  // exit goes back to the node it ran on while that node is healthy and schedulable.
  std::string node;
  // Bind the pod to `node` directly (spec.nodeName), without the scheduler: a worker of a slice
  // kept by slice recovery goes back to the node its slice holds.
  bool bind = false;
  // Keep off these nodes (a required node affinity NotIn): a worker the scheduler places keeps
  // off the nodes the workers of its slice this plan binds are bound to, which the scheduler
  // may not count yet, so that no host gets two workers.
  std::vector<std::string> avoid = {};
  friend bool operator==(const PodToCreate&, const PodToCreate&) = default;
};

struct PodToDelete {
  std::string name;
  std::string uid;  // sent as a precondition: never delete a newer pod of the same name
  std::optional<int64_t> grace_period_seconds;
  std::string why;  // for the log
};

struct EventToRecord {
  bool warning = false;
  std::string reason;
  std::string message;
};

// A node found faulty; the controller cordons it within its safety limits.
struct NodeToCordon {
  std::string node;
  std::string reason;  // the fault kind: "PreflightFailed", "NodeUnhealthy", "NodeLost"
  std::string message;
  std::string item;      // the failed pre-flight item(s), "" otherwise
  std::string evidence;  // identifies this finding; a node a person uncordoned is cordoned
                         // again only for different evidence
};

// In-place restart: the annotations to set on a pod (policy/in_place.h). Both numbers are
// program generations (status.inPlace.generation), not the job's metadata.generation.
struct PodToAnnotate {
  std::string name;
  std::string uid;
  int32_t generation = 0;  // supervisor::kGenerationAnnotation: the generation to run; 0: left
  std::optional<int32_t> barrier;  // supervisor::kBarrierAnnotation; unset: left as it is
  // Slice recovery in place: the pod of a kept slice moves to this attempt (its label).
  std::optional<int32_t> attempt;
  // cache::kHardwareCheckAnnotation: asks the node agent for a hardware round (a stall).
  std::optional<std::string> hardware_check;
  // supervisor::kProgramEnvAnnotation: the variables the replica's next generation runs with,
  // those of a pod created now (an elastic job restarted in place on another slice count).
  std::optional<std::pair<ReplicaType, int32_t>> program_env;
  // An elastic job's worker whose slice takes another id in place: its index labels (replica
  // and slice) from now on; the pod keeps its name (status.tpu.sliceSlots).
  std::optional<int32_t> index;
};

struct Plan {
  JobStatus status;  // the status to write; the caller skips the write when it is unchanged
  bool ensure_service = false;
  std::vector<PodToCreate> create;  // pods of status.attempt to create
  std::vector<PodToDelete> remove;
  std::vector<PodToAnnotate> annotate;
  std::vector<EventToRecord> events;
  std::vector<NodeToCordon> cordon;
  // Decide again after this long even if nothing changes (a pre-flight verdict still awaited,
  // a lost node's pod whose grace period runs out).
  std::optional<Duration> requeue_after;
  // The job finished longer than spec.ttlSecondsAfterFinished ago: delete it (its pods go with
  // it through the garbage collector).
  bool delete_job = false;
  // Nodes whose health, as input.node_health gave it, decided something final: a permanent exit
  // fails the job because its node was not found faulty within the fault attribution window
  // (that node first, then the nodes of the job's other failed pods). Before committing the plan,
  // the caller reads each from the API server (not a cache) and decides again with node_health
  // answering from what it read; when a read fails, it commits nothing and tries again later.
  std::vector<std::string> confirm_nodes;
};

}  // namespace tpujob::policy
