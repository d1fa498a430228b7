#include "policy/fault_rules.h"

#include <algorithm>

namespace tpujob::policy {
namespace {

void KeepEarliest(std::optional<Duration>& earliest, Duration d) {
  if (!earliest || d < *earliest) earliest = d;
}

bool Listed(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

}  // namespace

std::string BoundedMessage(std::string text) {
  if (text.size() > kMaxMessage) {
    // Cut at a character boundary: a split UTF-8 sequence would make the JSON invalid.
    size_t cut = kMaxMessage - 3;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text.resize(cut);
    text += "...";
  }
  return text;
}

// "worker-3 (pod j-worker-3)"; for a multislice job "worker-7 (slice 1, pod j-worker-1-3)".
std::string DescribeReplica(const ObservedPod& p, const JobSpec* spec) {
  std::string out = std::string(LowerName(p.type)) + "-" + std::to_string(p.index) + " (";
  if (spec != nullptr && spec->Multislice() && p.type == ReplicaType::kWorker) {
    out += "slice " + std::to_string(spec->SliceOf(p.index)) + ", ";
  }
  return out + "pod " + p.pod->name + ")";
}

std::string DescribeExit(const Termination& t) {
  std::string out;
  if (!t.container.empty()) {
    out = std::string(t.init_container ? "init container " : "container ") + t.container;
    if (t.exit_code) out += " exited with code " + std::to_string(*t.exit_code);
    if (!t.reason.empty()) out += " (" + t.reason + ")";
  } else {
    out = "pod failed";
    if (!t.reason.empty()) out += " (" + t.reason + ")";
  }
  if (!t.message.empty()) out += ": " + t.message;
  return out;
}

bool ProgramFailure(const Termination& t) { return !t.init_container && !t.container.empty(); }

FaultKind KindOfTermination(const Termination& t) {
  if (t.container.empty()) {
    return t.reason.starts_with("Node") ? FaultKind::kNodeUnhealthy : FaultKind::kPodFailed;
  }
  if (t.init_container) {
    return t.container == kPreflightContainer ? FaultKind::kPreflightFailed
                                              : FaultKind::kInitContainerFailed;
  }
  return FaultKind::kContainerFailed;
}

Termination NodeVerdictAfterExit(const PodOnNode& pod) {
  Termination t;
  t.reason = pod.health.reason;
  t.message = pod.health.message;
  const Termination& exit = pod.exit;
  if (pod.state == PodState::kFailed && !exit.container.empty()) {
    t.container = exit.container;
    t.init_container = exit.init_container;
    t.exit_code = exit.exit_code;
    t.finished_at = exit.finished_at;
    t.message = DescribeExit(exit) + "; then " + pod.health.message;
  }
  return t;
}

// Rule 1.
MaintenanceVerdict CheckMaintenance(const NodeFaultSnapshot& snapshot) {
  MaintenanceVerdict v;
  for (const PodOnNode& p : snapshot.pods) {
    const cache::PodInfo& pod = *p.pod->pod;
    if (p.health.changes_in && !pod.terminated()) KeepEarliest(v.recheck_in, *p.health.changes_in);
    // A failed pod counts too: its exit awaits the node's verdict (rule 6).
    const bool failed = pod.terminated() && p.state == PodState::kFailed;
    if (p.health.verdict != NodeVerdict::kMaintenance || (pod.terminated() && !failed)) continue;
    v.touched.push_back(p.pod);
    if (v.culprit == nullptr) v.culprit = &p;
  }
  if (v.culprit != nullptr) v.termination = NodeVerdictAfterExit(*v.culprit);
  return v;
}

// Rule 2.
FaultyNodeVerdict CheckFaultyNodes(const NodeFaultSnapshot& snapshot) {
  FaultyNodeVerdict v;
  std::vector<std::string> cordoned;
  for (const PodOnNode& p : snapshot.pods) {
    if (p.health.verdict != NodeVerdict::kUnhealthy && p.health.verdict != NodeVerdict::kMissing) {
      continue;
    }
    v.touched.push_back(p.pod);
    // The culprit: a pod whose program exited on the faulty node, else the first one.
    if (v.culprit == nullptr ||
        (v.culprit->state != PodState::kFailed && p.state == PodState::kFailed)) {
      v.culprit = &p;
    }
    const bool lost = p.health.unreachable;  // its kubelet is gone
    v.lost_any = v.lost_any || lost;
    const std::string node(p.pod->pod->node_name.view());
    if (snapshot.cordon_faulty_nodes && p.health.verdict != NodeVerdict::kMissing &&
        !Listed(cordoned, node)) {
      cordoned.push_back(node);
      v.cordon.push_back(
          {node,
           std::string(FaultKindName(lost ? FaultKind::kNodeLost : FaultKind::kNodeUnhealthy)),
           p.health.message, "",
           snapshot.job_uid + "/" + std::to_string(snapshot.attempt) + "/" + p.health.reason});
    }
  }
  if (v.culprit != nullptr) {
    v.kind = v.culprit->health.unreachable ? FaultKind::kNodeLost : FaultKind::kNodeUnhealthy;
    v.termination = NodeVerdictAfterExit(*v.culprit);
    // Every other faulty node once, by its first pod (a pod whose program failed there first).
    std::vector<std::string> nodes = {std::string(v.culprit->pod->pod->node_name.view())};
    for (const PodOnNode& p : snapshot.pods) {
      if (p.health.verdict != NodeVerdict::kUnhealthy &&
          p.health.verdict != NodeVerdict::kMissing) {
        continue;
      }
      const std::string node(p.pod->pod->node_name.view());
      auto seen = std::find(nodes.begin(), nodes.end(), node);
      if (seen == nodes.end()) {
        nodes.push_back(node);
        v.others.push_back(&p);
      } else if (seen != nodes.begin() && p.state == PodState::kFailed) {
        const PodOnNode*& first = v.others[static_cast<size_t>(seen - nodes.begin()) - 1];
        if (first->state != PodState::kFailed) first = &p;
      }
    }
  }
  return v;
}

// Rule 3.
std::vector<Unpin> CheckPinnedUnschedulable(const PinnedPodSnapshot& snapshot) {
  std::vector<Unpin> out;
  for (const ObservedPod* p : snapshot.pods) {
    if (p->pod->deleting() || !p->pod->node_name.empty() || !p->pod->unschedulable) continue;
    std::string key = ReplicaKey(p->type, p->index);
    auto it = snapshot.worker_restarts->find(key);
    if (it == snapshot.worker_restarts->end() || it->second.node.empty() ||
        it->second.pod_uid == p->pod->uid) {
      continue;
    }
    out.push_back({p, std::move(key), it->second.node});
  }
  return out;
}

// Rule 4.
const ObservedPod* CheckUnschedulable(const UnschedulableSnapshot& snapshot) {
  if (!snapshot.release_unschedulable) return nullptr;
  if (!snapshot.admitted_at || snapshot.now - *snapshot.admitted_at < kUnschedulableRelease) {
    return nullptr;
  }
  for (const ObservedPod* p : snapshot.pods) {
    if (!p->pod->deleting() && !Listed(snapshot.removing, p->pod->uid) && p->pod->unschedulable &&
        p->pod->node_name.empty()) {
      return p;
    }
  }
  return nullptr;
}

std::optional<WallTime> AttributionDeadline(const ObservedPod& pod, const Termination& t,
                                            int64_t fault_attribution_seconds) {
  if (fault_attribution_seconds <= 0 || t.reason == "OOMKilled" || !t.finished_at ||
      pod.pod->node_name.empty()) {
    return std::nullopt;
  }
  return *t.finished_at + std::chrono::seconds(fault_attribution_seconds);
}

// Rule 6.
PermanentExitVerdict CheckPermanentExits(const PermanentExitSnapshot& snapshot) {
  PermanentExitVerdict v;
  const std::vector<ReplicaFailure>& failures = *snapshot.failures;
  for (const ReplicaFailure& f : failures) {
    if (f.counted) continue;
    if (!f.termination.exit_code || ClassifyExit(*snapshot.exit_codes, *f.termination.exit_code,
                                                 f.termination.reason) != ExitClass::kPermanent) {
      continue;
    }
    const std::optional<WallTime> until =
        AttributionDeadline(*f.pod, f.termination, snapshot.fault_attribution_seconds);
    if (until && snapshot.now < *until) {
      v.held.push_back(&f);
      KeepEarliest(v.recheck_in, std::chrono::duration_cast<Duration>(*until - snapshot.now));
      continue;
    }
    v.fails = &f;
    v.waited = until.has_value();
    if (v.waited) {
      // Final on the node's health: every failed pod's node is read again before it stands
      // (another one found faulty would make the whole attempt the hardware's).
      v.confirm_nodes.emplace_back(f.pod->pod->node_name.view());
      for (const ReplicaFailure& other : failures) {
        const std::string node(other.pod->pod->node_name.view());
        if (!node.empty() && !Listed(v.confirm_nodes, node)) v.confirm_nodes.push_back(node);
      }
    }
    break;
  }
  return v;
}

// Rule 8.
SuccessVerdict CheckSuccessOrPreemption(const SuccessSnapshot& snapshot) {
  SuccessVerdict v;
  // Neither success nor preemption is decided while a permanent exit awaits its verdict: it came
  // first.
  if (snapshot.exit_held) return v;
  if (snapshot.success_policy == SuccessPolicy::kMaster && snapshot.success_decider_succeeded) {
    v.outcome = SuccessVerdict::Outcome::kSucceeded;
    v.reason = "MasterSucceeded";
    v.message = std::string(snapshot.has_master ? "the master" : "worker 0") + " exited 0" +
                (snapshot.replicas > 1 ? "; the remaining pods are stopped" : "");
    return v;
  }
  if (snapshot.success_policy == SuccessPolicy::kAllWorkers &&
      snapshot.workers_succeeded == snapshot.workers) {
    v.outcome = SuccessVerdict::Outcome::kSucceeded;
    v.reason = "AllWorkersSucceeded";
    v.message = "all " + std::to_string(snapshot.workers) + " workers exited 0";
    return v;
  }
  // The queue's preemption comes after every fault and success, which all take precedence: a job
  // that just finished is not restarted.
  if (snapshot.preempt != nullptr && *snapshot.preempt &&
      (*snapshot.preempt)->attempt == snapshot.attempt) {
    v.outcome = SuccessVerdict::Outcome::kPreempted;
  }
  return v;
}

// Rule 9.
std::vector<RetryVerdict> CheckRetryableExits(const RetrySnapshot& snapshot) {
  std::vector<RetryVerdict> out;
  const std::vector<const ReplicaFailure*>& held = *snapshot.held;
  for (const ReplicaFailure& f : *snapshot.failures) {
    if (std::find(held.begin(), held.end(), &f) != held.end()) continue;
    const RestartRecord none;
    auto it = snapshot.worker_restarts->find(ReplicaKey(f.pod->type, f.pod->index));
    const RestartRecord& record = it == snapshot.worker_restarts->end() ? none : it->second;
    const bool program = ProgramFailure(f.termination);
    if (snapshot.in_place && f.counted) {
      // A failed pod (not its program) counted already: it goes, and its replacement waits at
      // the barrier.
      if (!program) out.push_back({&f, RetryVerdict::Step::kDeleteCounted, true});
      continue;
    }
    if (snapshot.in_place && record.count < snapshot.max_worker_restarts) {
      // A pod that failed as a whole (evicted) or in an init container cannot restart in place:
      // it is created again, and waits at the barrier with the others.
      out.push_back({&f, RetryVerdict::Step::kRestartInPlace, !program});
      continue;
    }
    if (!snapshot.in_place && record.pod_uid == f.pod->pod->uid) {
      // Counted before the operator could delete it (or the cache lags the delete).
      out.push_back({&f, RetryVerdict::Step::kDeleteCounted, true});
      continue;
    }
    if (record.count < snapshot.max_worker_restarts) {
      out.push_back({&f, RetryVerdict::Step::kRestartWorker, true});
      continue;
    }
    // Out of restarts while a permanent exit awaits its node's verdict: that exit came first and
    // decides (a failure, or the hardware's re-issue); this one waits with it.
    if (!held.empty()) continue;
    out.push_back({&f, RetryVerdict::Step::kReissue, true});
    break;
  }
  return out;
}

}  // namespace tpujob::policy
