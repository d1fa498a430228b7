// Elastic slices (spec.tpu.minSlices, policy/elastic.h) with a real JAX program on the two real
// nodes of the local cluster (`e2e/cluster up --real-node`): a job of two one-host slices, one
// process each (e2e/tools/jax-worker/train.py, joined by jax.distributed, its gradients
// all-reduced over gloo), loses a chip of one slice's node; with no other pool the job runs on the
// slice left after waitSeconds, and grows back to two once the node is healthy again, at the
// program's next checkpoint line (scaleUp AfterCheckpoint, read from worker 0's real log). What is
// real here that elastic_e2e_test.cpp plays on KWOK: the chip fault seen by the node agent pod
// through the device plugin, the programs' MEGASCALE_* environment turned into a JAX process
// count and coordinator that work, the Orbax checkpoint each generation restores onto its new
// mesh (process 0 reads it and broadcasts it), the step count that continues across both changes,
// and the checkpoint line that times the grow. Under restart InPlace the kept slice's pod stays
// through both: the real supervisor starts each generation with the slice count of the
// tpujob.dev/program-env annotation the kubelet's downward API file brings it.
//
// The spare node (tpujob-real-1) is cordoned outside this test; the test takes it and gives it
// back. The checkpoint directory is one hostPath directory, the same on both nodes (one machine).

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "multislice_env.h"
#include "operator_env.h"
#include "real_jax_env.h"
#include "real_node_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using Json = nlohmann::json;
using std::chrono::seconds;

// Takes the spare for a test, and gives it back cordoned with healthy chips.
class RealElasticE2E : public RealJaxTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(RealJaxTest::SetUp());
    ASSERT_FALSE(SpareNode().empty()) << ClusterDir() << " has no spare real node";
    for (const std::string& node : {RealNode(), SpareNode()}) Restore(node);
    // Both nodes healthy as their agents see them, with every chip allocatable.
    for (const std::string& node : {RealNode(), SpareNode()}) {
      ASSERT_TRUE(Eventually(
          [&] {
            return NodeField(node, kUnhealthy) == "False" &&
                   NodeField(node, "{.spec.unschedulable}").empty() &&
                   NodeField(node, "{.status.allocatable.google\\.com/tpu}") ==
                       PortsEnv("REAL_TPU_CHIPS");
          },
          seconds(60), std::chrono::milliseconds(250)))
          << node << ": " << Kubectl("get node " + node + " -o yaml").output;
    }
  }
  void TearDown() override {
    Restore(RealNode());
    Restore(SpareNode());
    Kubectl("cordon " + SpareNode(), false);
    EXPECT_EQ(NodeField(SpareNode(), "{.metadata.annotations.tpujob\\.dev/cordoned-by}"), "");
    RealJaxTest::TearDown();
  }

  // The node schedulable with healthy chips, and without the operator's cordon annotations: the
  // spare, cordoned again by hand at the end, must not count against the operator's cordon cap
  // in the tests after this one.
  static void Restore(const std::string& node) {
    SetChipsOf(node, "unhealthy", "");
    Kubectl("taint node " + node + " tpujob.dev/faulty- 2>/dev/null", false);
    Kubectl("uncordon " + node, false);
    for (const char* key : {"cordoned-by", "cordon-reason", "cordon-message", "cordoned-at",
                            "cordon-job", "cordon-evidence"}) {
      Kubectl("annotate node " + node + " tpujob.dev/" + key + "- 2>/dev/null", false);
    }
  }

  void Run(const std::string& restart);

  static constexpr const char* kUnhealthy =
      "{.status.conditions[?(@.type==\"TPUUnhealthy\")].status}";

  // The job: `slices` one-host slices of the real nodes' shape, down to one, a process of the
  // jax-worker program in each.
  std::string Yaml(const std::string& name, const std::string& checkpoint_dir,
                   const std::string& restart) const {
    return "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: " + name +
           "\nspec:\n  tpu: {accelerator: " + PortsEnv("REAL_TPU_ACCELERATOR") +
           ", topology: " + PortsEnv("REAL_TPU_TOPOLOGY") +
           ", chipsPerWorker: " + PortsEnv("REAL_TPU_CHIPS") +
           ", slices: 2, minSlices: 1}\n"
           "  checkpoint: {path: /ckpt}\n"
           // waitSeconds 5 and a 10 s grace period keep the test short (defaults 300 and 300);
           // the stall timers are far above anything this program takes.
           "  faultTolerance: {restart: " +
           restart +
           ", maxJobRetries: 3, faultAttributionSeconds: 3, "
           "maintenanceGracePeriodSeconds: 10, preflight: {enabled: false}, "
           "elastic: {waitSeconds: 5, scaleUp: AfterCheckpoint}, "
           "progress: {logPattern: 'completed step: (\\d+)', checkpointPattern: "
           "'saved checkpoint at step (\\d+)', stallSeconds: 300}}\n"
           "  replicaSpecs:\n    Worker:\n      replicas: 1\n      template:\n        spec:\n"
           "          containers:\n          - name: trainer\n            image: \"" +
           jax_image_ +
           "\"\n            imagePullPolicy: Never\n"
           "            command: [python3, /app/train.py]\n            env:\n"
           "            - {name: TRAIN_STEPS, value: '0'}\n"
           "            - {name: TRAIN_STEP_SECONDS, value: '0.3'}\n"
           "            - {name: TRAIN_CHECKPOINT_EVERY, value: '5'}\n"
           "            volumeMounts:\n            - {name: ckpt, mountPath: /ckpt}\n"
           "            - {name: shm, mountPath: /dev/shm}\n"
           "          volumes:\n          - {name: ckpt, hostPath: {path: " +
           checkpoint_dir +
           ", type: Directory}}\n"
           "          - {name: shm, emptyDir: {medium: Memory}}\n";
  }
};

// What one generation of the program said in its log (stdout and stderr).
struct Generation {
  int process = -1, processes = -1;  // "process P of N"
  int restored = -1;                 // "restored checkpoint at step N"
  int first_step = -1, last_step = -1;
  int last_saved = -1;  // "saved checkpoint at step N"
};

Generation ReadGeneration(const std::string& log) {
  Generation g;
  static const std::regex process(R"(process (\d+) of (\d+), coordinator)");
  static const std::regex restored(R"(restored checkpoint at step (\d+))");
  static const std::regex step(R"(completed step: (\d+),)");
  static const std::regex saved(R"(saved checkpoint at step (\d+))");
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, process)) {
      g.process = std::stoi(m[1]);
      g.processes = std::stoi(m[2]);
    } else if (std::regex_search(line, m, restored)) {
      g.restored = std::stoi(m[1]);
    } else if (std::regex_search(line, m, step)) {
      if (g.first_step < 0) g.first_step = std::stoi(m[1]);
      g.last_step = std::stoi(m[1]);
    } else if (std::regex_search(line, m, saved)) {
      g.last_saved = std::stoi(m[1]);
    }
  }
  return g;
}

std::string Describe(const Generation& g) {
  return "process " + std::to_string(g.process) + " of " + std::to_string(g.processes) +
         ", restored " + std::to_string(g.restored) + ", steps " + std::to_string(g.first_step) +
         ".." + std::to_string(g.last_step) + ", last saved " + std::to_string(g.last_saved);
}

// The generation of `processes` processes running in `pod` (uid `uid`: under restart InPlace the
// same pod runs several), once it has completed a step past `past`.
::testing::AssertionResult RunsPast(const std::string& ns, const std::string& pod,
                                    const std::string& uid, int processes, int past,
                                    Generation* out) {
  std::string log;
  const bool ran = Eventually(
      [&] {
        if (Get(ns, "pod " + pod, "{.metadata.uid}") != uid) return false;
        log = Kubectl("logs -n " + ns + " " + pod + " -c trainer", false).output;
        *out = ReadGeneration(log);
        return out->processes == processes && out->last_step > past;
      },
      seconds(180), std::chrono::milliseconds(500));
  if (ran) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << pod << " did not run as one of " << processes
                                       << " processes past step " << past << ":\n"
                                       << log;
}

std::string Uid(const std::string& ns, const std::string& pod) {
  return Get(ns, "pod " + pod, "{.metadata.uid}");
}

// MEGASCALE_NUM_SLICES as the pod's program sees it: the pod's own variable under Recreate, the
// one the supervisor sets from tpujob.dev/program-env under InPlace.
std::string ProgramSlices(const std::string& ns, const std::string& pod, bool in_place) {
  if (!in_place) return PodEnv(ns, pod, "MEGASCALE_NUM_SLICES");
  const std::string env = Get(ns, "pod " + pod, "{.metadata.annotations.tpujob\\.dev/program-env}");
  const std::string key = "MEGASCALE_NUM_SLICES=";
  const size_t at = env.find(key);
  return at == std::string::npos
             ? "<unset>"
             : env.substr(at + key.size(), env.find('\n', at) - at - key.size());
}

// Under restart Recreate every change makes new pods; under InPlace the pods stay and their
// programs restart with the new slice count (the real supervisor reading tpujob.dev/program-env).
void RealElasticE2E::Run(const std::string& restart) {
  const bool in_place = restart == "InPlace";
  TestNamespace ns(in_place ? "real-elastic-inplace" : "real-elastic");
  const std::string n = ns.name();
  const std::string dir = MakeCheckpointDir(in_place ? "elastic-inplace" : "elastic");
  const std::string selector = "tpujob.dev/job-name=el";
  const std::string w0 = "el-worker-0-0", w1 = "el-worker-1-0";
  ASSERT_EQ(ApplyYaml(n, Yaml("el", dir, restart)).exit_code, 0);

  // Two processes, one per slice, one per node.
  ASSERT_TRUE(JobFieldBecomes(n, "el", "{.status.phase}", "Running", seconds(120)))
      << DescribePods(n, selector) << OperatorLogs();
  const std::string node0 = Get(n, "pod " + w0, "{.spec.nodeName}");
  const std::string node1 = Get(n, "pod " + w1, "{.spec.nodeName}");
  ASSERT_NE(node0, node1);
  EXPECT_EQ(JobField(n, "el", "{.status.tpu.slicesSummary}"), "2/2");
  Generation first;
  const std::string w0_uid = Uid(n, w0), w1_uid = Uid(n, w1);
  ASSERT_TRUE(RunsPast(n, w0, w0_uid, 2, 10, &first));
  std::cout << "== 2 slices: " << w0 << " on " << node0 << ": " << Describe(first) << "\n";
  EXPECT_EQ(first.processes, 2);
  EXPECT_EQ(first.process, 0);
  EXPECT_EQ(first.restored, -1) << "a new job found a checkpoint";
  Generation first1;
  ASSERT_TRUE(RunsPast(n, w1, w1_uid, 2, 0, &first1));
  EXPECT_EQ(first1.processes, 2);
  EXPECT_EQ(first1.process, 1);
  ASSERT_GE(first.last_saved, 5);

  // A chip of slice 1's node fails; the other node holds slice 0, and no pool is spare: slice 1
  // waits 5 s, then the job runs on slice 0 alone, back on its node, as one process.
  SetChipsOf(node1, "unhealthy", "1");
  ASSERT_TRUE(Eventually([&] { return JobField(n, "el", "{.status.tpu.slicesSummary}") == "1/2"; },
                         seconds(120), std::chrono::milliseconds(250)))
      << JobJson(n, "el").dump(2) << OperatorLogs();
  ASSERT_TRUE(JobFieldBecomes(n, "el", "{.status.phase}", "Running", seconds(120)))
      << DescribePods(n, selector) << OperatorLogs();
  EXPECT_EQ(JobField(n, "el",
                     "{.status.conditions[?(@.type==\"Degraded\")].status}/"
                     "{.status.conditions[?(@.type==\"Degraded\")].reason}"),
            "True/RunningOnFewerSlices");
  EXPECT_EQ(NodeField(node1, "{.spec.unschedulable}"), "true") << "the faulty node is not cordoned";
  EXPECT_EQ(JobField(n, "el", "{.status.faults[0].action}"), "ReplaceSlice");
  const std::string shrunk_uid = Uid(n, w0);
  if (in_place) {
    EXPECT_EQ(shrunk_uid, w0_uid) << "restart InPlace keeps the pod";
  } else {
    EXPECT_NE(shrunk_uid, w0_uid) << "restart Recreate makes a new pod";
  }
  EXPECT_EQ(Get(n, "pod " + w0, "{.spec.nodeName}"), node0) << "slice 0 left its node";
  EXPECT_EQ(ProgramSlices(n, w0, in_place), "1");
  EXPECT_EQ(PodEnv(n, w0, "MEGASCALE_SLICE_ID"), "0");
  EXPECT_EQ(Trim(Kubectl("get pods -n " + n + " -l " + selector + " -o name", false).output),
            "pod/" + w0);
  Generation shrunk;
  ASSERT_TRUE(RunsPast(n, w0, shrunk_uid, 1, first.last_saved + 5, &shrunk))
      << DescribePods(n, selector) << OperatorLogs();
  std::cout << "== 1 slice: " << w0 << ": " << Describe(shrunk) << "\n";
  EXPECT_EQ(shrunk.processes, 1);
  // The step count goes on from the last checkpoint (at least the last one seen before the
  // fault; the programs may have saved one more when they were stopped).
  EXPECT_GE(shrunk.restored, first.last_saved);
  EXPECT_EQ(shrunk.first_step, shrunk.restored + 1);

  // The node is healthy again and its cordon lifted: its pool is free. The job waits for the
  // program's next checkpoint line after that, then grows back to two processes.
  SetChipsOf(node1, "unhealthy", "");
  ASSERT_TRUE(Eventually([&] { return NodeField(node1, kUnhealthy) == "False"; }, seconds(60),
                         std::chrono::milliseconds(250)));
  Restore(node1);
  ASSERT_TRUE(Eventually([&] { return !EventsWith(JobEvents(n, "el"), "ScaleUpWaiting").empty(); },
                         seconds(120), std::chrono::milliseconds(250)))
      << DescribeEvents(JobEvents(n, "el")) << OperatorLogs();
  ASSERT_TRUE(Eventually([&] { return JobField(n, "el", "{.status.tpu.slicesSummary}") == "2/2"; },
                         seconds(120), std::chrono::milliseconds(250)))
      << JobJson(n, "el").dump(2) << DescribeEvents(JobEvents(n, "el")) << OperatorLogs();
  const std::vector<EventRecord> grew = EventsWith(JobEvents(n, "el"), "ScalingUp");
  ASSERT_FALSE(grew.empty()) << DescribeEvents(JobEvents(n, "el"));
  std::cout << "== " << grew.front().message << "\n";
  const std::smatch at = [&] {
    std::smatch m;
    static const std::regex after(R"(after the checkpoint of step (\d+))");
    std::regex_search(grew.front().message, m, after);
    return m;
  }();
  ASSERT_FALSE(at.empty()) << grew.front().message;
  const int grow_checkpoint = std::stoi(at[1]);
  EXPECT_GT(grow_checkpoint, shrunk.restored);
  ASSERT_TRUE(JobFieldBecomes(n, "el", "{.status.phase}", "Running", seconds(120)))
      << DescribePods(n, selector) << OperatorLogs();
  EXPECT_EQ(JobField(n, "el", "{.status.conditions[?(@.type==\"Degraded\")].status}"), "False");
  EXPECT_EQ(Get(n, "pod " + w0, "{.spec.nodeName}"), node0);
  EXPECT_EQ(Get(n, "pod " + w1, "{.spec.nodeName}"), node1);
  if (in_place) {
    EXPECT_EQ(Uid(n, w0), w0_uid) << "restart InPlace keeps the pod";
  }
  EXPECT_NE(Uid(n, w1), w1_uid);
  for (const std::string& pod : {w0, w1}) {
    SCOPED_TRACE(pod);
    EXPECT_EQ(ProgramSlices(n, pod, in_place && pod == w0), "2");
    Generation grown;
    ASSERT_TRUE(RunsPast(n, pod, Uid(n, pod), 2, grow_checkpoint, &grown))
        << DescribePods(n, selector) << OperatorLogs();
    std::cout << "== 2 slices again: " << pod << ": " << Describe(grown) << "\n";
    EXPECT_EQ(grown.processes, 2);
    EXPECT_GE(grown.restored, grow_checkpoint);
    EXPECT_EQ(grown.first_step, grown.restored + 1);
  }
  // A shrink and a grow, neither a retry beyond the fault's own.
  EXPECT_EQ(JobField(n, "el", "{.status.jobRetries}"), "1");
}

TEST_F(RealElasticE2E, AJaxJobShrinksToTheSliceLeftAndGrowsBackAtItsNextCheckpoint) {
  Run("Recreate");
}

TEST_F(RealElasticE2E, InPlaceTheSameHappensInThePodThatRunsTheKeptSlice) { Run("InPlace"); }

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
