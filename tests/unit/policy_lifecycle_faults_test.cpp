// The fault table rows of Decide() (docs/api.md, docs/architecture.md): node health, maintenance,
// lost nodes and pre-flight failures, with node health supplied as the reconciler supplies it.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "policy/lifecycle.h"
#include "policy_fixtures.h"
#include "preflight/report.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using namespace fixtures;
constexpr ReplicaType kWorker = ReplicaType::kWorker;

// Decides with node health (and the cordoned nodes the cache shows), applies the plan.
Plan StepWith(PodSim& sim, const Nodes& nodes, std::vector<std::string> cordoned = {}) {
  LifecycleInput in = sim.Input();
  in.node_health = nodes.Fn();
  in.cordoned_nodes = std::move(cordoned);
  Plan plan = Decide(in);
  sim.Apply(plan);
  return plan;
}

void StartJobWithPods(PodSim& sim) {
  ASSERT_EQ(sim.Step().status.phase, Phase::kQueued);
  ASSERT_EQ(sim.Step().status.phase, Phase::kStarting);
}

void RunJob(PodSim& sim) {
  StartJobWithPods(sim);
  sim.AllReady();
  ASSERT_EQ(sim.Step().status.phase, Phase::kRunning);
}

const PodToDelete* Removal(const Plan& plan, const std::string& name) {
  for (const PodToDelete& d : plan.remove) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::string PreflightReport(const std::string& node, const std::string& item,
                            preflight::Fault fault) {
  preflight::ItemResult result;
  result.item = item;
  result.passed = false;
  result.fault = fault;
  result.message = item + " failed";
  return preflight::SerializeReport(preflight::MakeReport(node, {result}));
}

// The pre-flight init container of `pod` exited with `code` and `report`.
void FailPreflight(cache::PodInfo& pod, int32_t code, std::string report) {
  pod.phase = cache::PodPhase::kFailed;
  pod.ready = false;
  cache::ContainerInfo init;
  init.name = cache::InternedString::Intern(kPreflightContainer);
  init.state = cache::ContainerState::kTerminated;
  init.exit_code = code;
  init.reason = cache::InternedString::Intern("Error");
  init.message = cache::InternedString::Intern(report);
  pod.init_containers = {init};
  for (auto& c : pod.containers) c.state = cache::ContainerState::kWaiting;
}

// The pod is scheduled and its pre-flight init container is still running.
void PreflightRunning(cache::PodInfo& pod) {
  pod.phase = cache::PodPhase::kPending;
  pod.ready = false;
  cache::ContainerInfo init;
  init.name = cache::InternedString::Intern(kPreflightContainer);
  init.state = cache::ContainerState::kRunning;
  pod.init_containers = {init};
}

PodSim RetryingJob(int workers = 2) {
  Json spec = SpecJson(workers);
  spec["faultTolerance"] = {{"maxJobRetries", 2}};
  return PodSim(spec);
}

TEST(PolicyNodeFaultsTest, MaintenanceReissuesWithTheGracePeriodAndUsesNoRetry) {
  Json spec = SpecJson(2);
  spec["faultTolerance"] = {{"maxJobRetries", 1}, {"maintenanceGracePeriodSeconds", 120}};
  PodSim sim(spec);
  RunJob(sim);
  Nodes nodes;
  nodes.Set("node-1", NodeVerdict::kMaintenance, "Maintenance");
  const Plan plan = StepWith(sim, nodes);
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_EQ(plan.status.job_retries, 0);
  EXPECT_TRUE(plan.cordon.empty());
  ASSERT_EQ(plan.remove.size(), 2u);
  for (const PodToDelete& d : plan.remove) EXPECT_EQ(d.grace_period_seconds, 120) << d.name;
  ASSERT_FALSE(plan.status.faults.empty());
  EXPECT_EQ(plan.status.faults.back().kind, "Maintenance");
}

TEST(PolicyNodeFaultsTest, UnhealthyNodeIsCordonedAndCountsAgainstRetries) {
  PodSim sim = RetryingJob();
  RunJob(sim);
  Nodes nodes;
  nodes.Set("node-0", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  const Plan plan = StepWith(sim, nodes);
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_EQ(plan.status.job_retries, 1);
  ASSERT_EQ(plan.cordon.size(), 1u);
  EXPECT_EQ(plan.cordon[0].node, "node-0");
  EXPECT_EQ(plan.cordon[0].reason, "NodeUnhealthy");
  EXPECT_EQ(plan.status.faults.back().kind, "NodeUnhealthy");
  for (const PodToDelete& d : plan.remove) EXPECT_FALSE(d.grace_period_seconds) << d.name;
}

// A fault on the largest job (kMaxJobWorkers: 32 slices of 512 hosts) deletes every pod in one
// decision, each once. (Each deletion once scanned the plan's whole removal list for its pod:
// quadratic, ~300 ms here; `make bench`'s curves section prints the fault decision's growth
// exponent, which caught it: no test asserts a timing.)
TEST(PolicyNodeFaultsTest, AFaultOnTheLargestJobRemovesEachPodOnce) {
  Json spec = SpecJson(512);
  spec["tpu"] = {{"accelerator", "tpu-v5p-slice"},
                 {"topology", "8x16x16"},
                 {"chipsPerWorker", 4},
                 {"slices", 32}};
  spec["faultTolerance"] = {{"maxJobRetries", 1}, {"recovery", "Job"}};
  PodSim sim(spec);
  ASSERT_TRUE(sim.spec().has_value()) << sim.spec().error();
  ASSERT_EQ(sim.Step(false).status.phase, Phase::kQueued);
  LifecycleInput admitted = sim.Input();
  for (int slice = 0; slice < 32; ++slice)
    admitted.admit_pools.push_back("pool-" + std::to_string(slice));
  sim.Apply(Decide(admitted));
  ASSERT_EQ(sim.LivePods(), 32 * 512);
  sim.AllReady();
  ASSERT_EQ(sim.Step().status.phase, Phase::kRunning);

  Nodes nodes;
  nodes.Set("node-600", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  LifecycleInput in = sim.Input();
  in.node_health = nodes.Fn();
  const Plan plan = Decide(in);
  EXPECT_EQ(plan.status.faults.back().action, "ReissueJob");
  EXPECT_EQ(plan.remove.size(), 32u * 512u);
  std::set<std::string> removed;
  for (const PodToDelete& d : plan.remove) removed.insert(d.name);
  EXPECT_EQ(removed.size(), 32u * 512u);
}

// The operator stopped after writing the re-issue and before cordoning: the next decisions,
// while the new attempt has not started running, cordon the still unhealthy node again, with
// the same evidence; not once it is cordoned, not for a node that recovered, not once Running.
TEST(PolicyNodeFaultsTest, ACordonLostToACrashAfterTheReissueIsRedone) {
  PodSim sim = RetryingJob();
  RunJob(sim);
  Nodes nodes;
  nodes.Set("node-0", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  const Plan reissue = StepWith(sim, nodes);
  ASSERT_EQ(reissue.cordon.size(), 1u);  // never carried out
  bool cordoned = false;
  const auto decide = [&] {
    LifecycleInput in = sim.Input();
    in.node_health = nodes.Fn();
    in.node_cordoned = [&](std::string_view node) { return node == "node-0" && cordoned; };
    return Decide(in);
  };
  Plan again = decide();
  ASSERT_EQ(again.cordon.size(), 1u);
  EXPECT_EQ(again.cordon[0].node, "node-0");
  EXPECT_EQ(again.cordon[0].reason, "NodeUnhealthy");
  EXPECT_EQ(again.cordon[0].evidence, reissue.cordon[0].evidence);
  EXPECT_EQ(again.status.attempt, 2);  // nothing else decided twice
  EXPECT_EQ(again.status.job_retries, 1);

  cordoned = true;
  EXPECT_TRUE(decide().cordon.empty());
  cordoned = false;
  nodes.Set("node-0", NodeVerdict::kHealthy, "");
  EXPECT_TRUE(decide().cordon.empty());
  nodes.Set("node-0", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  sim.FinishDeletions();
  sim.Step();  // queued
  sim.Step();  // admitted: pods of attempt 2
  sim.AllReady();
  ASSERT_EQ(sim.Step().status.phase, Phase::kRunning);
  // Running: no redo. (PodSim puts worker 0 on node-0 again, so this is a new fault of attempt
  // 2, with its own evidence.)
  for (const NodeToCordon& c : decide().cordon) {
    EXPECT_NE(c.evidence, reissue.cordon[0].evidence);
  }
}

TEST(PolicyNodeFaultsTest, LostNodePodsAreDeletedGracefullyThenForcedPastTheirGrace) {
  PodSim sim = RetryingJob();
  RunJob(sim);
  Nodes nodes;
  nodes.Set("node-1", NodeVerdict::kUnhealthy, "NodeUnreachable", /*unreachable=*/true);
  Plan plan = StepWith(sim, nodes);
  EXPECT_EQ(plan.status.attempt, 2);
  ASSERT_EQ(plan.cordon.size(), 1u);
  EXPECT_EQ(plan.cordon[0].reason, "NodeLost");
  EXPECT_EQ(plan.status.faults.back().kind, "NodeLost");
  // First a graceful delete, like any other: a partitioned kubelet may still run the worker;
  // with the Kubernetes default, not the pod's own (the maintenance grace period), which would
  // only delay the re-issue: its kubelet cannot deliver SIGTERM anyway.
  const PodToDelete* lost = Removal(plan, PodName(kWorker, 1));
  ASSERT_NE(lost, nullptr);
  EXPECT_EQ(lost->grace_period_seconds, kBriefGraceSeconds);
  const PodToDelete* healthy = Removal(plan, PodName(kWorker, 0));
  ASSERT_NE(healthy, nullptr);
  EXPECT_FALSE(healthy->grace_period_seconds) << "a pod on a healthy node keeps its own";

  // The API server sets deletionTimestamp to the end of the grace period (30 s by default).
  cache::PodInfo& pod = sim.Worker(1);
  pod.deletion_timestamp = sim.now() + std::chrono::seconds(30);
  sim.FinishDeletionsExcept(pod.uid);
  plan = StepWith(sim, nodes);
  EXPECT_EQ(Removal(plan, pod.name), nullptr) << "forced before its grace period ended";
  ASSERT_TRUE(plan.requeue_after.has_value());
  EXPECT_GT(*plan.requeue_after, std::chrono::seconds(25));
  EXPECT_LE(*plan.requeue_after, std::chrono::seconds(31));
  EXPECT_TRUE(plan.create.empty()) << "the next attempt started while a pod of the last is left";

  sim.Advance(std::chrono::seconds(30));
  plan = StepWith(sim, nodes);
  const PodToDelete* forced = Removal(plan, pod.name);
  ASSERT_NE(forced, nullptr);
  EXPECT_EQ(forced->grace_period_seconds, 0);
  EXPECT_EQ(forced->uid, pod.uid);
}

TEST(PolicyNodeFaultsTest, ReachableNotReadyNodeIsNeverForced) {
  PodSim sim = RetryingJob();
  RunJob(sim);
  Nodes nodes;
  nodes.Set("node-1", NodeVerdict::kUnhealthy, "NodeNotReady", /*unreachable=*/false);
  StepWith(sim, nodes);
  cache::PodInfo& pod = sim.Worker(1);
  pod.deletion_timestamp = sim.now();
  sim.Advance(std::chrono::seconds(600));
  const Plan plan = StepWith(sim, nodes);
  EXPECT_EQ(Removal(plan, pod.name), nullptr);
}

// The four fault cases' 1 and 2 (docs/api.md): a pre-flight failure isolates the node whether its
// hardware (exit 10) or its environment (exit 11) failed, unless the job's own settings explain
// the failure: invalid settings, or a small /dev/shm when the template mounts no volume there
// (Kubernetes' 64 MB default). A node at fault re-issues the job against its retries; the job's
// own settings alone fail it at once (a re-issue would fail the same way), no retry used.
TEST(PolicyNodeFaultsTest, PreflightFailureIsolatesTheNodeUnlessTheJobsSettingsExplainIt) {
  struct Case {
    const char* name;
    int32_t code;
    const char* item;
    preflight::Fault fault;
    bool shm_volume;  // the Worker template mounts an emptyDir at /dev/shm
    bool cordon;
    const char* cordon_says;  // in the cordon's message
    const char* reissue_says;
  };
  const Case cases[] = {
      {"hardware", kPreflightNodeFault, "accelerator", preflight::Fault::kNode, false, true,
       "(the node is at fault)", "node at fault: node-1"},
      {"environment: dns", kPreflightConfigFault, "dns", preflight::Fault::kConfig, false, true,
       "(the node's environment is at fault)", "node at fault: node-1"},
      {"environment: shm volume too small", kPreflightConfigFault, "disk-size shm",
       preflight::Fault::kConfig, true, true, "(the node's environment is at fault)",
       "node at fault: node-1"},
      {"template: no shm volume", kPreflightConfigFault, "disk-size shm", preflight::Fault::kConfig,
       false, false, "", "the job's own settings fail pre-flight on any node"},
      {"invalid settings", kPreflightConfigFault, "config", preflight::Fault::kConfig, true, false,
       "", "the job's own settings fail pre-flight on any node"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Json spec = SpecJson(2);
    spec["faultTolerance"] = {{"maxJobRetries", 2}};
    Json& mounts =
        spec["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["volumeMounts"];
    mounts =
        c.shm_volume ? Json::array({{{"name", "shm"}, {"mountPath", "/dev/shm/"}}}) : Json::array();
    PodSim sim(spec);
    StartJobWithPods(sim);
    FailPreflight(sim.Worker(1), c.code, PreflightReport("node-1", c.item, c.fault));
    sim.Worker(0).init_containers = {};  // passed: no pre-flight status left to wait for
    const Plan plan = StepWith(sim, Nodes{});
    if (!c.cordon) {
      EXPECT_EQ(plan.status.phase, Phase::kFailed);
      EXPECT_EQ(plan.status.attempt, 1);
      EXPECT_EQ(plan.status.job_retries, 0);
      EXPECT_TRUE(plan.cordon.empty());
      const Condition* failed = plan.status.FindCondition(condition::kFailed);
      ASSERT_NE(failed, nullptr);
      EXPECT_EQ(failed->reason, "PreflightConfigError");
      EXPECT_NE(failed->message.find(c.reissue_says), std::string::npos) << failed->message;
      EXPECT_NE(failed->message.find(std::string(c.item) + " failed"), std::string::npos)
          << "the report's own message is shown: " << failed->message;
      ASSERT_FALSE(plan.status.faults.empty());
      EXPECT_EQ(plan.status.faults.back().action, "FailJob");
      EXPECT_EQ(plan.status.faults.back().item, c.item);
      EXPECT_EQ(FindEvent(plan, "Reissued"), nullptr);
      continue;
    }
    EXPECT_EQ(plan.status.attempt, 2);
    EXPECT_EQ(plan.status.job_retries, 1);
    ASSERT_FALSE(plan.status.faults.empty());
    EXPECT_EQ(plan.status.faults.back().kind, "PreflightFailed");
    EXPECT_EQ(plan.status.faults.back().item, c.item);
    const EventToRecord* reissued = FindEvent(plan, "Reissued");
    ASSERT_NE(reissued, nullptr);
    EXPECT_NE(reissued->message.find(c.reissue_says), std::string::npos) << reissued->message;
    if (c.cordon) {
      ASSERT_EQ(plan.cordon.size(), 1u);
      EXPECT_EQ(plan.cordon[0].node, "node-1");
      EXPECT_EQ(plan.cordon[0].reason, "PreflightFailed");
      EXPECT_EQ(plan.cordon[0].item, c.item);
      EXPECT_NE(plan.cordon[0].message.find(c.cordon_says), std::string::npos)
          << plan.cordon[0].message;
      EXPECT_NE(plan.cordon[0].message.find(c.item), std::string::npos) << plan.cordon[0].message;
    } else {
      EXPECT_TRUE(plan.cordon.empty());
    }
  }
}

// A node whose announced maintenance is still ahead: the job keeps running and is decided
// again when the node enters the move window (NodeHealth::changes_in).
TEST(PolicyNodeFaultsTest, AnnouncedMaintenanceAheadRequeuesForWhenItStarts) {
  PodSim sim = RetryingJob();
  RunJob(sim);
  LifecycleInput in = sim.Input();
  in.node_health = [](std::string_view node) {
    NodeHealth h;
    if (node == "node-1") h.changes_in = std::chrono::minutes(7);
    return h;
  };
  const Plan plan = Decide(in);
  EXPECT_EQ(plan.status.phase, Phase::kRunning);
  EXPECT_EQ(plan.status.attempt, 1);
  ASSERT_TRUE(plan.requeue_after);
  EXPECT_EQ(*plan.requeue_after, std::chrono::minutes(7));
}

TEST(PolicyNodeFaultsTest, PreflightWaitsForPeersThenCordonsAllNodesInOnePlan) {
  PodSim sim = RetryingJob(3);
  StartJobWithPods(sim);
  FailPreflight(sim.Worker(0), kPreflightNodeFault,
                PreflightReport("node-0", "dns", preflight::Fault::kNode));
  PreflightRunning(sim.Worker(1));
  PreflightRunning(sim.Worker(2));
  Plan plan = StepWith(sim, Nodes{});
  EXPECT_EQ(plan.status.attempt, 1) << "acted before the peers' verdicts";
  EXPECT_TRUE(plan.cordon.empty());
  EXPECT_TRUE(plan.remove.empty());
  ASSERT_TRUE(plan.requeue_after.has_value());
  EXPECT_LE(*plan.requeue_after, kPreflightSettle);

  FailPreflight(sim.Worker(1), kPreflightNodeFault,
                PreflightReport("node-1", "dns", preflight::Fault::kNode));
  FailPreflight(sim.Worker(2), kPreflightNodeFault,
                PreflightReport("node-2", "dns", preflight::Fault::kNode));
  plan = StepWith(sim, Nodes{});
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_EQ(plan.status.job_retries, 1) << "one re-issue for the whole attempt";
  ASSERT_EQ(plan.cordon.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.cordon[i].node, "node-" + std::to_string(i));
    EXPECT_EQ(plan.cordon[i].item, "dns");
  }
}

TEST(PolicyNodeFaultsTest, PreflightStopsWaitingForPeersAfterTheSettleTime) {
  PodSim sim = RetryingJob(2);
  StartJobWithPods(sim);
  FailPreflight(sim.Worker(0), kPreflightNodeFault,
                PreflightReport("node-0", "accelerator", preflight::Fault::kNode));
  PreflightRunning(sim.Worker(1));
  EXPECT_EQ(StepWith(sim, Nodes{}).status.attempt, 1);
  sim.Advance(std::chrono::duration_cast<std::chrono::seconds>(kPreflightSettle));
  const Plan plan = StepWith(sim, Nodes{});
  EXPECT_EQ(plan.status.attempt, 2);
  ASSERT_EQ(plan.cordon.size(), 1u);
  EXPECT_EQ(plan.cordon[0].node, "node-0");
}

TEST(PolicyNodeFaultsTest, CordonedNodesAreRecordedInTheStatusAndKept) {
  PodSim sim = RetryingJob();
  RunJob(sim);
  Plan plan = StepWith(sim, Nodes{}, {"node-9", "node-3"});
  EXPECT_EQ(plan.status.cordoned_nodes, (std::vector<std::string>{"node-9", "node-3"}));
  EXPECT_EQ(plan.status.ToJson()["cordonedNodes"], Json::parse(R"(["node-9","node-3"])"));
  // Uncordoned since: the job's record keeps them; a new one is appended once.
  plan = StepWith(sim, Nodes{}, {"node-4", "node-3"});
  EXPECT_EQ(plan.status.cordoned_nodes, (std::vector<std::string>{"node-9", "node-3", "node-4"}));
  plan = StepWith(sim, Nodes{}, {"node-4"});
  EXPECT_TRUE(plan.events.empty());
  EXPECT_EQ(plan.status.cordoned_nodes.size(), 3u);
}

// --- Multislice: the fault table applied to the job as a whole (recovery Job) -------------------
// (policy_slice_recovery_test.cpp has the default, recovery Slice.)

// 3 slices of 2 workers (job-wide indices 0..5; worker i on node-i), admitted into three pools.
PodSim MultisliceJob(int32_t retries = 2) {
  Json spec = SpecJson(2);
  spec["tpu"]["slices"] = 3;
  spec["faultTolerance"] = {
      {"maxJobRetries", retries}, {"maintenanceGracePeriodSeconds", 60}, {"recovery", "Job"}};
  return PodSim(spec);
}

Plan AdmitInto(PodSim& sim, std::vector<std::string> pools) {
  LifecycleInput in = sim.Input();
  in.admit_pools = std::move(pools);
  Plan plan = Decide(in);
  sim.Apply(plan);
  return plan;
}

void RunMultislice(PodSim& sim) {
  ASSERT_EQ(sim.Step(false).status.phase, Phase::kQueued);
  const Plan admitted = AdmitInto(sim, {"pool-a", "pool-b", "pool-c"});
  ASSERT_EQ(admitted.status.phase, Phase::kStarting);
  ASSERT_EQ(admitted.create.size(), 6u);
  EXPECT_EQ(admitted.status.node_pools, (std::vector<std::string>{"pool-a", "pool-b", "pool-c"}));
  EXPECT_EQ(admitted.status.ToJson()["nodePools"], Json::array({"pool-a", "pool-b", "pool-c"}));
  EXPECT_FALSE(admitted.status.ToJson().contains("nodePool"));
  sim.AllReady();
  const Plan running = sim.Step();
  ASSERT_EQ(running.status.phase, Phase::kRunning);
  EXPECT_EQ(running.status.ready_workers, "6/6");
  EXPECT_EQ(running.status.replica_statuses.at("Worker").ready, 6);
}

TEST(PolicyMultisliceFaultsTest, RunningOnlyWhenEveryWorkerOfEverySliceIsReady) {
  PodSim sim = MultisliceJob();
  ASSERT_EQ(sim.Step(false).status.phase, Phase::kQueued);
  AdmitInto(sim, {"pool-a", "pool-b", "pool-c"});
  for (int32_t i = 0; i < 5; ++i) SetRunning(sim.Worker(i), true);
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kStarting);
  EXPECT_EQ(plan.status.ready_workers, "5/6");
  SetRunning(sim.Worker(5), true);
  EXPECT_EQ(sim.Step().status.phase, Phase::kRunning);
}

TEST(PolicyMultisliceFaultsTest, HardwareFaultInOneSliceReissuesEverySliceAndCordonsOnlyThatNode) {
  PodSim sim = MultisliceJob();
  RunMultislice(sim);
  Nodes nodes;
  nodes.Set("node-3", NodeVerdict::kUnhealthy, "TPUUnhealthy");  // slice 1, host 1
  const Plan plan = StepWith(sim, nodes);
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_EQ(plan.status.job_retries, 1);
  ASSERT_EQ(plan.cordon.size(), 1u);
  EXPECT_EQ(plan.cordon[0].node, "node-3");
  EXPECT_EQ(plan.remove.size(), 6u);  // every slice's pods
  EXPECT_TRUE(plan.create.empty());
  ASSERT_FALSE(plan.status.faults.empty());
  EXPECT_EQ(plan.status.faults.back().kind, "NodeUnhealthy");
  EXPECT_EQ(plan.status.faults.back().slice, 1);
  const Condition* ready = plan.status.FindCondition(condition::kReady);
  ASSERT_NE(ready, nullptr);
  EXPECT_NE(ready->message.find("worker-3 (slice 1, pod train-worker-3)"), std::string::npos)
      << ready->message;

  // Nothing of attempt 2 while a pod of attempt 1 is left; then it queues first, is admitted
  // into three pools and creates all six pods again.
  sim.FinishDeletionsExcept(sim.Worker(5).uid);
  EXPECT_TRUE(StepWith(sim, nodes).create.empty());
  sim.FinishDeletions();
  const Plan queued = StepWith(sim, nodes);
  EXPECT_EQ(queued.status.phase, Phase::kQueued);
  EXPECT_TRUE(queued.status.reissued);
  EXPECT_TRUE(queued.status.node_pools.empty());
  EXPECT_EQ(AdmitInto(sim, {"pool-b", "pool-c", "pool-d"}).create.size(), 6u);
  EXPECT_TRUE(sim.violations.empty()) << sim.violations.front();
}

TEST(PolicyMultisliceFaultsTest, MaintenanceOnOneSliceReissuesWithoutUsingARetry) {
  PodSim sim = MultisliceJob();
  RunMultislice(sim);
  Nodes nodes;
  nodes.Set("node-4", NodeVerdict::kMaintenance, "Maintenance");  // slice 2, host 0
  const Plan plan = StepWith(sim, nodes);
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_EQ(plan.status.job_retries, 0);
  EXPECT_TRUE(plan.cordon.empty());
  ASSERT_EQ(plan.remove.size(), 6u);
  for (const PodToDelete& d : plan.remove) EXPECT_EQ(d.grace_period_seconds, 60) << d.name;
  EXPECT_EQ(plan.status.faults.back().kind, "Maintenance");
  EXPECT_EQ(plan.status.faults.back().slice, 2);
}

TEST(PolicyMultisliceFaultsTest, AllWorkersSuccessCountsEverySlice) {
  Json spec = SpecJson(2);
  spec["tpu"]["slices"] = 2;
  spec["successPolicy"] = "AllWorkers";
  PodSim sim(spec);
  ASSERT_EQ(sim.Step(false).status.phase, Phase::kQueued);
  AdmitInto(sim, {"pool-a", "pool-b"});
  sim.AllReady();
  sim.Step();
  for (int32_t i = 0; i < 2; ++i) SetExited(sim.Worker(i), 0);  // slice 0 done
  EXPECT_EQ(sim.Step().status.phase, Phase::kRunning);
  for (int32_t i = 2; i < 4; ++i) SetExited(sim.Worker(i), 0);
  const Plan done = sim.Step();
  EXPECT_EQ(done.status.phase, Phase::kSucceeded);
  const Condition* succeeded = done.status.FindCondition(condition::kSucceeded);
  ASSERT_NE(succeeded, nullptr);
  EXPECT_EQ(succeeded->message, "all 4 workers exited 0");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
