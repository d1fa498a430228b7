// JobQueue over real stores: what it counts as waiting, reserved and used when it plans.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "cache/objects.h"
#include "cache/store.h"
#include "controller/children.h"
#include "controller/job_queue.h"
#include "controller/kueue_adapter.h"
#include "fake_client.h"

namespace tpujob::controller {
namespace TPUJOB_TEST_NS {

using kube::Json;

Json JobJson(const std::string& name, int priority, const std::string& phase, bool admitted = false,
             int attempt = 1) {
  Json status = Json::object();
  if (!phase.empty()) {
    status = {{"phase", phase},
              {"attempt", attempt},
              {"queuedAt", "2026-01-01T00:00:00Z"},
              {"conditions", Json::array({{{"type", "Admitted"},
                                           {"status", admitted ? "True" : "False"},
                                           {"reason", admitted ? "Admitted" : "Queued"},
                                           {"message", ""},
                                           {"lastTransitionTime", "2026-01-01T00:00:00Z"}}})}};
  }
  return {
      {"apiVersion", "tpujob.dev/v1alpha1"},
      {"kind", "TPUJob"},
      {"metadata",
       {{"name", name},
        {"namespace", "team"},
        {"uid", "uid-" + name},
        {"resourceVersion", "1"},
        {"creationTimestamp", "2026-01-01T00:00:00Z"}}},
      {"spec",
       {{"priority", priority},
        {"tpu", {{"accelerator", "tpu-v5e"}, {"topology", "2x4"}, {"chipsPerWorker", 4}}},
        {"replicaSpecs",
         {{"Worker",
           {{"replicas", 2},
            {"template",
             {{"spec", {{"containers", Json::array({{{"name", "t"}, {"image", "i"}}})}}}}}}}}}}},
      {"status", status}};
}

class JobQueueTest : public ::testing::Test {
 protected:
  JobQueueTest() : queue_(fake_, jobs_, pods_, nodes_, policy::NodeHealthConfig{}) {}

  void AddNodes(int count) {
    for (int i = 0; i < count; ++i) {
      Json node = {{"metadata",
                    {{"name", "n" + std::to_string(i)},
                     {"labels",
                      {{"cloud.google.com/gke-tpu-accelerator", "tpu-v5e"},
                       {"cloud.google.com/gke-tpu-topology", "2x4"},
                       {"cloud.google.com/gke-nodepool", "pool-a"}}}}},
                   {"status",
                    {{"allocatable", {{"google.com/tpu", "4"}}},
                     {"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
      nodes_.Update(std::make_shared<const cache::NodeInfo>(*cache::NodeInfo::FromJson(node)));
    }
  }
  std::shared_ptr<const cache::TPUJobInfo> AddJob(const Json& json) {
    auto job = std::make_shared<const cache::TPUJobInfo>(*cache::TPUJobInfo::FromJson(json));
    jobs_.Update(job);
    return job;
  }
  // The job's worker pods of `attempt`, as the operator builds them, bound to `nodes`.
  void AddWorkers(const cache::TPUJobInfo& job, std::vector<std::string> nodes, int attempt = 1) {
    const auto spec = policy::ParseJobSpec(job);
    ASSERT_TRUE(spec.has_value()) << spec.error();
    for (size_t i = 0; i < nodes.size(); ++i) {
      Json pod =
          BuildPod(job, *spec, policy::ReplicaType::kWorker, static_cast<int32_t>(i), attempt);
      pod["metadata"]["uid"] = job.name + "-pod-" + std::to_string(i);
      pod["spec"]["nodeName"] = nodes[i];
      pod["status"] = {{"phase", "Running"}};
      auto parsed = cache::PodInfo::FromJson(pod);
      ASSERT_TRUE(parsed.has_value());
      pods_.Update(std::make_shared<const cache::PodInfo>(std::move(*parsed)));
    }
  }

  kube::FakeClient fake_;
  cache::Store<cache::TPUJobInfo> jobs_;
  cache::Store<cache::PodInfo> pods_;
  cache::Store<cache::NodeInfo> nodes_;
  JobQueue queue_;
};

TEST_F(JobQueueTest, RunningJobWithBoundWorkersReservesNothingMore) {
  AddNodes(4);
  auto running = AddJob(JobJson("running", 0, "Running", /*admitted=*/true));
  AddWorkers(*running, {"n0", "n1"});
  AddJob(JobJson("waiting", 0, "Queued"));
  const auto plan = queue_.ComputePlan();
  ASSERT_EQ(plan.count("team/waiting"), 1u);
  EXPECT_TRUE(plan.at("team/waiting").admit) << plan.at("team/waiting").message;
  EXPECT_EQ(plan.at("team/waiting").pools.at(0), "pool-a");
  EXPECT_EQ(plan.count("team/running"), 0u) << "a running job is not waiting";
}

TEST_F(JobQueueTest, AdmittedJobWithoutPodsYetHoldsItsChips) {
  AddNodes(4);
  auto starting = AddJob(JobJson("starting", 0, "Starting", /*admitted=*/true));
  AddWorkers(*starting, {"n0"});  // one of two workers bound so far
  AddJob(JobJson("waiting", 0, "Queued"));
  const auto plan = queue_.ComputePlan();
  ASSERT_EQ(plan.count("team/waiting"), 1u);
  // n0 used, one slot reserved for starting's second worker: two left, enough.
  EXPECT_TRUE(plan.at("team/waiting").admit) << plan.at("team/waiting").message;
  // A second waiting gang of the same age does not fit as well: exactly one of the two (the
  // name breaks the tie) is admitted.
  AddJob(JobJson("third", 0, "Queued"));
  const auto again = queue_.ComputePlan();
  EXPECT_TRUE(again.at("team/third").admit);
  EXPECT_FALSE(again.at("team/waiting").admit);
}

TEST_F(JobQueueTest, JustCreatedJobsWaitFromCreationInPriorityOrder) {
  AddNodes(2);
  AddJob(JobJson("low", 0, "Queued"));
  AddJob(JobJson("fresh", 5, ""));  // no status yet
  const auto plan = queue_.ComputePlan();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_TRUE(plan.at("team/fresh").admit);
  EXPECT_FALSE(plan.at("team/low").admit);
  EXPECT_EQ(plan.at("team/low").position, 2);
}

TEST_F(JobQueueTest, ASuspendedJobIsOutOfTheQueue) {
  AddNodes(2);
  Json suspended = JobJson("first", 10, "");  // created suspended: not yet decided
  suspended["spec"]["suspend"] = true;
  AddJob(suspended);
  Json paused = JobJson("paused", 20, "Suspended");
  paused["spec"]["suspend"] = true;
  AddJob(paused);
  AddJob(JobJson("next", 0, "Queued"));
  const auto plan = queue_.ComputePlan();
  EXPECT_FALSE(plan.contains("team/first"));
  EXPECT_FALSE(plan.contains("team/paused"));
  ASSERT_TRUE(plan.contains("team/next"));
  EXPECT_TRUE(plan.at("team/next").admit);  // not held behind the higher-priority suspended jobs
  EXPECT_EQ(plan.at("team/next").position, 1);
}

TEST_F(JobQueueTest, OldAttemptsPodsDoNotCountAsTheCurrentAttempts) {
  AddNodes(4);
  auto restarted = AddJob(JobJson("again", 0, "Starting", /*admitted=*/true, /*attempt=*/2));
  AddWorkers(*restarted, {"n0", "n1"}, /*attempt=*/1);  // still going away
  AddJob(JobJson("waiting", 0, "Queued"));
  // n0, n1 used by the old pods, n2, n3 reserved for attempt 2: nothing left.
  EXPECT_FALSE(queue_.ComputePlan().at("team/waiting").admit);
}

TEST_F(JobQueueTest, ReissueWaitingForItsOldPodsKeepsItsPlaceAtTheHead) {
  AddNodes(4);
  Json json = JobJson("reissued", 0, "Restarting", /*admitted=*/false, /*attempt=*/2);
  json["status"]["reissued"] = true;
  auto reissued = AddJob(json);
  AddWorkers(*reissued, {"n0", "n1"}, /*attempt=*/1);  // the old attempt's pods, going away
  AddJob(JobJson("high", 100, "Queued"));
  auto plan = queue_.ComputePlan();
  ASSERT_EQ(plan.count("team/reissued"), 1u);
  EXPECT_EQ(plan.at("team/reissued").position, 1);
  // n2 and n3 are free: they are held for the re-issued job, and the new job waits behind it.
  EXPECT_FALSE(plan.at("team/high").admit);
  EXPECT_EQ(plan.at("team/high").position, 2);
  // Not admitted while its old pods are going: the pools a plan chooses now count the capacity
  // those pods still hold (the faulty pool could be the only one that seems to fit).
  EXPECT_FALSE(plan.at("team/reissued").admit);
  EXPECT_EQ(plan.at("team/reissued").reason, "Reissued");
  EXPECT_TRUE(plan.at("team/reissued").pools.empty());

  // Its old pods gone and the job queued: admitted by a plan that sees all the capacity.
  pods_.Delete("team/reissued-worker-0");
  pods_.Delete("team/reissued-worker-1");
  json["status"]["phase"] = "Queued";
  AddJob(json);
  plan = queue_.ComputePlan();
  EXPECT_TRUE(plan.at("team/reissued").admit) << plan.at("team/reissued").message;
  EXPECT_EQ(plan.at("team/reissued").position, 1);
}

TEST_F(JobQueueTest, ASliceRecoveryAsksForItsSliceAloneAndHoldsThePoolsItKeeps) {
  // Three pools of two nodes; a 2-slice job lost slice 1 (its pool pool-b) and keeps pool-a.
  for (const std::string pool : {"pool-a", "pool-b", "pool-c"}) {
    for (int i = 0; i < 2; ++i) {
      Json node = {{"metadata",
                    {{"name", pool + "-" + std::to_string(i)},
                     {"labels",
                      {{"cloud.google.com/gke-tpu-accelerator", "tpu-v5e"},
                       {"cloud.google.com/gke-tpu-topology", "2x4"},
                       {"cloud.google.com/gke-nodepool", pool}}}}},
                   {"status",
                    {{"allocatable", {{"google.com/tpu", "4"}}},
                     {"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
      nodes_.Update(std::make_shared<const cache::NodeInfo>(*cache::NodeInfo::FromJson(node)));
    }
  }
  Json json = JobJson("ms", 0, "Queued", /*admitted=*/false, /*attempt=*/2);
  json["spec"]["tpu"]["slices"] = 2;
  json["status"]["reissued"] = true;
  json["status"]["nodePools"] = Json::array({"pool-a", ""});
  json["status"]["sliceRecovery"] = {{"slices", Json::array({1})}};
  AddJob(json);
  AddJob(JobJson("other", 100, "Queued"));  // a 2-host job of higher priority
  auto plan = queue_.ComputePlan();
  // One pool for slice 1, never pool-a (its slice 0 keeps it): best fit, then name: pool-b.
  ASSERT_TRUE(plan.at("team/ms").admit) << plan.at("team/ms").message;
  EXPECT_EQ(plan.at("team/ms").pools, std::vector<std::string>{"pool-b"});
  // pool-a is reserved for the job although no pod of it is there: the other job gets pool-c.
  ASSERT_TRUE(plan.at("team/other").admit) << plan.at("team/other").message;
  EXPECT_EQ(plan.at("team/other").pools, std::vector<std::string>{"pool-c"});
  // With only pool-a free, the slice waits and says why; the other job waits behind it.
  for (const std::string node : {"pool-b-0", "pool-b-1", "pool-c-0", "pool-c-1"}) {
    Json cordoned = Json{{"metadata",
                          {{"name", node},
                           {"labels",
                            {{"cloud.google.com/gke-tpu-accelerator", "tpu-v5e"},
                             {"cloud.google.com/gke-tpu-topology", "2x4"},
                             {"cloud.google.com/gke-nodepool", node.substr(0, 6)}}}}},
                         {"spec", {{"unschedulable", true}}},
                         {"status", {{"allocatable", {{"google.com/tpu", "4"}}}}}};
    nodes_.Update(std::make_shared<const cache::NodeInfo>(*cache::NodeInfo::FromJson(cordoned)));
  }
  plan = queue_.ComputePlan();
  EXPECT_FALSE(plan.at("team/ms").admit);
  EXPECT_NE(plan.at("team/ms").message.find("to replace slice 1 (its other slices keep pool-a)"),
            std::string::npos)
      << plan.at("team/ms").message;
  EXPECT_EQ(plan.at("team/other").reason, "WaitingInLine");
}

TEST_F(JobQueueTest, PriorityClassValueOrdersTheJob) {
  AddNodes(2);
  fake_.Upsert(kube::Resource::PriorityClasses(), {{"apiVersion", "scheduling.k8s.io/v1"},
                                                   {"kind", "PriorityClass"},
                                                   {"metadata", {{"name", "urgent"}}},
                                                   {"value", 1000}});
  AddJob(JobJson("plain", 10, "Queued"));
  Json json = JobJson("classy", 0, "Queued");
  json["spec"]["priorityClassName"] = "urgent";
  AddJob(json);
  Json missing = JobJson("unknown-class", 5, "Queued");
  missing["spec"]["priorityClassName"] = "no-such-class";  // falls back to spec.priority
  AddJob(missing);
  const auto plan = queue_.ComputePlan();
  EXPECT_TRUE(plan.at("team/classy").admit);
  EXPECT_EQ(plan.at("team/plain").position, 2);
  EXPECT_EQ(plan.at("team/unknown-class").position, 3);
}

TEST_F(JobQueueTest, JobsKueueAdmitsNeverWaitHereButTheirPodsHoldCapacity) {
  queue_.set_external([](const cache::TPUJobInfo& job) { return KueueAdapter::NamesQueue(job); });
  AddNodes(4);
  Json kueue_running = JobJson("kueue-running", 0, "Running", /*admitted=*/true);
  kueue_running["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team-queue"}};
  AddWorkers(*AddJob(kueue_running), {"n0", "n1"});
  Json kueue_waiting = JobJson("kueue-waiting", 100, "Queued");
  kueue_waiting["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team-queue"}};
  AddJob(kueue_waiting);
  AddJob(JobJson("first", 0, "Queued"));
  AddJob(JobJson("second", 0, "Queued"));
  const auto plan = queue_.ComputePlan();
  EXPECT_FALSE(plan.contains("team/kueue-waiting")) << "Kueue's to admit";
  // n0 and n1 are the Kueue job's: room for one of the two gangs of two, not both.
  ASSERT_TRUE(plan.contains("team/first"));
  ASSERT_TRUE(plan.contains("team/second"));
  EXPECT_NE(plan.at("team/first").admit, plan.at("team/second").admit);
}

TEST_F(JobQueueTest, AJobAnotherControllerManagesIsNotInTheQueue) {
  AddNodes(2);
  Json theirs = JobJson("theirs", 100, "");
  theirs["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue";
  AddJob(theirs);
  AddJob(JobJson("ours", 0, "Queued"));
  const auto plan = queue_.ComputePlan();
  EXPECT_FALSE(plan.contains("team/theirs"));
  ASSERT_TRUE(plan.contains("team/ours"));
  EXPECT_TRUE(plan.at("team/ours").admit);
  EXPECT_EQ(plan.at("team/ours").position, 1);
}

TEST_F(JobQueueTest, AJobKueueAdmitsIsNeverPreemptedFromHere) {
  queue_.set_external([](const cache::TPUJobInfo& job) { return KueueAdapter::NamesQueue(job); });
  AddNodes(2);
  Json low = JobJson("kueue-low", 1, "Running", /*admitted=*/true);
  low["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team-queue"}};
  AddWorkers(*AddJob(low), {"n0", "n1"});
  AddJob(JobJson("high", 100, "Queued"));
  std::map<std::string, policy::PreemptOrder> orders;
  const auto plan = queue_.ComputePlan(nullptr, &orders);
  EXPECT_TRUE(orders.empty());
  EXPECT_FALSE(plan.at("team/high").admit);
  EXPECT_NE(plan.at("team/high").reason, "Preempting");
}

// Preemption over the caches: the waiting head takes the running low job's pool. Each plan
// starts from the orders of the one before, as the queue's thread does.
class JobQueuePreemptionTest : public JobQueueTest {
 protected:
  std::map<std::string, policy::Admission> Plan(
      std::map<std::string, policy::PreemptOrder>* orders) {
    return queue_.ComputePlan(nullptr, orders);
  }
  // The pod's copy in the cache, being deleted.
  void MarkDeleting(const std::string& key) {
    auto pod = pods_.Get(key);
    ASSERT_NE(pod, nullptr) << key;
    auto copy = std::make_shared<cache::PodInfo>(*pod);
    copy->deletion_timestamp = WallTime{} + std::chrono::hours(500000);
    pods_.Update(copy);
  }
};

TEST_F(JobQueuePreemptionTest, AHigherPriorityHeadPreemptsTheRunningLowJob) {
  AddNodes(2);
  auto low = AddJob(JobJson("low", 1, "Running", /*admitted=*/true));
  AddWorkers(*low, {"n0", "n1"});
  AddJob(JobJson("high", 100, "Queued"));
  std::map<std::string, policy::PreemptOrder> orders;
  const auto plan = Plan(&orders);
  EXPECT_EQ(plan.at("team/high").reason, "Preempting");
  EXPECT_NE(plan.at("team/high").message.find("preempting team/low (priority 1)"),
            std::string::npos)
      << plan.at("team/high").message;
  ASSERT_EQ(orders.count("team/low"), 1u);
  EXPECT_EQ(orders.at("team/low").by, "team/high");
  EXPECT_EQ(orders.at("team/low").attempt, 1);
  EXPECT_NE(orders.at("team/low").message.find("preempted by team/high (priority 100)"),
            std::string::npos);
}

TEST_F(JobQueuePreemptionTest, OneHeadTakesOneSetOfVictims) {
  AddNodes(4);
  auto low = AddJob(JobJson("low", 1, "Running", /*admitted=*/true));
  AddWorkers(*low, {"n0", "n1"});
  auto mid = AddJob(JobJson("mid", 1, "Running", /*admitted=*/true));
  AddWorkers(*mid, {"n2", "n3"});
  AddJob(JobJson("high", 100, "Queued"));
  std::map<std::string, policy::PreemptOrder> orders;
  Plan(&orders);
  ASSERT_EQ(orders.size(), 1u);
  ASSERT_EQ(orders.count("team/low"), 1u);  // of equals, the key decides

  // An order stands until carried out; meanwhile the head says whom it preempts, and a newer
  // candidate (mid's admission is later than low's now) does not replace low.
  Json newer = JobJson("mid", 1, "Running", /*admitted=*/true);
  newer["status"]["admittedAt"] = "2026-06-01T00:00:00Z";
  AddJob(newer);
  auto plan = Plan(&orders);
  EXPECT_EQ(orders.size(), 1u);
  EXPECT_EQ(orders.count("team/low"), 1u);
  EXPECT_EQ(plan.at("team/high").reason, "Preempting");

  // The pod watch shows one of low's pods deleting before the job watch shows its status: still
  // no second victim.
  MarkDeleting("team/low-worker-0");
  plan = Plan(&orders);
  EXPECT_EQ(orders.size(), 1u);
  EXPECT_EQ(orders.count("team/low"), 1u);

  // low's status shows it preempted, its other pod not even marked deleting yet: its pods are
  // going, so the head waits for them and takes no second victim.
  Json preempted = JobJson("low", 1, "Restarting", /*admitted=*/false, /*attempt=*/2);
  preempted["status"]["conditions"][0]["reason"] = "Preempted";
  AddJob(preempted);
  plan = Plan(&orders);
  EXPECT_TRUE(orders.empty()) << orders.begin()->first;
  EXPECT_EQ(plan.at("team/high").reason, "WaitingForCapacity");

  // Its pods gone, the head is admitted on their nodes.
  pods_.Delete("team/low-worker-0");
  pods_.Delete("team/low-worker-1");
  plan = Plan(&orders);
  EXPECT_TRUE(plan.at("team/high").admit) << plan.at("team/high").message;
  EXPECT_TRUE(orders.empty());
  // ... and its answer says what it preempted (for its Admitted condition).
  EXPECT_EQ(plan.at("team/high").message,
            "after preempting team/low (priority 1) in node pool pool-a");
  // Once it is admitted that is forgotten: a later admission of the job says nothing of it.
  AddJob(JobJson("high", 100, "Starting", /*admitted=*/true));
  Plan(&orders);
  AddJob(JobJson("high", 100, "Queued", /*admitted=*/false, /*attempt=*/2));
  plan = Plan(&orders);
  ASSERT_TRUE(plan.at("team/high").admit);
  EXPECT_EQ(plan.at("team/high").message, "");
}

TEST_F(JobQueuePreemptionTest, AnOrderLapsesWhenItsPreemptorNoLongerWaits) {
  AddNodes(2);
  auto low = AddJob(JobJson("low", 1, "Running", /*admitted=*/true));
  AddWorkers(*low, {"n0", "n1"});
  AddJob(JobJson("high", 100, "Queued"));
  std::map<std::string, policy::PreemptOrder> orders;
  Plan(&orders);
  ASSERT_EQ(orders.count("team/low"), 1u);
  jobs_.Delete("team/high");
  Plan(&orders);
  EXPECT_TRUE(orders.empty());
}

TEST_F(JobQueuePreemptionTest, OffMeansOnlyWaiting) {
  AddNodes(2);
  auto low = AddJob(JobJson("low", 1, "Running", /*admitted=*/true));
  AddWorkers(*low, {"n0", "n1"});
  AddJob(JobJson("high", 100, "Queued"));
  queue_.set_preemption(false);
  std::map<std::string, policy::PreemptOrder> orders;
  const auto plan = Plan(&orders);
  EXPECT_TRUE(orders.empty());
  EXPECT_EQ(plan.at("team/high").reason, "WaitingForCapacity");
}

TEST_F(JobQueuePreemptionTest, PreemptionPolicyNeverAndNonPreemptibleJobsAreHonoured) {
  AddNodes(2);
  fake_.Upsert(kube::Resource::PriorityClasses(), {{"apiVersion", "scheduling.k8s.io/v1"},
                                                   {"kind", "PriorityClass"},
                                                   {"metadata", {{"name", "polite"}}},
                                                   {"value", 1000},
                                                   {"preemptionPolicy", "Never"}});
  auto low = AddJob(JobJson("low", 1, "Running", /*admitted=*/true));
  AddWorkers(*low, {"n0", "n1"});
  Json polite = JobJson("polite", 0, "Queued");
  polite["spec"]["priorityClassName"] = "polite";
  AddJob(polite);
  std::map<std::string, policy::PreemptOrder> orders;
  EXPECT_EQ(Plan(&orders).at("team/polite").reason, "WaitingForCapacity");
  EXPECT_TRUE(orders.empty());

  jobs_.Delete("team/polite");
  Json keep = JobJson("low", 1, "Running", /*admitted=*/true);
  keep["spec"]["preemptible"] = false;
  AddJob(keep);
  AddJob(JobJson("high", 100, "Queued"));
  EXPECT_EQ(Plan(&orders).at("team/high").reason, "WaitingForCapacity");
  EXPECT_TRUE(orders.empty());
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::controller
