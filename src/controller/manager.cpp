#include "controller/manager.h"

#include <malloc.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "cache/contents.h"
#include "cache/store.h"
#include "controller/metrics.h"
#include "policy/goodput.h"
#include "policy/job_spec.h"

namespace tpujob::controller {
namespace {

// Enqueues the owning job of a pod (through its tpujob.dev/job-name label).
std::string JobKeyOfPod(const cache::PodInfo& pod) {
  auto it = pod.labels.find(std::string(cache::kJobNameLabel));
  if (it == pod.labels.end()) return {};
  return cache::ObjectKey(pod.ns, it->second);
}

// Work-queue latencies into the metrics, labelled with the queue's name.
workqueue::WorkQueueOptions QueueMetrics(const std::string& name) {
  metrics::Histogram& waited = Metrics().workqueue_queue_duration.With({name});
  metrics::Histogram& worked = Metrics().workqueue_work_duration.With({name});
  return {.on_queue_latency =
              [&waited](Duration d) { waited.Observe(std::chrono::duration<double>(d).count()); },
          .on_work_duration =
              [&worked](Duration d) { worked.Observe(std::chrono::duration<double>(d).count()); }};
}

}  // namespace

Manager::Manager(kube::Client& client, ManagerOptions options, Clock& clock)
    : elector_(options.leader_election
                   ? std::make_unique<LeaderElector>(
                         options.lease_client != nullptr ? *options.lease_client : client,
                         *options.leader_election, clock)
                   : nullptr),
      fenced_client_(elector_ ? std::make_unique<FencedClient>(client, *elector_) : nullptr),
      client_(fenced_client_ ? *fenced_client_ : client),
      options_(std::move(options)),
      clock_(clock) {
  // With a watch idle timeout, the server must end every watch well before it (see
  // kube::Config::watch_idle_timeout): a healthy quiet watch then always delivers its end in
  // time, and only a dead connection stays silent that long.
  cache::ReflectorOptions base;
  base.watch_list = options_.watch_list;
  if (options_.watch_idle_timeout.count() > 0) {
    base.min_watch_timeout = options_.watch_idle_timeout * 6 / 10;
    base.max_watch_timeout = options_.watch_idle_timeout * 8 / 10;
  }
  cache::ReflectorOptions pod_options = base;
  pod_options.name = "pods";
  pod_options.ns = options_.watch_namespace;
  // Only pods the operator created: keeps the cache proportional to the jobs, not the cluster.
  pod_options.label_selector = std::string(cache::kJobNameLabel);
  pods_ = std::make_unique<cache::Informer<cache::PodInfo>>(client_, kube::Resource::Pods(),
                                                            pod_options, clock_);
  cache::AddPodIndexers(pods_->store());

  cache::ReflectorOptions node_options = base;
  node_options.name = "nodes";
  nodes_ = std::make_unique<cache::Informer<cache::NodeInfo>>(client_, kube::Resource::Nodes(),
                                                              node_options, clock_);
  AddCordonJobIndexer(nodes_->store());

  cache::ReflectorOptions job_options = base;
  job_options.name = "tpujobs";
  job_options.ns = options_.watch_namespace;
  jobs_ = std::make_unique<cache::Informer<cache::TPUJobInfo>>(client_, kube::Resource::TPUJobs(),
                                                               job_options, clock_);

  if (options_.kueue != ManagerOptions::KueueMode::kOff) {
    cache::ReflectorOptions workload_options = base;
    workload_options.name = "workloads";
    workload_options.ns = options_.watch_namespace;
    // Only the Workloads the operator wrote (BuildWorkload labels them with their job).
    workload_options.label_selector = std::string(cache::kJobNameLabel);
    workloads_ = std::make_unique<cache::Informer<cache::WorkloadInfo>>(
        client_, kube::Resource::Workloads(), workload_options, clock_);
    kueue_ = std::make_unique<KueueAdapter>(client_, workloads_->store(), clock_);
    options_.reconciler.kueue = kueue_.get();
  }

  queue_ = std::make_unique<workqueue::WorkQueue>(clock_, nullptr, QueueMetrics("tpujob"));
  recorder_ = std::make_unique<EventRecorder>(client_, options_.events, clock_);
  cordoner_ =
      std::make_unique<Cordoner>(client_, nodes_->store(), *recorder_, options_.cordon, clock_);
  if (options_.cordon_state) cordoner_->KeepStateIn(*options_.cordon_state);
  job_queue_ = std::make_unique<JobQueue>(client_, jobs_->store(), pods_->store(), nodes_->store(),
                                          options_.reconciler.node_health, clock_);
  options_.reconciler.admission = [this](const cache::TPUJobInfo& job, const policy::JobSpec&,
                                         const policy::JobStatus&) {
    return job_queue_->Admit(job);
  };
  job_queue_->set_preemption(options_.preemption);
  if (kueue_) {
    job_queue_->set_external([this](const cache::TPUJobInfo& job) { return kueue_->Manages(job); });
  }
  if (options_.preemption) {
    options_.reconciler.preemption = [this](const cache::TPUJobInfo& job) {
      return job_queue_->Preemption(job);
    };
  }
  reconciler_ =
      std::make_unique<TPUJobReconciler>(client_, jobs_->store(), pods_->store(), nodes_->store(),
                                         *recorder_, *cordoner_, options_.reconciler, clock_);
  node_queue_ = std::make_unique<workqueue::WorkQueue>(clock_, nullptr, QueueMetrics("node"));
  node_reconciler_ = std::make_unique<NodeReconciler>(client_, nodes_->store(), *cordoner_,
                                                      *recorder_, options_.nodes, clock_);
  cordoner_->SetRetryHook([this](const std::string& node) { node_queue_->AddRateLimited(node); });

  // Every change of a job, a pod or a node may change the queue's plan (JobQueue coalesces).
  auto enqueue_job = [this](const std::shared_ptr<const cache::TPUJobInfo>& job) {
    queue_->Add(cache::ObjectKey(job->ns, job->name));
    job_queue_->Invalidate();
  };
  jobs_->AddEventHandlers(
      {.on_add = enqueue_job,
       .on_update = [enqueue_job](const auto&, const auto& job) { enqueue_job(job); },
       .on_delete = enqueue_job});
  auto enqueue_owner = [this](const std::shared_ptr<const cache::PodInfo>& pod) {
    const std::string key = JobKeyOfPod(*pod);
    if (!key.empty()) queue_->Add(key);
    job_queue_->Invalidate();
  };
  pods_->AddEventHandlers(
      {.on_add = enqueue_owner,
       .on_update = [enqueue_owner](const auto&, const auto& pod) { enqueue_owner(pod); },
       .on_delete = enqueue_owner});
  if (workloads_) {
    // Kueue admitted, evicted or finished a job's Workload: the job decides again.
    auto enqueue_job_of = [this](const std::shared_ptr<const cache::WorkloadInfo>& workload) {
      const std::string_view job = workload->labels.Value(cache::kJobNameLabel);
      if (!job.empty()) queue_->Add(cache::ObjectKey(workload->ns.view(), job));
    };
    workloads_->AddEventHandlers(
        {.on_add = enqueue_job_of,
         .on_update = [enqueue_job_of](const auto&, const auto& w) { enqueue_job_of(w); },
         .on_delete = enqueue_job_of});
  }
  // A node's health or maintenance signals changed: every job with a pod there decides again.
  // The job a node was cordoned for also decides again (status.cordonedNodes), and the node
  // reconciler looks at nodes it may have work for.
  auto enqueue_jobs_on_node = [this](const std::shared_ptr<const cache::NodeInfo>& node) {
    for (const auto& pod : pods_->store().ByIndex(cache::kPodsByNodeIndex, node->name)) {
      const std::string key = JobKeyOfPod(*pod);
      if (!key.empty()) queue_->Add(key);
    }
    if (policy::IsCordonedByUs(*node)) {
      const std::string_view job = node->annotations.Value(policy::kCordonJobAnnotation);
      if (!job.empty()) queue_->Add(std::string(job));
    }
    if (node_reconciler_->Interested(*node)) node_queue_->Add(node->name);
    job_queue_->Invalidate();
  };
  nodes_->AddEventHandlers(
      {.on_add = enqueue_jobs_on_node,
       .on_update =
           [enqueue_jobs_on_node](const auto& before, const auto& after) {
             // Heartbeats change nothing the policy reads; skip them to keep idle cost low.
             if (before->ready != after->ready || before->unschedulable != after->unschedulable ||
                 before->taints != after->taints || before->labels != after->labels ||
                 before->annotations != after->annotations ||
                 before->tpu_allocatable != after->tpu_allocatable ||
                 before->conditions.size() != after->conditions.size() ||
                 !std::equal(before->conditions.begin(), before->conditions.end(),
                             after->conditions.begin(), [](const auto& a, const auto& b) {
                               return a.type == b.type && a.status == b.status &&
                                      a.last_transition_time == b.last_transition_time;
                             })) {
               enqueue_jobs_on_node(after);
             }
           },
       .on_delete = enqueue_jobs_on_node});
  collector_ = metrics::DefaultRegistry().AddCollector([this] { Collect(); });
}

Manager::~Manager() {
  Stop();
  // Before the informers go: a loss reported now must find them still there.
  if (elector_) elector_->Stop();
  metrics::DefaultRegistry().RemoveCollector(collector_);
}

void Manager::Collect() {
  OperatorMetrics& m = Metrics();
  std::map<policy::Phase, int> phases;
  int waiting = 0;
  std::optional<WallTime> oldest;
  std::set<std::vector<std::string>> goodput_series;
  const WallTime now = clock_.WallNow();
  for (const auto& job : jobs_->store().List()) {
    // Another controller's job (MultiKueue's, run by a worker cluster) counts where it runs.
    if (!policy::ManagedByUs(*job)) continue;
    const policy::JobStatus status = policy::JobStatus::FromJson(job->status);
    ++phases[status.phase];
    // Suspended jobs are left out: their low goodput is their owner's choice, not a problem.
    if (status.goodput && !policy::IsTerminal(status.phase) &&
        status.phase != policy::Phase::kSuspended) {
      const policy::Goodput live = policy::LiveGoodput(*status.goodput, now);
      if (auto ratio = policy::GoodputRatio(live)) {
        std::vector<std::string> labels = {std::string(job->ns.view()), job->name};
        m.job_goodput.With(labels).Set(*ratio);
        m.job_lost_chip_seconds.With(labels).Set(static_cast<double>(live.LostChipMs()) / 1000.0);
        goodput_series.insert(std::move(labels));
      }
    }
    if (status.phase != policy::Phase::kQueued) continue;
    ++waiting;
    if (status.queued_at && (!oldest || *status.queued_at < *oldest)) oldest = status.queued_at;
  }
  for (policy::Phase phase :
       {policy::Phase::kQueued, policy::Phase::kStarting, policy::Phase::kRunning,
        policy::Phase::kRestarting, policy::Phase::kSuspended, policy::Phase::kSucceeded,
        policy::Phase::kFailed}) {
    m.jobs.With({policy::ToString(phase)}).Set(phases[phase]);
  }
  // Finished and deleted jobs' series go.
  m.job_goodput.RemoveExcept(goodput_series);
  m.job_lost_chip_seconds.RemoveExcept(goodput_series);
  m.queue_length.With({}).Set(waiting);
  m.queue_oldest_wait.With({}).Set(
      oldest ? std::max(0.0, std::chrono::duration<double>(now - *oldest).count()) : 0.0);
  m.cache_objects.With({"pods"}).Set(static_cast<double>(pods_->store().Size()));
  m.cache_objects.With({"nodes"}).Set(static_cast<double>(nodes_->store().Size()));
  m.cache_objects.With({"tpujobs"}).Set(static_cast<double>(jobs_->store().Size()));
  if (kueue_ && kueue_->enabled()) {
    m.cache_objects.With({"workloads"}).Set(static_cast<double>(workloads_->store().Size()));
  }
  m.watch_silences.With({"pods"}).SetCumulative(static_cast<double>(pods_->stats().silent_watches));
  m.watch_silences.With({"nodes"}).SetCumulative(
      static_cast<double>(nodes_->stats().silent_watches));
  m.watch_silences.With({"tpujobs"})
      .SetCumulative(static_cast<double>(jobs_->stats().silent_watches));
  for (const auto& [resource, stats] :
       {std::pair<std::string_view, cache::ReflectorStats>{"pods", pods_->stats()},
        {"nodes", nodes_->stats()},
        {"tpujobs", jobs_->stats()}}) {
    m.watch_events.With({resource, "true"})
        .SetCumulative(static_cast<double>(stats.events - stats.unchanged_events));
    m.watch_events.With({resource, "false"})
        .SetCumulative(static_cast<double>(stats.unchanged_events));
  }
  m.cordoned_nodes.With({}).Set(cordoner_->CordonedByUs());
  m.cordon_limit_nodes.With({}).Set(
      policy::CordonLimit(cordoner_->policy(), static_cast<int>(nodes_->store().Size())));
  for (const auto& [name, queue] :
       {std::pair<std::string_view, workqueue::WorkQueue*>{"tpujob", queue_.get()},
        {"node", node_queue_.get()}}) {
    RecordWorkQueue(name, queue->Stats());
  }
}

int Manager::health_port() const { return health_port_.load(); }

metrics::HttpResponse Manager::CacheContentsResponse() const {
  // Standing by, the informers have not started: each cache answers unsynced and empty.
  const nlohmann::json contents = cache::CacheContentsJson(
      {cache::DescribeCache(*pods_), cache::DescribeCache(*nodes_), cache::DescribeCache(*jobs_)});
  return metrics::HttpResponse{200, "application/json", contents.dump() + "\n", {}};
}

std::vector<std::string> Manager::HealthCheck() {
  if (!watching_.load()) return {};
  std::vector<WatchActivity> watches = {
      {"pods", pods_->stats().last_activity},
      {"nodes", nodes_->stats().last_activity},
      {"tpujobs", jobs_->stats().last_activity},
  };
  if (kueue_ && kueue_->enabled()) {
    watches.push_back({"workloads", workloads_->stats().last_activity});
  }
  const std::vector<QueueActivity> queues = {
      {"tpujob", queue_->LongestRunningProcessor()},
      {"node", node_queue_->LongestRunningProcessor()},
  };
  const TimePoint since{TimePoint::duration(watching_since_.load())};
  std::vector<std::string> problems =
      HealthProblems(watches, queues, since, clock_.Now(), options_.health);
  const bool unhealthy = !problems.empty();
  if (reported_unhealthy_.exchange(unhealthy) != unhealthy) {
    if (unhealthy) {
      std::string all;
      for (const std::string& problem : problems) all += (all.empty() ? "" : "; ") + problem;
      log::Error("unhealthy: /healthz fails until this clears", {{"problems", all}});
    } else {
      log::Info("healthy again");
    }
  }
  return problems;
}

kube::Status Manager::Run() {
  metrics::HttpServer server(options_.health_address);
  server.Handle("/healthz", [this] {
    const std::vector<std::string> problems = HealthCheck();
    if (problems.empty()) return metrics::HttpResponse{200, "text/plain", "ok\n", {}};
    std::string body = "unhealthy:\n";
    for (const std::string& problem : problems) body += "  " + problem + "\n";
    return metrics::HttpResponse{500, "text/plain", body, {}};
  });
  server.Handle("/readyz", [this] {
    if (ready_.load()) return metrics::HttpResponse{200, "text/plain", "ok\n", {}};
    if (standing_by_.load()) {
      // A standby is healthy and ready to take over: not a reason to restart or alert.
      const std::string holder = elector_->ObservedHolder();
      std::string body = "standing by: waiting for the leader lease " + elector_->LeaseKey();
      if (!holder.empty()) body += " (held by " + holder + ")";
      return metrics::HttpResponse{200, "text/plain", body + "\n", {}};
    }
    return metrics::HttpResponse{503, "text/plain", "caches not synced\n", {}};
  });
  if (options_.debug_cache_endpoint) {
    server.Handle("/debug/cache", [this] { return CacheContentsResponse(); });
    log::Warn(
        "serving /debug/cache: every cached object's name to whoever reaches the health "
        "address",
        {{"address", options_.health_address}});
  }
  const bool shared_server =
      options_.metrics_address.empty() || options_.metrics_address == options_.health_address;
  if (shared_server && (options_.metrics_tls || options_.metrics_authorizer)) {
    return std::unexpected(kube::Error::Config(
        "secure metrics need their own address: the health address serves plain HTTP"));
  }
  auto serve_metrics = [authorizer =
                            options_.metrics_authorizer](const metrics::HttpRequest& request) {
    if (authorizer) {
      const metrics::AuthResult auth = authorizer->Authorize(request.authorization, request.path);
      if (auth.outcome != metrics::AuthOutcome::kAllowed) {
        if (auth.outcome == metrics::AuthOutcome::kError) {
          log::Warn("scrape not authorized: review failed",
                    {{"path", request.path}, {"error", auth.reason}});
        } else {
          log::Debug("scrape refused", {{"path", request.path},
                                        {"status", auth.HttpStatus()},
                                        {"user", auth.user},
                                        {"reason", auth.reason}});
        }
        metrics::HttpResponse refused{
            auth.HttpStatus(), "text/plain; charset=utf-8", auth.reason + "\n", {}};
        if (auth.outcome == metrics::AuthOutcome::kUnauthenticated) {
          refused.headers["WWW-Authenticate"] = "Bearer realm=\"tpujob-operator\"";
        }
        return refused;
      }
    }
    return metrics::HttpResponse{
        200, "text/plain; version=0.0.4; charset=utf-8", metrics::DefaultRegistry().Render(), {}};
  };
  if (shared_server) server.Handle("/metrics", serve_metrics);
  if (auto started = server.Start(); !started) return started;
  health_port_ = server.port();
  metrics::HttpServer metrics_server(shared_server ? std::string() : options_.metrics_address,
                                     options_.metrics_tls);
  if (!shared_server) {
    metrics_server.Handle("/metrics", serve_metrics);
    if (auto started = metrics_server.Start(); !started) return started;
  }
  metrics_port_ = shared_server ? server.port() : metrics_server.port();

  auto leadership_lost = [this]() -> std::optional<kube::Error> {
    std::lock_guard<std::mutex> guard(stop_mu_);
    if (!leadership_lost_) return std::nullopt;
    return kube::Error::Cancelled("leader election lost (lease " + elector_->LeaseKey() +
                                  ", identity " + elector_->options().identity +
                                  "): " + *leadership_lost_);
  };
  if (elector_) {
    // Stand by until this replica holds the Lease: the endpoints answer, nothing else runs.
    standing_by_ = true;
    LeaderCallbacks callbacks;
    callbacks.on_started_leading = [this] {
      { std::lock_guard<std::mutex> guard(stop_mu_); }
      stop_cv_.notify_all();
    };
    callbacks.on_stopped_leading = [this](const std::string& reason) { OnLeadershipLost(reason); };
    elector_->Start(std::move(callbacks));
    {
      std::unique_lock<std::mutex> lock(stop_mu_);
      stop_cv_.wait(lock, [this] { return stop_requested_ || elector_->IsLeader(); });
    }
    standing_by_ = false;
    if (!elector_->IsLeader()) {
      elector_->Stop();
      if (auto lost = leadership_lost()) return std::unexpected(*lost);
      return {};
    }
  }

  const auto begin = clock_.Now();
  watching_since_ = begin.time_since_epoch().count();
  pods_->Start();
  nodes_->Start();
  jobs_->Start();
  watching_ = true;
  const auto timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.cache_sync_timeout);
  std::optional<kube::Error> kueue_error;
  if (kueue_) {
    if (auto found = DetectKueue(begin + options_.cache_sync_timeout); found) {
      kueue_->set_enabled(*found);
      if (*found) workloads_->Start();
    } else {
      kueue_error = found.error();
    }
  }
  const bool synced = !kueue_error && pods_->WaitForSync(timeout) && nodes_->WaitForSync(timeout) &&
                      jobs_->WaitForSync(timeout) &&
                      (!kueue_ || !kueue_->enabled() || workloads_->WaitForSync(timeout));
  {
    std::lock_guard<std::mutex> guard(stop_mu_);
    if (stop_requested_ && !leadership_lost_) {
      if (elector_) elector_->Stop();
      return {};
    }
  }
  if (auto lost = leadership_lost()) return std::unexpected(*lost);
  if (kueue_error && kueue_error->kind == kube::ErrorKind::kConfig) {
    return std::unexpected(*kueue_error);
  }
  if (!synced) {
    return std::unexpected(kube::Error::Transport(
        "caches did not sync within " + std::to_string(options_.cache_sync_timeout.count()) +
        "s; is the API server reachable and the TPUJob CRD installed (kubectl apply -f crds/)?"));
  }
  // A paged LIST parses each page as JSON before projecting it (a watch list, each object);
  // hand the freed pages back to the system so the resident size reflects the compact cache,
  // not the transient peak. The heap figures tell the live data (in use) from what the
  // allocator still keeps (free, within its arenas).
  malloc_trim(0);
  const struct mallinfo2 heap = mallinfo2();
  log::Info("caches synced",
            {{"pods", pods_->store().Size()},
             {"nodes", nodes_->store().Size()},
             {"tpujobs", jobs_->store().Size()},
             {"duration_ms",
              std::chrono::duration_cast<std::chrono::milliseconds>(clock_.Now() - begin).count()},
             {"heap_inuse_kib", (heap.uordblks + heap.hblkhd) / 1024},
             {"heap_free_kib", heap.fordblks / 1024},
             {"heap_arena_kib", heap.arena / 1024}});

  if (kueue_ && kueue_->enabled()) {
    log::Info("Kueue admits the TPUJobs that name a LocalQueue (label kueue.x-k8s.io/queue-name)",
              {{"workloads", workloads_->store().Size()}});
  }

  std::vector<std::thread> workers;
  for (int i = 0; i < std::max(1, options_.workers); ++i)
    workers.emplace_back([this] {
      Worker(*queue_, "tpujob",
             [this](const std::string& key) { return reconciler_->Reconcile(key); });
    });
  job_queue_->Start([this](const std::string& key) { queue_->Add(key); });
  workers.emplace_back([this] {
    Worker(*node_queue_, "node",
           [this](const std::string& name) { return node_reconciler_->Reconcile(name); });
  });
  // Nodes the operator cordoned before it (re)started: their automatic uncordon is due.
  for (const auto& node : nodes_->store().List()) {
    if (node_reconciler_->Interested(*node)) node_queue_->Add(node->name);
  }
  Metrics().leader.With({}).Set(1);
  ready_ = true;
  {
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait(lock, [this] { return stop_requested_; });
  }
  ready_ = false;
  watching_ = false;
  Metrics().leader.With({}).Set(0);
  const std::optional<kube::Error> lost = leadership_lost();
  if (lost) {
    // Nothing may be written any more (the fence refuses it): drop the queued keys.
    log::Info("shutting down: leadership lost, abandoning queued work",
              {{"queued", queue_->Stats().depth}});
  } else {
    log::Info("shutting down: draining the work queue", {{"in_flight", queue_->Stats().in_flight}});
  }
  job_queue_->Stop();
  queue_->ShutDownWithDrain();
  node_queue_->ShutDownWithDrain();
  for (auto& worker : workers) worker.join();
  if (workloads_) workloads_->Stop();
  jobs_->Stop();
  nodes_->Stop();
  pods_->Stop();
  if (!lost) recorder_->Flush(std::chrono::seconds(5));
  // Released only now, after the drain wrote its last: the successor never overlaps with it.
  if (elector_) elector_->Stop();
  server.Stop();
  metrics_server.Stop();
  if (lost) return std::unexpected(*lost);
  log::Info("stopped");
  return {};
}

void Manager::Stop() {
  {
    std::lock_guard<std::mutex> guard(stop_mu_);
    if (stop_requested_) return;
    stop_requested_ = true;
  }
  stop_cv_.notify_all();
  pods_->Stop();
  nodes_->Stop();
  jobs_->Stop();
  if (workloads_) workloads_->Stop();
}

kube::Result<bool> Manager::DetectKueue(TimePoint deadline) {
  const bool required = options_.kueue == ManagerOptions::KueueMode::kRequired;
  kube::ListOptions probe;
  probe.limit = 1;
  for (;;) {
    auto answer = client_.List(kube::Resource::Workloads(), options_.watch_namespace, probe);
    if (answer) {
      log::Info("Kueue found: it admits the TPUJobs labelled kueue.x-k8s.io/queue-name");
      return true;
    }
    const kube::Error& error = answer.error();
    if (error.IsNotFound() || error.IsForbidden()) {
      const std::string why =
          error.IsNotFound()
              ? "Kueue's Workload API (kueue.x-k8s.io/v1beta2) is not served"
              : "the operator may not list Kueue Workloads (RBAC): " + error.ToString();
      if (required) return std::unexpected(kube::Error::Config("--kueue=true: " + why));
      if (error.IsNotFound()) {
        log::Info("Kueue not found: every TPUJob is admitted by the operator's own queue",
                  {{"why", why}});
      } else {
        log::Warn(
            "Kueue integration off: TPUJobs labelled kueue.x-k8s.io/queue-name are admitted by "
            "the operator's own queue, outside Kueue's quotas",
            {{"why", why}});
      }
      return false;
    }
    std::unique_lock<std::mutex> lock(stop_mu_);
    if (stop_requested_ || clock_.Now() >= deadline) {
      return std::unexpected(
          kube::Error::Transport("cannot tell whether Kueue is installed: " + error.ToString()));
    }
    stop_cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_requested_; });
  }
}

void Manager::OnLeadershipLost(const std::string& reason) {
  {
    std::lock_guard<std::mutex> guard(stop_mu_);
    if (!leadership_lost_) leadership_lost_ = reason;
  }
  abandon_work_ = true;
  Stop();
}

void Manager::Worker(
    workqueue::WorkQueue& queue, std::string_view what,
    const std::function<kube::Result<ReconcileResult>(const std::string&)>& reconcile) {
  OperatorMetrics& m = Metrics();
  const std::string controller(what);
  metrics::Histogram& duration = m.reconcile_duration.With({controller});
  m.reconcile_errors.With({controller});  // present from the start, at 0
  while (auto key = queue.Get()) {
    if (abandon_work_.load()) {
      queue.Done(*key);
      continue;
    }
    kube::Result<ReconcileResult> result;
    const TimePoint begin = clock_.Now();
    try {
      result = reconcile(*key);
    } catch (const std::exception& e) {
      // A bug must not take the whole operator down with it: log, back off, retry the key.
      log::Error("reconcile threw", {{what, *key}, {"error", e.what()}});
      result = std::unexpected(kube::Error::Decode(e.what()));
    }
    duration.Observe(std::chrono::duration<double>(clock_.Now() - begin).count());
    m.reconcile_total
        .With({controller, !result                 ? "error"
                           : result->requeue_after ? "requeue"
                                                   : "success"})
        .Inc();
    if (!result) m.reconcile_errors.With({controller}).Inc();
    if (!result) {
      log::Warn("reconcile failed, will retry", {{what, *key},
                                                 {"retries", queue.NumRequeues(*key)},
                                                 {"error", result.error().ToString()}});
      queue.AddRateLimited(*key);
    } else {
      queue.Forget(*key);
      if (result->requeue_after) queue.AddAfter(*key, *result->requeue_after);
    }
    queue.Done(*key);
  }
}

}  // namespace tpujob::controller
