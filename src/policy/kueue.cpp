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

// FNV-1a: a hash stable across processes and versions (std::hash is neither), for names and
// digests that outlive the process that wrote them.
uint64_t Fnv1a(std::string_view text) {
  uint64_t hash = 14695981039346656037ULL;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  return hash;
}

Json Conditions(const Json& status) {
  auto it = status.find("conditions");
  return it != status.end() && it->is_array() ? *it : Json::array();
}

Json StatusPatch(std::string_view resource_version, Json status) {
  return Json{{"metadata", {{"resourceVersion", std::string(resource_version)}}},
              {"status", std::move(status)}};
}

// spec.active follows spec.suspend; a deactivation made by someone else is left alone.
void FollowSuspend(const KueueInput& in, const WorkloadState& w, KueueVerdict& v) {
  const bool suspended = in.spec != nullptr && in.spec->suspend;
  if (suspended && w.active) {
    v.set_active = false;
  } else if (!suspended && !w.active && w.deactivated_for_suspend) {
    v.set_active = true;
  }
}

// Whether the job's status shows an attempt it was admitted for running (pods being created,
// running, or a worker restarting in place). In a manager cluster that status is the worker's
// copy's.
bool AttemptRunning(const KueueInput& in) {
  if (in.status == nullptr || !in.status->ConditionTrue(condition::kAdmitted)) return false;
  const Phase phase = in.status->phase;
  return phase == Phase::kStarting || phase == Phase::kRunning || phase == Phase::kRestarting;
}

std::string EvictionText(const WorkloadState& w) {
  return "Kueue evicted Workload " + w.name + " (" + w.evicted_reason + ")" +
         (w.evicted_message.empty() ? "" : ": " + w.evicted_message);
}

}  // namespace

std::string QueueName(const cache::TPUJobInfo& job) {
  return std::string(job.labels.Value(kQueueNameLabel));
}

bool DispatchedByMultiKueue(const cache::TPUJobInfo& job) {
  if (!job.spec.is_object()) return false;
  auto it = job.spec.find("managedBy");
  return it != job.spec.end() && it->is_string() &&
         it->get<std::string>() == kMultiKueueControllerName;
}

std::string PrebuiltWorkloadName(const cache::TPUJobInfo& job) {
  return std::string(job.labels.Value(kPrebuiltWorkloadLabel));
}

std::string WorkloadName(std::string_view job_name, std::string_view job_uid) {
  const uint64_t hash = Fnv1a(job_uid);
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

std::string SpecDigest(const Json& workload_spec) {
  const Json basis = {{"queueName", workload_spec.value("queueName", Json())},
                      {"podSets", workload_spec.value("podSets", Json())}};
  // Over the canonical dump: nlohmann orders object members.
  const uint64_t hash = Fnv1a(basis.dump());
  char out[17];
  std::snprintf(out, sizeof(out), "%016llx", static_cast<unsigned long long>(hash));
  return out;
}

WorkloadState ReadWorkload(const cache::WorkloadInfo& workload) {
  WorkloadState w;
  w.name = workload.name;
  w.owner_uid = workload.owner.uid.str();
  w.generation = workload.generation;
  w.deactivated_for_suspend = workload.annotations.Value(kSuspendedAnnotation) == "true";
  w.spec_digest = std::string(workload.annotations.Value(kSpecDigestAnnotation));
  const Json& spec = workload.spec;
  const Json& status = workload.status;
  if (spec.is_object()) {
    auto active = spec.find("active");
    w.active = active == spec.end() || !active->is_boolean() || active->get<bool>();
  }
  if (!status.is_object()) return w;
  w.quota_reserved = ConditionIs(status, "QuotaReserved", "True");
  w.admitted = ConditionIs(status, "Admitted", "True");
  if (const Json* finished = FindCondition(status, "Finished");
      finished != nullptr && finished->value("status", "") == "True") {
    w.finished = true;
    w.finished_reason = finished->value("reason", "");
    w.finished_message = finished->value("message", "");
  }
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
  if (const Json* ready = FindCondition(status, "PodsReady")) {
    w.pods_ready = ready->value("status", "") == "True";
    w.pods_ready_reason = ready->value("reason", "");
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
  const bool holds_admission = AttemptRunning(in);
  if (w == nullptr) {
    v.create_workload = in.spec != nullptr && in.prebuilt.empty();
    v.message = in.prebuilt.empty() ? "creating the Kueue Workload"
                                    : "waiting for Kueue Workload " + in.prebuilt +
                                          ", which MultiKueue creates for it (label " +
                                          std::string(kPrebuiltWorkloadLabel) + ")";
    // Deleted under a running job (or a job admitted before it named a queue): it runs only on
    // quota, so it stops until Kueue admits the new Workload.
    if (holds_admission) v.evict = "its Kueue Workload is gone; it queues in Kueue again";
    return v;
  }
  if (!in.prebuilt.empty() && w->owner_uid.empty()) {
    // As Kueue's own integrations: the job owns its prebuilt Workload before it uses it.
    v.adopt = true;
    v.message = "adopting Kueue Workload " + w->name + ", which MultiKueue made for it";
    return v;
  }
  const bool suspended = in.spec != nullptr && in.spec->suspend;
  FollowSuspend(in, *w, v);
  if (w->evicted || (holds_admission && !w->quota_reserved)) {
    const std::string why =
        w->evicted ? EvictionText(*w)
                   : "Kueue Workload " + w->name + " no longer holds quota" +
                         (w->pending_message.empty() ? "" : " (" + w->pending_message + ")");
    if (holds_admission) {
      v.evict = why;
    } else if (w->evicted && !in.pods_left && w->HoldsQuota()) {
      v.release_quota = true;
    }
    v.readmission = true;
    v.message = why + "; waiting for Kueue to admit it again";
    return v;
  }
  // Pod sets are immutable in Kueue: a waiting job whose pod sets or queue changed gets a new
  // Workload (an admitted one keeps its own: its layout cannot change while it runs).
  if (!holds_admission && !in.wanted_digest.empty() && w->spec_digest != in.wanted_digest) {
    if (!in.prebuilt.empty()) {
      // Not ours to replace: Kueue's answer to a prebuilt Workload that does not fit its job.
      v.out_of_sync = !w->finished;
      v.message = "Kueue Workload " + w->name +
                  " does not describe the job (its pods or queue differ); it cannot run on it";
      return v;
    }
    v.recreate = true;
    v.message = "replacing Kueue Workload " + w->name + ": the job's pods or queue changed";
    return v;
  }
  if (suspended || !w->active) {
    v.message = suspended ? "Workload " + w->name + " is inactive while the job is suspended"
                : w->deactivated_for_suspend
                    ? "activating Workload " + w->name + ": the job was resumed"
                    : "Workload " + w->name +
                          " was deactivated (spec.active is false) by Kueue or an administrator; "
                          "it is queued again once spec.active is true";
    return v;
  }
  if (w->quota_reserved && w->admitted) {
    // PodsReady, as Kueue's own integrations keep it (its waitForPodsReady evicts a Workload
    // whose pods are not all ready in time): True while the job runs with every pod ready;
    // False while its pods start, restart, or a re-issued attempt waits for the old ones to go.
    const bool ready = phase == Phase::kRunning;
    if (w->pods_ready != ready) {
      v.pods_ready = ready;
      const bool was_ready = w->pods_ready.has_value() &&
                             (*w->pods_ready || w->pods_ready_reason == "WaitForRecovery");
      v.pods_ready_reason = ready ? (was_ready ? "Recovered" : "Started")
                                  : (was_ready ? "WaitForRecovery" : "WaitForStart");
    }
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

KueueVerdict DecideDispatch(const KueueInput& in) {
  KueueVerdict v;
  v.reason = "KueuePending";
  const Phase phase = in.status != nullptr ? in.status->phase : Phase::kNone;
  const WorkloadState* w = in.workload;
  if (IsTerminal(phase)) {
    if (w != nullptr && !w->finished) v.finish = phase == Phase::kSucceeded;
    return v;
  }
  if (w == nullptr) {
    v.create_workload = in.spec != nullptr;
    v.message = "creating the Kueue Workload";
    return v;
  }
  if (w->finished) {
    v.message = "Kueue Workload " + w->name + " is finished (" + w->finished_reason + ")" +
                (w->finished_message.empty() ? "" : ": " + w->finished_message) +
                "; the job runs no more";
    return v;
  }
  FollowSuspend(in, *w, v);
  if (w->evicted) {
    // As Kueue's own integrations: the quota goes back once the job stopped. Here that is the
    // copy in the worker, which MultiKueue deactivates there (its pods stop with their grace
    // period) and whose stopped status it copies back; a job no copy of which runs gives it
    // back at once.
    const bool copy_running = AttemptRunning(in);
    v.release_quota = w->HoldsQuota() && !copy_running;
    v.message = EvictionText(*w) + (copy_running ? "; MultiKueue stops its copy in the worker"
                                                 : "; it waits to be admitted again");
    return v;
  }
  if (!w->HoldsQuota() && !in.wanted_digest.empty() && w->spec_digest != in.wanted_digest) {
    v.recreate = true;
    v.message = "replacing Kueue Workload " + w->name + ": the job's pods or queue changed";
    return v;
  }
  v.message = w->quota_reserved && w->admitted
                  ? "MultiKueue runs it in a worker cluster: Kueue admitted Workload " + w->name +
                        (w->cluster_queue.empty() ? "" : " in ClusterQueue " + w->cluster_queue)
                  : "waiting for Kueue and MultiKueue to admit Workload " + w->name +
                        (w->pending_message.empty() ? "" : ": " + w->pending_message);
  return v;
}

std::optional<JobStatus> DispatchStatus(const KueueInput& in, const KueueVerdict& verdict,
                                        int64_t generation, WallTime now) {
  const JobStatus current = in.status != nullptr ? *in.status : JobStatus{};
  if (IsTerminal(current.phase)) return std::nullopt;
  const WorkloadState* w = in.workload;
  JobStatus next = current;
  if (w != nullptr && w->finished) {
    // Finished without a finished copy (out of sync in the worker, say): Kueue admits it no
    // more, so it has failed. (A copy that ended has its terminal status copied first.)
    next.phase = Phase::kFailed;
    if (!next.completion_time) next.completion_time = now;
    next.ready_workers.clear();
    next.SetCondition(condition::kAdmitted, false, "KueueWorkloadFinished", verdict.message, now,
                      generation);
    next.SetCondition(condition::kFailed, true, "KueueWorkloadFinished", verdict.message, now,
                      generation);
    return next == current ? std::nullopt : std::optional<JobStatus>(std::move(next));
  }
  // Admitted, or evicted while the copy still runs: the copy's status is MultiKueue's to write.
  if (w != nullptr && w->HoldsQuota() && AttemptRunning(in)) return std::nullopt;
  if (w != nullptr && w->quota_reserved && w->admitted && !w->evicted) return std::nullopt;
  next.phase = in.spec != nullptr && in.spec->suspend ? Phase::kSuspended : Phase::kQueued;
  if (!next.queued_at) next.queued_at = now;
  next.ready_workers.clear();
  next.SetCondition(condition::kAdmitted, false, verdict.reason, verdict.message, now, generation);
  if (next.ConditionTrue(condition::kReady)) {
    next.SetCondition(condition::kReady, false, "NotRunning", "no copy of the job runs", now,
                      generation);
  }
  if (next == current) return std::nullopt;
  return next;
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

Json ConditionPatch(const WorkloadState& workload, const Json& status,
                    std::string_view resource_version, std::string_view type, bool value,
                    std::string_view reason, std::string_view message, WallTime now) {
  Json conditions = Conditions(status);
  SetCondition(conditions, type, value, reason, message, workload.generation, now);
  return StatusPatch(resource_version, Json{{"conditions", std::move(conditions)}});
}

}  // namespace tpujob::policy::kueue
