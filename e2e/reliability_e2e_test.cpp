// Reliability end to end: the operator talks to the API server through the blackhole proxy of
// `e2e/cluster proxy`; the proxy freezes every connection for two minutes (as a load balancer
// that lost its connection table would: open, silent, never closed) while a node fault happens.
// The operator cannot see the fault then; once forwarding resumes it must act on it within its
// watch idle timeout (--watch-idle-timeout, 50 s), not after the 10-15 minutes a silently dead
// watch would otherwise last. Asserted with kubectl.
//
// The operator's service-account token file is replaced mid-run and the old token revoked (the
// Secret it was bound to deleted): the operator reads the file again on the first 401 and keeps
// working.
//
// Crash at every write: the operator SIGKILLs itself right after its Nth successful API write
// (--crash-after-writes N), for every N in one job's life (created, Running, a node fault,
// re-issued, Running again, succeeded); another operator takes over each time, and the job ends
// with the same status as in a run without a crash, and no worker id ever doubled.
//
// etcd is SIGKILLed and started again (e2e/cluster kill-etcd / start-etcd) while a 64-worker gang
// is being created, and while a job is re-issued after a node fault: each time the job
// converges with exactly its workers, of one attempt, and no pod doubled.
//
// Every case ends by checking that nothing was lost (ExpectNothingLost): the operator's caches
// of pods, nodes and TPUJobs equal a fresh `kubectl get` of the same scope, object for object
// (uid and resourceVersion included; read from its /debug/cache, served with the hidden flag
// --debug-cache-endpoint); each job has exactly its desired pods; no pod or Service is an
// orphan; no node is cordoned without a recorded reason. Each is polled for up to 30 s (watches
// lag a little), and a failure prints every difference.
//
// TPUJOB_E2E_BLACKHOLE_SECONDS shortens or lengthens the blackhole (default 120);
// TPUJOB_E2E_WATCH_IDLE_TIMEOUT runs the operator with another --watch-idle-timeout (0 turns the
// detection off: the test then fails, which shows it tests the detection; the cache comparison
// made once the fault should have been acted on shows the node the operator still holds stale).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using Clock = std::chrono::steady_clock;

int EnvSeconds(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

// The end of a case (see the top of the file): the caches of `op`, which runs with
// kDebugCacheFlag and --namespace `ns`, equal a fresh kubectl get, and nothing is left behind.
void ExpectNothingLost(OperatorProcess& op, const std::string& ns,
                       const std::vector<std::string>& node_sets) {
  EXPECT_TRUE(CacheEqualsApiServer(op, ns));
  ExpectNothingLeftBehind(ns, node_sets);
}

class ReliabilityE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }
  void SetUp() override {
    static int counter = 0;
    prefix_ = "rl" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
    CreateTpuNodes(prefix_, 3, accelerator_, "2x4", "pool-" + prefix_);
  }
  void TearDown() override {
    Cluster("unblackhole");
    Cluster("start-etcd");  // should a test have stopped with etcd down
    DeleteTpuNodes(prefix_);
    DeleteTpuNodes(prefix_ + "-big");
  }
  static CommandResult Cluster(const std::string& command) {
    return RunCommand(ClusterScript() + " " + command + " --dir " + ClusterDir());
  }

  std::string prefix_;
  std::string accelerator_;
};

// Over 60 s by design: the outage is 120 s long, then up to the 50 s watch idle timeout.
TEST_F(ReliabilityE2E, AFaultDuringABlackholeIsActedOnWithinTheWatchIdleTimeoutAfterIt) {
  const int blackhole_seconds = EnvSeconds("TPUJOB_E2E_BLACKHOLE_SECONDS", 120);
  const int idle_timeout = EnvSeconds("TPUJOB_E2E_WATCH_IDLE_TIMEOUT", 50);
  TestNamespace ns("rl-blackhole");
  const std::string n = ns.name();
  const auto proxy = Cluster("proxy");
  ASSERT_EQ(proxy.exit_code, 0) << proxy.output;
  const std::string proxy_kubeconfig = ClusterDir() + "/proxy.kubeconfig";
  PodWatch watch(n);
  OperatorProcess op({"--namespace", n, "--kubeconfig", proxy_kubeconfig, "--watch-idle-timeout",
                      std::to_string(idle_timeout), "--max-cordoned-fraction", "1",
                      kDebugCacheFlag});
  ASSERT_EQ(ApplyYaml(n, JobYaml("bh", 2, "2x4", "", false, "fault-tolerance/job-retry-num: \"2\"",
                                 accelerator_))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "bh", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::string node = NodeOf(n, "bh-worker-0");
  ASSERT_FALSE(node.empty());

  // Cut off: every connection of the operator's goes silent, then the node breaks.
  ASSERT_EQ(Cluster("blackhole").exit_code, 0);
  const auto cut = Clock::now();
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "ECC").exit_code, 0);
  // The blackhole lasts its full length: the scenario is a long outage, not a condition.
  std::this_thread::sleep_until(cut + std::chrono::seconds(blackhole_seconds));
  EXPECT_EQ(NodeField(node, "{.spec.unschedulable}"), "") << "acted on while blind?";
  ASSERT_EQ(Cluster("unblackhole").exit_code, 0);
  const auto resumed = Clock::now();

  // The fault is acted on: the node cordoned (with its reason), the job re-issued.
  const bool acted = Eventually(
      [&] {
        return NodeField(node, "{.spec.unschedulable}") == "true" &&
               JobField(n, "bh", "{.status.attempt}") == "2";
      },
      std::chrono::seconds(idle_timeout + 40), std::chrono::milliseconds(200));
  const double after = std::chrono::duration<double>(Clock::now() - resumed).count();
  std::printf("fault %s %.1f s after forwarding resumed (blackhole %d s, idle timeout %d s)\n",
              acted ? "acted on" : "still not acted on", after, blackhole_seconds, idle_timeout);
  // By now the caches have caught up with everything the blackhole hid; a failure here shows
  // what the operator still holds stale (the node whose fault it missed), before the verdict.
  EXPECT_TRUE(CacheEqualsApiServer(op, n)) << "after forwarding resumed";
  ASSERT_TRUE(acted) << op.Log();
  EXPECT_LE(after, idle_timeout + 10.0) << "slower than the watch idle timeout allows";
  EXPECT_EQ(NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordon-reason}"), "NodeUnhealthy");

  // Nothing lost, nothing doubled: the new attempt runs with exactly its two workers.
  ASSERT_TRUE(JobFieldBecomes(n, "bh", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  EXPECT_EQ(JobPods(n, "bh").size(), 2u) << testing::PrintToString(JobPods(n, "bh"));
  for (const char* pod : {"bh-worker-0", "bh-worker-1"}) {
    EXPECT_EQ(Get(n, std::string("pod ") + pod, "{.metadata.labels.tpujob\\.dev/attempt}"), "2");
  }
  const auto report = watch.Check();
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);

  // The operator said what happened: a log line and the metric.
  EXPECT_NE(op.Log().find("watch silent, re-watching"), std::string::npos);
  const std::string metrics =
      RunCommand("curl -sf http://127.0.0.1:" + std::to_string(op.metrics_port()) + "/metrics",
                 false)
          .output;
  EXPECT_NE(metrics.find("tpujob_watch_silences_total{resource=\"nodes\"}"), std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find("tpujob_watch_silences_total{resource=\"nodes\"} 0"), std::string::npos)
      << metrics;
  ExpectNothingLost(op, n, {prefix_});
}

// Every pod of `job` is a worker of `attempt`, one per index, `workers` of them.
::testing::AssertionResult ExactlyTheWorkers(const std::string& ns, const std::string& job,
                                             int workers, const std::string& attempt) {
  const std::string listed = Get(ns, "pods -l tpujob.dev/job-name=" + job,
                                 "{range .items[*]}{.metadata.labels.tpujob\\.dev/replica-index}/"
                                 "{.metadata.labels.tpujob\\.dev/attempt} {end}");
  std::set<std::string> seen;
  std::istringstream in(listed);
  for (std::string item; in >> item;) {
    if (!item.ends_with("/" + attempt)) {
      return ::testing::AssertionFailure() << "a pod of another attempt: " << item;
    }
    if (!seen.insert(item).second) return ::testing::AssertionFailure() << "twice: " << item;
  }
  if (static_cast<int>(seen.size()) != workers) {
    return ::testing::AssertionFailure()
           << seen.size() << " pods, want " << workers << ": " << listed;
  }
  return ::testing::AssertionSuccess();
}

// KWOK removes a pod being deleted with a final DELETE of its own and never retries one that
// failed (as during an etcd outage); a kubelet does retry. Stands in for that retry: the pods of
// `ns` still terminating are removed.
void FinishDeletionsKwokGaveUpOn(const std::string& ns) {
  const std::string terminating =
      Get(ns, "pods", "{range .items[?(@.metadata.deletionTimestamp)]}{.metadata.name} {end}");
  std::istringstream names(terminating);
  for (std::string pod; names >> pod;) {
    Kubectl("delete pod " + pod + " -n " + ns + " --force --grace-period=0 --wait=false", false);
  }
}

// KWOK moves a bound pod to Running with status patches and drops a patch for good when the
// API server answers it with an internal error, as it does while etcd is down; a kubelet keeps
// syncing its pods until their status is written. Stands in for that sync: until `job` reads
// phase Running, the pods of `ns` that are bound but still Pending are touched (an annotation),
// which makes KWOK play their stage again. Says how many pods it touched.
::testing::AssertionResult RunsWithKubeletResync(const std::string& ns, const std::string& job,
                                                 std::chrono::seconds timeout) {
  int touched = 0;
  int round = 0;
  (void)Eventually(
      [&] {
        if (JobField(ns, job, "{.status.phase}") == "Running") return true;
        const std::string stuck =
            Get(ns, "pods",
                "{range .items[?(@.status.phase==\"Pending\")]}{.metadata.name}:"
                "{.spec.nodeName}:{.metadata.deletionTimestamp} {end}");
        std::istringstream items(stuck);
        std::string names;
        for (std::string item; items >> item;) {
          const auto first = item.find(':');
          const auto second = item.find(':', first + 1);
          const bool bound = second > first + 1;
          const bool deleting = second + 1 < item.size();
          if (!bound || deleting) continue;
          names += " " + item.substr(0, first);
          ++touched;
        }
        if (!names.empty()) {
          Kubectl("annotate pod" + names + " -n " + ns +
                      " --overwrite e2e.tpujob.dev/resync=" + std::to_string(++round),
                  false);
        }
        return false;
      },
      timeout, std::chrono::seconds(3));
  std::cerr << "kubelet resync stand-in: " << touched << " pod touches in " << round << " rounds\n";
  return JobFieldBecomes(ns, job, "{.status.phase}", "Running", std::chrono::seconds(1));
}

TEST_F(ReliabilityE2E, EtcdKilledDuringAGangCreationAndDuringAReissue) {
  TestNamespace ns("rl-etcd");
  const std::string n = ns.name();
  const std::string big = prefix_ + "-big";
  CreateTpuNodes(big, 64, accelerator_, "8x32", "pool-" + big);
  PodWatch watch(n);
  OperatorProcess op({"--namespace", n, "--max-cordoned-fraction", "1", kDebugCacheFlag});

  // 1. While the operator creates 64 pods: etcd dies as soon as the first pod exists, and comes
  // back 3 s later.
  ASSERT_EQ(ApplyYaml(n, JobYaml("gang", 64, "8x32", "", false,
                                 "fault-tolerance/job-retry-num: \"1\"", accelerator_))
                .exit_code,
            0);
  ASSERT_TRUE(Eventually([&] { return !JobPods(n, "gang").empty(); }, std::chrono::seconds(60),
                         std::chrono::milliseconds(20)))
      << op.Log();
  ASSERT_EQ(Cluster("kill-etcd").exit_code, 0);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the outage's length
  const auto started = Cluster("start-etcd");
  ASSERT_EQ(started.exit_code, 0) << started.output;
  FinishDeletionsKwokGaveUpOn(n);
  ASSERT_TRUE(RunsWithKubeletResync(n, "gang", std::chrono::seconds(120))) << op.Log();
  EXPECT_TRUE(ExactlyTheWorkers(n, "gang", 64, "1"));
  EXPECT_EQ(JobField(n, "gang", "{.status.attempt}"), "1");
  ExpectNothingLost(op, n, {prefix_, big});

  // 2. While the job is re-issued after a node fault: etcd dies right after the fault is
  // written.
  ASSERT_EQ(Kubectl("delete tpujob gang -n " + n).exit_code, 0);
  ASSERT_TRUE(Eventually([&] { return JobPods(n, "gang").empty(); }, std::chrono::seconds(60)));
  ASSERT_EQ(ApplyYaml(n, JobYaml("re", 2, "2x4", "", false, "fault-tolerance/job-retry-num: \"1\"",
                                 accelerator_))
                .exit_code,
            0);
  // The 2x4 nodes are this test's three; the job fits twice.
  ASSERT_TRUE(JobFieldBecomes(n, "re", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::string node = NodeOf(n, "re-worker-0");
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "ECC").exit_code, 0);
  ASSERT_EQ(Cluster("kill-etcd").exit_code, 0);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  ASSERT_EQ(Cluster("start-etcd").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "re", "{.status.attempt}", "2", std::chrono::seconds(120)))
      << op.Log();
  FinishDeletionsKwokGaveUpOn(n);
  ASSERT_TRUE(RunsWithKubeletResync(n, "re", std::chrono::seconds(120))) << op.Log();
  EXPECT_TRUE(ExactlyTheWorkers(n, "re", 2, "2"));
  EXPECT_EQ(JobField(n, "re", "{.status.jobRetries}"), "1");
  EXPECT_EQ(NodeField(node, "{.spec.unschedulable}"), "true");
  EXPECT_EQ(NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordon-reason}"), "NodeUnhealthy");
  const auto report = watch.Check();
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  ExpectNothingLost(op, n, {prefix_, big});
}

// A token for `account`, bound to the Secret `secret` (deleting the Secret revokes it).
std::string BoundToken(const std::string& ns, const std::string& account,
                       const std::string& secret) {
  EXPECT_EQ(Kubectl("create secret generic " + secret + " -n " + ns).exit_code, 0);
  return Trim(Kubectl("create token " + account + " -n " + ns +
                          " --duration=1h --bound-object-kind=Secret --bound-object-name=" + secret,
                      false)
                  .output);
}

TEST_F(ReliabilityE2E, ARotatedTokenIsPickedUpWhenTheOldOneIsRevoked) {
  TestNamespace ns("rl-token");
  const std::string n = ns.name();
  const std::string account = "operator-" + prefix_;
  ASSERT_EQ(Kubectl("create serviceaccount " + account + " -n " + n).exit_code, 0);
  ASSERT_EQ(Kubectl("create clusterrolebinding " + account + " --clusterrole=cluster-admin " +
                    "--serviceaccount=" + n + ":" + account)
                .exit_code,
            0);
  const std::string token_path = ClusterDir() + "/token-" + prefix_;
  const std::string first = BoundToken(n, account, "token-one");
  ASSERT_FALSE(first.empty());
  std::ofstream(token_path) << first;
  // The service-account kubeconfig, with the token read from the file instead.
  const std::string embedded = ServiceAccountKubeconfig(n, account);
  ASSERT_FALSE(embedded.empty());
  const std::string kubeconfig = ClusterDir() + "/token-file-" + prefix_ + ".kubeconfig";
  {
    std::string text = ReadFile(embedded);
    const size_t at = text.find("    token: ");
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, text.find('\n', at) - at, "    tokenFile: " + token_path);
    std::ofstream(kubeconfig) << text;
  }
  OperatorProcess op({"--namespace", n, "--kubeconfig", kubeconfig, kDebugCacheFlag});
  ASSERT_EQ(ApplyYaml(n, JobYaml("before", 2, "2x4", "", false, "", accelerator_)).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "before", "{.status.phase}", "Running")) << op.Log();

  // The kubelet rotates the token (atomically) and the old one is revoked at once.
  const std::string second = BoundToken(n, account, "token-two");
  ASSERT_FALSE(second.empty());
  std::ofstream(token_path + ".new") << second;
  ASSERT_EQ(std::rename((token_path + ".new").c_str(), token_path.c_str()), 0);
  ASSERT_EQ(Kubectl("delete secret token-one -n " + n).exit_code, 0);
  ASSERT_TRUE(Eventually([&] {
    return RunCommand(ToolsBin() + "/kubectl --token " + first + " --kubeconfig " + embedded +
                          " get pods -n " + n + " 2>&1",
                      false)
               .output.find("Unauthorized") != std::string::npos;
  })) << "the old token still works";

  // The operator keeps working: the running job finishes, the next one is admitted and runs,
  // each well within the minute after which the file would be read again anyway.
  ASSERT_EQ(TerminatePod(n, "before-worker-0", 0).exit_code, 0);
  ASSERT_TRUE(
      JobFieldBecomes(n, "before", "{.status.phase}", "Succeeded", std::chrono::seconds(20)))
      << op.Log();
  ASSERT_EQ(ApplyYaml(n, JobYaml("after", 2, "2x4", "", false, "", accelerator_)).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "after", "{.status.phase}", "Running", std::chrono::seconds(20)))
      << op.Log();
  EXPECT_NE(op.Log().find("the token file holds a new token"), std::string::npos);
  ExpectNothingLost(op, n, {prefix_});
  Kubectl("delete clusterrolebinding " + account, false);
}

// Successful writes the operator made, from its tpujob_api_requests_total.
int SuccessfulWrites(const std::string& metrics) {
  int writes = 0;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("tpujob_api_requests_total{")) continue;
    const bool write = line.find("verb=\"POST\"") != std::string::npos ||
                       line.find("verb=\"PUT\"") != std::string::npos ||
                       line.find("verb=\"PATCH\"") != std::string::npos ||
                       line.find("verb=\"DELETE\"") != std::string::npos;
    if (write && line.find("code=\"2") != std::string::npos) {
      writes += std::atoi(line.substr(line.rfind(' ') + 1).c_str());
    }
  }
  return writes;
}

class CrashAtEveryWriteE2E : public ReliabilityE2E {
 protected:
  struct Outcome {
    std::string status;  // what must not depend on the crash
    int writes = 0;      // successful writes of the last operator
    bool crashed = false;
    std::vector<std::string> violations;
  };

  // One job's whole life; the first operator crashes after write `crash_at` (0: never).
  Outcome Life(int crash_at) {
    Outcome out;
    const std::string nodes = prefix_ + "-c" + std::to_string(crash_at);
    CreateTpuNodes(nodes, 3, accelerator_ + "-life", "2x4", "pool-" + nodes);
    TestNamespace ns("rl-crash");
    const std::string n = ns.name();
    PodWatch watch(n);
    // Each life is a cluster of its own to the operator: its cordon safety state (kept across
    // the crash, as in a cluster) starts empty, or the lives before would use up the rate.
    std::vector<std::string> args = {"--namespace",
                                     n,
                                     "--max-cordoned-fraction",
                                     "1",
                                     "--cordon-state-configmap",
                                     "cordon-state-" + n,
                                     kDebugCacheFlag};
    std::vector<std::string> first = args;
    if (crash_at > 0) first.insert(first.end(), {"--crash-after-writes", std::to_string(crash_at)});
    auto op = std::make_unique<OperatorProcess>(first);
    // Waits for `done`; if the operator died meanwhile, another one takes over.
    const auto await = [&](const std::function<bool()>& done) {
      if (Eventually([&] { return done() || op->Exited(); }, std::chrono::seconds(60),
                     std::chrono::milliseconds(50)) &&
          done()) {
        return true;
      }
      if (!op->Exited()) return false;
      out.crashed = true;
      op = std::make_unique<OperatorProcess>(args);
      return Eventually(done, std::chrono::seconds(60), std::chrono::milliseconds(50));
    };
    const auto phase_is = [&](const std::string& attempt, const std::string& phase) {
      return [&, attempt, phase] {
        return JobField(n, "life", "{.status.attempt}/{.status.phase}") == attempt + "/" + phase;
      };
    };
    EXPECT_EQ(ApplyYaml(n, JobYaml("life", 2, "2x4", "", false,
                                   "fault-tolerance/job-retry-num: \"1\"", accelerator_ + "-life"))
                  .exit_code,
              0);
    if (!await(phase_is("1", "Running"))) {
      ADD_FAILURE() << "crash at write " << crash_at << ": never Running\n" << op->Log();
      DeleteTpuNodes(nodes);
      return out;
    }
    const std::string node = NodeOf(n, "life-worker-0");
    EXPECT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "ECC").exit_code, 0);
    if (!await(phase_is("2", "Running"))) {
      ADD_FAILURE() << "crash at write " << crash_at << ": not re-issued\n" << op->Log();
      DeleteTpuNodes(nodes);
      return out;
    }
    EXPECT_EQ(TerminatePod(n, "life-worker-0", 0).exit_code, 0);
    if (!await(phase_is("2", "Succeeded"))) {
      ADD_FAILURE() << "crash at write " << crash_at << ": never Succeeded\n" << op->Log();
      DeleteTpuNodes(nodes);
      return out;
    }
    out.status = JobField(n, "life",
                          "{.status.phase} attempt={.status.attempt} "
                          "retries={.status.jobRetries} faults={.status.faults[*].kind}/"
                          "{.status.faults[*].action} cordoned={.status.cordonedNodes} "
                          "conditions={.status.conditions[*].type}={.status.conditions[*].status}");
    // The node is named differently in every run: keep what does not depend on it.
    if (const size_t at = out.status.find(node); at != std::string::npos) {
      out.status.replace(at, node.size(), "<node>");
    }
    out.writes = SuccessfulWrites(
        RunCommand("curl -sf http://127.0.0.1:" + std::to_string(op->metrics_port()) + "/metrics",
                   false)
            .output);
    out.violations = watch.Check().violations;
    // The final operator run: the one that took over, or the first if it has not crashed. That
    // one may still crash on a late write (an Event after the last status): then another takes
    // over, as above, and it is the one compared.
    if (op->Exited()) {
      out.crashed = true;
      op = std::make_unique<OperatorProcess>(args);
    }
    ::testing::AssertionResult cache = CacheEqualsApiServer(*op, n);
    if (!cache && op->Exited()) {
      out.crashed = true;
      op = std::make_unique<OperatorProcess>(args);
      cache = CacheEqualsApiServer(*op, n);
    }
    EXPECT_TRUE(cache) << "crash at write " << crash_at;
    ExpectNothingLeftBehind(n, {prefix_, nodes});
    DeleteTpuNodes(nodes);
    return out;
  }
};

// Over 60 s by design: one whole job life (nodes, re-issue, success) per write of a clean life.
TEST_F(CrashAtEveryWriteE2E, TheJobConvergesToTheSameEndWhateverWriteTheOperatorDiedAfter) {
  const Outcome clean = Life(0);
  ASSERT_FALSE(clean.status.empty());
  ASSERT_GT(clean.writes, 5);
  EXPECT_TRUE(clean.violations.empty()) << testing::PrintToString(clean.violations);
  std::printf("a job's life without a crash: %d successful writes; status: %s\n", clean.writes,
              clean.status.c_str());
  int crashed = 0;
  for (int n = 1; n <= clean.writes; ++n) {
    SCOPED_TRACE("crash after write " + std::to_string(n));
    const Outcome run = Life(n);
    crashed += run.crashed;
    EXPECT_EQ(run.status, clean.status);
    EXPECT_TRUE(run.violations.empty()) << testing::PrintToString(run.violations);
  }
  std::printf("crashed in %d of %d runs\n", crashed, clean.writes);
  // A run's writes vary a little (Events are aggregated as they come), so a crash point near
  // the end may not be reached in every run.
  EXPECT_GE(crashed, clean.writes * 3 / 4) << "the crash flag did not fire";
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
