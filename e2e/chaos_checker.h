// The fault campaign's independent checker (e2e/chaos_e2e_test.cpp). It reads what the API
// server itself reported, never the operator's view: the watch streams of pods, nodes and
// TPUJobs that kubectl recorded for the whole run (one JSON event per line, as
// `kubectl get --raw '...?watch=1'` prints them), replays them in etcd's order (every object of
// one etcd carries a resourceVersion from the same revision counter, so the three streams merge
// into one history), and checks at every step the invariants that must hold at every instant:
//
//   duplicate-worker     never two live pods (not Succeeded/Failed) of one job for one worker
//                        (replica type and index; workers are numbered job-wide, slices included);
//   two-attempts         never live pods of two attempts of one job;
//   faulty-placement     no pod placed on a node the operator had cordoned for a fault before the
//                        pod was created, and that was still cordoned when it was placed;
//   retries              status.jobRetries never above the job's maxJobRetries;
//   cordon-cap           never more nodes cordoned by the operator than its cap;
//   cordon-rate          never more new cordons in a window than the operator's token bucket
//                        (burst, then `rate` per minute) allows; cordoned-at has whole seconds,
//                        so one second of slack;
//   cordon-breaker       never as many nodes cordoned for one pre-flight item within the
//                        breaker's window (10 minutes) as --cordon-breaker-nodes: the failure on
//                        the last of them trips the breaker, which cordons nothing for it;
//   attribution          no job turns Failed with PermanentError while a worker of its attempt
//                        that exited with a permanent code (not OOMKilled) ran on a node the API
//                        server shows faulty (a hardware condition True, Ready False or Unknown)
//                        since before the end of that exit's fault attribution window (2 s of
//                        slack: lastTransitionTime and finishedAt have whole seconds);
//   stall-answered       a job's stall (a worker's container of its current attempt ended with
//                        the stall code, 124, and a report of state "stalled") is acted on by
//                        the time the history shows the first report's finishedAt +
//                        faultAttributionSeconds + kStallSlackSeconds, the job's own spec read
//                        (the report comes stallSeconds after the last progress, so from the
//                        hang that is stallSeconds + faultAttributionSeconds + the slack). Acted
//                        on: status.stalls counts it, a new attempt (the hardware path: cordon,
//                        re-issue), a new in-place generation, or the job ends (Failed, reason
//                        Stalled or another) or is suspended. A stall whose reporting pods all
//                        went (deleted by someone) no longer binds the operator; nor does one
//                        that ended at or before status.progress.stallsActedUntil (acted on);
//   stall-fail-early     no job turns Failed with reason Stalled before maxStalls stalls in a
//                        row, counted as the operator must count them: a stall is in a row
//                        unless its furthest step is past the previous counted stall's;
//   stall-hardware       no stall is counted (restart or Failed/Stalled) while a node of one of
//                        its stalled workers shows a hardware fault since 2 s before the end of
//                        the attribution window and before the decision: the hardware case wins;
//   retries-counted      status.jobRetries never goes up in a write that records no new fault
//                        (the last of status.faults[] unchanged): a shrink or a grow of an
//                        elastic job, a preemption or a released admission uses none;
//   elastic-min          a Running job never runs on fewer slices than spec.tpu.minSlices, nor
//                        on more than spec.tpu.slices (status.tpu.activeSlices);
//   slice-ids            every live worker pod of a job's current attempt has a slice id below
//                        the slices the job runs on and was told that count
//                        (MEGASCALE_NUM_SLICES = status.tpu.activeSlices): with worker ids
//                        unique (duplicate-worker), the slice ids are 0..k-1, contiguous.
//
// Time: the history has no clock of its own, so the checker keeps the latest time the objects
// carry (creation times, managedFields times, condition transition and heartbeat times,
// container start and finish times, stallsActedUntil); every one is written at or before the
// write that carries it, so it is a lower bound of the time at that point of the history, and a
// deadline passed by it was passed.
//
// Pure: no cluster, no clock, so each invariant has a table test (tests/unit).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "supervisor/protocol.h"

namespace tpujob::e2e::chaos {

struct Event {
  std::string resource;  // "pods", "nodes", "tpujobs"
  std::string type;      // ADDED, MODIFIED, DELETED
  uint64_t revision = 0;
  nlohmann::json object;
  // A DELETED the stream never showed: the object was gone when the stream listed again (see
  // ReadEvents). It carries the revision of the object's last state seen.
  bool vanished = false;
};

// The events of one recorded stream (bookmarks, errors and a line cut short left out).
//
// A stream opened again after "410 Expired" (its resourceVersion compacted away) starts over
// with the objects as they are, as ADDED events, up to a bookmark annotated
// k8s.io/initial-events-end; an object deleted in the gap has no DELETED event. Every object the
// stream showed before and did not list again is given one (vanished): gone right after the
// last state seen of it. When in the gap it went is unknown, so the checker takes the reading
// that accuses no one; without it, a pod deleted in the gap would stay live for good, and its
// replacement would read as a duplicate.
inline std::vector<Event> ReadEvents(std::istream& in, const std::string& resource) {
  std::vector<Event> events;
  std::map<std::string, Event> shown;  // by uid: the last state of every object not deleted
  std::set<std::string> listed;        // uids ADDED since the stream was last opened again
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
    if (!event.is_object() || !event.contains("object") || !event["object"].is_object()) continue;
    const std::string type = event.value("type", "");
    const nlohmann::json meta = event["object"].value("metadata", nlohmann::json::object());
    if (type == "ERROR") {
      listed.clear();
      continue;
    }
    if (type == "BOOKMARK") {
      if (meta.value("annotations", nlohmann::json::object())
              .value("k8s.io/initial-events-end", "") == "true") {
        for (auto it = shown.begin(); it != shown.end();) {
          if (listed.contains(it->first)) {
            ++it;
            continue;
          }
          Event gone = std::move(it->second);
          gone.type = "DELETED";
          gone.vanished = true;
          events.push_back(std::move(gone));
          it = shown.erase(it);
        }
        listed.clear();
      }
      continue;
    }
    if (type != "ADDED" && type != "MODIFIED" && type != "DELETED") continue;
    const std::string rv = meta.value("resourceVersion", "");
    if (rv.empty() || rv.find_first_not_of("0123456789") != std::string::npos) continue;
    events.push_back({resource, type, std::stoull(rv), event["object"]});
    const std::string uid = meta.value("uid", "");
    if (type == "ADDED") listed.insert(uid);
    if (type == "DELETED") {
      shown.erase(uid);
    } else if (auto it = shown.find(uid);
               it == shown.end() || it->second.revision <= events.back().revision) {
      shown.insert_or_assign(uid, events.back());
    }
  }
  return events;
}

// The streams as one history, in etcd's order. A stream that was opened again without a
// resourceVersion starts with the objects as they are (ADDED, at their own older revisions); the
// checker skips an event no newer than what it already applied for that object.
inline std::vector<Event> Merge(std::vector<std::vector<Event>> streams) {
  std::vector<Event> all;
  for (auto& stream : streams) {
    for (auto& event : stream) all.push_back(std::move(event));
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const Event& a, const Event& b) { return a.revision < b.revision; });
  return all;
}

struct Violation {
  std::string invariant;
  std::string detail;  // the objects involved, by name and uid
};

// The stall-answered bound beyond faultAttributionSeconds: the operator's reconcile after the
// window (its requeue), on a loaded 2-core machine with the campaign's other faults in flight:
// a leader SIGKILLed (its successor takes the Lease after 4 s, then syncs its caches), API
// Priority and Fairness rejecting its writes for 15 s (and the workqueue's backoff after), an
// API server or etcd restart; whole-second times on both ends.
inline constexpr double kStallSlackSeconds = 45;

struct Limits {
  int max_cordoned = 0;               // the operator's --max-cordoned-nodes (fraction 1)
  double cordon_rate_per_minute = 0;  // --cordon-rate; 0 = not checked
  std::string node_prefix;            // only nodes whose name starts with this count,
  int breaker_nodes = 0;              // --cordon-breaker-nodes; 0 = not checked
  std::set<std::string> other_nodes;  // and these nodes (the real node)
};

// "2026-11-28T07:23:30Z" or "2026-11-28T07:23:30.125Z" as seconds since the epoch, the
// fraction included; -1 if unreadable.
inline double ParseUtcSeconds(const std::string& text) {
  std::tm tm{};
  if (text.size() < 20 ||
      ::strptime(text.substr(0, 19).c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) {
    return -1;
  }
  double fraction = 0;
  if (text[19] == '.') {
    double scale = 0.1;
    for (size_t i = 20; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, scale /= 10) {
      fraction += (text[i] - '0') * scale;
    }
  }
  return static_cast<double>(::timegm(&tm)) + fraction;
}

// Seconds since the epoch as "2026-11-28T07:23:30Z" (whole seconds), as the API server writes
// times.
inline std::string FormatUtcSeconds(double seconds) {
  const std::time_t whole = static_cast<std::time_t>(std::floor(seconds));
  std::tm tm{};
  char text[32] = {};
  if (::gmtime_r(&whole, &tm) == nullptr ||
      std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
    return std::to_string(static_cast<int64_t>(seconds));
  }
  return text;
}

// A number of a JSON object, 0 when absent or not a number.
inline double Number(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : 0.0;
}

// A string member of a JSON object; "" when absent, null or not a string (the API server writes
// an unset time, such as a terminated state's finishedAt, as null).
inline std::string Text(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// An object member of a JSON object; an empty object when absent, null or not an object.
inline nlohmann::json Member(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return nlohmann::json::object();
  auto it = object.find(key);
  return it != object.end() && it->is_object() ? *it : nlohmann::json::object();
}

class Checker {
 public:
  explicit Checker(Limits limits) : limits_(std::move(limits)) {}

  void Apply(const Event& event) {
    const nlohmann::json& meta = event.object.value("metadata", nlohmann::json::object());
    const std::string uid = meta.value("uid", "");
    if (uid.empty()) return;
    uint64_t& last = last_revision_[uid];
    // A replayed state after a watch was opened again; a vanished object's DELETED comes at the
    // revision of its last state.
    if (event.revision < last || (event.revision == last && !event.vanished)) return;
    last = event.revision;
    ++applied_;
    AdvanceClock(event.object);
    if (event.resource == "pods") ApplyPod(event, meta, uid);
    if (event.resource == "nodes") ApplyNode(event, meta);
    if (event.resource == "tpujobs") ApplyJob(event, meta);
    SweepStalls();
  }

  const std::vector<Violation>& violations() const { return violations_; }
  // How often each invariant was evaluated (the report's "checks made").
  const std::map<std::string, int64_t>& checks() const { return checks_; }
  int64_t applied() const { return applied_; }
  int64_t cordons_seen() const { return static_cast<int64_t>(cordon_times_.size()); }

 private:
  // A worker's stalled report, as its container's end carried it.
  struct StallReport {
    std::string pod;  // name
    std::string node;
    double finished = -1;  // finishedAt, seconds since the epoch
    std::optional<int64_t> step;
  };
  // One job's stalls, as the history shows them.
  struct StallJob {
    std::string uid;
    bool watched = false;  // spec.faultTolerance.progress set
    int64_t window = 30;   // faultAttributionSeconds
    int64_t max_stalls = 3;
    int64_t attempt = 0, stalls = 0, generation = 0;
    double acted_until = -1;  // status.progress.stallsActedUntil
    bool over = false;        // Succeeded, Failed or suspended
    bool failure_checked = false;
    // The stall not acted on yet: its reports by pod uid (the pods that still show it), the
    // furthest step of all of them, and the first one's end.
    bool open = false;
    bool late_reported = false;
    std::map<std::string, StallReport> pending;
    std::vector<StallReport> reports;
    std::optional<int64_t> step;
    double first = -1;
    // As the operator counts them: stalls in a row, and the step the last counted one stopped at.
    int64_t in_a_row = 0;
    std::optional<int64_t> stalled_at_step;
  };
  struct Pod {
    std::string name;
    std::string job;      // tpujob.dev/job-name
    std::string replica;  // "Worker-3"
    std::string attempt;
    std::string node;
    uint64_t created = 0;  // revision of the first event seen
    bool live = false;     // exists and is neither Succeeded nor Failed
    // The last container exit with a non-zero code (not OOMKilled): code and finishedAt in
    // seconds since the epoch; finished -1 when there is none.
    int exit_code = 0;
    double exit_finished = -1;
    double stall_finished = -1;  // the last stalled report's finishedAt
    int slice = -1;              // label tpujob.dev/slice-index; -1 without one
    int num_slices = -1;         // MEGASCALE_NUM_SLICES of its first container; -1 without one
  };
  // What slice-ids compares a job's pods with: its current attempt and how many slices it runs
  // on (status.tpu.activeSlices; 0 when the status does not say).
  struct SliceJob {
    std::string uid;
    std::string attempt;
    int active = 0;
    int retries = 0;
    nlohmann::json last_fault;
  };
  struct NodeState {
    bool fault_cordon = false;  // unschedulable and tainted tpujob.dev/faulty
    uint64_t fault_cordon_since = 0;
    // Unschedulable by a cordon the operator made (a new tpujob.dev/cordoned-at), not by a
    // person cordoning again a node that still carries the operator's annotations.
    bool ours = false;
    std::string counted_cordoned_at;  // the last cordon counted for the rate and the breaker
    // Since when the node shows a hardware fault (TPUUnhealthy True, Ready False or Unknown), by
    // the condition's lastTransitionTime in seconds since the epoch; -1 while it shows none.
    double faulty_since = -1;
  };

  void Report(const std::string& invariant, const std::string& detail) {
    if (!reported_.insert(invariant + "\n" + detail).second) return;  // once each
    violations_.push_back({invariant, detail});
  }

  static std::string Describe(const Pod& pod, const std::string& uid) {
    return "pod " + pod.name + " (uid " + uid + ", job " + pod.job + ", " + pod.replica +
           ", attempt " + pod.attempt + (pod.node.empty() ? "" : ", node " + pod.node) + ")";
  }

  void ApplyPod(const Event& event, const nlohmann::json& meta, const std::string& uid) {
    const nlohmann::json labels = meta.value("labels", nlohmann::json::object());
    const std::string job = labels.value("tpujob.dev/job-name", "");
    if (job.empty()) return;
    if (event.type == "DELETED" || meta.contains("deletionTimestamp")) StallPodGone(job, uid);
    if (event.type == "DELETED") {
      pods_.erase(uid);
      return;
    }
    const std::string phase =
        event.object.value("status", nlohmann::json::object()).value("phase", "");
    const bool live = phase != "Succeeded" && phase != "Failed";
    auto [it, first] = pods_.try_emplace(uid);
    Pod& pod = it->second;
    const bool was_live = !first && pod.live;
    const std::string old_attempt = pod.attempt;
    const std::string old_node = pod.node;
    pod.name = meta.value("name", "");
    pod.job = job;
    pod.replica = labels.value("tpujob.dev/replica-type", "?") + "-" +
                  labels.value("tpujob.dev/replica-index", "?");
    pod.attempt = labels.value("tpujob.dev/attempt", "");
    pod.node = event.object.value("spec", nlohmann::json::object()).value("nodeName", "");
    pod.live = live;
    const std::string slice = labels.value("tpujob.dev/slice-index", "");
    pod.slice = !slice.empty() && slice.find_first_not_of("0123456789") == std::string::npos
                    ? std::stoi(slice)
                    : -1;
    pod.num_slices = -1;
    const nlohmann::json containers = event.object.value("spec", nlohmann::json::object())
                                          .value("containers", nlohmann::json::array());
    if (containers.is_array() && !containers.empty()) {
      for (const auto& var : containers[0].value("env", nlohmann::json::array())) {
        const std::string value = Text(var, "value");
        if (Text(var, "name") == "MEGASCALE_NUM_SLICES" && !value.empty() &&
            value.find_first_not_of("0123456789") == std::string::npos) {
          pod.num_slices = std::stoi(value);
        }
      }
    }
    if (first) pod.created = event.revision;
    const nlohmann::json statuses = Member(event.object, "status")["containerStatuses"];
    for (const auto& c : statuses.is_array() ? statuses : nlohmann::json::array()) {
      const nlohmann::json terminated = Member(Member(c, "state"), "terminated");
      const int code = static_cast<int>(Number(terminated, "exitCode"));
      const double finished = ParseUtcSeconds(Text(terminated, "finishedAt"));
      if (code != 0 && finished >= pod.exit_finished && Text(terminated, "reason") != "OOMKilled") {
        pod.exit_code = code;
        pod.exit_finished = finished;
      }
      if (code == supervisor::kStalledExitCode && finished > pod.stall_finished &&
          !meta.contains("deletionTimestamp")) {
        const nlohmann::json report =
            nlohmann::json::parse(Text(terminated, "message"), nullptr, false);
        if (Text(report, supervisor::kReportStateKey) == supervisor::kReportStalled) {
          pod.stall_finished = finished;
          std::optional<int64_t> step;
          if (report.contains(supervisor::kReportStepKey) &&
              report[supervisor::kReportStepKey].is_number_integer()) {
            step = report[supervisor::kReportStepKey].get<int64_t>();
          }
          StallReported(uid, pod, {pod.name, pod.node, finished, step});
        }
      }
    }

    // A pod turning live, or a live pod moved to another attempt (slice recovery in place
    // relabels the kept slices' pods), is compared with every other live pod of its job.
    if (live && (!was_live || old_attempt != pod.attempt)) {
      ++checks_["duplicate-worker"];
      ++checks_["two-attempts"];
      for (const auto& [other_uid, other] : pods_) {
        if (other_uid == uid || !other.live || other.job != pod.job) continue;
        if (other.replica == pod.replica) {
          Report("duplicate-worker", "two live pods for job " + pod.job + " " + pod.replica + ": " +
                                         Describe(other, other_uid) + " and " + Describe(pod, uid));
        }
        if (other.attempt != pod.attempt) {
          Report("two-attempts", "live pods of two attempts of job " + pod.job + ": " +
                                     Describe(other, other_uid) + " and " + Describe(pod, uid));
        }
      }
    }
    if (live && (!was_live || old_attempt != pod.attempt)) {
      auto job_it = slice_jobs_.find(pod.job);
      if (job_it != slice_jobs_.end()) CheckSliceIds(job_it->second, uid, pod);
    }
    // Placed: bound to a node now, not before.
    if (!pod.node.empty() && pod.node != old_node) {
      ++checks_["faulty-placement"];
      auto node = nodes_.find(pod.node);
      if (node != nodes_.end() && node->second.fault_cordon &&
          node->second.fault_cordon_since < pod.created) {
        Report("faulty-placement", Describe(pod, uid) + " placed on node " + pod.node +
                                       ", cordoned for a fault since revision " +
                                       std::to_string(node->second.fault_cordon_since) +
                                       ", before the pod was created (revision " +
                                       std::to_string(pod.created) + ")");
      }
    }
  }

  void ApplyNode(const Event& event, const nlohmann::json& meta) {
    const std::string name = meta.value("name", "");
    if (!name.starts_with(limits_.node_prefix) && !limits_.other_nodes.contains(name)) return;
    if (event.type == "DELETED") {
      nodes_.erase(name);
      CheckCordonCap(name);
      return;
    }
    const nlohmann::json spec = event.object.value("spec", nlohmann::json::object());
    const bool unschedulable = spec.value("unschedulable", false);
    bool faulty_taint = false;
    for (const auto& taint : spec.value("taints", nlohmann::json::array())) {
      faulty_taint = faulty_taint || taint.value("key", "") == "tpujob.dev/faulty";
    }
    const nlohmann::json annotations = meta.value("annotations", nlohmann::json::object());
    NodeState& node = nodes_[name];
    node.faulty_since = -1;
    const nlohmann::json conditions = Member(event.object, "status")["conditions"];
    for (const auto& c : conditions.is_array() ? conditions : nlohmann::json::array()) {
      const std::string type = Text(c, "type");
      const std::string status = Text(c, "status");
      if ((type == "TPUUnhealthy" && status == "True") ||
          (type == "Ready" && (status == "False" || status == "Unknown"))) {
        const double since = ParseUtcSeconds(Text(c, "lastTransitionTime"));
        if (since >= 0 && (node.faulty_since < 0 || since < node.faulty_since)) {
          node.faulty_since = since;
        }
      }
    }
    const bool fault_cordon = unschedulable && faulty_taint;
    if (fault_cordon && !node.fault_cordon) node.fault_cordon_since = event.revision;
    node.fault_cordon = fault_cordon;
    const bool ours =
        unschedulable && annotations.value("tpujob.dev/cordoned-by", "") == "tpujob-operator";
    const std::string cordoned_at = annotations.value("tpujob.dev/cordoned-at", "");
    // A cordon by the operator writes a new cordoned-at. A person's `kubectl uncordon` and
    // `kubectl cordon` of a node that still carries our annotations make it look ours again with
    // the old one: not a new cordon.
    const bool new_cordon = ours && !cordoned_at.empty() && cordoned_at != node.counted_cordoned_at;
    if (new_cordon) {
      node.counted_cordoned_at = cordoned_at;
      const double at = ParseUtcSeconds(cordoned_at);
      if (at >= 0) CheckCordonRate(name, static_cast<int64_t>(at));
      // The evidence of a pre-flight cordon is "<pod uid>/<items>".
      const std::string evidence = annotations.value("tpujob.dev/cordon-evidence", "");
      if (at >= 0 && annotations.value("tpujob.dev/cordon-reason", "") == "PreflightFailed" &&
          evidence.find('/') != std::string::npos) {
        CheckCordonBreaker(name, evidence.substr(evidence.find('/') + 1), static_cast<int64_t>(at));
      }
    }
    // The cap is the operator's promise about the cordons it makes. It counts a person's new
    // cordon of a node with its annotations too (stricter), so leaving those out here never
    // hides a cordon the operator made beyond it.
    node.ours = ours && (new_cordon || node.ours);
    CheckCordonCap(name);
  }

  void CheckCordonCap(const std::string& changed) {
    ++checks_["cordon-cap"];
    std::vector<std::string> ours;
    for (const auto& [name, node] : nodes_) {
      if (node.ours) ours.push_back(name);
    }
    if (static_cast<int>(ours.size()) > limits_.max_cordoned) {
      std::string names;
      for (const auto& name : ours) names += (names.empty() ? "" : ", ") + name;
      Report("cordon-cap", std::to_string(ours.size()) + " nodes cordoned by the operator, cap " +
                               std::to_string(limits_.max_cordoned) + " (after a change of node " +
                               changed + "): " + names);
    }
  }

  // The operator's bucket holds `burst` = max(1, floor(rate)) tokens and gains rate/60 a
  // second: over any stretch from the i-th to the j-th cordon, j - i + 1 <= burst +
  // rate * (t_j - t_i + 1) / 60.
  void CheckCordonRate(const std::string& node, int64_t at) {
    cordon_times_.push_back({at, node});
    if (limits_.cordon_rate_per_minute <= 0) return;
    ++checks_["cordon-rate"];
    std::sort(cordon_times_.begin(), cordon_times_.end());
    const double burst = std::max(1.0, std::floor(limits_.cordon_rate_per_minute));
    for (size_t j = 0; j < cordon_times_.size(); ++j) {
      for (size_t i = 0; i <= j; ++i) {
        const double span = static_cast<double>(cordon_times_[j].first - cordon_times_[i].first);
        const double allowed = burst + limits_.cordon_rate_per_minute * (span + 1) / 60;
        if (static_cast<double>(j - i + 1) > allowed + 1e-9) {
          std::string names;
          for (size_t k = i; k <= j; ++k) {
            names += (names.empty() ? "" : ", ") + cordon_times_[k].second + "@" +
                     std::to_string(cordon_times_[k].first);
          }
          Report("cordon-rate", std::to_string(j - i + 1) + " cordons within " +
                                    std::to_string(static_cast<int64_t>(span)) +
                                    " s, more than the bucket allows (burst " +
                                    std::to_string(static_cast<int>(burst)) + ", " +
                                    std::to_string(limits_.cordon_rate_per_minute) +
                                    "/min): " + names);
          return;  // one report per new cordon
        }
      }
    }
  }

  void CheckCordonBreaker(const std::string& node, const std::string& item, int64_t at) {
    if (limits_.breaker_nodes <= 0) return;
    ++checks_["cordon-breaker"];
    auto& cordons = item_cordons_[item];
    cordons.push_back({at, node});
    std::set<std::string> nodes;
    std::string names;
    for (const auto& [when, name] : cordons) {
      if (at - when < kBreakerWindowSeconds && nodes.insert(name).second) {
        names += (names.empty() ? "" : ", ") + name + "@" + std::to_string(when);
      }
    }
    if (static_cast<int>(nodes.size()) >= limits_.breaker_nodes) {
      Report("cordon-breaker", std::to_string(nodes.size()) +
                                   " nodes cordoned within 10 minutes for pre-flight item " + item +
                                   " (breaker at " + std::to_string(limits_.breaker_nodes) +
                                   "): " + names);
    }
  }

  void ApplyJob(const Event& event, const nlohmann::json& meta) {
    if (event.type == "DELETED") {
      // Gone: its stall binds no one any more.
      auto it = stall_jobs_.find(Text(meta, "name"));
      if (it != stall_jobs_.end() && it->second.uid == Text(meta, "uid")) stall_jobs_.erase(it);
      auto slices = slice_jobs_.find(Text(meta, "name"));
      if (slices != slice_jobs_.end() && slices->second.uid == Text(meta, "uid")) {
        slice_jobs_.erase(slices);
      }
      return;
    }
    const nlohmann::json spec = event.object.value("spec", nlohmann::json::object());
    const nlohmann::json status = event.object.value("status", nlohmann::json::object());
    // maxJobRetries as the operator reads it: the spec's, else the annotation's, else 0.
    int max_retries = 0;
    const nlohmann::json ft = spec.value("faultTolerance", nlohmann::json::object());
    if (ft.contains("maxJobRetries")) {
      max_retries = ft.value("maxJobRetries", 0);
    } else {
      const std::string text = meta.value("annotations", nlohmann::json::object())
                                   .value("fault-tolerance/job-retry-num", "");
      if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
        max_retries = std::stoi(text);
      }
    }
    CheckAttribution(event, meta, ft, status);
    ApplyJobStalls(meta, spec, ft, status);
    ++checks_["retries"];
    const int retries = status.value("jobRetries", 0);
    ApplyJobSlices(event, meta, spec, status);
    if (retries > max_retries) {
      Report("retries", "job " + meta.value("name", "") + " (uid " + meta.value("uid", "") +
                            ") has jobRetries " + std::to_string(retries) + " > maxJobRetries " +
                            std::to_string(max_retries) + " at revision " +
                            std::to_string(event.revision));
    }
  }

  // retries-counted, elastic-min, and slice-ids for the job's live pods when what it runs on
  // changes.
  void ApplyJobSlices(const Event& event, const nlohmann::json& meta, const nlohmann::json& spec,
                      const nlohmann::json& status) {
    const std::string name = meta.value("name", "");
    const std::string uid = meta.value("uid", "");
    auto [it, first] = slice_jobs_.try_emplace(name);
    SliceJob& job = it->second;
    if (!first && job.uid != uid) job = SliceJob{};  // a new job of the same name
    const bool known = job.uid == uid;
    job.uid = uid;
    const int retries = status.value("jobRetries", 0);
    const nlohmann::json faults = status.value("faults", nlohmann::json::array());
    const nlohmann::json last_fault =
        faults.is_array() && !faults.empty() ? faults.back() : nlohmann::json();
    ++checks_["retries-counted"];
    if (known && retries > job.retries && last_fault == job.last_fault) {
      Report("retries-counted", "job " + name + " (uid " + uid + ") went from jobRetries " +
                                    std::to_string(job.retries) + " to " + std::to_string(retries) +
                                    " with no new fault recorded, at revision " +
                                    std::to_string(event.revision));
    }
    job.retries = retries;
    job.last_fault = last_fault;

    const nlohmann::json tpu = Member(spec, "tpu");
    const int slices = tpu.contains("slices") ? static_cast<int>(Number(tpu, "slices")) : 1;
    const int min_slices =
        tpu.contains("minSlices") ? static_cast<int>(Number(tpu, "minSlices")) : slices;
    const int active = static_cast<int>(Number(Member(status, "tpu"), "activeSlices"));
    if (Text(status, "phase") == "Running" && active > 0) {
      ++checks_["elastic-min"];
      if (active < min_slices || active > slices) {
        Report("elastic-min",
               "job " + name + " (uid " + uid + ") Running on " + std::to_string(active) +
                   " slices (minSlices " + std::to_string(min_slices) + ", slices " +
                   std::to_string(slices) + ") at revision " + std::to_string(event.revision));
      }
    }
    const std::string attempt = std::to_string(static_cast<int64_t>(Number(status, "attempt")));
    if (attempt == job.attempt && active == job.active) return;
    job.attempt = attempt;
    job.active = active;
    for (const auto& [pod_uid, pod] : pods_) {
      if (pod.job == name && pod.live) CheckSliceIds(job, pod_uid, pod);
    }
  }

  void CheckSliceIds(const SliceJob& job, const std::string& uid, const Pod& pod) {
    if (job.active <= 0 || pod.attempt != job.attempt || pod.slice < 0) return;
    ++checks_["slice-ids"];
    if (pod.slice >= job.active || (pod.num_slices >= 0 && pod.num_slices != job.active)) {
      Report("slice-ids", Describe(pod, uid) + " of slice " + std::to_string(pod.slice) +
                              " told MEGASCALE_NUM_SLICES=" + std::to_string(pod.num_slices) +
                              " while the job runs attempt " + job.attempt + " on " +
                              std::to_string(job.active) + " slices");
    }
  }

  // A job's first Failed state with reason PermanentError: the exits that could have decided
  // it, each against its node as the API server showed it before that write.
  void CheckAttribution(const Event& event, const nlohmann::json& meta, const nlohmann::json& ft,
                        const nlohmann::json& status) {
    if (Text(status, "phase") != "Failed") return;
    bool permanent_error = false;
    const nlohmann::json conditions = status.value("conditions", nlohmann::json());
    for (const auto& c : conditions.is_array() ? conditions : nlohmann::json::array()) {
      permanent_error =
          permanent_error || (Text(c, "type") == "Failed" && Text(c, "reason") == "PermanentError");
    }
    const std::string uid = Text(meta, "uid");
    if (!permanent_error || !failed_jobs_.insert(uid).second) return;
    ++checks_["attribution"];
    const int64_t window = ft.contains("faultAttributionSeconds")
                               ? static_cast<int64_t>(Number(ft, "faultAttributionSeconds"))
                               : 30;
    if (window <= 0) return;
    std::set<int> permanent = {1, 137};  // faultTolerance.exitCodes.permanent's default
    const nlohmann::json codes = Member(ft, "exitCodes");
    if (codes.contains("permanent") && codes["permanent"].is_array()) {
      permanent.clear();
      for (const auto& code : codes["permanent"]) {
        if (code.is_number_integer()) permanent.insert(code.get<int>());
      }
    }
    const std::string name = Text(meta, "name");
    const std::string attempt = std::to_string(static_cast<int64_t>(Number(status, "attempt")));
    for (const auto& [pod_uid, pod] : pods_) {
      if (pod.job != name || pod.attempt != attempt || pod.exit_finished < 0 ||
          !permanent.contains(pod.exit_code)) {
        continue;
      }
      auto node = nodes_.find(pod.node);
      if (node == nodes_.end() || node->second.faulty_since < 0) continue;
      const double deadline = pod.exit_finished + static_cast<double>(window);
      if (node->second.faulty_since <= deadline - 2) {
        Report("attribution",
               "job " + name + " (uid " + uid + ") failed with PermanentError at revision " +
                   std::to_string(event.revision) + " while " + Describe(pod, pod_uid) +
                   ", which exited with code " + std::to_string(pod.exit_code) + " at " +
                   FormatUtcSeconds(pod.exit_finished) + ", ran on node " + pod.node +
                   ", shown faulty since " + FormatUtcSeconds(node->second.faulty_since) +
                   ", before the end of its " + std::to_string(window) + " s attribution window");
      }
    }
  }

  // The latest time any object of the history carried so far.
  void AdvanceClock(const nlohmann::json& object) {
    const auto see = [this](const std::string& text) {
      const double at = ParseUtcSeconds(text);
      if (at > clock_) clock_ = at;
    };
    const nlohmann::json meta = Member(object, "metadata");
    see(Text(meta, "creationTimestamp"));
    const nlohmann::json managed = meta.value("managedFields", nlohmann::json());
    for (const auto& m : managed.is_array() ? managed : nlohmann::json::array()) {
      see(Text(m, "time"));
    }
    const nlohmann::json status = Member(object, "status");
    const nlohmann::json conditions = status.value("conditions", nlohmann::json());
    for (const auto& c : conditions.is_array() ? conditions : nlohmann::json::array()) {
      see(Text(c, "lastTransitionTime"));
      see(Text(c, "lastHeartbeatTime"));
    }
    const nlohmann::json containers = status.value("containerStatuses", nlohmann::json());
    for (const auto& c : containers.is_array() ? containers : nlohmann::json::array()) {
      const nlohmann::json state = Member(c, "state");
      see(Text(Member(state, "running"), "startedAt"));
      see(Text(Member(state, "terminated"), "startedAt"));
      see(Text(Member(state, "terminated"), "finishedAt"));
    }
    see(Text(Member(status, "progress"), "stallsActedUntil"));
  }

  static std::string DescribeStall(const std::string& name, const StallJob& job) {
    std::string pods;
    for (const StallReport& r : job.reports) {
      pods += (pods.empty() ? "" : ", ") + r.pod + (r.node.empty() ? "" : " on " + r.node) +
              " at " + FormatUtcSeconds(r.finished) +
              (r.step ? " (step " + std::to_string(*r.step) + ")" : " (no step)");
    }
    return "job " + name + " (uid " + job.uid + ", attempt " + std::to_string(job.attempt) +
           ") stalled: " + pods;
  }

  void StallReported(const std::string& uid, const Pod& pod, const StallReport& report) {
    auto it = stall_jobs_.find(pod.job);
    if (it == stall_jobs_.end()) return;
    StallJob& job = it->second;
    const int64_t attempt =
        !pod.attempt.empty() && pod.attempt.find_first_not_of("0123456789") == std::string::npos
            ? std::stoll(pod.attempt)
            : 0;
    // Not the operator's to answer: no stall detection, the job over, a pod of an attempt
    // already left behind, or a stall the operator acted on already.
    if (!job.watched || job.over || attempt < job.attempt ||
        (job.acted_until >= 0 && report.finished <= job.acted_until)) {
      return;
    }
    if (!job.open) {
      job.open = true;
      job.late_reported = false;
      job.first = report.finished;
      job.reports.clear();
      job.step.reset();
    }
    job.first = std::min(job.first, report.finished);
    if (report.step && (!job.step || *report.step > *job.step)) job.step = report.step;
    job.pending[uid] = report;
    job.reports.push_back(report);
  }

  // A pod deleted, or being deleted: its report no longer shows. When no report of the open
  // stall shows any more and the operator counted nothing, the stall is left out.
  void StallPodGone(const std::string& job_name, const std::string& uid) {
    auto it = stall_jobs_.find(job_name);
    if (it == stall_jobs_.end() || !it->second.open) return;
    StallJob& job = it->second;
    if (job.pending.erase(uid) > 0 && job.pending.empty()) job.open = false;
  }

  void ApplyJobStalls(const nlohmann::json& meta, const nlohmann::json& spec,
                      const nlohmann::json& ft, const nlohmann::json& status) {
    const std::string name = Text(meta, "name");
    StallJob& job = stall_jobs_[name];
    if (job.uid != Text(meta, "uid")) {
      job = StallJob();
      job.uid = Text(meta, "uid");
    }
    const nlohmann::json progress = Member(ft, "progress");
    job.watched = !progress.empty();
    job.window = ft.contains("faultAttributionSeconds")
                     ? static_cast<int64_t>(Number(ft, "faultAttributionSeconds"))
                     : 30;
    job.max_stalls =
        progress.contains("maxStalls") ? static_cast<int64_t>(Number(progress, "maxStalls")) : 3;
    job.acted_until = ParseUtcSeconds(Text(Member(status, "progress"), "stallsActedUntil"));
    const int64_t attempt = static_cast<int64_t>(Number(status, "attempt"));
    const int64_t stalls = static_cast<int64_t>(Number(status, "stalls"));
    const int64_t generation =
        static_cast<int64_t>(Number(Member(status, "inPlace"), "generation"));
    const std::string phase = Text(status, "phase");
    bool failed_stalled = false;
    const nlohmann::json conditions = status.value("conditions", nlohmann::json());
    for (const auto& c : conditions.is_array() ? conditions : nlohmann::json::array()) {
      failed_stalled =
          failed_stalled || (Text(c, "type") == "Failed" && Text(c, "reason") == "Stalled");
    }
    failed_stalled = failed_stalled && phase == "Failed";
    const bool counted = stalls > job.stalls;
    const bool answered = counted || attempt > job.attempt || generation > job.generation ||
                          phase == "Succeeded" || phase == "Failed" || spec.value("suspend", false);
    if (counted) {
      // In a row, as the operator counts: unless the furthest step got past the last stall's.
      const bool progressed =
          job.in_a_row == 0 ||
          (job.step && (!job.stalled_at_step || *job.step > *job.stalled_at_step));
      job.in_a_row = progressed ? 1 : job.in_a_row + 1;
      job.stalled_at_step = job.step;
      CheckStallHardware(name, job);
    }
    if (failed_stalled && !job.failure_checked) {
      job.failure_checked = true;
      ++checks_["stall-fail-early"];
      if (job.in_a_row < job.max_stalls) {
        Report("stall-fail-early",
               "job " + name + " (uid " + job.uid + ") failed with reason Stalled after " +
                   std::to_string(job.in_a_row) + " stalls in a row (status.stalls " +
                   std::to_string(stalls) + "), maxStalls " + std::to_string(job.max_stalls));
      }
    }
    if (job.open && answered) {
      ++checks_["stall-answered"];
      const double deadline = job.first + static_cast<double>(job.window) + kStallSlackSeconds;
      if (clock_ > deadline && !job.late_reported) {
        Report("stall-answered", DescribeStall(name, job) + "; acted on only at " +
                                     FormatUtcSeconds(clock_) + ", past " +
                                     FormatUtcSeconds(deadline) + " (faultAttributionSeconds " +
                                     std::to_string(job.window) + " + " +
                                     std::to_string(static_cast<int>(kStallSlackSeconds)) + " s)");
      }
      job.open = false;
      job.pending.clear();
    }
    job.stalls = stalls;
    job.attempt = attempt;
    job.generation = generation;
    job.over = phase == "Succeeded" || phase == "Failed" || spec.value("suspend", false);
  }

  // A counted stall while a node of a stalled worker shows a hardware fault the operator had to
  // see: since 2 s before both the end of the window and this decision.
  void CheckStallHardware(const std::string& name, const StallJob& job) {
    if (!job.open) return;
    ++checks_["stall-hardware"];
    const double end = std::min(job.first + static_cast<double>(job.window), clock_);
    for (const StallReport& r : job.reports) {
      auto node = nodes_.find(r.node);
      if (node == nodes_.end() || node->second.faulty_since < 0) continue;
      if (node->second.faulty_since <= end - 2) {
        Report("stall-hardware", DescribeStall(name, job) +
                                     "; counted as a stall (restart or "
                                     "Failed/Stalled) while node " +
                                     r.node + " showed a hardware fault since " +
                                     FormatUtcSeconds(node->second.faulty_since) + ", within the " +
                                     std::to_string(job.window) + " s attribution window");
        return;
      }
    }
  }

  // Every open stall past its deadline is reported, once.
  void SweepStalls() {
    for (auto& [name, job] : stall_jobs_) {
      if (!job.open || job.late_reported || job.pending.empty()) continue;
      const double deadline = job.first + static_cast<double>(job.window) + kStallSlackSeconds;
      if (clock_ <= deadline) continue;
      ++checks_["stall-answered"];
      job.late_reported = true;
      Report("stall-answered", DescribeStall(name, job) + "; not acted on by " +
                                   FormatUtcSeconds(deadline) + " (faultAttributionSeconds " +
                                   std::to_string(job.window) + " + " +
                                   std::to_string(static_cast<int>(kStallSlackSeconds)) +
                                   " s), the history shows " + FormatUtcSeconds(clock_));
    }
  }

  Limits limits_;
  double clock_ = -1;                              // see AdvanceClock
  std::map<std::string, StallJob> stall_jobs_;     // by name
  std::set<std::string> failed_jobs_;              // uids of jobs checked by CheckAttribution
  std::map<std::string, uint64_t> last_revision_;  // by uid
  std::map<std::string, Pod> pods_;                // by uid
  std::map<std::string, SliceJob> slice_jobs_;     // by job name
  std::map<std::string, NodeState> nodes_;         // by name
  std::vector<std::pair<int64_t, std::string>> cordon_times_;
  static constexpr int64_t kBreakerWindowSeconds = 600;
  std::map<std::string, std::vector<std::pair<int64_t, std::string>>> item_cordons_;
  std::vector<Violation> violations_;
  std::set<std::string> reported_;
  std::map<std::string, int64_t> checks_;
  int64_t applied_ = 0;
};

// --- The end state, once the faults have stopped and the quiet period passed ----------------

// What is wrong with the jobs of a `kubectl get tpujobs -o json` list at the end: each is
// Succeeded or Failed, or Running or Queued with a reason (its Ready condition's, or for Queued
// the Admitted condition's); every finished job's goodput adds up to its accounted wall time
// (productive + every lost cause = accountedUntil - creationTimestamp, within 1 s, plus the
// fraction of a second creationTimestamp drops); every counted re-issue has its fault record. ""
// when nothing.
inline std::string FinalJobProblems(const nlohmann::json& jobs) {
  std::string out;
  for (const auto& job : jobs.value("items", nlohmann::json::array())) {
    const nlohmann::json meta = job.value("metadata", nlohmann::json::object());
    const std::string name = meta.value("name", "");
    const nlohmann::json status = job.value("status", nlohmann::json::object());
    const std::string phase = status.value("phase", "");
    std::map<std::string, std::string> reasons;  // condition type -> reason
    for (const auto& c : status.value("conditions", nlohmann::json::array())) {
      reasons[c.value("type", "")] = c.value("reason", "");
    }
    const bool finished = phase == "Succeeded" || phase == "Failed";
    if (phase == "Running" || phase == "Queued") {
      const std::string reason = phase == "Queued" ? reasons["Admitted"] : reasons["Ready"];
      if (reason.empty()) out += "job " + name + " is " + phase + " without a reason\n";
    } else if (!finished && phase != "Suspended") {
      out += "job " + name + " is stuck in phase " + (phase.empty() ? "(none)" : phase) + "\n";
    }
    if (finished && status.contains("goodput")) {
      const nlohmann::json g = status["goodput"];
      double total = Number(g, "productiveSeconds");
      const nlohmann::json lost = g.value("lostSeconds", nlohmann::json::object());
      for (const auto& [cause, seconds] : lost.items()) {
        if (seconds.is_number()) total += seconds.get<double>();
      }
      const double created = ParseUtcSeconds(meta.value("creationTimestamp", ""));
      const double until = ParseUtcSeconds(g.value("accountedUntil", ""));
      const double wall = until - created;
      if (created < 0 || until < 0 || total < wall - 2.0 || total > wall + 1.0) {
        out += "job " + name + ": goodput adds up to " + std::to_string(total) +
               " s, its accounted wall time is " + std::to_string(wall) + " s: " + g.dump() + "\n";
      }
    }
    const auto faults = status.value("faults", nlohmann::json::array());
    if (faults.size() < 32) {  // the record keeps the 32 newest
      int counted = 0;
      for (const auto& f : faults) {
        const std::string action = f.value("action", "");
        const std::string kind = f.value("kind", "");
        if ((action == "ReissueJob" || action == "ReplaceSlice") && kind != "Maintenance" &&
            kind != "Preempted") {
          ++counted;
        }
      }
      const int retries = status.value("jobRetries", 0);
      if (counted < retries) {
        out += "job " + name + ": jobRetries " + std::to_string(retries) + " but " +
               std::to_string(counted) + " counted re-issues in faults[]\n";
      }
    }
  }
  return out;
}

}  // namespace tpujob::e2e::chaos
