#include <gtest/gtest.h>

#include <string>

#include "policy/kueue.h"
#include "policy_fixtures.h"

namespace tpujob::policy::kueue {
namespace TPUJOB_TEST_NS {

using fixtures::At;
using fixtures::MakeJob;
using fixtures::SpecJson;

Json Condition(std::string type, std::string status, std::string reason = "R",
               std::string message = "") {
  return Json{{"type", type},
              {"status", status},
              {"reason", reason},
              {"message", message},
              {"lastTransitionTime", "2024-01-01T00:00:00Z"},
              {"observedGeneration", 1}};
}

Json AdmittedStatus() {
  return Json{{"admission",
               {{"clusterQueue", "tpu"},
                {"podSetAssignments",
                 Json::array({{{"name", "workers"},
                               {"count", 2},
                               {"flavors", {{"google.com/tpu", "v5e"}, {"cpu", "default"}}}}})}}},
              {"conditions", Json::array({Condition("QuotaReserved", "True", "QuotaReserved"),
                                          Condition("Admitted", "True", "Admitted")})}};
}

WorkloadState Read(const Json& status, const Json& spec = Json::object(),
                   const Json& annotations = Json::object(), bool owned = true) {
  Json object = {{"metadata",
                  {{"name", "tpujob-train-abcde"},
                   {"namespace", "team-a"},
                   {"generation", 1},
                   {"annotations", annotations}}},
                 {"spec", spec.is_object() ? spec : Json::object()},
                 {"status", status.is_object() ? status : Json::object()}};
  if (owned) {
    object["metadata"]["ownerReferences"] = Json::array(
        {{{"kind", "TPUJob"}, {"name", "train"}, {"uid", "job-uid-1"}, {"controller", true}}});
  }
  auto workload = cache::WorkloadInfo::FromJson(object);
  EXPECT_TRUE(workload.has_value());
  return ReadWorkload(*workload);
}

const Json* Find(const Json& conditions, std::string_view type) {
  for (const Json& c : conditions) {
    if (c["type"] == type) return &c;
  }
  return nullptr;
}

TEST(KueueNamesTest, QueueNameComesFromTheLabel) {
  cache::TPUJobInfo job = MakeJob(SpecJson());
  EXPECT_EQ(QueueName(job), "");
  job.labels = cache::LabelMap({{"kueue.x-k8s.io/queue-name", "team-a"}});
  EXPECT_EQ(QueueName(job), "team-a");
}

TEST(KueueNamesTest, MultiKueueMarks) {
  Json spec = SpecJson();
  cache::TPUJobInfo job = MakeJob(spec);
  EXPECT_FALSE(DispatchedByMultiKueue(job));
  EXPECT_EQ(PrebuiltWorkloadName(job), "");
  spec["managedBy"] = "kueue.x-k8s.io/multikueue";
  job = MakeJob(spec);
  EXPECT_TRUE(DispatchedByMultiKueue(job));
  spec["managedBy"] = "example.com/other";
  EXPECT_FALSE(DispatchedByMultiKueue(MakeJob(spec)));
  job.labels = cache::LabelMap({{"kueue.x-k8s.io/prebuilt-workload-name", "tpujob-train-0a1b2"}});
  EXPECT_EQ(PrebuiltWorkloadName(job), "tpujob-train-0a1b2");
}

TEST(KueueNamesTest, WorkloadNameIsStablePerJobIncarnationAndBounded) {
  const std::string a = WorkloadName("train", "uid-1");
  EXPECT_EQ(a.rfind("tpujob-train-", 0), 0u) << a;
  EXPECT_EQ(a.size(), std::string("tpujob-train-").size() + 5);
  EXPECT_EQ(a, WorkloadName("train", "uid-1"));
  EXPECT_NE(a, WorkloadName("train", "uid-2"));  // a job created again under the same name
  const std::string long_name = WorkloadName(std::string(300, 'x'), "uid-1");
  EXPECT_LE(long_name.size(), 253u);
  // A cut that ends in a separator does not leave "--" or ".-" behind.
  const std::string cut = WorkloadName(std::string(240, 'a') + "-b", "uid");
  EXPECT_EQ(cut.find("--"), std::string::npos) << cut;
}

TEST(KueueNamesTest, PodSetsPerReplicaGroupAndSlice) {
  auto spec = ParseJobSpec(MakeJob(SpecJson(2, /*master=*/true)));
  ASSERT_TRUE(spec) << spec.error();
  EXPECT_EQ(PodSetName(*spec, ReplicaType::kMaster, 0), "master");
  EXPECT_EQ(PodSetName(*spec, ReplicaType::kWorker, 1), "workers");

  Json multi = SpecJson(2);
  multi["tpu"]["slices"] = 3;
  auto ms = ParseJobSpec(MakeJob(multi));
  ASSERT_TRUE(ms) << ms.error();
  EXPECT_EQ(PodSetName(*ms, ReplicaType::kWorker, 0), "slice-0");
  EXPECT_EQ(PodSetName(*ms, ReplicaType::kWorker, 3), "slice-1");
  EXPECT_EQ(PodSetName(*ms, ReplicaType::kWorker, 5), "slice-2");

  // More slices than a Workload has pod sets: one pod set for every worker.
  multi["tpu"]["slices"] = 9;
  auto many = ParseJobSpec(MakeJob(multi));
  ASSERT_TRUE(many) << many.error();
  EXPECT_EQ(PodSetName(*many, ReplicaType::kWorker, 17), "workers");
  // Eight slices fit, unless a master takes one of the eight.
  multi["tpu"]["slices"] = 8;
  auto eight = ParseJobSpec(MakeJob(multi));
  ASSERT_TRUE(eight) << eight.error();
  EXPECT_EQ(PodSetName(*eight, ReplicaType::kWorker, 15), "slice-7");
  Json with_master = SpecJson(2, /*master=*/true);
  with_master["tpu"]["slices"] = 8;
  auto eight_master = ParseJobSpec(MakeJob(with_master));
  ASSERT_TRUE(eight_master) << eight_master.error();
  EXPECT_EQ(PodSetName(*eight_master, ReplicaType::kWorker, 15), "workers");
}

TEST(KueueReadTest, AdmittedWorkload) {
  const WorkloadState w = Read(AdmittedStatus());
  EXPECT_TRUE(w.quota_reserved);
  EXPECT_TRUE(w.admitted);
  EXPECT_TRUE(w.has_admission);
  EXPECT_FALSE(w.evicted);
  EXPECT_FALSE(w.finished);
  EXPECT_TRUE(w.active);
  EXPECT_EQ(w.cluster_queue, "tpu");
  EXPECT_EQ(w.flavors.at("workers").at("google.com/tpu"), "v5e");
  EXPECT_EQ(w.flavors.at("workers").at("cpu"), "default");
}

TEST(KueueReadTest, PendingEvictedInactiveAndFinished) {
  const WorkloadState pending = Read(Json{
      {"conditions", Json::array({Condition("QuotaReserved", "False", "Pending",
                                            "insufficient unused quota for google.com/tpu")})}});
  EXPECT_FALSE(pending.quota_reserved);
  EXPECT_FALSE(pending.HoldsQuota());
  EXPECT_EQ(pending.pending_message, "insufficient unused quota for google.com/tpu");

  Json evicted = AdmittedStatus();
  evicted["conditions"].push_back(Condition("Evicted", "True", "Preempted", "for team/high"));
  const WorkloadState e = Read(evicted);
  EXPECT_TRUE(e.evicted);
  EXPECT_EQ(e.evicted_reason, "Preempted");
  EXPECT_EQ(e.evicted_message, "for team/high");
  EXPECT_TRUE(e.HoldsQuota());

  // Evicted=False (Kueue readmitted it) is not an eviction.
  Json readmitted = AdmittedStatus();
  readmitted["conditions"].push_back(Condition("Evicted", "False", "QuotaReserved"));
  EXPECT_FALSE(Read(readmitted).evicted);

  EXPECT_FALSE(Read(Json::object(), Json{{"active", false}}).active);
  EXPECT_TRUE(Read(Json::object(), Json{{"active", true}}).active);

  Json finished = AdmittedStatus();
  finished["conditions"].push_back(Condition("Finished", "True", "Succeeded"));
  EXPECT_TRUE(Read(finished).finished);
  // Malformed parts are ignored, never thrown on.
  const WorkloadState odd =
      Read(Json{{"admission", {{"podSetAssignments", 3}}}, {"conditions", Json::array({1, "x"})}});
  EXPECT_TRUE(odd.has_admission);
  EXPECT_TRUE(odd.flavors.empty());
}

TEST(KueuePlacementTest, NodeLabelsAndTolerationsOfTheFlavor) {
  const Json flavor = {
      {"metadata", {{"name", "v5e"}}},
      {"spec",
       {{"nodeLabels",
         {{"cloud.google.com/gke-tpu-accelerator", "tpu-v5-lite-podslice"}, {"pool", "reserved"}}},
        {"tolerations", Json::array({{{"key", "team"},
                                      {"operator", "Equal"},
                                      {"value", "a"},
                                      {"effect", "NoSchedule"}}})}}}};
  const Placement p = FlavorPlacement(flavor);
  EXPECT_EQ(p.node_labels.size(), 2u);
  EXPECT_EQ(p.node_labels.at("pool"), "reserved");
  ASSERT_EQ(p.tolerations.size(), 1u);
  EXPECT_EQ(p.tolerations[0]["key"], "team");
  EXPECT_EQ(FlavorPlacement(Json{{"metadata", {{"name", "empty"}}}}), Placement{});
}

// DecideKueue over the job's phase and the Workload's state. Each case names only what differs
// from the defaults (designated initializers; GCC would warn of every member left out).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
struct DecideCase {
  std::string name;
  Phase phase = Phase::kQueued;
  bool job_admitted = false;  // the job's Admitted condition
  bool suspend = false;
  bool pods_left = false;
  std::optional<Json> workload_status;  // nullopt: no Workload
  Json workload_spec = Json::object();
  Json workload_annotations = Json::object();
  std::string wanted_digest;
  std::string prebuilt;   // the job's kueue.x-k8s.io/prebuilt-workload-name
  bool owned = true;      // the Workload has a controlling owner
  bool dispatch = false;  // DecideDispatch (a manager cluster's MultiKueue job)
  // Expected:
  bool create = false;
  bool admit = false;
  bool evict = false;
  bool release = false;
  std::optional<bool> finish;
  std::optional<bool> set_active;
  std::string message_has;
  bool recreate = false;
  bool readmission = false;
  std::optional<bool> pods_ready;
  std::string pods_ready_reason;
  bool adopt = false;
  bool out_of_sync = false;
};

Json WithCondition(Json status, std::string type, std::string value, std::string reason) {
  status["conditions"].push_back(Condition(type, value, reason));
  return status;
}

Json Evicted(std::string reason = "Preempted") {
  Json s = AdmittedStatus();
  s["conditions"].push_back(Condition("Evicted", "True", reason, "to make room for team/high"));
  return s;
}

Json EvictedAndReleased() {
  return Json{
      {"conditions", Json::array({Condition("QuotaReserved", "False", "Pending"),
                                  Condition("Evicted", "True", "Preempted", "to make room")})}};
}

class KueueDecideTest : public ::testing::TestWithParam<DecideCase> {};

TEST_P(KueueDecideTest, Verdict) {
  const DecideCase& c = GetParam();
  Json spec_json = SpecJson();
  if (c.suspend) spec_json["suspend"] = true;
  const auto spec = ParseJobSpec(MakeJob(spec_json));
  ASSERT_TRUE(spec) << spec.error();
  JobStatus status;
  status.phase = c.phase;
  status.attempt = 1;
  if (c.job_admitted) status.SetCondition(condition::kAdmitted, true, "Admitted", "", At(0), 1);
  std::optional<WorkloadState> w;
  if (c.workload_status) {
    w = Read(*c.workload_status, c.workload_spec, c.workload_annotations, c.owned);
  }
  KueueInput in;
  in.workload = w ? &*w : nullptr;
  in.status = &status;
  in.spec = &*spec;
  in.pods_left = c.pods_left;
  in.wanted_digest = c.wanted_digest;
  in.prebuilt = c.prebuilt;
  const KueueVerdict v = c.dispatch ? DecideDispatch(in) : DecideKueue(in);
  EXPECT_EQ(v.adopt, c.adopt);
  EXPECT_EQ(v.out_of_sync, c.out_of_sync);
  if (c.dispatch) {
    // Nothing of the job runs in a manager cluster: nothing to start, stop or call ready.
    EXPECT_FALSE(v.admit);
    EXPECT_FALSE(v.evict.has_value());
    EXPECT_FALSE(v.pods_ready.has_value());
  }
  EXPECT_EQ(v.recreate, c.recreate);
  EXPECT_EQ(v.readmission, c.readmission);
  EXPECT_EQ(v.pods_ready, c.pods_ready);
  EXPECT_EQ(v.pods_ready_reason, c.pods_ready_reason);
  EXPECT_EQ(v.create_workload, c.create);
  EXPECT_EQ(v.admit, c.admit);
  EXPECT_EQ(v.evict.has_value(), c.evict);
  EXPECT_EQ(v.release_quota, c.release);
  EXPECT_EQ(v.finish, c.finish);
  EXPECT_EQ(v.set_active, c.set_active);
  if (!c.message_has.empty()) {
    const std::string text = v.evict ? *v.evict : v.message;
    EXPECT_NE(text.find(c.message_has), std::string::npos) << text;
  }
  if (!v.admit) {
    EXPECT_EQ(v.reason, "KueuePending");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KueueDecideTest,
    ::testing::Values(
        DecideCase{.name = "NewJobCreatesItsWorkload",
                   .phase = Phase::kNone,
                   .create = true,
                   .message_has = "creating"},
        DecideCase{.name = "PendingOnQuotaWaitsWithKueuesMessage",
                   .workload_status = Json{{"conditions",
                                            Json::array({Condition("QuotaReserved", "False",
                                                                   "Pending", "8 more needed")})}},
                   .message_has = "8 more needed"},
        DecideCase{.name = "QuotaReservedButNotAdmittedYetWaits",
                   .workload_status =
                       Json{{"conditions",
                             Json::array({Condition("QuotaReserved", "True", "QuotaReserved"),
                                          Condition("Admitted", "False", "Checks")})}}},
        DecideCase{.name = "AdmittedStarts",
                   .workload_status = AdmittedStatus(),
                   .admit = true,
                   .message_has = "ClusterQueue tpu",
                   .pods_ready = false,
                   .pods_ready_reason = "WaitForStart"},
        DecideCase{.name = "ReissuedAttemptKeepsTheAdmission",
                   .phase = Phase::kRestarting,
                   .pods_left = true,
                   .workload_status = AdmittedStatus(),
                   .admit = true,
                   .pods_ready = false,
                   .pods_ready_reason = "WaitForStart"},
        DecideCase{.name = "EvictedWhileRunningStopsTheJob",
                   .phase = Phase::kRunning,
                   .job_admitted = true,
                   .pods_left = true,
                   .workload_status = Evicted(),
                   .evict = true,
                   .message_has = "Kueue evicted Workload tpujob-train-abcde (Preempted)",
                   .readmission = true},
        DecideCase{.name = "EvictedWhileStartingStopsTheJob",
                   .phase = Phase::kStarting,
                   .job_admitted = true,
                   .pods_left = true,
                   .workload_status = Evicted(),
                   .evict = true,
                   .readmission = true},
        DecideCase{.name = "EvictedJobKeepsTheQuotaWhilePodsAreGoing",
                   .phase = Phase::kQueued,
                   .pods_left = true,
                   .workload_status = Evicted(),
                   .readmission = true},
        DecideCase{.name = "EvictedJobGivesTheQuotaBackOncePodsAreGone",
                   .phase = Phase::kQueued,
                   .workload_status = Evicted(),
                   .release = true,
                   .message_has = "waiting for Kueue to admit it again",
                   .readmission = true},
        DecideCase{.name = "ReleasedEvictedWorkloadIsNotReleasedTwice",
                   .phase = Phase::kQueued,
                   .workload_status = EvictedAndReleased(),
                   .readmission = true},
        DecideCase{.name = "RestartingAfterAPreemptionDoesNotStopAgain",
                   .phase = Phase::kRestarting,
                   .job_admitted = false,
                   .pods_left = true,
                   .workload_status = Evicted(),
                   .readmission = true},
        DecideCase{.name = "SucceededFinishesTheWorkload",
                   .phase = Phase::kSucceeded,
                   .workload_status = AdmittedStatus(),
                   .finish = true},
        DecideCase{.name = "FailedFinishesTheWorkload",
                   .phase = Phase::kFailed,
                   .workload_status = AdmittedStatus(),
                   .finish = false},
        DecideCase{.name = "FinishedWorkloadIsLeftAlone",
                   .phase = Phase::kSucceeded,
                   .workload_status = Json{{"conditions", Json::array({Condition("Finished", "True",
                                                                                 "Succeeded")})}}},
        DecideCase{.name = "FinishedJobWithoutWorkloadCreatesNone", .phase = Phase::kFailed},
        DecideCase{.name = "SuspendDeactivatesTheWorkload",
                   .phase = Phase::kSuspended,
                   .suspend = true,
                   .workload_status = AdmittedStatus(),
                   .set_active = false},
        DecideCase{.name = "InactiveWorkloadOfASuspendedJobWaits",
                   .phase = Phase::kSuspended,
                   .suspend = true,
                   .workload_status = Json{{"conditions", Json::array()}},
                   .workload_spec = Json{{"active", false}},
                   .message_has = "inactive"},
        DecideCase{.name = "ResumeActivatesTheWorkload",
                   .phase = Phase::kQueued,
                   .workload_status = Json{{"conditions", Json::array()}},
                   .workload_spec = Json{{"active", false}},
                   .workload_annotations = Json{{"tpujob.dev/deactivated-for-suspend", "true"}},
                   .set_active = true},
        DecideCase{.name = "DeactivationEvictionGivesTheQuotaBack",
                   .phase = Phase::kSuspended,
                   .suspend = true,
                   .workload_status = Evicted("InactiveWorkload"),
                   .workload_spec = Json{{"active", false}},
                   .release = true,
                   .readmission = true},
        DecideCase{.name = "RunningJobIsReadyOnItsWorkload",
                   .phase = Phase::kRunning,
                   .job_admitted = true,
                   .pods_left = true,
                   .workload_status = AdmittedStatus(),
                   .admit = true,
                   .pods_ready = true,
                   .pods_ready_reason = "Started"},
        DecideCase{
            .name = "ReadyIsWrittenOnce",
            .phase = Phase::kRunning,
            .job_admitted = true,
            .pods_left = true,
            .workload_status = WithCondition(AdmittedStatus(), "PodsReady", "True", "Started"),
            .admit = true},
        DecideCase{
            .name = "AWorkerRestartingWaitsForRecovery",
            .phase = Phase::kRestarting,
            .job_admitted = true,
            .pods_left = true,
            .workload_status = WithCondition(AdmittedStatus(), "PodsReady", "True", "Started"),
            .admit = true,
            .pods_ready = false,
            .pods_ready_reason = "WaitForRecovery"},
        DecideCase{.name = "RunningAgainIsRecovered",
                   .phase = Phase::kRunning,
                   .job_admitted = true,
                   .pods_left = true,
                   .workload_status = WithCondition(AdmittedStatus(), "PodsReady", "False",
                                                    "WaitForRecovery"),
                   .admit = true,
                   .pods_ready = true,
                   .pods_ready_reason = "Recovered"},
        DecideCase{.name = "WorkloadGoneUnderARunningJobStopsItAndIsCreatedAgain",
                   .phase = Phase::kRunning,
                   .job_admitted = true,
                   .pods_left = true,
                   .create = true,
                   .evict = true,
                   .message_has = "Workload is gone"},
        DecideCase{
            .name = "WorkloadWithoutQuotaUnderARunningJobStopsIt",
            .phase = Phase::kRunning,
            .job_admitted = true,
            .pods_left = true,
            .workload_status =
                Json{{"conditions", Json::array({Condition("QuotaReserved", "False", "Inadmissible",
                                                           "LocalQueue team-a is inactive")})}},
            .evict = true,
            .message_has = "no longer holds quota (LocalQueue team-a is inactive)",
            .readmission = true},
        DecideCase{.name = "StaleWorkloadOfAWaitingJobIsReplaced",
                   .workload_status = AdmittedStatus(),
                   .workload_annotations = Json{{"tpujob.dev/workload-spec-digest", "old"}},
                   .wanted_digest = "new",
                   .recreate = true},
        // A worker cluster's copy of a MultiKueue job runs on the Workload MultiKueue made.
        DecideCase{
            .name = "PrebuiltWorkloadNotThereYetIsAwaitedNotCreated",
            .phase = Phase::kNone,
            .prebuilt = "tpujob-train-abcde",
            .message_has = "waiting for Kueue Workload tpujob-train-abcde, which MultiKueue"},
        DecideCase{.name = "UnownedPrebuiltWorkloadIsAdoptedBeforeItsAdmissionIsUsed",
                   .workload_status = AdmittedStatus(),
                   .prebuilt = "tpujob-train-abcde",
                   .owned = false,
                   .message_has = "adopting Kueue Workload tpujob-train-abcde",
                   .adopt = true},
        DecideCase{.name = "AdoptedPrebuiltWorkloadIsNotAdoptedAgain",
                   .workload_status = AdmittedStatus(),
                   .prebuilt = "tpujob-train-abcde",
                   .admit = true,
                   .pods_ready = false,
                   .pods_ready_reason = "WaitForStart"},
        DecideCase{.name = "PrebuiltWorkloadOutOfSyncIsFinishedNotReplaced",
                   .workload_status = AdmittedStatus(),
                   .workload_annotations = Json{{"tpujob.dev/workload-spec-digest", "old"}},
                   .wanted_digest = "new",
                   .prebuilt = "tpujob-train-abcde",
                   .message_has = "does not describe the job",
                   .out_of_sync = true},
        DecideCase{.name = "PrebuiltWorkloadGoneUnderARunningJobStopsItAndIsNotCreated",
                   .phase = Phase::kRunning,
                   .job_admitted = true,
                   .pods_left = true,
                   .prebuilt = "tpujob-train-abcde",
                   .evict = true,
                   .message_has = "Workload is gone"},
        // A manager cluster's MultiKueue job: only its Workload; its status is the worker's copy.
        DecideCase{.name = "DispatchCreatesTheWorkload",
                   .phase = Phase::kNone,
                   .dispatch = true,
                   .create = true},
        DecideCase{.name = "DispatchWaitsWithKueuesMessage",
                   .workload_status = Json{{"conditions",
                                            Json::array({Condition("QuotaReserved", "False",
                                                                   "Pending", "8 more needed")})}},
                   .dispatch = true,
                   .message_has = "8 more needed"},
        DecideCase{.name = "DispatchedAndRunningInTheWorkerNeedsNothing",
                   .phase = Phase::kRunning,
                   .job_admitted = true,
                   .workload_status = AdmittedStatus(),
                   .dispatch = true,
                   .message_has = "MultiKueue runs it"},
        DecideCase{.name = "DispatchEvictedKeepsTheQuotaWhileTheCopyStops",
                   .phase = Phase::kRunning,
                   .job_admitted = true,
                   .workload_status = Evicted(),
                   .dispatch = true,
                   .message_has = "MultiKueue stops its copy in the worker"},
        DecideCase{.name = "DispatchEvictedGivesTheQuotaBackOnceTheCopyStopped",
                   .phase = Phase::kQueued,
                   .workload_status = Evicted(),
                   .dispatch = true,
                   .release = true,
                   .message_has = "waits to be admitted again"},
        DecideCase{
            .name = "DispatchFinishedWorkloadOfAnUnfinishedJobRunsNoMore",
            .phase = Phase::kQueued,
            .workload_status = WithCondition(AdmittedStatus(), "Finished", "True", "OutOfSync"),
            .dispatch = true,
            .message_has = "is finished (OutOfSync)"},
        DecideCase{.name = "DispatchReleasedIsNotReleasedTwice",
                   .workload_status = EvictedAndReleased(),
                   .dispatch = true},
        DecideCase{.name = "DispatchSucceededInTheWorkerFinishes",
                   .phase = Phase::kSucceeded,
                   .workload_status = AdmittedStatus(),
                   .dispatch = true,
                   .finish = true},
        DecideCase{.name = "DispatchFailedInTheWorkerFinishes",
                   .phase = Phase::kFailed,
                   .workload_status = AdmittedStatus(),
                   .dispatch = true,
                   .finish = false},
        DecideCase{.name = "DispatchStaleWorkloadWithoutQuotaIsReplaced",
                   .workload_status = Json{{"conditions", Json::array()}},
                   .workload_annotations = Json{{"tpujob.dev/workload-spec-digest", "old"}},
                   .wanted_digest = "new",
                   .dispatch = true,
                   .recreate = true},
        DecideCase{.name = "DispatchStaleWorkloadWithQuotaIsKept",
                   .workload_status = AdmittedStatus(),
                   .workload_annotations = Json{{"tpujob.dev/workload-spec-digest", "old"}},
                   .wanted_digest = "new",
                   .dispatch = true},
        DecideCase{.name = "DispatchSuspendDeactivatesTheWorkload",
                   .suspend = true,
                   .workload_status = AdmittedStatus(),
                   .dispatch = true,
                   .set_active = false},
        DecideCase{.name = "AdmittedJobKeepsItsWorkload",
                   .phase = Phase::kRunning,
                   .job_admitted = true,
                   .pods_left = true,
                   .workload_status = AdmittedStatus(),
                   .workload_annotations = Json{{"tpujob.dev/workload-spec-digest", "old"}},
                   .wanted_digest = "new",
                   .admit = true,
                   .pods_ready = true,
                   .pods_ready_reason = "Started"},
        DecideCase{.name = "WorkloadDeactivatedByKueueStaysInactive",
                   .workload_status = Json{{"conditions", Json::array()}},
                   .workload_spec = Json{{"active", false}},
                   .message_has = "by Kueue or an administrator"}),
    [](const ::testing::TestParamInfo<DecideCase>& info) { return info.param.name; });
#pragma GCC diagnostic pop

// What a manager cluster's MultiKueue job reads while no copy of it runs.
class KueueDispatchStatusTest : public ::testing::Test {
 protected:
  std::optional<JobStatus> StatusFor(const JobStatus& status, const std::optional<Json>& workload,
                                     bool suspend = false) {
    Json spec_json = SpecJson();
    if (suspend) spec_json["suspend"] = true;
    spec_ = ParseJobSpec(MakeJob(spec_json));
    EXPECT_TRUE(spec_.has_value());
    if (workload) state_ = Read(*workload);
    KueueInput in;
    in.workload = workload ? &*state_ : nullptr;
    in.status = &status;
    in.spec = &*spec_;
    return DispatchStatus(in, DecideDispatch(in), 3, At(100));
  }
  std::expected<JobSpec, std::string> spec_;
  std::optional<WorkloadState> state_;
};

TEST_F(KueueDispatchStatusTest, NotDispatchedYetItReadsQueuedWithKueuesMessage) {
  const auto next = StatusFor(
      JobStatus{},
      Json{{"conditions",
            Json::array({Condition("QuotaReserved", "False", "Pending", "8 more needed")})}});
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->phase, Phase::kQueued);
  EXPECT_EQ(next->queued_at, At(100));
  const policy::Condition* admitted = next->FindCondition(condition::kAdmitted);
  ASSERT_NE(admitted, nullptr);
  EXPECT_EQ(admitted->status, "False");
  EXPECT_EQ(admitted->reason, "KueuePending");
  EXPECT_NE(admitted->message.find("8 more needed"), std::string::npos) << admitted->message;
  // Written once: the job reading so already needs no write.
  EXPECT_FALSE(
      StatusFor(*next, Json{{"conditions", Json::array({Condition("QuotaReserved", "False",
                                                                  "Pending", "8 more needed")})}})
          .has_value());
  EXPECT_EQ(StatusFor(JobStatus{}, Json{{"conditions", Json::array()}}, /*suspend=*/true)->phase,
            Phase::kSuspended);
}

TEST_F(KueueDispatchStatusTest, WhileACopyRunsOrOnceFinishedTheStatusIsMultiKueues) {
  JobStatus running;
  running.phase = Phase::kRunning;
  running.SetCondition(condition::kAdmitted, true, "Admitted", "", At(0), 1);
  EXPECT_FALSE(StatusFor(running, AdmittedStatus()).has_value());
  JobStatus done;
  done.phase = Phase::kSucceeded;
  EXPECT_FALSE(StatusFor(done, Evicted()).has_value());
}

TEST_F(KueueDispatchStatusTest, AfterAnEvictionTheLastCopiedRunReadsQueuedAgain) {
  JobStatus running;
  running.phase = Phase::kRunning;
  running.attempt = 2;
  running.ready_workers = "2/2";
  running.SetCondition(condition::kAdmitted, true, "Admitted", "", At(0), 1);
  running.SetCondition(condition::kReady, true, "AllWorkersReady", "", At(0), 1);
  // Evicted, the copy still stopping in the worker: its status is still MultiKueue's to copy.
  EXPECT_FALSE(StatusFor(running, Evicted()).has_value());
  // The quota given back (MultiKueue deletes the copy, and copies no more): the operator's.
  const auto next = StatusFor(running, EvictedAndReleased());
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->phase, Phase::kQueued);
  EXPECT_EQ(next->attempt, 2);  // the copied history stays
  EXPECT_EQ(next->ready_workers, "");
  EXPECT_FALSE(next->ConditionTrue(condition::kAdmitted));
  EXPECT_FALSE(next->ConditionTrue(condition::kReady));
  EXPECT_NE(next->FindCondition(condition::kAdmitted)->message.find("Kueue evicted"),
            std::string::npos);
}

TEST_F(KueueDispatchStatusTest, AFinishedWorkloadOfAJobThatDidNotFinishFailsIt) {
  JobStatus queued;
  queued.phase = Phase::kQueued;
  const auto next =
      StatusFor(queued, WithCondition(AdmittedStatus(), "Finished", "True", "OutOfSync"));
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->phase, Phase::kFailed);
  EXPECT_EQ(next->completion_time, At(100));
  EXPECT_TRUE(next->ConditionTrue(condition::kFailed));
  EXPECT_NE(next->FindCondition(condition::kFailed)->message.find("OutOfSync"), std::string::npos);
}

TEST(KueueDecideTest, InvalidSpecCreatesNoWorkload) {
  JobStatus status;
  status.phase = Phase::kNone;
  KueueInput in;
  in.status = &status;
  const KueueVerdict v = DecideKueue(in);
  EXPECT_FALSE(v.create_workload);
  EXPECT_FALSE(v.admit);
}

TEST(KueuePatchTest, ReleaseGivesTheQuotaBackAndRequeuesAfterAPreemption) {
  const Json status = Evicted();
  const WorkloadState w = Read(status);
  const Json patch = ReleaseQuotaPatch(w, status, "42", At(100));
  EXPECT_EQ(patch["metadata"]["resourceVersion"], "42");
  ASSERT_TRUE(patch["status"].contains("admission"));
  EXPECT_TRUE(patch["status"]["admission"].is_null());
  const Json& conditions = patch["status"]["conditions"];
  const Json* reserved = Find(conditions, "QuotaReserved");
  ASSERT_NE(reserved, nullptr);
  EXPECT_EQ((*reserved)["status"], "False");
  EXPECT_EQ((*reserved)["reason"], "Pending");
  EXPECT_EQ((*reserved)["lastTransitionTime"], cache::FormatRfc3339(At(100)));
  const Json* admitted = Find(conditions, "Admitted");
  ASSERT_NE(admitted, nullptr);
  EXPECT_EQ((*admitted)["status"], "False");
  const Json* requeued = Find(conditions, "Requeued");
  ASSERT_NE(requeued, nullptr);
  EXPECT_EQ((*requeued)["status"], "True");
  EXPECT_EQ((*requeued)["reason"], "Preempted");
  // The eviction itself stays for Kueue to clear when it admits the Workload again.
  const Json* evicted = Find(conditions, "Evicted");
  ASSERT_NE(evicted, nullptr);
  EXPECT_EQ((*evicted)["status"], "True");
  EXPECT_EQ((*evicted)["lastTransitionTime"], "2024-01-01T00:00:00Z");
}

TEST(KueuePatchTest, ReleaseAfterADeactivationLeavesTheRequeueToKueue) {
  const Json status = Evicted("InactiveWorkload");
  const Json patch = ReleaseQuotaPatch(Read(status), status, "7", At(5));
  const Json* requeued = Find(patch["status"]["conditions"], "Requeued");
  ASSERT_NE(requeued, nullptr);
  EXPECT_EQ((*requeued)["status"], "False");
  EXPECT_EQ((*requeued)["reason"], "InactiveWorkload");
}

TEST(KueuePatchTest, FinishAddsFinishedAndKeepsTheOtherConditions) {
  const Json status = AdmittedStatus();
  const Json patch = ConditionPatch(Read(status), status, "9", "Finished", true, "Failed",
                                    "the TPUJob failed", At(3));
  const Json& conditions = patch["status"]["conditions"];
  EXPECT_EQ(conditions.size(), 3u);
  const Json* finished = Find(conditions, "Finished");
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ((*finished)["status"], "True");
  EXPECT_EQ((*finished)["reason"], "Failed");
  EXPECT_EQ((*finished)["message"], "the TPUJob failed");
  EXPECT_FALSE(patch["status"].contains("admission"));  // the quota goes by Finished alone
  ASSERT_NE(Find(conditions, "Admitted"), nullptr);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy::kueue
