#include "controller/cordoner.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <utility>

#include "base/logging.h"
#include "cache/intern.h"
#include "controller/metrics.h"
#include "policy/stall_rules.h"

namespace tpujob::controller {
namespace {

using policy::CordonVerdict;

// "10m", "90s": the breaker window as people configure it.
std::string DurationText(Duration d) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  if (seconds > 0 && seconds % 60 == 0) return std::to_string(seconds / 60) + "m";
  return std::to_string(seconds) + "s";
}

// Verdicts that mean a safety limit held back a cordon: worth a warning, since either the
// cluster or the configuration needs a person's attention.
bool HeldBack(CordonVerdict verdict) {
  return verdict == CordonVerdict::kCapReached || verdict == CordonVerdict::kRateLimited ||
         verdict == CordonVerdict::kSystemic;
}

}  // namespace

kube::Result<cache::Store<cache::NodeInfo>::Ptr> ReadNode(kube::Client& client,
                                                          const std::string& name) {
  auto read = client.Get(kube::Resource::Nodes(), "", name);
  if (!read && read.error().IsNotFound()) return nullptr;
  if (!read) return std::unexpected(std::move(read.error()));
  auto node = cache::NodeInfo::FromJson(*read);
  if (!node) return std::unexpected(std::move(node.error()));
  return std::make_shared<const cache::NodeInfo>(std::move(*node));
}

void AddCordonJobIndexer(cache::Store<cache::NodeInfo>& nodes) {
  auto added = nodes.AddIndexer(std::string(kNodesByCordonJobIndex),
                                [](const cache::NodeInfo& node) -> std::vector<std::string> {
                                  if (!policy::IsCordonedByUs(node)) return {};
                                  const auto job =
                                      node.annotations.Get(policy::kCordonJobAnnotation);
                                  if (!job || job->empty()) return {};
                                  return {std::string(*job)};
                                });
  (void)added;  // fails only when added twice, which leaves the first in place
}

Cordoner::Cordoner(kube::Client& client, const cache::Store<cache::NodeInfo>& nodes,
                   EventRecorder& recorder, policy::CordonPolicy policy, Clock& clock)
    : client_(client),
      nodes_(nodes),
      recorder_(recorder),
      clock_(clock),
      safety_(std::move(policy)) {}

bool Cordoner::Settled(const Unconfirmed& entry, const cache::NodeInfo* node, TimePoint now) {
  if (node == nullptr) return true;
  // Being written: counted until the cache shows it, however long the API server takes.
  if (!entry.writing) {
    if (now - entry.at >= kUnconfirmedCordonTtl) return true;
    // The patch was conditioned on `based_on`: the node's next version is the cordon, so a cache
    // that has moved on has seen it, even when a later change (an uncordon that drops our
    // annotations) hides it again.
    if (!entry.based_on.empty() && node->resource_version != entry.based_on) return true;
  }
  return policy::IsCordonedByUs(*node) ||
         node->annotations.Value(policy::kCordonEvidenceAnnotation) == entry.evidence;
}

int Cordoner::CordonedByUsLocked(TimePoint now) const {
  int count = 0;
  for (const auto& node : nodes_.List()) count += policy::IsCordonedByUs(*node);
  for (const auto& [name, entry] : unconfirmed_) {
    count += !Settled(entry, nodes_.Get(name).get(), now);
  }
  return count;
}

int Cordoner::CordonedByUs() const {
  const TimePoint now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  return CordonedByUsLocked(now);
}

Cordoner::Outcome Cordoner::Cordon(const policy::CordonRequest& request) {
  return std::move(CordonAll({request}).front());
}

std::vector<Cordoner::Outcome> Cordoner::CordonAll(
    const std::vector<policy::CordonRequest>& requests) {
  std::vector<std::string> failed;
  std::vector<Outcome> outcomes = Run(requests, /*record_failures=*/true, failed);
  NotifyRetry(failed);
  return outcomes;
}

std::optional<Cordoner::Outcome> Cordoner::Retry(const std::string& node) {
  policy::CordonRequest request;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = retry_.find(node);
    if (it == retry_.end()) return std::nullopt;
    request = it->second;
  }
  log::Info("retrying a failed cordon", {{"node", node}, {"job", request.job}});
  std::vector<std::string> failed;  // kept for the caller's next Retry, not notified again
  return std::move(Run({request}, /*record_failures=*/false, failed).front());
}

std::vector<Cordoner::Outcome> Cordoner::Run(const std::vector<policy::CordonRequest>& requests,
                                             bool record_failures,
                                             std::vector<std::string>& failed) {
  // The first decision of this process reads the state its predecessor saved (outside the lock:
  // an API round trip).
  bool load = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    load = !restored_ && state_;
  }
  std::optional<kube::Result<kube::Json>> loaded;
  if (load) loaded = LoadState();

  std::vector<Decision> decisions;
  decisions.reserve(requests.size());
  std::optional<kube::Json> to_save;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_.Now();
    std::optional<kube::Error> unrestored;
    if (!restored_) {
      if (state_ && (!loaded || !*loaded)) {
        unrestored = loaded ? (*loaded).error() : kube::Error{};
        unrestored->message =
            fmt::format("reading the cordon safety state from ConfigMap {}/{}: {}", state_->ns,
                        state_->name, unrestored->message);
      } else {
        // The cordons its predecessors made (the saved state, and the nodes' annotations in a
        // cache that has synced by now) count against the rate and the breaker.
        restored_ = true;
        const auto listed = nodes_.List();
        std::vector<const cache::NodeInfo*> nodes;
        nodes.reserve(listed.size());
        for (const auto& node : listed) nodes.push_back(node.get());
        const kube::Json saved = loaded ? std::move(**loaded) : kube::Json(nullptr);
        const std::string unread = safety_.Restore(nodes, saved, clock_.WallNow(), now);
        if (!unread.empty()) {
          log::Warn("part of the saved cordon safety state could not be read; the rest is used",
                    {{"configmap", state_->ns + "/" + state_->name}, {"unread", unread}});
        }
      }
    }
    if (record_failures) {
      for (const auto& request : requests) safety_.RecordFailure(request, now);
    }
    for (const auto& request : requests) {
      if (!unrestored) {
        decisions.push_back(DecideLocked(request, now));
        continue;
      }
      // Decided on nothing: the request fails as a failed write would, and is retried.
      Decision& decision = decisions.emplace_back();
      decision.outcome.verdict = CordonVerdict::kCordon;
      decision.outcome.error = unrestored;
      decision.outcome.message =
          fmt::format("cordoning node {} failed: {}", request.node, unrestored->ToString());
    }
    if (state_ && restored_ && safety_.generation() != queued_generation_) {
      generation = queued_generation_ = safety_.generation();
      to_save = safety_.Save(clock_.WallNow(), now);
    }
  }
  // The state first: a cordon it does not record is not made.
  std::optional<kube::Error> unsaved;
  if (to_save) {
    if (auto saved = SaveState(*to_save, generation); !saved) unsaved = std::move(saved.error());
  }
  // The writes, outside the lock: each node is reserved, so the cap holds meanwhile.
  std::vector<std::optional<kube::Result<kube::Json>>> written(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!decisions[i].patch) continue;
    if (unsaved) {
      written[i] = std::unexpected(*unsaved);
      continue;
    }
    written[i] = Write(requests[i], decisions[i]);
  }
  std::vector<Outcome> outcomes;
  outcomes.reserve(requests.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (unsaved && generation == queued_generation_) {
      queued_generation_ = 0;  // saved again at the next decision, whatever it changes
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      if (written[i]) FinishLocked(requests[i], decisions[i], std::move(*written[i]));
      if (decisions[i].outcome.error) {
        retry_.insert_or_assign(requests[i].node, requests[i]);
        failed.push_back(requests[i].node);
      } else {
        retry_.erase(requests[i].node);
      }
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    Report(requests[i], decisions[i]);
    outcomes.push_back(std::move(decisions[i].outcome));
  }
  return outcomes;
}

kube::Result<kube::Json> Cordoner::LoadState() const {
  auto configmap = client_.Get(kube::Resource::ConfigMaps(), state_->ns, state_->name);
  if (!configmap) {
    if (configmap.error().IsNotFound()) return kube::Json(nullptr);  // nothing saved yet
    return std::unexpected(configmap.error());
  }
  const kube::Json& data = (*configmap)["data"];
  if (!data.is_object() || !data.contains(kCordonStateKey) || !data[kCordonStateKey].is_string()) {
    return kube::Json(nullptr);
  }
  kube::Json saved = kube::Json::parse(data[kCordonStateKey].get<std::string>(), nullptr,
                                       /*allow_exceptions=*/false);
  if (saved.is_discarded()) {
    // Never written by us: a person's edit. The nodes still tell what they can.
    log::Warn("the saved cordon safety state is not JSON; ignoring it",
              {{"configmap", state_->ns + "/" + state_->name}});
    return kube::Json(nullptr);
  }
  return saved;
}

kube::Result<void> Cordoner::SaveState(const kube::Json& saved, uint64_t generation) {
  std::lock_guard<std::mutex> lock(save_mu_);
  if (generation <= saved_generation_) return {};  // a later state, which includes this one
  const std::string text = saved.dump();
  const kube::Json patch = {{"data", {{kCordonStateKey, text}}}};
  auto written = client_.Patch(kube::Resource::ConfigMaps(), state_->ns, state_->name,
                               kube::PatchType::kMerge, patch);
  if (!written && written.error().IsNotFound()) {
    const kube::Json configmap = {
        {"apiVersion", "v1"},
        {"kind", "ConfigMap"},
        {"metadata",
         {{"name", state_->name},
          {"namespace", state_->ns},
          {"labels", {{"app.kubernetes.io/managed-by", "tpujob-operator"}}},
          {"annotations",
           {{"tpujob.dev/description",
             "The operator's cordon safety limits (rate, circuit breaker), kept for the next "
             "leader. Deleting it forgets them."}}}}},
        {"data", {{kCordonStateKey, text}}}};
    written = client_.Create(kube::Resource::ConfigMaps(), state_->ns, configmap);
    if (!written && written.error().IsAlreadyExists()) {
      written = client_.Patch(kube::Resource::ConfigMaps(), state_->ns, state_->name,
                              kube::PatchType::kMerge, patch);
    }
  }
  if (!written) {
    kube::Error error = written.error();
    log::Warn("saving the cordon safety state failed; no node is cordoned until it is saved",
              {{"configmap", state_->ns + "/" + state_->name}, {"error", error.ToString()}});
    error.message = fmt::format("saving the cordon safety state in ConfigMap {}/{}: {}", state_->ns,
                                state_->name, error.message);
    return std::unexpected(std::move(error));
  }
  saved_generation_ = generation;
  return {};
}

size_t Cordoner::PendingRetries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retry_.size();
}

std::vector<std::string> Cordoner::PendingRetryNodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> nodes;
  nodes.reserve(retry_.size());
  for (const auto& [node, request] : retry_) nodes.push_back(node);
  return nodes;
}

void Cordoner::NotifyRetry(const std::vector<std::string>& nodes) const {
  if (!retry_hook_) return;
  for (const std::string& node : nodes) retry_hook_(node);
}

Cordoner::Decision Cordoner::DecideLocked(const policy::CordonRequest& request, TimePoint now) {
  std::erase_if(unconfirmed_, [&](const auto& entry) {
    return Settled(entry.second, nodes_.Get(entry.first).get(), now);
  });
  const cache::Store<cache::NodeInfo>::Ptr node = nodes_.Get(request.node);
  Decision decision;
  decision.cordoned = CordonedByUsLocked(now);
  decision.total_nodes = static_cast<int>(nodes_.Size());

  // A node cordoned here moments ago (or being cordoned now) looks schedulable in a lagging
  // cache; decide on what it is by now, so that it is not cordoned (and counted) twice.
  std::optional<cache::NodeInfo> written;
  const cache::NodeInfo* seen = node.get();
  if (node != nullptr && unconfirmed_.contains(request.node)) {
    written = *node;
    written->unschedulable = true;
    written->annotations.Set(policy::kCordonedByAnnotation, policy::kCordonedByOperator);
    written->annotations.Set(policy::kCordonEvidenceAnnotation,
                             unconfirmed_.find(request.node)->second.evidence);
    if (written->FindTaint(policy::kFaultyTaint) == nullptr) {
      written->taints.push_back(cache::Taint{cache::InternedString::Intern(policy::kFaultyTaint),
                                             {},
                                             cache::TaintEffect::kNoSchedule});
    }
    seen = &*written;
  }

  Outcome& outcome = decision.outcome;
  outcome.verdict = safety_.Decide(request, seen, decision.cordoned, decision.total_nodes, now);
  outcome.message =
      Describe(outcome.verdict, request, decision.cordoned, decision.total_nodes, now);
  if (outcome.verdict == CordonVerdict::kCordon) {
    decision.patch = policy::CordonPatch(request, *node, clock_.WallNow());
    decision.node_uid = node->uid;
    unconfirmed_.insert_or_assign(
        request.node,
        Unconfirmed{(*decision.patch)["metadata"]["annotations"][policy::kCordonEvidenceAnnotation]
                        .get<std::string>(),
                    now, node->resource_version, /*writing=*/true});
  }
  return decision;
}

kube::Result<kube::Json> Cordoner::Write(const policy::CordonRequest& request, Decision& decision) {
  auto written = client_.Patch(kube::Resource::Nodes(), "", request.node, kube::PatchType::kMerge,
                               *decision.patch);
  for (int attempt = 1; attempt < kCordonWriteAttempts && !written && written.error().IsConflict();
       ++attempt) {
    const std::string built_on =
        (*decision.patch)["metadata"].value("resourceVersion", std::string());
    const auto node = ReadNode(client_, request.node);
    if (!node) {
      log::Warn("could not read a node whose cordon was refused as stale; the cordon is retried",
                {{"node", request.node}, {"job", request.job}, {"error", node.error().ToString()}});
      return std::unexpected(node.error());
    }
    log::Info(
        "the node changed since the cache saw it (the cache may be behind the API server); "
        "deciding the cordon again on the node as read",
        {{"node", request.node},
         {"job", request.job},
         {"built_on", built_on},
         {"read", *node ? (*node)->resource_version : "(deleted)"},
         {"error", written.error().ToString()}});
    if (const auto ruled_out = policy::NodeRulesOutCordon(request, node->get())) {
      decision.ruled_out = ruled_out;  // kNodeMissing for a deleted node
      return kube::Json(nullptr);
    }
    const cache::NodeInfo& read = **node;
    // The annotations as first decided (cordoned-at is the time of the decision).
    kube::Json patch = policy::CordonPatch(request, read, clock_.WallNow());
    patch["metadata"]["annotations"] = (*decision.patch)["metadata"]["annotations"];
    decision.patch = std::move(patch);
    decision.node_uid = read.uid;
    decision.reread_version = read.resource_version;
    written = client_.Patch(kube::Resource::Nodes(), "", request.node, kube::PatchType::kMerge,
                            *decision.patch);
  }
  if (!written && written.error().IsNotFound()) {
    decision.ruled_out = policy::CordonVerdict::kNodeMissing;  // deleted since the cache saw it
    return kube::Json(nullptr);
  }
  return written;
}

void Cordoner::FinishLocked(const policy::CordonRequest& request, Decision& decision,
                            kube::Result<kube::Json> written) {
  Outcome& outcome = decision.outcome;
  if (written && decision.ruled_out) {
    // Not needed after all, as the API server holds the node: nothing was written.
    unconfirmed_.erase(request.node);
    safety_.ReturnToken();
    outcome.verdict = *decision.ruled_out;
    outcome.message =
        Describe(outcome.verdict, request, decision.cordoned, decision.total_nodes, clock_.Now());
    return;
  }
  if (written) {
    if (auto it = unconfirmed_.find(request.node); it != unconfirmed_.end()) {
      it->second.writing = false;
      it->second.at = clock_.Now();  // the wait for the cache counts from the answer
      if (decision.reread_version) it->second.based_on = *decision.reread_version;
    }
    recorder_.Record(ObjectRef{"v1", "Node", "", request.node, decision.node_uid},
                     EventType::kWarning, std::string(kNodeCordonedReason),
                     fmt::format("cordoned by tpujob-operator for job {}: {}: {}", request.job,
                                 request.reason, request.message));
    return;
  }
  unconfirmed_.erase(request.node);
  safety_.ReturnToken();
  outcome.error = std::move(written.error());
  outcome.message =
      fmt::format("cordoning node {} failed: {}", request.node, outcome.error->ToString());
}

void Cordoner::Report(const policy::CordonRequest& request, const Decision& decision) const {
  const Outcome& outcome = decision.outcome;
  switch (outcome.verdict) {
    case CordonVerdict::kCordon:
      if (!outcome.error) Metrics().node_cordons.With({request.reason}).Inc();
      break;
    case CordonVerdict::kCapReached:
      Metrics().cordons_refused.With({"cap"}).Inc();
      break;
    case CordonVerdict::kRateLimited:
      Metrics().cordons_refused.With({"rate"}).Inc();
      break;
    case CordonVerdict::kSystemic:
      Metrics().cordons_refused.With({"breaker"}).Inc();
      break;
    default:
      break;
  }
  const bool warn = HeldBack(outcome.verdict) || outcome.error.has_value();
  log::Log(warn ? log::Level::kWarn : log::Level::kInfo, "cordon",
           {{"node", request.node},
            {"job", request.job},
            {"reason", request.reason},
            {"verdict", policy::ToString(outcome.verdict)},
            {"dry_run", safety_.policy().dry_run},
            {"item", request.item},
            {"evidence", request.evidence},
            {"cordoned", decision.cordoned},
            {"nodes", decision.total_nodes},
            {"detail", outcome.message}});
}

std::string Cordoner::Describe(CordonVerdict verdict, const policy::CordonRequest& request,
                               int cordoned, int total_nodes, TimePoint now) const {
  const policy::CordonPolicy& policy = safety_.policy();
  const std::string& node = request.node;
  switch (verdict) {
    case CordonVerdict::kCordon:
      return "cordoned node " + node;
    case CordonVerdict::kAlreadyCordoned:
      return "node " + node + " is already cordoned";
    case CordonVerdict::kDisabled:
      return "node " + node + " not cordoned: cordoning faulty nodes is disabled";
    case CordonVerdict::kDryRun:
      return "would cordon node " + node + " (dry run)";
    case CordonVerdict::kCapReached:
      return fmt::format("node {} not cordoned: {} nodes already cordoned (cap {} of {} nodes)",
                         node, cordoned, policy::CordonLimit(policy, total_nodes), total_nodes);
    case CordonVerdict::kRateLimited:
      return fmt::format("node {} not cordoned: more than {} new cordons per minute (rate limit)",
                         node, policy.rate_per_minute);
    case CordonVerdict::kSystemic:
      if (request.item == policy::kStallCordonItem) {
        return fmt::format(
            "node {} not cordoned: {} nodes were the sole suspect of a job's stalls within {}, "
            "more likely the programs or something the nodes share than each node's hardware "
            "(circuit breaker)",
            node, safety_.FailingNodes(request.item, now), DurationText(policy.breaker_window));
      }
      return fmt::format(
          "node {} not cordoned: pre-flight item {} failed on {} nodes within {}, a "
          "configuration problem rather than faulty hardware (circuit breaker)",
          node, request.item, safety_.FailingNodes(request.item, now),
          DurationText(policy.breaker_window));
    case CordonVerdict::kHumanUncordoned:
      return "node " + node + " not cordoned: it was uncordoned by hand after the same evidence";
    case CordonVerdict::kNodeMissing:
      return "node " + node + " not cordoned: no such node";
  }
  return "node " + node + " not cordoned";
}

}  // namespace tpujob::controller
