// Rows of the fault table (DESIGN.md section 4) end to end: the operator binary against a real
// control plane; faults are injected the way the cluster would report them (node taints,
// labels and conditions; pod status written as a kubelet would, with the real pre-flight
// report). Every assertion reads the cluster through kubectl.

#include <gtest/gtest.h>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace {

class FaultsE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }

  // Three fresh nodes per test, with an accelerator name of their own, so what one test does to
  // nodes (taints, conditions, cordons) never reaches another.
  void SetUp() override {
    static int counter = 0;
    prefix_ = "ft" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
    CreateTpuNodes(prefix_, 3, accelerator_, "2x4", "pool-" + prefix_);
  }
  void TearDown() override { DeleteTpuNodes(prefix_); }

  std::string Job(const std::string& name, const std::string& extra_spec = "",
                  const std::string& annotations = "fault-tolerance/job-retry-num: \"2\"") {
    return JobYaml(name, 2, "2x4", extra_spec, false, annotations, accelerator_);
  }
  // Nodes of this test the operator cordoned.
  std::string CordonedNodes() { return UnschedulableNodes(prefix_); }

  std::string prefix_;
  std::string accelerator_;
};

TEST_F(FaultsE2E, MaintenanceNoticeMovesTheJobWithoutUsingARetry) {
  TestNamespace ns("ft-maint");
  PodWatch watch(ns.name());
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(
      ApplyYaml(ns.name(), Job("mt", "  faultTolerance: {maintenanceGracePeriodSeconds: 120}\n"))
          .exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "mt", "{.status.phase}", "Running")) << op.Log();
  const std::string node = NodeOf(ns.name(), "mt-worker-1");
  ASSERT_FALSE(node.empty());

  // GKE's notice: the impending-termination taint.
  ASSERT_EQ(
      Kubectl("taint node " + node + " cloud.google.com/impending-node-termination=true:NoSchedule")
          .exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "mt", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "mt", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "mt", "{.status.jobRetries}"), "");  // no retry used
  EXPECT_EQ(JobField(ns.name(), "mt",
                     "{.status.faults[0].kind}/{.status.faults[0].action}/"
                     "{.status.faults[0].node}"),
            "Maintenance/ReissueJob/" + node);
  // The new attempt avoids the node under maintenance, and nothing was cordoned.
  for (const char* pod : {"mt-worker-0", "mt-worker-1"}) {
    EXPECT_NE(NodeOf(ns.name(), pod), node) << pod;
  }
  EXPECT_EQ(CordonedNodes(), "");
  // The old pods were deleted with the maintenance grace period (SIGTERM, then time to
  // checkpoint).
  EXPECT_NE(watch.Raw().find("grace=120"), std::string::npos) << watch.Raw();
  const auto report = watch.Check();
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
}

TEST_F(FaultsE2E, UnhealthyNodeIsCordonedAndTheJobReissued) {
  TestNamespace ns("ft-sick");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(ApplyYaml(ns.name(), Job("sk")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "sk", "{.status.phase}", "Running")) << op.Log();
  const std::string node = NodeOf(ns.name(), "sk-worker-0");

  // node-problem-detector style: a hardware condition turns True.
  ASSERT_EQ(
      SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 2: ECC errors").exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "sk", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "sk", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "sk", "{.status.jobRetries}"), "1");
  EXPECT_EQ(JobField(ns.name(), "sk", "{.status.faults[0].kind}/{.status.faults[0].action}"),
            "NodeUnhealthy/ReissueJob");
  EXPECT_EQ(CordonedNodes(), node);
  EXPECT_EQ(NodeField(node, "{.spec.taints[?(@.key==\"tpujob.dev/faulty\")].effect}"),
            "NoSchedule");
  EXPECT_EQ(NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordon-job}"), ns.name() + "/sk");
  const std::string node_events =
      Trim(Kubectl("get events -n default --field-selector involvedObject.name=" + node +
                       " -o jsonpath='{.items[*].reason}'",
                   false)
               .output);
  EXPECT_NE(node_events.find("NodeCordoned"), std::string::npos) << node_events;
  for (const char* pod : {"sk-worker-0", "sk-worker-1"}) {
    EXPECT_NE(NodeOf(ns.name(), pod), node) << pod;
  }
}

TEST_F(FaultsE2E, UserCodeFailureOnAnUnhealthyNodeIsReissuedNotFailed) {
  TestNamespace ns("ft-code");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(ApplyYaml(ns.name(), Job("uc")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "uc", "{.status.phase}", "Running")) << op.Log();
  const std::string node = NodeOf(ns.name(), "uc-worker-1");
  // The hardware fault and the program's crash reach the operator together (it is stopped
  // while both are written); exit code 1 would be permanent on a healthy node.
  op.Kill();
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "HBM failure").exit_code,
            0);
  ASSERT_EQ(TerminatePod(ns.name(), "uc-worker-1", 1, "Error", "device lost").exit_code, 0);
  OperatorProcess restarted({"--namespace", ns.name()});
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "uc", "{.status.attempt}", "2")) << restarted.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "uc", "{.status.phase}", "Running")) << restarted.Log();
  EXPECT_EQ(JobField(ns.name(), "uc", "{.status.faults[0].kind}/{.status.faults[0].exitCode}"),
            "NodeUnhealthy/");
  EXPECT_EQ(JobField(ns.name(), "uc", "{.status.jobRetries}"), "1");
  EXPECT_EQ(CordonedNodes(), node);
}

TEST_F(FaultsE2E, UserCodeFailureOnAHealthyNodeFailsTheJob) {
  TestNamespace ns("ft-healthy");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(ApplyYaml(ns.name(), Job("hc")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "hc", "{.status.phase}", "Running")) << op.Log();
  ASSERT_EQ(TerminatePod(ns.name(), "hc-worker-1", 1, "Error", "ZeroDivisionError").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "hc", "{.status.phase}", "Failed")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "hc", "{.status.conditions[?(@.type==\"Failed\")].reason}"),
            "PermanentError");
  EXPECT_EQ(CordonedNodes(), "");
}

// The source document's case "pre-flight failed, node hardware faulty": the real pre-flight
// command runs here with the environment the operator gave the pod's init container (and an
// empty /dev: no TPU devices), and its real report goes into the init container's status as
// the kubelet would write it.
TEST_F(FaultsE2E, PreflightNodeFaultCordonsTheNodeAndReissues) {
  TestNamespace ns("ft-pre");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(ApplyYaml(ns.name(), Job("pf",
                                     "  faultTolerance: {preflight: {enabled: true, checks: "
                                     "[accelerator]}}\n"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "pf", "{.status.phase}", "Running")) << op.Log();
  ASSERT_EQ(Get(ns.name(), "pod pf-worker-1",
                "{.spec.initContainers[0].name} {.spec.initContainers[0].command[1]}"),
            "preflight preflight");
  const std::string node = NodeOf(ns.name(), "pf-worker-1");

  const PreflightRun run = RunPreflightFor(ns.name(), "pf-worker-1", node);
  ASSERT_EQ(run.exit_code, 10) << run.output;
  EXPECT_NE(run.output.find("item=accelerator"), std::string::npos) << run.output;
  ASSERT_FALSE(run.report.empty());
  ASSERT_EQ(FailInitContainer(ns.name(), "pf-worker-1", 10, run.report).exit_code, 0);

  ASSERT_TRUE(JobFieldBecomes(ns.name(), "pf", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "pf", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "pf",
                     "{.status.faults[0].kind}/{.status.faults[0].item}/{.status.faults[0].node}"),
            "PreflightFailed/accelerator/" + node);
  EXPECT_EQ(JobField(ns.name(), "pf", "{.status.jobRetries}"), "1");
  EXPECT_EQ(CordonedNodes(), node);
  EXPECT_EQ(NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordon-reason}"),
            "PreflightFailed");
}

// The case "pre-flight failed, the job's configuration at fault": the job asks for a /dev/shm
// larger than any host has (thresholds.shmGB), so the real pre-flight command fails `disk-size
// shm`, a configuration fault (exit 11). The job is re-issued against its retries, and no node
// is cordoned: the node is not what is wrong.
TEST_F(FaultsE2E, PreflightConfigFaultReissuesWithoutCordoning) {
  TestNamespace ns("ft-precfg");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(
      ApplyYaml(ns.name(), Job("cf",
                               "  faultTolerance: {preflight: {enabled: true, checks: [disk], "
                               "thresholds: {rootDiskGB: 0, cacheDiskGB: 0, "
                               "shmGB: 1000000}}}\n"))
          .exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "cf", "{.status.phase}", "Running")) << op.Log();
  const std::string node = NodeOf(ns.name(), "cf-worker-1");
  ASSERT_FALSE(node.empty());

  // The three disk items look at one real file system here; the job's thresholds come from the
  // init container's environment.
  const std::string dir = ClusterDir();
  const PreflightRun run = RunPreflightFor(
      ns.name(), "cf-worker-1", node, {"--root-path", dir, "--shm-path", dir, "--cache-path", dir});
  ASSERT_EQ(run.exit_code, 11) << run.output;
  EXPECT_NE(run.output.find("item=\"disk-size shm\""), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("min_gb=1000000 "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("fault=config"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("fault=node"), std::string::npos) << run.output;
  const nlohmann::json report = nlohmann::json::parse(run.report, nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.report;
  EXPECT_EQ(report.value("verdict", ""), "config-fault") << run.report;
  EXPECT_EQ(report.value("node", ""), node) << run.report;
  ASSERT_EQ(FailInitContainer(ns.name(), "cf-worker-1", 11, run.report).exit_code, 0);

  ASSERT_TRUE(JobFieldBecomes(ns.name(), "cf", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "cf", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "cf", "{.status.jobRetries}"), "1");
  EXPECT_EQ(JobField(ns.name(), "cf",
                     "{.status.faults[0].kind}/{.status.faults[0].item}/"
                     "{.status.faults[0].node}/{.status.faults[0].action}"),
            "PreflightFailed/disk-size shm/" + node + "/ReissueJob");
  // Events are written in the order they are recorded, so once the new attempt's Running is
  // there, whatever the re-issuing reconcile recorded is there too.
  std::vector<EventRecord> events;
  ASSERT_TRUE(Eventually(
      [&] {
        events = JobEvents(ns.name(), "cf");
        return !EventsWith(events, "Running", "of attempt 2 are ready").empty();
      },
      std::chrono::seconds(30), std::chrono::milliseconds(200)))
      << DescribeEvents(events);
  const auto reissued = EventsWith(events, "Reissued", "(the job's configuration is at fault)");
  ASSERT_EQ(reissued.size(), 1u) << DescribeEvents(events);
  EXPECT_NE(reissued[0].message.find("disk-size shm"), std::string::npos) << reissued[0].message;
  EXPECT_NE(reissued[0].message.find("node " + node), std::string::npos) << reissued[0].message;
  EXPECT_EQ(reissued[0].type, "Warning");
  // Nothing cordoned, nor even considered for a cordon.
  EXPECT_TRUE(EventsWith(events, "NodeCordoned").empty()) << DescribeEvents(events);
  EXPECT_TRUE(EventsWith(events, "NodeNotCordoned").empty()) << DescribeEvents(events);
  EXPECT_EQ(CordonedNodes(), "");
  EXPECT_EQ(NodeField(node, "{.spec.taints[?(@.key==\"tpujob.dev/faulty\")].effect}"), "");
  EXPECT_EQ(NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordoned-by}"), "");
  EXPECT_EQ(op.Log().find("msg=\"cordon\""), std::string::npos) << op.Log();
}

}  // namespace
}  // namespace tpujob::e2e
