// The TPUJob reconciler: reads one job, its pods and the nodes that bear on it from the caches
// (the health and cordon state of the nodes its pods run on, the nodes it cordoned, and the
// nodes its new pods are to avoid), asks policy::Decide() what should happen, and commits the
// plan against the API server.
//
// Commit order (see policy/lifecycle.h for why): status first, with the cached
// resourceVersion as a precondition; then Events; then deletions (each with the pod's uid as a
// precondition, so a newer pod of the same name is never hit); then the headless Service and
// the missing pods, created in parallel. AlreadyExists and NotFound are success.
//
// Expectations, as in the ReplicaSet controller: after writing, the reconciler remembers what
// it expects the caches to show (the status it wrote, the pods it created, the pods it
// deleted) and does not decide again for that job until they do, or until a deadline passes.
// Deciding on a cache that has not caught up with one's own writes is harmless (the
// preconditions and deterministic names refuse any duplicate) but costs requests.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "base/clock.h"
#include "cache/objects.h"
#include "cache/store.h"
#include "controller/children.h"
#include "controller/cordoner.h"
#include "controller/event_recorder.h"
#include "controller/kueue_adapter.h"
#include "kube/client.h"
#include "policy/job_spec.h"
#include "policy/job_status.h"
#include "policy/lifecycle.h"
#include "policy/node_health.h"

namespace tpujob::controller {

// The outcome of one reconcile, as in controller-runtime: an error means a rate-limited retry,
// `requeue_after` a timer.
struct ReconcileResult {
  std::optional<Duration> requeue_after;
};

// Whether the queue lets a job's current attempt start (JobQueue::Admit). Without one every job
// is admitted at once.
struct AdmissionDecision {
  bool admit = true;
  std::string reason = "Queued";
  std::string message;
  std::vector<std::string> pools;   // admitted: per slice, pin its workers to this node pool
                                    // ("" = don't)
  std::optional<int32_t> position;  // waiting: the place in the queue
};
using AdmissionFunc = std::function<AdmissionDecision(
    const cache::TPUJobInfo&, const policy::JobSpec&, const policy::JobStatus&)>;

// Whether the queue preempts an admitted job (JobQueue::Preemption). Without one nothing is.
using PreemptionFunc = std::function<std::optional<policy::PreemptOrder>(const cache::TPUJobInfo&)>;

struct TPUJobReconcilerOptions {
  int create_parallelism = 16;  // concurrent pod creations for one job
  Duration expectation_timeout = std::chrono::seconds(30);
  PodBuildOptions pod_options;
  AdmissionFunc admission;    // empty: admit at once
  PreemptionFunc preemption;  // empty: never preempt
  // Kueue admits the jobs that name a LocalQueue (instead of `admission` and `preemption`);
  // nullptr: the operator does not talk to Kueue, and `admission` admits every job.
  KueueAdapter* kueue = nullptr;
  policy::NodeHealthConfig node_health;
  // Stall detection with a logPattern: how often a running job's worker 0 log tail is read to
  // keep status.progress (and the STEP column) current; a status write follows only when the
  // step moved (policy::RefreshProgress). Zero: never (status.progress then changes only when a
  // supervisor reports).
  Duration progress_refresh = std::chrono::seconds(60);
  // Reads the tail of a pod container's log with the kubelet's timestamps (the pods/log
  // subresource: timestamps=true, a bounded tail). Empty: no refresh.
  std::function<kube::Result<std::string>(const std::string& ns, const std::string& pod,
                                          const std::string& container)>
      read_log;
};

class TPUJobReconciler {
 public:
  TPUJobReconciler(kube::Client& client, const cache::Store<cache::TPUJobInfo>& jobs,
                   const cache::Store<cache::PodInfo>& pods,
                   const cache::Store<cache::NodeInfo>& nodes, EventRecorder& recorder,
                   Cordoner& cordoner, TPUJobReconcilerOptions options = {},
                   Clock& clock = Clock::Real());

  // Reconciles the job "namespace/name". Thread-safe for distinct keys (the work queue never
  // hands one key to two workers at once).
  kube::Result<ReconcileResult> Reconcile(const std::string& key);

 private:
  struct Expectations {
    std::string job_resource_version;  // the status write's answer
    // Pod names, each with the resourceVersion the API server gave its creation.
    std::map<std::string, std::string> created;
    std::set<std::string> deleted;  // pod uids
    // Pod names, each with the resourceVersion of the operator's annotation patch.
    std::map<std::string, std::string> patched;
    TimePoint deadline{};
  };
  // True when the caches reflect what this reconciler last wrote for `key` (or it waited long
  // enough); otherwise the remaining wait.
  std::optional<Duration> Pending(const std::string& key, const cache::TPUJobInfo& job);
  // A job whose spec.managedBy names MultiKueue, in the manager cluster: only its Workload's
  // writes (KueueAdapter::Dispatch); no pod, status or place in the operator's queue.
  kube::Result<ReconcileResult> Dispatch(const std::string& key, const cache::TPUJobInfo& job);
  // A Workload write refused for good is told to the job's owner in a Warning event.
  void ReportWorkloadRefusal(const cache::TPUJobInfo& job, const kube::Status& write);
  // spec.ttlSecondsAfterFinished has passed: deletes the job (its pods go with it).
  kube::Result<ReconcileResult> DeleteFinishedJob(const cache::TPUJobInfo& job);
  // A plan whose failure rests on nodes' health (policy::Plan::confirm_nodes): reads each from
  // the API server and decides again with what it read, so a node watch that fell behind cannot
  // fail a job whose node was found faulty in time. An error (a read failed): nothing is
  // committed, the key is retried.
  kube::Status ConfirmNodes(const std::string& key, policy::LifecycleInput& input,
                            policy::Plan& plan);
  kube::Status WriteStatus(const cache::TPUJobInfo& job, const policy::Plan& plan,
                           Expectations& expect);
  // Writes `desired` as a merge patch on the status subresource at the job's cached
  // resourceVersion (409 when the cache is stale) and logs a phase change; the API's answer.
  kube::Result<nlohmann::json> PatchJobStatus(const cache::TPUJobInfo& job,
                                              const policy::JobStatus& desired);
  // In-place restart: sets the generation and barrier annotations the plan asks for, and the
  // program's variables under `spec` (the spec the attempt runs) where it asks for them.
  kube::Status AnnotatePods(const cache::TPUJobInfo& job, const policy::JobSpec* spec,
                            const policy::Plan& plan, Expectations& expect);
  // Counts each terminated pre-flight init container's report once per pod (metrics).
  void CountPreflightReports(const std::string& key,
                             const std::vector<cache::Store<cache::PodInfo>::Ptr>& pods);
  kube::Status CreatePods(const cache::TPUJobInfo& job, const policy::JobSpec& spec,
                          const policy::Plan& plan, Expectations& expect);
  // A running job with a logPattern whose refresh is due: reads worker 0's log tail and writes
  // status.progress when the step moved. Returns when the next refresh is due (nullopt: none).
  std::optional<Duration> RefreshProgress(const cache::TPUJobInfo& job, const policy::JobSpec& spec,
                                          const policy::LifecycleInput& input,
                                          Expectations& expect);

  kube::Client& client_;
  const cache::Store<cache::TPUJobInfo>& jobs_;
  const cache::Store<cache::PodInfo>& pods_;
  const cache::Store<cache::NodeInfo>& nodes_;
  EventRecorder& recorder_;
  Cordoner& cordoner_;
  TPUJobReconcilerOptions options_;
  Clock& clock_;
  std::mutex mu_;
  std::map<std::string, Expectations> expectations_;  // by job key; guarded by mu_
  // Pods whose pre-flight report was counted, by job key; guarded by mu_.
  std::map<std::string, std::set<std::string>> preflight_counted_;
  // Cordon findings (node and evidence) handed to the Cordoner, by job key; guarded by mu_.
  std::map<std::string, std::set<std::string>> cordons_sent_;
  // When each job's next progress refresh is due, by job key; guarded by mu_.
  std::map<std::string, TimePoint> progress_due_;
};

// A JSON merge patch (RFC 7386) turning `from` into `to`: changed members, and null for
// members `to` lacks. Arrays are replaced whole.
nlohmann::json CreateMergePatch(const nlohmann::json& from, const nlohmann::json& to);

}  // namespace tpujob::controller
