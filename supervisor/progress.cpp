#include "supervisor/progress.h"

#include <fcntl.h>
#include <poll.h>
#include <re2/re2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>

#include "supervisor/text.h"

namespace tpujob::supervisor {
namespace {

re2::RE2::Options PatternOptions() {
  re2::RE2::Options options;
  options.set_log_errors(false);  // the error is reported once, by the caller
  return options;
}

// A non-negative decimal integer, the whole of `text`.
std::optional<int64_t> ParseStep(std::string_view text) {
  int64_t value = 0;
  if (text.empty() || text.front() < '0' || text.front() > '9') return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// Writes all of `data` to `fd`, waiting while it is full (a non-blocking fd included). False on
// an error (EPIPE: nobody reads it any more).
bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written > 0) {
      data += written;
      size -= static_cast<size_t>(written);
      continue;
    }
    if (written < 0 && errno == EINTR) continue;
    if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd out{.fd = fd, .events = POLLOUT, .revents = 0};
      ::poll(&out, 1, -1);
      continue;
    }
    return false;
  }
  return true;
}

// A pipe end moved above the standard fds, so that dup2 onto fd 1 or 2 in the child never finds
// it already there (the supervisor may have been started with them closed).
int AboveStandardFds(int fd) {
  if (fd > STDERR_FILENO) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  ::close(fd);
  return moved;
}

// The capacity asked for the pipes, and the most one read takes.
constexpr int kPipeSize = 1 << 20;

}  // namespace

std::optional<std::string> PatternError(const std::string& pattern) {
  const re2::RE2 re(pattern, PatternOptions());
  if (!re.ok()) return re.error();
  if (re.NumberOfCapturingGroups() != 1) {
    return "must have exactly one capture group, the step; has " +
           std::to_string(re.NumberOfCapturingGroups());
  }
  return std::nullopt;
}

std::string RequiredLiteral(const std::string& pattern) {
  if (pattern.find('|') != std::string::npos) return "";  // the literal may be one alternative
  size_t i = pattern.starts_with('^') ? 1 : 0;            // ^ consumes nothing
  std::string literal;
  const auto plain = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view(" _:=/,;'\"<>!@#%&~`-").find(c) != std::string_view::npos;
  };
  for (; i < pattern.size() && plain(pattern[i]); ++i) literal += pattern[i];
  // A quantifier that allows none makes the last character optional.
  if (i < pattern.size() && !literal.empty() &&
      (pattern[i] == '*' || pattern[i] == '?' || pattern[i] == '{')) {
    literal.pop_back();
  }
  return literal.size() >= 3 ? literal : "";
}

std::optional<std::string_view> MatchGroup(const re2::RE2& re, const std::string& literal,
                                           std::string_view line) {
  re2::StringPiece groups[2];
  if (literal.empty()) {
    if (!re.Match(line, 0, line.size(), re2::RE2::UNANCHORED, groups, 2)) return std::nullopt;
    return std::string_view(groups[1].data(), groups[1].size());
  }
  // Every match starts with the literal: the leftmost is the first occurrence a match starts at.
  for (size_t at = line.find(literal); at != std::string_view::npos;
       at = line.find(literal, at + 1)) {
    if (re.Match(line, at, line.size(), re2::RE2::ANCHOR_START, groups, 2)) {
      return std::string_view(groups[1].data(), groups[1].size());
    }
  }
  return std::nullopt;
}

bool LineSplitter::Wanted(std::string_view line) const {
  if (needles_.empty()) return true;
  for (const auto& needle : needles_) {
    if (line.find(needle) != std::string_view::npos) return true;
  }
  return false;
}

void LineSplitter::Feed(std::string_view data,
                        const std::function<void(std::string_view)>& on_line) {
  const char* p = data.data();
  const char* const end = p + data.size();
  // The next '\n', '\r' and needle at or after a position (end: none), each found with one
  // memchr or memmem that is repeated only once the position passed it.
  const char* next_nl = nullptr;
  const char* next_cr = nullptr;
  std::vector<const char*> next_needle(needles_.size(), nullptr);
  const auto find = [&](const char*& next, const char* from, auto search) {
    if (next == nullptr || next < from) {
      const void* found = search(from);
      next = found != nullptr ? static_cast<const char*>(found) : end;
    }
    return next;
  };
  const auto terminator = [&](const char* from) {
    const auto chr = [&](char c) {
      return [&, c](const char* at) { return std::memchr(at, c, static_cast<size_t>(end - at)); };
    };
    return std::min(find(next_nl, from, chr('\n')), find(next_cr, from, chr('\r')));
  };
  const auto append = [&](const char* from, const char* to) {
    if (line_.size() < limit_) {
      line_.append(from, std::min(static_cast<size_t>(to - from), limit_ - line_.size()));
    }
  };
  const auto line_at = [&](const char* start, const char* stop) {
    return std::string_view(start, std::min(static_cast<size_t>(stop - start), limit_));
  };

  // The line left unfinished by the previous chunk.
  if (pending_) {
    const char* stop = terminator(p);
    append(p, stop);
    if (stop == end) return;
    if (Wanted(line_)) on_line(line_);
    line_.clear();
    pending_ = false;
    p = stop + 1;
  }
  if (needles_.empty()) {
    for (const char* stop; p < end && (stop = terminator(p)) != end; p = stop + 1) {
      on_line(line_at(p, stop));
    }
  } else {
    while (p < end) {
      // The first needle from p; its line starts after the last terminator before it.
      const char* hit = end;
      for (size_t k = 0; k < needles_.size(); ++k) {
        const std::string& needle = needles_[k];
        hit = std::min(hit, find(next_needle[k], p, [&](const char* at) {
                         return ::memmem(at, static_cast<size_t>(end - at), needle.data(),
                                         needle.size());
                       }));
      }
      if (hit == end) break;
      const char* start = p;
      for (const char c : {'\n', '\r'}) {
        const void* last = ::memrchr(p, c, static_cast<size_t>(hit - p));
        if (last != nullptr) start = std::max(start, static_cast<const char*>(last) + 1);
      }
      const char* stop = terminator(hit);
      if (stop == end) {  // in the unfinished last line
        p = start;
        break;
      }
      // Beyond the limit the needle is not in what is matched.
      if (static_cast<size_t>(hit - start) < limit_) on_line(line_at(start, stop));
      p = stop + 1;
    }
    // What is left has no needle: only its unfinished last line is kept.
    for (const char c : {'\n', '\r'}) {
      const void* last = ::memrchr(p, c, static_cast<size_t>(end - p));
      if (last != nullptr) p = std::max(p, static_cast<const char*>(last) + 1);
    }
  }
  if (p < end) {
    append(p, end);
    pending_ = true;
  }
}

void LineSplitter::Finish(const std::function<void(std::string_view)>& on_line) {
  if (pending_ && Wanted(line_)) on_line(line_);
  line_.clear();
  pending_ = false;
}

std::string FormatRfc3339(WallClock::time_point time) {
  const std::time_t seconds = WallClock::to_time_t(time);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char buffer[32];
  const size_t n = std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return std::string(buffer, n);
}

ProgressTracker::ProgressTracker(const ProgressOptions& options) : options_(options) {
  if (!options_.log_pattern.empty()) {
    log_re_ = std::make_unique<re2::RE2>(options_.log_pattern, PatternOptions());
    log_literal_ = RequiredLiteral(options_.log_pattern);
  }
  if (!options_.checkpoint_pattern.empty()) {
    checkpoint_re_ = std::make_unique<re2::RE2>(options_.checkpoint_pattern, PatternOptions());
    checkpoint_literal_ = RequiredLiteral(options_.checkpoint_pattern);
  }
  heartbeat_ = StatHeartbeat();
}

ProgressTracker::~ProgressTracker() = default;

void ProgressTracker::Start(SteadyClock::time_point now) { start_ = now; }

void ProgressTracker::Progress(SteadyClock::time_point now) {
  last_progress_ = now;
  last_progress_wall_ = WallClock::now();
}

void ProgressTracker::SetStep(int64_t step) {
  if (!first_step_) first_step_ = step;
  step_ = step;
}

void ProgressTracker::OnLine(std::string_view line, SteadyClock::time_point now) {
  if (log_re_ != nullptr) {
    if (const auto group = MatchGroup(*log_re_, log_literal_, line)) {
      const auto step = ParseStep(*group);
      if (step && (!step_ || *step > *step_)) {
        SetStep(*step);
        Progress(now);
      }
    }
  }
  if (checkpoint_re_ != nullptr) {
    if (const auto group = MatchGroup(*checkpoint_re_, checkpoint_literal_, line)) {
      if (const auto step = ParseStep(*group)) checkpoint_ = step;
    }
  }
}

ProgressTracker::FileVersion ProgressTracker::StatHeartbeat() const {
  FileVersion version;
  struct stat st {};
  if (options_.heartbeat_file.empty() || ::stat(options_.heartbeat_file.c_str(), &st) != 0) {
    return version;
  }
  version.exists = true;
  version.inode = st.st_ino;
  version.mtime_sec = st.st_mtim.tv_sec;
  version.mtime_nsec = st.st_mtim.tv_nsec;
  version.size = st.st_size;
  const int fd = ::open(options_.heartbeat_file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd >= 0) {
    char buffer[kHeartbeatHead];
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    ::close(fd);
    if (n > 0) version.head.assign(buffer, static_cast<size_t>(n));
  }
  return version;
}

void ProgressTracker::CheckHeartbeat(SteadyClock::time_point now) {
  if (options_.heartbeat_file.empty()) return;
  // Read every look, not only when the metadata changed: "echo 43 > file" within the tick of
  // the kernel's file clock in which the last look saw "42" leaves inode, time and size as they
  // were. A look between its truncation and its write sees an empty file; the size tells.
  FileVersion version = StatHeartbeat();
  if (version == heartbeat_) return;
  heartbeat_ = std::move(version);
  if (!heartbeat_.exists) return;  // removed: not progress
  ++heartbeats_;
  std::optional<int64_t> step;
  if (!heartbeat_.head.empty() && heartbeat_.head.size() < kHeartbeatHead) {
    step = ParseStep(Trim(heartbeat_.head));
  }
  const int64_t seen = step.value_or(heartbeats_);
  if (!step_ || seen > *step_) SetStep(seen);
  Progress(now);
}

std::vector<std::string> ProgressTracker::Needles() const {
  std::vector<std::string> needles;
  for (const std::string* pattern : {&options_.log_pattern, &options_.checkpoint_pattern}) {
    if (pattern->empty()) continue;
    std::string literal = RequiredLiteral(*pattern);
    if (literal.empty()) return {};  // any line may match this one
    needles.push_back(std::move(literal));
  }
  return needles;
}

SteadyClock::time_point ProgressTracker::Deadline() const {
  return last_progress_ ? *last_progress_ + options_.stall : start_ + options_.startup;
}

ProgressState ProgressTracker::State(SteadyClock::time_point now) const {
  ProgressState state;
  state.step = step_;
  state.first_step = first_step_;
  state.checkpoint = checkpoint_;
  state.started = last_progress_.has_value();
  if (last_progress_) {
    state.last_progress = FormatRfc3339(last_progress_wall_);
    state.last_progress_time = last_progress_wall_;
  }
  const auto since = last_progress_.value_or(start_);
  state.idle_seconds =
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(now - since).count());
  return state;
}

OutputPump::~OutputPump() {
  for (Stream& stream : streams_) {
    if (stream.fd >= 0) ::close(stream.fd);
    if (stream.child_fd >= 0) ::close(stream.child_fd);
  }
}

bool OutputPump::Open(std::string* error) {
  for (int i = 0; i < 2; ++i) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      *error = std::string("pipe: ") + std::strerror(errno);
      return false;
    }
    streams_[i].fd = AboveStandardFds(fds[0]);
    streams_[i].child_fd = AboveStandardFds(fds[1]);
    streams_[i].out = i == 0 ? STDOUT_FILENO : STDERR_FILENO;
    streams_[i].lines = LineSplitter(kLineLimit, tracker_->Needles());
    if (streams_[i].fd < 0 || streams_[i].child_fd < 0) {
      *error = std::string("fcntl: ") + std::strerror(errno);
      return false;
    }
    // Only the supervisor's end is non-blocking: the program writes as it would to a terminal
    // or a file.
    const int flags = ::fcntl(streams_[i].fd, F_GETFL);
    ::fcntl(streams_[i].fd, F_SETFL, flags | O_NONBLOCK);
    // Room for the program to write ahead while the supervisor copies, and fewer, larger reads
    // (the default is 64 KiB; a failure, over the user's pipe quota, keeps it).
    ::fcntl(streams_[i].fd, F_SETPIPE_SZ, kPipeSize);
  }
  return true;
}

void OutputPump::CloseChildEnds() {
  for (Stream& stream : streams_) {
    if (stream.child_fd >= 0) ::close(stream.child_fd);
    stream.child_fd = -1;
  }
}

int OutputPump::PollFds(pollfd* fds) const {
  int count = 0;
  for (const Stream& stream : streams_) {
    if (stream.fd >= 0) fds[count++] = pollfd{.fd = stream.fd, .events = POLLIN, .revents = 0};
  }
  return count;
}

void OutputPump::Service(const pollfd* fds, int count) {
  for (int i = 0; i < count; ++i) {
    if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) == 0) continue;
    for (Stream& stream : streams_) {
      if (stream.fd == fds[i].fd) ReadStream(stream);
    }
  }
}

bool OutputPump::ReadStream(Stream& stream) {
  static char buffer[kPipeSize];
  bool read_any = false;
  // A bounded number of reads, so that the other stream and the signals get their turn.
  for (int reads = 0; reads < 8 && stream.fd >= 0; ++reads) {
    const ssize_t n = ::read(stream.fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      Log(std::string("cannot read the program's ") +
          (stream.out == STDOUT_FILENO ? "stdout" : "stderr") + ": " + std::strerror(errno));
      CloseStream(stream);
      break;
    }
    if (n == 0) {
      CloseStream(stream);
      break;
    }
    read_any = true;
    if (!WriteAll(stream.out, buffer, static_cast<size_t>(n))) {
      // Like the program's own write would: its next write to this stream fails (EPIPE).
      const int error = errno;
      if (stream.out != STDERR_FILENO) {
        Log(std::string("cannot write the program's stdout: ") + std::strerror(error) +
            "; closing it");
      }
      CloseStream(stream);
      break;
    }
    if (tracker_->WantsLines()) {  // not with a heartbeat file alone
      const auto now = SteadyClock::now();
      stream.lines.Feed(std::string_view(buffer, static_cast<size_t>(n)),
                        [&](std::string_view line) { tracker_->OnLine(line, now); });
    }
    if (static_cast<size_t>(n) < sizeof(buffer)) break;  // most likely empty now
  }
  return read_any;
}

void OutputPump::CloseStream(Stream& stream) {
  const auto now = SteadyClock::now();
  stream.lines.Finish([&](std::string_view line) { tracker_->OnLine(line, now); });
  if (stream.fd >= 0) ::close(stream.fd);
  stream.fd = -1;
}

void OutputPump::Drain(std::chrono::milliseconds idle, std::chrono::milliseconds limit) {
  const auto deadline = SteadyClock::now() + limit;
  while (IsOpen()) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
    if (left <= 0) break;
    pollfd fds[2];
    const int count = PollFds(fds);
    const int ready = ::poll(fds, static_cast<nfds_t>(count),
                             static_cast<int>(std::min<int64_t>(idle.count(), left)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;  // nothing for `idle`: what is left belongs to a grandchild
    Service(fds, count);
  }
  for (Stream& stream : streams_) CloseStream(stream);
}

}  // namespace tpujob::supervisor
