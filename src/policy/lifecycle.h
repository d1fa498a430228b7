// The TPUJob lifecycle as a pure function: from a snapshot of one job (its spec, its last
// written status and the pods it owns) to a Plan (the status to write, pods to create and
// delete, Events to record). No I/O and no clock: the caller passes `now`.
//
// The controller commits a Plan in a fixed order: first the status (with the job's
// resourceVersion as a precondition, so a decision taken on a stale cache is refused by the
// API server), then Events, deletions and creations. Every decision that must be counted once
// (a worker restart, a re-issue) is recorded in the status before the action that follows
// from it, and Decide() recognises an action already taken (the failed pod already counted,
// the old attempt's pods already deleting), so the operator can be killed between any two
// requests and converge without duplicating anything.
//
// Fault attribution: a dying chip usually kills the training program before any health check
// flags its node. A worker's exit that the exit-code rules call permanent (not OOMKilled, whose
// cause the kernel names) therefore fails the job only once its node has had
// spec.faultTolerance.faultAttributionSeconds, counted from the container's finishedAt, to be
// found faulty: a node found unhealthy, NotReady, lost or deleted in that time makes it the
// hardware case of the fault table (cordon, re-issue against maxJobRetries, the fault record
// naming the exit and the node's verdict), a node under maintenance a disruption (re-issue, no
// retry used); a node still healthy at the end fails the job with PermanentError, the message
// saying how long it waited. That last verdict is final, so it is not taken on the cache alone:
// the plan names the node in confirm_nodes, and the caller reads it from the API server and
// decides again with what it read (a node watch that broke and could not be opened again
// would otherwise hide a verdict written inside the window). Meanwhile nothing else waits: the
// other workers run, retryable exits restart at once; only success and preemption are not decided
// while a verdict is due. The deadline comes from the pod's status, so an operator restarted inside
// the window decides the same, once. A terminated container without finishedAt is decided at once.
//
// Slice recovery (spec.faultTolerance.recovery Slice, the default): a multislice job whose fault
// is confined to one slice (every pod it names is a worker of that slice: a faulty, lost or
// maintained node, a worker out of restarts, failed pre-flight checks) is re-issued as one
// attempt like any other (one retry used, or none for maintenance; the fault record, action
// ReplaceSlice, names the slice), but only that slice goes back to the queue: the attempt waits
// (Queued, first in line, under the re-issue's queue timeout) for a node pool for it, none of
// the pools the other slices hold, which stay in status.nodePools and reserved for the job. Once
// a pool is found, every pod of the new attempt is created at once: the replaced slice's in its
// new pool, the kept slices' bound to the nodes they ran on (status.sliceRecovery.nodes; by
// scheduler in their pool when that node is no longer healthy and schedulable). Pod names, slice
// ids and MEGASCALE_* are those of the previous attempt. A fault touching several slices or a
// master, a job Kueue admits, and recovery Job re-issue the whole job.
//
// Phases: Queued -> Starting -> Running -> Succeeded | Failed, with Restarting while a worker
// is restarted in place (same attempt) or while the previous attempt's pods are removed before
// a re-issued attempt queues again. A new attempt's pods are created only once no pod of an
// earlier attempt is left; pod names are deterministic (<job>-worker-<i>), so the API server
// itself also refuses a second pod for one worker id.
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "cache/objects.h"
#include "policy/job_spec.h"
#include "policy/job_status.h"
#include "policy/node_health.h"
#include "preflight/report.h"

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
  // Whether the queue admits the current attempt now, and if not, why.
  // The health of a node, by name; empty: every node is healthy.
  std::function<NodeHealth(std::string_view node)> node_health;
  // Whether a node is unschedulable now; empty: never asked (lost cordons are not redone).
  std::function<bool(std::string_view node)> node_cordoned;
  bool admit = true;
  std::string not_admitted_reason = "Queued";
  std::string not_admitted_message = "waiting for capacity";
  // Admitted: per slice, the node pool to pin the slice's workers to ("" = no pinning).
  // Waiting: the job's place in the queue (status.queuePosition).
  std::vector<std::string> admit_pools;
  // Admitted: what the queue adds to the Admitted condition's message, e.g. "after preempting
  // team/low (priority 1) in node pool p" ("" = nothing).
  std::string admitted_message;
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
  std::string reason;  // "PreflightFailed", "NodeUnhealthy", "NodeLost"
  std::string message;
  std::string item;      // the failed pre-flight item(s), "" otherwise
  std::string evidence;  // identifies this finding; a node a person uncordoned is cordoned
                         // again only for different evidence
};

// In-place restart: the annotations to set on a pod (policy/lifecycle.h ObserveProgram).
struct PodToAnnotate {
  std::string name;
  std::string uid;
  int32_t generation = 0;
  std::optional<int32_t> barrier;  // unset: left as it is
  // Slice recovery in place: the pod of a kept slice moves to this attempt (its label).
  std::optional<int32_t> attempt;
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

Plan Decide(const LifecycleInput& input);

// When a finished job is to be deleted: spec.ttlSecondsAfterFinished after status.completionTime
// (counted from the end of its whole second, never early); std::nullopt without either.
std::optional<WallTime> FinishedJobExpiry(const JobSpec& spec, const JobStatus& status);

// What a pod's status says about the replica it runs.
enum class PodState { kPending, kReady, kSucceeded, kFailed };
struct Termination {
  std::string container;  // empty when the pod failed without a container exit (eviction)
  bool init_container = false;
  std::optional<int32_t> exit_code;
  std::string reason;
  std::string message;
  std::optional<WallTime> finished_at;  // the container's finishedAt
};
PodState ObservePod(const cache::PodInfo& pod, Termination* termination);

// In-place restart (spec.faultTolerance.restart InPlace; docs/architecture.md#in-place-restart).
// The first container runs the program under tpujob-supervise in a pod with restartPolicy
// OnFailure. The operator tells the supervisor through two annotations (delivered by a
// downward API file): cache::kGenerationAnnotation, the generation the pod is to run (a higher
// one than it runs stops the program, and the supervisor exits so the kubelet restarts the
// container), and cache::kBarrierAnnotation, the generation that may start. The supervisor
// answers through what the kubelet reports anyway: the container's state, its exit code and its
// termination message, which it keeps up to date ({"state":"running","generation":3}, ...).
// What the first container says about the program.
struct ProgramObservation {
  // The last generation the container's supervisor started (or, at the barrier, last ran).
  int32_t last_generation = 0;
  int32_t running_generation = 0;  // the generation the program runs now; 0: none
  bool at_barrier = false;  // the supervisor runs and waits for a generation above last_generation
  bool succeeded = false;   // the program exited 0
  // The program of this generation exited non-zero (or its supervisor died while it ran).
  std::optional<int32_t> failed_generation;
  Termination failure;
};
ProgramObservation ObserveProgram(const cache::PodInfo& pod);
// ObservePod for a pod of an in-place job whose program is at `generation`: kFailed only for a
// failure of that generation (an earlier one was acted on already), kReady only while the
// program of that generation runs.
PodState ObserveInPlacePod(const cache::PodInfo& pod, int32_t generation, Termination* termination);

// The pre-flight init container's name, and its exit codes (see docs/preflight.md).
inline constexpr std::string_view kPreflightContainer = "preflight";
inline constexpr int32_t kPreflightNodeFault = preflight::kExitNodeFault;
inline constexpr int32_t kPreflightConfigFault = preflight::kExitConfigFault;

// Whether a failed pre-flight item isolates the node it ran on (the source requirements' cases
// 1 and 2: hardware or environment of the node at fault). Not for `config` (the job's settings
// are invalid) nor for `disk-size shm` when the replica's template mounts no volume at
// /dev/shm (Kubernetes' 64 MB default: the template's doing, the same on every node).
bool PreflightItemBlamesNode(const preflight::ItemResult& item, const ReplicaSpec& replica);

// "Worker-3": the key of workerRestarts and of log lines.
std::string ReplicaKey(ReplicaType type, int32_t index);

}  // namespace tpujob::policy
