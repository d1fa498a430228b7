#include "node_agent.h"

#include <fmt/format.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include "base/logging.h"
#include "base/signal_waiter.h"
#include "cache/objects.h"
#include "cache/reflector.h"
#include "kube/config.h"
#include "metrics/http_server.h"
#include "version.h"

namespace tpujob {
namespace agent {
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
                                          tpus, dev_root, kTpuResource);
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

std::expected<std::vector<Check>, std::string> ParseChecks(std::string_view list) {
  bool accelerator = false, disk = false, ulimit = false;
  for (const std::string& name : preflight::SplitList(list)) {
    if (name == "accelerator") {
      accelerator = true;
    } else if (name == "disk") {
      disk = true;
    } else if (name == "ulimit") {
      ulimit = true;
    } else {
      return std::unexpected(fmt::format(
          "unknown check \"{}\" (want accelerator, disk or ulimit{})", name,
          name == "dns" ? "; dns is a pre-flight check of a job's peers, not of a node" : ""));
    }
  }
  std::vector<Check> checks;
  if (accelerator) checks.push_back(Check::kAccelerator);
  if (disk) checks.push_back(Check::kDisk);
  if (ulimit) checks.push_back(Check::kUlimit);
  if (checks.empty()) return std::unexpected("no check given (want accelerator, disk or ulimit)");
  return checks;
}

std::expected<Settings, std::vector<std::string>> Validate(
    const Flags& flags, const preflight::EnvironmentLookup& env) {
  std::vector<std::string> problems;
  Settings settings;
  settings.node_name = flags.node_name;
  if (settings.node_name.empty()) {
    if (auto name = env("NODE_NAME")) settings.node_name = *name;
  }
  if (settings.node_name.empty()) {
    problems.push_back("--node-name: required (or the environment variable NODE_NAME)");
  }
  if (flags.interval_seconds < 1) {
    problems.push_back(
        fmt::format("--interval={}: want a whole number of seconds >= 1", flags.interval_seconds));
  }
  settings.interval = std::chrono::seconds(std::max(flags.interval_seconds, 1));
  if (auto checks = ParseChecks(flags.checks)) {
    settings.checks = *checks;
  } else {
    problems.push_back(fmt::format("--checks=\"{}\": {}", flags.checks, checks.error()));
  }
  if (flags.dev_root.empty()) problems.push_back("--dev-root: must not be empty");
  if (flags.root_path.empty()) problems.push_back("--root-path: must not be empty");
  if (!(flags.root_min_gb >= 0)) {
    problems.push_back(fmt::format("--root-min-gb={}: want a number >= 0", flags.root_min_gb));
  }
  settings.dev_root = flags.dev_root;
  settings.root_path = flags.root_path;
  settings.root_min_gb = flags.root_min_gb;
  // A condition type is a (qualified) name: no spaces, no quotes, not empty.
  const bool type_ok =
      !flags.condition_type.empty() && flags.condition_type.size() <= 316 &&
      std::all_of(flags.condition_type.begin(), flags.condition_type.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
               c == '/';
      });
  if (!type_ok) {
    problems.push_back(
        fmt::format("--condition-type=\"{}\": want a condition type such as "
                    "TPUUnhealthy (letters, digits, '-', '_', '.', '/')",
                    flags.condition_type));
  }
  settings.condition_type = flags.condition_type;
  if (flags.fail_after < 1) {
    problems.push_back(fmt::format("--fail-after={}: want 1 or more rounds", flags.fail_after));
  }
  if (flags.pass_after < 1) {
    problems.push_back(fmt::format("--pass-after={}: want 1 or more rounds", flags.pass_after));
  }
  settings.fail_after = flags.fail_after;
  settings.pass_after = flags.pass_after;
  settings.watch_pods = flags.watch_pods && !flags.once;
  if (!problems.empty()) return std::unexpected(std::move(problems));
  return settings;
}

std::expected<int64_t, std::string> TpuCapacity(const kube::Json& node) {
  const kube::Json* value = nullptr;
  if (node.is_object() && node.contains("status") && node["status"].is_object() &&
      node["status"].contains("capacity") && node["status"]["capacity"].is_object()) {
    const kube::Json& capacity = node["status"]["capacity"];
    auto it = capacity.find(std::string(kTpuResource));
    if (it != capacity.end()) value = &*it;
  }
  if (value == nullptr || value->is_null()) return 0;
  if (value->is_number_unsigned()) return static_cast<int64_t>(value->get<uint64_t>());
  if (value->is_number_integer() && value->get<int64_t>() >= 0) return value->get<int64_t>();
  const std::string text = value->is_string() ? value->get<std::string>() : value->dump();
  // Extended resources are whole numbers; the API server writes them in canonical form ("4").
  if (text.empty() || text.size() > 18 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::unexpected(
        fmt::format("status.capacity[\"{}\"] is \"{}\", not a whole number", kTpuResource, text));
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

std::string Trigger::Key() const { return uid + "/" + container; }

std::vector<Trigger> AbnormalExits(const cache::PodInfo& pod, const std::set<std::string>& seen,
                                   std::optional<WallTime> not_before) {
  std::vector<Trigger> exits;
  if (pod.deleting()) return exits;
  auto scan = [&](const std::vector<cache::ContainerInfo>& containers, bool init) {
    for (const cache::ContainerInfo& container : containers) {
      if (container.state != cache::ContainerState::kTerminated || container.exit_code == 0) {
        continue;
      }
      if (not_before && container.finished_at && *container.finished_at < *not_before) continue;
      Trigger trigger{.pod = pod.Key(),
                      .uid = pod.uid,
                      .container = std::string(container.name.view()),
                      .init_container = init,
                      .exit_code = container.exit_code};
      if (!seen.contains(trigger.Key())) exits.push_back(std::move(trigger));
    }
  };
  scan(pod.init_containers, true);
  scan(pod.containers, false);
  return exits;
}

std::string DescribeTrigger(const Trigger& trigger) {
  return fmt::format("checked at once after {}container {} of pod {} exited with code {}",
                     trigger.init_container ? "init " : "", trigger.container, trigger.pod,
                     trigger.exit_code);
}

bool Healthy(TimePoint last_success, TimePoint now, Duration interval) {
  return now - last_success <= 3 * interval + std::chrono::seconds(30);
}

int ExitCode(NodeAgent::Outcome outcome) {
  switch (outcome) {
    case NodeAgent::Outcome::kPassed:
      return kExitPassed;
    case NodeAgent::Outcome::kFailed:
      return kExitFailed;
    case NodeAgent::Outcome::kInconclusive:
      return kExitInvalid;
    case NodeAgent::Outcome::kApiError:
      return kExitApiError;
  }
  return kExitApiError;
}

// --- NodeAgent ---------------------------------------------------------------------------------

NodeAgent::NodeAgent(kube::Client& client, Settings settings, Probes probes, Clock& clock)
    : client_(client),
      settings_(std::move(settings)),
      probes_(std::move(probes)),
      clock_(clock),
      last_success_(clock.Now().time_since_epoch().count()) {}

NodeAgent::~NodeAgent() {
  stopping_.store(true);
  StopPodWatch();
}

kube::PatchOptions NodeAgent::WriteOptions() const {
  kube::PatchOptions options;
  options.field_manager = "tpujob-node-agent";
  options.subresource = "status";
  // A stopping agent does not wait out the client's backoff.
  options.before_send = [this]() -> kube::Status {
    if (stopping_.load()) return std::unexpected(kube::Error::Cancelled("the agent is stopping"));
    return {};
  };
  return options;
}

bool NodeAgent::Learn() {
  // An empty patch changes nothing and answers with the whole node: its capacity and the
  // condition's current value, with no permission beyond patch on nodes/status.
  auto node = client_.Patch(kube::Resource::Nodes(), "", settings_.node_name,
                            kube::PatchType::kStrategicMerge, kube::Json::object(), WriteOptions());
  if (!node) {
    log::Error("cannot read the node",
               {{"node", settings_.node_name}, {"error", node.error().ToString()}});
    return false;
  }
  node_ = std::move(*node);
  last_success_.store(clock_.Now().time_since_epoch().count());
  const auto condition = FindCondition(*node_, settings_.condition_type);
  state_ = InitialState(condition);
  const auto capacity = TpuCapacity(*node_);
  log::Info("read the node",
            {{"node", settings_.node_name},
             {"tpu_capacity", capacity ? std::to_string(*capacity) : std::string("unreadable")},
             {"condition", settings_.condition_type},
             {"status", condition ? condition->status : std::string("absent")}});
  return true;
}

NodeAgent::Round NodeAgent::RunRound(const std::optional<Trigger>& trigger) {
  Round round;
  round.triggered = trigger.has_value();
  if (!node_ && !Learn()) {
    round.outcome = Outcome::kApiError;
    return round;
  }
  const std::string& node = settings_.node_name;
  const std::string& type = settings_.condition_type;
  RoundResult result;
  if (auto capacity = TpuCapacity(*node_)) {
    result = CheckNode(settings_, *capacity, probes_);
  } else {
    result.conclusive = false;
    result.passed = false;
    result.message = capacity.error();
  }
  round.condition_true = state_.unhealthy;
  if (!result.conclusive) {
    // The agent's own configuration, not the hardware: the condition is left as it is.
    log::Error("node check could not run; the condition is left unchanged",
               {{"node", node}, {"condition", type}, {"error", result.message}});
    round.outcome = Outcome::kInconclusive;
    round.message = result.message;
    last_passed_.reset();
    return round;
  }

  const std::optional<NodeCondition> previous = FindCondition(*node_, type);
  // After an abnormal exit a failing round is the second witness: True at once.
  state_ = Step(state_, result.passed, trigger ? 1 : settings_.fail_after, settings_.pass_after);
  ConditionUpdate update =
      DescribeCondition(state_, result, settings_.fail_after, settings_.pass_after);
  if (trigger) update.message += "; " + DescribeTrigger(*trigger);
  round.outcome = result.passed ? Outcome::kPassed : Outcome::kFailed;
  round.condition_true = update.unhealthy;
  round.reason = update.reason;
  round.message = update.message;

  const std::string_view status = update.unhealthy ? "True" : "False";
  if (!result.passed) {
    log::Warn("node check failed", {{"node", node},
                                    {"item", result.failed_items},
                                    {"condition", type},
                                    {"status", status},
                                    {"reason", update.reason},
                                    {"failures", state_.failures},
                                    {"message", result.message}});
  } else {
    // The first pass after a failure (or the start) at info, the steady passes at debug.
    log::Log(last_passed_ != true ? log::Level::kInfo : log::Level::kDebug, "node check passed",
             {{"node", node},
              {"condition", type},
              {"status", status},
              {"passes", state_.passes},
              {"message", result.message}});
  }
  last_passed_ = result.passed;

  const kube::Json patch = ConditionPatch(type, update, previous, clock_.WallNow());
  auto written = client_.Patch(kube::Resource::Nodes(), "", node, kube::PatchType::kStrategicMerge,
                               patch, WriteOptions());
  if (!written) {
    log::Error("cannot write the node condition; retrying next round",
               {{"node", node}, {"condition", type}, {"error", written.error().ToString()}});
    round.outcome = Outcome::kApiError;
    return round;
  }
  node_ = std::move(*written);
  last_success_.store(clock_.Now().time_since_epoch().count());
  const bool was_true = previous.has_value() && previous->status == "True";
  if (update.unhealthy != was_true) {
    log::Info(update.unhealthy ? "condition set" : "condition cleared",
              {{"node", node},
               {"condition", type},
               {"status", status},
               {"reason", update.reason},
               {"message", update.message}});
  }
  return round;
}

void NodeAgent::Run() {
  TimePoint next = clock_.Now();  // the next periodic round
  bool first = true;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    const std::optional<Trigger> trigger = std::exchange(pending_, std::nullopt);
    const bool periodic = clock_.Now() >= next;
    lock.unlock();
    if (trigger) {
      log::Info("worker exited, checking the node now", {{"node", settings_.node_name},
                                                         {"pod", trigger->pod},
                                                         {"container", trigger->container},
                                                         {"exit_code", trigger->exit_code}});
    }
    RunRound(trigger);
    if (first) {
      first = false;
      // After the first round, so that the permission check never delays it.
      if (settings_.watch_pods) {
        pod_watch_.store(PodWatch::kStarting);
        pod_watch_starter_ = std::thread([this] { StartPodWatch(); });
      }
    }
    lock.lock();
    // A triggered round leaves the periodic schedule alone, unless it was due anyway.
    if (periodic) {
      next += settings_.interval;
      // A round that took longer than the interval is followed by the next at once, not by the
      // rounds it missed.
      if (const TimePoint now = clock_.Now(); next < now) next = now;
    }
    while (!stopped_ && !pending_ && clock_.Now() < next) clock_.WaitUntil(cv_, lock, next);
  }
  lock.unlock();
  StopPodWatch();
}

std::vector<Trigger> NodeAgent::NotePod(const cache::PodInfo& pod) {
  std::vector<Trigger> exits;
  bool woke = false;
  {
    std::lock_guard<std::mutex> guard(mu_);
    exits = AbnormalExits(pod, seen_, clock_.WallNow() - kStaleExit);
    if (exits.empty()) return exits;
    for (const Trigger& exit : exits) seen_.insert(exit.Key());
    if (!pending_ && !stopped_) {
      pending_ = exits.front();
      woke = true;
    }
  }
  if (woke) cv_.notify_all();
  // The others are checked by the round already due.
  for (size_t i = woke ? 1 : 0; i < exits.size(); ++i) {
    log::Debug("worker exited, a round is already due", {{"node", settings_.node_name},
                                                         {"pod", exits[i].pod},
                                                         {"container", exits[i].container},
                                                         {"exit_code", exits[i].exit_code}});
  }
  return exits;
}

void NodeAgent::ForgetPod(const cache::PodInfo& pod) {
  const std::string prefix = pod.uid + "/";
  std::lock_guard<std::mutex> guard(mu_);
  auto it = seen_.lower_bound(prefix);
  while (it != seen_.end() && it->starts_with(prefix)) it = seen_.erase(it);
}

void NodeAgent::StartPodWatch() {
  const std::string& node = settings_.node_name;
  const std::string labels(cache::kJobNameLabel);
  const std::string fields = "spec.nodeName=" + node;
  // Both verbs are tried once, so that an account without them is told apart from an API server
  // that does not answer (the informer retries that on its own).
  std::string failed;
  std::optional<kube::Error> error;
  kube::ListOptions list_options;
  list_options.label_selector = labels;
  list_options.field_selector = fields;
  list_options.limit = 1;
  auto listed = client_.List(kube::Resource::Pods(), "", list_options);
  if (!listed) {
    failed = "list";
    error = listed.error();
  } else if (!stopping_.load()) {
    kube::WatchOptions watch_options;
    watch_options.label_selector = labels;
    watch_options.field_selector = fields;
    watch_options.allow_bookmarks = false;
    watch_options.timeout_seconds = 1;
    if (listed->is_object() && listed->contains("metadata") && (*listed)["metadata"].is_object()) {
      watch_options.resource_version = (*listed)["metadata"].value("resourceVersion", "");
    }
    // Closed again at once: only whether it opens matters.
    auto stream = client_.Watch(kube::Resource::Pods(), "", watch_options);
    if (!stream) {
      failed = "watch";
      error = stream.error();
    }
  }
  if (error && error->IsForbidden()) {
    pod_watch_.store(PodWatch::kForbidden);
    log::Warn(
        "cannot watch the pods on this node: the agent's account lacks list and watch on pods in "
        "all namespaces; checking every interval only",
        {{"node", node}, {"denied", failed + " pods"}, {"error", error->ToString()}});
    return;
  }
  if (error) {
    log::Debug("pod watch check failed; the watch retries",
               {{"node", node}, {"error", error->ToString()}});
  }
  std::lock_guard<std::mutex> guard(pods_mu_);
  if (stopping_.load()) return;
  cache::ReflectorOptions options;
  options.name = "pods";
  options.label_selector = labels;  // only TPUJob pods
  options.field_selector = fields;  // only this node's
  pods_ = std::make_unique<cache::Informer<cache::PodInfo>>(client_, kube::Resource::Pods(),
                                                            options, clock_);
  pods_->AddEventHandlers({.on_add = [this](const auto& pod) { NotePod(*pod); },
                           .on_update = [this](const auto&, const auto& pod) { NotePod(*pod); },
                           .on_delete = [this](const auto& pod) { ForgetPod(*pod); }});
  pods_->Start();
  pod_watch_.store(PodWatch::kWatching);
  log::Info("watching the node's pods",
            {{"node", node}, {"label_selector", labels}, {"field_selector", fields}});
}

void NodeAgent::StopPodWatch() {
  if (pod_watch_starter_.joinable()) pod_watch_starter_.join();
  std::unique_ptr<cache::Informer<cache::PodInfo>> pods;
  {
    std::lock_guard<std::mutex> guard(pods_mu_);
    pods = std::move(pods_);
  }
  if (pods) pods->Stop();
}

void NodeAgent::Stop() {
  stopping_.store(true);
  {
    std::lock_guard<std::mutex> guard(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

TimePoint NodeAgent::last_success() const { return TimePoint(Duration(last_success_.load())); }

}  // namespace agent

// --- The subcommand ----------------------------------------------------------------------------

namespace {

constexpr const char* kDescription =
    "Check this node's hardware every --interval and report it in a node condition (default "
    "TPUUnhealthy, the operator's default --hardware-condition): True when TPU devices are "
    "missing (fewer /dev/accel<N> or /dev/vfio/<N> than the node's google.com/tpu capacity), "
    "False when healthy. The operator cordons a node whose condition is True and re-issues the "
    "jobs on it. It also watches the TPUJob pods on the node and checks at once when a worker "
    "exits with a non-zero code. Runs as a DaemonSet on the TPU nodes; needs `patch` on "
    "`nodes/status`, and `list` and `watch` on pods for --watch-pods.";

constexpr const char* kFooter =
    R"(Hysteresis: the condition turns True after --fail-after failing rounds in a row
and back to False only after --pass-after passing rounds in a row. A restarted agent starts
from the condition on the node: if it is True, --pass-after passing rounds clear it.
Abnormal exits (--watch-pods): when a container or init container of a TPUJob pod on the node
terminates with a non-zero exit code (128+N for signal N), a round runs at once; if it fails,
the condition turns True at once, whatever --fail-after says, and its message names the exit.
The periodic rounds keep their schedule. Without list/watch on pods: one warning, periodic
rounds only.
Condition reasons: AcceleratorMissing, DiskTooSmall, UlimitTooLow (True: the first failing
item), HardwareRecovering (True, passing rounds accumulating), HardwareHealthy (False),
HardwareSuspect (False, failing rounds accumulating).
An item that cannot be measured at all (the device directory or the root path does not exist)
is the agent's configuration at fault: it is logged and the condition is left unchanged.
Exit codes: 0 on SIGTERM/SIGINT; with --once: 0 every item passed, 1 an item failed, 2 invalid
flags or an item could not be measured, 3 the node could not be read or written. Invalid flags
always exit 2. See docs/node-agent.md.)";

int RunNodeAgent(const agent::Flags& flags) {
  if (log::Format format; !ParseLogFormat(flags.log_format, format)) {
    std::fprintf(stderr, "error: unknown --log-format \"%s\" (want logfmt or json)\n",
                 flags.log_format.c_str());
    return agent::kExitInvalid;
  }
  if (!SetupLogging(flags.log_level, flags.log_format)) {
    std::fprintf(stderr,
                 "error: unknown --log-level \"%s\" (want trace, debug, info, warn or error)\n",
                 flags.log_level.c_str());
    return agent::kExitInvalid;
  }
  auto settings = agent::Validate(flags, preflight::ProcessEnvironment());
  if (!settings) {
    for (const std::string& problem : settings.error()) {
      log::Error("invalid flag", {{"error", problem}});
    }
    return agent::kExitInvalid;
  }
  // Before any thread starts, so all of them inherit the mask; --once keeps the default
  // dispositions, so a signal ends it at once.
  std::optional<SignalWaiter> signals;
  if (!flags.once) signals.emplace();

  auto config = kube::ResolveConfig(flags.kubeconfig, "");
  if (!config) {
    log::Error("cannot load the Kubernetes configuration", {{"error", config.error().ToString()}});
    return agent::kExitInvalid;
  }
  config->user_agent = std::string("tpujob-operator/") + TPUJOB_VERSION + " (node-agent " +
                       settings->node_name + ")";
  std::string checks;
  for (preflight::Check check : settings->checks) {
    checks += (checks.empty() ? "" : ",") + std::string(preflight::ToString(check));
  }
  log::Info("node agent starting", {{"version", TPUJOB_VERSION},
                                    {"node", settings->node_name},
                                    {"server", config->server},
                                    {"config", config->source},
                                    {"condition", settings->condition_type},
                                    {"checks", checks},
                                    {"dev_root", settings->dev_root},
                                    {"interval", settings->interval},
                                    {"fail_after", settings->fail_after},
                                    {"pass_after", settings->pass_after},
                                    {"watch_pods", settings->watch_pods},
                                    {"once", flags.once}});
  // Before any thread but the signal waiter's, which reads no environment.
  kube::TrustOnlyTheConfiguredCa(*config);
  auto client = kube::NewClient(*config);
  agent::NodeAgent node_agent(*client, *settings, agent::Probes{}, Clock::Real());

  if (flags.once) {
    const agent::NodeAgent::Round round = node_agent.RunRound();
    const int code = agent::ExitCode(round.outcome);
    log::Info("node agent finished", {{"node", settings->node_name},
                                      {"exit_code", code},
                                      {"status", round.condition_true ? "True" : "False"},
                                      {"reason", round.reason}});
    return code;
  }

  std::unique_ptr<metrics::HttpServer> health;
  if (!flags.health_address.empty()) {
    health = std::make_unique<metrics::HttpServer>(flags.health_address);
    const Duration interval = settings->interval;
    health->Handle("/healthz", [&node_agent, interval]() {
      metrics::HttpResponse response;
      const TimePoint last = node_agent.last_success();
      if (agent::Healthy(last, Clock::Real().Now(), interval)) {
        response.body = "ok\n";
      } else {
        response.status = 500;
        response.body = fmt::format(
            "no successful write of the node's status for {}s\n",
            std::chrono::duration_cast<std::chrono::seconds>(Clock::Real().Now() - last).count());
      }
      return response;
    });
    if (auto started = health->Start(); !started) {
      log::Error("cannot serve /healthz", {{"error", started.error().ToString()}});
      return 1;
    }
  }

  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  std::thread signal_thread = signals->OnSignal([&](int signal) {
    log::Info("received signal, stopping", {{"signal", strsignal(signal)}});
    node_agent.Stop();
    std::unique_lock<std::mutex> lock(mu);
    // A request in flight ends within its timeout; nothing is lost by not waiting for it.
    if (!cv.wait_for(lock, std::chrono::seconds(3), [&] { return finished; })) {
      log::Info("node agent stopped", {{"node", settings->node_name}, {"pending_request", true}});
      std::_Exit(0);
    }
  });
  node_agent.Run();
  {
    std::lock_guard<std::mutex> guard(mu);
    finished = true;
  }
  cv.notify_all();
  signal_thread.join();
  if (health) health->Stop();
  log::Info("node agent stopped", {{"node", settings->node_name}});
  return 0;
}

}  // namespace

void AddNodeAgentCommand(CLI::App& app) {
  auto flags = std::make_shared<agent::Flags>();
  CLI::App* command = app.add_subcommand("node-agent", kDescription);
  command->footer(kFooter);
  command->add_option("--kubeconfig", flags->kubeconfig,
                      "Path to a kubeconfig file. Default: $KUBECONFIG, then the in-cluster "
                      "service account, then ~/.kube/config.");
  command->add_option("--node-name", flags->node_name,
                      "The node this agent checks and writes the condition of (required). "
                      "Default: $NODE_NAME (the chart sets it from spec.nodeName).");
  command
      ->add_option("--interval", flags->interval_seconds,
                   "Seconds between rounds of checks (a whole number, at least 1).")
      ->capture_default_str();
  command
      ->add_option("--checks", flags->checks,
                   "Comma-separated items to check: accelerator (TPU device nodes under "
                   "--dev-root, at least the node's google.com/tpu capacity, or 1 without it), "
                   "disk (disk-size root: the file system at --root-path larger than "
                   "--root-min-gb), ulimit (this container's soft limits, as the pre-flight "
                   "ulimit item).")
      ->capture_default_str();
  command
      ->add_option("--dev-root", flags->dev_root,
                   "Directory holding the host's device nodes (the chart mounts the host's /dev "
                   "read-only at /host/dev).")
      ->capture_default_str();
  command->add_option("--root-path", flags->root_path, "File system checked by the disk item.")
      ->capture_default_str();
  command
      ->add_option("--root-min-gb", flags->root_min_gb,
                   "The disk item passes when that file system is larger than this (GB of 10^9 "
                   "bytes; total size, not free space).")
      ->capture_default_str();
  command
      ->add_option("--condition-type", flags->condition_type,
                   "Type of the node condition written: True = hardware faulty. Must be one of "
                   "the operator's --hardware-condition types for it to act.")
      ->capture_default_str();
  command
      ->add_option("--fail-after", flags->fail_after,
                   "Failing rounds in a row that set the condition True.")
      ->capture_default_str();
  command
      ->add_option("--pass-after", flags->pass_after,
                   "Passing rounds in a row that clear a True condition (so a flapping device "
                   "does not flap the condition).")
      ->capture_default_str();
  command->add_flag("--once", flags->once,
                    "Run one round, write the condition and exit: 0 passed, 1 failed, 2 invalid "
                    "flags or not measurable, 3 API error.");
  command
      ->add_option("--watch-pods", flags->watch_pods,
                   "Watch the TPUJob pods on this node (needs list and watch on pods) and run a "
                   "round at once when a container exits with a non-zero code; a failing round "
                   "then sets the condition True at once. false: periodic rounds only. Never with "
                   "--once.")
      ->default_str("true");
  command->add_option("--log-level", flags->log_level, "trace, debug, info, warn or error.")
      ->capture_default_str();
  command
      ->add_option("--log-format", flags->log_format,
                   "logfmt (key=value) or json (one object per line).")
      ->capture_default_str();
  command->add_option("--health-address", flags->health_address,
                      "host:port serving /healthz: 200 while the node's status was written "
                      "within 3 intervals plus 30 s. Default: no endpoint.");
  command->callback([flags] { throw CLI::RuntimeError(RunNodeAgent(*flags)); });
}

}  // namespace tpujob
