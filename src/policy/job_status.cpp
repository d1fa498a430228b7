#include "policy/job_status.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cache/objects.h"

namespace tpujob::policy {
namespace {

WallTime Truncate(WallTime t) { return std::chrono::floor<std::chrono::seconds>(t); }

std::optional<WallTime> ReadTime(const Json& object, std::string_view key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return std::nullopt;
  auto parsed = cache::ParseRfc3339(it->get_ref<const std::string&>());
  if (!parsed) return std::nullopt;
  return Truncate(*parsed);
}

std::string ReadString(const Json& object, std::string_view key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

template <typename Int>
Int ReadInt(const Json& object, std::string_view key, Int fallback = 0) {
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<Int>() : fallback;
}

void PutTime(Json& out, const char* key, const std::optional<WallTime>& t) {
  if (t) out[key] = cache::FormatRfc3339(*t);
}

void PutString(Json& out, const char* key, const std::string& value) {
  if (!value.empty()) out[key] = value;
}

// Goodput times keep milliseconds: its intervals are short compared to a second.
std::optional<WallTime> ReadMillis(const Json& object, std::string_view key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return std::nullopt;
  auto parsed = cache::ParseRfc3339(it->get_ref<const std::string&>());
  if (!parsed) return std::nullopt;
  return std::chrono::floor<std::chrono::milliseconds>(*parsed);
}

void PutMillis(Json& out, const char* key, const std::optional<WallTime>& t) {
  if (t) out[key] = cache::FormatRfc3339Millis(*t);
}

// Seconds with three decimals <-> milliseconds; 0 for anything but a number.
int64_t SecondsAsMillis(const Json& seconds) {
  return seconds.is_number() ? std::llround(seconds.get<double>() * 1000.0) : 0;
}
int64_t ReadSecondsAsMillis(const Json& object, std::string_view key) {
  auto it = object.find(key);
  return it == object.end() ? 0 : SecondsAsMillis(*it);
}
Json MillisAsSeconds(int64_t ms) {
  if (ms % 1000 == 0) return Json(ms / 1000);
  return Json(static_cast<double>(ms) / 1000.0);
}

std::string CauseFromKey(std::string_view key) {
  std::string cause(key);
  if (!cause.empty()) {
    cause[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(cause[0])));
  }
  return cause;
}

Goodput ReadGoodput(const Json& j) {
  Goodput g;
  g.state = ReadString(j, "state");
  g.state_since = ReadMillis(j, "stateSince");
  g.accounted_until = ReadMillis(j, "accountedUntil");
  g.chips = ReadInt<int64_t>(j, "chips");
  g.missing_chips = ReadInt<int64_t>(j, "missingChips");
  g.degraded_ms = ReadSecondsAsMillis(j, "degradedSeconds");
  g.productive_ms = ReadSecondsAsMillis(j, "productiveSeconds");
  g.productive_chip_ms = ReadSecondsAsMillis(j, "productiveChipSeconds");
  for (const auto& [field, target] :
       {std::pair<const char*, std::map<std::string, int64_t, std::less<>>*>{"lostSeconds",
                                                                             &g.lost_ms},
        {"lostChipSeconds", &g.lost_chip_ms}}) {
    auto it = j.find(field);
    if (it == j.end() || !it->is_object()) continue;
    for (const auto& [key, value] : it->items()) {
      if (const int64_t ms = SecondsAsMillis(value); ms > 0) (*target)[CauseFromKey(key)] = ms;
    }
  }
  return g;
}

Json WriteGoodput(const Goodput& g) {
  Json out = Json::object();
  PutString(out, "state", g.state);
  PutMillis(out, "stateSince", g.state_since);
  PutMillis(out, "accountedUntil", g.accounted_until);
  out["chips"] = g.chips;
  if (g.missing_chips != 0) out["missingChips"] = g.missing_chips;
  if (g.degraded_ms != 0) out["degradedSeconds"] = MillisAsSeconds(g.degraded_ms);
  out["productiveSeconds"] = MillisAsSeconds(g.productive_ms);
  out["productiveChipSeconds"] = MillisAsSeconds(g.productive_chip_ms);
  for (const auto& [field, source] :
       {std::pair<const char*, const std::map<std::string, int64_t, std::less<>>*>{"lostSeconds",
                                                                                   &g.lost_ms},
        {"lostChipSeconds", &g.lost_chip_ms}}) {
    Json map = Json::object();
    for (const auto& [cause, ms] : *source) {
      if (ms > 0) map[GoodputCauseKey(cause)] = MillisAsSeconds(ms);
    }
    out[field] = std::move(map);
  }
  const int64_t total = g.TotalMs();
  if (total > 0) {
    char ratio[16];
    std::snprintf(ratio, sizeof(ratio), "%.3f",
                  static_cast<double>(g.productive_ms) / static_cast<double>(total));
    out["ratio"] = ratio;
  }
  return out;
}

ReplicaCounts ReadCounts(const Json& j) {
  ReplicaCounts c;
  if (!j.is_object()) return c;
  c.active = ReadInt<int32_t>(j, "active");
  c.ready = ReadInt<int32_t>(j, "ready");
  c.succeeded = ReadInt<int32_t>(j, "succeeded");
  c.failed = ReadInt<int32_t>(j, "failed");
  c.restarts = ReadInt<int32_t>(j, "restarts");
  return c;
}

}  // namespace

std::string_view ToString(Phase phase) {
  switch (phase) {
    case Phase::kNone:
      return "";
    case Phase::kQueued:
      return "Queued";
    case Phase::kStarting:
      return "Starting";
    case Phase::kRunning:
      return "Running";
    case Phase::kRestarting:
      return "Restarting";
    case Phase::kSuspended:
      return "Suspended";
    case Phase::kSucceeded:
      return "Succeeded";
    case Phase::kFailed:
      return "Failed";
  }
  return "";
}

Phase ParsePhase(std::string_view text) {
  for (Phase p : {Phase::kQueued, Phase::kStarting, Phase::kRunning, Phase::kRestarting,
                  Phase::kSuspended, Phase::kSucceeded, Phase::kFailed}) {
    if (ToString(p) == text) return p;
  }
  return Phase::kNone;
}

JobStatus JobStatus::FromJson(const Json& j) {
  JobStatus s;
  if (!j.is_object()) return s;
  s.phase = ParsePhase(ReadString(j, "phase"));
  if (auto it = j.find("conditions"); it != j.end() && it->is_array()) {
    for (const Json& c : *it) {
      if (!c.is_object()) continue;
      Condition cond;
      cond.type = ReadString(c, "type");
      if (cond.type.empty()) continue;
      cond.status = ReadString(c, "status");
      cond.reason = ReadString(c, "reason");
      cond.message = ReadString(c, "message");
      cond.last_transition_time = ReadTime(c, "lastTransitionTime").value_or(WallTime{});
      cond.observed_generation = ReadInt<int64_t>(c, "observedGeneration");
      s.conditions.push_back(std::move(cond));
    }
  }
  s.observed_generation = ReadInt<int64_t>(j, "observedGeneration");
  s.attempt = ReadInt<int32_t>(j, "attempt");
  s.job_retries = ReadInt<int32_t>(j, "jobRetries");
  s.ready_workers = ReadString(j, "readyWorkers");
  if (auto it = j.find("tpu"); it != j.end() && it->is_object()) {
    s.tpu = TpuStatus{.summary = ReadString(*it, "summary"),
                      .type = ReadString(*it, "type"),
                      .accelerator = ReadString(*it, "accelerator"),
                      .topology = ReadString(*it, "topology"),
                      .chips_per_worker = ReadInt<int32_t>(*it, "chipsPerWorker"),
                      .hosts_per_slice = ReadInt<int32_t>(*it, "hostsPerSlice"),
                      .slices = ReadInt<int32_t>(*it, "slices"),
                      .active_slices = ReadInt<int32_t>(*it, "activeSlices"),
                      .slices_summary = ReadString(*it, "slicesSummary"),
                      .slice_slots = {}};
    if (auto slots = it->find("sliceSlots"); slots != it->end() && slots->is_array()) {
      for (const Json& slot : *slots) {
        if (slot.is_number_integer()) s.tpu->slice_slots.push_back(slot.get<int32_t>());
      }
    }
  }
  if (auto it = j.find("replicaStatuses"); it != j.end() && it->is_object()) {
    for (const auto& [type, counts] : it->items()) s.replica_statuses[type] = ReadCounts(counts);
  }
  if (auto it = j.find("workerRestarts"); it != j.end() && it->is_object()) {
    for (const auto& [replica, record] : it->items()) {
      if (!record.is_object()) continue;
      s.worker_restarts[replica] =
          RestartRecord{ReadInt<int32_t>(record, "count"), ReadString(record, "podUID"),
                        ReadString(record, "node"), ReadInt<int32_t>(record, "generation")};
    }
  }
  s.queued_at = ReadTime(j, "queuedAt");
  s.admitted_at = ReadTime(j, "admittedAt");
  s.start_time = ReadTime(j, "startTime");
  s.running_at = ReadTime(j, "runningAt");
  s.completion_time = ReadTime(j, "completionTime");
  if (auto it = j.find("nodePools"); it != j.end() && it->is_array()) {
    for (const Json& pool : *it)
      s.node_pools.push_back(pool.is_string() ? pool.get<std::string>() : "");
  } else if (auto one = j.find("nodePool");
             one != j.end() && one->is_string() && !one->get_ref<const std::string&>().empty()) {
    s.node_pools.push_back(one->get<std::string>());  // written before nodePools existed
  }
  if (auto it = j.find("sliceRecovery"); it != j.end() && it->is_object()) {
    SliceRecovery r;
    if (auto list = it->find("slices"); list != it->end() && list->is_array()) {
      for (const Json& v : *list) {
        if (v.is_number_integer()) r.slices.push_back(v.get<int32_t>());
      }
    }
    if (auto list = it->find("nodes"); list != it->end() && list->is_array()) {
      for (const Json& v : *list) r.nodes.push_back(v.is_string() ? v.get<std::string>() : "");
    }
    if (auto b = it->find("inPlace"); b != it->end() && b->is_boolean())
      r.in_place = b->get<bool>();
    if (!r.slices.empty() || !r.nodes.empty()) s.slice_recovery = std::move(r);
  }
  if (auto it = j.find("elastic"); it != j.end() && it->is_object()) {
    ElasticStatus e{.degraded_since = ReadTime(*it, "degradedSince"),
                    .scale_up_offered_at = ReadTime(*it, "scaleUpOfferedAt"),
                    .checkpoint_at_offer = std::nullopt};
    if (auto c = it->find("checkpointAtOffer"); c != it->end() && c->is_number_integer()) {
      e.checkpoint_at_offer = c->get<int64_t>();
    }
    if (e.degraded_since || e.scale_up_offered_at) s.elastic = e;
  }
  if (auto it = j.find("inPlace"); it != j.end() && it->is_object()) {
    InPlaceStatus p{.generation = ReadInt<int32_t>(*it, "generation"),
                    .barrier_since = ReadTime(*it, "barrierClosedSince")};
    if (p.generation > 0) s.in_place = p;
  }
  if (auto it = j.find("progress"); it != j.end() && it->is_object()) {
    ProgressStatus p;
    const auto integer = [&](const char* key) -> std::optional<int64_t> {
      auto v = it->find(key);
      if (v == it->end() || !v->is_number_integer()) return std::nullopt;
      return v->get<int64_t>();
    };
    p.step = integer("step");
    p.time = ReadTime(*it, "time");
    p.checkpoint_step = integer("checkpointStep");
    p.stalls_in_a_row = ReadInt<int32_t>(*it, "stallsInARow");
    p.stalled_at_step = integer("stalledAtStep");
    p.suspect_node = ReadString(*it, "suspectNode");
    p.stall_seen = ReadTime(*it, "stallSeen");
    p.acted_until = ReadTime(*it, "stallsActedUntil");
    s.progress = std::move(p);
  }
  s.stalls = ReadInt<int32_t>(j, "stalls");
  if (auto it = j.find("queuePosition"); it != j.end() && it->is_number_integer()) {
    s.queue_position = it->get<int32_t>();
  }
  if (auto it = j.find("reissued"); it != j.end() && it->is_boolean()) s.reissued = it->get<bool>();
  s.preemptions = ReadInt<int32_t>(j, "preemptions");
  s.preempted_by = ReadString(j, "preemptedBy");
  s.preempted_at = ReadTime(j, "preemptedAt");
  if (auto it = j.find("faults"); it != j.end() && it->is_array()) {
    for (const Json& f : *it) {
      if (!f.is_object()) continue;
      FaultRecord r;
      r.time = ReadTime(f, "time").value_or(WallTime{});
      r.attempt = ReadInt<int32_t>(f, "attempt");
      r.kind = ReadString(f, "kind");
      r.node = ReadString(f, "node");
      r.pod = ReadString(f, "pod");
      r.container = ReadString(f, "container");
      r.item = ReadString(f, "item");
      if (auto slice = f.find("slice"); slice != f.end() && slice->is_number_integer()) {
        r.slice = slice->get<int32_t>();
      }
      if (auto code = f.find("exitCode"); code != f.end() && code->is_number_integer()) {
        r.exit_code = code->get<int32_t>();
      }
      r.reason = ReadString(f, "reason");
      r.message = ReadString(f, "message");
      r.action = ReadString(f, "action");
      s.faults.push_back(std::move(r));
    }
  }
  if (auto it = j.find("cordonedNodes"); it != j.end() && it->is_array()) {
    for (const Json& n : *it) {
      if (n.is_string()) s.cordoned_nodes.push_back(n.get<std::string>());
    }
  }
  if (auto it = j.find("goodput"); it != j.end() && it->is_object()) s.goodput = ReadGoodput(*it);
  return s;
}

Json JobStatus::ToJson() const {
  Json out = Json::object();
  if (phase != Phase::kNone) out["phase"] = ToString(phase);
  if (!conditions.empty()) {
    Json list = Json::array();
    for (const Condition& c : conditions) {
      Json item = {{"type", c.type}, {"status", c.status}};
      PutString(item, "reason", c.reason);
      PutString(item, "message", c.message);
      item["lastTransitionTime"] = cache::FormatRfc3339(c.last_transition_time);
      if (c.observed_generation != 0) item["observedGeneration"] = c.observed_generation;
      list.push_back(std::move(item));
    }
    out["conditions"] = std::move(list);
  }
  if (observed_generation != 0) out["observedGeneration"] = observed_generation;
  if (attempt != 0) out["attempt"] = attempt;
  if (job_retries != 0) out["jobRetries"] = job_retries;
  PutString(out, "readyWorkers", ready_workers);
  if (tpu) {
    Json t = Json::object();
    PutString(t, "summary", tpu->summary);
    PutString(t, "type", tpu->type);
    PutString(t, "accelerator", tpu->accelerator);
    PutString(t, "topology", tpu->topology);
    if (tpu->chips_per_worker != 0) t["chipsPerWorker"] = tpu->chips_per_worker;
    if (tpu->hosts_per_slice != 0) t["hostsPerSlice"] = tpu->hosts_per_slice;
    if (tpu->slices != 0) t["slices"] = tpu->slices;
    if (tpu->active_slices != 0) t["activeSlices"] = tpu->active_slices;
    PutString(t, "slicesSummary", tpu->slices_summary);
    if (!tpu->slice_slots.empty()) t["sliceSlots"] = tpu->slice_slots;
    out["tpu"] = std::move(t);
  }
  if (!replica_statuses.empty()) {
    Json map = Json::object();
    for (const auto& [type, c] : replica_statuses) {
      map[type] = {{"active", c.active},
                   {"ready", c.ready},
                   {"succeeded", c.succeeded},
                   {"failed", c.failed},
                   {"restarts", c.restarts}};
    }
    out["replicaStatuses"] = std::move(map);
  }
  if (!worker_restarts.empty()) {
    Json map = Json::object();
    for (const auto& [replica, r] : worker_restarts) {
      Json item = {{"count", r.count}};
      PutString(item, "podUID", r.pod_uid);
      PutString(item, "node", r.node);
      if (r.generation != 0) item["generation"] = r.generation;
      map[replica] = std::move(item);
    }
    out["workerRestarts"] = std::move(map);
  }
  PutTime(out, "queuedAt", queued_at);
  PutTime(out, "admittedAt", admitted_at);
  PutTime(out, "startTime", start_time);
  PutTime(out, "runningAt", running_at);
  PutTime(out, "completionTime", completion_time);
  if (queue_position) out["queuePosition"] = *queue_position;
  if (!node_pools.empty()) {
    out["nodePools"] = node_pools;
    if (node_pools.size() == 1) out["nodePool"] = node_pools.front();
  }
  if (slice_recovery) {
    Json r = {{"slices", slice_recovery->slices}};
    if (!slice_recovery->nodes.empty()) r["nodes"] = slice_recovery->nodes;
    if (slice_recovery->in_place) r["inPlace"] = true;
    out["sliceRecovery"] = std::move(r);
  }
  if (elastic) {
    Json e = Json::object();
    PutTime(e, "degradedSince", elastic->degraded_since);
    PutTime(e, "scaleUpOfferedAt", elastic->scale_up_offered_at);
    if (elastic->checkpoint_at_offer) e["checkpointAtOffer"] = *elastic->checkpoint_at_offer;
    out["elastic"] = std::move(e);
  }
  if (in_place) {
    Json p = {{"generation", in_place->generation},
              {"barrier", in_place->barrier_since ? "Closed" : "Open"}};
    PutTime(p, "barrierClosedSince", in_place->barrier_since);
    out["inPlace"] = std::move(p);
  }
  if (progress) {
    Json p = Json::object();
    if (progress->step) p["step"] = *progress->step;
    PutTime(p, "time", progress->time);
    if (progress->checkpoint_step) p["checkpointStep"] = *progress->checkpoint_step;
    if (progress->stalls_in_a_row != 0) p["stallsInARow"] = progress->stalls_in_a_row;
    if (progress->stalled_at_step) p["stalledAtStep"] = *progress->stalled_at_step;
    PutString(p, "suspectNode", progress->suspect_node);
    PutTime(p, "stallSeen", progress->stall_seen);
    PutTime(p, "stallsActedUntil", progress->acted_until);
    out["progress"] = std::move(p);
  }
  if (stalls != 0) out["stalls"] = stalls;
  if (reissued) out["reissued"] = true;
  if (preemptions != 0) out["preemptions"] = preemptions;
  PutString(out, "preemptedBy", preempted_by);
  PutTime(out, "preemptedAt", preempted_at);
  if (!faults.empty()) {
    Json list = Json::array();
    for (const FaultRecord& f : faults) {
      Json item = {{"time", cache::FormatRfc3339(f.time)}};
      if (f.attempt != 0) item["attempt"] = f.attempt;
      PutString(item, "kind", f.kind);
      PutString(item, "node", f.node);
      PutString(item, "pod", f.pod);
      PutString(item, "container", f.container);
      PutString(item, "item", f.item);
      if (f.slice) item["slice"] = *f.slice;
      if (f.exit_code) item["exitCode"] = *f.exit_code;
      PutString(item, "reason", f.reason);
      PutString(item, "message", f.message);
      PutString(item, "action", f.action);
      list.push_back(std::move(item));
    }
    out["faults"] = std::move(list);
  }
  if (!cordoned_nodes.empty()) out["cordonedNodes"] = cordoned_nodes;
  if (goodput) out["goodput"] = WriteGoodput(*goodput);
  return out;
}

int64_t Goodput::TotalMs() const {
  int64_t total = productive_ms;
  for (const auto& [cause, ms] : lost_ms) total += ms;
  return total;
}

int64_t Goodput::LostChipMs() const {
  int64_t total = 0;
  for (const auto& [cause, ms] : lost_chip_ms) total += ms;
  return total;
}

std::string GoodputCauseKey(std::string_view cause) {
  std::string key(cause);
  if (!key.empty()) key[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(key[0])));
  return key;
}

const Condition* JobStatus::FindCondition(std::string_view type) const {
  for (const Condition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool JobStatus::ConditionTrue(std::string_view type) const {
  const Condition* c = FindCondition(type);
  return c != nullptr && c->status == "True";
}

void JobStatus::SetCondition(std::string_view type, bool status, std::string_view reason,
                             std::string_view message, WallTime now, int64_t generation) {
  const std::string value = status ? "True" : "False";
  for (Condition& c : conditions) {
    if (c.type != type) continue;
    if (c.status != value) c.last_transition_time = Truncate(now);
    c.status = value;
    c.reason = reason;
    c.message = message;
    c.observed_generation = generation;
    return;
  }
  conditions.push_back(Condition{std::string(type), value, std::string(reason),
                                 std::string(message), Truncate(now), generation});
}

void JobStatus::RemoveCondition(std::string_view type) {
  std::erase_if(conditions, [&](const Condition& c) { return c.type == type; });
}

void JobStatus::AddFault(FaultRecord fault) {
  fault.time = Truncate(fault.time);
  faults.push_back(std::move(fault));
  if (faults.size() > kMaxFaults) faults.erase(faults.begin(), faults.end() - kMaxFaults);
}

}  // namespace tpujob::policy
