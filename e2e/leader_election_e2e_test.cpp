// Leader election end to end: two operator replicas with --leader-elect against a real control
// plane. One holds the Lease and reconciles, the other stands by; the standby takes over when
// the leader is killed (within the lease duration plus a retry period) or releases the Lease on
// SIGTERM (at its next retry). A leader frozen with SIGSTOP and resumed after the takeover
// writes nothing — checked in the API server's audit log by User-Agent, which carries each
// replica's identity — and exits on its own.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/objects.h"
#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

constexpr char kLease[] = "tpujob-operator-e2e";
constexpr double kLeaseDurationSeconds = 15;  // the default the replicas run with

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

std::string HttpBody(int port, const std::string& path) {
  return RunCommand("curl -s http://127.0.0.1:" + std::to_string(port) + path, false).output;
}

size_t Occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::string AuditLogPath() { return ClusterDir() + "/logs/audit.log"; }

// A create/update/patch/delete the API server received, from its audit log.
struct AuditedWrite {
  std::string verb;
  std::string object;  // "resource namespace/name"
  std::string received_text;
  WallTime received;
};

// The writes whose User-Agent names `identity` ("tpujob-operator/<version> (<identity>)").
std::vector<AuditedWrite> WritesBy(const std::string& identity) {
  std::vector<AuditedWrite> writes;
  std::ifstream in(AuditLogPath());
  const std::string tag = "(" + identity + ")";
  for (std::string line; std::getline(in, line);) {
    if (line.find(tag) == std::string::npos) continue;  // cheap filter before parsing
    const auto event = nlohmann::json::parse(line, nullptr, false);
    if (!event.is_object() || event.value("userAgent", "").find(tag) == std::string::npos) {
      continue;
    }
    const std::string verb = event.value("verb", "");
    if (verb != "create" && verb != "update" && verb != "patch" && verb != "delete" &&
        verb != "deletecollection") {
      continue;
    }
    const auto ref = event.value("objectRef", nlohmann::json::object());
    AuditedWrite write{
        verb,
        ref.value("resource", "") + " " + ref.value("namespace", "") + "/" + ref.value("name", ""),
        event.value("requestReceivedTimestamp", ""),
        {}};
    const auto received = cache::ParseRfc3339(write.received_text);
    if (!received) {
      ADD_FAILURE() << "unparsable requestReceivedTimestamp in: " << line;
      continue;
    }
    write.received = *received;
    writes.push_back(std::move(write));
  }
  return writes;
}

std::string Describe(const std::vector<AuditedWrite>& writes) {
  std::string out;
  for (const auto& w : writes) out += "  " + w.received_text + " " + w.verb + " " + w.object + "\n";
  return out;
}

class LeaderElectionE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }

  void SetUp() override {
    static int counter = 0;
    prefix_ = "le" + std::to_string(::getpid() % 100000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
    ns_ = std::make_unique<TestNamespace>("le");
    // Two gangs of two 4-chip hosts: one job before the takeover, one after.
    CreateTpuNodes(prefix_, 4, accelerator_, "2x4", "pool-" + prefix_);
  }
  void TearDown() override {
    if (HasFailure()) {
      for (const auto& [identity, op] : replicas_) {
        std::printf("----- log of replica %s -----\n%s\n", identity.c_str(), op->Log().c_str());
      }
    }
    replicas_.clear();
    DeleteTpuNodes(prefix_);
  }

  const std::string& ns() const { return ns_->name(); }
  std::string Identity(const std::string& suffix) const { return prefix_ + "-" + suffix; }

  // A replica with leader election on and the default timings (OperatorProcess gives it ports
  // of its own).
  OperatorProcess& StartReplica(const std::string& identity) {
    auto op = std::make_unique<OperatorProcess>(std::vector<std::string>{
        "--namespace", ns(), "--leader-elect", "--leader-elect-namespace", ns(),
        "--leader-elect-id", kLease, "--leader-elect-identity", identity});
    OperatorProcess& ref = *op;
    replicas_.emplace_back(identity, std::move(op));
    return ref;
  }

  // A field of the Lease; "" while it does not exist.
  std::string LeaseField(const std::string& jsonpath) const {
    return Trim(Kubectl(std::string("get lease ") + kLease + " -n " + ns() +
                            " --ignore-not-found -o jsonpath='" + jsonpath + "'",
                        false)
                    .output);
  }
  std::string Holder() const { return LeaseField("{.spec.holderIdentity}"); }
  std::string Transitions() const { return LeaseField("{.spec.leaseTransitions}"); }

  static ::testing::AssertionResult BecomesReady(OperatorProcess& op) {
    std::string body;
    if (Eventually([&] { return (body = HttpBody(op.port(), "/readyz")) == "ok\n"; }, seconds(60),
                   milliseconds(100))) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "/readyz says \"" << body << "\"\n" << op.Log();
  }
  static ::testing::AssertionResult StandsBy(OperatorProcess& op) {
    std::string body;
    if (Eventually([&] {
          body = HttpBody(op.port(), "/readyz");
          return body.rfind("standing by", 0) == 0;
        })) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "/readyz says \"" << body << "\"\n" << op.Log();
  }
  // Waits until `identity` holds the Lease; returns the seconds since `since`, or -1.
  double AwaitHolder(const std::string& identity, SteadyClock::time_point since) const {
    if (!Eventually([&] { return Holder() == identity; }, seconds(45), milliseconds(100))) {
      return -1;
    }
    return SecondsSince(since);
  }

  ::testing::AssertionResult JobRuns(const std::string& job) {
    if (auto running = JobFieldBecomes(ns(), job, "{.status.phase}", "Running", seconds(60));
        !running) {
      return running;
    }
    const auto pods = JobPods(ns(), job);
    if (pods != std::vector<std::string>{job + "-worker-0", job + "-worker-1"}) {
      return ::testing::AssertionFailure()
             << "pods of " << job << ": " << ::testing::PrintToString(pods);
    }
    return ::testing::AssertionSuccess();
  }
  CommandResult CreateJob(const std::string& name) {
    return ApplyYaml(ns(), JobYaml(name, 2, "2x4", "", false, "", accelerator_));
  }

  std::string prefix_;
  std::string accelerator_;
  std::unique_ptr<TestNamespace> ns_;
  std::vector<std::pair<std::string, std::unique_ptr<OperatorProcess>>> replicas_;
};

TEST_F(LeaderElectionE2E, OneReplicaLeadsAndTheStandbyTakesOverWithinTwentySecondsOfASigkill) {
  ASSERT_TRUE(std::ifstream(AuditLogPath()).good())
      << AuditLogPath() << " is missing: the cluster predates audit logging; run e2e/cluster "
      << "down, then up";
  const std::string a = Identity("a");
  const std::string b = Identity("b");
  OperatorProcess& op_a = StartReplica(a);
  OperatorProcess& op_b = StartReplica(b);
  std::string holder;
  ASSERT_TRUE(Eventually([&] { return (holder = Holder()) == a || holder == b; }, seconds(30)))
      << "holder: \"" << holder << "\"";
  OperatorProcess& leader = holder == a ? op_a : op_b;
  OperatorProcess& standby = holder == a ? op_b : op_a;
  const std::string standby_identity = holder == a ? b : a;
  ASSERT_TRUE(BecomesReady(leader));
  ASSERT_TRUE(StandsBy(standby));
  EXPECT_EQ(HttpStatus(standby.port(), "/readyz"), 200);
  EXPECT_EQ(HttpStatus(standby.port(), "/healthz"), 200);
  EXPECT_NE(HttpBody(standby.port(), "/readyz").find("held by " + holder), std::string::npos);

  // Only the leader reconciles.
  ASSERT_EQ(CreateJob("before").exit_code, 0);
  ASSERT_TRUE(JobRuns("before"));
  EXPECT_EQ(Holder(), holder);
  EXPECT_EQ(standby.Log().find("acquired leader lease"), std::string::npos) << standby.Log();
  EXPECT_EQ(standby.Log().find("caches synced"), std::string::npos) << standby.Log();
  // Its only writes are tries to create the Lease (both replicas started at once).
  std::vector<AuditedWrite> standby_writes;
  for (const auto& write : WritesBy(standby_identity)) {
    if (write.object.rfind("leases ", 0) != 0) standby_writes.push_back(write);
  }
  EXPECT_TRUE(standby_writes.empty()) << Describe(standby_writes);
  EXPECT_GT(WritesBy(holder).size(), 0u) << "the leader's writes are in the audit log";

  const auto killed = SteadyClock::now();
  leader.Kill();
  const double takeover = AwaitHolder(standby_identity, killed);
  ASSERT_GE(takeover, 0) << "the standby never took the Lease; holder: " << Holder() << "\n"
                         << standby.Log();
  std::printf("[ takeover ] SIGKILL of the leader -> the standby holds the Lease: %.1f s\n",
              takeover);
  RecordProperty("sigkill_takeover_ms", static_cast<int>(takeover * 1000));
  EXPECT_LT(takeover, 20.0);
  EXPECT_EQ(Transitions(), "1");
  EXPECT_NE(standby.Log().find("msg=\"acquired leader lease\" lease=" + ns() + "/" + kLease +
                               " identity=" + standby_identity),
            std::string::npos)
      << standby.Log();

  // The new leader carries on: a job created after the takeover gets its pods, the running
  // one keeps its own.
  ASSERT_TRUE(BecomesReady(standby));
  ASSERT_EQ(CreateJob("after").exit_code, 0);
  EXPECT_TRUE(JobRuns("after"));
  EXPECT_TRUE(JobRuns("before"));
}

TEST_F(LeaderElectionE2E, PausedLeaderResumedAfterATakeoverWritesNothingAndExits) {
  ASSERT_TRUE(std::ifstream(AuditLogPath()).good())
      << AuditLogPath() << " is missing: the cluster predates audit logging; run e2e/cluster "
      << "down, then up";
  const std::string a = Identity("a");
  const std::string b = Identity("b");
  OperatorProcess& op_a = StartReplica(a);
  ASSERT_TRUE(Eventually([&] { return Holder() == a; }, seconds(30))) << op_a.Log();
  ASSERT_TRUE(BecomesReady(op_a));
  OperatorProcess& op_b = StartReplica(b);
  ASSERT_TRUE(StandsBy(op_b));
  ASSERT_EQ(CreateJob("before").exit_code, 0);
  ASSERT_TRUE(JobRuns("before"));
  const size_t writes_before_pause = WritesBy(a).size();
  ASSERT_GT(writes_before_pause, 0u) << "the audit log must show the leader's own writes";

  // Frozen: its Lease is no longer renewed, its watches buffer what happens meanwhile.
  const auto paused = SteadyClock::now();
  op_a.Pause();
  // Work the frozen leader would act on once it runs again: a job it has never seen.
  ASSERT_EQ(CreateJob("after").exit_code, 0);
  const double takeover = AwaitHolder(b, paused);
  ASSERT_GE(takeover, 0) << "the standby never took the Lease; holder: " << Holder() << "\n"
                         << op_b.Log();
  std::printf("[ takeover ] SIGSTOP of the leader -> the standby holds the Lease: %.1f s\n",
              takeover);
  RecordProperty("sigstop_takeover_ms", static_cast<int>(takeover * 1000));

  const WallTime resumed = std::chrono::system_clock::now();
  op_a.Resume();
  const auto resumed_steady = SteadyClock::now();
  const int exit_code = op_a.WaitForExit(seconds(30));
  std::printf("[ resumed  ] the resumed replica exited with %d after %.1f s\n", exit_code,
              SecondsSince(resumed_steady));
  EXPECT_EQ(exit_code, 1) << "-2 means still running 30 s after SIGCONT\n" << op_a.Log();
  const std::string log = op_a.Log();
  EXPECT_NE(log.find("level=error msg=\"leader election lost\" lease=" + ns() + "/" + kLease +
                     " identity=" + a),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("msg=\"operator failed\" error=\"cancelled: leader election lost"),
            std::string::npos)
      << log;
  std::printf("[ resumed  ] writes it refused before exiting: %zu\n",
              Occurrences(log, "write not sent"));

  // The new leader handles the job the frozen one never got to.
  EXPECT_TRUE(JobRuns("after"));
  EXPECT_EQ(Holder(), b);

  // The audit log (written before each answer) now holds every request of the resumed process:
  // none is a write received after SIGCONT.
  std::vector<AuditedWrite> after_resume;
  for (const auto& write : WritesBy(a)) {
    if (write.received >= resumed) after_resume.push_back(write);
  }
  EXPECT_TRUE(after_resume.empty()) << "writes by the resumed replica:\n" << Describe(after_resume);
  EXPECT_GT(WritesBy(b).size(), 0u) << "the new leader's writes are in the audit log";
}

TEST_F(LeaderElectionE2E, SigtermReleasesTheLeaseAndTheStandbyTakesOverAtOnce) {
  const std::string a = Identity("a");
  const std::string b = Identity("b");
  OperatorProcess& op_a = StartReplica(a);
  ASSERT_TRUE(Eventually([&] { return Holder() == a; }, seconds(30))) << op_a.Log();
  ASSERT_TRUE(BecomesReady(op_a));
  OperatorProcess& op_b = StartReplica(b);
  ASSERT_TRUE(StandsBy(op_b));

  const auto stopped = SteadyClock::now();
  EXPECT_EQ(op_a.StopWith(SIGTERM), 0) << op_a.Log();
  EXPECT_NE(op_a.Log().find("msg=\"released leader lease\" lease=" + ns() + "/" + kLease +
                            " identity=" + a),
            std::string::npos)
      << op_a.Log();
  const double takeover = AwaitHolder(b, stopped);
  ASSERT_GE(takeover, 0) << "holder: " << Holder() << "\n" << op_b.Log();
  std::printf("[ takeover ] SIGTERM of the leader -> the standby holds the Lease: %.1f s\n",
              takeover);
  RecordProperty("sigterm_takeover_ms", static_cast<int>(takeover * 1000));
  EXPECT_LT(takeover, kLeaseDurationSeconds / 2) << "a released Lease is taken at the next try";
  EXPECT_EQ(Transitions(), "1");

  ASSERT_TRUE(BecomesReady(op_b));
  ASSERT_EQ(CreateJob("after").exit_code, 0);
  EXPECT_TRUE(JobRuns("after"));
}

}  // namespace
}  // namespace tpujob::e2e
