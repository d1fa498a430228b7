// The fault rules (policy/fault_rules.h, policy/preflight_verdict.h) called directly, one table
// test per rule, each with a row where the rule does not apply; and the fault table
// (policy/fault_table.h).
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "policy/fault_rules.h"
#include "policy/fault_table.h"
#include "policy/preflight_verdict.h"
#include "policy_fixtures.h"
#include "preflight/report.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using fixtures::At;
using fixtures::MakePod;
using fixtures::SetExited;
using fixtures::SetRunning;

constexpr ReplicaType kWorker = ReplicaType::kWorker;

// Pods of one attempt, kept at stable addresses for the snapshots that point at them.
struct Pods {
  std::vector<cache::PodInfo> infos;
  std::vector<ObservedPod> observed;
  explicit Pods(int n) {
    infos.reserve(static_cast<size_t>(n));
    observed.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      infos.push_back(MakePod(kWorker, i, 1, "uid-" + std::to_string(i)));
      SetRunning(infos.back(), true);
    }
    for (int i = 0; i < n; ++i) observed.push_back({&infos[static_cast<size_t>(i)], kWorker, i, 1});
  }
  std::vector<const ObservedPod*> All() const {
    std::vector<const ObservedPod*> out;
    for (const ObservedPod& p : observed) out.push_back(&p);
    return out;
  }
};

NodeHealth Health(NodeVerdict verdict, bool unreachable = false) {
  return {verdict, std::string(ToString(verdict)), "node says " + std::string(ToString(verdict)),
          unreachable, std::nullopt};
}

NodeFaultSnapshot NodesOf(const Pods& pods, const std::vector<NodeHealth>& health) {
  NodeFaultSnapshot s{.pods = {}, .job_uid = "uid", .attempt = 1, .cordon_faulty_nodes = true};
  for (size_t i = 0; i < health.size(); ++i) {
    PodOnNode on{.pod = &pods.observed[i], .health = health[i], .state = {}, .exit = {}};
    on.state = ObservePod(*pods.observed[i].pod, &on.exit);
    s.pods.push_back(std::move(on));
  }
  return s;
}

TEST(PolicyFaultRulesTest, Rule1CheckMaintenance) {
  const NodeHealth ok = Health(NodeVerdict::kHealthy);
  const NodeHealth maint = Health(NodeVerdict::kMaintenance);
  NodeHealth ahead = ok;
  ahead.changes_in = std::chrono::minutes(5);
  struct Row {
    std::string name;
    std::vector<NodeHealth> health;
    int culprit;  // -1: the rule does not apply
    size_t touched;
    bool recheck;
  };
  for (const Row& row : std::vector<Row>{
           {"all healthy: does not apply", {ok, ok}, -1, 0, false},
           {"maintenance ahead: recheck only", {ahead, ok}, -1, 0, true},
           {"one node under maintenance", {ok, maint}, 1, 1, false},
           {"two: the first names the fault", {maint, maint}, 0, 2, false},
       }) {
    SCOPED_TRACE(row.name);
    Pods pods(2);
    const NodeFaultSnapshot snapshot = NodesOf(pods, row.health);
    const MaintenanceVerdict v = CheckMaintenance(snapshot);
    if (row.culprit < 0) {
      EXPECT_EQ(v.culprit, nullptr);
    } else {
      ASSERT_NE(v.culprit, nullptr);
      EXPECT_EQ(v.culprit->pod, &pods.observed[static_cast<size_t>(row.culprit)]);
      EXPECT_EQ(v.termination.reason, "Maintenance");
    }
    EXPECT_EQ(v.touched.size(), row.touched);
    EXPECT_EQ(v.recheck_in.has_value(), row.recheck);
  }
}

TEST(PolicyFaultRulesTest, Rule2CheckFaultyNodes) {
  const NodeHealth ok = Health(NodeVerdict::kHealthy);
  const NodeHealth bad = Health(NodeVerdict::kUnhealthy);
  const NodeHealth lost = Health(NodeVerdict::kUnhealthy, /*unreachable=*/true);
  const NodeHealth gone = Health(NodeVerdict::kMissing);
  const NodeHealth maint = Health(NodeVerdict::kMaintenance);
  struct Row {
    std::string name;
    std::vector<NodeHealth> health;
    bool exit_on_1;  // worker 1's program exited 3
    int culprit;     // -1: the rule does not apply
    FaultKind kind;
    size_t cordons;
  };
  for (const Row& row : std::vector<Row>{
           {"healthy or maintenance: does not apply",
            {ok, maint},
            false,
            -1,
            FaultKind::kNodeUnhealthy,
            0},
           {"unhealthy node", {bad, ok}, false, 0, FaultKind::kNodeUnhealthy, 1},
           {"lost node", {ok, lost}, false, 1, FaultKind::kNodeLost, 1},
           {"deleted node: not cordoned", {gone, ok}, false, 0, FaultKind::kNodeUnhealthy, 0},
           {"the pod whose program exited is the culprit",
            {bad, bad},
            true,
            1,
            FaultKind::kNodeUnhealthy,
            2},
       }) {
    SCOPED_TRACE(row.name);
    Pods pods(2);
    if (row.exit_on_1) SetExited(pods.infos[1], 3);
    const NodeFaultSnapshot snapshot = NodesOf(pods, row.health);
    const FaultyNodeVerdict v = CheckFaultyNodes(snapshot);
    if (row.culprit < 0) {
      EXPECT_EQ(v.culprit, nullptr);
      EXPECT_TRUE(v.touched.empty());
      continue;
    }
    ASSERT_NE(v.culprit, nullptr);
    EXPECT_EQ(v.culprit->pod, &pods.observed[static_cast<size_t>(row.culprit)]);
    EXPECT_EQ(v.kind, row.kind);
    EXPECT_EQ(v.cordon.size(), row.cordons);
    if (row.exit_on_1) {
      EXPECT_EQ(v.termination.exit_code, std::optional<int32_t>(3));
      EXPECT_NE(v.termination.message.find("; then "), std::string::npos);
    }
  }
}

TEST(PolicyFaultRulesTest, Rule3CheckPinnedUnschedulable) {
  struct Row {
    std::string name;
    bool unschedulable;
    std::string pinned_node;
    std::string recorded_uid;
    size_t unpins;
  };
  for (const Row& row : std::vector<Row>{
           {"schedulable: does not apply", false, "node-1", "old", 0},
           {"unschedulable, not pinned: does not apply", true, "", "old", 0},
           {"the failed pod itself: does not apply", true, "node-1", "uid-1", 0},
           {"pinned and unschedulable", true, "node-1", "old", 1},
       }) {
    SCOPED_TRACE(row.name);
    Pods pods(2);
    pods.infos[1].phase = cache::PodPhase::kPending;
    pods.infos[1].node_name = cache::InternedString::Intern("");
    pods.infos[1].unschedulable = row.unschedulable;
    std::map<std::string, RestartRecord, std::less<>> restarts;
    restarts["Worker-1"].count = 1;
    restarts["Worker-1"].node = row.pinned_node;
    restarts["Worker-1"].pod_uid = row.recorded_uid;
    const std::vector<Unpin> v = CheckPinnedUnschedulable({pods.All(), &restarts});
    ASSERT_EQ(v.size(), row.unpins);
    if (!v.empty()) {
      EXPECT_EQ(v[0].key, "Worker-1");
      EXPECT_EQ(v[0].node, "node-1");
    }
  }
}

TEST(PolicyFaultRulesTest, Rule4CheckUnschedulable) {
  struct Row {
    std::string name;
    bool release;
    int64_t since_admission;
    bool removing;
    bool stuck;
  };
  for (const Row& row : std::vector<Row>{
           {"within 30s: does not apply", true, 29, false, false},
           {"Kueue's job: does not apply", false, 60, false, false},
           {"deleted already: does not apply", true, 60, true, false},
           {"unschedulable past 30s", true, 30, false, true},
       }) {
    SCOPED_TRACE(row.name);
    Pods pods(2);
    pods.infos[0].phase = cache::PodPhase::kPending;
    pods.infos[0].node_name = cache::InternedString::Intern("");
    pods.infos[0].unschedulable = true;
    const ObservedPod* v = CheckUnschedulable(
        {pods.All(), row.removing ? std::vector<std::string>{"uid-0"} : std::vector<std::string>{},
         row.release, At(0), At(row.since_admission)});
    EXPECT_EQ(v, row.stuck ? &pods.observed[0] : nullptr);
  }
}

// A pre-flight report in which `item` failed.
std::string PreflightReport(const std::string& item, preflight::Fault fault) {
  preflight::ItemResult result;
  result.item = item;
  result.passed = false;
  result.fault = fault;
  result.message = item + " failed";
  return preflight::SerializeReport(preflight::MakeReport("node-0", {result}));
}

// A failed pre-flight init container with a report.
void FailPreflight(cache::PodInfo& pod, int32_t code, const std::string& report) {
  cache::ContainerInfo init;
  init.name = cache::InternedString::Intern(kPreflightContainer);
  init.state = cache::ContainerState::kTerminated;
  init.exit_code = code;
  init.reason = cache::InternedString::Intern("Error");
  init.message = cache::InternedString::Intern(report);
  pod.init_containers = {init};
  pod.phase = cache::PodPhase::kFailed;
  pod.ready = false;
  for (auto& c : pod.containers) c.state = cache::ContainerState::kWaiting;
}

TEST(PolicyFaultRulesTest, Rule5CheckPreflight) {
  const std::expected<JobSpec, std::string> spec =
      ParseJobSpec(fixtures::MakeJob(fixtures::SpecJson(2)));
  ASSERT_TRUE(spec.has_value()) << spec.error();
  const std::string node_report = PreflightReport("accelerator", preflight::Fault::kNode);
  const std::string config_report = PreflightReport("config", preflight::Fault::kConfig);
  using Outcome = PreflightVerdict::Outcome;
  struct Row {
    std::string name;
    int32_t code;  // 0: worker 0 did not fail pre-flight
    std::string report;
    bool peer_checking;  // worker 1 still runs its checks
    int64_t since_admission;
    Outcome outcome;
    size_t cordons;
  };
  for (const Row& row : std::vector<Row>{
           {"no failure: does not apply", 0, "", false, 0, Outcome::kNone, 0},
           {"a peer still checks: wait", 10, node_report, true, 10, Outcome::kWait, 0},
           {"a peer still checks past the settle time", 10, node_report, true, 200,
            Outcome::kReissue, 1},
           {"hardware: cordon and re-issue", 10, node_report, false, 10, Outcome::kReissue, 1},
           {"the job's settings: fail", 11, config_report, false, 10, Outcome::kFailJob, 0},
       }) {
    SCOPED_TRACE(row.name);
    Pods pods(2);
    if (row.peer_checking) {
      cache::ContainerInfo init;
      init.name = cache::InternedString::Intern(kPreflightContainer);
      init.state = cache::ContainerState::kRunning;
      pods.infos[1].init_containers.push_back(std::move(init));
      pods.infos[1].phase = cache::PodPhase::kPending;
    }
    std::vector<ReplicaFailure> failures;
    if (row.code != 0) {
      FailPreflight(pods.infos[0], row.code, row.report);
      Termination t;
      ASSERT_EQ(ObservePod(pods.infos[0], &t), PodState::kFailed);
      failures.push_back({&pods.observed[0], t, false});
    }
    PreflightSnapshot snapshot{.failed = {},
                               .pods = pods.All(),
                               .spec = &*spec,
                               .admitted_at = At(0),
                               .now = At(row.since_admission)};
    for (const ReplicaFailure& f : failures) snapshot.failed.push_back(&f);
    const PreflightVerdict v = CheckPreflight(snapshot);
    EXPECT_EQ(v.outcome, row.outcome);
    EXPECT_EQ(v.cordon.size(), row.cordons);
    if (row.outcome == Outcome::kReissue || row.outcome == Outcome::kFailJob) {
      EXPECT_EQ(v.culprit, &pods.observed[0]);
      EXPECT_FALSE(v.why.empty());
    }
  }
}

TEST(PolicyFaultRulesTest, Rule6CheckPermanentExits) {
  const ExitCodeRules rules;  // 1 and 137 permanent
  struct Row {
    std::string name;
    int32_t code;
    bool counted;
    int64_t window;
    int64_t since_exit;
    bool held;
    bool fails;
    bool waited;
  };
  for (const Row& row : std::vector<Row>{
           {"retryable: does not apply", 3, false, 30, 0, false, false, false},
           {"counted already: does not apply", 1, true, 30, 0, false, false, false},
           {"within the window: held", 1, false, 30, 10, true, false, false},
           {"past the window: fails, node confirmed", 1, false, 30, 31, false, true, true},
           {"no window: fails at once", 1, false, 0, 0, false, true, false},
       }) {
    SCOPED_TRACE(row.name);
    Pods pods(2);
    SetExited(pods.infos[0], row.code);
    pods.infos[0].containers.front().finished_at = At(0);
    Termination t;
    ASSERT_EQ(ObservePod(pods.infos[0], &t), PodState::kFailed);
    const std::vector<ReplicaFailure> failures{{&pods.observed[0], t, row.counted}};
    const PermanentExitVerdict v =
        CheckPermanentExits({&failures, &rules, row.window, At(row.since_exit)});
    EXPECT_EQ(!v.held.empty(), row.held);
    EXPECT_EQ(v.recheck_in.has_value(), row.held);
    EXPECT_EQ(v.fails != nullptr, row.fails);
    EXPECT_EQ(v.waited, row.waited);
    EXPECT_EQ(v.confirm_nodes,
              row.waited ? std::vector<std::string>{"node-0"} : std::vector<std::string>{});
  }
}

TEST(PolicyFaultRulesTest, Rule7CheckSuccessOrPreemption) {
  using Outcome = SuccessVerdict::Outcome;
  const std::optional<PreemptOrder> none;
  const std::optional<PreemptOrder> order = PreemptOrder{"team/high", "preempted", 1, ""};
  const std::optional<PreemptOrder> stale = PreemptOrder{"team/high", "preempted", 0, ""};
  struct Row {
    std::string name;
    bool held;
    SuccessPolicy policy;
    bool decider;
    int32_t workers_succeeded;
    const std::optional<PreemptOrder>* preempt;
    Outcome outcome;
    std::string reason;
  };
  for (const Row& row : std::vector<Row>{
           {"running: does not apply", false, SuccessPolicy::kMaster, false, 0, &none,
            Outcome::kNone, ""},
           {"worker 0 exited 0", false, SuccessPolicy::kMaster, true, 1, &none, Outcome::kSucceeded,
            "MasterSucceeded"},
           {"all workers exited 0", false, SuccessPolicy::kAllWorkers, false, 2, &none,
            Outcome::kSucceeded, "AllWorkersSucceeded"},
           {"a held exit came first", true, SuccessPolicy::kMaster, true, 1, &order, Outcome::kNone,
            ""},
           {"preempted", false, SuccessPolicy::kMaster, false, 0, &order, Outcome::kPreempted, ""},
           {"an order for another attempt", false, SuccessPolicy::kMaster, false, 0, &stale,
            Outcome::kNone, ""},
       }) {
    SCOPED_TRACE(row.name);
    const SuccessVerdict v = CheckSuccessOrPreemption({.exit_held = row.held,
                                                       .success_policy = row.policy,
                                                       .has_master = false,
                                                       .success_decider_succeeded = row.decider,
                                                       .workers = 2,
                                                       .workers_succeeded = row.workers_succeeded,
                                                       .replicas = 2,
                                                       .preempt = row.preempt,
                                                       .attempt = 1});
    EXPECT_EQ(v.outcome, row.outcome);
    EXPECT_EQ(v.reason, row.reason);
  }
}

TEST(PolicyFaultRulesTest, Rule8CheckRetryableExits) {
  using Step = RetryVerdict::Step;
  struct Row {
    std::string name;
    bool in_place;
    int32_t restarts_used;
    bool counted;
    bool held_other;
    std::vector<Step> steps;
  };
  for (const Row& row : std::vector<Row>{
           {"held: does not apply", false, 0, false, true, {}},
           {"within budget: restart the worker", false, 0, false, false, {Step::kRestartWorker}},
           {"counted already: delete", false, 1, true, false, {Step::kDeleteCounted}},
           {"out of restarts: re-issue", false, 2, false, false, {Step::kReissue}},
           {"in place: restart every program", true, 0, false, false, {Step::kRestartInPlace}},
           {"in place, counted program failure: nothing", true, 1, true, false, {}},
       }) {
    SCOPED_TRACE(row.name);
    Pods pods(2);
    SetExited(pods.infos[0], 3);
    Termination t;
    ASSERT_EQ(ObservePod(pods.infos[0], &t), PodState::kFailed);
    const std::vector<ReplicaFailure> failures{{&pods.observed[0], t, row.counted}};
    std::map<std::string, RestartRecord, std::less<>> restarts;
    if (row.restarts_used > 0) {
      restarts["Worker-0"].count = row.restarts_used;
      restarts["Worker-0"].pod_uid = row.counted ? "uid-0" : "earlier";
    }
    std::vector<const ReplicaFailure*> held;
    if (row.held_other) held.push_back(&failures[0]);
    const std::vector<RetryVerdict> v =
        CheckRetryableExits({&failures, &held, &restarts, row.in_place, 2});
    std::vector<Step> steps;
    for (const RetryVerdict& step : v) steps.push_back(step.step);
    EXPECT_EQ(steps, row.steps);
  }
}

TEST(PolicyFaultTableTest, EveryNameRoundTrips) {
  for (const FaultKindTreatment& row : kFaultKinds) {
    EXPECT_EQ(ParseFaultKind(FaultKindName(row.kind)), std::optional<FaultKind>(row.kind));
  }
  for (const FaultActionTreatment& row : kFaultActions) {
    EXPECT_EQ(ParseFaultAction(FaultActionName(row.action)),
              std::optional<FaultAction>(row.action));
  }
  EXPECT_EQ(ParseFaultKind("NoSuchKind"), std::nullopt);
  EXPECT_EQ(ParseFaultAction("NoSuchAction"), std::nullopt);
  // The JSON strings of status.faults[] are part of the API.
  EXPECT_EQ(FaultKindName(FaultKind::kNodeLost), "NodeLost");
  EXPECT_EQ(FaultKindName(FaultKind::kPreflightFailed), "PreflightFailed");
  EXPECT_EQ(FaultActionName(FaultAction::kRestartInPlace), "RestartInPlace");
  EXPECT_EQ(FaultActionName(FaultAction::kReplaceSlice), "ReplaceSlice");
}

TEST(PolicyFaultTableTest, RestartsWorkerExactlyForTheRestartingActions) {
  for (const FaultActionTreatment& row : kFaultActions) {
    const bool restarting = row.action == FaultAction::kRestartWorker ||
                            row.action == FaultAction::kRestartInPlace ||
                            row.action == FaultAction::kRestartAllWorkers;
    EXPECT_EQ(RestartsWorker(row.action), restarting) << row.name;
    EXPECT_EQ(RestartsWorker(row.name), restarting) << row.name;
  }
  EXPECT_FALSE(RestartsWorker(std::string_view("NoSuchAction")));
}

TEST(PolicyFaultTableTest, DisruptionsUseNoRetryAndGiveTheMaintenanceGrace) {
  for (const FaultKindTreatment& row : kFaultKinds) {
    const bool disruption =
        row.kind == FaultKind::kMaintenance || row.kind == FaultKind::kPreempted;
    EXPECT_EQ(UsesRetry(row.kind), !disruption) << row.name;
    EXPECT_EQ(row.grace == FaultGrace::kMaintenance, disruption) << row.name;
  }
  EXPECT_EQ(Treatment(FaultKind::kNodeLost).cordon, FaultCordon::kTheNode);
  EXPECT_EQ(Treatment(FaultKind::kPreflightFailed).cordon, FaultCordon::kNodesAtFault);
  EXPECT_EQ(Treatment(FaultKind::kContainerFailed).cordon, FaultCordon::kNone);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
