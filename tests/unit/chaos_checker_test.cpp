// The fault campaign's schedule and independent checker (e2e/chaos_schedule.h,
// e2e/chaos_checker.h) on made-up histories: each invariant is broken once and must be reported,
// naming the objects, and the lawful histories next to it must pass.

#include "chaos_checker.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "chaos_schedule.h"

namespace tpujob::e2e::chaos {
namespace TPUJOB_TEST_NS {

using nlohmann::json;

json Pod(const std::string& name, const std::string& uid, const std::string& job, int index,
         int attempt, const std::string& node = "", const std::string& phase = "Running") {
  json pod = {{"metadata",
               {{"name", name},
                {"uid", uid},
                {"labels",
                 {{"tpujob.dev/job-name", job},
                  {"tpujob.dev/replica-type", "Worker"},
                  {"tpujob.dev/replica-index", std::to_string(index)},
                  {"tpujob.dev/attempt", std::to_string(attempt)}}}}},
              {"spec", json::object()},
              {"status", {{"phase", phase}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

json Node(const std::string& name, bool operator_cordon, const std::string& cordoned_at = "",
          bool faulty_taint = true) {
  json node = {{"metadata", {{"name", name}, {"uid", "uid-" + name}}}, {"spec", json::object()}};
  if (operator_cordon) {
    node["spec"]["unschedulable"] = true;
    if (faulty_taint) {
      node["spec"]["taints"] = {{{"key", "tpujob.dev/faulty"}, {"effect", "NoSchedule"}}};
    }
    node["metadata"]["annotations"] = {{"tpujob.dev/cordoned-by", "tpujob-operator"},
                                       {"tpujob.dev/cordoned-at", cordoned_at}};
  }
  return node;
}

// `kubectl uncordon` of `node`: our annotations and taint stay.
json Uncordoned(json node) {
  node["spec"].erase("unschedulable");
  return node;
}

json Job(const std::string& name, int max_retries, int retries) {
  return {{"metadata", {{"name", name}, {"uid", "uid-" + name}}},
          {"spec", {{"faultTolerance", {{"maxJobRetries", max_retries}}}}},
          {"status", {{"jobRetries", retries}}}};
}

// Applies `events` (resource, type, object) with revisions 1, 2, ... in order.
std::vector<Violation> Replay(const std::vector<std::tuple<std::string, std::string, json>>& events,
                              Limits limits = {10, 0, "n", 0, {}}) {
  Checker checker(limits);
  uint64_t revision = 0;
  for (const auto& [resource, type, object] : events) {
    json with = object;
    with["metadata"]["resourceVersion"] = std::to_string(++revision);
    checker.Apply({resource, type, revision, with});
  }
  return checker.violations();
}

std::string Invariants(const std::vector<Violation>& violations) {
  std::string out;
  for (const auto& v : violations) out += v.invariant + ": " + v.detail + "\n";
  return out;
}

TEST(ChaosChecker, TwoLivePodsForOneWorkerAreReportedWithBothNamed) {
  const auto violations = Replay({{"pods", "ADDED", Pod("a-worker-1", "u1", "a", 1, 1)},
                                  {"pods", "ADDED", Pod("a-worker-1x", "u2", "a", 1, 1)}});
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "duplicate-worker");
  EXPECT_NE(violations[0].detail.find("u1"), std::string::npos) << violations[0].detail;
  EXPECT_NE(violations[0].detail.find("a-worker-1x"), std::string::npos) << violations[0].detail;
}

TEST(ChaosChecker, AReplacementAfterTheOldPodEndedOrWentIsLawful) {
  EXPECT_TRUE(Replay({{"pods", "ADDED", Pod("a-worker-1", "u1", "a", 1, 1)},
                      {"pods", "MODIFIED", Pod("a-worker-1", "u1", "a", 1, 1, "", "Failed")},
                      {"pods", "ADDED", Pod("a-worker-1", "u2", "a", 1, 1)}})
                  .empty());
  EXPECT_TRUE(Replay({{"pods", "ADDED", Pod("a-worker-1", "u1", "a", 1, 1)},
                      {"pods", "DELETED", Pod("a-worker-1", "u1", "a", 1, 1)},
                      {"pods", "ADDED", Pod("a-worker-1", "u2", "a", 1, 1)}})
                  .empty());
  // The same worker index in another job is another worker.
  EXPECT_TRUE(Replay({{"pods", "ADDED", Pod("a-worker-1", "u1", "a", 1, 1)},
                      {"pods", "ADDED", Pod("b-worker-1", "u2", "b", 1, 1)}})
                  .empty());
}

TEST(ChaosChecker, LivePodsOfTwoAttemptsAreReported) {
  const auto violations = Replay({{"pods", "ADDED", Pod("a-worker-0", "u1", "a", 0, 1)},
                                  {"pods", "ADDED", Pod("a-worker-1", "u2", "a", 1, 2)}});
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "two-attempts");
  // A kept pod relabelled to the new attempt while an old one still runs, too.
  const auto relabelled = Replay({{"pods", "ADDED", Pod("a-worker-0", "u1", "a", 0, 1)},
                                  {"pods", "ADDED", Pod("a-worker-1", "u2", "a", 1, 1)},
                                  {"pods", "MODIFIED", Pod("a-worker-1", "u2", "a", 1, 2)}});
  ASSERT_EQ(relabelled.size(), 1u) << Invariants(relabelled);
  EXPECT_EQ(relabelled[0].invariant, "two-attempts");
  // Once the old pods are gone, all of the new attempt's are lawful.
  EXPECT_TRUE(Replay({{"pods", "ADDED", Pod("a-worker-0", "u1", "a", 0, 1)},
                      {"pods", "DELETED", Pod("a-worker-0", "u1", "a", 0, 1)},
                      {"pods", "ADDED", Pod("a-worker-0", "u2", "a", 0, 2)},
                      {"pods", "ADDED", Pod("a-worker-1", "u3", "a", 1, 2)}})
                  .empty());
}

TEST(ChaosChecker, APodPlacedOnANodeCordonedForAFaultBeforeItExistedIsReported) {
  const auto violations = Replay({{"nodes", "ADDED", Node("n1", true, "2026-11-28T07:00:00Z")},
                                  {"pods", "ADDED", Pod("a-worker-0", "u1", "a", 0, 2)},
                                  {"pods", "MODIFIED", Pod("a-worker-0", "u1", "a", 0, 2, "n1")}});
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "faulty-placement");
  EXPECT_NE(violations[0].detail.find("n1"), std::string::npos);
  // Pinned at creation (nodeName in the pod as created) counts the same.
  const auto pinned = Replay({{"nodes", "ADDED", Node("n1", true, "2026-11-28T07:00:00Z")},
                              {"pods", "ADDED", Pod("a-worker-0", "u1", "a", 0, 2, "n1")}});
  ASSERT_EQ(pinned.size(), 1u) << Invariants(pinned);
  EXPECT_EQ(pinned[0].invariant, "faulty-placement");
}

TEST(ChaosChecker, PlacementsTheOperatorCouldNotHaveAvoidedAreLawful) {
  // Cordoned after the pod was created (the pod was there first), or uncordoned before it was
  // placed, or cordoned by a person (no faulty taint).
  EXPECT_TRUE(Replay({{"nodes", "ADDED", Node("n1", false)},
                      {"pods", "ADDED", Pod("a-worker-0", "u1", "a", 0, 1)},
                      {"nodes", "MODIFIED", Node("n1", true, "2026-11-28T07:00:00Z")},
                      {"pods", "MODIFIED", Pod("a-worker-0", "u1", "a", 0, 1, "n1")}})
                  .empty());
  EXPECT_TRUE(Replay({{"nodes", "ADDED", Node("n1", true, "2026-11-28T07:00:00Z")},
                      {"pods", "ADDED", Pod("a-worker-0", "u1", "a", 0, 1)},
                      {"nodes", "MODIFIED", Node("n1", false)},
                      {"pods", "MODIFIED", Pod("a-worker-0", "u1", "a", 0, 1, "n1")}})
                  .empty());
  EXPECT_TRUE(Replay({{"nodes", "ADDED", Node("n1", true, "2026-11-28T07:00:00Z", false)},
                      {"pods", "ADDED", Pod("a-worker-0", "u1", "a", 0, 1)},
                      {"pods", "MODIFIED", Pod("a-worker-0", "u1", "a", 0, 1, "n1")}})
                  .empty());
}

// Job `name` whose last recorded fault is `fault` (a retry comes with one).
json WithFault(json job, const std::string& fault) {
  job["status"]["faults"] = {{{"kind", "NodeUnhealthy"}, {"node", fault}}};
  return job;
}

TEST(ChaosChecker, JobRetriesAboveTheMaximumAreReported) {
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", Job("a", 2, 0)},
                      {"tpujobs", "MODIFIED", WithFault(Job("a", 2, 2), "n1")}})
                  .empty());
  const auto violations = Replay({{"tpujobs", "ADDED", Job("a", 2, 0)},
                                  {"tpujobs", "MODIFIED", WithFault(Job("a", 2, 3), "n1")}});
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].invariant, "retries");
  EXPECT_NE(violations[0].detail.find("job a"), std::string::npos);
  // Without maxJobRetries the annotation decides, else 0.
  json annotated = Job("b", 0, 1);
  annotated["spec"] = json::object();
  annotated["metadata"]["annotations"] = {{"fault-tolerance/job-retry-num", "1"}};
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", annotated}}).empty());
  annotated["metadata"].erase("annotations");
  EXPECT_EQ(Replay({{"tpujobs", "ADDED", annotated}}).size(), 1u);
}

TEST(ChaosChecker, ARetryWithoutANewFaultIsReported) {
  // A shrink or a grow of an elastic job uses no retry: jobRetries up with the same last fault.
  const auto violations = Replay({{"tpujobs", "ADDED", WithFault(Job("a", 3, 1), "n1")},
                                  {"tpujobs", "MODIFIED", WithFault(Job("a", 3, 2), "n1")}});
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "retries-counted");
  EXPECT_NE(violations[0].detail.find("job a (uid uid-a) went from jobRetries 1 to 2"),
            std::string::npos)
      << violations[0].detail;
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", WithFault(Job("a", 3, 1), "n1")},
                      {"tpujobs", "MODIFIED", WithFault(Job("a", 3, 2), "n2")},
                      {"tpujobs", "MODIFIED", WithFault(Job("a", 3, 2), "n2")}})
                  .empty());
}

// Elastic job "e": `slices` slices, minSlices `min`, running attempt `attempt` on `active`.
json ElasticJob(int slices, int min, int attempt, int active, const std::string& phase) {
  json job = Job("e", 3, 0);
  job["spec"]["tpu"] = {{"slices", slices}, {"minSlices", min}};
  job["status"]["phase"] = phase;
  job["status"]["attempt"] = attempt;
  job["status"]["tpu"] = {{"activeSlices", active}};
  return job;
}

// Worker `index` of job "e" (2 hosts a slice) in `attempt`, told `num_slices`.
json SlicePod(const std::string& uid, int index, int attempt, int num_slices) {
  json pod = Pod("e-worker-" + std::to_string(index), uid, "e", index, attempt);
  pod["metadata"]["labels"]["tpujob.dev/slice-index"] = std::to_string(index / 2);
  pod["spec"]["containers"] = {
      {{"name", "trainer"},
       {"env", {{{"name", "MEGASCALE_NUM_SLICES"}, {"value", std::to_string(num_slices)}}}}}};
  return pod;
}

TEST(ChaosChecker, RunningBelowMinSlicesIsReported) {
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", ElasticJob(4, 2, 1, 4, "Running")},
                      {"tpujobs", "MODIFIED", ElasticJob(4, 2, 2, 2, "Running")}})
                  .empty());
  const auto violations = Replay({{"tpujobs", "ADDED", ElasticJob(4, 2, 2, 1, "Running")}});
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "elastic-min");
  // Waiting (not Running) on fewer is lawful: the slice waits, as the queue timeout allows.
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", ElasticJob(4, 2, 2, 1, "Queued")}}).empty());
}

TEST(ChaosChecker, APodOfTheCurrentAttemptOutsideTheSlicesTheJobRunsOnIsReported) {
  // Shrunk to 1 slice in attempt 2: its pods are slice 0's, told 1; attempt 1's pods of two
  // slices went before.
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", ElasticJob(2, 1, 1, 2, "Running")},
                      {"pods", "ADDED", SlicePod("u1", 0, 1, 2)},
                      {"pods", "ADDED", SlicePod("u2", 2, 1, 2)},
                      {"pods", "DELETED", SlicePod("u1", 0, 1, 2)},
                      {"pods", "DELETED", SlicePod("u2", 2, 1, 2)},
                      {"tpujobs", "MODIFIED", ElasticJob(2, 1, 2, 1, "Starting")},
                      {"pods", "ADDED", SlicePod("u3", 0, 2, 1)},
                      {"pods", "ADDED", SlicePod("u4", 1, 2, 1)}})
                  .empty());
  // A pod of slice 1 while the job runs on one slice.
  auto violations = Replay({{"tpujobs", "ADDED", ElasticJob(2, 1, 2, 1, "Starting")},
                            {"pods", "ADDED", SlicePod("u3", 2, 2, 1)}});
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "slice-ids");
  // A pod told 2 slices while the job runs on 1.
  violations = Replay({{"tpujobs", "ADDED", ElasticJob(2, 1, 2, 1, "Starting")},
                       {"pods", "ADDED", SlicePod("u3", 0, 2, 2)}});
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "slice-ids");
  // The job shrinking under a live pod of its attempt.
  violations = Replay({{"tpujobs", "ADDED", ElasticJob(2, 1, 2, 2, "Running")},
                       {"pods", "ADDED", SlicePod("u3", 2, 2, 2)},
                       {"tpujobs", "MODIFIED", ElasticJob(2, 1, 2, 1, "Running")}});
  ASSERT_FALSE(violations.empty());
  EXPECT_EQ(violations[0].invariant, "slice-ids");
}

// A worker of attempt 1 on `node` whose container exited with `code` at `finished`.
json Exited(const std::string& node, int code, const std::string& finished,
            const std::string& reason = "Error") {
  json pod = Pod("a-worker-1", "u1", "a", 1, 1, node, "Failed");
  pod["status"]["containerStatuses"] = {
      {{"name", "trainer"},
       {"state",
        {{"terminated", {{"exitCode", code}, {"reason", reason}, {"finishedAt", finished}}}}}}};
  return pod;
}

// `node` with TPUUnhealthy True since `since` ("" for a healthy node).
json Flagged(const std::string& node, const std::string& since) {
  json n = Node(node, false);
  n["status"]["conditions"] = {{{"type", "Ready"}, {"status", "True"}}};
  if (!since.empty()) {
    n["status"]["conditions"].push_back(
        {{"type", "TPUUnhealthy"}, {"status", "True"}, {"lastTransitionTime", since}});
  }
  return n;
}

// Job "a" (a 10 s attribution window) Failed with `reason` in attempt 1.
json FailedJob(const std::string& reason = "PermanentError") {
  json job = Job("a", 2, 0);
  job["spec"]["faultTolerance"]["faultAttributionSeconds"] = 10;
  job["status"]["phase"] = "Failed";
  job["status"]["attempt"] = 1;
  job["status"]["conditions"] = {{{"type", "Failed"}, {"status", "True"}, {"reason", reason}}};
  return job;
}

TEST(ChaosChecker, APermanentErrorWhileTheExitsNodeShowedAFaultInTheWindowIsReported) {
  const auto violations = Replay({{"nodes", "ADDED", Flagged("n1", "")},
                                  {"pods", "ADDED", Exited("n1", 1, "2026-11-28T07:00:00Z")},
                                  {"nodes", "MODIFIED", Flagged("n1", "2026-11-28T07:00:01Z")},
                                  {"tpujobs", "ADDED", FailedJob()}});
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "attribution");
  EXPECT_NE(violations[0].detail.find("job a"), std::string::npos) << violations[0].detail;
  EXPECT_NE(violations[0].detail.find("a-worker-1"), std::string::npos) << violations[0].detail;
  EXPECT_NE(violations[0].detail.find("node n1"), std::string::npos) << violations[0].detail;
  EXPECT_NE(violations[0].detail.find("exited with code 1 at 2026-11-28T07:00:00Z"),
            std::string::npos)
      << violations[0].detail;
  EXPECT_NE(violations[0].detail.find("shown faulty since 2026-11-28T07:00:01Z"), std::string::npos)
      << violations[0].detail;
  // Ready False is a fault too.
  json not_ready = Flagged("n1", "");
  not_ready["status"]["conditions"][0] = {
      {"type", "Ready"}, {"status", "False"}, {"lastTransitionTime", "2026-11-28T07:00:05Z"}};
  EXPECT_EQ(Replay({{"pods", "ADDED", Exited("n1", 137, "2026-11-28T07:00:00Z")},
                    {"nodes", "ADDED", not_ready},
                    {"tpujobs", "ADDED", FailedJob()}})
                .size(),
            1u);
}

TEST(ChaosChecker, APermanentErrorTheNodeCouldNotHaveChangedIsLawful) {
  const std::string exit = "2026-11-28T07:00:00Z";
  // Flagged after the window (deadline 07:00:10, 2 s of slack).
  EXPECT_TRUE(Replay({{"pods", "ADDED", Exited("n1", 1, exit)},
                      {"nodes", "ADDED", Flagged("n1", "2026-11-28T07:00:09Z")},
                      {"tpujobs", "ADDED", FailedJob()}})
                  .empty());
  // Flagged in the window, but written after the job failed.
  EXPECT_TRUE(Replay({{"pods", "ADDED", Exited("n1", 1, exit)},
                      {"nodes", "ADDED", Flagged("n1", "")},
                      {"tpujobs", "ADDED", FailedJob()},
                      {"nodes", "MODIFIED", Flagged("n1", "2026-11-28T07:00:03Z")}})
                  .empty());
  // OOMKilled is decided at once; 143 is not permanent; another reason is not attribution's.
  for (const json& pod : {Exited("n1", 137, exit, "OOMKilled"), Exited("n1", 143, exit)}) {
    EXPECT_TRUE(Replay({{"pods", "ADDED", pod},
                        {"nodes", "ADDED", Flagged("n1", "2026-11-28T07:00:01Z")},
                        {"tpujobs", "ADDED", FailedJob()}})
                    .empty())
        << pod.dump();
  }
  EXPECT_TRUE(Replay({{"pods", "ADDED", Exited("n1", 1, exit)},
                      {"nodes", "ADDED", Flagged("n1", "2026-11-28T07:00:01Z")},
                      {"tpujobs", "ADDED", FailedJob("RetriesExhausted")}})
                  .empty());
  // The node flagged and cleared again before the job failed.
  EXPECT_TRUE(Replay({{"pods", "ADDED", Exited("n1", 1, exit)},
                      {"nodes", "ADDED", Flagged("n1", "2026-11-28T07:00:01Z")},
                      {"nodes", "MODIFIED", Flagged("n1", "")},
                      {"tpujobs", "ADDED", FailedJob()}})
                  .empty());
}

// The API server writes an unset time as null (a terminated state without finishedAt, a
// condition without lastTransitionTime): read as no time, never an error.
TEST(ChaosChecker, NullTimesAreReadAsNone) {
  json pod = Exited("n1", 1, "");
  pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = nullptr;
  pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = nullptr;
  json node = Flagged("n1", "2026-11-28T07:00:01Z");
  node["status"]["conditions"][1]["lastTransitionTime"] = nullptr;
  json job = FailedJob();
  job["status"]["conditions"][0]["reason"] = nullptr;
  std::vector<Violation> violations;
  EXPECT_NO_THROW(violations = Replay({{"pods", "ADDED", pod},
                                       {"nodes", "ADDED", node},
                                       {"tpujobs", "ADDED", FailedJob()},
                                       {"tpujobs", "MODIFIED", job}}));
  EXPECT_TRUE(violations.empty()) << Invariants(violations);
}

TEST(ChaosChecker, MoreOperatorCordonsThanTheCapAreReported) {
  const Limits cap2 = {2, 0, "n", 0, {}};
  EXPECT_TRUE(Replay({{"nodes", "ADDED", Node("n1", true, "2026-11-28T07:00:00Z")},
                      {"nodes", "ADDED", Node("n2", true, "2026-11-28T07:00:01Z")},
                      {"nodes", "MODIFIED", Node("n1", false)},
                      {"nodes", "ADDED", Node("n3", true, "2026-11-28T07:00:02Z")},
                      // Not one of the campaign's nodes: not counted.
                      {"nodes", "ADDED", Node("other", true, "2026-11-28T07:00:02Z")}},
                     cap2)
                  .empty());
  const auto violations = Replay({{"nodes", "ADDED", Node("n1", true, "2026-11-28T07:00:00Z")},
                                  {"nodes", "ADDED", Node("n2", true, "2026-11-28T07:00:01Z")},
                                  {"nodes", "ADDED", Node("n3", true, "2026-11-28T07:00:02Z")}},
                                 cap2);
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "cordon-cap");
  EXPECT_NE(violations[0].detail.find("n1, n2, n3"), std::string::npos) << violations[0].detail;
}

TEST(ChaosChecker, ANodeNamedBesideThePrefixCountsTowardsTheCap) {
  Limits cap1 = {1, 0, "n", 0, {}};
  const std::vector<std::tuple<std::string, std::string, json>> events = {
      {"nodes", "ADDED", Node("n1", true, "2026-11-28T07:00:00Z")},
      {"nodes", "ADDED", Node("real-0", true, "2026-11-28T07:00:01Z")}};
  EXPECT_TRUE(Replay(events, cap1).empty());
  cap1.other_nodes = {"real-0"};
  const auto violations = Replay(events, cap1);
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "cordon-cap");
  EXPECT_NE(violations[0].detail.find("real-0"), std::string::npos) << violations[0].detail;
}

TEST(ChaosChecker, CordonsFasterThanTheOperatorsBucketAreReported) {
  // 6 per minute: a burst of 6, then one every 10 s.
  const Limits rate6 = {100, 6, "n", 0, {}};
  std::vector<std::tuple<std::string, std::string, json>> lawful;
  for (int i = 0; i < 6; ++i) {
    lawful.push_back(
        {"nodes", "ADDED", Node("n" + std::to_string(i), true, "2026-11-28T07:00:00Z")});
  }
  lawful.push_back({"nodes", "ADDED", Node("n6", true, "2026-11-28T07:00:10Z")});
  EXPECT_TRUE(Replay(lawful, rate6).empty()) << Invariants(Replay(lawful, rate6));
  auto fast = lawful;
  fast.push_back({"nodes", "ADDED", Node("n7", true, "2026-11-28T07:00:11Z")});
  const auto violations = Replay(fast, rate6);
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "cordon-rate");
  EXPECT_NE(violations[0].detail.find("n7@"), std::string::npos) << violations[0].detail;
}

TEST(ChaosChecker, APersonRecordoningANodeWithOurAnnotationsIsNotAnOperatorCordon) {
  // One cordon a minute, a burst of one: two operator cordons at once would be too many.
  const Limits rate1 = {100, 1, "n", 0, {}};
  const json ours = Node("n1", true, "2026-11-28T07:00:00Z");
  const json uncordoned = Uncordoned(ours);
  EXPECT_TRUE(Replay({{"nodes", "ADDED", ours},
                      {"nodes", "MODIFIED", uncordoned},
                      {"nodes", "MODIFIED", ours}},  // `kubectl cordon`: the same cordoned-at
                     rate1)
                  .empty());
  // The operator cordoning it again writes a new cordoned-at: counted.
  EXPECT_EQ(Replay({{"nodes", "ADDED", ours},
                    {"nodes", "MODIFIED", uncordoned},
                    {"nodes", "MODIFIED", Node("n1", true, "2026-11-28T07:00:01Z")}},
                   rate1)
                .size(),
            1u);
}

TEST(ChaosChecker, APersonRecordoningANodeWithOurAnnotationsDoesNotCountTowardsTheCap) {
  const Limits cap1 = {1, 0, "n", 0, {}};
  const json first = Node("n1", true, "2026-11-28T07:00:00Z");
  const json uncordoned = Uncordoned(first);
  // The operator's one cordon moves to n2 once n1 is uncordoned; a person then cordons n1
  // again, with the operator's annotations still on it: not the operator's cordon.
  EXPECT_TRUE(Replay({{"nodes", "ADDED", first},
                      {"nodes", "MODIFIED", uncordoned},
                      {"nodes", "ADDED", Node("n2", true, "2026-11-28T07:00:05Z")},
                      {"nodes", "MODIFIED", first}},
                     cap1)
                  .empty());
  // The operator cordoning n1 again (a new cordoned-at) while n2 is cordoned: over the cap.
  const auto violations = Replay({{"nodes", "ADDED", first},
                                  {"nodes", "MODIFIED", uncordoned},
                                  {"nodes", "ADDED", Node("n2", true, "2026-11-28T07:00:05Z")},
                                  {"nodes", "MODIFIED", Node("n1", true, "2026-11-28T07:00:09Z")}},
                                 cap1);
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "cordon-cap");
  EXPECT_NE(violations[0].detail.find("n1, n2"), std::string::npos) << violations[0].detail;
}

json PreflightCordon(const std::string& name, const std::string& at, const std::string& item) {
  json node = Node(name, true, at);
  node["metadata"]["annotations"]["tpujob.dev/cordon-reason"] = "PreflightFailed";
  node["metadata"]["annotations"]["tpujob.dev/cordon-evidence"] = "pod-uid-" + name + "/" + item;
  return node;
}

TEST(ChaosChecker, AsManyPreflightCordonsForOneItemAsTheBreakerAllowsNoneAreReported) {
  const Limits breaker3 = {100, 0, "n", 3, {}};
  // Two nodes for `dns` within 10 minutes, a third for another item, a third for `dns` after
  // the window: lawful.
  EXPECT_TRUE(Replay({{"nodes", "ADDED", PreflightCordon("n1", "2026-11-28T07:00:00Z", "dns")},
                      {"nodes", "ADDED", PreflightCordon("n2", "2026-11-28T07:05:00Z", "dns")},
                      {"nodes", "ADDED", PreflightCordon("n3", "2026-11-28T07:06:00Z", "disk")},
                      {"nodes", "ADDED", PreflightCordon("n4", "2026-11-28T07:10:00Z", "dns")}},
                     breaker3)
                  .empty());
  const auto violations =
      Replay({{"nodes", "ADDED", PreflightCordon("n1", "2026-11-28T07:00:00Z", "dns")},
              {"nodes", "ADDED", PreflightCordon("n2", "2026-11-28T07:05:00Z", "dns")},
              {"nodes", "ADDED", PreflightCordon("n4", "2026-11-28T07:09:59Z", "dns")}},
             breaker3);
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "cordon-breaker");
  EXPECT_NE(violations[0].detail.find("item dns"), std::string::npos) << violations[0].detail;
  EXPECT_NE(violations[0].detail.find("n4@"), std::string::npos) << violations[0].detail;
}

TEST(ChaosChecker, AReplayedOlderStateIsSkipped) {
  // A watch opened again without a resourceVersion lists the pod as ADDED at an older revision.
  Checker checker({10, 0, "n", 0, {}});
  json pod = Pod("a-worker-0", "u1", "a", 0, 1);
  checker.Apply({"pods", "ADDED", 5, pod});
  checker.Apply({"pods", "ADDED", 5, pod});
  checker.Apply({"pods", "ADDED", 3, pod});
  EXPECT_TRUE(checker.violations().empty()) << Invariants(checker.violations());
  EXPECT_EQ(checker.applied(), 1);
}

TEST(ChaosChecker, RecordedStreamsMergeInRevisionOrder) {
  std::istringstream pods(
      R"({"type":"ADDED","object":{"metadata":{"uid":"p","resourceVersion":"7"}}})"
      "\n"
      R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}})"
      "\n"
      R"({"type":"DELETED","object":{"metadata":{"uid":"p","resourceVersion":"12"}}})"
      "\n{\"type\":\"MODIF");  // a line cut short
  std::istringstream nodes(
      R"({"type":"MODIFIED","object":{"metadata":{"uid":"n","resourceVersion":"10"}}})"
      "\n");
  const auto merged = Merge({ReadEvents(pods, "pods"), ReadEvents(nodes, "nodes")});
  ASSERT_EQ(merged.size(), 3u);
  EXPECT_EQ(merged[0].revision, 7u);
  EXPECT_EQ(merged[1].resource, "nodes");
  EXPECT_EQ(merged[2].type, "DELETED");
}

// The campaign's false alarm: the pods stream expired (410), a pod was deleted in the gap, and the
// stream listed again without it. Its replacement with the same worker id is no duplicate; a pod
// that was listed again stays.
TEST(ChaosChecker, AnObjectMissingWhenTheStreamListsAgainIsGone) {
  const auto line = [](const std::string& type, const json& object) {
    return json{{"type", type}, {"object", object}}.dump() + "\n";
  };
  const auto at = [](json object, int rv) {
    object["metadata"]["resourceVersion"] = std::to_string(rv);
    return object;
  };
  const json end = {
      {"metadata",
       {{"resourceVersion", "30"}, {"annotations", {{"k8s.io/initial-events-end", "true"}}}}}};
  std::istringstream pods(
      line("ADDED", at(Pod("a-worker-0", "old", "a", 0, 2, "n1"), 10)) +
      line("ADDED", at(Pod("a-worker-1", "kept", "a", 1, 2, "n2"), 11)) +
      line("ERROR", {{"kind", "Status"}, {"code", 410}, {"reason", "Expired"}}) +
      line("ADDED", at(Pod("a-worker-1", "kept", "a", 1, 2, "n2"), 11)) + line("BOOKMARK", end) +
      line("ADDED", at(Pod("a-worker-0", "new", "a", 0, 2), 40)));
  const std::vector<Event> events = ReadEvents(pods, "pods");
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[3].type, "DELETED");
  EXPECT_TRUE(events[3].vanished);
  EXPECT_EQ(events[3].object["metadata"].value("uid", ""), "old");
  EXPECT_EQ(events[3].revision, 10u);
  Checker checker({10, 0, "n", 0, {}});
  for (const Event& event : Merge({events})) checker.Apply(event);
  EXPECT_TRUE(checker.violations().empty()) << checker.violations().front().detail;

  // Without the relist the old pod would still be live: the same history is a duplicate.
  Checker unaware({10, 0, "n", 0, {}});
  for (const Event& event : Merge({events})) {
    if (!event.vanished) unaware.Apply(event);
  }
  ASSERT_EQ(unaware.violations().size(), 1u);
  EXPECT_EQ(unaware.violations()[0].invariant, "duplicate-worker");

  // A pod the stream listed again is not taken for gone, and its replay changes nothing.
  Checker kept({10, 0, "n", 0, {}});
  std::istringstream again(line("ADDED", at(Pod("a-worker-1", "kept", "a", 1, 2, "n2"), 11)) +
                           line("ERROR", json::object()) +
                           line("ADDED", at(Pod("a-worker-1", "kept", "a", 1, 2, "n2"), 11)) +
                           line("BOOKMARK", end) +
                           line("ADDED", at(Pod("a-worker-1x", "dup", "a", 1, 2), 41)));
  for (const Event& event : Merge({ReadEvents(again, "pods")})) kept.Apply(event);
  ASSERT_EQ(kept.violations().size(), 1u);
  EXPECT_EQ(kept.violations()[0].invariant, "duplicate-worker");
}

json FinishedJob(const std::string& phase, double productive, double lost, int retries,
                 json faults) {
  return {{"metadata", {{"name", "a"}, {"creationTimestamp", "2026-11-28T07:00:00Z"}}},
          {"status",
           {{"phase", phase},
            {"jobRetries", retries},
            {"faults", faults},
            {"goodput",
             {{"accountedUntil", "2026-11-28T07:01:40.000Z"},  // 100 s after creation
              {"productiveSeconds", productive},
              {"lostSeconds", {{"queued", lost}}}}}}}};
}

TEST(ChaosChecker, FinalStateStuckJobsGoodputAndFaultRecords) {
  ASSERT_EQ(ParseUtcSeconds("2026-11-28T07:00:00Z"), 1795849200);
  ASSERT_EQ(ParseUtcSeconds("2026-11-28T07:00:00.250Z"), 1795849200.25);
  ASSERT_EQ(ParseUtcSeconds("yesterday"), -1);
  const json reissue = {{"kind", "NodeUnhealthy"}, {"action", "ReissueJob"}};
  const json maintenance = {{"kind", "Maintenance"}, {"action", "ReissueJob"}};
  EXPECT_EQ(FinalJobProblems({{"items", {FinishedJob("Succeeded", 80, 19.6, 1, {reissue})}}}), "");
  EXPECT_NE(FinalJobProblems({{"items", {FinishedJob("Succeeded", 80, 10, 0, json::array())}}})
                .find("goodput adds up"),
            std::string::npos);
  EXPECT_NE(FinalJobProblems({{"items", {FinishedJob("Failed", 80, 20, 1, {maintenance})}}})
                .find("jobRetries 1 but 0 counted re-issues"),
            std::string::npos);
  const json starting = {{"metadata", {{"name", "s"}}}, {"status", {{"phase", "Starting"}}}};
  EXPECT_NE(FinalJobProblems({{"items", {starting}}}).find("job s is stuck in phase Starting"),
            std::string::npos);
  const json queued_bare = {{"metadata", {{"name", "q"}}}, {"status", {{"phase", "Queued"}}}};
  EXPECT_NE(FinalJobProblems({{"items", {queued_bare}}}).find("without a reason"),
            std::string::npos);
  json queued = queued_bare;
  queued["status"]["conditions"] = {{{"type", "Admitted"}, {"reason", "WaitingForCapacity"}}};
  EXPECT_EQ(FinalJobProblems({{"items", {queued}}}), "");
}

// --- Stalls (stall-answered, stall-fail-early, stall-hardware) ---

constexpr char kT0[] = "2026-12-05T10:00:00Z";

// "2026-12-05T10:00:00Z" + `seconds`.
std::string At(int seconds) { return FormatUtcSeconds(ParseUtcSeconds(kT0) + seconds); }

// A job that watches its progress (maxStalls 2, faultAttributionSeconds 3), as the operator
// last wrote its status.
json StallJob(const std::string& name, int attempt, int stalls,
              const std::string& phase = "Running", const std::string& failed_reason = "",
              const std::string& acted_until = "") {
  json job = {
      {"metadata", {{"name", name}, {"uid", "uid-" + name}}},
      {"spec",
       {{"faultTolerance",
         {{"maxJobRetries", 3},
          {"faultAttributionSeconds", 3},
          {"progress", {{"logPattern", "step (\\d+)"}, {"stallSeconds", 5}, {"maxStalls", 2}}}}}}},
      {"status", {{"phase", phase}, {"attempt", attempt}}}};
  if (stalls > 0) job["status"]["stalls"] = stalls;
  if (!acted_until.empty()) job["status"]["progress"] = {{"stallsActedUntil", acted_until}};
  if (!failed_reason.empty()) {
    job["status"]["conditions"] = {
        {{"type", "Failed"}, {"status", "True"}, {"reason", failed_reason}}};
  }
  return job;
}

// Worker `index` of `job`: its container ended with the stall code and the supervisor's report.
json StalledPod(const std::string& uid, const std::string& job, int index, int attempt,
                const std::string& node, const std::string& finished, int64_t step) {
  json pod =
      Pod(job + "-worker-" + std::to_string(index), uid, job, index, attempt, node, "Failed");
  const json report = {{"state", "stalled"}, {"generation", 0},    {"exit", 143},
                       {"idleSeconds", 5},   {"phase", "running"}, {"step", step}};
  pod["status"]["containerStatuses"] = {{{"name", "trainer"},
                                         {"state",
                                          {{"terminated",
                                            {{"exitCode", 124},
                                             {"reason", "Error"},
                                             {"startedAt", kT0},
                                             {"finishedAt", finished},
                                             {"message", report.dump()}}}}}}};
  return pod;
}

// A node's heartbeat at `time`: the history's clock moves on.
json Heartbeat(const std::string& time, const std::string& node = "n-clock") {
  json n = Node(node, false);
  n["status"]["conditions"] = {{{"type", "Ready"},
                                {"status", "True"},
                                {"lastHeartbeatTime", time},
                                {"lastTransitionTime", kT0}}};
  return n;
}

TEST(ChaosChecker, AStallLeftUnansweredPastItsBoundIsReported) {
  const auto violations =
      Replay({{"tpujobs", "ADDED", StallJob("h", 1, 0)},
              {"pods", "MODIFIED", StalledPod("u0", "h", 0, 1, "n1", At(10), 40)},
              {"pods", "MODIFIED", StalledPod("u1", "h", 1, 1, "n2", At(10), 40)},
              // Within 3 + 45 s of the report: no verdict yet.
              {"nodes", "MODIFIED", Heartbeat(At(58))},
              {"tpujobs", "MODIFIED", StallJob("h", 1, 0)},
              // Past it, the job still Running with nothing counted.
              {"nodes", "MODIFIED", Heartbeat(At(59))},
              {"nodes", "MODIFIED", Heartbeat(At(70))}});
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "stall-answered");
  EXPECT_NE(violations[0].detail.find("h-worker-1 on n2"), std::string::npos)
      << violations[0].detail;
  EXPECT_NE(violations[0].detail.find("not acted on by " + At(58)), std::string::npos)
      << violations[0].detail;
}

TEST(ChaosChecker, AStallAnsweredLateIsReported) {
  const auto violations =
      Replay({{"tpujobs", "ADDED", StallJob("h", 1, 0)},
              {"pods", "MODIFIED", StalledPod("u0", "h", 0, 1, "n1", At(10), 40)},
              {"tpujobs", "MODIFIED", StallJob("h", 1, 1, "Restarting", "", At(60))}});
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "stall-answered");
  EXPECT_NE(violations[0].detail.find("acted on only at " + At(60)), std::string::npos)
      << violations[0].detail;
}

TEST(ChaosChecker, AStallActedOnInTimeIsLawfulWhateverTheAction) {
  const json report = StalledPod("u0", "h", 0, 1, "n1", At(10), 40);
  // Restarted (counted in status.stalls).
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", StallJob("h", 1, 0)},
                      {"pods", "MODIFIED", report},
                      {"tpujobs", "MODIFIED", StallJob("h", 1, 1, "Restarting", "", At(14))},
                      {"nodes", "MODIFIED", Heartbeat(At(600))}})
                  .empty());
  // Re-issued (the hardware path), or ended another way.
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", StallJob("h", 1, 0)},
                      {"pods", "MODIFIED", report},
                      {"tpujobs", "MODIFIED", StallJob("h", 2, 0, "Queued")},
                      {"nodes", "MODIFIED", Heartbeat(At(600))}})
                  .empty());
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", StallJob("h", 1, 0)},
                      {"pods", "MODIFIED", report},
                      {"tpujobs", "MODIFIED", StallJob("h", 1, 0, "Failed", "DeadlineExceeded")},
                      {"nodes", "MODIFIED", Heartbeat(At(600))}})
                  .empty());
  // Its pods deleted by someone before a verdict: no report left to act on.
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", StallJob("h", 1, 0)},
                      {"pods", "MODIFIED", report},
                      {"pods", "DELETED", report},
                      {"nodes", "MODIFIED", Heartbeat(At(600))}})
                  .empty());
  // A report that ended before the last verdict (acted on already), one of an attempt left
  // behind, and one of a job that does not watch its progress.
  json unwatched = StallJob("u", 1, 0);
  unwatched["spec"]["faultTolerance"].erase("progress");
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", StallJob("h", 2, 1, "Running", "", At(10))},
                      {"pods", "MODIFIED", report},
                      {"pods", "MODIFIED", StalledPod("u1", "h", 1, 1, "n2", At(11), 40)},
                      {"tpujobs", "ADDED", unwatched},
                      {"pods", "MODIFIED", StalledPod("u2", "u", 0, 1, "n3", At(10), 40)},
                      {"nodes", "MODIFIED", Heartbeat(At(600))}})
                  .empty());
}

TEST(ChaosChecker, FailingWithReasonStalledBeforeMaxStallsInARowIsReported) {
  // One stall, then Failed/Stalled: maxStalls is 2.
  const auto early =
      Replay({{"tpujobs", "ADDED", StallJob("h", 1, 0)},
              {"pods", "MODIFIED", StalledPod("u0", "h", 0, 1, "n1", At(10), 40)},
              {"tpujobs", "MODIFIED", StallJob("h", 1, 1, "Failed", "Stalled", At(14))}});
  ASSERT_EQ(early.size(), 1u) << Invariants(early);
  EXPECT_EQ(early[0].invariant, "stall-fail-early");
  EXPECT_NE(early[0].detail.find("after 1 stalls in a row"), std::string::npos) << early[0].detail;
  // Two stalls, but the program got further in between: not in a row.
  const auto progressed =
      Replay({{"tpujobs", "ADDED", StallJob("h", 1, 0)},
              {"pods", "MODIFIED", StalledPod("u0", "h", 0, 1, "n1", At(10), 40)},
              {"tpujobs", "MODIFIED", StallJob("h", 1, 1, "Restarting", "", At(14))},
              {"pods", "MODIFIED", StalledPod("u1", "h", 0, 1, "n1", At(30), 90)},
              {"tpujobs", "MODIFIED", StallJob("h", 1, 2, "Failed", "Stalled", At(34))}});
  ASSERT_EQ(progressed.size(), 1u) << Invariants(progressed);
  EXPECT_EQ(progressed[0].invariant, "stall-fail-early");
  // Two in a row at the same step: lawful.
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", StallJob("h", 1, 0)},
                      {"pods", "MODIFIED", StalledPod("u0", "h", 0, 1, "n1", At(10), 40)},
                      {"tpujobs", "MODIFIED", StallJob("h", 1, 1, "Restarting", "", At(14))},
                      {"pods", "MODIFIED", StalledPod("u1", "h", 0, 1, "n1", At(30), 40)},
                      {"tpujobs", "MODIFIED", StallJob("h", 1, 2, "Failed", "Stalled", At(34))}})
                  .empty());
}

TEST(ChaosChecker, AStallCountedWhileAStalledWorkersNodeShowedAFaultIsReported) {
  json faulty = Node("n1", false);
  faulty["status"]["conditions"] = {
      {{"type", "TPUUnhealthy"}, {"status", "True"}, {"lastTransitionTime", At(11)}}};
  const auto violations =
      Replay({{"tpujobs", "ADDED", StallJob("h", 1, 0)},
              {"pods", "MODIFIED", StalledPod("u0", "h", 0, 1, "n1", At(10), 40)},
              {"nodes", "MODIFIED", faulty},
              {"tpujobs", "MODIFIED", StallJob("h", 1, 1, "Restarting", "", At(14))}});
  ASSERT_EQ(violations.size(), 1u) << Invariants(violations);
  EXPECT_EQ(violations[0].invariant, "stall-hardware");
  EXPECT_NE(violations[0].detail.find("node n1"), std::string::npos) << violations[0].detail;
  // The hardware case won: re-issued, nothing counted as a stall.
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", StallJob("h", 1, 0)},
                      {"pods", "MODIFIED", StalledPod("u0", "h", 0, 1, "n1", At(10), 40)},
                      {"nodes", "MODIFIED", faulty},
                      {"tpujobs", "MODIFIED", StallJob("h", 2, 0, "Queued")}})
                  .empty());
  // A fault shown only after the window: the stall's.
  json late = faulty;
  late["status"]["conditions"][0]["lastTransitionTime"] = At(20);
  EXPECT_TRUE(Replay({{"tpujobs", "ADDED", StallJob("h", 1, 0)},
                      {"pods", "MODIFIED", StalledPod("u0", "h", 0, 1, "n1", At(10), 40)},
                      {"nodes", "MODIFIED", late},
                      {"tpujobs", "MODIFIED", StallJob("h", 1, 1, "Restarting", "", At(21))}})
                  .empty());
}

TEST(ChaosSchedule, TheSameSeedGivesTheSameScheduleAndAnotherSeedAnother) {
  const auto a = MakeSchedule(42, 120);
  EXPECT_EQ(a, MakeSchedule(42, 120));
  EXPECT_NE(a, MakeSchedule(43, 120));
  // About one step per 0.7 s, in time order, within the duration, every kind drawn.
  EXPECT_GT(a.size(), 120u);
  EXPECT_LT(a.size(), 250u);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_LE(a[i - 1].at_ms, a[i].at_ms);
  EXPECT_LT(a.back().at_ms, 120000);
  const auto counts = CountByKind(MakeSchedule(42, 600));
  for (Kind kind : kAllKinds) {
    EXPECT_GT(counts.count(std::string(KindName(kind))), 0u) << KindName(kind);
  }
}

TEST(ChaosSchedule, HangsComeFromTheirOwnStreamAndLeaveTheOtherStepsOfASeedAlone) {
  const auto with_hangs = MakeSchedule(42, 120);
  std::vector<Step> without;
  int hangs = 0;
  for (const Step& step : with_hangs) {
    if (step.kind == Kind::kHang) {
      ++hangs;
    } else {
      without.push_back(step);
    }
  }
  // Every 8 s on average: about 15 in 120 s.
  EXPECT_GT(hangs, 5);
  EXPECT_LT(hangs, 30);
  EXPECT_EQ(without, MakeSchedule(42, 120, 700, 0));
  for (const Step& step : MakeSchedule(42, 120, 700, 0)) EXPECT_NE(step.kind, Kind::kHang);
  for (size_t i = 1; i < with_hangs.size(); ++i) {
    EXPECT_LE(with_hangs[i - 1].at_ms, with_hangs[i].at_ms);
  }
}

TEST(ChaosSchedule, SplitMix64MatchesItsReferenceValues) {
  // The first outputs for seed 0 (Vigna's reference implementation of splitmix64.c): the
  // schedule replays on any machine and compiler.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.Next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.Next(), 0x6e789e6aa1b965f4ULL);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e::chaos
