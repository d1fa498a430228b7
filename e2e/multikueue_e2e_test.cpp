// MultiKueue end to end: two real control planes, each with the real Kueue controller manager
// and an operator (--kueue=true). The suite's usual cluster is the worker, with the TPU nodes; a
// second one (e2e/cluster up --with-kueue in its own directory) is the manager, whose Kueue is
// given the worker by a MultiKueueCluster (the worker's admin kubeconfig in a Secret), a
// MultiKueueConfig and an AdmissionCheck of controller kueue.x-k8s.io/multikueue. A TPUJob
// submitted to the manager with spec.managedBy kueue.x-k8s.io/multikueue is queued there through
// the Workload the manager's operator creates, runs in the worker as MultiKueue's copy on the
// Workload MultiKueue made there (adopted by the worker's operator, none created beside it), and
// its status comes back to the manager; no pod of it exists in the manager. Asserted with
// kubectl on both clusters: the job finishing in the worker finishes the manager's Workload and
// MultiKueue removes the copy; deleting the manager's job deletes the copy and its pods; the
// quota of both ClusterQueues comes back to 0.

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

// The manager cluster's directory: beside the test's own cluster (one per shard), as DIR-manager,
// which no process of DIR mentions as DIR or DIR/... (e2e/cluster down stops those).
std::string ManagerDir() { return ClusterDir() + "-manager"; }

class MultiKueueE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    InstallCrd();
    const auto worker = RunCommand(ClusterScript() + " up --with-kueue --dir " + ClusterDir());
    ASSERT_EQ(worker.exit_code, 0) << worker.output;
    // stdout is the kubeconfig's path alone; progress goes to stderr.
    const auto manager = RunCommand(ClusterScript() + " up --with-kueue --dir " + ManagerDir() +
                                        " 2>" + ManagerDir() + ".up.log",
                                    /*with_stderr=*/false);
    ASSERT_EQ(manager.exit_code, 0) << ReadFile(ManagerDir() + ".up.log");
    manager_kubeconfig_ = Trim(manager.output);

    ApplyCrd(Manager);
    // The worker's admin kubeconfig (embedded certificates, as MultiKueue requires) in a Secret
    // in Kueue's namespace.
    const auto secret = Manager(
        "create namespace kueue-system --dry-run=client -o yaml | " + ManagerKubectl() +
        " apply -f - && " + ManagerKubectl() +
        " create secret generic worker -n kueue-system --from-file=kubeconfig=" + KubeconfigPath() +
        " --dry-run=client -o yaml | " + ManagerKubectl() + " apply -f -");
    ASSERT_EQ(secret.exit_code, 0) << secret.output;
    const auto applied = ManagerApply(
        "default",
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: MultiKueueCluster\nmetadata: {name: worker}\n"
        "spec:\n  clusterSource:\n    kubeConfig: {locationType: Secret, location: worker}\n"
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: MultiKueueConfig\n"
        "metadata: {name: workers}\nspec: {clusters: [worker]}\n"
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: AdmissionCheck\n"
        "metadata: {name: multikueue}\nspec:\n  controllerName: kueue.x-k8s.io/multikueue\n"
        "  parameters: {apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, name: workers}\n");
    ASSERT_EQ(applied.exit_code, 0) << applied.output;
    // Active once the manager's Kueue has connected to the worker (`kubectl wait` gives up at
    // once on an object without conditions yet, so poll).
    for (const std::string object : {"multikueuecluster/worker", "admissioncheck/multikueue"}) {
      ASSERT_TRUE(Eventually(
          [&] {
            return ManagerGet("default", object,
                              "{.status.conditions[?(@.type==\"Active\")].status}") == "True";
          },
          std::chrono::seconds(90), std::chrono::milliseconds(500)))
          << Manager("get " + object + " -o yaml").output;
    }
  }

  static void TearDownTestSuite() { RunCommand(ClusterScript() + " down --dir " + ManagerDir()); }

  static std::string ManagerKubectl() {
    return ToolsBin() + "/kubectl --kubeconfig " + manager_kubeconfig_;
  }
  // kubectl against the manager cluster; `args` is passed through the shell.
  static CommandResult Manager(const std::string& args, bool with_stderr = true) {
    return RunCommand(ManagerKubectl() + " " + args, with_stderr);
  }
  static CommandResult ManagerApply(const std::string& ns, const std::string& yaml) {
    static int counter = 0;
    const std::string path = ManagerDir() + "/manifest-" + std::to_string(++counter) + ".yaml";
    std::ofstream(path) << yaml;
    return Manager("apply -n " + ns + " -f " + path);
  }
  static std::string ManagerGet(const std::string& ns, const std::string& what,
                                const std::string& jsonpath) {
    return Trim(
        Manager("get " + what + " -n " + ns + " -o jsonpath='" + jsonpath + "'", false).output);
  }

  // In the worker: four nodes of an accelerator of the test's own in one pool, a flavor for it
  // and a ClusterQueue with quota for one 8-chip job. In the manager: the same namespace, a
  // flavor without node labels (no node runs there) and a ClusterQueue with the same quota
  // that admits through MultiKueue and preempts lower priorities. LocalQueue "team" in the
  // test's namespace on both.
  void SetUpQueues(const std::string& ns) {
    static int counter = 0;
    ns_ = ns;
    prefix_ = "mk" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
    const std::string pool = "pool-" + prefix_;
    CreateTpuNodes(prefix_, 4, accelerator_, "2x4", pool);
    const std::string quota =
        "  resourceGroups:\n  - coveredResources: [google.com/tpu, cpu, memory]\n    flavors:\n"
        "    - name: " +
        prefix_ +
        "\n      resources:\n      - {name: google.com/tpu, nominalQuota: 8}\n"
        "      - {name: cpu, nominalQuota: 100}\n      - {name: memory, nominalQuota: 1000Gi}\n";
    const std::string local_queue =
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata:\n  name: team\n"
        "spec: {clusterQueue: " +
        prefix_ + "}\n";
    const auto worker = ApplyYaml(
        ns, "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata:\n  name: " +
                prefix_ + "\nspec:\n  nodeLabels: {cloud.google.com/gke-nodepool: " + pool +
                "}\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata:\n"
                "  name: " +
                prefix_ + "\nspec:\n  namespaceSelector: {}\n" + quota + local_queue);
    ASSERT_EQ(worker.exit_code, 0) << worker.output;
    const auto created = Manager("create namespace " + ns);
    ASSERT_EQ(created.exit_code, 0) << created.output;
    const auto manager = ManagerApply(
        ns,
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata:\n  name: " + prefix_ +
            "\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata:\n"
            "  name: " +
            prefix_ +
            "\nspec:\n  namespaceSelector: {}\n"
            "  preemption: {withinClusterQueue: LowerPriority}\n"
            "  admissionChecksStrategy:\n    admissionChecks: [{name: multikueue}]\n" +
            quota + local_queue);
    ASSERT_EQ(manager.exit_code, 0) << manager.output;
  }
  void TearDown() override {
    if (prefix_.empty()) return;
    Kubectl("delete clusterqueue " + prefix_ + " --wait=false");
    Kubectl("delete resourceflavor " + prefix_ + " --wait=false");
    DeleteTpuNodes(prefix_);
    Manager("delete namespace " + ns_ + " --wait=false");
    Manager("delete clusterqueue " + prefix_ + " --wait=false");
    Manager("delete resourceflavor " + prefix_ + " --wait=false");
  }

  // A 2-host job (8 chips) in LocalQueue "team", handed to MultiKueue, with `priority`.
  std::string Job(const std::string& name, int priority = 0) {
    std::string yaml = JobYaml(name, 2, "2x4",
                               "  managedBy: kueue.x-k8s.io/multikueue\n"
                               "  priority: " +
                                   std::to_string(priority) +
                                   "\n  faultTolerance: {maintenanceGracePeriodSeconds: 5}\n",
                               false, "", accelerator_);
    const std::string at = "metadata:\n  name: " + name + "\n";
    yaml.replace(yaml.find(at), at.size(), at + "  labels: {kueue.x-k8s.io/queue-name: team}\n");
    return yaml;
  }

  // The operators: the worker's runs the copies, the manager's only queues.
  std::vector<std::string> WorkerArgs() { return {"--namespace", ns_, "--kueue", "true"}; }
  std::vector<std::string> ManagerArgs() {
    return {"--kubeconfig", manager_kubeconfig_, "--namespace", ns_, "--kueue", "true"};
  }

  // Chips a ClusterQueue counts as reserved (status.flavorsReservation), in either cluster.
  ::testing::AssertionResult ReservedChipsBecome(bool manager, const std::string& want) {
    const std::string args = "get clusterqueue " + prefix_ +
                             " -o jsonpath='{.status.flavorsReservation[0].resources[?(@.name==" +
                             "\"google.com/tpu\")].total}'";
    std::string last;
    if (Eventually(
            [&] {
              last = Trim((manager ? Manager(args, false) : Kubectl(args, false)).output);
              return last == want;
            },
            std::chrono::seconds(60))) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << (manager ? "manager" : "worker") << " ClusterQueue " << prefix_ << " reserves "
           << last << " chips, not " << want;
  }

  // The manager's Workload of the job (its name, once the manager's operator created it).
  std::string ManagerWorkload(const std::string& job) {
    return ManagerGet(ns_, "workloads -l tpujob.dev/job-name=" + job, "{.items[*].metadata.name}");
  }

  // Waits for MultiKueue's copy of the job in the worker to run; returns the manager's
  // Workload's name (the copy's prebuilt Workload has the same).
  std::string AwaitRunningInTheWorker(const std::string& job, OperatorProcess& worker,
                                      OperatorProcess& manager) {
    std::string workload;
    EXPECT_TRUE(Eventually([&] { return !(workload = ManagerWorkload(job)).empty(); },
                           std::chrono::seconds(30)))
        << manager.Log();
    EXPECT_TRUE(JobFieldBecomes(ns_, job,
                                "{.metadata.labels.kueue\\.x-k8s\\.io/prebuilt-workload-name}",
                                workload, std::chrono::seconds(90)))
        << Manager("get workload -n " + ns_ + " " + workload + " -o yaml").output << manager.Log();
    EXPECT_TRUE(JobFieldBecomes(ns_, job, "{.status.phase}", "Running", std::chrono::seconds(60)))
        << worker.Log();
    return workload;
  }

  static std::string manager_kubeconfig_;
  std::string ns_;
  std::string prefix_;
  std::string accelerator_;
};

std::string MultiKueueE2E::manager_kubeconfig_;

TEST_F(MultiKueueE2E, AJobRunsInTheWorkerOnMultiKueuesWorkloadAndFinishesInTheManager) {
  TestNamespace ns("mk-run");
  SetUpQueues(ns.name());
  const std::string& n = ns_;
  OperatorProcess worker(WorkerArgs());
  OperatorProcess manager(ManagerArgs());
  const auto submitted = ManagerApply(n, Job("train"));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const std::string workload = AwaitRunningInTheWorker("train", worker, manager);
  ASSERT_FALSE(workload.empty());

  // The manager's Workload is the job's (owned by it) and admitted through MultiKueue.
  EXPECT_EQ(ManagerGet(n, "workload " + workload, "{.metadata.ownerReferences[0].uid}"),
            ManagerGet(n, "tpujob train", "{.metadata.uid}"));
  EXPECT_EQ(
      ManagerGet(n, "workload " + workload, "{.status.conditions[?(@.type==\"Admitted\")].status}"),
      "True");
  // The copy in the worker: without managedBy, run by the worker's operator on the Workload
  // MultiKueue made there, which it adopted; no Workload of its own beside it.
  EXPECT_EQ(JobField(n, "train", "{.spec.managedBy}"), "");
  EXPECT_EQ(Get(n, "workload " + workload, "{.metadata.ownerReferences[0].uid}"),
            JobField(n, "train", "{.metadata.uid}"));
  EXPECT_EQ(Get(n, "workloads -l tpujob.dev/job-name=train", "{.items[*].metadata.name}"),
            workload);
  EXPECT_EQ(JobPods(n, "train").size(), 2u);
  EXPECT_TRUE(ReservedChipsBecome(/*manager=*/false, "8"));
  EXPECT_TRUE(ReservedChipsBecome(/*manager=*/true, "8"));
  // The copy's status comes back to the manager; nothing of the job runs there.
  std::string phase;
  EXPECT_TRUE(Eventually(
      [&] { return (phase = ManagerGet(n, "tpujob train", "{.status.phase}")) == "Running"; },
      std::chrono::seconds(30)))
      << "the manager's job reads phase \"" << phase << "\"";
  EXPECT_EQ(Trim(Manager("get pods -n " + n + " -o name", false).output), "");

  // It finishes in the worker: the manager's job reads Succeeded, its Workload is finished,
  // MultiKueue removes the copy (and with it its pods), and both queues' quota comes back.
  ASSERT_EQ(TerminatePod(n, "train-worker-0", 0).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "train", "{.status.phase}", "Succeeded")) << worker.Log();
  EXPECT_TRUE(
      Eventually([&] { return ManagerGet(n, "tpujob train", "{.status.phase}") == "Succeeded"; },
                 std::chrono::seconds(30)))
      << Manager("get tpujob train -n " + n + " -o yaml").output;
  EXPECT_TRUE(Eventually(
      [&] {
        return ManagerGet(n, "workload " + workload,
                          "{.status.conditions[?(@.type==\"Finished\")].status}") == "True";
      },
      std::chrono::seconds(30)))
      << manager.Log();
  EXPECT_TRUE(Eventually([&] { return JobField(n, "train", "{.metadata.name}").empty(); },
                         std::chrono::seconds(60)))
      << "MultiKueue did not remove the copy from the worker";
  EXPECT_TRUE(Eventually([&] { return JobPods(n, "train").empty(); }, std::chrono::seconds(60)));
  EXPECT_TRUE(ReservedChipsBecome(/*manager=*/false, "0"));
  EXPECT_TRUE(ReservedChipsBecome(/*manager=*/true, "0"));
  // The manager's operator counts nothing of a job that runs elsewhere.
  EXPECT_EQ(manager.Log().find("created pod"), std::string::npos) << manager.Log();
}

TEST_F(MultiKueueE2E, DeletingTheManagersJobDeletesTheCopyAndItsPodsInTheWorker) {
  TestNamespace ns("mk-delete");
  SetUpQueues(ns.name());
  const std::string& n = ns_;
  OperatorProcess worker(WorkerArgs());
  OperatorProcess manager(ManagerArgs());
  ASSERT_EQ(ManagerApply(n, Job("doomed")).exit_code, 0);
  const std::string workload = AwaitRunningInTheWorker("doomed", worker, manager);
  ASSERT_FALSE(workload.empty());

  ASSERT_EQ(Manager("delete tpujob doomed -n " + n + " --wait=false").exit_code, 0);
  EXPECT_TRUE(
      Eventually([&] { return ManagerWorkload("doomed").empty(); }, std::chrono::seconds(60)))
      << "the manager's Workload outlived its job";
  EXPECT_TRUE(Eventually([&] { return JobField(n, "doomed", "{.metadata.name}").empty(); },
                         std::chrono::seconds(60)))
      << "the copy outlived the manager's job";
  EXPECT_TRUE(Eventually([&] { return JobPods(n, "doomed").empty(); }, std::chrono::seconds(60)))
      << worker.Log();
  EXPECT_EQ(Get(n, "workloads -l tpujob.dev/job-name=doomed", "{.items[*].metadata.name}"), "");
  EXPECT_TRUE(ReservedChipsBecome(/*manager=*/false, "0"));
  EXPECT_TRUE(ReservedChipsBecome(/*manager=*/true, "0"));
}

// Kueue preempts in the manager: the lower job's Workload is evicted there; MultiKueue deactivates
// its copy in the worker, whose pods stop with the job's 5 s grace period; once the copied status
// shows it stopped, the manager's operator gives the quota back, MultiKueue deletes the copy, and
// the manager's job reads Queued with Kueue's reason. The higher job runs in the worker; once it
// is gone, the lower one is dispatched and runs again. Over 60 s for that: two jobs' lives in
// turn across two control planes, MultiKueue's copies between them and the 5 s grace.
TEST_F(MultiKueueE2E, KueuePreemptsInTheManagerTheCopyStopsInTheWorkerAndRunsAgainLater) {
  TestNamespace ns("mk-preempt");
  SetUpQueues(ns.name());
  const std::string& n = ns_;
  PodWatch watch(n);
  OperatorProcess worker(WorkerArgs());
  OperatorProcess manager(ManagerArgs());
  ASSERT_EQ(ManagerApply(n, Job("low", 1)).exit_code, 0);
  const std::string low = AwaitRunningInTheWorker("low", worker, manager);
  ASSERT_FALSE(low.empty());
  const std::string first_copy = JobField(n, "low", "{.metadata.uid}");
  EXPECT_TRUE(
      Eventually([&] { return ManagerGet(n, "tpujob low", "{.status.phase}") == "Running"; },
                 std::chrono::seconds(30)));

  ASSERT_EQ(ManagerApply(n, Job("high", 100)).exit_code, 0);
  std::string admitted;
  EXPECT_TRUE(Eventually(
      [&] {
        admitted = ManagerGet(n, "tpujob low",
                              "{.status.phase} {.status.conditions[?(@.type==\"Admitted\")]"
                              ".message}");
        return admitted.starts_with("Queued ") &&
               admitted.find("Kueue evicted Workload") != std::string::npos;
      },
      std::chrono::seconds(60)))
      << "the manager's low job reads \"" << admitted << "\"\n"
      << manager.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "high", "{.status.phase}", "Running", std::chrono::seconds(90)))
      << worker.Log();
  // The first copy of the low job is gone from the worker, with its pods.
  EXPECT_TRUE(Eventually([&] { return JobField(n, "low", "{.metadata.uid}") != first_copy; },
                         std::chrono::seconds(60)));
  EXPECT_TRUE(Eventually(
      [&] {
        for (const std::string& pod : JobPods(n, "low")) {
          if (Get(n, "pod " + pod, "{.metadata.ownerReferences[0].uid}") == first_copy) {
            return false;
          }
        }
        return true;
      },
      std::chrono::seconds(60)));
  // Stopped as Kueue's own eviction stops a job, with its grace period to checkpoint, not
  // killed by the garbage collector with the copy.
  EXPECT_TRUE(Eventually([&] { return watch.Raw().find("grace=5") != std::string::npos; },
                         std::chrono::seconds(30)))
      << watch.Raw();

  // The higher job ends: the lower one is dispatched again and runs.
  ASSERT_EQ(Manager("delete tpujob high -n " + n + " --wait=false").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "low", "{.status.phase}", "Running", std::chrono::seconds(120)))
      << worker.Log() << manager.Log();
  EXPECT_NE(JobField(n, "low", "{.metadata.uid}"), first_copy);
  EXPECT_TRUE(
      Eventually([&] { return ManagerGet(n, "tpujob low", "{.status.phase}") == "Running"; },
                 std::chrono::seconds(30)))
      << Manager("get tpujob low -n " + n + " -o yaml").output;
  EXPECT_TRUE(ReservedChipsBecome(/*manager=*/true, "8"));
  EXPECT_TRUE(ReservedChipsBecome(/*manager=*/false, "8"));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
