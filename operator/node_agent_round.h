// One round of the node agent's hardware check, and what it writes: pure functions from the
// agent's settings, the node as the API server answered it and the system probes, to a verdict
// and a node status patch. No I/O but the probes; unit-tested without a cluster
// (tests/unit/node_agent_test.cpp).
//
// A round, in this order:
//   1. TpuCapacity reads how many chips the node has (status.capacity of cache::kTpuResource);
//      a value that is not a whole number makes the round inconclusive.
//   2. CheckNode runs the checks of the settings (the pre-flight check functions, not copies):
//      accelerator, disk, ulimit. The verdict (RoundResult) is failed when an item failed on the
//      hardware, inconclusive when an item could not be measured at all and none failed (the
//      agent's configuration is at fault: the condition is left as it is), passed otherwise.
//   3. Step applies the hysteresis: the condition turns True after fail_after failing rounds in
//      a row and False again only after pass_after passing rounds in a row.
//   4. DescribeCondition gives the condition's reason and message (kReason* below), and
//      ConditionPatch the strategic merge patch of the node's status that writes it.
//
// Thread-safety: no state; safe from any thread (the probes are the caller's).
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "kube/client.h"
#include "preflight/checks.h"
#include "preflight/options.h"

namespace tpujob::agent {

// Reasons of the condition. True: the first failing item's reason, or kReasonRecovering while
// passing rounds accumulate towards --pass-after. False: kReasonHealthy, or kReasonSuspect while
// failing rounds accumulate towards --fail-after.
inline constexpr std::string_view kReasonAcceleratorMissing = "AcceleratorMissing";
inline constexpr std::string_view kReasonDiskTooSmall = "DiskTooSmall";
inline constexpr std::string_view kReasonUlimitTooLow = "UlimitTooLow";
inline constexpr std::string_view kReasonRecovering = "HardwareRecovering";
inline constexpr std::string_view kReasonHealthy = "HardwareHealthy";
inline constexpr std::string_view kReasonSuspect = "HardwareSuspect";

// The validated settings a NodeAgent runs with.
struct Settings {
  std::string node_name;
  Duration interval = std::chrono::seconds(60);
  // Each check at most once, in the order accelerator, disk, ulimit (dns is not a node check).
  std::vector<preflight::Check> checks = {preflight::Check::kAccelerator};
  std::string dev_root = "/dev";
  std::string root_path = "/";
  double root_min_gb = 32;
  preflight::UlimitOptions ulimit;
  std::string condition_type = "TPUUnhealthy";
  int fail_after = 1;
  int pass_after = 3;
  // Watch the TPUJob pods on the node and run a round at once when a container exits abnormally
  // (--watch-pods, never with --once).
  bool watch_pods = true;
};

// The node's status.capacity["google.com/tpu"]: 0 when the node has none. An error when the
// value is not a whole number of chips.
std::expected<int64_t, std::string> TpuCapacity(const kube::Json& node);

// A condition of a node's status, as read from the node.
struct NodeCondition {
  std::string status;  // "True", "False", "Unknown"
  std::string reason;
  std::string message;
  std::string last_transition_time;  // RFC 3339, "" when absent
};
std::optional<NodeCondition> FindCondition(const kube::Json& node, std::string_view type);

// What one round of checks found.
struct RoundResult {
  // False when an item could not be measured at all (the device directory or the root path does
  // not exist, the capacity is unreadable) and no other item failed: the agent's own
  // configuration is wrong, which says nothing about the hardware, so the round neither sets nor
  // clears the condition.
  bool conclusive = true;
  bool passed = true;
  std::string reason;        // the first failing item's reason; kReasonHealthy when passed
  std::string message;       // every item, e.g. "3 of 4 TPU devices present under /dev (...)"
  std::string failed_items;  // "accelerator,disk-size root"; "" when passed
  std::vector<preflight::ItemResult> items;
};

// The system probes the checks use; tests replace them.
struct Probes {
  preflight::FilesystemProbe filesystem = preflight::SystemFilesystemProbe();
  preflight::LimitsProvider limits = preflight::SystemLimits();
};

// Runs the checks of `settings` against a node with `tpu_capacity` chips (0: at least one
// device is needed).
RoundResult CheckNode(const Settings& settings, int64_t tpu_capacity, const Probes& probes);

// The hysteresis between rounds and the condition. A failing round counts towards --fail-after
// and resets the passes; a passing round counts towards --pass-after and resets the failures.
// The condition turns True after fail_after failing rounds in a row and back to False only after
// pass_after passing rounds in a row, so a flapping device does not flap the condition.
struct Hysteresis {
  bool unhealthy = false;  // the condition's status: True
  int failures = 0;        // failing rounds in a row
  int passes = 0;          // passing rounds in a row
};

// The state an agent starts from: the node's condition, so a restarted agent that finds it True
// needs pass_after passing rounds to clear it. Nothing else survives a restart.
Hysteresis InitialState(const std::optional<NodeCondition>& condition);

Hysteresis Step(Hysteresis state, bool passed, int fail_after, int pass_after);

// The condition a round writes.
struct ConditionUpdate {
  bool unhealthy = false;
  std::string reason;
  std::string message;
};
ConditionUpdate DescribeCondition(const Hysteresis& state, const RoundResult& round, int fail_after,
                                  int pass_after);

// The strategic merge patch of the node's status: the one condition, merged by `type`, with
// lastHeartbeatTime `now` and lastTransitionTime kept from `previous` when the status is
// unchanged, else `now`.
kube::Json ConditionPatch(std::string_view type, const ConditionUpdate& update,
                          const std::optional<NodeCondition>& previous, WallTime now);

}  // namespace tpujob::agent
