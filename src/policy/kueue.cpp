#include "policy/kueue.h"

#include <algorithm>
#include <cstdio>

namespace tpujob::policy::kueue {
namespace {

// Kueue's own reasons (kueue.x-k8s.io/v1beta2).
constexpr std::string_view kEvictedByPreemption = "Preempted";
constexpr std::string_view kEvictedDueToNodeFailures = "NodeFailures";
// Kueue's metav1.Condition messages are bounded; ours are far shorter, but a Kueue message
// copied into one is not.
constexpr size_t kMaxConditionMessage = 32 * 1024;

const Json* FindCondition(const Json& status, std::string_view type) {
  auto it = status.find("conditions");
  if (it == status.end() || !it->is_array()) return nullptr;
  for (const Json& c : *it) {
    if (c.is_object() && c.value("type", "") == type) return &c;
  }
  return nullptr;
}

bool ConditionIs(const Json& status, std::string_view type, std::string_view value) {
  const Json* c = FindCondition(status, type);
  return c != nullptr && c->value("status", "") == value;
}

// Sets condition `type` in `conditions` as apimeta.SetStatusCondition does: the transition time
// moves only when the status changes.
void SetCondition(Json& conditions, std::string_view type, bool status, std::string_view reason,
                  std::string_view message, int64_t generation, WallTime now) {
  const std::string value = status ? "True" : "False";
  std::string text(message.substr(0, kMaxConditionMessage));
  for (Json& c : conditions) {
    if (!c.is_object() || c.value("type", "") != type) continue;
    if (c.value("status", "") != value) {
      c["status"] = value;
      c["lastTransitionTime"] = cache::FormatRfc3339(now);
    }
    c["reason"] = std::string(reason);
    c["message"] = std::move(text);
    c["observedGeneration"] = generation;
    return;
  }
  conditions.push_back(Json{{"type", std::string(type)},
                            {"status", value},
                            {"reason", std::string(reason)},
                            {"message", std::move(text)},
                            {"lastTransitionTime", cache::FormatRfc3339(now)},
                            {"observedGeneration", generation}});
}

Json Conditions(const Json& status) {
  auto it = status.find("conditions");
  return it != status.end() && it->is_array() ? *it : Json::array();
}

Json StatusPatch(std::string_view resource_version, Json status) {
  return Json{{"metadata", {{"resourceVersion", std::string(resource_version)}}},
              {"status", std::move(status)}};
}

}  // namespace

std::string QueueName(const cache::TPUJobInfo& job) {
  return std::string(job.labels.Value(kQueueNameLabel));
}

std::string WorkloadName(std::string_view job_name, std::string_view job_uid) {
  // FNV-1a over the uid: stable across processes and versions (std::hash is neither).
  uint64_t hash = 14695981039346656037ULL;
  for (unsigned char c : job_uid) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  char suffix[8];
  std::snprintf(suffix, sizeof(suffix), "%05x", static_cast<unsigned>(hash & 0xfffff));
  constexpr size_t kMaxName = 253;
  const std::string prefix = "tpujob-";
  const size_t room = kMaxName - prefix.size() - 1 - 5;
  std::string name = prefix + std::string(job_name.substr(0, room));
  while (!name.empty() && (name.back() == '-' || name.back() == '.')) name.pop_back();
  return name + "-" + suffix;
}

std::string PodSetName(const JobSpec& spec, ReplicaType type, int32_t index) {
  if (type == ReplicaType::kMaster) return "master";
  const int32_t room = kMaxPodSets - (spec.Replicas(ReplicaType::kMaster) > 0 ? 1 : 0);
  if (!spec.Multislice() || spec.tpu.slices > room) return "workers";
  return "slice-" + std::to_string(spec.SliceOf(index));
}

WorkloadState ReadWorkload(std::string_view name, std::string_view owner_uid, int64_t generation,
                           const Json& spec, const Json& status) {
  WorkloadState w;
  w.name = name;
  w.owner_uid = owner_uid;
  w.generation = generation;
  if (spec.is_object()) {
    auto active = spec.find("active");
    w.active = active == spec.end() || !active->is_boolean() || active->get<bool>();
  }
  if (!status.is_object()) return w;
  w.quota_reserved = ConditionIs(status, "QuotaReserved", "True");
  w.admitted = ConditionIs(status, "Admitted", "True");
  w.finished = ConditionIs(status, "Finished", "True");
  if (const Json* evicted = FindCondition(status, "Evicted");
      evicted != nullptr && evicted->value("status", "") == "True") {
    w.evicted = true;
    w.evicted_reason = evicted->value("reason", "");
    w.evicted_message = evicted->value("message", "");
  }
  if (const Json* reserved = FindCondition(status, "QuotaReserved");
      reserved != nullptr && reserved->value("status", "") == "False") {
    w.pending_message = reserved->value("message", "");
  }
  auto admission = status.find("admission");
  if (admission != status.end() && admission->is_object()) {
    w.has_admission = true;
    w.cluster_queue = admission->value("clusterQueue", "");
    auto assignments = admission->find("podSetAssignments");
    if (assignments != admission->end() && assignments->is_array()) {
      for (const Json& a : *assignments) {
        if (!a.is_object()) continue;
        auto& flavors = w.flavors[a.value("name", "")];
        auto f = a.find("flavors");
        if (f == a.end() || !f->is_object()) continue;
        for (const auto& [resource, flavor] : f->items()) {
          if (flavor.is_string()) flavors[resource] = flavor.get<std::string>();
        }
      }
    }
  }
  return w;
}

Placement FlavorPlacement(const Json& resource_flavor) {
  Placement p;
  const Json spec =
      resource_flavor.is_object() ? resource_flavor.value("spec", Json::object()) : Json::object();
  if (auto labels = spec.find("nodeLabels"); labels != spec.end() && labels->is_object()) {
    for (const auto& [key, value] : labels->items()) {
      if (value.is_string()) p.node_labels[key] = value.get<std::string>();
    }
  }
  if (auto tolerations = spec.find("tolerations");
      tolerations != spec.end() && tolerations->is_array()) {
    for (const Json& t : *tolerations) {
      if (t.is_object()) p.tolerations.push_back(t);
    }
  }
  return p;
}

KueueVerdict DecideKueue(const KueueInput& in) {
  KueueVerdict v;
  v.reason = "KueuePending";
  const Phase phase = in.status != nullptr ? in.status->phase : Phase::kNone;
  const WorkloadState* w = in.workload;
  if (IsTerminal(phase)) {
    // Finished: Kueue stops counting the quota once the Workload says so.
    if (w != nullptr && !w->finished) v.finish = phase == Phase::kSucceeded;
    return v;
  }
  if (w == nullptr) {
    v.create_workload = in.spec != nullptr;
    v.message = "creating the Kueue Workload";
    return v;
  }
  const bool suspended = in.spec != nullptr && in.spec->suspend;
  if (w->active == suspended) v.set_active = !suspended;
  const bool holds_admission = in.status != nullptr &&
                               in.status->ConditionTrue(condition::kAdmitted) &&
                               phase != Phase::kQueued && phase != Phase::kSuspended;
  if (w->evicted) {
    const std::string why = "Kueue evicted Workload " + w->name + " (" + w->evicted_reason + ")" +
                            (w->evicted_message.empty() ? "" : ": " + w->evicted_message);
    if (holds_admission) {
      v.evict = why;
    } else if (!in.pods_left && w->HoldsQuota()) {
      v.release_quota = true;
    }
    v.message = why + "; waiting for Kueue to admit it again";
    return v;
  }
  if (suspended || !w->active) {
    v.message = suspended ? "Workload " + w->name + " is inactive while the job is suspended"
                          : "activating Workload " + w->name + ": the job was resumed";
    return v;
  }
  if (w->quota_reserved && w->admitted) {
    v.admit = true;
    v.reason = "Admitted";
    v.message = "Kueue admitted Workload " + w->name +
                (w->cluster_queue.empty() ? "" : " in ClusterQueue " + w->cluster_queue);
    return v;
  }
  v.message = "waiting for Kueue to admit Workload " + w->name +
              (w->pending_message.empty() ? "" : ": " + w->pending_message);
  return v;
}

Json ReleaseQuotaPatch(const WorkloadState& workload, const Json& status,
                       std::string_view resource_version, WallTime now) {
  Json conditions = Conditions(status);
  const std::string message = workload.evicted_message.empty()
                                  ? "the job stopped after its eviction"
                                  : workload.evicted_message;
  // Kueue queues the Workload again at once after these; after the others (a deactivation, a
  // pods-ready timeout) its own controller decides when.
  const bool requeue = workload.evicted_reason == kEvictedByPreemption ||
                       workload.evicted_reason == kEvictedDueToNodeFailures;
  SetCondition(conditions, "Requeued", requeue, workload.evicted_reason, message,
               workload.generation, now);
  SetCondition(conditions, "QuotaReserved", false, "Pending", message, workload.generation, now);
  SetCondition(conditions, "Admitted", false, "NoReservation", "The workload has no reservation",
               workload.generation, now);
  return StatusPatch(resource_version,
                     Json{{"admission", nullptr}, {"conditions", std::move(conditions)}});
}

Json FinishPatch(const WorkloadState& workload, const Json& status,
                 std::string_view resource_version, bool succeeded, std::string_view message,
                 WallTime now) {
  Json conditions = Conditions(status);
  SetCondition(conditions, "Finished", true, succeeded ? "Succeeded" : "Failed", message,
               workload.generation, now);
  return StatusPatch(resource_version, Json{{"conditions", std::move(conditions)}});
}

}  // namespace tpujob::policy::kueue
