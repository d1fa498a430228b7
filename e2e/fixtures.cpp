#include "fixtures.h"

namespace tpujob::fixtures {

std::map<std::string, std::string> TpuNodeLabels(const std::string& accelerator,
                                                 const std::string& topology,
                                                 const std::string& pool) {
  return {{"cloud.google.com/gke-tpu-accelerator", accelerator},
          {"cloud.google.com/gke-tpu-topology", topology},
          {"cloud.google.com/gke-nodepool", pool}};
}

Json NodeManifest(const FakeNode& node) {
  Json resources = {{"cpu", node.cpu}, {"memory", node.memory}, {"pods", node.pods}};
  if (node.chips > 0) resources[std::string(cache::kTpuResource)] = std::to_string(node.chips);
  Json manifest = {{"apiVersion", "v1"},
                   {"kind", "Node"},
                   {"metadata",
                    {{"name", node.name},
                     {"annotations", {{"kwok.x-k8s.io/node", "fake"}}},
                     {"labels", node.labels}}},
                   {"status", {{"allocatable", resources}, {"capacity", resources}}}};
  if (!node.taint_key.empty()) {
    manifest["spec"] = {{"taints", Json::array({{{"key", node.taint_key},
                                                 {"value", node.taint_value},
                                                 {"effect", "NoSchedule"}}})}};
  }
  return manifest;
}

Json WorkerPodManifest(const FakeWorkerPod& pod) {
  const std::string index = std::to_string(pod.index);
  const Json tpu = {{std::string(cache::kTpuResource), std::to_string(pod.chips)}};
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", pod.job + "-worker-" + index},
            {"labels",
             {{std::string(cache::kJobNameLabel), pod.job},
              {"tpujob.dev/replica-type", "worker"},
              {"tpujob.dev/replica-index", index},
              {"tpujob.dev/attempt", "1"}}}}},
          {"spec",
           {{"nodeName", pod.node},
            {"tolerations", Json::array({{{"key", "kwok.x-k8s.io/node"}, {"operator", "Exists"}}})},
            {"containers",
             Json::array({{{"name", "trainer"},
                           {"image", "trainer:latest"},
                           {"env", Json::array({{{"name", "TPU_WORKER_ID"}, {"value", index}}})},
                           {"resources", {{"requests", tpu}, {"limits", tpu}}}}})}}}};
}

Json TPUJobManifest(const FakeJob& job) {
  Json tpu = {{"accelerator", job.accelerator},
              {"topology", job.topology},
              {"chipsPerWorker", job.chips_per_worker}};
  if (job.slices) tpu["slices"] = *job.slices;
  Json pod_spec = {{"containers", Json::array({job.container})}};
  if (job.grace) pod_spec["terminationGracePeriodSeconds"] = *job.grace;
  Json spec = {{"tpu", tpu},
               {"replicaSpecs",
                {{"Worker", {{"replicas", job.workers}, {"template", {{"spec", pod_spec}}}}}}}};
  if (job.priority) spec["priority"] = *job.priority;
  if (!job.fault_tolerance.is_null()) spec["faultTolerance"] = job.fault_tolerance;
  return {{"apiVersion", "tpujob.dev/v1alpha1"},
          {"kind", "TPUJob"},
          {"metadata", {{"name", job.name}}},
          {"spec", spec}};
}

Json ContainerStatus(const std::string& name, const Json& state, const std::string& image) {
  return {{"name", name},   {"ready", false}, {"restartCount", 0},
          {"image", image}, {"imageID", ""},  {"state", state}};
}

Json RestartedContainerStatus(const std::string& name, const std::string& image, int restarts,
                              int exit_code, const std::string& message, const std::string& at) {
  Json status = ContainerStatus(name, {{"running", {{"startedAt", at}}}}, image);
  status["ready"] = true;
  status["restartCount"] = restarts;
  status["lastState"] = {{"terminated",
                          {{"exitCode", exit_code},
                           {"reason", "Error"},
                           {"message", message},
                           {"startedAt", at},
                           {"finishedAt", at}}}};
  return status;
}

Json NodeConditionPatch(const std::string& type, const std::string& status,
                        const std::string& reason, const std::string& message,
                        const std::string& at) {
  return {{"status",
           {{"conditions", Json::array({{{"type", type},
                                         {"status", status},
                                         {"reason", reason},
                                         {"message", message},
                                         {"lastHeartbeatTime", at},
                                         {"lastTransitionTime", at}}})}}}};
}

}  // namespace tpujob::fixtures
