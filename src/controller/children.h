// The objects the operator creates for a TPUJob, built as JSON by pure functions: one pod per
// replica and attempt, and the headless Service that gives the pods stable DNS names.
//
// Identity lives in names and labels, never in memory, so the reconciler can recognise its
// children after a restart: a pod is named `<job>-<replica>-<index>` (the same name in every
// attempt, so two pods with one worker id cannot coexist) and labelled with the job, replica
// type, index and attempt. IdentifyPod() reads the labels back from the cache.
//
// Pods get what TPU programs expect from their environment: the accelerator and topology node
// selectors, the google.com/tpu request, the TPU taint's toleration, and the variables JAX and
// the older managed service's programs read (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, TPU_CONFIG;
// for a multislice job also MEGASCALE_COORDINATOR_ADDRESS, MEGASCALE_NUM_SLICES,
// MEGASCALE_SLICE_ID, MEGASCALE_PORT). See docs/api.md for each variable.
// Everything else in the user's pod template is kept as written.
//
// All functions are pure and thread-safe. They never throw: a template field of the wrong type
// is replaced where the operator must write into it and otherwise left alone, for the API
// server to judge.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "cache/objects.h"
#include "policy/job_spec.h"
#include "policy/kueue.h"
#include "policy/queue.h"

namespace tpujob::controller {

using Json = nlohmann::json;

// Labels on every pod the operator creates (cache::kJobNameLabel as well).
inline constexpr std::string_view kReplicaTypeLabel = "tpujob.dev/replica-type";    // "Master"
inline constexpr std::string_view kReplicaIndexLabel = "tpujob.dev/replica-index";  // "0".."n-1"
inline constexpr std::string_view kAttemptLabel = "tpujob.dev/attempt";             // "1", "2"
// Workers of a multislice job: the slice ("0".."slices-1"). kReplicaIndexLabel stays the
// job-wide worker index (slice * hosts per slice + TPU_WORKER_ID).
inline constexpr std::string_view kSliceIndexLabel = "tpujob.dev/slice-index";
// Worker pods select TPU nodes on the labels GKE puts on them: policy::kAcceleratorLabel and
// policy::kTopologyLabel.
// The taint GKE puts on TPU nodes so that only pods asking for TPUs land there: it is named
// after the resource.
inline constexpr std::string_view kTpuTaintKey = cache::kTpuResource;
// The user and group the pre-flight init container runs as: the operator image's USER.
inline constexpr int64_t kPreflightUser = 65532;
// The owner reference's API version and kind.
inline constexpr std::string_view kTPUJobApiVersion = "tpujob.dev/v1alpha1";
inline constexpr std::string_view kTPUJobKind = "TPUJob";

// "<job>-worker-3", "<job>-master-0". Also the pod's hostname.
std::string PodName(std::string_view job, policy::ReplicaType type, int32_t index);
// The name of worker `index` (job-wide) of a job with `spec`: as above for a single slice; for
// a multislice job "<job>-worker-<slice>-<host>" (worker 7 of 2 slices of 4 hosts:
// "<job>-worker-1-3"). The master is "<job>-master-0" either way.
std::string PodName(std::string_view job, const policy::JobSpec& spec, policy::ReplicaType type,
                    int32_t index);
// The headless Service: named after the job, so pods resolve as "<pod>.<job>".
std::string ServiceName(std::string_view job);
// "<job>-worker-0.<job>,<job>-worker-1.<job>,...": the hostnames of one slice's worker pods
// under the headless Service, resolvable from any pod of the namespace through its DNS search
// path.
std::string WorkerHostnames(std::string_view job, const policy::JobSpec& spec, int32_t slice = 0);
// A multislice job's coordinator, slice 0's worker 0: "<job>-worker-0-0.<job>".
std::string CoordinatorAddress(std::string_view job, const policy::JobSpec& spec);
// The port libtpu's multislice runtime listens on (MEGASCALE_PORT): its default, the one the GKE
// multislice guides open.
inline constexpr int32_t kMegascalePort = 8080;

// The supervisor's progress metrics (supervisor/progress_metrics.h): the default port and the
// name of the container port the chart's PodMonitor scrapes.
inline constexpr int32_t kDefaultProgressMetricsPort = 9464;
inline constexpr std::string_view kProgressMetricsPortName = "tpujob-progress";

struct PodBuildOptions {
  // The image of the pre-flight init container when the job names none: the operator's own.
  std::string preflight_image = "tpujob-operator:latest";
  // Workers avoid nodes whose announced maintenance (policy::kScheduledMaintenanceLabel, Unix
  // seconds) starts before this: a required node affinity (DoesNotExist or Gt). Unset: none.
  std::optional<int64_t> avoid_maintenance_before_unix;
  // Workers keep off these nodes (a required node affinity on metadata.name): the nodes of the
  // job's slice shape found unhealthy when the pods are built, and the nodes whose cordon could
  // not be written yet. The cordon does the same, but it may be missing: a node a person
  // uncordoned, --no-cordon, cordonFaultyNodes: false, a cordon write the API server refused,
  // or an operator stopped between deciding a re-issue and cordoning.
  std::vector<std::string> avoid_nodes;
  // Kueue's admission of the job's Workload (policy/kueue.h), by pod set: the node labels (as
  // node selectors) and tolerations of the ResourceFlavors assigned to it.
  std::map<std::string, policy::kueue::Placement> kueue_placement;
  // Workers of one slice share a node pool (cloud.google.com/gke-nodepool), by a required pod
  // affinity to the slice's other workers of the attempt: for an admission that names no pool
  // (Kueue's), which the ICI links of a slice still need. Unused when the pod is pinned to a pool.
  bool same_pool_per_slice = false;
  // In-place restart (spec.faultTolerance.restart InPlace): the program generation the pod is
  // created for, and whether its barrier is open (the program starts at once) or closed (it
  // waits for the pods being restarted). 0: none, when BuildPod is not making a pod to create.
  int32_t generation = 0;
  bool barrier_open = true;
  // Progress tracking (spec.faultTolerance.progress): the port of the supervisor's metrics
  // endpoint (supervisor::kProgressMetricsPortEnv), declared on the program's container as
  // kProgressMetricsPortName unless the container declares that port number already. 0: none.
  int32_t progress_metrics_port = kDefaultProgressMetricsPort;
};

// In-place restart: the supervisor, put into a shared emptyDir by an init container running the
// operator's image, and the downward API file through which it reads the pod's annotations.
inline constexpr std::string_view kSupervisorContainer = "tpujob-supervisor";
inline constexpr std::string_view kSupervisorVolume = "tpujob-supervisor";
inline constexpr std::string_view kSupervisorDir = "/tpujob";
inline constexpr std::string_view kSupervisorBinary = "/tpujob/bin/tpujob-supervise";
inline constexpr std::string_view kPodInfoVolume = "tpujob-podinfo";
inline constexpr std::string_view kPodInfoDir = "/tpujob/podinfo";

// The cache path the pre-flight `disk-size cache` item measures (its default).
inline constexpr std::string_view kPreflightCachePath = "/cache";

// The pre-flight checks for a replica (TPUJOB_PREFLIGHT_CHECKS). Workers: the job's list when
// it gives one, else dns, disk and accelerator, plus ulimit for a job on a high-speed network
// (spec.tpu.highSpeedNetwork). The master (no TPU): the job's list without accelerator, or dns.
std::string PreflightChecks(const policy::JobSpec& spec, policy::ReplicaType type);

// The pod for replica `type` #`index` of `attempt` (1, 2, ...). `spec.Replica(type)` must be
// set; its template (metadata and spec) is the starting point. On top of it:
//   - metadata: name, namespace, labels (template's plus the operator's, which win),
//     annotations (template's), the job as controlling owner;
//   - spec.restartPolicy Never (the operator restarts workers itself so it can count restarts),
//     hostname = pod name, subdomain = the Service;
//   - workers: accelerator/topology node selectors (other selectors kept), a toleration of the
//     google.com/tpu taint unless one already covers it, and google.com/tpu = chipsPerWorker
//     in the first container's requests and limits (other resources kept);
//   - workers of a job with pre-flight enabled: a first init container "preflight" running
//     `tpujob-operator preflight` with the job's thresholds as TPUJOB_PREFLIGHT_* variables,
//     the first container's volume mounts (so it checks what the program will see), the
//     same google.com/tpu request (so the devices are visible to it) and a securityContext
//     that meets the Pod Security "restricted" profile (non-root user kPreflightUser, no
//     privilege escalation, capabilities dropped, RuntimeDefault seccomp, read-only root file
//     system); the template's own containers and pod securityContext are left as written;
//   - in every container and init container, the operator's environment variables first (so
//     the template's own variables can refer to them as $(VAR)), replacing any template
//     variable of the same name.
//   - workers of an attempt pinned to a node pool (`node_pool` not empty: the pool of the
//     worker's slice): a node selector on cloud.google.com/gke-nodepool;
//   - a replica restarted on its node (`node` not empty, policy::PodToCreate::node): a required
//     node affinity `metadata.name In [node]` in every term (the scheduler still checks that
//     it fits, and the pod waits rather than land elsewhere);
//   - a worker of a slice kept by slice recovery (`bind`, policy::PodToCreate::bind): also
//     spec.nodeName = `node`, so the pod goes back to its node without the scheduler (the
//     queue kept the node's chips reserved for it);
//   - in-place restart (faultTolerance.restart InPlace): restartPolicy OnFailure; an init
//     container kSupervisorContainer (the pre-flight image, the same securityContext) that
//     installs tpujob-supervise into the emptyDir kSupervisorVolume; the first container's
//     command becomes `kSupervisorBinary -- <command>` with both volumes mounted (the downward
//     API file of the pod's annotations at kPodInfoDir) and TPUJOB_SUPERVISOR_GRACE_SECONDS, the
//     pod's grace period; annotations cache::kGenerationAnnotation (options.generation) and,
//     when options.barrier_open, cache::kBarrierAnnotation;
//   - stall detection (faultTolerance.progress): the same supervisor with the progress settings
//     in its environment (supervisor/protocol.h); under restart Recreate it runs the program
//     once (TPUJOB_SUPERVISOR_MODE once): no barrier, no annotations file, restartPolicy kept;
//   - terminationGracePeriodSeconds = faultTolerance.maintenanceGracePeriodSeconds unless the
//     template sets its own, so a drain, an eviction or a deletion by anyone gives the program
//     the same time to checkpoint after SIGTERM as the operator's own deletions.
Json BuildPod(const cache::TPUJobInfo& job, const policy::JobSpec& spec, policy::ReplicaType type,
              int32_t index, int32_t attempt, const PodBuildOptions& options = {},
              const std::string& node_pool = "", const std::string& node = "", bool bind = false);

// supervisor::kProgramEnvAnnotation for a pod that stays across a change of the job's slice
// count (an elastic job restarted in place): the operator's variables (those BuildPod gives the
// replica's containers, with a value) for `spec` and `attempt`, one NAME=VALUE a line.
std::string ProgramEnvAnnotation(const cache::TPUJobInfo& job, const policy::JobSpec& spec,
                                 policy::ReplicaType type, int32_t index, int32_t attempt);

// The Kueue Workload through which Kueue admits a job naming a LocalQueue (policy/kueue.h):
// named policy::kueue::WorkloadName, owned by the job (the garbage collector deletes it with
// the job), labelled with the job's name and kueue.x-k8s.io/job-uid, in the job's LocalQueue,
// with `priority` (spec.priorityClassName's value, or spec.priority) and the class as a
// priorityClassRef. One pod set per policy::kueue::PodSetName: its pod count, and as template
// the pod spec BuildPod writes for its first pod (node selectors, tolerations, affinity, and
// the containers' and init containers' names, images and resources: the google.com/tpu
// requests, the pre-flight container's included) without what Kueue does not read.
Json BuildWorkload(const cache::TPUJobInfo& job, const policy::JobSpec& spec, int32_t priority);

// The owner reference the job's pods, Service and Workload carry: the job, as their controller,
// blocking its own deletion until the garbage collector has deleted them.
Json OwnerReference(const cache::TPUJobInfo& job);

// The headless Service (clusterIP None, no ports) selecting every pod of the job, publishing
// addresses of pods that are not ready yet: peers must resolve each other while they start.
Json BuildService(const cache::TPUJobInfo& job);

// What the labels set by BuildPod say about a cached pod. std::nullopt when a label is
// missing or is not what BuildPod writes (a type other than Master/Worker, an index or attempt
// that is not a canonical decimal number, an attempt below 1).
struct PodIdentity {
  policy::ReplicaType type = policy::ReplicaType::kWorker;
  int32_t index = 0;
  int32_t attempt = 0;
  friend bool operator==(const PodIdentity&, const PodIdentity&) = default;
};
std::optional<PodIdentity> IdentifyPod(const cache::PodInfo& pod);

}  // namespace tpujob::controller
