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
// etcd is SIGKILLed and started again (e2e/cluster kill-etcd / start-etcd) while a 64-worker gang
// is being created, and while a job is re-issued after a node fault: each time the job
// converges with exactly its workers, of one attempt, and no pod doubled.
//
// TPUJOB_E2E_BLACKHOLE_SECONDS shortens or lengthens the blackhole (default 120);
// TPUJOB_E2E_WATCH_IDLE_TIMEOUT runs the operator with another --watch-idle-timeout (0 turns the
// detection off: the test then fails, which shows it tests the detection).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace {

using Clock = std::chrono::steady_clock;

int EnvSeconds(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
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
                      std::to_string(idle_timeout), "--max-cordoned-fraction", "1"});
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

TEST_F(ReliabilityE2E, EtcdKilledDuringAGangCreationAndDuringAReissue) {
  TestNamespace ns("rl-etcd");
  const std::string n = ns.name();
  const std::string big = prefix_ + "-big";
  CreateTpuNodes(big, 64, accelerator_, "8x32", "pool-" + big);
  PodWatch watch(n);
  OperatorProcess op({"--namespace", n, "--max-cordoned-fraction", "1"});

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
  ASSERT_TRUE(JobFieldBecomes(n, "gang", "{.status.phase}", "Running", std::chrono::seconds(120)))
      << op.Log();
  EXPECT_TRUE(ExactlyTheWorkers(n, "gang", 64, "1"));
  EXPECT_EQ(JobField(n, "gang", "{.status.attempt}"), "1");

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
  ASSERT_TRUE(JobFieldBecomes(n, "re", "{.status.phase}", "Running", std::chrono::seconds(120)))
      << op.Log();
  EXPECT_TRUE(ExactlyTheWorkers(n, "re", 2, "2"));
  EXPECT_EQ(JobField(n, "re", "{.status.jobRetries}"), "1");
  EXPECT_EQ(NodeField(node, "{.spec.unschedulable}"), "true");
  EXPECT_EQ(NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordon-reason}"), "NodeUnhealthy");
  const auto report = watch.Check();
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
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
  OperatorProcess op({"--namespace", n, "--kubeconfig", kubeconfig});
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
  Kubectl("delete clusterrolebinding " + account, false);
}

}  // namespace
}  // namespace tpujob::e2e
