// Builders and a small cluster simulator for the policy tests.
//
// PodSim plays the API server and the kubelet around policy::Decide(): it keeps the job's
// status and its pods, applies each Plan (writes the status, creates the pods of create[],
// marks the pods of remove[] deleting) and lets a test change pod states (ready, exits,
// eviction) and finish deletions. It also checks the invariants every plan must keep.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <expected>
#include <functional>
#include <list>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cache/intern.h"
#include "cache/objects.h"
#include "policy/job_spec.h"
#include "policy/job_status.h"
#include "policy/lifecycle.h"

namespace tpujob::policy {

// Readable gtest output for the policy enums.
inline void PrintTo(ExitClass c, std::ostream* os) { *os << ToString(c); }
inline void PrintTo(Phase p, std::ostream* os) { *os << "Phase(" << ToString(p) << ")"; }
inline void PrintTo(const PodToCreate& c, std::ostream* os) {
  *os << ToString(c.type) << "-" << c.index << (c.node.empty() ? "" : " on " + c.node);
}

}  // namespace tpujob::policy

namespace tpujob::policy::fixtures {

using cache::InternedString;

inline constexpr char kJobName[] = "train";
inline constexpr char kJobUid[] = "job-uid-1";

// A fixed wall time in whole seconds: 2024-01-01T00:00:00Z plus `seconds`.
inline WallTime At(int64_t seconds) {
  return WallTime{} + std::chrono::seconds(1704067200 + seconds);
}

// One container, with a memory-backed /dev/shm mounted (what a job whose pre-flight checks disk
// must have: ParseJobSpec refuses one without).
inline Json ContainerTemplate(const char* name = "trainer") {
  return Json{{"spec",
               {{"volumes", Json::array({{{"name", "shm"}, {"emptyDir", {{"medium", "Memory"}}}}})},
                {"containers",
                 Json::array({{{"name", name},
                               {"image", "trainer:1"},
                               {"volumeMounts",
                                Json::array({{{"name", "shm"}, {"mountPath", "/dev/shm"}}})}}})}}}};
}

// A valid spec: `workers` workers of 4 chips on a 2x(2*workers) slice, an optional Master.
inline Json SpecJson(int workers = 2, bool master = false) {
  Json spec = {
      {"tpu",
       {{"accelerator", "tpu-v5-lite-podslice"},
        {"topology", "2x" + std::to_string(2 * workers)},
        {"chipsPerWorker", 4}}},
      {"replicaSpecs", {{"Worker", {{"replicas", workers}, {"template", ContainerTemplate()}}}}}};
  if (master) {
    spec["replicaSpecs"]["Master"] = {{"replicas", 1},
                                      {"template", ContainerTemplate("coordinator")}};
  }
  return spec;
}

inline cache::TPUJobInfo MakeJob(Json spec, Json status = Json::object(),
                                 cache::LabelMap annotations = {}) {
  cache::TPUJobInfo job;
  job.ns = InternedString::Intern("team-a");
  job.name = kJobName;
  job.uid = kJobUid;
  job.resource_version = "1";
  job.generation = 1;
  job.annotations = std::move(annotations);
  job.spec = std::move(spec);
  job.status = std::move(status);
  return job;
}

inline std::string PodName(ReplicaType type, int32_t index) {
  return std::string(kJobName) + "-" + std::string(LowerName(type)) + "-" + std::to_string(index);
}

// A pod of the job, just created: Pending, one container without a status yet.
inline cache::PodInfo MakePod(ReplicaType type, int32_t index, int32_t attempt, std::string uid) {
  cache::PodInfo pod;
  pod.ns = InternedString::Intern("team-a");
  pod.name = PodName(type, index);
  pod.uid = std::move(uid);
  pod.labels = cache::LabelMap{{cache::kJobNameLabel, kJobName},
                               {"tpujob.dev/replica-type", LowerName(type)},
                               {"tpujob.dev/replica-index", std::to_string(index)},
                               {"tpujob.dev/attempt", std::to_string(attempt)}};
  pod.owner = {InternedString::Intern("TPUJob"), InternedString::Intern(kJobName),
               InternedString::Intern(kJobUid)};
  pod.node_name = InternedString::Intern("node-" + std::to_string(index));
  pod.phase = cache::PodPhase::kPending;
  cache::ContainerInfo c;
  c.name = InternedString::Intern(type == ReplicaType::kMaster ? "coordinator" : "trainer");
  pod.containers.push_back(std::move(c));
  return pod;
}

inline void SetRunning(cache::PodInfo& pod, bool ready) {
  pod.phase = cache::PodPhase::kRunning;
  pod.ready = ready;
  for (cache::ContainerInfo& c : pod.containers) {
    c.state = cache::ContainerState::kRunning;
    c.ready = ready;
  }
}

// The main container exited; restartPolicy Never makes the pod Succeeded or Failed.
inline void SetExited(cache::PodInfo& pod, int32_t code, std::string_view reason = "",
                      std::string message = "") {
  pod.phase = code == 0 ? cache::PodPhase::kSucceeded : cache::PodPhase::kFailed;
  pod.ready = false;
  cache::ContainerInfo& c = pod.containers.front();
  c.state = cache::ContainerState::kTerminated;
  c.ready = false;
  c.exit_code = code;
  c.reason = InternedString::Intern(reason.empty() ? (code == 0 ? "Completed" : "Error") : reason);
  c.message = cache::InternedString::Intern(message);
}

// Evicted by the kubelet: the pod failed, no container exited on its own.
inline void SetEvicted(cache::PodInfo& pod) {
  pod.phase = cache::PodPhase::kFailed;
  pod.ready = false;
  pod.reason = InternedString::Intern("Evicted");
  pod.message = cache::InternedString::Intern("The node was low on resource: memory.");
  for (cache::ContainerInfo& c : pod.containers) {
    c.state = cache::ContainerState::kNone;
    c.ready = false;
  }
}

// Node health by name; nodes not listed are healthy.
class Nodes {
 public:
  void Set(const std::string& node, NodeVerdict verdict, std::string reason,
           bool unreachable = false) {
    health_[node] =
        NodeHealth{verdict, reason, "node " + node + ": " + reason, unreachable, std::nullopt};
  }
  std::function<NodeHealth(std::string_view)> Fn() const {
    return [health = health_](std::string_view node) {
      auto it = health.find(std::string(node));
      return it == health.end() ? NodeHealth{} : it->second;
    };
  }

 private:
  std::map<std::string, NodeHealth> health_;
};

inline const EventToRecord* FindEvent(const Plan& plan, std::string_view reason) {
  for (const EventToRecord& e : plan.events) {
    if (e.reason == reason) return &e;
  }
  return nullptr;
}

inline std::vector<std::string> RemovedNames(const Plan& plan) {
  std::vector<std::string> out;
  for (const PodToDelete& d : plan.remove) out.push_back(d.name);
  return out;
}

// The job and its pods, driven through Decide().
class PodSim {
 public:
  struct SimPod {
    cache::PodInfo pod;
    ReplicaType type;
    int32_t index;
    int32_t attempt;
  };

  explicit PodSim(Json spec, cache::LabelMap annotations = {})
      : job_(MakeJob(std::move(spec), Json::object(), std::move(annotations))),
        spec_(ParseJobSpec(job_)) {}

  // The input Decide() sees now.
  LifecycleInput Input(bool admit = true) const {
    LifecycleInput in;
    in.job = &job_;
    in.spec = &spec_;
    in.now = now_;
    in.admit = admit;
    in.preempt = preempt;
    in.node_health = node_health;
    for (const SimPod& p : pods_) in.pods.push_back({&p.pod, p.type, p.index, p.attempt});
    for (const cache::PodInfo& p : strays_) in.strays.push_back(&p);
    return in;
  }

  Plan Decide(bool admit = true) const { return policy::Decide(Input(admit)); }

  // What the queue says of the job while it is admitted (LifecycleInput::preempt).
  std::optional<PreemptOrder> preempt;
  // LifecycleInput::node_health (e.g. Nodes::Fn()); unset: the node rules are off.
  std::function<NodeHealth(std::string_view)> node_health;

  // Decides, checks that deciding again on the result changes nothing, applies the plan and
  // moves the clock on by one second.
  Plan Step(bool admit = true) {
    Plan plan = Decide(admit);
    if (check_fixed_point) ExpectFixedPoint(plan, admit);
    Apply(plan);
    return plan;
  }

  // Decide() on its own output with the same pods (later, with the queue restating its
  // answer) writes nothing new and records no event.
  void ExpectFixedPoint(const Plan& plan, bool admit) const {
    cache::TPUJobInfo again = job_;
    again.status = plan.status.ToJson();
    LifecycleInput in = Input(admit);
    in.job = &again;
    in.now = now_ + std::chrono::seconds(7);
    if (plan.status.phase == Phase::kQueued) {
      // A queued job waits: the queue says so with the reason already on the job.
      in.admit = false;
      if (const Condition* c = plan.status.FindCondition(condition::kAdmitted)) {
        in.not_admitted_reason = c->reason;
        in.not_admitted_message = c->message;
      }
    }
    const Plan next = policy::Decide(in);
    EXPECT_EQ(next.status.ToJson(), plan.status.ToJson())
        << "not a fixed point in phase " << ToString(plan.status.phase);
    EXPECT_TRUE(next.events.empty()) << "event " << next.events.front().reason
                                     << " recorded again in phase " << ToString(plan.status.phase);
  }

  // Writes the status, records the removals and the creations.
  void Apply(const Plan& plan) {
    job_.status = plan.status.ToJson();
    if (plan.status.attempt > max_attempt_seen) max_attempt_seen = plan.status.attempt;
    for (const auto& [key, record] : plan.status.worker_restarts) {
      if (record.count > max_restarts_seen) max_restarts_seen = record.count;
    }
    for (const PodToDelete& d : plan.remove) {
      bool found = false;
      for (SimPod& p : pods_) {
        if (p.pod.uid != d.uid) continue;
        found = true;
        if (!p.pod.deleting()) p.pod.deletion_timestamp = now_;
      }
      std::erase_if(strays_, [&](const cache::PodInfo& s) {
        if (s.uid == d.uid) found = true;
        return s.uid == d.uid;
      });
      if (!found) violations.push_back("removed a pod it was not shown: " + d.name);
    }
    for (const PodToCreate& c : plan.create) {
      for (const SimPod& p : pods_) {
        if (p.type == c.type && p.index == c.index) {
          violations.push_back("created " + PodName(c.type, c.index) + " of attempt " +
                               std::to_string(plan.status.attempt) + " while pod " + p.pod.uid +
                               " of attempt " + std::to_string(p.attempt) + " exists");
        }
        if (p.attempt != plan.status.attempt) {
          violations.push_back("created a pod of attempt " + std::to_string(plan.status.attempt) +
                               " while pod " + p.pod.uid + " of attempt " +
                               std::to_string(p.attempt) + " exists");
        }
      }
      const std::string uid = "pod-uid-" + std::to_string(++next_uid_);
      pods_.push_back({MakePod(c.type, c.index, plan.status.attempt, uid), c.type, c.index,
                       plan.status.attempt});
      ++created;
    }
    now_ += std::chrono::seconds(1);
  }

  // The kubelet and the garbage collector finish every pending deletion.
  void FinishDeletions() {
    std::erase_if(pods_, [](const SimPod& p) { return p.pod.deleting(); });
  }

  // As FinishDeletions, except for the pod with `uid` (its kubelet is gone).
  void FinishDeletionsExcept(const std::string& uid) {
    std::erase_if(pods_, [&](const SimPod& p) { return p.pod.deleting() && p.pod.uid != uid; });
  }

  // The newest pod of a replica.
  cache::PodInfo& Pod(ReplicaType type, int32_t index) {
    for (auto it = pods_.rbegin(); it != pods_.rend(); ++it) {
      if (it->type == type && it->index == index) return it->pod;
    }
    ADD_FAILURE() << "no pod for " << PodName(type, index);
    static cache::PodInfo none;
    return none;
  }
  cache::PodInfo& Worker(int32_t index) { return Pod(ReplicaType::kWorker, index); }
  cache::PodInfo& Master() { return Pod(ReplicaType::kMaster, 0); }

  void AllReady() {
    for (SimPod& p : pods_) {
      if (!p.pod.deleting() && !p.pod.terminated()) SetRunning(p.pod, true);
    }
  }

  // Adds a pod directly, as if created by an earlier run of the operator.
  cache::PodInfo& AddPod(ReplicaType type, int32_t index, int32_t attempt) {
    pods_.push_back({MakePod(type, index, attempt, "pod-uid-" + std::to_string(++next_uid_)), type,
                     index, attempt});
    return pods_.back().pod;
  }
  cache::PodInfo& AddStray(std::string name) {
    cache::PodInfo pod = MakePod(ReplicaType::kWorker, 0, 1, "stray-uid-" + name);
    pod.name = std::move(name);
    pod.labels = cache::LabelMap{{cache::kJobNameLabel, kJobName}};
    strays_.push_back(std::move(pod));
    return strays_.back();
  }

  JobStatus Status() const { return JobStatus::FromJson(job_.status); }
  Phase phase() const { return Status().phase; }
  std::list<SimPod>& pods() { return pods_; }
  const std::list<cache::PodInfo>& strays() const { return strays_; }
  cache::TPUJobInfo& job() { return job_; }
  void Reparse() { spec_ = ParseJobSpec(job_); }
  const std::expected<JobSpec, std::string>& spec() const { return spec_; }
  WallTime now() const { return now_; }
  void Advance(std::chrono::seconds by) { now_ += by; }

  // Live pods: not terminated, not being deleted.
  int LivePods() const {
    int n = 0;
    for (const SimPod& p : pods_) n += !p.pod.deleting() && !p.pod.terminated();
    return n;
  }

  bool check_fixed_point = false;
  std::vector<std::string> violations;
  int32_t max_attempt_seen = 0;
  int32_t max_restarts_seen = 0;
  int created = 0;

 private:
  cache::TPUJobInfo job_;
  std::expected<JobSpec, std::string> spec_;
  std::list<SimPod> pods_;
  std::list<cache::PodInfo> strays_;
  WallTime now_ = At(0);
  int next_uid_ = 0;
};

}  // namespace tpujob::policy::fixtures
