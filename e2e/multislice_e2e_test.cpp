// Multislice TPUJobs (spec.tpu.slices) end to end: several slices of one job admitted together,
// each in a node pool of its own, with the MEGASCALE_* environment JAX and libtpu read to join
// them; the fault table applied to one slice (recovery Slice, the default) or to the job as a whole
// (recovery Job), and hot swap: a replaced slice takes a lower-priority job's pool. KWOK plays the
// TPU nodes (four pools per test, with an accelerator name of their own so no other test competes
// for them) and the real kube-scheduler places the pods by the node selectors the operator writes.
// Every assertion reads the cluster through kubectl.

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "e2e_env.h"
#include "multislice_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using nlohmann::json;

using MultisliceE2E = MultisliceTest;

TEST_F(MultisliceE2E, ThreeSlicesOfFourRunOnThreeDistinctPoolsWithTheirEnvironment) {
  CreatePools(4, 4, "2x8");
  TestNamespace ns("ms-run");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(ApplyYaml(n, Job("ms", 3, 4, "2x8")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobField(n, "ms", "{.status.readyWorkers}"), "12/12");

  std::vector<std::string> want_pods;
  for (int s = 0; s < 3; ++s) {
    for (int h = 0; h < 4; ++h) want_pods.push_back(Worker("ms", s, h));
  }
  std::sort(want_pods.begin(), want_pods.end());
  EXPECT_EQ(JobPods(n, "ms"), want_pods);

  const std::vector<std::string> pools = NodePools(n, "ms");
  ASSERT_EQ(pools.size(), 3u) << JobJson(n, "ms").dump();
  EXPECT_EQ(std::set<std::string>(pools.begin(), pools.end()).size(), 3u);
  const std::set<std::string> ours = {Pool('a'), Pool('b'), Pool('c'), Pool('d')};
  for (const std::string& pool : pools) EXPECT_TRUE(ours.contains(pool)) << pool;

  for (int s = 0; s < 3; ++s) {
    std::string peers;
    for (int h = 0; h < 4; ++h) peers += (h == 0 ? "" : ",") + Worker("ms", s, h) + ".ms";
    for (int h = 0; h < 4; ++h) {
      const std::string name = Worker("ms", s, h);
      SCOPED_TRACE(name);
      const json pod = json::parse(
          Kubectl("get pod " + name + " -n " + n + " -o json", false).output, nullptr, false);
      ASSERT_TRUE(pod.is_object());
      const json labels = pod["metadata"]["labels"];
      EXPECT_EQ(labels.value("tpujob.dev/slice-index", ""), std::to_string(s));
      EXPECT_EQ(labels.value("tpujob.dev/replica-index", ""), std::to_string(s * 4 + h));
      EXPECT_EQ(labels.value("tpujob.dev/attempt", ""), "1");
      // Pinned to its slice's pool, and the scheduler put it there.
      EXPECT_EQ(pod["spec"]["nodeSelector"].value("cloud.google.com/gke-nodepool", ""),
                pools[static_cast<size_t>(s)]);
      const std::string node = pod["spec"].value("nodeName", "");
      EXPECT_EQ(NodeField(node, "{.metadata.labels.cloud\\.google\\.com/gke-nodepool}"),
                pools[static_cast<size_t>(s)]);
      EXPECT_EQ(pod["spec"].value("hostname", ""), name);
      EXPECT_EQ(pod["spec"].value("subdomain", ""), "ms");

      const auto env = EnvOf(pod);
      EXPECT_EQ(env.at("TPU_WORKER_ID"), std::to_string(h));
      EXPECT_EQ(env.at("TPU_WORKER_HOSTNAMES"), peers);
      EXPECT_EQ(env.at("TPUJOB_REPLICA_INDEX"), std::to_string(s * 4 + h));
      EXPECT_EQ(env.at("MEGASCALE_COORDINATOR_ADDRESS"), "ms-worker-0-0.ms");
      EXPECT_EQ(env.at("MEGASCALE_NUM_SLICES"), "3");
      EXPECT_EQ(env.at("MEGASCALE_SLICE_ID"), std::to_string(s));
      EXPECT_EQ(env.at("MEGASCALE_PORT"), "8080");
      const json config = json::parse(env.at("TPU_CONFIG"), nullptr, false);
      ASSERT_TRUE(config.is_object()) << env.at("TPU_CONFIG");
      EXPECT_EQ(config.value("worker_id", -1), h);
      EXPECT_EQ(config.value("worker_count", -1), 4);
      EXPECT_EQ(config.value("slice_id", -1), s);
      EXPECT_EQ(config.value("num_slices", -1), 3);
      EXPECT_EQ(config.value("coordinator_address", ""), "ms-worker-0-0.ms");
      EXPECT_EQ(config.value("megascale_port", -1), 8080);
    }
  }

  // kubectl get shows the slices.
  const std::string table = Kubectl("get tpujob ms -n " + n, false).output;
  EXPECT_NE(table.find("SLICES"), std::string::npos) << table;
  EXPECT_EQ(
      Trim(Kubectl("get tpujob ms -n " + n + " -o custom-columns=S:.spec.tpu.slices --no-headers",
                   false)
               .output),
      "3");
  ExpectNothingLeftBehind(n, node_sets_);
}

TEST_F(MultisliceE2E, QueuedWhileOnlyTwoPoolsAreFreeAndAdmittedWhenAThirdFrees) {
  CreatePools(3, 4, "2x8");
  TestNamespace ns("ms-queue");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  // A single-slice job of 4 hosts takes one pool (best fit, then the first by name: pool a).
  ASSERT_EQ(ApplyYaml(n, Job("one", 1, 4, "2x8")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "one", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(n, "one", "{.status.nodePool}"), Pool('a'));
  EXPECT_EQ(JobPods(n, "one").front(), "one-worker-0");  // single-slice names unchanged

  ASSERT_EQ(ApplyYaml(n, Job("ms", 3, 4, "2x8")).exit_code, 0);
  const std::string want = "needs 3 node pools with 4 hosts each of " + accelerator_ +
                           " 2x8 (4 chips each), one per slice; 2 pools have room (" + Pool('b') +
                           ", " + Pool('c') + ")";
  ASSERT_TRUE(
      JobFieldBecomes(n, "ms", "{.status.conditions[?(@.type==\"Admitted\")].message}", want))
      << op.Log();
  EXPECT_EQ(JobField(n, "ms", "{.status.phase}"), "Queued");
  EXPECT_EQ(JobField(n, "ms", "{.status.conditions[?(@.type==\"Admitted\")].reason}"),
            "WaitingForCapacity");
  EXPECT_TRUE(JobPods(n, "ms").empty());

  // The first pool frees up: all three slices are admitted at once.
  ASSERT_EQ(Kubectl("delete tpujob one -n " + n).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::vector<std::string> pools = NodePools(n, "ms");
  EXPECT_EQ(pools, (std::vector<std::string>{Pool('a'), Pool('b'), Pool('c')}));
  EXPECT_EQ(JobPods(n, "ms").size(), 12u);
  ExpectNothingLeftBehind(n, node_sets_);
}

TEST_F(MultisliceE2E, RecoveryJobHardwareFaultInSliceOneReissuesEverySliceOnOtherPools) {
  // Pools of 5 hosts: the faulty node's pool still holds a slice of 4 afterwards (the tightest
  // fit, even), yet the re-issue takes the three other pools.
  CreatePools(4, 5, "2x8");
  TestNamespace ns("ms-fault");
  const std::string n = ns.name();
  PodWatch watch(n);
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(
      ApplyYaml(n, Job("ms", 3, 4, "2x8", "  faultTolerance: {maxJobRetries: 2, recovery: Job}\n"))
          .exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::vector<std::string> first_pools = NodePools(n, "ms");
  ASSERT_EQ(first_pools.size(), 3u);
  const std::string node = NodeOf(n, Worker("ms", 1, 2));
  ASSERT_FALSE(node.empty());
  ASSERT_EQ(NodeField(node, "{.metadata.labels.cloud\\.google\\.com/gke-nodepool}"),
            first_pools[1]);

  ASSERT_EQ(
      SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 1: ECC errors").exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobField(n, "ms", "{.status.jobRetries}"), "1");
  EXPECT_EQ(JobField(n, "ms",
                     "{.status.faults[0].kind}/{.status.faults[0].action}/"
                     "{.status.faults[0].slice}/{.status.faults[0].node}"),
            "NodeUnhealthy/ReissueJob/1/" + node);
  // Only the faulty node is cordoned.
  EXPECT_EQ(CordonedNodes(), node);
  // Attempt 2: three pools, none of them the faulty node's, 12 pods of attempt 2.
  const std::vector<std::string> pools = NodePools(n, "ms");
  ASSERT_EQ(pools.size(), 3u);
  EXPECT_EQ(std::count(pools.begin(), pools.end(), first_pools[1]), 0)
      << first_pools[1] << " is in " << JobJson(n, "ms")["status"].dump();
  const std::vector<std::string> pods = JobPods(n, "ms");
  EXPECT_EQ(pods.size(), 12u);
  for (const std::string& pod : pods) {
    EXPECT_EQ(Get(n, "pod " + pod, "{.metadata.labels.tpujob\\.dev/attempt}"), "2") << pod;
    EXPECT_NE(NodeOf(n, pod), node) << pod;
  }
  // Every pod of attempt 1 was gone before any pod of attempt 2 existed; no worker id twice.
  const auto report = watch.CheckAfterCreations(24);
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  EXPECT_EQ(report.creations, 24);
  ExpectNothingLeftBehind(n, node_sets_);
}

TEST_F(MultisliceE2E, RecoveryJobMaintenanceOnSliceTwoReissuesWithoutUsingARetry) {
  CreatePools(4, 4, "2x8");
  TestNamespace ns("ms-maint");
  const std::string n = ns.name();
  PodWatch watch(n);
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(ApplyYaml(n, Job("ms", 3, 4, "2x8",
                             "  faultTolerance: {maxJobRetries: 1, recovery: Job, "
                             "maintenanceGracePeriodSeconds: 120}\n"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::string node = NodeOf(n, Worker("ms", 2, 0));
  ASSERT_FALSE(node.empty());
  // GKE's notice: the impending-termination taint.
  ASSERT_EQ(
      Kubectl("taint node " + node + " cloud.google.com/impending-node-termination=true:NoSchedule")
          .exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobField(n, "ms", "{.status.jobRetries}"), "");  // no retry used
  EXPECT_EQ(JobField(n, "ms",
                     "{.status.faults[0].kind}/{.status.faults[0].action}/"
                     "{.status.faults[0].slice}/{.status.faults[0].node}"),
            "Maintenance/ReissueJob/2/" + node);
  EXPECT_EQ(CordonedNodes(), "");
  for (const std::string& pod : JobPods(n, "ms")) EXPECT_NE(NodeOf(n, pod), node) << pod;
  // Every slice's pods were stopped with the maintenance grace period.
  EXPECT_NE(watch.Raw().find("grace=120"), std::string::npos) << watch.Raw();
  const auto report = watch.Check();
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  ExpectNothingLeftBehind(n, node_sets_);
}

// --- Slice recovery (spec.faultTolerance.recovery Slice, the default) --------------------------

// Pod name -> node, for every pod of a job.
constexpr char kFault0[] =
    "{.status.faults[0].kind}/{.status.faults[0].action}/{.status.faults[0].slice}/"
    "{.status.faults[0].node}";
constexpr char kAdmittedMessage[] = "{.status.conditions[?(@.type==\"Admitted\")].message}";

TEST_F(MultisliceE2E, AHardwareFaultOnSliceTwoReplacesOnlyThatSliceOnTheSparePool) {
  CreatePools(5, 4, "2x8");
  TestNamespace ns("ms-slice");
  const std::string n = ns.name();
  PodWatch watch(n);
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(
      ApplyYaml(n, Job("ms", 4, 4, "2x8", "  faultTolerance: {maxJobRetries: 2}\n")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::vector<std::string> first_pools = NodePools(n, "ms");
  ASSERT_EQ(first_pools.size(), 4u);
  std::string spare;
  for (char letter : {'a', 'b', 'c', 'd', 'e'}) {
    if (std::count(first_pools.begin(), first_pools.end(), Pool(letter)) == 0) spare = Pool(letter);
  }
  const std::map<std::string, std::string> before = NodesByPod(n, "ms");
  ASSERT_EQ(before.size(), 16u);
  const std::string coordinator = PodEnv(n, Worker("ms", 3, 0), "MEGASCALE_COORDINATOR_ADDRESS");
  const std::string node = before.at(Worker("ms", 2, 1));

  ASSERT_EQ(
      SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 1: ECC errors").exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobField(n, "ms", "{.status.jobRetries}"), "1");  // one re-issue
  EXPECT_EQ(JobField(n, "ms", kFault0), "NodeUnhealthy/ReplaceSlice/2/" + node);
  EXPECT_EQ(CordonedNodes(), node);
  EXPECT_EQ(JobField(n, "ms", "{.status.sliceRecovery}"), "");  // dropped once running
  EXPECT_NE(JobField(n, "ms", kAdmittedMessage)
                .find("attempt 2 admitted: slice 2 in node pool " + spare +
                      "; slices 0, 1 and 3 restart on the nodes they hold"),
            std::string::npos)
      << JobField(n, "ms", kAdmittedMessage);

  // Slices 0, 1 and 3 keep their pools and their nodes; slice 2 runs on the spare pool.
  const std::vector<std::string> pools = NodePools(n, "ms");
  ASSERT_EQ(pools.size(), 4u);
  EXPECT_EQ(pools[0], first_pools[0]);
  EXPECT_EQ(pools[1], first_pools[1]);
  EXPECT_EQ(pools[2], spare);
  EXPECT_EQ(pools[3], first_pools[3]);
  const std::map<std::string, std::string> after = NodesByPod(n, "ms");
  ASSERT_EQ(after.size(), 16u);
  for (const auto& [pod, where] : after) {
    SCOPED_TRACE(pod);
    EXPECT_EQ(Get(n, "pod " + pod, "{.metadata.labels.tpujob\\.dev/attempt}"), "2");
    const std::string slice = Get(n, "pod " + pod, "{.metadata.labels.tpujob\\.dev/slice-index}");
    if (slice == "2") {
      EXPECT_EQ(NodeField(where, "{.metadata.labels.cloud\\.google\\.com/gke-nodepool}"), spare);
      EXPECT_EQ(PodEnv(n, pod, "MEGASCALE_SLICE_ID"), "2");
    } else {
      EXPECT_EQ(where, before.at(pod));
    }
    EXPECT_EQ(PodEnv(n, pod, "MEGASCALE_COORDINATOR_ADDRESS"), coordinator);
  }
  const auto events = JobEvents(n, "ms");
  EXPECT_EQ(EventsWith(events, "Reissued", "replacing slice 2 alone as attempt 2").size(), 1u)
      << DescribeEvents(events);
  // Every pod of attempt 1 was gone before any pod of attempt 2 existed; no worker id twice.
  // (Not an exact count of creations: KWOK's own controller sometimes deletes, by name, a pod
  // created on a node right after a pod of that name left it, and the operator makes it again.)
  const auto report = watch.CheckAfterCreations(32);
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  ExpectNothingLeftBehind(n, node_sets_);
}

TEST_F(MultisliceE2E, WithoutASparePoolTheSliceWaitsKeepingTheOtherPoolsAndGoesFirstWhenOneFrees) {
  CreatePools(4, 4, "2x8");
  TestNamespace ns("ms-wait");
  const std::string n = ns.name();
  PodWatch watch(n);
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(ApplyYaml(n, Job("ms", 4, 4, "2x8",
                             "  queueTimeoutSeconds: 600\n  preemptible: false\n"
                             "  faultTolerance: {maxJobRetries: 2}\n"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::vector<std::string> first_pools = NodePools(n, "ms");
  ASSERT_EQ(first_pools.size(), 4u);
  const std::map<std::string, std::string> before = NodesByPod(n, "ms");
  // A job of higher priority waits for a pool of the same shape (it may not preempt this one).
  ASSERT_EQ(ApplyYaml(n, Job("other", 1, 4, "2x8", "  priority: 1000\n")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "other", "{.status.conditions[?(@.type==\"Admitted\")].reason}",
                              "WaitingForCapacity"))
      << op.Log();

  const std::string node = before.at(Worker("ms", 2, 0));
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 0").exit_code, 0);
  // Slice 2 waits for a pool (first in line: the other job now waits behind it); the other
  // slices keep theirs, and no pod of attempt 2 exists meanwhile.
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.conditions[?(@.type==\"Admitted\")].reason}",
                              "WaitingForCapacity"))
      << op.Log();
  EXPECT_EQ(JobField(n, "ms", "{.status.phase}"), "Queued");
  EXPECT_EQ(JobField(n, "ms", "{.status.attempt}"), "2");
  EXPECT_NE(JobField(n, "ms", kAdmittedMessage).find("to replace slice 2"), std::string::npos)
      << JobField(n, "ms", kAdmittedMessage);
  EXPECT_EQ(NodePools(n, "ms"),
            (std::vector<std::string>{first_pools[0], first_pools[1], "", first_pools[3]}));
  EXPECT_EQ(JobField(n, "ms", "{.status.sliceRecovery.slices}"), "[2]");
  ASSERT_TRUE(JobFieldBecomes(n, "other", "{.status.conditions[?(@.type==\"Admitted\")].reason}",
                              "WaitingInLine"))
      << op.Log();
  EXPECT_TRUE(JobPods(n, "ms").empty());

  // A pool frees up (a new one joins): slice 2 takes it before the job of higher priority.
  const std::string set = prefix_ + "-e";
  node_sets_.push_back(set);
  CreateTpuNodes(set, 4, accelerator_, "2x8", "pool-" + set);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(NodePools(n, "ms"),
            (std::vector<std::string>{first_pools[0], first_pools[1], Pool('e'), first_pools[3]}));
  EXPECT_EQ(JobField(n, "other", "{.status.phase}"), "Queued");
  for (const auto& [pod, where] : NodesByPod(n, "ms")) {
    if (Get(n, "pod " + pod, "{.metadata.labels.tpujob\\.dev/slice-index}") != "2") {
      EXPECT_EQ(where, before.at(pod)) << pod;
    }
  }
  const auto report = watch.CheckAfterCreations(32);
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  ASSERT_EQ(Kubectl("delete tpujob other -n " + n).exit_code, 0);
  ExpectNothingLeftBehind(n, node_sets_);
}

TEST_F(MultisliceE2E, AReplacedSliceThatFindsNoPoolFailsAtItsQueueTimeout) {
  CreatePools(2, 2, "2x4");
  TestNamespace ns("ms-timeout");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(ApplyYaml(n, Job("ms", 2, 2, "2x4",
                             "  queueTimeoutSeconds: 5\n"
                             "  faultTolerance: {maxJobRetries: 2}\n"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::string node = NodeOf(n, Worker("ms", 1, 0));
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 0").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Failed", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobField(n, "ms", "{.status.conditions[?(@.type==\"Failed\")].reason}"),
            "QueueTimeout");
  const std::string message =
      JobField(n, "ms", "{.status.conditions[?(@.type==\"Failed\")].message}");
  EXPECT_NE(message.find("attempt 2 (re-issued) waited in the queue longer than its queue timeout "
                         "of 5s"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("to replace slice 1"), std::string::npos) << message;
  EXPECT_EQ(JobField(n, "ms", kFault0), "NodeUnhealthy/ReplaceSlice/1/" + node);
  ExpectNothingLeftBehind(n, node_sets_);
}

TEST_F(MultisliceE2E, HotSwapAReplacedSliceTakesTheOnlySparePoolFromALowerPriorityJob) {
  CreatePools(4, 2, "2x4");
  TestNamespace ns("ms-swap");
  const std::string n = ns.name();
  PodWatch watch(n);
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(ApplyYaml(n, Job("big", 3, 2, "2x4",
                             "  priority: 100\n"
                             "  faultTolerance: {maxJobRetries: 2}\n"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "big", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  ASSERT_EQ(ApplyYaml(n, Job("low", 1, 2, "2x4",
                             "  priority: 1\n"
                             "  faultTolerance: {maxJobRetries: 1, "
                             "maintenanceGracePeriodSeconds: 5}\n"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "low", "{.status.phase}", "Running")) << op.Log();
  const std::string low_pool = JobField(n, "low", "{.status.nodePool}");
  ASSERT_FALSE(low_pool.empty());
  const std::vector<std::string> first_pools = NodePools(n, "big");

  const std::string node = NodeOf(n, Worker("big", 1, 1));
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 3").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "big", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "big", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(NodePools(n, "big"),
            (std::vector<std::string>{first_pools[0], low_pool, first_pools[2]}));
  EXPECT_NE(JobField(n, "big", kAdmittedMessage)
                .find("after preempting " + n + "/low (priority 1) in node pool " + low_pool),
            std::string::npos)
      << JobField(n, "big", kAdmittedMessage);
  // The victim was stopped with its grace period, uncounted, and waits by its priority.
  ASSERT_TRUE(JobFieldBecomes(n, "low", "{.status.phase}", "Queued")) << op.Log();
  EXPECT_EQ(JobField(n, "low", "{.status.conditions[?(@.type==\"Preempted\")].status}"), "True");
  EXPECT_EQ(JobField(n, "low", "{.status.preemptedBy}"), n + "/big");
  EXPECT_EQ(JobField(n, "low", "{.status.jobRetries}"), "");
  EXPECT_EQ(JobField(n, "low", "{.status.faults[0].kind}/{.status.faults[0].action}"),
            "Preempted/PreemptJob");
  EXPECT_NE(JobField(n, "low", "{.status.faults[0].message}").find("to replace slice 1"),
            std::string::npos);
  EXPECT_NE(watch.Raw().find("low-worker-0 "), std::string::npos);
  const auto report = watch.Check();
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  ASSERT_EQ(Kubectl("delete tpujob low -n " + n).exit_code, 0);
  ExpectNothingLeftBehind(n, node_sets_);
}

TEST_F(MultisliceE2E, AnOperatorKilledWhileASliceWaitsResumesTheSameRecoveryOnce) {
  CreatePools(2, 2, "2x4");
  TestNamespace ns("ms-slice-kill");
  const std::string n = ns.name();
  PodWatch watch(n);
  ASSERT_EQ(
      ApplyYaml(n, Job("ms", 2, 2, "2x4", "  faultTolerance: {maxJobRetries: 2}\n")).exit_code, 0);
  std::map<std::string, std::string> before;
  {
    OperatorProcess op({"--namespace", n});
    ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
        << op.Log();
    before = NodesByPod(n, "ms");
    ASSERT_EQ(SetNodeCondition(before.at(Worker("ms", 1, 0)), "TPUUnhealthy", "True", "ChipError",
                               "chip 0")
                  .exit_code,
              0);
    // No spare pool: slice 1 waits, and the operator is killed while it does.
    ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.conditions[?(@.type==\"Admitted\")].reason}",
                                "WaitingForCapacity"))
        << op.Log();
    op.Kill();
  }
  OperatorProcess op({"--namespace", n});
  const std::string set = prefix_ + "-c";
  node_sets_.push_back(set);
  CreateTpuNodes(set, 2, accelerator_, "2x4", "pool-" + set);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  // The same recovery, once: one retry, one fault record, slice 0 back on its nodes.
  EXPECT_EQ(JobField(n, "ms", "{.status.attempt}/{.status.jobRetries}"), "2/1");
  EXPECT_EQ(JobField(n, "ms", "{.status.faults[*].action}"), "ReplaceSlice");
  EXPECT_EQ(NodePools(n, "ms")[1], Pool('c'));
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(NodeOf(n, Worker("ms", 0, h)), before.at(Worker("ms", 0, h)));
  }
  const auto report = watch.CheckAfterCreations(8);
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  ExpectNothingLeftBehind(n, node_sets_);
}

// The google.com/tpu requests of the bound, non-terminated pods on each of `nodes` (every
// namespace), against the node's allocatable: "node x: 8 requested of 4" per node over, else "".
std::string OvercommittedNodes(const std::vector<std::string>& nodes) {
  const json pods = json::parse(Kubectl("get pods -A -o json", false).output, nullptr, false);
  if (!pods.is_object()) return "<cannot list pods>";
  std::map<std::string, long> requested;
  std::map<std::string, std::vector<std::string>> who;
  auto chips = [](const json& container) {
    const json requests =
        container.value("resources", json::object()).value("requests", json::object());
    auto it = requests.find("google.com/tpu");
    if (it == requests.end()) return 0L;
    return it->is_string() ? std::stol(it->get<std::string>()) : it->get<long>();
  };
  for (const json& pod : pods.value("items", json::array())) {
    const std::string node = pod["spec"].value("nodeName", "");
    const std::string phase = pod.value("status", json::object()).value("phase", "");
    if (node.empty() || phase == "Succeeded" || phase == "Failed") continue;
    long sum = 0, init = 0;
    for (const json& c : pod["spec"].value("containers", json::array())) sum += chips(c);
    for (const json& c : pod["spec"].value("initContainers", json::array())) {
      init = std::max(init, chips(c));
    }
    requested[node] += std::max(sum, init);
    who[node].push_back(pod["metadata"].value("namespace", "") + "/" +
                        pod["metadata"].value("name", ""));
  }
  std::string out;
  for (const std::string& node : nodes) {
    const std::string allocatable = NodeField(node, "{.status.allocatable.google\\.com/tpu}");
    const long has = allocatable.empty() ? 0 : std::stol(allocatable);
    if (requested[node] <= has) continue;
    out += "node " + node + ": " + std::to_string(requested[node]) + " requested of " +
           std::to_string(has) + " by " + testing::PrintToString(who[node]) + "; ";
  }
  return out;
}

// The user's case: 3 slices of 2 hosts (2x2x2), 6 pools (3 spare). A node of slice 0 turns
// TPUUnhealthy and, about 100 ms later, one of slice 2, while the recovery of slice 0 is being
// planned or carried out. Both faults are recorded and both nodes cordoned; slices 0 and 2 are
// replaced, each on a spare pool, slice 1 keeps its pool and nodes; and no node ever holds more
// google.com/tpu than it has (the left-out worker of slice 2 used to be placed by the scheduler
// on the node its slice-mate was bound to at the same moment: 8 of 4 allocated).
TEST_F(MultisliceE2E, FaultsInTwoSlicesOneHundredMillisecondsApartReplaceBothWithNoHostShared) {
  CreatePools(6, 2, "2x2x2");
  TestNamespace ns("ms-two-faults");
  const std::string n = ns.name();
  PodWatch watch(n);
  // The cordon cap is a fraction of the cluster's nodes: of a dozen, the default 10 % is one.
  OperatorProcess op({"--namespace", n, "--max-cordoned-fraction", "1"});
  ASSERT_EQ(
      ApplyYaml(n, Job("ms", 3, 2, "2x2x2", "  faultTolerance: {maxJobRetries: 3}\n")).exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::vector<std::string> first_pools = NodePools(n, "ms");
  ASSERT_EQ(first_pools.size(), 3u);
  const std::map<std::string, std::string> before = NodesByPod(n, "ms");
  ASSERT_EQ(before.size(), 6u);
  std::vector<std::string> all_nodes;
  for (const std::string& set : node_sets_) {
    for (int i = 0; i < 2; ++i) all_nodes.push_back(set + "-" + std::to_string(i));
  }
  const std::string node0 = before.at(Worker("ms", 0, 0));
  const std::string node2 = before.at(Worker("ms", 2, 0));

  ASSERT_EQ(SetNodeCondition(node0, "TPUUnhealthy", "True", "ChipError", "chip 1").exit_code, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(SetNodeCondition(node2, "TPUUnhealthy", "True", "ChipError", "chip 2").exit_code, 0);

  // Through the recovery, no node holds more chips than it has.
  std::string overcommitted;
  const bool running = Eventually(
      [&] {
        const std::string now = OvercommittedNodes(all_nodes);
        if (!now.empty() && overcommitted.empty()) overcommitted = now;
        // Attempt 2, or 3 when the second fault came once attempt 2 was admitted already.
        const std::string at = JobField(n, "ms", "{.status.attempt}/{.status.phase}");
        return at == "2/Running" || at == "3/Running";
      },
      std::chrono::seconds(90), std::chrono::milliseconds(200));
  EXPECT_EQ(overcommitted, "");
  EXPECT_EQ(OvercommittedNodes(all_nodes), "");
  ASSERT_TRUE(running) << JobField(n, "ms", "{.status.attempt}/{.status.phase}") << "\n"
                       << op.Log();

  // Both faults recorded, once each, and both nodes cordoned.
  const json status = JobJson(n, "ms").value("status", json::object());
  std::map<std::string, int> recorded;
  for (const json& f : status.value("faults", json::array())) {
    EXPECT_EQ(f.value("kind", ""), "NodeUnhealthy") << f.dump();
    EXPECT_EQ(f.value("action", ""), "ReplaceSlice") << f.dump();
    recorded[f.value("node", "")]++;
  }
  EXPECT_EQ(recorded, (std::map<std::string, int>{{node0, 1}, {node2, 1}})) << status.dump();
  const std::string retries = status.value("jobRetries", json(0)).dump();
  EXPECT_TRUE(retries == "1" || retries == "2") << retries;  // one per decision that saw faults
  std::vector<std::string> cordoned = {node0, node2};
  std::sort(cordoned.begin(), cordoned.end());
  EXPECT_EQ(CordonedNodes(), cordoned[0] + " " + cordoned[1]);

  // Slices 0 and 2 on spare pools, slice 1 where it was.
  const std::vector<std::string> pools = NodePools(n, "ms");
  ASSERT_EQ(pools.size(), 3u);
  EXPECT_EQ(pools[1], first_pools[1]);
  for (size_t s : {0u, 2u}) {
    EXPECT_EQ(std::count(first_pools.begin(), first_pools.end(), pools[s]), 0) << pools[s];
  }
  EXPECT_NE(pools[0], pools[2]);
  const std::map<std::string, std::string> after = NodesByPod(n, "ms");
  ASSERT_EQ(after.size(), 6u);
  std::set<std::string> hosts;
  for (const auto& [pod, where] : after) hosts.insert(where);
  EXPECT_EQ(hosts.size(), 6u) << testing::PrintToString(after);  // no host shared
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(after.at(Worker("ms", 1, h)), before.at(Worker("ms", 1, h)));
  }
  const auto report = watch.Check();
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  ExpectNothingLeftBehind(n, node_sets_);
}

TEST_F(MultisliceE2E, MaintenanceOnSliceTwoReplacesOnlyThatSliceWithoutUsingARetry) {
  CreatePools(4, 4, "2x8");
  TestNamespace ns("ms-maint-slice");
  const std::string n = ns.name();
  PodWatch watch(n);
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(ApplyYaml(n, Job("ms", 3, 4, "2x8",
                             "  faultTolerance: {maxJobRetries: 1, "
                             "maintenanceGracePeriodSeconds: 30}\n"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::vector<std::string> first_pools = NodePools(n, "ms");
  const std::map<std::string, std::string> before = NodesByPod(n, "ms");
  const std::string node = before.at(Worker("ms", 2, 0));
  ASSERT_EQ(
      Kubectl("taint node " + node + " cloud.google.com/impending-node-termination=true:NoSchedule")
          .exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "ms", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobField(n, "ms", "{.status.jobRetries}"), "");  // no retry used
  EXPECT_EQ(JobField(n, "ms", kFault0), "Maintenance/ReplaceSlice/2/" + node);
  EXPECT_EQ(CordonedNodes(), "");
  const std::vector<std::string> pools = NodePools(n, "ms");
  ASSERT_EQ(pools.size(), 3u);
  EXPECT_EQ(pools[0], first_pools[0]);
  EXPECT_EQ(pools[1], first_pools[1]);
  EXPECT_NE(pools[2], first_pools[2]);
  for (const auto& [pod, where] : NodesByPod(n, "ms")) {
    if (Get(n, "pod " + pod, "{.metadata.labels.tpujob\\.dev/slice-index}") == "2") {
      EXPECT_NE(where, node) << pod;
    } else {
      EXPECT_EQ(where, before.at(pod)) << pod;
    }
  }
  // Every slice's program was stopped with the maintenance grace period.
  EXPECT_NE(watch.Raw().find("grace=30"), std::string::npos) << watch.Raw();
  const auto report = watch.CheckAfterCreations(24);
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  ExpectNothingLeftBehind(n, node_sets_);
}

// The pre-flight dns item of a multislice worker resolves the hosts of its own slice and the
// coordinator: run here with the environment the operator gave the pod's init container and a
// hosts file standing in for cluster DNS.
TEST_F(MultisliceE2E, PreflightDnsChecksTheSlicesPeersAndTheCoordinator) {
  CreatePools(2, 2, "2x4");
  TestNamespace ns("ms-dns");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(ApplyYaml(n, Job("pf", 2, 2, "2x4",
                             "  faultTolerance: {preflight: {enabled: true, checks: [dns]}}\n"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "pf", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::string pod = Worker("pf", 1, 1);
  const std::string hosts = ClusterDir() + "/hosts-" + n;
  const auto run = [&](const std::string& names) {
    std::ofstream(hosts) << "10.0.0.1 " << names << "\n";
    return RunPreflightFor(n, pod, NodeOf(n, pod), {"--dns-timeout", "0", "--hosts-file", hosts});
  };
  // The slice's two hosts resolve; the coordinator (slice 0's worker 0) does not.
  PreflightRun missing = run("pf-worker-1-0.pf pf-worker-1-1.pf");
  EXPECT_NE(missing.exit_code, 0) << missing.output;
  const json report = json::parse(missing.report, nullptr, false);
  ASSERT_TRUE(report.is_object()) << missing.output;
  EXPECT_EQ(report["items"][0].value("item", ""), "dns");
  EXPECT_EQ(report["items"][0].value("value", ""), "2/3 resolved");
  EXPECT_NE(report["items"][0].value("message", "").find("pf-worker-0-0.pf"), std::string::npos)
      << report.dump();
  // With the coordinator it passes; slice 0's other host is not among the names checked.
  PreflightRun passed = run("pf-worker-1-0.pf pf-worker-1-1.pf pf-worker-0-0.pf");
  EXPECT_EQ(passed.exit_code, 0) << passed.output;
  const json ok = json::parse(passed.report, nullptr, false);
  ASSERT_TRUE(ok.is_object()) << passed.output;
  EXPECT_EQ(ok["items"][0].value("value", ""), "3/3 resolved");
}

// The operator is SIGKILLed while it creates the 64 pods of a 4 x 16 job (its API client held
// to a few requests per second so the creation is caught in the middle), then started again:
// the job runs with exactly one pod per worker of attempt 1, each created once.
TEST_F(MultisliceE2E, OperatorKilledDuringTheCreationOfFourSlicesOfSixteenLeavesExactly64Pods) {
  CreatePools(4, 16, "8x8");
  TestNamespace ns("ms-kill");
  const std::string n = ns.name();
  PodWatch watch(n);
  ASSERT_EQ(ApplyYaml(n, Job("big", 4, 16, "8x8")).exit_code, 0);
  size_t at_kill = 0;
  {
    OperatorProcess op({"--namespace", n, "--kube-api-qps", "4", "--kube-api-burst", "1"});
    ASSERT_TRUE(Eventually([&] { return JobPods(n, "big").size() >= 4; }, std::chrono::seconds(60),
                           std::chrono::milliseconds(50)))
        << op.Log();
    op.Kill();
    at_kill = JobPods(n, "big").size();
  }
  EXPECT_LT(at_kill, 64u) << "the creation was not caught in the middle";
  OperatorProcess op({"--namespace", n});
  ASSERT_TRUE(JobFieldBecomes(n, "big", "{.status.phase}", "Running", std::chrono::seconds(120)))
      << op.Log();
  EXPECT_EQ(JobField(n, "big", "{.status.attempt}"), "1");
  EXPECT_EQ(JobField(n, "big", "{.status.readyWorkers}"), "64/64");
  EXPECT_EQ(NodePools(n, "big").size(), 4u);
  const std::vector<std::string> pods = JobPods(n, "big");
  EXPECT_EQ(pods.size(), 64u);
  const auto report = watch.CheckAfterCreations(64);
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  EXPECT_EQ(report.creations, 64) << "killed with " << at_kill << " pods made";
  ExpectNothingLeftBehind(n, node_sets_);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
