// Elastic slices end to end (spec.tpu.minSlices, policy/elastic.h): a slice that loses its node
// pool and finds no other within waitSeconds is given up, and the job runs on the slices it holds,
// renumbered, with MEGASCALE_NUM_SLICES telling every program how many; when a pool is free again
// the job grows back without using a retry. Below minSlices the slice waits as before. KWOK plays
// the TPU nodes, the real kube-scheduler places the pods; every assertion reads the cluster
// through kubectl.

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "multislice_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using ElasticE2E = MultisliceTest;

constexpr char kDegraded[] =
    "{.status.conditions[?(@.type==\"Degraded\")].status}/"
    "{.status.conditions[?(@.type==\"Degraded\")].reason}";

TEST_F(ElasticE2E, MinSlicesAboveSlicesIsRefusedByTheApiServer) {
  TestNamespace ns("el-refuse");
  const CommandResult refused = ApplyYaml(ns.name(), Job("el", 2, 2, "2x4", "", ", minSlices: 3"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("tpu.minSlices must be at most tpu.slices"), std::string::npos)
      << refused.output;
}

TEST_F(ElasticE2E, WithoutASparePoolTheJobRunsOnThreeSlicesThenGrowsBackToFourOnANewPool) {
  CreatePools(4, 2, "2x4");
  TestNamespace ns("el-shrink");
  const std::string n = ns.name();
  PodWatch watch(n);
  OperatorProcess op({"--namespace", n});
  // waitSeconds 5 and a grace period of 10 s keep the test short (defaults 300 and 300).
  ASSERT_EQ(ApplyYaml(n, Job("el", 4, 2, "2x4",
                             "  faultTolerance: {maxJobRetries: 2, maintenanceGracePeriodSeconds: "
                             "10, elastic: {waitSeconds: 5}}\n",
                             ", minSlices: 2"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "el", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobField(n, "el", "{.status.tpu.slicesSummary}"), "4/4");
  const std::vector<std::string> first_pools = NodePools(n, "el");
  ASSERT_EQ(first_pools.size(), 4u);
  const std::map<std::string, std::string> before = NodesByPod(n, "el");
  ASSERT_EQ(before.size(), 8u);
  const std::string coordinator = PodEnv(n, Worker("el", 0, 0), "MEGASCALE_COORDINATOR_ADDRESS");

  // A hardware fault on slice 2; no pool is free.
  const std::string node = before.at(Worker("el", 2, 1));
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 3").exit_code, 0);
  ASSERT_TRUE(
      JobFieldBecomes(n, "el", "{.status.tpu.slicesSummary}", "3/4", std::chrono::seconds(60)))
      << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "el", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobField(n, "el", "{.status.attempt}"), "2");
  EXPECT_EQ(JobField(n, "el", "{.status.jobRetries}"), "1");  // the fault's; the shrink adds none
  EXPECT_EQ(JobField(n, "el", kDegraded), "True/RunningOnFewerSlices");
  EXPECT_EQ(CordonedNodes(), node);
  EXPECT_EQ(NodePools(n, "el"),
            (std::vector<std::string>{first_pools[0], first_pools[1], first_pools[3]}));
  EXPECT_NE(Kubectl("get tpujob el -n " + n, false).output.find("3/4"), std::string::npos);
  // Slices 0, 1 and 3 (now 2) on the nodes they held, ids 0-2, each program told 3 slices.
  const std::map<std::string, std::string> degraded = NodesByPod(n, "el");
  ASSERT_EQ(degraded.size(), 6u) << testing::PrintToString(degraded);
  for (int slice = 0; slice < 3; ++slice) {
    for (int host = 0; host < 2; ++host) {
      const std::string pod = Worker("el", slice, host);
      SCOPED_TRACE(pod);
      ASSERT_TRUE(degraded.contains(pod));
      EXPECT_EQ(degraded.at(pod), before.at(Worker("el", slice == 2 ? 3 : slice, host)));
      EXPECT_EQ(PodEnv(n, pod, "MEGASCALE_NUM_SLICES"), "3");
      EXPECT_EQ(PodEnv(n, pod, "MEGASCALE_SLICE_ID"), std::to_string(slice));
      EXPECT_EQ(PodEnv(n, pod, "MEGASCALE_COORDINATOR_ADDRESS"), coordinator);
      EXPECT_EQ(Get(n, "pod " + pod, "{.metadata.labels.tpujob\\.dev/attempt}"), "2");
    }
  }
  const auto events = JobEvents(n, "el");
  EXPECT_EQ(EventsWith(events, "RunningOnFewerSlices", "(slice 3 runs as slice 2)").size(), 1u)
      << DescribeEvents(events);

  // A fifth pool appears: the job grows back to 4 slices, slice 3 on the new pool.
  const std::string set = prefix_ + "-e";
  node_sets_.push_back(set);
  CreateTpuNodes(set, 2, accelerator_, "2x4", "pool-" + set);
  ASSERT_TRUE(
      JobFieldBecomes(n, "el", "{.status.tpu.slicesSummary}", "4/4", std::chrono::seconds(60)))
      << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "el", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobField(n, "el", "{.status.attempt}"), "3");
  EXPECT_EQ(JobField(n, "el", "{.status.jobRetries}"), "1");  // a grow uses no retry
  EXPECT_EQ(JobField(n, "el", kDegraded), "False/ScalingUp");
  EXPECT_EQ(NodePools(n, "el"),
            (std::vector<std::string>{first_pools[0], first_pools[1], first_pools[3], Pool('e')}));
  const std::map<std::string, std::string> grown = NodesByPod(n, "el");
  ASSERT_EQ(grown.size(), 8u);
  for (const auto& [pod, where] : grown) {
    SCOPED_TRACE(pod);
    EXPECT_EQ(PodEnv(n, pod, "MEGASCALE_NUM_SLICES"), "4");
    if (pod.starts_with("el-worker-3-")) {
      EXPECT_EQ(NodeField(where, "{.metadata.labels.cloud\\.google\\.com/gke-nodepool}"),
                Pool('e'));
    } else {
      EXPECT_EQ(where, degraded.at(pod));  // the kept slices stay on their nodes
    }
  }
  EXPECT_EQ(EventsWith(JobEvents(n, "el"), "ScalingUp", "growing back from 3 to 4 slices").size(),
            1u);
  // Goodput: the time on 3 slices was productive, slice 3's chips were lost meanwhile.
  EXPECT_NE(JobField(n, "el", "{.status.goodput.degradedSeconds}"), "");
  EXPECT_NE(JobField(n, "el", "{.status.goodput.lostChipSeconds.degraded}"), "");
  const std::string metrics =
      RunCommand("curl -sf http://127.0.0.1:" + std::to_string(op.metrics_port()) + "/metrics",
                 false)
          .output;
  for (const char* direction : {"down", "up"}) {
    EXPECT_NE(metrics.find("tpujob_job_slice_scaling_total{direction=\"" + std::string(direction) +
                           "\",job_namespace=\"" + n + "\"} 1"),
              std::string::npos)
        << direction << "\n"
        << metrics;
  }
  // No pod of one attempt existed beside another's; no worker id twice.
  const auto report = watch.CheckAfterCreations(22);
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  ExpectNothingLeftBehind(n, node_sets_);
}

TEST_F(ElasticE2E, BelowMinSlicesASecondFaultWaitsAndTheQueueTimeoutEndsTheJob) {
  CreatePools(3, 2, "2x4");
  TestNamespace ns("el-min");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(ApplyYaml(n, Job("el", 3, 2, "2x4",
                             "  queueTimeoutSeconds: 20\n"
                             "  faultTolerance: {maxJobRetries: 3, elastic: {waitSeconds: 2}}\n",
                             ", minSlices: 2"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "el", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::string first = NodeOf(n, Worker("el", 1, 0));
  ASSERT_EQ(SetNodeCondition(first, "TPUUnhealthy", "True", "ChipError", "chip 0").exit_code, 0);
  ASSERT_TRUE(
      JobFieldBecomes(n, "el", "{.status.tpu.slicesSummary}", "2/3", std::chrono::seconds(60)))
      << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "el", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();

  // A fault on slice 0 leaves 1 slice, fewer than minSlices: it waits for a pool.
  const std::string second = NodeOf(n, Worker("el", 0, 1));
  ASSERT_EQ(SetNodeCondition(second, "TPUUnhealthy", "True", "ChipError", "chip 1").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "el", "{.status.phase}", "Queued", std::chrono::seconds(60)))
      << op.Log();
  const std::string admitted =
      JobField(n, "el", "{.status.conditions[?(@.type==\"Admitted\")].message}");
  EXPECT_NE(admitted.find("the job cannot run on 1 slice (minSlices 2), so it waits"),
            std::string::npos)
      << admitted;
  const std::string degraded =
      JobField(n, "el", "{.status.conditions[?(@.type==\"Degraded\")].message}");
  EXPECT_NE(degraded.find("attempt 3 on 2 of 3 slices waits: slice 0 lost its node pool"),
            std::string::npos)
      << degraded;
  EXPECT_EQ(JobField(n, "el", kDegraded), "True/RunningOnFewerSlices");
  ASSERT_TRUE(JobFieldBecomes(n, "el", "{.status.phase}", "Failed", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobField(n, "el", "{.status.conditions[?(@.type==\"Failed\")].reason}"),
            "QueueTimeout");
  EXPECT_EQ(JobField(n, "el", "{.status.jobRetries}"), "2");
  ExpectNothingLeftBehind(n, node_sets_);
}

// A degraded job's pools are anyone's to preempt as before: a job of higher priority takes one
// (the degraded job queues again on the slices it ran on), and a degraded job never preempts a
// job of equal priority to grow back.
TEST_F(ElasticE2E, ADegradedJobNeverPreemptsToGrowAndAHigherPriorityJobMayTakeItsPool) {
  CreatePools(4, 2, "2x4");
  TestNamespace ns("el-preempt");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(ApplyYaml(n, Job("el", 3, 2, "2x4",
                             "  faultTolerance: {maxJobRetries: 2, maintenanceGracePeriodSeconds: "
                             "5, elastic: {waitSeconds: 2}}\n",
                             ", minSlices: 2"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "el", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  // A job of the same priority, not preemptible by anyone, holds the fourth pool.
  ASSERT_EQ(ApplyYaml(n, Job("eq", 1, 2, "2x4", "  preemptible: false\n")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "eq", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::string eq_pool = NodePools(n, "eq").at(0);

  // A fault on slice 1: no spare pool, so the job runs on 2 of 3 after waitSeconds.
  const std::string node = NodeOf(n, Worker("el", 1, 0));
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 0").exit_code, 0);
  ASSERT_TRUE(
      JobFieldBecomes(n, "el", "{.status.tpu.slicesSummary}", "2/3", std::chrono::seconds(60)))
      << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "el", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::vector<std::string> degraded_pools = NodePools(n, "el");
  ASSERT_EQ(degraded_pools.size(), 2u);
  // Its grow would need eq's pool (the faulty pool has one healthy host left): the queue, which
  // decides preemptions in the same plan, says it cannot grow, and eq is left alone.
  ASSERT_TRUE(Eventually(
      [&] {
        return JobField(n, "el", "{.status.conditions[?(@.type==\"Degraded\")].message}")
                   .find("to grow back it needs a node pool with 2 hosts") != std::string::npos;
      },
      std::chrono::seconds(60)))
      << JobField(n, "el", "{.status.conditions}") << op.Log();
  EXPECT_NE(JobField(n, "el", "{.status.conditions[?(@.type==\"Degraded\")].message}")
                .find("to add slice 2"),
            std::string::npos);
  EXPECT_EQ(JobField(n, "eq", "{.status.phase}/{.status.attempt}/{.status.preemptions}"),
            "Running/1/");
  EXPECT_EQ(JobField(n, "el", "{.status.tpu.slicesSummary}/{.status.phase}"), "2/3/Running");
  EXPECT_TRUE(EventsWith(JobEvents(n, "eq"), "Preempted", "").empty());

  // A job of higher priority with no free pool preempts the degraded job (eq is not preemptible):
  // the degraded job queues again for the 2 slices it ran on, by its priority.
  ASSERT_EQ(ApplyYaml(n, Job("hi", 1, 2, "2x4", "  priority: 1000\n")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "hi", "{.status.phase}", "Running", std::chrono::seconds(90)))
      << op.Log();
  const std::string hi_pool = NodePools(n, "hi").at(0);
  EXPECT_NE(std::find(degraded_pools.begin(), degraded_pools.end(), hi_pool), degraded_pools.end())
      << hi_pool;
  EXPECT_EQ(JobField(n, "el", "{.status.conditions[?(@.type==\"Preempted\")].status}"), "True");
  EXPECT_EQ(JobField(n, "el", "{.status.tpu.slicesSummary}"), "2/3");
  EXPECT_EQ(JobField(n, "el", "{.status.preemptedBy}"), n + "/hi");
  EXPECT_EQ(JobField(n, "eq", "{.status.phase}/{.status.attempt}"), "Running/1");
  ASSERT_EQ(Kubectl("delete tpujob eq hi -n " + n).exit_code, 0);
  ExpectNothingLeftBehind(n, node_sets_);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
