#include "policy/job_spec.h"

#include <re2/re2.h>

#include <algorithm>
#include <charconv>
#include <limits>

#include "policy/tpu_types.h"

namespace tpujob::policy {
namespace {

using Error = std::unexpected<std::string>;

// Reads an integer member, accepting only JSON integers within [lo, hi]. `out` is left alone
// when the member is absent or null.
std::optional<std::string> ReadInt(const Json& object, std::string_view key, std::string_view path,
                                   int64_t lo, int64_t hi, int64_t& out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) return std::string(path) + ": must be an integer";
  const int64_t value = it->get<int64_t>();
  if (value < lo || value > hi) {
    return std::string(path) + ": " + std::to_string(value) + " is outside [" + std::to_string(lo) +
           ", " + std::to_string(hi) + "]";
  }
  out = value;
  return std::nullopt;
}

std::optional<std::string> ReadString(const Json& object, std::string_view key,
                                      std::string_view path, std::string& out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return std::string(path) + ": must be a string";
  out = it->get<std::string>();
  return std::nullopt;
}

std::optional<std::string> ReadBool(const Json& object, std::string_view key, std::string_view path,
                                    bool& out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return std::string(path) + ": must be true or false";
  out = it->get<bool>();
  return std::nullopt;
}

const Json* Member(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

// `derived`: what spec.tpu.type names, if it names anything; the Worker replicas may then be left
// out (they are the type's hosts per slice) and, where given, must be that.
std::optional<std::string> ReadReplica(const Json& specs, std::string_view type, int64_t max,
                                       std::optional<ReplicaSpec>& out,
                                       const std::optional<TpuType>& derived = std::nullopt) {
  const Json* replica = Member(specs, type);
  if (replica == nullptr) return std::nullopt;
  const std::string path = "spec.replicaSpecs." + std::string(type);
  if (!replica->is_object()) return path + ": must be an object";
  ReplicaSpec spec;
  int64_t replicas = type == "Master" ? 1 : 0;
  if (auto e = ReadInt(*replica, "replicas", path + ".replicas", 1, max, replicas)) return e;
  if (derived) {
    if (replicas == 0) {
      replicas = derived->hosts_per_slice;
    } else if (replicas != derived->hosts_per_slice) {
      return path + ".replicas: " + std::to_string(replicas) +
             " disagrees with spec.tpu.type, whose " + std::string(derived->topology) +
             " slice has " + std::to_string(derived->hosts_per_slice) +
             " hosts; leave replicas out or set it to " + std::to_string(derived->hosts_per_slice);
    }
  }
  if (replicas < 1) return path + ".replicas: is required";
  spec.replicas = static_cast<int32_t>(replicas);
  const Json* tmpl = Member(*replica, "template");
  if (tmpl == nullptr || !tmpl->is_object()) return path + ".template: is required";
  const Json* pod_spec = Member(*tmpl, "spec");
  const Json* containers = pod_spec != nullptr ? Member(*pod_spec, "containers") : nullptr;
  if (containers == nullptr || !containers->is_array() || containers->empty()) {
    return path + ".template.spec.containers: at least one container is required";
  }
  for (size_t i = 0; i < containers->size(); ++i) {
    const Json& c = (*containers)[i];
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) {
      return path + ".template.spec.containers[" + std::to_string(i) + "].name: is required";
    }
  }
  spec.template_ = *tmpl;
  out = std::move(spec);
  return std::nullopt;
}

std::optional<std::string> ReadCodes(const Json& codes, std::string_view key, std::string_view path,
                                     std::set<int32_t>& out) {
  const Json* list = Member(codes, key);
  if (list == nullptr) return std::nullopt;
  if (!list->is_array()) return std::string(path) + ": must be a list of exit codes";
  out.clear();
  for (const Json& code : *list) {
    if (!code.is_number_integer() || code.get<int64_t>() < 1 || code.get<int64_t>() > 255) {
      return std::string(path) + ": " + code.dump() + " is not an exit code between 1 and 255";
    }
    out.insert(code.get<int32_t>());
  }
  return std::nullopt;
}

}  // namespace

std::string_view ToString(ReplicaType type) {
  return type == ReplicaType::kMaster ? "Master" : "Worker";
}
std::string_view LowerName(ReplicaType type) {
  return type == ReplicaType::kMaster ? "master" : "worker";
}
std::string_view ToString(SuccessPolicy policy) {
  return policy == SuccessPolicy::kMaster ? "Master" : "AllWorkers";
}
std::string_view ToString(ScaleUp s) {
  switch (s) {
    case ScaleUp::kImmediate:
      return "Immediate";
    case ScaleUp::kAfterCheckpoint:
      return "AfterCheckpoint";
    case ScaleUp::kNever:
      return "Never";
  }
  return "";
}

std::string_view ToString(ExitClass c) {
  return c == ExitClass::kPermanent ? "permanent" : "retryable";
}

int64_t TpuSpec::TopologyChips() const {
  int64_t product = 1;
  size_t start = 0;
  while (start <= topology.size()) {
    const size_t end = std::min(topology.find('x', start), topology.size());
    int64_t dim = 0;
    const auto [ptr, ec] = std::from_chars(topology.data() + start, topology.data() + end, dim);
    if (ec != std::errc() || ptr != topology.data() + end || dim <= 0) return 0;
    if (product > std::numeric_limits<int32_t>::max() / dim) return 0;
    product *= dim;
    start = end + 1;
  }
  return product;
}

namespace {

// A pre-flight setting that fails on every node, whatever its hardware: `disk-size shm` checked
// (the workers' default list has disk; the master's only when the job lists it) against a
// replica whose first container mounts nothing at /dev/shm, where the container runtime gives
// 64 MB. Every attempt would fail its pre-flight and spend a re-issue; refused up front.
std::optional<std::string> PreflightFailsEverywhere(const JobSpec& spec) {
  const FaultTolerance& ft = spec.fault_tolerance;
  if (!ft.preflight_enabled) return std::nullopt;
  const bool listed = std::find(ft.preflight_checks.begin(), ft.preflight_checks.end(), "disk") !=
                      ft.preflight_checks.end();
  double shm_gb = 1;  // the pre-flight default (TPUJOB_PREFLIGHT_SHM_MIN_GB)
  if (const Json* t =
          ft.preflight_thresholds.is_object() ? Member(ft.preflight_thresholds, "shmGB") : nullptr;
      t != nullptr && t->is_number()) {
    shm_gb = t->get<double>();
  }
  // The runtime's default /dev/shm is 64 MiB: a threshold below that passes without a volume.
  if (shm_gb * 1e9 < 64.0 * 1024 * 1024) return std::nullopt;
  for (ReplicaType type : {ReplicaType::kWorker, ReplicaType::kMaster}) {
    const ReplicaSpec* replica = spec.Replica(type);
    if (replica == nullptr) continue;
    const bool checks_disk =
        listed || (type == ReplicaType::kWorker && ft.preflight_checks.empty());
    if (!checks_disk || MountsVolumeAt(*replica, "/dev/shm")) continue;
    std::string threshold = std::to_string(shm_gb);
    threshold.erase(threshold.find_last_not_of('0') + 1);
    if (threshold.ends_with('.')) threshold.pop_back();
    return "spec.replicaSpecs." + std::string(ToString(type)) +
           ".template: pre-flight checks disk-size shm (/dev/shm larger than " + threshold +
           " GB) but the first container mounts no volume at /dev/shm, where Kubernetes gives "
           "64 MB, so every attempt would fail its pre-flight on every node: mount an emptyDir "
           "with medium: Memory at /dev/shm, or leave disk out of the checks "
           "(spec.faultTolerance.preflight.checks), or set preflight.thresholds.shmGB to 0";
  }
  return std::nullopt;
}

// In-place restart runs the program under the supervisor, which becomes the first container's
// command: the program must be named there, since the image's ENTRYPOINT cannot be read from
// the cluster.
std::optional<std::string> InPlaceNeedsCommands(const JobSpec& spec) {
  const bool in_place = spec.fault_tolerance.restart == RestartMode::kInPlace;
  if (!in_place && !spec.fault_tolerance.progress) return std::nullopt;
  const std::string why = in_place ? "spec.faultTolerance.restart InPlace"
                                   : "spec.faultTolerance.progress (stall detection)";
  for (ReplicaType type : {ReplicaType::kMaster, ReplicaType::kWorker}) {
    const ReplicaSpec* replica = spec.Replica(type);
    if (replica == nullptr) continue;
    const Json* pod = replica->template_.is_object() ? Member(replica->template_, "spec") : nullptr;
    const Json* containers =
        pod != nullptr && pod->is_object() ? Member(*pod, "containers") : nullptr;
    const Json* command = containers != nullptr && containers->is_array() && !containers->empty() &&
                                  (*containers)[0].is_object()
                              ? Member((*containers)[0], "command")
                              : nullptr;
    if (command == nullptr || !command->is_array() || command->empty()) {
      return "spec.replicaSpecs." + std::string(ToString(type)) + ".template: " + why +
             " runs the program under the operator's supervisor, which needs the first "
             "container's command (the image's ENTRYPOINT cannot be read from the cluster): set "
             "command (and args)" +
             (in_place ? ", or use restart Recreate" : "");
    }
  }
  return std::nullopt;
}

// spec.faultTolerance.progress.
std::optional<std::string> ReadProgress(const Json& p, std::optional<ProgressSpec>& out) {
  constexpr std::string_view kPath = "spec.faultTolerance.progress";
  if (!p.is_object()) return std::string(kPath) + ": must be an object";
  ProgressSpec progress;
  const auto path = [&](std::string_view field) {
    return std::string(kPath) + "." + std::string(field);
  };
  for (const auto& [field, target] :
       {std::pair<std::string_view, std::string*>{"logPattern", &progress.log_pattern},
        {"heartbeatFile", &progress.heartbeat_file},
        {"checkpointPattern", &progress.checkpoint_pattern}}) {
    if (auto e = ReadString(p, field, path(field), *target)) return e;
  }
  if (progress.log_pattern.empty() && progress.heartbeat_file.empty()) {
    return std::string(kPath) +
           ": needs a source of progress: logPattern (a regular expression with one capture "
           "group, the step, matched against the program's output) or heartbeatFile (a file the "
           "program rewrites)";
  }
  for (const auto& [field, pattern] :
       {std::pair<std::string_view, const std::string*>{"logPattern", &progress.log_pattern},
        {"checkpointPattern", &progress.checkpoint_pattern}}) {
    if (pattern->empty()) continue;
    if (auto e = CheckStepPattern(*pattern)) return path(field) + ": " + *e;
  }
  if (!progress.heartbeat_file.empty() && !progress.heartbeat_file.starts_with('/')) {
    return path("heartbeatFile") + ": \"" + progress.heartbeat_file + "\" is not an absolute path";
  }
  if (auto e =
          ReadInt(p, "stallSeconds", path("stallSeconds"), 1, 604800, progress.stall_seconds)) {
    return e;
  }
  if (auto e = ReadInt(p, "startupSeconds", path("startupSeconds"), 1, 604800,
                       progress.startup_seconds)) {
    return e;
  }
  int64_t max_stalls = progress.max_stalls;
  if (auto e = ReadInt(p, "maxStalls", path("maxStalls"), 1, 100, max_stalls)) return e;
  progress.max_stalls = static_cast<int32_t>(max_stalls);
  out = std::move(progress);
  return std::nullopt;
}

// spec.faultTolerance.elastic.
std::optional<std::string> ReadElastic(const Json& e, ElasticSpec& out) {
  constexpr std::string_view kPath = "spec.faultTolerance.elastic";
  if (!e.is_object()) return std::string(kPath) + ": must be an object";
  if (auto err = ReadInt(e, "waitSeconds", std::string(kPath) + ".waitSeconds", 0, 86400,
                         out.wait_seconds)) {
    return err;
  }
  std::string scale_up = "Immediate";
  if (auto err = ReadString(e, "scaleUp", std::string(kPath) + ".scaleUp", scale_up)) return err;
  if (scale_up == "Immediate") {
    out.scale_up = ScaleUp::kImmediate;
  } else if (scale_up == "AfterCheckpoint") {
    out.scale_up = ScaleUp::kAfterCheckpoint;
  } else if (scale_up == "Never") {
    out.scale_up = ScaleUp::kNever;
  } else {
    return std::string(kPath) + ".scaleUp: \"" + scale_up +
           "\" is not Immediate, AfterCheckpoint or Never";
  }
  return std::nullopt;
}

// What elastic slices rely on: slice recovery (a shrink keeps the slices that hold their pools),
// and for scaleUp AfterCheckpoint, the program's checkpoint lines.
std::optional<std::string> ElasticNeeds(const JobSpec& spec) {
  if (!spec.Elastic()) return std::nullopt;
  if (spec.fault_tolerance.recovery != Recovery::kSlice) {
    return "spec.tpu.minSlices: " + std::to_string(spec.tpu.min_slices) +
           " needs spec.faultTolerance.recovery Slice: with recovery Job a fault stops every "
           "slice, so there are no slices left to keep running on";
  }
  const std::optional<ProgressSpec>& progress = spec.fault_tolerance.progress;
  if (spec.fault_tolerance.elastic.scale_up == ScaleUp::kAfterCheckpoint &&
      (!progress || progress->checkpoint_pattern.empty() || progress->log_pattern.empty())) {
    return std::string(
        "spec.faultTolerance.elastic.scaleUp: AfterCheckpoint waits for the "
        "program's next checkpoint line, which the operator reads from its log: "
        "it needs spec.faultTolerance.progress.logPattern and checkpointPattern");
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> CheckStepPattern(std::string_view pattern) {
  RE2::Options options;
  options.set_log_errors(false);
  const RE2 re(re2::StringPiece(pattern.data(), pattern.size()), options);
  if (!re.ok())
    return "\"" + std::string(pattern) + "\" is not a valid RE2 expression: " + re.error();
  if (re.NumberOfCapturingGroups() != 1) {
    return "\"" + std::string(pattern) + "\" has " + std::to_string(re.NumberOfCapturingGroups()) +
           " capture groups; it needs exactly one, around the step number (use (?:...) for "
           "the others)";
  }
  return std::nullopt;
}

std::expected<JobSpec, std::string> ParseJobSpec(const cache::TPUJobInfo& job) {
  JobSpec out;
  const Json& spec = job.spec;
  if (!spec.is_object()) return Error("spec: is required");

  int64_t value = 0;
  if (auto e = ReadInt(spec, "priority", "spec.priority", std::numeric_limits<int32_t>::min(),
                       std::numeric_limits<int32_t>::max(), value)) {
    return Error(*e);
  }
  out.priority = static_cast<int32_t>(value);
  if (auto e = ReadString(spec, "priorityClassName", "spec.priorityClassName",
                          out.priority_class_name)) {
    return Error(*e);
  }
  value = 0;
  if (auto e = ReadInt(spec, "queueTimeoutSeconds", "spec.queueTimeoutSeconds", 1,
                       std::numeric_limits<int64_t>::max(), value)) {
    return Error(*e);
  }
  if (value > 0) out.queue_timeout_seconds = value;
  if (auto e = ReadBool(spec, "suspend", "spec.suspend", out.suspend)) return Error(*e);
  if (auto e = ReadBool(spec, "preemptible", "spec.preemptible", out.preemptible)) {
    return Error(*e);
  }
  value = -1;
  if (auto e = ReadInt(spec, "ttlSecondsAfterFinished", "spec.ttlSecondsAfterFinished", 0,
                       std::numeric_limits<int64_t>::max(), value)) {
    return Error(*e);
  }
  if (value >= 0) out.ttl_seconds_after_finished = value;
  value = 0;
  if (auto e = ReadInt(spec, "activeDeadlineSeconds", "spec.activeDeadlineSeconds", 1,
                       std::numeric_limits<int64_t>::max(), value)) {
    return Error(*e);
  }
  if (value > 0) out.active_deadline_seconds = value;

  // TPU slice: by name (spec.tpu.type), or by accelerator, topology and chips per worker. Fields
  // given beside a type must agree with it: the API server's CEL rules say so too, but a cluster
  // may have skipped them (an older CRD, validation off).
  const Json* tpu = Member(spec, "tpu");
  if (tpu == nullptr || !tpu->is_object()) return Error("spec.tpu: is required");
  if (auto e = ReadString(*tpu, "type", "spec.tpu.type", out.tpu.type)) return Error(*e);
  std::optional<TpuType> derived;
  if (!out.tpu.type.empty()) {
    auto looked_up = LookUpTpuType(out.tpu.type);
    if (!looked_up) return Error("spec.tpu.type: " + looked_up.error());
    derived = *looked_up;
  }
  // A field the type also sets: absent, it becomes the type's; given, it must be the type's,
  // and the message says what the type means otherwise.
  auto agree = [&](std::string_view field, std::string& given,
                   std::string_view implied) -> std::optional<std::string> {
    if (!derived) return std::nullopt;
    if (given.empty()) {
      given = std::string(implied);
    } else if (given != implied) {
      return "spec.tpu." + std::string(field) + ": \"" + given +
             "\" disagrees with spec.tpu.type " + out.tpu.type + ", whose " + std::string(field) +
             " is " + std::string(implied) + "; leave " + std::string(field) +
             " out or set it to " + std::string(implied);
    }
    return std::nullopt;
  };
  if (auto e = ReadString(*tpu, "accelerator", "spec.tpu.accelerator", out.tpu.accelerator)) {
    return Error(*e);
  }
  if (auto e = agree("accelerator", out.tpu.accelerator,
                     derived ? derived->accelerator : std::string_view())) {
    return Error(*e);
  }
  if (out.tpu.accelerator.empty()) return Error("spec.tpu.accelerator: is required");
  if (auto e = ReadString(*tpu, "topology", "spec.tpu.topology", out.tpu.topology)) {
    return Error(*e);
  }
  if (auto e =
          agree("topology", out.tpu.topology, derived ? derived->topology : std::string_view())) {
    return Error(*e);
  }
  if (out.tpu.TopologyChips() <= 0) {
    return Error("spec.tpu.topology: \"" + out.tpu.topology +
                 "\" is not a topology such as 2x4 or 4x4x4");
  }
  value = 0;
  if (auto e = ReadInt(*tpu, "chipsPerWorker", "spec.tpu.chipsPerWorker", 1, 8, value)) {
    return Error(*e);
  }
  if (derived && value == 0) {
    value = derived->chips_per_host;
  } else if (derived && value != derived->chips_per_host) {
    return Error(
        "spec.tpu.chipsPerWorker: " + std::to_string(value) + " disagrees with spec.tpu.type " +
        out.tpu.type + ", whose hosts have " + std::to_string(derived->chips_per_host) +
        " chips; leave chipsPerWorker out or set it to " + std::to_string(derived->chips_per_host));
  }
  if (value == 0) return Error("spec.tpu.chipsPerWorker: is required");
  out.tpu.chips_per_worker = static_cast<int32_t>(value);
  if (auto e = ReadBool(*tpu, "highSpeedNetwork", "spec.tpu.highSpeedNetwork",
                        out.tpu.high_speed_network)) {
    return Error(*e);
  }
  value = 1;
  if (auto e = ReadInt(*tpu, "slices", "spec.tpu.slices", 1, kMaxSlices, value)) return Error(*e);
  out.tpu.slices = static_cast<int32_t>(value);
  value = out.tpu.slices;
  if (auto e = ReadInt(*tpu, "minSlices", "spec.tpu.minSlices", 1, kMaxSlices, value)) {
    return Error(*e);
  }
  if (value > out.tpu.slices) {
    return Error("spec.tpu.minSlices: " + std::to_string(value) +
                 " is more than spec.tpu.slices (" + std::to_string(out.tpu.slices) + ")");
  }
  out.tpu.min_slices = static_cast<int32_t>(value);

  // Replicas.
  const Json* specs = Member(spec, "replicaSpecs");
  if (specs == nullptr || !specs->is_object()) return Error("spec.replicaSpecs: is required");
  for (const char* ps : {"PS", "ParameterServer"}) {
    if (Member(*specs, ps) != nullptr) {
      return Error(std::string("spec.replicaSpecs.") + ps +
                   ": parameter servers are not supported with TPUs; use Master and Worker "
                   "replicas");
    }
  }
  for (const auto& [key, unused] : specs->items()) {
    if (key != "Master" && key != "Worker") {
      return Error("spec.replicaSpecs." + key + ": unknown replica type (Master or Worker)");
    }
  }
  if (auto e = ReadReplica(*specs, "Master", 1, out.master)) return Error(*e);
  std::optional<ReplicaSpec> worker;
  if (auto e = ReadReplica(*specs, "Worker", 4096, worker, derived)) return Error(*e);
  if (!worker) return Error("spec.replicaSpecs.Worker: is required");
  out.worker = std::move(*worker);
  const int64_t chips = out.tpu.TopologyChips();
  if (int64_t{out.worker.replicas} * out.tpu.chips_per_worker != chips) {
    return Error("spec.replicaSpecs.Worker.replicas: " + std::to_string(out.worker.replicas) +
                 " workers of " + std::to_string(out.tpu.chips_per_worker) +
                 " chips do not make a " + out.tpu.topology + " slice (" + std::to_string(chips) +
                 " chips)");
  }
  if (int64_t{out.worker.replicas} * out.tpu.slices > kMaxJobWorkers) {
    return Error("spec.tpu.slices: " + std::to_string(out.tpu.slices) + " slices of " +
                 std::to_string(out.worker.replicas) + " workers make " +
                 std::to_string(int64_t{out.worker.replicas} * out.tpu.slices) +
                 " worker pods, more than " + std::to_string(kMaxJobWorkers));
  }

  std::string policy = "Master";
  if (auto e = ReadString(spec, "successPolicy", "spec.successPolicy", policy)) return Error(*e);
  if (policy == "Master") {
    out.success_policy = SuccessPolicy::kMaster;
  } else if (policy == "AllWorkers") {
    out.success_policy = SuccessPolicy::kAllWorkers;
  } else {
    return Error("spec.successPolicy: \"" + policy + "\" is not Master or AllWorkers");
  }

  // Fault tolerance.
  FaultTolerance& ft = out.fault_tolerance;
  std::optional<int32_t> spec_retries;
  std::optional<bool> spec_preflight;
  if (const Json* f = Member(spec, "faultTolerance"); f != nullptr) {
    if (!f->is_object()) return Error("spec.faultTolerance: must be an object");
    value = -1;
    if (auto e = ReadInt(*f, "maxJobRetries", "spec.faultTolerance.maxJobRetries", 0, 3, value)) {
      return Error(*e);
    }
    if (value >= 0) spec_retries = static_cast<int32_t>(value);
    value = ft.max_worker_restarts;
    if (auto e = ReadInt(*f, "maxWorkerRestarts", "spec.faultTolerance.maxWorkerRestarts", 0, 100,
                         value)) {
      return Error(*e);
    }
    ft.max_worker_restarts = static_cast<int32_t>(value);
    if (auto e = ReadBool(*f, "cordonFaultyNodes", "spec.faultTolerance.cordonFaultyNodes",
                          ft.cordon_faulty_nodes)) {
      return Error(*e);
    }
    std::string recovery = "Slice";
    if (auto e = ReadString(*f, "recovery", "spec.faultTolerance.recovery", recovery)) {
      return Error(*e);
    }
    if (recovery == "Slice") {
      ft.recovery = Recovery::kSlice;
    } else if (recovery == "Job") {
      ft.recovery = Recovery::kJob;
    } else {
      return Error("spec.faultTolerance.recovery: \"" + recovery + "\" is not Slice or Job");
    }
    std::string restart = "Recreate";
    if (auto e = ReadString(*f, "restart", "spec.faultTolerance.restart", restart)) {
      return Error(*e);
    }
    if (restart == "Recreate") {
      ft.restart = RestartMode::kRecreate;
    } else if (restart == "InPlace") {
      ft.restart = RestartMode::kInPlace;
    } else {
      return Error("spec.faultTolerance.restart: \"" + restart + "\" is not InPlace or Recreate");
    }
    if (auto e = ReadInt(*f, "barrierTimeoutSeconds", "spec.faultTolerance.barrierTimeoutSeconds",
                         1, 3600, ft.barrier_timeout_seconds)) {
      return Error(*e);
    }
    if (auto e = ReadInt(*f, "maintenanceGracePeriodSeconds",
                         "spec.faultTolerance.maintenanceGracePeriodSeconds", 0, 3600,
                         ft.maintenance_grace_period_seconds)) {
      return Error(*e);
    }
    if (auto e =
            ReadInt(*f, "faultAttributionSeconds", "spec.faultTolerance.faultAttributionSeconds", 0,
                    600, ft.fault_attribution_seconds)) {
      return Error(*e);
    }
    if (const Json* codes = Member(*f, "exitCodes"); codes != nullptr) {
      if (!codes->is_object()) return Error("spec.faultTolerance.exitCodes: must be an object");
      if (auto e = ReadCodes(*codes, "permanent", "spec.faultTolerance.exitCodes.permanent",
                             ft.exit_codes.permanent)) {
        return Error(*e);
      }
      if (auto e = ReadCodes(*codes, "retryable", "spec.faultTolerance.exitCodes.retryable",
                             ft.exit_codes.retryable)) {
        return Error(*e);
      }
      const bool explicit_permanent = Member(*codes, "permanent") != nullptr;
      for (int32_t code : ft.exit_codes.retryable) {
        if (!ft.exit_codes.permanent.contains(code)) continue;
        if (explicit_permanent) {
          return Error("spec.faultTolerance.exitCodes: " + std::to_string(code) +
                       " is listed both permanent and retryable");
        }
        ft.exit_codes.permanent.erase(code);  // overrides a default
      }
    }
    if (const Json* progress = Member(*f, "progress"); progress != nullptr) {
      if (auto e = ReadProgress(*progress, ft.progress)) return Error(*e);
    }
    if (const Json* elastic = Member(*f, "elastic"); elastic != nullptr) {
      if (auto e = ReadElastic(*elastic, ft.elastic)) return Error(*e);
      if (!out.Elastic()) {
        return Error(
            "spec.faultTolerance.elastic: has no effect unless spec.tpu.minSlices is "
            "below spec.tpu.slices (" +
            std::to_string(out.tpu.slices) + "); set minSlices or leave elastic out");
      }
    }
    if (const Json* pre = Member(*f, "preflight"); pre != nullptr) {
      if (!pre->is_object()) return Error("spec.faultTolerance.preflight: must be an object");
      if (Member(*pre, "enabled") != nullptr) {
        bool enabled = false;
        if (auto e = ReadBool(*pre, "enabled", "spec.faultTolerance.preflight.enabled", enabled)) {
          return Error(*e);
        }
        spec_preflight = enabled;
      }
      if (const Json* checks = Member(*pre, "checks"); checks != nullptr) {
        if (!checks->is_array())
          return Error("spec.faultTolerance.preflight.checks: must be a list");
        for (const Json& c : *checks) {
          if (!c.is_string()) return Error("spec.faultTolerance.preflight.checks: must be names");
          ft.preflight_checks.push_back(c.get<std::string>());
        }
      }
      if (const Json* t = Member(*pre, "thresholds"); t != nullptr) ft.preflight_thresholds = *t;
      if (auto e = ReadString(*pre, "image", "spec.faultTolerance.preflight.image",
                              ft.preflight_image)) {
        return Error(*e);
      }
    }
  }

  // The annotation shorthand for maxJobRetries.
  std::optional<int32_t> annotation_retries;
  if (auto text = job.annotations.Get(kJobRetryAnnotation)) {
    int32_t parsed = -1;
    const auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), parsed);
    if (ec != std::errc() || ptr != text->data() + text->size() || parsed < 0 || parsed > 3) {
      return Error("annotation " + std::string(kJobRetryAnnotation) + ": \"" + std::string(*text) +
                   "\" is not a number between 0 and 3 (the maximum re-issues of the job; 0 "
                   "turns re-issue off)");
    }
    annotation_retries = parsed;
  }
  if (spec_retries && annotation_retries && *spec_retries != *annotation_retries) {
    return Error("annotation " + std::string(kJobRetryAnnotation) + " (\"" +
                 std::to_string(*annotation_retries) +
                 "\") disagrees with spec.faultTolerance.maxJobRetries (" +
                 std::to_string(*spec_retries) + "); set one of them");
  }
  ft.max_job_retries = spec_retries.value_or(annotation_retries.value_or(0));
  ft.preflight_enabled = spec_preflight.value_or(annotation_retries.value_or(0) > 0);
  if (auto e = PreflightFailsEverywhere(out)) return Error(*e);
  if (auto e = InPlaceNeedsCommands(out)) return Error(*e);
  if (auto e = ElasticNeeds(out)) return Error(*e);

  if (const Json* cp = Member(spec, "checkpoint"); cp != nullptr) {
    if (!cp->is_object()) return Error("spec.checkpoint: must be an object");
    if (auto e = ReadString(*cp, "path", "spec.checkpoint.path", out.checkpoint_path)) {
      return Error(*e);
    }
  }
  return out;
}

bool ManagedByUs(const cache::TPUJobInfo& job) {
  if (!job.spec.is_object()) return true;
  auto it = job.spec.find("managedBy");
  return it == job.spec.end() || !it->is_string() || it->get<std::string>().empty() ||
         it->get<std::string>() == kControllerName;
}

bool MountsVolumeAt(const ReplicaSpec& replica, std::string_view path) {
  auto trim = [](std::string_view p) {
    while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
    return p;
  };
  const Json* spec = replica.template_.is_object() ? Member(replica.template_, "spec") : nullptr;
  const Json* containers =
      spec != nullptr && spec->is_object() ? Member(*spec, "containers") : nullptr;
  if (containers == nullptr || !containers->is_array() || containers->empty() ||
      !(*containers)[0].is_object()) {
    return false;
  }
  const Json* mounts = Member((*containers)[0], "volumeMounts");
  if (mounts == nullptr || !mounts->is_array()) return false;
  for (const Json& m : *mounts) {
    const Json* at = m.is_object() ? Member(m, "mountPath") : nullptr;
    if (at != nullptr && at->is_string() && trim(at->get_ref<const std::string&>()) == trim(path)) {
      return true;
    }
  }
  return false;
}

ExitClass ClassifyExit(const ExitCodeRules& rules, int32_t code, std::string_view reason) {
  if (rules.permanent_reasons.contains(reason)) return ExitClass::kPermanent;
  if (rules.retryable.contains(code)) return ExitClass::kRetryable;
  if (rules.permanent.contains(code)) return ExitClass::kPermanent;
  return ExitClass::kRetryable;
}

}  // namespace tpujob::policy
