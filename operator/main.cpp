// tpujob-operator: command-line parsing and wiring only. The logic lives in src/.

#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "base/signal_waiter.h"
#include "controller/leader_election.h"
#include "controller/manager.h"
#include "controller/metrics.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/stream.h"
#include "kubectl_plugin.h"
#include "metrics/auth.h"
#include "metrics/tls.h"
#include "node_agent.h"
#include "preflight_command.h"
#include "version.h"

namespace {

struct RunFlags {
  std::string kubeconfig;
  std::string context;
  std::string watch_namespace;
  std::string health_address = ":8081";
  std::string metrics_address = ":8080";
  bool metrics_secure = true;
  std::string metrics_cert_dir;  // "" = a self-signed certificate made at start-up
  int workers = 4;
  double qps = 0;  // off: the API server's Priority and Fairness protects it
  int burst = 100;
  int cache_sync_timeout_seconds = 120;
  bool watch_list = true;
  int health_max_reconcile_seconds = 300;
  int health_max_watch_silence_seconds = 660;
  int watch_idle_timeout_seconds = 50;
  int progress_refresh_seconds = 60;
  int crash_after_writes = 0;         // tests only: SIGKILL itself right after its Nth write
  bool debug_cache_endpoint = false;  // debugging: /debug/cache on the health address
  std::string log_level = "info";
  std::string log_format = "logfmt";
  std::string preflight_image = "tpujob-operator:latest";
  int progress_metrics_port = tpujob::controller::kDefaultProgressMetricsPort;
  std::vector<std::string> hardware_conditions = {"TPUUnhealthy"};
  std::vector<std::string> maintenance_conditions;
  int maintenance_move_window_seconds = 900;
  int maintenance_avoid_window_seconds = 3600;
  tpujob::policy::CordonPolicy cordon;
  bool no_cordon = false;
  bool enable_preemption = true;
  std::string kueue = "auto";
  int auto_uncordon_after_seconds = 0;
  std::string cordon_state_configmap = "tpujob-operator-cordon-state";
  bool leader_elect = false;
  int leader_elect_lease_duration_seconds = 15;
  int leader_elect_renew_deadline_seconds = 10;
  int leader_elect_retry_period_seconds = 2;
  std::string leader_elect_namespace;  // "" = the service account's namespace, else "default"
  std::string leader_elect_id = "tpujob-operator";
  std::string leader_elect_identity;  // "" = $POD_NAME or the host name, plus a random suffix
};

// The certificate /metrics is served with: the one mounted in `dir`, else a self-signed one
// made now in a private temporary directory.
tpujob::kube::Result<tpujob::metrics::TlsFiles> MetricsCertificate(const std::string& dir) {
  if (!dir.empty()) return tpujob::metrics::LoadCertificateDir(dir);
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != 0 ? tmp : "/tmp") + "/tpujob-operator-metrics-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return std::unexpected(tpujob::kube::Error::Config(
        "cannot create " + pattern + " for a self-signed certificate: " + std::strerror(errno) +
        " (mount a writable /tmp, or a certificate with --metrics-cert-dir)"));
  }
  std::vector<std::string> hosts = {"localhost", "127.0.0.1", "::1"};
  char hostname[256] = {};
  if (::gethostname(hostname, sizeof(hostname) - 1) == 0 && hostname[0] != 0) {
    hosts.insert(hosts.begin(), hostname);
  }
  if (const char* pod_ip = std::getenv("POD_IP"); pod_ip != nullptr && *pod_ip != 0) {
    hosts.push_back(pod_ip);
  }
  auto files = tpujob::metrics::WriteSelfSignedCertificate(pattern, hosts);
  if (files) tpujob::log::Info("made a self-signed certificate for /metrics", {{"dir", pattern}});
  return files;
}

int Run(const RunFlags& flags) {
  if (tpujob::log::Format format; !tpujob::ParseLogFormat(flags.log_format, format)) {
    std::fprintf(stderr, "error: unknown --log-format \"%s\" (want logfmt or json)\n",
                 flags.log_format.c_str());
    return 2;
  }
  if (!tpujob::SetupLogging(flags.log_level, flags.log_format)) {
    std::fprintf(stderr,
                 "error: unknown --log-level \"%s\" (want trace, debug, info, warn or error)\n",
                 flags.log_level.c_str());
    return 2;
  }
  tpujob::controller::LeaderElectionOptions election;
  election.ns = flags.leader_elect_namespace.empty()
                    ? tpujob::controller::DefaultLeaderElectionNamespace()
                    : flags.leader_elect_namespace;
  election.name = flags.leader_elect_id;
  election.identity = flags.leader_elect_identity.empty()
                          ? tpujob::controller::DefaultLeaderElectionIdentity()
                          : flags.leader_elect_identity;
  election.lease_duration = std::chrono::seconds(flags.leader_elect_lease_duration_seconds);
  election.renew_deadline = std::chrono::seconds(flags.leader_elect_renew_deadline_seconds);
  election.retry_period = std::chrono::seconds(flags.leader_elect_retry_period_seconds);
  if (auto valid = tpujob::controller::ValidateLeaderElectionOptions(election); !valid) {
    std::fprintf(stderr,
                 "error: invalid leader election flags: %s (want --leader-elect-lease-duration > "
                 "--leader-elect-renew-deadline > --leader-elect-retry-period)\n",
                 valid.error().message.c_str());
    return 2;
  }
  if (flags.watch_idle_timeout_seconds > 0 && flags.watch_idle_timeout_seconds < 10) {
    std::fprintf(stderr,
                 "error: --watch-idle-timeout must be 0 (off) or at least 10 seconds, not %d\n",
                 flags.watch_idle_timeout_seconds);
    return 2;
  }
  tpujob::SignalWaiter signals;  // before any thread starts, so all of them inherit the mask

  auto config = tpujob::kube::ResolveConfig(flags.kubeconfig, flags.context);
  if (!config) {
    tpujob::log::Error("cannot load the Kubernetes configuration",
                       {{"error", config.error().ToString()}});
    return 1;
  }
  config->qps = flags.qps;
  config->burst = flags.burst;
  config->watch_idle_timeout = std::chrono::seconds(flags.watch_idle_timeout_seconds);
  // The identity in every request, so the API server's audit log tells the replicas apart.
  config->user_agent =
      std::string("tpujob-operator/") + TPUJOB_VERSION + " (" + election.identity + ")";
  tpujob::log::Info("starting",
                    {{"version", TPUJOB_VERSION},
                     {"server", config->server},
                     {"config", config->source},
                     {"namespace", flags.watch_namespace.empty() ? std::string_view("<all>")
                                                                 : flags.watch_namespace},
                     {"workers", flags.workers},
                     {"leader_elect", flags.leader_elect},
                     {"identity", election.identity},
                     {"cordon_state", flags.cordon_state_configmap.empty()
                                          ? std::string("<memory>")
                                          : election.ns + "/" + flags.cordon_state_configmap}});

  // Every API request the operator makes, by verb and resource: logged at shutdown, so the cost
  // of a workload can be read from the log.
  struct RequestCounts {
    std::mutex mu;
    std::map<std::string, uint64_t> by_kind;
    uint64_t total = 0;
    uint64_t writes = 0;  // successful POST, PUT, PATCH and DELETE requests
  };
  auto counts = std::make_shared<RequestCounts>();
  tpujob::kube::RequestObserver observer;
  const int crash_after = flags.crash_after_writes;
  observer.on_request = [counts, crash_after](std::string_view verb, std::string_view resource,
                                              int status, tpujob::Duration latency) {
    bool crash = false;
    {
      std::lock_guard<std::mutex> guard(counts->mu);
      ++counts->total;
      ++counts->by_kind[std::string(verb) + "_" + std::string(resource)];
      const bool write = verb == "POST" || verb == "PUT" || verb == "PATCH" || verb == "DELETE";
      if (write && status >= 200 && status < 300) {
        crash = ++counts->writes == static_cast<uint64_t>(crash_after);
      }
    }
    tpujob::controller::RecordApiRequest(verb, resource, status, latency);
    if (crash) {
      // The end-to-end tests' crash at every write: the write is done, nothing after it is.
      // (Error lines are flushed as they are written.)
      tpujob::log::Error("crash-after-writes: SIGKILL",
                         {{"write", crash_after}, {"verb", verb}, {"resource", resource}});
      ::raise(SIGKILL);
    }
  };
  const char* cert_file = std::getenv("SSL_CERT_FILE");
  const std::string ignored = cert_file != nullptr ? cert_file : "";
  if (tpujob::kube::TrustOnlyTheConfiguredCa(*config)) {
    tpujob::log::Debug("TLS trusts only the configured CA; no CA bundle file is loaded",
                       {{"SSL_CERT_FILE ignored", ignored}});
  }
  auto client = tpujob::kube::NewClient(*config, observer);
  tpujob::controller::ManagerOptions options;
  using KueueMode = tpujob::controller::ManagerOptions::KueueMode;
  options.kueue = flags.kueue == "false"  ? KueueMode::kOff
                  : flags.kueue == "true" ? KueueMode::kRequired
                                          : KueueMode::kAuto;
  if (flags.metrics_secure) {
    auto tls = MetricsCertificate(flags.metrics_cert_dir);
    if (!tls) {
      tpujob::log::Error("cannot set up TLS for /metrics", {{"error", tls.error().ToString()}});
      return 1;
    }
    options.metrics_tls = *tls;
    // Reviews go through the unfenced client: a standby replica answers scrapes too.
    options.metrics_authorizer =
        std::make_shared<tpujob::metrics::DelegatingAuthorizer>(*client, tpujob::Clock::Real());
  }
  options.watch_namespace = flags.watch_namespace;
  options.workers = flags.workers;
  options.health_address = flags.health_address;
  options.metrics_address = flags.metrics_address;
  options.cache_sync_timeout = std::chrono::seconds(flags.cache_sync_timeout_seconds);
  options.watch_list = flags.watch_list;
  options.debug_cache_endpoint = flags.debug_cache_endpoint;
  options.health.max_reconcile = std::chrono::seconds(flags.health_max_reconcile_seconds);
  options.health.max_watch_silence = std::chrono::seconds(flags.health_max_watch_silence_seconds);
  options.watch_idle_timeout = std::chrono::seconds(flags.watch_idle_timeout_seconds);
  options.reconciler.pod_options.preflight_image = flags.preflight_image;
  options.reconciler.pod_options.progress_metrics_port = flags.progress_metrics_port;
  options.reconciler.node_health.hardware_conditions = flags.hardware_conditions;
  options.reconciler.node_health.maintenance_conditions = flags.maintenance_conditions;
  options.reconciler.node_health.maintenance_move_window =
      std::chrono::seconds(flags.maintenance_move_window_seconds);
  options.reconciler.node_health.maintenance_avoid_window =
      std::chrono::seconds(flags.maintenance_avoid_window_seconds);
  options.cordon = flags.cordon;
  options.cordon.enabled = !flags.no_cordon;
  if (!flags.cordon_state_configmap.empty()) {
    options.cordon_state =
        tpujob::controller::CordonStateLocation{election.ns, flags.cordon_state_configmap};
  }
  options.preemption = flags.enable_preemption;
  options.nodes.auto_uncordon_after = std::chrono::seconds(flags.auto_uncordon_after_seconds);
  options.nodes.node_health = options.reconciler.node_health;
  options.reconciler.progress_refresh = std::chrono::seconds(flags.progress_refresh_seconds);
  // A log tail of 200 lines, at most 256 KiB, with the kubelet's timestamps: what
  // policy::ProgressFromLog needs to find the last step and when it came.
  options.reconciler.read_log = [config = *config](const std::string& ns, const std::string& pod,
                                                   const std::string& container) {
    return tpujob::kube::GetText(config, tpujob::kube::Resource::Pods(), ns, pod, "log",
                                 {{"container", container},
                                  {"timestamps", "true"},
                                  {"tailLines", "200"},
                                  {"limitBytes", std::to_string(256 << 10)}},
                                 std::chrono::seconds(10));
  };
  // Leader election gets a client of its own, with its own rate limiter (as controller-runtime
  // does): a burst of pod creations never delays a renewal past the renew deadline.
  std::unique_ptr<tpujob::kube::Client> lease_client;
  if (flags.leader_elect) {
    options.leader_election = election;
    lease_client = tpujob::kube::NewClient(*config, observer);
    options.lease_client = lease_client.get();
  }
  tpujob::controller::Manager manager(*client, options);

  std::thread signal_thread = signals.OnSignal([&manager](int signal) {
    tpujob::log::Info("received signal, stopping", {{"signal", strsignal(signal)}});
    manager.Stop();
  });
  auto result = manager.Run();
  if (!result) {
    tpujob::log::Error("operator failed", {{"error", result.error().ToString()}});
    std::_Exit(1);  // the signal thread is parked in sigwait; nothing else needs unwinding
  }
  // Run() returned because of a signal; the signal thread has finished.
  signal_thread.join();
  {
    std::lock_guard<std::mutex> guard(counts->mu);
    std::vector<tpujob::log::Field> fields = {{"total", counts->total}};
    for (const auto& [kind, n] : counts->by_kind) fields.emplace_back(kind, n);
    tpujob::log::Write(tpujob::log::Level::kInfo, "api requests", fields);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Installed as kubectl-tpujob (a symbolic link), this binary is the `kubectl tpujob` plugin.
  const std::string_view program = argv[0];
  if (program.substr(program.rfind('/') + 1) == "kubectl-tpujob") {
    return tpujob::plugin::Run(argc, argv);
  }
  // As kubectl_complete-tpujob, it answers kubectl's (1.26 and later) completion of the plugin.
  if (program.substr(program.rfind('/') + 1) == "kubectl_complete-tpujob") {
    return tpujob::plugin::Complete(std::vector<std::string>(argv + 1, argv + argc));
  }
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
  run->add_option("--metrics-address", flags.metrics_address,
                  "host:port serving /metrics (Prometheus text format); the health address "
                  "serves it too when both are the same.")
      ->capture_default_str();
  run->add_option("--metrics-secure", flags.metrics_secure,
                  "Serve /metrics over HTTPS and only to callers whose bearer token the API "
                  "server authenticates (TokenReview) and authorizes for GET on the URL "
                  "/metrics (SubjectAccessReview); false serves plain HTTP to anyone, for local "
                  "runs.")
      ->default_str("true");
  run->add_option("--metrics-cert-dir", flags.metrics_cert_dir,
                  "Directory holding tls.crt and tls.key for /metrics (read again when they "
                  "change). Default: a self-signed certificate made at start-up.");
  run->add_option("--workers", flags.workers, "Number of TPUJobs reconciled concurrently.")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  run->add_option("--kube-api-qps", flags.qps,
                  "Client-side limit on API requests per second; 0 (the default) disables it and "
                  "leaves throttling to the API server's Priority and Fairness, whose 429 "
                  "answers are retried after their Retry-After.")
      ->check(CLI::Range(0.0, 100000.0))
      ->capture_default_str();
  run->add_option("--kube-api-burst", flags.burst,
                  "Requests allowed above the QPS limit in a burst (with --kube-api-qps > 0).")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  run->add_option("--cache-sync-timeout", flags.cache_sync_timeout_seconds,
                  "Seconds to wait for the Pod, Node and TPUJob caches to fill before giving up.")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  run->add_option("--watch-list", flags.watch_list,
                  "Fill the caches by watch lists (the initial state streamed by a watch from the "
                  "API server's watch cache, as client-go's WatchListClient) rather than paged "
                  "LISTs; a server that refuses them is listed instead.")
      ->default_str("true");
  run->add_option("--health-max-reconcile-seconds", flags.health_max_reconcile_seconds,
                  "/healthz fails while a reconcile has been running longer than this (a stuck "
                  "worker); the kubelet then restarts the operator.")
      ->check(CLI::Range(1, 24 * 3600))
      ->capture_default_str();
  run->add_option("--watch-idle-timeout", flags.watch_idle_timeout_seconds,
                  "Seconds after which a watch (pods, nodes, tpujobs) that delivered nothing "
                  "(no event, no bookmark, no end) is taken for a silently dead connection and "
                  "opened again from its last resourceVersion; the server is asked to end each "
                  "watch after 60-80% of this, so a healthy watch always delivers in time. Also "
                  "bounds the wait for a watch's response. 0 = off (watches last 5-10 minutes; "
                  "a dead one is noticed only by --health-max-watch-silence-seconds).")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  // For the end-to-end tests only (not in --help).
  run->add_option("--crash-after-writes", flags.crash_after_writes,
                  "Testing: SIGKILL the process right after its Nth successful API write.")
      ->check(CLI::Range(0, 1000000))
      ->group("");
  // For debugging and the end-to-end tests (not in --help): docs/cli.md#debugging-flags.
  run->add_flag("--debug-cache-endpoint", flags.debug_cache_endpoint,
                "Debugging: serve /debug/cache on the health address, the namespace, name, uid "
                "and resourceVersion of every cached Pod, Node and TPUJob as JSON (never their "
                "contents), to compare with kubectl get. Unauthenticated: keep it off in "
                "production.")
      ->group("");
  run->add_option("--health-max-watch-silence-seconds", flags.health_max_watch_silence_seconds,
                  "/healthz fails while a watch (pods, nodes, tpujobs) has brought no event, "
                  "bookmark or reconnection for longer than this (a silently dead connection). "
                  "The server ends watches after at most 10 minutes and sends bookmarks about "
                  "every minute.")
      ->check(CLI::Range(1, 24 * 3600))
      ->capture_default_str();
  run->add_option("--log-level", flags.log_level, "trace, debug, info, warn or error.")
      ->capture_default_str();
  run->add_option("--log-format", flags.log_format,
                  "logfmt (key=value) or json (one object per line).")
      ->capture_default_str();
  run->add_option("--preflight-image", flags.preflight_image,
                  "Image of the pre-flight init container (the operator's own image), for jobs "
                  "that enable pre-flight checks without naming an image.")
      ->capture_default_str();
  run->add_option("--progress-metrics-port", flags.progress_metrics_port,
                  "Port on which the supervisor of a job with spec.faultTolerance.progress serves "
                  "its worker's progress as Prometheus metrics (GET /metrics; container port "
                  "tpujob-progress, for the chart's PodMonitor). 0 turns it off.")
      ->check(CLI::Range(0, 65535))
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
  run->add_option("--cordon-state-configmap", flags.cordon_state_configmap,
                  "ConfigMap, in the leader-election namespace (--leader-elect-namespace), where "
                  "the cordon rate limit and circuit breaker are kept so that a restarted or new "
                  "leader resumes them; no node is cordoned while it cannot be read or written. "
                  "\"\" = keep them in memory only (rebuilt from the nodes' annotations).")
      ->check([](const std::string& name) -> std::string {
        if (name.empty()) return {};
        const bool valid =
            name.size() <= 253 && std::isalnum(static_cast<unsigned char>(name.front())) &&
            std::isalnum(static_cast<unsigned char>(name.back())) &&
            std::all_of(name.begin(), name.end(), [](char c) {
              return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
            });
        return valid ? std::string() : "not a valid ConfigMap name: " + name;
      })
      ->capture_default_str();
  run->add_option("--progress-refresh-seconds", flags.progress_refresh_seconds,
                  "For jobs with spec.faultTolerance.progress.logPattern: how often the operator "
                  "reads a running job's worker 0 log tail (pods/log) to keep status.progress "
                  "and the STEP column current; it writes the status only when the step moved, "
                  "so at most once per job per interval. 0 = never: status.progress then "
                  "changes only when a supervisor reports a stall or an exit.")
      ->check(CLI::Range(0, 24 * 3600))
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
  run->add_option("--maintenance-move-window", flags.maintenance_move_window_seconds,
                  "Seconds before a node's announced maintenance (label "
                  "cloud.google.com/scheduled-maintenance-time, Unix seconds) at which a job on "
                  "it is moved like a maintenance event: SIGTERM, its grace period to "
                  "checkpoint, re-issue without using a retry. Keep it above the jobs' "
                  "maintenanceGracePeriodSeconds; 0 = wait for the maintenance itself.")
      ->check(CLI::Range(0, 7 * 24 * 3600))
      ->capture_default_str();
  run->add_option("--maintenance-avoid-window", flags.maintenance_avoid_window_seconds,
                  "Seconds before a node's announced maintenance during which new admissions "
                  "leave the node out (the queue's message names it, and the workers get a node "
                  "affinity that keeps them off it); 0 = off.")
      ->check(CLI::Range(0, 7 * 24 * 3600))
      ->capture_default_str();
  run->add_option("--enable-preemption", flags.enable_preemption,
                  "When the first waiting job of a slice shape cannot be admitted, stop running "
                  "jobs of lower priority (spec.preemptible not false) to make room: SIGTERM, "
                  "their maintenance grace period, then they queue again without using a retry. "
                  "false: jobs only wait.")
      ->default_str("true");
  run->add_option("--kueue", flags.kueue,
                  "Whether Kueue admits the TPUJobs labelled kueue.x-k8s.io/queue-name: the "
                  "operator creates a Kueue Workload for each and starts its pods only once "
                  "Kueue admits it (docs/kueue.md). auto: when Kueue's Workload API "
                  "(kueue.x-k8s.io/v1beta2) is served at start-up; true: required (exit if it "
                  "is not); false: the label is ignored and the operator's own queue admits "
                  "every job.")
      ->check(CLI::IsMember({"auto", "true", "false"}))
      ->capture_default_str();
  run->add_flag("--leader-elect", flags.leader_elect,
                "Run as one of several replicas: only the replica holding the Lease "
                "(coordination.k8s.io/v1) reconciles and writes; the others stand by, answering "
                "/healthz and /readyz, and take over when it is released or expires. A replica "
                "that loses the Lease exits with status 1.");
  run->add_option("--leader-elect-lease-duration", flags.leader_elect_lease_duration_seconds,
                  "Seconds a standby waits, after it last saw the Lease change, before it takes "
                  "the Lease over from a holder that stopped renewing.")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  run->add_option("--leader-elect-renew-deadline", flags.leader_elect_renew_deadline_seconds,
                  "Seconds the leader keeps trying to renew before it gives leadership up; it "
                  "writes nothing once its last renewal is this old. Must be less than the lease "
                  "duration.")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  run->add_option("--leader-elect-retry-period", flags.leader_elect_retry_period_seconds,
                  "Seconds between attempts to acquire or renew the Lease. Must be less than the "
                  "renew deadline.")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  run->add_option("--leader-elect-namespace", flags.leader_elect_namespace,
                  "Namespace of the Lease. Default: the namespace of the pod's service account "
                  "(/var/run/secrets/kubernetes.io/serviceaccount/namespace), else \"default\".");
  run->add_option("--leader-elect-id", flags.leader_elect_id,
                  "Name of the Lease; replicas with the same name and namespace elect one leader.")
      ->capture_default_str();
  run->add_option("--leader-elect-identity", flags.leader_elect_identity,
                  "This replica's name in the Lease (holderIdentity) and in the User-Agent of its "
                  "API requests. Must differ between replicas. Default: $POD_NAME, else the host "
                  "name, plus \"_\" and a random suffix.");

  tpujob::AddPreflightCommand(app);
  tpujob::AddNodeAgentCommand(app);
  CLI::App* version = app.add_subcommand("version", "Print the version and exit.");

  CLI11_PARSE(app, argc, argv);
  if (version->parsed()) {
    std::printf("tpujob-operator %s\n", TPUJOB_VERSION);
    return 0;
  }
  if (run->parsed()) return Run(flags);
  return 2;
}
