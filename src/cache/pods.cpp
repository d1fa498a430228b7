// PodInfo (objects.h): decoding a pod, its containers merged with their statuses, and what the
// cache asks of one.
#include <algorithm>
#include <charconv>

#include "cache/json_reader.h"
#include "cache/objects.h"

namespace tpujob::cache {
namespace {

using decode::CopyIdentity;
using decode::Guarded;
using decode::Metadata;
using decode::Path;
using decode::ReadControllerOwner;
using decode::Reader;
using decode::ReadMetadata;
using decode::StringHeapBytes;
using decode::VectorHeapBytes;

ContainerInfo ReadContainerSpec(Reader& reader, const Json& spec, const Path& at) {
  ContainerInfo container;
  if (!spec.is_object()) {
    reader.Mismatch(at, "object", spec);
    return container;
  }
  std::string_view name = reader.String(spec, "name", at);
  if (name.empty() && reader.ok()) reader.Fail(at.Child("name"), "missing");
  container.name = InternedString::Intern(name);
  if (const Json* resources = reader.Object(spec, "resources", at)) {
    const Path resources_at = at.Child("resources");
    container.tpu_request = reader.TpuQuantity(reader.Object(*resources, "requests", resources_at),
                                               resources_at.Child("requests"));
    if (container.tpu_request == 0) {
      container.tpu_request = reader.TpuQuantity(reader.Object(*resources, "limits", resources_at),
                                                 resources_at.Child("limits"));
    }
  }
  return container;
}

void ReadContainerStatus(Reader& reader, const Json& status, const Path& at,
                         ContainerInfo& container) {
  container.restart_count = reader.Int32(status, "restartCount", at);
  container.ready = reader.Bool(status, "ready", at);
  if (const Json* state = reader.Object(status, "state", at)) {
    const Path state_at = at.Child("state");
    if (const Json* terminated = reader.Object(*state, "terminated", state_at)) {
      const Path terminated_at = state_at.Child("terminated");
      container.state = ContainerState::kTerminated;
      container.exit_code = reader.Int32(*terminated, "exitCode", terminated_at);
      container.reason =
          InternedString::Intern(reader.String(*terminated, "reason", terminated_at));
      container.message =
          InternedString::Intern(reader.String(*terminated, "message", terminated_at));
      container.finished_at = reader.Time(*terminated, "finishedAt", terminated_at);
    } else if (const Json* waiting = reader.Object(*state, "waiting", state_at)) {
      const Path waiting_at = state_at.Child("waiting");
      container.state = ContainerState::kWaiting;
      container.reason = InternedString::Intern(reader.String(*waiting, "reason", waiting_at));
      container.message = InternedString::Intern(reader.String(*waiting, "message", waiting_at));
    } else if (reader.Object(*state, "running", state_at) != nullptr) {
      container.state = ContainerState::kRunning;
    }
  }
  if (const Json* last = reader.Object(status, "lastState", at)) {
    const Path last_at = at.Child("lastState");
    if (const Json* terminated = reader.Object(*last, "terminated", last_at)) {
      const Path terminated_at = last_at.Child("terminated");
      container.last_exit_code = reader.Int32(*terminated, "exitCode", terminated_at);
      container.last_reason =
          InternedString::Intern(reader.String(*terminated, "reason", terminated_at));
      container.last_message =
          InternedString::Intern(reader.String(*terminated, "message", terminated_at));
      container.last_finished_at = reader.Time(*terminated, "finishedAt", terminated_at);
    }
  }
}

// Merges spec.<spec_key> with status.<status_key> by container name.
std::vector<ContainerInfo> ReadContainers(Reader& reader, const Json* spec, const Path& spec_at,
                                          const Json* status, const Path& status_at,
                                          std::string_view spec_key, std::string_view status_key) {
  std::vector<ContainerInfo> containers;
  if (spec != nullptr) {
    if (const Json* list = reader.Array(*spec, spec_key, spec_at)) {
      const Path list_at = spec_at.Child(spec_key);
      containers.reserve(list->size());
      for (size_t i = 0; i < list->size(); ++i) {
        containers.push_back(ReadContainerSpec(reader, (*list)[i], list_at.Item(i)));
      }
    }
  }
  if (status != nullptr) {
    if (const Json* list = reader.Array(*status, status_key, status_at)) {
      const Path list_at = status_at.Child(status_key);
      for (size_t i = 0; i < list->size(); ++i) {
        const Json& item = (*list)[i];
        const Path item_at = list_at.Item(i);
        if (!item.is_object()) {
          reader.Mismatch(item_at, "object", item);
          break;
        }
        std::string_view name = reader.String(item, "name", item_at);
        auto it = std::find_if(containers.begin(), containers.end(),
                               [&](const ContainerInfo& c) { return c.name == name; });
        if (it == containers.end()) {  // a status without a spec: keep what the kubelet says
          containers.emplace_back();
          it = std::prev(containers.end());
          it->name = InternedString::Intern(name);
        }
        ReadContainerStatus(reader, item, item_at, *it);
      }
    }
  }
  containers.shrink_to_fit();
  return containers;
}

const ContainerInfo* FindByName(const std::vector<ContainerInfo>& containers,
                                std::string_view name) {
  for (const ContainerInfo& c : containers) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

}  // namespace

std::string_view ToString(PodPhase phase) {
  switch (phase) {
    case PodPhase::kPending:
      return "Pending";
    case PodPhase::kRunning:
      return "Running";
    case PodPhase::kSucceeded:
      return "Succeeded";
    case PodPhase::kFailed:
      return "Failed";
    case PodPhase::kUnknown:
      break;
  }
  return "Unknown";
}

PodPhase ParsePodPhase(std::string_view text) {
  if (text.empty() || text == "Pending") return PodPhase::kPending;
  if (text == "Running") return PodPhase::kRunning;
  if (text == "Succeeded") return PodPhase::kSucceeded;
  if (text == "Failed") return PodPhase::kFailed;
  return PodPhase::kUnknown;
}

std::string_view ToString(ContainerState state) {
  switch (state) {
    case ContainerState::kWaiting:
      return "Waiting";
    case ContainerState::kRunning:
      return "Running";
    case ContainerState::kTerminated:
      return "Terminated";
    case ContainerState::kNone:
      break;
  }
  return "None";
}

std::string PodInfo::Key() const { return ObjectKey(ns, name); }

int64_t PodInfo::TpuRequest() const {
  int64_t sum = 0;
  for (const ContainerInfo& c : containers) sum += c.tpu_request;
  int64_t init_max = 0;
  for (const ContainerInfo& c : init_containers) init_max = std::max(init_max, c.tpu_request);
  return std::max(sum, init_max);
}

const ContainerInfo* PodInfo::FindContainer(std::string_view container_name) const {
  return FindByName(containers, container_name);
}

const ContainerInfo* PodInfo::FindInitContainer(std::string_view container_name) const {
  return FindByName(init_containers, container_name);
}

std::optional<std::string_view> PodInfo::FieldValue(std::string_view field) const {
  if (field == "metadata.name") return name;
  if (field == "metadata.namespace") return ns.view();
  if (field == "spec.nodeName") return node_name.view();
  if (field == "status.phase") return ToString(phase);
  if (field == "status.podIP") return pod_ip;
  return std::nullopt;
}

bool PodInfo::HasField(std::string_view field) {
  static const PodInfo kProbe;
  return kProbe.FieldValue(field).has_value();
}

kube::Result<PodInfo> PodInfo::FromJson(const Json& object) {
  return Guarded<PodInfo>("pod", object, [&]() -> kube::Result<PodInfo> {
    Reader reader("pod");
    const Path root;
    PodInfo pod;
    Metadata meta = ReadMetadata(reader, object, root);
    if (!reader.ok()) return std::unexpected(reader.error());
    const Path meta_at = root.Child("metadata");
    CopyIdentity(reader, meta, meta_at, pod);
    pod.deletion_timestamp = reader.Time(*meta.object, "deletionTimestamp", meta_at);
    pod.owner = ReadControllerOwner(reader, *meta.object, meta_at);
    if (const Json* annotations = reader.Object(*meta.object, "annotations", meta_at)) {
      auto generation = [annotations](std::string_view key) {
        const Json* value = Reader::Find(*annotations, key);
        int32_t parsed = 0;
        if (value == nullptr || !value->is_string()) return 0;
        const std::string& text = value->get_ref<const std::string&>();
        const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
        return ec == std::errc() && ptr == text.data() + text.size() && parsed > 0 ? parsed : 0;
      };
      pod.ordered_generation = generation(kGenerationAnnotation);
      pod.barrier_generation = generation(kBarrierAnnotation);
      if (const Json* check = Reader::Find(*annotations, kHardwareCheckAnnotation);
          check != nullptr && check->is_string()) {
        pod.hardware_check = InternedString::Intern(check->get_ref<const std::string&>());
      }
    }

    const Json* spec = reader.Object(object, "spec", root);
    const Json* status = reader.Object(object, "status", root);
    const Path spec_at = root.Child("spec");
    const Path status_at = root.Child("status");
    if (spec != nullptr)
      pod.node_name = InternedString::Intern(reader.String(*spec, "nodeName", spec_at));
    if (status != nullptr) {
      pod.phase = ParsePodPhase(reader.String(*status, "phase", status_at));
      pod.reason = InternedString::Intern(reader.String(*status, "reason", status_at));
      pod.message = InternedString::Intern(reader.String(*status, "message", status_at));
      pod.pod_ip = reader.String(*status, "podIP", status_at);
      if (const Json* conditions = reader.Array(*status, "conditions", status_at)) {
        const Path conditions_at = status_at.Child("conditions");
        for (size_t i = 0; i < conditions->size(); ++i) {
          const Json& condition = (*conditions)[i];
          const Path at = conditions_at.Item(i);
          if (!condition.is_object()) {
            reader.Mismatch(at, "object", condition);
            break;
          }
          std::string_view type = reader.String(condition, "type", at);
          ConditionStatus value = ParseConditionStatus(reader.String(condition, "status", at));
          if (type == "Ready") {
            pod.ready = value == ConditionStatus::kTrue;
          } else if (type == "PodScheduled") {
            pod.unschedulable = value == ConditionStatus::kFalse &&
                                reader.String(condition, "reason", at) == "Unschedulable";
          }
        }
      }
    }
    pod.init_containers = ReadContainers(reader, spec, spec_at, status, status_at, "initContainers",
                                         "initContainerStatuses");
    pod.containers =
        ReadContainers(reader, spec, spec_at, status, status_at, "containers", "containerStatuses");
    if (!reader.ok()) return std::unexpected(reader.error());
    return pod;
  });
}

size_t ApproximateBytes(const PodInfo& pod) {
  return sizeof(PodInfo) + StringHeapBytes(pod.name) + StringHeapBytes(pod.uid) +
         StringHeapBytes(pod.resource_version) + StringHeapBytes(pod.pod_ip) +
         ApproximateHeapBytes(pod.labels) + VectorHeapBytes(pod.init_containers) +
         VectorHeapBytes(pod.containers);
}

}  // namespace tpujob::cache
