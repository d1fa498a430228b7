#include "policy/decider.h"

#include <algorithm>
#include <map>

namespace tpujob::policy {

void Decider::RecordEvent(bool warning, std::string reason, std::string message) {
  plan_.events.push_back({warning, std::move(reason), BoundedMessage(std::move(message))});
}

void Decider::Requeue(Duration after) {
  if (after < Duration::zero()) after = Duration::zero();
  if (!plan_.requeue_after || after < *plan_.requeue_after) plan_.requeue_after = after;
}

void Decider::DeletePod(const cache::PodInfo& pod, std::optional<int64_t> grace, std::string why) {
  if (!removing_.insert(pod.uid).second) return;
  plan_.remove.push_back({pod.name, pod.uid, grace, std::move(why)});
}

// A node to cordon, once per plan.
void Decider::Cordon(const NodeToCordon& cordon) {
  for (const NodeToCordon& c : plan_.cordon) {
    if (c.node == cordon.node) return;
  }
  plan_.cordon.push_back(cordon);
}

// Records a fault of `p` in status.faults[]; its kind is `kind`, or the one its termination
// says (KindOfTermination).
void Decider::RecordFault(const ObservedPod& p, const Termination& t, FaultAction action,
                          const std::string& item, std::optional<FaultKind> kind) {
  FaultRecord f;
  f.time = now_;
  f.attempt = plan_.status.attempt;
  f.item = item;
  f.kind = FaultKindName(kind.value_or(KindOfTermination(t)));
  f.node = std::string(p.pod->node_name.view());
  f.pod = p.pod->name;
  if (spec_ != nullptr && spec_->Multislice() && p.type == ReplicaType::kWorker) {
    f.slice = spec_->SliceOf(p.index);
  }
  f.container = t.container;
  f.exit_code = t.exit_code;
  f.reason = t.reason;
  f.message = BoundedMessage(t.message);
  f.action = FaultActionName(action);
  plan_.status.AddFault(std::move(f));
}

void Decider::Finish(bool success, const std::string& reason, const std::string& message) {
  JobStatus& s = plan_.status;
  s.phase = success ? Phase::kSucceeded : Phase::kFailed;
  s.completion_time = now_;
  s.slice_recovery.reset();
  s.SetCondition(success ? condition::kSucceeded : condition::kFailed, true, reason, message, now_,
                 spec_generation_);
  s.SetCondition(condition::kReady, false, success ? "JobSucceeded" : "JobFailed",
                 "the job has finished", now_, spec_generation_);
  RecordEvent(!success, success ? "Succeeded" : "Failed", message);
  StopActivePods(success ? "the job succeeded" : "the job failed");
}

void Decider::Invalid(const std::string& message) {
  JobStatus& s = plan_.status;
  const Condition* valid = s.FindCondition(condition::kValid);
  if (valid == nullptr || valid->status != "False" || valid->message != message) {
    RecordEvent(true, "InvalidSpec", message);
  }
  s.SetCondition(condition::kValid, false, "InvalidSpec", message, now_, spec_generation_);
  // A job that never started fails visibly (kubectl get shows Failed) but not for good: once
  // the spec is fixed it is queued. A job already running keeps its pods and waits for a fix.
  if (s.phase == Phase::kNone || s.phase == Phase::kQueued) {
    s.phase = Phase::kFailed;
    s.SetCondition(condition::kFailed, true, "InvalidSpec", message, now_, spec_generation_);
  }
}

// Stops every pod still holding resources; terminated pods stay for their logs.
void Decider::StopActivePods(const std::string& why) {
  for (const ObservedPod& p : in_.pods) {
    if (!p.pod->terminated() && !p.pod->deleting()) DeletePod(*p.pod, std::nullopt, why);
  }
}

// replicaStatuses and readyWorkers from the pods of the current attempt.
void Decider::UpdateCounts() {
  JobStatus& s = plan_.status;
  std::map<std::string, ReplicaCounts, std::less<>> counts;
  if (spec_ != nullptr) {
    if (spec_->master) counts["Master"];
    counts["Worker"];
  }
  for (const ObservedPod& p : in_.pods) {
    if (p.attempt != s.attempt) continue;
    ReplicaCounts& c = counts[std::string(ToString(p.type))];
    Termination t;
    const PodState state = Observe(*p.pod, &t);
    if (state == PodState::kSucceeded) {
      c.succeeded++;
    } else if (state == PodState::kFailed) {
      c.failed++;
    } else {
      c.active++;
      if (state == PodState::kReady && !p.pod->deleting()) c.ready++;
    }
  }
  std::erase_if(s.worker_restarts, [](const auto& entry) { return entry.second.count == 0; });
  for (const auto& [key, record] : s.worker_restarts) {
    const std::string type = key.substr(0, key.find('-'));
    counts[type].restarts += record.count;
  }
  s.replica_statuses = std::move(counts);
  if (spec_ != nullptr) {
    s.ready_workers = std::to_string(s.replica_statuses["Worker"].ready) + "/" +
                      std::to_string(spec_->Replicas(ReplicaType::kWorker));
  }
}

// What a pod says about its replica: in place, only a failure of the current generation counts
// (an earlier one was acted on) and only a program of the current generation is ready.
PodState Decider::Observe(const cache::PodInfo& pod, Termination* t) const {
  const std::optional<InPlaceStatus>& p = plan_.status.in_place;
  if (spec_ != nullptr && spec_->fault_tolerance.restart == RestartMode::kInPlace && p) {
    return ObserveInPlacePod(pod, p->generation, t);
  }
  return ObservePod(pod, t);
}

// Whether the failure this pod shows was counted already: the same failed pod (the cache lags
// its deletion), or in place, the same pod in a generation already restarted.
// Only a program's failure is told apart by generation: a failed pod (evicted) or init container
// is replaced, so its uid identifies it.
bool Decider::Counted(const ObservedPod& p, const Termination& t) const {
  const JobStatus& s = plan_.status;
  auto it = s.worker_restarts.find(ReplicaKey(p.type, p.index));
  if (it == s.worker_restarts.end() || it->second.pod_uid != p.pod->uid) return false;
  if (spec_->fault_tolerance.restart != RestartMode::kInPlace || !s.in_place ||
      !ProgramFailure(t)) {
    return true;
  }
  return it->second.generation >= s.in_place->generation;
}

// The grace period the pods of an earlier attempt are deleted with: a disruption that ended it
// (maintenance, preemption) gives them time to checkpoint, also when the operator stopped
// between writing the decision and deleting the pods; otherwise their own.
std::optional<int64_t> Decider::GraceEnding(int32_t attempt) const {
  const std::vector<FaultRecord>& faults = plan_.status.faults;
  for (auto it = faults.rbegin(); it != faults.rend(); ++it) {
    if (it->attempt != attempt) continue;
    const std::optional<FaultKind> kind = ParseFaultKind(it->kind);
    if (kind && Treatment(*kind).grace == FaultGrace::kMaintenance) {
      return spec_->fault_tolerance.maintenance_grace_period_seconds;
    }
    break;
  }
  return std::nullopt;
}

// A re-issue for a faulty node is written before the node is cordoned; an operator stopped
// in between loses the cordon, and with it nothing keeps the next attempt (and other jobs) off
// the node. While the re-issued attempt has not started running, the node of the fault that
// ended the previous attempt is cordoned again if it is still unhealthy and not cordoned, with
// the same evidence (the Cordoner's rules apply as the first time).
void Decider::RedoLostCordon() {
  const JobStatus& s = plan_.status;
  if (!in_.node_health || !in_.node_cordoned || !spec_->fault_tolerance.cordon_faulty_nodes) {
    return;
  }
  if (s.attempt < 2 || s.phase == Phase::kRunning || IsTerminal(s.phase)) return;
  for (const FaultRecord& f : s.faults) {
    const std::optional<FaultAction> action = ParseFaultAction(f.action);
    const std::optional<FaultKind> kind = ParseFaultKind(f.kind);
    if (f.attempt != s.attempt - 1 || !action || !Treatment(*action).reissues_job ||
        f.node.empty() || !kind || Treatment(*kind).cordon != FaultCordon::kTheNode) {
      continue;
    }
    if (std::find(s.cordoned_nodes.begin(), s.cordoned_nodes.end(), f.node) !=
            s.cordoned_nodes.end() ||
        in_.node_cordoned(f.node)) {
      continue;
    }
    const NodeHealth h = in_.node_health(f.node);
    if (h.verdict != NodeVerdict::kUnhealthy) continue;
    bool listed = false;
    for (const NodeToCordon& c : plan_.cordon) listed = listed || c.node == f.node;
    if (listed) continue;
    plan_.cordon.push_back({f.node, f.kind, h.message, "",
                            job_.uid + "/" + std::to_string(f.attempt) + "/" + h.reason});
  }
}

void Decider::RecordCordonedNodes() {
  std::vector<std::string>& nodes = plan_.status.cordoned_nodes;
  for (const std::string& node : in_.cordoned_nodes) {
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
  }
  if (nodes.size() > kMaxCordonedNodes) nodes.erase(nodes.begin(), nodes.end() - kMaxCordonedNodes);
}

// A pod on a lost node (Ready Unknown, or the node deleted) never confirms a graceful delete:
// its kubelet is gone. It is deleted gracefully first, as any other, because an unreachable
// kubelet may still be running it (a network partition) and two live copies of one worker
// must not overlap; once the grace period it was deleted with is over, it is force-deleted.
void Decider::ForceIfLost(const cache::PodInfo& pod) {
  if (!in_.node_health || !pod.deleting() || pod.node_name.empty()) return;
  if (!in_.node_health(pod.node_name.view()).unreachable) return;
  if (now_ >= *pod.deletion_timestamp) {
    DeletePod(pod, 0, "its node is lost and the grace period it was deleted with is over");
  } else {
    // Timestamps have whole seconds: come back just after the deadline.
    Requeue(std::chrono::duration_cast<Duration>(*pod.deletion_timestamp - now_) +
            std::chrono::milliseconds(200));
  }
}

// `grace` for a pod, or kBriefGraceSeconds when its node is lost: its kubelet cannot deliver
// SIGTERM, and the pod's own grace period would only delay what comes next.
std::optional<int64_t> Decider::OnLostNode(const cache::PodInfo& pod,
                                           std::optional<int64_t> grace) const {
  if (!in_.node_health || pod.node_name.empty() ||
      !in_.node_health(pod.node_name.view()).unreachable) {
    return grace;
  }
  return std::min(grace.value_or(kBriefGraceSeconds), kBriefGraceSeconds);
}

// The node a missing replica goes back to: the node its last counted restart ran on, while
// that node is healthy and not cordoned. "" = anywhere.
// A node that does not take it is forgotten, so that a recorded node always means the pod was
// created pinned to it.
std::string Decider::RestartNode(ReplicaType type, int32_t index) {
  auto& restarts = plan_.status.worker_restarts;
  auto it = restarts.find(ReplicaKey(type, index));
  if (it == restarts.end() || it->second.count == 0 || it->second.node.empty()) return "";
  if (!NodeTakesRestart(it->second.node)) it->second.node.clear();
  return it->second.node;
}

bool Decider::NodeTakesRestart(const std::string& node) const {
  if (in_.node_cordoned && in_.node_cordoned(node)) return false;
  return !in_.node_health || in_.node_health(node).verdict == NodeVerdict::kHealthy;
}

// The whole job moves on to a new attempt, which queues once the pods of this one are gone
// (first when `reissued`, else by priority); `reason` and `why` go on Admitted and Ready.
void Decider::NextAttempt(bool reissued, std::string_view reason, const std::string& why) {
  JobStatus& s = plan_.status;
  s.attempt++;
  s.reissued = reissued;
  s.worker_restarts.clear();
  s.slice_recovery.reset();
  if (s.progress) {  // a stall not acted on belongs to the attempt that ends
    s.progress->stall_seen.reset();
    s.progress->acted_until = now_;
  }
  NewGeneration();
  s.phase = Phase::kRestarting;
  s.admitted_at.reset();
  s.running_at.reset();
  s.SetCondition(condition::kAdmitted, false, reason,
                 "attempt " + std::to_string(s.attempt) +
                     " waits for the pods of the previous attempt to be gone",
                 now_, spec_generation_);
  s.SetCondition(condition::kReady, false, reason, why, now_, spec_generation_);
}

// Rule 4: a worker of the admitted attempt has been unschedulable for kUnschedulableRelease:
// the capacity the queue counted was taken in the meantime (another scheduler's pod, a node
// gone). The admission is released: the attempt's pods are removed and it queues again first,
// like a re-issue (and with a re-issue's queue timeout), without using a retry.
void Decider::ReleaseAdmission(const ObservedPod& stuck) {
  JobStatus& s = plan_.status;
  const std::string why =
      DescribeReplica(stuck, spec_) + " cannot be scheduled" +
      (stuck.pod->message.empty() ? std::string() : " (" + stuck.pod->message.str() + ")") +
      "; the capacity counted at admission was taken";
  s.reissued = true;
  s.phase = Phase::kRestarting;
  s.admitted_at.reset();
  s.running_at.reset();
  s.node_pools.clear();
  s.slice_recovery.reset();  // the attempt queues again as a whole
  NewGeneration();           // its pods are all created again
  s.SetCondition(condition::kAdmitted, false, "AdmissionReleased",
                 why + "; attempt " + std::to_string(s.attempt) + " queues again first", now_,
                 spec_generation_);
  s.SetCondition(condition::kReady, false, "AdmissionReleased", why, now_, spec_generation_);
  RecordEvent(true, "AdmissionReleased",
              why + "; releasing the admission, attempt " + std::to_string(s.attempt) +
                  " queues again with first priority (no retry used)");
  for (const ObservedPod& p : in_.pods) {
    if (p.attempt == s.attempt && !p.pod->deleting()) {
      DeletePod(*p.pod, kBriefGraceSeconds, "the admission was released");
    }
  }
}

// Ready=False while a permanent exit awaits its node's verdict, with an Event the first time.
void Decider::AwaitAttribution(const ObservedPod& p, const Termination& t) {
  JobStatus& s = plan_.status;
  const std::optional<WallTime> until =
      AttributionDeadline(p, t, spec_->fault_tolerance.fault_attribution_seconds);
  const std::string node(p.pod->node_name.view());
  const std::string message =
      DescribeReplica(p, spec_) + ": " + DescribeExit(t) + "; exit code " +
      std::to_string(t.exit_code.value_or(0)) + " is permanent unless node " + node +
      " is found faulty: waiting until " + (until ? cache::FormatRfc3339(*until) : "now") + " (" +
      std::to_string(spec_->fault_tolerance.fault_attribution_seconds) +
      "s after the exit) for its health before failing the job";
  const Condition* ready = s.FindCondition(condition::kReady);
  if (ready == nullptr || ready->reason != "AwaitingFaultAttribution" ||
      ready->message != BoundedMessage(message)) {
    RecordEvent(true, "AwaitingFaultAttribution", message);
  }
  s.SetCondition(condition::kReady, false, "AwaitingFaultAttribution", BoundedMessage(message),
                 now_, spec_generation_);
}

}  // namespace tpujob::policy
