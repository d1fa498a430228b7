#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "controller/leader_election.h"
#include "controller/manager.h"
#include "fake_client.h"
#include "log_capture.h"

namespace tpujob::controller {
namespace TPUJOB_TEST_NS {

using kube::FakeClient;
using kube::Json;
using kube::Resource;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kNamespace[] = "ops";
constexpr char kLease[] = "tpujob-operator";
constexpr auto kWait = seconds(10);  // bound on waiting for the elector's threads; never reached

// FakeClient plus what the tests need to step the elector: a count of every request (reads
// included) to await, and updates that can be made to hang until released.
class SteppedClient final : public kube::Client {
 public:
  explicit SteppedClient(FakeClient& fake) : fake_(fake) {}

  kube::Result<Json> Get(const Resource& r, const std::string& ns, const std::string& name,
                         const std::string& subresource = {}) override {
    Count("get");
    return fake_.Get(r, ns, name, subresource);
  }
  kube::Result<Json> List(const Resource& r, const std::string& ns,
                          const kube::ListOptions& options = {}) override {
    Count("list");
    return fake_.List(r, ns, options);
  }
  kube::Result<std::unique_ptr<kube::WatchStream>> Watch(
      const Resource& r, const std::string& ns, const kube::WatchOptions& options) override {
    return fake_.Watch(r, ns, options);
  }
  kube::Result<Json> Create(const Resource& r, const std::string& ns, const Json& object,
                            const kube::WriteOptions& options = {}) override {
    Count("create");
    return fake_.Create(r, ns, object, options);
  }
  kube::Result<Json> Update(const Resource& r, const std::string& ns, const Json& object,
                            const kube::WriteOptions& options = {}) override {
    Count("update");
    {
      std::unique_lock<std::mutex> lock(mu_);
      update_gate_ = options.before_send;
      if (hang_updates_) {
        ++hanging_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return !hang_updates_; });
        --hanging_;
      }
    }
    return fake_.Update(r, ns, object, options);
  }
  kube::Result<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                           kube::PatchType type, const Json& body,
                           const kube::PatchOptions& options = {}) override {
    Count("patch");
    return fake_.Patch(r, ns, name, type, body, options);
  }
  kube::Result<Json> Delete(const Resource& r, const std::string& ns, const std::string& name,
                            const kube::DeleteOptions& options = {}) override {
    Count("delete");
    return fake_.Delete(r, ns, name, options);
  }

  int requests() const {
    std::lock_guard<std::mutex> guard(mu_);
    return static_cast<int>(verbs_.size());
  }
  std::vector<std::string> verbs() const {
    std::lock_guard<std::mutex> guard(mu_);
    return verbs_;
  }
  bool AwaitRequests(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return static_cast<int>(verbs_.size()) >= n; });
  }
  void HangUpdates(bool hang) {
    {
      std::lock_guard<std::mutex> guard(mu_);
      hang_updates_ = hang;
    }
    cv_.notify_all();
  }
  // The send check of the last update: what the client calls before each retry of it.
  std::function<kube::Status()> update_gate() const {
    std::lock_guard<std::mutex> guard(mu_);
    return update_gate_;
  }
  bool AwaitHanging() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return hanging_ > 0; });
  }

 private:
  void Count(const char* verb) {
    {
      std::lock_guard<std::mutex> guard(mu_);
      verbs_.emplace_back(verb);
    }
    cv_.notify_all();
  }

  FakeClient& fake_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> verbs_;
  bool hang_updates_ = false;
  int hanging_ = 0;
  std::function<kube::Status()> update_gate_;
};

// A clock whose time can jump forward without waking anyone: what the threads of a process
// frozen by SIGSTOP find when it resumes (the monotonic clock ran on, none of them ran).
class FreezableClock final : public Clock {
 public:
  explicit FreezableClock(FakeClock& base) : base_(base) {}
  TimePoint Now() const override { return base_.Now() + Jumped(); }
  WallTime WallNow() const override {
    return base_.WallNow() + std::chrono::duration_cast<WallTime::duration>(Jumped());
  }
  void WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 TimePoint deadline) override {
    base_.WaitUntil(cv, lock, deadline - Jumped());
  }
  void Jump(Duration d) { jumped_ += d.count(); }

 private:
  Duration Jumped() const { return Duration(jumped_.load()); }
  FakeClock& base_;
  std::atomic<Duration::rep> jumped_{0};
};

// What the elector told its callbacks.
class Observed {
 public:
  LeaderCallbacks Callbacks() {
    return {.on_started_leading =
                [this] {
                  std::lock_guard<std::mutex> guard(mu_);
                  ++started_;
                  cv_.notify_all();
                },
            .on_stopped_leading =
                [this](const std::string& reason) {
                  std::lock_guard<std::mutex> guard(mu_);
                  lost_.push_back(reason);
                  cv_.notify_all();
                },
            .on_new_leader =
                [this](const std::string& holder) {
                  std::lock_guard<std::mutex> guard(mu_);
                  new_leaders_.push_back(holder);
                }};
  }
  bool AwaitStarted() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return started_ > 0; });
  }
  bool AwaitLost() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return !lost_.empty(); });
  }
  int started() const {
    std::lock_guard<std::mutex> guard(mu_);
    return started_;
  }
  std::vector<std::string> lost() const {
    std::lock_guard<std::mutex> guard(mu_);
    return lost_;
  }
  std::vector<std::string> new_leaders() const {
    std::lock_guard<std::mutex> guard(mu_);
    return new_leaders_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int started_ = 0;
  std::vector<std::string> lost_;
  std::vector<std::string> new_leaders_;
};

class LeaderElectionTest : public ::testing::Test {
 protected:
  static LeaderElectionOptions Options(const std::string& identity) {
    LeaderElectionOptions options;
    options.ns = kNamespace;
    options.name = kLease;
    options.identity = identity;
    return options;  // 15s / 10s / 2s
  }

  std::unique_ptr<LeaderElector> Elector(const std::string& identity) {
    return std::make_unique<LeaderElector>(client_, Options(identity), clock_);
  }

  std::optional<Json> Lease() { return fake_.Stored(Resource::Leases(), kNamespace, kLease); }
  Json Spec() { return Lease().value_or(Json::object()).value("spec", Json::object()); }

  // A Lease held by `holder`, with remote times from long ago: only what this replica observes
  // locally may decide expiry.
  void SeedLease(const std::string& holder, int transitions = 3) {
    fake_.Upsert(Resource::Leases(), {{"apiVersion", "coordination.k8s.io/v1"},
                                      {"kind", "Lease"},
                                      {"metadata", {{"name", kLease}, {"namespace", kNamespace}}},
                                      {"spec",
                                       {{"holderIdentity", holder},
                                        {"leaseDurationSeconds", 15},
                                        {"acquireTime", "2000-01-01T00:00:00.000000Z"},
                                        {"renewTime", "2000-01-01T00:00:00.000000Z"},
                                        {"leaseTransitions", transitions}}}});
  }
  // The holder renews: a changed record.
  void RenewAs(const std::string& holder, const std::string& renew_time) {
    Json lease = Lease().value();
    lease["spec"]["holderIdentity"] = holder;
    lease["spec"]["renewTime"] = renew_time;
    fake_.Upsert(Resource::Leases(), lease);
  }

  // Moves the clock by `d` and waits until the elector made `requests` more requests and
  // `parked` of its threads wait on the clock again.
  void Step(Duration d, int requests, int parked) {
    const int before = client_.requests();
    clock_.Advance(d);
    ASSERT_TRUE(client_.AwaitRequests(before + requests)) << "requests: " << Verbs();
    ASSERT_TRUE(clock_.AwaitWaiters(parked));
  }
  // Waits until the elector made `n` requests in all and `parked` threads wait on the clock.
  void Settle(int n, int parked) {
    ASSERT_TRUE(client_.AwaitRequests(n)) << "requests: " << Verbs();
    ASSERT_TRUE(clock_.AwaitWaiters(parked));
  }
  std::string Verbs() { return ::testing::PrintToString(client_.verbs()); }
  int Updates() {
    int n = 0;
    for (const auto& verb : client_.verbs()) n += verb == "update" ? 1 : 0;
    return n;
  }

  FakeClient fake_;
  SteppedClient client_{fake_};
  FakeClock clock_;
  LogCapture log_;
};

TEST_F(LeaderElectionTest, AcquiresAnAbsentLease) {
  Observed observed;
  auto elector = Elector("op-a");
  EXPECT_FALSE(elector->IsLeader());
  elector->Start(observed.Callbacks());
  ASSERT_TRUE(observed.AwaitStarted());
  EXPECT_TRUE(elector->IsLeader());
  EXPECT_TRUE(elector->CheckFence().has_value());
  EXPECT_EQ(client_.verbs(), (std::vector<std::string>{"get", "create"}));

  const Json spec = Spec();
  EXPECT_EQ(spec.value("holderIdentity", ""), "op-a");
  EXPECT_EQ(spec.value("leaseDurationSeconds", 0), 15);
  EXPECT_EQ(spec.value("leaseTransitions", -1), 0);
  const std::regex micro_time(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)");
  EXPECT_TRUE(std::regex_match(spec.value("acquireTime", ""), micro_time)) << spec.dump();
  EXPECT_EQ(spec.value("renewTime", ""), spec.value("acquireTime", ""));
  EXPECT_THAT(log_.text(),
              HasSubstr("msg=\"acquired leader lease\" lease=ops/tpujob-operator identity=op-a"));
}

TEST_F(LeaderElectionTest, RespectsAnUnexpiredLeaseHeldByAnotherThenTakesItOverWhenExpired) {
  SeedLease("op-b", 3);
  Observed observed;
  auto elector = Elector("op-a");
  elector->Start(observed.Callbacks());
  Settle(1, 1);
  EXPECT_FALSE(elector->IsLeader());
  EXPECT_EQ(elector->ObservedHolder(), "op-b");
  EXPECT_EQ(observed.new_leaders(), std::vector<std::string>{"op-b"});
  EXPECT_THAT(log_.text(), HasSubstr("msg=\"observed new leader\" lease=ops/tpujob-operator "
                                     "identity=op-a holder=op-b"));

  // The record's renewTime is 25 years old, yet the lease is valid for 15 s from when this
  // replica first saw it: one read every retry period, no write.
  for (int i = 0; i < 7; ++i) Step(seconds(2), 1, 1);  // t = 14 s
  EXPECT_FALSE(elector->IsLeader());
  EXPECT_EQ(Updates(), 0) << Verbs();
  EXPECT_EQ(Spec().value("holderIdentity", ""), "op-b");

  // At 15 s (not at the next period, 16 s) it has expired: read, then take it over.
  Step(seconds(1), 2, 2);
  ASSERT_TRUE(observed.AwaitStarted());
  EXPECT_TRUE(elector->IsLeader());
  const Json spec = Spec();
  EXPECT_EQ(spec.value("holderIdentity", ""), "op-a");
  EXPECT_EQ(spec.value("leaseTransitions", -1), 4);
  EXPECT_NE(spec.value("acquireTime", ""), "2000-01-01T00:00:00.000000Z");
  EXPECT_EQ(spec.value("renewTime", ""), spec.value("acquireTime", ""));
}

TEST_F(LeaderElectionTest, AHolderThatKeepsRenewingIsNeverTakenOver) {
  SeedLease("op-b");
  Observed observed;
  auto elector = Elector("op-a");
  elector->Start(observed.Callbacks());
  Settle(1, 1);
  // op-b renews every 10 s: each renewal is a changed record, which restarts the 15 s.
  for (int renewal = 1; renewal <= 4; ++renewal) {
    for (int i = 0; i < 5; ++i) Step(seconds(2), 1, 1);
    RenewAs("op-b", "2000-01-01T00:00:" + std::to_string(10 * renewal) + ".000000Z");
  }
  Step(seconds(2), 1, 1);
  EXPECT_FALSE(elector->IsLeader());
  EXPECT_EQ(observed.started(), 0);
  EXPECT_EQ(Updates(), 0) << Verbs();
}

TEST_F(LeaderElectionTest, ALeaseNamingThisReplicaIsTakenAtOnceKeepingItsHistory) {
  SeedLease("op-a", 5);  // e.g. a restart with a fixed identity
  Observed observed;
  auto elector = Elector("op-a");
  elector->Start(observed.Callbacks());
  ASSERT_TRUE(observed.AwaitStarted());
  const Json spec = Spec();
  EXPECT_EQ(spec.value("leaseTransitions", -1), 5);
  EXPECT_EQ(spec.value("acquireTime", ""), "2000-01-01T00:00:00.000000Z");
  EXPECT_NE(spec.value("renewTime", ""), "2000-01-01T00:00:00.000000Z");
}

TEST_F(LeaderElectionTest, RenewsEveryRetryPeriodAndStaysLeader) {
  Observed observed;
  auto elector = Elector("op-a");
  elector->Start(observed.Callbacks());
  ASSERT_TRUE(observed.AwaitStarted());
  Settle(2, 2);  // get, create; loop and watchdog parked
  std::string renew_time = Spec().value("renewTime", "");
  for (int i = 0; i < 10; ++i) {  // 20 s: twice the renew deadline, longer than the lease
    Step(seconds(2), 1, 2);
    const std::string renewed = Spec().value("renewTime", "");
    EXPECT_GT(renewed, renew_time) << "renewal " << i;
    renew_time = renewed;
    EXPECT_TRUE(elector->CheckFence().has_value());
  }
  EXPECT_TRUE(elector->IsLeader());
  EXPECT_TRUE(observed.lost().empty());
  // As the leader it renews from the Lease it wrote: one update per period, no reads.
  EXPECT_EQ(Updates(), 10) << Verbs();
  EXPECT_EQ(client_.requests(), 12) << Verbs();
  EXPECT_EQ(Spec().value("leaseTransitions", -1), 0);
}

TEST_F(LeaderElectionTest, LosesWhenRenewalsFailForTheRenewDeadlineAndWritesNothingAfter) {
  Observed observed;
  auto elector = Elector("op-a");
  elector->Start(observed.Callbacks());
  ASSERT_TRUE(observed.AwaitStarted());
  Settle(2, 2);
  fake_.FailNext("update", kube::ApiError(500, "InternalError"), 100);
  for (int i = 0; i < 4; ++i) Step(seconds(2), 1, 2);  // t = 8 s: four failed renewals
  EXPECT_TRUE(elector->IsLeader());
  EXPECT_TRUE(elector->CheckFence().has_value()) << "the last renewal is 8 s old: still fresh";
  EXPECT_TRUE(observed.lost().empty());

  const int before = client_.requests();
  clock_.Advance(seconds(2));  // t = 10 s: the renew deadline
  ASSERT_TRUE(observed.AwaitLost());
  EXPECT_FALSE(elector->IsLeader());
  EXPECT_TRUE(elector->Lost());
  EXPECT_THAT(observed.lost()[0], HasSubstr("renew deadline"));
  EXPECT_THAT(log_.text(), HasSubstr("level=error msg=\"leader election lost\" "
                                     "lease=ops/tpujob-operator identity=op-a"));
  const auto fence = elector->CheckFence();
  ASSERT_FALSE(fence.has_value());
  EXPECT_THAT(fence.error().message, HasSubstr("lost"));

  // Neither a renewal at the deadline nor a release on stop.
  elector->Stop();
  EXPECT_EQ(client_.requests(), before) << Verbs();
  EXPECT_EQ(observed.lost().size(), 1u);
}

TEST_F(LeaderElectionTest, LosesWhenEveryRenewalConflicts) {
  Observed observed;
  auto elector = Elector("op-a");
  elector->Start(observed.Callbacks());
  ASSERT_TRUE(observed.AwaitStarted());
  Settle(2, 2);
  fake_.FailNext("update", kube::ApiError(409, "Conflict", "the object has been modified"), 100);
  // Each period: the renewal conflicts, the Lease is read (still naming op-a), the update
  // from that read conflicts too.
  for (int i = 0; i < 4; ++i) Step(seconds(2), 3, 2);
  EXPECT_TRUE(elector->IsLeader());
  clock_.Advance(seconds(2));
  ASSERT_TRUE(observed.AwaitLost());
  EXPECT_FALSE(elector->IsLeader());
  EXPECT_THAT(observed.lost()[0], HasSubstr("renew deadline"));
}

TEST_F(LeaderElectionTest, LosesAtOnceWhenAnotherReplicaHoldsTheLease) {
  Observed observed;
  auto elector = Elector("op-a");
  elector->Start(observed.Callbacks());
  ASSERT_TRUE(observed.AwaitStarted());
  Settle(2, 2);
  RenewAs("op-b", "2030-01-01T00:00:00.000000Z");  // another replica wrote it
  clock_.Advance(seconds(2));
  ASSERT_TRUE(observed.AwaitLost());
  EXPECT_THAT(observed.lost()[0], HasSubstr("held by op-b"));
  EXPECT_FALSE(elector->IsLeader());
  elector->Stop();
  EXPECT_EQ(Spec().value("holderIdentity", ""), "op-b") << "a lost lease is not released";
}

TEST_F(LeaderElectionTest, DeclaresTheLossOnTimeWhileARenewalHangs) {
  Observed observed;
  auto elector = Elector("op-a");
  elector->Start(observed.Callbacks());
  ASSERT_TRUE(observed.AwaitStarted());
  Settle(2, 2);
  client_.HangUpdates(true);
  clock_.Advance(seconds(2));
  ASSERT_TRUE(client_.AwaitHanging());
  ASSERT_TRUE(clock_.AwaitWaiters(1));  // the watchdog
  EXPECT_TRUE(observed.lost().empty());
  clock_.Advance(seconds(8));  // the renew deadline, the request still in flight
  ASSERT_TRUE(observed.AwaitLost());
  EXPECT_FALSE(elector->IsLeader());
  EXPECT_FALSE(elector->CheckFence().has_value());
  client_.HangUpdates(false);
  elector->Stop();
}

// The client retries a renewal that failed in transport (the API server down) with backoff; a
// retry sent once the API server is back, after the deadline, would renew a Lease this replica
// has given up for another lease duration, and the standby would wait that much longer.
TEST_F(LeaderElectionTest, ARenewalIsNotRetriedPastTheRenewDeadline) {
  Observed observed;
  auto elector = Elector("op-a");
  elector->Start(observed.Callbacks());
  ASSERT_TRUE(observed.AwaitStarted());
  Settle(2, 2);
  client_.HangUpdates(true);  // the renewal, as the client retries it
  struct Unhang {             // on every way out, before the elector is destroyed
    SteppedClient& client;
    ~Unhang() { client.HangUpdates(false); }
  } unhang{client_};
  clock_.Advance(seconds(2));
  ASSERT_TRUE(client_.AwaitHanging());
  const std::function<kube::Status()> gate = client_.update_gate();
  ASSERT_TRUE(gate) << "a renewal must carry a send check for the client's retries";
  EXPECT_TRUE(gate().has_value()) << "within the deadline a retry may be sent";
  ASSERT_TRUE(clock_.AwaitWaiters(1));  // the watchdog
  clock_.Advance(seconds(8));
  ASSERT_TRUE(observed.AwaitLost());
  const kube::Status retry = gate();
  ASSERT_FALSE(retry.has_value()) << "a retry after the deadline must not be sent";
  EXPECT_EQ(retry.error().kind, kube::ErrorKind::kCancelled) << retry.error().ToString();
  EXPECT_THAT(retry.error().message, HasSubstr("lost"));
}

TEST_F(LeaderElectionTest, StopReleasesTheLeaseAndAStandbyTakesItAtOnce) {
  Observed observed_a;
  auto a = Elector("op-a");
  a->Start(observed_a.Callbacks());
  ASSERT_TRUE(observed_a.AwaitStarted());
  Settle(2, 2);

  Observed observed_b;
  auto b = Elector("op-b");
  b->Start(observed_b.Callbacks());
  Settle(3, 3);  // b read the Lease held by a
  EXPECT_FALSE(b->IsLeader());

  a->Stop();
  EXPECT_FALSE(a->IsLeader());
  EXPECT_TRUE(observed_a.lost().empty()) << "a release is not a loss";
  EXPECT_THAT(log_.text(),
              HasSubstr("msg=\"released leader lease\" lease=ops/tpujob-operator identity=op-a"));
  Json spec = Spec();
  EXPECT_EQ(spec.value("holderIdentity", "?"), "");
  EXPECT_EQ(spec.value("leaseDurationSeconds", 0), 1);
  EXPECT_EQ(spec.value("leaseTransitions", -1), 0);
  const auto fence = a->CheckFence();
  ASSERT_FALSE(fence.has_value());
  EXPECT_THAT(fence.error().message, HasSubstr("does not hold"));

  // b's next attempt (one retry period later, not a lease duration) takes the free Lease.
  Step(seconds(2), 2, 2);
  ASSERT_TRUE(observed_b.AwaitStarted());
  spec = Spec();
  EXPECT_EQ(spec.value("holderIdentity", ""), "op-b");
  EXPECT_EQ(spec.value("leaseTransitions", -1), 1);
  EXPECT_EQ(spec.value("leaseDurationSeconds", 0), 15);
}

TEST_F(LeaderElectionTest, TwoReplicasNeverLeadTogether) {
  Observed observed_a, observed_b;
  auto a = Elector("op-a");
  auto b = Elector("op-b");
  a->Start(observed_a.Callbacks());
  b->Start(observed_b.Callbacks());
  ASSERT_TRUE(clock_.AwaitWaiters(3));  // the leader's loop and watchdog, the standby's loop
  for (int i = 0; i < 10; ++i) {
    EXPECT_NE(a->IsLeader(), b->IsLeader()) << "period " << i;
    const int before = client_.requests();
    clock_.Advance(seconds(2));
    ASSERT_TRUE(client_.AwaitRequests(before + 2));  // one renewal, one read
    ASSERT_TRUE(clock_.AwaitWaiters(3));
  }
  EXPECT_EQ(observed_a.started() + observed_b.started(), 1);
  EXPECT_EQ(Spec().value("leaseTransitions", -1), 0);
}

// --- Fencing -----------------------------------------------------------------------------------

Json Pod(const std::string& name) {
  return {
      {"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", name}, {"namespace", "team"}}}};
}

TEST_F(LeaderElectionTest, FencedClientRefusesWritesWhenNotLeaderAndPassesReads) {
  fake_.Upsert(Resource::Pods(), Pod("existing"));
  const size_t writes_before = fake_.actions().size();
  SeedLease("op-b");
  auto elector = Elector("op-a");
  elector->Start();
  Settle(1, 1);  // standing by
  FencedClient fenced(fake_, *elector);

  auto got = fenced.Get(Resource::Pods(), "team", "existing");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ((*got)["metadata"]["name"], "existing");
  auto listed = fenced.List(Resource::Pods(), "team");
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ((*listed)["items"].size(), 1u);

  const std::vector<kube::Result<Json>> writes = {
      fenced.Create(Resource::Pods(), "team", Pod("new")),
      fenced.Update(Resource::Pods(), "team", Pod("existing")),
      fenced.Patch(Resource::Pods(), "team", "existing", kube::PatchType::kMerge,
                   Json{{"metadata", {{"labels", {{"a", "b"}}}}}}),
      fenced.Delete(Resource::Pods(), "team", "existing")};
  for (const auto& write : writes) {
    ASSERT_FALSE(write.has_value());
    EXPECT_EQ(write.error().kind, kube::ErrorKind::kCancelled);
    EXPECT_FALSE(write.error().IsRetryable());
    EXPECT_THAT(write.error().message,
                HasSubstr("does not hold the leader lease ops/tpujob-operator (held by op-b)"));
  }
  EXPECT_THAT(writes[0].error().message, HasSubstr("create pods team/new"));
  EXPECT_THAT(writes[3].error().message, HasSubstr("delete pods team/existing"));
  EXPECT_EQ(fenced.refused(), 4u);
  EXPECT_EQ(fake_.actions().size(), writes_before) << "a refused write is never sent";
  EXPECT_TRUE(fake_.Stored(Resource::Pods(), "team", "existing").has_value());
}

TEST_F(LeaderElectionTest, FencedClientPassesWritesWhileTheLeaseIsFresh) {
  Observed observed;
  auto elector = Elector("op-a");
  elector->Start(observed.Callbacks());
  ASSERT_TRUE(observed.AwaitStarted());
  Settle(2, 2);
  FencedClient fenced(fake_, *elector);
  ASSERT_TRUE(fenced.Create(Resource::Pods(), "team", Pod("p")).has_value());
  ASSERT_TRUE(fenced
                  .Patch(Resource::Pods(), "team", "p", kube::PatchType::kMerge,
                         Json{{"metadata", {{"labels", {{"a", "b"}}}}}})
                  .has_value());
  Step(seconds(2), 1, 2);  // renewed
  ASSERT_TRUE(fenced.Delete(Resource::Pods(), "team", "p").has_value());
  EXPECT_EQ(fenced.refused(), 0u);
  EXPECT_FALSE(fake_.Stored(Resource::Pods(), "team", "p").has_value());
}

TEST_F(LeaderElectionTest, FencedClientRefusesWritesOnceRenewalsFailedForTheRenewDeadline) {
  Observed observed;
  auto elector = Elector("op-a");
  elector->Start(observed.Callbacks());
  ASSERT_TRUE(observed.AwaitStarted());
  Settle(2, 2);
  FencedClient fenced(fake_, *elector);
  // Renewals fail from now on; writes still pass until the renew deadline...
  fake_.FailNext("update", kube::TransportError(), 100);
  clock_.Advance(milliseconds(9999));
  ASSERT_TRUE(client_.AwaitRequests(3));
  ASSERT_TRUE(fenced.Create(Resource::Pods(), "team", Pod("before")).has_value());
  // ...and not a moment after: as a process resumed after SIGSTOP finds at once, whether or
  // not its own threads have noticed yet.
  clock_.Advance(milliseconds(1));
  const auto refused = fenced.Create(Resource::Pods(), "team", Pod("after"));
  ASSERT_FALSE(refused.has_value());
  EXPECT_THAT(refused.error().message, HasSubstr("renew deadline"));
  for (const auto& action : fake_.actions()) {
    EXPECT_NE(action.name, "after") << "a refused write is never sent";
  }
  EXPECT_FALSE(fake_.Stored(Resource::Pods(), "team", "after").has_value());
  ASSERT_TRUE(observed.AwaitLost());
}

// The client retries a failed write on its own after a backoff (up to 10 s); a replica frozen
// during that backoff must not send the retry when it resumes.
TEST_F(LeaderElectionTest, FencedClientChecksTheFenceAgainBeforeEachRetryOfTheClient) {
  class RetryHookCapture final : public kube::FakeClient {
   public:
    using FakeClient::Patch;
    kube::Result<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                             kube::PatchType type, const Json& body,
                             const kube::PatchOptions& options) override {
      before_send = options.before_send;
      return FakeClient::Patch(r, ns, name, type, body, options);
    }
    std::function<kube::Status()> before_send;
  };
  FreezableClock frozen(clock_);
  Observed observed;
  LeaderElector elector(client_, Options("op-a"), frozen);
  elector.Start(observed.Callbacks());
  ASSERT_TRUE(observed.AwaitStarted());
  Settle(2, 2);
  RetryHookCapture inner;
  inner.Upsert(Resource::Pods(), Pod("p"));
  FencedClient fenced(inner, elector);
  int callers_hook = 0;
  kube::PatchOptions options;
  options.before_send = [&]() -> kube::Status {
    ++callers_hook;
    return {};
  };
  ASSERT_TRUE(fenced
                  .Patch(Resource::Pods(), "team", "p", kube::PatchType::kMerge,
                         Json{{"metadata", {{"labels", {{"a", "b"}}}}}}, options)
                  .has_value());
  ASSERT_TRUE(inner.before_send) << "the inner client must get a send hook";
  // While the lease is fresh a retry may go, and the caller's own hook is still asked.
  EXPECT_TRUE(inner.before_send().has_value());
  EXPECT_EQ(callers_hook, 1);
  // Frozen past the renew deadline in the middle of a backoff: the retry is not sent.
  frozen.Jump(milliseconds(10000));
  const auto retry = inner.before_send();
  ASSERT_FALSE(retry.has_value());
  EXPECT_EQ(retry.error().kind, kube::ErrorKind::kCancelled);
  EXPECT_THAT(retry.error().message, HasSubstr("write not sent (patch pods team/p)"));
  EXPECT_EQ(callers_hook, 1);
  EXPECT_EQ(fenced.refused(), 1u);
  clock_.Advance(milliseconds(1));
  ASSERT_TRUE(observed.AwaitLost());
  elector.Stop();
}

TEST_F(LeaderElectionTest, FencedClientRefusesWritesOfAResumedProcessBeforeItsThreadsNotice) {
  FreezableClock frozen(clock_);
  Observed observed;
  LeaderElector elector(client_, Options("op-a"), frozen);
  elector.Start(observed.Callbacks());
  ASSERT_TRUE(observed.AwaitStarted());
  Settle(2, 2);
  FencedClient fenced(fake_, elector);
  // Frozen for just under the renew deadline: no thread ran, no renewal; still fresh.
  frozen.Jump(milliseconds(9999));
  ASSERT_TRUE(fenced.Create(Resource::Pods(), "team", Pod("fresh")).has_value());
  // Frozen for the renew deadline: the elector still believes it leads (none of its threads
  // has run), but the fence looks at the clock itself.
  frozen.Jump(milliseconds(1));
  const auto refused = fenced.Create(Resource::Pods(), "team", Pod("stale"));
  EXPECT_TRUE(elector.IsLeader());
  EXPECT_TRUE(observed.lost().empty());
  ASSERT_FALSE(refused.has_value());
  EXPECT_THAT(refused.error().message,
              HasSubstr("write not sent (create pods team/stale): the leader lease "
                        "ops/tpujob-operator was last renewed 10000ms ago, beyond the renew "
                        "deadline of 10s"));
  EXPECT_FALSE(fake_.Stored(Resource::Pods(), "team", "stale").has_value());
  // Once its threads run they give leadership up, without writing the Lease.
  const int updates = Updates();
  clock_.Advance(milliseconds(1));
  ASSERT_TRUE(observed.AwaitLost());
  elector.Stop();
  EXPECT_EQ(Updates(), updates);
  EXPECT_EQ(Spec().value("holderIdentity", ""), "op-a");
}

// --- Options ------------------------------------------------------------------------------------

TEST(LeaderElectionOptionsTest, ValidationNeedsLeaseDurationAboveRenewDeadlineAboveRetryPeriod) {
  LeaderElectionOptions options;
  options.identity = "op-a";
  EXPECT_TRUE(ValidateLeaderElectionOptions(options).has_value());

  options.renew_deadline = seconds(15);
  auto invalid = ValidateLeaderElectionOptions(options);
  ASSERT_FALSE(invalid.has_value());
  EXPECT_THAT(invalid.error().message,
              HasSubstr("lease duration (15s) must be greater than the renew deadline (15s)"));

  options.renew_deadline = seconds(2);
  invalid = ValidateLeaderElectionOptions(options);
  ASSERT_FALSE(invalid.has_value());
  EXPECT_THAT(invalid.error().message,
              HasSubstr("renew deadline (2s) must be greater than the retry period (2s)"));

  options = LeaderElectionOptions{};
  invalid = ValidateLeaderElectionOptions(options);
  ASSERT_FALSE(invalid.has_value());
  EXPECT_THAT(invalid.error().message, HasSubstr("identity is empty"));
}

TEST(LeaderElectionOptionsTest, DefaultIdentityIsThePodNameOrHostWithARandomSuffix) {
  ::setenv("POD_NAME", "tpujob-operator-7d9f-x2", 1);
  const std::string first = DefaultLeaderElectionIdentity();
  const std::string second = DefaultLeaderElectionIdentity();
  ::unsetenv("POD_NAME");
  EXPECT_TRUE(std::regex_match(first, std::regex("tpujob-operator-7d9f-x2_[0-9a-f]{10}"))) << first;
  EXPECT_NE(first, second);

  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(DefaultLeaderElectionIdentity().rfind(std::string(host) + "_", 0), 0u);
}

TEST(LeaderElectionOptionsTest, DefaultNamespaceIsTheServiceAccountsElseDefault) {
  const std::string path = ::testing::TempDir() + "/sa-namespace-" + std::to_string(::getpid());
  std::ofstream(path) << "tpujob-system\n";
  EXPECT_EQ(DefaultLeaderElectionNamespace(path), "tpujob-system");
  std::remove(path.c_str());
  EXPECT_EQ(DefaultLeaderElectionNamespace(path), "default");
}

// --- Manager wiring (real clock, sub-second timings) --------------------------------------------

class LeaderElectionManagerTest : public ::testing::Test {
 protected:
  LeaderElectionManagerTest() {
    options_.health_address = "127.0.0.1:0";
    options_.metrics_address = "";  // served with the health endpoints
    options_.cache_sync_timeout = seconds(10);
    LeaderElectionOptions election;
    election.ns = kNamespace;
    election.name = kLease;
    election.identity = "op-a";
    // Short enough for a quick test, long enough that a loaded machine never misses a renewal.
    election.lease_duration = seconds(3);
    election.renew_deadline = seconds(2);
    election.retry_period = milliseconds(100);
    options_.leader_election = election;
  }
  ~LeaderElectionManagerTest() override {
    if (manager_) manager_->Stop();
    if (run_.joinable()) run_.join();
  }

  // A Lease held by `holder` that does not expire during the test.
  void HoldLease(const std::string& holder) {
    Json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", kLease}, {"namespace", kNamespace}}},
                  {"spec", {{"holderIdentity", holder}, {"leaseDurationSeconds", 3600}}}};
    if (auto stored = fake_.Stored(Resource::Leases(), kNamespace, kLease)) {
      lease["metadata"] = (*stored)["metadata"];
    }
    fake_.Upsert(Resource::Leases(), lease);
  }

  void StartManager() {
    manager_ = std::make_unique<Manager>(fake_, options_);
    run_ = std::thread([this] {
      auto result = manager_->Run();
      std::lock_guard<std::mutex> guard(mu_);
      result_ = std::move(result);
      returned_ = true;
      cv_.notify_all();
    });
  }
  Json Spec() {
    return fake_.Stored(Resource::Leases(), kNamespace, kLease)
        .value_or(Json::object())
        .value("spec", Json::object());
  }
  // Waits (real time, bounded) for Run() to return.
  std::optional<kube::Status> AwaitRunReturned() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, kWait, [&] { return returned_; })) return std::nullopt;
    return result_;
  }
  // Polls `condition` (real time, bounded): Ready() and IsLeader() have no notification.
  static bool Within(const std::function<bool()>& condition) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (!condition()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return true;
  }

  FakeClient fake_;
  ManagerOptions options_;
  LogCapture log_;
  std::unique_ptr<Manager> manager_;
  std::thread run_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool returned_ = false;
  kube::Status result_;
};

TEST_F(LeaderElectionManagerTest, StandsByStartsWorkOnlyWithTheLeaseAndFailsWhenItIsLost) {
  HoldLease("op-b");
  StartManager();
  ASSERT_TRUE(
      log_.AwaitLine("msg=\"observed new leader\" lease=ops/tpujob-operator identity=op-a "
                     "holder=op-b"));
  EXPECT_NE(manager_->health_port(), 0) << "the endpoints answer while standing by";
  EXPECT_FALSE(manager_->IsLeader());
  EXPECT_FALSE(manager_->Ready());
  EXPECT_TRUE(fake_.list_calls().empty()) << "no informer runs on a standby";
  EXPECT_TRUE(fake_.watch_calls().empty()) << "no informer runs on a standby";

  HoldLease("");  // released by op-b
  ASSERT_TRUE(Within([&] { return manager_->Ready(); })) << log_.text();
  EXPECT_TRUE(manager_->IsLeader());
  EXPECT_GE(fake_.watch_calls().size(), 3u);  // pods, nodes, tpujobs (synced by watch lists)

  HoldLease("op-c");  // taken by another replica
  const auto result = AwaitRunReturned();
  ASSERT_TRUE(result.has_value()) << "Run() did not return after the Lease was lost";
  ASSERT_FALSE(result->has_value());
  EXPECT_THAT(result->error().message,
              HasSubstr("leader election lost (lease ops/tpujob-operator, identity op-a): the "
                        "lease is now held by op-c"));
  EXPECT_FALSE(manager_->IsLeader());
  EXPECT_FALSE(manager_->Ready());
  EXPECT_EQ(Spec().value("holderIdentity", ""), "op-c") << "a lost Lease is left alone";
}

TEST_F(LeaderElectionManagerTest, StopWhileStandingByReturnsWithoutTouchingTheLease) {
  HoldLease("op-b");
  StartManager();
  ASSERT_TRUE(log_.AwaitLine("holder=op-b"));
  manager_->Stop();
  const auto result = AwaitRunReturned();
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->has_value());
  EXPECT_TRUE(fake_.actions().empty());
}

TEST_F(LeaderElectionManagerTest, StopAsLeaderDrainsThenReleasesTheLease) {
  StartManager();
  ASSERT_TRUE(Within([&] { return manager_->Ready(); })) << log_.text();
  EXPECT_EQ(Spec().value("holderIdentity", ""), "op-a");
  manager_->Stop();
  const auto result = AwaitRunReturned();
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->has_value());
  EXPECT_EQ(Spec().value("holderIdentity", "?"), "");
  const std::string log = log_.text();
  ASSERT_NE(log.find("msg=\"released leader lease\""), std::string::npos) << log;
  EXPECT_LT(log.find("msg=\"shutting down: draining the work queue\""),
            log.find("msg=\"released leader lease\""));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::controller
