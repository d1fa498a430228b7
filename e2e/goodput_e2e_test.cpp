// Goodput accounting end to end: a scripted job life on KWOK nodes (queued, starting, running, a
// worker restart, a hardware fault and re-issue, running again, success) gives a breakdown in
// status.goodput that adds up to the wall time and matches the intervals the test timed, with
// and without an operator SIGKILL in the middle; the metrics agree with the status.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <thread>

#include "cache/objects.h"
#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Waits until the job's phase is `phase`, polling quickly; returns when it was seen.
Clock::time_point AwaitPhase(const std::string& ns, const std::string& job,
                             const std::string& phase) {
  EXPECT_TRUE(Eventually([&] { return JobField(ns, job, "{.status.phase}") == phase; },
                         std::chrono::seconds(60), std::chrono::milliseconds(20)))
      << job << " never reached " << phase << "; phase " << JobField(ns, job, "{.status.phase}");
  return Clock::now();
}

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

    // Queued: no node of the job's accelerator exists yet.
    const auto created = Clock::now();
    ASSERT_EQ(ApplyYaml(n, JobYaml(job, 2, "2x4", "", false, "fault-tolerance/job-retry-num: \"1\"",
                                   accelerator_))
                  .exit_code,
              0);
    ASSERT_TRUE(JobFieldBecomes(n, job, "{.status.phase}", "Queued")) << op->Log();
    std::this_thread::sleep_until(created + std::chrono::seconds(5));
    CreateTpuNodes(prefix_, 3, accelerator_, "2x4", "pool-" + prefix_);  // waits until Ready
    const auto capacity = Clock::now();

    // Starting, then running 10 s.
    const auto running1 = AwaitPhase(n, job, "Running");
    if (kill_while_running) {
      std::this_thread::sleep_until(running1 + std::chrono::seconds(3));
      op->Kill();
      std::this_thread::sleep_for(std::chrono::seconds(2));
      op = std::make_unique<OperatorProcess>(std::vector<std::string>{"--namespace", n});
    }
    std::this_thread::sleep_until(running1 + std::chrono::seconds(10));

    // A worker restarts in place.
    const auto fault1 = Clock::now();
    ASSERT_EQ(TerminatePod(n, job + "-worker-1", 143, "Error", "SIGTERM").exit_code, 0);
    // Restarting lasts a fraction of a second on KWOK: await the restart's record instead.
    ASSERT_TRUE(JobFieldBecomes(n, job, "{.status.faults[0].action}", "RestartWorker"))
        << op->Log();
    const auto running2 = AwaitPhase(n, job, "Running");
    std::this_thread::sleep_until(running2 + std::chrono::seconds(5));

    // A hardware fault: the job is re-issued on the third node.
    const auto fault2 = Clock::now();
    ASSERT_EQ(SetNodeCondition(NodeOf(n, job + "-worker-0"), "TPUUnhealthy", "True", "ChipError",
                               "HBM failure")
                  .exit_code,
              0);
    ASSERT_TRUE(JobFieldBecomes(n, job, "{.status.attempt}", "2")) << op->Log();
    const auto running3 = AwaitPhase(n, job, "Running");
    std::this_thread::sleep_until(running3 + std::chrono::seconds(5));

    // Success.
    const auto done = Clock::now();
    ASSERT_EQ(TerminatePod(n, job + "-worker-0", 0).exit_code, 0);
    AwaitPhase(n, job, "Succeeded");

    const nlohmann::json status = JobJson(n, job)["status"];
    const nlohmann::json& g = status["goodput"];
    const nlohmann::json& lost = g["lostSeconds"];
    SCOPED_TRACE(status.dump(2));
    EXPECT_FALSE(g.contains("state"));  // finished: no state accrues any more

    // The parts add up to the wall time the account covers, and that is the job's life.
    double total = Number(g, "productiveSeconds");
    for (const auto& [cause, seconds] : lost.items()) total += seconds.get<double>();
    EXPECT_NEAR(total, SecondsBetween(created, done), 1.0);

    // Each part matches what the script timed.
    EXPECT_NEAR(Number(lost, "queued"), SecondsBetween(created, capacity), 1.0);
    EXPECT_NEAR(Number(g, "productiveSeconds"),
                SecondsBetween(running1, fault1) + SecondsBetween(running2, fault2) +
                    SecondsBetween(running3, done),
                1.0);
    EXPECT_NEAR(Number(lost, "restarting"), SecondsBetween(fault1, running2), 1.0);
    // After the fault: the old pods go (reissue), the new attempt queues first (requeued) and
    // starts (starting).
    EXPECT_GT(Number(lost, "reissue"), 0);
    EXPECT_NEAR(Number(lost, "reissue") + Number(lost, "requeued") + Number(lost, "starting"),
                SecondsBetween(fault2, running3) + SecondsBetween(capacity, running1), 1.0);
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
  ASSERT_EQ(ApplyYaml(n, JobYaml("ck", 2, "2x4", "", false, "fault-tolerance/job-retry-num: \"1\"",
                                 accelerator_))
                .exit_code,
            0);
  const auto running = AwaitPhase(n, "ck", "Running");
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
  std::this_thread::sleep_until(running + std::chrono::seconds(4));
  EXPECT_GT(read_gauge(), early);
  EXPECT_EQ(JobField(n, "ck", "{.metadata.resourceVersion}"), version)
      << "the clock alone caused a write";

  // The program checkpoints 1 s into the run, then a worker fails 4 s in: 3 s of work is lost.
  const std::string checkpoint = JobField(n, "ck", "{.status.goodput.stateSince}");
  ASSERT_FALSE(checkpoint.empty());
  const std::optional<WallTime> since = cache::ParseRfc3339(checkpoint);
  ASSERT_TRUE(since.has_value()) << checkpoint;
  const WallTime at =
      std::chrono::floor<std::chrono::milliseconds>(*since + std::chrono::seconds(1));
  std::string plus_one = cache::FormatRfc3339(at);
  plus_one.pop_back();  // "Z"
  plus_one += "." +
              std::to_string(1000 + (at - std::chrono::floor<std::chrono::seconds>(at)) /
                                        std::chrono::milliseconds(1))
                  .substr(1) +
              "Z";
  const std::string annotate = "annotate tpujob ck -n " + n + " tpujob.dev/last-checkpoint-time=";
  ASSERT_EQ(Kubectl(annotate + plus_one).exit_code, 0);
  const auto fault = Clock::now();
  ASSERT_EQ(TerminatePod(n, "ck-worker-1", 143).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "ck", "{.status.faults[0].action}", "RestartWorker")) << op.Log();
  const nlohmann::json g = JobJson(n, "ck")["status"]["goodput"];
  SCOPED_TRACE(g.dump(2));
  const double run = SecondsBetween(running, fault);
  EXPECT_NEAR(Number(g["lostSeconds"], "uncheckpointed"), run - 1.0, 0.5);
  EXPECT_NEAR(Number(g, "productiveSeconds"), 1.0, 0.5);
}

}  // namespace
}  // namespace tpujob::e2e
