// The TPUJob spec as the reconciler uses it: decoded from the cached JSON, defaults applied,
// and checked for everything the CRD schema cannot express.
//
// The API server already enforces the schema (types, enums, bounds, CEL rules), so most
// problems never reach the operator. What remains is reported, never thrown: ParseJobSpec()
// returns a message fit for the `Valid=False` condition, naming the field at fault.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cache/objects.h"

namespace tpujob::policy {

using Json = nlohmann::json;

// The annotation that is shorthand for spec.faultTolerance.maxJobRetries ("1".."3"; "0" = off).
inline constexpr std::string_view kJobRetryAnnotation = "fault-tolerance/job-retry-num";

enum class ReplicaType { kMaster, kWorker };
std::string_view ToString(ReplicaType type);   // "Master", "Worker"
std::string_view LowerName(ReplicaType type);  // "master", "worker" (used in pod names)

enum class SuccessPolicy { kMaster, kAllWorkers };
std::string_view ToString(SuccessPolicy policy);

struct ReplicaSpec {
  int32_t replicas = 0;
  Json template_ = Json::object();  // a PodTemplateSpec: {metadata, spec}
};

// How a non-zero exit of a worker's container is treated.
enum class ExitClass { kRetryable, kPermanent };
std::string_view ToString(ExitClass c);

struct ExitCodeRules {
  // Codes that fail the job at once. Default: 1 (an uncaught exception in the training program)
  // and 137 (SIGKILL, which the kernel's OOM killer sends).
  std::set<int32_t> permanent = {1, 137};
  // Codes that restart the worker in place. Default: every non-zero code not listed permanent;
  // listing a code here overrides a default permanent one.
  std::set<int32_t> retryable;
  // Container termination reasons that are permanent whatever the code ("OOMKilled").
  std::set<std::string, std::less<>> permanent_reasons = {"OOMKilled"};
};

// The default of spec.faultTolerance.faultAttributionSeconds: the node agent's immediate round
// after a worker's abnormal exit writes its verdict within about 2 s; 30 s also covers a
// node-problem-detector or a kubelet that reports a little later, and is small beside the
// hours a job that fails for good loses anyway.
inline constexpr int64_t kDefaultFaultAttributionSeconds = 30;

// spec.faultTolerance.recovery: what a re-issue of a multislice job replaces when its fault is
// confined to one slice (policy/lifecycle.h, docs/api.md#slice-recovery).
enum class Recovery {
  kSlice,  // only that slice gets a new node pool; the others restart on the nodes they hold
  kJob,    // every slice is stopped and the job is admitted again as a whole
};

// spec.faultTolerance.restart: how a retryable exit of a worker restarts the program
// (policy/lifecycle.h, docs/api.md#in-place-restart).
enum class RestartMode {
  kRecreate,  // the failed worker's pod is deleted and created again
  kInPlace,   // every pod stays; the program restarts in all of them behind a barrier
};

// The default of spec.faultTolerance.barrierTimeoutSeconds: how long an in-place restart waits
// for every pod to reach the barrier before it falls back to recreating the pods.
inline constexpr int64_t kDefaultBarrierTimeoutSeconds = 300;

// spec.faultTolerance.progress: how the supervisor in each worker tells a running program from a
// hung one (docs/api.md#progress). At least one source of progress is set.
inline constexpr int64_t kDefaultStallSeconds = 600;
inline constexpr int64_t kDefaultStartupSeconds = 1800;
inline constexpr int32_t kDefaultMaxStalls = 3;
struct ProgressSpec {
  // An RE2 expression with one capture group, the step number, matched against every line the
  // program writes to stdout and stderr; "" when the heartbeat file alone is the source.
  std::string log_pattern;
  // A file the program rewrites: its content a step number, or only its mtime; "" when unused.
  std::string heartbeat_file;
  // An RE2 expression with one capture group: a line that says a checkpoint of that step was
  // saved. "" when the job says nothing about its checkpoints.
  std::string checkpoint_pattern;
  // No new step for this long after the first one: stalled.
  int64_t stall_seconds = kDefaultStallSeconds;
  // No step at all for this long after the program started: stalled.
  int64_t startup_seconds = kDefaultStartupSeconds;
  // Stalls in a row, with no progress in between, after which the job fails (reason Stalled).
  int32_t max_stalls = kDefaultMaxStalls;
  friend bool operator==(const ProgressSpec&, const ProgressSpec&) = default;
};

// Checks a user's step pattern: it compiles under RE2 (linear-time matching, so no pattern can
// stall the supervisor) and has exactly one capture group. nullopt when fine, else the reason
// (RE2's own message for a pattern that does not compile), without the field's name.
std::optional<std::string> CheckStepPattern(std::string_view pattern);

// spec.faultTolerance.elastic.scaleUp: when a job running on fewer slices than spec.tpu.slices
// grows back once node pools are free again (docs/api.md#elastic-slices).
enum class ScaleUp {
  kImmediate,        // as soon as the queue has the pools
  kAfterCheckpoint,  // at the program's next checkpoint line once the pools are free
  kNever,            // stays on the slices it has until the job ends or is re-admitted whole
};
std::string_view ToString(ScaleUp s);

// The default of spec.faultTolerance.elastic.waitSeconds: how long a slice that lost its node
// pool waits for another before the job shrinks to the slices it holds. A shrink and the grow
// that follows cost every slice two restarts from a checkpoint (minutes each), so a pool that
// comes back within about that long is worth waiting for: a pool freed by a preemption already
// ordered (its pods have the 300 s maintenance grace period) or a spare that is being brought
// up. A pool that takes longer (a node repaired or recreated: tens of minutes) is not.
inline constexpr int64_t kDefaultElasticWaitSeconds = 300;

// spec.faultTolerance.elastic: how a job with spec.tpu.minSlices below spec.tpu.slices shrinks
// and grows (docs/api.md#elastic-slices).
struct ElasticSpec {
  int64_t wait_seconds = kDefaultElasticWaitSeconds;
  ScaleUp scale_up = ScaleUp::kImmediate;
  friend bool operator==(const ElasticSpec&, const ElasticSpec&) = default;
};

struct FaultTolerance {
  int32_t max_job_retries = 0;  // re-issues of the whole job; 0 = off
  Recovery recovery = Recovery::kSlice;
  RestartMode restart = RestartMode::kRecreate;
  int64_t barrier_timeout_seconds = kDefaultBarrierTimeoutSeconds;
  int32_t max_worker_restarts = 5;
  ExitCodeRules exit_codes;
  bool cordon_faulty_nodes = true;
  int64_t maintenance_grace_period_seconds = 300;
  // How long a permanent exit of a worker waits for its node's verdict before it fails the job
  // (policy/lifecycle.h: fault attribution). 0 = decide at once.
  int64_t fault_attribution_seconds = kDefaultFaultAttributionSeconds;
  // On when spec.faultTolerance.preflight.enabled says so, or, when the spec does not say, when
  // the annotation fault-tolerance/job-retry-num opts the job in (1..3): as in the source
  // requirements, turning on automatic re-issue turns on the environment check.
  bool preflight_enabled = false;
  std::string preflight_image;  // "" = the operator's own image (its --preflight-image flag)
  std::vector<std::string> preflight_checks;  // "dns", "disk", "ulimit", "accelerator"
  Json preflight_thresholds = Json::object();
  // Stall detection; unset: off.
  std::optional<ProgressSpec> progress;
  // Elastic slices (spec.tpu.minSlices below spec.tpu.slices); the defaults otherwise.
  ElasticSpec elastic;
};

// spec.tpu.slices bounds, and the most worker pods a job may have across its slices (see
// docs/api.md for why).
inline constexpr int32_t kMaxSlices = 64;
inline constexpr int64_t kMaxJobWorkers = 16384;

struct TpuSpec {
  // spec.tpu.type as written (e.g. "v5p-128"), "" when the spec names no type. When given, the
  // fields below that the spec leaves out are the type's (policy/tpu_types.h), and those it
  // gives must agree with it; worker.replicas likewise is the type's hosts per slice.
  std::string type;
  std::string accelerator;  // node label cloud.google.com/gke-tpu-accelerator
  std::string topology;     // node label cloud.google.com/gke-tpu-topology, e.g. "2x4"
  int32_t chips_per_worker = 0;
  // Identical slices of `topology`, each replicaSpecs.Worker.replicas hosts in a node pool of
  // its own, joined over the data-center network (multislice). 1: a single slice, as before.
  int32_t slices = 1;
  // The fewest slices the job may run on while a slice waits for a node pool (elastic slices,
  // docs/api.md#elastic-slices); = slices (the default, also 0 here): the job runs on all of
  // them or waits.
  int32_t min_slices = 0;
  // The slices the current attempt runs on, when fewer than `slices` (status.tpu.activeSlices of
  // an elastic job that shrank; set by policy::WithActiveSlices, never parsed); 0: all of them.
  int32_t active_slices = 0;
  // The name each slice id's pods carry, when not its own (status.tpu.sliceSlots of an elastic
  // job restarted in place, whose pods keep their names while their slice takes another id; set
  // by policy::DegradedSpec, never parsed); empty: every slice's own id.
  std::vector<int32_t> slots;
  // The workers use a high-speed network (RDMA, multi-NIC); its libraries need locked memory
  // and many open files, so pre-flight checks the ulimits, for such jobs only (docs/api.md,
  // tpu.highSpeedNetwork).
  bool high_speed_network = false;
  // The product of the topology's dimensions: chips in the slice.
  int64_t TopologyChips() const;
};

struct JobSpec {
  int32_t priority = 0;
  std::string priority_class_name;
  std::optional<int64_t> queue_timeout_seconds;  // absent: default (1800 for re-issued jobs)
  // Stop the job (pods deleted with the maintenance grace period) and keep it out of the queue
  // until cleared; not a failure, no retry used.
  bool suspend = false;
  // Whether a waiting job of higher priority may preempt this one (policy/preemption.h).
  bool preemptible = true;
  // Delete the job (and, through the garbage collector, its pods) this long after it finished.
  std::optional<int64_t> ttl_seconds_after_finished;
  // Fail the job (DeadlineExceeded) once this long has passed since status.startTime.
  std::optional<int64_t> active_deadline_seconds;
  TpuSpec tpu;
  std::optional<ReplicaSpec> master;
  ReplicaSpec worker;
  SuccessPolicy success_policy = SuccessPolicy::kMaster;
  FaultTolerance fault_tolerance;
  std::string checkpoint_path;

  // The slices the current attempt runs on: spec.tpu.slices, or fewer while an elastic job runs
  // degraded (slice ids 0..ActiveSlices()-1).
  int32_t ActiveSlices() const {
    return tpu.active_slices > 0 && tpu.active_slices < tpu.slices ? tpu.active_slices : tpu.slices;
  }
  // Pods of the replica type in one attempt: for workers, every active slice's (slices * hosts).
  // Worker pods are numbered job-wide: worker i is host i % HostsPerSlice() of slice
  // i / HostsPerSlice().
  int32_t Replicas(ReplicaType type) const {
    return type == ReplicaType::kMaster ? (master ? master->replicas : 0)
                                        : worker.replicas * ActiveSlices();
  }
  int32_t HostsPerSlice() const { return worker.replicas; }
  // Declared with several slices (an elastic job that shrank to one is still multislice: its pods
  // keep their names and MEGASCALE_* environment).
  bool Multislice() const { return tpu.slices > 1; }
  // Whether the job may run on fewer slices than spec.tpu.slices.
  bool Elastic() const { return tpu.min_slices > 0 && tpu.min_slices < tpu.slices; }
  int32_t SliceOf(int32_t worker_index) const {
    return worker.replicas > 0 ? worker_index / worker.replicas : 0;
  }
  int32_t HostOf(int32_t worker_index) const {
    return worker.replicas > 0 ? worker_index % worker.replicas : worker_index;
  }
  // The slice number in the names of slice `slice`'s pods (tpu.slots).
  int32_t SlotOf(int32_t slice) const {
    return slice >= 0 && static_cast<size_t>(slice) < tpu.slots.size()
               ? tpu.slots[static_cast<size_t>(slice)]
               : slice;
  }
  const ReplicaSpec* Replica(ReplicaType type) const {
    return type == ReplicaType::kMaster ? (master ? &*master : nullptr) : &worker;
  }
};

// spec.managedBy naming this operator (as batch/v1 Job's and JobSet's managedBy name theirs).
inline constexpr std::string_view kControllerName = "tpujob.dev/operator";

// Whether this operator runs the job: spec.managedBy unset, empty or kControllerName. Of any
// other controller's job the operator touches nothing, except the Kueue Workload of a job
// MultiKueue dispatches (policy/kueue.h, DecideDispatch).
bool ManagedByUs(const cache::TPUJobInfo& job);

// Decodes and validates a job. On error the message names the field and what is wrong, e.g.
// "annotation fault-tolerance/job-retry-num: \"five\" is not a number between 0 and 3".
std::expected<JobSpec, std::string> ParseJobSpec(const cache::TPUJobInfo& job);

// Whether the replica's pod template mounts a volume at `path` in its first container (the
// training program's), trailing slashes ignored.
bool MountsVolumeAt(const ReplicaSpec& replica, std::string_view path);

// Classifies the exit of one container. `code` 0 is never passed here.
ExitClass ClassifyExit(const ExitCodeRules& rules, int32_t code, std::string_view reason);

}  // namespace tpujob::policy
