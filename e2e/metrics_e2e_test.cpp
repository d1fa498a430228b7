// The operator's /metrics end to end: `promtool check metrics` on what it serves, and a real
// Prometheus (the Debian package) scraping it while a job runs, restarts a worker and is
// re-issued after a pre-flight failure. Values are read back through Prometheus' HTTP API.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "e2e_env.h"
#include "operator_env.h"
#include "prometheus_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

constexpr char kNodes[] = "mx-2x4";

std::string Scrape(int port) {
  return RunCommand("curl -sf http://127.0.0.1:" + std::to_string(port) + "/metrics", false).output;
}

class MetricsE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    InstallCrd();
    CreateTpuNodes(kNodes, 4, "tpu-v5-lite-podslice", "2x4", "pool-mx");
  }
  static void TearDownTestSuite() { DeleteTpuNodes(kNodes); }
};

TEST_F(MetricsE2E, PromtoolAcceptsTheExposition) {
  TestNamespace ns("mx-lint");
  OperatorProcess op({"--namespace", ns.name()});
  ASSERT_TRUE(
      Eventually([&] { return HttpStatus(op.port(), "/readyz") == 200; }, std::chrono::seconds(30)))
      << op.Log();
  const std::string text = Scrape(op.metrics_port());
  ASSERT_FALSE(text.empty()) << op.Log();
  const std::string file = ClusterDir() + "/metrics-lint.txt";
  std::ofstream(file) << text;
  const auto lint = RunCommand("promtool check metrics < " + file);
  EXPECT_EQ(lint.exit_code, 0) << lint.output;
  EXPECT_EQ(Trim(lint.output), "") << lint.output;
  // Every family the dashboards and alerts rely on is declared, with data or not.
  for (const char* family : {"tpujob_jobs",
                             "tpujob_job_restarts_total",
                             "tpujob_job_reissues_total",
                             "tpujob_job_failures_total",
                             "tpujob_node_cordons_total",
                             "tpujob_node_cordons_refused_total",
                             "tpujob_cordoned_nodes",
                             "tpujob_cordon_limit_nodes",
                             "tpujob_node_uncordons_total",
                             "tpujob_preflight_results_total",
                             "tpujob_queue_length",
                             "tpujob_queue_oldest_wait_seconds",
                             "tpujob_queue_wait_seconds",
                             "tpujob_fault_recovery_seconds",
                             "tpujob_reconcile_total",
                             "tpujob_reconcile_errors_total",
                             "tpujob_reconcile_duration_seconds",
                             "tpujob_workqueue_depth",
                             "tpujob_workqueue_adds_total",
                             "tpujob_workqueue_retries_total",
                             "tpujob_workqueue_queue_duration_seconds",
                             "tpujob_workqueue_work_duration_seconds",
                             "tpujob_api_requests_total",
                             "tpujob_api_request_duration_seconds",
                             "tpujob_leader",
                             "tpujob_cache_objects",
                             "tpujob_build_info",
                             "process_resident_memory_bytes",
                             "process_cpu_seconds_total",
                             "process_start_time_seconds",
                             "process_open_fds"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
  }
  EXPECT_NE(text.find("\ntpujob_leader 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntpujob_cache_objects{resource=\"nodes\"} "), std::string::npos) << text;
}

TEST_F(MetricsE2E, PrometheusScrapesJobRestartReissueAndPreflightMetrics) {
  TestNamespace ns("mx-prom");
  OperatorProcess op({"--namespace", ns.name()});
  PrometheusProcess prometheus("127.0.0.1:" + std::to_string(op.metrics_port()));
  ASSERT_TRUE(prometheus.WaitReady()) << prometheus.Log();

  ASSERT_EQ(ApplyYaml(ns.name(),
                      JobYaml("mx", 2, "2x4",
                              "  faultTolerance: {maxWorkerRestarts: 1, preflight: {enabled: true, "
                              "checks: [disk], thresholds: {rootDiskGB: 0, cacheDiskGB: 0, "
                              "shmGB: 1000000}}}\n",
                              false, "fault-tolerance/job-retry-num: \"1\""))
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "mx", "{.status.phase}", "Running")) << op.Log();

  // A worker exits with a retryable code: restarted in place.
  const std::string before = PodUid(ns.name(), "mx-worker-1");
  ASSERT_EQ(TerminatePod(ns.name(), "mx-worker-1", 143, "Error", "SIGTERM").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "mx", "{.status.workerRestarts.Worker-1.count}", "1"))
      << op.Log();
  ASSERT_TRUE(Eventually([&] {
    const std::string uid = PodUid(ns.name(), "mx-worker-1");
    return !uid.empty() && uid != before;
  }));
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "mx", "{.status.phase}", "Running")) << op.Log();

  // Its pre-flight then fails on the job's own threshold: the job is re-issued.
  const std::string node = NodeOf(ns.name(), "mx-worker-1");
  ASSERT_FALSE(node.empty());
  const std::string dir = ClusterDir();
  const PreflightRun run = RunPreflightFor(
      ns.name(), "mx-worker-1", node, {"--root-path", dir, "--shm-path", dir, "--cache-path", dir});
  ASSERT_EQ(run.exit_code, 11) << run.output;
  ASSERT_EQ(FailInitContainer(ns.name(), "mx-worker-1", 11, run.report).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "mx", "{.status.attempt}", "2")) << op.Log();
  ASSERT_TRUE(JobFieldBecomes(ns.name(), "mx", "{.status.phase}", "Running")) << op.Log();

  // What Prometheus scraped. Each expectation is awaited: the scrape interval is 1 s.
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"tpujob_jobs{phase=\"Running\"}", "1"},
      {"tpujob_jobs{phase=\"Queued\"}", "0"},
      {"tpujob_job_restarts_total{reason=\"ContainerFailed\"}", "1"},
      {"tpujob_job_reissues_total{reason=\"PreflightFailed\"}", "1"},
      {"tpujob_preflight_results_total{item=\"disk-size shm\",result=\"fail\"}", "1"},
      {"tpujob_preflight_results_total{item=\"disk-size root\",result=\"pass\"}", "1"},
      // Running after the restart and after the re-issue.
      {"tpujob_fault_recovery_seconds_count", "2"},
      // Admitted twice: attempt 1 and attempt 2.
      {"tpujob_queue_wait_seconds_count", "2"},
      {"tpujob_queue_length", "0"},
      {"tpujob_leader", "1"},
      {"tpujob_cache_objects{resource=\"tpujobs\"}", "1"},
      // Pods created: 2 (attempt 1) + 1 (restart) + 2 (attempt 2).
      {"sum(tpujob_api_requests_total{verb=\"POST\",resource=\"pods\",code=\"201\"})", "5"},
      {"sum(tpujob_reconcile_errors_total{controller=\"tpujob\"})", "0"},
      {"tpujob_workqueue_depth{name=\"tpujob\"}", "0"},
      {"up{job=\"tpujob-operator\"}", "1"},
  };
  for (const auto& [query, want] : expected) {
    std::string got;
    EXPECT_TRUE(Eventually([&] { return (got = prometheus.Query(query)) == want; },
                           std::chrono::seconds(20), std::chrono::milliseconds(250)))
        << query << ": got \"" << got << "\", want " << want << "\n"
        << Scrape(op.metrics_port());
  }
  // Counters that grow with the work: present and positive.
  for (const char* query :
       {"sum(tpujob_reconcile_total{controller=\"tpujob\",result=\"success\"})",
        "sum(tpujob_workqueue_adds_total{name=\"tpujob\"})",
        "sum(tpujob_api_request_duration_seconds_count)", "process_resident_memory_bytes"}) {
    const std::string got = prometheus.Query(query);
    EXPECT_FALSE(got.empty()) << query;
    EXPECT_GT(std::atof(got.c_str()), 0) << query;
  }
  const double recovery = std::atof(prometheus.Query("tpujob_fault_recovery_seconds_sum").c_str());
  EXPECT_GT(recovery, 0);
  EXPECT_LT(recovery, 120);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
