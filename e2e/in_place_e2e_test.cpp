// In-place restart (spec.faultTolerance.restart InPlace) end to end, on the pod-level protocol:
// the operator's annotations on the pods (tpujob.dev/generation, tpujob.dev/barrier) and what the
// kubelet reports of the supervisor's container (a restart, lastState.terminated with the
// supervisor's report as termination message). KWOK runs no container, so the test plays the
// kubelet and each pod's tpujob-supervise: it writes a program's exit into a pod's status, and a
// supervisor told a newer generation stops its program and its container restarts to wait at the
// barrier, as supervisor/ does on a real node (RealWorkerE2E runs it there). Every assertion reads
// the cluster through kubectl.

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cache/objects.h"
#include "e2e_env.h"
#include "operator_env.h"
#include "supervisor/protocol.h"
#include "supervisor_sim.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using nlohmann::json;

// The operator's /metrics, as Prometheus would scrape it.
std::string ScrapeMetrics(const OperatorProcess& op) {
  return RunCommand("curl -sf http://127.0.0.1:" + std::to_string(op.metrics_port()) + "/metrics",
                    false)
      .output;
}

// Whether the operator's tpujob_job_restarts_total counts `count` restarts of `reason` (a
// counter is written after the status write that recorded the fault, so it is awaited).
::testing::AssertionResult RestartsCounted(const OperatorProcess& op, const std::string& reason,
                                           int count) {
  const std::string sample =
      "\ntpujob_job_restarts_total{reason=\"" + reason + "\"} " + std::to_string(count) + "\n";
  std::string metrics;
  if (Eventually([&] { return (metrics = ScrapeMetrics(op)).find(sample) != std::string::npos; },
                 std::chrono::seconds(10))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "no \"" << sample.substr(1, sample.size() - 2) << "\" in /metrics:\n"
         << metrics;
}

class InPlaceE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }

  void SetUp() override {
    static int counter = 0;
    prefix_ = "ip" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
  }
  void TearDown() override {
    for (const std::string& set : node_sets_) DeleteTpuNodes(set);
  }

  // Pools named -a, -b, ... in the order they are made, across calls.
  void CreatePools(int pools, int hosts, const std::string& topology) {
    for (int p = 0; p < pools; ++p) {
      const std::string set =
          prefix_ + "-" + std::string(1, static_cast<char>('a' + node_sets_.size()));
      node_sets_.push_back(set);
      CreateTpuNodes(set, hosts, accelerator_, topology, "pool-" + set);
    }
  }

  std::string Job(const std::string& name, int slices, int hosts, const std::string& topology,
                  const std::string& fault_tolerance = "restart: InPlace",
                  const std::string& extra_tpu = "") const {
    return "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: " + name +
           "\nspec:\n  tpu: {accelerator: " + accelerator_ + ", topology: " + topology +
           ", chipsPerWorker: 4, slices: " + std::to_string(slices) + extra_tpu +
           "}\n  faultTolerance: {" + fault_tolerance +
           "}\n  replicaSpecs:\n    Worker:\n      replicas: " + std::to_string(hosts) +
           "\n      template:\n        spec:\n          containers:\n"
           "          - {name: trainer, image: busybox, command: [sh, -c, 'train']}\n";
  }

  static std::string Worker(const std::string& job, int slice, int host) {
    return job + "-worker-" + std::to_string(slice) + "-" + std::to_string(host);
  }

  // Pod name -> uid of the job's pods.
  static std::map<std::string, std::string> Uids(const std::string& ns, const std::string& job) {
    std::map<std::string, std::string> out;
    std::istringstream in(Get(ns, "pods -l " + std::string(cache::kJobNameLabel) + "=" + job,
                              "{range .items[*]}{.metadata.name}={.metadata.uid}{\"\\n\"}{end}"));
    for (std::string line; std::getline(in, line);) {
      const size_t eq = line.find('=');
      if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return out;
  }

  // Lets the supervisors act until the job's barrier of `generation` is open.
  static ::testing::AssertionResult BarrierOpens(SupervisorSim& sim, const std::string& ns,
                                                 const std::string& job, int generation) {
    const std::string want = std::to_string(generation) + " Open";
    std::string last;
    if (Eventually(
            [&] {
              sim.Step();
              last = JobField(ns, job, "{.status.inPlace.generation} {.status.inPlace.barrier}");
              return last == want;
            },
            std::chrono::seconds(60), std::chrono::milliseconds(200))) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "status.inPlace is \"" << last << "\", want \"" << want << "\"\n"
           << Kubectl("get tpujob " + job + " -n " + ns + " -o yaml").output;
  }

  std::string prefix_;
  std::string accelerator_;
  std::vector<std::string> node_sets_;
};

TEST_F(InPlaceE2E, OneRetryableExitRestartsAllSixteenWorkersOfFourSlicesInPlace) {
  CreatePools(4, 4, "2x8");
  TestNamespace ns("ip-gang");
  const std::string n = ns.name();
  PodWatch watch(n);
  ASSERT_EQ(ApplyYaml(n, Job("ip", 4, 4, "2x8")).exit_code, 0);
  SupervisorSim sim(n, "ip");
  std::map<std::string, std::string> before;
  {
    OperatorProcess op({"--namespace", n});
    ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.phase}", "Running", std::chrono::seconds(60)))
        << op.Log();
    EXPECT_EQ(JobField(n, "ip", "{.status.inPlace.generation} {.status.inPlace.barrier}"),
              "1 Open");
    before = Uids(n, "ip");
    ASSERT_EQ(before.size(), 16u);

    // The pods the operator made: the program under the supervisor, generation 1 open.
    const json pod = json::parse(
        Kubectl("get pod " + Worker("ip", 2, 1) + " -n " + n + " -o json", false).output);
    EXPECT_EQ(pod["spec"]["restartPolicy"], "OnFailure");
    EXPECT_EQ(pod["spec"]["containers"][0]["command"],
              json::array({"/tpujob/bin/tpujob-supervise", "--", "sh", "-c", "train"}));
    const json& annotations = pod["metadata"]["annotations"];
    EXPECT_EQ(annotations.value(std::string(cache::kGenerationAnnotation), ""), "1");
    EXPECT_EQ(annotations.value(std::string(cache::kBarrierAnnotation), ""), "1");

    // Worker 1 of slice 2 (index 9) exits with a retryable code.
    ASSERT_TRUE(sim.ProgramExits(Worker("ip", 2, 1), 3));
    ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.inPlace.generation} {.status.inPlace.barrier}",
                                "2 Closed"))
        << op.Log();
    EXPECT_EQ(JobField(n, "ip", "{.status.phase}"), "Restarting");
    // The in-place restart is a restart in the operator's metrics.
    EXPECT_TRUE(RestartsCounted(op, "ContainerFailed", 1));
    // The operator is killed while the barrier is closed; its successor finishes the restart.
    op.Kill();
  }
  OperatorProcess op({"--namespace", n});
  ASSERT_TRUE(BarrierOpens(sim, n, "ip", 2)) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();

  // Every pod stayed; every program runs generation 2; the barrier opened once.
  EXPECT_EQ(Uids(n, "ip"), before);
  for (const auto& [pod, generation] : sim.Running()) EXPECT_EQ(generation, 2) << pod;
  for (const auto& [pod, uid] : before) {
    EXPECT_EQ(Get(n, "pod " + pod,
                  "{.metadata.annotations.tpujob\\.dev/generation} "
                  "{.metadata.annotations.tpujob\\.dev/barrier}"),
              "2 2")
        << pod;
  }
  EXPECT_EQ(sim.restarts(), 16);  // one container restart per pod: 1 exit, 15 stops
  const auto events = JobEvents(n, "ip");
  EXPECT_EQ(EventsWith(events, "BarrierOpened").size(), 1u) << DescribeEvents(events);
  EXPECT_EQ(EventsWith(events, "WorkerRestarted", "worker-9 (slice 2").size(), 1u)
      << DescribeEvents(events);
  EXPECT_EQ(JobField(n, "ip", "{.status.workerRestarts.Worker-9.count}"), "1");
  EXPECT_EQ(JobField(n, "ip", "{.status.faults[*].action}"), "RestartInPlace");
  EXPECT_EQ(JobField(n, "ip", "{.status.attempt}"), "1");
  EXPECT_EQ(JobField(n, "ip", "{.status.jobRetries}"), "");  // no retry used (0 is not written)
  const auto report = watch.CheckAfterCreations(16);
  EXPECT_EQ(report.creations, 16);  // no pod recreated
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
}

TEST_F(InPlaceE2E, ANodeLostDuringTheBarrierReplacesItsSliceInstead) {
  CreatePools(5, 4, "2x8");
  TestNamespace ns("ip-lost");
  const std::string n = ns.name();
  PodWatch watch(n);
  ASSERT_EQ(ApplyYaml(n, Job("ip", 4, 4, "2x8", "restart: InPlace, maxJobRetries: 2")).exit_code,
            0);
  SupervisorSim sim(n, "ip");
  OperatorProcess op({"--namespace", n});
  ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  ASSERT_TRUE(sim.ProgramExits(Worker("ip", 0, 0), 3));
  ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.inPlace.generation} {.status.inPlace.barrier}",
                              "2 Closed"))
      << op.Log();
  // Before any supervisor stops, a node of slice 1 turns unhealthy.
  const std::string node = NodeOf(n, Worker("ip", 1, 2));
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 2").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.attempt}", "2", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobField(n, "ip", "{.status.faults[*].action}"), "RestartInPlace ReplaceSlice");
  EXPECT_TRUE(RestartsCounted(op, "ContainerFailed", 1));  // the restart that gave way
  // The restart under way gives way to slice 1's replacement: the other slices' supervisors
  // stop at generation 3's order, slice 1's new pods join them, and generation 3 starts.
  ASSERT_TRUE(BarrierOpens(sim, n, "ip", 3)) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.phase}", "Running", std::chrono::seconds(90)))
      << op.Log();
  EXPECT_EQ(Get(n, "pod " + Worker("ip", 1, 2), "{.metadata.annotations.tpujob\\.dev/barrier}"),
            "3");
  EXPECT_NE(NodeOf(n, Worker("ip", 1, 2)), node);
  for (const auto& [pod, generation] : sim.Running()) EXPECT_EQ(generation, 3) << pod;
  const auto report = watch.CheckAfterCreations(20);
  EXPECT_EQ(report.creations, 20);  // 16, then slice 1's 4 again
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
}

// Slice recovery of an in-place job: a hardware fault on slice 2 replaces that slice's pods on the
// spare pool, while the 12 pods of slices 0, 1 and 3 stay (same uid, node and name), move to the
// new attempt and restart their program in place once slice 2's new pods wait at the barrier.
TEST_F(InPlaceE2E, AHardwareFaultOnSliceTwoReplacesItsPodsAndRestartsTheOthersInPlace) {
  CreatePools(5, 4, "2x8");
  TestNamespace ns("ip-slice");
  const std::string n = ns.name();
  PodWatch watch(n);
  ASSERT_EQ(ApplyYaml(n, Job("ip", 4, 4, "2x8", "restart: InPlace, maxJobRetries: 2")).exit_code,
            0);
  SupervisorSim sim(n, "ip");
  OperatorProcess op({"--namespace", n});
  ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const auto before = Uids(n, "ip");
  std::set<std::string> spare;
  for (char p = 'a'; p <= 'e'; ++p) spare.insert("pool-" + prefix_ + "-" + std::string(1, p));
  for (int slice = 0; slice < 4; ++slice) {
    spare.erase(NodeField(NodeOf(n, Worker("ip", slice, 0)),
                          "{.metadata.labels.cloud\\.google\\.com/gke-nodepool}"));
  }
  ASSERT_EQ(spare.size(), 1u);
  const std::string coordinator =
      Get(n, "pod " + Worker("ip", 3, 0),
          "{.spec.containers[0].env[?(@.name==\"MEGASCALE_COORDINATOR_ADDRESS\")].value}");
  const std::string node = NodeOf(n, Worker("ip", 2, 1));
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 1").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.attempt}", "2", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobField(n, "ip", "{.status.sliceRecovery.inPlace}"), "true");
  ASSERT_TRUE(BarrierOpens(sim, n, "ip", 2)) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();

  const auto after = Uids(n, "ip");
  ASSERT_EQ(after.size(), 16u);
  for (int slice = 0; slice < 4; ++slice) {
    for (int host = 0; host < 4; ++host) {
      const std::string pod = Worker("ip", slice, host);
      SCOPED_TRACE(pod);
      if (slice == 2) {
        EXPECT_NE(after.at(pod), before.at(pod));  // replaced, on the spare pool
        EXPECT_EQ(NodeField(NodeOf(n, pod), "{.metadata.labels.cloud\\.google\\.com/gke-nodepool}"),
                  *spare.begin());
      } else {
        EXPECT_EQ(after.at(pod), before.at(pod));  // the same pod, restarted in place
      }
      EXPECT_EQ(Get(n, "pod " + pod, "{.metadata.labels.tpujob\\.dev/attempt}"), "2");
    }
  }
  for (const auto& [pod, generation] : sim.Running()) EXPECT_EQ(generation, 2) << pod;
  EXPECT_EQ(Get(n, "pod " + Worker("ip", 2, 0),
                "{.spec.containers[0].env[?(@.name==\"MEGASCALE_COORDINATOR_ADDRESS\")].value}"),
            coordinator);
  EXPECT_EQ(JobField(n, "ip", "{.status.faults[*].action}"), "ReplaceSlice");
  EXPECT_EQ(JobField(n, "ip", "{.status.jobRetries}"), "1");
  EXPECT_EQ(EventsWith(JobEvents(n, "ip"), "BarrierOpened").size(), 1u);
  const auto report = watch.CheckAfterCreations(20);
  EXPECT_EQ(report.creations, 20);  // 16, then slice 2's 4 again
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
}

// An elastic job under restart InPlace (spec.tpu.minSlices): 4 slices of 2 hosts on 4 pools, no
// spare. Slice 1 loses a node and finds no pool within waitSeconds: the job runs on 3 slices in
// the pods they ran in. Slices 0 and 2 keep their ids; slice 3 runs as slice 1 (ids stay
// contiguous), its pods keeping their names (status.tpu.sliceSlots) with slice 1's labels. Every
// program restarts with the variables of 3 slices, through the tpujob.dev/program-env annotation
// the supervisor reads as the barrier opens. A fifth pool appears: the job grows back to 4 in the
// same pods, the added slice 3's pods taking the free name, ip-worker-1-*.
TEST_F(InPlaceE2E, AnElasticJobShrinksAndGrowsBackInThePodsItRunsIn) {
  CreatePools(4, 2, "2x4");
  TestNamespace ns("ip-elastic");
  const std::string n = ns.name();
  // waitSeconds 3 and a grace period of 5 s keep the test short (defaults 300 and 300).
  ASSERT_EQ(ApplyYaml(n, Job("ip", 4, 2, "2x4",
                             "restart: InPlace, maxJobRetries: 2, maintenanceGracePeriodSeconds: "
                             "5, elastic: {waitSeconds: 3}",
                             ", minSlices: 2"))
                .exit_code,
            0);
  SupervisorSim sim(n, "ip");
  OperatorProcess op({"--namespace", n});
  ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const auto before = Uids(n, "ip");
  ASSERT_EQ(before.size(), 8u);
  const auto vars = [&](const std::string& pod) {
    return Get(n, "pod " + pod, "{.metadata.annotations.tpujob\\.dev/program-env}");
  };
  const auto slice_label = [&](const std::string& pod) {
    return Get(n, "pod " + pod, "{.metadata.labels.tpujob\\.dev/slice-index}");
  };
  // Lets the supervisors act until the job runs on `slices` ("3/4").
  const auto runs_on = [&](const std::string& slices) -> ::testing::AssertionResult {
    if (Eventually(
            [&] {
              sim.Step();
              return JobField(n, "ip", "{.status.tpu.slicesSummary} {.status.phase}") ==
                     slices + " Running";
            },
            std::chrono::seconds(90), std::chrono::milliseconds(200))) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << Kubectl("get tpujob ip -n " + n + " -o yaml").output << op.Log();
  };

  ASSERT_EQ(
      SetNodeCondition(NodeOf(n, Worker("ip", 1, 1)), "TPUUnhealthy", "True", "ChipError", "chip 1")
          .exit_code,
      0);
  ASSERT_TRUE(runs_on("3/4"));
  EXPECT_EQ(JobField(n, "ip", "{.status.tpu.sliceSlots}"), "[0,3,2]");
  const auto shrunk = Uids(n, "ip");
  ASSERT_EQ(shrunk.size(), 6u);
  // pod name -> the slice id it runs as
  const std::map<std::string, int> runs_as = {{Worker("ip", 0, 0), 0}, {Worker("ip", 0, 1), 0},
                                              {Worker("ip", 3, 0), 1}, {Worker("ip", 3, 1), 1},
                                              {Worker("ip", 2, 0), 2}, {Worker("ip", 2, 1), 2}};
  for (const auto& [pod, slice] : runs_as) {
    SCOPED_TRACE(pod);
    EXPECT_EQ(shrunk.at(pod), before.at(pod));  // the same pod, restarted in place
    EXPECT_EQ(slice_label(pod), std::to_string(slice));
    const std::string env = vars(pod);
    EXPECT_NE(env.find("MEGASCALE_NUM_SLICES=3\n"), std::string::npos) << env;
    EXPECT_NE(env.find("MEGASCALE_SLICE_ID=" + std::to_string(slice) + "\n"), std::string::npos)
        << env;
  }
  EXPECT_NE(vars(Worker("ip", 3, 0)).find("TPU_WORKER_HOSTNAMES=ip-worker-3-0.ip,ip-worker-3-1.ip"),
            std::string::npos)
      << vars(Worker("ip", 3, 0));
  for (const auto& [pod, generation] : sim.Running()) EXPECT_EQ(generation, 2) << pod;
  EXPECT_EQ(JobField(n, "ip", "{.status.conditions[?(@.type==\"Degraded\")].reason}"),
            "RunningOnFewerSlices");

  // A fifth pool: back to 4 in the same pods; slice 3's new pods carry the free name.
  CreatePools(1, 2, "2x4");
  ASSERT_TRUE(runs_on("4/4"));
  EXPECT_EQ(JobField(n, "ip", "{.status.tpu.sliceSlots}"), "[0,3,2,1]");
  const auto grown = Uids(n, "ip");
  ASSERT_EQ(grown.size(), 8u);
  for (const auto& [pod, uid] : shrunk) EXPECT_EQ(grown.at(pod), uid) << pod;
  EXPECT_NE(grown.at(Worker("ip", 1, 0)), before.at(Worker("ip", 1, 0)));
  EXPECT_EQ(slice_label(Worker("ip", 1, 0)), "3");
  EXPECT_NE(vars(Worker("ip", 3, 1)).find("MEGASCALE_NUM_SLICES=4\n"), std::string::npos)
      << vars(Worker("ip", 3, 1));
  for (const auto& [pod, generation] : sim.Running()) EXPECT_EQ(generation, 3) << pod;
  EXPECT_EQ(JobField(n, "ip", "{.status.jobRetries}"), "1");  // the fault's; none for either
  EXPECT_EQ(JobField(n, "ip", "{.status.conditions[?(@.type==\"Degraded\")].status}"), "False");
}

TEST_F(InPlaceE2E, ABarrierThatNeverOpensFallsBackToRecreatingThePods) {
  CreatePools(1, 2, "2x4");
  TestNamespace ns("ip-timeout");
  const std::string n = ns.name();
  ASSERT_EQ(
      ApplyYaml(n,
                Job("ip", 1, 2, "2x4",
                    "restart: InPlace, barrierTimeoutSeconds: 3, maintenanceGracePeriodSeconds: 0"))
          .exit_code,
      0);
  SupervisorSim sim(n, "ip");
  OperatorProcess op({"--namespace", n});
  ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const auto before = Uids(n, "ip");
  // Worker 0 exits; worker 1's supervisor never stops its program (the test does not step it).
  ASSERT_TRUE(sim.ProgramExits("ip-worker-0", 3));
  ASSERT_TRUE(Eventually([&] { return !EventsWith(JobEvents(n, "ip"), "BarrierTimeout").empty(); },
                         std::chrono::seconds(30)))
      << op.Log();
  EXPECT_NE(EventsWith(JobEvents(n, "ip"), "BarrierTimeout",
                       "1 of 2 pods reached the barrier of generation 2 within 3s")
                .size(),
            0u)
      << DescribeEvents(JobEvents(n, "ip"));
  ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const auto after = Uids(n, "ip");
  ASSERT_EQ(after.size(), 2u);
  for (const auto& [pod, uid] : after) EXPECT_NE(uid, before.at(pod)) << pod;  // recreated
  EXPECT_EQ(JobField(n, "ip", "{.status.inPlace.generation} {.status.inPlace.barrier}"), "2 Open");
  EXPECT_EQ(JobField(n, "ip", "{.status.attempt}"), "1");
  EXPECT_EQ(JobField(n, "ip", "{.status.jobRetries}"), "");  // no retry used (0 is not written)
  EXPECT_EQ(Get(n, "pod ip-worker-1",
                "{.metadata.annotations.tpujob\\.dev/generation} "
                "{.metadata.annotations.tpujob\\.dev/barrier}"),
            "2 2");
}

// The supervisor's init container and the volumes it adds keep a pod that meets Pod Security
// "restricted" within it: in a namespace that enforces it, the API server admits the pods of an
// in-place job whose template is restricted itself, and they run.
TEST_F(InPlaceE2E, ThePodsPassPodSecurityRestrictedWithARestrictedProgram) {
  CreatePools(1, 2, "2x4");
  TestNamespace ns("ip-pss");
  const std::string n = ns.name();
  const auto labelled = Kubectl("label namespace " + n +
                                " pod-security.kubernetes.io/enforce=restricted"
                                " pod-security.kubernetes.io/enforce-version=latest");
  ASSERT_EQ(labelled.exit_code, 0) << labelled.output;
  const std::string job =
      "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: ip\nspec:\n  tpu: "
      "{accelerator: " +
      accelerator_ +
      ", topology: 2x4, chipsPerWorker: 4}\n  faultTolerance: {restart: InPlace}\n"
      "  replicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n        spec:\n"
      "          securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: "
      "RuntimeDefault}}\n          containers:\n"
      "          - name: trainer\n            image: busybox\n            command: [sh, -c, "
      "train]\n            securityContext: {allowPrivilegeEscalation: false, capabilities: "
      "{drop: [ALL]}}\n";
  ASSERT_EQ(ApplyYaml(n, job).exit_code, 0);
  OperatorProcess op({"--namespace", n});
  ASSERT_TRUE(JobFieldBecomes(n, "ip", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log() << Kubectl("get events -n " + n).output;
  EXPECT_EQ(JobPods(n, "ip"), (std::vector<std::string>{"ip-worker-0", "ip-worker-1"}));
  EXPECT_EQ(Get(n, "pod ip-worker-0", "{.spec.initContainers[0].name}"), "tpujob-supervisor");
  // No "forbidden" refusal in the operator's log either.
  EXPECT_EQ(op.Log().find("violates PodSecurity"), std::string::npos) << op.Log();
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
