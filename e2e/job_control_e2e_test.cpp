// Job control end to end: spec.suspend (the capacity goes to the next job, resuming keeps the
// attempt and retries, an operator SIGKILL in between changes nothing),
// spec.ttlSecondsAfterFinished (also when no operator ran at that moment) and
// spec.activeDeadlineSeconds, asserted with kubectl.

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool JobExists(const std::string& ns, const std::string& job) {
  // Only NotFound counts as gone: a read that failed proves no deletion.
  const auto got = TestClient().Get(kube::Resource::TPUJobs(), ns, job);
  return got || !got.error().IsNotFound();
}

class JobControlE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }

  // Two nodes of an accelerator of the test's own: room for exactly one 2-host job.
  void SetUp() override {
    static int counter = 0;
    prefix_ = "jc" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
    CreateTpuNodes(prefix_, 2, accelerator_, "2x4", "pool-" + prefix_);
  }
  void TearDown() override { DeleteTpuNodes(prefix_); }

  std::string Job(const std::string& name, const std::string& extra_spec = "") {
    return JobYaml(name, 2, "2x4", extra_spec, false, "fault-tolerance/job-retry-num: \"2\"",
                   accelerator_);
  }
  static CommandResult SetSuspend(const std::string& ns, const std::string& job, bool suspend) {
    return Kubectl("patch tpujob " + job + " -n " + ns +
                   " --type=merge -p '{\"spec\":{\"suspend\":" + (suspend ? "true" : "false") +
                   "}}'");
  }

  // Job "short" with ttlSecondsAfterFinished 5, run until worker 0 exits 0 and it Succeeded.
  void FinishShortLivedJob(const std::string& ns, OperatorProcess& op) {
    ASSERT_EQ(ApplyYaml(ns, Job("short", "  ttlSecondsAfterFinished: 5\n")).exit_code, 0);
    ASSERT_TRUE(JobFieldBecomes(ns, "short", "{.status.phase}", "Running")) << op.Log();
    ASSERT_EQ(TerminatePod(ns, "short-worker-0", 0).exit_code, 0);
    ASSERT_TRUE(JobFieldBecomes(ns, "short", "{.status.phase}", "Succeeded")) << op.Log();
  }

  std::string prefix_;
  std::string accelerator_;
};

// Whether every pod of `job` is gone within 30 s; the failure lists those left.
::testing::AssertionResult PodsGone(const std::string& ns, const std::string& job) {
  if (Eventually([&] { return JobPods(ns, job).empty(); }, std::chrono::seconds(30),
                 std::chrono::milliseconds(200))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "pods left: " << testing::PrintToString(JobPods(ns, job));
}

TEST_F(JobControlE2E, SuspendReleasesTheCapacityAndResumeRunsTheSameAttempt) {
  TestNamespace ns("jc-suspend");
  const std::string n = ns.name();
  auto op = std::make_unique<OperatorProcess>(std::vector<std::string>{"--namespace", n});
  // A short grace period: the pods get SIGTERM, then 5 s to checkpoint.
  ASSERT_EQ(ApplyYaml(n, Job("first", "  faultTolerance: {maintenanceGracePeriodSeconds: 5}\n"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "first", "{.status.phase}", "Running")) << op->Log();
  ASSERT_EQ(ApplyYaml(n, Job("second")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "second", "{.status.conditions[?(@.type==\"Admitted\")].reason}",
                              "WaitingForCapacity"))
      << op->Log();
  const std::string attempt = JobField(n, "first", "{.status.attempt}");
  const std::string retries = JobField(n, "first", "{.status.jobRetries}");

  ASSERT_EQ(SetSuspend(n, "first", true).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "first", "{.status.phase}", "Suspended")) << op->Log();
  EXPECT_EQ(JobField(n, "first", "{.status.conditions[?(@.type==\"Suspended\")].reason}"),
            "JobSuspended");
  // The pods go, and their capacity goes to the job waiting behind.
  ASSERT_TRUE(PodsGone(n, "first"));
  ASSERT_TRUE(JobFieldBecomes(n, "second", "{.status.phase}", "Running")) << op->Log();
  // A suspended job has no live goodput gauge (its low goodput is its owner's choice); the
  // running one has.
  const std::string metrics =
      RunCommand("curl -sf http://127.0.0.1:" + std::to_string(op->metrics_port()) + "/metrics",
                 false)
          .output;
  const std::string gauge = "tpujob_job_goodput_ratio{job_namespace=\"" + n + "\",tpujob=";
  EXPECT_EQ(metrics.find(gauge + "\"first\"}"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find(gauge + "\"second\"}"), std::string::npos) << metrics;

  // An operator killed and started again while the job is suspended changes nothing.
  op->Kill();
  op = std::make_unique<OperatorProcess>(std::vector<std::string>{"--namespace", n});
  ASSERT_TRUE(Eventually([&] { return HttpStatus(op->port(), "/readyz") == 200; },
                         std::chrono::seconds(30), std::chrono::milliseconds(100)))
      << op->Log();
  const std::string version = JobField(n, "first", "{.metadata.resourceVersion}");
  std::this_thread::sleep_for(std::chrono::seconds(2));  // what a confused operator would do
  EXPECT_EQ(JobField(n, "first", "{.status.phase}"), "Suspended");
  EXPECT_EQ(JobField(n, "first", "{.metadata.resourceVersion}"), version);
  EXPECT_TRUE(JobPods(n, "first").empty());

  // The second job finishes; the first, resumed, runs again as the same attempt.
  ASSERT_EQ(TerminatePod(n, "second-worker-0", 0).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "second", "{.status.phase}", "Succeeded")) << op->Log();
  ASSERT_EQ(SetSuspend(n, "first", false).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "first", "{.status.phase}", "Running")) << op->Log();
  EXPECT_EQ(JobField(n, "first", "{.status.attempt}"), attempt);
  EXPECT_EQ(JobField(n, "first", "{.status.jobRetries}"), retries);
  EXPECT_EQ(JobField(n, "first", "{.status.conditions[?(@.type==\"Suspended\")].reason}"),
            "JobResumed");
  const std::string events = DescribeEvents(JobEvents(n, "first"));
  EXPECT_NE(events.find("Suspended"), std::string::npos) << events;
  EXPECT_NE(events.find("Resumed"), std::string::npos) << events;
  // Time suspended is accounted as such.
  EXPECT_NE(JobField(n, "first", "{.status.goodput.lostSeconds.suspended}"), "");
}

TEST_F(JobControlE2E, AJobCreatedSuspendedIsNotAdmitted) {
  TestNamespace ns("jc-created");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(ApplyYaml(n, Job("later", "  suspend: true\n")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "later", "{.status.phase}", "Suspended")) << op.Log();
  // A job queued behind it is not held up by it.
  ASSERT_EQ(ApplyYaml(n, Job("now")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "now", "{.status.phase}", "Running")) << op.Log();
  EXPECT_TRUE(JobPods(n, "later").empty());
  EXPECT_EQ(JobField(n, "later", "{.status.startTime}"), "");
}

TEST_F(JobControlE2E, TtlDeletesAFinishedJobAndItsPods) {
  TestNamespace ns("jc-ttl");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  FinishShortLivedJob(n, op);
  if (HasFatalFailure()) return;
  const auto finished = Clock::now();
  const auto completed = cache::ParseRfc3339(JobField(n, "short", "{.status.completionTime}"));
  ASSERT_TRUE(completed.has_value()) << "no completionTime";
  ASSERT_TRUE(Eventually([&] { return !JobExists(n, "short"); }, std::chrono::seconds(15),
                         std::chrono::milliseconds(100)))
      << op.Log();
  std::cout << "deleted " << SecondsSince(finished) << " s after Succeeded was seen\n";
  // Never early: completionTime has whole seconds, so the job may go no sooner than 5 s after
  // its second. How late is not asserted: the 15 s wait bounds it, and with no periodic resync
  // in the operator only the TTL's own timer can delete it within that.
  const auto deleted_seen = std::chrono::system_clock::now();
  EXPECT_GE(std::chrono::duration<double>(deleted_seen - *completed).count(), 5.0);
  EXPECT_TRUE(PodsGone(n, "short")) << "the garbage collector left them";
}

TEST_F(JobControlE2E, TtlDeletesAJobThatExpiredWhileNoOperatorRan) {
  TestNamespace ns("jc-ttl-down");
  const std::string n = ns.name();
  auto op = std::make_unique<OperatorProcess>(std::vector<std::string>{"--namespace", n});
  FinishShortLivedJob(n, *op);
  if (HasFatalFailure()) return;
  const auto finished = Clock::now();
  op->Kill();
  std::this_thread::sleep_until(finished + std::chrono::seconds(8));
  EXPECT_TRUE(JobExists(n, "short")) << "deleted with no operator running";
  const auto started = Clock::now();
  op = std::make_unique<OperatorProcess>(std::vector<std::string>{"--namespace", n});
  ASSERT_TRUE(Eventually([&] { return !JobExists(n, "short"); }, std::chrono::seconds(30),
                         std::chrono::milliseconds(100)))
      << op->Log();
  std::cout << "deleted " << SecondsSince(started) << " s after the operator started\n";
  EXPECT_TRUE(PodsGone(n, "short"));
}

TEST_F(JobControlE2E, ActiveDeadlineFailsTheJobAfterItsSeconds) {
  TestNamespace ns("jc-deadline");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  const auto created = Clock::now();
  ASSERT_EQ(ApplyYaml(n, Job("bounded", "  activeDeadlineSeconds: 5\n")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "bounded", "{.status.phase}", "Running")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "bounded", "{.status.phase}", "Failed", std::chrono::seconds(20)))
      << op.Log();
  const double after = SecondsSince(created);
  std::cout << "Failed seen " << after << " s after the job was created\n";
  // Never before the deadline. How late is not asserted: the 20 s wait bounds it, and with no
  // periodic resync in the operator only the deadline's own timer can fail it within that.
  EXPECT_GE(after, 5.0);
  EXPECT_EQ(JobField(n, "bounded", "{.status.conditions[?(@.type==\"Failed\")].reason}"),
            "DeadlineExceeded");
  EXPECT_TRUE(PodsGone(n, "bounded"));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
