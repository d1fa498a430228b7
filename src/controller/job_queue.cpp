#include "controller/job_queue.h"

#include <vector>

#include "base/logging.h"
#include "controller/children.h"

namespace tpujob::controller {
namespace {

bool SameAnswer(const policy::Admission& a, const policy::Admission& b) {
  return a.admit == b.admit && a.pool == b.pool && a.reason == b.reason && a.message == b.message &&
         a.position == b.position;
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
      clock_(clock) {}

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
      d.pool = a.pool;
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

int32_t JobQueue::Priority(const policy::JobSpec& spec) {
  if (spec.priority_class_name.empty()) return spec.priority;
  const TimePoint now = clock_.Now();
  {
    std::lock_guard<std::mutex> lock(priority_mu_);
    auto it = priority_classes_.find(spec.priority_class_name);
    if (it != priority_classes_.end() && now - it->second.read_at < kPriorityClassTtl) {
      return it->second.value.value_or(spec.priority);
    }
  }
  std::optional<int32_t> value;
  auto answer = client_.Get(kube::Resource::PriorityClasses(), "", spec.priority_class_name);
  if (answer && answer->contains("value") && (*answer)["value"].is_number_integer()) {
    value = (*answer)["value"].get<int32_t>();
  } else {
    log::Warn("cannot read PriorityClass; using spec.priority",
              {{"priority_class", spec.priority_class_name},
               {"error", answer ? std::string("no integer value") : answer.error().ToString()}});
  }
  std::lock_guard<std::mutex> lock(priority_mu_);
  priority_classes_[spec.priority_class_name] = {value, now};
  return value.value_or(spec.priority);
}

std::map<std::string, policy::Admission> JobQueue::ComputePlan(
    std::optional<Duration>* changes_in) {
  std::vector<policy::GangRequest> queued;
  std::vector<policy::Reservation> reservations;
  // Bound, live workers of each job's current attempt, for the reservations.
  std::map<std::string, std::map<int32_t, int32_t>> bound;  // job -> attempt -> count
  const auto pods = pods_.List();
  std::vector<const cache::PodInfo*> pod_ptrs;
  pod_ptrs.reserve(pods.size());
  for (const auto& pod : pods) {
    pod_ptrs.push_back(pod.get());
    if (pod->node_name.empty() || pod->terminated()) continue;
    const auto id = IdentifyPod(*pod);
    const auto job = pod->labels.Get(cache::kJobNameLabel);
    if (!id || id->type != policy::ReplicaType::kWorker || !job) continue;
    bound[cache::ObjectKey(pod->ns.view(), *job)][id->attempt]++;
  }
  for (const auto& job : jobs_.List()) {
    if (job->deleting()) continue;
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
    const auto spec = policy::ParseJobSpec(*job);
    if (!spec) continue;
    if (spec->suspend && waiting) continue;  // out of the queue until resumed
    const std::string key = job->Key();
    if (waiting) {
      policy::GangRequest r;
      r.job = key;
      r.accelerator = spec->tpu.accelerator;
      r.topology = spec->tpu.topology;
      r.workers = spec->worker.replicas;
      r.chips_per_worker = spec->tpu.chips_per_worker;
      r.reissued = status.reissued;
      r.priority = Priority(*spec);
      r.queued_at = status.queued_at.value_or(job->creation_timestamp.value_or(WallTime{}));
      queued.push_back(std::move(r));
    } else {
      int32_t have = 0;
      if (auto it = bound.find(key); it != bound.end()) {
        if (auto a = it->second.find(status.attempt); a != it->second.end()) have = a->second;
      }
      if (have < spec->worker.replicas) {
        reservations.push_back({key, spec->tpu.accelerator, spec->tpu.topology, status.node_pool,
                                spec->worker.replicas - have, spec->tpu.chips_per_worker});
      }
    }
  }
  const auto nodes = nodes_.List();
  std::vector<const cache::NodeInfo*> node_ptrs;
  node_ptrs.reserve(nodes.size());
  for (const auto& node : nodes) node_ptrs.push_back(node.get());
  const policy::Capacity capacity =
      policy::BuildCapacity(node_ptrs, pod_ptrs, reservations, health_, clock_.WallNow());
  if (changes_in != nullptr) *changes_in = capacity.changes_in;
  return policy::PlanAdmissions(capacity, std::move(queued));
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
    std::map<std::string, policy::Admission> plan = ComputePlan(&changes_in);
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
    plan_ = std::move(plan);
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
