// Node health as the fault table reads it (DESIGN.md section 4): healthy, under maintenance (a
// disruption: the job moves elsewhere without using up a retry) or unhealthy (a fault: cordon
// and re-issue, counted against maxJobRetries).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cache/objects.h"

namespace tpujob::policy {

struct NodeHealthConfig {
  // Node conditions that mean broken hardware when True (as node-problem-detector reports
  // them, e.g. "TPUUnhealthy", "KernelDeadlock"). Ready is always checked.
  std::vector<std::string> hardware_conditions = {"TPUUnhealthy"};
  // Maintenance notices: GKE's taint, GKE's label, and conditions true during maintenance.
  std::vector<std::string> maintenance_taints = {"cloud.google.com/impending-node-termination"};
  std::vector<std::pair<std::string, std::string>> maintenance_labels = {
      {"cloud.google.com/active-node-maintenance", "ONGOING"}};
  std::vector<std::string> maintenance_conditions;
};

enum class NodeVerdict { kHealthy, kMaintenance, kUnhealthy, kMissing };
std::string_view ToString(NodeVerdict verdict);

struct NodeHealth {
  NodeVerdict verdict = NodeVerdict::kHealthy;
  std::string reason;        // "NodeNotReady", "NodeUnreachable", "TPUUnhealthy", "Maintenance"
  std::string message;       // what the node says, for faults[] and Events
  bool unreachable = false;  // Ready is Unknown: the kubelet is gone, pods must be force-deleted
};

// Maintenance is checked first: a node being drained for maintenance often turns NotReady, and
// that is a disruption, not a fault.
NodeHealth EvaluateNode(const cache::NodeInfo* node, const NodeHealthConfig& config);

}  // namespace tpujob::policy
