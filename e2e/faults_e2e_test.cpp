// Rows of the fault table (DESIGN.md section 4) end to end: the operator binary against a real
// control plane; faults are injected the way the cluster would report them (node taints,
// labels and conditions; pod status written as a kubelet would, with the real pre-flight
// report). Every assertion reads the cluster through kubectl.

#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <sstream>

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

// Pre-flight failed, the job's own template at fault: the job asks for a /dev/shm larger than
// any host has (thresholds.shmGB) and mounts no volume there, so the real pre-flight command
// fails `disk-size shm` (exit 11) on Kubernetes' 64 MB default, which is the same on every
// node. The job is re-issued against its retries, and no node is cordoned.
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

// The source document's opt-in: the annotation alone (fault-tolerance/job-retry-num "2", no
// spec.faultTolerance.preflight) turns the environment check on. The template mounts no /cache
// volume, so the real command skips `disk-size cache` and passes; the job runs.
TEST_F(FaultsE2E, RetryAnnotationAloneAddsPreflightAndAMissingCacheIsSkipped) {
  TestNamespace ns("ft-annot");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(ApplyYaml(ns.name(), Job("an")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "an", "{.status.phase}", "Running")) << op.Log();
  for (const char* pod : {"an-worker-0", "an-worker-1"}) {
    EXPECT_EQ(Get(ns.name(), std::string("pod ") + pod,
                  "{.spec.initContainers[0].name} {.spec.initContainers[0].command[1]}"),
              "preflight preflight")
        << pod;
  }
  const std::string env = Get(ns.name(), "pod an-worker-1",
                              "{range .spec.initContainers[0].env[*]}{.name}={.value}{\" \"}{end}");
  EXPECT_NE(env.find("TPUJOB_PREFLIGHT_CHECKS=dns,disk,accelerator "), std::string::npos) << env;
  EXPECT_NE(env.find("TPUJOB_PREFLIGHT_CACHE_VOLUME=absent"), std::string::npos) << env;

  const std::string node = NodeOf(ns.name(), "an-worker-1");
  const std::string dir = ClusterDir();
  const PreflightRun run = RunPreflightFor(ns.name(), "an-worker-1", node,
                                           {"--checks", "disk", "--root-path", dir, "--shm-path",
                                            dir, "--root-min-gb", "0", "--shm-min-gb", "0"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::string cache_line;
  std::istringstream lines(run.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("item=\"disk-size cache\"") != std::string::npos) cache_line = line;
  }
  EXPECT_NE(cache_line.find("verdict=skip"), std::string::npos) << run.output;
  EXPECT_NE(cache_line.find("no volume at /cache"), std::string::npos) << cache_line;
  EXPECT_EQ(JobField(ns.name(), "an", "{.status.phase}/{.status.attempt}"), "Running/1");

  // The spec's word wins over the annotation's default (on the nodes the first job frees).
  ASSERT_EQ(Kubectl("delete tpujob an -n " + ns.name() + " --wait=true").exit_code, 0);
  ASSERT_TRUE(Eventually([&] { return JobPods(ns.name(), "an").empty(); })) << op.Log();
  ASSERT_EQ(ApplyYaml(ns.name(), Job("no-pf", "  faultTolerance: {preflight: {enabled: false}}\n"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "no-pf", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(Get(ns.name(), "pod no-pf-worker-0", "{.spec.initContainers}"), "");
}

// The source document's case 2, "pre-flight failed, hardware fine": the node's environment is
// broken (its /dev/shm volume is smaller than the job needs), so the real command fails `disk-size
// shm` with exit 11. The node is isolated all the same, with the item in its cordon message, and
// the job is re-issued elsewhere.
TEST_F(FaultsE2E, PreflightEnvironmentFaultCordonsTheNodeAndReissues) {
  TestNamespace ns("ft-preenv");
  OperatorProcess op({"--namespace", ns.name()});
  const std::string job =
      "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: ev\n  annotations:\n"
      "    fault-tolerance/job-retry-num: \"2\"\nspec:\n  tpu: {accelerator: " +
      accelerator_ +
      ", topology: 2x4, chipsPerWorker: 4}\n  faultTolerance: {preflight: {checks: [disk], "
      "thresholds: {rootDiskGB: 0, cacheDiskGB: 0, shmGB: 1000000}}}\n  replicaSpecs:\n"
      "    Worker:\n      replicas: 2\n      template:\n        spec:\n"
      "          volumes: [{name: shm, emptyDir: {medium: Memory}}]\n          containers:\n"
      "          - {name: trainer, image: busybox, command: [sh, -c, 'train'], volumeMounts: "
      "[{name: shm, mountPath: /dev/shm}]}\n";
  ASSERT_EQ(ApplyYaml(ns.name(), job).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ev", "{.status.phase}", "Running")) << op.Log();
  const std::string node = NodeOf(ns.name(), "ev-worker-1");
  ASSERT_FALSE(node.empty());

  const std::string dir = ClusterDir();
  const PreflightRun run = RunPreflightFor(
      ns.name(), "ev-worker-1", node, {"--root-path", dir, "--shm-path", dir, "--cache-path", dir});
  ASSERT_EQ(run.exit_code, 11) << run.output;
  EXPECT_NE(run.output.find("item=\"disk-size shm\""), std::string::npos) << run.output;
  ASSERT_EQ(FailInitContainer(ns.name(), "ev-worker-1", 11, run.report).exit_code, 0);

  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ev", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ev", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "ev",
                     "{.status.faults[0].kind}/{.status.faults[0].item}/{.status.faults[0].node}"),
            "PreflightFailed/disk-size shm/" + node);
  EXPECT_EQ(JobField(ns.name(), "ev", "{.status.jobRetries}"), "1");
  ASSERT_TRUE(Eventually([&] { return CordonedNodes() == node; })) << op.Log();
  EXPECT_EQ(NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordon-reason}"),
            "PreflightFailed");
  const std::string message =
      NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordon-message}");
  EXPECT_NE(message.find("disk-size shm"), std::string::npos) << message;
  EXPECT_NE(message.find("environment is at fault"), std::string::npos) << message;
  for (const char* pod : {"ev-worker-0", "ev-worker-1"}) {
    EXPECT_NE(NodeOf(ns.name(), pod), node) << pod;
  }
}

// GKE announces host maintenance with a node label (Unix seconds). Nodes whose maintenance
// starts within the avoid window (60 minutes by default) are left out of new admissions, and
// the Admitted message names them; once one is free of it, the job runs on the others.
TEST_F(FaultsE2E, NodesWithMaintenanceSoonAreNotChosenForANewJob) {
  TestNamespace ns("ft-soon");
  OperatorProcess op({"--namespace", ns.name()});
  const std::string soon = std::to_string(::time(nullptr) + 300);
  const std::string n0 = prefix_ + "-0", n1 = prefix_ + "-1", n2 = prefix_ + "-2";
  for (const std::string& n : {n0, n1}) {
    ASSERT_EQ(Kubectl("label node " + n + " cloud.google.com/scheduled-maintenance-time=" + soon)
                  .exit_code,
              0);
  }
  ASSERT_EQ(ApplyYaml(ns.name(), Job("sn", "", "")).exit_code, 0);
  std::string message;
  ASSERT_TRUE(Eventually([&] {
    message = JobField(ns.name(), "sn", "{.status.conditions[?(@.type==\"Admitted\")].message}");
    return message.find("left out") != std::string::npos;
  })) << message
      << "\n"
      << op.Log();
  EXPECT_NE(
      message.find("2 nodes left out: maintenance scheduled within 60m (" + n0 + ", " + n1 + ")"),
      std::string::npos)
      << message;
  EXPECT_EQ(JobField(ns.name(), "sn", "{.status.phase}"), "Queued");

  ASSERT_EQ(Kubectl("label node " + n1 + " cloud.google.com/scheduled-maintenance-time-").exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "sn", "{.status.phase}", "Running")) << op.Log();
  for (const char* pod : {"sn-worker-0", "sn-worker-1"}) {
    EXPECT_NE(NodeOf(ns.name(), pod), n0) << pod;
  }
  EXPECT_EQ(Get(ns.name(), "pod sn-worker-0",
                "{.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
                "nodeSelectorTerms[0].matchExpressions[0].key}"),
            "cloud.google.com/scheduled-maintenance-time");
}

// A running job whose node's announced maintenance comes within the move window is moved on
// the operator's schedule, like a maintenance event: SIGTERM with its grace period, re-issue
// without using a retry, the new attempt away from that node. Nothing about the node changes
// when the window is reached: the operator's own timer acts.
TEST_F(FaultsE2E, RunningJobIsMovedBeforeAnnouncedMaintenance) {
  TestNamespace ns("ft-ahead");
  OperatorProcess op({"--namespace", ns.name(), "--maintenance-move-window", "60",
                      "--maintenance-avoid-window", "60"});
  ASSERT_EQ(
      ApplyYaml(ns.name(), Job("ah", "  faultTolerance: {maintenanceGracePeriodSeconds: 5}\n"))
          .exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ah", "{.status.phase}", "Running")) << op.Log();
  const std::string node = NodeOf(ns.name(), "ah-worker-1");
  ASSERT_FALSE(node.empty());
  const auto labelled = std::chrono::steady_clock::now();
  const std::string at = std::to_string(::time(nullptr) + 75);  // 15 s before the window
  ASSERT_EQ(Kubectl("label node " + node + " cloud.google.com/scheduled-maintenance-time=" + at)
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ah", "{.status.attempt}", "2")) << op.Log();
  EXPECT_GE(std::chrono::steady_clock::now() - labelled, std::chrono::seconds(10))
      << "moved before the window";
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ah", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "ah", "{.status.jobRetries}"), "");  // no retry used
  EXPECT_EQ(JobField(ns.name(), "ah",
                     "{.status.faults[0].kind}/{.status.faults[0].action}/"
                     "{.status.faults[0].node}"),
            "Maintenance/ReissueJob/" + node);
  EXPECT_NE(JobField(ns.name(), "ah", "{.status.faults[0].message}")
                .find("scheduled for "
                      "maintenance"),
            std::string::npos);
  for (const char* pod : {"ah-worker-0", "ah-worker-1"}) {
    EXPECT_NE(NodeOf(ns.name(), pod), node) << pod;
  }
  EXPECT_EQ(CordonedNodes(), "");
}

}  // namespace
}  // namespace tpujob::e2e
