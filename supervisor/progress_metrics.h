// The worker's progress as Prometheus metrics: tpujob-supervise answers GET /metrics on the port
// kProgressMetricsPortEnv names (protocol.h) while its program runs, so that a PodMonitor can
// scrape every worker without the supervisor holding any credentials.
//
// Contract: the endpoint must never disturb what it reports on. The listening socket and the one
// connection served at a time are non-blocking and serviced from the supervisor's poll loop,
// next to the program's output pipes and the stall timer. A request is read up to kMaxRequest
// bytes; a connection is closed, answered or not, kRequestDeadline after it was accepted, so a
// client that connects and sends nothing (or reads nothing) delays nothing else. Answers:
// GET /metrics: 200, the text exposition format 0.0.4; another path: 404; another method: 405;
// an unreadable request: 400. Not thread-safe: one loop owns it.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "supervisor/progress.h"

namespace tpujob::supervisor {

// The families, a sample only when its value is known (each always has # HELP and # TYPE).
// The last (highest) step seen. Every worker of a job reports the job's step: max or min by job.
inline constexpr char kWorkerStepMetric[] = "tpujob_worker_step";
// Steps the program advanced since the supervisor started it, counted from the first step it
// reported (a restarted program resumes at its checkpoint: the counter starts again at 0, as
// rate() expects of a counter). rate() over it is the steps per second.
inline constexpr char kWorkerStepsTotalMetric[] = "tpujob_worker_steps_total";
// Unix time (seconds) of the last progress.
inline constexpr char kWorkerLastProgressMetric[] = "tpujob_worker_last_progress_timestamp_seconds";
// The step of the last checkpoint seen (kProgressCheckpointPatternEnv).
inline constexpr char kWorkerCheckpointStepMetric[] = "tpujob_worker_checkpoint_step";

// The exposition of `state` (text format 0.0.4).
std::string FormatProgressMetrics(const ProgressState& state);

// A port value as kProgressMetricsPortEnv takes it: 1-65535, decimal, the whole of `text`.
std::optional<int> ParseMetricsPort(std::string_view text);

// The first line of an HTTP request, answered: status line, headers and body.
std::string AnswerRequest(std::string_view request_line, const ProgressState& state);

class ProgressMetricsEndpoint {
 public:
  static constexpr size_t kMaxRequest = 8 * 1024;
  static constexpr std::chrono::milliseconds kRequestDeadline{2000};

  explicit ProgressMetricsEndpoint(const ProgressTracker* tracker) : tracker_(tracker) {}
  ~ProgressMetricsEndpoint();
  ProgressMetricsEndpoint(const ProgressMetricsEndpoint&) = delete;
  ProgressMetricsEndpoint& operator=(const ProgressMetricsEndpoint&) = delete;

  // Listens on 0.0.0.0:`port` (non-blocking, close-on-exec: the program does not inherit it).
  // False with *error naming the port, the call and errno on failure.
  bool Listen(int port, std::string* error);
  // The fd to poll: the connection being served, else the listening socket; 0 or 1 of them.
  int PollFds(pollfd* fds) const;
  // Accepts, reads, answers or gives up on what the polled fds (as PollFds filled them) and the
  // time allow. Call after every poll, also when it timed out (the deadline).
  void Service(const pollfd* fds, int count, SteadyClock::time_point now);
  // When the connection being served is given up; nullopt without one.
  std::optional<SteadyClock::time_point> Deadline() const;

 private:
  void Accept(SteadyClock::time_point now);
  void Read();
  void Write();
  void Respond(std::string_view request_line);
  void CloseClient();

  const ProgressTracker* tracker_;
  int listen_fd_ = -1;
  int client_fd_ = -1;
  SteadyClock::time_point client_deadline_{};
  std::string request_;
  std::string response_;
  size_t sent_ = 0;
  bool writing_ = false;
};

}  // namespace tpujob::supervisor
