// tpujob-supervise: the entrypoint of a TPUJob worker container. See --help.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/protocol.h"
#include "supervisor/supervisor.h"

#ifndef TPUJOB_SUPERVISE_VERSION
#define TPUJOB_SUPERVISE_VERSION "unknown"
#endif

namespace {

using namespace tpujob::supervisor;

constexpr char kUsage[] =
    "usage: tpujob-supervise [--] PROGRAM [ARGS...]\n"
    "       tpujob-supervise --install DEST | --version | --help\n";

void PrintHelp() {
  std::cout
      << kUsage << R"(
Runs PROGRAM as a child and restarts it in place across generations of a TPUJob, coordinated by
the operator through the pod's annotations. Meant to be the entrypoint of a worker container whose
pod has restartPolicy OnFailure: when the supervisor exits non-zero, the kubelet restarts the
container in the same pod.

Each run of the supervisor:
  1. reads the last generation it started (G, 0 if none) from the state file, reports
     {"state":"barrier","generation":G} and waits until the annotation )"
      << kBarrierAnnotation << R"( >= G+1;
  2. records the barrier value N as the generation started, reports {"state":"running",
     "generation":N} and runs PROGRAM (in its own process group, with )"
      << kGenerationEnv << R"(=N, and the NAME=VALUE lines of the annotation )"
      << kProgramEnvAnnotation << R"(, when the pod has it, over the container's own variables);
  3. ends with the first of:
     - PROGRAM exits with code C (a signal S: 128+S): reports {"state":"exited",...,"exit":C}
       and exits C;
     - a stop order, the annotation )"
      << kGenerationAnnotation << R"( > N: sends SIGTERM to the program's
       group, SIGKILL after the grace period, reports {"state":"stopped",...,"exit":C,
       "next":M} and exits 143;
     - SIGTERM or SIGINT to the supervisor: forwards SIGTERM to the program's group, waits for
       it, reports {"state":"terminated",...,"exit":C} and exits C (143 with no program);
     - with progress tracking on (below), a stall: reports {"state":"stalled",...}, sends SIGTERM
       to the program's group, SIGKILL after the grace period, reports {"state":"stalled",
       "generation":N,"exit":C,"step":T,"lastProgress":"...","idleSeconds":I,"checkpoint":K,
       "phase":P} and exits )"
      << kStalledExitCode << R"(.
With )"
      << kModeEnv << "=" << kModeOnce
      << R"( there is no barrier, no state file and no annotations file: the
supervisor runs PROGRAM once as generation )"
      << kGenerationEnv << R"( (its own value, 0 if unset), reports
{"state":"running",...} and then as in 3. (without stop orders), and exits with PROGRAM's code.
The report is the termination message, rewritten at every state change. Log lines go to stderr.

Progress tracking is on when )"
      << kProgressLogPatternEnv << " or " << kProgressHeartbeatFileEnv << R"( is
set. PROGRAM's stdout and stderr are then pipes: the supervisor copies every byte, unchanged, to
its own stdout and stderr as it arrives, and matches each line (ended by \n or \r; the first
64 KiB of a longer one) against the patterns. Progress is a step greater than the last one seen
or a change of the heartbeat file. A stall is, before the first progress,
)" << kProgressStartupSecondsEnv
      << R"( since the start (phase "startup"), after it
)" << kProgressStallSecondsEnv
      << R"( without new progress (phase "running"). The reports written after PROGRAM started carry "step" (the highest step seen),
"lastProgress" (RFC 3339 UTC) and "checkpoint" (the last checkpoint's step) when known.

Environment:
  )" << kPodinfoEnv
      << R"(
      the pod's annotations, a downward API file, re-read at every poll
      (default )"
      << kDefaultPodinfoPath << R"()
  )" << kStateEnv
      << R"(
      a directory kept across container restarts (an emptyDir) holding the file ')"
      << kStateFileName << R"(',
      the last generation started (default )"
      << kDefaultStateDir << R"()
  )" << kMessageEnv
      << R"(
      the termination message file (default )"
      << kDefaultMessagePath << R"()
  )" << kGraceSecondsEnv
      << R"(
      seconds between SIGTERM and SIGKILL on a stop order (default )"
      << kDefaultGraceSeconds << R"()
  )" << kPollMsEnv
      << R"(
      poll interval of the annotations file in milliseconds (default )"
      << kDefaultPollMs << R"()
  )" << kModeEnv
      << R"(
      )"
      << kModeGenerations << R"( (default): the barrier and in-place restarts as above; )"
      << kModeOnce << R"(: run PROGRAM
      once, without annotations (a job whose pods are recreated)
  )" << kProgressLogPatternEnv
      << R"(
      an RE2 regular expression with exactly one capture group, the step (decimal), matched
      (partially) against every line of PROGRAM's stdout and stderr, e.g. 'completed step: (\d+)'
  )" << kProgressCheckpointPatternEnv
      << R"(
      an RE2 regular expression with exactly one capture group: a line saying that the checkpoint
      of that step was saved
  )" << kProgressHeartbeatFileEnv
      << R"(
      a file PROGRAM rewrites: each change of it (mtime, size, content) is progress; its content, if a decimal
      integer, is the step (otherwise the step counts the changes)
  )" << kProgressStallSecondsEnv
      << R"(
      seconds without new progress after the first that make a stall (default )"
      << kDefaultStallSeconds << R"()
  )" << kProgressStartupSecondsEnv
      << R"(
      seconds from the start without any progress that make a stall (default )"
      << kDefaultStartupSeconds << R"()
  )" << kProgressMetricsPortEnv
      << R"(
      a TCP port (1-65535): while PROGRAM runs, GET /metrics on 0.0.0.0:PORT answers the
      progress in the Prometheus text format (tpujob_worker_step, tpujob_worker_steps_total,
      tpujob_worker_last_progress_timestamp_seconds, tpujob_worker_checkpoint_step); a port that
      cannot be bound is logged and the program runs without it (default: no endpoint)

Exit codes: the program's code; 143 after a stop order or SIGTERM at the barrier; )"
      << kStalledExitCode << R"( after a
stall; 127 when PROGRAM cannot be executed; 2 for a usage error or an invalid environment (a bad
pattern, a number out of range; reported as {"state":"error","generation":0,"error":"VARIABLE:
why"}); 1 when the supervisor cannot work (state file).

--install DEST copies this (static) binary to DEST, mode 0755, replacing it atomically: an init
container uses it to put the supervisor into a volume shared with the worker container.
)";
}

int Install(const std::string& dest) {
  namespace fs = std::filesystem;
  const auto fail = [&](const std::string& what) {
    std::cerr << "tpujob-supervise: cannot install to " << dest << ": " << what << "\n";
    return 1;
  };
  std::error_code ec;
  const fs::path parent = fs::path(dest).parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) return fail(parent.string() + ": " + ec.message());
  }
  const int in = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (in < 0) return fail(std::string("/proc/self/exe: ") + std::strerror(errno));
  const std::string tmp = dest + ".tmp";
  const int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  if (out < 0) {
    ::close(in);
    return fail(tmp + ": " + std::strerror(errno));
  }
  char buffer[1 << 16];
  bool ok = true;
  std::string error;
  for (;;) {
    const ssize_t n = ::read(in, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      ok = false;
      error = std::string("read: ") + std::strerror(errno);
      break;
    }
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out, buffer + done, n - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        ok = false;
        error = tmp + ": " + std::strerror(errno);
        break;
      }
      done += w;
    }
    if (!ok) break;
  }
  ::close(in);
  if (ok && ::fchmod(out, 0755) != 0) {  // the umask does not apply
    ok = false;
    error = tmp + ": " + std::strerror(errno);
  }
  if (::close(out) != 0 && ok) {
    ok = false;
    error = tmp + ": " + std::strerror(errno);
  }
  if (ok && ::rename(tmp.c_str(), dest.c_str()) != 0) {
    ok = false;
    error = std::string("rename: ") + std::strerror(errno);
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return fail(error);
  }
  std::cerr << "tpujob-supervise: installed to " << dest << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty()) {
    const std::string_view first = args[0];
    if (first == "--help" || first == "-h") {
      PrintHelp();
      return 0;
    }
    if (first == "--version") {
      std::cout << "tpujob-supervise " << TPUJOB_SUPERVISE_VERSION << "\n";
      return 0;
    }
    if (first == "--install") {
      if (args.size() != 2 || args[1].empty()) {
        std::cerr << "tpujob-supervise: --install takes one argument, DEST\n" << kUsage;
        return 2;
      }
      return Install(args[1]);
    }
    if (first == "--") {
      args.erase(args.begin());
    } else if (first.starts_with("-")) {
      std::cerr << "tpujob-supervise: unknown option " << first
                << " (use -- before a program whose name starts with -)\n"
                << kUsage;
      return 2;
    }
  }
  if (args.empty()) {
    std::cerr << "tpujob-supervise: no program to run\n" << kUsage;
    return 2;
  }
  std::string error;
  const auto options =
      OptionsFromEnvironment([](const char* name) { return std::getenv(name); }, &error);
  if (!options) {
    std::cerr << "tpujob-supervise: " << error << "\n";
    // The operator shows the report: the variable and why.
    const std::string path =
        MessagePathFromEnvironment([](const char* name) { return std::getenv(name); });
    if (!WriteMessage(path, ConfigErrorMessage(error))) {
      std::cerr << "tpujob-supervise: cannot write the termination message " << path << ": "
                << std::strerror(errno) << "\n";
    }
    return kConfigErrorExitCode;
  }
  return Supervise(*options, args);
}
