// JobQueue: the queue of waiting TPUJobs (policy/queue.h has the rules) over the operator's
// caches. It keeps one admission plan for every waiting job, recomputed on a thread of its own
// whenever something that changes capacity or the queue happens (Invalidate(), called by the
// informers' event handlers); recomputations are coalesced over kCoalesce. After each
// recomputation the jobs whose answer changed (admitted now, another position, another message)
// are handed to `enqueue`, so a job is reconciled when the queue has news for it and only then:
// capacity freed by a finished job or an uncordoned node admits the next job within one
// recomputation plus one reconcile.
//
// The reconciler asks Admit() for a job in phase Queued and gets the latest plan's answer. A job
// the plan does not know yet (it has just been queued) waits for the next recomputation, which
// this call triggers.
//
// What a plan counts, from the caches:
//   - waiting: jobs whose status phase is Queued (or not set yet: a job just created waits from
//     its creation; or Restarting without admission: a re-issued attempt whose old pods are still
//     going away already holds its place), with their spec's priority, or the value of the
//     PriorityClass their spec names (read from the API server once and kept for five minutes;
//     a class that cannot be read counts as spec.priority, with a warning);
//   - reserved: admitted attempts (phase Starting, Running or Restarting with Admitted=True)
//     whose workers are not all bound to nodes yet hold their chips in their node pool; a
//     waiting attempt that replaces some slices of a multislice job (status.sliceRecovery)
//     holds the whole of the pools its other slices keep, and asks only for the replaced ones;
//   - free: policy::BuildCapacity over every node and the operator's pods. Pods of other
//     workloads are not cached; on nodes shared with them the scheduler has the last word, and a
//     gang that then cannot be scheduled releases its admission (policy/lifecycle.h).
//
// Preemption (policy/preemption.h). When the head of a class waits for capacity, the plan also
// considers the capacity once the pods already going are gone and the jobs running in Starting or
// Running phase with every worker bound and none going; the victims it picks are handed to
// `enqueue` and told by Preemption() (the reconciler then stops them), and the head's answer has
// reason "Preempting". A victim stops being one once its status shows it preempted, and its pods
// going count as free for the head from then on, so one head takes one set of victims. The plan
// that then admits the head says what it preempted in the answer's message ("after preempting
// team/low (priority 1) in node pool p"), which goes into its Admitted condition.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "base/clock.h"
#include "cache/objects.h"
#include "cache/store.h"
#include "controller/priority_classes.h"
#include "controller/tpujob_reconciler.h"
#include "kube/client.h"
#include "policy/job_spec.h"
#include "policy/job_status.h"
#include "policy/lifecycle.h"
#include "policy/node_health.h"
#include "policy/queue.h"

namespace tpujob::controller {

class JobQueue {
 public:
  static constexpr Duration kCoalesce = std::chrono::milliseconds(20);

  JobQueue(kube::Client& client, const cache::Store<cache::TPUJobInfo>& jobs,
           const cache::Store<cache::PodInfo>& pods, const cache::Store<cache::NodeInfo>& nodes,
           policy::NodeHealthConfig health, Clock& clock = Clock::Real());
  ~JobQueue();

  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // Starts the recomputation thread; `enqueue` receives job keys ("namespace/name").
  void Start(std::function<void(const std::string&)> enqueue);
  void Stop();

  // Something that may change capacity or the queue happened.
  void Invalidate();

  // The answer for a waiting job (the plan already holds its spec and status). Thread-safe.
  AdmissionDecision Admit(const cache::TPUJobInfo& job);

  // Whether the admitted job is to be preempted (the latest plan's answer). Thread-safe.
  std::optional<policy::PreemptOrder> Preemption(const cache::TPUJobInfo& job);

  // Gang preemption (policy/preemption.h); on unless turned off before Start().
  void set_preemption(bool on) { preemption_ = on; }

  // Jobs admitted by someone else (Kueue, for jobs naming a LocalQueue): they never wait in this
  // queue and are never its preemption victims, but the capacity their admitted pods hold
  // counts. Set before Start().
  void set_external(std::function<bool(const cache::TPUJobInfo&)> external) {
    external_ = std::move(external);
  }

  // Computes a plan from the caches now (what the thread does), for tests and benchmarks.
  // `changes_in`: when the capacity changes by itself (a node entering its maintenance avoid
  // window), so the plan is made again then. `preemptions`: on entry, the orders of the last
  // plan (empty for a first plan); on return, the admitted jobs to preempt, with the job each is
  // preempted for (an order stands until the victim's status shows it carried out, or its
  // preemptor no longer waits); a job it preempts for shows reason "Preempting".
  std::map<std::string, policy::Admission> ComputePlan(
      std::optional<Duration>* changes_in = nullptr,
      std::map<std::string, policy::PreemptOrder>* preemptions = nullptr);

  // Recomputations so far.
  uint64_t recomputations() const { return recomputations_.load(); }

 private:
  struct PriorityInfo {
    int32_t value = 0;
    bool may_preempt = true;  // the PriorityClass's preemptionPolicy is not Never
  };
  PriorityInfo Priority(const policy::JobSpec& spec);
  void Loop();

  kube::Client& client_;
  const cache::Store<cache::TPUJobInfo>& jobs_;
  const cache::Store<cache::PodInfo>& pods_;
  const cache::Store<cache::NodeInfo>& nodes_;
  const policy::NodeHealthConfig health_;
  Clock& clock_;

  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool dirty_ = true;
  bool stop_ = false;
  std::map<std::string, policy::Admission> plan_;
  std::map<std::string, policy::PreemptOrder> preempt_;  // victim -> order
  std::function<void(const std::string&)> enqueue_;
  std::thread thread_;

  PriorityClasses priority_classes_;

  std::function<bool(const cache::TPUJobInfo&)> external_;  // set before Start()
  std::atomic<bool> preemption_{true};
  std::atomic<uint64_t> recomputations_{0};
  // Waiting jobs with a preemption ordered (taking_) or carried out (won_), and what it takes
  // (policy::Preemption::taken): the plan that admits one of won_ says so in its message.
  // Only ComputePlan() touches them (one caller at a time).
  std::map<std::string, std::string> taking_;
  std::map<std::string, std::string> won_;
};

}  // namespace tpujob::controller
