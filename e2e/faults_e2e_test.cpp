// Rows of the fault table (docs/api.md) end to end: the operator binary against a real
// control plane; faults are injected the way the cluster would report them (node taints,
// labels and conditions; pod status written as a kubelet would, with the real pre-flight
// report). Every assertion reads the cluster through kubectl.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

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
  // Applies Job(name, extra_spec) and waits until it runs.
  void RunJob(const std::string& ns, const OperatorProcess& op, const std::string& name,
              const std::string& extra_spec = "") {
    ASSERT_EQ(ApplyYaml(ns, Job(name, extra_spec)).exit_code, 0);
    ASSERT_TRUE(JobFieldBecomes(ns, name, "{.status.phase}", "Running")) << op.Log();
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
  ASSERT_NO_FATAL_FAILURE(
      RunJob(ns.name(), op, "mt", "  faultTolerance: {maintenanceGracePeriodSeconds: 120}\n"));
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
  ASSERT_NO_FATAL_FAILURE(RunJob(ns.name(), op, "sk"));
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
  ASSERT_NO_FATAL_FAILURE(RunJob(ns.name(), op, "uc"));
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
  // The record names both: the program's exit and the node's verdict.
  EXPECT_EQ(JobField(ns.name(), "uc", "{.status.faults[0].kind}/{.status.faults[0].exitCode}"),
            "NodeUnhealthy/1");
  const std::string message = JobField(ns.name(), "uc", "{.status.faults[0].message}");
  EXPECT_NE(message.find("exited with code 1"), std::string::npos) << message;
  EXPECT_NE(message.find("HBM failure"), std::string::npos) << message;
  EXPECT_EQ(JobField(ns.name(), "uc", "{.status.jobRetries}"), "1");
  EXPECT_EQ(CordonedNodes(), node);
}

// The hardware fault shows first as the program dying, and only 5 s later as the node's
// condition: within the fault attribution window (default 30 s), so the exit is the node's, not
// the user's. The job is re-issued off the cordoned node, counted once, and never reads Failed.
TEST_F(FaultsE2E, ExitThenHardwareConditionFiveSecondsLaterReissuesWithoutFailing) {
  TestNamespace ns("ft-order");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_NO_FATAL_FAILURE(RunJob(ns.name(), op, "ho"));
  const std::string node = NodeOf(ns.name(), "ho-worker-1");
  ASSERT_EQ(TerminatePod(ns.name(), "ho-worker-1", 1, "Error", "libtpu: chip 3 halted").exit_code,
            0);
  const auto exited = std::chrono::steady_clock::now();
  std::set<std::string> phases;
  // Every phase the job shows from the exit until the re-issue.
  auto record = [&] {
    const std::string seen = JobField(ns.name(), "ho", "{.status.phase}/{.status.attempt}");
    phases.insert(seen);
    return seen;
  };
  ASSERT_TRUE(Eventually(
      [&] {
        return JobField(ns.name(), "ho", "{.status.conditions[?(@.type==\"Ready\")].reason}") ==
               "AwaitingFaultAttribution";
      },
      std::chrono::seconds(30), std::chrono::milliseconds(100)))
      << op.Log();
  while (std::chrono::steady_clock::now() - exited < std::chrono::seconds(5)) {
    record();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 3: HBM uncorrectable")
                .exit_code,
            0);
  ASSERT_TRUE(Eventually([&] { return record().ends_with("/2"); }, std::chrono::seconds(30),
                         std::chrono::milliseconds(100)))
      << op.Log();
  for (const std::string& p : phases) EXPECT_FALSE(p.starts_with("Failed")) << p;
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ho", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "ho", "{.status.jobRetries}"), "1");
  EXPECT_EQ(JobField(ns.name(), "ho",
                     "{.status.faults[0].kind}/{.status.faults[0].exitCode}/"
                     "{.status.faults[0].node}/{.status.faults[0].action}"),
            "NodeUnhealthy/1/" + node + "/ReissueJob");
  EXPECT_EQ(JobField(ns.name(), "ho", "{.status.faults[1].kind}"), "");  // counted once
  const std::string message = JobField(ns.name(), "ho", "{.status.faults[0].message}");
  EXPECT_NE(message.find("exited with code 1"), std::string::npos) << message;
  EXPECT_NE(message.find("HBM uncorrectable"), std::string::npos) << message;
  EXPECT_EQ(CordonedNodes(), node);
  for (const char* pod : {"ho-worker-0", "ho-worker-1"}) {
    EXPECT_NE(NodeOf(ns.name(), pod), node) << pod;
  }
}

// Exit 1 on a node that stays healthy: the user's failure, decided at the end of the window
// (here 4 s) and not before, with the waited time in the message.
TEST_F(FaultsE2E, UserCodeFailureOnAHealthyNodeFailsTheJobAfterTheWindow) {
  TestNamespace ns("ft-healthy");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_NO_FATAL_FAILURE(
      RunJob(ns.name(), op, "hc", "  faultTolerance: {faultAttributionSeconds: 4}\n"));
  // Taken before the exit is written (finishedAt is read from the clock in TerminatePod, before
  // kubectl sends it): the write's own latency must not count as the operator's haste.
  const auto exited = std::chrono::steady_clock::now();
  ASSERT_EQ(TerminatePod(ns.name(), "hc-worker-1", 1, "Error", "ZeroDivisionError").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "hc", "{.status.phase}", "Failed")) << op.Log();
  const auto decided = std::chrono::steady_clock::now() - exited;
  // finishedAt has whole seconds: the window ends between 3 and 4 s after the exit.
  EXPECT_GE(decided, std::chrono::seconds(3)) << "decided before the node had its window";
  EXPECT_EQ(JobField(ns.name(), "hc", "{.status.conditions[?(@.type==\"Failed\")].reason}"),
            "PermanentError");
  const std::string message =
      JobField(ns.name(), "hc", "{.status.conditions[?(@.type==\"Failed\")].message}");
  EXPECT_NE(message.find("not found faulty within the fault attribution window of 4s"),
            std::string::npos)
      << message;
  EXPECT_EQ(JobField(ns.name(), "hc", "{.status.jobRetries}"), "");
  EXPECT_EQ(CordonedNodes(), "");
  std::printf("[ measured ] exit 1 on a healthy node, window 4 s: Failed after %.1f s\n",
              std::chrono::duration<double>(decided).count());
}

// The operator SIGKILLed inside the window: the one started after it takes the deadline from
// the pod's finishedAt and decides once.
TEST_F(FaultsE2E, AnOperatorKilledInsideTheWindowDecidesOnceAfterItsRestart) {
  TestNamespace ns("ft-window-kill");
  auto op = std::make_unique<OperatorProcess>(std::vector<std::string>{"--namespace", ns.name()});
  ASSERT_EQ(
      ApplyYaml(ns.name(), Job("wk", "  faultTolerance: {faultAttributionSeconds: 8}\n")).exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "wk", "{.status.phase}", "Running")) << op->Log();
  ASSERT_EQ(TerminatePod(ns.name(), "wk-worker-0", 1, "Error", "ValueError").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "wk", "{.status.conditions[?(@.type==\"Ready\")].reason}",
                              "AwaitingFaultAttribution"))
      << op->Log();
  op->Kill();
  op.reset();
  EXPECT_EQ(JobField(ns.name(), "wk", "{.status.phase}"), "Running");
  OperatorProcess restarted({"--namespace", ns.name()});
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "wk", "{.status.phase}", "Failed")) << restarted.Log();
  EXPECT_EQ(JobField(ns.name(), "wk", "{.status.conditions[?(@.type==\"Failed\")].reason}"),
            "PermanentError");
  EXPECT_EQ(JobField(ns.name(), "wk", "{.status.faults[*].action}"), "FailJob");
  std::vector<EventRecord> events;
  ASSERT_TRUE(Eventually([&] {
    events = JobEvents(ns.name(), "wk");
    return !EventsWith(events, "Failed").empty();
  }));
  EXPECT_EQ(EventsWith(events, "Failed").size(), 1u) << DescribeEvents(events);
  EXPECT_EQ(EventsWith(events, "Failed")[0].count, 1) << DescribeEvents(events);
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

// The job's own template at fault: pre-flight checks disk-size shm (the default checks have
// disk) and the template mounts nothing at /dev/shm, where Kubernetes gives 64 MB, so pre-flight
// would fail on every node and every attempt would burn a re-issue. Refused at validation: no
// pod, no retry used, the fix in the message. Once the volume is there, the job runs.
TEST_F(FaultsE2E, PreflightThatWouldFailEverywhereIsRefusedAtValidation) {
  TestNamespace ns("ft-noshm");
  OperatorProcess op({"--namespace", ns.name()});
  // The suite's job without its /dev/shm volume.
  std::string job = Job("ns");
  for (const std::string cut : {"          volumes: [{name: shm, emptyDir: {medium: Memory}}]\n",
                                ", volumeMounts: [{name: shm, mountPath: /dev/shm}]"}) {
    ASSERT_NE(job.find(cut), std::string::npos) << job;
    job.erase(job.find(cut), cut.size());
  }
  ASSERT_EQ(ApplyYaml(ns.name(), job).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ns", "{.status.conditions[?(@.type==\"Valid\")].status}",
                              "False"))
      << op.Log();
  const std::string message =
      JobField(ns.name(), "ns", "{.status.conditions[?(@.type==\"Valid\")].message}");
  EXPECT_NE(message.find("mount an emptyDir with medium: Memory at /dev/shm, or leave disk out of "
                         "the checks"),
            std::string::npos)
      << message;
  EXPECT_EQ(JobField(ns.name(), "ns", "{.status.phase}/{.status.jobRetries}"), "Failed/");
  EXPECT_TRUE(JobPods(ns.name(), "ns").empty());
  ASSERT_EQ(ApplyYaml(ns.name(), Job("ns")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ns", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "ns", "{.status.attempt}/{.status.jobRetries}"), "1/");
}

// A pre-flight report whose failed items are all the job's own configuration (item config: the
// real command given settings it cannot use) fails the job at once with a reason of its own:
// a re-issue would fail the same way. No retry used, no node cordoned.
TEST_F(FaultsE2E, PreflightConfigFailureFailsTheJobAtOnce) {
  TestNamespace ns("ft-precfg");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_NO_FATAL_FAILURE(RunJob(ns.name(), op, "cf"));
  const std::string node = NodeOf(ns.name(), "cf-worker-1");
  ASSERT_FALSE(node.empty());
  const PreflightRun run =
      RunPreflightFor(ns.name(), "cf-worker-1", node, {"--shm-min-gb", "lots"});
  ASSERT_EQ(run.exit_code, 11) << run.output;
  EXPECT_NE(run.output.find("item=config"), std::string::npos) << run.output;
  ASSERT_EQ(FailInitContainer(ns.name(), "cf-worker-1", 11, run.report).exit_code, 0);

  ASSERT_TRUE(JobFieldBecomes(ns.name(), "cf", "{.status.phase}", "Failed")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "cf", "{.status.conditions[?(@.type==\"Failed\")].reason}"),
            "PreflightConfigError");
  const std::string message =
      JobField(ns.name(), "cf", "{.status.conditions[?(@.type==\"Failed\")].message}");
  EXPECT_NE(message.find("--shm-min-gb"), std::string::npos) << message;
  EXPECT_EQ(JobField(ns.name(), "cf", "{.status.attempt}/{.status.jobRetries}"), "1/");
  EXPECT_EQ(
      JobField(ns.name(), "cf",
               "{.status.faults[0].kind}/{.status.faults[0].item}/{.status.faults[0].action}"),
      "PreflightFailed/config/FailJob");
  EXPECT_EQ(CordonedNodes(), "");
}

// The source document's opt-in: the annotation alone (fault-tolerance/job-retry-num "2", no
// spec.faultTolerance.preflight) turns the environment check on. The template mounts no /cache
// volume, so the real command skips `disk-size cache` and passes; the job runs.
TEST_F(FaultsE2E, RetryAnnotationAloneAddsPreflightAndAMissingCacheIsSkipped) {
  TestNamespace ns("ft-annot");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_NO_FATAL_FAILURE(RunJob(ns.name(), op, "an"));
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
  ASSERT_NO_FATAL_FAILURE(
      RunJob(ns.name(), op, "ah", "  faultTolerance: {maintenanceGracePeriodSeconds: 5}\n"));
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

// Worker pods carry the maintenance grace period as their own, so an eviction through the
// Eviction API (what a drain, the descheduler or a cluster autoscaler send) gives the program
// the same time to checkpoint as the operator's own deletions.
TEST_F(FaultsE2E, AnEvictionGivesTheProgramTheMaintenanceGracePeriod) {
  TestNamespace ns("ft-evict");
  PodWatch watch(ns.name());
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_NO_FATAL_FAILURE(
      RunJob(ns.name(), op, "ev", "  faultTolerance: {maintenanceGracePeriodSeconds: 240}\n"));
  for (const char* pod : {"ev-worker-0", "ev-worker-1"}) {
    EXPECT_EQ(Get(ns.name(), std::string("pod ") + pod, "{.spec.terminationGracePeriodSeconds}"),
              "240")
        << pod;
  }
  const std::string uid = PodUid(ns.name(), "ev-worker-1");
  const std::string path = ClusterDir() + "/eviction-" + ns.name() + ".json";
  std::ofstream(path) << nlohmann::json{{"apiVersion", "policy/v1"},
                                        {"kind", "Eviction"},
                                        {"metadata",
                                         {{"name", "ev-worker-1"}, {"namespace", ns.name()}}}}
                             .dump();
  const CommandResult evicted = Kubectl("create --raw /api/v1/namespaces/" + ns.name() +
                                        "/pods/ev-worker-1/eviction -f " + path);
  ASSERT_EQ(evicted.exit_code, 0) << evicted.output;
  // The API server deleted it with the pod's own grace period: deletionGracePeriodSeconds.
  ASSERT_TRUE(Eventually([&] {
    const std::string raw = watch.Raw();
    return raw.find("ev-worker-1 " + uid) != std::string::npos &&
           raw.find("grace=240") != std::string::npos;
  })) << watch.Raw();
  std::istringstream lines(watch.Raw());
  bool graced = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.find(uid) != std::string::npos && line.ends_with("grace=240")) graced = true;
  }
  EXPECT_TRUE(graced) << watch.Raw();
}

// A retryable exit restarts the worker on the node it ran on (the source's "immediately on the
// same VM"); once that node is cordoned, elsewhere.
TEST_F(FaultsE2E, ARetryableExitRestartsTheWorkerOnItsNodeUnlessItIsCordoned) {
  TestNamespace ns("ft-same");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_NO_FATAL_FAILURE(RunJob(ns.name(), op, "sm"));
  const std::string node = NodeOf(ns.name(), "sm-worker-1");
  std::string uid = PodUid(ns.name(), "sm-worker-1");
  ASSERT_EQ(TerminatePod(ns.name(), "sm-worker-1", 143, "Error", "SIGTERM").exit_code, 0);
  ASSERT_TRUE(Eventually([&] {
    const std::string now = PodUid(ns.name(), "sm-worker-1");
    return !now.empty() && now != uid;
  })) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "sm", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(NodeOf(ns.name(), "sm-worker-1"), node);
  EXPECT_EQ(Get(ns.name(), "pod sm-worker-1",
                "{.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
                "nodeSelectorTerms[0].matchFields[?(@.operator==\"In\")].values[0]}"),
            node);
  EXPECT_EQ(JobField(ns.name(), "sm", "{.status.workerRestarts.Worker-1.node}"), node);

  // The node cordoned (by a person): the next restart goes elsewhere, to the free node.
  ASSERT_EQ(Kubectl("cordon " + node).exit_code, 0);
  uid = PodUid(ns.name(), "sm-worker-1");
  ASSERT_EQ(TerminatePod(ns.name(), "sm-worker-1", 143, "Error", "SIGTERM").exit_code, 0);
  ASSERT_TRUE(Eventually([&] {
    const std::string now = PodUid(ns.name(), "sm-worker-1");
    return !now.empty() && now != uid;
  })) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "sm", "{.status.phase}", "Running")) << op.Log();
  const std::string elsewhere = NodeOf(ns.name(), "sm-worker-1");
  EXPECT_FALSE(elsewhere.empty());
  EXPECT_NE(elsewhere, node);
  EXPECT_EQ(JobField(ns.name(), "sm", "{.status.attempt}/{.status.workerRestarts.Worker-1.count}"),
            "1/2");
}

// A 5 s queue timeout, 20 jobs at once that can never be admitted: none reads Failed less than
// 5.0 s after its creation was sent. A reading that comes back before that moment and shows
// Failed is proof of an early timeout (the failure happened before the reply was made).
TEST_F(FaultsE2E, AQueueTimeoutNeverFiresEarly) {
  TestNamespace ns("ft-qto");
  OperatorProcess op({"--namespace", ns.name()});
  using Clock = std::chrono::steady_clock;
  constexpr int kJobs = 20;
  // Created one after another on a thread of their own while this one reads: a reading must
  // follow each job's whole life, not start once every job exists.
  std::mutex mu;
  std::map<std::string, Clock::time_point> sent;
  std::atomic<bool> created_all{false};
  std::thread creator([&] {
    for (int i = 0; i < kJobs; ++i) {
      const std::string name = "q" + std::to_string(i);
      // An accelerator no node has: the job waits until its timeout.
      const std::string yaml =
          JobYaml(name, 2, "2x4", "  queueTimeoutSeconds: 5\n", false, "", "tpu-none-" + prefix_);
      {
        std::lock_guard<std::mutex> lock(mu);
        sent[name] = Clock::now();
      }
      EXPECT_EQ(ApplyYaml(ns.name(), yaml).exit_code, 0) << name;
      // Spread over a few seconds, so the creations fall at every fraction of a second.
      std::this_thread::sleep_for(std::chrono::milliseconds(130));
    }
    created_all = true;
  });
  std::map<std::string, double> failed_by;  // the first reading showing Failed, s after sent
  std::vector<std::string> early;
  const auto give_up = Clock::now() + std::chrono::seconds(90);
  while ((!created_all || failed_by.size() < kJobs) && Clock::now() < give_up) {
    const CommandResult list = Kubectl(
        "get tpujobs -n " + ns.name() +
            " -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase}{\"\\n\"}{end}'",
        false);
    const Clock::time_point replied = Clock::now();
    std::istringstream lines(list.output);
    std::lock_guard<std::mutex> lock(mu);
    for (std::string name, phase; lines >> name >> phase;) {
      if (phase != "Failed" || failed_by.contains(name) || !sent.contains(name)) continue;
      const double after = std::chrono::duration<double>(replied - sent[name]).count();
      failed_by[name] = after;
      if (after < 5.0) early.push_back(name + " at " + std::to_string(after) + " s");
    }
  }
  creator.join();
  EXPECT_EQ(failed_by.size(), static_cast<size_t>(kJobs)) << op.Log();
  EXPECT_TRUE(early.empty()) << testing::PrintToString(early);
  for (const auto& [name, after] : failed_by) {
    EXPECT_EQ(JobField(ns.name(), name, "{.status.conditions[?(@.type==\"Failed\")].reason}"),
              "QueueTimeout")
        << name;
  }
  double first = 1e9, last = 0;
  for (const auto& [name, after] : failed_by) {
    first = std::min(first, after);
    last = std::max(last, after);
  }
  std::printf(
      "[ measured ] 5 s queue timeout, %d jobs: Failed first seen %.2f-%.2f s after "
      "creation was sent\n",
      kJobs, first, last);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
