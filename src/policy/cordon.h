// Cordoning faulty nodes: the safety decision and the node patch, as pure functions over
// snapshots (no I/O, no clock reads: time comes in as arguments).
//
// A cordon takes a node out of scheduling for every workload in the cluster, on the strength
// of evidence the operator gathered about one job. Wrong evidence (a mistyped volume size in a
// template, a DNS outage) would otherwise let the operator drain a whole cluster, so every
// request goes through CordonSafety::Decide, which applies these rules in this order and
// returns the first that matches:
//
//   1. kDisabled         the operator-wide switch is off.
//   2. kNodeMissing      the node is not in the cache: nothing to cordon (it was deleted, or is
//                        not visible to the operator).
//   3. kAlreadyCordoned  the node is unschedulable and carries the tpujob.dev/faulty taint:
//                        cordoning again would change nothing but the annotations, which keep
//                        the first reason and evidence.
//   4. kHumanUncordoned  the node carries our tpujob.dev/cordon-evidence annotation but is
//                        schedulable, so a person uncordoned it after we cordoned it, and the
//                        request names the same evidence. The person's judgement wins over
//                        evidence they have already seen; different evidence (a new failure)
//                        may cordon again.
//   5. kSystemic         circuit breaker: the request's pre-flight item failed on at least
//                        breaker_nodes distinct nodes within breaker_window. The same check
//                        failing on many nodes at once points at the configuration (the job's
//                        template, the cluster's DNS), not at hardware. Once tripped, every
//                        request for that item is refused until breaker_window has passed
//                        since the last request that found the threshold reached. Every
//                        request with an item is recorded, whatever its verdict, because the
//                        failure happened whether or not we act on it.
//   6. kCapReached       the operator already holds CordonLimit(total_nodes) nodes cordoned:
//                        min(max_cordoned, max(1, floor(max_fraction * total_nodes))). A small
//                        cluster may always lose one node (when max_cordoned >= 1), or a lone
//                        bad node could never be cordoned there.
//   7. kRateLimited      more than rate_per_minute new cordons, averaged by a token bucket of
//                        burst max(1, floor(rate_per_minute)): a flood of faults in a short
//                        time is more likely one cause than many broken machines.
//   8. kDryRun           every check passed but dry_run is set: report what would happen and
//                        change nothing. Coming last, a dry run reports the verdict a real run
//                        would get. It takes no rate token (nothing was cordoned), so repeated
//                        dry-run requests never rate-limit each other.
//   9. kCordon           go ahead; one rate token is taken.
//
// The rate bucket and the breaker's memory live in this object. Save writes them out as JSON,
// which the operator keeps in a ConfigMap before each cordon; Restore rebuilds them from that
// and from the nodes' annotations when an operator starts or becomes leader, so that neither a
// restart nor a change of leader grants a fresh burst or forgets a tripped breaker (the nodes
// alone do not say so: auto-uncordon removes a cordon's annotations, and a refused cordon
// leaves no mark on its node).
//
// Thread-safety: CordonSafety is not synchronised; its owner serialises calls (the Cordoner
// holds a mutex around decision and write, so that the cap also holds across threads).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "cache/objects.h"
#include "policy/node_health.h"

namespace tpujob::policy {

// The NoSchedule taint a cordon adds; its value is the request's reason.
inline constexpr std::string_view kFaultyTaint = "tpujob.dev/faulty";
// Annotations a cordon writes on the node, so that `kubectl describe node` says who, why, when.
inline constexpr std::string_view kCordonedByAnnotation = "tpujob.dev/cordoned-by";
inline constexpr std::string_view kCordonReasonAnnotation = "tpujob.dev/cordon-reason";
inline constexpr std::string_view kCordonMessageAnnotation = "tpujob.dev/cordon-message";
inline constexpr std::string_view kCordonedAtAnnotation = "tpujob.dev/cordoned-at";
inline constexpr std::string_view kCordonJobAnnotation = "tpujob.dev/cordon-job";
inline constexpr std::string_view kCordonEvidenceAnnotation = "tpujob.dev/cordon-evidence";
// The value of kCordonedByAnnotation.
inline constexpr std::string_view kCordonedByOperator = "tpujob-operator";
// Bound on the cordon-message annotation, in bytes; longer messages are cut (valid UTF-8).
inline constexpr size_t kMaxCordonMessageBytes = 1024;

struct CordonPolicy {
  bool enabled = true;   // operator-wide switch
  bool dry_run = false;  // decide and report, change nothing
  // Nodes the operator may hold cordoned at once, as a count and as a fraction of the nodes it
  // can see; the tighter of the two wins. <= 0 forbids every cordon.
  int max_cordoned = 10;
  double max_fraction = 0.1;
  // New cordons per minute (token bucket, burst max(1, floor(rate))). <= 0: no rate limit, as
  // for TokenBucket; turn cordoning off with `enabled` instead.
  double rate_per_minute = 5;
  // The same pre-flight item failing on this many distinct nodes within breaker_window is a
  // configuration problem, not hardware: nothing is cordoned for that item. <= 0: no breaker.
  int breaker_nodes = 3;
  Duration breaker_window = std::chrono::minutes(10);
};

struct CordonRequest {
  std::string node;
  std::string job;      // "namespace/name" of the job whose evidence this is
  std::string reason;   // short UpperCamelCase: "PreflightFailed", "NodeUnhealthy", "NodeLost"
  std::string message;  // for humans: what failed and how
  std::string item;     // the failing pre-flight item ("dns", "disk-size shm"); "" if none
  // Opaque id of the evidence, e.g. "<pod uid>/<item>": tells a new failure from the one a
  // person already overruled by uncordoning the node.
  std::string evidence;
};

enum class CordonVerdict {
  kCordon,
  kAlreadyCordoned,
  kDisabled,
  kDryRun,
  kCapReached,
  kRateLimited,
  kSystemic,
  kHumanUncordoned,
  kNodeMissing,
};
// "Cordon", "AlreadyCordoned", "Disabled", "DryRun", "CapReached", "RateLimited", "Systemic",
// "HumanUncordoned", "NodeMissing".
std::string_view ToString(CordonVerdict verdict);

// Whether `node` counts against the cap: cordoned (unschedulable) and annotated as ours. A node
// a person uncordoned no longer counts, even while it keeps our annotations.
bool IsCordonedByUs(const cache::NodeInfo& node);

// Whether the node is cordoned by rule 3: unschedulable with the tpujob.dev/faulty taint.
bool IsCordonedForFault(const cache::NodeInfo& node);

// Whether the node carries our tpujob.dev/faulty taint under our tpujob.dev/cordoned-by
// annotation, unschedulable or not: `kubectl uncordon` alone leaves the taint, which keeps every
// pod without a toleration off the node as before. Automatic uncordon removes it too.
bool HoldsOurFaultyTaint(const cache::NodeInfo& node);

// The node's own reason not to cordon it for `request`, whatever the safety limits say:
// kNodeMissing (null: the node is gone), kAlreadyCordoned (IsCordonedForFault), or
// kHumanUncordoned (a person uncordoned it after this same evidence); none when the node may be
// cordoned. CordonSafety::Decide applies it to the cache's node, and the Cordoner again to the
// node as the API server holds it when a cordon written from the cache is refused as stale.
std::optional<CordonVerdict> NodeRulesOutCordon(const CordonRequest& request,
                                                const cache::NodeInfo* node);

// The most nodes the operator may hold cordoned among `total_nodes`:
// min(max_cordoned, max(1, floor(max_fraction * total_nodes))), or 0 when max_cordoned <= 0.
int CordonLimit(const CordonPolicy& policy, int total_nodes);

class CordonSafety {
 public:
  explicit CordonSafety(CordonPolicy policy);

  // Applies the rules above to `request` against `node`, the cache's snapshot of the node (null
  // if it is not in the cache). `cordoned_by_us` counts the nodes IsCordonedByUs holds (plus
  // any the caller cordoned that its cache does not show yet); `total_nodes` counts every node
  // the operator sees. `now` must not go backwards between calls.
  CordonVerdict Decide(const CordonRequest& request, const cache::NodeInfo* node,
                       int cordoned_by_us, int total_nodes, TimePoint now);

  // Gives back the rate token a kCordon verdict took, when the write it allowed failed: a
  // cordon that did not happen should not delay the next one.
  void ReturnToken();

  // Records request.item failing on request.node at `now` for the circuit breaker, without
  // deciding anything. A caller holding several findings of one moment (every worker of an
  // attempt failed the same check) records them all first, so that the breaker sees the whole
  // pattern before the first of them is decided.
  void RecordFailure(const CordonRequest& request, TimePoint now);

  // Distinct nodes `item` failed on within breaker_window before `now`, as last recorded.
  int FailingNodes(std::string_view item, TimePoint now) const;

  // The limits' memory as it stands at `now`, for Restore in another process: the rate bucket
  // ({"tokens": 2.5, "at": "<RFC 3339>"}) and, per pre-flight item, when it last failed on each
  // node within breaker_window and until when its breaker is open
  // ({"items": {"dns": {"nodes": {"n1": "<RFC 3339>"}, "openUntil": "<RFC 3339>"}}}). Times are
  // wall times with milliseconds; `wall_now` and `now` are the same instant. At most
  // kMaxSavedNodesPerItem nodes per item are kept, the most recent: enough to keep a breaker
  // open, and a bound on the size of the object it is kept in.
  nlohmann::json Save(WallTime wall_now, TimePoint now) const;

  // Counts the changes Save would show (a rate token taken, a pre-flight failure recorded): a
  // caller saves again when it moved since the generation it saved last.
  uint64_t generation() const { return generation_; }

  // What an operator that starts (or becomes leader) knows of the cordons before it, merged into
  // this object's memory, always towards the stricter:
  //   - `saved`, what Save wrote in the previous process (null when there is none);
  //   - the nodes that still carry our annotations (kCordonedAtAnnotation, and for pre-flight
  //     cordons the item in kCordonEvidenceAnnotation, "<pod uid>/<item>"), replayed into the
  //     rate bucket and, within breaker_window, into the breaker's failures, as if this object
  //     had made them: this covers cordons made by an operator that saved nothing.
  // Call before the first decision; `wall_now` and `now` are the same instant on the wall and
  // the steady clock. A stamp from the future (clock skew between replicas) counts as now.
  // Returns what of `saved` could not be read ("" when all of it could); the rest is used.
  std::string Restore(const std::vector<const cache::NodeInfo*>& nodes, const nlohmann::json& saved,
                      WallTime wall_now, TimePoint now);

  const CordonPolicy& policy() const { return policy_; }

 private:
  // Recent failures of one pre-flight item: node -> when it last failed there.
  struct ItemFailures {
    std::map<std::string, TimePoint, std::less<>> nodes;
    std::optional<TimePoint> tripped_until;
  };

  // Records the failure and returns whether the breaker for request.item is (now) open.
  bool RecordAndCheckBreaker(const CordonRequest& request, TimePoint now);
  // Forgets failures that left the window and breakers that closed.
  void ForgetExpired(TimePoint now);
  void Refill(TimePoint now);
  // The tokens the bucket holds at `now` (not before its last refill), without changing it.
  double TokensAt(TimePoint now) const;
  // Merges one failure of `item` on `node` at `at` (the later time wins) and trips the breaker
  // when the item has failed on breaker_nodes nodes.
  void MergeFailure(const std::string& item, const std::string& node, TimePoint at);

  const CordonPolicy policy_;
  const double burst_;
  std::map<std::string, ItemFailures, std::less<>> failures_;
  double tokens_;
  std::optional<TimePoint> refilled_at_;  // unset until the first decision: the bucket starts full
  uint64_t generation_ = 0;
};

// The most nodes per pre-flight item CordonSafety::Save keeps.
inline constexpr size_t kMaxSavedNodesPerItem = 64;

// The JSON merge patch that cordons `node` for `request` at `now`: spec.unschedulable, the
// node's taints from the snapshot plus ours (kept as it is when a tpujob.dev/faulty NoSchedule
// taint is already there), and our annotations. A merge patch replaces the whole taints list, so
// the patch carries the snapshot's metadata.resourceVersion: if the node changed since (another
// controller added a taint the snapshot does not show yet), the API server answers 409 Conflict
// instead of dropping that taint. Taints are written back without their timeAdded, which the
// cache does not keep. Every text is made valid UTF-8 and the message is cut to
// kMaxCordonMessageBytes; the taint's value is made a valid label value.
nlohmann::json CordonPatch(const CordonRequest& request, const cache::NodeInfo& node, WallTime now);

// Automatic uncordon (off unless the operator is given a healthy period). A node qualifies when
// the operator cordoned it (IsCordonedByUs and IsCordonedForFault), it is healthy by
// EvaluateNode, and it has been healthy for `healthy_period`. "Healthy since" is the latest of:
// the cordon (kCordonedAtAnnotation), the Ready condition's last transition, and the last
// transition of every configured hardware condition the node reports. Every one of these lives
// on the node object, so the wait survives operator restarts.
struct UncordonDecision {
  bool uncordon = false;
  // Not yet: the time left until the node qualifies. Unset when it cannot qualify without a
  // change to the node (not ours, not healthy), which re-enqueues it anyway.
  std::optional<Duration> wait;
  std::string message;  // why, for the log and the node's Event
};
UncordonDecision DecideUncordon(const cache::NodeInfo& node, const NodeHealthConfig& health,
                                Duration healthy_period, WallTime now);

// The JSON merge patch that undoes a cordon: spec.unschedulable false, the node's taints without
// tpujob.dev/faulty, our annotations removed; with the snapshot's resourceVersion as for
// CordonPatch.
nlohmann::json UncordonPatch(const cache::NodeInfo& node);

}  // namespace tpujob::policy
