// `kubectl tpujob run / wait / suspend / resume / list --status` through the real kubectl's
// plugin lookup, against a real control plane with two KWOK pools of a v5litepod-16 slice each
// (tpu-v5-lite-podslice, 4x4: 4 hosts of 4 chips). The plugin's `logs` needs pods that write
// logs, which KWOK's do not: it is tested on the real node (RealWorkerE2E).

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using nlohmann::json;
using std::chrono::seconds;

constexpr char kAccelerator[] = "tpu-v5-lite-podslice";

class KubectlTpujobE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }

  void SetUp() override {
    // The type's accelerator and topology are fixed, so no other suite's 4x4 v5e nodes (deleted
    // without waiting when it ended) may be left to be chosen instead of this test's pools.
    ASSERT_TRUE(Eventually(
        [] {
          return Trim(Kubectl("get nodes -o name -l cloud.google.com/gke-tpu-accelerator=" +
                                  std::string(kAccelerator) +
                                  ",cloud.google.com/gke-tpu-topology=4x4",
                              false)
                          .output)
              .empty();
        },
        seconds(60)));
    for (const char* set : {"cli-a", "cli-b"}) {
      CreateTpuNodes(set, 4, kAccelerator, "4x4", std::string("pool-") + set);
    }
  }
  void TearDown() override {
    for (const char* set : {"cli-a", "cli-b"}) DeleteTpuNodes(set);
  }

  static std::string Run(const std::string& ns, const std::string& args) {
    return "run -n " + ns + " " + args;  // before the command, which takes what follows `--`
  }
};

// `run` makes a two-slice job of 4 hosts per slice from the type name alone; its dry-run YAML
// applies unchanged and makes the same spec; `wait --for=completion` returns 0 once worker 0 of
// slice 0 exits 0, `wait --for=running` once the second job runs; `list --status` filters.
TEST_F(KubectlTpujobE2E, RunMakesATwoSliceJobFromTheTypeAndWaitReturnsZeroOnSuccess) {
  TestNamespace ns("cli-run");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  const std::string args = "--tpu-type v5litepod-16 --slices 2 --image busybox";

  const auto dry = KubectlTpujob(
      Run(n, "second " + args + " --dry-run=client -o yaml -- sh -c 'echo hi'"), false);
  ASSERT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_NE(Kubectl("get tpujob second -n " + n).exit_code, 0) << "a dry run created the job";

  const auto run = KubectlTpujob(Run(n, "demo " + args + " -- sh -c 'echo hi'"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("tpujob.tpujob.dev/demo created"), std::string::npos) << run.output;
  ASSERT_TRUE(JobFieldBecomes(n, "demo", "{.status.phase}", "Running", seconds(60))) << op.Log();

  // 8 pods, 4 on each of the two pools, running the command.
  const std::vector<std::string> pods = JobPods(n, "demo");
  EXPECT_EQ(pods.size(), 8u);
  std::map<std::string, int> per_pool;
  for (const std::string& pod : pods) {
    ++per_pool[NodeField(NodeOf(n, pod), "{.metadata.labels.cloud\\.google\\.com/gke-nodepool}")];
  }
  EXPECT_EQ(per_pool, (std::map<std::string, int>{{"pool-cli-a", 4}, {"pool-cli-b", 4}}));
  EXPECT_EQ(
      Get(n, "pod demo-worker-1-3",
          "{.spec.containers[0].image} {.spec.containers[0].command} {.spec.containers[0].args}"
          " {.spec.containers[0].resources.limits.google\\.com/tpu}"),
      "busybox [\"sh\"] [\"-c\",\"echo hi\"] 4");

  // The dry run's YAML, applied as it is, makes a job with the same spec (it waits: both pools
  // are taken).
  const std::string path = ClusterDir() + "/dry-run-" + n + ".yaml";
  std::ofstream(path) << dry.output;
  const auto applied = Kubectl("apply -n " + n + " -f " + path);
  ASSERT_EQ(applied.exit_code, 0) << applied.output << dry.output;
  EXPECT_EQ(JobJson(n, "second")["spec"], JobJson(n, "demo")["spec"]) << dry.output;

  BackgroundCommand wait_done(
      KubectlTpujobCommand("wait demo -n " + n + " --for=completion --timeout 2m"));
  EXPECT_FALSE(wait_done.ExitCode(seconds(2)))
      << "returned before the job ended: " << wait_done.Output();
  ASSERT_EQ(TerminatePod(n, "demo-worker-0-0", 0).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "demo", "{.status.phase}", "Succeeded")) << op.Log();
  EXPECT_EQ(wait_done.ExitCode(seconds(30)), 0) << wait_done.Output();

  // The second job gets the pools now.
  const auto running = KubectlTpujob("wait second -n " + n + " --for=running --timeout 90s");
  EXPECT_EQ(running.exit_code, 0) << running.output << op.Log();
  const auto list_running = KubectlTpujob("list -n " + n + " --status running", false);
  EXPECT_EQ(list_running.exit_code, 0) << list_running.output;
  EXPECT_NE(list_running.output.find("second"), std::string::npos) << list_running.output;
  EXPECT_EQ(list_running.output.find("demo"), std::string::npos) << list_running.output;
  const auto list_done = KubectlTpujob("list -n " + n + " --status Succeeded", false);
  EXPECT_NE(list_done.output.find("demo"), std::string::npos) << list_done.output;
  EXPECT_EQ(list_done.output.find("second"), std::string::npos) << list_done.output;
  const auto list_bad = KubectlTpujob("list -n " + n + " --status Done");
  EXPECT_EQ(list_bad.exit_code, 1) << list_bad.output;
  EXPECT_NE(list_bad.output.find("Succeeded"), std::string::npos) << list_bad.output;
  ExpectNothingLeftBehind(n, {"cli-a", "cli-b"});
}

// A permanent exit fails the job: `wait` returns 1 with the reason and the fault; a job that
// is still running when the timeout passes gives 2. An unknown type name is refused with the
// valid names of its generation.
TEST_F(KubectlTpujobE2E, WaitReturnsOneWithTheReasonOnFailureAndTwoOnTimeout) {
  TestNamespace ns("cli-wait");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  const auto refused = KubectlTpujob(Run(n, "bad --tpu-type v5litepod-12 --image busybox -- true"));
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("v5litepod-16"), std::string::npos) << refused.output;
  EXPECT_NE(Kubectl("get tpujob bad -n " + n).exit_code, 0);

  const auto run = KubectlTpujob(
      Run(n, "fails --tpu-type v5litepod-16 --image busybox --max-restarts 0 -- sh -c train"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_TRUE(JobFieldBecomes(n, "fails", "{.status.phase}", "Running", seconds(60))) << op.Log();
  const auto timed_out = KubectlTpujob("wait fails -n " + n + " --for=completion --timeout 1s");
  EXPECT_EQ(timed_out.exit_code, 2) << timed_out.output;

  // Decided at once instead of after the fault attribution window.
  ASSERT_EQ(
      Kubectl("patch tpujob fails -n " + n +
              " --type=merge -p '{\"spec\":{\"faultTolerance\":{\"faultAttributionSeconds\":0}}}'")
          .exit_code,
      0);
  ASSERT_EQ(TerminatePod(n, "fails-worker-2", 1, "Error", "Traceback: ValueError").exit_code, 0);
  const auto failed = KubectlTpujob("wait fails -n " + n + " --for=completion --timeout 60s");
  EXPECT_EQ(failed.exit_code, 1) << failed.output << op.Log();
  EXPECT_NE(failed.output.find("PermanentError"), std::string::npos) << failed.output;
  EXPECT_NE(failed.output.find("exited with code 1"), std::string::npos) << failed.output;
  EXPECT_NE(failed.output.find("fails-worker-2"), std::string::npos) << failed.output;
  EXPECT_EQ(JobField(n, "fails", "{.status.phase}"), "Failed");
  // Waiting for a finished job's running is over too: it never will run.
  EXPECT_EQ(KubectlTpujob("wait fails -n " + n + " --for=running --timeout 10s").exit_code, 1);
}

// `suspend` stops the job's pods and keeps it out of the queue; `resume` runs it again.
TEST_F(KubectlTpujobE2E, SuspendStopsTheJobAndResumeRunsItAgain) {
  TestNamespace ns("cli-suspend");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(
      KubectlTpujob(Run(n, "pause --tpu-type v5litepod-16 --image busybox -- sleep 1d")).exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(n, "pause", "{.status.phase}", "Running", seconds(60))) << op.Log();
  const auto suspend = KubectlTpujob("suspend pause -n " + n);
  EXPECT_EQ(suspend.exit_code, 0) << suspend.output;
  EXPECT_NE(suspend.output.find("suspended"), std::string::npos) << suspend.output;
  ASSERT_TRUE(JobFieldBecomes(n, "pause", "{.status.phase}", "Suspended")) << op.Log();
  EXPECT_TRUE(Eventually([&] { return JobPods(n, "pause").empty(); }, seconds(60)));
  const auto resume = KubectlTpujob("resume pause -n " + n);
  EXPECT_EQ(resume.exit_code, 0) << resume.output;
  EXPECT_TRUE(JobFieldBecomes(n, "pause", "{.status.phase}", "Running", seconds(60))) << op.Log();
  EXPECT_EQ(JobField(n, "pause", "{.spec.suspend}"), "false");
  EXPECT_NE(KubectlTpujob("suspend no-such-job -n " + n).exit_code, 0);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
