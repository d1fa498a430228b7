#include "controller/kueue_adapter.h"

#include <set>

#include "base/logging.h"
#include "controller/children.h"
#include "policy/job_status.h"

namespace tpujob::controller {

namespace kueue = policy::kueue;

KueueAdapter::KueueAdapter(kube::Client& client, const cache::Store<cache::WorkloadInfo>& workloads,
                           Clock& clock)
    : client_(client), workloads_(workloads), clock_(clock), priority_classes_(client, clock) {}

std::string KueueAdapter::WorkloadNameOf(const cache::TPUJobInfo& job) {
  std::string prebuilt = kueue::PrebuiltWorkloadName(job);
  return prebuilt.empty() ? kueue::WorkloadName(job.name, job.uid) : prebuilt;
}

cache::Store<cache::WorkloadInfo>::Ptr KueueAdapter::Find(const cache::TPUJobInfo& job) const {
  auto workload = workloads_.Get(cache::ObjectKey(job.ns.view(), WorkloadNameOf(job)));
  if (workload == nullptr) return nullptr;
  if (workload->owner.uid.view() == job.uid) return workload;
  // A prebuilt Workload is the job's before the job adopts it, unless another job controls it.
  const bool adoptable = !kueue::PrebuiltWorkloadName(job).empty() && workload->owner.empty();
  return adoptable ? workload : nullptr;
}

KueueAdapter::SyncResult KueueAdapter::Sync(const cache::TPUJobInfo& job,
                                            const std::expected<policy::JobSpec, std::string>& spec,
                                            bool pods_left) {
  return Decide(job, spec, pods_left, /*dispatch=*/false);
}

KueueAdapter::SyncResult KueueAdapter::Dispatch(
    const cache::TPUJobInfo& job, const std::expected<policy::JobSpec, std::string>& spec) {
  return Decide(job, spec, /*pods_left=*/false, /*dispatch=*/true);
}

KueueAdapter::SyncResult KueueAdapter::Decide(
    const cache::TPUJobInfo& job, const std::expected<policy::JobSpec, std::string>& spec,
    bool pods_left, bool dispatch) {
  const policy::JobStatus status = policy::JobStatus::FromJson(job.status);
  const auto workload = Find(job);
  std::optional<kueue::WorkloadState> state;
  if (workload != nullptr) state = kueue::ReadWorkload(*workload);
  kueue::KueueInput input;
  input.workload = state ? &*state : nullptr;
  input.status = &status;
  input.spec = spec ? &*spec : nullptr;
  input.pods_left = pods_left;
  input.prebuilt = kueue::PrebuiltWorkloadName(job);
  // Whether a waiting job's Workload still describes it (the pod sets and queue it would get
  // now). Only while it holds no admission: an admitted job's layout cannot change.
  if (spec && state && !status.ConditionTrue(policy::condition::kAdmitted)) {
    input.wanted_digest = kueue::SpecDigest(BuildWorkload(job, *spec, 0)["spec"]);
  }
  SyncResult result;
  result.verdict = dispatch ? kueue::DecideDispatch(input) : kueue::DecideKueue(input);
  result.write = Write(job, spec ? &*spec : nullptr, workload.get(), state ? &*state : nullptr,
                       result.verdict);
  if (dispatch) {
    result.status = kueue::DispatchStatus(input, result.verdict, job.generation, clock_.WallNow());
  }
  return result;
}

kube::Status KueueAdapter::Adopt(const cache::TPUJobInfo& job,
                                 const cache::WorkloadInfo& workload) {
  // A JSON patch at the cached resourceVersion (its `test`): the owner references the cache saw
  // are kept (appended to, or created), and a Workload that changed since is not adopted on stale
  // grounds (the work queue retries on a fresher cache). Only `patch` on workloads is needed.
  const Json owner = OwnerReference(job);
  Json patch = Json::array(
      {{{"op", "test"},
        {"path", "/metadata/resourceVersion"},
        {"value", workload.resource_version}},
       workload.owner_references > 0
           ? Json{{"op", "add"}, {"path", "/metadata/ownerReferences/-"}, {"value", owner}}
           : Json{{"op", "add"},
                  {"path", "/metadata/ownerReferences"},
                  {"value", Json::array({owner})}},
       {{"op", "add"}, {"path", "/metadata/labels/kueue.x-k8s.io~1job-uid"}, {"value", job.uid}}});
  auto answer = client_.Patch(kube::Resource::Workloads(), std::string(workload.ns.view()),
                              workload.name, kube::PatchType::kJson, patch, kube::PatchOptions{});
  if (!answer) {
    if (answer.error().IsNotFound()) return {};
    log::Warn(
        "cannot adopt the prebuilt Kueue Workload",
        {{"tpujob", job.Key()}, {"workload", workload.name}, {"error", answer.error().ToString()}});
    return std::unexpected(answer.error());
  }
  log::Info("adopted the Kueue Workload MultiKueue made for the job",
            {{"tpujob", job.Key()}, {"workload", workload.name}});
  return {};
}

kube::Status KueueAdapter::Write(const cache::TPUJobInfo& job, const policy::JobSpec* spec,
                                 const cache::WorkloadInfo* workload,
                                 const kueue::WorkloadState* state,
                                 const kueue::KueueVerdict& verdict) {
  const std::string key = job.Key();
  const std::string ns(job.ns.view());
  if (verdict.create_workload && spec != nullptr && !job.deleting()) {
    const Json object = BuildWorkload(job, *spec, priority_classes_.Of(*spec).value);
    const std::string name = object["metadata"]["name"].get<std::string>();
    auto created = client_.Create(kube::Resource::Workloads(), ns, object);
    if (!created && !created.error().IsAlreadyExists()) {
      log::Warn("cannot create the Kueue Workload",
                {{"tpujob", key}, {"workload", name}, {"error", created.error().ToString()}});
      return std::unexpected(created.error());
    }
    if (created) {
      log::Info("created Kueue Workload",
                {{"tpujob", key}, {"workload", name}, {"queue", kueue::QueueName(job)}});
    }
  }
  if (workload == nullptr || state == nullptr) return {};
  if (verdict.adopt) return Adopt(job, *workload);  // the next writes follow on its event
  if (verdict.recreate) return Delete(*workload, "the job's pods or queue changed", key);
  if (verdict.set_active) {
    // The Workload's own field: Kueue neither admits nor counts an inactive Workload (it evicts
    // one that holds quota). The annotation says the deactivation was the job's suspend, so
    // resuming undoes only that, never a deactivation by Kueue or an administrator.
    const Json patch = {{"metadata",
                         {{"resourceVersion", workload->resource_version},
                          {"annotations",
                           {{std::string(kueue::kSuspendedAnnotation),
                             *verdict.set_active ? Json(nullptr) : Json("true")}}}}},
                        {"spec", {{"active", *verdict.set_active}}}};
    auto answer = client_.Patch(kube::Resource::Workloads(), ns, workload->name,
                                kube::PatchType::kMerge, patch, kube::PatchOptions{});
    if (!answer && !answer.error().IsNotFound()) {
      log::Warn(
          "cannot change the Kueue Workload's spec.active",
          {{"tpujob", key}, {"workload", workload->name}, {"error", answer.error().ToString()}});
      return std::unexpected(answer.error());
    }
    log::Info(*verdict.set_active ? "activated Kueue Workload: the job was resumed"
                                  : "deactivated Kueue Workload: the job is suspended",
              {{"tpujob", key}, {"workload", workload->name}});
    return {};  // a status write would carry the old resourceVersion; it follows on the event
  }
  const WallTime now = clock_.WallNow();
  if (verdict.release_quota) {
    return PatchStatus(
        *workload,
        kueue::ReleaseQuotaPatch(*state, workload->status, workload->resource_version, now),
        "gave back the quota of", key);
  }
  if (verdict.finish) {
    const Json patch =
        kueue::ConditionPatch(*state, workload->status, workload->resource_version, "Finished",
                              true, *verdict.finish ? "Succeeded" : "Failed",
                              *verdict.finish ? "the TPUJob succeeded" : "the TPUJob failed", now);
    return PatchStatus(*workload, patch, "finished", key);
  }
  if (verdict.out_of_sync) {
    const Json patch = kueue::ConditionPatch(
        *state, workload->status, workload->resource_version, "Finished", true,
        kueue::kFinishedOutOfSync, "The prebuilt workload is out of sync with its user job", now);
    return PatchStatus(*workload, patch, "finished (out of sync with its job)", key);
  }
  if (verdict.pods_ready) {
    const Json patch =
        kueue::ConditionPatch(*state, workload->status, workload->resource_version, "PodsReady",
                              *verdict.pods_ready, verdict.pods_ready_reason,
                              *verdict.pods_ready ? "every pod of the TPUJob is ready"
                                                  : "not every pod of the TPUJob is ready",
                              now);
    return PatchStatus(*workload, patch,
                       *verdict.pods_ready ? "set PodsReady=True on" : "set PodsReady=False on",
                       key);
  }
  return {};
}

kube::Status KueueAdapter::Forget(const cache::TPUJobInfo& job) {
  const auto workload = Find(job);
  if (workload == nullptr) return {};
  return Delete(*workload, "the job no longer names a LocalQueue", job.Key());
}

kube::Status KueueAdapter::Delete(const cache::WorkloadInfo& workload, std::string_view why,
                                  const std::string& job_key) {
  if (workload.deleting()) return {};
  kube::DeleteOptions options;
  options.precondition_uid = workload.uid;  // never a newer Workload of the same name
  options.propagation_policy = "Background";
  auto answer = client_.Delete(kube::Resource::Workloads(), std::string(workload.ns.view()),
                               workload.name, options);
  if (!answer && !answer.error().IsNotFound() && !answer.error().IsConflict()) {
    log::Warn(
        "cannot delete the Kueue Workload",
        {{"tpujob", job_key}, {"workload", workload.name}, {"error", answer.error().ToString()}});
    return std::unexpected(answer.error());
  }
  log::Info("deleted Kueue Workload",
            {{"tpujob", job_key}, {"workload", workload.name}, {"why", why}});
  return {};
}

kube::Status KueueAdapter::PatchStatus(const cache::WorkloadInfo& workload, const Json& patch,
                                       std::string_view what, const std::string& job_key) {
  kube::PatchOptions options;
  options.subresource = "status";
  auto answer = client_.Patch(kube::Resource::Workloads(), std::string(workload.ns.view()),
                              workload.name, kube::PatchType::kMerge, patch, options);
  if (!answer) {
    if (answer.error().IsNotFound()) return {};
    if (answer.error().IsConflict()) {
      log::Debug("Workload status write refused: the cache is stale; retrying",
                 {{"tpujob", job_key}, {"workload", workload.name}});
    }
    return std::unexpected(answer.error());
  }
  log::Info(std::string(what) + " Kueue Workload",
            {{"tpujob", job_key}, {"workload", workload.name}});
  return {};
}

kube::Result<std::map<std::string, kueue::Placement>> KueueAdapter::Placements(
    const cache::TPUJobInfo& job) {
  std::map<std::string, kueue::Placement> out;
  const auto workload = Find(job);
  if (workload == nullptr) return out;
  const kueue::WorkloadState state = kueue::ReadWorkload(*workload);
  std::map<std::string, kueue::Placement> flavors;  // by flavor name, each read once
  for (const auto& [pod_set, by_resource] : state.flavors) {
    std::set<std::string> names;
    for (const auto& [resource, flavor] : by_resource) names.insert(flavor);
    kueue::Placement& placement = out[pod_set];
    for (const std::string& name : names) {
      auto it = flavors.find(name);
      if (it == flavors.end()) {
        auto answer = client_.Get(kube::Resource::ResourceFlavors(), "", name);
        if (!answer) {
          log::Warn(
              "cannot read the ResourceFlavor Kueue assigned",
              {{"tpujob", job.Key()}, {"flavor", name}, {"error", answer.error().ToString()}});
          return std::unexpected(answer.error());
        }
        it = flavors.emplace(name, kueue::FlavorPlacement(*answer)).first;
      }
      for (const auto& [label, value] : it->second.node_labels)
        placement.node_labels[label] = value;
      for (const Json& toleration : it->second.tolerations) {
        placement.tolerations.push_back(toleration);
      }
    }
  }
  return out;
}

}  // namespace tpujob::controller
