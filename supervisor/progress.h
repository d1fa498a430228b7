// Progress tracking for tpujob-supervise: the program's output copied through pipes and matched
// line by line against the log and checkpoint patterns, the heartbeat file, and the stall
// decision (protocol.h, kProgressLogPatternEnv and the following). RE2 is the only library
// besides the standard library and POSIX; it links statically like the rest of the binary.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace re2 {
class RE2;
}

namespace tpujob::supervisor {

using SteadyClock = std::chrono::steady_clock;
using WallClock = std::chrono::system_clock;

struct ProgressOptions {
  std::string log_pattern;
  std::string checkpoint_pattern;
  std::string heartbeat_file;
  std::chrono::seconds stall{600};
  std::chrono::seconds startup{1800};
  // kProgressMetricsPortEnv: the port of the metrics endpoint (progress_metrics.h); 0: none.
  int metrics_port = 0;
  // Progress tracking is on with a log pattern or a heartbeat file.
  bool Enabled() const { return !log_pattern.empty() || !heartbeat_file.empty(); }
};

// Why `pattern` is not an RE2 regular expression with exactly one capture group (RE2's own
// message, or the number of groups); nullopt when it is.
std::optional<std::string> PatternError(const std::string& pattern);

// The bytes of the current line a stream keeps for matching; a longer line is matched on this
// prefix (and still copied whole).
inline constexpr size_t kLineLimit = 64 * 1024;

// A literal every match of `pattern` contains (its leading run of plain characters), or "" when
// that is not certain (an alternation, flags, escapes first...). Lines without it cannot match.
std::string RequiredLiteral(const std::string& pattern);

// The first capture group of `re`'s leftmost match in `line` (RE2::PartialMatch), nullopt when it
// does not match. With `literal`, `re`'s RequiredLiteral, only matches starting at an occurrence
// of it are tried, each anchored there: the same result, a fraction of the time.
std::optional<std::string_view> MatchGroup(const re2::RE2& re, const std::string& literal,
                                           std::string_view line);

// Cuts a stream into lines for matching: '\n' or '\r' (a progress bar's redraw) ends a line. Keeps
// at most `limit` bytes of an unfinished line, and matching sees at most the first `limit` bytes
// of a line. With `needles` (the patterns' required literals), only the lines that contain one
// of them are passed on, found with memmem over the whole chunk instead of line by line; without,
// every line is. Complete lines within one chunk are passed without copying.
class LineSplitter {
 public:
  explicit LineSplitter(size_t limit = kLineLimit, std::vector<std::string> needles = {})
      : limit_(limit), needles_(std::move(needles)) {}
  void Feed(std::string_view data, const std::function<void(std::string_view)>& on_line);
  // End of the stream: the unfinished line, if any.
  void Finish(const std::function<void(std::string_view)>& on_line);

 private:
  bool Wanted(std::string_view line) const;

  size_t limit_;
  std::vector<std::string> needles_;
  std::string line_;
  bool pending_ = false;  // an unfinished line is in line_
};

// RFC 3339 UTC in seconds: 2026-12-05T01:02:03Z.
std::string FormatRfc3339(WallClock::time_point time);

// What the report says about progress.
struct ProgressState {
  std::optional<int64_t> step;
  // The first step seen in this run: step - first_step is how far the program advanced.
  std::optional<int64_t> first_step;
  std::optional<std::string> last_progress;  // FormatRfc3339
  std::optional<WallClock::time_point> last_progress_time;
  std::optional<int64_t> checkpoint;
  int64_t idle_seconds = 0;
  bool started = false;  // progress came: phase running (else startup)
};

// Progress of one run of the program. Feed it lines and heartbeat checks with the time they were
// seen; it decides when the program has stalled. The patterns must be valid (PatternError).
class ProgressTracker {
 public:
  // Records the heartbeat file as it is before the program starts: only a change counts.
  explicit ProgressTracker(const ProgressOptions& options);
  ~ProgressTracker();
  ProgressTracker(const ProgressTracker&) = delete;
  ProgressTracker& operator=(const ProgressTracker&) = delete;

  // The program started at `now`: the startup phase begins.
  void Start(SteadyClock::time_point now);
  // One line of the program's output.
  void OnLine(std::string_view line, SteadyClock::time_point now);
  // Whether it matches lines at all (a pattern is set), and the literals a line must contain to
  // match (empty: any line may).
  bool WantsLines() const { return log_re_ != nullptr || checkpoint_re_ != nullptr; }
  std::vector<std::string> Needles() const;
  // Looks at the heartbeat file (a no-op without one).
  void CheckHeartbeat(SteadyClock::time_point now);

  // When the program counts as stalled if nothing new comes.
  SteadyClock::time_point Deadline() const;
  bool Stalled(SteadyClock::time_point now) const { return now >= Deadline(); }
  ProgressState State(SteadyClock::time_point now) const;

 private:
  // What one look at the heartbeat file saw. The content is part of it: a file rewritten in
  // place within one tick of the kernel's coarse file clock keeps its inode and modification
  // time (and, from "41" to "42", its size), and only its bytes tell the write happened.
  struct FileVersion {
    bool exists = false;
    ino_t inode = 0;
    int64_t mtime_sec = 0;
    int64_t mtime_nsec = 0;
    int64_t size = 0;
    std::string head;  // the first kHeartbeatHead bytes
    bool operator==(const FileVersion&) const = default;
  };
  static constexpr size_t kHeartbeatHead = 64;
  FileVersion StatHeartbeat() const;
  void Progress(SteadyClock::time_point now);
  void SetStep(int64_t step);

  ProgressOptions options_;
  std::unique_ptr<re2::RE2> log_re_;
  std::unique_ptr<re2::RE2> checkpoint_re_;
  std::string log_literal_;  // RequiredLiteral
  std::string checkpoint_literal_;
  SteadyClock::time_point start_{};
  std::optional<SteadyClock::time_point> last_progress_;
  WallClock::time_point last_progress_wall_{};
  std::optional<int64_t> step_;
  std::optional<int64_t> first_step_;
  std::optional<int64_t> checkpoint_;
  FileVersion heartbeat_;
  int64_t heartbeats_ = 0;
};

// The program's stdout and stderr as pipes: their write ends go to the program, the supervisor
// copies what it reads from them to its own fd 1 and fd 2 as soon as it arrives (writes to a full
// output block, nothing is dropped) and gives every line to a ProgressTracker.
class OutputPump {
 public:
  explicit OutputPump(ProgressTracker* tracker) : tracker_(tracker) {}
  ~OutputPump();
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;

  // Creates the pipes. False with *error on failure.
  bool Open(std::string* error);
  // The write ends, for the child's fd 1 and fd 2 (close-on-exec, above fd 2).
  int ChildStdout() const { return streams_[0].child_fd; }
  int ChildStderr() const { return streams_[1].child_fd; }
  // After the fork, in the supervisor: the write ends are the program's only.
  void CloseChildEnds();

  // The read ends still open, as pollfds (POLLIN) in `fds` (room for 2); returns how many.
  int PollFds(pollfd* fds) const;
  // Reads and copies what the polled fds have (`count` of them, as PollFds filled them).
  void Service(const pollfd* fds, int count);
  // After the program exited: copies what is left, until both pipes are at EOF or yield nothing
  // for `idle` (a grandchild may hold them open), at most `limit` in all. Then closes them.
  void Drain(std::chrono::milliseconds idle, std::chrono::milliseconds limit);
  bool IsOpen() const { return streams_[0].fd >= 0 || streams_[1].fd >= 0; }

 private:
  struct Stream {
    int fd = -1;        // read end, non-blocking; -1 after EOF
    int child_fd = -1;  // write end until CloseChildEnds
    int out = -1;       // the supervisor's fd 1 or 2
    LineSplitter lines;
  };
  // Reads what `stream` has now (a bounded number of reads). True if it read anything.
  bool ReadStream(Stream& stream);
  void CloseStream(Stream& stream);

  ProgressTracker* tracker_;
  Stream streams_[2];
};

}  // namespace tpujob::supervisor
