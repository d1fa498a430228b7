#include "supervisor/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "supervisor/progress_metrics.h"
#include "supervisor/protocol.h"
#include "supervisor/text.h"

extern char** environ;

namespace tpujob::supervisor {
namespace {

using Clock = std::chrono::steady_clock;

// This file and text.h repeat a few small helpers the operator has in src/ (Trim, Log, the
// self-pipe signal handling, JSON quoting) on purpose: tpujob-supervise is a static binary of the
// standard library, POSIX and RE2 only, copied into users' images, and must not link the
// operator's libraries (spdlog, fmt, nlohmann_json, OpenSSL come with them). Only protocol.h,
// constants alone, is shared.

std::optional<int64_t> ParseInt(std::string_view text) {
  int64_t value = 0;
  if (text.empty()) return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Signals arrive through a self-pipe: the handler records which and writes a byte, the loop
// polls the pipe (with the poll interval as timeout). src/base/signal_waiter.h does the same for
// the operator with its own thread; this binary links none of src/ (see above).
int g_pipe[2] = {-1, -1};
volatile sig_atomic_t g_terminate = 0;
volatile sig_atomic_t g_terminate_signal = 0;

void OnSignal(int signal) {
  const int saved_errno = errno;
  if (signal == SIGTERM || signal == SIGINT) {
    g_terminate = 1;
    g_terminate_signal = signal;
  }
  const char byte = 0;
  const ssize_t ignored = ::write(g_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved_errno;
}

bool InstallSignalHandlers(std::string* error) {
  if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (const int signal : {SIGTERM, SIGINT, SIGCHLD}) {
    if (::sigaction(signal, &action, nullptr) != 0) {
      *error = std::string("sigaction: ") + std::strerror(errno);
      return false;
    }
  }
  // A write to a closed stdout or stderr fails with EPIPE instead of killing the supervisor (the
  // program gets the signal's default back in StartProgram).
  ::signal(SIGPIPE, SIG_IGN);
  return true;
}

// What the program's run has to service besides signals: its output and the metrics endpoint.
struct RunServices {
  OutputPump* pump = nullptr;
  ProgressMetricsEndpoint* metrics = nullptr;
};

// Waits for a signal, output of the program (copied by the pump, if any), a metrics request or
// `timeout`, then drains the self-pipe. A metrics connection is given up at its deadline.
void WaitForEvent(std::chrono::milliseconds timeout, RunServices services = {}) {
  OutputPump* const pump = services.pump;
  ProgressMetricsEndpoint* const metrics = services.metrics;
  pollfd fds[4] = {{.fd = g_pipe[0], .events = POLLIN, .revents = 0}};
  const int streams = pump != nullptr ? pump->PollFds(fds + 1) : 0;
  const int endpoints = metrics != nullptr ? metrics->PollFds(fds + 1 + streams) : 0;
  if (metrics != nullptr) {
    if (const auto deadline = metrics->Deadline()) {
      timeout =
          std::min(timeout, std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()));
    }
  }
  const int ms = static_cast<int>(std::clamp<int64_t>(timeout.count(), 0, 1 << 30));
  const int ready = ::poll(fds, static_cast<nfds_t>(1 + streams + endpoints), ms);
  if (ready > 0 && pump != nullptr) pump->Service(fds + 1, streams);
  if (metrics != nullptr) {
    metrics->Service(fds + 1 + streams, ready > 0 ? endpoints : 0, Clock::now());
  }
  if (fds[0].revents != 0) {
    char buffer[64];
    while (::read(g_pipe[0], buffer, sizeof(buffer)) > 0) {
    }
  }
}

// Reaps every exited child (the supervisor is often PID 1: orphans are its children). Returns the
// exit code of `program` if it was among them.
std::optional<int> ReapChildren(pid_t program) {
  std::optional<int> program_exit;
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    if (pid == program && (WIFEXITED(status) || WIFSIGNALED(status))) {
      program_exit = ExitCodeFromWaitStatus(status);
    }
  }
  return program_exit;
}

std::string Describe(int exit_code) {
  if (exit_code > 128 && exit_code < 128 + 65) {
    const char* name = ::sigabbrev_np(exit_code - 128);
    return std::to_string(exit_code) + " (signal " + (name ? std::string("SIG") + name : "?") + ")";
  }
  return std::to_string(exit_code);
}

using ProgramEnv = std::vector<std::pair<std::string, std::string>>;

// Starts argv in a process group of its own with TPUJOB_GENERATION set and `overrides` over the
// environment, its stdout and stderr the pump's pipes if there is one. Returns its pid, or -1.
pid_t StartProgram(const std::vector<std::string>& argv, int64_t generation, const OutputPump* pump,
                   const ProgramEnv& overrides) {
  const int child_stdout = pump != nullptr ? pump->ChildStdout() : -1;
  const int child_stderr = pump != nullptr ? pump->ChildStderr() : -1;
  // Everything the child needs is built before fork: it only calls async-signal-safe functions.
  std::vector<std::string> env_strings;
  const std::string prefix = std::string(kGenerationEnv) + "=";
  const auto overridden = [&](std::string_view entry) {
    if (entry.starts_with(prefix)) return true;
    for (const auto& [name, value] : overrides) {
      if (entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=') {
        return true;
      }
    }
    return false;
  };
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (overridden(*e)) continue;
    env_strings.emplace_back(*e);
  }
  for (const auto& [name, value] : overrides) {
    if (name != kGenerationEnv) env_strings.push_back(name + "=" + value);
  }
  env_strings.push_back(prefix + std::to_string(generation));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& s : args) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  const std::string exec_failed = "tpujob-supervise: cannot execute " + argv[0] + ": ";

  // Signals stay blocked from before the fork until the child has reset their handlers: one
  // arriving in between would run the supervisor's handler in the child and be lost.
  sigset_t all, previous;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, &previous);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    return -1;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    if (child_stdout >= 0) ::dup2(child_stdout, STDOUT_FILENO);
    if (child_stderr >= 0) ::dup2(child_stderr, STDERR_FILENO);
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    for (int signal = 1; signal < NSIG; ++signal) ::sigaction(signal, &action, nullptr);
    sigset_t empty;
    sigemptyset(&empty);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    ::execvpe(cargv[0], cargv.data(), envp.data());
    const int error = errno;
    const char* reason = ::strerror(error);
    ssize_t ignored = ::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    ignored = ::write(STDERR_FILENO, reason, std::strlen(reason));
    ignored = ::write(STDERR_FILENO, "\n", 1);
    (void)ignored;
    ::_exit(kExecFailedExitCode);
  }
  // Also from the parent, so that the group exists before any kill(-pid) (EACCES once the child
  // has exec'd: then it already did it itself).
  ::setpgid(pid, pid);
  ::sigprocmask(SIG_SETMASK, &previous, nullptr);
  return pid;
}

// The program's process group; the program alone if it left the group (it is not reaped yet, so
// its pid is still its own).
void SignalProgram(pid_t program, int signal) {
  if (::kill(-program, signal) != 0 && errno == ESRCH) ::kill(program, signal);
}

void Report(const Options& options, const Message& message) {
  if (!WriteMessage(options.message_path, message)) {
    Log("cannot write the termination message " + options.message_path + ": " +
        std::strerror(errno));
  }
}

}  // namespace

std::optional<Options> OptionsFromEnvironment(const std::function<const char*(const char*)>& getenv,
                                              std::string* error) {
  Options options;
  const auto get = [&](const char* name, const char* fallback) {
    const char* value = getenv(name);
    return std::string(value != nullptr && *value != '\0' ? value : fallback);
  };
  options.podinfo_path = get(kPodinfoEnv, kDefaultPodinfoPath);
  options.state_dir = get(kStateEnv, kDefaultStateDir);
  options.message_path = get(kMessageEnv, kDefaultMessagePath);
  const auto number = [&](const char* name, int fallback, int64_t min) -> std::optional<int64_t> {
    const std::string text = get(name, std::to_string(fallback).c_str());
    const auto value = ParseInt(Trim(text));
    if (!value || *value < min || *value > 86400000) {
      *error = std::string(name) + " must be an integer >= " + std::to_string(min) + ", not \"" +
               text + "\"";
      return std::nullopt;
    }
    return value;
  };
  const auto grace = number(kGraceSecondsEnv, kDefaultGraceSeconds, 0);
  if (!grace) return std::nullopt;
  const auto poll = number(kPollMsEnv, kDefaultPollMs, 1);
  if (!poll) return std::nullopt;
  options.grace = std::chrono::seconds(*grace);
  options.poll = std::chrono::milliseconds(*poll);

  const std::string mode = get(kModeEnv, kModeGenerations);
  if (mode == kModeGenerations) {
    options.mode = Mode::kGenerations;
  } else if (mode == kModeOnce) {
    options.mode = Mode::kOnce;
  } else {
    *error = std::string(kModeEnv) + " must be " + kModeGenerations + " or " + kModeOnce +
             ", not \"" + mode + "\"";
    return std::nullopt;
  }
  options.once_generation = ParseGeneration(Trim(get(kGenerationEnv, "0"))).value_or(0);

  options.progress.log_pattern = get(kProgressLogPatternEnv, "");
  options.progress.checkpoint_pattern = get(kProgressCheckpointPatternEnv, "");
  options.progress.heartbeat_file = get(kProgressHeartbeatFileEnv, "");
  for (const auto& [name, pattern] :
       {std::pair{kProgressLogPatternEnv, &options.progress.log_pattern},
        std::pair{kProgressCheckpointPatternEnv, &options.progress.checkpoint_pattern}}) {
    if (pattern->empty()) continue;
    if (const auto why = PatternError(*pattern)) {
      *error = std::string(name) + ": " + *why;
      return std::nullopt;
    }
  }
  const auto stall = number(kProgressStallSecondsEnv, kDefaultStallSeconds, 1);
  if (!stall) return std::nullopt;
  const auto startup = number(kProgressStartupSecondsEnv, kDefaultStartupSeconds, 1);
  if (!startup) return std::nullopt;
  options.progress.stall = std::chrono::seconds(*stall);
  options.progress.startup = std::chrono::seconds(*startup);
  if (const std::string port = get(kProgressMetricsPortEnv, ""); !port.empty()) {
    const auto value = ParseMetricsPort(Trim(port));
    if (!value) {
      *error = std::string(kProgressMetricsPortEnv) + " must be a port from 1 to 65535, not \"" +
               port + "\"";
      return std::nullopt;
    }
    options.progress.metrics_port = *value;
  }
  return options;
}

Message ConfigErrorMessage(const std::string& error) {
  return {.state = kReportError, .generation = 0, .error = error};
}

std::string MessagePathFromEnvironment(const std::function<const char*(const char*)>& getenv) {
  const char* value = getenv(kMessageEnv);
  return value != nullptr && *value != '\0' ? value : kDefaultMessagePath;
}

std::optional<std::string> UnquoteGo(std::string_view quoted) {
  if (quoted.size() < 2 || quoted.front() != '"' || quoted.back() != '"') return std::nullopt;
  const std::string_view body = quoted.substr(1, quoted.size() - 2);
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\') {
      if (c == '"') return std::nullopt;  // an unescaped quote inside
      out += c;
      continue;
    }
    if (i + 1 >= body.size()) return std::nullopt;  // a trailing backslash escapes the quote
    const char e = body[++i];
    const auto hex = [&](size_t digits) -> std::optional<uint32_t> {
      if (i + digits >= body.size()) return std::nullopt;
      uint32_t value = 0;
      for (size_t k = 1; k <= digits; ++k) {
        const int d = HexDigit(body[i + k]);
        if (d < 0) return std::nullopt;
        value = value * 16 + static_cast<uint32_t>(d);
      }
      return value;
    };
    switch (e) {
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case '\\':
        out += '\\';
        break;
      case '"':
        out += '"';
        break;
      case '\'':
        out += '\'';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        const auto value = hex(digits);
        if (!value) {  // not a valid escape: keep it literally
          out += '\\';
          out += e;
          break;
        }
        if (e == 'x') {
          out += static_cast<char>(*value);
        } else {
          AppendUtf8(out, *value);
        }
        i += digits;
        break;
      }
      default:
        if (e >= '0' && e <= '7' && i + 2 < body.size() && body[i + 1] >= '0' &&
            body[i + 1] <= '7' && body[i + 2] >= '0' && body[i + 2] <= '7') {
          out += static_cast<char>(((e - '0') << 6) | ((body[i + 1] - '0') << 3) |
                                   (body[i + 2] - '0'));
          i += 2;
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

std::map<std::string, std::string> ParseAnnotations(std::string_view text) {
  std::map<std::string, std::string> annotations;
  while (!text.empty()) {
    const size_t newline = text.find('\n');
    const std::string_view line = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    const size_t equals = line.find('=');
    if (equals == std::string_view::npos) continue;
    const std::string_view key = Trim(line.substr(0, equals));
    if (key.empty()) continue;
    auto value = UnquoteGo(Trim(line.substr(equals + 1)));
    if (!value) continue;
    annotations[std::string(key)] = std::move(*value);
  }
  return annotations;
}

std::map<std::string, std::string> ReadAnnotations(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return {};
  std::ostringstream text;
  text << file.rdbuf();
  return ParseAnnotations(text.str());
}

std::optional<int64_t> ParseGeneration(std::string_view text) {
  if (text.empty() || text.front() < '0' || text.front() > '9') return std::nullopt;
  return ParseInt(text);
}

int64_t AnnotationGeneration(const std::map<std::string, std::string>& annotations,
                             const std::string& key) {
  const auto it = annotations.find(key);
  if (it == annotations.end()) return 0;
  return ParseGeneration(Trim(it->second)).value_or(0);
}

std::vector<std::pair<std::string, std::string>> ParseProgramEnv(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> env;
  while (!text.empty()) {
    const size_t newline = text.find('\n');
    const std::string_view line = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    const size_t equals = line.find('=');
    if (equals == std::string_view::npos || equals == 0) continue;
    env.emplace_back(std::string(line.substr(0, equals)), std::string(line.substr(equals + 1)));
  }
  return env;
}

// The operator writes JSON with nlohmann_json, which this binary does not link (see the top of
// this file); the report needs only quoted strings.
std::string JsonQuote(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", static_cast<unsigned char>(c));
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string FormatMessage(const Message& message) {
  const auto member = [](std::string_view key, const std::string& value) {
    return JsonQuote(key) + ":" + value;
  };
  std::string out = "{" + member(kReportStateKey, JsonQuote(message.state)) + "," +
                    member(kReportGenerationKey, std::to_string(message.generation));
  if (message.exit_code) out += "," + member(kReportExitKey, std::to_string(*message.exit_code));
  if (message.next) out += "," + member(kReportNextKey, std::to_string(*message.next));
  if (message.step) out += "," + member(kReportStepKey, std::to_string(*message.step));
  if (message.last_progress) {
    out += "," + member(kReportLastProgressKey, JsonQuote(*message.last_progress));
  }
  if (message.idle_seconds) {
    out += "," + member(kReportIdleSecondsKey, std::to_string(*message.idle_seconds));
  }
  if (message.checkpoint) {
    out += "," + member(kReportCheckpointKey, std::to_string(*message.checkpoint));
  }
  if (message.phase) out += "," + member(kReportPhaseKey, JsonQuote(*message.phase));
  if (message.error) {
    std::string_view error = *message.error;
    if (error.size() > kMaxReportError) {
      // Cut at a character boundary: no UTF-8 continuation byte first in what is dropped.
      size_t cut = kMaxReportError;
      while (cut > 0 && (static_cast<unsigned char>(error[cut]) & 0xC0) == 0x80) --cut;
      error = error.substr(0, cut);
    }
    out += "," + member(kReportErrorKey, JsonQuote(error));
  }
  return out + "}";
}

int64_t ReadStateGeneration(const std::string& state_dir) {
  std::ifstream file(state_dir + "/" + kStateFileName);
  if (!file) return 0;
  std::string text;
  std::getline(file, text);
  return ParseGeneration(Trim(text)).value_or(0);
}

bool WriteStateGeneration(const std::string& state_dir, int64_t generation, std::string* error) {
  const std::string path = state_dir + "/" + kStateFileName;
  const std::string tmp = path + ".tmp";
  const std::string text = std::to_string(generation) + "\n";
  ::mkdir(state_dir.c_str(), 0755);  // usually exists (an emptyDir)
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = "cannot create " + tmp + ": " + std::strerror(errno);
    return false;
  }
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int write_errno = errno;
  ::close(fd);
  if (!written) {
    *error = "cannot write " + tmp + ": " + std::strerror(write_errno);
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

bool WriteMessage(const std::string& path, const Message& message) {
  const std::string text = FormatMessage(message);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int write_errno = errno;
  ::close(fd);
  errno = write_errno;
  return written;
}

int ExitCodeFromWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

namespace {

// Stops the program: SIGTERM to its group, SIGKILL after the grace period, then whatever is left
// in its group. Returns its exit code. The pump keeps copying its output meanwhile.
int StopProgram(const Options& options, pid_t program, int64_t generation, RunServices services) {
  SignalProgram(program, SIGTERM);
  const auto deadline = Clock::now() + options.grace;
  std::optional<int> code;
  while (!(code = ReapChildren(program))) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    WaitForEvent(std::min(left, options.poll), services);
  }
  if (!code) {
    Log("generation " + std::to_string(generation) + " still running after the grace " +
        "period: sending SIGKILL");
    SignalProgram(program, SIGKILL);
  }
  // What the program left behind in its group goes too.
  ::kill(-program, SIGKILL);
  while (!code) {
    code = ReapChildren(program);
    if (!code) WaitForEvent(options.poll, services);
  }
  return *code;
}

std::string Seconds(std::chrono::milliseconds duration) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(duration).count()) + "s";
}

// How long the pipes are drained after the program exited: until they yield nothing for
// kDrainIdle (a grandchild may keep them open), kDrainLimit at most.
constexpr std::chrono::milliseconds kDrainIdle{100};
constexpr std::chrono::milliseconds kDrainLimit{2000};

// Runs the program as `generation` until it exits, stops on a stop order (when `stop_orders`),
// stalls or the supervisor is terminated. Returns the supervisor's exit code.
int RunProgram(const Options& options, const std::vector<std::string>& argv, int64_t generation,
               bool stop_orders, const ProgramEnv& env = {}) {
  std::string error;
  Report(options, {.state = kReportRunning, .generation = generation});
  std::unique_ptr<ProgressTracker> tracker;
  std::unique_ptr<OutputPump> pump;
  if (options.progress.Enabled()) {
    tracker = std::make_unique<ProgressTracker>(options.progress);
    pump = std::make_unique<OutputPump>(tracker.get());
    if (!pump->Open(&error)) {
      Log("not starting generation " + std::to_string(generation) + ": " + error);
      Report(options, {.state = kReportError, .generation = generation, .error = error});
      return 1;
    }
  }
  const pid_t program = StartProgram(argv, generation, pump.get(), env);
  if (program < 0) {
    error = std::string("fork: ") + std::strerror(errno);
    Log("not starting generation " + std::to_string(generation) + ": " + error);
    Report(options, {.state = kReportError, .generation = generation, .error = error});
    return 1;
  }
  const auto started = Clock::now();
  if (pump) pump->CloseChildEnds();
  if (tracker) tracker->Start(started);
  // After the fork: the program does not inherit the socket (it is close-on-exec as well).
  std::unique_ptr<ProgressMetricsEndpoint> metrics;
  if (tracker && options.progress.metrics_port > 0) {
    metrics = std::make_unique<ProgressMetricsEndpoint>(tracker.get());
    if (metrics->Listen(options.progress.metrics_port, &error)) {
      Log("serving the progress metrics on 0.0.0.0:" +
          std::to_string(options.progress.metrics_port) + "/metrics");
    } else {
      Log(error + "; the program runs without them");
      metrics.reset();
    }
  }
  const RunServices services{.pump = pump.get(), .metrics = metrics.get()};
  if (stop_orders) {
    Log("barrier " + std::to_string(generation) + " open: started generation " +
        std::to_string(generation) + " (pid " + std::to_string(program) + ")");
  } else {
    Log("started the program as generation " + std::to_string(generation) + " (pid " +
        std::to_string(program) + "), mode " + kModeOnce);
  }
  if (tracker) {
    const ProgressOptions& progress = options.progress;
    Log(std::string("tracking progress") +
        (progress.log_pattern.empty() ? "" : " (log pattern " + progress.log_pattern + ")") +
        (progress.heartbeat_file.empty() ? ""
                                         : " (heartbeat file " + progress.heartbeat_file + ")") +
        ": stalled after " + std::to_string(progress.startup.count()) + "s without progress at " +
        "startup, " + std::to_string(progress.stall.count()) + "s after");
  }

  // A report after the program started: with what is known of its progress.
  const auto with_progress = [&](Message message) {
    if (tracker) {
      const ProgressState state = tracker->State(Clock::now());
      message.step = state.step;
      message.last_progress = state.last_progress;
      message.checkpoint = state.checkpoint;
    }
    return message;
  };
  const auto drain = [&] {
    if (pump) pump->Drain(kDrainIdle, kDrainLimit);
  };

  // The annotations file and the heartbeat file are looked at once per poll interval, however
  // often the program's output wakes the loop.
  auto next_look = Clock::now();
  for (;;) {
    if (const auto code = ReapChildren(program)) {
      drain();
      Log("generation " + std::to_string(generation) + " exited with code " + Describe(*code));
      Report(options,
             with_progress({.state = kReportExited, .generation = generation, .exit_code = *code}));
      return *code;
    }
    if (g_terminate) {
      Log("terminated by signal " + std::to_string(g_terminate_signal) +
          ": sending SIGTERM to generation " + std::to_string(generation) + " (pid " +
          std::to_string(program) + ") and waiting for it");
      SignalProgram(program, SIGTERM);
      std::optional<int> code;
      while (!(code = ReapChildren(program))) WaitForEvent(options.poll, services);
      drain();
      Log("generation " + std::to_string(generation) + " exited with code " + Describe(*code) +
          " after SIGTERM");
      Report(options,
             with_progress(
                 {.state = kReportTerminated, .generation = generation, .exit_code = *code}));
      // Not 0 even when the program exited 0: under restartPolicy OnFailure a container that
      // the kubelet stopped without deleting the pod (a liveness probe) must run again.
      return *code != 0 ? *code : kStoppedExitCode;
    }
    auto now = Clock::now();
    if (now >= next_look) {
      next_look = now + options.poll;
      if (stop_orders) {
        const int64_t ordered =
            AnnotationGeneration(ReadAnnotations(options.podinfo_path), kGenerationAnnotation);
        if (ordered > generation) {
          Log("stop order: annotation " + std::string(kGenerationAnnotation) + " is " +
              std::to_string(ordered) + " > " + std::to_string(generation) +
              "; sending SIGTERM to generation " + std::to_string(generation) + " (pid " +
              std::to_string(program) + "), SIGKILL in " + Seconds(options.grace));
          const int code = StopProgram(options, program, generation, services);
          drain();
          Log("generation " + std::to_string(generation) + " stopped with code " + Describe(code) +
              "; exiting " + std::to_string(kStoppedExitCode) + " to restart for generation " +
              std::to_string(ordered));
          Report(options, with_progress({.state = kReportStopped,
                                         .generation = generation,
                                         .exit_code = code,
                                         .next = ordered}));
          return kStoppedExitCode;
        }
      }
      if (tracker) tracker->CheckHeartbeat(now);
    }
    if (tracker && tracker->Stalled(now)) {
      const ProgressState state = tracker->State(now);
      const auto stalled = [&](std::optional<int> code) {
        Message message =
            with_progress({.state = kReportStalled, .generation = generation, .exit_code = code});
        message.idle_seconds = state.idle_seconds;
        message.phase = state.started ? kPhaseRunning : kPhaseStartup;
        return message;
      };
      Log("stalled: " +
          (state.started ? "no progress for " + std::to_string(state.idle_seconds) +
                               "s after step " + std::to_string(state.step.value_or(0)) + " (at " +
                               state.last_progress.value_or("?") + ")"
                         : "no progress " + std::to_string(state.idle_seconds) +
                               "s after the start (startup)") +
          ", last checkpoint " +
          (state.checkpoint ? "at step " + std::to_string(*state.checkpoint) : "unknown") +
          "; sending SIGTERM to generation " + std::to_string(generation) + " (pid " +
          std::to_string(program) + "), SIGKILL in " + Seconds(options.grace) + ", exiting " +
          std::to_string(kStalledExitCode));
      // Reported before the stop too, in case the supervisor does not outlive the grace period.
      Report(options, stalled(std::nullopt));
      const int code = StopProgram(options, program, generation, services);
      drain();
      Log("generation " + std::to_string(generation) + " stopped with code " + Describe(code) +
          " after the stall");
      Report(options, stalled(code));
      return kStalledExitCode;
    }
    auto timeout = std::chrono::ceil<std::chrono::milliseconds>(next_look - now);
    if (tracker) {
      timeout = std::min(timeout,
                         std::chrono::ceil<std::chrono::milliseconds>(tracker->Deadline() - now));
    }
    WaitForEvent(std::max(timeout, std::chrono::milliseconds(0)), services);
  }
}

}  // namespace

int Supervise(const Options& options, const std::vector<std::string>& argv) {
  std::string error;
  if (argv.empty()) {
    Log("no program to run");
    return 2;
  }
  if (!InstallSignalHandlers(&error)) {
    Log(error);
    return 1;
  }
  if (!options.progress.Enabled() && !options.progress.checkpoint_pattern.empty()) {
    Log(std::string(kProgressCheckpointPatternEnv) + " is ignored without " +
        kProgressLogPatternEnv + " or " + kProgressHeartbeatFileEnv);
  }
  if (!options.progress.Enabled() && options.progress.metrics_port > 0) {
    Log(std::string(kProgressMetricsPortEnv) + " is ignored without " + kProgressLogPatternEnv +
        " or " + kProgressHeartbeatFileEnv);
  }
  if (options.mode == Mode::kOnce) {
    return RunProgram(options, argv, options.once_generation, /*stop_orders=*/false);
  }
  const int64_t last = ReadStateGeneration(options.state_dir);
  const int64_t next = last + 1;
  Report(options, {.state = kReportBarrier, .generation = last});
  Log("waiting at the barrier for generation " + std::to_string(next) + " (annotation " +
      kBarrierAnnotation + " >= " + std::to_string(next) + ")");
  int64_t generation = 0;
  std::map<std::string, std::string> annotations;
  for (;;) {
    ReapChildren(-1);
    if (g_terminate) {
      Log("terminated by signal " + std::to_string(g_terminate_signal) +
          " at the barrier; no program running");
      Report(options, {.state = kReportTerminated, .generation = last});
      return kStoppedExitCode;
    }
    annotations = ReadAnnotations(options.podinfo_path);
    const int64_t barrier = AnnotationGeneration(annotations, kBarrierAnnotation);
    if (barrier >= next) {
      generation = barrier;
      break;
    }
    WaitForEvent(options.poll);
  }

  if (!WriteStateGeneration(options.state_dir, generation, &error)) {
    // Without the record a restarted container would run this generation again.
    Log("not starting generation " + std::to_string(generation) + ": " + error);
    // The generation it was to run failed: the operator counts it as that generation's.
    Report(options, {.state = kReportError, .generation = generation, .error = error});
    return 1;
  }
  // The variables the operator gives this generation (an elastic job on another slice count).
  ProgramEnv env;
  if (auto it = annotations.find(kProgramEnvAnnotation); it != annotations.end()) {
    env = ParseProgramEnv(it->second);
    std::string names;
    for (const auto& [name, value] : env) names += " " + name + "=" + value;
    if (!env.empty()) Log("generation " + std::to_string(generation) + " runs with" + names);
  }
  return RunProgram(options, argv, generation, /*stop_orders=*/true, env);
}

}  // namespace tpujob::supervisor
