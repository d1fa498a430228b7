#include "policy/in_place.h"

#include <algorithm>
#include <iterator>

#include "policy/decider.h"

namespace tpujob::policy {

// In-place restart: the pods are all created again, with the next program generation, so the
// program can tell this start from the last; an in-place restart under way is over.
void Decider::NewGeneration() {
  std::optional<InPlaceStatus>& p = plan_.status.in_place;
  if (!p) return;
  p->generation++;
  p->barrier_since.reset();
}

// The grace period a stop order gives a program: the workers' terminationGracePeriodSeconds,
// which the template may set, else faultTolerance.maintenanceGracePeriodSeconds (BuildPod).
int64_t ProgramGraceSeconds(const JobSpec& spec) {
  const ReplicaSpec* worker = spec.Replica(ReplicaType::kWorker);
  if (worker != nullptr && worker->template_.is_object()) {
    const Json pod = worker->template_.value("spec", Json::object());
    if (auto it = pod.find("terminationGracePeriodSeconds");
        it != pod.end() && it->is_number_integer()) {
      return it->get<int64_t>();
    }
  }
  return spec.fault_tolerance.maintenance_grace_period_seconds;
}

// In-place restart: tells every pod the generation to run (a pod running an older one stops
// it), opens the barrier once every pod waits there, and falls back to recreating the pods when
// it stays closed for barrierTimeoutSeconds. True when it falls back: the plan is complete.
bool Decider::InPlaceBarrier(const CurrentPods& current) {
  JobStatus& s = plan_.status;
  InPlaceStatus& p = *s.in_place;
  const int32_t g = p.generation;
  int total = 0, waiting = 0;
  bool all_there = true;
  for (ReplicaType type : {ReplicaType::kMaster, ReplicaType::kWorker}) {
    for (int32_t i = 0; i < spec_->Replicas(type); ++i) {
      ++total;
      auto it = current.find({type, i});
      if (it == current.end() || it->second->pod->deleting()) {
        all_there = false;
        continue;
      }
      const ProgramObservation o = ObserveProgram(*it->second->pod);
      if (o.at_barrier && o.last_generation < g) ++waiting;
    }
  }
  if (p.barrier_since) {
    const auto waited = now_ - *p.barrier_since;
    // Counted once the programs had their grace period to stop.
    const int64_t grace = ProgramGraceSeconds(*spec_);
    const auto timeout =
        std::chrono::seconds(spec_->fault_tolerance.barrier_timeout_seconds + grace);
    if (all_there && waiting == total) {
      p.barrier_since.reset();
      RecordEvent(false, "BarrierOpened",
                  "all " + std::to_string(total) + " pods stopped generation " +
                      std::to_string(g - 1) + " and wait at the barrier; generation " +
                      std::to_string(g) + " starts");
    } else if (waited >= timeout) {
      p.barrier_since.reset();
      const std::string why = std::to_string(waiting) + " of " + std::to_string(total) +
                              " pods reached the barrier of generation " + std::to_string(g) +
                              " within " +
                              std::to_string(spec_->fault_tolerance.barrier_timeout_seconds) +
                              "s (spec.faultTolerance.barrierTimeoutSeconds) after the " +
                              std::to_string(grace) + "s grace period of their programs";
      RecordEvent(true, "BarrierTimeout", why + "; falling back to recreating the pods");
      for (const auto& [id, pod] : current) {
        if (!pod->pod->deleting()) {
          DeletePod(*pod->pod, std::nullopt,
                    "the barrier of generation " + std::to_string(g) + " timed out");
        }
      }
      s.SetCondition(condition::kReady, false, "BarrierTimeout", why + "; recreating the pods",
                     now_, spec_generation_);
      return true;
    } else {
      Requeue(std::chrono::duration_cast<Duration>(timeout - waited));
      s.SetCondition(condition::kReady, false, "BarrierClosed",
                     std::to_string(waiting) + " of " + std::to_string(total) +
                         " pods wait at the barrier of generation " + std::to_string(g),
                     now_, spec_generation_);
    }
  }
  const bool open = !p.barrier_since;
  for (const auto& [id, pod] : current) {
    const cache::PodInfo& info = *pod->pod;
    if (info.deleting()) continue;
    if (info.ordered_generation < g || (open && info.barrier_generation < g)) {
      // One patch a pod: a relabel of this plan (an elastic shrink in place) gets these too.
      auto a = plan_.annotate.end();
      if (relabeled_.contains(info.uid)) {
        a = std::find_if(plan_.annotate.begin(), plan_.annotate.end(),
                         [&](const PodToAnnotate& x) { return x.uid == info.uid; });
      }
      if (a == plan_.annotate.end()) {
        plan_.annotate.push_back({info.name, info.uid, g, std::nullopt, std::nullopt, std::nullopt,
                                  std::nullopt, std::nullopt});
        a = std::prev(plan_.annotate.end());
      }
      a->generation = g;
      if (open) a->barrier = g;
      // An elastic job's slice count may have changed since the pod was made: the generation
      // that starts gets the variables of now (policy/elastic.h).
      if (open && spec_->Elastic()) a->program_env = id;
    }
  }
  return false;
}

}  // namespace tpujob::policy
