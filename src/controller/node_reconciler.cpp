#include "controller/node_reconciler.h"

#include <utility>

#include "base/logging.h"
#include "controller/metrics.h"
#include "policy/cordon.h"

namespace tpujob::controller {

NodeReconciler::NodeReconciler(kube::Client& client, const cache::Store<cache::NodeInfo>& nodes,
                               Cordoner& cordoner, EventRecorder& recorder,
                               NodeReconcilerOptions options, Clock& clock)
    : client_(client),
      nodes_(nodes),
      cordoner_(cordoner),
      recorder_(recorder),
      options_(std::move(options)),
      clock_(clock) {}

bool NodeReconciler::Interested(const cache::NodeInfo& node) const {
  return options_.auto_uncordon_after > Duration::zero() &&
         (policy::IsCordonedByUs(node) || policy::HoldsOurFaultyTaint(node));
}

kube::Result<ReconcileResult> NodeReconciler::Reconcile(const std::string& name) {
  if (auto retried = cordoner_.Retry(name)) {
    if (retried->error) return std::unexpected(*retried->error);
    log::Info("cordon retried", {{"node", name},
                                 {"verdict", policy::ToString(retried->verdict)},
                                 {"detail", retried->message}});
  }
  if (options_.auto_uncordon_after <= Duration::zero()) return ReconcileResult{};
  cache::Store<cache::NodeInfo>::Ptr node = nodes_.Get(name);
  if (node == nullptr) return ReconcileResult{};
  policy::UncordonDecision decision = policy::DecideUncordon(
      *node, options_.node_health, options_.auto_uncordon_after, clock_.WallNow());
  if (!decision.uncordon) {
    log::Debug("not uncordoning", {{"node", name}, {"detail", decision.message}});
    return ReconcileResult{decision.wait};
  }
  auto patched = client_.Patch(kube::Resource::Nodes(), "", name, kube::PatchType::kMerge,
                               policy::UncordonPatch(*node));
  for (int attempt = 1; attempt < kCordonWriteAttempts && !patched && patched.error().IsConflict();
       ++attempt) {
    // The cache is older than the node, and may stay so while its watch is broken: decide again
    // on the node as the API server holds it.
    auto fresh = ReadNode(client_, name);
    if (!fresh) {
      patched = std::unexpected(std::move(fresh.error()));
      break;
    }
    if (*fresh == nullptr) return ReconcileResult{};  // deleted
    log::Info(
        "the node changed since the cache saw it; deciding the uncordon again on the node "
        "as read",
        {{"node", name}, {"cached", node->resource_version}, {"read", (*fresh)->resource_version}});
    node = std::move(*fresh);
    decision = policy::DecideUncordon(*node, options_.node_health, options_.auto_uncordon_after,
                                      clock_.WallNow());
    if (!decision.uncordon) {
      log::Info("not uncordoning", {{"node", name}, {"detail", decision.message}});
      return ReconcileResult{decision.wait};
    }
    patched = client_.Patch(kube::Resource::Nodes(), "", name, kube::PatchType::kMerge,
                            policy::UncordonPatch(*node));
  }
  if (!patched) {
    log::Warn("cannot uncordon node", {{"node", name}, {"error", patched.error().ToString()}});
    return std::unexpected(patched.error());
  }
  Metrics().node_uncordons.With({}).Inc();
  log::Info("uncordoned node",
            {{"node", name},
             {"reason", node->annotations.Value(policy::kCordonReasonAnnotation)},
             {"detail", decision.message}});
  recorder_.Record(ObjectRef{"v1", "Node", "", name, node->uid}, EventType::kNormal,
                   std::string(kNodeUncordonedReason),
                   "uncordoned by tpujob-operator: " + decision.message);
  return ReconcileResult{};
}

}  // namespace tpujob::controller
