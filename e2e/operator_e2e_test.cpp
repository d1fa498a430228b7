// The tpujob-operator binary against a real control plane: the CRD is served, `run` becomes
// ready only once its caches have synced, it sees TPUJobs, and SIGTERM stops it cleanly.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "e2e_env.h"

namespace tpujob::e2e {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

int FreePort() {
  const auto r = RunCommand(
      "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); "
      "print(s.getsockname()[1])'",
      false);
  return std::stoi(Trim(r.output));
}

int HttpStatus(int port, const std::string& path) {
  const auto r = RunCommand(
      "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:" + std::to_string(port) + path,
      false);
  return r.output.empty() ? 0 : std::atoi(r.output.c_str());
}

// The operator as a child process, logging to a file; killed on destruction if still running.
class OperatorProcess {
 public:
  explicit OperatorProcess(std::vector<std::string> extra_args = {}) {
    port_ = FreePort();
    log_path_ = ClusterDir() + "/operator-" + std::to_string(port_) + ".log";
    std::vector<std::string> args = {TPUJOB_OPERATOR_BINARY, "run",
                                     "--kubeconfig",         KubeconfigPath(),
                                     "--health-address",     "127.0.0.1:" + std::to_string(port_)};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* log = std::fopen(log_path_.c_str(), "w");
      if (log != nullptr) {
        ::dup2(::fileno(log), 1);
        ::dup2(::fileno(log), 2);
      }
      std::vector<char*> argv;
      for (auto& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
  }
  ~OperatorProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Sends `signal` and returns the exit status: -1 if it did not exit normally, -2 if it was
  // still running 30 s later (it is then killed).
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
  int port() const { return port_; }
  std::string Log() const { return ReadFile(log_path_); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

void InstallCrd() {
  const auto applied = Kubectl(std::string("apply -f ") + TPUJOB_SOURCE_DIR + "/crds/");
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  const auto established =
      Kubectl("wait --for=condition=Established crd/tpujobs.tpujob.dev --timeout=30s");
  ASSERT_EQ(established.exit_code, 0) << established.output;
}

TEST(OperatorE2E, CrdIsServedWithShortNameAndPrinterColumns) {
  InstallCrd();
  TestNamespace ns("crd");
  const auto applied =
      Kubectl("apply -n " + ns.name() + " -f " + TPUJOB_SOURCE_DIR + "/examples/single-host.yaml");
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  const auto listed = Kubectl("get tj -n " + ns.name());
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_NE(listed.output.find("single-host"), std::string::npos) << listed.output;
  for (const char* column : {"PHASE", "ATTEMPT", "READY", "AGE"}) {
    EXPECT_NE(listed.output.find(column), std::string::npos) << column << "\n" << listed.output;
  }
  // Defaults from the schema are applied by the API server.
  EXPECT_EQ(Trim(Kubectl("get tj single-host -n " + ns.name() +
                         " -o jsonpath={.spec.successPolicy}/{.spec.queueTimeoutSeconds}")
                     .output),
            "AllWorkers/1800");
  // A manifest that breaks the schema is refused with a message naming the field.
  const std::string manifest = ClusterDir() + "/bad-topology.yaml";
  std::ofstream(manifest)
      << "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata: {name: bad}\n"
         "spec:\n  tpu: {accelerator: x, topology: banana, chipsPerWorker: 4}\n"
         "  replicaSpecs: {Worker: {replicas: 1, template: {}}}\n";
  const auto bad = Kubectl("apply -n " + ns.name() + " -f " + manifest);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("spec.tpu.topology"), std::string::npos) << bad.output;
}

TEST(OperatorE2E, ReadyAfterSyncSeesJobsAndStopsCleanlyOnSigterm) {
  InstallCrd();
  TestNamespace ns("operator");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_TRUE(Eventually([&] { return HttpStatus(op.port(), "/healthz") == 200; })) << op.Log();
  ASSERT_TRUE(Eventually([&] { return HttpStatus(op.port(), "/readyz") == 200; })) << op.Log();
  EXPECT_NE(op.Log().find("caches synced"), std::string::npos) << op.Log();

  const auto applied =
      Kubectl("apply -n " + ns.name() + " -f " + TPUJOB_SOURCE_DIR + "/examples/single-host.yaml");
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  const std::string seen = "observed TPUJob\" tpujob=" + ns.name() + "/single-host";
  ASSERT_TRUE(Eventually([&] { return op.Log().find(seen) != std::string::npos; })) << op.Log();

  ASSERT_EQ(Kubectl("delete tj single-host -n " + ns.name()).exit_code, 0);
  const std::string gone = "TPUJob gone\" tpujob=" + ns.name() + "/single-host";
  ASSERT_TRUE(Eventually([&] { return op.Log().find(gone) != std::string::npos; })) << op.Log();

  EXPECT_EQ(op.StopWith(SIGTERM), 0) << op.Log();
  EXPECT_NE(op.Log().find("msg=\"stopped\""), std::string::npos) << op.Log();
}

TEST(OperatorE2E, NotReadyWithoutReachableApiServer) {
  // A kubeconfig pointing at a closed port: alive, never ready, and the log says why.
  const std::string path = ClusterDir() + "/unreachable.kubeconfig";
  const auto written = RunCommand(
      "sed -E 's#server: https://127.0.0.1:[0-9]+#server: "
      "https://127.0.0.1:1#' " +
      KubeconfigPath() + " > " + path);
  ASSERT_EQ(written.exit_code, 0) << written.output;
  const int port = FreePort();
  const std::string log = ClusterDir() + "/unreachable.log";
  const auto pid =
      Trim(RunCommand(std::string(TPUJOB_OPERATOR_BINARY) + " run --kubeconfig " + path +
                          " --health-address 127.0.0.1:" + std::to_string(port) +
                          " --cache-sync-timeout 3 > " + log + " 2>&1 & echo $!",
                      false)
               .output);
  ASSERT_TRUE(Eventually([&] { return HttpStatus(port, "/healthz") == 200; })) << ReadFile(log);
  EXPECT_EQ(HttpStatus(port, "/readyz"), 503);
  // After the sync timeout the operator gives up with a message that names the likely cause.
  ASSERT_TRUE(Eventually([&] { return ReadFile(log).find("operator failed") != std::string::npos; },
                         std::chrono::seconds(20)))
      << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("caches did not sync"), std::string::npos) << ReadFile(log);
  RunCommand("kill -9 " + pid);
}

}  // namespace
}  // namespace tpujob::e2e
