// `kubectl tpujob` end to end: the real kubectl finds the plugin on the PATH (the build
// directory's kubectl-tpujob link) and shows, on a real control plane with the operator running,
// the queue in order with why each job waits, and a job's faults and pods.

#include <gtest/gtest.h>
#include <unistd.h>

#include <iostream>
#include <string>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

std::string BuildDir() {
  const std::string binary = TPUJOB_OPERATOR_BINARY;
  return binary.substr(0, binary.rfind('/'));
}

// `kubectl ARGS` with the build directory first on the PATH, as a user who installed the plugin,
// and the cluster in $KUBECONFIG (kubectl takes no flags before a plugin's name).
CommandResult KubectlWithPlugin(const std::string& args) {
  return RunCommand("KUBECONFIG=" + KubeconfigPath() + " PATH=" + BuildDir() + ":$PATH " +
                        ToolsBin() + "/kubectl " + args,
                    true);
}

TEST(KubectlPluginE2E, ListsTheQueueInOrderAndDescribesFaultsAndWhyAJobWaits) {
  InstallCrd();
  TestNamespace ns("plugin");
  static int counter = 0;
  const std::string prefix = "kp" + std::to_string(::getpid() % 10000) + std::to_string(++counter);
  const std::string accelerator = "tpu-" + prefix;
  struct Nodes {
    std::string prefix;
    ~Nodes() { DeleteTpuNodes(prefix); }
  } nodes{prefix};
  CreateTpuNodes(prefix, 1, accelerator, "2x2", "pool-" + prefix);  // room for one job
  OperatorProcess op({"--namespace", ns.name()});

  const auto found = KubectlWithPlugin("plugin list");
  EXPECT_NE(found.output.find(BuildDir() + "/kubectl-tpujob"), std::string::npos) << found.output;

  // Of a higher priority than the two queued below, which therefore wait rather than preempt it.
  ASSERT_EQ(
      ApplyYaml(ns.name(), JobYaml("run", 1, "2x2", "  priority: 20\n", false, "", accelerator))
          .exit_code,
      0);
  ASSERT_TRUE(
      JobFieldBecomes(ns.name(), "run", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  // A worker fails with a retryable code and is restarted in place: a fault on record.
  ASSERT_EQ(TerminatePod(ns.name(), "run-worker-0", 143, "Error", "lost the collective").exit_code,
            0);
  ASSERT_TRUE(Eventually([&] { return !JobField(ns.name(), "run", "{.status.faults}").empty(); },
                         std::chrono::seconds(30)))
      << op.Log();
  for (const auto& [name, priority] : {std::pair<const char*, int>{"low", 1}, {"high", 10}}) {
    ASSERT_EQ(ApplyYaml(ns.name(),
                        JobYaml(name, 1, "2x2", "  priority: " + std::to_string(priority) + "\n",
                                false, "", accelerator))
                  .exit_code,
              0);
  }
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "high", "{.status.queuePosition}", "1")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "low", "{.status.queuePosition}", "2")) << op.Log();

  const auto list = KubectlWithPlugin("tpujob list -n " + ns.name());
  std::cout << "== kubectl tpujob list\n" << list.output;
  ASSERT_EQ(list.exit_code, 0) << list.output;
  const size_t high = list.output.find("high");
  const size_t low = list.output.find("low");
  const size_t run = list.output.find("run ");
  ASSERT_NE(high, std::string::npos) << list.output;
  EXPECT_LT(high, low) << list.output;
  EXPECT_LT(low, run) << list.output;
  EXPECT_NE(list.output.find("QUEUE (2 waiting, next first)"), std::string::npos) << list.output;
  const std::string why =
      JobField(ns.name(), "high", "{.status.conditions[?(@.type==\"Admitted\")].message}");
  ASSERT_FALSE(why.empty());
  EXPECT_NE(list.output.find(why), std::string::npos) << why << "\n" << list.output;

  const auto waiting = KubectlWithPlugin("tpujob describe high -n " + ns.name());
  std::cout << "== kubectl tpujob describe high\n" << waiting.output;
  ASSERT_EQ(waiting.exit_code, 0) << waiting.output;
  EXPECT_NE(waiting.output.find("Position:"), std::string::npos) << waiting.output;
  EXPECT_NE(waiting.output.find("1 (1 = next)"), std::string::npos) << waiting.output;
  EXPECT_NE(waiting.output.find(why), std::string::npos) << waiting.output;

  const auto running = KubectlWithPlugin("tpujob describe run -n " + ns.name());
  std::cout << "== kubectl tpujob describe run\n" << running.output;
  ASSERT_EQ(running.exit_code, 0) << running.output;
  for (const std::string& want :
       {std::string("Running"), std::string("ContainerFailed"), std::string("RestartWorker"),
        std::string("run-worker-0"), prefix + "-0", std::string("143")}) {
    EXPECT_NE(running.output.find(want), std::string::npos) << want << "\n" << running.output;
  }
  EXPECT_EQ(running.output.find("Why it waits"), std::string::npos) << running.output;

  const auto missing = KubectlWithPlugin("tpujob describe nope -n " + ns.name());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(
      missing.output.find("Error from server (NotFound): tpujobs.tpujob.dev \"nope\" not found"),
      std::string::npos)
      << missing.output;
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
