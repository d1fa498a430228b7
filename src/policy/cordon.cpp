#include "policy/cordon.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/utf8.h"

namespace tpujob::policy {
namespace {

using Json = nlohmann::json;

// Label values (and so taint values) are at most 63 characters.
constexpr size_t kMaxTaintValue = 63;
// Reasons are single words; a generous bound keeps a caller's mistake out of the node object.
constexpr size_t kMaxReasonBytes = 128;
// "namespace/name": two DNS labels of 63 and 253 characters and the slash.
constexpr size_t kMaxJobBytes = 317;
constexpr size_t kMaxEvidenceBytes = 512;
// floor(max_fraction * total_nodes) must not lose a whole node to rounding: 0.29 * 100 is
// 28.999999999999996 in binary floating point.
constexpr double kFractionSlack = 1e-9;
// Likewise a token refilled over several steps (11 s, then 1 s, at 5 per minute) must count
// as whole although the sum of the steps comes out a hair below 1.
constexpr double kTokenSlack = 1e-9;

// A token bucket of `burst` holding `tokens` at `from`, refilled at `rate` per minute until `to`.
double Refilled(double tokens, double burst, double rate, TimePoint from, TimePoint to) {
  const double minutes = std::chrono::duration<double, std::ratio<60>>(to - from).count();
  return std::min(burst, tokens + std::max(0.0, minutes) * rate);
}

// Annotation texts quote what containers wrote; see base/utf8.h.
std::string AnnotationText(std::string_view text, size_t max_bytes) {
  return ValidUtf8(text, max_bytes);
}

bool IsAlphanumeric(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// `reason` as a valid label value (the API server rejects a taint with any other value): other
// characters become '-', the ends are alphanumeric, at most 63 characters.
std::string TaintValue(std::string_view reason) {
  std::string value;
  for (char c : reason) {
    value += IsAlphanumeric(c) || c == '-' || c == '_' || c == '.' ? c : '-';
  }
  auto trim = [&] {
    while (!value.empty() && !IsAlphanumeric(value.back())) value.pop_back();
    size_t start = 0;
    while (start < value.size() && !IsAlphanumeric(value[start])) ++start;
    value.erase(0, start);
  };
  trim();
  if (value.size() > kMaxTaintValue) {
    value.resize(kMaxTaintValue);
    trim();
  }
  return value;
}

Json TaintJson(std::string_view key, std::string_view value, std::string_view effect) {
  Json taint = {{"key", key}, {"effect", effect}};
  if (!value.empty()) taint["value"] = value;
  return taint;
}

}  // namespace

std::string_view ToString(CordonVerdict verdict) {
  switch (verdict) {
    case CordonVerdict::kCordon:
      return "Cordon";
    case CordonVerdict::kAlreadyCordoned:
      return "AlreadyCordoned";
    case CordonVerdict::kDisabled:
      return "Disabled";
    case CordonVerdict::kDryRun:
      return "DryRun";
    case CordonVerdict::kCapReached:
      return "CapReached";
    case CordonVerdict::kRateLimited:
      return "RateLimited";
    case CordonVerdict::kSystemic:
      return "Systemic";
    case CordonVerdict::kHumanUncordoned:
      return "HumanUncordoned";
    case CordonVerdict::kNodeMissing:
      return "NodeMissing";
  }
  return "Unknown";
}

bool IsCordonedByUs(const cache::NodeInfo& node) {
  return node.unschedulable && node.annotations.Value(kCordonedByAnnotation) == kCordonedByOperator;
}

bool IsCordonedForFault(const cache::NodeInfo& node) {
  return node.unschedulable && node.FindTaint(kFaultyTaint) != nullptr;
}

bool HoldsOurFaultyTaint(const cache::NodeInfo& node) {
  return node.annotations.Value(kCordonedByAnnotation) == kCordonedByOperator &&
         node.FindTaint(kFaultyTaint) != nullptr;
}

std::optional<CordonVerdict> NodeRulesOutCordon(const CordonRequest& request,
                                                const cache::NodeInfo* node) {
  if (node == nullptr) return CordonVerdict::kNodeMissing;
  if (IsCordonedForFault(*node)) return CordonVerdict::kAlreadyCordoned;
  const std::optional<std::string_view> overruled =
      node->annotations.Get(kCordonEvidenceAnnotation);
  if (overruled && !node->unschedulable &&
      *overruled == AnnotationText(request.evidence, kMaxEvidenceBytes)) {
    return CordonVerdict::kHumanUncordoned;
  }
  return std::nullopt;
}

int CordonLimit(const CordonPolicy& policy, int total_nodes) {
  if (policy.max_cordoned <= 0) return 0;
  const double share = policy.max_fraction * std::max(0, total_nodes) + kFractionSlack;
  // Compared as doubles first: a huge or NaN fraction must not overflow the int conversion.
  const double by_fraction = std::max(1.0, std::floor(share));
  if (!(by_fraction < policy.max_cordoned)) return policy.max_cordoned;
  return static_cast<int>(by_fraction);
}

CordonSafety::CordonSafety(CordonPolicy policy)
    : policy_(std::move(policy)),
      burst_(std::max(1.0, std::floor(policy_.rate_per_minute))),
      tokens_(burst_) {}

CordonVerdict CordonSafety::Decide(const CordonRequest& request, const cache::NodeInfo* node,
                                   int cordoned_by_us, int total_nodes, TimePoint now) {
  if (!policy_.enabled) return CordonVerdict::kDisabled;
  ForgetExpired(now);
  // Recorded before the per-node rules: a failure on a node that is already cordoned or gone is
  // still a failure of the item.
  const bool breaker_open = RecordAndCheckBreaker(request, now);

  if (const auto ruled_out = NodeRulesOutCordon(request, node)) return *ruled_out;
  if (breaker_open) return CordonVerdict::kSystemic;
  if (cordoned_by_us >= CordonLimit(policy_, total_nodes)) return CordonVerdict::kCapReached;
  const bool rate_limited = policy_.rate_per_minute > 0;
  if (rate_limited) {
    Refill(now);
    if (tokens_ < 1.0 - kTokenSlack) return CordonVerdict::kRateLimited;
  }
  if (policy_.dry_run) return CordonVerdict::kDryRun;
  if (rate_limited) {
    tokens_ = std::max(0.0, tokens_ - 1.0);
    ++generation_;
  }
  return CordonVerdict::kCordon;
}

std::string CordonSafety::Restore(const std::vector<const cache::NodeInfo*>& nodes,
                                  const Json& saved, WallTime wall_now, TimePoint now) {
  // A wall time as the steady clock's, never later than now.
  const auto steady = [&](WallTime at) {
    return now - std::max(Duration::zero(), std::chrono::duration_cast<Duration>(wall_now - at));
  };
  const bool rate_limited = policy_.rate_per_minute > 0;
  // The bucket as of now, then the stricter of what each source says it holds.
  if (rate_limited) Refill(now);
  const auto grow = [&](double tokens, TimePoint from, TimePoint to) {
    return Refilled(tokens, burst_, policy_.rate_per_minute, from, to);
  };
  const auto refilled = [&](double tokens, TimePoint at) { return grow(tokens, at, now); };

  struct Past {
    TimePoint at;
    std::string node;
    std::string item;
  };
  std::vector<Past> past;
  for (const cache::NodeInfo* node : nodes) {
    if (node == nullptr || node->annotations.Value(kCordonedByAnnotation) != kCordonedByOperator) {
      continue;
    }
    const std::optional<WallTime> at =
        cache::ParseRfc3339(node->annotations.Value(kCordonedAtAnnotation));
    if (!at) continue;
    std::string item;
    if (node->annotations.Value(kCordonReasonAnnotation) == "PreflightFailed") {
      const std::string_view evidence = node->annotations.Value(kCordonEvidenceAnnotation);
      if (const size_t slash = evidence.find('/'); slash != std::string_view::npos) {
        item = std::string(evidence.substr(slash + 1));
      }
    }
    past.push_back({steady(*at), node->name, std::move(item)});
  }
  std::sort(past.begin(), past.end(), [](const Past& a, const Past& b) { return a.at < b.at; });
  if (rate_limited && !past.empty()) {
    // The bucket, full before the first of them, as those cordons left it.
    double tokens = burst_;
    for (size_t i = 0; i < past.size(); ++i) {
      if (i > 0) tokens = grow(tokens, past[i - 1].at, past[i].at);
      tokens = std::max(0.0, tokens - 1.0);
    }
    tokens_ = std::min(tokens_, refilled(tokens, past.back().at));
  }
  for (const Past& p : past) {
    if (!p.item.empty() && now - p.at < policy_.breaker_window) MergeFailure(p.item, p.node, p.at);
  }

  std::vector<std::string> unread;
  if (saved.is_object()) {
    if (rate_limited && saved.contains("tokens")) {
      const Json& tokens = saved["tokens"];
      const std::optional<WallTime> at = saved.contains("at") && saved["at"].is_string()
                                             ? cache::ParseRfc3339(saved["at"].get<std::string>())
                                             : std::nullopt;
      if (tokens.is_number() && at) {
        tokens_ = std::min(tokens_, refilled(std::max(0.0, tokens.get<double>()), steady(*at)));
      } else {
        unread.push_back("the rate bucket");
      }
    }
    static const Json kNoItems = Json::object();
    const Json& items = saved.contains("items") ? saved["items"] : kNoItems;
    if (!items.is_object()) unread.push_back("the items");
    if (items.is_object()) {
      for (const auto& [item, entry] : items.items()) {
        const Json* failed =
            entry.is_object() && entry.contains("nodes") ? &entry["nodes"] : nullptr;
        if (failed == nullptr || !failed->is_object()) {
          unread.push_back("item " + item);
          continue;
        }
        for (const auto& [node, at_text] : failed->items()) {
          const std::optional<WallTime> at =
              at_text.is_string() ? cache::ParseRfc3339(at_text.get<std::string>()) : std::nullopt;
          if (!at) {
            unread.push_back("item " + item + " node " + node);
            continue;
          }
          if (now - steady(*at) < policy_.breaker_window) MergeFailure(item, node, steady(*at));
        }
        if (entry.contains("openUntil")) {
          const Json& until = entry["openUntil"];
          const std::optional<WallTime> wall_until =
              until.is_string() ? cache::ParseRfc3339(until.get<std::string>()) : std::nullopt;
          if (!wall_until) {
            unread.push_back("item " + item + " openUntil");
          } else if (*wall_until > wall_now && policy_.breaker_nodes > 0) {
            // Not longer than one window from now, whatever a skewed clock wrote.
            const TimePoint until_steady =
                now + std::min(policy_.breaker_window,
                               std::chrono::duration_cast<Duration>(*wall_until - wall_now));
            std::optional<TimePoint>& tripped = failures_[item].tripped_until;
            if (!tripped || *tripped < until_steady) tripped = until_steady;
          }
        }
      }
    }
  } else if (!saved.is_null()) {
    unread.push_back("not a JSON object");
  }
  std::string problems;
  for (const std::string& what : unread) problems += (problems.empty() ? "" : ", ") + what;
  return problems;
}

Json CordonSafety::Save(WallTime wall_now, TimePoint now) const {
  const auto wall = [&](TimePoint at) {
    return cache::FormatRfc3339Millis(wall_now - std::chrono::duration_cast<Duration>(now - at));
  };
  Json saved = Json::object();
  if (policy_.rate_per_minute > 0) {
    saved["tokens"] = TokensAt(now);
    saved["at"] = wall(now);
  }
  Json items = Json::object();
  for (const auto& [item, failures] : failures_) {
    std::vector<std::pair<TimePoint, std::string_view>> recent;
    for (const auto& [node, at] : failures.nodes) {
      if (now - at < policy_.breaker_window) recent.emplace_back(at, node);
    }
    std::sort(recent.begin(), recent.end(), std::greater<>());
    if (recent.size() > kMaxSavedNodesPerItem) recent.resize(kMaxSavedNodesPerItem);
    Json entry = {{"nodes", Json::object()}};
    for (const auto& [at, node] : recent) entry["nodes"][std::string(node)] = wall(at);
    if (failures.tripped_until && now < *failures.tripped_until) {
      entry["openUntil"] = wall(*failures.tripped_until);
    }
    if (!recent.empty() || entry.contains("openUntil")) items[item] = std::move(entry);
  }
  if (!items.empty()) saved["items"] = std::move(items);
  return saved;
}

void CordonSafety::MergeFailure(const std::string& item, const std::string& node, TimePoint at) {
  ItemFailures& failures = failures_[item];
  auto [it, inserted] = failures.nodes.try_emplace(node, at);
  if (!inserted && it->second < at) it->second = at;
  if (policy_.breaker_nodes > 0 &&
      static_cast<int>(failures.nodes.size()) >= policy_.breaker_nodes) {
    const TimePoint until = at + policy_.breaker_window;
    if (!failures.tripped_until || *failures.tripped_until < until) failures.tripped_until = until;
  }
}

double CordonSafety::TokensAt(TimePoint now) const {
  if (!refilled_at_ || now <= *refilled_at_) return tokens_;
  return Refilled(tokens_, burst_, policy_.rate_per_minute, *refilled_at_, now);
}

void CordonSafety::ReturnToken() { tokens_ = std::min(burst_, tokens_ + 1.0); }

int CordonSafety::FailingNodes(std::string_view item, TimePoint now) const {
  auto it = failures_.find(item);
  if (it == failures_.end()) return 0;
  int count = 0;
  for (const auto& [node, at] : it->second.nodes) count += now - at < policy_.breaker_window;
  return count;
}

void CordonSafety::RecordFailure(const CordonRequest& request, TimePoint now) {
  if (!policy_.enabled) return;
  ForgetExpired(now);
  RecordAndCheckBreaker(request, now);
}

bool CordonSafety::RecordAndCheckBreaker(const CordonRequest& request, TimePoint now) {
  if (policy_.breaker_nodes <= 0 || request.item.empty()) return false;
  ItemFailures& failures = failures_[request.item];
  failures.nodes.insert_or_assign(request.node, now);
  ++generation_;
  if (static_cast<int>(failures.nodes.size()) >= policy_.breaker_nodes) {
    failures.tripped_until = now + policy_.breaker_window;
  }
  return failures.tripped_until.has_value() && now < *failures.tripped_until;
}

void CordonSafety::ForgetExpired(TimePoint now) {
  for (auto item = failures_.begin(); item != failures_.end();) {
    ItemFailures& failures = item->second;
    std::erase_if(failures.nodes,
                  [&](const auto& entry) { return now - entry.second >= policy_.breaker_window; });
    if (failures.tripped_until && now >= *failures.tripped_until) failures.tripped_until.reset();
    item = failures.nodes.empty() && !failures.tripped_until ? failures_.erase(item) : ++item;
  }
}

void CordonSafety::Refill(TimePoint now) {
  tokens_ = TokensAt(now);
  if (!refilled_at_ || now > *refilled_at_) refilled_at_ = now;
}

Json CordonPatch(const CordonRequest& request, const cache::NodeInfo& node, WallTime now) {
  Json taints = Json::array();
  bool tainted = false;
  for (const cache::Taint& taint : node.taints) {
    taints.push_back(
        TaintJson(taint.key.view(), taint.value.view(), cache::ToString(taint.effect)));
    tainted =
        tainted || (taint.key == kFaultyTaint && taint.effect == cache::TaintEffect::kNoSchedule);
  }
  if (!tainted) {
    taints.push_back(TaintJson(kFaultyTaint, TaintValue(request.reason),
                               cache::ToString(cache::TaintEffect::kNoSchedule)));
  }
  Json metadata = {
      {"annotations",
       {
           {kCordonedByAnnotation, kCordonedByOperator},
           {kCordonReasonAnnotation, AnnotationText(request.reason, kMaxReasonBytes)},
           {kCordonMessageAnnotation, AnnotationText(request.message, kMaxCordonMessageBytes)},
           {kCordonedAtAnnotation, cache::FormatRfc3339(now)},
           {kCordonJobAnnotation, AnnotationText(request.job, kMaxJobBytes)},
           {kCordonEvidenceAnnotation, AnnotationText(request.evidence, kMaxEvidenceBytes)},
       }},
  };
  if (!node.resource_version.empty()) metadata["resourceVersion"] = node.resource_version;
  return Json{{"metadata", std::move(metadata)},
              {"spec", {{"unschedulable", true}, {"taints", std::move(taints)}}}};
}

UncordonDecision DecideUncordon(const cache::NodeInfo& node, const NodeHealthConfig& health,
                                Duration healthy_period, WallTime now) {
  UncordonDecision d;
  // A node a person uncordoned (`kubectl uncordon`) keeps our taint: it is lifted the same way.
  if (!HoldsOurFaultyTaint(node)) {
    d.message = "node " + node.name + " is not cordoned by tpujob-operator";
    return d;
  }
  const NodeHealth verdict = EvaluateNode(&node, health, now);
  if (verdict.verdict != NodeVerdict::kHealthy) {
    d.message = "node " + node.name + " is not healthy: " + verdict.message;
    return d;
  }
  std::optional<WallTime> since;
  std::string since_what;
  auto later = [&](std::optional<WallTime> t, std::string what) {
    if (t && (!since || *t > *since)) {
      since = t;
      since_what = std::move(what);
    }
  };
  later(cache::ParseRfc3339(node.annotations.Value(kCordonedAtAnnotation)), "it was cordoned");
  if (const cache::NodeCondition* ready = node.FindCondition("Ready")) {
    later(ready->last_transition_time, "it turned Ready");
  }
  for (const std::string& type : health.hardware_conditions) {
    if (const cache::NodeCondition* c = node.FindCondition(type)) {
      later(c->last_transition_time, type + " last changed");
    }
  }
  if (!since) {
    // No timestamp to go by: the annotation was edited away. Treat the node as healthy from
    // now on, which the next decision (after the wait) confirms or not.
    d.wait = healthy_period;
    d.message = "node " + node.name + " has no cordon timestamp";
    return d;
  }
  const auto healthy_for = now - *since;
  if (healthy_for >= healthy_period) {
    d.uncordon = true;
    d.message =
        "node " + node.name + " has been healthy since " + since_what + " at " +
        cache::FormatRfc3339(*since) + ", longer than the healthy period of " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(healthy_period).count()) +
        "s";
    return d;
  }
  d.wait = std::chrono::duration_cast<Duration>(healthy_period - healthy_for);
  d.message =
      "node " + node.name + " healthy since " + since_what + " at " + cache::FormatRfc3339(*since);
  return d;
}

Json UncordonPatch(const cache::NodeInfo& node) {
  Json taints = Json::array();
  for (const cache::Taint& taint : node.taints) {
    if (taint.key == kFaultyTaint) continue;
    taints.push_back(
        TaintJson(taint.key.view(), taint.value.view(), cache::ToString(taint.effect)));
  }
  Json annotations = Json::object();
  for (std::string_view key :
       {kCordonedByAnnotation, kCordonReasonAnnotation, kCordonMessageAnnotation,
        kCordonedAtAnnotation, kCordonJobAnnotation, kCordonEvidenceAnnotation}) {
    annotations[std::string(key)] = nullptr;
  }
  Json metadata = {{"annotations", std::move(annotations)}};
  if (!node.resource_version.empty()) metadata["resourceVersion"] = node.resource_version;
  return Json{{"metadata", std::move(metadata)},
              {"spec", {{"unschedulable", nullptr}, {"taints", std::move(taints)}}}};
}

}  // namespace tpujob::policy
