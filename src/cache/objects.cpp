#include "cache/objects.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <limits>

namespace tpujob::cache {
namespace {

constexpr std::string_view kLastAppliedAnnotation =
    "kubectl.kubernetes.io/last-applied-configuration";

// Where a field sits in the document. Built on the stack as decoding descends and rendered to
// text only when an error is reported, so successful decodes pay nothing for it.
struct Path {
  const Path* parent = nullptr;
  std::string_view key;
  int64_t index = -1;

  Path Child(std::string_view child) const { return Path{this, child, -1}; }
  Path Item(size_t i) const { return Path{this, {}, static_cast<int64_t>(i)}; }

  std::string ToString() const {
    std::string out = parent != nullptr ? parent->ToString() : std::string();
    if (index >= 0) {
      out += '[';
      out += std::to_string(index);
      out += ']';
    } else if (!key.empty()) {
      if (!out.empty()) out += '.';
      out += key;
    }
    return out;
  }
};

// Checked accessors over a JSON document. The first type error is remembered and every later
// accessor returns a default, so decoders read straight through and check ok() once at the end.
class Reader {
 public:
  explicit Reader(std::string_view kind) : kind_(kind) {}

  bool ok() const { return !error_.has_value(); }
  kube::Error error() const { return kube::Error::Decode(*error_); }

  void Fail(const Path& at, std::string_view what) {
    if (error_) return;
    std::string where = at.ToString();
    error_ = std::string(kind_) + ": " + (where.empty() ? std::string("<root>") : where) + ": " +
             std::string(what);
  }

  // The member `key` of `object` (which must be an object), or nullptr when absent or null.
  static const Json* Find(const Json& object, std::string_view key) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return nullptr;
    return &*it;
  }

  const Json* Object(const Json& parent, std::string_view key, const Path& at) {
    return Typed(parent, key, at, Json::value_t::object, "object");
  }
  const Json* Array(const Json& parent, std::string_view key, const Path& at) {
    return Typed(parent, key, at, Json::value_t::array, "array");
  }

  std::string_view String(const Json& parent, std::string_view key, const Path& at) {
    const Json* value = Find(parent, key);
    if (value == nullptr) return {};
    if (!value->is_string()) {
      Mismatch(at.Child(key), "string", *value);
      return {};
    }
    return value->get_ref<const std::string&>();
  }

  std::optional<int64_t> Int(const Json& parent, std::string_view key, const Path& at) {
    const Json* value = Find(parent, key);
    if (value == nullptr) return std::nullopt;
    if (value->is_number_integer()) {
      if (value->is_number_unsigned() &&
          value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        Fail(at.Child(key), "integer out of range");
        return std::nullopt;
      }
      return value->get<int64_t>();
    }
    Mismatch(at.Child(key), "integer", *value);
    return std::nullopt;
  }

  int32_t Int32(const Json& parent, std::string_view key, const Path& at) {
    std::optional<int64_t> value = Int(parent, key, at);
    if (!value) return 0;
    if (*value < std::numeric_limits<int32_t>::min() ||
        *value > std::numeric_limits<int32_t>::max()) {
      Fail(at.Child(key), "integer out of range");
      return 0;
    }
    return static_cast<int32_t>(*value);
  }

  bool Bool(const Json& parent, std::string_view key, const Path& at) {
    const Json* value = Find(parent, key);
    if (value == nullptr) return false;
    if (!value->is_boolean()) {
      Mismatch(at.Child(key), "boolean", *value);
      return false;
    }
    return value->get<bool>();
  }

  std::optional<WallTime> Time(const Json& parent, std::string_view key, const Path& at) {
    std::string_view text = String(parent, key, at);
    if (text.empty()) return std::nullopt;
    std::optional<WallTime> time = ParseRfc3339(text);
    if (!time) Fail(at.Child(key), "malformed RFC 3339 timestamp \"" + std::string(text) + "\"");
    return time;
  }

  // A map of strings to strings (labels, annotations). `keep` filters keys.
  template <typename Keep>
  LabelMap StringMap(const Json& parent, std::string_view key, const Path& at, Keep keep) {
    LabelMap map;
    const Json* object = Object(parent, key, at);
    if (object == nullptr) return map;
    const Path here = at.Child(key);
    for (auto it = object->begin(); it != object->end(); ++it) {
      if (!it->is_string()) {
        Mismatch(here.Child(it.key()), "string", *it);
        return map;
      }
      if (keep(std::string_view(it.key()))) {
        map.Set(it.key(), it->get_ref<const std::string&>());
      }
    }
    return map;
  }

  // resources[kTpuResource] from a ResourceList object (values are quantity strings, or numbers
  // when written by hand). 0 when absent.
  int64_t TpuQuantity(const Json* resource_list, const Path& at) {
    if (resource_list == nullptr) return 0;
    const Json* value = Find(*resource_list, kTpuResource);
    if (value == nullptr) return 0;
    if (value->is_number_integer()) return value->get<int64_t>();
    if (value->is_string()) {
      std::optional<int64_t> quantity = ParseQuantity(value->get_ref<const std::string&>());
      if (!quantity) Fail(at.Child(kTpuResource), "malformed quantity");
      return quantity.value_or(0);
    }
    Mismatch(at.Child(kTpuResource), "quantity", *value);
    return 0;
  }

  void Mismatch(const Path& at, std::string_view expected, const Json& got) {
    Fail(at, "expected " + std::string(expected) + ", got " + got.type_name());
  }

 private:
  const Json* Typed(const Json& parent, std::string_view key, const Path& at, Json::value_t type,
                    std::string_view type_name) {
    const Json* value = Find(parent, key);
    if (value == nullptr) return nullptr;
    if (value->type() != type) {
      Mismatch(at.Child(key), type_name, *value);
      return nullptr;
    }
    return value;
  }

  std::string_view kind_;
  std::optional<std::string> error_;
};

bool KeepAll(std::string_view) { return true; }

// The fields of metadata every projection reads.
struct Metadata {
  std::string_view ns;
  std::string_view name;
  std::string_view uid;
  std::string_view resource_version;
  const Json* object = nullptr;
};

Metadata ReadMetadata(Reader& reader, const Json& object, const Path& root) {
  Metadata meta;
  meta.object = reader.Object(object, "metadata", root);
  const Path at = root.Child("metadata");
  if (meta.object == nullptr) {
    reader.Fail(at, "missing");
    return meta;
  }
  meta.name = reader.String(*meta.object, "name", at);
  if (meta.name.empty() && reader.ok()) reader.Fail(at.Child("name"), "missing");
  meta.ns = reader.String(*meta.object, "namespace", at);
  meta.uid = reader.String(*meta.object, "uid", at);
  meta.resource_version = reader.String(*meta.object, "resourceVersion", at);
  return meta;
}

// Copies the identity every projection carries (namespace when it has one, name, uid,
// resourceVersion, labels) out of the metadata just read.
template <typename T>
void CopyIdentity(Reader& reader, const Metadata& meta, const Path& meta_at, T& out) {
  if constexpr (requires { out.ns; }) out.ns = InternedString::Intern(meta.ns);
  out.name = meta.name;
  out.uid = meta.uid;
  out.resource_version = meta.resource_version;
  out.labels = reader.StringMap(*meta.object, "labels", meta_at, KeepAll);
}

// The ownerReference marked controller: true (empty when there is none).
OwnerInfo ReadControllerOwner(Reader& reader, const Json& metadata, const Path& meta_at) {
  OwnerInfo out;
  const Json* owners = reader.Array(metadata, "ownerReferences", meta_at);
  if (owners == nullptr) return out;
  const Path owners_at = meta_at.Child("ownerReferences");
  for (size_t i = 0; i < owners->size(); ++i) {
    const Json& owner = (*owners)[i];
    if (!owner.is_object()) {
      reader.Mismatch(owners_at.Item(i), "object", owner);
      break;
    }
    if (!reader.Bool(owner, "controller", owners_at.Item(i))) continue;
    out.kind = InternedString::Intern(reader.String(owner, "kind", owners_at.Item(i)));
    out.name = InternedString::Intern(reader.String(owner, "name", owners_at.Item(i)));
    out.uid = InternedString::Intern(reader.String(owner, "uid", owners_at.Item(i)));
    break;
  }
  return out;
}

// Runs `decode` and turns any exception nlohmann_json might still raise into a decode error.
template <typename T, typename Decode>
kube::Result<T> Guarded(std::string_view kind, const Json& object, Decode decode) {
  if (!object.is_object()) {
    return std::unexpected(
        kube::Error::Decode(std::string(kind) + ": expected object, got " + object.type_name()));
  }
  try {
    return decode();
  } catch (const Json::exception& e) {
    return std::unexpected(kube::Error::Decode(std::string(kind) + ": " + e.what()));
  }
}

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

size_t StringHeapBytes(const std::string& s) {
  // Short strings live inside the object (small-string optimisation).
  constexpr size_t kInline = 15;
  constexpr size_t kAllocationOverhead = 16;
  return s.capacity() > kInline ? s.capacity() + 1 + kAllocationOverhead : 0;
}

template <typename T>
size_t VectorHeapBytes(const std::vector<T>& v) {
  constexpr size_t kAllocationOverhead = 16;
  return v.capacity() > 0 ? v.capacity() * sizeof(T) + kAllocationOverhead : 0;
}

bool ParseDigits(std::string_view text, size_t& pos, size_t count, int& out) {
  if (pos + count > text.size()) return false;
  int value = 0;
  for (size_t i = 0; i < count; ++i) {
    char c = text[pos + i];
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  pos += count;
  out = value;
  return true;
}

bool Expect(std::string_view text, size_t& pos, std::string_view choices) {
  if (pos >= text.size() || choices.find(text[pos]) == std::string_view::npos) return false;
  ++pos;
  return true;
}

// Multiplies with overflow detection.
bool MultiplyChecked(uint64_t& value, uint64_t factor) {
  if (factor != 0 && value > std::numeric_limits<uint64_t>::max() / factor) return false;
  value *= factor;
  return true;
}

}  // namespace

// --- LabelMap ---------------------------------------------------------------------------------

LabelMap::LabelMap(std::initializer_list<std::pair<std::string_view, std::string_view>> entries) {
  entries_.reserve(entries.size());
  for (const auto& [key, value] : entries) Set(key, value);
}

std::vector<LabelMap::Entry>::const_iterator LabelMap::find(std::string_view key) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const Entry& e, std::string_view k) { return e.first.view() < k; });
  if (it == entries_.end() || it->first.view() != key) return entries_.end();
  return it;
}

std::optional<std::string_view> LabelMap::Get(std::string_view key) const {
  auto it = find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second.view();
}

void LabelMap::Set(std::string_view key, std::string_view value) {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const Entry& e, std::string_view k) { return e.first.view() < k; });
  if (it != entries_.end() && it->first.view() == key) {
    it->second = InternedString::Intern(value);
    return;
  }
  entries_.emplace(it, InternedString::Intern(key), InternedString::Intern(value));
}

void LabelMap::Erase(std::string_view key) {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const Entry& e, std::string_view k) { return e.first.view() < k; });
  if (it != entries_.end() && it->first.view() == key) entries_.erase(it);
}

// --- Enums ------------------------------------------------------------------------------------

std::string_view ToString(ConditionStatus status) {
  switch (status) {
    case ConditionStatus::kTrue:
      return "True";
    case ConditionStatus::kFalse:
      return "False";
    case ConditionStatus::kUnknown:
      break;
  }
  return "Unknown";
}

ConditionStatus ParseConditionStatus(std::string_view text) {
  if (text == "True") return ConditionStatus::kTrue;
  if (text == "False") return ConditionStatus::kFalse;
  return ConditionStatus::kUnknown;
}

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

std::string_view ToString(TaintEffect effect) {
  switch (effect) {
    case TaintEffect::kNoSchedule:
      return "NoSchedule";
    case TaintEffect::kPreferNoSchedule:
      return "PreferNoSchedule";
    case TaintEffect::kNoExecute:
      return "NoExecute";
    case TaintEffect::kUnknown:
      break;
  }
  return "Unknown";
}

namespace {
TaintEffect ParseTaintEffect(std::string_view text) {
  if (text == "NoSchedule") return TaintEffect::kNoSchedule;
  if (text == "PreferNoSchedule") return TaintEffect::kPreferNoSchedule;
  if (text == "NoExecute") return TaintEffect::kNoExecute;
  return TaintEffect::kUnknown;
}
}  // namespace

// --- PodInfo ----------------------------------------------------------------------------------

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

// --- NodeInfo ---------------------------------------------------------------------------------

const NodeCondition* NodeInfo::FindCondition(std::string_view type) const {
  for (const NodeCondition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

const Taint* NodeInfo::FindTaint(std::string_view key) const {
  for (const Taint& t : taints) {
    if (t.key == key) return &t;
  }
  return nullptr;
}

std::optional<std::string_view> NodeInfo::FieldValue(std::string_view field) const {
  if (field == "metadata.name") return name;
  if (field == "spec.unschedulable") return unschedulable ? "true" : "false";
  return std::nullopt;
}

bool NodeInfo::HasField(std::string_view field) {
  static const NodeInfo kProbe;
  return kProbe.FieldValue(field).has_value();
}

const std::vector<std::string>& NodeInfo::VolatileFields() {
  static const std::vector<std::string> kFields = {"metadata.managedFields[].time",
                                                   "status.conditions[].lastHeartbeatTime"};
  return kFields;
}

kube::Result<NodeInfo> NodeInfo::FromJson(const Json& object) {
  return Guarded<NodeInfo>("node", object, [&]() -> kube::Result<NodeInfo> {
    Reader reader("node");
    const Path root;
    NodeInfo node;
    Metadata meta = ReadMetadata(reader, object, root);
    if (!reader.ok()) return std::unexpected(reader.error());
    const Path meta_at = root.Child("metadata");
    CopyIdentity(reader, meta, meta_at, node);
    node.annotations = reader.StringMap(
        *meta.object, "annotations", meta_at,
        [](std::string_view key) { return key.starts_with(kOperatorAnnotationPrefix); });

    const Path spec_at = root.Child("spec");
    if (const Json* spec = reader.Object(object, "spec", root)) {
      node.unschedulable = reader.Bool(*spec, "unschedulable", spec_at);
      if (const Json* taints = reader.Array(*spec, "taints", spec_at)) {
        const Path taints_at = spec_at.Child("taints");
        node.taints.reserve(taints->size());
        for (size_t i = 0; i < taints->size(); ++i) {
          const Json& taint = (*taints)[i];
          const Path at = taints_at.Item(i);
          if (!taint.is_object()) {
            reader.Mismatch(at, "object", taint);
            break;
          }
          node.taints.push_back(Taint{
              InternedString::Intern(reader.String(taint, "key", at)),
              InternedString::Intern(reader.String(taint, "value", at)),
              ParseTaintEffect(reader.String(taint, "effect", at)),
          });
        }
      }
    }
    const Path status_at = root.Child("status");
    if (const Json* status = reader.Object(object, "status", root)) {
      node.tpu_allocatable = reader.TpuQuantity(reader.Object(*status, "allocatable", status_at),
                                                status_at.Child("allocatable"));
      if (const Json* conditions = reader.Array(*status, "conditions", status_at)) {
        const Path conditions_at = status_at.Child("conditions");
        node.conditions.reserve(conditions->size());
        for (size_t i = 0; i < conditions->size(); ++i) {
          const Json& condition = (*conditions)[i];
          const Path at = conditions_at.Item(i);
          if (!condition.is_object()) {
            reader.Mismatch(at, "object", condition);
            break;
          }
          NodeCondition c;
          c.type = InternedString::Intern(reader.String(condition, "type", at));
          c.status = ParseConditionStatus(reader.String(condition, "status", at));
          c.reason = InternedString::Intern(reader.String(condition, "reason", at));
          c.message = InternedString::Intern(reader.String(condition, "message", at));
          c.last_transition_time = reader.Time(condition, "lastTransitionTime", at);
          if (c.type == "Ready") node.ready = c.status;
          node.conditions.push_back(std::move(c));
        }
      }
    }
    if (!reader.ok()) return std::unexpected(reader.error());
    return node;
  });
}

// --- TPUJobInfo -------------------------------------------------------------------------------

std::string TPUJobInfo::Key() const { return ObjectKey(ns, name); }

std::optional<std::string_view> TPUJobInfo::FieldValue(std::string_view field) const {
  if (field == "metadata.name") return name;
  if (field == "metadata.namespace") return ns.view();
  return std::nullopt;
}

bool TPUJobInfo::HasField(std::string_view field) {
  static const TPUJobInfo kProbe;
  return kProbe.FieldValue(field).has_value();
}

kube::Result<TPUJobInfo> TPUJobInfo::FromJson(const Json& object) {
  return Guarded<TPUJobInfo>("tpujob", object, [&]() -> kube::Result<TPUJobInfo> {
    Reader reader("tpujob");
    const Path root;
    TPUJobInfo job;
    Metadata meta = ReadMetadata(reader, object, root);
    if (!reader.ok()) return std::unexpected(reader.error());
    const Path meta_at = root.Child("metadata");
    CopyIdentity(reader, meta, meta_at, job);
    job.generation = reader.Int(*meta.object, "generation", meta_at).value_or(0);
    job.annotations =
        reader.StringMap(*meta.object, "annotations", meta_at,
                         [](std::string_view key) { return key != kLastAppliedAnnotation; });
    if (const Json* finalizers = reader.Array(*meta.object, "finalizers", meta_at)) {
      const Path finalizers_at = meta_at.Child("finalizers");
      for (size_t i = 0; i < finalizers->size(); ++i) {
        const Json& finalizer = (*finalizers)[i];
        if (!finalizer.is_string()) {
          reader.Mismatch(finalizers_at.Item(i), "string", finalizer);
          break;
        }
        job.finalizers.push_back(finalizer.get<std::string>());
      }
    }
    job.creation_timestamp = reader.Time(*meta.object, "creationTimestamp", meta_at);
    job.deletion_timestamp = reader.Time(*meta.object, "deletionTimestamp", meta_at);
    if (const Json* spec = reader.Object(object, "spec", root)) job.spec = *spec;
    if (const Json* status = reader.Object(object, "status", root)) job.status = *status;
    if (!reader.ok()) return std::unexpected(reader.error());
    return job;
  });
}

std::string WorkloadInfo::Key() const { return ObjectKey(ns, name); }

std::optional<std::string_view> WorkloadInfo::FieldValue(std::string_view field) const {
  if (field == "metadata.name") return name;
  if (field == "metadata.namespace") return ns.view();
  return std::nullopt;
}

bool WorkloadInfo::HasField(std::string_view field) {
  static const WorkloadInfo kProbe;
  return kProbe.FieldValue(field).has_value();
}

kube::Result<WorkloadInfo> WorkloadInfo::FromJson(const Json& object) {
  return Guarded<WorkloadInfo>("workload", object, [&]() -> kube::Result<WorkloadInfo> {
    Reader reader("workload");
    const Path root;
    WorkloadInfo workload;
    Metadata meta = ReadMetadata(reader, object, root);
    if (!reader.ok()) return std::unexpected(reader.error());
    const Path meta_at = root.Child("metadata");
    CopyIdentity(reader, meta, meta_at, workload);
    workload.generation = reader.Int(*meta.object, "generation", meta_at).value_or(0);
    workload.annotations = reader.StringMap(*meta.object, "annotations", meta_at, KeepAll);
    workload.deletion_timestamp = reader.Time(*meta.object, "deletionTimestamp", meta_at);
    workload.owner = ReadControllerOwner(reader, *meta.object, meta_at);
    if (const Json* owners = reader.Array(*meta.object, "ownerReferences", meta_at)) {
      workload.owner_references = owners->size();
    }
    if (const Json* spec = reader.Object(object, "spec", root)) workload.spec = *spec;
    if (const Json* status = reader.Object(object, "status", root)) workload.status = *status;
    if (!reader.ok()) return std::unexpected(reader.error());
    return workload;
  });
}

// --- Helpers ----------------------------------------------------------------------------------

std::string ObjectKey(std::string_view ns, std::string_view name) {
  std::string key;
  if (ns.empty()) return std::string(name);
  key.reserve(ns.size() + 1 + name.size());
  key.append(ns);
  key += '/';
  key.append(name);
  return key;
}

std::optional<WallTime> ParseRfc3339(std::string_view text) {
  using namespace std::chrono;
  size_t pos = 0;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!ParseDigits(text, pos, 4, year) || !Expect(text, pos, "-") ||
      !ParseDigits(text, pos, 2, month) || !Expect(text, pos, "-") ||
      !ParseDigits(text, pos, 2, day) || !Expect(text, pos, "Tt ") ||
      !ParseDigits(text, pos, 2, hour) || !Expect(text, pos, ":") ||
      !ParseDigits(text, pos, 2, minute) || !Expect(text, pos, ":") ||
      !ParseDigits(text, pos, 2, second)) {
    return std::nullopt;
  }
  const year_month_day date{std::chrono::year(year),
                            std::chrono::month(static_cast<unsigned>(month)),
                            std::chrono::day(static_cast<unsigned>(day))};
  if (!date.ok() || hour > 23 || minute > 59 || second > 60) return std::nullopt;
  nanoseconds fraction{0};
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int64_t value = 0;
    int digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (digits < 9) {
        value = value * 10 + (text[pos] - '0');
        ++digits;
      }
      ++pos;
    }
    if (digits == 0) return std::nullopt;
    for (int i = digits; i < 9; ++i) value *= 10;
    fraction = nanoseconds(value);
  }
  minutes offset{0};
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    const bool negative = text[pos] == '-';
    ++pos;
    int offset_hours = 0, offset_minutes = 0;
    if (!ParseDigits(text, pos, 2, offset_hours) || !Expect(text, pos, ":") ||
        !ParseDigits(text, pos, 2, offset_minutes) || offset_hours > 23 || offset_minutes > 59) {
      return std::nullopt;
    }
    offset = hours(offset_hours) + minutes(offset_minutes);
    if (negative) offset = -offset;
  } else {
    return std::nullopt;
  }
  if (pos != text.size()) return std::nullopt;
  // WallTime counts nanoseconds in 64 bits (years 1677 to 2262); a time outside that is not one
  // the API server writes, and converting it would overflow.
  const sys_seconds whole =
      sys_days(date) + hours(hour) + minutes(minute) + seconds(second) - offset;
  constexpr sys_seconds kEarliest = time_point_cast<seconds>(WallTime::min()) + seconds(1);
  constexpr sys_seconds kLatest = time_point_cast<seconds>(WallTime::max()) - seconds(1);
  if (whole < kEarliest || whole > kLatest) return std::nullopt;
  const sys_time<nanoseconds> utc = whole + fraction;
  return time_point_cast<WallTime::duration>(utc);
}

std::string FormatRfc3339(WallTime time) {
  using namespace std::chrono;
  const sys_seconds whole = floor<seconds>(time);
  const sys_days day = floor<days>(whole);
  const year_month_day date(day);
  const hh_mm_ss<seconds> clock(whole - day);
  std::array<char, 32> buffer{};
  std::snprintf(buffer.data(), buffer.size(), "%04d-%02u-%02uT%02d:%02d:%02dZ",
                static_cast<int>(date.year()), static_cast<unsigned>(date.month()),
                static_cast<unsigned>(date.day()), static_cast<int>(clock.hours().count()),
                static_cast<int>(clock.minutes().count()),
                static_cast<int>(clock.seconds().count()));
  return std::string(buffer.data());
}

std::string FormatRfc3339Millis(WallTime time) {
  std::string text = FormatRfc3339(time);  // "...:SSZ"
  const auto ms = std::chrono::floor<std::chrono::milliseconds>(time) -
                  std::chrono::floor<std::chrono::seconds>(time);
  std::array<char, 8> fraction{};
  std::snprintf(fraction.data(), fraction.size(), ".%03dZ", static_cast<int>(ms.count()));
  text.pop_back();
  return text + fraction.data();
}

std::optional<int64_t> ParseQuantity(std::string_view text) {
  if (text.empty()) return std::nullopt;
  size_t pos = 0;
  bool negative = false;
  if (text[pos] == '+' || text[pos] == '-') {
    negative = text[pos] == '-';
    ++pos;
  }
  // The number as an exact integer mantissa times 10^exponent10 times 2^exponent2.
  uint64_t mantissa = 0;
  int exponent10 = 0;
  int exponent2 = 0;
  size_t digits = 0;
  bool seen_point = false;
  for (; pos < text.size(); ++pos) {
    const char c = text[pos];
    if (c == '.' && !seen_point) {
      seen_point = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    ++digits;
    if (mantissa > (std::numeric_limits<uint64_t>::max() - 9) / 10) {
      if (!seen_point) ++exponent10;  // drop low-order integer digits: far out of range anyway
      continue;
    }
    mantissa = mantissa * 10 + static_cast<uint64_t>(c - '0');
    if (seen_point) --exponent10;
  }
  if (digits == 0) return std::nullopt;
  std::string_view suffix = text.substr(pos);
  static constexpr std::array<std::pair<std::string_view, int>, 6> kBinary = {
      {{"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}, {"Pi", 50}, {"Ei", 60}}};
  static constexpr std::array<std::pair<std::string_view, int>, 9> kDecimal = {{{"n", -9},
                                                                                {"u", -6},
                                                                                {"m", -3},
                                                                                {"", 0},
                                                                                {"k", 3},
                                                                                {"M", 6},
                                                                                {"G", 9},
                                                                                {"T", 12},
                                                                                {"P", 15}}};
  bool matched = false;
  for (const auto& [name, shift] : kBinary) {
    if (suffix == name) exponent2 = shift, matched = true;
  }
  for (const auto& [name, shift] : kDecimal) {
    if (!matched && suffix == name) exponent10 += shift, matched = true;
  }
  if (!matched && suffix == "E") exponent10 += 18, matched = true;
  if (!matched && (suffix.starts_with('e') || suffix.starts_with('E'))) {
    int exponent = 0;
    std::string_view digits_part = suffix.substr(1);
    if (!digits_part.empty() && digits_part.front() == '+') digits_part.remove_prefix(1);
    auto [end, ec] =
        std::from_chars(digits_part.data(), digits_part.data() + digits_part.size(), exponent);
    if (ec != std::errc() || end != digits_part.data() + digits_part.size() ||
        digits_part.empty()) {
      return std::nullopt;
    }
    if (exponent > 100 || exponent < -100) return std::nullopt;
    exponent10 += exponent;
    matched = true;
  }
  if (!matched) return std::nullopt;

  // Multiply first, then divide rounding up, so 0.5Ki is exactly 512.
  uint64_t value = mantissa;
  for (int i = 0; i < exponent2; ++i) {
    if (!MultiplyChecked(value, 2)) return std::nullopt;
  }
  for (; exponent10 > 0; --exponent10) {
    if (!MultiplyChecked(value, 10)) return std::nullopt;
  }
  if (exponent10 < 0) {
    bool remainder = false;
    for (; exponent10 < 0 && value > 0; ++exponent10) {
      remainder = remainder || value % 10 != 0;
      value /= 10;
    }
    if (remainder) ++value;
  }
  if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  const auto result = static_cast<int64_t>(value);
  return negative ? -result : result;
}

size_t ApproximateHeapBytes(const LabelMap& map) { return VectorHeapBytes(map.entries_); }

size_t ApproximateBytes(const PodInfo& pod) {
  return sizeof(PodInfo) + StringHeapBytes(pod.name) + StringHeapBytes(pod.uid) +
         StringHeapBytes(pod.resource_version) + StringHeapBytes(pod.pod_ip) +
         ApproximateHeapBytes(pod.labels) + VectorHeapBytes(pod.init_containers) +
         VectorHeapBytes(pod.containers);
}

size_t ApproximateBytes(const NodeInfo& node) {
  size_t bytes = sizeof(NodeInfo) + StringHeapBytes(node.name) + StringHeapBytes(node.uid) +
                 StringHeapBytes(node.resource_version) + ApproximateHeapBytes(node.labels) +
                 ApproximateHeapBytes(node.annotations) + VectorHeapBytes(node.taints) +
                 VectorHeapBytes(node.conditions);
  return bytes;
}

}  // namespace tpujob::cache
