#include "node_agent.h"

#include <fmt/format.h>

#include <memory>
#include <thread>
#include <utility>

#include "base/logging.h"
#include "cache/objects.h"
#include "cache/reflector.h"

namespace tpujob::agent {

std::string Trigger::Key() const {
  return hardware_check.empty() ? uid + "/" + container : uid + "/check:" + hardware_check;
}

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
                      .exit_code = container.exit_code,
                      .hardware_check = ""};
      if (!seen.contains(trigger.Key())) exits.push_back(std::move(trigger));
    }
  };
  scan(pod.init_containers, true);
  scan(pod.containers, false);
  if (!pod.hardware_check.empty()) {
    Trigger check{.pod = pod.Key(),
                  .uid = pod.uid,
                  .container = "",
                  .init_container = false,
                  .exit_code = 0,
                  .hardware_check = std::string(pod.hardware_check.view())};
    if (!seen.contains(check.Key())) exits.push_back(std::move(check));
  }
  return exits;
}

std::string DescribeTrigger(const Trigger& trigger) {
  if (!trigger.hardware_check.empty()) {
    return fmt::format("checked at once: the job of pod {} stalled (hardware check {})",
                       trigger.pod, trigger.hardware_check);
  }
  return fmt::format("checked at once after {}container {} of pod {} exited with code {}",
                     trigger.init_container ? "init " : "", trigger.container, trigger.pod,
                     trigger.exit_code);
}

bool Healthy(TimePoint last_success, TimePoint now, Duration interval) {
  return now - last_success <= 3 * interval + std::chrono::seconds(30);
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
    if (trigger && !trigger->hardware_check.empty()) {
      log::Info("the job of a pod on this node stalled, checking the node now",
                {{"node", settings_.node_name},
                 {"pod", trigger->pod},
                 {"hardware_check", trigger->hardware_check}});
    } else if (trigger) {
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

}  // namespace tpujob::agent
