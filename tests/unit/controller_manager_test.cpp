// Manager over the fake client, with its real threads (informers, work queue workers, the health
// server): caches sync before workers start and /readyz turns 200; a TPUJob is reconciled into its
// worker pods, which are deleted again when it is suspended; Stop() drains and Run() returns.
// With leader election, the second of two managers stands by while the first holds the Lease and
// takes over once the first stops. The ThreadSanitizer build runs these (threaded_tests,
// scripts/sanitize.sh thread): it found the parallel pod creation and deletion writing
// neighbouring elements of a std::vector<bool> from several threads.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "controller/manager.h"
#include "eventually.h"
#include "fake_client.h"

namespace tpujob::controller {
namespace TPUJOB_TEST_NS {

using kube::Json;
using kube::Resource;
using std::chrono::milliseconds;
using std::chrono::seconds;

using testing_util::Eventually;

Json Node(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name},
            {"labels",
             {{"cloud.google.com/gke-tpu-accelerator", "tpu-v5e"},
              {"cloud.google.com/gke-tpu-topology", "2x4"},
              {"cloud.google.com/gke-nodepool", "pool-a"}}}}},
          {"status",
           {{"allocatable", {{"google.com/tpu", "4"}}},
            {"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

Json Job(const std::string& name) {
  return {
      {"apiVersion", "tpujob.dev/v1alpha1"},
      {"kind", "TPUJob"},
      {"metadata",
       {{"name", name}, {"namespace", "team"}, {"creationTimestamp", "2026-01-01T00:00:00Z"}}},
      {"spec",
       {{"tpu", {{"accelerator", "tpu-v5e"}, {"topology", "2x4"}, {"chipsPerWorker", 4}}},
        {"replicaSpecs",
         {{"Worker",
           {{"replicas", 2},
            {"template",
             {{"spec",
               {{"containers", Json::array({{{"name", "train"}, {"image", "trainer"}}})}}}}}}}}}}}};
}

size_t PodsOf(const kube::FakeClient& fake, const std::string& job) {
  size_t count = 0;
  for (const Json& pod : fake.StoredAll(Resource::Pods())) {
    if (pod["metadata"]["name"].get<std::string>().starts_with(job + "-")) ++count;
  }
  return count;
}

ManagerOptions Options() {
  ManagerOptions options;
  options.health_address = "127.0.0.1:0";
  options.metrics_address = "";
  options.workers = 2;
  options.cache_sync_timeout = seconds(10);
  return options;
}

// Runs a manager on its own thread for the scope.
class Running {
 public:
  Running(kube::Client& client, ManagerOptions options)
      : manager_(client, std::move(options)), thread_([this] { status_ = manager_.Run(); }) {}
  ~Running() { Stop(); }
  Manager& manager() { return manager_; }
  kube::Status Stop() {
    manager_.Stop();
    if (thread_.joinable()) thread_.join();
    return status_;
  }

 private:
  Manager manager_;
  kube::Status status_;
  std::thread thread_;
};

TEST(ManagerTest, SyncsThenReconcilesAJobIntoItsWorkersAndStopsCleanly) {
  kube::FakeClient fake;
  fake.Upsert(Resource::Nodes(), Node("n0"));
  fake.Upsert(Resource::Nodes(), Node("n1"));
  Running running(fake, Options());
  ASSERT_TRUE(Eventually([&] { return running.manager().Ready(); }));
  EXPECT_GT(running.manager().health_port(), 0);
  EXPECT_EQ(running.manager().nodes().store().Size(), 2u);

  fake.Upsert(Resource::TPUJobs(), Job("llm"));
  EXPECT_TRUE(Eventually([&] { return PodsOf(fake, "llm") == 2; }))
      << PodsOf(fake, "llm") << " pods";
  EXPECT_TRUE(Eventually([&] { return running.manager().pods().store().Size() == 2; }));

  // Suspended: the workers delete the pods (in parallel, as they created them).
  Json suspended = *fake.Stored(Resource::TPUJobs(), "team", "llm");
  suspended["spec"]["suspend"] = true;
  fake.Upsert(Resource::TPUJobs(), suspended);
  EXPECT_TRUE(Eventually([&] { return PodsOf(fake, "llm") == 0; }))
      << PodsOf(fake, "llm") << " pods";

  const kube::Status stopped = running.Stop();
  EXPECT_TRUE(stopped.has_value()) << stopped.error().message;
  EXPECT_FALSE(running.manager().Ready());
}

// With Kueue: a job MultiKueue dispatches (spec.managedBy kueue.x-k8s.io/multikueue) gets its
// Workload in this, the manager cluster, and reads Queued until a worker runs it; no pod or
// Service. A job of another controller gets nothing at all, even when it names a LocalQueue.
TEST(ManagerTest, AMultiKueueJobGetsOnlyItsWorkloadAndAnotherControllersJobNothing) {
  kube::FakeClient fake;
  fake.Upsert(Resource::Nodes(), Node("n0"));
  fake.Upsert(Resource::Nodes(), Node("n1"));
  ManagerOptions options = Options();
  options.kueue = ManagerOptions::KueueMode::kRequired;
  Running running(fake, options);
  ASSERT_TRUE(Eventually([&] { return running.manager().Ready(); }));

  auto queued = [](const std::string& name, const std::string& managed_by) {
    Json job = Job(name);
    job["metadata"]["uid"] = "uid-" + name;
    job["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team"}};
    job["spec"]["managedBy"] = managed_by;
    return job;
  };
  fake.Upsert(Resource::TPUJobs(), queued("other", "example.com/another-controller"));
  fake.Upsert(Resource::TPUJobs(), queued("mk", "kueue.x-k8s.io/multikueue"));
  auto workloads_of = [&](const std::string& job) {
    size_t count = 0;
    for (const Json& w : fake.StoredAll(Resource::Workloads())) {
      if (w["metadata"]["ownerReferences"][0]["name"] == job) ++count;
    }
    return count;
  };
  EXPECT_TRUE(Eventually([&] { return workloads_of("mk") == 1; }));
  EXPECT_TRUE(Eventually([&] {
    const Json status = fake.Stored(Resource::TPUJobs(), "team", "mk")->value("status", Json());
    return status.is_object() && status.value("phase", "") == "Queued";
  }));
  const Json status = (*fake.Stored(Resource::TPUJobs(), "team", "mk"))["status"];
  ASSERT_TRUE(status["conditions"].is_array()) << status.dump();
  EXPECT_EQ(status["conditions"][0]["type"], "Admitted") << status.dump();
  EXPECT_EQ(status["conditions"][0]["reason"], "KueuePending") << status.dump();
  EXPECT_EQ(workloads_of("other"), 0u);
  EXPECT_EQ(PodsOf(fake, "mk"), 0u);
  EXPECT_EQ(PodsOf(fake, "other"), 0u);
  for (const auto& action : fake.actions()) {
    EXPECT_NE(action.resource, "services") << action.verb << " " << action.name;
    if (action.resource != "tpujobs") continue;
    EXPECT_EQ(action.name, "mk") << action.verb << " " << action.body.dump();
    EXPECT_EQ(action.subresource, "status") << action.verb << " " << action.body.dump();
  }
}

// ttlSecondsAfterFinished with MultiKueue: the manager's job is deleted once MultiKueue copied a
// finished status onto it (deleting it deletes the copy); the worker's copy never deletes itself
// (MultiKueue would create it again and run it twice).
TEST(ManagerTest, TheManagersJobExpiresAfterItsTtlAndTheWorkersCopyDoesNot) {
  kube::FakeClient fake;
  ManagerOptions options = Options();
  options.kueue = ManagerOptions::KueueMode::kRequired;
  auto finished = [](const std::string& name) {
    Json job = Job(name);
    job["metadata"]["uid"] = "uid-" + name;
    job["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team"}};
    job["spec"]["ttlSecondsAfterFinished"] = 0;
    job["status"] = {{"phase", "Succeeded"}, {"completionTime", "2026-01-01T00:00:00Z"}};
    return job;
  };
  Json copy = finished("copy");
  copy["metadata"]["labels"]["kueue.x-k8s.io/prebuilt-workload-name"] = "tpujob-copy-0a1b2";
  fake.Upsert(Resource::TPUJobs(), copy);
  Json manager = finished("dispatched");
  manager["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue";
  fake.Upsert(Resource::TPUJobs(), manager);
  Running running(fake, options);
  ASSERT_TRUE(Eventually([&] { return running.manager().Ready(); }));
  EXPECT_TRUE(Eventually([&] { return !fake.Stored(Resource::TPUJobs(), "team", "dispatched"); }))
      << "the manager's finished job outlived its TTL";
  EXPECT_TRUE(fake.Stored(Resource::TPUJobs(), "team", "copy").has_value())
      << "the worker's copy deleted itself";
}

// A pod deleted right after its creation (by a kubelet that deletes by name, say, hitting the pod
// that took the name of one it was removing) is created again at once. The reconciler waits for
// the cache to show its creations before deciding again, but a creation the cache has already
// seen come and go counts as shown; waiting for the pod to appear would stall the job until the
// expectation deadline (30 s).
TEST(ManagerTest, APodDeletedRightAfterItsCreationIsCreatedAgainWithoutWaitingForTheDeadline) {
  kube::FakeClient fake;
  fake.Upsert(Resource::Nodes(), Node("n0"));
  fake.Upsert(Resource::Nodes(), Node("n1"));
  fake.RemoveRightAfterCreate(Resource::Pods(), "team", "llm-worker-1");
  Running running(fake, Options());
  ASSERT_TRUE(Eventually([&] { return running.manager().Ready(); }));

  fake.Upsert(Resource::TPUJobs(), Job("llm"));
  EXPECT_TRUE(Eventually([&] { return PodsOf(fake, "llm") == 2; }, seconds(10)))
      << PodsOf(fake, "llm") << " pods";
  int creations = 0;
  for (const auto& action : fake.actions()) {
    creations += action.verb == "create" && action.name == "llm-worker-1";
  }
  EXPECT_EQ(creations, 2);
}

TEST(ManagerTest, WithLeaderElectionTheSecondStandsByUntilTheFirstReleasesTheLease) {
  kube::FakeClient fake;
  fake.Upsert(Resource::Nodes(), Node("n0"));
  fake.Upsert(Resource::Nodes(), Node("n1"));
  fake.Upsert(Resource::Nodes(), Node("n2"));
  fake.Upsert(Resource::Nodes(), Node("n3"));
  auto elected = [](const std::string& identity) {
    ManagerOptions options = Options();
    options.leader_election = LeaderElectionOptions{};
    options.leader_election->identity = identity;
    options.leader_election->lease_duration = seconds(3);
    options.leader_election->renew_deadline = seconds(2);
    options.leader_election->retry_period = milliseconds(200);
    return options;
  };
  auto first = std::make_unique<Running>(fake, elected("first"));
  ASSERT_TRUE(Eventually([&] { return first->manager().IsLeader(); }));
  Running second(fake, elected("second"));
  fake.Upsert(Resource::TPUJobs(), Job("a"));
  ASSERT_TRUE(Eventually([&] { return PodsOf(fake, "a") == 2; }));
  EXPECT_FALSE(second.manager().IsLeader());

  // A graceful stop releases the Lease: the second manager leads and reconciles the next job.
  const kube::Status stopped = first->Stop();
  EXPECT_TRUE(stopped.has_value()) << stopped.error().message;
  first.reset();
  ASSERT_TRUE(Eventually([&] { return second.manager().IsLeader(); }));
  fake.Upsert(Resource::TPUJobs(), Job("b"));
  EXPECT_TRUE(Eventually([&] { return PodsOf(fake, "b") == 2; }));
  EXPECT_EQ(PodsOf(fake, "a"), 2u);
  const auto lease = fake.Stored(Resource::Leases(), "default", "tpujob-operator");
  ASSERT_TRUE(lease.has_value());
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "second");
}

// Counts the Lease requests that go through it, and passes everything on to `inner`.
class LeaseCounter final : public kube::Client {
 public:
  explicit LeaseCounter(kube::Client& inner) : inner_(inner) {}
  int lease_requests() const { return lease_requests_.load(); }

  kube::Result<Json> Get(const Resource& r, const std::string& ns, const std::string& name,
                         const std::string& subresource = {}) override {
    Count(r);
    return inner_.Get(r, ns, name, subresource);
  }
  kube::Result<Json> List(const Resource& r, const std::string& ns,
                          const kube::ListOptions& options = {}) override {
    Count(r);
    return inner_.List(r, ns, options);
  }
  kube::Result<std::unique_ptr<kube::WatchStream>> Watch(
      const Resource& r, const std::string& ns, const kube::WatchOptions& options) override {
    Count(r);
    return inner_.Watch(r, ns, options);
  }
  kube::Result<Json> Create(const Resource& r, const std::string& ns, const Json& object,
                            const kube::WriteOptions& options = {}) override {
    Count(r);
    return inner_.Create(r, ns, object, options);
  }
  kube::Result<Json> Update(const Resource& r, const std::string& ns, const Json& object,
                            const kube::WriteOptions& options = {}) override {
    Count(r);
    return inner_.Update(r, ns, object, options);
  }
  kube::Result<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                           kube::PatchType type, const Json& body,
                           const kube::PatchOptions& options = {}) override {
    Count(r);
    return inner_.Patch(r, ns, name, type, body, options);
  }
  kube::Result<Json> Delete(const Resource& r, const std::string& ns, const std::string& name,
                            const kube::DeleteOptions& options = {}) override {
    Count(r);
    return inner_.Delete(r, ns, name, options);
  }

 private:
  void Count(const Resource& r) {
    if (r.plural == Resource::Leases().plural) ++lease_requests_;
  }
  kube::Client& inner_;
  std::atomic<int> lease_requests_{0};
};

// The elector has a client of its own (its own rate limiter in production), so a renewal never
// queues behind the controllers' requests: every Lease request goes through it, none through
// the manager's client.
TEST(ManagerTest, TheLeaderElectorUsesTheLeaseClientForEveryLeaseRequest) {
  kube::FakeClient fake;
  fake.Upsert(Resource::Nodes(), Node("n0"));
  fake.Upsert(Resource::Nodes(), Node("n1"));
  LeaseCounter controllers(fake);
  LeaseCounter leases(fake);
  ManagerOptions options = Options();
  options.leader_election = LeaderElectionOptions{};
  options.leader_election->identity = "only";
  options.leader_election->lease_duration = seconds(3);
  options.leader_election->renew_deadline = seconds(2);
  options.leader_election->retry_period = milliseconds(200);
  options.lease_client = &leases;
  Running running(controllers, options);
  ASSERT_TRUE(Eventually([&] { return running.manager().IsLeader(); }));
  fake.Upsert(Resource::TPUJobs(), Job("llm"));
  ASSERT_TRUE(Eventually([&] { return PodsOf(fake, "llm") == 2; }));
  // A few renewals later.
  const int after_election = leases.lease_requests();
  EXPECT_TRUE(Eventually([&] { return leases.lease_requests() >= after_election + 3; }));
  EXPECT_EQ(controllers.lease_requests(), 0);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::controller
