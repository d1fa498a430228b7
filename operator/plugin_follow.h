// Following a job and its logs over time, for `kubectl tpujob wait` and `logs`: the parts of the
// plugin that talk to the API server for longer than one request.
//
//   1. FollowJob watches one job until a caller's predicate is met by a version of it, the job
//      is deleted, or a deadline passes; every (re)connection starts with a fresh GET, so no
//      write is missed while a watch is down.
//   2. CopyLog reads one pod's log (to its end, or with `follow` until its container stops),
//      printing each line with the pod's prefix through a LinePrinter.
//   3. FollowLogs (`logs -f`) streams every selected pod of the attempt at once and follows the
//      job into its next attempts until it finishes, printing a banner between attempts.
//
// Thread-safety: LinePrinter may be shared by any threads; the functions are called from one
// thread each (FollowLogs starts and joins its own threads). Errors the user must see are
// printed to stderr; what the caller decides on is returned.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/stream.h"
#include "plugin_commands.h"

namespace tpujob::plugin {

// How FollowJob ended.
enum class FollowEnd { kDone, kDeleted, kTimedOut, kNotFound };

// Follows one job until `done` says so for a version of it, the job is deleted, or `deadline`
// (checked between requests: a request that hangs is the caller's watchdog's to cut short).
//
// A watch on the one job (fieldSelector metadata.name=NAME) from the resourceVersion of a fresh
// GET: the answer comes the moment the operator writes the phase, and a long wait costs the API
// server one idle watch instead of a request every few seconds. Every (re)connection starts with
// that GET, so nothing written while the watch was down is missed; the server is asked to end
// each watch within 10 s (plugin_follow.cpp says why). Transport errors are retried every second
// until the deadline.
//
// kNotFound with `error` set: the server refused the GET for another reason than absence.
FollowEnd FollowJob(kube::Client& client, const std::string& ns, const std::string& name,
                    std::optional<std::chrono::steady_clock::time_point> deadline,
                    const std::function<bool(const nlohmann::json&)>& done, std::string& error);

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

// Reads one pod's log to its end (with `follow`, until the container stops), printing each line
// with the pod's prefix. With `follow`, `publish` is called (under the caller's lock) with the
// open stream and again with nullptr when it is done.
kube::Status CopyLog(const kube::Config& config, const std::string& ns, const LogSource& source,
                     bool follow, std::optional<int64_t> since_seconds, LinePrinter& printer,
                     const std::function<bool(kube::ByteStream*)>& publish = {});

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
               const std::string& name, nlohmann::json job, const LogSelection& selection,
               std::optional<int64_t> since_seconds);

}  // namespace tpujob::plugin
