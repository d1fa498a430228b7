// NodeReconciler: the operator's work on nodes themselves, keyed by node name on a work queue of
// its own (one worker: node work is rare and must not wait behind job reconciles).
//
//   1. Failed cordons: a cordon whose write failed (Cordoner keeps it) is retried with the work
//      queue's per-item backoff until it is written or no longer wanted.
//   2. Automatic uncordon, off unless `auto_uncordon_after` is positive: a node the operator
//      cordoned that has been healthy for that long (policy::DecideUncordon) is uncordoned: the
//      taint, spec.unschedulable and our annotations go, and a Normal Event NodeUncordoned is
//      recorded on the node. Until then the node is requeued for the time left, so the wait does
//      not depend on the node changing.
//
// Nodes reach the queue from the node informer (every change of a node cordoned by us) and from
// the Cordoner's retry hook.
#pragma once

#include <string>

#include "base/clock.h"
#include "cache/objects.h"
#include "cache/store.h"
#include "controller/cordoner.h"
#include "controller/event_recorder.h"
#include "controller/tpujob_reconciler.h"
#include "kube/client.h"
#include "policy/node_health.h"

namespace tpujob::controller {

// The Event reason recorded on a node the operator uncordoned.
inline constexpr std::string_view kNodeUncordonedReason = "NodeUncordoned";

struct NodeReconcilerOptions {
  // How long a node cordoned by the operator must be healthy before it is uncordoned;
  // zero (the default) leaves every uncordon to people.
  Duration auto_uncordon_after = Duration::zero();
  policy::NodeHealthConfig node_health;
};

class NodeReconciler {
 public:
  NodeReconciler(kube::Client& client, const cache::Store<cache::NodeInfo>& nodes,
                 Cordoner& cordoner, EventRecorder& recorder, NodeReconcilerOptions options,
                 Clock& clock = Clock::Real());

  kube::Result<ReconcileResult> Reconcile(const std::string& node);

  // Whether a change to `node` may need this reconciler: it is cordoned by us and automatic
  // uncordon is on.
  bool Interested(const cache::NodeInfo& node) const;

 private:
  kube::Client& client_;
  const cache::Store<cache::NodeInfo>& nodes_;
  Cordoner& cordoner_;
  EventRecorder& recorder_;
  NodeReconcilerOptions options_;
  Clock& clock_;
};

}  // namespace tpujob::controller
