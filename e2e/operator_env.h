// The operator binary as a child process of an end-to-end test, and the set-up every operator
// test needs (the CRD installed and established).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "e2e_env.h"

namespace tpujob::e2e {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A TCP port of 127.0.0.1 the kernel had free a moment ago: bound to port 0, read back, closed
// (as the operator's own listeners will bind it; no process started for it).
inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0) << "socket: " << std::strerror(errno);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  int port = 0;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  EXPECT_NE(port, 0) << "bind to 127.0.0.1:0: " << std::strerror(errno);
  ::close(fd);
  return port;
}

inline int HttpStatus(int port, const std::string& path) {
  const auto r = RunCommand(
      "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:" + std::to_string(port) + path,
      false);
  return r.output.empty() ? 0 : std::atoi(r.output.c_str());
}

// A child process with stdout and stderr in a log file; SIGKILLed on destruction if still
// running. `args[0]` is a path, or a name looked up on the PATH; `env` is added to the
// environment of the child.
class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> args, std::string log_path,
               std::vector<std::pair<std::string, std::string>> env = {})
      : log_path_(std::move(log_path)) {
    for (const std::string& arg : args) command_line_ += arg + " ";
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* log = std::fopen(log_path_.c_str(), "w");
      if (log != nullptr) {
        ::dup2(::fileno(log), 1);
        ::dup2(::fileno(log), 2);
      }
      for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
      std::vector<char*> argv;
      for (auto& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::_Exit(127);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { Kill(); }

  // Sends `signal` and returns the exit status: -1 if it did not exit normally, -2 if it was
  // still running 30 s later (its stacks are then saved beside the log, and it is killed).
  int StopWith(int signal) {
    ::kill(pid_, signal);
    int status = 0;
    const bool exited = Eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; },
                                   std::chrono::seconds(30));
    if (!exited) {
      RunCommand("gdb -batch -p " + std::to_string(pid_) + " -ex 'thread apply all bt' > " +
                 log_path_ + ".stacks 2>&1");
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    pid_ = -1;
    if (!exited) return -2;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  // SIGKILL, as a node failure or the OOM killer would: no shutdown code runs.
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // SIGSTOP / SIGCONT: the process freezes as a whole (a long GC pause, a stalled VM) while its
  // clocks keep running.
  void Pause() { ::kill(pid_, SIGSTOP); }
  void Resume() { ::kill(pid_, SIGCONT); }
  // Waits for the process to exit on its own and returns its exit status: -1 if it did not exit
  // normally (a signal), -2 if it was still running after `timeout` (it is left running).
  int WaitForExit(std::chrono::milliseconds timeout) {
    int status = 0;
    if (!Eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout)) return -2;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Whether the process has exited (reaping it if so); never blocks.
  bool Exited() {
    if (pid_ <= 0) return true;
    if (::waitpid(pid_, nullptr, WNOHANG) != pid_) return false;
    pid_ = -1;
    return true;
  }
  const std::string& command_line() const { return command_line_; }
  const std::string& log_path() const { return log_path_; }
  std::string Log() const { return ReadFile(log_path_); }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
  std::string command_line_;
};

// Two distinct free loopback ports.
inline std::pair<int, int> TwoFreePorts() {
  const int first = FreePort();
  int second = FreePort();
  while (second == first) second = FreePort();
  return {first, second};
}

// The hidden flag that serves /debug/cache on the health address: what the operator's caches
// hold, for tests that compare it with kubectl (CacheEqualsApiServer in tpujob_env.h).
inline constexpr char kDebugCacheFlag[] = "--debug-cache-endpoint";

// The operator (`run`) as a child process, logging to a file in the cluster directory, with its
// health and metrics endpoints on free loopback ports. /metrics is plain HTTP unless the test
// passes --metrics-secure itself.
class OperatorProcess : public ChildProcess {
 public:
  explicit OperatorProcess(std::vector<std::string> extra_args = {})
      : OperatorProcess(TwoFreePorts(), std::move(extra_args)) {}

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }

 private:
  OperatorProcess(std::pair<int, int> ports, std::vector<std::string> extra_args)
      : ChildProcess(Args(ports, std::move(extra_args)),
                     ClusterDir() + "/operator-" + std::to_string(ports.first) + ".log"),
        port_(ports.first),
        metrics_port_(ports.second) {}
  static std::vector<std::string> Args(std::pair<int, int> ports,
                                       std::vector<std::string> extra_args) {
    // TPUJOB_E2E_OPERATOR_BINARY runs another build (the fault campaign's broken ones).
    const char* binary = std::getenv("TPUJOB_E2E_OPERATOR_BINARY");
    std::vector<std::string> args = {
        binary != nullptr && *binary != '\0' ? binary : TPUJOB_OPERATOR_BINARY,
        "run",
        "--health-address",
        "127.0.0.1:" + std::to_string(ports.first),
        "--metrics-address",
        "127.0.0.1:" + std::to_string(ports.second)};
    // The admin kubeconfig unless the test names another (e.g. the blackhole proxy's).
    if (std::find(extra_args.begin(), extra_args.end(), "--kubeconfig") == extra_args.end()) {
      args.insert(args.end(), {"--kubeconfig", KubeconfigPath()});
    }
    if (std::none_of(extra_args.begin(), extra_args.end(),
                     [](const std::string& a) { return a.starts_with("--metrics-secure"); })) {
      args.push_back("--metrics-secure=false");
    }
    // The cordon safety state of this test's operators only: replicas (and restarts) within one
    // test share it, as a Deployment's do; another test's breaker never refuses this one's
    // cordons.
    if (std::none_of(extra_args.begin(), extra_args.end(), [](const std::string& a) {
          return a.starts_with("--cordon-state-configmap");
        })) {
      args.push_back("--cordon-state-configmap=e2e-cordon-state-" + std::to_string(::getpid()));
    }
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    return args;
  }
  int port_ = 0;
  int metrics_port_ = 0;
};

// Applies the TPUJob CRD with `kubectl` (the test cluster's, or another's) and waits until it is
// established.
inline void ApplyCrd(const std::function<CommandResult(const std::string&, bool)>& kubectl) {
  const auto applied = kubectl(std::string("apply -f ") + TPUJOB_SOURCE_DIR + "/crds/", true);
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  // `kubectl wait --for=condition` gives up at once on a CRD whose status has no conditions
  // yet (just created), so poll.
  std::string established;
  ASSERT_TRUE(Eventually(
      [&] {
        established = Trim(kubectl("get crd tpujobs.tpujob.dev -o "
                                   "jsonpath='{range .status.conditions[*]}{.type}={.status} "
                                   "{end}'",
                                   false)
                               .output);
        return established.find("Established=True") != std::string::npos;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(100)))
      << "the TPUJob CRD is not Established: " << established;
}

// What InstallCrd() compares: the files of crds/ (a digest of their names and contents) and the
// CRD the test cluster serves (its uid and generation: a test that deletes, recreates or changes
// it changes one of them), or "" when the cluster serves none that is Established.
inline std::string InstalledCrdStamp() {
  // The files are read once per test process.
  static const std::string files = [] {
    std::string text;
    std::vector<std::filesystem::path> paths;
    for (const auto& entry :
         std::filesystem::directory_iterator(std::string(TPUJOB_SOURCE_DIR) + "/crds")) {
      paths.push_back(entry.path());
    }
    std::sort(paths.begin(), paths.end());
    for (const auto& path : paths) text += path.filename().string() + "\n" + ReadFile(path) + "\n";
    return text;
  }();
  const kube::Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions", false};
  const CommandResult got =
      ApiRequest([&] { return TestClient().Get(crds, "", "tpujobs.tpujob.dev"); });
  if (got.exit_code != 0) return "";
  const auto crd = nlohmann::json::parse(got.output, nullptr, false);
  bool established = false;
  for (const auto& c : crd.value("/status/conditions"_json_pointer, nlohmann::json::array())) {
    established |= c.value("type", "") == "Established" && c.value("status", "") == "True";
  }
  if (!established) return "";
  return std::to_string(std::hash<std::string>{}(files)) + " " +
         crd.value("/metadata/uid"_json_pointer, std::string()) + " " +
         std::to_string(crd.value("/metadata/generation"_json_pointer, 0));
}

// Installs the TPUJob CRD in the test cluster and waits until it is established; once per
// cluster, not once per test process: the stamp of the last install is kept in the cluster's
// directory, and a test process that finds the same files and the same served CRD (uid and
// generation) starts no kubectl.
inline void InstallCrd() {
  const std::string record = ClusterDir() + "/crd-installed";
  const std::string before = InstalledCrdStamp();
  if (!before.empty() && before == ReadFile(record)) return;
  ApplyCrd(Kubectl);
  if (::testing::Test::HasFatalFailure()) return;
  const std::string after = InstalledCrdStamp();
  std::ofstream(record + ".tmp") << after;
  std::filesystem::rename(record + ".tmp", record);
}

}  // namespace tpujob::e2e
