// Gang preemption end to end: a waiting job of higher priority stops a running one of lower
// priority (its pods deleted with its grace period, no retry used), runs, and the preempted job
// runs again after it; equal priority, `preemptionPolicy: Never` and `spec.preemptible: false`
// never preempt. Asserted with kubectl.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

class PreemptionE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }

  // Two nodes of an accelerator of the test's own, in one pool: room for one 2-host job.
  void SetUp() override {
    static int counter = 0;
    prefix_ = "pe" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
    CreateTpuNodes(prefix_, 2, accelerator_, "2x4", "pool-" + prefix_);
  }
  void TearDown() override { DeleteTpuNodes(prefix_); }

  // A 2-host job with `priority` and a 5 s grace period to checkpoint when stopped.
  std::string Job(const std::string& name, int priority, const std::string& extra_spec = "") {
    return JobYaml(name, 2, "2x4",
                   "  priority: " + std::to_string(priority) +
                       "\n  faultTolerance: {maintenanceGracePeriodSeconds: 5}\n" + extra_spec,
                   false, "", accelerator_);
  }

  std::string prefix_;
  std::string accelerator_;
};

constexpr char kAdmittedReason[] = "{.status.conditions[?(@.type==\"Admitted\")].reason}";

TEST_F(PreemptionE2E, AHigherPriorityJobPreemptsTheLowOneWhichRunsAgainAfterIt) {
  TestNamespace ns("pe-preempt");
  const std::string n = ns.name();
  PodWatch watch(n);
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(ApplyYaml(n, Job("low", 1)).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "low", "{.status.phase}", "Running")) << op.Log();
  const std::string retries = JobField(n, "low", "{.status.jobRetries}");

  ASSERT_EQ(ApplyYaml(n, Job("high", 100)).exit_code, 0);
  ASSERT_TRUE(
      JobFieldBecomes(n, "low", "{.status.conditions[?(@.type==\"Preempted\")].status}", "True"))
      << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "high", "{.status.phase}", "Running")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "low", "{.status.phase}", "Queued")) << op.Log();
  // It waits by its priority (the queue says for what); marked preempted until it runs again.
  EXPECT_EQ(JobField(n, "low", kAdmittedReason), "WaitingForCapacity");
  EXPECT_EQ(JobField(n, "low", "{.status.conditions[?(@.type==\"Preempted\")].status}"), "True");
  EXPECT_EQ(JobField(n, "low", "{.status.jobRetries}"), retries);  // no retry used
  EXPECT_EQ(JobField(n, "low", "{.status.attempt}"), "2");
  EXPECT_EQ(JobField(n, "low", "{.status.preemptions}"), "1");
  EXPECT_EQ(JobField(n, "low", "{.status.preemptedBy}"), n + "/high");
  EXPECT_EQ(JobField(n, "low", "{.status.faults[0].kind}/{.status.faults[0].action}"),
            "Preempted/PreemptJob");
  // Its pods were stopped like a maintenance event: SIGTERM, then its 5 s to checkpoint.
  EXPECT_NE(watch.Raw().find("grace=5"), std::string::npos) << watch.Raw();
  // Both jobs say who preempted whom and why.
  const auto low_events = JobEvents(n, "low");
  EXPECT_EQ(
      EventsWith(low_events, "Preempted", "preempted by " + n + "/high (priority 100)").size(), 1u)
      << DescribeEvents(low_events);
  const auto high_events = JobEvents(n, "high");
  EXPECT_EQ(EventsWith(high_events, "Preempting", "preempting " + n + "/low (priority 1)").size(),
            1u)
      << DescribeEvents(high_events);
  const std::string metrics =
      RunCommand("curl -sf http://127.0.0.1:" + std::to_string(op.metrics_port()) + "/metrics",
                 false)
          .output;
  EXPECT_NE(metrics.find("tpujob_job_preemptions_total{job_namespace=\"" + n + "\"} 1"),
            std::string::npos)
      << metrics;

  // The high job finishes; the low one runs again, on the capacity it gave up.
  ASSERT_EQ(TerminatePod(n, "high-worker-0", 0).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "high", "{.status.phase}", "Succeeded")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "low", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(n, "low", "{.status.attempt}"), "2");
  EXPECT_EQ(JobField(n, "low", "{.status.jobRetries}"), retries);
  EXPECT_EQ(JobField(n, "low",
                     "{.status.conditions[?(@.type==\"Preempted\")].status}/"
                     "{.status.conditions[?(@.type==\"Preempted\")].reason}"),
            "False/Readmitted");
  EXPECT_NE(JobField(n, "low", "{.status.goodput.lostSeconds.preemption}"), "");
  const auto report = watch.Check();
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
}

TEST_F(PreemptionE2E, EqualPriorityPreemptionPolicyNeverAndNonPreemptibleJobsNeverPreempt) {
  TestNamespace ns("pe-never");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  ASSERT_EQ(ApplyYaml(n, Job("low", 10)).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "low", "{.status.phase}", "Running")) << op.Log();

  // The queue decides preemption in the same plan that says why a job waits: a head that
  // would preempt shows Preempting, one that may not shows WaitingForCapacity.
  ASSERT_EQ(ApplyYaml(n, Job("equal", 10)).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "equal", kAdmittedReason, "WaitingForCapacity")) << op.Log();
  ASSERT_EQ(Kubectl("delete tpujob equal -n " + n).exit_code, 0);

  const std::string pc = "never-" + prefix_;
  ASSERT_EQ(ApplyYaml(n,
                      "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n"
                      "  name: " +
                          pc + "\nvalue: 1000\npreemptionPolicy: Never\n")
                .exit_code,
            0);
  ASSERT_EQ(ApplyYaml(n, Job("polite", 0, "  priorityClassName: " + pc + "\n")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "polite", kAdmittedReason, "WaitingForCapacity")) << op.Log();
  EXPECT_EQ(JobField(n, "polite", "{.status.queuePosition}"), "1");  // first in line all the same
  ASSERT_EQ(Kubectl("delete tpujob polite -n " + n).exit_code, 0);
  Kubectl("delete priorityclass " + pc, false);

  ASSERT_EQ(
      Kubectl("patch tpujob low -n " + n + " --type=merge -p '{\"spec\":{\"preemptible\":false}}'")
          .exit_code,
      0);
  ASSERT_EQ(ApplyYaml(n, Job("high", 100)).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "high", kAdmittedReason, "WaitingForCapacity")) << op.Log();

  // Through all of it the low job ran undisturbed.
  EXPECT_EQ(JobField(n, "low", "{.status.phase}/{.status.attempt}/{.status.preemptions}"),
            "Running/1/");
  EXPECT_TRUE(EventsWith(JobEvents(n, "low"), "Preempted").empty());
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
