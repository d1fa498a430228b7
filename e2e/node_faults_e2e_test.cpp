// Node-level rows of the fault table end to end: a node that stops reporting (its kubelet is
// gone, played here by a node no kubelet manages, whose status the test writes) and the
// automatic uncordon of a node that recovered. Every assertion reads the cluster through
// kubectl.

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using Clock = std::chrono::steady_clock;

std::string NowRfc3339() { return Trim(RunCommand("date -u +%Y-%m-%dT%H:%M:%SZ", false).output); }

CommandResult PatchStatus(const std::string& what, const nlohmann::json& patch,
                          const std::string& type = "strategic") {
  static int counter = 0;
  const std::string path = ClusterDir() + "/status-patch-" + std::to_string(::getpid()) + "-" +
                           std::to_string(++counter) + ".json";
  std::ofstream(path) << patch.dump();
  return Kubectl("patch " + what + " --subresource=status --type=" + type + " --patch-file " +
                 path);
}

class NodeFaultsE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }

  void SetUp() override {
    static int counter = 0;
    prefix_ = "nf" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
    pool_ = "pool-" + prefix_;
  }
  void TearDown() override {
    DeleteTpuNodes(prefix_);
    DeleteTpuNodes(prefix_ + "b");
  }

  // A TPU node that no kubelet (and no KWOK) manages: the test reports its status, as a kubelet
  // would, and stops reporting to lose it.
  void CreateUnmanagedNode(const std::string& name) {
    const std::string yaml =
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: " + name +
        "\n  labels:\n    cloud.google.com/gke-tpu-accelerator: " + accelerator_ +
        "\n    cloud.google.com/gke-tpu-topology: 2x4"
        "\n    cloud.google.com/gke-nodepool: " +
        pool_ + "\n    tpujob.dev/e2e-nodes: " + prefix_ +
        "\nspec:\n  taints:\n  - {key: google.com/tpu, value: present, "
        "effect: NoSchedule}\n";
    const std::string path = ClusterDir() + "/node-" + name + ".yaml";
    std::ofstream(path) << yaml;
    ASSERT_EQ(Kubectl("apply -f " + path).exit_code, 0);
    const nlohmann::json resources = {
        {"cpu", "32"}, {"memory", "128Gi"}, {"pods", "110"}, {"google.com/tpu", "4"}};
    const std::string now = NowRfc3339();
    const nlohmann::json status = {{"status",
                                    {{"capacity", resources},
                                     {"allocatable", resources},
                                     {"conditions",
                                      {{{"type", "Ready"},
                                        {"status", "True"},
                                        {"reason", "KubeletReady"},
                                        {"message", "kubelet is posting ready status"},
                                        {"lastHeartbeatTime", now},
                                        {"lastTransitionTime", now}}}}}}};
    const auto patched = PatchStatus("node " + name, status);
    ASSERT_EQ(patched.exit_code, 0) << patched.output;
  }

  // What a kubelet reports for a started, ready worker pod.
  static CommandResult ReportPodRunning(const std::string& ns, const std::string& pod) {
    const std::string now = NowRfc3339();
    const nlohmann::json status = {
        {"status",
         {{"phase", "Running"},
          {"podIP", "10.250.0.7"},
          {"startTime", now},
          {"conditions",
           {{{"type", "Initialized"}, {"status", "True"}, {"lastTransitionTime", now}},
            {{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", now}},
            {{"type", "ContainersReady"}, {"status", "True"}, {"lastTransitionTime", now}}}},
          {"containerStatuses",
           {{{"name", "trainer"},
             {"ready", true},
             {"started", true},
             {"restartCount", 0},
             {"image", "busybox"},
             {"imageID", ""},
             {"state", {{"running", {{"startedAt", now}}}}}}}}}}};
    return PatchStatus("pod " + pod + " -n " + ns, status);
  }

  std::string Job(const std::string& name, const std::string& extra_pod_spec = "") const {
    return "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: " + name +
           "\n  annotations:\n    fault-tolerance/job-retry-num: \"2\"\nspec:\n  tpu: "
           "{accelerator: " +
           accelerator_ +
           ", topology: 2x4, chipsPerWorker: 4}\n  replicaSpecs:\n    Worker:\n      replicas: 2\n"
           "      template:\n        spec:\n" +
           extra_pod_spec +
           "          volumes: [{name: shm, emptyDir: {medium: Memory}}]\n"
           "          containers:\n"
           "          - {name: trainer, image: busybox, command: [sh, -c, 'train'], "
           "volumeMounts: [{name: shm, mountPath: /dev/shm}]}\n";
  }

  static std::string NodeEvents(const std::string& node) {
    return Trim(Kubectl("get events -n default --field-selector involvedObject.name=" + node +
                            " -o jsonpath='{.items[*].reason}'",
                        false)
                    .output);
  }

  // The source document's case "pre-flight failed on every host at once": the same item fails
  // on all three workers' nodes. That is a configuration problem (the circuit breaker, 3
  // nodes), not three broken hosts: nothing is cordoned, the job is re-issued. The pods' status
  // is written here as the kubelet would (KWOK leaves them alone), each pre-flight container
  // running first and then failing one after another with the real command's report; the
  // operator must take the verdicts together rather than cordon the first node before the
  // others have reported. `preflight` is the job's spec.faultTolerance.preflight, `pod_spec`
  // extra lines of the pod template's spec, `args` what the command runs with here.
  void ExpectSystemicFailureCordonsNothing(const std::string& ns, const std::string& preflight,
                                           const std::string& pod_spec, const std::string& item,
                                           const std::vector<std::string>& args, int exit_code) {
    CreateTpuNodes(prefix_, 3, accelerator_, "2x6", pool_);
    OperatorProcess op({"--namespace", ns, "--max-cordoned-fraction", "1", "--cordon-rate", "0",
                        "--cordon-breaker-nodes", "3"});
    const std::string job =
        "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: sy\n  annotations:\n"
        "    fault-tolerance/job-retry-num: \"2\"\nspec:\n  tpu: {accelerator: " +
        accelerator_ +
        ", topology: 2x6, chipsPerWorker: 4}\n  faultTolerance: {preflight: " + preflight +
        "}\n  replicaSpecs:\n    Worker:\n      replicas: 3\n"
        "      template:\n        metadata:\n          annotations: {kwok.x-k8s.io/status: "
        "custom}\n        spec:\n" +
        pod_spec +
        "          containers:\n"
        "          - {name: trainer, image: busybox, command: [sh, -c, 'train']";
    ASSERT_EQ(ApplyYaml(ns, job + (pod_spec.empty() ? "}\n"
                                                    : ", volumeMounts: [{name: shm, "
                                                      "mountPath: /dev/shm}]}\n"))
                  .exit_code,
              0);
    const std::vector<std::string> pods = {"sy-worker-0", "sy-worker-1", "sy-worker-2"};
    std::vector<std::string> nodes;
    for (const std::string& pod : pods) {
      std::string node;
      ASSERT_TRUE(
          Eventually([&] { return !(node = NodeOf(ns, pod)).empty(); }, std::chrono::seconds(60)))
          << pod << "\n"
          << op.Log();
      nodes.push_back(node);
      const std::string image = Get(ns, "pod " + pod, "{.spec.initContainers[0].image}");
      ASSERT_EQ(
          PatchPodStatus(
              ns, pod,
              {{"status",
                {{"phase", "Pending"},
                 {"initContainerStatuses",
                  nlohmann::json::array({fixtures::ContainerStatus(
                      "preflight", {{"running", {{"startedAt", NowRfc3339()}}}}, image)})},
                 {"containerStatuses",
                  nlohmann::json::array({fixtures::ContainerStatus(
                      "trainer", {{"waiting", {{"reason", "PodInitializing"}}}}, "busybox")})}}}})
              .exit_code,
          0);
    }
    for (size_t i = 0; i < pods.size(); ++i) {
      const PreflightRun run = RunPreflightFor(ns, pods[i], nodes[i], args);
      ASSERT_EQ(run.exit_code, exit_code) << run.output;
      ASSERT_EQ(FailInitContainer(ns, pods[i], exit_code, run.report).exit_code, 0);
    }

    ASSERT_TRUE(JobFieldBecomes(ns, "sy", "{.status.attempt}", "2")) << op.Log();
    EXPECT_EQ(JobField(ns, "sy", "{.status.faults[0].kind}/{.status.faults[0].item}"),
              "PreflightFailed/" + item);
    EXPECT_EQ(JobField(ns, "sy", "{.status.jobRetries}"), "1");
    std::vector<EventRecord> refused;
    ASSERT_TRUE(Eventually([&] {
      refused = EventsWith(JobEvents(ns, "sy"), "NodeNotCordoned");
      return refused.size() >= 3;
    })) << DescribeEvents(JobEvents(ns, "sy"));
    for (const EventRecord& e : refused) {
      EXPECT_NE(e.message.find("circuit breaker"), std::string::npos) << e.message;
    }
    EXPECT_TRUE(EventsWith(JobEvents(ns, "sy"), "NodeCordoned").empty())
        << DescribeEvents(JobEvents(ns, "sy"));
    for (const std::string& node : nodes) {
      EXPECT_EQ(NodeField(node, "{.spec.unschedulable}"), "") << node;
    }
  }

  std::string prefix_;
  std::string accelerator_;
  std::string pool_;
};

// Fault table, "node lost": the node stops reporting (Ready turns Unknown, as the node lifecycle
// controller writes it). Its pod is deleted gracefully, force-deleted once its grace period is
// over (no kubelet will ever confirm it), the node is cordoned and the job re-issued.
TEST_F(NodeFaultsE2E, LostNodeIsCordonedItsPodForcedAfterItsGraceAndTheJobReissued) {
  TestNamespace ns("nf-lost");
  PodWatch watch(ns.name());
  CreateTpuNodes(prefix_, 1, accelerator_, "2x4", pool_);
  const std::string lost = prefix_ + "-lost";
  CreateUnmanagedNode(lost);
  OperatorProcess op({"--namespace", ns.name(), "--max-cordoned-fraction", "1"});
  ASSERT_EQ(
      ApplyYaml(ns.name(), Job("nl", "          terminationGracePeriodSeconds: 4\n")).exit_code, 0);

  // One worker lands on each node; the test is the kubelet of the unmanaged one.
  std::string on_lost;
  ASSERT_TRUE(Eventually(
      [&] {
        for (const char* pod : {"nl-worker-0", "nl-worker-1"}) {
          if (NodeOf(ns.name(), pod) == lost) on_lost = pod;
        }
        return !on_lost.empty();
      },
      std::chrono::seconds(60)))
      << Kubectl("get pods -o wide -n " + ns.name()).output << op.Log();
  const auto reported = ReportPodRunning(ns.name(), on_lost);
  ASSERT_EQ(reported.exit_code, 0) << reported.output;
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "nl", "{.status.phase}", "Running")) << op.Log();
  const std::string uid = Get(ns.name(), "pod " + on_lost, "{.metadata.uid}");

  const std::string now = NowRfc3339();
  ASSERT_EQ(PatchStatus("node " + lost, {{"status",
                                          {{"conditions",
                                            {{{"type", "Ready"},
                                              {"status", "Unknown"},
                                              {"reason", "NodeStatusUnknown"},
                                              {"message", "Kubelet stopped posting node status."},
                                              {"lastHeartbeatTime", now},
                                              {"lastTransitionTime", now}}}}}}})
                .exit_code,
            0);
  const auto lost_at = Clock::now();

  ASSERT_TRUE(JobFieldBecomes(ns.name(), "nl", "{.status.attempt}", "2")) << op.Log();
  EXPECT_EQ(
      JobField(ns.name(), "nl",
               "{.status.faults[0].kind}/{.status.faults[0].action}/{.status.faults[0].node}"),
      "NodeLost/ReissueJob/" + lost);
  EXPECT_EQ(JobField(ns.name(), "nl", "{.status.jobRetries}"), "1");
  EXPECT_TRUE(Eventually([&] { return NodeField(lost, "{.spec.unschedulable}") == "true"; }));
  EXPECT_EQ(NodeField(lost, "{.metadata.annotations.tpujob\\.dev/cordon-reason}"), "NodeLost");
  EXPECT_TRUE(JobFieldBecomes(ns.name(), "nl", "{.status.cordonedNodes[*]}", lost));

  // The pod on the lost node waits out its grace period, then goes.
  ASSERT_TRUE(Eventually(
      [&] {
        return Get(ns.name(), "pods", "{.items[*].metadata.uid}").find(uid) == std::string::npos;
      },
      std::chrono::seconds(40)))
      << Kubectl("get pods -o wide -n " + ns.name()).output << op.Log();
  const auto gone_after = Clock::now() - lost_at;
  EXPECT_GE(gone_after, std::chrono::seconds(3)) << "forced before its grace period ended";
  const std::string log = op.Log();
  EXPECT_NE(log.find("its node is lost and the grace period it was deleted with is over"),
            std::string::npos)
      << log;

  // Capacity for the new attempt appears; it runs on healthy nodes only.
  CreateTpuNodes(prefix_ + "b", 1, accelerator_, "2x4", pool_);
  ASSERT_TRUE(
      JobFieldBecomes(ns.name(), "nl", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  for (const char* pod : {"nl-worker-0", "nl-worker-1"}) EXPECT_NE(NodeOf(ns.name(), pod), lost);
  const auto report = watch.Check();
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
}

// Automatic uncordon (--auto-uncordon-after): a node cordoned for a hardware condition is
// uncordoned once the condition has been clear for the healthy period, not before; the job keeps
// the node in status.cordonedNodes as its record.
TEST_F(NodeFaultsE2E, RecoveredNodeIsUncordonedAfterTheHealthyPeriod) {
  TestNamespace ns("nf-heal");
  CreateTpuNodes(prefix_, 3, accelerator_, "2x4", pool_);
  constexpr int kHealthySeconds = 6;
  OperatorProcess op({"--namespace", ns.name(), "--max-cordoned-fraction", "1",
                      "--auto-uncordon-after", std::to_string(kHealthySeconds)});
  ASSERT_EQ(ApplyYaml(ns.name(), Job("hl")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "hl", "{.status.phase}", "Running")) << op.Log();
  const std::string node = NodeOf(ns.name(), "hl-worker-0");

  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "HBM ECC").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "hl", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(Eventually([&] { return NodeField(node, "{.spec.unschedulable}") == "true"; }));
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "hl", "{.status.cordonedNodes[*]}", node)) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "hl", "{.status.phase}", "Running")) << op.Log();

  // Still unhealthy: stays cordoned however long (checked again after the uncordon below, whose
  // wait starts only when the condition clears).
  // Timed from before the write: SetNodeCondition stamps lastTransitionTime (whole seconds, so
  // up to 1 s early) when it starts, and kubectl takes a while to return after that.
  const auto cleared = Clock::now();
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "False", "ChipOK", "").exit_code, 0);
  ASSERT_TRUE(Eventually([&] { return NodeField(node, "{.spec.unschedulable}").empty(); },
                         std::chrono::seconds(60)))
      << op.Log();
  const auto waited = Clock::now() - cleared;
  EXPECT_GE(waited, std::chrono::seconds(kHealthySeconds - 1));
  EXPECT_EQ(NodeField(node, "{.spec.taints[?(@.key==\"tpujob.dev/faulty\")].effect}"), "");
  EXPECT_EQ(NodeField(node, "{.spec.taints[?(@.key==\"google.com/tpu\")].effect}"), "NoSchedule");
  EXPECT_EQ(NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordoned-by}"), "");
  EXPECT_TRUE(Eventually([&] {
    return NodeEvents(node).find("NodeUncordoned") != std::string::npos;
  })) << NodeEvents(node);
  EXPECT_EQ(JobField(ns.name(), "hl", "{.status.cordonedNodes[*]}"), node);
  EXPECT_NE(op.Log().find("msg=\"uncordoned node\""), std::string::npos);
}

// A node's hardware (accelerator: exit 10) on every host at once.
TEST_F(NodeFaultsE2E, SystemicPreflightFailureCordonsNothing) {
  TestNamespace ns("nf-systemic");
  ExpectSystemicFailureCordonsNothing(ns.name(), "{enabled: true, checks: [accelerator]}", "",
                                      "accelerator", {}, 10);
}

// A node's environment (a /dev/shm volume smaller than the job asks for: exit 11) on every host
// at once: one such node is cordoned (FaultsE2E), three at once are the job's configuration.
TEST_F(NodeFaultsE2E, SystemicEnvironmentFailureCordonsNothing) {
  TestNamespace ns("nf-systemic-env");
  const std::string dir = ClusterDir();
  ExpectSystemicFailureCordonsNothing(
      ns.name(), "{checks: [disk], thresholds: {rootDiskGB: 0, cacheDiskGB: 0, shmGB: 1000000}}",
      "          volumes: [{name: shm, emptyDir: {medium: Memory}}]\n", "disk-size shm",
      {"--root-path", dir, "--shm-path", dir, "--cache-path", dir}, 11);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
