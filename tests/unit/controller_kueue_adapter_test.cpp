#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "cache/objects.h"
#include "cache/store.h"
#include "controller/children.h"
#include "controller/kueue_adapter.h"
#include "fake_client.h"

namespace tpujob::controller {
namespace TPUJOB_TEST_NS {

using kube::Resource;

Json JobJson(const std::string& phase, bool admitted = false, bool suspend = false) {
  Json status = Json::object();
  if (!phase.empty()) {
    status = {{"phase", phase},
              {"attempt", 1},
              {"conditions", Json::array({{{"type", "Admitted"},
                                           {"status", admitted ? "True" : "False"},
                                           {"reason", "R"},
                                           {"message", ""},
                                           {"lastTransitionTime", "2026-01-01T00:00:00Z"}}})}};
  }
  return {
      {"apiVersion", "tpujob.dev/v1alpha1"},
      {"kind", "TPUJob"},
      {"metadata",
       {{"name", "llm"},
        {"namespace", "team"},
        {"uid", "uid-llm"},
        {"resourceVersion", "1"},
        {"labels", {{"kueue.x-k8s.io/queue-name", "team-queue"}}}}},
      {"spec",
       {{"priorityClassName", "high"},
        {"suspend", suspend},
        {"tpu", {{"accelerator", "tpu-v5e"}, {"topology", "2x4"}, {"chipsPerWorker", 4}}},
        {"replicaSpecs",
         {{"Worker",
           {{"replicas", 2},
            {"template",
             {{"spec", {{"containers", Json::array({{{"name", "t"}, {"image", "t"}}})}}}}}}}}}}},
      {"status", status}};
}

Json Condition(const std::string& type, const std::string& status, const std::string& reason) {
  return {{"type", type},
          {"status", status},
          {"reason", reason},
          {"message", reason + " message"},
          {"lastTransitionTime", "2026-01-01T00:00:00Z"}};
}

class KueueAdapterTest : public ::testing::Test {
 protected:
  KueueAdapterTest() : adapter_(fake_, workloads_) { adapter_.set_enabled(true); }

  cache::TPUJobInfo Job(const Json& json) { return *cache::TPUJobInfo::FromJson(json); }

  // The Workload BuildWorkload writes for the job, with `status`, in the API and the cache.
  void AddWorkload(const cache::TPUJobInfo& job, const Json& status,
                   const std::string& owner_uid = "uid-llm") {
    Json w = BuildWorkload(job, *policy::ParseJobSpec(job), 0);
    w["metadata"]["uid"] = "wl-uid";
    w["spec"].erase("active");  // as created before any suspend
    w["metadata"]["ownerReferences"][0]["uid"] = owner_uid;
    w["status"] = status;
    w = fake_.Upsert(Resource::Workloads(), w);
    workloads_.Update(
        std::make_shared<const cache::WorkloadInfo>(*cache::WorkloadInfo::FromJson(w)));
  }

  // The Workload MultiKueue makes in a worker cluster for the manager's copy of `job`: the
  // manager operator's Workload (built for the manager's job, uid "uid-manager"), cloned without
  // its owner references. Returns its name, which the worker's job carries as its
  // kueue.x-k8s.io/prebuilt-workload-name label.
  std::string AddPrebuilt(const Json& job_json, const Json& status,
                          const Json& annotations = Json::object()) {
    Json manager_job = job_json;
    manager_job["metadata"]["uid"] = "uid-manager";
    const auto manager = Job(manager_job);
    Json w = BuildWorkload(manager, *policy::ParseJobSpec(manager), 0);
    w["metadata"]["uid"] = "wl-uid";
    w["metadata"].erase("ownerReferences");
    for (const auto& [key, value] : annotations.items()) w["metadata"]["annotations"][key] = value;
    w["spec"].erase("active");
    w["status"] = status;
    w = fake_.Upsert(Resource::Workloads(), w);
    Cache(w);
    return w["metadata"]["name"].get<std::string>();
  }
  void Cache(const Json& workload) {
    workloads_.Update(
        std::make_shared<const cache::WorkloadInfo>(*cache::WorkloadInfo::FromJson(workload)));
  }
  static Json WithLabel(Json job, const std::string& key, const std::string& value) {
    job["metadata"]["labels"][key] = value;
    return job;
  }
  static Json WithManagedBy(Json job, const std::string& value) {
    job["spec"]["managedBy"] = value;
    return job;
  }

  // Sync, expecting its Workload write (if any) to succeed.
  policy::kueue::KueueVerdict Sync(const cache::TPUJobInfo& job, bool pods_left = false) {
    KueueAdapter::SyncResult result = adapter_.Sync(job, policy::ParseJobSpec(job), pods_left);
    EXPECT_TRUE(result.write) << result.write.error().ToString();
    return result.verdict;
  }

  std::vector<kube::FakeClient::Action> Writes(const std::string& resource) const {
    std::vector<kube::FakeClient::Action> out;
    for (const auto& a : fake_.actions()) {
      if (a.resource == resource) out.push_back(a);
    }
    return out;
  }

  Json Admitted() const {
    return {
        {"admission",
         {{"clusterQueue", "tpu"},
          {"podSetAssignments",
           Json::array(
               {{{"name", "workers"}, {"count", 2}, {"flavors", {{"google.com/tpu", "v5e"}}}}})}}},
        {"conditions", Json::array({Condition("QuotaReserved", "True", "QuotaReserved"),
                                    Condition("Admitted", "True", "Admitted")})}};
  }

  kube::FakeClient fake_;
  cache::Store<cache::WorkloadInfo> workloads_;
  KueueAdapter adapter_;
};

TEST_F(KueueAdapterTest, ANewJobGetsItsWorkloadWithThePriorityClassValue) {
  fake_.Upsert(Resource::PriorityClasses(), {{"apiVersion", "scheduling.k8s.io/v1"},
                                             {"kind", "PriorityClass"},
                                             {"metadata", {{"name", "high"}}},
                                             {"value", 1000}});
  const auto job = Job(JobJson(""));
  const auto verdict = Sync(job, false);
  EXPECT_FALSE(verdict.admit);
  const auto stored =
      fake_.Stored(Resource::Workloads(), "team", policy::kueue::WorkloadName("llm", "uid-llm"));
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ((*stored)["spec"]["queueName"], "team-queue");
  EXPECT_EQ((*stored)["spec"]["priority"], 1000);
  EXPECT_EQ((*stored)["spec"]["podSets"][0]["count"], 2);

  // The cache has not caught up yet: asking again meets AlreadyExists, which is success.
  const auto again = Sync(job, false);
  EXPECT_EQ(Writes("workloads").size(), 2u);
}

TEST_F(KueueAdapterTest, ACreationErrorIsReturnedForARetry) {
  const auto job = Job(JobJson(""));
  fake_.FailNext("create", kube::Error::Transport("connection reset"));
  EXPECT_FALSE(adapter_.Sync(job, policy::ParseJobSpec(job), false).write.has_value());
}

TEST_F(KueueAdapterTest, AdmittedWorkloadAdmitsAndPlacesPodsOnTheFlavor) {
  const auto job = Job(JobJson("Queued"));
  AddWorkload(job, Admitted());
  fake_.Upsert(Resource::ResourceFlavors(),
               {{"apiVersion", "kueue.x-k8s.io/v1beta2"},
                {"kind", "ResourceFlavor"},
                {"metadata", {{"name", "v5e"}}},
                {"spec",
                 {{"nodeLabels", {{"pool", "reserved"}}},
                  {"tolerations", Json::array({{{"key", "team"}, {"operator", "Exists"}}})}}}});
  const auto verdict = Sync(job, false);
  EXPECT_TRUE(verdict.admit);
  // Admitted, its pods not ready yet: PodsReady=False (WaitForStart), as Kueue expects.
  const auto writes = Writes("workloads");
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_EQ(writes[0].subresource, "status");
  bool waiting = false;
  for (const Json& c : writes[0].body["status"]["conditions"]) {
    if (c["type"] == "PodsReady") waiting = c["status"] == "False" && c["reason"] == "WaitForStart";
  }
  EXPECT_TRUE(waiting) << writes[0].body.dump();
  auto placements = adapter_.Placements(job);
  ASSERT_TRUE(placements) << placements.error().ToString();
  ASSERT_EQ(placements->count("workers"), 1u);
  EXPECT_EQ(placements->at("workers").node_labels.at("pool"), "reserved");
  EXPECT_EQ(placements->at("workers").tolerations.size(), 1u);
}

TEST_F(KueueAdapterTest, AFlavorThatCannotBeReadFailsThePlacement) {
  const auto job = Job(JobJson("Queued"));
  AddWorkload(job, Admitted());  // flavor v5e not in the API
  EXPECT_FALSE(adapter_.Placements(job).has_value());
}

TEST_F(KueueAdapterTest, AWorkloadOfAnotherJobIsNotThisJobs) {
  const auto job = Job(JobJson("Queued"));
  AddWorkload(job, Admitted(), "uid-of-an-older-job");
  EXPECT_EQ(adapter_.Find(job), nullptr);
  const auto verdict = Sync(job, false);
  EXPECT_FALSE(verdict.admit);
}

TEST_F(KueueAdapterTest, EvictedJobGivesTheQuotaBackOnceItsPodsAreGone) {
  const auto job = Job(JobJson("Queued"));
  Json evicted = Admitted();
  evicted["conditions"].push_back(Condition("Evicted", "True", "Preempted"));
  AddWorkload(job, evicted);
  const auto waiting = Sync(job, /*pods_left=*/true);
  EXPECT_FALSE(waiting.admit);
  EXPECT_TRUE(Writes("workloads").empty());

  const auto released = Sync(job, /*pods_left=*/false);
  const auto writes = Writes("workloads");
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_EQ(writes[0].verb, "patch");
  EXPECT_EQ(writes[0].subresource, "status");
  const auto stored =
      fake_.Stored(Resource::Workloads(), "team", policy::kueue::WorkloadName("llm", "uid-llm"));
  ASSERT_TRUE(stored.has_value());
  EXPECT_FALSE((*stored)["status"].contains("admission"));
}

TEST_F(KueueAdapterTest, RunningJobEvictedByKueueIsToldToStop) {
  const auto job = Job(JobJson("Running", /*admitted=*/true));
  Json evicted = Admitted();
  evicted["conditions"].push_back(Condition("Evicted", "True", "Preempted"));
  AddWorkload(job, evicted);
  const auto verdict = Sync(job, true);
  ASSERT_TRUE(verdict.evict.has_value());
  EXPECT_NE(verdict.evict->find("Preempted message"), std::string::npos) << *verdict.evict;
}

TEST_F(KueueAdapterTest, FinishedJobFinishesItsWorkload) {
  const auto job = Job(JobJson("Succeeded"));
  AddWorkload(job, Admitted());
  Sync(job);
  const auto stored =
      fake_.Stored(Resource::Workloads(), "team", policy::kueue::WorkloadName("llm", "uid-llm"));
  ASSERT_TRUE(stored.has_value());
  bool finished = false;
  for (const Json& c : (*stored)["status"]["conditions"]) {
    if (c["type"] == "Finished") finished = c["status"] == "True" && c["reason"] == "Succeeded";
  }
  EXPECT_TRUE(finished) << stored->dump();
}

TEST_F(KueueAdapterTest, SuspendingTheJobDeactivatesItsWorkload) {
  const auto job = Job(JobJson("Suspended", false, /*suspend=*/true));
  AddWorkload(job, Admitted());
  Sync(job);
  const auto writes = Writes("workloads");
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_EQ(writes[0].subresource, "");
  EXPECT_EQ(writes[0].body["spec"]["active"], false);
}

// --- MultiKueue: the worker cluster's copy runs on the Workload MultiKueue made for it -------

TEST_F(KueueAdapterTest, AWorkerClusterJobAdoptsThePrebuiltWorkloadAndRunsOnItsAdmission) {
  const std::string prebuilt = AddPrebuilt(JobJson(""), Admitted());
  const auto job =
      Job(WithLabel(JobJson("Queued"), "kueue.x-k8s.io/prebuilt-workload-name", prebuilt));
  ASSERT_NE(adapter_.Find(job), nullptr) << "an unowned prebuilt Workload is the job's to adopt";
  const auto verdict = Sync(job);
  EXPECT_FALSE(verdict.admit) << "not used before it is adopted";
  EXPECT_TRUE(verdict.adopt);
  // Adopted with a JSON patch (only `patch` on workloads needed) that tests the cached
  // resourceVersion; none created.
  const auto writes = Writes("workloads");
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_EQ(writes[0].verb, "patch");
  ASSERT_TRUE(writes[0].body.is_array()) << writes[0].body.dump();
  EXPECT_EQ(writes[0].body[0]["op"], "test");
  EXPECT_EQ(writes[0].body[0]["path"], "/metadata/resourceVersion");
  const auto stored = fake_.Stored(Resource::Workloads(), "team", prebuilt);
  ASSERT_TRUE(stored.has_value());
  const Json& owners = (*stored)["metadata"]["ownerReferences"];
  ASSERT_EQ(owners.size(), 1u);
  EXPECT_EQ(owners[0]["uid"], "uid-llm");
  EXPECT_EQ(owners[0]["kind"], "TPUJob");
  EXPECT_EQ(owners[0]["controller"], true);
  EXPECT_EQ((*stored)["metadata"]["labels"]["kueue.x-k8s.io/job-uid"], "uid-llm");
  EXPECT_FALSE(
      fake_.Stored(Resource::Workloads(), "team", policy::kueue::WorkloadName("llm", "uid-llm"))
          .has_value());

  // Once the cache shows the adoption: PodsReady is kept on it, as on the job's own Workload.
  Cache(*stored);
  const auto next = Sync(job);
  EXPECT_FALSE(next.adopt);
  EXPECT_TRUE(next.admit);
  const auto after = Writes("workloads");
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[1].subresource, "status");
  EXPECT_EQ(after[1].name, prebuilt);
}

TEST_F(KueueAdapterTest, AdoptionKeepsOtherOwnersAndIsRefusedOnAChangedWorkload) {
  const std::string prebuilt = AddPrebuilt(JobJson(""), Admitted());
  Json shared = *fake_.Stored(Resource::Workloads(), "team", prebuilt);
  shared["metadata"]["ownerReferences"] = Json::array(
      {{{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"name", "keeper"}, {"uid", "uid-keeper"}}});
  shared = fake_.Upsert(Resource::Workloads(), shared);
  Cache(shared);
  const auto job =
      Job(WithLabel(JobJson("Queued"), "kueue.x-k8s.io/prebuilt-workload-name", prebuilt));
  Sync(job);
  const auto stored = fake_.Stored(Resource::Workloads(), "team", prebuilt);
  ASSERT_TRUE(stored.has_value());
  const Json& owners = (*stored)["metadata"]["ownerReferences"];
  ASSERT_EQ(owners.size(), 2u) << owners.dump();
  EXPECT_EQ(owners[0]["uid"], "uid-keeper");
  EXPECT_EQ(owners[1]["uid"], "uid-llm");

  // Changed since the cache saw it: the patch's test fails and nothing is written.
  const std::string other = "tpujob-llm-other";
  Json changed = shared;
  changed["metadata"]["name"] = other;
  changed["metadata"].erase("ownerReferences");
  changed = fake_.Upsert(Resource::Workloads(), changed);
  Cache(changed);
  fake_.Upsert(Resource::Workloads(), changed);  // a newer resourceVersion than the cache's
  const auto racing =
      Job(WithLabel(JobJson("Queued"), "kueue.x-k8s.io/prebuilt-workload-name", other));
  EXPECT_FALSE(adapter_.Sync(racing, policy::ParseJobSpec(racing), false).write.has_value());
  EXPECT_FALSE((*fake_.Stored(Resource::Workloads(), "team", other))["metadata"].contains(
      "ownerReferences"));
}

TEST_F(KueueAdapterTest, AWorkerClusterJobWaitsForItsPrebuiltWorkloadAndCreatesNone) {
  const auto job =
      Job(WithLabel(JobJson(""), "kueue.x-k8s.io/prebuilt-workload-name", "tpujob-llm-00000"));
  const auto verdict = Sync(job);
  EXPECT_FALSE(verdict.admit);
  EXPECT_FALSE(verdict.create_workload);
  EXPECT_TRUE(Writes("workloads").empty());
}

TEST_F(KueueAdapterTest, APrebuiltWorkloadControlledByAnotherObjectIsNotTaken) {
  const std::string prebuilt = AddPrebuilt(JobJson(""), Admitted());
  Json owned = *fake_.Stored(Resource::Workloads(), "team", prebuilt);
  owned["metadata"]["ownerReferences"] = Json::array({{{"apiVersion", "tpujob.dev/v1alpha1"},
                                                       {"kind", "TPUJob"},
                                                       {"name", "llm"},
                                                       {"uid", "uid-of-another-job"},
                                                       {"controller", true}}});
  Cache(fake_.Upsert(Resource::Workloads(), owned));
  const auto job =
      Job(WithLabel(JobJson("Queued"), "kueue.x-k8s.io/prebuilt-workload-name", prebuilt));
  EXPECT_EQ(adapter_.Find(job), nullptr);
  const auto verdict = Sync(job);
  EXPECT_FALSE(verdict.admit);
  EXPECT_TRUE(Writes("workloads").empty());
}

TEST_F(KueueAdapterTest, APrebuiltWorkloadThatDoesNotDescribeTheJobIsFinishedOutOfSync) {
  const std::string prebuilt =
      AddPrebuilt(JobJson(""), Json{{"conditions", Json::array()}},
                  Json{{"tpujob.dev/workload-spec-digest", "built-for-other-pods"}});
  Json adopted = *fake_.Stored(Resource::Workloads(), "team", prebuilt);
  adopted["metadata"]["ownerReferences"] = Json::array(
      {{{"kind", "TPUJob"}, {"name", "llm"}, {"uid", "uid-llm"}, {"controller", true}}});
  Cache(fake_.Upsert(Resource::Workloads(), adopted));
  const auto job =
      Job(WithLabel(JobJson("Queued"), "kueue.x-k8s.io/prebuilt-workload-name", prebuilt));
  const auto verdict = Sync(job);
  EXPECT_TRUE(verdict.out_of_sync);
  EXPECT_FALSE(verdict.recreate);
  const auto stored = fake_.Stored(Resource::Workloads(), "team", prebuilt);
  ASSERT_TRUE(stored.has_value()) << "a prebuilt Workload is never deleted to be replaced";
  bool out_of_sync = false;
  for (const Json& c : (*stored)["status"]["conditions"]) {
    if (c["type"] == "Finished") out_of_sync = c["status"] == "True" && c["reason"] == "OutOfSync";
  }
  EXPECT_TRUE(out_of_sync) << stored->dump();
}

// --- MultiKueue: the manager cluster's job only queues through its Workload -----------------

TEST_F(KueueAdapterTest, AManagerClusterJobGetsAWorkloadAndItsQuotaGoesBackAtOnceAfterAnEviction) {
  const Json manager = WithManagedBy(JobJson(""), "kueue.x-k8s.io/multikueue");
  const auto job = Job(manager);
  auto created = adapter_.Dispatch(job, policy::ParseJobSpec(job));
  ASSERT_TRUE(created.write) << created.write.error().ToString();
  EXPECT_TRUE(created.verdict.create_workload);
  const std::string name = policy::kueue::WorkloadName("llm", "uid-llm");
  ASSERT_TRUE(fake_.Stored(Resource::Workloads(), "team", name).has_value());

  // MultiKueue copied the worker's status (Running, admitted there): nothing to write here.
  Json running = WithManagedBy(JobJson("Running", /*admitted=*/true), "kueue.x-k8s.io/multikueue");
  AddWorkload(Job(running), Admitted());
  fake_.ClearActions();
  auto admitted = adapter_.Dispatch(Job(running), policy::ParseJobSpec(Job(running)));
  ASSERT_TRUE(admitted.write);
  EXPECT_FALSE(admitted.verdict.admit);
  EXPECT_TRUE(Writes("workloads").empty());

  EXPECT_FALSE(admitted.status.has_value()) << "a running copy's status is MultiKueue's";

  // Evicted here: the quota is kept while the copy (MultiKueue deactivates it in the worker)
  // still runs, and goes back once the copied status shows it stopped.
  Json evicted = Admitted();
  evicted["conditions"].push_back(Condition("Evicted", "True", "Preempted"));
  AddWorkload(Job(running), evicted);
  fake_.ClearActions();
  auto stopping = adapter_.Dispatch(Job(running), policy::ParseJobSpec(Job(running)));
  ASSERT_TRUE(stopping.write);
  EXPECT_FALSE(stopping.verdict.release_quota);
  EXPECT_TRUE(Writes("workloads").empty());
  Json stopped = WithManagedBy(JobJson("Queued"), "kueue.x-k8s.io/multikueue");
  auto released = adapter_.Dispatch(Job(stopped), policy::ParseJobSpec(Job(stopped)));
  ASSERT_TRUE(released.write);
  EXPECT_TRUE(released.verdict.release_quota);
  EXPECT_FALSE(released.verdict.evict.has_value());
  const auto stored = fake_.Stored(Resource::Workloads(), "team", name);
  ASSERT_TRUE(stored.has_value());
  EXPECT_FALSE((*stored)["status"].contains("admission"));
}

TEST_F(KueueAdapterTest, AManagerClusterJobFinishesItsWorkloadOnTheCopiedStatus) {
  const Json done = WithManagedBy(JobJson("Failed"), "kueue.x-k8s.io/multikueue");
  AddWorkload(Job(done), Admitted());
  auto finished = adapter_.Dispatch(Job(done), policy::ParseJobSpec(Job(done)));
  ASSERT_TRUE(finished.write);
  const auto stored =
      fake_.Stored(Resource::Workloads(), "team", policy::kueue::WorkloadName("llm", "uid-llm"));
  ASSERT_TRUE(stored.has_value());
  bool failed = false;
  for (const Json& c : (*stored)["status"]["conditions"]) {
    if (c["type"] == "Finished") failed = c["status"] == "True" && c["reason"] == "Failed";
  }
  EXPECT_TRUE(failed) << stored->dump();
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::controller
