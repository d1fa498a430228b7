#include "policy/node_health.h"

#include <charconv>
#include <cstdint>

namespace tpujob::policy {
namespace {

std::string FormatDuration(Duration d) {
  int64_t s = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  const bool negative = s < 0;
  if (negative) s = -s;
  std::string out;
  if (s >= 3600) out += std::to_string(s / 3600) + "h";
  if (s >= 60) out += std::to_string(s / 60 % 60) + "m";
  out += std::to_string(s % 60) + "s";
  return negative ? "-" + out : out;
}

}  // namespace

std::optional<WallTime> ScheduledMaintenance(const cache::NodeInfo& node) {
  const std::string_view text = node.labels.Value(kScheduledMaintenanceLabel);
  if (text.empty()) return std::nullopt;
  int64_t seconds = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (ec != std::errc() || end != text.data() + text.size() || seconds <= 0) return std::nullopt;
  return WallTime{} + std::chrono::seconds(seconds);
}

std::string DescribeMaintenanceStart(WallTime start, WallTime now) {
  const std::string at = cache::FormatRfc3339(start);
  if (start <= now) return at + " (started " + FormatDuration(now - start) + " ago)";
  return at + " (in " + FormatDuration(start - now) + ")";
}

bool AvoidForMaintenance(const cache::NodeInfo& node, const NodeHealthConfig& config, WallTime now,
                         std::optional<Duration>* changes_in) {
  if (config.maintenance_avoid_window <= Duration::zero()) return false;
  const std::optional<WallTime> start = ScheduledMaintenance(node);
  if (!start) return false;
  const WallTime from = *start - config.maintenance_avoid_window;
  if (now >= from) return true;
  if (changes_in != nullptr) *changes_in = std::chrono::duration_cast<Duration>(from - now);
  return false;
}

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

NodeHealth EvaluateNode(const cache::NodeInfo* node, const NodeHealthConfig& config, WallTime now) {
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
              "node " + node->name + " has the maintenance taint " + key, false, std::nullopt};
    }
  }
  for (const auto& [key, value] : config.maintenance_labels) {
    if (node->labels.Value(key) == value) {
      return {NodeVerdict::kMaintenance, "Maintenance",
              "node " + node->name + " is labelled " + key + "=" + value, false, std::nullopt};
    }
  }
  std::optional<Duration> changes_in;
  if (config.maintenance_move_window > Duration::zero()) {
    if (const std::optional<WallTime> start = ScheduledMaintenance(*node)) {
      const WallTime from = *start - config.maintenance_move_window;
      if (now >= from) {
        return {NodeVerdict::kMaintenance, "Maintenance",
                "node " + node->name + " is scheduled for maintenance at " +
                    DescribeMaintenanceStart(*start, now) + ", within the " +
                    FormatDuration(config.maintenance_move_window) + " window (" +
                    std::string(kScheduledMaintenanceLabel) + ")",
                false, std::nullopt};
      }
      changes_in = std::chrono::duration_cast<Duration>(from - now);
    }
  }
  for (const std::string& type : config.maintenance_conditions) {
    const cache::NodeCondition* c = node->FindCondition(type);
    if (c != nullptr && c->status == cache::ConditionStatus::kTrue) {
      return {NodeVerdict::kMaintenance, "Maintenance",
              "node " + node->name + " reports " + type + ": " + c->message.str(), false,
              std::nullopt};
    }
  }
  for (const std::string& type : config.hardware_conditions) {
    const cache::NodeCondition* c = node->FindCondition(type);
    if (c != nullptr && c->status == cache::ConditionStatus::kTrue) {
      return {NodeVerdict::kUnhealthy, type,
              "node " + node->name + " reports " + type +
                  (c->message.empty() ? std::string() : ": " + c->message.str()),
              false, std::nullopt};
    }
  }
  if (node->ready == cache::ConditionStatus::kFalse) {
    const cache::NodeCondition* c = node->FindCondition("Ready");
    return {NodeVerdict::kUnhealthy, "NodeNotReady",
            "node " + node->name + " is not Ready" +
                (c != nullptr && !c->message.empty() ? ": " + c->message.str() : std::string()),
            false, std::nullopt};
  }
  if (node->ready == cache::ConditionStatus::kUnknown && node->FindCondition("Ready") != nullptr) {
    return {NodeVerdict::kUnhealthy, "NodeUnreachable",
            "node " + node->name + " stopped reporting (Ready is Unknown)", true, std::nullopt};
  }
  health.changes_in = changes_in;
  return health;
}

}  // namespace tpujob::policy
