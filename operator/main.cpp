// tpujob-operator: command-line parsing and wiring only. The logic lives in src/.

#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "controller/manager.h"
#include "kube/client.h"
#include "kube/config.h"
#include "preflight_command.h"
#include "version.h"

namespace {

struct RunFlags {
  std::string kubeconfig;
  std::string context;
  std::string watch_namespace;
  std::string health_address = ":8081";
  int workers = 4;
  double qps = 50;
  int burst = 100;
  int cache_sync_timeout_seconds = 120;
  std::string log_level = "info";
  std::string preflight_image = "tpujob-operator:latest";
  std::vector<std::string> hardware_conditions = {"TPUUnhealthy"};
  std::vector<std::string> maintenance_conditions;
  tpujob::policy::CordonPolicy cordon;
  bool no_cordon = false;
  int auto_uncordon_after_seconds = 0;
};

// Blocks SIGTERM/SIGINT in every thread and waits for them on a dedicated one, so shutdown runs
// as ordinary code instead of inside a signal handler.
class SignalWaiter {
 public:
  SignalWaiter() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  }
  template <typename F>
  std::thread OnSignal(F on_signal) {
    return std::thread([this, on_signal] {
      int signal = 0;
      sigwait(&set_, &signal);
      on_signal(signal);
    });
  }

 private:
  sigset_t set_{};
};

int Run(const RunFlags& flags) {
  if (!tpujob::SetupLogging(flags.log_level)) {
    std::fprintf(stderr,
                 "error: unknown --log-level \"%s\" (want trace, debug, info, warn or error)\n",
                 flags.log_level.c_str());
    return 2;
  }
  SignalWaiter signals;  // before any thread starts, so all of them inherit the mask

  auto config = tpujob::kube::ResolveConfig(flags.kubeconfig, flags.context);
  if (!config) {
    spdlog::error("msg=\"cannot load the Kubernetes configuration\" error={}",
                  tpujob::LogQuote(config.error().ToString()));
    return 1;
  }
  config->qps = flags.qps;
  config->burst = flags.burst;
  spdlog::info("msg=\"starting\" version={} server={} config={} namespace={} workers={}",
               TPUJOB_VERSION, config->server, tpujob::LogQuote(config->source),
               flags.watch_namespace.empty() ? "<all>" : flags.watch_namespace, flags.workers);

  // Every API request the operator makes, by verb and resource: logged at shutdown, so the cost
  // of a workload can be read from the log.
  struct RequestCounts {
    std::mutex mu;
    std::map<std::string, uint64_t> by_kind;
    uint64_t total = 0;
  };
  auto counts = std::make_shared<RequestCounts>();
  tpujob::kube::RequestObserver observer;
  observer.on_request = [counts](std::string_view verb, std::string_view resource, int,
                                 tpujob::Duration) {
    std::lock_guard<std::mutex> guard(counts->mu);
    ++counts->total;
    ++counts->by_kind[std::string(verb) + "_" + std::string(resource)];
  };
  auto client = tpujob::kube::NewClient(*config, observer);
  tpujob::controller::ManagerOptions options;
  options.watch_namespace = flags.watch_namespace;
  options.workers = flags.workers;
  options.health_address = flags.health_address;
  options.cache_sync_timeout = std::chrono::seconds(flags.cache_sync_timeout_seconds);
  options.reconciler.pod_options.preflight_image = flags.preflight_image;
  options.reconciler.node_health.hardware_conditions = flags.hardware_conditions;
  options.reconciler.node_health.maintenance_conditions = flags.maintenance_conditions;
  options.cordon = flags.cordon;
  options.cordon.enabled = !flags.no_cordon;
  options.nodes.auto_uncordon_after = std::chrono::seconds(flags.auto_uncordon_after_seconds);
  options.nodes.node_health = options.reconciler.node_health;
  tpujob::controller::Manager manager(*client, options);

  std::thread signal_thread = signals.OnSignal([&manager](int signal) {
    spdlog::info("msg=\"received signal, stopping\" signal={}", strsignal(signal));
    manager.Stop();
  });
  auto result = manager.Run();
  if (!result) {
    spdlog::error("msg=\"operator failed\" error={}", tpujob::LogQuote(result.error().ToString()));
    std::_Exit(1);  // the signal thread is parked in sigwait; nothing else needs unwinding
  }
  // Run() returned because of a signal; the signal thread has finished.
  signal_thread.join();
  {
    std::lock_guard<std::mutex> guard(counts->mu);
    std::string detail;
    for (const auto& [kind, n] : counts->by_kind) detail += " " + kind + "=" + std::to_string(n);
    spdlog::info("msg=\"api requests\" total={}{}", counts->total, detail);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tpujob-operator runs TPU training jobs (TPUJob, tpujob.dev/v1alpha1) on Kubernetes and "
      "keeps "
      "them alive through hardware faults, maintenance events and capacity shortages.",
      "tpujob-operator"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tpujob-operator ") + TPUJOB_VERSION);

  RunFlags flags;
  CLI::App* run = app.add_subcommand("run", "Run the controller until SIGTERM or SIGINT.");
  run->add_option("--kubeconfig", flags.kubeconfig,
                  "Path to a kubeconfig file. Default: $KUBECONFIG, then the in-cluster service "
                  "account, then ~/.kube/config.");
  run->add_option("--context", flags.context,
                  "kubeconfig context to use. Default: the file's current-context.");
  run->add_option(
      "--namespace", flags.watch_namespace,
      "Only manage TPUJobs (and their pods) in this namespace. Default: all namespaces.");
  run->add_option("--health-address", flags.health_address,
                  "host:port serving /healthz (alive) and /readyz (caches synced).")
      ->capture_default_str();
  run->add_option("--workers", flags.workers, "Number of TPUJobs reconciled concurrently.")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  run->add_option("--kube-api-qps", flags.qps,
                  "Client-side limit on API requests per second; 0 disables the limit.")
      ->check(CLI::Range(0.0, 100000.0))
      ->capture_default_str();
  run->add_option("--kube-api-burst", flags.burst,
                  "Requests allowed above the QPS limit in a burst.")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  run->add_option("--cache-sync-timeout", flags.cache_sync_timeout_seconds,
                  "Seconds to wait for the Pod, Node and TPUJob caches to fill before giving up.")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  run->add_option("--log-level", flags.log_level, "trace, debug, info, warn or error.")
      ->capture_default_str();
  run->add_option("--preflight-image", flags.preflight_image,
                  "Image of the pre-flight init container (the operator's own image), for jobs "
                  "that enable pre-flight checks without naming an image.")
      ->capture_default_str();
  run->add_option("--hardware-condition", flags.hardware_conditions,
                  "A node condition that means broken hardware when True (repeatable; e.g. "
                  "from node-problem-detector). Pods there are moved and the node cordoned.")
      ->capture_default_str();
  run->add_flag("--no-cordon", flags.no_cordon,
                "Never cordon nodes (jobs are still moved off faulty nodes).");
  run->add_flag("--cordon-dry-run", flags.cordon.dry_run,
                "Decide cordons and log/report them, but change no node.");
  run->add_option("--max-cordoned-nodes", flags.cordon.max_cordoned,
                  "At most this many nodes held cordoned by the operator at once.")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  run->add_option("--max-cordoned-fraction", flags.cordon.max_fraction,
                  "At most this fraction of the nodes held cordoned (the tighter cap wins; one "
                  "node is always allowed).")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  run->add_option("--cordon-rate", flags.cordon.rate_per_minute,
                  "New cordons per minute; 0 = no rate limit.")
      ->check(CLI::Range(0.0, 100000.0))
      ->capture_default_str();
  run->add_option("--cordon-breaker-nodes", flags.cordon.breaker_nodes,
                  "When one pre-flight item fails on this many nodes within 10 minutes it is "
                  "taken for a configuration problem and nothing is cordoned for it; 0 = off.")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  run->add_option("--auto-uncordon-after", flags.auto_uncordon_after_seconds,
                  "Seconds a node the operator cordoned must stay healthy (Ready, no hardware "
                  "condition, no maintenance) before the operator uncordons it; 0 = never: "
                  "people uncordon nodes.")
      ->check(CLI::Range(0, 30 * 24 * 3600))
      ->capture_default_str();
  run->add_option("--maintenance-condition", flags.maintenance_conditions,
                  "A node condition that means maintenance when True (repeatable), in addition "
                  "to the taint cloud.google.com/impending-node-termination and the label "
                  "cloud.google.com/active-node-maintenance=ONGOING.");

  tpujob::AddPreflightCommand(app);
  CLI::App* version = app.add_subcommand("version", "Print the version and exit.");

  CLI11_PARSE(app, argc, argv);
  if (version->parsed()) {
    std::printf("tpujob-operator %s\n", TPUJOB_VERSION);
    return 0;
  }
  if (run->parsed()) return Run(flags);
  return 2;
}
