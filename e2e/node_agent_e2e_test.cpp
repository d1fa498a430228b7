// The periodic hardware check (`tpujob-operator node-agent`, docs/node-agent.md) end to end: the
// agent runs as a process against the real control plane for a KWOK TPU node, with a directory of
// plain files standing in for the host's /dev. A device that goes missing sets the node condition
// TPUUnhealthy within one interval; the operator cordons the node and re-issues the job running
// there; the device back clears the condition after --pass-after rounds, and the operator's
// automatic uncordon lifts the cordon. The agent also runs with the token of a ServiceAccount that
// may only patch nodes/status (without list and watch on pods it warns once and keeps its periodic
// rounds), and the Helm chart's DaemonSet and RBAC are rendered and installed.
// Every assertion reads the cluster through kubectl (and the API server's audit log).

#include <gtest/gtest.h>
#include <signal.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using SteadyClock = std::chrono::steady_clock;

const std::string kChart = std::string(TPUJOB_SOURCE_DIR) + "/charts/tpujob-operator";
constexpr const char* kCondition = "TPUUnhealthy";

// The agent's condition on `node`: "<status> <reason>", "" while absent.
std::string AgentCondition(const std::string& node) {
  return NodeField(node, std::string("{.status.conditions[?(@.type==\"") + kCondition +
                             "\")].status} {.status.conditions[?(@.type==\"" + kCondition +
                             "\")].reason}");
}
std::string AgentConditionField(const std::string& node, const std::string& field) {
  return NodeField(
      node, std::string("{.status.conditions[?(@.type==\"") + kCondition + "\")]." + field + "}");
}

// Waits until the agent's condition on `node` reads `want` ("True AcceleratorMissing").
::testing::AssertionResult ConditionBecomes(const std::string& node, const std::string& want,
                                            std::chrono::milliseconds timeout,
                                            const std::string& log) {
  std::string last;
  if (Eventually([&] { return (last = AgentCondition(node)) == want; }, timeout,
                 std::chrono::milliseconds(50))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "condition " << kCondition << " of " << node << " is \""
                                       << last << "\", want \"" << want << "\"\n"
                                       << Kubectl("get node " + node + " -o yaml").output << log;
}

// A directory of plain files standing in for a host's /dev with `chips` TPU chips (accel<N>),
// plus device nodes that are not chips.
std::string FakeDev(const std::string& name, int chips) {
  const std::filesystem::path dir = ClusterDir() + "/node-agent-" + name + "/dev";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "vfio");
  for (int i = 0; i < chips; ++i) std::ofstream(dir / ("accel" + std::to_string(i)));
  for (const char* other : {"null", "zero", "vfio/vfio"}) std::ofstream(dir / other);
  return dir.string();
}

// `tpujob-operator node-agent` as a child process, logging where the check of every operator log
// line reads it.
class AgentProcess : public ChildProcess {
 public:
  AgentProcess(const std::string& kubeconfig, const std::string& node, const std::string& dev,
               std::vector<std::string> extra_args = {})
      : ChildProcess(Args(kubeconfig, node, dev, std::move(extra_args)), LogPath()) {}
  std::string Describe() const { return "agent: " + command_line() + "\n" + Log(); }

  static std::vector<std::string> Args(const std::string& kubeconfig, const std::string& node,
                                       const std::string& dev, std::vector<std::string> extra) {
    std::vector<std::string> args = {
        TPUJOB_OPERATOR_BINARY, "node-agent", "--kubeconfig", kubeconfig,
        "--node-name",          node,         "--dev-root",   dev};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  static std::string LogPath() {
    static int counter = 0;
    return ClusterDir() + "/operator-node-agent-" + std::to_string(::getpid()) + "-" +
           std::to_string(++counter) + ".log";
  }
};

// Waits for the agent's first round (the node healthy) and for its watch of the node's pods.
void AwaitHealthyAndWatching(const std::string& node, const AgentProcess& agent) {
  ASSERT_TRUE(
      ConditionBecomes(node, "False HardwareHealthy", std::chrono::seconds(10), agent.Describe()));
  ASSERT_TRUE(Eventually(
      [&] { return agent.Log().find("msg=\"watching the node's pods\"") != std::string::npos; },
      std::chrono::seconds(10)))
      << agent.Describe();
}

// `node-agent --once`: its exit code and log.
CommandResult RunOnce(const std::string& kubeconfig, const std::string& node,
                      const std::string& dev) {
  std::string command;
  for (const std::string& arg : AgentProcess::Args(kubeconfig, node, dev, {"--once"})) {
    command += "'" + arg + "' ";
  }
  const std::string log = AgentProcess::LogPath();
  CommandResult result = RunCommand(command + "> " + log + " 2>&1");
  result.output = ReadFile(log);
  return result;
}

// The writes the API server's audit log holds from the agent for `node` (its User-Agent is
// "tpujob-operator/<version> (node-agent <node>)"), one JSON event each.
std::vector<nlohmann::json> AgentWrites(const std::string& node) {
  std::vector<nlohmann::json> writes;
  std::ifstream in(ClusterDir() + "/logs/audit.log");
  const std::string tag = "(node-agent " + node + ")";
  for (std::string line; std::getline(in, line);) {
    if (line.find(tag) == std::string::npos) continue;
    const auto event = nlohmann::json::parse(line, nullptr, false);
    if (event.is_object() && event.value("userAgent", "").ends_with(tag)) writes.push_back(event);
  }
  return writes;
}

class NodeAgentE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }

  // Three fresh nodes (4 google.com/tpu each) with an accelerator name of their own.
  void SetUp() override {
    static int counter = 0;
    prefix_ = "na" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
    CreateTpuNodes(prefix_, 3, accelerator_, "2x4", "pool-" + prefix_);
  }
  void TearDown() override { DeleteTpuNodes(prefix_); }

  // Applies a 2-worker job with re-issues (and pre-flight) on and waits until it runs.
  void RunJob(const std::string& ns, const OperatorProcess& op, const std::string& name,
              const std::string& extra_spec = "") {
    ASSERT_EQ(ApplyYaml(ns, JobYaml(name, 2, "2x4", extra_spec, false,
                                    "fault-tolerance/job-retry-num: \"2\"", accelerator_))
                  .exit_code,
              0);
    ASSERT_TRUE(JobFieldBecomes(ns, name, "{.status.phase}", "Running")) << op.Log();
  }

  std::string prefix_;
  std::string accelerator_;
};

TEST_F(NodeAgentE2E, MissingDeviceCordonsTheNodeReissuesTheJobAndTheRestoredDeviceUncordonsIt) {
  TestNamespace ns("na-dev");
  constexpr int kHealthySeconds = 2;
  OperatorProcess op({"--namespace", ns.name(), "--max-cordoned-fraction", "1",
                      "--auto-uncordon-after", std::to_string(kHealthySeconds)});
  ASSERT_NO_FATAL_FAILURE(RunJob(ns.name(), op, "nd"));
  const std::string node = NodeOf(ns.name(), "nd-worker-0");
  ASSERT_FALSE(node.empty());
  EXPECT_EQ(NodeField(node, "{.status.capacity.google\\.com/tpu}"), "4");

  const std::string dev = FakeDev(prefix_, 4);
  const int health_port = FreePort();
  AgentProcess agent(KubeconfigPath(), node, dev,
                     {"--interval", "1", "--pass-after", "3", "--health-address",
                      "127.0.0.1:" + std::to_string(health_port)});
  ASSERT_TRUE(
      ConditionBecomes(node, "False HardwareHealthy", std::chrono::seconds(10), agent.Describe()));
  // Its status written a moment ago: alive.
  EXPECT_EQ(HttpStatus(health_port, "/healthz"), 200) << agent.Describe();
  EXPECT_EQ(AgentConditionField(node, "message"), "4 of 4 TPU devices present under " + dev);
  // A healthy report changes nothing.
  EXPECT_EQ(JobField(ns.name(), "nd", "{.status.attempt}"), "1");
  EXPECT_EQ(NodeField(node, "{.spec.unschedulable}"), "");

  // A chip disappears: True at the next round, within one interval (1 s) plus a request.
  std::filesystem::remove(dev + "/accel3");
  const auto removed = SteadyClock::now();
  ASSERT_TRUE(
      ConditionBecomes(node, "True AcceleratorMissing", std::chrono::seconds(5), agent.Describe()));
  EXPECT_LT(SteadyClock::now() - removed, std::chrono::seconds(3));
  EXPECT_EQ(AgentConditionField(node, "message"),
            "3 of 4 TPU devices present under " + dev + " (accel<N>: 3, vfio/<N>: 0)");

  // The operator: cordon and re-issue.
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "nd", "{.status.attempt}", "2")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "nd", "{.status.faults[0].kind}/{.status.faults[0].action}"),
            "NodeUnhealthy/ReissueJob");
  EXPECT_EQ(JobField(ns.name(), "nd", "{.status.faults[0].node}"), node);
  EXPECT_EQ(JobField(ns.name(), "nd", "{.status.faults[0].message}"),
            "node " + node + " reports TPUUnhealthy: 3 of 4 TPU devices present under " + dev +
                " (accel<N>: 3, vfio/<N>: 0)");
  EXPECT_EQ(JobField(ns.name(), "nd", "{.status.jobRetries}"), "1");
  ASSERT_TRUE(Eventually([&] { return NodeField(node, "{.spec.unschedulable}") == "true"; }))
      << op.Log();
  EXPECT_EQ(NodeField(node, "{.spec.taints[?(@.key==\"tpujob.dev/faulty\")].effect}"),
            "NoSchedule");
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "nd", "{.status.phase}", "Running")) << op.Log();
  for (const char* pod : {"nd-worker-0", "nd-worker-1"}) {
    EXPECT_NE(NodeOf(ns.name(), pod), node) << pod;
  }

  // While it stays True the heartbeat moves and the transition time stays.
  const std::string set_at = AgentConditionField(node, "lastTransitionTime");
  const std::string beat = AgentConditionField(node, "lastHeartbeatTime");
  ASSERT_TRUE(Eventually([&] { return AgentConditionField(node, "lastHeartbeatTime") != beat; },
                         std::chrono::seconds(5)))
      << agent.Describe();
  EXPECT_EQ(AgentConditionField(node, "lastTransitionTime"), set_at);
  EXPECT_EQ(AgentCondition(node), "True AcceleratorMissing");

  // The chip comes back: still True while passing rounds accumulate, False at the third.
  std::ofstream(dev + "/accel3");
  const auto restored = SteadyClock::now();
  ASSERT_TRUE(
      ConditionBecomes(node, "True HardwareRecovering", std::chrono::seconds(5), agent.Describe()));
  EXPECT_EQ(NodeField(node, "{.spec.unschedulable}"), "true");
  ASSERT_TRUE(
      ConditionBecomes(node, "False HardwareHealthy", std::chrono::seconds(10), agent.Describe()));
  const auto cleared_after = SteadyClock::now() - restored;
  // Three passing rounds one interval apart: at least two intervals after the first of them.
  EXPECT_GE(cleared_after, std::chrono::milliseconds(1500));
  EXPECT_NE(AgentConditionField(node, "lastTransitionTime"), set_at);

  // Auto-uncordon once the condition has been False for the healthy period.
  ASSERT_TRUE(Eventually([&] { return NodeField(node, "{.spec.unschedulable}").empty(); },
                         std::chrono::seconds(30)))
      << op.Log();
  EXPECT_EQ(NodeField(node, "{.spec.taints[?(@.key==\"tpujob.dev/faulty\")].effect}"), "");
  EXPECT_EQ(NodeField(node, "{.spec.taints[?(@.key==\"google.com/tpu\")].effect}"), "NoSchedule");
  EXPECT_EQ(JobField(ns.name(), "nd", "{.status.attempt}"), "2");

  const std::string log = agent.Log();
  EXPECT_NE(log.find("msg=\"read the node\" node=" + node + " tpu_capacity=4"), std::string::npos)
      << log;
  EXPECT_NE(log.find("level=warning msg=\"node check failed\" node=" + node + " item=accelerator"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("msg=\"condition set\""), std::string::npos) << log;
  EXPECT_NE(log.find("msg=\"condition cleared\""), std::string::npos) << log;
  EXPECT_EQ(log.find("level=error"), std::string::npos) << log;

  // SIGTERM stops it promptly and cleanly.
  const auto stopping = SteadyClock::now();
  EXPECT_EQ(agent.StopWith(SIGTERM), 0);
  EXPECT_LT(SteadyClock::now() - stopping, std::chrono::seconds(5));
  EXPECT_NE(ReadFile(agent.log_path()).find("msg=\"node agent stopped\""), std::string::npos);
}

// A restarted agent starts from the condition on the node: True needs --pass-after passes.
// On real hosts a dying chip usually kills the program before any check sees it. The agent
// watches the pods of its node: a worker's exit 1 while a device is missing runs a round at
// once (its interval here is 10 minutes, its --fail-after 3), which sets the condition True in
// one round; within the fault attribution window the operator takes the exit as the
// hardware's: the node is cordoned and the job re-issued, not failed.
TEST_F(NodeAgentE2E, AWorkerExitRunsTheCheckAtOnceAndTheExitIsTheHardwares) {
  TestNamespace ns("na-exit");
  OperatorProcess op({"--namespace", ns.name(), "--max-cordoned-fraction", "1"});
  ASSERT_NO_FATAL_FAILURE(RunJob(ns.name(), op, "ex"));
  const std::string node = NodeOf(ns.name(), "ex-worker-1");
  ASSERT_FALSE(node.empty());
  const std::string dev = FakeDev(prefix_, 4);
  AgentProcess agent(KubeconfigPath(), node, dev, {"--interval", "600", "--fail-after", "3"});
  ASSERT_NO_FATAL_FAILURE(AwaitHealthyAndWatching(node, agent));

  // The chip dies: no periodic round for 10 minutes, so nothing is written yet.
  std::filesystem::remove(dev + "/accel3");
  ASSERT_EQ(TerminatePod(ns.name(), "ex-worker-1", 1, "Error", "libtpu: TPU chip halted").exit_code,
            0);
  const auto exited = SteadyClock::now();
  ASSERT_TRUE(ConditionBecomes(node, "True AcceleratorMissing", std::chrono::seconds(10),
                               agent.Describe()));
  const auto verdict_after = SteadyClock::now() - exited;
  const std::string message = AgentConditionField(node, "message");
  EXPECT_NE(message.find("checked at once after container trainer of pod " + ns.name() +
                         "/ex-worker-1 exited with code 1"),
            std::string::npos)
      << message;
  EXPECT_NE(agent.Log().find("msg=\"worker exited, checking the node now\""), std::string::npos)
      << agent.Describe();
  std::printf(
      "[ measured ] worker exit -> %s=True written by the agent's immediate round: %.2f s "
      "(its interval: 600 s)\n",
      kCondition, std::chrono::duration<double>(verdict_after).count());

  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ex", "{.status.attempt}", "2")) << op.Log();
  EXPECT_NE(JobField(ns.name(), "ex", "{.status.phase}"), "Failed");
  EXPECT_EQ(
      JobField(ns.name(), "ex",
               "{.status.faults[0].kind}/{.status.faults[0].node}/{.status.faults[0].action}"),
      "NodeUnhealthy/" + node + "/ReissueJob");
  // The agent's verdict follows the exit so closely that the operator may see the node's
  // condition before the pod's exit (two watches): the record names the exit when it saw both.
  const std::string exit_code = JobField(ns.name(), "ex", "{.status.faults[0].exitCode}");
  EXPECT_TRUE(exit_code == "1" || exit_code.empty()) << exit_code;
  EXPECT_EQ(JobField(ns.name(), "ex", "{.status.faults[1].kind}"), "");  // one fault, one retry
  EXPECT_EQ(JobField(ns.name(), "ex", "{.status.jobRetries}"), "1");
  ASSERT_TRUE(Eventually([&] { return NodeField(node, "{.spec.unschedulable}") == "true"; }))
      << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ex", "{.status.phase}", "Running")) << op.Log();
  for (const char* pod : {"ex-worker-0", "ex-worker-1"}) {
    EXPECT_NE(NodeOf(ns.name(), pod), node) << pod;
  }
}

// The same exit on a node whose devices are all there: the agent's immediate round passes,
// the node stays healthy, and at the end of the window (here 5 s) the job fails for the
// user's reason.
TEST_F(NodeAgentE2E, AWorkerExitOnAHealthyNodeFailsTheJobAtTheEndOfTheWindow) {
  TestNamespace ns("na-exit-ok");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_NO_FATAL_FAILURE(
      RunJob(ns.name(), op, "ok", "  faultTolerance: {faultAttributionSeconds: 5}\n"));
  const std::string node = NodeOf(ns.name(), "ok-worker-1");
  const std::string dev = FakeDev(prefix_, 4);
  AgentProcess agent(KubeconfigPath(), node, dev, {"--interval", "600"});
  ASSERT_NO_FATAL_FAILURE(AwaitHealthyAndWatching(node, agent));
  // Taken before the exit is written: kubectl's own latency is not the operator's haste.
  const auto exited = SteadyClock::now();
  ASSERT_EQ(TerminatePod(ns.name(), "ok-worker-1", 1, "Error", "ValueError: bad batch").exit_code,
            0);
  // The immediate round ran and passed.
  ASSERT_TRUE(Eventually(
      [&] {
        return AgentConditionField(node, "message")
                   .find(
                       "checked at once after container "
                       "trainer of pod " +
                       ns.name() + "/ok-worker-1") != std::string::npos;
      },
      std::chrono::seconds(10)))
      << agent.Describe();
  EXPECT_EQ(AgentCondition(node), "False HardwareHealthy");
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ok", "{.status.phase}", "Failed")) << op.Log();
  const auto decided = SteadyClock::now() - exited;
  EXPECT_GE(decided, std::chrono::seconds(4)) << "failed before the node had its window";
  EXPECT_EQ(JobField(ns.name(), "ok", "{.status.conditions[?(@.type==\"Failed\")].reason}"),
            "PermanentError");
  EXPECT_EQ(NodeField(node, "{.spec.unschedulable}"), "");
  std::printf(
      "[ measured ] exit 1 on a healthy node with the agent, window 5 s: Failed after "
      "%.2f s\n",
      std::chrono::duration<double>(decided).count());
}

TEST_F(NodeAgentE2E, RestartedAgentKeepsATrueConditionUntilPassAfterPasses) {
  const std::string node = prefix_ + "-1";
  const std::string dev = FakeDev(prefix_ + "-restart", 3);
  const CommandResult failed = RunOnce(KubeconfigPath(), node, dev);
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  ASSERT_EQ(AgentCondition(node), "True AcceleratorMissing") << failed.output;

  std::ofstream(dev + "/accel3");
  const CommandResult first = RunOnce(KubeconfigPath(), node, dev);
  EXPECT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("tpu_capacity=4 condition=TPUUnhealthy status=True"),
            std::string::npos)
      << first.output;
  EXPECT_EQ(AgentCondition(node), "True HardwareRecovering");
  // Each --once run is a restart: it starts from True again, one pass never reaches three.
  EXPECT_EQ(RunOnce(KubeconfigPath(), node, dev).exit_code, 0);
  EXPECT_EQ(AgentCondition(node), "True HardwareRecovering");

  AgentProcess agent(KubeconfigPath(), node, dev, {"--interval", "1", "--pass-after", "2"});
  ASSERT_TRUE(
      ConditionBecomes(node, "False HardwareHealthy", std::chrono::seconds(10), agent.Describe()));
  // KWOK's heartbeats keep Ready and leave the agent's condition alone.
  EXPECT_EQ(NodeField(node, "{.status.conditions[?(@.type==\"Ready\")].status}"), "True");
}

// Least privilege: a ServiceAccount bound to a ClusterRole with only `patch` on `nodes/status`
// is enough for the checks; the agent reads the node's capacity from the answers to its patches.
// Without `list` and `watch` on pods (an older ClusterRole) it cannot watch the node's pods: it
// says so once and keeps its periodic rounds.
TEST_F(NodeAgentE2E, RunsWithOnlyPatchOnNodesStatus) {
  TestNamespace ns("na-rbac");
  const std::string account = "node-agent";
  const std::string role = "tpujob-e2e-" + ns.name();
  struct Cleanup {
    std::string role;
    ~Cleanup() { Kubectl("delete clusterrole,clusterrolebinding " + role + " --wait=false"); }
  } cleanup{role};
  ASSERT_EQ(Kubectl("create serviceaccount " + account + " -n " + ns.name()).exit_code, 0);
  const auto created =
      Kubectl("create clusterrole " + role + " --verb=patch --resource=nodes/status");
  ASSERT_EQ(created.exit_code, 0) << created.output;
  ASSERT_EQ(Kubectl("create clusterrolebinding " + role + " --clusterrole=" + role +
                    " --serviceaccount=" + ns.name() + ":" + account)
                .exit_code,
            0);
  const std::string rules =
      Trim(Kubectl("get clusterrole " + role + " -o jsonpath='{.rules}'", false).output);
  EXPECT_EQ(nlohmann::json::parse(rules, nullptr, false),
            nlohmann::json::parse(R"([{"apiGroups":[""],"resources":["nodes/status"],)"
                                  R"("verbs":["patch"]}])"))
      << rules;

  // A token kubeconfig for the ServiceAccount, as a pod would have it.
  const std::string kubeconfig = ServiceAccountKubeconfig(ns.name(), account);
  ASSERT_FALSE(kubeconfig.empty());
  const std::string as = ToolsBin() + "/kubectl --kubeconfig " + kubeconfig + " ";
  const std::string node = prefix_ + "-2";
  // The account can do nothing else with nodes.
  EXPECT_EQ(Trim(RunCommand(as + "auth can-i patch nodes --subresource=status", false).output),
            "yes");
  for (const char* verb : {"get", "list", "watch", "patch", "update"}) {
    EXPECT_EQ(Trim(RunCommand(as + "auth can-i " + verb + " nodes", false).output), "no") << verb;
  }
  EXPECT_NE(RunCommand(as + "get node " + node).exit_code, 0);

  const std::string dev = FakeDev(prefix_ + "-rbac", 4);
  const CommandResult passed = RunOnce(kubeconfig, node, dev);
  EXPECT_EQ(passed.exit_code, 0) << passed.output;
  EXPECT_NE(passed.output.find("tpu_capacity=4 condition=TPUUnhealthy status=absent"),
            std::string::npos)
      << passed.output;
  EXPECT_EQ(AgentCondition(node), "False HardwareHealthy");
  EXPECT_EQ(AgentConditionField(node, "message"), "4 of 4 TPU devices present under " + dev);

  // With one chip fewer than the capacity it read, the condition turns True.
  std::filesystem::remove(dev + "/accel0");
  const CommandResult failed = RunOnce(kubeconfig, node, dev);
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_EQ(AgentCondition(node), "True AcceleratorMissing");
  EXPECT_NE(AgentConditionField(node, "message").find("3 of 4 TPU devices"), std::string::npos);
  for (const std::string& output : {passed.output, failed.output}) {
    EXPECT_EQ(output.find("orbidden"), std::string::npos) << output;
    EXPECT_EQ(output.find("level=error"), std::string::npos) << output;
  }

  // The API server's record: only patches of nodes/status, all answered 200, by this account.
  const std::vector<nlohmann::json> writes = AgentWrites(node);
  ASSERT_EQ(writes.size(), 4u) << "two runs, an empty patch and a condition patch each";
  for (const nlohmann::json& write : writes) {
    EXPECT_EQ(write.value("verb", ""), "patch") << write.dump();
    EXPECT_EQ(write["objectRef"].value("resource", ""), "nodes") << write.dump();
    EXPECT_EQ(write["objectRef"].value("subresource", ""), "status") << write.dump();
    EXPECT_EQ(write["objectRef"].value("name", ""), node) << write.dump();
    EXPECT_EQ(write["responseStatus"].value("code", 0), 200) << write.dump();
    EXPECT_EQ(write["user"].value("username", ""),
              "system:serviceaccount:" + ns.name() + ":" + account)
        << write.dump();
  }

  // The agent's loop with the same account: the pod watch is refused, the rounds go on.
  AgentProcess agent(kubeconfig, node, dev, {"--interval", "1"});
  ASSERT_TRUE(Eventually(
      [&] { return agent.Log().find("cannot watch the pods on this node") != std::string::npos; },
      std::chrono::seconds(10)))
      << agent.Describe();
  for (int round = 0; round < 3; ++round) {
    const std::string beat = AgentConditionField(node, "lastHeartbeatTime");
    ASSERT_TRUE(Eventually([&] { return AgentConditionField(node, "lastHeartbeatTime") != beat; },
                           std::chrono::seconds(5)))
        << round << "\n"
        << agent.Describe();
  }
  EXPECT_EQ(AgentCondition(node), "True AcceleratorMissing");
  EXPECT_EQ(agent.StopWith(SIGTERM), 0);
  const std::string log = agent.Log();
  // One warning naming what is missing (the failing rounds warn too, each), nothing at error
  // level.
  size_t warnings = 0;
  for (size_t at = log.find("cannot watch the pods"); at != std::string::npos;
       at = log.find("cannot watch the pods", at + 1)) {
    ++warnings;
  }
  EXPECT_EQ(warnings, 1u) << log;
  EXPECT_NE(log.find("level=warning msg=\"cannot watch the pods on this node: the agent's account "
                     "lacks list and watch on pods in all namespaces; checking every interval "
                     "only\" node=" +
                     node + " denied=\"list pods\" error=\"403 Forbidden"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("level=error"), std::string::npos) << log;
  // Its writes are still only patches of the node's status.
  for (const nlohmann::json& write : AgentWrites(node)) {
    EXPECT_EQ(write["objectRef"].value("resource", ""), "nodes") << write.dump();
    EXPECT_EQ(write["objectRef"].value("subresource", ""), "status") << write.dump();
  }
}

// A device directory that does not exist is the agent's configuration at fault: the condition is
// left alone and --once exits 2. Invalid flags exit 2 before any request.
TEST_F(NodeAgentE2E, UnmeasurableDevicesAndInvalidFlagsLeaveTheConditionAlone) {
  const std::string node = prefix_ + "-0";
  const CommandResult missing = RunOnce(KubeconfigPath(), node, ClusterDir() + "/no-such-dev");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("does not exist"), std::string::npos) << missing.output;
  EXPECT_EQ(AgentCondition(node), "");

  const auto invalid = RunCommand(std::string(TPUJOB_OPERATOR_BINARY) + " node-agent --node-name " +
                                  node + " --interval 0 --checks dns --pass-after 0");
  EXPECT_EQ(invalid.exit_code, 2) << invalid.output;
  for (const char* flag : {"--interval=0", "--checks=\\\"dns\\\"", "--pass-after=0"}) {
    EXPECT_NE(invalid.output.find(flag), std::string::npos) << flag << "\n" << invalid.output;
  }
  const auto nameless =
      RunCommand("env -u NODE_NAME " + std::string(TPUJOB_OPERATOR_BINARY) + " node-agent --once");
  EXPECT_EQ(nameless.exit_code, 2) << nameless.output;
  EXPECT_NE(nameless.output.find("--node-name: required"), std::string::npos) << nameless.output;
}

// ---------------------------------------------------------------------------------------------
// The Helm chart's node agent

// The rendered documents of the node agent (component node-agent), by kind.
std::map<std::string, YAML::Node> RenderAgent(const std::string& values) {
  const auto rendered = Helm("template agent " + kChart + " -n ops " + values, false);
  EXPECT_EQ(rendered.exit_code, 0) << rendered.output;
  std::map<std::string, YAML::Node> by_kind;
  try {
    for (const YAML::Node& doc : YAML::LoadAll(rendered.output)) {
      if (!doc.IsMap() || !doc["metadata"]["labels"]) continue;
      const YAML::Node component = doc["metadata"]["labels"]["app.kubernetes.io/component"];
      if (component && component.as<std::string>() == "node-agent") {
        by_kind[doc["kind"].as<std::string>()] = doc;
      }
    }
  } catch (const YAML::Exception& e) {
    ADD_FAILURE() << e.what() << "\n" << rendered.output;
  }
  return by_kind;
}

// A rendered YAML node as JSON, every scalar a string ("true", "60"), for whole-value
// comparisons.
nlohmann::json ToJson(const YAML::Node& node) {
  if (node.IsMap()) {
    nlohmann::json object = nlohmann::json::object();
    for (const auto& entry : node) object[entry.first.as<std::string>()] = ToJson(entry.second);
    return object;
  }
  if (node.IsSequence()) {
    nlohmann::json array = nlohmann::json::array();
    for (const auto& item : node) array.push_back(ToJson(item));
    return array;
  }
  if (node.IsScalar()) return node.as<std::string>();
  return nullptr;
}

TEST(NodeAgentChartE2E, DaemonSetRendersWithTheAffinityTheHostPathAndLeastPrivilege) {
  auto docs = RenderAgent("");
  ASSERT_EQ(docs.size(), 4u) << "DaemonSet, ServiceAccount, ClusterRole, ClusterRoleBinding";
  const YAML::Node ds = docs["DaemonSet"];
  ASSERT_TRUE(ds) << "no DaemonSet";
  EXPECT_EQ(ds["metadata"]["namespace"].as<std::string>(), "ops");
  const nlohmann::json pod = ToJson(ds["spec"]["template"]["spec"]);
  // TPU nodes only, whatever the accelerator.
  EXPECT_EQ(pod["affinity"], nlohmann::json::parse(R"({"nodeAffinity": {
      "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions":
        [{"key": "cloud.google.com/gke-tpu-accelerator", "operator": "Exists"}]}]}}})"))
      << pod.dump(2);
  EXPECT_EQ(pod["volumes"], nlohmann::json::parse(R"([{"name": "host-dev",
      "hostPath": {"path": "/dev", "type": "Directory"}}])"))
      << pod.dump(2);
  EXPECT_EQ(pod["serviceAccountName"], "agent-tpujob-operator-node-agent");
  EXPECT_EQ(pod["securityContext"]["runAsNonRoot"], "true");
  EXPECT_EQ(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
  ASSERT_EQ(pod["containers"].size(), 1u);
  const nlohmann::json& container = pod["containers"][0];
  EXPECT_TRUE(container.value("image", "").starts_with("tpujob-operator:")) << container.dump();
  EXPECT_EQ(container["volumeMounts"], nlohmann::json::parse(R"([{"name": "host-dev",
      "mountPath": "/host/dev", "readOnly": "true"}])"));
  EXPECT_EQ(container["args"], nlohmann::json::parse(R"(["node-agent", "--dev-root=/host/dev",
      "--interval=60", "--checks=accelerator", "--condition-type=TPUUnhealthy", "--fail-after=1",
      "--pass-after=3", "--log-level=info", "--health-address=:8082"])"));
  EXPECT_EQ(container["env"], nlohmann::json::parse(R"([{"name": "NODE_NAME",
      "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}])"));
  EXPECT_EQ(container["livenessProbe"]["httpGet"],
            nlohmann::json::parse(R"({"path": "/healthz", "port": "health"})"));
  EXPECT_EQ(container["securityContext"], nlohmann::json::parse(R"({
      "allowPrivilegeEscalation": "false", "capabilities": {"drop": ["ALL"]},
      "readOnlyRootFilesystem": "true", "runAsNonRoot": "true", "runAsUser": "65532",
      "seccompProfile": {"type": "RuntimeDefault"}})"));
  EXPECT_EQ(pod["tolerations"], nlohmann::json::parse(R"([
      {"effect": "NoSchedule", "key": "google.com/tpu", "operator": "Exists"},
      {"effect": "NoSchedule", "key": "tpujob.dev/faulty", "operator": "Exists"}])"));

  // Patch on nodes/status, and list and watch on pods (the watch of the node's pods).
  EXPECT_EQ(ToJson(docs["ClusterRole"]["rules"]), nlohmann::json::parse(R"([
      {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
      {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}])"));
  EXPECT_EQ(ToJson(docs["ClusterRoleBinding"]["subjects"]),
            nlohmann::json::parse(R"([{"kind": "ServiceAccount",
                "name": "agent-tpujob-operator-node-agent", "namespace": "ops"}])"));
  EXPECT_EQ(docs["ClusterRoleBinding"]["roleRef"]["name"].as<std::string>(),
            docs["ClusterRole"]["metadata"]["name"].as<std::string>());

  // Values: another namespace for the agent, its own interval and hysteresis; or none at all.
  docs = RenderAgent(
      "--set nodeAgent.namespace=kube-system --set nodeAgent.intervalSeconds=10 "
      "--set nodeAgent.passAfter=5 --set nodeAgent.checks={accelerator,disk}");
  EXPECT_EQ(docs["DaemonSet"]["metadata"]["namespace"].as<std::string>(), "kube-system");
  EXPECT_EQ(docs["ServiceAccount"]["metadata"]["namespace"].as<std::string>(), "kube-system");
  EXPECT_EQ(docs["ClusterRoleBinding"]["subjects"][0]["namespace"].as<std::string>(),
            "kube-system");
  const std::string custom =
      ToJson(docs["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["args"]).dump();
  for (const char* arg : {"--interval=10", "--pass-after=5", "--checks=accelerator,disk"}) {
    EXPECT_NE(custom.find(arg), std::string::npos) << arg << " in " << custom;
  }
  EXPECT_TRUE(RenderAgent("--set nodeAgent.enabled=false").empty());

  // A condition the operator does not act on is refused; so is an unknown check.
  const auto ignored = Helm("template agent " + kChart + " --set nodeAgent.conditionType=Other");
  EXPECT_NE(ignored.exit_code, 0) << ignored.output;
  EXPECT_NE(ignored.output.find("operator.hardwareConditions"), std::string::npos)
      << ignored.output;
  EXPECT_EQ(Helm("template agent " + kChart +
                 " --set nodeAgent.conditionType=Other --set operator.hardwareConditions={Other}")
                .exit_code,
            0);
  EXPECT_NE(Helm("template agent " + kChart + " --set nodeAgent.checks={dns}").exit_code, 0);
  const auto lint = Helm("lint --strict " + kChart);
  EXPECT_EQ(lint.exit_code, 0) << lint.output;
}

// Installed: the operator in a namespace that enforces "restricted", the agent in a privileged one
// (nodeAgent.namespace). The DaemonSet runs on TPU nodes only, and its ServiceAccount may patch
// nodes/status and list and watch pods, nothing else. Left in the operator's restricted
// namespace, the hostPath volume is refused, as the chart's README says.
TEST_F(NodeAgentE2E, ChartInstallsTheAgentBesideARestrictedOperator) {
  TestNamespace ops("na-chart");
  TestNamespace agents("na-chart-agent");
  const auto labelled = Kubectl("label namespace " + ops.name() +
                                " pod-security.kubernetes.io/enforce=restricted"
                                " pod-security.kubernetes.io/enforce-version=latest"
                                " pod-security.kubernetes.io/warn=restricted");
  ASSERT_EQ(labelled.exit_code, 0) << labelled.output;
  const std::string cpu_node = prefix_ + "-cpu";
  CreateCpuNode(cpu_node);
  struct Uninstall {
    std::string ns;
    std::string cpu_node;
    ~Uninstall() {
      Helm("uninstall agent -n " + ns);
      Kubectl("delete node " + cpu_node + " --wait=false");
    }
  } uninstall{ops.name(), cpu_node};
  const auto installed =
      Helm("install agent " + kChart + " -n " + ops.name() +
           " --set nodeAgent.namespace=" + agents.name() + " --set replicaCount=1");
  ASSERT_EQ(installed.exit_code, 0) << installed.output;
  EXPECT_EQ(installed.output.find("PodSecurity"), std::string::npos) << installed.output;

  // A pod on each TPU node of this test (KWOK runs them), none on the CPU node.
  const std::string selector =
      "-l app.kubernetes.io/instance=agent,app.kubernetes.io/component=node-agent";
  for (int i = 0; i < 3; ++i) {
    const std::string node = prefix_ + "-" + std::to_string(i);
    EXPECT_TRUE(Eventually(
        [&] {
          return !Get(agents.name(), "pods " + selector + " --field-selector spec.nodeName=" + node,
                      "{.items[*].metadata.name}")
                      .empty();
        },
        std::chrono::seconds(60), std::chrono::milliseconds(200)))
        << node << "\n"
        << Kubectl("get ds,pods,events -n " + agents.name()).output;
  }
  EXPECT_EQ(Get(agents.name(), "pods " + selector + " --field-selector spec.nodeName=" + cpu_node,
                "{.items[*].metadata.name}"),
            "");
  EXPECT_EQ(
      Get(agents.name(), "events --field-selector reason=FailedCreate", "{.items[*].message}"), "");

  const std::string account =
      "system:serviceaccount:" + agents.name() + ":agent-tpujob-operator-node-agent";
  auto can = [&](const std::string& args) {
    const std::string out = Trim(Kubectl("auth can-i " + args + " --as=" + account).output);
    return out.substr(out.find_last_of('\n') == std::string::npos ? 0 : out.find_last_of('\n') + 1);
  };
  EXPECT_EQ(can("patch nodes --subresource=status"), "yes");
  EXPECT_EQ(can("list pods -A"), "yes");
  EXPECT_EQ(can("watch pods -A"), "yes");
  for (const std::string& denied :
       {std::string("get nodes"), std::string("list nodes"), std::string("patch nodes"),
        std::string("update nodes --subresource=status"), std::string("get pods -A"),
        std::string("delete pods -A"), std::string("patch pods -A"),
        "get secrets -n " + agents.name()}) {
    EXPECT_EQ(can(denied), "no") << denied;
  }

  // The same DaemonSet in the restricted namespace: the API server warns, and would refuse its
  // pods.
  TestNamespace restricted("na-chart-restricted");
  ASSERT_EQ(Kubectl("label namespace " + restricted.name() +
                    " pod-security.kubernetes.io/enforce=restricted"
                    " pod-security.kubernetes.io/warn=restricted")
                .exit_code,
            0);
  const auto rendered = Helm("template agent " + kChart + " -n " + restricted.name() +
                                 " --show-only templates/node-agent/daemonset.yaml",
                             false);
  ASSERT_EQ(rendered.exit_code, 0) << rendered.output;
  const std::string path = ClusterDir() + "/node-agent-ds-" + restricted.name() + ".yaml";
  std::ofstream(path) << rendered.output;
  const auto dry_run = Kubectl("apply --dry-run=server -f " + path);
  EXPECT_NE(dry_run.output.find("would violate PodSecurity"), std::string::npos) << dry_run.output;
  EXPECT_NE(dry_run.output.find("hostPath"), std::string::npos) << dry_run.output;
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
