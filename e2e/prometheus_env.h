// A real Prometheus (the Debian package) as a child process of an end-to-end test, scraping
// every second, with its answers read back through its HTTP API.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "e2e_env.h"
#include "operator_env.h"

namespace tpujob::e2e {

class PrometheusProcess {
 public:
  // Scrapes `target` (host:port) as job "tpujob-operator"; `scrape_options` is YAML added to the
  // scrape config (scheme, authorization, tls_config), indented by two spaces per line.
  explicit PrometheusProcess(const std::string& target, const std::string& scrape_options = "")
      : PrometheusProcess(ScrapeConfigs{"- job_name: tpujob-operator\n"
                                        "  static_configs: [{targets: ['" +
                                        target + "']}]\n" + scrape_options}) {}
  // Scrapes as `configs` says: the items of the scrape_configs list, YAML at the top level.
  struct ScrapeConfigs {
    std::string yaml;
  };
  explicit PrometheusProcess(const ScrapeConfigs& configs)
      : port_(FreePort()), dir_(ClusterDir() + "/prometheus-" + std::to_string(port_)) {
    RunCommand("rm -rf " + dir_ + " && mkdir -p " + dir_ + "/data");
    std::ofstream(dir_ + "/prometheus.yml")
        << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
           "scrape_configs:\n"
        << configs.yaml;
    process_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{"prometheus", "--config.file=" + dir_ + "/prometheus.yml",
                                 "--storage.tsdb.path=" + dir_ + "/data",
                                 "--web.listen-address=127.0.0.1:" + std::to_string(port_),
                                 "--log.level=warn"},
        dir_ + "/prometheus.log");
  }
  bool WaitReady() {
    return Eventually([&] { return HttpStatus(port_, "/-/ready") == 200; },
                      std::chrono::seconds(60), std::chrono::milliseconds(200));
  }
  // The value of an instant query that returns exactly one series, as a string; "" otherwise.
  std::string Query(const std::string& promql) const {
    const nlohmann::json result = QueryResult(promql);
    if (result.size() != 1) return "";
    return result[0]["value"][1].get<std::string>();
  }
  // The series of an instant query ({"metric": {labels}, "value": [time, "value"]} each); an
  // empty array when it failed or returned none.
  nlohmann::json QueryResult(const std::string& promql) const {
    // The expression goes through a file: dashboard expressions hold quotes of both kinds.
    const std::string file = dir_ + "/query.promql";
    std::ofstream(file, std::ios::trunc) << promql;
    const auto r = RunCommand("curl -sf -G http://127.0.0.1:" + std::to_string(port_) +
                                  "/api/v1/query --data-urlencode query@" + file,
                              false);
    const nlohmann::json answer = nlohmann::json::parse(r.output, nullptr, false);
    if (!answer.is_object() || answer.value("status", "") != "success") {
      return nlohmann::json::array();
    }
    const auto& result = answer["data"]["result"];
    if (!result.is_array()) return nlohmann::json::array();
    return result;
  }
  // The last scrape error of the target, "" when the last scrape worked.
  std::string LastScrapeError() const {
    const auto r =
        RunCommand("curl -sf http://127.0.0.1:" + std::to_string(port_) + "/api/v1/targets", false);
    const nlohmann::json answer = nlohmann::json::parse(r.output, nullptr, false);
    if (!answer.is_object()) return "no answer from /api/v1/targets";
    for (const auto& target : answer["data"]["activeTargets"]) {
      return target.value("lastError", "");
    }
    return "no active target";
  }
  std::string Log() const { return process_->Log(); }
  const std::string& dir() const { return dir_; }

 private:
  int port_ = 0;
  std::string dir_;
  std::unique_ptr<ChildProcess> process_;
};

}  // namespace tpujob::e2e
