#include "controller/node_reconciler.h"

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
  const auto node = nodes_.Get(name);
  if (node == nullptr) return ReconcileResult{};
  const policy::UncordonDecision decision = policy::DecideUncordon(
      *node, options_.node_health, options_.auto_uncordon_after, clock_.WallNow());
  if (!decision.uncordon) {
    log::Debug("not uncordoning", {{"node", name}, {"detail", decision.message}});
    return ReconcileResult{decision.wait};
  }
  auto patched = client_.Patch(kube::Resource::Nodes(), "", name, kube::PatchType::kMerge,
                               policy::UncordonPatch(*node));
  if (!patched) {
    // 409: the cache was older than the node; the informer brings the new one and a retry.
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
