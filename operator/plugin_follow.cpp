#include "plugin_follow.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

namespace tpujob::plugin {
namespace {

using nlohmann::json;

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

bool Finished(const json& job) {
  const std::string phase = PhaseOf(job);
  return phase == "Succeeded" || phase == "Failed";
}

}  // namespace

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
    options.resource_version = TextAt(*job, "/metadata/resourceVersion");
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

kube::Status CopyLog(const kube::Config& config, const std::string& ns, const LogSource& source,
                     bool follow, std::optional<int64_t> since_seconds, LinePrinter& printer,
                     const std::function<bool(kube::ByteStream*)>& publish) {
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
  pod_options.label_selector = JobPodSelector(name);
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
      for (const json& pod : pods->items) listed.insert(TextAt(pod, "/metadata/uid"));
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

}  // namespace tpujob::plugin
