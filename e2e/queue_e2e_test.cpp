// The queue end to end (docs/architecture.md): gang admission in priority order as capacity
// frees up, nodes tainted by Kubernetes left out, re-issued jobs first, the queue timeout and its
// deadline across operator restarts. Jobs and nodes of each test carry an accelerator name of their
// own, so the tests' capacity never mixes.

#include <gtest/gtest.h>

#include <chrono>
#include <regex>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using Clock = std::chrono::steady_clock;

class QueueE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }

  void SetUp() override {
    static int counter = 0;
    prefix_ = "qu" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
  }
  void TearDown() override { DeleteTpuNodes(prefix_); }

  // A 2-worker job (a 2x4 slice of 4-chip hosts) of this test's accelerator.
  std::string Job(const std::string& name, int priority, const std::string& extra_spec = "") {
    return JobYaml(name, 2, "2x4", "  priority: " + std::to_string(priority) + "\n" + extra_spec,
                   false, "fault-tolerance/job-retry-num: \"2\"", accelerator_);
  }
  static std::string Phase(const std::string& ns, const std::string& job) {
    return JobField(ns, job, "{.status.phase}");
  }
  static bool Admitted(const std::string& ns, const std::string& job) {
    return JobField(ns, job, "{.status.conditions[?(@.type==\"Admitted\")].status}") == "True";
  }
  // Finishes a running job: worker 0 exits 0 (success policy Master without a Master).
  static void Finish(const std::string& ns, const std::string& job) {
    ASSERT_EQ(TerminatePod(ns, job + "-worker-0", 0, "Completed", "").exit_code, 0);
  }

  std::string prefix_;
  std::string accelerator_;
};

// Capacity for two gangs, five jobs of mixed priority: admitted two at a time, highest priority
// first, each finished job's capacity going to the next in line.
TEST_F(QueueE2E, GangsAreAdmittedInPriorityOrderAsCapacityFrees) {
  TestNamespace ns("qu-order");
  CreateTpuNodes(prefix_, 4, accelerator_, "2x4", "pool-" + prefix_);
  // Queued while the operator is down, so all five wait from the same moment and only the
  // priority (then the name) orders them.
  const std::vector<std::pair<std::string, int>> jobs = {
      {"j1", 0}, {"j2", 10}, {"j3", 5}, {"j4", 10}, {"j5", 1}};
  for (const auto& [name, priority] : jobs) {
    ASSERT_EQ(ApplyYaml(ns.name(), Job(name, priority)).exit_code, 0);
  }
  OperatorProcess op({"--namespace", ns.name()});

  ASSERT_TRUE(JobFieldBecomes(ns.name(), "j2", "{.status.phase}", "Running")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "j4", "{.status.phase}", "Running")) << op.Log();
  // The rest wait, in order, saying why.
  EXPECT_TRUE(JobFieldBecomes(ns.name(), "j3", "{.status.queuePosition}", "1")) << op.Log();
  EXPECT_TRUE(JobFieldBecomes(ns.name(), "j5", "{.status.queuePosition}", "2"));
  EXPECT_TRUE(JobFieldBecomes(ns.name(), "j1", "{.status.queuePosition}", "3"));
  const std::string why =
      JobField(ns.name(), "j3", "{.status.conditions[?(@.type==\"Admitted\")].message}");
  EXPECT_NE(why.find("needs 2 hosts"), std::string::npos) << why;
  EXPECT_EQ(JobPods(ns.name(), "j3").size(), 0u) << "pods created before admission";

  // Each finished job hands its capacity to the next in line.
  const std::vector<std::pair<std::string, std::string>> handovers = {
      {"j2", "j3"}, {"j4", "j5"}, {"j3", "j1"}};
  for (const auto& [done, next] : handovers) {
    EXPECT_EQ(Phase(ns.name(), next), "Queued") << next << " started early";
    Finish(ns.name(), done);
    ASSERT_TRUE(JobFieldBecomes(ns.name(), done, "{.status.phase}", "Succeeded")) << op.Log();
    const auto freed = Clock::now();
    ASSERT_TRUE(Eventually([&] { return Admitted(ns.name(), next); })) << op.Log();
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - freed).count();
    std::printf("capacity of %s to %s: admitted %lld ms after Succeeded was seen\n", done.c_str(),
                next.c_str(), static_cast<long long>(ms));
    ASSERT_TRUE(JobFieldBecomes(ns.name(), next, "{.status.phase}", "Running")) << op.Log();
  }
  // A multi-host attempt runs in one pool, pinned.
  EXPECT_EQ(
      Get(ns.name(), "pod j1-worker-1", "{.spec.nodeSelector.cloud\\.google\\.com/gke-nodepool}"),
      "pool-" + prefix_);
  EXPECT_EQ(JobField(ns.name(), "j1", "{.status.nodePool}"), "pool-" + prefix_);
}

// A re-issued job goes before a new one of higher priority. (With preemption on, the new job
// would take the re-issued one's place as soon as it ran again: PreemptionE2E.)
// A node still carrying a NoSchedule taint Kubernetes sets on nodes unfit for new pods (a
// node.kubernetes.io/ key: not-ready is on every new node until the node controller lifts it)
// is no capacity: the gang waits and its message names the node, instead of being admitted,
// left unschedulable and released. Once the taint is gone it runs, on its first attempt. The
// key here is one the node controller leaves alone, so the test decides when it goes.
TEST_F(QueueE2E, ANodeWithAKubernetesNoScheduleTaintIsNoCapacityUntilItIsLifted) {
  TestNamespace ns("qu-taint");
  CreateTpuNodes(prefix_, 2, accelerator_, "2x4", "pool-" + prefix_);
  const std::string node = prefix_ + "-1";
  const std::string taint = "node.kubernetes.io/e2e-not-ready";
  ASSERT_EQ(Kubectl("taint node " + node + " " + taint + ":NoSchedule").exit_code, 0);
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(ApplyYaml(ns.name(), Job("tainted", 0)).exit_code, 0);

  const std::string admitted = "{.status.conditions[?(@.type==\"Admitted\")]";
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "tainted", admitted + ".reason}", "WaitingForCapacity"))
      << op.Log();
  const std::string why = JobField(ns.name(), "tainted", admitted + ".message}");
  EXPECT_NE(why.find("1 node left out until Kubernetes lifts a NoSchedule taint (" + node + " " +
                     taint + ")"),
            std::string::npos)
      << why;
  EXPECT_EQ(JobPods(ns.name(), "tainted").size(), 0u) << "pods created before admission";

  ASSERT_EQ(Kubectl("taint node " + node + " " + taint + ":NoSchedule-").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "tainted", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "tainted", "{.status.attempt}"), "1");
  EXPECT_EQ(JobPods(ns.name(), "tainted").size(), 2u);
}

TEST_F(QueueE2E, ReissuedJobGoesBeforeAHigherPriorityNewJob) {
  TestNamespace ns("qu-reissue");
  CreateTpuNodes(prefix_, 3, accelerator_, "2x4", "pool-" + prefix_);
  OperatorProcess op(
      {"--namespace", ns.name(), "--max-cordoned-fraction", "1", "--enable-preemption=false"});
  ASSERT_EQ(ApplyYaml(ns.name(), Job("low", 0)).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "low", "{.status.phase}", "Running")) << op.Log();
  ASSERT_EQ(ApplyYaml(ns.name(), Job("high", 100)).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "high", "{.status.queuePosition}", "1")) << op.Log();

  // The node of low's worker 0 breaks: low is re-issued; with that node cordoned, the two
  // healthy nodes left fit one gang: low's re-issue takes it.
  const std::string node = Get(ns.name(), "pod low-worker-0", "{.spec.nodeName}");
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "ECC").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "low", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(
      JobFieldBecomes(ns.name(), "low", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobField(ns.name(), "low", "{.status.reissued}"), "true");
  EXPECT_EQ(Phase(ns.name(), "high"), "Queued");
  EXPECT_TRUE(JobFieldBecomes(ns.name(), "high", "{.status.queuePosition}", "1"));
  EXPECT_EQ(JobPods(ns.name(), "high").size(), 0u);
}

// Seconds since the epoch of an RFC 3339 timestamp with whole seconds.
int64_t EpochSeconds(const std::string& rfc3339) {
  return std::stoll(Trim(RunCommand("date -u -d '" + rfc3339 + "' +%s", false).output));
}

// The epoch milliseconds of the operator's log line reporting the job's move to Failed.
std::optional<int64_t> FailedAtMs(const std::string& log, const std::string& job) {
  const std::regex line("ts=(\\S+) [^\\n]*msg=\"phase changed\" tpujob=\\S+/" + job +
                        " from=\\S+ to=Failed");
  std::smatch m;
  if (!std::regex_search(log, m, line)) return std::nullopt;
  const auto out = Trim(RunCommand("date -u -d '" + m[1].str() + "' +%s%3N", false).output);
  return std::stoll(out);
}

// A queue timeout of 5 s fails a job that cannot be placed, at its deadline.
TEST_F(QueueE2E, QueueTimeoutFiresAtTheDeadline) {
  TestNamespace ns("qu-timeout");
  OperatorProcess op({"--namespace", ns.name()});  // no node has this test's accelerator
  ASSERT_EQ(ApplyYaml(ns.name(), Job("tq", 0, "  queueTimeoutSeconds: 5\n")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "tq", "{.status.phase}", "Queued")) << op.Log();
  const std::string why =
      JobField(ns.name(), "tq", "{.status.conditions[?(@.type==\"Admitted\")].message}");
  ASSERT_TRUE(
      JobFieldBecomes(ns.name(), "tq", "{.status.phase}", "Failed", std::chrono::seconds(40)))
      << op.Log();
  EXPECT_EQ(JobField(ns.name(), "tq", "{.status.conditions[?(@.type==\"Failed\")].reason}"),
            "QueueTimeout");
  // queuedAt has whole seconds: the 5 s count from the end of its second, so never early.
  const int64_t deadline = EpochSeconds(JobField(ns.name(), "tq", "{.status.queuedAt}")) + 1 + 5;
  const auto failed_ms = FailedAtMs(op.Log(), "tq");
  ASSERT_TRUE(failed_ms.has_value()) << op.Log();
  const int64_t drift_ms = *failed_ms - deadline * 1000;
  std::printf("queue timeout drift: %lld ms after the deadline\n",
              static_cast<long long>(drift_ms));
  // Never early. How late is printed, not asserted: the 40 s wait bounds it, and with no
  // periodic resync in the operator only the deadline's own timer can fail it within that.
  EXPECT_GE(drift_ms, 0);
}

// The deadline lives in the status: an operator restarted while the job waits keeps it. The
// timeout (15 s) outlasts the 5 s the operator is down plus its restart, so the restarted one
// meets the deadline still ahead.
TEST_F(QueueE2E, RestartedOperatorKeepsTheQueueDeadline) {
  TestNamespace ns("qu-restart");
  std::string queued_at;
  {
    OperatorProcess op({"--namespace", ns.name()});
    ASSERT_EQ(ApplyYaml(ns.name(), Job("rq", 0, "  queueTimeoutSeconds: 15\n")).exit_code, 0);
    ASSERT_TRUE(JobFieldBecomes(ns.name(), "rq", "{.status.phase}", "Queued")) << op.Log();
    queued_at = JobField(ns.name(), "rq", "{.status.queuedAt}");
    op.Kill();
  }
  // Down for a while; a new process knows nothing but what the status says.
  ASSERT_FALSE(
      Eventually([&] { return Phase(ns.name(), "rq") != "Queued"; }, std::chrono::seconds(5)));
  OperatorProcess restarted({"--namespace", ns.name()});
  ASSERT_TRUE(
      JobFieldBecomes(ns.name(), "rq", "{.status.phase}", "Failed", std::chrono::seconds(40)))
      << restarted.Log();
  EXPECT_EQ(JobField(ns.name(), "rq", "{.status.queuedAt}"), queued_at);
  const int64_t deadline = EpochSeconds(queued_at) + 1 + 15;
  const auto failed_ms = FailedAtMs(restarted.Log(), "rq");
  ASSERT_TRUE(failed_ms.has_value()) << restarted.Log();
  EXPECT_GE(*failed_ms - deadline * 1000, 0);  // never early; how late is not asserted
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
