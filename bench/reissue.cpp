// Fault to replacement: a hardware fault on worker 0's node -> the job's next attempt with all
// its pods created and all Running.

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "fault_nodes.h"
#include "fixtures.h"
#include "scenarios.h"

namespace tpujob::bench {

// Fault to replacement: `runs` times, a W-worker TPUJob (pods with a termination grace period of
// 0) runs on fresh nodes of its own, a hardware fault is written on worker 0's node, and the time
// is taken until the job's next attempt has all W pods Running (polled every 20 ms); then the job
// is deleted. One spare node per run.
int Reissue(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
            int workers, int runs, const std::string& condition) {
  auto client = Connect(kubeconfig);
  const std::string accelerator = FaultAccelerator(prefix);
  const std::string topology = FaultTopology(workers);
  const int node_count = workers + runs;
  if (!CreateFaultNodes(*client, prefix, accelerator, topology, node_count)) return 1;
  std::vector<double> replaced_ms, recreated_ms;
  int failures = 0;
  for (int run = 0; run < runs && failures == 0; ++run) {
    const std::string name = prefix + "-" + std::to_string(run);
    tpujob::kube::ListOptions by_job;
    by_job.label_selector = JobSelector(name);
    const Json job = fixtures::TPUJobManifest({.name = name,
                                               .accelerator = accelerator,
                                               .topology = topology,
                                               .workers = workers,
                                               .fault_tolerance = {{"maxJobRetries", 1}},
                                               .grace = 0});
    // Running pods of `attempt`, and worker 0's node among them.
    const auto running_pods = [&](const std::string& attempt, std::string* node) {
      auto pods = client->List(Resource::Pods(), ns, by_job);
      int count = 0;
      if (!pods) return -1;
      for (const auto& pod : (*pods)["items"]) {
        if (pod.value("/metadata/labels/tpujob.dev~1attempt"_json_pointer, "") != attempt ||
            pod.contains("/metadata/deletionTimestamp"_json_pointer) ||
            pod.value("/status/phase"_json_pointer, "") != "Running") {
          continue;
        }
        ++count;
        if (node != nullptr && pod.value("/metadata/name"_json_pointer, "") == name + "-worker-0") {
          *node = pod.value("/spec/nodeName"_json_pointer, "");
        }
      }
      return count;
    };
    std::string node;
    if (auto created = client->Create(Resource::TPUJobs(), ns, job); !created) {
      std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
      ++failures;
      break;
    }
    if (!WaitFor([&] { return running_pods("1", &node) == workers && !node.empty(); }, 120,
                 std::chrono::milliseconds(100))) {
      std::fprintf(stderr, "error: %s never had %d pods Running\n", name.c_str(), workers);
      ++failures;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<double> all_created;
    if (failures == 0) {
      if (auto written = WriteNodeFault(*client, node, condition); !written) {
        std::fprintf(stderr, "error: %s\n", written.error().ToString().c_str());
        ++failures;
      }
    }
    if (failures == 0) {
      const bool replaced = WaitFor(
          [&] {
            auto pods = client->List(Resource::Pods(), ns, by_job);
            int created_of_2 = 0;
            if (pods) {
              for (const auto& pod : (*pods)["items"]) {
                created_of_2 +=
                    pod.value("/metadata/labels/tpujob.dev~1attempt"_json_pointer, "") == "2";
              }
            }
            if (!all_created && created_of_2 == workers) all_created = MsSince(t0);
            return running_pods("2", nullptr) == workers;
          },
          120, std::chrono::milliseconds(20));
      if (replaced) {
        replaced_ms.push_back(MsSince(t0));
        recreated_ms.push_back(all_created.value_or(replaced_ms.back()));
        std::printf(
            "%s: fault on %s -> attempt 2 all %d pods created %.0f ms, all Running %.0f ms\n",
            name.c_str(), node.c_str(), workers, recreated_ms.back(), replaced_ms.back());
      } else {
        std::fprintf(stderr, "error: %s: attempt 2 never had %d pods Running\n", name.c_str(),
                     workers);
        ++failures;
      }
    }
    DeleteForeground(*client, Resource::TPUJobs(), ns, name);
    AwaitGone(*client, Resource::TPUJobs(), ns, name, by_job.label_selector,
              std::chrono::milliseconds(100));
  }
  DeleteFaultNodes(*client, prefix, node_count);
  if (!replaced_ms.empty()) {
    std::printf("fault to replacement, %d workers, grace 0, %zu runs:\n", workers,
                replaced_ms.size());
    PrintLatencies("all pods created", recreated_ms);
    PrintLatencies("all pods Running", replaced_ms);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace tpujob::bench
