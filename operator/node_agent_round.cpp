#include "node_agent_round.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "cache/objects.h"

namespace tpujob::agent {
namespace {

using preflight::Check;
using preflight::ItemResult;

std::string Field(const ItemResult& item, std::string_view key) {
  for (const auto& [k, v] : item.log_fields) {
    if (k == key) return v;
  }
  return "";
}

std::string_view ReasonOf(const ItemResult& item) {
  if (item.item == preflight::kItemAccelerator) return kReasonAcceleratorMissing;
  if (item.item == preflight::kItemUlimit) return kReasonUlimitTooLow;
  return kReasonDiskTooSmall;
}

// One item in the condition's message.
std::string DescribeItem(const ItemResult& item, int64_t capacity, const std::string& dev_root) {
  if (item.item == preflight::kItemAccelerator && item.fault != preflight::Fault::kConfig) {
    const std::string tpus = Field(item, "tpu");
    std::string text = capacity > 0 ? fmt::format("{} of {} TPU devices present under {}", tpus,
                                                  capacity, dev_root)
                                    : fmt::format(
                                          "{} TPU devices present under {}, at least 1 needed (the "
                                          "node has no {} capacity)",
                                          tpus, dev_root, cache::kTpuResource);
    if (!item.passed) {
      text +=
          fmt::format(" (accel<N>: {}, vfio/<N>: {})", Field(item, "accel"), Field(item, "vfio"));
    }
    return text;
  }
  if (!item.passed) {
    return item.message.empty()
               ? fmt::format("{} {}, need {}", item.item, item.value, item.threshold)
               : fmt::format("{}: {}", item.item, item.message);
  }
  return fmt::format("{} {} ({})", item.item, item.value, item.threshold);
}

}  // namespace

std::expected<int64_t, std::string> TpuCapacity(const kube::Json& node) {
  const kube::Json* value = nullptr;
  if (node.is_object() && node.contains("status") && node["status"].is_object() &&
      node["status"].contains("capacity") && node["status"]["capacity"].is_object()) {
    const kube::Json& capacity = node["status"]["capacity"];
    auto it = capacity.find(std::string(cache::kTpuResource));
    if (it != capacity.end()) value = &*it;
  }
  if (value == nullptr || value->is_null()) return 0;
  if (value->is_number_unsigned()) return static_cast<int64_t>(value->get<uint64_t>());
  if (value->is_number_integer() && value->get<int64_t>() >= 0) return value->get<int64_t>();
  const std::string text = value->is_string() ? value->get<std::string>() : value->dump();
  // Extended resources are whole numbers; the API server writes them in canonical form ("4").
  if (text.empty() || text.size() > 18 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::unexpected(fmt::format("status.capacity[\"{}\"] is \"{}\", not a whole number",
                                       cache::kTpuResource, text));
  }
  return std::stoll(text);
}

std::optional<NodeCondition> FindCondition(const kube::Json& node, std::string_view type) {
  if (!node.is_object() || !node.contains("status") || !node["status"].is_object()) return {};
  const kube::Json& status = node["status"];
  if (!status.contains("conditions") || !status["conditions"].is_array()) return {};
  for (const kube::Json& condition : status["conditions"]) {
    if (!condition.is_object() || condition.value("type", "") != type) continue;
    NodeCondition found;
    auto text = [&](const char* key) {
      auto it = condition.find(key);
      return it != condition.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    found.status = text("status");
    found.reason = text("reason");
    found.message = text("message");
    found.last_transition_time = text("lastTransitionTime");
    return found;
  }
  return {};
}

RoundResult CheckNode(const Settings& settings, int64_t tpu_capacity, const Probes& probes) {
  RoundResult round;
  for (Check check : settings.checks) {
    switch (check) {
      case Check::kAccelerator: {
        preflight::AcceleratorOptions options;
        options.dev_root = settings.dev_root;
        options.chips = tpu_capacity;
        round.items.push_back(preflight::CheckAccelerator(options));
        break;
      }
      case Check::kDisk:
        round.items.push_back(preflight::CheckDiskSize(preflight::kItemDiskRoot, settings.root_path,
                                                       settings.root_min_gb,
                                                       preflight::Fault::kNode, probes.filesystem));
        break;
      case Check::kUlimit:
        round.items.push_back(preflight::CheckUlimit(settings.ulimit, probes.limits));
        break;
      case Check::kDns:
        break;  // refused by ParseChecks
    }
  }
  std::vector<std::string> described;
  std::vector<std::string> failed;
  bool unmeasurable = false;
  for (const ItemResult& item : round.items) {
    described.push_back(DescribeItem(item, tpu_capacity, settings.dev_root));
    if (item.passed) continue;
    failed.push_back(item.item);
    if (item.fault == preflight::Fault::kConfig) {
      unmeasurable = true;
    } else if (round.passed) {
      round.passed = false;
      round.reason = ReasonOf(item);
    }
  }
  // An item that failed on the hardware decides the round even when another could not be
  // measured; without one, an unmeasurable item leaves the round undecided.
  if (unmeasurable && round.passed) {
    round.conclusive = false;
    round.passed = false;
  }
  if (round.passed) round.reason = kReasonHealthy;
  round.message = fmt::format("{}", fmt::join(described, "; "));
  round.failed_items = fmt::format("{}", fmt::join(failed, ","));
  return round;
}

Hysteresis InitialState(const std::optional<NodeCondition>& condition) {
  Hysteresis state;
  state.unhealthy = condition.has_value() && condition->status == "True";
  return state;
}

Hysteresis Step(Hysteresis state, bool passed, int fail_after, int pass_after) {
  if (passed) {
    state.failures = 0;
    ++state.passes;
    if (state.unhealthy && state.passes >= pass_after) state.unhealthy = false;
  } else {
    state.passes = 0;
    ++state.failures;
    if (!state.unhealthy && state.failures >= fail_after) state.unhealthy = true;
  }
  return state;
}

ConditionUpdate DescribeCondition(const Hysteresis& state, const RoundResult& round, int fail_after,
                                  int pass_after) {
  ConditionUpdate update;
  update.unhealthy = state.unhealthy;
  if (state.unhealthy && round.passed) {
    update.reason = kReasonRecovering;
    update.message = fmt::format("passing again, {} of {} passing rounds needed to clear: {}",
                                 state.passes, pass_after, round.message);
  } else if (!state.unhealthy && !round.passed) {
    update.reason = kReasonSuspect;
    update.message = fmt::format("failing, {} of {} failing rounds needed to set: {}",
                                 state.failures, fail_after, round.message);
  } else {
    update.reason = round.reason;
    update.message = round.message;
  }
  return update;
}

kube::Json ConditionPatch(std::string_view type, const ConditionUpdate& update,
                          const std::optional<NodeCondition>& previous, WallTime now) {
  const std::string status = update.unhealthy ? "True" : "False";
  const std::string stamp = cache::FormatRfc3339(now);
  const bool unchanged =
      previous.has_value() && previous->status == status && !previous->last_transition_time.empty();
  kube::Json condition = {
      {"type", std::string(type)},
      {"status", status},
      {"reason", update.reason},
      {"message", update.message},
      {"lastHeartbeatTime", stamp},
      {"lastTransitionTime", unchanged ? previous->last_transition_time : stamp}};
  return {{"status", {{"conditions", kube::Json::array({condition})}}}};
}

}  // namespace tpujob::agent
