// Node health as the fault rules read it (docs/architecture.md, "Faults, in the order the policy
// checks them"; docs/api.md, "The four fault cases"): healthy, under
// maintenance (a disruption: the job moves elsewhere without using up a retry) or unhealthy (a
// fault: cordon and re-issue, counted against maxJobRetries).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "cache/objects.h"

namespace tpujob::policy {

// GKE announces host maintenance ahead of time with this node label: the start of the
// maintenance in Unix seconds (GKE's guide "Manage GKE node disruption for GPUs and TPUs").
inline constexpr std::string_view kScheduledMaintenanceLabel =
    "cloud.google.com/scheduled-maintenance-time";

struct NodeHealthConfig {
  // Node conditions that mean broken hardware when True (as node-problem-detector reports
  // them, e.g. "TPUUnhealthy", "KernelDeadlock"). Ready is always checked.
  std::vector<std::string> hardware_conditions = {"TPUUnhealthy"};
  // Maintenance notices: GKE's taint, GKE's label, and conditions true during maintenance.
  std::vector<std::string> maintenance_taints = {"cloud.google.com/impending-node-termination"};
  std::vector<std::pair<std::string, std::string>> maintenance_labels = {
      {"cloud.google.com/active-node-maintenance", "ONGOING"}};
  std::vector<std::string> maintenance_conditions;
  // Announced maintenance (kScheduledMaintenanceLabel). A node whose maintenance starts within
  // `maintenance_move_window` counts as under maintenance: a job on it moves now, on our
  // schedule (SIGTERM, its grace period to checkpoint, re-issue without using a retry), rather
  // than being killed by the host. Zero turns this off. New admissions avoid nodes whose
  // maintenance starts within `maintenance_avoid_window` (see queue.h); zero turns that off.
  Duration maintenance_move_window = std::chrono::minutes(15);
  Duration maintenance_avoid_window = std::chrono::minutes(60);
};

// The announced start of the node's maintenance; std::nullopt when there is no label or its
// value is not a whole number of seconds.
std::optional<WallTime> ScheduledMaintenance(const cache::NodeInfo& node);

enum class NodeVerdict { kHealthy, kMaintenance, kUnhealthy, kMissing };
std::string_view ToString(NodeVerdict verdict);

struct NodeHealth {
  NodeVerdict verdict = NodeVerdict::kHealthy;
  std::string reason;        // "NodeNotReady", "NodeUnreachable", "TPUUnhealthy", "Maintenance"
  std::string message;       // what the node says, for faults[] and Events
  bool unreachable = false;  // Ready is Unknown: the kubelet is gone, pods must be force-deleted
  // A healthy node with announced maintenance: how long until it enters the move window and
  // the verdict becomes kMaintenance (the caller decides again then).
  std::optional<Duration> changes_in;
};

// Maintenance is checked first: a node being drained for maintenance often turns NotReady, and
// that is a disruption, not a fault. Announced maintenance counts once `now` is within the move
// window of its start; only a healthy node reports `changes_in`.
NodeHealth EvaluateNode(const cache::NodeInfo* node, const NodeHealthConfig& config, WallTime now);

// Whether new admissions should avoid the node at `now`: its announced maintenance starts within
// the avoid window (or has started). When not yet, `changes_in` (if given) is set to the time
// until it will.
bool AvoidForMaintenance(const cache::NodeInfo& node, const NodeHealthConfig& config, WallTime now,
                         std::optional<Duration>* changes_in = nullptr);

// "2026-11-25T10:00:00Z (in 4m30s)" for messages.
std::string DescribeMaintenanceStart(WallTime start, WallTime now);

}  // namespace tpujob::policy
