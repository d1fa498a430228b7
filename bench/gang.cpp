// Gang creation: the time from creating a gang until all its pods exist, for the operator's
// TPUJob (gang), for a plain client creating the very same pods (plain-gang, the raw ceiling) and
// for the equivalent JobSet (jobset).

#include <chrono>
#include <cstdio>

#include "cache/objects.h"
#include "common.h"
#include "controller/children.h"
#include "fixtures.h"
#include "policy/job_spec.h"
#include "scenarios.h"

namespace tpujob::bench {
namespace {

// The TPUJob both `gang` and `plain-gang` describe: W workers per slice, S slices.
Json GangJob(const std::string& name, int workers, const std::string& topology, int chips,
             int slices) {
  return fixtures::TPUJobManifest({.name = name,
                                   .topology = topology,
                                   .chips_per_worker = chips,
                                   .workers = workers,
                                   .slices = slices});
}

}  // namespace

// The JobSet peer: the equivalent JobSet (one replicated Job of W indexed pods, each asking for
// `chips` google.com/tpu on the same nodes a TPUJob's workers would go to), created and timed the
// way Gang times a TPUJob: from the create until all its pods were created (by the JobSet
// controller's Job, through kube-controller-manager's Job controller). Every field JobSet's
// defaulting webhook would set is given, so the controller runs without its webhooks. Then the
// JobSet is deleted and its pods awaited gone.
int JobSetGang(const std::string& kubeconfig, const std::string& ns, const std::string& name,
               int workers, const std::string& topology, int chips) {
  const tpujob::kube::Resource jobsets{"jobset.x-k8s.io", "v1alpha2", "jobsets", true};
  const std::string selector = "jobset.sigs.k8s.io/jobset-name=" + name;
  const Json tpu = {{std::string(cache::kTpuResource), std::to_string(chips)}};
  // The same TPU_WORKER_HOSTNAMES list every worker of a TPUJob carries (and GKE's TPU webhook
  // adds to a JobSet's pods): one hostname per worker, so the pods are as large as ours.
  std::string hostnames;
  for (int i = 0; i < workers; ++i) {
    hostnames += (i == 0 ? "" : ",") + name + "-worker-0-" + std::to_string(i) + "." + name;
  }
  Json pod_spec = {
      {"restartPolicy", "Never"},
      {"terminationGracePeriodSeconds", 0},
      {"nodeSelector",
       {{"cloud.google.com/gke-tpu-accelerator", "tpu-v5-lite-podslice"},
        {"cloud.google.com/gke-tpu-topology", topology}}},
      {"containers",
       Json::array(
           {{{"name", "trainer"},
             {"image", "trainer:latest"},
             {"env", Json::array({{{"name", "TPU_WORKER_HOSTNAMES"}, {"value", hostnames}}})},
             {"resources", {{"requests", tpu}, {"limits", tpu}}}}})}};
  Json jobset = {
      {"apiVersion", "jobset.x-k8s.io/v1alpha2"},
      {"kind", "JobSet"},
      {"metadata", {{"name", name}}},
      {"spec",
       {{"suspend", false},
        {"successPolicy", {{"operator", "All"}}},
        {"startupPolicy", {{"startupPolicyOrder", "AnyOrder"}}},
        {"failurePolicy", {{"maxRestarts", 0}, {"restartStrategy", "Recreate"}}},
        {"network", {{"enableDNSHostnames", true}, {"publishNotReadyAddresses", true}}},
        {"replicatedJobs", Json::array({{{"name", "worker"},
                                         {"groupName", "default"},
                                         {"replicas", 1},
                                         {"template",
                                          {{"spec",
                                            {{"parallelism", workers},
                                             {"completions", workers},
                                             {"completionMode", "Indexed"},
                                             {"backoffLimit", 0},
                                             {"template", {{"spec", pod_spec}}}}}}}}})}}}};
  auto client = Connect(kubeconfig);
  auto watch = WatchPods(*client, ns, selector);
  if (!watch) return 1;
  const auto start = std::chrono::steady_clock::now();
  if (auto created = client->Create(jobsets, ns, jobset); !created) {
    std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
    return 1;
  }
  if (!AwaitPods(*client, *watch, ns, selector, workers)) return 1;
  std::printf("%s: all %d pods created %.0f ms after the JobSet was created\n", name.c_str(),
              workers, MsSince(start));
  DeleteForeground(*client, jobsets, ns, name);
  const bool gone = AwaitGone(*client, jobsets, ns, name, selector, std::chrono::milliseconds(100));
  if (!gone)
    std::fprintf(stderr, "error: %s and its pods not gone 120 s after its deletion\n",
                 name.c_str());
  return gone ? 0 : 1;
}

// The raw ceiling for a gang: the very pods the operator creates for GangJob (BuildPod, with the
// operator's default options, owned by a TPUJob of the same spec in a namespace no operator
// watches), created by a plain client on `threads` threads with no client-side limit, timed the
// way Gang times the operator.
int PlainGang(const std::string& kubeconfig, const std::string& ns, const std::string& name,
              int workers, const std::string& topology, int chips, int slices, int threads) {
  auto client = Connect(kubeconfig);
  auto owner =
      client->Create(Resource::TPUJobs(), ns, GangJob(name, workers, topology, chips, slices));
  if (!owner) {
    std::fprintf(stderr, "error: %s\n", owner.error().ToString().c_str());
    return 1;
  }
  auto info = tpujob::cache::TPUJobInfo::FromJson(*owner);
  if (!info) {
    std::fprintf(stderr, "error: %s\n", info.error().ToString().c_str());
    return 1;
  }
  auto spec = tpujob::policy::ParseJobSpec(*info);
  if (!spec) {
    std::fprintf(stderr, "error: %s\n", spec.error().c_str());
    return 1;
  }
  std::vector<Json> pods;
  for (int i = 0; i < spec->Replicas(tpujob::policy::ReplicaType::kWorker); ++i) {
    Json pod =
        tpujob::controller::BuildPod(*info, *spec, tpujob::policy::ReplicaType::kWorker, i, 1);
    pods.push_back(std::move(pod));
  }
  auto watch = WatchPods(*client, ns, JobSelector(name));
  if (!watch) return 1;
  // Warm, like a running operator's: a connection per thread is open before the clock starts.
  tpujob::kube::ListOptions none;
  none.label_selector = JobSelector(name);
  Parallel(threads, threads,
           [&](int) { return client->List(Resource::Pods(), ns, none).has_value(); });
  const auto start = std::chrono::steady_clock::now();
  const int failures = Parallel(static_cast<int>(pods.size()), threads, [&](int i) {
    auto created = client->Create(Resource::Pods(), ns, pods[static_cast<size_t>(i)]);
    if (!created) std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
    return created.has_value();
  });
  if (failures > 0 ||
      !AwaitPods(*client, *watch, ns, JobSelector(name), static_cast<int>(pods.size()))) {
    return 1;
  }
  std::printf(
      "%s: all %zu pods (%d x %d) created %.0f ms after the first create (plain client,"
      " %d threads)\n",
      name.c_str(), pods.size(), slices, workers, MsSince(start), threads);
  // Gone again, and awaited gone, so that the next run starts from a quiet cluster.
  tpujob::kube::DeleteOptions options;
  options.grace_period_seconds = 0;
  Parallel(static_cast<int>(pods.size()), threads, [&](int i) {
    auto deleted = client->Delete(Resource::Pods(), ns,
                                  pods[static_cast<size_t>(i)]["metadata"]["name"], options);
    return deleted.has_value() || deleted.error().IsNotFound();
  });
  client->Delete(Resource::TPUJobs(), ns, name);
  const bool gone = AwaitGone(*client, Resource::TPUJobs(), ns, name, JobSelector(name),
                              std::chrono::milliseconds(100));
  if (!gone)
    std::fprintf(stderr, "error: %s and its pods not gone 120 s after deletion\n", name.c_str());
  return gone ? 0 : 1;
}

int Gang(const std::string& kubeconfig, const std::string& ns, const std::string& name, int workers,
         const std::string& topology, int chips, int slices, bool finish) {
  const int pods_wanted = workers * slices;
  auto client = Connect(kubeconfig);
  auto watch = WatchPods(*client, ns, JobSelector(name));
  if (!watch) return 1;
  const Json job = GangJob(name, workers, topology, chips, slices);
  const auto start = std::chrono::steady_clock::now();
  auto created = client->Create(Resource::TPUJobs(), ns, job);
  if (!created) {
    std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
    return 1;
  }
  if (!AwaitPods(*client, *watch, ns, JobSelector(name), pods_wanted)) return 1;
  std::printf("%s: all %d pods (%d x %d) created %.0f ms after the TPUJob was created\n",
              name.c_str(), pods_wanted, slices, workers, MsSince(start));
  if (!finish) return 0;

  const auto phase = [&] {
    auto got = client->Get(Resource::TPUJobs(), ns, name);
    return got ? got->value("/status/phase"_json_pointer, std::string()) : std::string();
  };
  if (!WaitFor([&] { return phase() == "Running"; }, 120)) {
    std::fprintf(stderr, "error: %s never Running\n", name.c_str());
    return 1;
  }
  const Json status = {
      {"status",
       {{"phase", "Succeeded"},
        {"containerStatuses",
         Json::array({fixtures::ContainerStatus(
             "trainer", {{"terminated", {{"exitCode", 0}, {"reason", "Completed"}}}},
             "trainer:latest")})}}}};
  tpujob::kube::PatchOptions status_options;
  status_options.subresource = "status";
  auto patched =
      client->Patch(Resource::Pods(), ns, name + (slices > 1 ? "-worker-0-0" : "-worker-0"),
                    tpujob::kube::PatchType::kMerge, status, status_options);
  if (!patched) {
    std::fprintf(stderr, "error: %s\n", patched.error().ToString().c_str());
    return 1;
  }
  if (!WaitFor([&] { return phase() == "Succeeded"; }, 120)) {
    std::fprintf(stderr, "error: %s never Succeeded\n", name.c_str());
    return 1;
  }
  DeleteForeground(*client, Resource::TPUJobs(), ns, name);
  const bool gone = AwaitGone(*client, Resource::TPUJobs(), ns, name, JobSelector(name),
                              std::chrono::milliseconds(10));
  std::printf("%s: Running -> Succeeded -> deleted, children gone: %s\n", name.c_str(),
              gone ? "yes" : "NO");
  return gone ? 0 : 1;
}

}  // namespace tpujob::bench
