#include "simulated_job.h"

#include <chrono>
#include <utility>

#include "cache/intern.h"
#include "common.h"

namespace tpujob::bench {
namespace {

using cache::InternedString;

constexpr char kNamespace[] = "bench";
constexpr char kName[] = "curve";
constexpr char kUid[] = "curve-uid";

Json JobSpecJson(int32_t slices, int32_t hosts, const std::string& recovery) {
  // A memory-backed /dev/shm, which a job whose pre-flight checks the disk must mount.
  const Json container = {
      {"name", "trainer"},
      {"image", "trainer:1"},
      {"volumeMounts", Json::array({{{"name", "shm"}, {"mountPath", "/dev/shm"}}})}};
  const Json pod_template = {
      {"spec",
       {{"volumes", Json::array({{{"name", "shm"}, {"emptyDir", {{"medium", "Memory"}}}}})},
        {"containers", Json::array({container})}}}};
  return {{"tpu",
           {{"accelerator", "tpu-v6e-slice"},
            {"topology", "16x16"},
            {"chipsPerWorker", 4},
            {"slices", slices}}},
          {"faultTolerance", {{"maxJobRetries", 3}, {"recovery", recovery}}},
          {"replicaSpecs", {{"Worker", {{"replicas", hosts}, {"template", pod_template}}}}}};
}

std::string NodeName(int32_t slice, int32_t host) {
  return "pool-" + std::to_string(slice) + "-node-" + std::to_string(host);
}

}  // namespace

RunningJob::RunningJob(int32_t slices, int32_t hosts, const std::string& recovery)
    : hosts_(hosts), now_(WallTime{} + std::chrono::hours(490000)) {
  job_.ns = InternedString::Intern(kNamespace);
  job_.name = kName;
  job_.uid = kUid;
  job_.resource_version = "1";
  job_.generation = 1;
  job_.spec = JobSpecJson(slices, hosts, recovery);
  job_.status = Json::object();
  spec_ = policy::ParseJobSpec(job_);
  if (!spec_) {
    error_ = "spec: " + spec_.error();
    return;
  }
  pods_.reserve(static_cast<size_t>(slices) * hosts);

  // Queued, then admitted to a pool per slice (its pods created), then Running.
  policy::LifecycleInput queued = Input();
  queued.admit = false;
  Apply(policy::Decide(queued));
  policy::LifecycleInput admitted = Input();
  for (int32_t s = 0; s < slices; ++s) admitted.admit_pools.push_back("pool-" + std::to_string(s));
  Apply(policy::Decide(admitted));
  if (workers() != slices * hosts) {
    error_ = "admitted with " + std::to_string(workers()) + " pods created, not " +
             std::to_string(slices * hosts);
    return;
  }
  const policy::Plan running = policy::Decide(Input());
  Apply(running);
  if (running.status.phase != policy::Phase::kRunning) {
    error_ = "phase " + std::string(policy::ToString(running.status.phase)) + ", not Running";
  }
}

policy::LifecycleInput RunningJob::Input() const {
  policy::LifecycleInput in;
  in.job = &job_;
  in.spec = &spec_;
  in.now = now_;
  for (size_t i = 0; i < pods_.size(); ++i) {
    in.pods.push_back({&pods_[i], policy::ReplicaType::kWorker, indexes_[i], attempt_});
  }
  in.node_health = [](std::string_view) { return policy::NodeHealth{}; };
  in.node_cordoned = [](std::string_view) { return false; };
  return in;
}

policy::LifecycleInput RunningJob::FaultInput(int32_t worker) const {
  policy::LifecycleInput in = Input();
  const int32_t slice = worker / hosts_, host = worker % hosts_;
  const std::string node = NodeName(slice, host);
  in.node_health = [node](std::string_view name) {
    if (name != node) return policy::NodeHealth{};
    return policy::NodeHealth{policy::NodeVerdict::kUnhealthy, "TPUUnhealthy",
                              "node " + node + ": TPUUnhealthy", false, std::nullopt};
  };
  return in;
}

void RunningJob::Apply(const policy::Plan& plan) {
  job_.status = plan.status.ToJson();
  if (!plan.create.empty()) attempt_ = plan.status.attempt;
  for (const policy::PodToCreate& create : plan.create) {
    cache::PodInfo pod;
    pod.ns = InternedString::Intern(kNamespace);
    pod.name = std::string(kName) + "-worker-" + std::to_string(create.index);
    pod.uid = "pod-uid-" + std::to_string(create.index);
    pod.labels = cache::LabelMap{{cache::kJobNameLabel, kName},
                                 {"tpujob.dev/replica-type", "worker"},
                                 {"tpujob.dev/replica-index", std::to_string(create.index)},
                                 {"tpujob.dev/attempt", std::to_string(plan.status.attempt)}};
    pod.owner = {InternedString::Intern("TPUJob"), InternedString::Intern(kName),
                 InternedString::Intern(kUid)};
    pod.node_name = InternedString::Intern(NodeName(create.index / hosts_, create.index % hosts_));
    pod.phase = cache::PodPhase::kRunning;
    pod.ready = true;
    cache::ContainerInfo c;
    c.name = InternedString::Intern("trainer");
    c.state = cache::ContainerState::kRunning;
    c.ready = true;
    c.tpu_request = 4;
    pod.containers.push_back(std::move(c));
    pods_.push_back(std::move(pod));
    indexes_.push_back(create.index);
  }
  now_ += std::chrono::seconds(1);
}

}  // namespace tpujob::bench
