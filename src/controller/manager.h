// Manager: wires the informers (Pods, Nodes, TPUJobs), the work queue, the reconcile workers and
// the health endpoints, as controller-runtime's manager does.
//
// Start-up order: informers start; /healthz answers at once; workers start only after every
// cache has synced, and only then does /readyz turn 200. Event handlers only enqueue keys.
// Stop() shuts the queue down, lets in-flight reconciles finish (drain), stops the informers
// and the HTTP server; Run() then returns.
//
// With leader election (ManagerOptions::leader_election), the endpoints start first and the
// replica stands by (/healthz 200, /readyz 200 "standing by") until it holds the Lease; only
// then do the informers and workers start. Every write goes through a FencedClient, so nothing
// is written unless this replica holds a fresh Lease. Losing the Lease abandons the queued work
// and Run() returns an error ("leader election lost"): the process is expected to exit. A
// graceful Stop() drains first, then releases the Lease.
//
// With ManagerOptions::debug_cache_endpoint, /debug/cache shows what the caches hold (object
// identities only, never their contents), served from a snapshot of each store.
//
// Thread-safety: Stop() may be called from any thread, once Run() is running or before.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/clock.h"
#include "cache/reflector.h"
#include "controller/cordoner.h"
#include "controller/event_recorder.h"
#include "controller/health.h"
#include "controller/job_queue.h"
#include "controller/leader_election.h"
#include "controller/node_reconciler.h"
#include "controller/tpujob_reconciler.h"
#include "kube/client.h"
#include "metrics/auth.h"
#include "metrics/http_server.h"
#include "metrics/tls.h"
#include "workqueue/queue.h"

namespace tpujob::controller {

struct ManagerOptions {
  std::string watch_namespace;  // "" = all namespaces
  int workers = 4;
  std::string health_address = ":8081";
  // Serves /metrics; "" or the health address: served there (plain HTTP only).
  std::string metrics_address = ":8080";
  // Set: /metrics is served over HTTPS with this certificate, on its own listener.
  std::optional<metrics::TlsFiles> metrics_tls;
  // Set: a scrape is served only when this allows it (401/403/500 otherwise; metrics/auth.h).
  std::shared_ptr<metrics::RequestAuthorizer> metrics_authorizer;
  std::chrono::seconds cache_sync_timeout{120};
  // Caches sync by watch lists (cache::ReflectorOptions::watch_list); --watch-list.
  bool watch_list = true;
  TPUJobReconcilerOptions reconciler;
  // Gang preemption by priority (policy/preemption.h); --enable-preemption.
  bool preemption = true;
  // Whether Kueue admits the jobs that name a LocalQueue (policy/kueue.h; --kueue): kAuto asks
  // the API server whether Kueue's Workload API is served, once, when this replica starts
  // working (after its endpoints answer, and after it won the Lease); kRequired fails Run()
  // when it is not. Found, the Workloads the operator writes are cached and kept.
  enum class KueueMode { kOff, kAuto, kRequired };
  KueueMode kueue = KueueMode::kAuto;
  // The client's kube::Config::watch_idle_timeout: when set, the reflectors ask the server to
  // end their watches after 60-80% of it. 0: client-go's 5-10 minutes.
  std::chrono::seconds watch_idle_timeout{0};
  EventRecorderOptions events;
  policy::CordonPolicy cordon;
  // Set: the cordon safety limits' memory is kept in this ConfigMap for the next leader
  // (Cordoner::KeepStateIn). Unset: rebuilt from the nodes alone after a restart.
  std::optional<CordonStateLocation> cordon_state;
  NodeReconcilerOptions nodes;
  // Set: run only while this replica holds the Lease (see above). Unset: always run.
  std::optional<LeaderElectionOptions> leader_election;
  // The client the leader elector reads and writes the Lease with; null: the manager's client.
  // A client of its own (with its own rate limiter, as controller-runtime gives leader election)
  // keeps renewals from queueing behind a burst of the controllers' requests.
  kube::Client* lease_client = nullptr;
  // When /healthz fails: a reconcile stuck, or a watch silent (controller/health.h).
  HealthLimits health;
  // Serve /debug/cache on the health address: the identity (namespace, name, uid,
  // resourceVersion) of every object in the Pod, Node and TPUJob caches, with each informer's
  // scope and last synced resourceVersion, as JSON (cache/contents.h), to compare with a fresh
  // `kubectl get`. Off: the path is not served (404). The health address is plain HTTP without
  // authentication, so whoever reaches it could read every cached object's name: a debugging
  // aid, off by default (--debug-cache-endpoint).
  bool debug_cache_endpoint = false;
};

class Manager {
 public:
  Manager(kube::Client& client, ManagerOptions options, Clock& clock = Clock::Real());
  ~Manager();

  // Blocks until Stop(). Returns an error when the endpoints cannot listen or the caches do not
  // sync within the timeout.
  kube::Status Run();
  void Stop();

  bool Ready() const { return ready_.load(); }
  int health_port() const;
  // Whether this replica leads: always true without leader election.
  bool IsLeader() const { return elector_ == nullptr || elector_->IsLeader(); }
  int metrics_port() const { return metrics_port_.load(); }

  cache::Informer<cache::PodInfo>& pods() { return *pods_; }
  cache::Informer<cache::NodeInfo>& nodes() { return *nodes_; }
  cache::Informer<cache::TPUJobInfo>& jobs() { return *jobs_; }

 private:
  // Copies state into the gauges before a scrape (jobs by phase, queue, caches, work queues).
  void Collect();
  // What /healthz reports: empty while healthy, and always empty while standing by.
  std::vector<std::string> HealthCheck();
  // What /debug/cache answers (see ManagerOptions::debug_cache_endpoint).
  metrics::HttpResponse CacheContentsResponse() const;
  // Processes keys of `queue` with `reconcile` until the queue shuts down, as a
  // controller-runtime worker: errors back off per key, requeue_after schedules the key again.
  void Worker(workqueue::WorkQueue& queue, std::string_view what,
              const std::function<kube::Result<ReconcileResult>(const std::string&)>& reconcile);

  // --kueue: whether Kueue's Workload API is served (kube::Error when it cannot be told before
  // `deadline`, or when it is required and missing). Interrupted by Stop().
  kube::Result<bool> DetectKueue(TimePoint deadline);

  // Ends the work at once after the Lease was lost; Run() then returns the error.
  void OnLeadershipLost(const std::string& reason);

  // With leader election, client_ is fenced_client_ (so these come first).
  std::unique_ptr<LeaderElector> elector_;
  std::unique_ptr<FencedClient> fenced_client_;
  kube::Client& client_;
  ManagerOptions options_;
  Clock& clock_;
  std::unique_ptr<cache::Informer<cache::PodInfo>> pods_;
  std::unique_ptr<cache::Informer<cache::NodeInfo>> nodes_;
  std::unique_ptr<cache::Informer<cache::TPUJobInfo>> jobs_;
  std::unique_ptr<cache::Informer<cache::WorkloadInfo>> workloads_;  // with options_.kueue
  std::unique_ptr<KueueAdapter> kueue_;
  std::unique_ptr<workqueue::WorkQueue> queue_;
  std::unique_ptr<EventRecorder> recorder_;
  std::unique_ptr<Cordoner> cordoner_;
  std::unique_ptr<JobQueue> job_queue_;
  std::unique_ptr<TPUJobReconciler> reconciler_;
  std::unique_ptr<workqueue::WorkQueue> node_queue_;  // node names, for node_reconciler_
  std::unique_ptr<NodeReconciler> node_reconciler_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> watching_{false};              // informers running: health is judged
  std::atomic<TimePoint::rep> watching_since_{0};  // clock_.Now() when they started
  std::atomic<bool> reported_unhealthy_{false};    // logs only the changes of health
  std::atomic<int> health_port_{0};
  std::atomic<int> metrics_port_{0};
  int collector_ = -1;  // metrics::DefaultRegistry collector id
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;
  std::optional<std::string> leadership_lost_;  // why, once lost (under stop_mu_)
  std::atomic<bool> standing_by_{false};        // waiting for the Lease
  std::atomic<bool> abandon_work_{false};       // workers skip the keys still queued
};

}  // namespace tpujob::controller
