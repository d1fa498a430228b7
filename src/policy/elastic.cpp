#include "policy/elastic.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "policy/decider.h"

namespace tpujob::policy {

int32_t ActiveSlicesOf(const JobSpec& spec, const JobStatus& status) {
  if (!spec.Elastic() || !status.tpu) return spec.tpu.slices;
  const int32_t active = status.tpu->active_slices;
  return active >= 1 && active < spec.tpu.slices ? active : spec.tpu.slices;
}

JobSpec WithActiveSlices(const JobSpec& spec, int32_t active) {
  JobSpec out = spec;
  out.tpu.active_slices = active < spec.tpu.slices ? active : 0;
  return out;
}

std::vector<int32_t> SliceSlotsOf(const JobSpec& spec, const JobStatus& status) {
  if (!spec.Elastic() || !status.tpu ||
      status.tpu->slice_slots.size() != static_cast<size_t>(ActiveSlicesOf(spec, status))) {
    return {};
  }
  return status.tpu->slice_slots;
}

std::optional<JobSpec> DegradedSpec(const JobSpec& spec, const JobStatus& status) {
  const int32_t active = ActiveSlicesOf(spec, status);
  std::vector<int32_t> slots = SliceSlotsOf(spec, status);
  if (active >= spec.tpu.slices && slots.empty()) return std::nullopt;
  JobSpec out = WithActiveSlices(spec, active);
  out.tpu.slots = std::move(slots);
  return out;
}

namespace {

// status.tpu.sliceSlots as written: empty when every slice id's pods carry their own number.
std::vector<int32_t> UnlessOwnNumbers(std::vector<int32_t> slots) {
  for (size_t id = 0; id < slots.size(); ++id) {
    if (slots[id] != static_cast<int32_t>(id)) return slots;
  }
  return {};
}

}  // namespace

std::string SlicesSummary(int32_t active, int32_t slices) {
  return std::to_string(active) + "/" + std::to_string(slices);
}

// The attempt runs on `active` slices from now on: the spec this plan decides with, and
// status.tpu, say so.
void Decider::SetActiveSlices(int32_t active) {
  JobStatus& s = plan_.status;
  const JobSpec& declared = **in_.spec;
  if (active < declared.tpu.slices) {
    active_spec_ = WithActiveSlices(declared, active);
    spec_ = &*active_spec_;
  } else {
    active_spec_.reset();
    spec_ = &declared;
  }
  if (s.tpu) {
    s.tpu->active_slices = spec_->ActiveSlices();
    s.tpu->slices_summary = SlicesSummary(spec_->ActiveSlices(), declared.tpu.slices);
  }
}

// When a slice waiting for a pool gives up its place and the job runs on the others: queuedAt
// has whole seconds, so counted from the end of its second (never early).
std::optional<WallTime> Decider::ShrinkDue() const {
  const JobStatus& s = plan_.status;
  if (!spec_->Elastic() || !s.slice_recovery || s.slice_recovery->slices.empty() || !s.queued_at) {
    return std::nullopt;
  }
  const int32_t left =
      spec_->ActiveSlices() - static_cast<int32_t>(s.slice_recovery->slices.size());
  if (left < spec_->tpu.min_slices) return std::nullopt;
  return *s.queued_at + std::chrono::seconds(1 + spec_->fault_tolerance.elastic.wait_seconds);
}

// What the not-admitted message of a slice waiting for a pool adds for an elastic job: when it
// gives up, or why it cannot.
// A degraded job's Degraded condition says what it waits for too.
std::string Decider::ElasticWaitNote() {
  JobStatus& s = plan_.status;
  if (!spec_->Elastic() || !s.slice_recovery || s.slice_recovery->slices.empty()) return "";
  const std::vector<int32_t>& lost = s.slice_recovery->slices;
  const int32_t left = spec_->ActiveSlices() - static_cast<int32_t>(lost.size());
  std::string note;
  if (const std::optional<WallTime> due = ShrinkDue()) {
    note = "; without one by " + cache::FormatRfc3339(*due) + " the job runs on the other " +
           std::to_string(left) + (left == 1 ? " slice" : " slices") + " (elastic waitSeconds " +
           std::to_string(spec_->fault_tolerance.elastic.wait_seconds) + ")";
  } else {
    note = "; the job cannot run on " + std::to_string(left) + (left == 1 ? " slice" : " slices") +
           " (minSlices " + std::to_string(spec_->tpu.min_slices) + "), so it waits";
  }
  if (s.ConditionTrue(condition::kDegraded)) {
    s.SetCondition(
        condition::kDegraded, true, "RunningOnFewerSlices",
        "attempt " + std::to_string(s.attempt) + " on " + std::to_string(spec_->ActiveSlices()) +
            " of " + std::to_string((*in_.spec)->tpu.slices) + " slices waits: " + SliceList(lost) +
            (lost.size() == 1 ? " lost its node pool" : " lost their node pools") + note,
        now_, spec_generation_);
  }
  return note;
}

// Step 1 of policy/elastic.h: the slices waiting for a pool are given up once waitSeconds have
// passed, and the attempt is admitted on the slices that hold theirs, renumbered in their order.
// Returns what happened, for the Admitted condition ("" = nothing: not due, or not elastic).
std::string Decider::Shrink() {
  JobStatus& s = plan_.status;
  const std::optional<WallTime> due = ShrinkDue();
  if (!due) return "";
  if (now_ < *due) {
    Requeue(std::chrono::duration_cast<Duration>(*due - now_));
    return "";
  }
  // Only on the queue's own word that no pool is free: not before it answered the request (a
  // grow's pools, free a moment ago, would be given up unasked), nor while it preempts for it (a
  // pool is on its way).
  if (in_.not_admitted_reason != "WaitingForCapacity" &&
      in_.not_admitted_reason != "WaitingInLine") {
    return "";
  }
  SliceRecovery& recovery = *s.slice_recovery;
  const std::vector<int32_t> lost = recovery.slices;
  const int32_t active = spec_->ActiveSlices();
  const int32_t hosts = spec_->HostsPerSlice();
  const auto is_lost = [&](int32_t slice) {
    return std::find(lost.begin(), lost.end(), slice) != lost.end();
  };
  int32_t left = 0;
  for (int32_t slice = 0; slice < active; ++slice) left += is_lost(slice) ? 0 : 1;
  // The slices from now on (new id -> the slice it was): a kept slice below `left` keeps its id,
  // the kept slices from `left` on fill the ids the lost ones leave, in order. As few slices as
  // can be change their id: under restart InPlace the pods of the others stay.
  std::vector<int32_t> order(static_cast<size_t>(left), -1);
  std::vector<int32_t> holes;
  for (int32_t slice = 0; slice < left; ++slice) {
    if (is_lost(slice)) {
      holes.push_back(slice);
    } else {
      order[static_cast<size_t>(slice)] = slice;
    }
  }
  size_t next_hole = 0;
  for (int32_t slice = left; slice < active; ++slice) {
    if (!is_lost(slice)) order[static_cast<size_t>(holes[next_hole++])] = slice;
  }
  std::vector<std::string> pools, nodes;
  std::string renumbered;  // "slice 3 runs as slice 1"
  for (int32_t id = 0; id < left; ++id) {
    const int32_t slice = order[static_cast<size_t>(id)];
    const size_t at = static_cast<size_t>(slice);
    pools.push_back(at < s.node_pools.size() ? s.node_pools[at] : "");
    if (slice != id) {
      renumbered += std::string(renumbered.empty() ? "" : ", ") + "slice " + std::to_string(slice) +
                    " runs as slice " + std::to_string(id);
    }
    if (recovery.nodes.empty()) continue;
    for (int32_t h = 0; h < hosts; ++h) {
      const size_t i = static_cast<size_t>(slice * hosts + h);
      nodes.push_back(i < recovery.nodes.size() ? recovery.nodes[i] : "");
    }
  }
  const int32_t declared = (*in_.spec)->tpu.slices;
  s.node_pools = std::move(pools);
  recovery.slices.clear();
  recovery.nodes = std::move(nodes);
  // In place the kept slices' pods stay (policy/slice_recovery.h): the recovery keeps them
  // until the attempt runs. A slice that takes another id keeps its pods too, and their names:
  // their index labels follow the new id, and status.tpu.sliceSlots says which names each id's
  // pods carry.
  if (recovery.in_place) {
    const std::vector<int32_t> old_slots = s.tpu ? s.tpu->slice_slots : std::vector<int32_t>();
    std::vector<int32_t> slots;
    std::map<int32_t, int32_t> new_id;  // the slices that take another id
    for (int32_t id = 0; id < left; ++id) {
      const int32_t slice = order[static_cast<size_t>(id)];
      slots.push_back(static_cast<size_t>(slice) < old_slots.size()
                          ? old_slots[static_cast<size_t>(slice)]
                          : slice);
      if (slice != id) new_id[slice] = id;
    }
    if (s.tpu) s.tpu->slice_slots = UnlessOwnNumbers(std::move(slots));
    for (const ObservedPod& p : in_.pods) {
      if (p.type != ReplicaType::kWorker || p.pod->deleting()) continue;
      auto it = new_id.find(spec_->SliceOf(p.index));
      if (it != new_id.end()) Relabel(p, it->second * hosts + spec_->HostOf(p.index));
    }
  } else if (recovery.nodes.empty()) {
    s.slice_recovery.reset();
  }
  SetActiveSlices(left);
  if (!s.elastic) s.elastic.emplace();
  s.elastic->degraded_since = now_;
  s.elastic->scale_up_offered_at.reset();
  s.elastic->checkpoint_at_offer.reset();
  const std::string what = "running on " + std::to_string(left) + " of " +
                           std::to_string(declared) + " slices: " + SliceList(lost) +
                           (lost.size() == 1 ? " found no node pool" : " found no node pools") +
                           " within " +
                           std::to_string(spec_->fault_tolerance.elastic.wait_seconds) + "s";
  const std::string waits =
      spec_->fault_tolerance.elastic.scale_up == ScaleUp::kNever
          ? "; it stays on " + std::to_string(left) + " slices (scaleUp Never)"
          : "; it grows back to " + std::to_string(declared) + " when " +
                (lost.size() == 1 ? "a node pool is" : "node pools are") + " free (scaleUp " +
                std::string(ToString(spec_->fault_tolerance.elastic.scale_up)) + ")";
  s.SetCondition(condition::kDegraded, true, "RunningOnFewerSlices", what + waits, now_,
                 spec_generation_);
  RecordEvent(true, "RunningOnFewerSlices",
              "attempt " + std::to_string(s.attempt) + " " + what +
                  (renumbered.empty() ? "" : " (" + renumbered + ")") +
                  "; every program restarts with MEGASCALE_NUM_SLICES=" + std::to_string(left));
  return "on " + std::to_string(left) + " of " + std::to_string(declared) + " slices, " +
         SliceList(lost) + " given up after waiting " +
         std::to_string(spec_->fault_tolerance.elastic.wait_seconds) + "s for a node pool" +
         (renumbered.empty() ? "" : " (" + renumbered + ")");
}

// Elastic slices in place: a kept worker's pod takes worker index `index` (its slice another id)
// in this attempt; the plan's annotation of the pod (a move to this attempt, if any) says so.
void Decider::Relabel(const ObservedPod& p, int32_t index) {
  JobStatus& s = plan_.status;
  relabeled_[p.pod->uid] = index;
  for (PodToAnnotate& a : plan_.annotate) {
    if (a.uid != p.pod->uid) continue;
    a.index = index;
    a.attempt = s.attempt;
    return;
  }
  plan_.annotate.push_back({p.pod->name, p.pod->uid, s.in_place ? s.in_place->generation : 0,
                            std::nullopt, s.attempt, std::nullopt, std::nullopt, index});
}

// The worker index a pod of this attempt has from now on: the one this plan relabels it with,
// else its label's.
int32_t Decider::IndexNow(const ObservedPod& p) const {
  auto it = relabeled_.find(p.pod->uid);
  return it == relabeled_.end() ? p.index : it->second;
}

// Step 3 of policy/elastic.h: a degraded job that runs grows back to all its slices when the
// queue has pools for the missing ones (and, for AfterCheckpoint, once a checkpoint line came
// after they were first free). Returns whether it decided to grow (the plan is then complete).
bool Decider::Grow(const CurrentPods& current) {
  JobStatus& s = plan_.status;
  const JobSpec& declared = **in_.spec;
  const int32_t active = spec_->ActiveSlices();
  const ScaleUp scale_up = declared.fault_tolerance.elastic.scale_up;
  if (!declared.Elastic() || active >= declared.tpu.slices || scale_up == ScaleUp::kNever) {
    return false;
  }
  const int32_t missing = declared.tpu.slices - active;
  if (in_.grow_pools.empty() || in_.grow_pools.size() > static_cast<size_t>(missing) ||
      std::any_of(in_.grow_pools.begin(), in_.grow_pools.end(),
                  [](const std::string& pool) { return pool.empty(); })) {
    if (s.elastic) {
      s.elastic->scale_up_offered_at.reset();
      s.elastic->checkpoint_at_offer.reset();
    }
    // What the queue says of the missing slices' pools, for whoever wonders why it stays small.
    if (!in_.grow_message.empty() && s.ConditionTrue(condition::kDegraded)) {
      s.SetCondition(condition::kDegraded, true, "RunningOnFewerSlices",
                     "running on " + std::to_string(active) + " of " +
                         std::to_string(declared.tpu.slices) + " slices; to grow back it " +
                         in_.grow_message + " (scaleUp " + std::string(ToString(scale_up)) + ")",
                     now_, spec_generation_);
    }
    return false;
  }
  if (!s.elastic) s.elastic.emplace();
  const std::optional<int64_t> checkpoint =
      s.progress ? s.progress->checkpoint_step : std::optional<int64_t>();
  if (scale_up == ScaleUp::kAfterCheckpoint) {
    if (!s.elastic->scale_up_offered_at) {
      s.elastic->scale_up_offered_at = now_;
      s.elastic->checkpoint_at_offer = checkpoint;
      RecordEvent(false, "ScaleUpWaiting",
                  std::string(in_.grow_pools.size() == 1 ? "a node pool is" : "node pools are") +
                      " free to grow to " +
                      std::to_string(active + static_cast<int32_t>(in_.grow_pools.size())) +
                      " of " + std::to_string(declared.tpu.slices) +
                      " slices; waiting for the program's next checkpoint line (scaleUp "
                      "AfterCheckpoint)");
      return false;
    }
    if (!checkpoint ||
        (s.elastic->checkpoint_at_offer && *checkpoint <= *s.elastic->checkpoint_at_offer)) {
      return false;
    }
  }
  // As many slices as the queue has pools for: all the missing ones, or some of them.
  const int32_t grown = active + static_cast<int32_t>(in_.grow_pools.size());
  // Where the running workers are: bound there again in the grown attempt.
  const int32_t hosts = spec_->HostsPerSlice();
  const int32_t workers = declared.worker.replicas * grown;
  // Restart InPlace: the running pods stay and their programs restart with the grown count
  // once the added slices' pods wait at the barrier too, as in slice recovery.
  const bool in_place = declared.fault_tolerance.restart == RestartMode::kInPlace && s.in_place;
  SliceRecovery recovery;
  for (int32_t slice = active; slice < grown; ++slice) recovery.slices.push_back(slice);
  if (!in_place && static_cast<size_t>(workers) <= kMaxRecoveryNodes) {
    recovery.nodes.resize(static_cast<size_t>(workers));
    bool any = false;
    for (const auto& [id, p] : current) {
      if (id.first != ReplicaType::kWorker || p->pod->node_name.empty() || id.second < 0 ||
          id.second >= active * hosts) {
        continue;
      }
      recovery.nodes[static_cast<size_t>(id.second)] = std::string(p->pod->node_name.view());
      any = true;
    }
    if (!any) recovery.nodes.clear();
  }
  std::vector<std::string> pools = s.node_pools;
  const bool whole = grown == declared.tpu.slices;
  // In place, the added slices' pods take the names no slice of the job carries now.
  if (in_place && s.tpu && !s.tpu->slice_slots.empty()) {
    std::vector<int32_t>& slots = s.tpu->slice_slots;
    std::vector<bool> used(static_cast<size_t>(declared.tpu.slices), false);
    for (int32_t slot : slots) {
      if (slot >= 0 && slot < declared.tpu.slices) used[static_cast<size_t>(slot)] = true;
    }
    for (int32_t slot = 0; slot < declared.tpu.slices && static_cast<int32_t>(slots.size()) < grown;
         ++slot) {
      if (!used[static_cast<size_t>(slot)]) slots.push_back(slot);
    }
    slots = UnlessOwnNumbers(std::move(slots));
  }
  const std::string why =
      (whole ? "growing back from " + std::to_string(active) + " to " +
                   std::to_string(declared.tpu.slices) + " slices"
             : "growing from " + std::to_string(active) + " to " + std::to_string(grown) + " of " +
                   std::to_string(declared.tpu.slices) + " slices") +
      (scale_up == ScaleUp::kAfterCheckpoint && checkpoint
           ? " after the checkpoint of step " + std::to_string(*checkpoint)
           : "");
  NextAttempt(/*reissued=*/true, "ScalingUp", why);
  pools.resize(static_cast<size_t>(grown));
  s.node_pools = std::move(pools);
  if (in_place) {
    recovery.in_place = true;
    s.in_place->barrier_since = now_;  // the running slices stop and wait for the added ones
  }
  s.slice_recovery = std::move(recovery);
  SetActiveSlices(grown);
  if (whole) {
    s.elastic.reset();
    s.SetCondition(condition::kDegraded, false, "ScalingUp",
                   why + " as attempt " + std::to_string(s.attempt), now_, spec_generation_);
  } else {
    s.elastic->scale_up_offered_at.reset();
    s.elastic->checkpoint_at_offer.reset();
    s.SetCondition(condition::kDegraded, true, "RunningOnFewerSlices",
                   why + " as attempt " + std::to_string(s.attempt) + "; the other " +
                       std::to_string(declared.tpu.slices - grown) + " when free",
                   now_, spec_generation_);
  }
  RecordEvent(false, "ScalingUp",
              why + " as attempt " + std::to_string(s.attempt) +
                  " (no retry used): " + SliceList(s.slice_recovery->slices) +
                  (s.slice_recovery->slices.size() == 1 ? " takes a free node pool"
                                                        : " take free node pools") +
                  ", every program restarts with MEGASCALE_NUM_SLICES=" + std::to_string(grown) +
                  (in_place ? ", in the pods it runs in" : ""));
  // The programs stop as for maintenance, with time to save a checkpoint: in place, told by
  // the next generation (their grace period, ProgramGraceSeconds).
  const int64_t grace = declared.fault_tolerance.maintenance_grace_period_seconds;
  for (const ObservedPod& p : in_.pods) {
    if (p.pod->deleting()) continue;
    if (in_place && KeptInPlace(p)) {
      plan_.annotate.push_back({p.pod->name, p.pod->uid, s.in_place->generation, std::nullopt,
                                std::nullopt, std::nullopt, std::nullopt, std::nullopt});
      continue;
    }
    DeletePod(*p.pod, OnLostNode(*p.pod, grace), "the job grows to more slices");
  }
  return true;
}

}  // namespace tpujob::policy
