// The tpujob-operator binary against a real control plane: the CRD is served, `run` becomes
// ready only once its caches have synced, it sees TPUJobs, and SIGTERM stops it cleanly.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

TEST(OperatorE2E, CrdIsServedWithShortNameAndPrinterColumns) {
  InstallCrd();
  TestNamespace ns("crd");
  const auto applied =
      Kubectl("apply -n " + ns.name() + " -f " + TPUJOB_SOURCE_DIR + "/examples/single-host.yaml");
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  const auto listed = Kubectl("get tj -n " + ns.name());
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_NE(listed.output.find("single-host"), std::string::npos) << listed.output;
  for (const char* column : {"PHASE", "ATTEMPT", "TPU", "SLICES", "READY", "STEP", "AGE"}) {
    EXPECT_NE(listed.output.find(column), std::string::npos) << column << "\n" << listed.output;
  }
  // Defaults from the schema are applied by the API server.
  EXPECT_EQ(Trim(Kubectl("get tj single-host -n " + ns.name() +
                         " -o jsonpath={.spec.successPolicy}/"
                         "{.spec.faultTolerance.maxWorkerRestarts}/{.spec.tpu.slices}")
                     .output),
            "AllWorkers/5/1");
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
  const std::string seen =
      "msg=\"phase changed\" tpujob=" + ns.name() + "/single-host from=<none> to=Queued";
  ASSERT_TRUE(Eventually([&] { return op.Log().find(seen) != std::string::npos; })) << op.Log();
  ASSERT_EQ(Kubectl("delete tj single-host -n " + ns.name()).exit_code, 0);

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
  const std::string log = ClusterDir() + "/operator-unreachable.log";
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

// Freezes kube-apiserver (SIGSTOP) for the life of the guard: its TCP connections stay open and
// deliver nothing, as a half-open connection or a proxy that dropped its state would.
class FrozenApiServer {
 public:
  FrozenApiServer() {
    pid_ = std::atoi(ReadFile(ClusterDir() + "/pids/kube-apiserver.pid").c_str());
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
  }
  ~FrozenApiServer() { Thaw(); }
  void Thaw() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
    pid_ = -1;
  }
  bool frozen() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

// GET on the health port: "<status> <body>".
std::string Health(int port) {
  return RunCommand("curl -s -m 5 -w ' %{http_code}' http://127.0.0.1:" + std::to_string(port) +
                        "/healthz",
                    false)
      .output;
}

// /healthz fails while the watches are silent, names them, and passes again once they bring
// news. The bound is lowered to 20 s so the test is short; its default (11 minutes) is the
// longest a healthy watch stays quiet. The test brings news to the operator's three watches of
// its own; Kueue is off, as its Workloads watch would otherwise stay quiet, and fail the check,
// until the API server's next bookmark on it.
TEST(OperatorE2E, HealthzFailsWhileWatchesAreSilentAndRecovers) {
  InstallCrd();
  TestNamespace ns("health");
  OperatorProcess op(
      {"--namespace", ns.name(), "--health-max-watch-silence-seconds", "20", "--kueue", "false"});
  ASSERT_TRUE(Eventually([&] { return HttpStatus(op.port(), "/readyz") == 200; },
                         std::chrono::seconds(30), std::chrono::milliseconds(100)))
      << op.Log();
  EXPECT_EQ(HttpStatus(op.port(), "/healthz"), 200) << Health(op.port());

  std::string answer;
  {
    FrozenApiServer frozen;
    ASSERT_TRUE(frozen.frozen());
    const auto frozen_at = std::chrono::steady_clock::now();
    ASSERT_TRUE(Eventually(
        [&] {
          answer = Health(op.port());
          return answer.ends_with(" 500");
        },
        std::chrono::seconds(60), std::chrono::milliseconds(250)))
        << answer << op.Log();
    const auto took = std::chrono::steady_clock::now() - frozen_at;
    std::cout << "== /healthz failed "
              << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
              << " ms after the API server froze:\n"
              << answer << "\n";
    // Each watch crosses the bound on its own (one may have had a bookmark just before the
    // freeze); within one more bound all three are named.
    EXPECT_TRUE(Eventually(
        [&] {
          answer = Health(op.port());
          return answer.find("watch pods:") != std::string::npos &&
                 answer.find("watch nodes:") != std::string::npos &&
                 answer.find("watch tpujobs:") != std::string::npos;
        },
        std::chrono::seconds(25), std::chrono::milliseconds(250)))
        << answer;
  }
  EXPECT_NE(answer.find("nothing heard from the API server"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("watch workloads:"), std::string::npos) << answer;
  EXPECT_NE(op.Log().find("unhealthy"), std::string::npos) << op.Log();

  // News on every watch: a node, a TPUJob, and the pod the operator creates for it.
  static int counter = 0;
  const std::string prefix = "hz" + std::to_string(::getpid() % 10000) + std::to_string(++counter);
  CreateTpuNodes(prefix, 1, "tpu-" + prefix, "2x2", "pool-" + prefix);
  ASSERT_EQ(ApplyYaml(ns.name(), JobYaml("hz", 1, "2x2", "", false, "", "tpu-" + prefix)).exit_code,
            0);
  EXPECT_TRUE(Eventually([&] { return HttpStatus(op.port(), "/healthz") == 200; },
                         std::chrono::seconds(15), std::chrono::milliseconds(100)))
      << Health(op.port()) << op.Log();
  EXPECT_NE(op.Log().find("healthy again"), std::string::npos) << op.Log();
  Kubectl("delete tpujob hz -n " + ns.name());
  DeleteTpuNodes(prefix);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
