#include "controller/tpujob_reconciler.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "controller/metrics.h"
#include "policy/elastic.h"
#include "policy/progress_log.h"
#include "policy/queue.h"
#include "preflight/report.h"

namespace tpujob::controller {
namespace {

// At most this many nodes named in the workers' node affinity (the rest are cordoned anyway, or
// the slice shape is in a state no affinity list helps).
constexpr size_t kMaxAvoidedNodes = 64;

// Runs fn(0..n-1) on up to `parallelism` threads and waits for all of them.
void ParallelFor(size_t n, int parallelism, const std::function<void(size_t)>& fn) {
  const size_t threads = std::min<size_t>(n, static_cast<size_t>(std::max(1, parallelism)));
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) fn(i);
    });
  }
  for (auto& thread : pool) thread.join();
}

// resourceVersions are opaque by contract, but the API server's are etcd revisions: decimal
// integers that grow. Compare numerically when both parse; otherwise only equality counts.
bool AtLeast(std::string_view have, std::string_view want) {
  if (have == want) return true;
  uint64_t a = 0, b = 0;
  auto ra = std::from_chars(have.data(), have.data() + have.size(), a);
  auto rb = std::from_chars(want.data(), want.data() + want.size(), b);
  if (ra.ec != std::errc() || rb.ec != std::errc()) return false;
  return a >= b;
}

ObjectRef RefOf(const cache::TPUJobInfo& job) {
  return ObjectRef{std::string(kTPUJobApiVersion), std::string(kTPUJobKind),
                   std::string(job.ns.view()), job.name, job.uid};
}

}  // namespace

nlohmann::json CreateMergePatch(const nlohmann::json& from, const nlohmann::json& to) {
  if (!from.is_object() || !to.is_object()) return to;
  nlohmann::json patch = nlohmann::json::object();
  for (const auto& [key, value] : to.items()) {
    auto it = from.find(key);
    if (it == from.end()) {
      patch[key] = value;
    } else if (*it != value) {
      patch[key] = (it->is_object() && value.is_object()) ? CreateMergePatch(*it, value) : value;
    }
  }
  for (const auto& [key, value] : from.items()) {
    if (!to.contains(key)) patch[key] = nullptr;
  }
  return patch;
}

TPUJobReconciler::TPUJobReconciler(kube::Client& client,
                                   const cache::Store<cache::TPUJobInfo>& jobs,
                                   const cache::Store<cache::PodInfo>& pods,
                                   const cache::Store<cache::NodeInfo>& nodes,
                                   EventRecorder& recorder, Cordoner& cordoner,
                                   TPUJobReconcilerOptions options, Clock& clock)
    : client_(client),
      jobs_(jobs),
      pods_(pods),
      nodes_(nodes),
      recorder_(recorder),
      cordoner_(cordoner),
      options_(std::move(options)),
      clock_(clock) {}

std::optional<Duration> TPUJobReconciler::Pending(const std::string& key,
                                                  const cache::TPUJobInfo& job) {
  std::lock_guard<std::mutex> guard(mu_);
  auto it = expectations_.find(key);
  if (it == expectations_.end()) return std::nullopt;
  Expectations& e = it->second;
  const TimePoint now = clock_.Now();
  bool met =
      e.job_resource_version.empty() || AtLeast(job.resource_version, e.job_resource_version);
  // A created pod counts as seen once the cache has it, or once the cache has moved past its
  // creation: then it was deleted again already (by whoever), and waiting for it would only stall
  // the job until the deadline.
  const std::string cache_version = pods_.ResourceVersion();
  for (auto it = e.created.begin(); met && it != e.created.end(); ++it) {
    const auto& [name, version] = *it;
    met = pods_.Get(cache::ObjectKey(job.ns, name)) != nullptr ||
          (!version.empty() && AtLeast(cache_version, version));
  }
  for (auto it = e.patched.begin(); met && it != e.patched.end(); ++it) {
    const auto& [name, version] = *it;
    auto pod = pods_.Get(cache::ObjectKey(job.ns, name));
    met = pod == nullptr || version.empty() || AtLeast(pod->resource_version, version);
  }
  if (met && !e.deleted.empty()) {
    std::set<std::string> still;
    for (const auto& pod : pods_.ByIndex(cache::kPodsByJobIndex, key)) {
      if (!pod->deleting() && e.deleted.contains(pod->uid)) still.insert(pod->uid);
    }
    met = still.empty();
  }
  if (met || now >= e.deadline) {
    if (!met) {
      log::Warn("the cache did not show this reconciler's writes in time; deciding anyway",
                {{"tpujob", key}});
    }
    expectations_.erase(it);
    return std::nullopt;
  }
  return e.deadline - now;
}

void TPUJobReconciler::ReportWorkloadRefusal(const cache::TPUJobInfo& job,
                                             const kube::Status& write) {
  if (write) return;
  const kube::Error& error = write.error();
  // Refused for good (a webhook, a quota, RBAC), not a blip: the job's owner needs to know.
  if (error.http_status >= 400 && error.http_status < 500 && !error.IsConflict() &&
      !error.IsNotFound() && !error.IsTooManyRequests()) {
    recorder_.Record(RefOf(job), EventType::kWarning, "KueueWorkloadRefused",
                     "writing Kueue Workload " + KueueAdapter::WorkloadNameOf(job) +
                         " was refused: " + error.ToString());
  }
}

kube::Result<ReconcileResult> TPUJobReconciler::Dispatch(const std::string& key,
                                                         const cache::TPUJobInfo& job) {
  // MultiKueue's job in a manager cluster: queued in Kueue here, run by a worker cluster, its
  // status MultiKueue's to write while a copy runs. Its Workload is the operator's, and its
  // status while no copy runs.
  const auto spec = policy::ParseJobSpec(job);
  if (!spec) {
    recorder_.Record(RefOf(job), EventType::kWarning, "InvalidSpec",
                     "not queued in Kueue: " + spec.error());
  }
  const KueueAdapter::SyncResult sync = options_.kueue->Dispatch(job, spec);
  log::Debug("MultiKueue dispatches the TPUJob", {{"tpujob", key},
                                                  {"workload", KueueAdapter::WorkloadNameOf(job)},
                                                  {"state", sync.verdict.message}});
  ReportWorkloadRefusal(job, sync.write);
  if (sync.status && !job.deleting()) {
    // No copy runs (not dispatched yet, or stopped after an eviction), and MultiKueue copies no
    // status meanwhile: the job says so itself. At the cached resourceVersion, so that a status
    // MultiKueue wrote since is never overwritten.
    auto written = PatchJobStatus(job, *sync.status);
    if (!written) return std::unexpected(written.error());
  }
  if (!sync.write) return std::unexpected(sync.write.error());
  // spec.ttlSecondsAfterFinished, once MultiKueue copied a finished status: deleting this job
  // deletes its Workload, and MultiKueue then the copy in the worker.
  if (spec) {
    const auto status = policy::JobStatus::FromJson(job.status);
    const auto expiry = policy::FinishedJobExpiry(*spec, status);
    if (expiry && policy::IsTerminal(status.phase)) {
      const WallTime now = clock_.WallNow();
      if (now >= *expiry) return DeleteFinishedJob(job);
      return ReconcileResult{std::chrono::duration_cast<Duration>(*expiry - now)};
    }
  }
  return ReconcileResult{};
}

kube::Result<ReconcileResult> TPUJobReconciler::Reconcile(const std::string& key) {
  auto job = jobs_.Get(key);
  if (job == nullptr) {
    std::lock_guard<std::mutex> guard(mu_);
    expectations_.erase(key);
    preflight_counted_.erase(key);
    cordons_sent_.erase(key);
    progress_due_.erase(key);
    log::Debug("TPUJob gone", {{"tpujob", key}});
    return ReconcileResult{};
  }
  if (!policy::ManagedByUs(*job)) {
    if (options_.kueue != nullptr && options_.kueue->Manages(*job) &&
        policy::kueue::DispatchedByMultiKueue(*job)) {
      return Dispatch(key, *job);
    }
    // Another controller's (spec.managedBy): not a pod, status or Workload of it is ours.
    log::Debug("TPUJob managed by another controller; leaving it alone",
               {{"tpujob", key}, {"managedBy", job->spec.value("managedBy", "")}});
    return ReconcileResult{};
  }
  if (auto wait = Pending(key, *job)) {
    log::Debug("waiting for the cache to show the last writes", {{"tpujob", key}});
    return ReconcileResult{*wait};
  }

  const auto spec = policy::ParseJobSpec(*job);
  policy::LifecycleInput input;
  input.job = job.get();
  input.spec = &spec;
  input.now = clock_.WallNow();
  input.node_health = [this, now = input.now](std::string_view node) {
    return policy::EvaluateNode(nodes_.Get(node).get(), options_.node_health, now);
  };
  input.node_cordoned = [this](std::string_view node) {
    const auto found = nodes_.Get(node);
    return found != nullptr && found->unschedulable;
  };
  const auto pods = pods_.ByIndex(cache::kPodsByJobIndex, key);
  for (const auto& pod : pods) {
    if (pod->owner.uid.view() != job->uid) continue;  // another job's, or nobody's: not ours
    if (auto id = IdentifyPod(*pod)) {
      input.pods.push_back({pod.get(), id->type, id->index, id->attempt});
    } else {
      input.strays.push_back(pod.get());
    }
  }
  for (const auto& node : nodes_.ByIndex(kNodesByCordonJobIndex, key)) {
    input.cordoned_nodes.push_back(node->name);
  }
  const bool by_kueue = options_.kueue != nullptr && options_.kueue->Manages(*job);
  kube::Status kueue_write;  // a failed Workload write: returned once the plan is committed
  if (by_kueue) {
    // Kueue admits it: the Workload's state stands in for the queue's answer, and Kueue's
    // eviction for a preemption order.
    const bool pods_left = !input.pods.empty() || !input.strays.empty();
    KueueAdapter::SyncResult sync = options_.kueue->Sync(*job, spec, pods_left);
    kueue_write = sync.write;
    ReportWorkloadRefusal(*job, kueue_write);
    const policy::kueue::KueueVerdict& verdict = sync.verdict;
    input.release_unschedulable = false;
    input.replace_slices = false;  // Kueue admits the Workload as a whole
    input.queue_timeout = !verdict.readmission;
    input.admit = verdict.admit;
    input.not_admitted_reason = verdict.reason;
    input.not_admitted_message = verdict.message;
    if (verdict.evict) {
      const auto current = policy::JobStatus::FromJson(job->status);
      input.preempt = policy::PreemptOrder{
          .by = "", .message = *verdict.evict, .attempt = current.attempt, .head_message = ""};
    }
  } else {
    if (options_.kueue != nullptr && options_.kueue->enabled()) {
      // It named a LocalQueue before: Kueue stops counting it.
      if (auto forgotten = options_.kueue->Forget(*job); !forgotten) kueue_write = forgotten;
    }
    if (spec && (options_.admission || options_.preemption)) {
      const auto current = policy::JobStatus::FromJson(job->status);
      if (options_.preemption && current.ConditionTrue(policy::condition::kAdmitted)) {
        input.preempt = options_.preemption(*job);
      }
      if (options_.admission && current.phase == policy::Phase::kQueued) {
        AdmissionDecision admission = options_.admission(*job, *spec, current);
        input.admit = admission.admit;
        input.not_admitted_reason = admission.reason;
        if (admission.admit) {
          input.admitted_message = admission.message;
        } else if (!admission.message.empty()) {
          input.not_admitted_message = admission.message;
        }
        input.admit_pools = admission.pools;
        input.queue_position = admission.position;
      } else if (options_.admission && current.phase == policy::Phase::kRunning &&
                 current.ConditionTrue(policy::condition::kAdmitted) &&
                 spec->fault_tolerance.elastic.scale_up != policy::ScaleUp::kNever &&
                 policy::ActiveSlicesOf(*spec, current) < spec->tpu.slices) {
        // Elastic slices, degraded: the queue's answer for the missing slices' pools.
        AdmissionDecision grow = options_.admission(*job, *spec, current);
        if (grow.admit) {
          input.grow_pools = grow.pools;
        } else {
          input.grow_message = grow.message;
        }
      }
    }
  }

  CountPreflightReports(key, pods);
  policy::Plan plan = policy::Decide(input);
  if (!plan.confirm_nodes.empty()) {
    auto confirmed = ConfirmNodes(key, input, plan);
    if (!confirmed) return std::unexpected(confirmed.error());
  }
  Expectations expect;
  if (auto written = WriteStatus(*job, plan, expect); !written)
    return std::unexpected(written.error());

  for (const auto& event : plan.events) {
    recorder_.Record(RefOf(*job), event.warning ? EventType::kWarning : EventType::kNormal,
                     event.reason, event.message);
  }
  // A preemption carried out: the job it was for says so too (once per victim).
  if (input.preempt &&
      plan.status.preemptions > policy::JobStatus::FromJson(job->status).preemptions) {
    if (auto preemptor = jobs_.Get(input.preempt->by)) {
      recorder_.Record(RefOf(*preemptor), EventType::kNormal, "Preempting",
                       input.preempt->head_message.empty()
                           ? "preempting " + key + ": " + input.preempt->message
                           : input.preempt->head_message);
    }
  }
  // A worker cluster's copy of a MultiKueue job is deleted by MultiKueue once the manager's
  // Workload is finished: deleted before MultiKueue saw it end (and its adopted Workload with
  // it), the copy would be created and run again. Its TTL is the manager's job's.
  if (plan.delete_job && policy::kueue::PrebuiltWorkloadName(*job).empty()) {
    return DeleteFinishedJob(*job);
  }

  // Faulty nodes, within the operator's cordon limits; the job's Event says what was done.
  // Cordons and deletions are independent of each other (the next attempt's pods are created
  // only once the old ones are gone, by which time the cordon is written), so they run at the
  // same time: the fault-to-action latency is the slower of the two, not their sum. All of one
  // plan's findings go to the Cordoner together, so the circuit breaker sees them at once.
  // A finding goes to the Cordoner once per process: a plan repeats one only when it cannot
  // know whether it was carried out (policy::Decide's RedoLostCordon, after a restart).
  std::vector<policy::CordonRequest> requests;
  {
    std::lock_guard<std::mutex> guard(mu_);
    std::set<std::string>& sent = cordons_sent_[key];
    for (const auto& node : plan.cordon) {
      if (sent.insert(node.node + "\n" + node.evidence).second) {
        requests.push_back({node.node, key, node.reason, node.message, node.item, node.evidence});
      }
    }
  }
  std::thread cordons;
  if (!requests.empty()) {
    cordons = std::thread([&] {
      for (const auto& outcome : cordoner_.CordonAll(requests)) {
        recorder_.Record(RefOf(*job), EventType::kWarning,
                         outcome.cordoned() ? "NodeCordoned" : "NodeNotCordoned",
                         outcome.error ? outcome.message + "; retrying" : outcome.message);
      }
    });
  }

  kube::Status result;
  std::vector<std::optional<kube::Error>> delete_errors(plan.remove.size());
  std::vector<char> deleted(plan.remove.size(), 0);  // not vector<bool>: see CreatePods
  ParallelFor(plan.remove.size(), options_.create_parallelism, [&](size_t i) {
    const auto& remove = plan.remove[i];
    kube::DeleteOptions options;
    options.precondition_uid = remove.uid;
    options.grace_period_seconds = remove.grace_period_seconds;
    options.propagation_policy = "Background";
    log::Info("deleting pod",
              {{"tpujob", key},
               {"pod", remove.name},
               remove.grace_period_seconds ? log::Field("grace", *remove.grace_period_seconds)
                                           : log::Field("grace", "pod's own"),
               {"why", remove.why}});
    auto answer =
        client_.Delete(kube::Resource::Pods(), std::string(job->ns.view()), remove.name, options);
    if (answer || answer.error().IsNotFound()) {
      deleted[i] = 1;
    } else if (!answer.error().IsConflict()) {
      // Conflict: the uid precondition failed, the pod of that name is already a newer one.
      log::Warn("cannot delete pod",
                {{"tpujob", key}, {"pod", remove.name}, {"error", answer.error().ToString()}});
      delete_errors[i] = answer.error();
    }
  });
  for (size_t i = 0; i < plan.remove.size(); ++i) {
    if (deleted[i]) expect.deleted.insert(plan.remove[i].uid);
    if (delete_errors[i] && result) result = std::unexpected(*delete_errors[i]);
  }
  if (cordons.joinable()) cordons.join();

  // An elastic job on fewer slices: its pods are those of the slices it runs on.
  const std::optional<policy::JobSpec> degraded =
      spec ? policy::DegradedSpec(*spec, plan.status) : std::nullopt;
  const policy::JobSpec* runs = degraded ? &*degraded : spec ? &*spec : nullptr;
  if (!plan.annotate.empty()) {
    if (auto annotated = AnnotatePods(*job, runs, plan, expect); !annotated && result) {
      result = annotated;
    }
  }

  if (runs != nullptr && (plan.ensure_service || !plan.create.empty())) {
    if (auto created = CreatePods(*job, *runs, plan, expect); !created && result) {
      result = created;
    }
  }

  std::optional<Duration> requeue = plan.requeue_after;
  if (result && spec && expect.job_resource_version.empty()) {
    // Nothing else changed the status this round: the program's step may.
    if (auto next = RefreshProgress(*job, *spec, input, expect)) {
      requeue = requeue ? std::min(*requeue, *next) : *next;
    }
  }

  if (!expect.job_resource_version.empty() || !expect.created.empty() || !expect.deleted.empty() ||
      !expect.patched.empty()) {
    expect.deadline = clock_.Now() + options_.expectation_timeout;
    std::lock_guard<std::mutex> guard(mu_);
    expectations_[key] = std::move(expect);
  }
  if (!result) return std::unexpected(result.error());
  if (!kueue_write) return std::unexpected(kueue_write.error());
  return ReconcileResult{requeue};
}

std::optional<Duration> TPUJobReconciler::RefreshProgress(const cache::TPUJobInfo& job,
                                                          const policy::JobSpec& spec,
                                                          const policy::LifecycleInput& input,
                                                          Expectations& expect) {
  const std::string key = job.Key();
  const auto& progress = spec.fault_tolerance.progress;
  const policy::JobStatus current = policy::JobStatus::FromJson(job.status);
  if (!progress || progress->log_pattern.empty() || options_.progress_refresh <= Duration::zero() ||
      !options_.read_log || current.phase != policy::Phase::kRunning) {
    std::lock_guard<std::mutex> guard(mu_);
    progress_due_.erase(key);
    return std::nullopt;
  }
  const TimePoint now = clock_.Now();
  {
    std::lock_guard<std::mutex> guard(mu_);
    auto [due, added] = progress_due_.try_emplace(key, now);
    if (now < due->second) return due->second - now;
    due->second = now + options_.progress_refresh;
  }
  // Worker 0 of the current attempt: every worker runs the same steps, and it is the one
  // `kubectl tpujob describe` reads too.
  const cache::PodInfo* worker0 = nullptr;
  for (const auto& observed : input.pods) {
    if (observed.type == policy::ReplicaType::kWorker && observed.index == 0 &&
        observed.attempt == current.attempt && !observed.pod->node_name.empty() &&
        !observed.pod->containers.empty()) {
      worker0 = observed.pod;
    }
  }
  if (worker0 == nullptr) return options_.progress_refresh;
  const std::string pod(worker0->name);
  auto text = options_.read_log(std::string(job.ns.view()), pod,
                                std::string(worker0->containers.front().name.view()));
  if (!text) {
    Metrics().progress_refreshes.With({"unreadable"}).Inc();
    log::Debug("cannot read the log tail for status.progress",
               {{"tpujob", key}, {"pod", pod}, {"error", text.error().ToString()}});
    return options_.progress_refresh;
  }
  const policy::LogProgress read =
      policy::ProgressFromLog(*text, progress->log_pattern, progress->checkpoint_pattern);
  const auto refreshed = policy::RefreshProgress(current.progress, read);
  if (!refreshed) {
    Metrics().progress_refreshes.With({read.error.empty() ? "unchanged" : "unreadable"}).Inc();
    return options_.progress_refresh;
  }
  policy::JobStatus desired = current;
  desired.progress = *refreshed;
  auto answer = PatchJobStatus(job, desired);
  if (!answer) {
    // A conflict or an outage: the next reconcile decides again, the next refresh reads again.
    log::Debug("cannot write status.progress",
               {{"tpujob", key}, {"error", answer.error().ToString()}});
    return options_.progress_refresh;
  }
  Metrics().progress_refreshes.With({"written"}).Inc();
  expect.job_resource_version = (*answer)["metadata"].value("resourceVersion", "");
  log::Debug("status.progress refreshed from the log tail",
             {{"tpujob", key}, {"pod", pod}, {"step", *read.step}});
  return options_.progress_refresh;
}

kube::Result<ReconcileResult> TPUJobReconciler::DeleteFinishedJob(const cache::TPUJobInfo& job) {
  const std::string key = job.Key();
  const policy::JobStatus status = policy::JobStatus::FromJson(job.status);
  log::Info("deleting finished TPUJob: its ttlSecondsAfterFinished has passed",
            {{"tpujob", key},
             {"phase", policy::ToString(status.phase)},
             {"completionTime",
              status.completion_time ? cache::FormatRfc3339(*status.completion_time) : ""}});
  kube::DeleteOptions options;
  options.precondition_uid = job.uid;  // never a newer job of the same name
  options.propagation_policy = "Background";
  auto answer =
      client_.Delete(kube::Resource::TPUJobs(), std::string(job.ns.view()), job.name, options);
  if (!answer && !answer.error().IsNotFound() && !answer.error().IsConflict()) {
    log::Warn("cannot delete finished TPUJob",
              {{"tpujob", key}, {"error", answer.error().ToString()}});
    return std::unexpected(answer.error());
  }
  return ReconcileResult{};
}

void TPUJobReconciler::CountPreflightReports(
    const std::string& key, const std::vector<cache::Store<cache::PodInfo>::Ptr>& pods) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string>& counted = preflight_counted_[key];
  std::set<std::string> still_there;
  for (const auto& pod : pods) {
    const cache::ContainerInfo* init = pod->FindInitContainer(policy::kPreflightContainer);
    if (init == nullptr || init->state != cache::ContainerState::kTerminated) continue;
    if (counted.contains(pod->uid)) {
      still_there.insert(pod->uid);
      continue;
    }
    // No report (yet, or killed, truncated): nothing to count; a status update may bring one.
    const std::optional<preflight::Report> report = preflight::ParseReport(init->message);
    if (!report) continue;
    still_there.insert(pod->uid);
    for (const auto& item : report->items) {
      Metrics().preflight_results.With({item.item, item.passed ? "pass" : "fail"}).Inc();
    }
  }
  // Remember only pods that still exist, so the set stays as small as the job.
  counted = std::move(still_there);
  if (counted.empty()) preflight_counted_.erase(key);
}

kube::Status TPUJobReconciler::ConfirmNodes(const std::string& key, policy::LifecycleInput& input,
                                            policy::Plan& plan) {
  // What the API server has now for each node, whatever the node watch delivered (ReadNode).
  auto fresh = std::make_shared<std::map<std::string, cache::Store<cache::NodeInfo>::Ptr>>();
  for (const std::string& name : plan.confirm_nodes) {
    if (fresh->contains(name)) continue;
    auto read = ReadNode(client_, name);
    if (!read) {
      log::Warn("could not read the node that decides a permanent failure; deciding again later",
                {{"tpujob", key}, {"node", name}, {"error", read.error().ToString()}});
      return std::unexpected(read.error());
    }
    // nullptr when deleted: a lost node, whatever the cache still shows.
    (*fresh)[name] = std::move(*read);
  }
  auto cached = [this, fresh](std::string_view node) {
    const auto it = fresh->find(std::string(node));
    return it != fresh->end() ? it->second : nodes_.Get(node);
  };
  input.node_health = [this, cached, now = input.now](std::string_view node) {
    return policy::EvaluateNode(cached(node).get(), options_.node_health, now);
  };
  input.node_cordoned = [cached](std::string_view node) {
    const auto found = cached(node);
    return found != nullptr && found->unschedulable;
  };
  const policy::Phase before = plan.status.phase;
  plan = policy::Decide(input);
  for (const auto& [name, node] : *fresh) {
    const policy::NodeHealth health =
        policy::EvaluateNode(node.get(), options_.node_health, input.now);
    const policy::NodeHealth in_cache =
        policy::EvaluateNode(nodes_.Get(name).get(), options_.node_health, input.now);
    if (health.verdict != in_cache.verdict) {
      log::Warn(
          "the node cache is behind the API server on a node that decides a permanent failure; "
          "deciding on the API server's answer",
          {{"tpujob", key},
           {"node", name},
           {"cached", std::string(policy::ToString(in_cache.verdict))},
           {"read", std::string(policy::ToString(health.verdict))},
           {"reason", health.reason},
           {"phaseBefore", std::string(policy::ToString(before))},
           {"phase", std::string(policy::ToString(plan.status.phase))}});
    }
  }
  return {};
}

kube::Status TPUJobReconciler::WriteStatus(const cache::TPUJobInfo& job, const policy::Plan& plan,
                                           Expectations& expect) {
  const nlohmann::json current = job.status.is_object() ? job.status : nlohmann::json::object();
  if (current == plan.status.ToJson()) return {};
  auto answer = PatchJobStatus(job, plan.status);
  if (!answer) return std::unexpected(answer.error());
  expect.job_resource_version =
      answer->value("/metadata/resourceVersion"_json_pointer, std::string());
  const policy::JobStatus before = policy::JobStatus::FromJson(current);
  RecordStatusChange(before, plan.status, clock_.WallNow());
  RecordGoodput(job.ns.view(), before, plan.status);
  RecordPreemptions(job.ns.view(), before, plan.status);
  RecordStalls(job.ns.view(), before, plan.status);
  RecordSliceScaling(job.ns.view(), before, plan.status);
  return {};
}

kube::Result<nlohmann::json> TPUJobReconciler::PatchJobStatus(const cache::TPUJobInfo& job,
                                                              const policy::JobStatus& desired) {
  const nlohmann::json current = job.status.is_object() ? job.status : nlohmann::json::object();
  const std::string key = job.Key();
  nlohmann::json patch = {{"metadata", {{"resourceVersion", job.resource_version}}},
                          {"status", CreateMergePatch(current, desired.ToJson())}};
  kube::PatchOptions options;
  options.subresource = "status";
  auto answer = client_.Patch(kube::Resource::TPUJobs(), std::string(job.ns.view()), job.name,
                              kube::PatchType::kMerge, patch, options);
  if (!answer) {
    if (answer.error().IsConflict()) {
      log::Debug("status write refused: the cache is stale; retrying", {{"tpujob", key}});
    }
    return answer;
  }
  const auto old_phase = policy::JobStatus::FromJson(current).phase;
  if (old_phase != desired.phase) {
    log::Info("phase changed",
              {{"tpujob", key},
               {"from", old_phase == policy::Phase::kNone ? "<none>" : policy::ToString(old_phase)},
               {"to", policy::ToString(desired.phase)},
               {"attempt", desired.attempt}});
  }
  return answer;
}

kube::Status TPUJobReconciler::AnnotatePods(const cache::TPUJobInfo& job,
                                            const policy::JobSpec* spec, const policy::Plan& plan,
                                            Expectations& expect) {
  const std::string key = job.Key();
  const std::string ns(job.ns.view());
  std::vector<std::optional<kube::Error>> errors(plan.annotate.size());
  std::vector<std::string> versions(plan.annotate.size());
  ParallelFor(plan.annotate.size(), options_.create_parallelism, [&](size_t i) {
    const policy::PodToAnnotate& a = plan.annotate[i];
    nlohmann::json annotations = nlohmann::json::object();
    if (a.generation > 0) {
      annotations[std::string(cache::kGenerationAnnotation)] = std::to_string(a.generation);
    }
    if (a.hardware_check) {
      annotations[std::string(cache::kHardwareCheckAnnotation)] = *a.hardware_check;
    }
    if (a.barrier) {
      annotations[std::string(cache::kBarrierAnnotation)] = std::to_string(*a.barrier);
    }
    if (a.program_env && spec != nullptr) {
      annotations[std::string(cache::kProgramEnvAnnotation)] = ProgramEnvAnnotation(
          job, *spec, a.program_env->first, a.program_env->second, plan.status.attempt);
    }
    // The uid is a precondition: a pod of the same name created since is not this one.
    nlohmann::json patch = {
        {"metadata", {{"uid", a.uid}, {"annotations", std::move(annotations)}}}};
    if (a.attempt) {
      patch["metadata"]["labels"][std::string(kAttemptLabel)] = std::to_string(*a.attempt);
    }
    if (a.index && spec != nullptr) {  // a worker whose slice took another id (elastic, in place)
      patch["metadata"]["labels"][std::string(kReplicaIndexLabel)] = std::to_string(*a.index);
      patch["metadata"]["labels"][std::string(kSliceIndexLabel)] =
          std::to_string(spec->SliceOf(*a.index));
    }
    auto answer = client_.Patch(kube::Resource::Pods(), ns, a.name, kube::PatchType::kMerge, patch);
    if (answer) {
      versions[i] = answer->value("/metadata/resourceVersion"_json_pointer, std::string());
    } else if (!answer.error().IsNotFound() && !answer.error().IsConflict() &&
               !answer.error().IsInvalid()) {
      // Not found, or another uid (refused as a conflict or as a change of the uid): the pod of
      // that name is gone or newer, and the next decision sees it.
      errors[i] = answer.error();
    }
  });
  std::optional<kube::Error> first_error;
  for (size_t i = 0; i < plan.annotate.size(); ++i) {
    if (!versions[i].empty()) expect.patched.insert_or_assign(plan.annotate[i].name, versions[i]);
    if (errors[i] && !first_error) first_error = errors[i];
  }
  const policy::PodToAnnotate& first = plan.annotate.front();
  if (first.hardware_check) {
    // A stall: every node of the job is asked for a hardware round (policy/stall_rules.h).
    log::Info("annotated pods for a hardware check on their nodes",
              {{"tpujob", key},
               {"pods", plan.annotate.size()},
               {"hardware_check", *first.hardware_check}});
  } else {
    log::Info("annotated pods",
              {{"tpujob", key},
               {"pods", plan.annotate.size()},
               {"generation", first.generation},
               {"barrier", first.barrier ? "open" : "closed"},
               {"moved_to_attempt", first.attempt ? *first.attempt : 0},
               {"relabeled", std::count_if(plan.annotate.begin(), plan.annotate.end(),
                                           [](const policy::PodToAnnotate& x) {
                                             return x.index.has_value();
                                           })}});
  }
  if (first_error) {
    log::Warn("cannot annotate pods", {{"tpujob", key}, {"error", first_error->ToString()}});
    return std::unexpected(*first_error);
  }
  return {};
}

kube::Status TPUJobReconciler::CreatePods(const cache::TPUJobInfo& job, const policy::JobSpec& spec,
                                          const policy::Plan& plan, Expectations& expect) {
  const std::string key = job.Key();
  const std::string ns(job.ns.view());
  if (plan.ensure_service) {
    auto created = client_.Create(kube::Resource::Services(), ns, BuildService(job));
    if (!created && !created.error().IsAlreadyExists()) {
      log::Warn("cannot create the headless Service",
                {{"tpujob", key}, {"error", created.error().ToString()}});
      return std::unexpected(created.error());
    }
  }
  if (plan.create.empty()) return {};

  const auto begin = clock_.Now();
  const int32_t attempt = plan.status.attempt;
  // Workers keep off nodes whose announced maintenance starts within the avoid window, which
  // the queue left out of the capacity it admitted the attempt on.
  PodBuildOptions pod_options = options_.pod_options;
  if (options_.node_health.maintenance_avoid_window > Duration::zero()) {
    pod_options.avoid_maintenance_before_unix =
        std::chrono::duration_cast<std::chrono::seconds>(
            (clock_.WallNow() + options_.node_health.maintenance_avoid_window).time_since_epoch())
            .count();
  }
  // ... and off the nodes whose cordon was decided but could not be written yet (kept for
  // retry): the cache that would show them unhealthy may be behind, as the cordon's write was;
  // and off the unhealthy nodes of their slice shape (of their pool when pinned), whether or not
  // those are cordoned.
  {
    const WallTime now = clock_.WallNow();
    for (std::string& node : cordoner_.PendingRetryNodes()) {
      pod_options.avoid_nodes.push_back(std::move(node));
    }
    if (pod_options.avoid_nodes.size() > kMaxAvoidedNodes) {
      pod_options.avoid_nodes.resize(kMaxAvoidedNodes);
    }
    for (const auto& node : nodes_.List()) {
      if (pod_options.avoid_nodes.size() == kMaxAvoidedNodes) break;
      if (node->labels.Value(policy::kAcceleratorLabel) != spec.tpu.accelerator ||
          node->labels.Value(policy::kTopologyLabel) != spec.tpu.topology ||
          (!plan.status.node_pools.empty() &&
           std::find(plan.status.node_pools.begin(), plan.status.node_pools.end(),
                     node->labels.Value(cache::kNodePoolLabel)) == plan.status.node_pools.end())) {
        continue;
      }
      if (policy::EvaluateNode(node.get(), options_.node_health, now).verdict ==
          policy::NodeVerdict::kUnhealthy) {
        pod_options.avoid_nodes.push_back(node->name);
      }
    }
    std::sort(pod_options.avoid_nodes.begin(), pod_options.avoid_nodes.end());
    pod_options.avoid_nodes.erase(
        std::unique(pod_options.avoid_nodes.begin(), pod_options.avoid_nodes.end()),
        pod_options.avoid_nodes.end());
  }
  // ... and, for a job Kueue admitted, onto the ResourceFlavors of its pod sets.
  if (options_.kueue != nullptr && options_.kueue->Manages(job)) {
    auto placements = options_.kueue->Placements(job);
    if (!placements) return std::unexpected(placements.error());
    pod_options.kueue_placement = std::move(*placements);
    pod_options.same_pool_per_slice = true;
  }
  if (plan.status.in_place) {
    pod_options.generation = plan.status.in_place->generation;
    pod_options.barrier_open = !plan.status.in_place->barrier_since;
  }
  std::vector<std::optional<kube::Error>> errors(plan.create.size());
  // One byte per pod, not std::vector<bool>: the creating threads write neighbouring elements at
  // once, and vector<bool> packs them into shared words (a data race that loses bits).
  std::vector<char> made(plan.create.size(), 0);
  std::vector<std::string> versions(plan.create.size());  // of each creation
  ParallelFor(plan.create.size(), options_.create_parallelism, [&](size_t i) {
    const auto& want = plan.create[i];
    // A worker is pinned to its slice's pool (a master to none).
    const size_t slice = static_cast<size_t>(spec.SliceOf(want.index));
    const std::vector<std::string>& pools = plan.status.node_pools;
    const std::string pool =
        want.type == policy::ReplicaType::kWorker && slice < pools.size() ? pools[slice] : "";
    // ... and off the nodes other workers of this plan are bound to (PodToCreate::avoid).
    std::optional<PodBuildOptions> own;
    if (!want.avoid.empty()) {
      own = pod_options;
      own->avoid_nodes.insert(own->avoid_nodes.end(), want.avoid.begin(), want.avoid.end());
      std::sort(own->avoid_nodes.begin(), own->avoid_nodes.end());
      own->avoid_nodes.erase(std::unique(own->avoid_nodes.begin(), own->avoid_nodes.end()),
                             own->avoid_nodes.end());
    }
    auto created = client_.Create(kube::Resource::Pods(), ns,
                                  BuildPod(job, spec, want.type, want.index, attempt,
                                           own ? *own : pod_options, pool, want.node, want.bind));
    if (created) {
      made[i] = 1;
      versions[i] = created->value("/metadata/resourceVersion"_json_pointer, std::string());
    } else if (!created.error().IsAlreadyExists()) {
      errors[i] = created.error();
    }
  });
  int count = 0;
  std::optional<kube::Error> first_error;
  for (size_t i = 0; i < plan.create.size(); ++i) {
    if (made[i] != 0) {
      ++count;
      expect.created.insert_or_assign(
          PodName(job.name, spec, plan.create[i].type, plan.create[i].index), versions[i]);
    }
    if (errors[i] && !first_error) first_error = errors[i];
  }
  log::Info(
      "created pods",
      {{"tpujob", key},
       {"attempt", attempt},
       {"created", count},
       {"wanted", plan.create.size()},
       {"duration_ms",
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_.Now() - begin).count()}});
  if (first_error) {
    log::Warn("cannot create pods", {{"tpujob", key}, {"error", first_error->ToString()}});
    return std::unexpected(*first_error);
  }
  return {};
}

}  // namespace tpujob::controller
