#include "policy/slice_recovery.h"

#include <algorithm>
#include <map>

#include "policy/decider.h"

namespace tpujob::policy {

// "slice 2", "slices 0, 1 and 3".
std::string SliceList(const std::vector<int32_t>& slices) {
  std::string out = slices.size() == 1 ? "slice " : "slices ";
  for (size_t i = 0; i < slices.size(); ++i) {
    if (i > 0) out += i + 1 == slices.size() ? " and " : ", ";
    out += std::to_string(slices[i]);
  }
  return out;
}

// The slices slice recovery keeps, e.g. "slices 0, 1 and 3".
std::string Decider::KeptSlices() const {
  std::vector<int32_t> kept;
  const std::vector<int32_t> none;
  const std::vector<int32_t>& replaced =
      plan_.status.slice_recovery ? plan_.status.slice_recovery->slices : none;
  for (int32_t slice = 0; slice < spec_->ActiveSlices(); ++slice) {
    if (std::find(replaced.begin(), replaced.end(), slice) == replaced.end()) {
      kept.push_back(slice);
    }
  }
  return SliceList(kept);
}

// The slices a fault is confined to, when slice recovery replaces those slices alone: every pod
// it touches is a worker of one of them, of a multislice job that holds a pool per slice, and at
// least one slice is kept.
std::vector<int32_t> ConfinedSlices(const JobSpec& spec, bool replace_slices, size_t node_pools,
                                    const std::vector<const ObservedPod*>& touched) {
  if (!spec.Multislice() || spec.fault_tolerance.recovery != Recovery::kSlice || !replace_slices ||
      touched.empty() || node_pools != static_cast<size_t>(spec.ActiveSlices())) {
    return {};
  }
  std::vector<int32_t> slices;
  for (const ObservedPod* p : touched) {
    if (p->type != ReplicaType::kWorker) return {};
    const int32_t of = spec.SliceOf(p->index);
    if (std::find(slices.begin(), slices.end(), of) == slices.end()) slices.push_back(of);
  }
  if (slices.size() >= static_cast<size_t>(spec.ActiveSlices())) return {};  // none left to keep
  std::sort(slices.begin(), slices.end());
  return slices;
}

// The node a worker of a slice kept by slice recovery is bound to again: the one it ran on,
// while that node is healthy and schedulable; "" = placed by the scheduler in its pool.
std::string Decider::KeptNode(ReplicaType type, int32_t index) {
  std::optional<SliceRecovery>& recovery = plan_.status.slice_recovery;
  if (!recovery || type != ReplicaType::kWorker || index < 0 ||
      static_cast<size_t>(index) >= recovery->nodes.size()) {
    return "";
  }
  std::string& node = recovery->nodes[static_cast<size_t>(index)];
  if (!node.empty() && !NodeTakesRestart(node)) node.clear();
  return node;
}

// The attempt ends for a fault of `kind` (by default the one `t` says) that `culprit` shows:
// the job, or the slices the fault is confined to, queue again as the next attempt, or the
// job fails when the fault uses a retry and none is left. The fault table says whether it uses
// a retry and the grace period of the pods it deletes. `others`: the other faults of the same
// decision (another faulty node), recorded with the same action; one retry for them all.
void Decider::Reissue(const ObservedPod& culprit, const Termination& t, const std::string& why,
                      std::optional<FaultKind> kind, const std::string& item,
                      const std::vector<const ObservedPod*>& touched,
                      const std::vector<OtherFault>& others) {
  JobStatus& s = plan_.status;
  kind = kind.value_or(KindOfTermination(t));
  const bool counts = UsesRetry(*kind);
  const std::optional<int64_t> grace =
      Treatment(*kind).grace == FaultGrace::kMaintenance
          ? std::optional<int64_t>(spec_->fault_tolerance.maintenance_grace_period_seconds)
          : std::nullopt;
  const int32_t max_retries = spec_->fault_tolerance.max_job_retries;
  auto record = [&](FaultAction action) {
    RecordFault(culprit, t, action, item, kind);
    for (const OtherFault& o : others) RecordFault(*o.pod, o.termination, action, "", o.kind);
  };
  if (counts && s.job_retries >= max_retries) {
    record(FaultAction::kFailJob);
    Finish(false, "RetriesExhausted",
           why + (max_retries == 0
                      ? "; re-issue is off (spec.faultTolerance.maxJobRetries or annotation " +
                            std::string(kJobRetryAnnotation) + ")"
                      : "; the job was already re-issued " + std::to_string(s.job_retries) +
                            " times (maxJobRetries " + std::to_string(max_retries) + ")"));
    UpdateCounts();
    return;
  }
  const std::vector<int32_t> slices =
      ConfinedSlices(*spec_, in_.replace_slices, s.node_pools.size(), touched);
  const bool by_slice = !slices.empty();
  auto replaced = [&](int32_t slice) {
    return std::find(slices.begin(), slices.end(), slice) != slices.end();
  };
  record(by_slice ? FaultAction::kReplaceSlice : FaultAction::kReissueJob);
  if (counts) s.job_retries++;
  std::optional<SliceRecovery> recovery;
  if (by_slice) {
    // Where the kept slices' workers run now: their new pods are bound there again.
    recovery.emplace();
    recovery->slices = slices;
    const int32_t workers = spec_->Replicas(ReplicaType::kWorker);
    if (static_cast<size_t>(workers) <= kMaxRecoveryNodes) {
      recovery->nodes.resize(static_cast<size_t>(workers));
      bool any = false;
      for (const ObservedPod& p : in_.pods) {
        if (p.attempt != s.attempt || p.type != ReplicaType::kWorker || p.index < 0 ||
            p.index >= workers || replaced(spec_->SliceOf(p.index)) || p.pod->node_name.empty()) {
          continue;
        }
        recovery->nodes[static_cast<size_t>(p.index)] = std::string(p.pod->node_name.view());
        any = true;
      }
      if (!any) recovery->nodes.clear();
    }
  }
  const bool kept_in_place =
      by_slice && s.in_place && spec_->fault_tolerance.restart == RestartMode::kInPlace;
  NextAttempt(/*reissued=*/true, "Reissued", why);
  if (kept_in_place) {
    recovery->nodes.clear();
    recovery->in_place = true;
    s.in_place->barrier_since = now_;  // the kept slices stop and wait for the replaced one
  }
  const std::string retry = counts ? " (retry " + std::to_string(s.job_retries) + " of " +
                                         std::to_string(max_retries) + ")"
                                   : " (a disruption: no retry used)";
  if (by_slice) {
    s.slice_recovery = std::move(recovery);
    for (int32_t slice : slices) s.node_pools[static_cast<size_t>(slice)].clear();
    const bool one = slices.size() == 1;
    RecordEvent(true, "Reissued",
                why + "; replacing " + SliceList(slices) + " alone as attempt " +
                    std::to_string(s.attempt) + retry +
                    (one ? ": it gets a new node pool, " : ": each gets a new node pool, ") +
                    KeptSlices() +
                    (kept_in_place ? " keep theirs and their pods, whose program restarts in place"
                                   : " keep theirs and restart on the nodes they hold"));
  } else {
    RecordEvent(true, "Reissued",
                why + "; re-issuing the job as attempt " + std::to_string(s.attempt) + retry);
  }
  for (const ObservedPod& p : in_.pods) {
    if (p.pod->deleting()) continue;
    if (kept_in_place && KeptInPlace(p)) {
      // Its program stops (the stop order of the next generation); the pod stays.
      plan_.annotate.push_back({p.pod->name, p.pod->uid, s.in_place->generation, std::nullopt,
                                std::nullopt, std::nullopt, std::nullopt, std::nullopt});
      continue;
    }
    // Pods on a lost node are force-deleted once this grace period is over (ForceIfLost).
    DeletePod(*p.pod, OnLostNode(*p.pod, grace), "the job is re-issued");
  }
}

// Slice recovery in place: a pod of the previous attempt (or, moved already, of this one) in a
// slice the attempt keeps, not being deleted: it stays, and its program restarts in place.
bool Decider::KeptInPlace(const ObservedPod& p) const {
  const JobStatus& s = plan_.status;
  if (!s.slice_recovery || !s.slice_recovery->in_place || !s.in_place || p.pod->deleting() ||
      (p.attempt != s.attempt && p.attempt != s.attempt - 1)) {
    return false;
  }
  if (p.type != ReplicaType::kWorker) return true;
  // An elastic job's slice whose id is past the slice count it runs on now: its pods go.
  if (p.index >= spec_->Replicas(ReplicaType::kWorker)) return false;
  const std::vector<int32_t>& replaced = s.slice_recovery->slices;
  return std::find(replaced.begin(), replaced.end(), spec_->SliceOf(p.index)) == replaced.end();
}

// A node of the previous attempt found unhealthy or lost while its re-issue is carried out (the
// attempt not admitted yet: its old pods going, or queued for pools, its kept nodes waiting).
// The rules of an admitted attempt see only its own pods, so without this such a fault would go
// unrecorded and uncordoned, and a kept worker of that node would be left to the scheduler next
// to its slice's bound workers. It is a fault like any other: recorded (in the previous
// attempt, as the re-issue's own; a node recorded there already is not again), cordoned, one
// retry used for what one plan finds. Its slice joins the replaced ones; the whole job is
// re-issued instead when a master is touched, no slice would be kept, or the job was re-issued
// whole already. The attempt then queues again with its new request: this plan admits nothing.
// Returns whether it decided something.
bool Decider::FaultsInFlight() {
  JobStatus& s = plan_.status;
  if (!in_.node_health || !s.reissued || s.attempt < 2) return false;
  const int32_t ended = s.attempt - 1;
  const int32_t workers = spec_->Replicas(ReplicaType::kWorker);
  std::optional<SliceRecovery>& recovery = s.slice_recovery;
  auto replaced = [&](int32_t slice) {
    return recovery && std::find(recovery->slices.begin(), recovery->slices.end(), slice) !=
                           recovery->slices.end();
  };
  auto known = [&](const std::string& node) {
    for (const FaultRecord& f : s.faults) {
      if (f.attempt >= ended && f.node == node) return true;
    }
    return std::find(in_.cordoned_nodes.begin(), in_.cordoned_nodes.end(), node) !=
           in_.cordoned_nodes.end();
  };
  // Where the ended attempt ran and the kept slices go back to: its pods (going, or kept in
  // place) and the nodes the recovery binds to. A replaced slice's nodes are the recovery's
  // business no longer.
  struct Found {
    std::string node;
    const ObservedPod* pod = nullptr;  // nullptr: a kept node whose pod is gone
    ReplicaType type = ReplicaType::kWorker;
    int32_t index = 0;
    NodeHealth health;
  };
  std::vector<Found> found;
  auto consider = [&](const std::string& node, const ObservedPod* pod, ReplicaType type,
                      int32_t index) {
    if (node.empty() || (type == ReplicaType::kWorker && replaced(spec_->SliceOf(index)))) return;
    for (const Found& f : found) {
      if (f.node == node) return;
    }
    if (known(node)) return;
    NodeHealth h = in_.node_health(node);
    if (h.verdict != NodeVerdict::kUnhealthy && h.verdict != NodeVerdict::kMissing) return;
    found.push_back({node, pod, type, index, std::move(h)});
  };
  for (const ObservedPod& p : in_.pods) {
    if (p.attempt != ended && !(p.attempt == s.attempt && KeptInPlace(p))) continue;
    if (p.pod->phase == cache::PodPhase::kSucceeded) continue;
    consider(std::string(p.pod->node_name.view()), &p, p.type, p.index);
  }
  if (recovery) {
    for (size_t i = 0; i < recovery->nodes.size() && i < static_cast<size_t>(workers); ++i) {
      consider(recovery->nodes[i], nullptr, ReplicaType::kWorker, static_cast<int32_t>(i));
    }
  }
  if (found.empty()) return false;

  // What the re-issue becomes: more slices replaced, or the whole job.
  std::vector<int32_t> slices = recovery ? recovery->slices : std::vector<int32_t>{};
  bool whole = !recovery;
  for (const Found& f : found) {
    if (f.type != ReplicaType::kWorker) {
      whole = true;
      continue;
    }
    const int32_t slice = spec_->SliceOf(f.index);
    if (std::find(slices.begin(), slices.end(), slice) == slices.end()) slices.push_back(slice);
  }
  std::sort(slices.begin(), slices.end());
  whole = whole || slices.size() >= static_cast<size_t>(spec_->ActiveSlices());
  const int32_t max_retries = spec_->fault_tolerance.max_job_retries;
  const bool exhausted = s.job_retries >= max_retries;  // node faults use a retry
  const FaultAction action = exhausted ? FaultAction::kFailJob
                             : whole   ? FaultAction::kReissueJob
                                       : FaultAction::kReplaceSlice;
  std::string nodes;
  for (const Found& f : found) {
    const FaultKind kind = f.health.unreachable || f.health.verdict == NodeVerdict::kMissing
                               ? FaultKind::kNodeLost
                               : FaultKind::kNodeUnhealthy;
    FaultRecord r;
    r.time = now_;
    r.attempt = ended;
    r.kind = FaultKindName(kind);
    r.node = f.node;
    if (f.pod != nullptr) r.pod = f.pod->pod->name;
    if (spec_->Multislice() && f.type == ReplicaType::kWorker) r.slice = spec_->SliceOf(f.index);
    r.reason = f.health.reason;
    r.message = BoundedMessage(f.health.message + " (while attempt " + std::to_string(ended) +
                               " was being re-issued)");
    r.action = FaultActionName(action);
    s.AddFault(std::move(r));
    if (spec_->fault_tolerance.cordon_faulty_nodes && f.health.verdict != NodeVerdict::kMissing) {
      Cordon({f.node, std::string(FaultKindName(kind)), f.health.message, "",
              job_.uid + "/" + std::to_string(ended) + "/" + f.health.reason});
    }
    nodes += (nodes.empty() ? "node " : ", node ") + f.node;
    if (r.slice) nodes += " (slice " + std::to_string(*r.slice) + ")";
  }
  const std::string why = nodes + " found " + (found.size() == 1 ? "faulty" : "faulty, each") +
                          " while attempt " + std::to_string(ended) + " was being re-issued";
  if (exhausted) {
    Finish(false, "RetriesExhausted",
           why + "; the job was already re-issued " + std::to_string(s.job_retries) +
               " times (maxJobRetries " + std::to_string(max_retries) + ")");
    return true;
  }
  s.job_retries++;
  const std::string retry =
      " (retry " + std::to_string(s.job_retries) + " of " + std::to_string(max_retries) + ")";
  const bool in_place = recovery && recovery->in_place;
  const bool recovery_was = recovery.has_value();
  if (whole) {
    s.slice_recovery.reset();
    s.node_pools.clear();
    if (in_place && s.in_place) s.in_place->barrier_since.reset();  // every pod is created again
    RecordEvent(true, "Reissued",
                why +
                    (recovery_was ? "; re-issuing the whole job as attempt " +
                                        std::to_string(s.attempt) + " instead"
                                  : "; the job is re-issued whole as attempt " +
                                        std::to_string(s.attempt) + " already") +
                    retry);
  } else {
    for (int32_t slice : slices) {
      if (static_cast<size_t>(slice) < s.node_pools.size()) {
        s.node_pools[static_cast<size_t>(slice)].clear();
      }
    }
    for (size_t i = 0; i < recovery->nodes.size(); ++i) {
      if (replaced(spec_->SliceOf(static_cast<int32_t>(i)))) continue;  // cleared already
      if (std::find(slices.begin(), slices.end(), spec_->SliceOf(static_cast<int32_t>(i))) !=
          slices.end()) {
        recovery->nodes[i].clear();
      }
    }
    recovery->slices = slices;
    RecordEvent(true, "Reissued",
                why + "; attempt " + std::to_string(s.attempt) + " replaces " + SliceList(slices) +
                    " now, " + KeptSlices() + " keep theirs" + retry);
  }
  // The pods no longer kept (kept in place until now) go; the ended attempt's went already.
  for (const ObservedPod& p : in_.pods) {
    if (p.pod->deleting() || (p.attempt != ended && p.attempt != s.attempt) || KeptInPlace(p)) {
      continue;
    }
    DeletePod(*p.pod, OnLostNode(*p.pod, std::nullopt), "the job is re-issued");
  }
  // Queued already: it queues again with the new request (WaitOrAdmit, next plan).
  if (s.phase == Phase::kQueued) s.phase = Phase::kRestarting;
  UpdateCounts();
  return true;
}

// The nodes the workers of `create` bound to a node are bound to: a worker of the same slice the
// scheduler places keeps off them. A bound pod skips the scheduler, which counts its chips only
// once it sees the pod: a worker it places at the same moment could land on the same host. (The
// slices' pools are distinct: another slice's bound nodes are out of its reach anyway.)
void Decider::AvoidBoundNodes(std::vector<PodToCreate>& create) const {
  std::map<int32_t, std::vector<std::string>> bound;  // by slice
  for (const PodToCreate& c : create) {
    if (c.type == ReplicaType::kWorker && c.bind && !c.node.empty()) {
      bound[spec_->SliceOf(c.index)].push_back(c.node);
    }
  }
  for (PodToCreate& c : create) {
    if (c.type != ReplicaType::kWorker || !c.node.empty()) continue;
    auto it = bound.find(spec_->SliceOf(c.index));
    if (it == bound.end()) continue;
    c.avoid = it->second;
    std::sort(c.avoid.begin(), c.avoid.end());
    c.avoid.erase(std::unique(c.avoid.begin(), c.avoid.end()), c.avoid.end());
  }
}

}  // namespace tpujob::policy
