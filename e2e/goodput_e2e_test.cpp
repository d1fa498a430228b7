// Goodput accounting end to end: a scripted job life on KWOK nodes (queued, starting, running, a
// worker restart, a hardware fault and re-issue, running again, success) gives a breakdown in
// status.goodput that adds up to the wall time and matches the intervals the test timed, with
// and without an operator SIGKILL in the middle; the metrics agree with the status.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "cache/objects.h"
#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

// Wall-clock seconds since the epoch, as the phase watch stamps its lines.
double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void SleepUntilWall(double t) {
  const double left = t - WallNow();
  if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
}

// The job's phase changes as a `kubectl get --watch` sees them, each stamped with the wall time
// its line arrived: the moments the cluster saw each transition, without polling delays.
class PhaseWatch {
 public:
  PhaseWatch(const std::string& ns, const std::string& job) {
    path_ = ClusterDir() + "/phasewatch-" + ns + ".log";
    const std::string script = ClusterDir() + "/phasewatch.sh";
    std::ofstream(script)
        << "#!/bin/bash\n"
        << "\"$1\" --kubeconfig \"$2\" get tpujobs -n \"$3\" --field-selector "
           "metadata.name=\"$4\" --watch -o jsonpath='{.status.phase}{\"\\n\"}' 2>/dev/null |\n"
        << "  while IFS= read -r line; do echo \"$EPOCHREALTIME $line\"; done\n";
    pid_ = std::atoi(Trim(RunCommand("setsid bash " + script + " " + ToolsBin() + "/kubectl " +
                                         KubeconfigPath() + " " + ns + " " + job + " > " + path_ +
                                         " 2>&1 & echo $!",
                                     false)
                              .output)
                         .c_str());
  }
  ~PhaseWatch() {
    if (pid_ > 0) ::kill(-pid_, SIGTERM);
  }

  // (wall time, phase) at each change of phase, oldest first.
  std::vector<std::pair<double, std::string>> Changes() const {
    std::vector<std::pair<double, std::string>> out;
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      const size_t space = line.find(' ');
      if (space == std::string::npos) continue;
      const std::string phase = Trim(line.substr(space + 1));
      if (phase.empty() || (!out.empty() && out.back().second == phase)) continue;
      out.emplace_back(std::stod(line.substr(0, space)), phase);
    }
    return out;
  }

  // When the watch saw the job enter `phase` for the `nth` time; waits for it.
  double Await(const std::string& phase, int nth = 1) {
    double at = -1;
    EXPECT_TRUE(Eventually(
        [&] {
          int seen = 0;
          for (const auto& [t, p] : Changes()) {
            if (p == phase && ++seen == nth) {
              at = t;
              return true;
            }
          }
          return false;
        },
        std::chrono::seconds(60), std::chrono::milliseconds(10)))
        << "phase " << phase << " #" << nth << " never seen: " << testing::PrintToString(Changes());
    return at;
  }

 private:
  std::string path_;
  int pid_ = 0;
};

double Number(const nlohmann::json& object, const std::string& key) {
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : 0.0;
}

// The samples of `metric` whose labels include `selector`, by their labels.
std::map<std::string, double> Samples(const std::string& text, const std::string& metric,
                                      const std::string& selector) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(metric + "{") || line.find(selector) == std::string::npos) continue;
    const size_t close = line.find('}');
    out[line.substr(metric.size() + 1, close - metric.size() - 1)] =
        std::stod(line.substr(close + 2));
  }
  return out;
}

class GoodputE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }

  void SetUp() override {
    static int counter = 0;
    prefix_ = "gp" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
  }
  void TearDown() override { DeleteTpuNodes(prefix_); }

  // The life the issue scripts. With `kill_while_running`, the operator is SIGKILLed during the
  // first running stretch and started again 2 s later.
  void Life(bool kill_while_running) {
    TestNamespace ns(kill_while_running ? "gp-kill" : "gp-life");
    const std::string n = ns.name();
    auto op = std::make_unique<OperatorProcess>(std::vector<std::string>{"--namespace", n});
    const std::string job = "life";
    PhaseWatch watch(n, job);

    // Queued: no node of the job's accelerator exists yet. The job is created between `created`
    // and `applied` (kubectl's start-up and exit take a good part of a second on a loaded
    // machine).
    const double created = WallNow();
    ASSERT_EQ(ApplyYaml(n, JobYaml(job, 2, "2x4", "", false, "fault-tolerance/job-retry-num: \"1\"",
                                   accelerator_))
                  .exit_code,
              0);
    const double applied = WallNow();
    watch.Await("Queued");
    SleepUntilWall(created + 5);
    const double capacity = WallNow();
    CreateTpuNodes(prefix_, 3, accelerator_, "2x4", "pool-" + prefix_);

    // Starting, then running 10 s.
    const double starting1 = watch.Await("Starting");
    const double running1 = watch.Await("Running", 1);
    if (kill_while_running) {
      SleepUntilWall(running1 + 3);
      op->Kill();
      std::this_thread::sleep_for(std::chrono::seconds(2));
      op = std::make_unique<OperatorProcess>(std::vector<std::string>{"--namespace", n});
    }
    SleepUntilWall(running1 + 10);

    // A worker restarts in place. Each fault is timed once the API server has it: the operator
    // sees it through its watch at that moment.
    ASSERT_EQ(TerminatePod(n, job + "-worker-1", 143, "Error", "SIGTERM").exit_code, 0);
    const double fault1 = WallNow();
    const double running2 = watch.Await("Running", 2);
    SleepUntilWall(running2 + 5);

    // A hardware fault: the job is re-issued on the third node.
    ASSERT_EQ(SetNodeCondition(NodeOf(n, job + "-worker-0"), "TPUUnhealthy", "True", "ChipError",
                               "HBM failure")
                  .exit_code,
              0);
    const double fault2 = WallNow();
    const double running3 = watch.Await("Running", 3);
    SleepUntilWall(running3 + 5);

    // Success.
    ASSERT_EQ(TerminatePod(n, job + "-worker-0", 0).exit_code, 0);
    const double exited = WallNow();
    const double succeeded = watch.Await("Succeeded");
    EXPECT_EQ(JobField(n, job, "{.status.attempt}"), "2");

    const nlohmann::json status = JobJson(n, job)["status"];
    const nlohmann::json& g = status["goodput"];
    const nlohmann::json& lost = g["lostSeconds"];
    SCOPED_TRACE(status.dump(2));
    EXPECT_FALSE(g.contains("state"));  // finished: no state accrues any more

    // The running stretches as the cluster saw them: from each Running to the next change.
    double running_seen = 0;
    const auto changes = watch.Changes();
    for (size_t i = 0; i + 1 < changes.size(); ++i) {
      if (changes[i].second == "Running") running_seen += changes[i + 1].first - changes[i].first;
    }
    std::cout << "script: queued " << capacity - created << " s (seen " << starting1 - created
              << "), running 10 + 5 + 5 s (seen " << running_seen << "), restarting "
              << running2 - fault1 << " s, re-issue to running " << running3 - fault2 << " s, life "
              << succeeded - created << " s\nphases (s after creation):";
    for (const auto& [t, phase] : changes) std::cout << " " << phase << "@" << t - created;
    std::cout << "\nstatus.goodput: " << g.dump() << "\n";
    // The parts add up to the wall time the account covers, and that is the job's life: from
    // the creation (between `created` and `applied`) to Succeeded (after the exit the script
    // wrote, before this test's watch saw it).
    double total = Number(g, "productiveSeconds");
    for (const auto& [cause, seconds] : lost.items()) total += seconds.get<double>();
    EXPECT_LE(total, succeeded - created + 1.0);
    EXPECT_GE(total, exited - applied - 1.0);

    // Each part matches the script: queued 5 s, running 10 + 5 + 5 s (each until the fault the
    // script writes after it is in the API server: a loaded machine's kubectl adds its own
    // moments, and the operator takes a moment to see each fault), the restart and the re-issue
    // as long as they took.
    EXPECT_NEAR(Number(lost, "queued"), capacity - created, 1.0);
    // Starting as this test's watch saw it: never before the cluster had it, and on a loaded
    // machine up to a second or more after, so it bounds the queued time from above only.
    EXPECT_LE(Number(lost, "queued"), starting1 - created + 1.0);
    const double scripted_running = (fault1 - running1) + (fault2 - running2) + (exited - running3);
    EXPECT_GE(scripted_running, 20.0);
    EXPECT_NEAR(Number(g, "productiveSeconds"), scripted_running, 1.0);
    EXPECT_NEAR(Number(g, "productiveSeconds"), running_seen, 1.0);
    EXPECT_NEAR(Number(lost, "restarting"), running2 - fault1, 1.0);
    // After the fault: the old pods go (reissue), the new attempt queues first (requeued) and
    // starts (starting, with the first start).
    EXPECT_GT(Number(lost, "reissue"), 0);
    EXPECT_NEAR(Number(lost, "reissue") + Number(lost, "requeued") + Number(lost, "starting"),
                (running3 - fault2) + (running1 - starting1), 1.0);
    EXPECT_EQ(g.value("chips", 0), 8);
    EXPECT_NEAR(Number(g, "productiveChipSeconds"), 8 * Number(g, "productiveSeconds"), 0.01);
    EXPECT_NEAR(Number(g["lostChipSeconds"], "queued"), 8 * Number(lost, "queued"), 0.01);
    const double ratio = std::stod(g.value("ratio", "0"));
    EXPECT_NEAR(ratio, Number(g, "productiveSeconds") / total, 0.001);

    // kubectl get -o wide shows it.
    const std::string wide = Kubectl("get tpujob " + job + " -n " + n + " -o wide", false).output;
    EXPECT_NE(wide.find("GOODPUT"), std::string::npos) << wide;
    EXPECT_NE(wide.find(g.value("ratio", "?")), std::string::npos) << wide;

    if (!kill_while_running) {
      // This operator counted every fold of this job's life: its counters equal the status.
      const std::string metrics =
          RunCommand("curl -sf http://127.0.0.1:" + std::to_string(op->metrics_port()) + "/metrics",
                     false)
              .output;
      const std::string selector = "job_namespace=\"" + n + "\"";
      const auto productive = Samples(metrics, "tpujob_productive_chip_seconds_total", selector);
      ASSERT_EQ(productive.size(), 1u) << metrics;
      EXPECT_NEAR(productive.begin()->second, Number(g, "productiveChipSeconds"), 0.01);
      const auto lost_chips = Samples(metrics, "tpujob_lost_chip_seconds_total", selector);
      for (const auto& [cause, seconds] : g["lostChipSeconds"].items()) {
        const std::string labels = "cause=\"" + cause + "\"," + selector;
        ASSERT_TRUE(lost_chips.contains(labels)) << labels << "\n" << metrics;
        EXPECT_NEAR(lost_chips.at(labels), seconds.get<double>(), 0.01) << cause;
      }
      EXPECT_EQ(lost_chips.size(), g["lostChipSeconds"].size()) << metrics;
      // A finished job has no goodput gauge.
      EXPECT_EQ(metrics.find("tpujob_job_goodput_ratio{job_namespace=\"" + n), std::string::npos)
          << metrics;
    }
  }

  std::string prefix_;
  std::string accelerator_;
};

TEST_F(GoodputE2E, AScriptedLifeAddsUpAndMatchesItsIntervals) { Life(false); }

TEST_F(GoodputE2E, AnOperatorSigkillInTheMiddleCountsNothingTwice) { Life(true); }

TEST_F(GoodputE2E, ARunningJobHasALiveGaugeAndCheckpointsMoveLostWork) {
  TestNamespace ns("gp-live");
  const std::string n = ns.name();
  CreateTpuNodes(prefix_, 2, accelerator_, "2x4", "pool-" + prefix_);
  OperatorProcess op({"--namespace", n});
  PhaseWatch watch(n, "ck");
  ASSERT_EQ(ApplyYaml(n, JobYaml("ck", 2, "2x4", "", false, "fault-tolerance/job-retry-num: \"1\"",
                                 accelerator_))
                .exit_code,
            0);
  const double running = watch.Await("Running");
  const std::string gauge = "tpujob_job_goodput_ratio{job_namespace=\"" + n + "\",tpujob=\"ck\"}";
  // The gauge adds the time since the last write: it rises while the job runs, with no write.
  auto read_gauge = [&] {
    const std::string text =
        RunCommand("curl -sf http://127.0.0.1:" + std::to_string(op.metrics_port()) + "/metrics",
                   false)
            .output;
    const size_t at = text.find(gauge);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + gauge.size() + 1));
  };
  const double early = read_gauge();
  ASSERT_GE(early, 0) << "no " << gauge;
  const std::string version = JobField(n, "ck", "{.metadata.resourceVersion}");
  SleepUntilWall(running + 4);
  EXPECT_GT(read_gauge(), early);
  EXPECT_EQ(JobField(n, "ck", "{.metadata.resourceVersion}"), version)
      << "the clock alone caused a write";

  // The program checkpoints 1 s into the run, then a worker fails 4 s in: 3 s of work is lost.
  const std::string checkpoint = JobField(n, "ck", "{.status.goodput.stateSince}");
  ASSERT_FALSE(checkpoint.empty());
  const std::optional<WallTime> since = cache::ParseRfc3339(checkpoint);
  ASSERT_TRUE(since.has_value()) << checkpoint;
  ASSERT_EQ(Kubectl("annotate tpujob ck -n " + n + " tpujob.dev/last-checkpoint-time=" +
                    cache::FormatRfc3339Millis(*since + std::chrono::seconds(1)))
                .exit_code,
            0);
  ASSERT_EQ(TerminatePod(n, "ck-worker-1", 143).exit_code, 0);
  const double fault = WallNow();
  ASSERT_TRUE(JobFieldBecomes(n, "ck", "{.status.faults[0].action}", "RestartWorker")) << op.Log();
  const nlohmann::json g = JobJson(n, "ck")["status"]["goodput"];
  SCOPED_TRACE(g.dump(2));
  const double run = fault - running;
  EXPECT_NEAR(Number(g["lostSeconds"], "uncheckpointed"), run - 1.0, 0.5);
  EXPECT_NEAR(Number(g, "productiveSeconds"), 1.0, 0.5);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
