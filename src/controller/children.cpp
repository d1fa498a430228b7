#include "controller/children.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <utility>
#include <vector>

#include "base/strings.h"
#include "cache/store.h"
#include "kube/json.h"
#include "policy/lifecycle.h"
#include "supervisor/protocol.h"

namespace tpujob::controller {
namespace {

using kube::StringField;
using policy::ReplicaType;

// object[key] as an object, replacing whatever else the template put there: the operator must
// be able to write into it.
Json& ObjectField(Json& object, const char* key) {
  Json& field = object[key];
  if (!field.is_object()) field = Json::object();
  return field;
}

Json& ArrayField(Json& object, const char* key) {
  Json& field = object[key];
  if (!field.is_array()) field = Json::array();
  return field;
}

std::vector<std::string> WorkerHostnameList(std::string_view job, const policy::JobSpec& spec,
                                            int32_t slice) {
  std::vector<std::string> hostnames;
  const std::string service = ServiceName(job);
  const int32_t hosts = spec.HostsPerSlice();
  for (int32_t i = slice * hosts; i < (slice + 1) * hosts; ++i) {
    hostnames.push_back(PodName(job, spec, ReplicaType::kWorker, i) + "." + service);
  }
  return hostnames;
}

Json EnvVar(std::string name, std::string value) {
  return Json{{"name", std::move(name)}, {"value", std::move(value)}};
}

// The variables every container of the pod gets, in the order they are declared.
std::vector<Json> OperatorEnv(const cache::TPUJobInfo& job, const policy::JobSpec& spec,
                              ReplicaType type, int32_t index, int32_t attempt) {
  const bool worker = type == ReplicaType::kWorker;
  // A worker sees the hosts of its own slice; the master those of slice 0 (the coordinator's).
  const int32_t slice = worker ? spec.SliceOf(index) : 0;
  const int32_t worker_id = worker ? spec.HostOf(index) : 0;
  const std::vector<std::string> hostnames = WorkerHostnameList(job.name, spec, slice);

  std::vector<Json> env;
  env.push_back(EnvVar("TPUJOB_NAME", job.name));
  env.push_back(EnvVar("TPUJOB_NAMESPACE", job.ns.str()));
  env.push_back(EnvVar("TPUJOB_ATTEMPT", std::to_string(attempt)));
  env.push_back(EnvVar("TPUJOB_REPLICA_TYPE", std::string(policy::ToString(type))));
  env.push_back(EnvVar("TPUJOB_REPLICA_INDEX", std::to_string(index)));
  if (worker) env.push_back(EnvVar("TPU_WORKER_ID", std::to_string(worker_id)));
  env.push_back(EnvVar("TPU_WORKER_HOSTNAMES", Join(hostnames, ",")));
  if (spec.Multislice()) {
    // What libtpu's multislice runtime (and JAX on it) reads to join the slices over the
    // data-center network: slice 0's first worker coordinates.
    env.push_back(EnvVar("MEGASCALE_COORDINATOR_ADDRESS", CoordinatorAddress(job.name, spec)));
    env.push_back(EnvVar("MEGASCALE_NUM_SLICES", std::to_string(spec.ActiveSlices())));
    if (worker) env.push_back(EnvVar("MEGASCALE_SLICE_ID", std::to_string(slice)));
    env.push_back(EnvVar("MEGASCALE_PORT", std::to_string(kMegascalePort)));
  }
  if (!spec.checkpoint_path.empty()) {
    env.push_back(EnvVar("TPUJOB_CHECKPOINT_PATH", spec.checkpoint_path));
  }
  // What programs written for the older managed service read to find their TPU; the node name
  // it named is the job here, and the pod's own worker id and peers complete the picture.
  Json config{{"tpu_node_name", job.name},
              {"namespace", job.ns.str()},
              {"accelerator", spec.tpu.accelerator},
              {"topology", spec.tpu.topology},
              {"chips_per_worker", spec.tpu.chips_per_worker},
              {"worker_count", spec.worker.replicas},
              {"worker_hostnames", hostnames},
              {"attempt", attempt}};
  if (worker) config["worker_id"] = worker_id;
  if (spec.Multislice()) {
    config["num_slices"] = spec.ActiveSlices();
    if (worker) config["slice_id"] = slice;
    config["coordinator_address"] = CoordinatorAddress(job.name, spec);
    config["megascale_port"] = kMegascalePort;
  }
  env.push_back(EnvVar("TPU_CONFIG", config.dump()));
  // The zone and the TPU host's health are properties of the node, so programs and their logs
  // need its name.
  env.push_back(
      Json{{"name", "NODE_NAME"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "spec.nodeName"}}}}}});
  return env;
}

// Puts `env` first in the container's variables and drops the template's variables of the same
// names: Kubernetes expands $(VAR) only from variables declared earlier, so the template's own
// variables can build on the operator's.
void SetEnv(Json& container, const std::vector<Json>& env) {
  std::set<std::string, std::less<>> names;
  Json merged = Json::array();
  for (const Json& var : env) {
    names.insert(StringField(var, "name"));
    merged.push_back(var);
  }
  if (auto it = container.find("env"); it != container.end() && it->is_array()) {
    for (const Json& var : *it) {
      if (!names.contains(StringField(var, "name"))) merged.push_back(var);
    }
  }
  container["env"] = std::move(merged);
}

// Whether `toleration` tolerates the TPU taint (key google.com/tpu, effect NoSchedule): an
// Exists toleration of that key, or of every key, for that effect or for every effect.
bool ToleratesTpuTaint(const Json& toleration) {
  if (!toleration.is_object()) return false;
  const std::string key = StringField(toleration, "key");
  const std::string effect = StringField(toleration, "effect");
  return (key == kTpuTaintKey || key.empty()) && StringField(toleration, "operator") == "Exists" &&
         (effect.empty() || effect == "NoSchedule");
}

void AddTpuScheduling(Json& pod_spec, const policy::TpuSpec& tpu) {
  Json& node_selector = ObjectField(pod_spec, "nodeSelector");
  node_selector[std::string(policy::kAcceleratorLabel)] = tpu.accelerator;
  node_selector[std::string(policy::kTopologyLabel)] = tpu.topology;

  Json& tolerations = ArrayField(pod_spec, "tolerations");
  if (std::none_of(tolerations.begin(), tolerations.end(), ToleratesTpuTaint)) {
    tolerations.push_back(
        Json{{"key", kTpuTaintKey}, {"operator", "Exists"}, {"effect", "NoSchedule"}});
  }

  // Extended resources need requests equal to limits; one container per pod holds the chips,
  // as the TPU device plugin hands all of a host's chips to one container.
  Json& containers = ArrayField(pod_spec, "containers");
  if (containers.empty()) return;
  if (!containers[0].is_object()) containers[0] = Json::object();
  Json& resources = ObjectField(containers[0], "resources");
  const std::string chips = std::to_string(tpu.chips_per_worker);
  ObjectField(resources, "requests")[std::string(cache::kTpuResource)] = chips;
  ObjectField(resources, "limits")[std::string(cache::kTpuResource)] = chips;
}

// Kueue's admission: the flavor's node labels as node selectors, its tolerations added unless
// the pod already has an identical one.
void PlaceOnFlavor(Json& pod_spec, const policy::kueue::Placement& placement) {
  if (!placement.node_labels.empty()) {
    Json& node_selector = ObjectField(pod_spec, "nodeSelector");
    for (const auto& [key, value] : placement.node_labels) node_selector[key] = value;
  }
  if (!placement.tolerations.empty()) {
    Json& tolerations = ArrayField(pod_spec, "tolerations");
    for (const Json& toleration : placement.tolerations) {
      if (std::find(tolerations.begin(), tolerations.end(), toleration) == tolerations.end()) {
        tolerations.push_back(toleration);
      }
    }
  }
}

// A canonical non-negative decimal int32 ("0", "17"; not "", "-1", "01", "+1", "1x").
std::optional<int32_t> ParseCanonicalInt(std::string_view text) {
  if (text.empty() || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  int32_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::string ProgramEnvAnnotation(const cache::TPUJobInfo& job, const policy::JobSpec& spec,
                                 ReplicaType type, int32_t index, int32_t attempt) {
  std::string lines;
  for (const Json& var : OperatorEnv(job, spec, type, index, attempt)) {
    auto value = var.find("value");
    if (value == var.end() || !value->is_string()) continue;  // valueFrom: the kubelet's
    lines += StringField(var, "name") + "=" + value->get<std::string>() + "\n";
  }
  return lines;
}

Json OwnerReference(const cache::TPUJobInfo& job) {
  return Json{{"apiVersion", kTPUJobApiVersion},
              {"kind", kTPUJobKind},
              {"name", job.name},
              {"uid", job.uid},
              {"controller", true},
              {"blockOwnerDeletion", true}};
}

std::string PodName(std::string_view job, ReplicaType type, int32_t index) {
  std::string name(job);
  name += '-';
  name += policy::LowerName(type);
  name += '-';
  name += std::to_string(index);
  return name;
}

std::string PodName(std::string_view job, const policy::JobSpec& spec, ReplicaType type,
                    int32_t index) {
  if (type != ReplicaType::kWorker || !spec.Multislice()) return PodName(job, type, index);
  return PodName(job, type, spec.SlotOf(spec.SliceOf(index))) + "-" +
         std::to_string(spec.HostOf(index));
}

std::string ServiceName(std::string_view job) { return std::string(job); }

std::string WorkerHostnames(std::string_view job, const policy::JobSpec& spec, int32_t slice) {
  return Join(WorkerHostnameList(job, spec, slice), ",");
}

std::string CoordinatorAddress(std::string_view job, const policy::JobSpec& spec) {
  return PodName(job, spec, ReplicaType::kWorker, 0) + "." + ServiceName(job);
}

namespace {

// The job's pre-flight thresholds (spec.faultTolerance.preflight.thresholds) and the variables
// `tpujob-operator preflight` reads them from.
constexpr std::pair<const char*, const char*> kPreflightThresholdEnv[] = {
    {"rootDiskGB", "TPUJOB_PREFLIGHT_ROOT_MIN_GB"},
    {"shmGB", "TPUJOB_PREFLIGHT_SHM_MIN_GB"},
    {"cacheDiskGB", "TPUJOB_PREFLIGHT_CACHE_MIN_GB"},
    {"memlockKB", "TPUJOB_PREFLIGHT_MEMLOCK_MIN_KB"},
    {"nofile", "TPUJOB_PREFLIGHT_NOFILE_MIN"},
    {"stackKB", "TPUJOB_PREFLIGHT_STACK_MIN_KB"},
    {"nproc", "TPUJOB_PREFLIGHT_NPROC_MIN"},
    {"dnsTimeoutSeconds", "TPUJOB_PREFLIGHT_DNS_TIMEOUT_SECONDS"},
};

// The pre-flight container's own securityContext, which meets the Pod Security "restricted"
// profile whatever the pod template says: a fixed non-root user (the image's USER; explicit so
// that a pod-level runAsUser 0 in the template cannot make the kubelet refuse the container),
// no privilege escalation, no capabilities, the runtime's default seccomp profile and a
// read-only root file system. The command only reads, except for its report, which goes to the
// terminationMessagePath the kubelet mounts writable (mode 0666) for every container.
Json PreflightSecurityContext() {
  return Json{{"runAsNonRoot", true},
              {"runAsUser", kPreflightUser},
              {"runAsGroup", kPreflightUser},
              {"allowPrivilegeEscalation", false},
              {"readOnlyRootFilesystem", true},
              {"capabilities", {{"drop", Json::array({"ALL"})}}},
              {"seccompProfile", {{"type", "RuntimeDefault"}}}};
}

void AddPreflight(Json& pod_spec, const policy::JobSpec& spec, ReplicaType type,
                  const PodBuildOptions& options) {
  const policy::ReplicaSpec* replica = spec.Replica(type);
  const bool replica_mounts_cache =
      replica != nullptr && policy::MountsVolumeAt(*replica, kPreflightCachePath);
  const policy::FaultTolerance& ft = spec.fault_tolerance;
  const bool worker = type == ReplicaType::kWorker;
  Json env = Json::array();
  env.push_back({{"name", "TPUJOB_CHIPS_PER_WORKER"},
                 {"value", std::to_string(worker ? spec.tpu.chips_per_worker : 0)}});
  env.push_back({{"name", "TPUJOB_PREFLIGHT_CHECKS"}, {"value", PreflightChecks(spec, type)}});
  env.push_back({{"name", "TPUJOB_PREFLIGHT_CACHE_VOLUME"},
                 {"value", replica_mounts_cache ? "present" : "absent"}});
  if (ft.preflight_thresholds.is_object()) {
    for (const auto& [field, var] : kPreflightThresholdEnv) {
      auto it = ft.preflight_thresholds.find(field);
      if (it != ft.preflight_thresholds.end() && it->is_number_integer()) {
        env.push_back({{"name", var}, {"value", std::to_string(it->get<int64_t>())}});
      }
    }
  }
  const std::string chips = std::to_string(spec.tpu.chips_per_worker);
  Json container = {
      {"name", std::string(policy::kPreflightContainer)},
      {"image", ft.preflight_image.empty() ? options.preflight_image : ft.preflight_image},
      {"command", Json::array({"tpujob-operator", "preflight"})},
      {"env", std::move(env)},
      {"securityContext", PreflightSecurityContext()},
      {"terminationMessagePath", "/dev/termination-log"},
      {"terminationMessagePolicy", "File"}};
  if (worker) {
    container["resources"] = {{"requests", {{std::string(cache::kTpuResource), chips}}},
                              {"limits", {{std::string(cache::kTpuResource), chips}}}};
  }
  auto containers = pod_spec.find("containers");
  if (containers != pod_spec.end() && containers->is_array() && !containers->empty() &&
      (*containers)[0].is_object()) {
    if (auto mounts = (*containers)[0].find("volumeMounts");
        mounts != (*containers)[0].end() && mounts->is_array()) {
      container["volumeMounts"] = *mounts;
    }
  }
  Json init = Json::array({std::move(container)});
  if (auto it = pod_spec.find("initContainers"); it != pod_spec.end() && it->is_array()) {
    for (Json& c : *it) init.push_back(std::move(c));
  }
  pod_spec["initContainers"] = std::move(init);
}

// The supervisor's metrics port on the program's container, for the PodMonitor to find by name;
// a container that declares the number already (its own exporter, say) is left as it is.
void AddProgressMetricsPort(Json& container, int32_t port) {
  Json& ports = ArrayField(container, "ports");
  for (const Json& declared : ports) {
    if (declared.is_object() && declared.value("containerPort", int64_t{0}) == port) return;
  }
  ports.push_back({{"name", std::string(kProgressMetricsPortName)},
                   {"containerPort", port},
                   {"protocol", "TCP"}});
}

// In-place restart or stall detection: the program runs under tpujob-supervise (see children.h).
// `in_place`: in generations behind the barrier; otherwise once (TPUJOB_SUPERVISOR_MODE once).
void AddSupervisor(Json& pod_spec, Json& metadata, const PodBuildOptions& options, bool in_place,
                   const std::optional<policy::ProgressSpec>& progress) {
  Json& volumes = ArrayField(pod_spec, "volumes");
  volumes.push_back({{"name", std::string(kSupervisorVolume)}, {"emptyDir", Json::object()}});
  if (in_place) {
    pod_spec["restartPolicy"] = "OnFailure";
    volumes.push_back(
        {{"name", std::string(kPodInfoVolume)},
         {"downwardAPI",
          {{"items", Json::array({{{"path", "annotations"},
                                   {"fieldRef", {{"fieldPath", "metadata.annotations"}}}}})}}}});
  }
  const Json dir_mount = {{"name", std::string(kSupervisorVolume)},
                          {"mountPath", std::string(kSupervisorDir)}};
  ArrayField(pod_spec, "initContainers")
      .push_back({{"name", std::string(kSupervisorContainer)},
                  {"image", options.preflight_image},
                  {"command",
                   Json::array({"tpujob-supervise", "--install", std::string(kSupervisorBinary)})},
                  {"securityContext", PreflightSecurityContext()},
                  {"volumeMounts", Json::array({dir_mount})}});
  auto containers = pod_spec.find("containers");
  if (containers != pod_spec.end() && containers->is_array() && !containers->empty() &&
      (*containers)[0].is_object()) {
    Json& program = (*containers)[0];
    Json command = Json::array({std::string(kSupervisorBinary), "--"});
    if (auto it = program.find("command"); it != program.end() && it->is_array()) {
      for (const Json& word : *it) command.push_back(word);
    }
    program["command"] = std::move(command);
    Json& mounts = ArrayField(program, "volumeMounts");
    mounts.push_back(dir_mount);
    if (in_place) {
      mounts.push_back({{"name", std::string(kPodInfoVolume)},
                        {"mountPath", std::string(kPodInfoDir)},
                        {"readOnly", true}});
    }
    Json& env = ArrayField(program, "env");
    if (!in_place)
      env.push_back({{"name", supervisor::kModeEnv}, {"value", supervisor::kModeOnce}});
    if (progress) {
      const auto set = [&env](const char* name, const std::string& value) {
        if (!value.empty()) env.push_back({{"name", name}, {"value", value}});
      };
      set(supervisor::kProgressLogPatternEnv, progress->log_pattern);
      set(supervisor::kProgressCheckpointPatternEnv, progress->checkpoint_pattern);
      set(supervisor::kProgressHeartbeatFileEnv, progress->heartbeat_file);
      set(supervisor::kProgressStallSecondsEnv, std::to_string(progress->stall_seconds));
      set(supervisor::kProgressStartupSecondsEnv, std::to_string(progress->startup_seconds));
      if (options.progress_metrics_port > 0) {
        set(supervisor::kProgressMetricsPortEnv, std::to_string(options.progress_metrics_port));
        AddProgressMetricsPort(program, options.progress_metrics_port);
      }
    }
    env.push_back(
        {{"name", "TPUJOB_SUPERVISOR_GRACE_SECONDS"},
         {"value", std::to_string(pod_spec.value("terminationGracePeriodSeconds", int64_t{30}))}});
    if (auto it = program.find("terminationMessagePath"); it != program.end() && it->is_string()) {
      env.push_back({{"name", "TPUJOB_SUPERVISOR_MESSAGE"}, {"value", *it}});
    }
  }
  if (options.generation > 0) {
    Json& annotations = ObjectField(metadata, "annotations");
    annotations[std::string(cache::kGenerationAnnotation)] = std::to_string(options.generation);
    if (options.barrier_open) {
      annotations[std::string(cache::kBarrierAnnotation)] = std::to_string(options.generation);
    }
  }
}

// Requires a node without announced maintenance, or whose maintenance starts after
// `not_before` (Unix seconds): every required node-affinity term of the template is split in
// two, one with `label DoesNotExist` and one with `label Gt not_before` (terms are ORed, the
// expressions of one term ANDed, so the template's own terms keep their meaning).
void AvoidScheduledMaintenance(Json& pod_spec, int64_t not_before) {
  const std::string label(policy::kScheduledMaintenanceLabel);
  Json& required = ObjectField(ObjectField(ObjectField(pod_spec, "affinity"), "nodeAffinity"),
                               "requiredDuringSchedulingIgnoredDuringExecution");
  Json terms = Json::array();
  if (auto it = required.find("nodeSelectorTerms"); it != required.end() && it->is_array()) {
    terms = *it;
  }
  if (terms.empty()) terms.push_back(Json::object());
  Json split = Json::array();
  for (const Json& term : terms) {
    if (!term.is_object()) continue;
    for (Json expression :
         {Json{{"key", label}, {"operator", "DoesNotExist"}},
          Json{{"key", label}, {"operator", "Gt"}, {"values", {std::to_string(not_before)}}}}) {
      Json t = term;
      Json& list = t["matchExpressions"];
      if (!list.is_array()) list = Json::array();
      list.push_back(std::move(expression));
      split.push_back(std::move(t));
    }
  }
  required["nodeSelectorTerms"] = std::move(split);
}

// Adds `metadata.name <op> [node]` for each of `nodes` to every required node-affinity term
// (there is one term at least; expressions of one term are ANDed, and the API server allows one
// value only in a field selector requirement).
void RequireNodeNames(Json& pod_spec, std::string_view op, const std::vector<std::string>& nodes) {
  Json& required = ObjectField(ObjectField(ObjectField(pod_spec, "affinity"), "nodeAffinity"),
                               "requiredDuringSchedulingIgnoredDuringExecution");
  Json& terms = required["nodeSelectorTerms"];
  if (!terms.is_array()) terms = Json::array();
  if (terms.empty()) terms.push_back(Json::object());
  for (Json& term : terms) {
    if (!term.is_object()) continue;
    Json& fields = term["matchFields"];
    if (!fields.is_array()) fields = Json::array();
    for (const std::string& node : nodes) {
      fields.push_back({{"key", "metadata.name"}, {"operator", op}, {"values", {node}}});
    }
  }
}

}  // namespace

std::string PreflightChecks(const policy::JobSpec& spec, ReplicaType type) {
  const policy::FaultTolerance& ft = spec.fault_tolerance;
  std::string checks;
  auto add = [&checks](std::string_view c) {
    checks += (checks.empty() ? "" : ",") + std::string(c);
  };
  if (type == ReplicaType::kMaster) {
    // The master has no TPU: the job's list without accelerator, and at least dns.
    for (const std::string& c : ft.preflight_checks) {
      if (c != "accelerator") add(c);
    }
    if (checks.empty()) add("dns");
    return checks;
  }
  if (!ft.preflight_checks.empty()) {
    for (const std::string& c : ft.preflight_checks) add(c);
    return checks;
  }
  add("dns");
  add("disk");
  add("accelerator");
  if (spec.tpu.high_speed_network) add("ulimit");
  return checks;
}

Json BuildPod(const cache::TPUJobInfo& job, const policy::JobSpec& spec, ReplicaType type,
              int32_t index, int32_t attempt, const PodBuildOptions& options,
              const std::string& node_pool, const std::string& node, bool bind) {
  static const Json kEmptyTemplate = Json::object();
  const policy::ReplicaSpec* replica = spec.Replica(type);
  const Json& pod_template =
      replica != nullptr && replica->template_.is_object() ? replica->template_ : kEmptyTemplate;
  const Json template_metadata = pod_template.value("metadata", Json::object());
  const std::string name = PodName(job.name, spec, type, index);

  Json labels = Json::object();
  if (auto it = template_metadata.find("labels");
      it != template_metadata.end() && it->is_object()) {
    labels = *it;
  }
  labels[std::string(cache::kJobNameLabel)] = job.name;
  labels[std::string(kReplicaTypeLabel)] = policy::ToString(type);
  labels[std::string(kReplicaIndexLabel)] = std::to_string(index);
  labels[std::string(kAttemptLabel)] = std::to_string(attempt);
  if (type == ReplicaType::kWorker && spec.Multislice()) {
    labels[std::string(kSliceIndexLabel)] = std::to_string(spec.SliceOf(index));
  }

  Json metadata{{"name", name},
                {"namespace", job.ns.str()},
                {"labels", std::move(labels)},
                {"ownerReferences", Json::array({OwnerReference(job)})}};
  if (auto it = template_metadata.find("annotations");
      it != template_metadata.end() && it->is_object() && !it->empty()) {
    metadata["annotations"] = *it;
  }

  Json pod_spec = Json::object();
  if (auto it = pod_template.find("spec"); it != pod_template.end() && it->is_object()) {
    pod_spec = *it;
  }
  pod_spec["restartPolicy"] = "Never";
  if (!pod_spec.contains("terminationGracePeriodSeconds")) {
    pod_spec["terminationGracePeriodSeconds"] =
        spec.fault_tolerance.maintenance_grace_period_seconds;
  }
  pod_spec["hostname"] = name;
  pod_spec["subdomain"] = ServiceName(job.name);
  if (type == ReplicaType::kWorker) {
    AddTpuScheduling(pod_spec, spec.tpu);
    if (!node_pool.empty()) {
      ObjectField(pod_spec, "nodeSelector")[std::string(cache::kNodePoolLabel)] = node_pool;
    }
  }

  if (!options.kueue_placement.empty()) {
    auto placement = options.kueue_placement.find(policy::kueue::PodSetName(spec, type, index));
    if (placement != options.kueue_placement.end()) PlaceOnFlavor(pod_spec, placement->second);
  }

  if (spec.fault_tolerance.preflight_enabled) AddPreflight(pod_spec, spec, type, options);
  const bool in_place = spec.fault_tolerance.restart == policy::RestartMode::kInPlace;
  if (in_place || spec.fault_tolerance.progress) {
    AddSupervisor(pod_spec, metadata, options, in_place, spec.fault_tolerance.progress);
  }
  if (type == ReplicaType::kWorker && options.avoid_maintenance_before_unix) {
    AvoidScheduledMaintenance(pod_spec, *options.avoid_maintenance_before_unix);
  }
  if (type == ReplicaType::kWorker && !options.avoid_nodes.empty()) {
    RequireNodeNames(pod_spec, "NotIn", options.avoid_nodes);  // keep off them
  }
  if (!node.empty()) RequireNodeNames(pod_spec, "In", {node});
  if (!node.empty() && bind) pod_spec["nodeName"] = node;
  if (type == ReplicaType::kWorker && options.same_pool_per_slice && node_pool.empty()) {
    // The first worker scheduled matches its own selector, which the scheduler accepts for a
    // term no pod satisfies yet; the rest follow it into its pool.
    Json selector = {{std::string(cache::kJobNameLabel), job.name},
                     {std::string(kAttemptLabel), std::to_string(attempt)},
                     {std::string(kReplicaTypeLabel), policy::ToString(ReplicaType::kWorker)}};
    if (spec.Multislice()) {
      selector[std::string(kSliceIndexLabel)] = std::to_string(spec.SliceOf(index));
    }
    Json& pod_affinity = ObjectField(ObjectField(pod_spec, "affinity"), "podAffinity");
    ArrayField(pod_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
        .push_back(Json{{"labelSelector", {{"matchLabels", std::move(selector)}}},
                        {"topologyKey", std::string(cache::kNodePoolLabel)}});
  }

  const std::vector<Json> env = OperatorEnv(job, spec, type, index, attempt);
  for (const char* list : {"initContainers", "containers"}) {
    auto it = pod_spec.find(list);
    if (it == pod_spec.end() || !it->is_array()) continue;
    for (Json& container : *it) {
      if (container.is_object()) SetEnv(container, env);
    }
  }

  return Json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", std::move(metadata)},
              {"spec", std::move(pod_spec)}};
}

Json BuildWorkload(const cache::TPUJobInfo& job, const policy::JobSpec& spec, int32_t priority) {
  // Pod sets in order: the master's, then the workers' (one per slice, or one for all).
  struct PodSet {
    std::string name;
    ReplicaType type;
    int32_t first = 0;
    int32_t count = 0;
  };
  std::vector<PodSet> sets;
  for (ReplicaType type : {ReplicaType::kMaster, ReplicaType::kWorker}) {
    for (int32_t i = 0; i < spec.Replicas(type); ++i) {
      std::string name = policy::kueue::PodSetName(spec, type, i);
      if (sets.empty() || sets.back().name != name) sets.push_back({std::move(name), type, i, 0});
      sets.back().count++;
    }
  }
  Json pod_sets = Json::array();
  for (const PodSet& set : sets) {
    const Json pod = BuildPod(job, spec, set.type, set.first, /*attempt=*/1);
    const Json& pod_spec = pod["spec"];
    Json template_spec = Json::object();
    for (const char* field :
         {"nodeSelector", "tolerations", "affinity", "runtimeClassName", "overhead", "resources"}) {
      if (auto it = pod_spec.find(field); it != pod_spec.end()) template_spec[field] = *it;
    }
    for (const char* list : {"initContainers", "containers"}) {
      auto it = pod_spec.find(list);
      if (it == pod_spec.end() || !it->is_array()) continue;
      Json& out = template_spec[list] = Json::array();
      for (const Json& container : *it) {
        if (!container.is_object()) continue;
        Json kept = Json::object();
        // restartPolicy: an init container that is a sidecar (Always) counts with the
        // containers, not before them.
        for (const char* field : {"name", "image", "resources", "restartPolicy"}) {
          if (auto f = container.find(field); f != container.end()) kept[field] = *f;
        }
        out.push_back(std::move(kept));
      }
    }
    pod_sets.push_back(
        Json{{"name", set.name}, {"count", set.count}, {"template", {{"spec", template_spec}}}});
  }
  Json workload_spec{{"queueName", policy::kueue::QueueName(job)},
                     {"priority", priority},
                     {"podSets", std::move(pod_sets)}};
  if (!spec.priority_class_name.empty()) {
    workload_spec["priorityClassRef"] = Json{{"group", "scheduling.k8s.io"},
                                             {"kind", "PriorityClass"},
                                             {"name", spec.priority_class_name}};
  }
  Json annotations = {{std::string(policy::kueue::kSpecDigestAnnotation),
                       policy::kueue::SpecDigest(workload_spec)}};
  if (spec.suspend) {
    workload_spec["active"] = false;
    annotations[std::string(policy::kueue::kSuspendedAnnotation)] = "true";
  }
  return Json{{"apiVersion", policy::kueue::kApiVersion},
              {"kind", "Workload"},
              {"metadata",
               {{"name", policy::kueue::WorkloadName(job.name, job.uid)},
                {"namespace", job.ns.str()},
                {"labels",
                 {{std::string(cache::kJobNameLabel), job.name},
                  {std::string(policy::kueue::kJobUidLabel), job.uid}}},
                {"annotations", std::move(annotations)},
                {"ownerReferences", Json::array({OwnerReference(job)})}}},
              {"spec", std::move(workload_spec)}};
}

Json BuildService(const cache::TPUJobInfo& job) {
  const Json job_label{{std::string(cache::kJobNameLabel), job.name}};
  // No ports: the API server accepts a headless Service without them, and DNS records for the
  // pods' hostname.subdomain need none (JobSet's Service is built the same way).
  return Json{
      {"apiVersion", "v1"},
      {"kind", "Service"},
      {"metadata",
       {{"name", ServiceName(job.name)},
        {"namespace", job.ns.str()},
        {"labels", job_label},
        {"ownerReferences", Json::array({OwnerReference(job)})}}},
      {"spec",
       {{"clusterIP", "None"}, {"selector", job_label}, {"publishNotReadyAddresses", true}}}};
}

std::optional<PodIdentity> IdentifyPod(const cache::PodInfo& pod) {
  const std::optional<std::string_view> type_text = pod.labels.Get(kReplicaTypeLabel);
  const std::optional<std::string_view> index_text = pod.labels.Get(kReplicaIndexLabel);
  const std::optional<std::string_view> attempt_text = pod.labels.Get(kAttemptLabel);
  if (!type_text || !index_text || !attempt_text) return std::nullopt;

  PodIdentity identity;
  if (*type_text == policy::ToString(ReplicaType::kMaster)) {
    identity.type = ReplicaType::kMaster;
  } else if (*type_text == policy::ToString(ReplicaType::kWorker)) {
    identity.type = ReplicaType::kWorker;
  } else {
    return std::nullopt;
  }
  const std::optional<int32_t> index = ParseCanonicalInt(*index_text);
  const std::optional<int32_t> attempt = ParseCanonicalInt(*attempt_text);
  if (!index || !attempt || *attempt < 1) return std::nullopt;
  identity.index = *index;
  identity.attempt = *attempt;
  return identity;
}

}  // namespace tpujob::controller
