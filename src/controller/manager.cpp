#include "controller/manager.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "cache/store.h"
#include "metrics/http_server.h"

namespace tpujob::controller {
namespace {

// Enqueues the owning job of a pod (through its tpujob.dev/job-name label).
std::string JobKeyOfPod(const cache::PodInfo& pod) {
  auto it = pod.labels.find(std::string(cache::kJobNameLabel));
  if (it == pod.labels.end()) return {};
  return cache::ObjectKey(pod.ns, it->second);
}

}  // namespace

Manager::Manager(kube::Client& client, ManagerOptions options, Clock& clock)
    : client_(client), options_(std::move(options)), clock_(clock) {
  cache::ReflectorOptions pod_options;
  pod_options.name = "pods";
  pod_options.ns = options_.watch_namespace;
  // Only pods the operator created: keeps the cache proportional to the jobs, not the cluster.
  pod_options.label_selector = std::string(cache::kJobNameLabel);
  pods_ = std::make_unique<cache::Informer<cache::PodInfo>>(client_, kube::Resource::Pods(),
                                                            pod_options, clock_);
  cache::AddPodIndexers(pods_->store());

  cache::ReflectorOptions node_options;
  node_options.name = "nodes";
  nodes_ = std::make_unique<cache::Informer<cache::NodeInfo>>(client_, kube::Resource::Nodes(),
                                                              node_options, clock_);
  AddCordonJobIndexer(nodes_->store());

  cache::ReflectorOptions job_options;
  job_options.name = "tpujobs";
  job_options.ns = options_.watch_namespace;
  jobs_ = std::make_unique<cache::Informer<cache::TPUJobInfo>>(client_, kube::Resource::TPUJobs(),
                                                               job_options, clock_);

  queue_ = std::make_unique<workqueue::WorkQueue>(clock_);
  recorder_ = std::make_unique<EventRecorder>(client_, options_.events, clock_);
  cordoner_ =
      std::make_unique<Cordoner>(client_, nodes_->store(), *recorder_, options_.cordon, clock_);
  job_queue_ = std::make_unique<JobQueue>(client_, jobs_->store(), pods_->store(), nodes_->store(),
                                          options_.reconciler.node_health, clock_);
  options_.reconciler.admission = [this](const cache::TPUJobInfo& job, const policy::JobSpec&,
                                         const policy::JobStatus&) {
    return job_queue_->Admit(job);
  };
  reconciler_ =
      std::make_unique<TPUJobReconciler>(client_, jobs_->store(), pods_->store(), nodes_->store(),
                                         *recorder_, *cordoner_, options_.reconciler, clock_);
  node_queue_ = std::make_unique<workqueue::WorkQueue>(clock_);
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
}

Manager::~Manager() { Stop(); }

int Manager::health_port() const { return health_port_.load(); }

kube::Status Manager::Run() {
  metrics::HttpServer server(options_.health_address);
  server.Handle("/healthz", [] { return metrics::HttpResponse{200, "text/plain", "ok\n", {}}; });
  server.Handle("/readyz", [this] {
    if (ready_.load()) return metrics::HttpResponse{200, "text/plain", "ok\n", {}};
    return metrics::HttpResponse{503, "text/plain", "caches not synced\n", {}};
  });
  if (auto started = server.Start(); !started) return started;
  health_port_ = server.port();

  const auto begin = clock_.Now();
  pods_->Start();
  nodes_->Start();
  jobs_->Start();
  const auto timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.cache_sync_timeout);
  const bool synced =
      pods_->WaitForSync(timeout) && nodes_->WaitForSync(timeout) && jobs_->WaitForSync(timeout);
  {
    std::lock_guard<std::mutex> guard(stop_mu_);
    if (stop_requested_) return {};
  }
  if (!synced) {
    return std::unexpected(kube::Error::Transport(
        "caches did not sync within " + std::to_string(options_.cache_sync_timeout.count()) +
        "s; is the API server reachable and the TPUJob CRD installed (kubectl apply -f crds/)?"));
  }
  // The initial LIST parses every page as JSON before projecting it; hand those freed pages
  // back to the system so the resident size reflects the compact cache, not the transient peak.
  malloc_trim(0);
  spdlog::info("msg=\"caches synced\" pods={} nodes={} tpujobs={} duration_ms={}",
               pods_->store().Size(), nodes_->store().Size(), jobs_->store().Size(),
               std::chrono::duration_cast<std::chrono::milliseconds>(clock_.Now() - begin).count());

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
  ready_ = true;
  {
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait(lock, [this] { return stop_requested_; });
  }
  ready_ = false;
  spdlog::info("msg=\"shutting down: draining the work queue\" in_flight={}",
               queue_->Stats().in_flight);
  job_queue_->Stop();
  queue_->ShutDownWithDrain();
  node_queue_->ShutDownWithDrain();
  for (auto& worker : workers) worker.join();
  jobs_->Stop();
  nodes_->Stop();
  pods_->Stop();
  recorder_->Flush(std::chrono::seconds(5));
  server.Stop();
  spdlog::info("msg=\"stopped\"");
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
}

void Manager::Worker(
    workqueue::WorkQueue& queue, std::string_view what,
    const std::function<kube::Result<ReconcileResult>(const std::string&)>& reconcile) {
  while (auto key = queue.Get()) {
    kube::Result<ReconcileResult> result;
    try {
      result = reconcile(*key);
    } catch (const std::exception& e) {
      // A bug must not take the whole operator down with it: log, back off, retry the key.
      spdlog::error("msg=\"reconcile threw\" {}={} error={}", what, *key, LogQuote(e.what()));
      result = std::unexpected(kube::Error::Decode(e.what()));
    }
    if (!result) {
      spdlog::warn("msg=\"reconcile failed, will retry\" {}={} retries={} error={}", what, *key,
                   queue.NumRequeues(*key), LogQuote(result.error().ToString()));
      queue.AddRateLimited(*key);
    } else {
      queue.Forget(*key);
      if (result->requeue_after) queue.AddAfter(*key, *result->requeue_after);
    }
    queue.Done(*key);
  }
}

}  // namespace tpujob::controller
