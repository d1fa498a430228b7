#include "policy/preflight_verdict.h"

namespace tpujob::policy {
namespace {

// When some pods of the attempt failed their pre-flight checks while scheduled peers are still
// running theirs, the time left to wait for the peers' verdicts (see kPreflightSettle).
std::optional<Duration> PreflightPending(const PreflightSnapshot& snapshot) {
  if (!snapshot.admitted_at) return std::nullopt;
  const auto deadline = *snapshot.admitted_at + kPreflightSettle;
  if (snapshot.now >= deadline) return std::nullopt;
  for (const ObservedPod* p : snapshot.pods) {
    const cache::PodInfo& pod = *p->pod;
    if (pod.deleting() || pod.terminated() || pod.node_name.empty()) continue;
    const cache::ContainerInfo* init = pod.FindInitContainer(kPreflightContainer);
    if (init != nullptr && init->state != cache::ContainerState::kTerminated) {
      return std::chrono::duration_cast<Duration>(deadline - snapshot.now);
    }
  }
  return std::nullopt;
}

}  // namespace

PreflightVerdict CheckPreflight(const PreflightSnapshot& snapshot) {
  PreflightVerdict v;
  if (snapshot.failed.empty()) return v;
  if (std::optional<Duration> wait = PreflightPending(snapshot)) {
    v.outcome = PreflightVerdict::Outcome::kWait;
    v.wait = *wait;
    return v;
  }
  // Each report (the termination message) names the failed items and whether the node or the
  // job's configuration is at fault.
  const JobSpec& spec = *snapshot.spec;
  std::string nodes_at_fault;
  std::string all_items;
  bool culprit_node_fault = false;
  bool job_at_fault = true;  // every report readable, every failed item the job's own settings
  std::string first_detail;  // "item: message" of the first failed item
  for (const ReplicaFailure* failure : snapshot.failed) {
    const ObservedPod* p = failure->pod;
    const Termination* t = &failure->termination;
    const std::optional<preflight::Report> report = preflight::ParseReport(t->message);
    std::string items;
    bool blames_node = false;  // an item that speaks about the node, not the job's settings
    const ReplicaSpec* replica = spec.Replica(p->type);
    for (const preflight::ItemResult& result :
         report ? report->items : std::vector<preflight::ItemResult>{}) {
      if (result.passed) continue;
      blames_node =
          blames_node || (replica != nullptr && PreflightItemBlamesNode(result, *replica));
      const std::string& item = result.item;
      if (first_detail.empty() && !result.message.empty()) {
        first_detail = item + ": " + result.message;
      }
      if (!items.empty()) items += ",";
      items += item;
      if (("," + all_items + ",").find("," + item + ",") == std::string::npos) {
        all_items += (all_items.empty() ? "" : ",") + item;
      }
    }
    // Cases 1 and 2 of docs/api.md's "The four cases": a node whose hardware (exit 10) or
    // environment (exit 11 with an item about the node) failed is isolated; the circuit breaker
    // and the cordon cap keep a failure that is everywhere from cordoning everything.
    const bool hardware = t->exit_code && *t->exit_code == preflight::kExitNodeFault;
    const bool node_fault =
        hardware || (t->exit_code && *t->exit_code == preflight::kExitConfigFault && blames_node);
    job_at_fault = job_at_fault && report && !items.empty() && !node_fault &&
                   t->exit_code == preflight::kExitConfigFault;
    const std::string node(p->pod->node_name.view());
    if (node_fault && !node.empty()) {
      nodes_at_fault += (nodes_at_fault.empty() ? "" : ", ") + node;
      if (spec.fault_tolerance.cordon_faulty_nodes) {
        v.cordon.push_back(
            {node, std::string(FaultKindName(FaultKind::kPreflightFailed)),
             DescribeReplica(*p, &spec) + ": pre-flight check failed: " +
                 (items.empty() ? "no readable report" : items) + " on node " + node +
                 (hardware ? " (the node is at fault)" : " (the node's environment is at fault)"),
             items, p->pod->uid + "/" + (items.empty() ? "preflight" : items)});
      }
    }
    // The culprit named in faults[]: a node at fault first, then the first failure.
    if (v.culprit == nullptr || (node_fault && !culprit_node_fault)) {
      v.culprit = p;
      v.shown = *t;
      v.items = items;
      culprit_node_fault = node_fault;
    }
    v.touched.push_back(p);
  }
  const std::string node(v.culprit->pod->node_name.view());
  v.shown.message = v.items.empty() ? std::string("no readable report") : "failed: " + v.items;
  v.why = DescribeReplica(*v.culprit, &spec) + ": pre-flight check " + v.shown.message +
          " on node " + (node.empty() ? "<none>" : node);
  if (snapshot.failed.size() > 1) {
    v.why += "; " + std::to_string(snapshot.failed.size()) + " pods failed pre-flight (" +
             all_items + ")";
  }
  if (job_at_fault) {
    // The job's own settings fail on every node: a re-issue would fail the same way.
    v.outcome = PreflightVerdict::Outcome::kFailJob;
    v.why += (first_detail.empty() ? "" : " (" + first_detail + ")") +
             ": the job's own settings fail pre-flight on any node, so it is not re-issued "
             "(no retry used); fix the spec";
    return v;
  }
  v.outcome = PreflightVerdict::Outcome::kReissue;
  v.why += nodes_at_fault.empty() ? " (the job's configuration is at fault)"
                                  : " (node at fault: " + nodes_at_fault + ")";
  return v;
}

bool PreflightItemBlamesNode(const preflight::ItemResult& item, const ReplicaSpec& replica) {
  if (item.passed) return false;
  if (item.fault == preflight::Fault::kNode) return true;
  if (item.item == preflight::kItemConfig) return false;  // the job's settings are invalid
  // Kubernetes gives a container a 64 MB /dev/shm unless the pod mounts a volume there: with
  // none, a small shm is the template's doing, the same on every node.
  if (item.item == preflight::kItemDiskShm) return MountsVolumeAt(replica, "/dev/shm");
  return true;
}

}  // namespace tpujob::policy
