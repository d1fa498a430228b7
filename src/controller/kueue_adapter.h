// KueueAdapter: the operator's side of Kueue's protocol for a job kind it does not know
// (policy/kueue.h has the rules). For a TPUJob labelled kueue.x-k8s.io/queue-name, the
// reconciler asks Sync() before deciding: it reads the job's Workload from the cache, carries
// out the Workload writes policy::kueue::DecideKueue asks for (creation, spec.active, the quota
// given back after an eviction, Finished), and returns whether the queued attempt may start or
// the running one must stop. Placements() says where the admitted pods go.
//
// Every write is idempotent and checked against what the API server has: creation by a
// deterministic name (AlreadyExists is success), status patches with the cached
// resourceVersion as a precondition (a conflict is retried by the work queue on a fresher
// cache). So the operator may be killed between any two writes and converge.
#pragma once

#include <atomic>
#include <expected>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "base/clock.h"
#include "cache/objects.h"
#include "cache/store.h"
#include "controller/priority_classes.h"
#include "kube/client.h"
#include "policy/job_spec.h"
#include "policy/kueue.h"

namespace tpujob::controller {

class KueueAdapter {
 public:
  KueueAdapter(kube::Client& client, const cache::Store<cache::WorkloadInfo>& workloads,
               Clock& clock = Clock::Real());

  // Whether the job names a LocalQueue.
  static bool NamesQueue(const cache::TPUJobInfo& job) {
    return !policy::kueue::QueueName(job).empty();
  }
  // Whether Kueue admits this job: Kueue was found (set_enabled) and the job names a LocalQueue.
  bool Manages(const cache::TPUJobInfo& job) const { return enabled() && NamesQueue(job); }

  // Set once Kueue's API was found, before the workers start; until then nothing is Kueue's.
  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_.load(); }

  // The name of the job's Workload: the one MultiKueue made for it in this worker cluster
  // (policy::kueue::PrebuiltWorkloadName), or else the one the operator creates.
  static std::string WorkloadNameOf(const cache::TPUJobInfo& job);

  // The job's Workload in the cache (nullptr when there is none, or only one of another job
  // of the same name). A prebuilt Workload that no object controls yet counts as the job's.
  cache::Store<cache::WorkloadInfo>::Ptr Find(const cache::TPUJobInfo& job) const;

  struct SyncResult {
    policy::kueue::KueueVerdict verdict;
    // The Workload write the verdict asked for, when it failed: the reconciler decides and
    // commits on the verdict all the same (a finished job still stops its pods when Kueue's
    // webhook refuses the Finished condition), then returns this error to be retried.
    kube::Status write;
    // Dispatch only: the status the manager's job should read now, when it reads otherwise
    // (policy::kueue::DispatchStatus); the reconciler writes it.
    std::optional<policy::JobStatus> status;
  };
  // See the file comment. `pods_left`: a pod of the job still exists.
  SyncResult Sync(const cache::TPUJobInfo& job,
                  const std::expected<policy::JobSpec, std::string>& spec, bool pods_left);

  // The manager cluster's side of MultiKueue (policy::kueue::DecideDispatch), for a job whose
  // spec.managedBy names it: only the Workload's writes; the verdict never admits or evicts.
  SyncResult Dispatch(const cache::TPUJobInfo& job,
                      const std::expected<policy::JobSpec, std::string>& spec);

  // The job no longer names a LocalQueue: its Workload, if any, is deleted (Kueue stops counting
  // it; the operator's own queue admits the job from now on).
  kube::Status Forget(const cache::TPUJobInfo& job);

  // Per pod set, the node labels and tolerations of the ResourceFlavors Kueue assigned to it
  // (read from the API server: a pod set's flavors are read once per pod creation round).
  kube::Result<std::map<std::string, policy::kueue::Placement>> Placements(
      const cache::TPUJobInfo& job);

 private:
  SyncResult Decide(const cache::TPUJobInfo& job,
                    const std::expected<policy::JobSpec, std::string>& spec, bool pods_left,
                    bool dispatch);
  // Makes the job the controlling owner of the prebuilt Workload MultiKueue made for it.
  kube::Status Adopt(const cache::TPUJobInfo& job, const cache::WorkloadInfo& workload);
  kube::Status PatchStatus(const cache::WorkloadInfo& workload, const nlohmann::json& patch,
                           std::string_view what, const std::string& job_key);
  kube::Status Delete(const cache::WorkloadInfo& workload, std::string_view why,
                      const std::string& job_key);
  // Carries out the verdict's Workload writes.
  kube::Status Write(const cache::TPUJobInfo& job, const policy::JobSpec* spec,
                     const cache::WorkloadInfo* workload, const policy::kueue::WorkloadState* state,
                     const policy::kueue::KueueVerdict& verdict);

  kube::Client& client_;
  const cache::Store<cache::WorkloadInfo>& workloads_;
  Clock& clock_;
  PriorityClasses priority_classes_;
  std::atomic<bool> enabled_{false};
};

}  // namespace tpujob::controller
