// The cordon safety limits (docs/architecture.md) end to end: the operator binary against a real
// control plane, started with the flags that set the limits; nodes turn faulty the way the
// cluster reports it (a hardware condition, as node-problem-detector sets it). Every assertion
// reads the cluster through kubectl: which nodes are cordoned, the jobs' status and Events.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string Join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::vector<std::string> Split(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// Every node in the cluster that counts against the operator's cap: unschedulable and
// annotated as cordoned by the operator, whichever test or operator process cordoned it.
std::vector<std::string> NodesCordonedByOperator() {
  const auto r = Kubectl("get nodes -o json", false);
  const nlohmann::json list = nlohmann::json::parse(r.output, nullptr, false);
  std::vector<std::string> names;
  if (!list.is_object() || !list.contains("items"))
    return {"<cannot list nodes: " + r.output + ">"};
  for (const auto& node : list["items"]) {
    const nlohmann::json& metadata = node.value("metadata", nlohmann::json::object());
    const nlohmann::json& annotations = metadata.value("annotations", nlohmann::json::object());
    const bool unschedulable =
        node.value("spec", nlohmann::json::object()).value("unschedulable", false);
    if (unschedulable && annotations.value("tpujob.dev/cordoned-by", "") == "tpujob-operator") {
      names.push_back(metadata.value("name", ""));
    }
  }
  return names;
}

// The node's annotations whose keys start with tpujob.dev/, as key=value.
std::vector<std::string> OperatorAnnotations(const std::string& node) {
  const auto r = Kubectl("get node " + node + " -o json", false);
  const nlohmann::json object = nlohmann::json::parse(r.output, nullptr, false);
  if (!object.is_object()) return {"<cannot read node " + node + ": " + r.output + ">"};
  std::vector<std::string> found;
  const nlohmann::json annotations =
      object.value("metadata", nlohmann::json::object()).value("annotations", nlohmann::json{});
  if (!annotations.is_object()) return found;
  for (const auto& [key, value] : annotations.items()) {
    if (key.starts_with("tpujob.dev/")) found.push_back(key + "=" + value.dump());
  }
  return found;
}

// The Events of a job that report a cordon decision about `node`: NodeCordoned "cordoned node
// <node>" or NodeNotCordoned "node <node> not cordoned: ..." / "would cordon node <node> ...".
// Returns the number of decisions they stand for (an Event repeated counts each time).
int CordonDecisions(const std::vector<EventRecord>& events, const std::string& node) {
  int decisions = 0;
  for (const EventRecord& e : events) {
    const bool about = (e.reason == "NodeCordoned" && e.message == "cordoned node " + node) ||
                       (e.reason == "NodeNotCordoned" &&
                        (e.message.starts_with("node " + node + " ") ||
                         e.message.starts_with("would cordon node " + node + " ")));
    if (about) decisions += std::max(1, e.count);
  }
  return decisions;
}

class CordonSafetyE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }

  // Fresh nodes per test, with an accelerator name of their own, so what one test does to
  // nodes (conditions, cordons) never reaches another; TearDown deletes them, cordoned or not.
  void SetUp() override {
    static int counter = 0;
    prefix_ = "cs" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
  }
  void TearDown() override { DeleteTpuNodes(prefix_); }

  void CreateNodes(int count) {
    CreateTpuNodes(prefix_, count, accelerator_, "2x4", "pool-" + prefix_);
  }

  std::string Job(const std::string& name) {
    return JobYaml(name, 2, "2x4", "", false, "fault-tolerance/job-retry-num: \"2\"", accelerator_);
  }
  // The cap counts every node in the cluster the operator holds cordoned, whichever test or
  // operator process cordoned it. The tests before delete their nodes; waits until the last of
  // those is gone, so that the limits start from zero.
  static void AwaitNoNodeHeldCordoned() {
    std::vector<std::string> held;
    ASSERT_TRUE(Eventually(
        [&] {
          held = NodesCordonedByOperator();
          return held.empty();
        },
        seconds(60), milliseconds(200)))
        << "nodes held cordoned before the test: " << Join(held);
  }
  // This test's nodes.
  std::vector<std::string> Nodes() {
    return Split(Trim(Kubectl("get nodes -l tpujob.dev/e2e-nodes=" + prefix_ +
                                  " -o jsonpath='{.items[*].metadata.name}'",
                              false)
                          .output));
  }
  // This test's nodes that are cordoned.
  std::vector<std::string> CordonedNodes() { return Split(UnschedulableNodes(prefix_)); }

  std::string prefix_;
  std::string accelerator_;
};

// --cordon-dry-run: an unhealthy node still moves the job (re-issued against its retries), but
// the node is left exactly as it was, and the job's Event says what a real run would have done.
TEST_F(CordonSafetyE2E, DryRunReissuesTheJobAndLeavesTheNodeAlone) {
  CreateNodes(3);
  ASSERT_NO_FATAL_FAILURE(AwaitNoNodeHeldCordoned());
  TestNamespace ns("cs-dry");
  OperatorProcess op({"--namespace", ns.name(), "--cordon-dry-run"});
  ASSERT_EQ(ApplyYaml(ns.name(), Job("dr")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "dr", "{.status.phase}", "Running")) << op.Log();
  const std::string node = NodeOf(ns.name(), "dr-worker-0");
  ASSERT_FALSE(node.empty());

  ASSERT_EQ(
      SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 1: HBM errors").exit_code,
      0);
  const std::string would = "would cordon node " + node + " (dry run)";
  std::vector<EventRecord> events;
  ASSERT_TRUE(Eventually(
      [&] {
        events = JobEvents(ns.name(), "dr");
        return !EventsWith(events, "NodeNotCordoned", would).empty();
      },
      seconds(60), milliseconds(200)))
      << DescribeEvents(events) << op.Log();

  // The job was re-issued. (Nothing keeps the new attempt off the node it is not allowed to
  // cordon, so it may have been re-issued again since: only the first fault is certain.)
  ASSERT_TRUE(Eventually(
      [&] { return std::atoi(JobField(ns.name(), "dr", "{.status.attempt}").c_str()) >= 2; },
      seconds(30), milliseconds(100)))
      << JobField(ns.name(), "dr", "{.status}");
  EXPECT_EQ(
      JobField(ns.name(), "dr",
               "{.status.faults[0].kind}/{.status.faults[0].action}/{.status.faults[0].node}"),
      "NodeUnhealthy/ReissueJob/" + node);
  EXPECT_GE(std::atoi(JobField(ns.name(), "dr", "{.status.jobRetries}").c_str()), 1);
  events = JobEvents(ns.name(), "dr");
  EXPECT_FALSE(EventsWith(events, "Reissued").empty()) << DescribeEvents(events);
  const auto dry = EventsWith(events, "NodeNotCordoned", would);
  ASSERT_EQ(dry.size(), 1u) << DescribeEvents(events);
  EXPECT_EQ(dry[0].type, "Warning");
  EXPECT_EQ(dry[0].message, would);
  EXPECT_TRUE(EventsWith(events, "NodeCordoned").empty()) << DescribeEvents(events);
  for (const EventRecord& e : EventsWith(events, "NodeNotCordoned")) {
    EXPECT_NE(e.message.find("(dry run)"), std::string::npos) << e.message;
  }

  // No node was changed: not unschedulable, no taint of ours, none of our annotations, no
  // Event on the node.
  EXPECT_EQ(CordonedNodes(), std::vector<std::string>{});
  const auto nodes = Nodes();
  ASSERT_EQ(nodes.size(), 3u);
  for (const std::string& n : nodes) {
    EXPECT_EQ(NodeField(n, "{.spec.unschedulable}"), "") << n;
    EXPECT_EQ(NodeField(n, "{.spec.taints[?(@.key==\"tpujob.dev/faulty\")].effect}"), "") << n;
    EXPECT_EQ(OperatorAnnotations(n), std::vector<std::string>{}) << n;
  }
  const auto node_events = EventsAbout("default", "Node", node);
  EXPECT_TRUE(EventsWith(node_events, "NodeCordoned").empty()) << DescribeEvents(node_events);
  EXPECT_NE(op.Log().find("verdict=DryRun dry_run=true"), std::string::npos) << op.Log();
}

// --max-cordoned-nodes 2: three running jobs lose all six of their nodes at once. Exactly two
// nodes are cordoned, the other four are reported on the jobs as not cordoned because of the
// cap, and the count stays at two when more nodes fail later (the test's two spare nodes) and
// the re-issued jobs meet faulty nodes again.
TEST_F(CordonSafetyE2E, CapHoldsWhenEveryNodeOfSeveralJobsFailsAtOnce) {
  CreateNodes(8);
  ASSERT_NO_FATAL_FAILURE(AwaitNoNodeHeldCordoned());

  TestNamespace ns("cs-cap");
  std::vector<std::string> flags = {"--namespace", ns.name(), "--max-cordoned-nodes", "2"};
  // The fraction and the rate out of the way: only the count limits.
  flags.insert(flags.end(), {"--max-cordoned-fraction", "1", "--cordon-rate", "0"});
  OperatorProcess op(flags);
  const std::vector<std::string> jobs = {"cap-a", "cap-b", "cap-c"};
  for (const std::string& job : jobs) ASSERT_EQ(ApplyYaml(ns.name(), Job(job)).exit_code, 0);
  std::map<std::string, std::vector<std::string>> nodes_of;  // job -> its attempt-1 nodes
  std::set<std::string> all;
  for (const std::string& job : jobs) {
    ASSERT_TRUE(JobFieldBecomes(ns.name(), job, "{.status.phase}", "Running", seconds(60)))
        << op.Log();
    for (const char* worker : {"-worker-0", "-worker-1"}) {
      const std::string node = NodeOf(ns.name(), job + worker);
      ASSERT_FALSE(node.empty()) << job << worker;
      nodes_of[job].push_back(node);
      all.insert(node);
    }
  }
  ASSERT_EQ(all.size(), 6u);
  std::vector<std::string> spares;  // the two nodes without a pod
  for (const std::string& node : Nodes()) {
    if (!all.contains(node)) spares.push_back(node);
  }
  ASSERT_EQ(spares.size(), 2u);

  // Every node turns unhealthy at once: the operator is down while the conditions are written
  // and finds all six on its first look, with several workers deciding concurrently.
  op.Kill();
  for (const std::string& node : all) {
    ASSERT_EQ(
        SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 0: ECC errors").exit_code,
        0);
  }
  OperatorProcess restarted(flags);

  // Each job gets one decision per node it ran on.
  std::map<std::string, std::vector<EventRecord>> events;
  const auto decided = [&] {
    bool all_decided = true;
    for (const std::string& job : jobs) {
      events[job] = JobEvents(ns.name(), job);
      for (const std::string& node : nodes_of[job]) {
        all_decided = all_decided && CordonDecisions(events[job], node) >= 1;
      }
    }
    return all_decided;
  };
  const auto dump = [&] {
    std::string out;
    for (const auto& [job, list] : events) out += job + ":\n" + DescribeEvents(list);
    return out;
  };
  ASSERT_TRUE(Eventually(decided, seconds(60), milliseconds(250))) << dump() << restarted.Log();

  // Exactly two cordoned, both by this operator and for this fault; the jobs were told which.
  auto cordoned = CordonedNodes();
  ASSERT_EQ(cordoned.size(), 2u) << Join(cordoned) << "\n" << dump();
  EXPECT_EQ(NodesCordonedByOperator(), cordoned);
  std::set<std::string> reported_cordoned, reported_capped;
  for (const std::string& job : jobs) {
    for (const EventRecord& e : EventsWith(events[job], "NodeCordoned")) {
      reported_cordoned.insert(e.message.substr(std::string("cordoned node ").size()));
    }
    for (const EventRecord& e : EventsWith(events[job], "NodeNotCordoned")) {
      EXPECT_EQ(e.type, "Warning");
      // "node X not cordoned: 2 nodes already cordoned (cap 2 of N nodes)"
      EXPECT_NE(e.message.find(" not cordoned: 2 nodes already cordoned (cap 2 of "),
                std::string::npos)
          << e.message;
      reported_capped.insert(Split(e.message).at(1));
    }
  }
  EXPECT_EQ(reported_cordoned, std::set<std::string>(cordoned.begin(), cordoned.end())) << dump();
  std::set<std::string> uncordoned;
  for (const std::string& node : all) {
    if (!reported_cordoned.contains(node)) uncordoned.insert(node);
  }
  EXPECT_EQ(reported_capped, uncordoned) << dump();
  for (const std::string& node : cordoned) {
    EXPECT_EQ(NodeField(node, "{.spec.taints[?(@.key==\"tpujob.dev/faulty\")].value}"),
              "NodeUnhealthy")
        << node;
    EXPECT_EQ(NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordon-reason}"),
              "NodeUnhealthy")
        << node;
  }
  for (const std::string& node : uncordoned) {
    EXPECT_EQ(NodeField(node, "{.spec.unschedulable}"), "") << node;
    EXPECT_EQ(NodeField(node, "{.spec.taints[?(@.key==\"tpujob.dev/faulty\")].effect}"), "")
        << node;
  }
  for (const std::string& job : jobs) {
    EXPECT_GE(std::atoi(JobField(ns.name(), job, "{.status.attempt}").c_str()), 2) << job;
  }

  // More faults after the cap was reached. The re-issued jobs run where they can: on a faulty
  // node left uncordoned (then they meet it again at once), or on the two spare nodes, which
  // are healthy until a pod of a re-issued job is bound and then turn unhealthy too. Either
  // way some job asks for a cordon beyond its first ones: a second decision about one of its
  // first nodes, or one about a node it did not run on before. The count must still be two.
  bool spares_failed = false;
  const auto reissued_pod_bound = [&] {
    const std::string bound = Get(ns.name(), "pods",
                                  "{range .items[*]}{.metadata.labels.tpujob\\.dev/attempt}="
                                  "{.spec.nodeName} {end}");
    for (const std::string& pod : Split(bound)) {
      const auto eq = pod.find('=');
      if (eq != std::string::npos && eq + 1 < pod.size() && std::atoi(pod.c_str()) >= 2) {
        return true;
      }
    }
    return false;
  };
  std::string later;
  const auto decided_later = [&] {
    if (!spares_failed && reissued_pod_bound()) {
      for (const std::string& node : spares) {
        if (SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 3: ECC errors")
                .exit_code != 0) {
          return false;
        }
      }
      spares_failed = true;
    }
    for (const std::string& job : jobs) {
      events[job] = JobEvents(ns.name(), job);
      const auto& first = nodes_of[job];
      for (const std::string& node : Nodes()) {
        const int before = std::find(first.begin(), first.end(), node) != first.end() ? 1 : 0;
        if (CordonDecisions(events[job], node) > before) {
          later = job + " on " + node;
          return true;
        }
      }
    }
    return false;
  };
  ASSERT_TRUE(Eventually(decided_later, seconds(90), milliseconds(250)))
      << "spare nodes failed: " << spares_failed << "\n"
      << dump() << Kubectl("get pods -o wide -n " + ns.name()).output << restarted.Log();
  EXPECT_EQ(CordonedNodes(), cordoned) << later << "\n" << dump();
  EXPECT_EQ(NodesCordonedByOperator(), cordoned) << later;
  for (const std::string& job : jobs) {
    for (const EventRecord& e : EventsWith(events[job], "NodeNotCordoned")) {
      EXPECT_NE(e.message.find("(cap 2 of "), std::string::npos) << e.message;
    }
    EXPECT_EQ(EventsWith(events[job], "NodeCordoned").size(),
              static_cast<size_t>(std::count_if(cordoned.begin(), cordoned.end(),
                                                [&](const std::string& n) {
                                                  return std::find(nodes_of[job].begin(),
                                                                   nodes_of[job].end(),
                                                                   n) != nodes_of[job].end();
                                                })))
        << job << "\n"
        << dump();
  }
  EXPECT_NE(restarted.Log().find("verdict=CapReached"), std::string::npos) << restarted.Log();
}

// --cordon-rate 1 with --auto-uncordon-after: the operator cordons a node, the node heals and is
// uncordoned (nothing of the cordon is left on it), and the operator is replaced. The next one
// resumes the rate from the ConfigMap the first one kept: a second faulty node within the minute
// is not cordoned. (Rebuilt from the nodes alone, the bucket would have been full again.)
TEST_F(CordonSafetyE2E, RateSurvivesARestartAfterItsCordonWasLifted) {
  CreateNodes(4);
  ASSERT_NO_FATAL_FAILURE(AwaitNoNodeHeldCordoned());
  TestNamespace ns("cs-state");
  const std::string configmap = "cs-state-" + ns.name();
  const std::vector<std::string> flags = {"--namespace",
                                          ns.name(),
                                          "--cordon-rate",
                                          "1",
                                          "--auto-uncordon-after",
                                          "1",
                                          "--leader-elect-namespace",
                                          ns.name(),
                                          "--cordon-state-configmap",
                                          configmap};
  auto first = std::make_unique<OperatorProcess>(flags);
  ASSERT_EQ(ApplyYaml(ns.name(), Job("st")).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "st", "{.status.phase}", "Running")) << first->Log();
  const std::string cordoned = NodeOf(ns.name(), "st-worker-0");
  ASSERT_FALSE(cordoned.empty());
  ASSERT_EQ(SetNodeCondition(cordoned, "TPUUnhealthy", "True", "ChipError", "chip 0: HBM errors")
                .exit_code,
            0);
  ASSERT_TRUE(Eventually([&] { return CordonedNodes() == std::vector<std::string>{cordoned}; },
                         seconds(60), milliseconds(200)))
      << first->Log();
  // The state kept for the next process: the bucket emptied by that cordon.
  const std::string saved = Trim(Get(ns.name(), "configmap " + configmap, "{.data.state\\.json}"));
  const auto state = nlohmann::json::parse(saved, nullptr, false);
  ASSERT_TRUE(state.is_object()) << saved;
  EXPECT_LT(state.value("tokens", 1.0), 0.5) << saved;

  // The node heals; a second later it is uncordoned and none of our annotations stay.
  ASSERT_EQ(SetNodeCondition(cordoned, "TPUUnhealthy", "False", "ChipHealthy", "").exit_code, 0);
  ASSERT_TRUE(
      Eventually([&] { return CordonedNodes().empty() && OperatorAnnotations(cordoned).empty(); },
                 seconds(60), milliseconds(200)))
      << Join(OperatorAnnotations(cordoned)) << first->Log();
  first->Kill();
  first.reset();
  OperatorProcess second(flags);

  ASSERT_TRUE(JobFieldBecomes(ns.name(), "st", "{.status.phase}", "Running")) << second.Log();
  const std::string next = NodeOf(ns.name(), "st-worker-0");
  ASSERT_FALSE(next.empty());
  ASSERT_EQ(
      SetNodeCondition(next, "TPUUnhealthy", "True", "ChipError", "chip 2: HBM errors").exit_code,
      0);
  const std::string limited = "node " + next + " not cordoned: more than 1 new cordons per minute";
  std::vector<EventRecord> events;
  ASSERT_TRUE(Eventually(
      [&] {
        events = JobEvents(ns.name(), "st");
        return !EventsWith(events, "NodeNotCordoned", limited).empty() ||
               !EventsWith(events, "NodeCordoned", "cordoned node " + next).empty();
      },
      seconds(60), milliseconds(200)))
      << DescribeEvents(events) << second.Log();
  EXPECT_FALSE(EventsWith(events, "NodeNotCordoned", limited).empty())
      << DescribeEvents(events) << second.Log();
  EXPECT_TRUE(EventsWith(events, "NodeCordoned", "cordoned node " + next).empty())
      << DescribeEvents(events);
  EXPECT_EQ(NodeField(next, "{.spec.unschedulable}"), "") << next;
  EXPECT_NE(second.Log().find("verdict=RateLimited"), std::string::npos) << second.Log();
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
