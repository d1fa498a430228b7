#include "policy/node_health.h"

namespace tpujob::policy {

std::string_view ToString(NodeVerdict verdict) {
  switch (verdict) {
    case NodeVerdict::kHealthy:
      return "Healthy";
    case NodeVerdict::kMaintenance:
      return "Maintenance";
    case NodeVerdict::kUnhealthy:
      return "Unhealthy";
    case NodeVerdict::kMissing:
      return "Missing";
  }
  return "";
}

NodeHealth EvaluateNode(const cache::NodeInfo* node, const NodeHealthConfig& config) {
  NodeHealth health;
  if (node == nullptr) {
    health.verdict = NodeVerdict::kMissing;
    health.reason = "NodeDeleted";
    health.message = "the node no longer exists";
    health.unreachable = true;
    return health;
  }
  for (const std::string& key : config.maintenance_taints) {
    if (node->FindTaint(key) != nullptr) {
      return {NodeVerdict::kMaintenance, "Maintenance",
              "node " + node->name + " has the maintenance taint " + key, false};
    }
  }
  for (const auto& [key, value] : config.maintenance_labels) {
    if (node->labels.Value(key) == value) {
      return {NodeVerdict::kMaintenance, "Maintenance",
              "node " + node->name + " is labelled " + key + "=" + value, false};
    }
  }
  for (const std::string& type : config.maintenance_conditions) {
    const cache::NodeCondition* c = node->FindCondition(type);
    if (c != nullptr && c->status == cache::ConditionStatus::kTrue) {
      return {NodeVerdict::kMaintenance, "Maintenance",
              "node " + node->name + " reports " + type + ": " + c->message, false};
    }
  }
  for (const std::string& type : config.hardware_conditions) {
    const cache::NodeCondition* c = node->FindCondition(type);
    if (c != nullptr && c->status == cache::ConditionStatus::kTrue) {
      return {NodeVerdict::kUnhealthy, type,
              "node " + node->name + " reports " + type +
                  (c->message.empty() ? std::string() : ": " + c->message),
              false};
    }
  }
  if (node->ready == cache::ConditionStatus::kFalse) {
    const cache::NodeCondition* c = node->FindCondition("Ready");
    return {NodeVerdict::kUnhealthy, "NodeNotReady",
            "node " + node->name + " is not Ready" +
                (c != nullptr && !c->message.empty() ? ": " + c->message : std::string()),
            false};
  }
  if (node->ready == cache::ConditionStatus::kUnknown && node->FindCondition("Ready") != nullptr) {
    return {NodeVerdict::kUnhealthy, "NodeUnreachable",
            "node " + node->name + " stopped reporting (Ready is Unknown)", true};
  }
  return health;
}

}  // namespace tpujob::policy
