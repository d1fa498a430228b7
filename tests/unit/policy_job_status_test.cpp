#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "policy/job_status.h"
#include "policy_fixtures.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using fixtures::At;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

FaultRecord Fault(WallTime time, std::string kind, std::string message) {
  FaultRecord f;
  f.time = time;
  f.kind = std::move(kind);
  f.message = std::move(message);
  return f;
}

// A status with every field set to a value other than its default.
JobStatus FullStatus() {
  JobStatus s;
  s.phase = Phase::kRestarting;
  s.conditions = {
      Condition{"Valid", "True", "SpecValid", "the spec is valid", At(10), 3},
      Condition{"Admitted", "False", "Reissued", "attempt 2 waits", At(20), 3},
      Condition{"Ready", "Unknown", "", "", WallTime{}, 0},
  };
  s.observed_generation = 3;
  s.attempt = 2;
  s.job_retries = 1;
  s.ready_workers = "1/2";
  s.tpu = TpuStatus{"v5p-16", "v5p-16", "tpu-v5p-slice", "2x2x2", 4, 2, 3, 2, "2/3", {2, 0}};
  s.replica_statuses["Master"] = ReplicaCounts{1, 1, 0, 0, 0};
  s.replica_statuses["Worker"] = ReplicaCounts{2, 1, 3, 4, 5};
  s.worker_restarts["Worker-0"] = RestartRecord{2, "pod-uid-7", "node-3", 0};
  s.worker_restarts["Worker-1"] = RestartRecord{1, "", "", 0};
  s.queued_at = At(1);
  s.admitted_at = At(2);
  s.start_time = At(3);
  s.running_at = At(4);
  s.completion_time = At(5);
  s.queue_position = 0;
  s.reissued = true;
  s.preemptions = 2;
  s.preempted_by = "team/high";
  s.preempted_at = At(6);
  FaultRecord f;
  f.time = At(30);
  f.attempt = 1;
  f.kind = "ContainerFailed";
  f.node = "node-1";
  f.pod = "train-worker-1";
  f.container = "trainer";
  f.item = "dns";
  f.exit_code = 143;
  f.reason = "Error";
  f.message = "terminated";
  f.action = "RestartWorker";
  s.faults.push_back(f);
  f.exit_code = 0;  // a present zero survives the trip too
  f.action = "ReissueJob";
  s.faults.push_back(f);
  s.faults.push_back(Fault(At(31), "PodFailed", ""));
  s.cordoned_nodes = {"node-1", "node-2"};
  s.elastic = ElasticStatus{At(40), At(41), 7};
  return s;
}

TEST(PolicyJobStatusTest, RoundTripWithEveryFieldSet) {
  const JobStatus s = FullStatus();
  const Json j = s.ToJson();
  EXPECT_EQ(JobStatus::FromJson(j), s) << j.dump(2);
  // And the JSON is canonical: writing what was read gives the same document.
  EXPECT_EQ(JobStatus::FromJson(j).ToJson(), j);
}

TEST(PolicyJobStatusTest, ToJsonSpelling) {
  const Json j = FullStatus().ToJson();
  EXPECT_EQ(j["phase"], "Restarting");
  EXPECT_EQ(j["observedGeneration"], 3);
  EXPECT_EQ(j["attempt"], 2);
  EXPECT_EQ(j["jobRetries"], 1);
  EXPECT_EQ(j["readyWorkers"], "1/2");
  EXPECT_EQ(j["tpu"], (Json{{"summary", "v5p-16"},
                            {"type", "v5p-16"},
                            {"accelerator", "tpu-v5p-slice"},
                            {"topology", "2x2x2"},
                            {"chipsPerWorker", 4},
                            {"hostsPerSlice", 2},
                            {"slices", 3},
                            {"activeSlices", 2},
                            {"slicesSummary", "2/3"},
                            {"sliceSlots", {2, 0}}}));
  EXPECT_EQ(j["elastic"], (Json{{"degradedSince", "2024-01-01T00:00:40Z"},
                                {"scaleUpOfferedAt", "2024-01-01T00:00:41Z"},
                                {"checkpointAtOffer", 7}}));
  EXPECT_EQ(j["replicaStatuses"]["Worker"],
            (Json{{"active", 2}, {"ready", 1}, {"succeeded", 3}, {"failed", 4}, {"restarts", 5}}));
  EXPECT_EQ(j["workerRestarts"]["Worker-0"],
            (Json{{"count", 2}, {"podUID", "pod-uid-7"}, {"node", "node-3"}}));
  EXPECT_EQ(j["workerRestarts"]["Worker-1"], (Json{{"count", 1}}));
  EXPECT_EQ(j["queuedAt"], "2024-01-01T00:00:01Z");
  EXPECT_EQ(j["admittedAt"], "2024-01-01T00:00:02Z");
  EXPECT_EQ(j["startTime"], "2024-01-01T00:00:03Z");
  EXPECT_EQ(j["runningAt"], "2024-01-01T00:00:04Z");
  EXPECT_EQ(j["completionTime"], "2024-01-01T00:00:05Z");
  EXPECT_EQ(j["queuePosition"], 0);
  EXPECT_EQ(j["reissued"], true);
  EXPECT_EQ(j["preemptions"], 2);
  EXPECT_EQ(j["preemptedBy"], "team/high");
  EXPECT_EQ(j["preemptedAt"], "2024-01-01T00:00:06Z");
  EXPECT_EQ(j["cordonedNodes"], (Json{"node-1", "node-2"}));
  EXPECT_EQ(j["conditions"][0], (Json{{"type", "Valid"},
                                      {"status", "True"},
                                      {"reason", "SpecValid"},
                                      {"message", "the spec is valid"},
                                      {"lastTransitionTime", "2024-01-01T00:00:10Z"},
                                      {"observedGeneration", 3}}));
  EXPECT_EQ(j["conditions"][2], (Json{{"type", "Ready"},
                                      {"status", "Unknown"},
                                      {"lastTransitionTime", "1970-01-01T00:00:00Z"}}));
  EXPECT_EQ(j["faults"][0], (Json{{"time", "2024-01-01T00:00:30Z"},
                                  {"attempt", 1},
                                  {"kind", "ContainerFailed"},
                                  {"node", "node-1"},
                                  {"pod", "train-worker-1"},
                                  {"container", "trainer"},
                                  {"item", "dns"},
                                  {"exitCode", 143},
                                  {"reason", "Error"},
                                  {"message", "terminated"},
                                  {"action", "RestartWorker"}}));
  EXPECT_EQ(j["faults"][2], (Json{{"time", "2024-01-01T00:00:31Z"}, {"kind", "PodFailed"}}));
}

TEST(PolicyJobStatusTest, EmptyStatusIsAnEmptyObject) {
  EXPECT_EQ(JobStatus().ToJson(), Json::object());
  EXPECT_EQ(JobStatus::FromJson(Json::object()), JobStatus());
  EXPECT_EQ(JobStatus::FromJson(Json()), JobStatus());
  EXPECT_EQ(JobStatus::FromJson(Json::array({1, 2})), JobStatus());
  EXPECT_EQ(JobStatus::FromJson("Running"), JobStatus());
}

TEST(PolicyJobStatusTest, TimestampsAreReadAtWholeSeconds) {
  const Json j = {{"queuedAt", "2024-01-01T00:00:01.750Z"},
                  {"startTime", "2024-01-01T01:00:01+01:00"},
                  {"conditions",
                   {{{"type", "Ready"},
                     {"status", "True"},
                     {"lastTransitionTime", "2024-01-01T00:00:09.999999Z"}}}},
                  {"faults", {{{"time", "2024-01-01T00:00:30.5Z"}}}}};
  const JobStatus s = JobStatus::FromJson(j);
  EXPECT_EQ(s.queued_at, At(1));
  EXPECT_EQ(s.start_time, At(1));
  ASSERT_EQ(s.conditions.size(), 1u);
  EXPECT_EQ(s.conditions[0].last_transition_time, At(9));
  ASSERT_EQ(s.faults.size(), 1u);
  EXPECT_EQ(s.faults[0].time, At(30));
  EXPECT_EQ(s.ToJson()["queuedAt"], "2024-01-01T00:00:01Z");
}

TEST(PolicyJobStatusTest, TimestampsAreWrittenAtWholeSeconds) {
  JobStatus s;
  s.queued_at = At(1) + milliseconds(999);
  EXPECT_EQ(s.ToJson()["queuedAt"], "2024-01-01T00:00:01Z");
  EXPECT_EQ(JobStatus::FromJson(s.ToJson()).queued_at, At(1));
}

TEST(PolicyJobStatusTest, SetConditionAddsWithTheTimeTruncated) {
  JobStatus s;
  s.SetCondition(condition::kAdmitted, false, "Queued", "waiting", At(5) + milliseconds(400), 2);
  ASSERT_EQ(s.conditions.size(), 1u);
  EXPECT_EQ(s.conditions[0], (Condition{"Admitted", "False", "Queued", "waiting", At(5),
                                        /*observed_generation=*/2}));
  EXPECT_FALSE(s.ConditionTrue(condition::kAdmitted));
  EXPECT_EQ(s.FindCondition(condition::kReady), nullptr);
  EXPECT_FALSE(s.ConditionTrue(condition::kReady));
}

TEST(PolicyJobStatusTest, SetConditionKeepsTheTransitionTimeWhileTheStatusHolds) {
  JobStatus s;
  s.SetCondition(condition::kReady, false, "WorkersNotReady", "0 of 2", At(5), 1);
  s.SetCondition(condition::kReady, false, "WorkersNotReady", "1 of 2", At(9), 2);
  ASSERT_EQ(s.conditions.size(), 1u);
  EXPECT_EQ(s.conditions[0],
            (Condition{"Ready", "False", "WorkersNotReady", "1 of 2", At(5), /*generation=*/2}));

  s.SetCondition(condition::kReady, true, "AllWorkersReady", "2 of 2", At(12), 2);
  ASSERT_EQ(s.conditions.size(), 1u);
  EXPECT_EQ(s.conditions[0].status, "True");
  EXPECT_EQ(s.conditions[0].last_transition_time, At(12));
  EXPECT_TRUE(s.ConditionTrue(condition::kReady));

  s.SetCondition(condition::kReady, false, "WorkerRestarting", "x", At(20), 2);
  EXPECT_EQ(s.conditions[0].last_transition_time, At(20));
  EXPECT_FALSE(s.ConditionTrue(condition::kReady));
}

TEST(PolicyJobStatusTest, ConditionsKeepTheirOrderAndAreRemovedByType) {
  JobStatus s;
  s.SetCondition(condition::kValid, true, "SpecValid", "", At(1), 1);
  s.SetCondition(condition::kAdmitted, true, "Admitted", "", At(1), 1);
  s.SetCondition(condition::kReady, false, "WorkersNotReady", "", At(1), 1);
  s.SetCondition(condition::kValid, true, "SpecValid", "again", At(2), 1);
  ASSERT_EQ(s.conditions.size(), 3u);
  EXPECT_EQ(s.conditions[0].type, "Valid");
  EXPECT_EQ(s.conditions[0].message, "again");
  s.RemoveCondition(condition::kAdmitted);
  ASSERT_EQ(s.conditions.size(), 2u);
  EXPECT_EQ(s.conditions[0].type, "Valid");
  EXPECT_EQ(s.conditions[1].type, "Ready");
  s.RemoveCondition(condition::kFailed);  // absent: nothing happens
  EXPECT_EQ(s.conditions.size(), 2u);
}

TEST(PolicyJobStatusTest, AddFaultKeepsTheNewestKMaxFaults) {
  JobStatus s;
  for (int i = 0; i < static_cast<int>(kMaxFaults) + 5; ++i) {
    s.AddFault(Fault(At(i) + milliseconds(250), "", std::to_string(i)));
    ASSERT_LE(s.faults.size(), kMaxFaults);
  }
  ASSERT_EQ(s.faults.size(), kMaxFaults);
  EXPECT_EQ(s.faults.front().message, "5");
  EXPECT_EQ(s.faults.back().message, std::to_string(kMaxFaults + 4));
  for (size_t i = 0; i < s.faults.size(); ++i) {
    EXPECT_EQ(s.faults[i].message, std::to_string(i + 5));
    EXPECT_EQ(s.faults[i].time, At(static_cast<int64_t>(i) + 5));  // truncated to the second
  }
  // The bound holds through the JSON too.
  EXPECT_EQ(JobStatus::FromJson(s.ToJson()).faults, s.faults);
}

TEST(PolicyJobStatusTest, FromJsonIsLenientAboutWrongTypes) {
  const Json j = Json::parse(R"json({
    "phase": 5,
    "conditions": [7, {"status": "True"}, {"type": "Ready", "status": 1, "reason": ["x"],
                   "lastTransitionTime": "yesterday", "observedGeneration": "2"}],
    "observedGeneration": 1.5,
    "attempt": "2",
    "jobRetries": true,
    "readyWorkers": 3,
    "replicaStatuses": {"Worker": 5, "Master": {"active": "1", "ready": 1}},
    "workerRestarts": {"Worker-0": 2, "Worker-1": {"count": "3", "podUID": 9}},
    "queuedAt": 1700000000,
    "admittedAt": "not a time",
    "startTime": null,
    "queuePosition": "first",
    "reissued": "true",
    "faults": [1, "x", {"time": 5, "exitCode": "143", "kind": "PodFailed"}],
    "cordonedNodes": ["node-1", 2, null, "node-2"]
  })json");
  const JobStatus s = JobStatus::FromJson(j);
  EXPECT_EQ(s.phase, Phase::kNone);
  ASSERT_EQ(s.conditions.size(), 1u);
  EXPECT_EQ(s.conditions[0], (Condition{"Ready", "", "", "", WallTime{}, 0}));
  EXPECT_EQ(s.observed_generation, 0);
  EXPECT_EQ(s.attempt, 0);
  EXPECT_EQ(s.job_retries, 0);
  EXPECT_EQ(s.ready_workers, "");
  EXPECT_EQ(s.replica_statuses.at("Worker"), ReplicaCounts{});
  EXPECT_EQ(s.replica_statuses.at("Master"), (ReplicaCounts{0, 1, 0, 0, 0}));
  EXPECT_EQ(s.worker_restarts.size(), 1u);
  EXPECT_EQ(s.worker_restarts.at("Worker-1"), RestartRecord{});
  EXPECT_EQ(s.queued_at, std::nullopt);
  EXPECT_EQ(s.admitted_at, std::nullopt);
  EXPECT_EQ(s.start_time, std::nullopt);
  EXPECT_EQ(s.queue_position, std::nullopt);
  EXPECT_FALSE(s.reissued);
  ASSERT_EQ(s.faults.size(), 1u);
  EXPECT_EQ(s.faults[0], Fault(WallTime{}, "PodFailed", ""));
  EXPECT_THAT(s.cordoned_nodes, ElementsAre("node-1", "node-2"));
}

TEST(PolicyJobStatusTest, UnknownFieldsAndPhasesAreDropped) {
  const JobStatus s = JobStatus::FromJson({{"phase", "Paused"}, {"somethingNew", {1, 2}}});
  EXPECT_EQ(s, JobStatus());
  EXPECT_EQ(s.ToJson(), Json::object());
}

TEST(PolicyJobStatusTest, PhaseNames) {
  for (Phase p : {Phase::kQueued, Phase::kStarting, Phase::kRunning, Phase::kRestarting,
                  Phase::kSucceeded, Phase::kFailed}) {
    EXPECT_EQ(ParsePhase(ToString(p)), p);
  }
  EXPECT_EQ(ToString(Phase::kNone), "");
  EXPECT_EQ(ToString(Phase::kRestarting), "Restarting");
  EXPECT_EQ(ParsePhase(""), Phase::kNone);
  EXPECT_EQ(ParsePhase("running"), Phase::kNone);
  EXPECT_TRUE(IsTerminal(Phase::kSucceeded));
  EXPECT_TRUE(IsTerminal(Phase::kFailed));
  for (Phase p :
       {Phase::kNone, Phase::kQueued, Phase::kStarting, Phase::kRunning, Phase::kRestarting}) {
    EXPECT_FALSE(IsTerminal(p));
  }
}

TEST(PolicyJobStatusTest, EmptyCollectionsAreLeftOut) {
  JobStatus s;
  s.attempt = 1;
  EXPECT_EQ(s.ToJson(), (Json{{"attempt", 1}}));
  EXPECT_THAT(JobStatus::FromJson(s.ToJson()).faults, IsEmpty());
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
