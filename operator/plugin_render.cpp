#include "plugin_render.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <iomanip>
#include <optional>
#include <sstream>

#include "cache/objects.h"
#include "plugin_commands.h"
#include "policy/goodput.h"
#include "policy/job_status.h"
#include "policy/tpu_types.h"

namespace tpujob::plugin {
namespace {

using nlohmann::json;

// status.nodePools joined ("pool-a,pool-b"), or the older status.nodePool.
std::string NodePools(const json& job) {
  const json::json_pointer at("/status/nodePools");
  if (job.contains(at) && job.at(at).is_array() && !job.at(at).empty()) {
    std::string out;
    for (const json& pool : job.at(at)) {
      out += (out.empty() ? "" : ",") + (pool.is_string() ? pool.get<std::string>() : "?");
    }
    return out;
  }
  return TextAt(job, "/status/nodePool", "-");
}

const json* Condition(const json& job, const std::string& type) {
  const json::json_pointer at("/status/conditions");
  if (!job.contains(at) || !job.at(at).is_array()) return nullptr;
  for (const json& c : job.at(at)) {
    if (c.value("type", "") == type) return &c;
  }
  return nullptr;
}

// Aligned columns separated by three spaces, as kubectl prints tables.
std::string Table(const std::vector<std::vector<std::string>>& rows,
                  const std::string& indent = "") {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 3, ' ');
    }
    out += line + "\n";
  }
  return out;
}

bool Waiting(const json& job) { return TextAt(job, "/status/phase", "Queued") == "Queued"; }

int Position(const json& job) {
  const std::string p = TextAt(job, "/status/queuePosition");
  return p.empty() ? 1 << 30 : std::atoi(p.c_str());
}

std::string WhyWaiting(const json& job) {
  const json* admitted = Condition(job, "Admitted");
  if (admitted == nullptr) return "not yet seen by the operator";
  return admitted->value("message", admitted->value("reason", ""));
}

std::string Key(const json& job) {
  return TextAt(job, "/metadata/namespace") + "/" + TextAt(job, "/metadata/name");
}

}  // namespace

std::string Age(const std::string& rfc3339, WallTime now) {
  std::tm tm{};
  std::istringstream in(rfc3339);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail()) return "<unknown>";
  const auto then = std::chrono::system_clock::from_time_t(timegm(&tm));
  long long s = std::chrono::duration_cast<std::chrono::seconds>(now - then).count();
  if (s < 0) s = 0;
  if (s < 120) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m" + (s % 60 ? std::to_string(s % 60) + "s" : "");
  if (s < 86400) {
    return std::to_string(s / 3600) + "h" +
           (s % 3600 / 60 ? std::to_string(s % 3600 / 60) + "m" : "");
  }
  return std::to_string(s / 86400) + "d" +
         (s % 86400 / 3600 ? std::to_string(s % 86400 / 3600) + "h" : "");
}

std::string RenderList(const std::vector<json>& jobs, WallTime now, bool all_namespaces) {
  std::vector<const json*> waiting;
  std::vector<const json*> others;
  for (const json& job : jobs) (Waiting(job) ? waiting : others).push_back(&job);
  std::stable_sort(waiting.begin(), waiting.end(), [](const json* a, const json* b) {
    if (Position(*a) != Position(*b)) return Position(*a) < Position(*b);
    return Key(*a) < Key(*b);
  });
  std::stable_sort(others.begin(), others.end(),
                   [](const json* a, const json* b) { return Key(*a) < Key(*b); });
  if (waiting.empty() && others.empty()) return "No TPUJobs found.\n";
  std::string out;
  auto name = [&](const json& job) {
    return all_namespaces ? Key(job) : TextAt(job, "/metadata/name");
  };
  if (!waiting.empty()) {
    std::vector<std::vector<std::string>> rows = {
        {"POSITION", "NAME", "PRIORITY", "ATTEMPT", "REISSUED", "WAITING", "WHY"}};
    for (const json* job : waiting) {
      const std::string position = TextAt(*job, "/status/queuePosition", "-");
      rows.push_back(
          {position, name(*job), TextAt(*job, "/spec/priority", "0"),
           TextAt(*job, "/status/attempt", "1"),
           TextAt(*job, "/status/reissued", "false") == "true" ? "yes" : "no",
           Age(TextAt(*job, "/status/queuedAt", TextAt(*job, "/metadata/creationTimestamp")), now),
           WhyWaiting(*job)});
    }
    out += "QUEUE (" + std::to_string(waiting.size()) + " waiting, next first)\n" + Table(rows);
  }
  if (!others.empty()) {
    if (!out.empty()) out += "\n";
    std::vector<std::vector<std::string>> rows = {
        {"NAME", "PHASE", "ATTEMPT", "RETRIES", "READY", "NODE POOL", "AGE"}};
    for (const json* job : others) {
      rows.push_back({name(*job), TextAt(*job, "/status/phase"),
                      TextAt(*job, "/status/attempt", "1"), TextAt(*job, "/status/jobRetries", "0"),
                      TextAt(*job, "/status/readyWorkers", "-"), NodePools(*job),
                      Age(TextAt(*job, "/metadata/creationTimestamp"), now)});
    }
    out += "ADMITTED AND FINISHED\n" + Table(rows);
  }
  return out;
}

namespace {

// The goodput breakdown as of `now` (status.goodput plus the time since its last write).
std::string RenderGoodput(const json& job, WallTime now) {
  std::string out = "\nGoodput:";
  const auto status = policy::JobStatus::FromJson(job.value("status", json::object()));
  if (!status.goodput) return out + " <not counted yet>\n";
  const policy::Goodput g = policy::LiveGoodput(*status.goodput, now);
  const int64_t total = g.TotalMs();
  auto seconds = [](int64_t ms) { return fmt::format("{:.1f}", static_cast<double>(ms) / 1000); };
  auto share = [&](int64_t ms) {
    return total > 0 ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(ms) / total)
                     : std::string("-");
  };
  const std::optional<double> ratio = policy::GoodputRatio(g);
  out += " " + (ratio ? fmt::format("{:.3f}", *ratio) : std::string("-")) + " of " +
         seconds(total) + " s (" + std::to_string(g.chips) + " chips)";
  if (!g.state.empty()) {
    out +=
        ", now " + g.state +
        (g.state_since ? " for " + Age(cache::FormatRfc3339(*g.state_since), now) : std::string());
  }
  out += "\n";
  std::vector<std::vector<std::string>> rows = {{"STATE", "SECONDS", "CHIP-SECONDS", "SHARE"}};
  rows.push_back({std::string(policy::kGoodputProductive), seconds(g.productive_ms),
                  seconds(g.productive_chip_ms), share(g.productive_ms)});
  for (std::string_view cause : policy::kGoodputCauses) {
    auto it = g.lost_ms.find(cause);
    if (it == g.lost_ms.end() || it->second <= 0) continue;
    auto chip = g.lost_chip_ms.find(cause);
    rows.push_back({std::string(cause), seconds(it->second),
                    seconds(chip == g.lost_chip_ms.end() ? 0 : chip->second), share(it->second)});
  }
  // Elastic slices: productive time on fewer slices; the chips it ran without were lost.
  if (auto chip = g.lost_chip_ms.find(policy::goodput_cause::kDegraded);
      g.degraded_ms > 0 && chip != g.lost_chip_ms.end()) {
    rows.push_back({std::string(policy::goodput_cause::kDegraded) + " (within Productive)",
                    seconds(g.degraded_ms), seconds(chip->second), share(g.degraded_ms)});
  }
  return out + Table(rows, "  ");
}

// The job's slice: the fields spec.tpu gives, and where it names a type (spec.tpu.type), what
// that type means for the fields it leaves out, as the operator derives them.
std::string DescribeTpu(const json& job) {
  std::string accelerator = TextAt(job, "/spec/tpu/accelerator");
  std::string topology = TextAt(job, "/spec/tpu/topology");
  std::string chips = TextAt(job, "/spec/tpu/chipsPerWorker");
  const std::string type = TextAt(job, "/spec/tpu/type");
  if (!type.empty()) {
    if (auto derived = policy::LookUpTpuType(type)) {
      if (accelerator.empty()) accelerator = derived->accelerator;
      if (topology.empty()) topology = derived->topology;
      if (chips.empty()) chips = std::to_string(derived->chips_per_host);
    }
  }
  const std::string slices = TextAt(job, "/spec/tpu/slices", "1");
  return (type.empty() ? "" : type + ": ") + accelerator + " " + topology + ", " + chips +
         " chips per worker" + (slices == "1" ? std::string() : ", " + slices + " slices");
}

}  // namespace

namespace {

// The Progress section: what status.progress says (from the supervisors' reports), and what the
// log tail says now.
std::string RenderProgress(const json& job, WallTime now, const std::optional<LogProgress>& log) {
  if (!job.contains(json::json_pointer("/spec/faultTolerance/progress"))) return "";
  std::vector<std::vector<std::string>> rows;
  if (log) {
    std::string current;
    if (!log->error.empty()) {
      current = "unknown (" + log->error + ")";
    } else if (!log->step) {
      current = "no step line yet";
    } else {
      current =
          "step " + std::to_string(*log->step) +
          (log->at ? ", " + Age(cache::FormatRfc3339(*log->at), now) + " ago" : "") +
          (log->steps_per_second ? fmt::format(", {:.3g} steps/s", *log->steps_per_second) : "");
    }
    rows.push_back({"Now:", current + " (" + log->source + ")"});
  }
  const std::string step = TextAt(job, "/status/progress/step");
  const std::string at = TextAt(job, "/status/progress/time");
  rows.push_back(
      {"Last reported:",
       step.empty() ? "-" : "step " + step + (at.empty() ? "" : ", " + Age(at, now) + " ago")});
  rows.push_back({"Last checkpoint:", TextAt(job, "/status/progress/checkpointStep", "-")});
  const std::string stalls = TextAt(job, "/status/stalls", "0");
  std::string stall_text = stalls;
  if (const std::string row = TextAt(job, "/status/progress/stallsInARow"); !row.empty()) {
    stall_text += " (" + row + " in a row of at most " +
                  TextAt(job, "/spec/faultTolerance/progress/maxStalls", "3") + ")";
  }
  if (const std::string suspect = TextAt(job, "/status/progress/suspectNode"); !suspect.empty()) {
    stall_text += ", last suspect node " + suspect;
  }
  rows.push_back({"Stalls:", stall_text});
  rows.push_back(
      {"Stall after:", TextAt(job, "/spec/faultTolerance/progress/stallSeconds", "600") +
                           "s without a step (" +
                           TextAt(job, "/spec/faultTolerance/progress/startupSeconds", "1800") +
                           "s before the first)"});
  return "\nProgress:\n" + Table(rows, "  ");
}

}  // namespace

std::string RenderDescribe(const json& job, const std::vector<json>& pods, WallTime now,
                           const std::optional<LogProgress>& progress) {
  std::string out;
  const std::string phase = TextAt(job, "/status/phase", "Queued");
  std::vector<std::vector<std::string>> head = {
      {"Name:", TextAt(job, "/metadata/name")},
      {"Namespace:", TextAt(job, "/metadata/namespace")},
      {"Phase:", phase},
      {"Attempt:", TextAt(job, "/status/attempt", "1")},
      {"Job retries:", TextAt(job, "/status/jobRetries", "0") + " of " +
                           TextAt(job, "/spec/faultTolerance/maxJobRetries", "0")},
      {"Priority:", TextAt(job, "/spec/priorityClassName").empty()
                        ? TextAt(job, "/spec/priority", "0")
                        : TextAt(job, "/spec/priority", "0") + " (class " +
                              TextAt(job, "/spec/priorityClassName") + ")"},
      {"TPU:", DescribeTpu(job)},
      {TextAt(job, "/spec/tpu/slices", "1") == "1" ? "Node pool:" : "Node pools:", NodePools(job)},
      {"Age:", Age(TextAt(job, "/metadata/creationTimestamp"), now)},
  };
  // Job control, shown only when set.
  if (TextAt(job, "/spec/suspend", "false") == "true") {
    head.push_back({"Suspended:", "yes (spec.suspend; clear it to queue the job again)"});
  }
  if (const std::string deadline = TextAt(job, "/spec/activeDeadlineSeconds"); !deadline.empty()) {
    const std::string start = TextAt(job, "/status/startTime");
    head.push_back({"Deadline:", deadline + "s from the first admission" +
                                     (start.empty() ? " (not admitted yet)"
                                                    : " (admitted " + Age(start, now) + " ago)")});
  }
  if (TextAt(job, "/spec/preemptible", "true") == "false") {
    head.push_back({"Preemptible:", "no (spec.preemptible)"});
  }
  if (const std::string times = TextAt(job, "/status/preemptions"); !times.empty()) {
    const std::string at = TextAt(job, "/status/preemptedAt");
    head.push_back({"Preempted:", times + (times == "1" ? " time" : " times") + ", last by " +
                                      TextAt(job, "/status/preemptedBy", "?") +
                                      (at.empty() ? "" : " " + Age(at, now) + " ago")});
  }
  if (const std::string ttl = TextAt(job, "/spec/ttlSecondsAfterFinished"); !ttl.empty()) {
    head.push_back({"Delete after:", ttl + "s once finished (ttlSecondsAfterFinished)"});
  }
  out += Table(head);
  if (phase == "Queued") {
    out += "\nQueue:\n";
    out += Table({{"Position:", TextAt(job, "/status/queuePosition", "-") + " (1 = next)"},
                  {"Re-issued:", TextAt(job, "/status/reissued", "false") == "true"
                                     ? "yes (re-issued jobs go first)"
                                     : "no"},
                  {"Waiting since:", TextAt(job, "/status/queuedAt", "-")},
                  {"Why it waits:", WhyWaiting(job)}},
                 "  ");
  }

  out += "\nConditions:\n";
  std::vector<std::vector<std::string>> conditions = {
      {"TYPE", "STATUS", "REASON", "AGE", "MESSAGE"}};
  const json::json_pointer conditions_at("/status/conditions");
  if (job.contains(conditions_at) && job.at(conditions_at).is_array()) {
    for (const json& c : job.at(conditions_at)) {
      conditions.push_back({c.value("type", ""), c.value("status", ""), c.value("reason", ""),
                            Age(c.value("lastTransitionTime", ""), now), c.value("message", "")});
    }
  }
  out += conditions.size() > 1 ? Table(conditions, "  ") : "  <none>\n";

  out += "\nReplicas:\n";
  std::vector<std::vector<std::string>> replicas = {
      {"TYPE", "ACTIVE", "READY", "SUCCEEDED", "FAILED", "RESTARTS"}};
  const json::json_pointer replicas_at("/status/replicaStatuses");
  if (job.contains(replicas_at) && job.at(replicas_at).is_object()) {
    for (const auto& [type, r] : job.at(replicas_at).items()) {
      replicas.push_back(
          {type, std::to_string(r.value("active", 0)), std::to_string(r.value("ready", 0)),
           std::to_string(r.value("succeeded", 0)), std::to_string(r.value("failed", 0)),
           std::to_string(r.value("restarts", 0))});
    }
  }
  out += replicas.size() > 1 ? Table(replicas, "  ") : "  <none>\n";

  out += RenderProgress(job, now, progress);
  out += RenderGoodput(job, now);

  out += "\nFaults (oldest first):\n";
  std::vector<std::vector<std::string>> faults = {
      {"AGE", "ATTEMPT", "KIND", "NODE", "POD", "ITEM", "EXIT", "ACTION", "MESSAGE"}};
  const bool multislice = TextAt(job, "/spec/tpu/slices", "1") != "1";
  if (multislice) faults[0].insert(faults[0].begin() + 4, "SLICE");
  const json::json_pointer faults_at("/status/faults");
  if (job.contains(faults_at) && job.at(faults_at).is_array()) {
    for (const json& f : job.at(faults_at)) {
      faults.push_back({Age(f.value("time", ""), now), TextAt(f, "/attempt", "-"),
                        f.value("kind", ""), TextAt(f, "/node", "-"), TextAt(f, "/pod", "-"),
                        TextAt(f, "/item", "-"), TextAt(f, "/exitCode", "-"), f.value("action", ""),
                        f.value("message", "")});
      if (multislice) faults.back().insert(faults.back().begin() + 4, TextAt(f, "/slice", "-"));
    }
  }
  out += faults.size() > 1 ? Table(faults, "  ") : "  <none>\n";

  out += "\nCordoned nodes:";
  const json::json_pointer cordoned_at("/status/cordonedNodes");
  if (job.contains(cordoned_at) && job.at(cordoned_at).is_array() && !job.at(cordoned_at).empty()) {
    out += "\n";
    for (const json& n : job.at(cordoned_at)) out += "  " + n.get<std::string>() + "\n";
  } else {
    out += " <none>\n";
  }

  out += "\nPods:\n";
  std::vector<std::vector<std::string>> pod_rows = {{"NAME", "ATTEMPT", "NODE", "PHASE", "AGE"}};
  std::vector<const json*> sorted;
  for (const json& pod : pods) sorted.push_back(&pod);
  std::sort(sorted.begin(), sorted.end(), [](const json* a, const json* b) {
    return TextAt(*a, "/metadata/name") < TextAt(*b, "/metadata/name");
  });
  for (const json* pod : sorted) {
    pod_rows.push_back({TextAt(*pod, "/metadata/name"),
                        TextAt(*pod, "/metadata/labels/tpujob.dev~1attempt", "-"),
                        TextAt(*pod, "/spec/nodeName", "<unscheduled>"),
                        TextAt(*pod, "/metadata/deletionTimestamp").empty()
                            ? TextAt(*pod, "/status/phase", "Pending")
                            : "Terminating",
                        Age(TextAt(*pod, "/metadata/creationTimestamp"), now)});
  }
  out += pod_rows.size() > 1 ? Table(pod_rows, "  ") : "  <none>\n";
  return out;
}

}  // namespace tpujob::plugin
