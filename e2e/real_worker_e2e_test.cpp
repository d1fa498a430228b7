// TPUJobs whose pods run real containers on the real node of the local cluster (`e2e/cluster up
// --real-node`): a one-host v5e 2x2 pool whose fake TPU device plugin (e2e/tools/node/
// tpu-device-plugin) gives containers four /dev/accel<N>, with the operator and the node agent
// installed by the Helm chart as real pods from the project image. The workers run the test
// workload e2e/tools/node/tpu-worker, which behaves like a JAX trainer at its edges and records
// what it does in a hostPath directory the test reads (events.jsonl, its checkpoint).
//
// What is real here that is written into pod status on KWOK: the pre-flight init container runs
// `tpujob-operator preflight` and its report travels through the kubelet's termination message;
// exit codes are those of processes; SIGTERM and the grace period are the kubelet's; DNS names
// resolve through CoreDNS; a chip that fails is seen by the node agent as a missing device node.
//
// TPUJOB_E2E_DIR must name a cluster started with --real-node into whose node the image was
// imported (the real_cluster fixture of CMakeLists.txt does both).

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "operator_env.h"
#include "real_node_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using Json = nlohmann::json;
using std::chrono::seconds;

constexpr const char* kMaintenanceTaint = "cloud.google.com/impending-node-termination";
constexpr const char* kUnhealthy = "{.status.conditions[?(@.type==\"TPUUnhealthy\")].status}";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The worker program's record: every line of <checkpoint dir>/events.jsonl.
std::vector<Json> WorkerEvents(const std::string& dir) {
  std::vector<Json> events;
  std::ifstream in(dir + "/events.jsonl");
  for (std::string line; std::getline(in, line);) {
    Json event = Json::parse(line, nullptr, false);
    if (event.is_object()) events.push_back(std::move(event));
  }
  return events;
}

// The first event named `name` of `attempt` (any attempt when 0), waiting up to `timeout`.
std::optional<Json> AwaitWorkerEvent(const std::string& dir, const std::string& name,
                                     int attempt = 0, seconds timeout = seconds(120)) {
  std::optional<Json> found;
  Eventually(
      [&] {
        for (const Json& e : WorkerEvents(dir)) {
          if (e.value("event", "") == name && (attempt == 0 || e.value("attempt", 0) == attempt)) {
            found = e;
            return true;
          }
        }
        return false;
      },
      timeout, std::chrono::milliseconds(100));
  return found;
}

// The `n`th event (1, 2, ...) named `name`, waiting up to `timeout`.
std::optional<Json> AwaitNthWorkerEvent(const std::string& dir, const std::string& name, size_t n,
                                        seconds timeout = seconds(120)) {
  std::optional<Json> found;
  Eventually(
      [&] {
        size_t seen = 0;
        for (const Json& e : WorkerEvents(dir)) {
          if (e.value("event", "") == name && ++seen == n) {
            found = e;
            return true;
          }
        }
        return false;
      },
      timeout, std::chrono::milliseconds(50));
  return found;
}

std::string DescribeWorkerEvents(const std::string& dir) {
  std::string out;
  for (const Json& e : WorkerEvents(dir)) out += e.dump() + "\n";
  return out.empty() ? "(the worker recorded nothing in " + dir + ")\n" : out;
}

// Records the pre-flight init container's terminated state of every pod of a namespace as the
// kubelet reports it, from a kubectl watch started before the pods exist: a failed pre-flight's
// pod is deleted by the operator's re-issue moments later.
class PreflightWatch {
 public:
  explicit PreflightWatch(const std::string& ns) {
    path_ = ClusterDir() + "/preflight-watch-" + ns + ".log";
    const std::string cmd =
        ToolsBin() + "/kubectl --kubeconfig " + KubeconfigPath() + " get pods -n " + ns +
        " --watch -o jsonpath='"
        "{.status.initContainerStatuses[?(@.name==\"preflight\")].state.terminated.exitCode}#"
        "{.status.initContainerStatuses[?(@.name==\"preflight\")].state.terminated.message}"
        "{\"\\n\"}' > " +
        path_ + " 2>&1 & echo $!";
    pid_ = std::atoi(Trim(RunCommand(cmd, false).output).c_str());
  }
  ~PreflightWatch() {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
    std::remove(path_.c_str());
  }
  // The first terminated pre-flight: its exit code and its report (the termination message).
  std::optional<std::pair<int, std::string>> Terminated(seconds timeout = seconds(90)) const {
    std::optional<std::pair<int, std::string>> found;
    Eventually(
        [&] {
          std::ifstream in(path_);
          for (std::string line; std::getline(in, line);) {
            const auto tab = line.find('#');
            if (tab == std::string::npos || tab == 0) continue;
            found = {std::atoi(line.substr(0, tab).c_str()), line.substr(tab + 1)};
            return true;
          }
          return false;
        },
        timeout, std::chrono::milliseconds(100));
    return found;
  }

 private:
  std::string path_;
  int pid_ = -1;
};

// A TPUJob of one worker on the real node running the test workload, with a hostPath
// checkpoint directory (at /ckpt in the pod) and a memory-backed /dev/shm.
struct WorkerJob {
  WorkerJob(std::string name_,
            std::string fault_tolerance_ = "{maxJobRetries: 1, maintenanceGracePeriodSeconds: 10}",
            std::vector<std::pair<std::string, std::string>> env_ = {}, bool shm_volume_ = true)
      : name(std::move(name_)),
        fault_tolerance(std::move(fault_tolerance_)),
        env(std::move(env_)),
        shm_volume(shm_volume_) {}

  std::string name;
  std::string fault_tolerance;
  std::vector<std::pair<std::string, std::string>> env;
  bool shm_volume;
  // Names the program in the container's command (the image's ENTRYPOINT, /bin/tpu-worker),
  // which in-place restart needs.
  bool command = false;
  std::string checkpoint_dir;  // made by Yaml(), removed with the object

  ~WorkerJob() {
    if (!checkpoint_dir.empty()) RunCommand("rm -rf " + checkpoint_dir);
  }
  WorkerJob(const WorkerJob&) = delete;
  WorkerJob& operator=(const WorkerJob&) = delete;

  std::string Yaml() {
    checkpoint_dir = ClusterDir() + "/ckpt-" + name + "-" + std::to_string(::getpid());
    RunCommand("rm -rf " + checkpoint_dir + " && mkdir -p " + checkpoint_dir);
    std::string yaml = "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: " + name +
                       "\nspec:\n  tpu: {accelerator: " + PortsEnv("REAL_TPU_ACCELERATOR") +
                       ", topology: " + PortsEnv("REAL_TPU_TOPOLOGY") +
                       ", chipsPerWorker: " + PortsEnv("REAL_TPU_CHIPS") +
                       "}\n  checkpoint: {path: /ckpt}\n  faultTolerance: " + fault_tolerance +
                       "\n  replicaSpecs:\n    Worker:\n      replicas: 1\n      template:\n"
                       "        spec:\n          containers:\n          - name: trainer\n"
                       "            image: \"" +
                       WorkerImage() + "\"\n            imagePullPolicy: Never\n" +
                       (command ? "            command: [/bin/tpu-worker]\n" : "") +
                       "            env:\n            - {name: WORKER_STEP_MS, value: \"100\"}\n";
    for (const auto& [key, value] : env) {
      yaml += "            - {name: " + key + ", value: \"" + value + "\"}\n";
    }
    yaml += "            volumeMounts:\n            - {name: ckpt, mountPath: /ckpt}\n";
    if (shm_volume) yaml += "            - {name: shm, mountPath: /dev/shm}\n";
    yaml += "          volumes:\n          - {name: ckpt, hostPath: {path: " + checkpoint_dir +
            ", type: Directory}}\n";
    if (shm_volume) yaml += "          - {name: shm, emptyDir: {medium: Memory}}\n";
    return yaml;
  }
};

// The operator (one replica) and the node agent, installed once for the suite.
class RealWorkerE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (RealNode().empty() || ImageArchive().empty() || WorkerImage().empty()) return;
    ops_ = std::make_unique<TestNamespace>("real-workers");
    agents_ = std::make_unique<TestNamespace>("real-workers-agent");  // hostPath: privileged
    RestoreNode();
    release_ = std::make_unique<Release>(
        ops_->name(), "--set replicaCount=1 --set nodeAgent.namespace=" + agents_->name() +
                          " --set nodeAgent.devPath=" + TpuDir() +
                          "/dev --set nodeAgent.intervalSeconds=2 --set nodeAgent.passAfter=1");
  }
  static void TearDownTestSuite() {
    release_.reset();
    agents_.reset();
    ops_.reset();
    RestoreNode();
  }

  void SetUp() override {
    ASSERT_FALSE(RealNode().empty())
        << ClusterDir() << " has no real node: start it with e2e/cluster up --real-node";
    ASSERT_FALSE(WorkerImage().empty()) << "the node's tools name no WORKER_IMAGE";
    ASSERT_NE(release_, nullptr) << "no image archive: set TPUJOB_E2E_IMAGE_ARCHIVE to the one "
                                    "make image wrote, or write its path to "
                                 << ClusterDir() << "/image-archive";
    ASSERT_EQ(release_->install().exit_code, 0) << release_->install().output;
    ASSERT_TRUE(PodsBecomeReady(ops_->name(), kOperatorSelector, 1));
    // One on each real node.
    ASSERT_TRUE(PodsBecomeReady(agents_->name(), kAgentSelector, RealNodeCount()));
    RestoreNode();
    node_ = RealNode();
    // The chips are free: no job pod of an earlier test (whose namespace may still be going) is
    // left on the node.
    ASSERT_TRUE(Eventually(
        [&] {
          return Trim(Kubectl("get pods -A -l tpujob.dev/job-name --field-selector spec.nodeName=" +
                                  node_ + " -o name",
                              false)
                          .output)
              .empty();
        },
        seconds(90), std::chrono::milliseconds(250)))
        << Kubectl("get pods -A -l tpujob.dev/job-name -o wide").output;
    ASSERT_TRUE(Eventually([&] { return NodeField(node_, kUnhealthy) == "False"; }, seconds(60),
                           std::chrono::milliseconds(250)))
        << "the node agent does not report " << node_ << " healthy:\n"
        << AgentLogs();
  }
  void TearDown() override { RestoreNode(); }

  // The node as a healthy, schedulable TPU host: every chip healthy and visible, no cordon, no
  // maintenance notice, the agent's condition False.
  static void RestoreNode() {
    const std::string node = RealNode();
    if (node.empty()) return;
    SetChips("unhealthy", "");
    SetChips("hidden", "");
    // One taint per command: kubectl removes none when one of them is missing.
    Kubectl("taint node " + node + " " + kMaintenanceTaint + "- 2>/dev/null", false);
    Kubectl("taint node " + node + " tpujob.dev/faulty- 2>/dev/null", false);
    Kubectl("uncordon " + node, false);
    Eventually([&] { return NodeField(node, kUnhealthy) != "True"; }, seconds(30),
               std::chrono::milliseconds(250));
    // The operator's cordon follows the condition; uncordon once more after it cleared.
    Kubectl("taint node " + node + " tpujob.dev/faulty- 2>/dev/null", false);
    Kubectl("uncordon " + node, false);
    // Every chip allocatable again (the kubelet's next node status update).
    Eventually(
        [&] {
          return NodeField(node, "{.status.allocatable.google\\.com/tpu}") ==
                 PortsEnv("REAL_TPU_CHIPS");
        },
        seconds(30), std::chrono::milliseconds(250));
  }

  static std::string AgentLogs() {
    return Kubectl("logs -n " + agents_->name() + " -l " + kAgentSelector + " --tail=20").output;
  }
  static std::string OperatorLogs() {
    return Kubectl("logs -n " + ops_->name() + " -l " + kOperatorSelector + " --tail=40").output;
  }

  std::string WorkerPod(const std::string& ns, const std::string& job) {
    const std::vector<std::string> pods = JobPods(ns, job);
    return pods.empty() ? "" : pods.front();
  }

  static std::unique_ptr<TestNamespace> ops_;
  static std::unique_ptr<TestNamespace> agents_;
  static std::unique_ptr<Release> release_;
  std::string node_;
};

std::unique_ptr<TestNamespace> RealWorkerE2E::ops_;
std::unique_ptr<TestNamespace> RealWorkerE2E::agents_;
std::unique_ptr<Release> RealWorkerE2E::release_;

// The pre-flight item named `item` of a report ({} when absent).
Json ReportItem(const Json& report, const std::string& item) {
  if (report.is_object() && report.contains("items")) {
    for (const Json& i : report["items"]) {
      if (i.value("item", "") == item) return i;
    }
  }
  return Json::object();
}

// status.jobRetries, "0" when the field is left out (no re-issue counted yet).
std::string JobRetries(const std::string& ns, const std::string& job) {
  const std::string retries = JobField(ns, job, "{.status.jobRetries}");
  return retries.empty() ? "0" : retries;
}

// The job's faults[] entry of `kind` ({} when absent).
Json FaultOf(const std::string& ns, const std::string& job, const std::string& kind) {
  const Json status = JobJson(ns, job).value("status", Json::object());
  for (const Json& f : status.value("faults", Json::array())) {
    if (f.value("kind", "") == kind) return f;
  }
  return Json::object();
}

TEST_F(RealWorkerE2E, PreflightPassesForRealAndTheProgramsExitZeroSucceedsTheJob) {
  TestNamespace ns("real-pass");
  WorkerJob job{"pass",
                "{maxJobRetries: 1, maintenanceGracePeriodSeconds: 10, "
                "preflight: {enabled: true, checks: [dns, disk, accelerator]}}",
                {{"WORKER_STEPS", "100"}}};
  ASSERT_EQ(ApplyYaml(ns.name(), job.Yaml()).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "pass", "{.status.phase}", "Running", seconds(120)))
      << DescribePods(ns.name(), "tpujob.dev/job-name=pass") << OperatorLogs();
  const std::string pod = WorkerPod(ns.name(), "pass");
  // The program's log, followed while the pod exists: the operator deletes a finished job's pods.
  BackgroundCommand logs(ToolsBin() + "/kubectl --kubeconfig " + KubeconfigPath() + " logs -f -n " +
                         ns.name() + " " + pod + " -c trainer");
  EXPECT_EQ(NodeOf(ns.name(), pod), node_);

  // The report, as the kubelet delivered it in the init container's termination message.
  const Json preflight =
      Json::parse(Get(ns.name(), "pod " + pod,
                      "{.status.initContainerStatuses[?(@.name==\"preflight\")].state.terminated}"),
                  nullptr, false);
  ASSERT_TRUE(preflight.is_object()) << DescribePods(ns.name(), "tpujob.dev/job-name=pass");
  EXPECT_EQ(preflight.value("exitCode", -1), 0);
  const std::string message = preflight.value("message", "");
  std::cout << "== pre-flight report from the kubelet's termination message (" << message.size()
            << " bytes):\n"
            << message << "\n";
  const Json report = Json::parse(message, nullptr, false);
  ASSERT_TRUE(report.is_object()) << message;
  EXPECT_EQ(report.value("verdict", ""), "pass");
  EXPECT_EQ(report.value("node", ""), node_);
  for (const char* item : {"dns", "disk-size root", "disk-size shm", "accelerator"}) {
    EXPECT_EQ(ReportItem(report, item).value("verdict", ""), "pass") << item << ": " << message;
  }
  // No volume at /cache: skipped (a passing verdict marked as such).
  EXPECT_EQ(ReportItem(report, "disk-size cache").value("skipped", false), true) << message;
  // Four device nodes from the plugin; the pod's own name resolved through CoreDNS.
  EXPECT_NE(ReportItem(report, "accelerator").value("value", "").find("accel=4 "),
            std::string::npos)
      << message;
  EXPECT_EQ(ReportItem(report, "dns").value("value", ""), "1/1 resolved") << message;

  // The program: four chips and GKE's variables from the device plugin, its peer resolved, exit 0.
  const auto start = AwaitWorkerEvent(job.checkpoint_dir, "start", 1);
  ASSERT_TRUE(start) << DescribeWorkerEvents(job.checkpoint_dir);
  EXPECT_EQ(start->value("devices", 0), 4) << start->dump();
  EXPECT_EQ(start->value("visible_chips", ""), "0,1,2,3") << start->dump();
  const auto peers = AwaitWorkerEvent(job.checkpoint_dir, "peers-resolved", 1);
  ASSERT_TRUE(peers) << DescribeWorkerEvents(job.checkpoint_dir);
  EXPECT_NE(peers->value("peers", "").find("pass-worker-0.pass=10.250.0."), std::string::npos)
      << peers->dump();
  EXPECT_TRUE(JobFieldBecomes(ns.name(), "pass", "{.status.phase}", "Succeeded", seconds(60)))
      << DescribeWorkerEvents(job.checkpoint_dir);
  const auto exit = AwaitWorkerEvent(job.checkpoint_dir, "exit", 1, seconds(5));
  ASSERT_TRUE(exit) << DescribeWorkerEvents(job.checkpoint_dir);
  EXPECT_EQ((*exit)["code"], 0);
  EXPECT_EQ(exit->value("step", 0), 100);

  // kubectl logs shows the program's own lines; the plugin shows the job as it ran.
  EXPECT_EQ(logs.ExitCode(seconds(30)), 0) << logs.Output();
  EXPECT_NE(logs.Output().find("event=first-step"), std::string::npos) << logs.Output();
  EXPECT_NE(logs.Output().find("event=exit attempt=1 step=100 code=0"), std::string::npos)
      << logs.Output();
  const auto describe = KubectlTpujob("describe pass -n " + ns.name());
  EXPECT_EQ(describe.exit_code, 0) << describe.output;
  EXPECT_NE(describe.output.find("Succeeded"), std::string::npos) << describe.output;
  const auto list = KubectlTpujob("list -n " + ns.name());
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_NE(list.output.find("pass"), std::string::npos) << list.output;
  std::cout << "== kubectl tpujob describe:\n" << describe.output;
}

TEST_F(RealWorkerE2E, AChipTheDevicePluginHidesFailsPreflightWithExit10AndCordonsTheNode) {
  TestNamespace ns("real-hidden");
  PreflightWatch watch(ns.name());
  SetChips("hidden", "3");
  WorkerJob job{"hidden",
                "{maxJobRetries: 1, maintenanceGracePeriodSeconds: 10, "
                "preflight: {enabled: true}}"};
  ASSERT_EQ(ApplyYaml(ns.name(), job.Yaml()).exit_code, 0);
  const auto terminated = watch.Terminated();
  ASSERT_TRUE(terminated) << DescribePods(ns.name(), "tpujob.dev/job-name=hidden");
  std::cout << "== failed pre-flight, exit " << terminated->first << ", report:\n"
            << terminated->second << "\n";
  EXPECT_EQ(terminated->first, 10);
  const Json report = Json::parse(terminated->second, nullptr, false);
  EXPECT_EQ(report.value("verdict", ""), "node-fault") << terminated->second;
  const Json accelerator = ReportItem(report, "accelerator");
  EXPECT_EQ(accelerator.value("verdict", ""), "fail") << terminated->second;
  EXPECT_EQ(accelerator.value("fault", ""), "node") << terminated->second;
  EXPECT_NE(accelerator.value("value", "").find("accel=3 "), std::string::npos)
      << terminated->second;

  // Case 1 of the fault table: the node is cordoned and the job re-issued, a retry used.
  EXPECT_TRUE(Eventually([&] { return NodeField(node_, "{.spec.unschedulable}") == "true"; },
                         seconds(30), std::chrono::milliseconds(250)))
      << OperatorLogs();
  EXPECT_TRUE(JobFieldBecomes(ns.name(), "hidden", "{.status.jobRetries}", "1", seconds(30)));
  const Json fault = FaultOf(ns.name(), "hidden", "PreflightFailed");
  EXPECT_EQ(fault.value("item", ""), "accelerator") << fault.dump();
  EXPECT_EQ(fault.value("exitCode", 0), 10) << fault.dump();
  EXPECT_EQ(fault.value("node", ""), node_) << fault.dump();
  EXPECT_EQ(fault.value("action", ""), "ReissueJob") << fault.dump();

  // The chip comes back and a person uncordons: the re-issued attempt passes and runs.
  SetChips("hidden", "");
  Kubectl("taint node " + node_ + " tpujob.dev/faulty-");
  Kubectl("uncordon " + node_);
  EXPECT_TRUE(JobFieldBecomes(ns.name(), "hidden", "{.status.phase}", "Running", seconds(120)))
      << DescribePods(ns.name(), "tpujob.dev/job-name=hidden") << OperatorLogs();
  EXPECT_EQ(JobField(ns.name(), "hidden", "{.status.attempt}"), "2");
}

TEST_F(RealWorkerE2E, ASmallShmFailsPreflightWithExit11AndAMissingShmVolumeIsRefused) {
  // Without a volume at /dev/shm the container gets the runtime's 64 MB: the operator refuses
  // such a spec before any pod (Valid=False)...
  TestNamespace ns("real-shm");
  WorkerJob bare{"no-shm", "{maxJobRetries: 1, preflight: {enabled: true}}", {}, false};
  ASSERT_EQ(ApplyYaml(ns.name(), bare.Yaml()).exit_code, 0);
  EXPECT_TRUE(JobFieldBecomes(ns.name(), "no-shm",
                              "{.status.conditions[?(@.type==\"Valid\")].status}", "False",
                              seconds(30)));
  EXPECT_TRUE(JobPods(ns.name(), "no-shm").empty());
  // ...because that is what a real container gets: the same check run by hand in a pod without
  // the volume measures 0.07 GB and exits 11 (config).
  const std::string image = Get(ops_->name(), "deployment " + std::string(kFullname),
                                "{.spec.template.spec.containers[0].image}");
  ASSERT_EQ(ApplyYaml(ns.name(),
                      "apiVersion: v1\nkind: Pod\nmetadata: {name: shm-probe}\nspec:\n"
                      "  restartPolicy: Never\n"
                      "  tolerations: [{key: google.com/tpu, operator: Exists}]\n"
                      "  containers:\n  - name: preflight\n"
                      "    image: " +
                          image +
                          "\n    imagePullPolicy: Never\n"
                          "    args: [preflight, --checks=disk, --root-min-gb=0]\n")
                .exit_code,
            0);
  EXPECT_TRUE(
      Eventually([&] { return Get(ns.name(), "pod shm-probe", "{.status.phase}") == "Failed"; },
                 seconds(60), std::chrono::milliseconds(250)))
      << DescribePods(ns.name(), "!tpujob.dev/job-name");
  const std::string probe = Get(ns.name(), "pod shm-probe",
                                "{.status.containerStatuses[0].state.terminated.exitCode} "
                                "{.status.containerStatuses[0].state.terminated.message}");
  std::cout << "== pre-flight in a pod without a /dev/shm volume: " << probe << "\n";
  EXPECT_TRUE(probe.starts_with("11 ")) << probe;
  const Json shm =
      ReportItem(Json::parse(probe.substr(probe.find(' ') + 1), nullptr, false), "disk-size shm");
  EXPECT_EQ(shm.value("value", ""), "0.07 GB") << probe;
  EXPECT_EQ(shm.value("fault", ""), "config") << probe;

  // With a memory-backed volume that is smaller than the job's threshold, the node's memory is
  // what fell short (case 2): exit 11, the node cordoned with the item named, the job re-issued.
  PreflightWatch watch(ns.name());
  WorkerJob job{"small-shm",
                "{maxJobRetries: 1, maintenanceGracePeriodSeconds: 10, "
                "preflight: {enabled: true, thresholds: {shmGB: 100000}}}"};
  ASSERT_EQ(ApplyYaml(ns.name(), job.Yaml()).exit_code, 0);
  const auto terminated = watch.Terminated();
  ASSERT_TRUE(terminated) << DescribePods(ns.name(), "tpujob.dev/job-name=small-shm");
  std::cout << "== pre-flight with /dev/shm under the threshold, exit " << terminated->first
            << ":\n"
            << terminated->second << "\n";
  EXPECT_EQ(terminated->first, 11);
  const Json item = ReportItem(Json::parse(terminated->second, nullptr, false), "disk-size shm");
  EXPECT_EQ(item.value("verdict", ""), "fail") << terminated->second;
  EXPECT_EQ(item.value("threshold", ""), "> 100000 GB") << terminated->second;
  EXPECT_TRUE(Eventually([&] { return NodeField(node_, "{.spec.unschedulable}") == "true"; },
                         seconds(30), std::chrono::milliseconds(250)))
      << OperatorLogs();
  EXPECT_TRUE(JobFieldBecomes(ns.name(), "small-shm", "{.status.jobRetries}", "1", seconds(30)));
  const Json fault = FaultOf(ns.name(), "small-shm", "PreflightFailed");
  EXPECT_EQ(fault.value("item", ""), "disk-size shm") << fault.dump();
  EXPECT_EQ(fault.value("exitCode", 0), 11) << fault.dump();
}

TEST_F(RealWorkerE2E, ARetryableExitRestartsTheWorkerWhichResumesFromItsCheckpoint) {
  TestNamespace ns("real-retry");
  WorkerJob job{"retry",
                "{maxJobRetries: 1, maintenanceGracePeriodSeconds: 10, "
                "exitCodes: {retryable: [42]}, preflight: {enabled: false}}",
                {{"WORKER_STEPS", "12"}, {"WORKER_EXIT_CODES", "42,0"}}};
  ASSERT_EQ(ApplyYaml(ns.name(), job.Yaml()).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "retry", "{.status.phase}", "Succeeded", seconds(120)))
      << DescribeWorkerEvents(job.checkpoint_dir)
      << DescribePods(ns.name(), "tpujob.dev/job-name=retry") << OperatorLogs();
  // The first process exited 42 after 12 steps; the operator restarted the worker (a new pod of
  // the same attempt), whose process resumed from step 12 and exited 0 at step 24.
  std::vector<Json> starts, exits;
  std::optional<Json> resumed;
  for (const Json& e : WorkerEvents(job.checkpoint_dir)) {
    if (e["event"] == "start") starts.push_back(e);
    if (e["event"] == "exit") exits.push_back(e);
    if (e["event"] == "resumed") resumed = e;
  }
  const std::string record = DescribeWorkerEvents(job.checkpoint_dir);
  ASSERT_EQ(starts.size(), 2u) << record;
  ASSERT_EQ(exits.size(), 2u) << record;
  EXPECT_EQ(exits[0]["code"], 42) << record;
  EXPECT_EQ(exits[0]["step"], 12) << record;
  ASSERT_TRUE(resumed) << record;
  EXPECT_EQ((*resumed)["step"], 12) << record;
  EXPECT_EQ((*resumed)["from_attempt"], 1) << record;
  EXPECT_EQ((*resumed)["attempt"], 1) << record;
  EXPECT_EQ(exits[1]["code"], 0) << record;
  EXPECT_EQ(exits[1]["step"], 24) << record;
  const Json fault = FaultOf(ns.name(), "retry", "ContainerFailed");
  EXPECT_EQ(fault.value("exitCode", 0), 42) << fault.dump();
  EXPECT_EQ(fault.value("action", ""), "RestartWorker") << fault.dump();
  EXPECT_EQ(JobRetries(ns.name(), "retry"), "0");
  EXPECT_EQ(JobField(ns.name(), "retry", "{.status.attempt}"), "1");
}

// spec.faultTolerance.restart InPlace on a real kubelet: the program runs under tpujob-supervise
// (installed from the operator's image by an init container), a retryable exit restarts it in the
// same pod, and the next process resumes from the checkpoint. The same program under Recreate
// in the same run gives the time pod recreation takes, for comparison.
TEST_F(RealWorkerE2E, InPlaceRestartsTheProgramInTheSamePodWhereRecreateMakesANewOne) {
  struct Measured {
    std::string mode;
    int64_t exit_to_first_step_ms = -1;
    bool same_pod = false;
  };
  std::vector<Measured> runs;
  for (const std::string mode : {"InPlace", "Recreate"}) {
    SCOPED_TRACE(mode);
    const std::string name = mode == "InPlace" ? "inplace" : "recreate";
    TestNamespace ns("real-" + name);
    WorkerJob job{name,
                  "{maxJobRetries: 0, restart: " + mode +
                      ", maintenanceGracePeriodSeconds: 10, exitCodes: {retryable: [42]}, "
                      "preflight: {enabled: false}}",
                  {{"WORKER_STEPS", "30"}, {"WORKER_EXIT_CODES", "42,0"}}};
    job.command = true;
    ASSERT_EQ(ApplyYaml(ns.name(), job.Yaml()).exit_code, 0);
    const std::string selector = "tpujob.dev/job-name=" + name;
    const auto first = AwaitNthWorkerEvent(job.checkpoint_dir, "first-step", 1);
    ASSERT_TRUE(first) << DescribeWorkerEvents(job.checkpoint_dir)
                       << DescribePods(ns.name(), selector) << OperatorLogs();
    const std::string pod = name + "-worker-0";
    const std::string uid = Get(ns.name(), "pod " + pod, "{.metadata.uid}");
    const auto exited = AwaitNthWorkerEvent(job.checkpoint_dir, "exit", 1);
    ASSERT_TRUE(exited) << DescribeWorkerEvents(job.checkpoint_dir);
    EXPECT_EQ((*exited)["code"], 42);
    const auto again = AwaitNthWorkerEvent(job.checkpoint_dir, "first-step", 2);
    ASSERT_TRUE(again) << DescribeWorkerEvents(job.checkpoint_dir)
                       << DescribePods(ns.name(), selector) << OperatorLogs();
    const std::string uid_then = Get(ns.name(), "pod " + pod, "{.metadata.uid}");
    const std::string restarts =
        Get(ns.name(), "pod " + pod, "{.status.containerStatuses[0].restartCount}");
    const std::string last =
        Get(ns.name(), "pod " + pod, "{.status.containerStatuses[0].lastState.terminated.message}");
    runs.push_back({mode, (*again)["time_ms"].get<int64_t>() - (*exited)["time_ms"].get<int64_t>(),
                    uid_then == uid});
    EXPECT_EQ((*again).value("resumed_from", -1), 30) << DescribeWorkerEvents(job.checkpoint_dir);
    if (mode == "InPlace") {
      // The same pod; the kubelet restarted its container once; the supervisor's report of the
      // first generation is the container's last termination message.
      EXPECT_EQ(uid_then, uid);
      EXPECT_EQ(restarts, "1");
      const Json report = Json::parse(last, nullptr, false);
      EXPECT_EQ(report.value("state", ""), "exited") << last;
      EXPECT_EQ(report.value("generation", 0), 1) << last;
      EXPECT_EQ(report.value("exit", 0), 42) << last;
      EXPECT_EQ(JobField(ns.name(), name, "{.status.inPlace.generation}"), "2");
      const std::string log = Kubectl("logs -n " + ns.name() + " " + pod, false).output;
      EXPECT_NE(log.find("generation 2"), std::string::npos) << log;
    } else {
      EXPECT_NE(uid_then, uid);
    }
    ASSERT_TRUE(JobFieldBecomes(ns.name(), name, "{.status.phase}", "Succeeded", seconds(120)))
        << DescribeWorkerEvents(job.checkpoint_dir) << OperatorLogs();
    const Json fault = FaultOf(ns.name(), name, "ContainerFailed");
    EXPECT_EQ(fault.value("action", ""), mode == "InPlace" ? "RestartInPlace" : "RestartWorker")
        << fault.dump();
  }
  ASSERT_EQ(runs.size(), 2u);
  std::cout << "== exit 42 -> the next process's first step: in place "
            << runs[0].exit_to_first_step_ms << " ms (same pod), recreated "
            << runs[1].exit_to_first_step_ms << " ms (new pod)\n";
}

TEST_F(RealWorkerE2E, AMaintenanceTaintGivesTheProgramSigtermToCheckpointAndReissuesWithoutARetry) {
  TestNamespace ns("real-maint");
  WorkerJob job{"maint", "{maxJobRetries: 0, maintenanceGracePeriodSeconds: 30}"};
  ASSERT_EQ(ApplyYaml(ns.name(), job.Yaml()).exit_code, 0);
  ASSERT_TRUE(AwaitWorkerEvent(job.checkpoint_dir, "first-step", 1))
      << DescribePods(ns.name(), "tpujob.dev/job-name=maint") << OperatorLogs();
  ASSERT_TRUE(AwaitWorkerEvent(job.checkpoint_dir, "checkpoint", 1));  // a few steps in

  const int64_t tainted = NowMs();
  ASSERT_EQ(Kubectl("taint node " + node_ + " " + kMaintenanceTaint + "=:NoSchedule").exit_code, 0);
  const auto sigterm = AwaitWorkerEvent(job.checkpoint_dir, "sigterm", 1, seconds(60));
  ASSERT_TRUE(sigterm) << DescribeWorkerEvents(job.checkpoint_dir) << OperatorLogs();
  const auto saved = AwaitWorkerEvent(job.checkpoint_dir, "exit", 1, seconds(30));
  ASSERT_TRUE(saved) << DescribeWorkerEvents(job.checkpoint_dir);
  const int64_t marker_ms = NowMs();
  std::ifstream marker(job.checkpoint_dir + "/slice-0-worker-0/sigterm-attempt-1");
  int marker_step = -1;
  marker >> marker_step;
  EXPECT_EQ(marker_step, (*saved)["step"].get<int>()) << "no checkpoint marker";
  // Within the grace period, by far: the program saved and exited on its own.
  EXPECT_LT((*saved)["time_ms"].get<int64_t>() - tainted, 30000);

  // Re-issued without a retry used (maxJobRetries is 0), no cordon; the next attempt waits for
  // the node, whose maintenance then ends.
  EXPECT_TRUE(JobFieldBecomes(ns.name(), "maint", "{.status.attempt}", "2", seconds(30)))
      << OperatorLogs();
  EXPECT_EQ(JobRetries(ns.name(), "maint"), "0");
  const Json fault = FaultOf(ns.name(), "maint", "Maintenance");
  EXPECT_EQ(fault.value("node", ""), node_) << fault.dump();
  EXPECT_NE(NodeField(node_, "{.spec.unschedulable}"), "true");
  EXPECT_TRUE(Eventually(
      [&] {
        return Trim(Kubectl("get pods -n " + ns.name() + " -l tpujob.dev/attempt=1 -o name", false)
                        .output)
            .empty();
      },
      seconds(60), std::chrono::milliseconds(250)));
  const int64_t lifted = NowMs();
  ASSERT_EQ(Kubectl("taint node " + node_ + " " + kMaintenanceTaint + "-").exit_code, 0);
  const auto resumed = AwaitWorkerEvent(job.checkpoint_dir, "resumed", 2);
  ASSERT_TRUE(resumed) << DescribeWorkerEvents(job.checkpoint_dir)
                       << DescribePods(ns.name(), "tpujob.dev/job-name=maint") << OperatorLogs();
  EXPECT_EQ((*resumed)["from_attempt"], 1);
  EXPECT_EQ((*resumed)["from_reason"], "sigterm");
  EXPECT_EQ((*resumed)["step"], marker_step);
  const auto first = AwaitWorkerEvent(job.checkpoint_dir, "first-step", 2);
  ASSERT_TRUE(first);
  const int64_t first_ms = (*first)["time_ms"];
  std::cout << "== maintenance taint -> SIGTERM in the program "
            << (*sigterm)["time_ms"].get<int64_t>() - tainted << " ms, -> checkpoint marker "
            << (*saved)["time_ms"].get<int64_t>() - tainted << " ms (seen " << marker_ms - tainted
            << " ms); the old pod gone and the maintenance over after " << lifted - tainted
            << " ms; -> next attempt's first step " << first_ms - tainted << " ms ("
            << first_ms - lifted << " ms after the maintenance ended), resumed at step "
            << marker_step << "\n";
}

TEST_F(RealWorkerE2E, AProgramThatIgnoresSigtermIsKilledAtTheEndOfTheGracePeriodNotBefore) {
  TestNamespace ns("real-grace");
  constexpr int kGraceSeconds = 8;
  WorkerJob job{
      "grace",
      "{maxJobRetries: 0, maintenanceGracePeriodSeconds: " + std::to_string(kGraceSeconds) + "}",
      {{"WORKER_ON_SIGTERM", "ignore"}}};
  ASSERT_EQ(ApplyYaml(ns.name(), job.Yaml()).exit_code, 0);
  ASSERT_TRUE(AwaitWorkerEvent(job.checkpoint_dir, "first-step", 1))
      << DescribePods(ns.name(), "tpujob.dev/job-name=grace") << OperatorLogs();
  ASSERT_EQ(Kubectl("taint node " + node_ + " " + kMaintenanceTaint + "=:NoSchedule").exit_code, 0);
  const auto ignored = AwaitWorkerEvent(job.checkpoint_dir, "sigterm-ignored", 1, seconds(60));
  ASSERT_TRUE(ignored) << DescribeWorkerEvents(job.checkpoint_dir) << OperatorLogs();
  EXPECT_TRUE(Eventually(
      [&] {
        return Trim(Kubectl("get pods -n " + ns.name() + " -l tpujob.dev/attempt=1 -o name", false)
                        .output)
            .empty();
      },
      seconds(kGraceSeconds + 30), std::chrono::milliseconds(250)));
  // The program kept stepping after SIGTERM until the kubelet's SIGKILL at the end of the grace
  // period: its last step is within a step or two of SIGTERM + grace, and it never exited.
  int64_t last_step = 0;
  bool exited = false;
  for (const Json& e : WorkerEvents(job.checkpoint_dir)) {
    if (e.value("attempt", 0) != 1) continue;
    if (e["event"] == "step") last_step = e["time_ms"];
    if (e["event"] == "exit") exited = true;
  }
  const int64_t ran_on = last_step - (*ignored)["time_ms"].get<int64_t>();
  std::cout << "== SIGTERM ignored: the program ran on for " << ran_on << " ms of a "
            << kGraceSeconds << " s grace period\n";
  EXPECT_FALSE(exited) << DescribeWorkerEvents(job.checkpoint_dir);
  EXPECT_GE(ran_on, kGraceSeconds * 1000 - 1000) << "killed before the end of the grace period";
  EXPECT_LE(ran_on, kGraceSeconds * 1000 + 2000) << "not killed at the end of the grace period";
  EXPECT_EQ(JobRetries(ns.name(), "grace"), "0");
}

TEST_F(RealWorkerE2E, AChipMarkedUnhealthyIsSeenByTheNodeAgentPodAndTheJobMovesOff) {
  TestNamespace ns("real-chip");
  // The agent's liveness probe answers at the pod's address, as the kubelet asks it.
  const std::string agent_ip =
      Get(agents_->name(), "pods -l " + kAgentSelector + " --field-selector spec.nodeName=" + node_,
          "{.items[0].status.podIP}");
  const std::string daemonset = "daemonset " + std::string(kFullname) + "-node-agent";
  const std::string agent_port =
      Get(agents_->name(), daemonset,
          "{.spec.template.spec.containers[0].ports[?(@.name==\"health\")].containerPort}");
  EXPECT_EQ(RunCommand("curl -s -o /dev/null -m 5 -w '%{http_code}' http://" + agent_ip + ":" +
                           agent_port + "/healthz",
                       false)
                .output,
            "200");

  WorkerJob job{"chip"};
  ASSERT_EQ(ApplyYaml(ns.name(), job.Yaml()).exit_code, 0);
  ASSERT_TRUE(AwaitWorkerEvent(job.checkpoint_dir, "first-step", 1))
      << DescribePods(ns.name(), "tpujob.dev/job-name=chip") << OperatorLogs();
  EXPECT_EQ(NodeField(node_, "{.status.allocatable.google\\.com/tpu}"), "4");

  // The device plugin marks chip 3 unhealthy: the kubelet lowers allocatable and the chip's
  // device node goes; the agent counts 3 of 4, the operator cordons and re-issues.
  const int64_t failed = NowMs();
  SetChips("unhealthy", "3");
  EXPECT_TRUE(Eventually([&] { return NodeField(node_, kUnhealthy) == "True"; }, seconds(30),
                         std::chrono::milliseconds(250)))
      << AgentLogs();
  const int64_t condition_ms = NowMs();
  const std::string message =
      NodeField(node_, "{.status.conditions[?(@.type==\"TPUUnhealthy\")].message}");
  EXPECT_NE(message.find("3 of 4"), std::string::npos) << message;
  EXPECT_TRUE(Eventually([&] { return NodeField(node_, "{.spec.unschedulable}") == "true"; },
                         seconds(30), std::chrono::milliseconds(250)))
      << OperatorLogs();
  EXPECT_TRUE(JobFieldBecomes(ns.name(), "chip", "{.status.attempt}", "2", seconds(30)))
      << OperatorLogs();
  EXPECT_EQ(JobRetries(ns.name(), "chip"), "1");
  EXPECT_EQ(FaultOf(ns.name(), "chip", "NodeUnhealthy").value("node", ""), node_);
  // The kubelet reports the plugin's health with its next node status update (every 4 s here).
  EXPECT_TRUE(
      Eventually([&] { return NodeField(node_, "{.status.allocatable.google\\.com/tpu}") == "3"; },
                 seconds(30), std::chrono::milliseconds(250)))
      << "allocatable google.com/tpu: "
      << NodeField(node_, "{.status.allocatable.google\\.com/tpu}");
  // Capacity keeps the unhealthy chip (the kubelet lowers allocatable only), which is what the
  // agent compares with: a round after the kubelet's update still counts 3 of 4, not 3 of 3.
  EXPECT_EQ(NodeField(node_, "{.status.capacity.google\\.com/tpu}"), "4");
  const std::string heartbeat =
      "{.status.conditions[?(@.type==\"TPUUnhealthy\")].lastHeartbeatTime}";
  const std::string seen = NodeField(node_, heartbeat);
  EXPECT_TRUE(Eventually([&] { return NodeField(node_, heartbeat) != seen; }, seconds(30),
                         std::chrono::milliseconds(250)))
      << AgentLogs();
  EXPECT_EQ(NodeField(node_, kUnhealthy), "True");
  EXPECT_NE(
      NodeField(node_, "{.status.conditions[?(@.type==\"TPUUnhealthy\")].message}").find("3 of 4"),
      std::string::npos)
      << AgentLogs();
  // The old attempt's program got SIGTERM and saved its checkpoint before its pod went.
  EXPECT_TRUE(Eventually(
      [&] {
        for (const Json& e : WorkerEvents(job.checkpoint_dir)) {
          if (e["event"] == "checkpoint" && e["attempt"] == 1 && e["reason"] == "sigterm") {
            return true;
          }
        }
        return false;
      },
      seconds(30), std::chrono::milliseconds(100)))
      << DescribeWorkerEvents(job.checkpoint_dir);
  std::cout << "== chip 3 unhealthy -> TPUUnhealthy=True after " << condition_ms - failed
            << " ms: " << message << "\n";
}

// The first job of the quick start, on the real node: `kubectl tpujob run` from the type name
// alone, `logs -f` following the program's own lines with their worker prefix through a
// maintenance re-issue (saying when attempt 1 ended and why), `wait --for=completion`.
TEST_F(RealWorkerE2E, KubectlTpujobRunLogsAndWaitFollowTheProgramAcrossAReissue) {
  TestNamespace ns("real-cli");
  const std::string n = ns.name();
  const auto run = KubectlTpujob("run cli -n " + n + " --tpu-type " + PortsEnv("REAL_TPU_TYPE") +
                                 " --image " + WorkerImage() +
                                 " --env WORKER_STEPS=100 --env WORKER_STEP_MS=100 -- "
                                 "/bin/tpu-worker");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  BackgroundCommand follow(KubectlTpujobCommand("logs cli -f -n " + n));
  const auto shown = [&](const std::string& text) {
    return Eventually([&] { return follow.Output().find(text) != std::string::npos; }, seconds(120),
                      std::chrono::milliseconds(100));
  };
  ASSERT_TRUE(shown("event=first-step attempt=1"))
      << follow.Output() << DescribePods(n, "tpujob.dev/job-name=cli") << OperatorLogs();

  // Maintenance: SIGTERM, the job re-issued; attempt 2 runs once the maintenance is over.
  ASSERT_EQ(Kubectl("taint node " + node_ + " " + kMaintenanceTaint + "=:NoSchedule").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "cli", "{.status.attempt}", "2", seconds(60))) << OperatorLogs();
  ASSERT_TRUE(Eventually(
      [&] {
        return Trim(Kubectl("get pods -n " + n + " -l tpujob.dev/attempt=1 -o name", false).output)
            .empty();
      },
      seconds(60), std::chrono::milliseconds(250)));
  ASSERT_EQ(Kubectl("taint node " + node_ + " " + kMaintenanceTaint + "-").exit_code, 0);
  ASSERT_TRUE(shown("event=first-step attempt=2")) << follow.Output() << OperatorLogs();

  // Without -f, while attempt 2 runs: its lines only, then the command ends.
  const auto logs = KubectlTpujob("logs cli -n " + n, false);
  EXPECT_EQ(logs.exit_code, 0) << logs.output;
  EXPECT_NE(logs.output.find("[worker-0] "), std::string::npos) << logs.output;
  EXPECT_NE(logs.output.find("event=first-step attempt=2"), std::string::npos) << logs.output;
  EXPECT_EQ(logs.output.find("attempt=1"), std::string::npos) << logs.output;

  const auto done = KubectlTpujob("wait cli -n " + n + " --for=completion --timeout 3m");
  EXPECT_EQ(done.exit_code, 0) << done.output << OperatorLogs();
  EXPECT_NE(done.output.find("condition met"), std::string::npos) << done.output;

  // `logs -f` ends by itself with the job, having shown both attempts and why the first ended.
  EXPECT_EQ(follow.ExitCode(seconds(30)), 0) << follow.Output();
  const std::string out = follow.Output();
  std::cout << "== kubectl tpujob logs cli -f:\n" << out;
  const size_t sigterm = out.find("event=sigterm attempt=1");
  const size_t banner = out.find("--- attempt 1 ended (Maintenance on node " + node_);
  const size_t second = out.find("event=first-step attempt=2");
  const size_t exit = out.find("event=exit attempt=2 step=100 code=0");
  EXPECT_NE(sigterm, std::string::npos) << out;
  EXPECT_NE(banner, std::string::npos) << out;
  EXPECT_NE(exit, std::string::npos) << out;
  EXPECT_LT(sigterm, banner) << out;
  EXPECT_LT(banner, second) << out;
  EXPECT_NE(out.find("--- tpujob.tpujob.dev/cli Succeeded ---"), std::string::npos) << out;
  // Every line the program wrote carries the prefix.
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("event=") != std::string::npos) {
      EXPECT_EQ(line.rfind("[worker-0] ", 0), 0u) << line;
    }
  }
  // Once the job has ended its pods are gone, and `logs` says so.
  EXPECT_TRUE(Eventually([&] { return JobPods(n, "cli").empty(); }, seconds(60)));
  const auto gone = KubectlTpujob("logs cli -n " + n);
  EXPECT_EQ(gone.exit_code, 1) << gone.output;
  EXPECT_NE(gone.output.find("Succeeded and its pods are gone"), std::string::npos) << gone.output;
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
