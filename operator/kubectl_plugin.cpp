#include "kubectl_plugin.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <iomanip>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "cache/objects.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/stream.h"
#include "plugin_commands.h"
#include "policy/goodput.h"
#include "policy/job_status.h"
#include "policy/tpu_types.h"

namespace tpujob::plugin {
namespace {

using nlohmann::json;

std::string Str(const json& object, const json::json_pointer& at,
                const std::string& fallback = "") {
  if (!object.contains(at)) return fallback;
  const json& v = object.at(at);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  return fallback;
}
std::string Str(const json& object, const char* at, const std::string& fallback = "") {
  return Str(object, json::json_pointer(at), fallback);
}

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
  return Str(job, "/status/nodePool", "-");
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

bool Waiting(const json& job) { return Str(job, "/status/phase", "Queued") == "Queued"; }

int Position(const json& job) {
  const std::string p = Str(job, "/status/queuePosition");
  return p.empty() ? 1 << 30 : std::atoi(p.c_str());
}

std::string WhyWaiting(const json& job) {
  const json* admitted = Condition(job, "Admitted");
  if (admitted == nullptr) return "not yet seen by the operator";
  return admitted->value("message", admitted->value("reason", ""));
}

std::string Key(const json& job) {
  return Str(job, "/metadata/namespace") + "/" + Str(job, "/metadata/name");
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
    return all_namespaces ? Key(job) : Str(job, "/metadata/name");
  };
  if (!waiting.empty()) {
    std::vector<std::vector<std::string>> rows = {
        {"POSITION", "NAME", "PRIORITY", "ATTEMPT", "REISSUED", "WAITING", "WHY"}};
    for (const json* job : waiting) {
      const std::string position = Str(*job, "/status/queuePosition", "-");
      rows.push_back(
          {position, name(*job), Str(*job, "/spec/priority", "0"),
           Str(*job, "/status/attempt", "1"),
           Str(*job, "/status/reissued", "false") == "true" ? "yes" : "no",
           Age(Str(*job, "/status/queuedAt", Str(*job, "/metadata/creationTimestamp")), now),
           WhyWaiting(*job)});
    }
    out += "QUEUE (" + std::to_string(waiting.size()) + " waiting, next first)\n" + Table(rows);
  }
  if (!others.empty()) {
    if (!out.empty()) out += "\n";
    std::vector<std::vector<std::string>> rows = {
        {"NAME", "PHASE", "ATTEMPT", "RETRIES", "READY", "NODE POOL", "AGE"}};
    for (const json* job : others) {
      rows.push_back({name(*job), Str(*job, "/status/phase"), Str(*job, "/status/attempt", "1"),
                      Str(*job, "/status/jobRetries", "0"), Str(*job, "/status/readyWorkers", "-"),
                      NodePools(*job), Age(Str(*job, "/metadata/creationTimestamp"), now)});
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
  return out + Table(rows, "  ");
}

// The job's slice: the fields spec.tpu gives, and where it names a type (spec.tpu.type), what
// that type means for the fields it leaves out, as the operator derives them.
std::string DescribeTpu(const json& job) {
  std::string accelerator = Str(job, "/spec/tpu/accelerator");
  std::string topology = Str(job, "/spec/tpu/topology");
  std::string chips = Str(job, "/spec/tpu/chipsPerWorker");
  const std::string type = Str(job, "/spec/tpu/type");
  if (!type.empty()) {
    if (auto derived = policy::LookUpTpuType(type)) {
      if (accelerator.empty()) accelerator = derived->accelerator;
      if (topology.empty()) topology = derived->topology;
      if (chips.empty()) chips = std::to_string(derived->chips_per_host);
    }
  }
  const std::string slices = Str(job, "/spec/tpu/slices", "1");
  return (type.empty() ? "" : type + ": ") + accelerator + " " + topology + ", " + chips +
         " chips per worker" + (slices == "1" ? std::string() : ", " + slices + " slices");
}

}  // namespace

std::string RenderDescribe(const json& job, const std::vector<json>& pods, WallTime now) {
  std::string out;
  const std::string phase = Str(job, "/status/phase", "Queued");
  std::vector<std::vector<std::string>> head = {
      {"Name:", Str(job, "/metadata/name")},
      {"Namespace:", Str(job, "/metadata/namespace")},
      {"Phase:", phase},
      {"Attempt:", Str(job, "/status/attempt", "1")},
      {"Job retries:", Str(job, "/status/jobRetries", "0") + " of " +
                           Str(job, "/spec/faultTolerance/maxJobRetries", "0")},
      {"Priority:", Str(job, "/spec/priorityClassName").empty()
                        ? Str(job, "/spec/priority", "0")
                        : Str(job, "/spec/priority", "0") + " (class " +
                              Str(job, "/spec/priorityClassName") + ")"},
      {"TPU:", DescribeTpu(job)},
      {Str(job, "/spec/tpu/slices", "1") == "1" ? "Node pool:" : "Node pools:", NodePools(job)},
      {"Age:", Age(Str(job, "/metadata/creationTimestamp"), now)},
  };
  // Job control, shown only when set.
  if (Str(job, "/spec/suspend", "false") == "true") {
    head.push_back({"Suspended:", "yes (spec.suspend; clear it to queue the job again)"});
  }
  if (const std::string deadline = Str(job, "/spec/activeDeadlineSeconds"); !deadline.empty()) {
    const std::string start = Str(job, "/status/startTime");
    head.push_back({"Deadline:", deadline + "s from the first admission" +
                                     (start.empty() ? " (not admitted yet)"
                                                    : " (admitted " + Age(start, now) + " ago)")});
  }
  if (Str(job, "/spec/preemptible", "true") == "false") {
    head.push_back({"Preemptible:", "no (spec.preemptible)"});
  }
  if (const std::string times = Str(job, "/status/preemptions"); !times.empty()) {
    const std::string at = Str(job, "/status/preemptedAt");
    head.push_back({"Preempted:", times + (times == "1" ? " time" : " times") + ", last by " +
                                      Str(job, "/status/preemptedBy", "?") +
                                      (at.empty() ? "" : " " + Age(at, now) + " ago")});
  }
  if (const std::string ttl = Str(job, "/spec/ttlSecondsAfterFinished"); !ttl.empty()) {
    head.push_back({"Delete after:", ttl + "s once finished (ttlSecondsAfterFinished)"});
  }
  out += Table(head);
  if (phase == "Queued") {
    out += "\nQueue:\n";
    out += Table(
        {{"Position:", Str(job, "/status/queuePosition", "-") + " (1 = next)"},
         {"Re-issued:",
          Str(job, "/status/reissued", "false") == "true" ? "yes (re-issued jobs go first)" : "no"},
         {"Waiting since:", Str(job, "/status/queuedAt", "-")},
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

  out += RenderGoodput(job, now);

  out += "\nFaults (oldest first):\n";
  std::vector<std::vector<std::string>> faults = {
      {"AGE", "ATTEMPT", "KIND", "NODE", "POD", "ITEM", "EXIT", "ACTION", "MESSAGE"}};
  const bool multislice = Str(job, "/spec/tpu/slices", "1") != "1";
  if (multislice) faults[0].insert(faults[0].begin() + 4, "SLICE");
  const json::json_pointer faults_at("/status/faults");
  if (job.contains(faults_at) && job.at(faults_at).is_array()) {
    for (const json& f : job.at(faults_at)) {
      faults.push_back({Age(f.value("time", ""), now), Str(f, "/attempt", "-"), f.value("kind", ""),
                        Str(f, "/node", "-"), Str(f, "/pod", "-"), Str(f, "/item", "-"),
                        Str(f, "/exitCode", "-"), f.value("action", ""), f.value("message", "")});
      if (multislice) faults.back().insert(faults.back().begin() + 4, Str(f, "/slice", "-"));
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
    return Str(*a, "/metadata/name") < Str(*b, "/metadata/name");
  });
  for (const json* pod : sorted) {
    pod_rows.push_back(
        {Str(*pod, "/metadata/name"), Str(*pod, "/metadata/labels/tpujob.dev~1attempt", "-"),
         Str(*pod, "/spec/nodeName", "<unscheduled>"),
         Str(*pod, "/metadata/deletionTimestamp").empty() ? Str(*pod, "/status/phase", "Pending")
                                                          : "Terminating",
         Age(Str(*pod, "/metadata/creationTimestamp"), now)});
  }
  out += pod_rows.size() > 1 ? Table(pod_rows, "  ") : "  <none>\n";
  return out;
}

namespace {

// kubectl's way of reporting the API server's refusal: its reason and its message (for a CEL
// rule, the rule's message), so the user sees what to fix.
void PrintError(const kube::Error& error) {
  if (error.kind == kube::ErrorKind::kApi && !error.message.empty()) {
    std::fprintf(
        stderr, "Error from server (%s): %s\n",
        error.reason.empty() ? std::to_string(error.http_status).c_str() : error.reason.c_str(),
        error.message.c_str());
  } else {
    std::fprintf(stderr, "error: %s\n", error.ToString().c_str());
  }
}

void PrintObject(const json& object, const std::string& format) {
  if (format == "json") {
    std::fputs((object.dump(4) + "\n").c_str(), stdout);
  } else {
    std::fputs(ToYaml(object).c_str(), stdout);
  }
}

// The field manager of the plugin's writes, so `kubectl get -o yaml --show-managed-fields` tells
// them apart from the operator's.
constexpr const char* kFieldManager = "kubectl-tpujob";

void PrintNotFound(const std::string& name) {
  std::fprintf(stderr, "Error from server (NotFound): tpujobs.tpujob.dev \"%s\" not found\n",
               name.c_str());
}

enum class FollowEnd { kDone, kDeleted, kTimedOut, kNotFound };

// Follows one job until `done` says so for a version of it, the job is deleted, or `deadline`
// (checked between requests: a request that hangs is the caller's watchdog's to cut short).
//
// A watch on the one job (fieldSelector metadata.name=NAME) from the resourceVersion of a fresh
// GET: the answer comes the moment the operator writes the phase, and a long wait costs the API
// server one idle watch instead of a request every few seconds. Every (re)connection starts with
// that GET, so nothing written while the watch was down is missed; the server is asked to end
// each watch within 10 s (see below). Transport errors are retried every second until the
// deadline.
FollowEnd FollowJob(kube::Client& client, const std::string& ns, const std::string& name,
                    std::optional<std::chrono::steady_clock::time_point> deadline,
                    const std::function<bool(const json&)>& done, std::string& error) {
  using Steady = std::chrono::steady_clock;
  const auto far = Steady::now() + std::chrono::hours(24 * 365);
  const auto until = deadline.value_or(far);
  bool seen = false;
  auto pause = [&] {
    std::this_thread::sleep_for(
        std::min<Steady::duration>(std::chrono::seconds(1), until - Steady::now()));
  };
  // At least one look, so that --timeout 0 decides on the job as it is.
  for (bool first = true; first || Steady::now() < until; first = false) {
    auto job = client.Get(kube::Resource::TPUJobs(), ns, name);
    if (!job) {
      if (job.error().IsNotFound()) return seen ? FollowEnd::kDeleted : FollowEnd::kNotFound;
      if (!job.error().IsRetryable()) {
        error = job.error().ToString();
        return FollowEnd::kNotFound;
      }
      pause();
      continue;
    }
    seen = true;
    if (done(*job)) return FollowEnd::kDone;
    if (Steady::now() >= until) break;
    kube::WatchOptions options;
    options.field_selector = "metadata.name=" + name;
    options.resource_version = Str(*job, "/metadata/resourceVersion");
    const auto remaining =
        std::chrono::duration_cast<std::chrono::seconds>(until - Steady::now()).count();
    // Short watches, each after a fresh GET: a watch that silently delivers nothing (a dead
    // connection, a custom resource's storage replaced under it when its CRD changes) costs at
    // most 10 s, and a GET and a watch every 10 s for one object is nothing to the server.
    options.timeout_seconds = static_cast<int>(std::clamp<long long>(remaining + 1, 1, 10));
    auto stream = client.Watch(kube::Resource::TPUJobs(), ns, options);
    if (!stream) {
      pause();
      continue;
    }
    while (true) {
      auto event = (*stream)->Next();
      if (!event || !*event) break;  // ended, broken or cancelled: GET again
      if ((*event)->type == kube::WatchEventType::kDeleted) return FollowEnd::kDeleted;
      if ((*event)->type == kube::WatchEventType::kError) break;
      if ((*event)->type == kube::WatchEventType::kBookmark) continue;
      if (done((*event)->object)) return FollowEnd::kDone;
    }
  }
  return FollowEnd::kTimedOut;
}

// Prints whole lines from several threads: a line is written with one call under the lock, so
// lines of different pods interleave but never mix.
class LinePrinter {
 public:
  void Print(const std::string& prefix, const std::string& line) {
    const std::string out = prefix + line + "\n";
    std::lock_guard<std::mutex> lock(mu_);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  }
  void Error(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", text.c_str());
  }

 private:
  std::mutex mu_;
};

// One pod's followed log: its stream is published here while open, so the main loop can cancel
// it (a pod gone from the API server whose node no longer answers, a job that has ended).
struct FollowedLog {
  LogSource source;
  int attempt = 0;
  kube::ByteStream* stream = nullptr;  // while open; guarded by the follower's mutex
  bool cancelled = false;
  bool ended = false;
  int missing_polls = 0;  // consecutive looks that did not list the pod
};

// Reads one pod's log to its end (with `follow`, until the container stops), printing each line
// with the pod's prefix. With `follow`, `publish` is called (under the caller's lock) with the
// open stream and again with nullptr when it is done.
kube::Status CopyLog(const kube::Config& config, const std::string& ns, const LogSource& source,
                     bool follow, std::optional<int64_t> since_seconds, LinePrinter& printer,
                     const std::function<bool(kube::ByteStream*)>& publish = {}) {
  kube::QueryParams query = {{"container", source.container}};
  if (follow) query.emplace_back("follow", "true");
  if (since_seconds) query.emplace_back("sinceSeconds", std::to_string(*since_seconds));
  auto stream = kube::StreamGet(config, kube::Resource::Pods(), ns, source.pod, "log", query);
  if (!stream) return std::unexpected(stream.error());
  if (publish && !publish(stream->get())) return {};  // cancelled before it opened
  LineSplitter splitter;
  kube::Status result;
  while (true) {
    auto chunk = (*stream)->Read();
    if (!chunk || !*chunk) {
      if (auto last = splitter.Flush()) printer.Print(source.prefix, *last);
      if (!chunk) result = std::unexpected(chunk.error());
      break;
    }
    for (const std::string& line : splitter.Feed(**chunk)) printer.Print(source.prefix, line);
  }
  if (publish) publish(nullptr);
  return result;
}

bool Finished(const json& job) {
  const std::string phase = PhaseOf(job);
  return phase == "Succeeded" || phase == "Failed";
}

// `kubectl tpujob logs -f`: streams every selected pod of the attempt at once, one thread each,
// and follows the job to its next attempts until it finishes and every stream has ended.
//
// Polls the job and its pods every 2 s rather than watching them: it has to find pods as their
// containers start (the log endpoint refuses a container not started yet) and to notice a new
// attempt, and two small reads every 2 s for one job is nothing next to the logs themselves.
//
// The banner of a new attempt is printed once every stream of the old one has ended (the old
// pods get SIGTERM and their grace period after the job moved on, and their last lines, the
// checkpoint among them, belong before it); the operator never creates the new attempt's pods
// while an old one exists, so nothing of the new attempt is held back by the wait. A pod that
// the API server has not listed for two looks has its stream cancelled (its node may never
// close it), and so does every stream still open 10 s after the job finished or was deleted.
// Exit status: 0, or 1 when a stream failed or no pod was ever followed.
int FollowLogs(kube::Client& client, const kube::Config& config, const std::string& ns,
               const std::string& name, json job, const LogSelection& selection,
               std::optional<int64_t> since_seconds) {
  using Clock = std::chrono::steady_clock;
  LinePrinter printer;
  int attempt = selection.attempt.value_or(CurrentAttempt(job));
  int banner_for = 0;  // the attempt whose banner waits for the old streams to end (0: none)
  std::mutex mu;
  std::map<std::string, std::shared_ptr<FollowedLog>> follows;  // by pod uid
  std::vector<std::thread> threads;
  bool failed = false;
  kube::ListOptions pod_options;
  pod_options.label_selector = "tpujob.dev/job-name=" + name;
  bool deleted = false;
  std::optional<Clock::time_point> over_since;  // when the job was first seen finished or gone
  const auto cancel = [](FollowedLog& f) {
    f.cancelled = true;
    if (f.stream != nullptr) f.stream->Cancel();
  };
  const auto open_streams = [&](int of_attempt) {  // under mu
    int open = 0;
    for (const auto& [uid, f] : follows) open += !f->ended && f->attempt <= of_attempt ? 1 : 0;
    return open;
  };
  while (true) {
    auto pods = kube::ListAll(client, kube::Resource::Pods(), ns, pod_options);
    {
      std::lock_guard<std::mutex> lock(mu);
      if (banner_for != 0 && open_streams(banner_for - 1) == 0) {
        printer.Print("", AttemptBanner(job, attempt, banner_for));
        attempt = banner_for;
        banner_for = 0;
      }
    }
    if (pods) {
      std::lock_guard<std::mutex> lock(mu);
      std::set<std::string> listed;
      for (const json& pod : pods->items) listed.insert(Str(pod, "/metadata/uid"));
      for (auto& [uid, f] : follows) {
        f->missing_polls = listed.contains(uid) ? 0 : f->missing_polls + 1;
        if (!f->ended && f->missing_polls >= 2) cancel(*f);
      }
      const std::vector<LogSource> sources = SelectLogSources(pods->items, attempt, selection);
      if (sources.empty() && banner_for == 0 && (selection.worker || selection.slice)) {
        // The attempt's pods exist, and none is the one asked for.
        if (!SelectLogSources(pods->items, attempt, LogSelection{}).empty()) {
          printer.Error("error: no pods of attempt " + std::to_string(attempt) +
                        " of tpujob.tpujob.dev/" + name + " match the selection");
          failed = true;
          break;
        }
      }
      for (const LogSource& source : banner_for != 0 ? std::vector<LogSource>{} : sources) {
        if (!source.started || follows.contains(source.uid)) continue;
        auto f = std::make_shared<FollowedLog>();
        f->source = source;
        f->attempt = attempt;
        follows[source.uid] = f;
        threads.emplace_back([&, f] {
          auto copied = CopyLog(config, ns, f->source, /*follow=*/true, since_seconds, printer,
                                [&](kube::ByteStream* stream) {
                                  std::lock_guard<std::mutex> lock(mu);
                                  f->stream = stream;
                                  if (stream != nullptr && f->cancelled) stream->Cancel();
                                  return true;
                                });
          std::lock_guard<std::mutex> lock(mu);
          if (!copied && copied.error().http_status == 400 && !f->cancelled) {
            // Refused: the container is between starts; try again at the next look.
            follows.erase(f->source.uid);
            return;
          }
          f->ended = true;
          if (!copied && !f->cancelled && copied.error().http_status != 404) {
            printer.Error("error: " + f->source.prefix + copied.error().ToString());
            failed = true;
          }
        });
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      const bool past_attempt = selection.attempt && CurrentAttempt(job) > attempt;
      const bool over = deleted || Finished(job) || past_attempt;
      if (over && !over_since) over_since = Clock::now();
      if (over && open_streams(std::numeric_limits<int>::max()) == 0 && banner_for == 0) break;
      if (over && Clock::now() - *over_since > std::chrono::seconds(10)) {
        for (auto& [uid, f] : follows) {
          if (!f->ended) cancel(*f);
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));
    if (!deleted) {
      auto again = client.Get(kube::Resource::TPUJobs(), ns, name);
      if (again) {
        job = std::move(*again);
      } else if (again.error().IsNotFound()) {
        printer.Error("--- tpujob.tpujob.dev/" + name + " was deleted ---");
        deleted = true;
      }
    }
    if (!selection.attempt && banner_for == 0 && CurrentAttempt(job) > attempt) {
      banner_for = CurrentAttempt(job);
    }
  }
  {
    // Leaving early (a selection that matches nothing): stop what runs.
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [uid, f] : follows) {
      if (!f->ended) cancel(*f);
    }
  }
  for (std::thread& t : threads) t.join();
  if (failed) return 1;
  if (follows.empty()) {
    printer.Error("error: no pods of attempt " + std::to_string(attempt) +
                  " of tpujob.tpujob.dev/" + name + " were there to follow (phase " +
                  (deleted ? std::string("deleted") : PhaseOf(job)) +
                  "); the operator deletes a finished job's pods, and their logs go with them");
    return 1;
  }
  if (!deleted) printer.Print("", "--- tpujob.tpujob.dev/" + name + " " + PhaseOf(job) + " ---");
  return 0;
}

}  // namespace

int Complete(const std::vector<std::string>& words) {
  auto job_names = [&]() -> std::vector<std::string> {
    std::string kubeconfig;
    std::string context;
    std::string ns;
    for (size_t i = 0; i + 1 < words.size(); ++i) {
      const std::string& w = words[i];
      const std::string& next = words[i + 1];
      if (w == "-n" || w == "--namespace") ns = next;
      if (w == "--kubeconfig") kubeconfig = next;
      if (w == "--context") context = next;
      if (w.starts_with("--namespace=")) ns = w.substr(12);
      if (w.starts_with("--kubeconfig=")) kubeconfig = w.substr(13);
      if (w.starts_with("--context=")) context = w.substr(10);
    }
    auto config = kube::ResolveConfig(kubeconfig, context);
    if (!config) return {};
    if (ns.empty()) ns = config->default_namespace;
    config->max_retries = 0;  // a completion that waits is worse than none
    config->request_timeout = std::chrono::seconds(5);
    kube::TrustOnlyTheConfiguredCa(*config);
    auto client = kube::NewClient(*config, {});
    auto listed = client->List(kube::Resource::TPUJobs(), ns, {});
    std::vector<std::string> names;
    if (!listed || !(*listed)["items"].is_array()) return names;
    for (const json& job : (*listed)["items"]) names.push_back(Str(job, "/metadata/name"));
    std::sort(names.begin(), names.end());
    return names;
  };
  std::fputs(CompletionOutput(CompletionCandidates(words, job_names)).c_str(), stdout);
  return 0;
}

int Run(int argc, char** argv) {
  // The shell completion scripts ask the binary what may come next (see plugin_commands.h).
  if (argc >= 2 && std::string_view(argv[1]) == "__complete") {
    return Complete(std::vector<std::string>(argv + 2, argv + argc));
  }
  // Everything after the first `--` is the command of `run`; CLI11 never sees it, so flags of the
  // command (`sh -c ...`) are not taken for the plugin's.
  std::vector<std::string> command;
  int plugin_argc = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      plugin_argc = i;
      command.assign(argv + i + 1, argv + argc);
      break;
    }
  }
  const bool has_separator = plugin_argc != argc;

  CLI::App app{
      "kubectl tpujob: TPUJobs as the tpujob-operator sees them: the queue in order, and for one "
      "job its attempts, faults, cordoned nodes, pods and why it waits; and a job run, followed, "
      "waited for, suspended and resumed from the command line.",
      "kubectl tpujob"};
  app.require_subcommand(1);
  app.fallthrough();  // the global flags may follow the subcommand, as in kubectl
  std::string kubeconfig;
  std::string context;
  std::string ns;
  bool all_namespaces = false;
  app.add_option("--kubeconfig", kubeconfig,
                 "Path to the kubeconfig file. Default: $KUBECONFIG, then ~/.kube/config.");
  app.add_option("--context", context, "kubeconfig context. Default: the current context.");
  app.add_option("-n,--namespace", ns, "Namespace. Default: the context's namespace.");
  CLI::App* list = app.add_subcommand(
      "list", "The queue in order (next first, with why each job waits), then the other jobs.");
  list->add_flag("-A,--all-namespaces", all_namespaces, "Jobs of every namespace.");
  std::string name;
  CLI::App* describe = app.add_subcommand(
      "describe",
      "One job: phase, conditions, attempts, goodput by cause, faults with nodes and pre-flight "
      "items, cordoned nodes, pods, suspend/deadline/TTL, and its place in the queue and why it "
      "waits.");
  describe->add_option("NAME", name, "The TPUJob's name.")->required();

  RunRequest run_request;
  std::string dry_run = "none";
  std::string output;
  int slices = 0;
  int priority = 0;
  int max_restarts = 0;
  CLI::App* run = app.add_subcommand(
      "run",
      "Create a TPUJob from the command line: NAME --tpu-type T --image IMG [flags] -- COMMAND "
      "[ARGS...]. The Worker template gets one container (\"trainer\") running COMMAND with ARGS; "
      "the API server derives accelerator, topology, chips and hosts from the TPU type. Prints "
      "`tpujob.tpujob.dev/NAME created`; with --dry-run=client prints the object instead (-o "
      "yaml|json), ready for `kubectl apply -f -`. Exit 1 when the server refuses the job.");
  run->add_option("NAME", run_request.name, "The TPUJob's name.")->required();
  run->add_option("--tpu-type", run_request.tpu_type,
                  "TPU type: v5litepod-16, v5p-128, v6e-8, ... (spec.tpu.type). Required.");
  CLI::Option* slices_option =
      run->add_option("--slices", slices, "Slices of that type, for multislice (spec.tpu.slices).");
  run->add_option("--image", run_request.image, "The container image. Required.");
  CLI::Option* priority_option =
      run->add_option("--priority", priority, "Queue priority, higher first (spec.priority).");
  CLI::Option* priority_class_option =
      run->add_option("--priority-class", run_request.priority_class,
                      "Take the priority from this PriorityClass (spec.priorityClassName).");
  priority_option->excludes(priority_class_option);
  CLI::Option* max_restarts_option =
      run->add_option("--max-restarts", max_restarts,
                      "In-place restarts of one worker for a retryable exit "
                      "(spec.faultTolerance.maxWorkerRestarts).");
  run->add_option("--queue", run_request.queue,
                  "Kueue LocalQueue to submit to (label kueue.x-k8s.io/queue-name).");
  // One value per --env (repeatable): a vector option would otherwise also take the words
  // after it, such as the job's name in `run --env A=1 NAME ...`.
  run->add_option("--env", run_request.env,
                  "KEY=VALUE for the container's environment (repeatable).")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  run->add_option("--dry-run", dry_run,
                  "client: print the object without sending it; none: create it.")
      ->check(CLI::IsMember({"none", "client"}))
      ->default_str("none");
  run->add_option("-o,--output", output,
                  "yaml or json: print the object (the server's answer, or with --dry-run=client "
                  "the object that would be sent).")
      ->check(CLI::IsMember({"yaml", "json"}));

  std::string status_filter;
  list->add_option("--status", status_filter,
                   "Only jobs in this phase: Queued, Starting, Running, Restarting, Suspended, "
                   "Succeeded or Failed (any case).");

  std::string wait_for = "completion";
  std::string wait_timeout;
  CLI::App* wait = app.add_subcommand(
      "wait",
      "Wait for a job: exit 0 once it Succeeded (--for=completion) or is Running "
      "(--for=running; a job already Succeeded counts), 1 when it Failed (printing the reason "
      "and the last fault) or was deleted, 2 on --timeout.");
  wait->add_option("NAME", name, "The TPUJob's name.")->required();
  wait->add_option("--for", wait_for, "completion or running.")
      ->check(CLI::IsMember({"completion", "running"}))
      ->default_str("completion");
  wait->add_option("--timeout", wait_timeout,
                   "Give up after this long (30s, 5m, 1h, 1h30m) and exit 2. Default: no limit.");

  CLI::App* suspend = app.add_subcommand(
      "suspend",
      "Suspend a job (spec.suspend=true): its pods stop after the maintenance grace period and "
      "it leaves the queue, keeping its attempt, retries and goodput.");
  suspend->add_option("NAME", name, "The TPUJob's name.")->required();
  CLI::App* resume =
      app.add_subcommand("resume", "Resume a suspended job (spec.suspend=false): it queues again.");
  resume->add_option("NAME", name, "The TPUJob's name.")->required();

  LogSelection log_selection;
  int log_worker = 0;
  int log_slice = 0;
  int log_attempt = 0;
  bool follow = false;
  std::string since;
  CLI::App* logs = app.add_subcommand(
      "logs",
      "The logs of the job's pods (the Master, then the workers by slice and index), each line "
      "prefixed \"[worker-W] \", \"[slice-S/worker-W] \" in a multislice job, or "
      "\"[master-0] \". Without -f one pod after the other; with -f all at once, following the "
      "job's next attempts until it finishes.");
  logs->add_option("NAME", name, "The TPUJob's name.")->required();
  CLI::Option* worker_option = logs->add_option(
      "--worker", log_worker, "Only the worker with this index within its slice (TPU_WORKER_ID).");
  CLI::Option* slice_option =
      logs->add_option("--slice", log_slice, "Only the workers of this slice (multislice jobs).");
  CLI::Option* attempt_option = logs->add_option(
      "--attempt", log_attempt, "The pods of this attempt. Default: the job's current attempt.");
  logs->add_flag("-f,--follow", follow,
                 "Stream the logs as they are written, across new attempts, until the job "
                 "finishes.");
  logs->add_option("--since", since,
                   "Only lines newer than this (30s, 5m, 1h), as the log API's sinceSeconds.");

  std::string shell;
  CLI::App* completion = app.add_subcommand(
      "completion",
      "Print a completion script for bash or zsh (subcommands, flags, values, job names). "
      "Source it, e.g. `source <(kubectl tpujob completion bash)`; for `kubectl tpujob <TAB>` "
      "(kubectl 1.26 or later) put an executable named kubectl_complete-tpujob on the PATH: a "
      "symbolic link to this binary.");
  completion->add_option("SHELL", shell, "bash or zsh.")->required();

  try {
    app.parse(plugin_argc, argv);
  } catch (const CLI::ParseError& e) {
    // kubectl's convention: a usage error exits 1; --help exits 0.
    return app.exit(e) == 0 ? 0 : 1;
  }
  if (has_separator && !run->parsed()) {
    std::fprintf(stderr, "error: arguments after `--` are only taken by `run`\n");
    return 1;
  }

  if (run->parsed()) {
    if (slices_option->count() > 0) run_request.slices = slices;
    if (priority_option->count() > 0) run_request.priority = priority;
    if (max_restarts_option->count() > 0) run_request.max_restarts = max_restarts;
    run_request.command = command;
    run_request.ns = ns;  // only when given: kubectl apply then uses the current namespace
    auto job = BuildJob(run_request);
    if (!job) {
      std::fprintf(stderr, "error: %s\n", job.error().c_str());
      return 1;
    }
    if (dry_run == "client") {
      PrintObject(*job, output.empty() ? "yaml" : output);
      return 0;
    }
  }

  if (completion->parsed()) {
    auto script = CompletionScript(shell);
    if (!script) {
      std::fprintf(stderr, "error: %s\n", script.error().c_str());
      return 1;
    }
    std::fputs(script->c_str(), stdout);
    return 0;
  }

  std::optional<std::string> phase;
  if (list->parsed() && !status_filter.empty()) {
    auto parsed = ParsePhase(status_filter);
    if (!parsed) {
      std::fprintf(stderr, "error: %s\n", parsed.error().c_str());
      return 1;
    }
    phase = *parsed;
  }
  std::optional<std::chrono::seconds> timeout;
  if (wait->parsed() && !wait_timeout.empty()) {
    auto parsed = ParseDuration(wait_timeout);
    if (!parsed) {
      std::fprintf(stderr, "error: --timeout: %s\n", parsed.error().c_str());
      return 1;
    }
    timeout = *parsed;
  }

  std::optional<int64_t> since_seconds;
  if (logs->parsed()) {
    if (worker_option->count() > 0) log_selection.worker = log_worker;
    if (slice_option->count() > 0) log_selection.slice = log_slice;
    if (attempt_option->count() > 0) log_selection.attempt = log_attempt;
    if (!since.empty()) {
      auto parsed = ParseDuration(since);
      if (!parsed) {
        std::fprintf(stderr, "error: --since: %s\n", parsed.error().c_str());
        return 1;
      }
      since_seconds = std::max<int64_t>(1, parsed->count());
    }
  }

  auto config = kube::ResolveConfig(kubeconfig, context);
  if (!config) {
    std::fprintf(stderr, "error: %s\n", config.error().ToString().c_str());
    return 1;
  }
  if (ns.empty()) ns = config->default_namespace;
  // A watch that delivers nothing for a minute is a dead connection (FollowJob asks the server to
  // end each one within 40 s).
  config->watch_idle_timeout = std::chrono::seconds(60);
  config->user_agent = "kubectl-tpujob";
  kube::TrustOnlyTheConfiguredCa(*config);  // no thread has started yet
  auto client = kube::NewClient(*config, {});
  const WallTime now = std::chrono::system_clock::now();
  if (run->parsed()) {
    auto job = BuildJob(run_request);
    kube::WriteOptions options;
    options.field_manager = kFieldManager;
    auto created = client->Create(kube::Resource::TPUJobs(), ns, *job, options);
    if (!created) {
      PrintError(created.error());
      return 1;
    }
    if (!output.empty()) {
      PrintObject(*created, output);
    } else {
      std::printf("tpujob.tpujob.dev/%s created\n", run_request.name.c_str());
    }
    return 0;
  }
  if (list->parsed()) {
    std::vector<json> jobs;
    auto listed = kube::ListAll(*client, kube::Resource::TPUJobs(), all_namespaces ? "" : ns, {});
    if (!listed) {
      std::fprintf(stderr, "error: %s\n", listed.error().ToString().c_str());
      return 1;
    }
    for (auto& item : listed->items) jobs.push_back(std::move(item));
    if (phase) {
      jobs = FilterByPhase(std::move(jobs), *phase);
      if (jobs.empty()) {
        std::printf("No TPUJobs in phase %s.\n", phase->c_str());
        return 0;
      }
    }
    std::fputs(RenderList(jobs, now, all_namespaces).c_str(), stdout);
    return 0;
  }
  if (suspend->parsed() || resume->parsed()) {
    kube::PatchOptions options;
    options.field_manager = kFieldManager;
    auto patched = client->Patch(kube::Resource::TPUJobs(), ns, name, kube::PatchType::kMerge,
                                 SuspendPatch(suspend->parsed()), options);
    if (!patched) {
      if (patched.error().IsNotFound()) {
        PrintNotFound(name);
      } else {
        PrintError(patched.error());
      }
      return 1;
    }
    std::printf("tpujob.tpujob.dev/%s %s\n", name.c_str(),
                suspend->parsed() ? "suspended" : "resumed");
    return 0;
  }
  if (wait->parsed()) {
    const WaitCondition condition = *ParseWaitCondition(wait_for);
    WaitVerdict verdict;
    std::string error;
    std::optional<std::chrono::steady_clock::time_point> deadline;
    // Whoever decides first prints: the wait below, or the watchdog at the deadline, which keeps
    // the timeout even while a request hangs (a GET being retried, a watch whose answer does not
    // come) by ending the process with the timeout's exit code.
    static std::atomic<bool> decided{false};
    if (timeout) deadline = std::chrono::steady_clock::now() + *timeout;
    if (timeout && timeout->count() > 0) {  // 0: one look at the job, nothing to cut short
      std::thread([until = *deadline, name] {
        std::this_thread::sleep_until(until);
        if (decided.exchange(true)) return;
        std::fprintf(stderr, "error: timed out waiting for the condition on tpujobs/%s\n",
                     name.c_str());
        std::fflush(stdout);
        std::_Exit(2);
      }).detach();
    }
    const FollowEnd end = FollowJob(
        *client, ns, name, deadline,
        [&](const json& job) {
          verdict = DecideWait(job, condition);
          return verdict.kind != WaitVerdict::kKeepWaiting;
        },
        error);
    if (decided.exchange(true)) std::this_thread::sleep_for(std::chrono::hours(1));  // exiting
    switch (end) {
      case FollowEnd::kDone:
        if (verdict.kind == WaitVerdict::kMet) {
          std::printf("tpujob.tpujob.dev/%s condition met\n", name.c_str());
          return 0;
        }
        std::fprintf(stderr, "error: tpujob.tpujob.dev/%s failed%s\n", name.c_str(),
                     verdict.message.empty() ? "" : (": " + verdict.message).c_str());
        return 1;
      case FollowEnd::kDeleted:
        std::fprintf(stderr, "error: tpujob.tpujob.dev/%s was deleted\n", name.c_str());
        return 1;
      case FollowEnd::kNotFound:
        if (error.empty()) {
          PrintNotFound(name);
        } else {
          std::fprintf(stderr, "error: %s\n", error.c_str());
        }
        return 1;
      case FollowEnd::kTimedOut:
        std::fprintf(stderr, "error: timed out waiting for the condition on tpujobs/%s\n",
                     name.c_str());
        return 2;
    }
  }
  auto job = client->Get(kube::Resource::TPUJobs(), ns, name);
  if (!job) {
    if (job.error().IsNotFound()) {
      PrintNotFound(name);
    } else {
      std::fprintf(stderr, "error: %s\n", job.error().ToString().c_str());
    }
    return 1;
  }
  if (logs->parsed()) {
    if (follow) return FollowLogs(*client, *config, ns, name, *job, log_selection, since_seconds);
    const int attempt = log_selection.attempt.value_or(CurrentAttempt(*job));
    kube::ListOptions pod_options;
    pod_options.label_selector = "tpujob.dev/job-name=" + name;
    auto pods = kube::ListAll(*client, kube::Resource::Pods(), ns, pod_options);
    if (!pods) {
      PrintError(pods.error());
      return 1;
    }
    const std::vector<LogSource> sources = SelectLogSources(pods->items, attempt, log_selection);
    if (sources.empty()) {
      const std::string phase = PhaseOf(*job);
      if (phase == "Succeeded" || phase == "Failed") {
        // The operator deletes a finished job's pods, and their logs go with them.
        std::fprintf(stderr,
                     "error: tpujob.tpujob.dev/%s %s and its pods are gone, with their logs; "
                     "follow a job with -f while it runs to keep them\n",
                     name.c_str(), phase.c_str());
      } else {
        std::fprintf(stderr,
                     "error: no pods of attempt %d of tpujob.tpujob.dev/%s match (phase %s)\n",
                     attempt, name.c_str(), phase.c_str());
      }
      return 1;
    }
    LinePrinter printer;
    int rc = 0;
    for (const LogSource& source : sources) {
      if (!source.started) {
        printer.Error(source.prefix + "(" + source.pod + ": not started yet)");
        continue;
      }
      if (auto copied = CopyLog(*config, ns, source, /*follow=*/false, since_seconds, printer);
          !copied) {
        printer.Error("error: " + source.prefix + copied.error().ToString());
        rc = 1;
      }
    }
    return rc;
  }
  kube::ListOptions options;
  options.label_selector = "tpujob.dev/job-name=" + name;
  std::vector<json> pods;
  auto listed = kube::ListAll(*client, kube::Resource::Pods(), ns, options);
  if (listed) {
    for (auto& item : listed->items) pods.push_back(std::move(item));
  }
  std::fputs(RenderDescribe(*job, pods, now).c_str(), stdout);
  return 0;
}

}  // namespace tpujob::plugin
