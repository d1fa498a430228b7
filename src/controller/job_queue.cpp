#include "controller/job_queue.h"

#include <algorithm>
#include <set>
#include <vector>

#include "base/logging.h"
#include "controller/children.h"
#include "policy/elastic.h"
#include "policy/preemption.h"

namespace tpujob::controller {
namespace {

bool SameAnswer(const policy::Admission& a, const policy::Admission& b) {
  return a.admit == b.admit && a.pools == b.pools && a.reason == b.reason &&
         a.message == b.message && a.position == b.position;
}

}  // namespace

JobQueue::JobQueue(kube::Client& client, const cache::Store<cache::TPUJobInfo>& jobs,
                   const cache::Store<cache::PodInfo>& pods,
                   const cache::Store<cache::NodeInfo>& nodes, policy::NodeHealthConfig health,
                   Clock& clock)
    : client_(client),
      jobs_(jobs),
      pods_(pods),
      nodes_(nodes),
      health_(std::move(health)),
      clock_(clock),
      priority_classes_(client, clock) {}

JobQueue::~JobQueue() { Stop(); }

void JobQueue::Start(std::function<void(const std::string&)> enqueue) {
  std::lock_guard<std::mutex> lock(mu_);
  enqueue_ = std::move(enqueue);
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void JobQueue::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void JobQueue::Invalidate() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    dirty_ = true;
  }
  cv_.notify_all();
}

std::optional<policy::PreemptOrder> JobQueue::Preemption(const cache::TPUJobInfo& job) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = preempt_.find(job.Key());
  if (it == preempt_.end()) return std::nullopt;
  return it->second;
}

AdmissionDecision JobQueue::Admit(const cache::TPUJobInfo& job) {
  const std::string key = job.Key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = plan_.find(key);
    if (it != plan_.end()) {
      const policy::Admission& a = it->second;
      AdmissionDecision d;
      d.admit = a.admit;
      d.reason = a.admit ? "Admitted" : a.reason;
      d.message = a.message;
      d.pools = a.pools;
      if (!a.admit) d.position = a.position;
      return d;
    }
    dirty_ = true;
  }
  cv_.notify_all();
  AdmissionDecision d;
  d.admit = false;
  d.reason = "Queued";
  d.message = "waiting for the queue to place the job";
  return d;
}

JobQueue::PriorityInfo JobQueue::Priority(const policy::JobSpec& spec) {
  const PriorityClasses::Priority p = priority_classes_.Of(spec);
  return {p.value, p.may_preempt};
}

std::map<std::string, policy::Admission> JobQueue::ComputePlan(
    std::optional<Duration>* changes_in, std::map<std::string, policy::PreemptOrder>* preemptions) {
  std::vector<policy::GangRequest> queued;
  std::vector<policy::Reservation> reservations;
  std::map<std::string, policy::PreemptorInfo> preemptors;
  // Orders given by earlier plans and not carried out yet (the victim's status does not show it
  // preempted): they stand while their preemptor still waits, their victims' pods count as
  // going, and nobody else is chosen in their place.
  std::map<std::string, policy::PreemptOrder> issued;
  if (preemptions != nullptr) issued.swap(*preemptions);
  // Admitted jobs: their current attempt, and what preemption needs to know of them.
  struct Admitted {
    int32_t attempt = 0;
    int32_t workers = 0;
    bool candidate = false;  // Starting or Running: may be preempted
    bool ordered = false;    // an earlier plan's victim, not stopped yet
    policy::RunningGang gang;
  };
  std::set<std::string> waiting_jobs;
  std::set<std::string> restarting;  // waiting: a re-issued attempt whose old pods are going
  std::map<std::string, Admitted> admitted_jobs;
  for (const auto& job : jobs_.List()) {
    if (job->deleting() || !policy::ManagedByUs(*job)) continue;
    const policy::JobStatus status = policy::JobStatus::FromJson(job->status);
    // A job not yet marked Queued (just created) waits too, from its creation: otherwise jobs
    // created together would be admitted in the order their first reconciles happen to run.
    // A re-issued attempt waiting for its old pods to go (Restarting, not admitted) holds its
    // place at the head already: the capacity those pods free must not go to a job behind it.
    const bool holds_admission = status.ConditionTrue(policy::condition::kAdmitted);
    const bool waiting = status.phase == policy::Phase::kQueued ||
                         status.phase == policy::Phase::kNone ||
                         (status.phase == policy::Phase::kRestarting && !holds_admission);
    const bool admitted = holds_admission && (status.phase == policy::Phase::kStarting ||
                                              status.phase == policy::Phase::kRunning ||
                                              status.phase == policy::Phase::kRestarting);
    if (!waiting && !admitted) continue;
    // A job another admitter (Kueue) admits never waits here, and is never preempted from
    // here; once admitted, its pods hold capacity like any other.
    const bool external = external_ && external_(*job);
    if (external && !admitted) continue;
    const std::string key = job->Key();
    // An admitted job keeps its pods even when its spec has become invalid.
    if (admitted) admitted_jobs[key].attempt = status.attempt;
    const auto declared = policy::ParseJobSpec(*job);
    if (!declared) continue;
    if (declared->suspend && waiting) continue;  // out of the queue until resumed
    // An elastic job that shrank asks for, and holds, the slices it runs on (policy/elastic.h).
    const std::optional<policy::JobSpec> degraded = policy::DegradedSpec(*declared, status);
    const policy::JobSpec* spec = degraded ? &*degraded : &*declared;
    // What every request of this job asks for: slices of its shape.
    auto request = [&] {
      policy::GangRequest r;
      r.job = key;
      r.accelerator = spec->tpu.accelerator;
      r.topology = spec->tpu.topology;
      r.workers = spec->worker.replicas;
      r.chips_per_worker = spec->tpu.chips_per_worker;
      return r;
    };
    if (waiting) {
      const PriorityInfo priority = Priority(*spec);
      waiting_jobs.insert(key);
      if (status.phase == policy::Phase::kRestarting) restarting.insert(key);
      policy::GangRequest r = request();
      r.slices = spec->ActiveSlices();
      r.reissued = status.reissued;
      r.priority = priority.value;
      r.queued_at = status.queued_at.value_or(job->creation_timestamp.value_or(WallTime{}));
      if (status.slice_recovery && !status.slice_recovery->slices.empty() && spec->Multislice()) {
        // Slice recovery: a pool for each replaced slice only; the pools the other slices keep
        // stay reserved for the job and are never offered to it twice.
        r.slice_ids = status.slice_recovery->slices;
        r.slices = static_cast<int32_t>(r.slice_ids.size());
        for (int32_t slice = 0; slice < spec->ActiveSlices(); ++slice) {
          const size_t at = static_cast<size_t>(slice);
          if (at >= status.node_pools.size() || status.node_pools[at].empty() ||
              std::find(r.slice_ids.begin(), r.slice_ids.end(), slice) != r.slice_ids.end()) {
            continue;
          }
          r.held_pools.push_back(status.node_pools[at]);
          reservations.push_back({key, spec->tpu.accelerator, spec->tpu.topology,
                                  status.node_pools[at], spec->worker.replicas,
                                  spec->tpu.chips_per_worker, slice});
        }
      }
      queued.push_back(std::move(r));
      if (!priority.may_preempt || status.preempted_at) {
        policy::PreemptorInfo& info = preemptors[key];
        info.may_preempt = priority.may_preempt;
        info.preempted_by = status.preempted_by;
        info.preempted_at = status.preempted_at.value_or(WallTime{});
      }
    } else {
      Admitted& a = admitted_jobs[key];
      a.workers = spec->worker.replicas;
      a.candidate =
          preemption_.load() && !external &&
          (status.phase == policy::Phase::kStarting || status.phase == policy::Phase::kRunning);
      if (a.candidate) a.gang.priority = Priority(*spec).value;
      a.gang.job = key;
      a.gang.accelerator = spec->tpu.accelerator;
      a.gang.topology = spec->tpu.topology;
      a.gang.preemptible = spec->preemptible;
      a.gang.admitted_at = status.admitted_at.value_or(WallTime{});
      // The chips of its workers not bound yet are reserved in its pools, slice by slice
      // (filled in below).
      for (int32_t slice = 0; slice < spec->ActiveSlices(); ++slice) {
        const size_t at = static_cast<size_t>(slice);
        reservations.push_back({key, spec->tpu.accelerator, spec->tpu.topology,
                                at < status.node_pools.size() ? status.node_pools[at] : "",
                                spec->worker.replicas, spec->tpu.chips_per_worker, slice});
      }
      // Elastic slices, running degraded: pools for the missing slices are asked for with a
      // re-issue's place (first in the class), never by preemption (policy/elastic.h).
      if (degraded && status.phase == policy::Phase::kRunning &&
          declared->fault_tolerance.elastic.scale_up != policy::ScaleUp::kNever) {
        policy::GangRequest r = request();
        r.reissued = true;
        r.grow = true;
        r.priority = Priority(*declared).value;
        r.queued_at = status.elastic && status.elastic->degraded_since
                          ? *status.elastic->degraded_since
                          : status.admitted_at.value_or(WallTime{});
        for (int32_t slice = spec->ActiveSlices(); slice < declared->tpu.slices; ++slice) {
          r.slice_ids.push_back(slice);
        }
        r.slices = static_cast<int32_t>(r.slice_ids.size());
        for (const std::string& pool : status.node_pools) {
          if (!pool.empty()) r.held_pools.push_back(pool);
        }
        queued.push_back(std::move(r));
        preemptors[key].may_preempt = false;
      }
    }
  }

  std::map<std::string, policy::PreemptOrder> orders;
  const auto gone = [&](const auto& entry) { return !waiting_jobs.contains(entry.first); };
  std::erase_if(won_, gone);
  std::erase_if(taking_, gone);
  for (auto& [victim, order] : issued) {
    auto a = admitted_jobs.find(victim);
    if (!waiting_jobs.contains(order.by)) continue;  // no longer wanted
    if (a == admitted_jobs.end() || a->second.attempt != order.attempt) {
      // Carried out: the head is admitted on the victim's capacity by a later plan.
      if (auto it = taking_.find(order.by); it != taking_.end()) won_[order.by] = it->second;
      continue;
    }
    a->second.ordered = true;
    orders.emplace(victim, std::move(order));
  }

  // The pods: bound workers of each admitted attempt (what its reservation no longer needs, and
  // where a preemption candidate's chips are), and the pods already on their way out (being
  // deleted, of an earlier attempt, of a job not admitted): their chips free up without any
  // further decision, so a preemption is only considered when those are not enough.
  // (job, slice) -> bound, live workers of the job's current attempt in that slice
  std::map<std::pair<std::string, int32_t>, int32_t> bound;
  std::map<std::string, bool> going;  // job -> a pod of its current attempt is going
  const auto pods = pods_.List();
  std::vector<const cache::PodInfo*> pod_ptrs, staying;
  pod_ptrs.reserve(pods.size());
  staying.reserve(pods.size());
  for (const auto& pod : pods) {
    pod_ptrs.push_back(pod.get());
    if (pod->node_name.empty() || pod->terminated()) continue;
    const auto id = IdentifyPod(*pod);
    const auto job = pod->labels.Get(cache::kJobNameLabel);
    if (!id || !job) {
      staying.push_back(pod.get());  // not the operator's to judge
      continue;
    }
    const std::string key = cache::ObjectKey(pod->ns.view(), *job);
    auto a = admitted_jobs.find(key);
    if (a == admitted_jobs.end() || id->attempt != a->second.attempt) continue;  // going
    const bool worker = id->type == policy::ReplicaType::kWorker;
    if (worker) {
      const int32_t hosts = a->second.workers;
      bound[{key, hosts > 0 ? id->index / hosts : 0}]++;
    }
    if (pod->deleting() || a->second.ordered) {
      going[key] = true;
      continue;
    }
    staying.push_back(pod.get());
    if (!worker) continue;
    if (const int64_t chips = pod->TpuRequest(); chips > 0) {
      a->second.gang.chips.emplace_back(std::string(pod->node_name.view()), chips);
    }
  }
  std::vector<policy::RunningGang> running;
  std::set<std::string> unbound;  // jobs with a worker not bound yet
  for (policy::Reservation& r : reservations) {
    r.workers = std::max(0, r.workers - bound[{r.job, r.slice}]);
    if (r.workers > 0) unbound.insert(r.job);
  }
  for (auto& [key, a] : admitted_jobs) {
    if (a.candidate && !unbound.contains(key) && !going[key]) running.push_back(std::move(a.gang));
  }
  std::erase_if(reservations, [](const policy::Reservation& r) { return r.workers <= 0; });

  const auto nodes = nodes_.List();
  std::vector<const cache::NodeInfo*> node_ptrs;
  node_ptrs.reserve(nodes.size());
  for (const auto& node : nodes) node_ptrs.push_back(node.get());
  const WallTime now = clock_.WallNow();
  const policy::Capacity capacity =
      policy::BuildCapacity(node_ptrs, pod_ptrs, reservations, health_, now);
  if (changes_in != nullptr) *changes_in = capacity.changes_in;
  std::map<std::string, policy::Admission> plan = policy::PlanAdmissions(capacity, queued);
  // A re-issued attempt whose old pods are still going holds its place (the capacity this plan
  // gave it goes to nobody else), but is admitted only by a plan made once they are gone: the
  // pools chosen now count the capacity they still hold, and their pool may be the faulty one.
  for (const std::string& key : restarting) {
    auto it = plan.find(key);
    if (it == plan.end() || !it->second.admit) continue;
    it->second.admit = false;
    it->second.reason = "Reissued";
    it->second.message = "waiting for the pods of the previous attempt to be gone";
    it->second.pools.clear();
    it->second.placed_pools.clear();
  }

  // A head admitted on capacity it preempted for says so.
  for (const auto& [job, preempted] : won_) {
    auto it = plan.find(job);
    if (it != plan.end() && it->second.admit && !preempted.empty()) {
      it->second.message = "after " + preempted;
    }
  }
  // A head whose victims are still to stop says so.
  for (const auto& [victim, order] : orders) {
    auto head = plan.find(order.by);
    if (head == plan.end() || head->second.admit) continue;
    head->second.reason = "Preempting";
    head->second.message = order.head_message;
  }
  bool blocked = false;
  for (const auto& [job, answer] : plan) blocked = blocked || answer.reason == "WaitingForCapacity";
  if (blocked && !running.empty()) {
    const policy::Capacity after_release =
        policy::BuildCapacity(node_ptrs, staying, reservations, health_, now);
    for (const policy::Preemption& p :
         policy::PlanPreemptions(after_release, std::move(queued), preemptors, running)) {
      policy::Admission& head = plan.at(p.preemptor);
      head.reason = "Preempting";
      head.message = p.message;
      taking_[p.preemptor] = p.taken;
      for (const std::string& victim : p.victims) {
        orders[victim] = {p.preemptor, p.victim_message, admitted_jobs[victim].attempt, p.message};
      }
    }
  }
  if (preemptions != nullptr) *preemptions = std::move(orders);
  return plan;
}

void JobQueue::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  // When a node enters its maintenance avoid window: the capacity changes then with no event.
  bool replan = false;
  std::chrono::steady_clock::time_point replan_at{};
  while (true) {
    if (replan) {
      if (!cv_.wait_until(lock, replan_at, [this] { return dirty_ || stop_; })) dirty_ = true;
    } else {
      cv_.wait(lock, [this] { return dirty_ || stop_; });
    }
    if (stop_) return;
    // Coalesce a burst of changes (a gang's pods binding one after another) into one plan.
    lock.unlock();
    std::this_thread::sleep_for(kCoalesce);
    lock.lock();
    if (stop_) return;
    dirty_ = false;
    lock.unlock();
    const auto begin = clock_.Now();
    std::optional<Duration> changes_in;
    std::map<std::string, policy::PreemptOrder> preempt;
    {
      std::lock_guard<std::mutex> guard(mu_);  // Loop() is the only writer of preempt_
      preempt = preempt_;
    }
    std::map<std::string, policy::Admission> plan = ComputePlan(&changes_in, &preempt);
    replan = changes_in.has_value();
    if (replan) {
      replan_at =
          std::chrono::steady_clock::now() +
          std::max<Duration>(changes_in.value_or(Duration::zero()), std::chrono::seconds(1));
    }
    recomputations_++;
    const auto took = clock_.Now() - begin;
    lock.lock();
    std::vector<std::string> changed;
    for (const auto& [job, answer] : plan) {
      auto old = plan_.find(job);
      if (old == plan_.end() || !SameAnswer(old->second, answer)) changed.push_back(job);
    }
    for (const auto& [job, order] : preempt) {
      auto old = preempt_.find(job);
      if (old == preempt_.end() || old->second.by != order.by) {
        changed.push_back(job);
        log::Info("preempting job", {{"tpujob", job}, {"by", order.by}, {"why", order.message}});
      }
    }
    plan_ = std::move(plan);
    preempt_ = std::move(preempt);
    const size_t waiting = plan_.size();
    const auto enqueue = enqueue_;
    lock.unlock();
    log::Debug(
        "queue planned",
        {{"waiting", waiting},
         {"changed", changed.size()},
         {"duration_us", std::chrono::duration_cast<std::chrono::microseconds>(took).count()}});
    if (enqueue) {
      for (const auto& job : changed) enqueue(job);
    }
    lock.lock();
  }
}

}  // namespace tpujob::controller
