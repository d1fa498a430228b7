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

cache::Store<cache::WorkloadInfo>::Ptr KueueAdapter::Find(const cache::TPUJobInfo& job) const {
  auto workload =
      workloads_.Get(cache::ObjectKey(job.ns.view(), kueue::WorkloadName(job.name, job.uid)));
  if (workload == nullptr || workload->owner.uid.view() != job.uid) return nullptr;
  return workload;
}

kube::Result<kueue::KueueVerdict> KueueAdapter::Sync(
    const cache::TPUJobInfo& job, const std::expected<policy::JobSpec, std::string>& spec,
    bool pods_left) {
  const std::string key = job.Key();
  const std::string ns(job.ns.view());
  const policy::JobStatus status = policy::JobStatus::FromJson(job.status);
  const auto workload = Find(job);
  std::optional<kueue::WorkloadState> state;
  if (workload != nullptr) {
    state = kueue::ReadWorkload(workload->name, workload->owner.uid.view(), workload->generation,
                                workload->spec, workload->status);
  }
  kueue::KueueInput input;
  input.workload = state ? &*state : nullptr;
  input.status = &status;
  input.spec = spec ? &*spec : nullptr;
  input.pods_left = pods_left;
  kueue::KueueVerdict verdict = kueue::DecideKueue(input);

  if (verdict.create_workload && !job.deleting()) {
    const Json object = BuildWorkload(job, *spec, priority_classes_.Of(*spec).value);
    auto created = client_.Create(kube::Resource::Workloads(), ns, object);
    if (!created && !created.error().IsAlreadyExists()) {
      log::Warn("cannot create the Kueue Workload",
                {{"tpujob", key},
                 {"workload", object["metadata"]["name"].get<std::string>()},
                 {"error", created.error().ToString()}});
      return std::unexpected(created.error());
    }
    if (created) {
      log::Info("created Kueue Workload",
                {{"tpujob", key},
                 {"workload", object["metadata"]["name"].get<std::string>()},
                 {"queue", kueue::QueueName(job)}});
    }
  }
  if (workload == nullptr) return verdict;

  if (verdict.set_active) {
    // The Workload's own field, merged as the job's suspend changes: Kueue neither admits nor
    // counts an inactive Workload (it evicts one that holds quota).
    const Json patch = {{"metadata", {{"resourceVersion", workload->resource_version}}},
                        {"spec", {{"active", *verdict.set_active}}}};
    auto answer = client_.Patch(kube::Resource::Workloads(), ns, workload->name,
                                kube::PatchType::kMerge, patch, kube::PatchOptions{});
    if (!answer && !answer.error().IsNotFound()) return std::unexpected(answer.error());
    log::Info(*verdict.set_active ? "activated Kueue Workload: the job was resumed"
                                  : "deactivated Kueue Workload: the job is suspended",
              {{"tpujob", key}, {"workload", workload->name}});
    // Status writes below would carry the old resourceVersion; they follow on the next event.
    return verdict;
  }
  if (verdict.release_quota) {
    const Json patch = kueue::ReleaseQuotaPatch(*state, workload->status,
                                                workload->resource_version, clock_.WallNow());
    if (auto done = PatchStatus(*workload, patch, "gave back the quota of", key); !done) {
      return std::unexpected(done.error());
    }
  } else if (verdict.finish) {
    const std::string message = *verdict.finish ? "the TPUJob succeeded" : "the TPUJob failed";
    const Json patch = kueue::FinishPatch(*state, workload->status, workload->resource_version,
                                          *verdict.finish, message, clock_.WallNow());
    if (auto done = PatchStatus(*workload, patch, "finished", key); !done) {
      return std::unexpected(done.error());
    }
  }
  return verdict;
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
  const kueue::WorkloadState state =
      kueue::ReadWorkload(workload->name, workload->owner.uid.view(), workload->generation,
                          workload->spec, workload->status);
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
