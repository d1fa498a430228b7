// The fake cluster objects that both the end-to-end tests (e2e/) and the benchmark tool (bench/)
// create: KWOK nodes that advertise TPU chips, worker pods bound to them, and TPUJobs. Each is
// built from a few named parameters instead of a manifest written out at every place it is used.
//
// Contract:
//   1. Every builder returns the object as a client sends it (apiVersion, kind, metadata, spec;
//      for a node also the status KWOK keeps: capacity and allocatable). Nothing here talks to
//      a cluster, reads the clock or draws a random number: the same parameters give the same
//      object.
//   2. An optional field whose parameter is unset (an empty taint key, zero chips, std::nullopt, a
//      null Json) is left out of the object, so the API server's default applies.
//   3. A node is always KWOK's (the annotation kwok.x-k8s.io/node: fake): KWOK reports it Ready
//      and plays its pods' lives.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "cache/objects.h"
#include "kube/client.h"

namespace tpujob::fixtures {

using kube::Json;

// The labels GKE puts on a node of a TPU slice: accelerator, topology and node pool.
std::map<std::string, std::string> TpuNodeLabels(const std::string& accelerator,
                                                 const std::string& topology,
                                                 const std::string& pool);

// A KWOK node. The defaults are a GKE TPU host of 4 chips, tainted as GKE taints TPU nodes.
struct FakeNode {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string taint_key = std::string(cache::kTpuResource);  // NoSchedule; empty: no taint
  std::string taint_value = "present";
  std::string cpu = "32";
  std::string memory = "128Gi";
  std::string pods = "110";
  int chips = 4;  // google.com/tpu in capacity and allocatable; 0: none advertised
};
Json NodeManifest(const FakeNode& node);

// A worker pod of a TPUJob as the operator labels it, bound to `node` (no scheduler involved),
// tolerating KWOK's taint, asking for `chips` google.com/tpu: `job`-worker-`index`.
struct FakeWorkerPod {
  std::string job;
  int index = 0;
  std::string node;
  int chips = 4;
};
Json WorkerPodManifest(const FakeWorkerPod& pod);

// A TPUJob of `workers` workers per slice, one container each.
struct FakeJob {
  std::string name;
  std::string accelerator = "tpu-v5-lite-podslice";
  std::string topology;
  int chips_per_worker = 4;
  int workers = 1;
  std::optional<int> slices = std::nullopt;    // spec.tpu.slices
  std::optional<int> priority = std::nullopt;  // spec.priority
  Json fault_tolerance = nullptr;              // spec.faultTolerance; null: left out
  std::optional<int> grace = std::nullopt;     // the pods' terminationGracePeriodSeconds
  Json container = {{"name", "trainer"}, {"image", "trainer:latest"}};
};
Json TPUJobManifest(const FakeJob& job);

// What a kubelet writes, and node-problem-detector, played where no kubelet runs the container:
// One entry of a pod's status.containerStatuses or status.initContainerStatuses: not ready,
// never restarted, in `state`, e.g. {"terminated": {"exitCode": 1}} or
// {"waiting": {"reason": "PodInitializing"}}.
Json ContainerStatus(const std::string& name, const Json& state, const std::string& image);
// The entry of a container the kubelet has just restarted for the `restarts`-th time: running
// and ready since `at`, its run before terminated at `at` with `exit_code`, reason Error and
// `message` (the termination message).
Json RestartedContainerStatus(const std::string& name, const std::string& image, int restarts,
                              int exit_code, const std::string& message, const std::string& at);
// A strategic-merge patch of a node's status subresource that sets condition `type`, as
// node-problem-detector writes it (heartbeat and transition at `at`); the conditions merge by
// type, so the ones KWOK keeps are left alone.
Json NodeConditionPatch(const std::string& type, const std::string& status,
                        const std::string& reason, const std::string& message,
                        const std::string& at);

}  // namespace tpujob::fixtures
