#include "policy/slice_recovery.h"

#include <algorithm>

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
  for (int32_t slice = 0; slice < spec_->tpu.slices; ++slice) {
    if (std::find(replaced.begin(), replaced.end(), slice) == replaced.end()) {
      kept.push_back(slice);
    }
  }
  return SliceList(kept);
}

// The slice a fault is confined to, when slice recovery replaces that slice alone: every pod
// it touches is a worker of that one slice of a multislice job that holds a pool per slice.
std::optional<int32_t> ConfinedSlice(const JobSpec& spec, bool replace_slices, size_t node_pools,
                                     const std::vector<const ObservedPod*>& touched) {
  if (!spec.Multislice() || spec.fault_tolerance.recovery != Recovery::kSlice || !replace_slices ||
      touched.empty() || node_pools != static_cast<size_t>(spec.tpu.slices)) {
    return std::nullopt;
  }
  std::optional<int32_t> slice;
  for (const ObservedPod* p : touched) {
    if (p->type != ReplicaType::kWorker) return std::nullopt;
    const int32_t of = spec.SliceOf(p->index);
    if (slice && *slice != of) return std::nullopt;
    slice = of;
  }
  return slice;
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
// the job, or the one slice the fault is confined to, queues again as the next attempt, or the
// job fails when the fault uses a retry and none is left. The fault table says whether it uses
// a retry and the grace period of the pods it deletes.
void Decider::Reissue(const ObservedPod& culprit, const Termination& t, const std::string& why,
                      std::optional<FaultKind> kind, const std::string& item,
                      const std::vector<const ObservedPod*>& touched) {
  JobStatus& s = plan_.status;
  kind = kind.value_or(KindOfTermination(t));
  const bool counts = UsesRetry(*kind);
  const std::optional<int64_t> grace =
      Treatment(*kind).grace == FaultGrace::kMaintenance
          ? std::optional<int64_t>(spec_->fault_tolerance.maintenance_grace_period_seconds)
          : std::nullopt;
  const int32_t max_retries = spec_->fault_tolerance.max_job_retries;
  if (counts && s.job_retries >= max_retries) {
    RecordFault(culprit, t, FaultAction::kFailJob, item, kind);
    Finish(false, "RetriesExhausted",
           why + (max_retries == 0
                      ? "; re-issue is off (spec.faultTolerance.maxJobRetries or annotation " +
                            std::string(kJobRetryAnnotation) + ")"
                      : "; the job was already re-issued " + std::to_string(s.job_retries) +
                            " times (maxJobRetries " + std::to_string(max_retries) + ")"));
    UpdateCounts();
    return;
  }
  const std::optional<int32_t> slice =
      ConfinedSlice(*spec_, in_.replace_slices, s.node_pools.size(), touched);
  RecordFault(culprit, t, slice ? FaultAction::kReplaceSlice : FaultAction::kReissueJob, item,
              kind);
  if (counts) s.job_retries++;
  std::optional<SliceRecovery> recovery;
  if (slice) {
    // Where the kept slices' workers run now: their new pods are bound there again.
    recovery.emplace();
    recovery->slices = {*slice};
    const int32_t workers = spec_->Replicas(ReplicaType::kWorker);
    if (static_cast<size_t>(workers) <= kMaxRecoveryNodes) {
      recovery->nodes.resize(static_cast<size_t>(workers));
      bool any = false;
      for (const ObservedPod& p : in_.pods) {
        if (p.attempt != s.attempt || p.type != ReplicaType::kWorker || p.index < 0 ||
            p.index >= workers || spec_->SliceOf(p.index) == *slice || p.pod->node_name.empty()) {
          continue;
        }
        recovery->nodes[static_cast<size_t>(p.index)] = std::string(p.pod->node_name.view());
        any = true;
      }
      if (!any) recovery->nodes.clear();
    }
  }
  const bool kept_in_place =
      slice && s.in_place && spec_->fault_tolerance.restart == RestartMode::kInPlace;
  NextAttempt(/*reissued=*/true, "Reissued", why);
  if (kept_in_place) {
    recovery->nodes.clear();
    recovery->in_place = true;
    s.in_place->barrier_since = now_;  // the kept slices stop and wait for the replaced one
  }
  const std::string retry = counts ? " (retry " + std::to_string(s.job_retries) + " of " +
                                         std::to_string(max_retries) + ")"
                                   : " (a disruption: no retry used)";
  if (slice) {
    s.slice_recovery = std::move(recovery);
    s.node_pools[static_cast<size_t>(*slice)].clear();
    RecordEvent(true, "Reissued",
                why + "; replacing slice " + std::to_string(*slice) + " alone as attempt " +
                    std::to_string(s.attempt) + retry + ": it gets a new node pool, " +
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
                                std::nullopt, std::nullopt});
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
  const std::vector<int32_t>& replaced = s.slice_recovery->slices;
  return std::find(replaced.begin(), replaced.end(), spec_->SliceOf(p.index)) == replaced.end();
}

}  // namespace tpujob::policy
