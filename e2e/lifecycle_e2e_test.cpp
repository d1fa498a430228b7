// The TPUJob lifecycle end to end: the operator binary against a real control plane with KWOK
// nodes advertising google.com/tpu. Pod outcomes are written into pod status as a kubelet
// would; every assertion reads the cluster through kubectl.

#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <thread>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

constexpr char kNodes2x4[] = "lc-2x4";  // 4 hosts of a 2x4 slice per job (2 workers of 4 chips)
constexpr char kNodes4x4[] = "lc-4x4";  // a 4x4 slice: 4 workers of 4 chips
constexpr char kCpuNode[] = "lc-cpu";   // for Master replicas, which request no TPU

class LifecycleE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    InstallCrd();
    CreateTpuNodes(kNodes2x4, 4, "tpu-v5-lite-podslice", "2x4", "pool-2x4");
    CreateTpuNodes(kNodes4x4, 4, "tpu-v5-lite-podslice", "4x4", "pool-4x4");
    CreateCpuNode(kCpuNode);
  }
  static void TearDownTestSuite() {
    DeleteTpuNodes(kNodes2x4);
    DeleteTpuNodes(kNodes4x4);
    DeleteTpuNodes(kCpuNode);
  }

  // Event reasons recorded for the job, oldest first.
  std::string EventReasons(const std::string& ns, const std::string& job) {
    return Get(ns,
               "events --field-selector involvedObject.name=" + job +
                   " --sort-by=.metadata.creationTimestamp",
               "{range .items[*]}{.reason} {end}");
  }
};

TEST_F(LifecycleE2E, MultiHostJobRunsWhenAllWorkersReadyAndSucceedsWhenWorkerZeroExits) {
  TestNamespace ns("lc-multi");
  PodWatch watch(ns.name());
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(ApplyYaml(ns.name(), JobYaml("llm", 4, "4x4")).exit_code, 0);

  ASSERT_TRUE(JobFieldBecomes(ns.name(), "llm", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "llm", "{.status.readyWorkers}"), "4/4");
  EXPECT_EQ(JobField(ns.name(), "llm", "{.status.conditions[?(@.type==\"Ready\")].status}"),
            "True");
  EXPECT_EQ(JobPods(ns.name(), "llm"), (std::vector<std::string>{"llm-worker-0", "llm-worker-1",
                                                                 "llm-worker-2", "llm-worker-3"}));

  // What each pod was given.
  for (int i = 0; i < 4; ++i) {
    const std::string pod = "pod llm-worker-" + std::to_string(i);
    const auto env = [&](const std::string& var) {
      return Get(ns.name(), pod, "{.spec.containers[0].env[?(@.name==\"" + var + "\")].value}");
    };
    EXPECT_EQ(env("TPU_WORKER_ID"), std::to_string(i));
    EXPECT_EQ(env("TPU_WORKER_HOSTNAMES"),
              "llm-worker-0.llm,llm-worker-1.llm,llm-worker-2.llm,llm-worker-3.llm");
    EXPECT_EQ(env("TPUJOB_NAME"), "llm");
    EXPECT_EQ(env("TPUJOB_ATTEMPT"), "1");
    const auto config = nlohmann::json::parse(env("TPU_CONFIG"), nullptr, false);
    ASSERT_TRUE(config.is_object()) << env("TPU_CONFIG");
    EXPECT_EQ(config.value("worker_id", -1), i);
    EXPECT_EQ(Get(ns.name(), pod,
                  "{.metadata.labels.tpujob\\.dev/replica-index}/"
                  "{.metadata.labels.tpujob\\.dev/attempt}/{.metadata.ownerReferences[0].kind}/"
                  "{.metadata.ownerReferences[0].controller}"),
              std::to_string(i) + "/1/TPUJob/true");
    EXPECT_EQ(Get(ns.name(), pod,
                  "{.spec.nodeSelector.cloud\\.google\\.com/gke-tpu-topology}/"
                  "{.spec.containers[0].resources.limits.google\\.com/tpu}/"
                  "{.spec.hostname}/{.spec.subdomain}/{.spec.restartPolicy}"),
              "4x4/4/llm-worker-" + std::to_string(i) + "/llm/Never");
  }
  EXPECT_EQ(Get(ns.name(), "service llm", "{.spec.clusterIP}/{.spec.publishNotReadyAddresses}"),
            "None/true");

  // Worker 0 decides under successPolicy Master when there is no Master replica.
  ASSERT_EQ(TerminatePod(ns.name(), "llm-worker-0", 0).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "llm", "{.status.phase}", "Succeeded")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "llm", "{.status.conditions[?(@.type==\"Succeeded\")].reason}"),
            "MasterSucceeded");
  EXPECT_NE(JobField(ns.name(), "llm", "{.status.completionTime}"), "");
  // The other workers are stopped; the finished one stays for its logs.
  ASSERT_TRUE(Eventually([&] {
    return JobPods(ns.name(), "llm") == std::vector<std::string>{"llm-worker-0"};
  })) << Kubectl("get pods -o wide -n " + ns.name()).output;

  // An Event for every transition (their order is the phases' order, checked above; Event
  // timestamps have whole seconds only).
  const std::string reasons = EventReasons(ns.name(), "llm");
  for (const char* reason : {"Queued", "Admitted", "Running", "Succeeded"}) {
    EXPECT_NE(reasons.find(reason), std::string::npos) << reason << " in " << reasons;
  }

  const auto report = watch.CheckAfterCreations(4);
  EXPECT_EQ(report.creations, 4);
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
}

TEST_F(LifecycleE2E, AllWorkersPolicyWaitsForEveryWorkerAndStopsTheMaster) {
  TestNamespace ns("lc-all");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(ApplyYaml(ns.name(), JobYaml("mw", 2, "2x4", "  successPolicy: AllWorkers\n", true))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "mw", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobPods(ns.name(), "mw"),
            (std::vector<std::string>{"mw-master-0", "mw-worker-0", "mw-worker-1"}));
  // The master runs no TPU code: no chips, no TPU node selector, no worker id.
  EXPECT_EQ(Get(ns.name(), "pod mw-master-0",
                "{.spec.containers[0].resources.limits.google\\.com/tpu}{.spec.nodeSelector}"
                "{.spec.containers[0].env[?(@.name==\"TPU_WORKER_ID\")].value}"),
            "");

  ASSERT_EQ(TerminatePod(ns.name(), "mw-worker-0", 0).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "mw", "{.status.replicaStatuses.Worker.succeeded}", "1"));
  EXPECT_EQ(JobField(ns.name(), "mw", "{.status.phase}"), "Running");
  ASSERT_EQ(TerminatePod(ns.name(), "mw-worker-1", 0).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "mw", "{.status.phase}", "Succeeded")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "mw", "{.status.conditions[?(@.type==\"Succeeded\")].reason}"),
            "AllWorkersSucceeded");
  ASSERT_TRUE(Eventually([&] {
    return JobPods(ns.name(), "mw") == std::vector<std::string>{"mw-worker-0", "mw-worker-1"};
  })) << Kubectl("get pods -n " + ns.name()).output;
}

TEST_F(LifecycleE2E, RetryableExitRestartsTheWorkerThenReissuesTheJob) {
  TestNamespace ns("lc-retry");
  PodWatch watch(ns.name());
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(
      ApplyYaml(ns.name(), JobYaml("rt", 2, "2x4", "  faultTolerance: {maxWorkerRestarts: 2}\n",
                                   false, "fault-tolerance/job-retry-num: \"1\""))
          .exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "rt", "{.status.phase}", "Running")) << op.Log();

  for (int restart = 1; restart <= 2; ++restart) {
    const std::string before = PodUid(ns.name(), "rt-worker-1");
    ASSERT_EQ(TerminatePod(ns.name(), "rt-worker-1", 143, "Error", "SIGTERM").exit_code, 0);
    ASSERT_TRUE(JobFieldBecomes(ns.name(), "rt", "{.status.workerRestarts.Worker-1.count}",
                                std::to_string(restart)))
        << op.Log();
    // The same worker comes back as a new pod of the same attempt.
    ASSERT_TRUE(Eventually([&] {
      const std::string uid = PodUid(ns.name(), "rt-worker-1");
      return !uid.empty() && uid != before;
    }));
    ASSERT_TRUE(JobFieldBecomes(ns.name(), "rt", "{.status.phase}", "Running")) << op.Log();
    EXPECT_EQ(JobField(ns.name(), "rt", "{.status.replicaStatuses.Worker.restarts}"),
              std::to_string(restart));
    EXPECT_EQ(Get(ns.name(), "pod rt-worker-1", "{.metadata.labels.tpujob\\.dev/attempt}"), "1");
  }
  EXPECT_EQ(JobField(ns.name(), "rt", "{.status.attempt}"), "1");

  // The third failure is past maxWorkerRestarts: the whole job is re-issued as attempt 2.
  ASSERT_EQ(TerminatePod(ns.name(), "rt-worker-1", 143).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "rt", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "rt", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "rt", "{.status.jobRetries}"), "1");
  EXPECT_EQ(JobField(ns.name(), "rt", "{.status.workerRestarts}"), "");
  EXPECT_EQ(JobField(ns.name(), "rt", "{.status.faults[*].action}"),
            "RestartWorker RestartWorker ReissueJob");
  for (const char* pod : {"rt-worker-0", "rt-worker-1"}) {
    EXPECT_EQ(Get(ns.name(), std::string("pod ") + pod,
                  "{.metadata.labels.tpujob\\.dev/attempt}/"
                  "{.spec.containers[0].env[?(@.name==\"TPUJOB_ATTEMPT\")].value}"),
              "2/2");
  }
  const std::string reasons = EventReasons(ns.name(), "rt");
  EXPECT_NE(reasons.find("WorkerRestarted"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("Reissued"), std::string::npos) << reasons;

  // Attempt 2's pods were created only after every pod of attempt 1 was gone, and exactly once.
  // Attempt 1 had two pods and two in-place restarts; KWOK, which deletes a pod it is removing by
  // name, now and then also deletes the replacement created right after it (the audit log shows
  // kwok-controller's DELETE), and the operator rightly creates that one again.
  const auto report = watch.Check();
  int attempt1 = 0, attempt2 = 0;
  std::istringstream lines(watch.Raw());
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string type, name, uid, job, rtype, index, attempt;
    fields >> type >> name >> uid >> job >> rtype >> index >> attempt;
    if (type != "ADDED") continue;
    (attempt == "1" ? attempt1 : attempt2) += 1;
  }
  EXPECT_GE(attempt1, 2 + 2);
  EXPECT_EQ(attempt2, 2);
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
}

// With faultAttributionSeconds: 0 a permanent exit fails the job at once, without waiting for
// its node's verdict (faults_e2e_test.cpp has the window).
TEST_F(LifecycleE2E, PermanentExitFailsTheJobWithoutRetry) {
  TestNamespace ns("lc-perm");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(ApplyYaml(ns.name(),
                      JobYaml("pe", 2, "2x4", "  faultTolerance: {faultAttributionSeconds: 0}\n",
                              false, "fault-tolerance/job-retry-num: \"3\""))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "pe", "{.status.phase}", "Running")) << op.Log();
  ASSERT_EQ(TerminatePod(ns.name(), "pe-worker-1", 1, "Error", "Traceback: ValueError").exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "pe", "{.status.phase}", "Failed")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "pe", "{.status.conditions[?(@.type==\"Failed\")].reason}"),
            "PermanentError");
  const std::string message =
      JobField(ns.name(), "pe", "{.status.conditions[?(@.type==\"Failed\")].message}");
  EXPECT_NE(message.find("container trainer exited with code 1"), std::string::npos) << message;
  EXPECT_NE(message.find("Traceback: ValueError"), std::string::npos) << message;
  EXPECT_EQ(message.find("fault attribution window"), std::string::npos) << message;
  EXPECT_EQ(JobField(ns.name(), "pe", "{.spec.faultTolerance.faultAttributionSeconds}"), "0");
  EXPECT_EQ(JobField(ns.name(), "pe", "{.status.attempt}/{.status.jobRetries}"), "1/");
  EXPECT_EQ(JobField(ns.name(), "pe", "{.status.faults[0].exitCode}/{.status.faults[0].action}"),
            "1/FailJob");
  // The healthy worker is stopped; nothing is recreated.
  ASSERT_TRUE(Eventually(
      [&] { return JobPods(ns.name(), "pe") == std::vector<std::string>{"pe-worker-1"}; }));
}

TEST_F(LifecycleE2E, RetriesExhaustedFailsTheJob) {
  TestNamespace ns("lc-exhaust");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(ApplyYaml(ns.name(), JobYaml("ex", 2, "2x4",
                                         "  faultTolerance: {maxWorkerRestarts: 0, "
                                         "maxJobRetries: 1}\n"))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ex", "{.status.phase}", "Running")) << op.Log();
  ASSERT_EQ(TerminatePod(ns.name(), "ex-worker-0", 143).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ex", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ex", "{.status.phase}", "Running")) << op.Log();
  ASSERT_EQ(TerminatePod(ns.name(), "ex-worker-0", 143).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "ex", "{.status.phase}", "Failed")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "ex", "{.status.conditions[?(@.type==\"Failed\")].reason}"),
            "RetriesExhausted");
  EXPECT_EQ(JobField(ns.name(), "ex", "{.status.attempt}/{.status.jobRetries}"), "2/1");
}

TEST_F(LifecycleE2E, DeletingTheJobMidRunRemovesEverythingItCreated) {
  TestNamespace ns("lc-delete");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(ApplyYaml(ns.name(), JobYaml("del", 4, "4x4")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "del", "{.status.phase}", "Running")) << op.Log();
  ASSERT_EQ(Kubectl("delete tpujob del -n " + ns.name() + " --wait=false").exit_code, 0);
  ASSERT_TRUE(Eventually(
      [&] {
        return Get(ns.name(), "pods,services -l tpujob.dev/job-name=del",
                   "{.items[*].metadata.name}")
            .empty();
      },
      std::chrono::seconds(60)))
      << Kubectl("get pods,services -n " + ns.name()).output;
}

TEST_F(LifecycleE2E, InvalidAnnotationIsReportedInTheValidConditionUntilFixed) {
  TestNamespace ns("lc-invalid");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_EQ(ApplyYaml(ns.name(), JobYaml("inv", 2, "2x4", "", false,
                                         "fault-tolerance/job-retry-num: \"five\""))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "inv", "{.status.conditions[?(@.type==\"Valid\")].status}",
                              "False"))
      << op.Log();
  const std::string message =
      JobField(ns.name(), "inv", "{.status.conditions[?(@.type==\"Valid\")].message}");
  EXPECT_NE(message.find("fault-tolerance/job-retry-num"), std::string::npos) << message;
  EXPECT_NE(message.find("\"five\""), std::string::npos) << message;
  EXPECT_EQ(JobField(ns.name(), "inv", "{.status.phase}"), "Failed");
  EXPECT_TRUE(JobPods(ns.name(), "inv").empty());
  EXPECT_NE(EventReasons(ns.name(), "inv").find("InvalidSpec"), std::string::npos);

  // Fixing the annotation lets the job run.
  ASSERT_EQ(Kubectl("annotate tpujob inv -n " + ns.name() +
                    " fault-tolerance/job-retry-num=2 --overwrite")
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "inv", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(ns.name(), "inv", "{.status.conditions[?(@.type==\"Valid\")].status}"),
            "True");
}

// The operator is killed with SIGKILL at random moments through a job's whole life (start,
// in-place restart, re-issue, success) and restarted each time. The job must converge with
// every decision taken exactly once: one restart counted, one re-issue, never two pods for one
// worker, nothing left behind.
TEST_F(LifecycleE2E, ConvergesThroughTwentySigkillsWithoutDuplicatesOrOrphans) {
  TestNamespace ns("lc-chaos");
  PodWatch watch(ns.name());
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> delay_ms(0, 600);
  int kills = 0;
  // Starts the operator and kills it after a random delay, `n` times in a row.
  const auto chaos = [&](int n) {
    for (int i = 0; i < n; ++i) {
      OperatorProcess op({"--namespace", ns.name()});
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(random)));
      op.Kill();
      ++kills;
    }
  };
  ASSERT_EQ(
      ApplyYaml(ns.name(), JobYaml("chaos", 4, "4x4", "  faultTolerance: {maxWorkerRestarts: 1}\n",
                                   false, "fault-tolerance/job-retry-num: \"2\""))
          .exit_code,
      0);

  chaos(5);
  {
    OperatorProcess op({"--namespace", ns.name()});
    ASSERT_TRUE(JobFieldBecomes(ns.name(), "chaos", "{.status.phase}", "Running")) << op.Log();
  }
  // A retryable failure: restart in place.
  ASSERT_EQ(TerminatePod(ns.name(), "chaos-worker-2", 143).exit_code, 0);
  chaos(5);
  {
    OperatorProcess op({"--namespace", ns.name()});
    ASSERT_TRUE(JobFieldBecomes(ns.name(), "chaos", "{.status.workerRestarts.Worker-2.count}", "1"))
        << op.Log();
    ASSERT_TRUE(JobFieldBecomes(ns.name(), "chaos", "{.status.phase}", "Running")) << op.Log();
  }
  // The same worker again: past maxWorkerRestarts, the job is re-issued.
  ASSERT_EQ(TerminatePod(ns.name(), "chaos-worker-2", 143).exit_code, 0);
  chaos(5);
  {
    OperatorProcess op({"--namespace", ns.name()});
    ASSERT_TRUE(JobFieldBecomes(ns.name(), "chaos", "{.status.attempt}", "2")) << op.Log();
    ASSERT_TRUE(JobFieldBecomes(ns.name(), "chaos", "{.status.phase}", "Running")) << op.Log();
  }
  // Success.
  ASSERT_EQ(TerminatePod(ns.name(), "chaos-worker-0", 0).exit_code, 0);
  chaos(5);
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "chaos", "{.status.phase}", "Succeeded")) << op.Log();
  ASSERT_TRUE(Eventually([&] {
    return JobPods(ns.name(), "chaos") == std::vector<std::string>{"chaos-worker-0"};
  })) << Kubectl("get pods -n " + ns.name()).output;

  EXPECT_GE(kills, 20);
  // Each decision taken exactly once, whatever the kills interrupted.
  EXPECT_EQ(JobField(ns.name(), "chaos", "{.status.faults[*].action}"), "RestartWorker ReissueJob");
  EXPECT_EQ(JobField(ns.name(), "chaos", "{.status.jobRetries}"), "1");
  const auto report = watch.CheckAfterCreations(4 + 1 + 4);
  EXPECT_EQ(report.creations, 4 + 1 + 4);  // attempt 1, one in-place restart, attempt 2
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  // No orphans: every pod and the Service belong to the job.
  const std::string owners = Get(ns.name(), "pods,services -l tpujob.dev/job-name=chaos",
                                 "{range .items[*]}{.metadata.ownerReferences[0].name} {end}");
  EXPECT_EQ(owners, "chaos chaos");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
