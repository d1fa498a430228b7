// Kueue interop end to end: the operator (--kueue=true) beside the real Kueue controller
// manager (e2e/cluster up --with-kueue), each test with nodes, a ResourceFlavor, a ClusterQueue
// with quota for 8 chips and a LocalQueue of its own. Asserted with kubectl: a TPUJob labelled
// kueue.x-k8s.io/queue-name gets a Workload and pods only once Kueue admits it; Kueue's
// priority preemption stops it with its grace period and it runs again without using a retry; a
// hardware fault re-issues it on the same admission; the quota always comes back; a job without
// the label is the operator's own queue's; deleting a job deletes its Workload; an operator
// killed at each of its first writes converges with one Workload and one set of pods.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

class KueueE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    InstallCrd();
    const auto up = RunCommand(ClusterScript() + " up --with-kueue --dir " + ClusterDir());
    ASSERT_EQ(up.exit_code, 0) << up.output;
  }

  // Four nodes of an accelerator of the test's own in one pool (room for two 2-host jobs), and
  // Kueue objects that admit one such job at a time: a ResourceFlavor for the pool (its node
  // labels and a toleration go onto the admitted pods), a ClusterQueue with quota for 8 chips
  // that preempts lower priorities, and a LocalQueue in the test's namespace.
  void SetUpQueue(const std::string& ns) {
    static int counter = 0;
    prefix_ = "kq" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
    pool_ = "pool-" + prefix_;
    CreateTpuNodes(prefix_, 4, accelerator_, "2x4", pool_);
    ns_ = ns;
    const std::string yaml =
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata:\n  name: " + prefix_ +
        "\nspec:\n  nodeLabels: {cloud.google.com/gke-nodepool: " + pool_ +
        "}\n  tolerations: [{key: example.com/team, operator: Equal, value: " + prefix_ +
        ", effect: NoSchedule}]\n---\n"
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata:\n  name: " +
        prefix_ +
        "\nspec:\n  namespaceSelector: {}\n  preemption: {withinClusterQueue: LowerPriority}\n"
        "  resourceGroups:\n  - coveredResources: [google.com/tpu, cpu, memory]\n    flavors:\n"
        "    - name: " +
        prefix_ +
        "\n      resources:\n      - {name: google.com/tpu, nominalQuota: 8}\n"
        "      - {name: cpu, nominalQuota: 100}\n      - {name: memory, nominalQuota: 1000Gi}\n"
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata:\n  name: team\n"
        "spec: {clusterQueue: " +
        prefix_ + "}\n";
    const auto applied = ApplyYaml(ns, yaml);
    ASSERT_EQ(applied.exit_code, 0) << applied.output;
  }
  void TearDown() override {
    if (prefix_.empty()) return;
    Kubectl("delete clusterqueue " + prefix_ + " --wait=false");
    Kubectl("delete resourceflavor " + prefix_ + " --wait=false");
    DeleteTpuNodes(prefix_);
  }

  // A 2-host job (8 chips) in LocalQueue "team" (`queued` false: no label) with `priority`,
  // a 5 s grace period to checkpoint and `extra_spec`.
  std::string Job(const std::string& name, int priority = 0, bool queued = true,
                  const std::string& extra_spec = "", const std::string& annotations = "") {
    std::string yaml =
        JobYaml(name, 2, "2x4",
                "  priority: " + std::to_string(priority) +
                    "\n  faultTolerance: {maintenanceGracePeriodSeconds: 5}\n" + extra_spec,
                false, annotations, accelerator_);
    if (queued) {
      const std::string at = "metadata:\n  name: " + name + "\n";
      yaml.replace(yaml.find(at), at.size(), at + "  labels: {kueue.x-k8s.io/queue-name: team}\n");
    }
    return yaml;
  }

  // The job's Workloads (names, space-separated).
  std::string Workloads(const std::string& job) {
    return Get(ns_, "workloads -l tpujob.dev/job-name=" + job, "{.items[*].metadata.name}");
  }
  std::string WorkloadCondition(const std::string& job, const std::string& type) {
    return Get(ns_, "workloads -l tpujob.dev/job-name=" + job,
               "{.items[0].status.conditions[?(@.type==\"" + type + "\")].status}");
  }
  // Chips the ClusterQueue counts as reserved (status.flavorsReservation).
  std::string ReservedChips() {
    return Trim(Kubectl("get clusterqueue " + prefix_ +
                            " -o jsonpath='{.status.flavorsReservation[0].resources[?(@.name==" +
                            "\"google.com/tpu\")].total}'",
                        false)
                    .output);
  }
  ::testing::AssertionResult ReservedChipsBecome(const std::string& want) {
    std::string last;
    if (Eventually([&] { return (last = ReservedChips()) == want; }, std::chrono::seconds(60))) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "ClusterQueue " << prefix_ << " reserves " << last << " chips, not " << want;
  }
  std::vector<std::string> OperatorArgs() { return {"--namespace", ns_, "--kueue", "true"}; }

  std::string prefix_;
  std::string accelerator_;
  std::string pool_;
  std::string ns_;
};

constexpr char kAdmitted[] =
    "{.status.conditions[?(@.type==\"Admitted\")].reason}: "
    "{.status.conditions[?(@.type==\"Admitted\")].message}";

TEST_F(KueueE2E, QuotaForOneJobRunsThemOneAfterTheOtherAndAJobWithoutTheLabelIsOurs) {
  TestNamespace ns("kq-quota");
  SetUpQueue(ns.name());
  const std::string& n = ns_;
  OperatorProcess op(OperatorArgs());
  ASSERT_EQ(ApplyYaml(n, Job("first")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "first", "{.status.phase}", "Running")) << op.Log();
  ASSERT_EQ(ApplyYaml(n, Job("second")).exit_code, 0);
  // Its Workload waits on the quota, the job says why, and no pod of it exists.
  ASSERT_TRUE(Eventually([&] { return WorkloadCondition("second", "QuotaReserved") == "False"; },
                         std::chrono::seconds(30)))
      << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "second", "{.status.conditions[?(@.type==\"Admitted\")].reason}",
                              "KueuePending"))
      << op.Log();
  EXPECT_NE(JobField(n, "second", kAdmitted).find("insufficient unused quota"), std::string::npos)
      << JobField(n, "second", kAdmitted);
  EXPECT_TRUE(ReservedChipsBecome("8"));
  // A job without the label, in the same namespace and on the same nodes, is admitted by the
  // operator's own queue on the two nodes left, with no Workload.
  ASSERT_EQ(ApplyYaml(n, Job("plain", 0, /*queued=*/false)).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "plain", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(Workloads("plain"), "");
  EXPECT_TRUE(JobPods(n, "second").empty());
  EXPECT_EQ(JobField(n, "second", "{.status.phase}"), "Queued");

  // Kueue's waitForPodsReady reads PodsReady: the running job keeps it.
  EXPECT_TRUE(Eventually([&] { return WorkloadCondition("first", "PodsReady") == "True"; },
                         std::chrono::seconds(30)))
      << op.Log();
  // The admitted pods carry the flavor's node labels and tolerations, and keep to one pool.
  EXPECT_EQ(Get(n, "pod first-worker-0", "{.spec.nodeSelector.cloud\\.google\\.com/gke-nodepool}"),
            pool_);
  EXPECT_EQ(
      Get(n, "pod first-worker-1", "{.spec.tolerations[?(@.key==\"example.com/team\")].value}"),
      prefix_);
  EXPECT_EQ(Get(n, "pod first-worker-1",
                "{.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
                ".topologyKey}"),
            "cloud.google.com/gke-nodepool");

  // The first finishes: its Workload is marked finished, the quota goes to the second.
  ASSERT_EQ(TerminatePod(n, "first-worker-0", 0).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "first", "{.status.phase}", "Succeeded")) << op.Log();
  ASSERT_TRUE(Eventually([&] { return WorkloadCondition("first", "Finished") == "True"; },
                         std::chrono::seconds(30)))
      << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "second", "{.status.phase}", "Running")) << op.Log();
  EXPECT_TRUE(ReservedChipsBecome("8"));
  ASSERT_EQ(TerminatePod(n, "second-worker-0", 0).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "second", "{.status.phase}", "Succeeded")) << op.Log();
  EXPECT_TRUE(ReservedChipsBecome("0"));
}

TEST_F(KueueE2E, KueuePreemptsTheLowerPriorityJobWhichRunsAgainWithoutUsingARetry) {
  TestNamespace ns("kq-preempt");
  SetUpQueue(ns.name());
  const std::string& n = ns_;
  PodWatch watch(n);
  OperatorProcess op(OperatorArgs());
  ASSERT_EQ(ApplyYaml(n, Job("low", 1)).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "low", "{.status.phase}", "Running")) << op.Log();
  const std::string retries = JobField(n, "low", "{.status.jobRetries}");
  const std::string workload = Workloads("low");

  ASSERT_EQ(ApplyYaml(n, Job("high", 100)).exit_code, 0);
  ASSERT_TRUE(
      JobFieldBecomes(n, "low", "{.status.conditions[?(@.type==\"Preempted\")].status}", "True"))
      << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "high", "{.status.phase}", "Running")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "low", "{.status.phase}", "Queued")) << op.Log();
  EXPECT_EQ(JobField(n, "low", "{.status.jobRetries}"), retries);  // no retry used
  EXPECT_EQ(JobField(n, "low", "{.status.attempt}"), "2");
  EXPECT_EQ(JobField(n, "low", "{.status.faults[0].kind}/{.status.faults[0].action}"),
            "Preempted/PreemptJob");
  EXPECT_NE(JobField(n, "low", "{.status.faults[0].message}").find("Kueue evicted Workload"),
            std::string::npos);
  // Stopped like a maintenance event (SIGTERM, then its 5 s), and its quota given back: the
  // Workload is pending again (requeued), the same one.
  EXPECT_NE(watch.Raw().find("grace=5"), std::string::npos) << watch.Raw();
  EXPECT_EQ(Workloads("low"), workload);
  EXPECT_EQ(WorkloadCondition("low", "QuotaReserved"), "False");
  EXPECT_EQ(WorkloadCondition("low", "Requeued"), "True");
  EXPECT_TRUE(JobPods(n, "low").empty());
  EXPECT_TRUE(ReservedChipsBecome("8"));

  // The high job finishes; Kueue admits the low one again and it runs.
  ASSERT_EQ(TerminatePod(n, "high-worker-0", 0).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "high", "{.status.phase}", "Succeeded")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "low", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(n, "low", "{.status.attempt}"), "2");
  EXPECT_EQ(JobField(n, "low", "{.status.jobRetries}"), retries);
  EXPECT_EQ(WorkloadCondition("low", "Evicted"), "False");
  ASSERT_EQ(Kubectl("delete tpujob low high -n " + n).exit_code, 0);
  EXPECT_TRUE(ReservedChipsBecome("0"));
  const auto report = watch.Check();
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
}

TEST_F(KueueE2E, AHardwareFaultReissuesTheJobOnItsAdmissionAndDeletionFreesTheQuota) {
  TestNamespace ns("kq-fault");
  SetUpQueue(ns.name());
  const std::string& n = ns_;
  OperatorProcess op(OperatorArgs());
  ASSERT_EQ(ApplyYaml(n, Job("sk", 0, true, "", "fault-tolerance/job-retry-num: \"2\"")).exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "sk", "{.status.phase}", "Running")) << op.Log();
  const std::string workload = Workloads("sk");
  ASSERT_FALSE(workload.empty());
  const std::string node = NodeOf(n, "sk-worker-0");
  ASSERT_EQ(
      SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 2: ECC errors").exit_code,
      0);
  ASSERT_TRUE(JobFieldBecomes(n, "sk", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "sk", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(n, "sk", "{.status.jobRetries}"), "1");
  EXPECT_EQ(UnschedulableNodes(prefix_), node);
  for (const char* pod : {"sk-worker-0", "sk-worker-1"}) {
    EXPECT_NE(NodeOf(n, pod), node) << pod;
  }
  // The same Workload, admitted throughout: Kueue counts the job's 8 chips once.
  EXPECT_EQ(Workloads("sk"), workload);
  EXPECT_EQ(WorkloadCondition("sk", "Admitted"), "True");
  EXPECT_EQ(WorkloadCondition("sk", "Evicted"), "");
  EXPECT_TRUE(ReservedChipsBecome("8"));

  // Deleting the job deletes its Workload (the garbage collector, by its owner reference), and
  // the ClusterQueue reserves nothing.
  ASSERT_EQ(Kubectl("delete tpujob sk -n " + n).exit_code, 0);
  EXPECT_TRUE(Eventually([&] { return Workloads("sk").empty(); }, std::chrono::seconds(60)));
  EXPECT_TRUE(ReservedChipsBecome("0"));
}

TEST_F(KueueE2E, AnOperatorKilledAtEachOfItsFirstWritesConvergesWithOneWorkload) {
  TestNamespace ns("kq-crash");
  SetUpQueue(ns.name());
  const std::string& n = ns_;
  // Its first writes for a new job: the Workload, the status (Queued), once Kueue admits it the
  // Workload's PodsReady (False) and the status (Starting), then the Service and pods.
  for (int crash_at = 1; crash_at <= 4; ++crash_at) {
    SCOPED_TRACE("crash after write " + std::to_string(crash_at));
    const std::string job = "c" + std::to_string(crash_at);
    std::vector<std::string> first = OperatorArgs();
    first.insert(first.end(), {"--crash-after-writes", std::to_string(crash_at)});
    auto op = std::make_unique<OperatorProcess>(first);
    ASSERT_EQ(ApplyYaml(n, Job(job)).exit_code, 0);
    const auto running = [&] { return JobField(n, job, "{.status.phase}") == "Running"; };
    // Every one of these writes comes before Running: the first operator dies on the way.
    ASSERT_TRUE(Eventually([&] { return op->Exited(); }, std::chrono::seconds(60)))
        << "did not crash\n"
        << op->Log();
    EXPECT_NE(op->Log().find("crash-after-writes: SIGKILL"), std::string::npos) << op->Log();
    op = std::make_unique<OperatorProcess>(OperatorArgs());
    ASSERT_TRUE(Eventually(running, std::chrono::seconds(60))) << op->Log();
    const std::string workloads = Workloads(job);
    EXPECT_EQ(workloads.rfind("tpujob-" + job + "-", 0), 0u) << workloads;
    EXPECT_EQ(workloads.find(' '), std::string::npos) << "one Workload: " << workloads;
    EXPECT_EQ(JobPods(n, job), (std::vector<std::string>{job + "-worker-0", job + "-worker-1"}));
    EXPECT_EQ(JobField(n, job, "{.status.attempt}"), "1");
    EXPECT_TRUE(ReservedChipsBecome("8"));
    ASSERT_EQ(Kubectl("delete tpujob " + job + " -n " + n).exit_code, 0);
    ASSERT_TRUE(Eventually([&] { return Workloads(job).empty(); }, std::chrono::seconds(60)));
    ASSERT_TRUE(ReservedChipsBecome("0"));
  }
}

TEST_F(KueueE2E, AJobManagedByAnotherControllerIsLeftAloneAndManagedByIsImmutable) {
  TestNamespace ns("kq-managed");
  SetUpQueue(ns.name());
  const std::string& n = ns_;
  OperatorProcess op(OperatorArgs());
  // Labelled for a queue, managed by a controller other than this operator and MultiKueue
  // (whose jobs e2e/multikueue_e2e_test.cpp covers).
  ASSERT_EQ(ApplyYaml(n, Job("remote", 0, true, "  managedBy: example.com/another-controller\n"))
                .exit_code,
            0);
  ASSERT_EQ(ApplyYaml(n, Job("local")).exit_code, 0);
  // The operator is working (the other job runs), and has not touched this one.
  ASSERT_TRUE(JobFieldBecomes(n, "local", "{.status.phase}", "Running")) << op.Log();
  EXPECT_EQ(JobField(n, "remote", "{.status}"), "");
  EXPECT_EQ(Workloads("remote"), "");
  EXPECT_TRUE(JobPods(n, "remote").empty());
  const auto changed =
      Kubectl("patch tpujob remote -n " + n +
              " --type=merge -p '{\"spec\":{\"managedBy\":" + "\"tpujob.dev/operator\"}}'");
  EXPECT_NE(changed.exit_code, 0);
  EXPECT_NE(changed.output.find("managedBy is immutable"), std::string::npos) << changed.output;
  // Nor can it be added to a job, or removed from one.
  const auto added = Kubectl("patch tpujob local -n " + n +
                             " --type=merge -p '{\"spec\":{\"managedBy\":\"example.com/x\"}}'");
  EXPECT_NE(added.exit_code, 0);
  EXPECT_NE(added.output.find("managedBy is immutable"), std::string::npos) << added.output;
  const auto removed =
      Kubectl("patch tpujob remote -n " + n +
              " --type=json -p '[{\"op\":\"remove\",\"path\":\"/spec/managedBy\"}]'");
  EXPECT_NE(removed.exit_code, 0);
  EXPECT_NE(removed.output.find("managedBy is immutable"), std::string::npos) << removed.output;
  const auto bad = ApplyYaml(n, Job("bad", 0, true, "  managedBy: not-a-path\n"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("domain-prefixed path"), std::string::npos) << bad.output;
}

TEST_F(KueueE2E, AJobWhoseWorkloadIsDeletedStopsAndQueuesInKueueAgain) {
  TestNamespace ns("kq-gone");
  SetUpQueue(ns.name());
  const std::string& n = ns_;
  OperatorProcess op(OperatorArgs());
  ASSERT_EQ(ApplyYaml(n, Job("wd")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "wd", "{.status.phase}", "Running")) << op.Log();
  const std::string first =
      Get(n, "workloads -l tpujob.dev/job-name=wd", "{.items[0].metadata.uid}");
  // Someone deletes the Workload: the job's quota is gone, so it must not go on running. It is
  // stopped like a preemption, gets a new Workload, and once Kueue admits that runs again
  // without using a retry.
  ASSERT_EQ(Kubectl("delete workloads -l tpujob.dev/job-name=wd -n " + n).exit_code, 0);
  // The new Workload (the same name) is created within a second of the delete; a busy Kueue that
  // evaluates it before it has processed the deletion finds the quota still used and requeues it
  // with its back-off, so it may take well over 30 s under load (seen once in a full suite run;
  // about 3 s on an idle machine).
  ASSERT_TRUE(JobFieldBecomes(n, "wd", "{.status.attempt}/{.status.phase}", "2/Running",
                              std::chrono::seconds(120)))
      << op.Log();
  EXPECT_EQ(JobField(n, "wd", "{.status.preemptions}"), "1");
  EXPECT_EQ(JobField(n, "wd", "{.status.faults[0].kind}"), "Preempted");
  EXPECT_NE(JobField(n, "wd", "{.status.faults[0].message}").find("Workload is gone"),
            std::string::npos);
  EXPECT_EQ(JobField(n, "wd", "{.status.jobRetries}"), "");
  const std::string second =
      Get(n, "workloads -l tpujob.dev/job-name=wd", "{.items[*].metadata.uid}");
  EXPECT_FALSE(second.empty());
  EXPECT_NE(second, first);
  EXPECT_EQ(second.find(' '), std::string::npos) << "one Workload: " << second;
  EXPECT_TRUE(ReservedChipsBecome("8"));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
