// tpujob-supervise's progress tracking: the output passthrough, the patterns, the heartbeat file,
// stall detection, mode "once" and the reports, with the real binary running real programs.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <re2/re2.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/progress.h"
#include "supervisor/progress_metrics.h"
#include "supervisor/protocol.h"
#include "supervisor/supervisor.h"

namespace tpujob::supervisor {
namespace TPUJOB_TEST_NS {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

std::string ReadFile(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
}

template <typename Condition>
bool WaitFor(Condition condition, milliseconds timeout = seconds(20)) {
  const auto deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// Where two byte strings first differ, for a failure message that does not print megabytes.
std::string Difference(const std::string& actual, const std::string& expected) {
  size_t i = 0;
  while (i < actual.size() && i < expected.size() && actual[i] == expected[i]) ++i;
  if (i == actual.size() && i == expected.size()) return "identical";
  return "sizes " + std::to_string(actual.size()) + " and " + std::to_string(expected.size()) +
         ", first difference at byte " + std::to_string(i);
}

// --- Pure functions ---

std::vector<std::string> Split(const std::vector<std::string>& chunks, size_t limit = 64) {
  LineSplitter splitter(limit);
  std::vector<std::string> lines;
  const auto on_line = [&](std::string_view line) { lines.emplace_back(line); };
  for (const auto& chunk : chunks) splitter.Feed(chunk, on_line);
  splitter.Finish(on_line);
  return lines;
}

TEST(SupervisorProgressTest, SplitsLinesAcrossChunksOnNewlineAndCarriageReturn) {
  using Lines = std::vector<std::string>;
  EXPECT_EQ(Split({"a\nb\n"}), (Lines{"a", "b"}));
  EXPECT_EQ(Split({"par", "tial\nnext"}), (Lines{"partial", "next"}));
  EXPECT_EQ(Split({"step 1\rstep 2\r", "step 3\r\n"}), (Lines{"step 1", "step 2", "step 3", ""}));
  EXPECT_EQ(Split({"", "\n", ""}), (Lines{""}));
  EXPECT_EQ(Split({}), Lines{});
  // A line longer than the limit is matched on its first `limit` bytes, whole or in pieces.
  const std::string long_line(100, 'x');
  EXPECT_EQ(Split({long_line + "\nshort\n"}), (Lines{std::string(64, 'x'), "short"}));
  EXPECT_EQ(Split({long_line.substr(0, 30), long_line.substr(30), "\nshort"}),
            (Lines{std::string(64, 'x'), "short"}));
  EXPECT_EQ(Split({std::string("bin\0ary\n", 8)}), (Lines{std::string("bin\0ary", 7)}));
}

TEST(SupervisorProgressTest, RequiredLiteralsAreCertainOrEmpty) {
  EXPECT_EQ(RequiredLiteral(R"(completed step: (\d+))"), "completed step: ");
  EXPECT_EQ(RequiredLiteral(R"(^step=(\d+))"), "step=");
  EXPECT_EQ(RequiredLiteral(R"(steps?: (\d+))"), "step");
  EXPECT_EQ(RequiredLiteral(R"(stepx{0,1} (\d+))"), "step");
  EXPECT_EQ(RequiredLiteral(R"(step+ (\d+))"), "step");
  EXPECT_EQ(RequiredLiteral(R"(step (\d+)|iter (\d+))"), "");
  EXPECT_EQ(RequiredLiteral(R"((?i)step (\d+))"), "");
  EXPECT_EQ(RequiredLiteral(R"(\bstep (\d+))"), "");
  EXPECT_EQ(RequiredLiteral(R"(st.p (\d+))"), "");  // too short to be worth it
  EXPECT_EQ(RequiredLiteral(R"((\d+) steps done)"), "");
}

// The lines a splitter with needles passes on are the lines without needles passes on that
// contain a needle, for any way of cutting the stream into chunks.
TEST(SupervisorProgressTest, SplittingWithNeedlesKeepsEveryLineThatContainsOne) {
  std::mt19937 rng(7);
  const std::vector<std::string> needles = {"step: ", "ckpt "};
  const std::vector<std::string> pieces = {
      "step: 1", "ckpt 2", "x", "\n", "\r", "st", "ep: ", "noise ", std::string(80, 'y'), "\r\n"};
  const auto contains_needle = [&](const std::string& line) {
    for (const auto& needle : needles) {
      if (line.find(needle) != std::string::npos) return true;
    }
    return false;
  };
  for (int round = 0; round < 300; ++round) {
    std::string stream;
    for (int k = 0; k < 60; ++k) stream += pieces[rng() % pieces.size()];
    std::vector<std::string> chunks;
    for (size_t at = 0; at < stream.size();) {
      const size_t size = 1 + rng() % 40;
      chunks.push_back(stream.substr(at, size));
      at += size;
    }
    LineSplitter plain(64), filtered(64, needles);
    std::vector<std::string> expected, actual;
    for (const auto& chunk : chunks) {
      plain.Feed(chunk, [&](std::string_view line) {
        if (contains_needle(std::string(line))) expected.emplace_back(line);
      });
      filtered.Feed(chunk, [&](std::string_view line) {
        if (contains_needle(std::string(line))) actual.emplace_back(line);
      });
    }
    plain.Finish([&](std::string_view line) {
      if (contains_needle(std::string(line))) expected.emplace_back(line);
    });
    filtered.Finish([&](std::string_view line) {
      if (contains_needle(std::string(line))) actual.emplace_back(line);
    });
    ASSERT_EQ(actual, expected) << "round " << round;
  }
}

// Matching only where the required literal occurs finds what RE2::PartialMatch finds.
TEST(SupervisorProgressTest, MatchingAtTheLiteralIsPartialMatch) {
  std::mt19937 rng(11);
  const std::vector<std::string> pieces = {"step ",  "step: ", "12", "7",          " ",       "x",
                                           "steps ", "^",      "a",  "completed ", "step 3x", "st"};
  for (const std::string pattern :
       {R"(step (\d+))", R"(^step (\d+))", R"(step:? (\d+)x?)", R"(steps? (\d*))",
        R"(completed step (\d+)|(\d+)x)", R"(step (\d+)$)", R"(step (\d+)\b)"}) {
    const re2::RE2 re(pattern, re2::RE2::Quiet);
    ASSERT_TRUE(re.ok()) << pattern;
    const std::string literal = RequiredLiteral(pattern);
    for (int round = 0; round < 2000; ++round) {
      std::string line;
      for (int k = 0, n = static_cast<int>(rng() % 8); k < n; ++k) {
        line += pieces[rng() % pieces.size()];
      }
      re2::StringPiece group;
      const bool matched = re2::RE2::PartialMatch(line, re, &group);
      const auto actual = MatchGroup(re, literal, line);
      ASSERT_EQ(actual.has_value(), matched) << pattern << " on \"" << line << "\"";
      if (matched) {
        EXPECT_EQ(actual->data(), group.data()) << pattern << " on \"" << line << "\"";
        EXPECT_EQ(actual->size(), group.size()) << pattern << " on \"" << line << "\"";
      }
    }
  }
}

TEST(SupervisorProgressTest, PatternsNeedExactlyOneCaptureGroup) {
  EXPECT_EQ(PatternError(R"(completed step: (\d+))"), std::nullopt);
  EXPECT_EQ(PatternError(R"(step (?P<step>\d+))"), std::nullopt);
  EXPECT_EQ(PatternError(R"(step \d+)").value_or(""),
            "must have exactly one capture group, the step; has 0");
  EXPECT_EQ(PatternError(R"((\d+)/(\d+))").value_or(""),
            "must have exactly one capture group, the step; has 2");
  const re2::RE2 bad(R"(step (\d+)", re2::RE2::Quiet);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(PatternError(R"(step (\d+)").value_or(""), bad.error());
}

TEST(SupervisorProgressTest, FormatsProgressInTheReport) {
  EXPECT_EQ(FormatRfc3339(WallClock::time_point(seconds(1796432523))), "2026-12-05T01:02:03Z");
  Message message{.state = kReportStalled, .generation = 3, .exit_code = 143};
  message.step = 120;
  message.last_progress = "2026-12-05T01:02:03Z";
  message.idle_seconds = 601;
  message.checkpoint = 100;
  message.phase = kPhaseRunning;
  EXPECT_EQ(FormatMessage(message),
            R"({"state":"stalled","generation":3,"exit":143,"step":120,)"
            R"("lastProgress":"2026-12-05T01:02:03Z","idleSeconds":601,"checkpoint":100,)"
            R"("phase":"running"})");
  // A long error is cut: the report stays well under the 4096 bytes of a termination message.
  const std::string report = FormatMessage(ConfigErrorMessage(std::string(10000, 'e')));
  EXPECT_LT(report.size(), 600u);
  EXPECT_EQ(report.rfind(R"({"state":"error","generation":0,"error":"eee)", 0), 0u) << report;
}

TEST(SupervisorProgressTest, TrackerStepsCheckpointsAndDeadlines) {
  ProgressOptions options;
  options.log_pattern = R"(completed step: (\d+))";
  options.checkpoint_pattern = R"(saved checkpoint (\d+))";
  options.stall = seconds(10);
  options.startup = seconds(100);
  ProgressTracker tracker(options);
  const auto t0 = Clock::now();
  tracker.Start(t0);
  EXPECT_EQ(tracker.Deadline(), t0 + seconds(100));
  EXPECT_FALSE(tracker.Stalled(t0 + seconds(99)));
  EXPECT_TRUE(tracker.Stalled(t0 + seconds(100)));
  auto state = tracker.State(t0 + seconds(7));
  EXPECT_FALSE(state.started);
  EXPECT_EQ(state.idle_seconds, 7);
  EXPECT_EQ(state.step, std::nullopt);
  EXPECT_EQ(state.last_progress, std::nullopt);

  tracker.OnLine("I1205 completed step: 5 loss=1.0", t0 + seconds(20));
  EXPECT_EQ(tracker.Deadline(), t0 + seconds(30));
  tracker.OnLine("completed step: 4", t0 + seconds(25));  // not greater: not progress
  tracker.OnLine("completed step: 99999999999999999999999", t0 + seconds(25));  // not a step
  tracker.OnLine("saved checkpoint 5", t0 + seconds(26));  // not progress either
  EXPECT_EQ(tracker.Deadline(), t0 + seconds(30));
  state = tracker.State(t0 + seconds(28));
  EXPECT_TRUE(state.started);
  EXPECT_EQ(state.step, 5);
  EXPECT_EQ(state.checkpoint, 5);
  EXPECT_EQ(state.idle_seconds, 8);
  ASSERT_TRUE(state.last_progress);
  EXPECT_TRUE(
      std::regex_match(*state.last_progress, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
      << *state.last_progress;
  tracker.OnLine("completed step: 6", t0 + seconds(29));
  EXPECT_EQ(tracker.Deadline(), t0 + seconds(39));
  EXPECT_EQ(tracker.State(t0 + seconds(29)).step, 6);
}

// The kernel stamps files with a coarse clock: two writes within one tick leave the same
// modification time, and "echo 42 > file" is a truncation then a write, which a look can fall
// between. Each rewrite below keeps the inode and the time, as such a tick would.
TEST(SupervisorProgressTest, AHeartbeatRewrittenWithinOneFileClockTickIsSeen) {
  char pattern[] = "/tmp/tpujob-heartbeat-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const fs::path dir = pattern;
  const fs::path file = dir / "heartbeat";
  const auto rewrite = [&](const std::string& text) {
    WriteFile(file, text);  // truncates and writes in place: same inode
    const struct timespec times[2] = {{1000, 5}, {1000, 5}};
    ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
  };
  rewrite("41\n");
  ProgressOptions options;
  options.heartbeat_file = file.string();
  options.stall = seconds(10);
  options.startup = seconds(100);
  ProgressTracker tracker(options);
  const auto t0 = Clock::now();
  tracker.Start(t0);
  tracker.CheckHeartbeat(t0 + seconds(1));
  EXPECT_FALSE(tracker.State(t0 + seconds(1)).started);  // there before the start

  rewrite("");  // seen between the truncation and the write
  tracker.CheckHeartbeat(t0 + seconds(2));
  rewrite(" 42 ");
  tracker.CheckHeartbeat(t0 + seconds(3));
  EXPECT_EQ(tracker.State(t0 + seconds(3)).step, 42);
  EXPECT_EQ(tracker.Deadline(), t0 + seconds(13));

  rewrite(" 43 ");  // the same size as before, too
  tracker.CheckHeartbeat(t0 + seconds(4));
  EXPECT_EQ(tracker.State(t0 + seconds(4)).step, 43);
  EXPECT_EQ(tracker.Deadline(), t0 + seconds(14));

  tracker.CheckHeartbeat(t0 + seconds(5));  // nothing new: not progress
  EXPECT_EQ(tracker.Deadline(), t0 + seconds(14));
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(SupervisorProgressTest, ReadsProgressOptionsFromTheEnvironment) {
  std::map<std::string, std::string> env;
  const auto getenv = [&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  std::string error;
  auto options = OptionsFromEnvironment(getenv, &error);
  ASSERT_TRUE(options) << error;
  EXPECT_FALSE(options->progress.Enabled());
  EXPECT_EQ(options->mode, Mode::kGenerations);
  EXPECT_EQ(options->progress.stall, seconds(kDefaultStallSeconds));
  EXPECT_EQ(options->progress.startup, seconds(kDefaultStartupSeconds));

  env = {{kProgressLogPatternEnv, R"(step (\d+))"},
         {kProgressStallSecondsEnv, "5"},
         {kProgressStartupSecondsEnv, "60"},
         {kModeEnv, kModeOnce},
         {kGenerationEnv, "4"}};
  options = OptionsFromEnvironment(getenv, &error);
  ASSERT_TRUE(options) << error;
  EXPECT_TRUE(options->progress.Enabled());
  EXPECT_EQ(options->mode, Mode::kOnce);
  EXPECT_EQ(options->once_generation, 4);
  EXPECT_EQ(options->progress.stall, seconds(5));
  EXPECT_EQ(options->progress.startup, seconds(60));

  env = {{kProgressHeartbeatFileEnv, "/tmp/heartbeat"}};
  options = OptionsFromEnvironment(getenv, &error);
  ASSERT_TRUE(options) << error;
  EXPECT_TRUE(options->progress.Enabled());

  for (const auto& [name, value] : std::vector<std::pair<const char*, const char*>>{
           {kProgressStallSecondsEnv, "0"},
           {kProgressStartupSecondsEnv, "-5"},
           {kProgressStallSecondsEnv, "ten"},
           {kModeEnv, "twice"},
           {kProgressLogPatternEnv, "step"},
           {kProgressCheckpointPatternEnv, "(a)(b)"}}) {
    env = {{name, value}};
    EXPECT_FALSE(OptionsFromEnvironment(getenv, &error)) << name << "=" << value;
    EXPECT_EQ(error.rfind(name, 0), 0u) << error;
  }
}

// --- The binary, run as the entrypoint would be ---

class ProgressProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/supervisor-progress-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    env_ = {{kMessageEnv, message().string()},
            {kGraceSecondsEnv, "5"},
            {kPollMsEnv, "10"},
            {kModeEnv, kModeOnce},
            {"DIR", dir_.string()},
            {"PATH", "/usr/bin:/bin"}};
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  fs::path message() const { return dir_ / "message"; }
  std::string Message() const { return ReadFile(message()); }
  std::string Out() const { return ReadFile(dir_ / "stdout"); }
  std::string Err() const { return ReadFile(dir_ / "stderr"); }

  // Starts the supervisor running `sh -c script` with exactly env_ as its environment, its stdout
  // `stdout_fd` (default: the file dir_/stdout) and its stderr the file dir_/stderr.
  void Start(const std::string& script, int stdout_fd = -1) {
    std::vector<std::string> args = {TPUJOB_SUPERVISE_BINARY, "--", "/bin/sh", "-c", script};
    std::vector<std::string> env;
    for (const auto& [key, value] : env_) env.push_back(key + "=" + value);
    const std::string out = (dir_ / "stdout").string();
    const std::string err = (dir_ / "stderr").string();
    std::vector<char*> argv, envp;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      const int out_fd =
          stdout_fd >= 0 ? stdout_fd : ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out_fd, STDOUT_FILENO);
      ::dup2(err_fd, STDERR_FILENO);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(126);
    }
    started_ = Clock::now();
  }

  // The supervisor's exit code, or -1 if it did not exit within `timeout`.
  int WaitExit(milliseconds timeout = seconds(20)) {
    int status = 0;
    int code = -1;
    WaitFor(
        [&] {
          if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
          code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          pid_ = -1;
          return true;
        },
        timeout);
    exited_ = Clock::now();
    return code;
  }

  void SetAnnotations(const std::map<std::string, std::string>& values) {
    std::string text;
    for (const auto& [key, value] : values) text += key + "=\"" + value + "\"\n";
    WriteFile(dir_ / "annotations.tmp", text);
    fs::rename(dir_ / "annotations.tmp", dir_ / "annotations");
  }

  fs::path dir_;
  std::map<std::string, std::string> env_;
  pid_t pid_ = -1;
  Clock::time_point started_;
  Clock::time_point exited_;
};

// What the supervisor wrote to its stderr around the program's: only its own log lines.
void ExpectOnlySupervisorLines(std::string_view text) {
  while (!text.empty()) {
    ASSERT_EQ(text.rfind("tpujob-supervise: ", 0), 0u) << text.substr(0, 200);
    const size_t newline = text.find('\n');
    ASSERT_NE(newline, std::string_view::npos) << text.substr(0, 200);
    text.remove_prefix(newline + 1);
  }
}

TEST_F(ProgressProcessTest, FiftyMegabytesOfMixedOutputPassThroughByteForByte) {
  // Chunks of the program's output, each written by one `cat` to stdout or stderr, in a random
  // order of the streams: lines with steps ending in a partial line, binary bytes, 1 MB lines,
  // carriage returns, text blocks.
  std::mt19937 rng(20261205);
  std::string text_template;
  for (int i = 0; i < 4096; ++i) {
    const unsigned r = rng() % 40;
    text_template += r == 0 ? '\n' : static_cast<char>(' ' + rng() % 95);
  }
  std::string expected_out, expected_err, script = "set -e\n";
  int64_t step = 0;
  size_t total = 0;
  bool big_line[2] = {false, false};
  for (int i = 0; total < (50u << 20); ++i) {
    std::string chunk;
    int kind = i % 5;
    const bool to_err = (rng() & 1) != 0;
    if (!big_line[to_err] && i > 10) kind = 2;  // each stream gets a 1 MB line
    switch (kind) {
      case 0:
        for (int k = 0; k < 2000; ++k) {
          chunk += "I1205 01:02:03.456 train.py:42] completed step: " + std::to_string(++step) +
                   " loss=" + std::to_string(rng() % 1000) + "\n";
        }
        chunk += "a partial line, continued by the stream's next chunk: ";
        break;
      case 1:
        chunk.resize(1 + rng() % (256 * 1024));
        for (char& c : chunk) c = static_cast<char>(rng());
        break;
      case 2:
        chunk = std::string((1 << 20) + rng() % 4096, 'L') + "\n";
        big_line[to_err] = true;
        break;
      case 3:
        chunk = std::string("\r\n\0\x01\xff progress 10%\rprogress 20%\r", 31);
        break;
      default:
        for (size_t size = 1 + rng() % (3 << 20); chunk.size() < size;) {
          chunk += text_template.substr(rng() % 2048, rng() % 2048);
        }
    }
    const std::string name = "chunk" + std::to_string(i);
    WriteFile(dir_ / name, chunk);
    script += "cat \"$DIR/" + name + "\"" + (to_err ? " >&2" : "") + "\n";
    (to_err ? expected_err : expected_out) += chunk;
    total += chunk.size();
  }
  ASSERT_TRUE(big_line[0] && big_line[1]);

  // stdout is a pipe, non-blocking on the supervisor's side, that is not read at first: its
  // writes find it full (EAGAIN) and must wait, not drop anything.
  int out_pipe[2];
  ASSERT_EQ(::pipe2(out_pipe, O_CLOEXEC), 0);
  ASSERT_EQ(::fcntl(out_pipe[1], F_SETFL, ::fcntl(out_pipe[1], F_GETFL) | O_NONBLOCK), 0);
  env_[kProgressLogPatternEnv] = R"(completed step: (\d+))";
  Start(script, out_pipe[1]);
  ::close(out_pipe[1]);
  std::string out;
  std::thread reader([&] {
    std::this_thread::sleep_for(milliseconds(300));
    char buffer[1 << 16];
    for (;;) {
      const ssize_t n = ::read(out_pipe[0], buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      out.append(buffer, static_cast<size_t>(n));
    }
  });
  const int code = WaitExit(seconds(60));
  reader.join();
  ::close(out_pipe[0]);
  ASSERT_EQ(code, 0) << Err().substr(0, 2000);

  EXPECT_TRUE(out == expected_out) << Difference(out, expected_out);
  const std::string err = Err();
  const size_t at = err.find(expected_err);
  ASSERT_NE(at, std::string::npos) << Difference(err, expected_err);
  ExpectOnlySupervisorLines(std::string_view(err).substr(0, at));
  ExpectOnlySupervisorLines(std::string_view(err).substr(at + expected_err.size()));
  // The lines were matched on the side: the last step is in the report.
  EXPECT_EQ(Message().rfind(R"({"state":"exited","generation":0,"exit":0,"step":)" +
                                std::to_string(step) + R"(,"lastProgress":")",
                            0),
            0u)
      << Message();
}

TEST_F(ProgressProcessTest, PartialLinesArePassedOnAsSoonAsTheyAreWritten) {
  env_[kProgressLogPatternEnv] = R"(step (\d+))";
  Start(
      "printf 'no newline yet'; printf 'on stderr' >&2; "
      "while [ ! -e \"$DIR/go\" ]; do sleep 0.01; done; echo ' done'");
  ASSERT_TRUE(WaitFor([&] { return Out() == "no newline yet"; })) << Out();
  ASSERT_TRUE(WaitFor([&] { return Err().find("on stderr") != std::string::npos; })) << Err();
  WriteFile(dir_ / "go", "");
  EXPECT_EQ(WaitExit(), 0) << Err();
  EXPECT_EQ(Out(), "no newline yet done\n");
}

TEST_F(ProgressProcessTest, OneStreamEndsWhileTheOtherGoesOn) {
  env_[kProgressLogPatternEnv] = R"(completed step: (\d+))";
  Start(
      "if [ -p /dev/stdout ]; then echo pipe; fi; exec 1>&-; sleep 0.1; echo err1 >&2; "
      "sleep 0.1; echo 'completed step: 3' >&2; exit 0");
  EXPECT_EQ(WaitExit(), 0) << Err();
  EXPECT_EQ(Out(), "pipe\n");
  EXPECT_NE(Err().find("err1\ncompleted step: 3\n"), std::string::npos) << Err();
  EXPECT_EQ(Message().rfind(R"({"state":"exited","generation":0,"exit":0,"step":3,)", 0), 0u)
      << Message();
}

TEST_F(ProgressProcessTest, SilenceAfterTheLastStepIsAStallThatStopsTheProgram) {
  env_[kProgressLogPatternEnv] = R"(completed step: (\d+))";
  env_[kProgressCheckpointPatternEnv] = R"(saved checkpoint at step (\d+))";
  env_[kProgressStallSecondsEnv] = "1";
  Start(
      "trap 'echo term > \"$DIR/term\"; exit 0' TERM; "
      "for i in 1 2 3; do echo \"completed step: $i\"; done; "
      "echo 'saved checkpoint at step 2' >&2; echo 'completed step: 2'; "
      "while true; do sleep 0.05; done");
  EXPECT_EQ(WaitExit(), kStalledExitCode) << Err();
  EXPECT_GE(exited_ - started_, seconds(1));  // never before the stall seconds
  EXPECT_EQ(ReadFile(dir_ / "term"), "term\n") << "the program did not get SIGTERM";
  EXPECT_TRUE(std::regex_match(
      Message(), std::regex(R"(\{"state":"stalled","generation":0,"exit":0,"step":3,)"
                            R"("lastProgress":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",)"
                            R"("idleSeconds":[1-9]\d*,"checkpoint":2,"phase":"running"\})")))
      << Message();
  EXPECT_NE(Err().find("stalled: no progress for "), std::string::npos) << Err();
  EXPECT_NE(Err().find("s after step 3"), std::string::npos) << Err();
  EXPECT_NE(Err().find("last checkpoint at step 2"), std::string::npos) << Err();
  EXPECT_EQ(Out(), "completed step: 1\ncompleted step: 2\ncompleted step: 3\ncompleted step: 2\n");
}

TEST_F(ProgressProcessTest, AStalledProgramIgnoringSigtermIsKilledAfterTheGrace) {
  env_[kProgressLogPatternEnv] = R"(completed step: (\d+))";
  env_[kProgressStallSecondsEnv] = "1";
  env_[kGraceSecondsEnv] = "1";
  Start(
      "trap '' TERM; echo 'completed step: 7'; touch \"$DIR/up\"; "
      "while true; do sleep 0.05; done");
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_ / "up"); })) << Err();
  const auto up = Clock::now();
  EXPECT_EQ(WaitExit(), kStalledExitCode) << Err();
  EXPECT_GE(exited_ - up, milliseconds(1900));  // the stall, then the grace period
  EXPECT_EQ(Message().rfind(R"({"state":"stalled","generation":0,"exit":137,"step":7,)", 0), 0u)
      << Message();
  EXPECT_NE(Err().find("SIGKILL"), std::string::npos) << Err();
}

TEST_F(ProgressProcessTest, NoStepAtAllStallsAfterTheStartupSeconds) {
  env_[kProgressLogPatternEnv] = R"(completed step: (\d+))";
  env_[kProgressStallSecondsEnv] = "1";
  env_[kProgressStartupSecondsEnv] = "2";
  Start("echo 'loading the model'; while true; do sleep 0.05; done");
  EXPECT_EQ(WaitExit(), kStalledExitCode) << Err();
  EXPECT_GE(exited_ - started_, seconds(2));  // the startup seconds, not the stall seconds
  EXPECT_TRUE(
      std::regex_match(Message(), std::regex(R"(\{"state":"stalled","generation":0,"exit":143,)"
                                             R"("idleSeconds":([2-9]|\d\d+),"phase":"startup"\})")))
      << Message();
  EXPECT_NE(Err().find("(startup)"), std::string::npos) << Err();
}

TEST_F(ProgressProcessTest, ReportsAfterTheProgramCarryStepAndCheckpoint) {
  env_[kProgressLogPatternEnv] = R"(completed step: (\d+))";
  env_[kProgressCheckpointPatternEnv] = R"(checkpoint (\d+) saved)";
  Start(
      "echo 'completed step: 10'; echo 'checkpoint 10 saved' >&2; echo 'completed step: 11'; "
      "printf 'checkpoint 11 saved'; exit 3");  // the last line has no newline
  EXPECT_EQ(WaitExit(), 3) << Err();
  EXPECT_TRUE(std::regex_match(Message(),
                               std::regex(R"(\{"state":"exited","generation":0,"exit":3,"step":11,)"
                                          R"("lastProgress":"[-0-9T:]+Z","checkpoint":11\})")))
      << Message();
}

TEST_F(ProgressProcessTest, AHeartbeatFileWithAStep) {
  // A heartbeat file left from before the program starts is not progress.
  WriteFile(dir_ / "heartbeat", "5\n");
  env_[kProgressHeartbeatFileEnv] = (dir_ / "heartbeat").string();
  // 3 s: a loaded machine may hold the program between its two writes for a second or more.
  env_[kProgressStallSecondsEnv] = "3";
  Start(
      "sleep 0.2; echo 41 > \"$DIR/heartbeat.new\"; mv \"$DIR/heartbeat.new\" \"$DIR/heartbeat\"; "
      "sleep 0.2; echo ' 42 ' > \"$DIR/heartbeat\"; while true; do sleep 0.05; done");
  EXPECT_EQ(WaitExit(), kStalledExitCode) << Err();
  EXPECT_TRUE(std::regex_match(
      Message(),
      std::regex(R"(\{"state":"stalled","generation":0,"exit":143,"step":42,)"
                 R"("lastProgress":"[-0-9T:]+Z","idleSeconds":[3-9]\d*,"phase":"running"\})")))
      << Message();
}

TEST_F(ProgressProcessTest, AHeartbeatFileWithoutAStepCountsItsChanges) {
  env_[kProgressHeartbeatFileEnv] = (dir_ / "heartbeat").string();
  // 3 s: a loaded machine may hold the program between its writes for a second or more.
  env_[kProgressStallSecondsEnv] = "3";
  env_[kProgressStartupSecondsEnv] = "60";
  Start(
      "for i in 1 2 3; do echo alive > \"$DIR/hb.new\"; mv \"$DIR/hb.new\" \"$DIR/heartbeat\"; "
      "sleep 0.3; done; "
      "while true; do sleep 0.05; done");
  EXPECT_EQ(WaitExit(seconds(60)), kStalledExitCode) << Err();
  // Phase "running", not "startup": the changes were progress. Changes between two looks at
  // the file count once, so a slow machine may see fewer than three.
  EXPECT_TRUE(std::regex_match(
      Message(),
      std::regex(R"(\{"state":"stalled","generation":0,"exit":143,"step":[123],)"
                 R"("lastProgress":"[-0-9T:]+Z","idleSeconds":[3-9]\d*,"phase":"running"\})")))
      << Message();
}

TEST_F(ProgressProcessTest, InvalidSettingsExit2WithAnErrorReport) {
  const auto re2_error = [](const std::string& pattern) {
    return re2::RE2(pattern, re2::RE2::Quiet).error();
  };
  struct Case {
    const char* name;
    std::string value;
    std::string error;
  };
  const std::vector<Case> cases = {
      {kProgressLogPatternEnv, R"(completed step: (\d+)",
       std::string(kProgressLogPatternEnv) + ": " + re2_error(R"(completed step: (\d+)")},
      {kProgressLogPatternEnv, "step [0-9",
       std::string(kProgressLogPatternEnv) + ": " + re2_error("step [0-9")},
      {kProgressLogPatternEnv, R"(completed step: \d+)",
       std::string(kProgressLogPatternEnv) +
           ": must have exactly one capture group, the step; has 0"},
      {kProgressLogPatternEnv, R"(step (\d+)/(\d+))",
       std::string(kProgressLogPatternEnv) +
           ": must have exactly one capture group, the step; has 2"},
      {kProgressCheckpointPatternEnv, R"(saved (\d+)",
       std::string(kProgressCheckpointPatternEnv) + ": " + re2_error(R"(saved (\d+)")},
      {kProgressStallSecondsEnv, "0",
       std::string(kProgressStallSecondsEnv) + " must be an integer >= 1, not \"0\""},
      {kProgressStartupSecondsEnv, "soon",
       std::string(kProgressStartupSecondsEnv) + " must be an integer >= 1, not \"soon\""},
      {kModeEnv, "twice", std::string(kModeEnv) + " must be generations or once, not \"twice\""},
      {kProgressMetricsPortEnv, "0",
       std::string(kProgressMetricsPortEnv) + " must be a port from 1 to 65535, not \"0\""},
      {kProgressMetricsPortEnv, "65536",
       std::string(kProgressMetricsPortEnv) + " must be a port from 1 to 65535, not \"65536\""},
      {kProgressMetricsPortEnv, "http",
       std::string(kProgressMetricsPortEnv) + " must be a port from 1 to 65535, not \"http\""},
  };
  const auto base = env_;
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.name) + "=" + c.value);
    ASSERT_FALSE(c.error.empty());
    fs::remove(message());
    env_ = base;
    env_[kProgressLogPatternEnv] = R"(step (\d+))";
    env_[c.name] = c.value;
    Start("touch \"$DIR/ran\"");
    EXPECT_EQ(WaitExit(), kConfigErrorExitCode);
    EXPECT_EQ(Message(), FormatMessage(ConfigErrorMessage(c.error)));
    EXPECT_NE(Message().find(c.name), std::string::npos);
    EXPECT_NE(Err().find(c.error), std::string::npos) << Err();
    EXPECT_FALSE(fs::exists(dir_ / "ran"));
  }
}

TEST_F(ProgressProcessTest, ModeOnceRunsTheProgramWithoutAnnotationsAndExitsWithItsCode) {
  env_[kStateEnv] = (dir_ / "no-state").string();
  env_[kPodinfoEnv] = (dir_ / "no-annotations").string();
  env_[kGenerationEnv] = "3";
  // Without progress tracking the program's stdout is the supervisor's own (a file here).
  Start(
      "echo \"generation $TPUJOB_GENERATION\"; if [ -p /dev/stdout ]; then echo pipe; fi; "
      "exit 5");
  EXPECT_EQ(WaitExit(), 5) << Err();
  EXPECT_EQ(Message(), R"({"state":"exited","generation":3,"exit":5})");
  EXPECT_EQ(Out(), "generation 3\n");
  EXPECT_FALSE(fs::exists(dir_ / "no-state"));
}

TEST_F(ProgressProcessTest, AStopOrderWithProgressOnReportsTheStep) {
  env_.erase(kModeEnv);  // generations, the default
  env_[kPodinfoEnv] = (dir_ / "annotations").string();
  env_[kStateEnv] = (dir_ / "state").string();
  env_[kProgressLogPatternEnv] = R"(completed step: (\d+))";
  env_[kProgressCheckpointPatternEnv] = R"(checkpoint (\d+))";
  fs::create_directories(dir_ / "state");
  SetAnnotations({{kBarrierAnnotation, "1"}, {kGenerationAnnotation, "1"}});
  Start(
      "trap 'echo \"checkpoint 42\"; exit 0' TERM; echo 'completed step: 42'; "
      "while true; do sleep 0.05; done");
  ASSERT_TRUE(WaitFor([&] { return Out() == "completed step: 42\n"; })) << Out() << Err();
  SetAnnotations({{kBarrierAnnotation, "1"}, {kGenerationAnnotation, "2"}});
  EXPECT_EQ(WaitExit(), kStoppedExitCode) << Err();
  // The checkpoint the program wrote on its way out was read before the report.
  EXPECT_TRUE(std::regex_match(
      Message(), std::regex(R"(\{"state":"stopped","generation":1,"exit":0,"next":2,"step":42,)"
                            R"("lastProgress":"[-0-9T:]+Z","checkpoint":42\})")))
      << Message();
  EXPECT_EQ(Out(), "completed step: 42\ncheckpoint 42\n");
  EXPECT_NE(Err().find("stop order"), std::string::npos) << Err();
}

TEST_F(ProgressProcessTest, SigtermToTheSupervisorReportsTheStep) {
  env_[kProgressLogPatternEnv] = R"(completed step: (\d+))";
  Start(
      "trap 'exit 7' TERM; echo 'completed step: 9'; touch \"$DIR/up\"; "
      "while true; do sleep 0.05; done");
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_ / "up") && !Out().empty(); })) << Err();
  ASSERT_EQ(::kill(pid_, SIGTERM), 0);
  EXPECT_EQ(WaitExit(), 7) << Err();
  EXPECT_EQ(Message().rfind(R"({"state":"terminated","generation":0,"exit":7,"step":9,)", 0), 0u)
      << Message();
}

TEST_F(ProgressProcessTest, AGrandchildHoldingThePipesDoesNotDelayTheReport) {
  env_[kProgressLogPatternEnv] = R"(completed step: (\d+))";
  // The background sleep keeps the pipes open for 120 s, twice as long as the wait below.
  Start("sleep 120 & echo $! > \"$DIR/background\"; echo 'completed step: 1'; exit 4");
  EXPECT_EQ(WaitExit(seconds(60)), 4) << Err();
  EXPECT_EQ(Message().rfind(R"({"state":"exited","generation":0,"exit":4,"step":1,)", 0), 0u)
      << Message();
  const pid_t background = std::atoi(ReadFile(dir_ / "background").c_str());
  if (background > 0) ::kill(background, SIGKILL);
}

TEST_F(ProgressProcessTest, HelpDescribesProgressTracking) {
  FILE* pipe = ::popen((std::string(TPUJOB_SUPERVISE_BINARY) + " --help").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string help;
  char buffer[4096];
  while (const size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) help.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0);
  for (const std::string& word : std::vector<std::string>{
           kProgressLogPatternEnv, kProgressCheckpointPatternEnv, kProgressHeartbeatFileEnv,
           kProgressStallSecondsEnv, kProgressStartupSecondsEnv, kProgressMetricsPortEnv,
           kWorkerStepMetric, kWorkerLastProgressMetric, kModeEnv, kModeOnce, kReportStalled,
           std::to_string(kStalledExitCode), "lastProgress", "idleSeconds"}) {
    EXPECT_NE(help.find(word), std::string::npos) << word;
  }
}

// --- The metrics endpoint ---

TEST(SupervisorProgressTest, MetricsHaveHelpAndTypeAndSamplesOnlyWhenKnown) {
  const std::string none = FormatProgressMetrics({});
  for (const char* name : {kWorkerStepMetric, kWorkerStepsTotalMetric, kWorkerLastProgressMetric,
                           kWorkerCheckpointStepMetric}) {
    EXPECT_NE(none.find(std::string("# HELP ") + name + " "), std::string::npos) << name;
    EXPECT_NE(none.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
    EXPECT_EQ(none.find(std::string("\n") + name + " "), std::string::npos) << none;
  }
  ProgressState state;
  state.step = 120;
  state.first_step = 101;
  state.checkpoint = 100;
  state.last_progress_time = WallClock::time_point(milliseconds(1796000000250));
  const std::string text = FormatProgressMetrics(state);
  EXPECT_NE(text.find("# TYPE tpujob_worker_step gauge\ntpujob_worker_step 120\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE tpujob_worker_steps_total counter\ntpujob_worker_steps_total 19\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\ntpujob_worker_last_progress_timestamp_seconds 1796000000.250\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\ntpujob_worker_checkpoint_step 100\n"), std::string::npos) << text;
}

TEST(SupervisorProgressTest, AnswersOnlyGetMetrics) {
  const auto status = [](std::string_view line) {
    const std::string answer = AnswerRequest(line, {});
    return answer.substr(0, answer.find("\r\n"));
  };
  EXPECT_EQ(status("GET /metrics HTTP/1.1"), "HTTP/1.1 200 OK");
  EXPECT_EQ(status("GET /metrics?x=1 HTTP/1.0"), "HTTP/1.1 200 OK");
  EXPECT_EQ(status("GET / HTTP/1.1"), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(status("GET /metricsx HTTP/1.1"), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(status("POST /metrics HTTP/1.1"), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(status("hello"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(status(""), "HTTP/1.1 400 Bad Request");
  const std::string ok = AnswerRequest("GET /metrics HTTP/1.1", {});
  EXPECT_NE(ok.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << ok;
  EXPECT_NE(ok.find("Content-Length: " + std::to_string(FormatProgressMetrics({}).size())),
            std::string::npos)
      << ok;
}

TEST(SupervisorProgressTest, ParsesMetricsPorts) {
  EXPECT_EQ(ParseMetricsPort("9464"), 9464);
  EXPECT_EQ(ParseMetricsPort("1"), 1);
  EXPECT_EQ(ParseMetricsPort(" 1"), std::nullopt);  // the caller trims
  EXPECT_EQ(ParseMetricsPort("65535"), 65535);
  EXPECT_EQ(ParseMetricsPort("0"), std::nullopt);
  EXPECT_EQ(ParseMetricsPort("65536"), std::nullopt);
  EXPECT_EQ(ParseMetricsPort("-1"), std::nullopt);
  EXPECT_EQ(ParseMetricsPort("94a"), std::nullopt);
  EXPECT_EQ(ParseMetricsPort(""), std::nullopt);
}

// A TCP port free when asked (bound to 0, then released).
int FreeTcpPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

// A connection to 127.0.0.1:port whose reads give up after `timeout`; -1 if refused.
int Connect(int port, milliseconds timeout = seconds(10)) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{.tv_sec = static_cast<time_t>(timeout.count() / 1000),
             .tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The whole answer to GET `path` (until the server closes), "" if refused or timed out.
std::string HttpGet(int port, const std::string& path) {
  const int fd = Connect(port);
  if (fd < 0) return "";
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return "";
  }
  std::string answer;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) answer.clear();  // timed out
    if (n <= 0) break;
    answer.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return answer;
}

TEST_F(ProgressProcessTest, MetricsAnswerTheStepAndNotFoundElsewhere) {
  const int port = FreeTcpPort();
  ASSERT_GT(port, 0);
  env_[kProgressLogPatternEnv] = R"(completed step: (\d+))";
  env_[kProgressMetricsPortEnv] = std::to_string(port);
  Start(
      "for i in 5 6 7; do echo \"completed step: $i\"; done; "
      "while [ ! -e \"$DIR/go\" ]; do sleep 0.01; done; exit 3");
  std::string answer;
  ASSERT_TRUE(WaitFor([&] {
    answer = HttpGet(port, "/metrics");
    return answer.find("\ntpujob_worker_step 7\n") != std::string::npos;
  })) << answer
      << Err();
  EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answer;
  EXPECT_NE(answer.find("# TYPE tpujob_worker_step gauge\n"), std::string::npos) << answer;
  EXPECT_NE(answer.find("\ntpujob_worker_steps_total 2\n"), std::string::npos) << answer;
  EXPECT_TRUE(std::regex_search(
      answer, std::regex(R"(\ntpujob_worker_last_progress_timestamp_seconds \d{10}\.\d{3}\n)")))
      << answer;
  // No checkpoint pattern: the family without a sample.
  EXPECT_NE(answer.find("# TYPE tpujob_worker_checkpoint_step gauge\n"), std::string::npos);
  EXPECT_EQ(answer.find("\ntpujob_worker_checkpoint_step "), std::string::npos) << answer;
  EXPECT_EQ(HttpGet(port, "/").rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u);
  EXPECT_EQ(HttpGet(port, "/healthz").rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u);
  WriteFile(dir_ / "go", "");
  EXPECT_EQ(WaitExit(), 3) << Err();
  EXPECT_EQ(Out(), "completed step: 5\ncompleted step: 6\ncompleted step: 7\n");
  EXPECT_NE(Err().find("serving the progress metrics on 0.0.0.0:" + std::to_string(port)),
            std::string::npos)
      << Err();
}

TEST_F(ProgressProcessTest, ASilentClientDelaysNeitherOutputNorTheStall) {
  const int port = FreeTcpPort();
  ASSERT_GT(port, 0);
  env_[kProgressLogPatternEnv] = R"(completed step: (\d+))";
  env_[kProgressMetricsPortEnv] = std::to_string(port);
  env_[kProgressStallSecondsEnv] = "1";
  // Steps until told to stop, then silence: a stall.
  Start(
      "i=0; while [ ! -e \"$DIR/stop\" ]; do i=$((i+1)); echo \"completed step: $i\"; "
      "sleep 0.05; done; while true; do sleep 0.05; done");
  int silent = -1;
  ASSERT_TRUE(WaitFor([&] { return (silent = Connect(port)) >= 0; })) << Err();
  // The output goes on while the connection says nothing.
  ASSERT_TRUE(WaitFor([&] { return Out().find("completed step: 20\n") != std::string::npos; }))
      << Out() << Err();
  // The supervisor gives up on it and closes it ...
  char byte;
  EXPECT_EQ(::recv(silent, &byte, 1, 0), 0) << "the silent connection was not closed";
  // ... and answers the next request.
  std::string answer;
  ASSERT_TRUE(WaitFor([&] {
    answer = HttpGet(port, "/metrics");
    return answer.find("\ntpujob_worker_step ") != std::string::npos;
  })) << answer;
  // A second silent client, open through the stall: the stall still stops the program.
  const int second = Connect(port);
  EXPECT_GE(second, 0);
  WriteFile(dir_ / "stop", "");
  EXPECT_EQ(WaitExit(), kStalledExitCode) << Err();
  EXPECT_NE(Err().find("stalled: no progress for "), std::string::npos) << Err();
  ::close(silent);
  if (second >= 0) ::close(second);
}

TEST_F(ProgressProcessTest, APortInUseIsLoggedAndTheProgramRunsToItsExitCode) {
  const int taken = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::bind(taken, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(taken, 1), 0);
  ASSERT_EQ(::getsockname(taken, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);
  env_[kProgressLogPatternEnv] = R"(completed step: (\d+))";
  env_[kProgressMetricsPortEnv] = std::to_string(port);
  Start("echo 'completed step: 1'; exit 6");
  EXPECT_EQ(WaitExit(), 6) << Err();
  ::close(taken);
  EXPECT_EQ(Out(), "completed step: 1\n");
  EXPECT_NE(Err().find("cannot serve the progress metrics on port " + std::to_string(port) +
                       ": bind: " + std::strerror(EADDRINUSE) + " (errno " +
                       std::to_string(EADDRINUSE) + ")"),
            std::string::npos)
      << Err();
  EXPECT_EQ(Message().rfind(R"({"state":"exited","generation":0,"exit":6,"step":1,)", 0), 0u)
      << Message();
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::supervisor
