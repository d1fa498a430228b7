// NodeInfo (objects.h): decoding a node (taints, conditions, TPU capacity) and what the cache
// asks of one.
#include "cache/json_reader.h"
#include "cache/objects.h"

namespace tpujob::cache {
namespace {

using decode::CopyIdentity;
using decode::Guarded;
using decode::Metadata;
using decode::Path;
using decode::Reader;
using decode::ReadMetadata;
using decode::StringHeapBytes;
using decode::VectorHeapBytes;

TaintEffect ParseTaintEffect(std::string_view text) {
  if (text == "NoSchedule") return TaintEffect::kNoSchedule;
  if (text == "PreferNoSchedule") return TaintEffect::kPreferNoSchedule;
  if (text == "NoExecute") return TaintEffect::kNoExecute;
  return TaintEffect::kUnknown;
}

}  // namespace

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

size_t ApproximateBytes(const NodeInfo& node) {
  size_t bytes = sizeof(NodeInfo) + StringHeapBytes(node.name) + StringHeapBytes(node.uid) +
                 StringHeapBytes(node.resource_version) + ApproximateHeapBytes(node.labels) +
                 ApproximateHeapBytes(node.annotations) + VectorHeapBytes(node.taints) +
                 VectorHeapBytes(node.conditions);
  return bytes;
}

}  // namespace tpujob::cache
