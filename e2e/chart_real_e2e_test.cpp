// The Helm chart installed as a user installs it, on a cluster with a real node
// (`e2e/cluster up --real-node`): the project image, built from its own Dockerfile by
// scripts/build-image.sh and imported into the node's containerd, runs the operator Deployment
// and the node-agent DaemonSet as real containers. Checked: both operator replicas become Ready
// through their real probes in a namespace that enforces the "restricted" Pod Security
// Standard, exactly one leads, the containers run as the chart says (non-root, read-only root
// file system), a real Prometheus scrapes /metrics through the Service with the ServiceMonitor's
// settings, another replica takes over when the leader's pod is deleted and runs a TPUJob created
// meanwhile on KWOK pools without duplicating a pod; `helm upgrade` rolls the pods to the new
// value and `helm uninstall` leaves nothing; and an image whose entrypoint is missing is
// reported with the reason the kubelet gives. The node agent's DaemonSet on the real node is
// exercised with the fake TPU device plugin by RealWorkerE2E (real_worker_e2e_test.cpp).
//
// TPUJOB_E2E_DIR must name a cluster started with --real-node into whose node the image was
// imported (the real_cluster fixture of CMakeLists.txt does both).

#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "operator_env.h"
#include "prometheus_env.h"
#include "real_node_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

// The pod whose name the leader lease's holder starts with ("" when none).
std::string LeaderPod(const std::string& ns, const std::vector<std::string>& pods) {
  const std::string holder = Trim(Kubectl("get lease " + std::string(kFullname) + " -n " + ns +
                                              " -o jsonpath='{.spec.holderIdentity}'",
                                          false)
                                      .output);
  for (const std::string& pod : pods) {
    if (!holder.empty() && holder.starts_with(pod)) return pod;
  }
  return "";
}

// The image the chart runs by default (its repository and appVersion), imported into the node.
class ChartRealE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(RealNode().empty())
        << ClusterDir() << " has no real node: start it with e2e/cluster up --real-node";
    ASSERT_FALSE(ImageArchive().empty())
        << "no image archive: set TPUJOB_E2E_IMAGE_ARCHIVE to the one make image wrote";
  }
};

TEST_F(ChartRealE2E, OperatorPodsRunLeadFailOverAndAreScrapedThroughTheService) {
  TestNamespace ops("real-chart");
  RestrictNamespace(ops.name());
  ASSERT_EQ(Kubectl("create serviceaccount scraper -n " + ops.name()).exit_code, 0);
  Release release(ops.name(),
                  "--set nodeAgent.enabled=false"
                  " --set metrics.reader.serviceAccounts[0].name=scraper"
                  " --set metrics.reader.serviceAccounts[0].namespace=" +
                      ops.name());
  ASSERT_EQ(release.install().exit_code, 0) << release.install().output;
  ASSERT_TRUE(PodsBecomeReady(ops.name(), kOperatorSelector, 2));
  const std::vector<std::string> pods = PodNames(ops.name(), kOperatorSelector);
  ASSERT_EQ(pods.size(), 2u);
  std::string leader;
  ASSERT_TRUE(Eventually([&] { return !(leader = LeaderPod(ops.name(), pods)).empty(); },
                         std::chrono::seconds(60), std::chrono::milliseconds(500)))
      << "no pod holds the lease";
  std::cout << "== operator pods Ready: " << leader << " leads\n";

  // As the chart sets it: non-root, read-only root file system, no privilege escalation.
  for (const std::string& pod : pods) {
    const auto uid = Kubectl("exec -n " + ops.name() + " " + pod + " -- id -u", false);
    EXPECT_EQ(Trim(uid.output), "65532") << pod;
    const auto write = Kubectl("exec -n " + ops.name() + " " + pod + " -- touch /probe-write");
    EXPECT_NE(write.exit_code, 0) << pod << " could write its root file system";
    EXPECT_NE(write.output.find("Read-only file system"), std::string::npos) << write.output;
  }
  // Every probe the Deployment declares answers on every pod (the kubelet ran them for Ready;
  // here each is asked directly at the pod's address, as the kubelet asks).
  const auto probes = nlohmann::json::parse(
      Kubectl("get deployment " + std::string(kFullname) + " -n " + ops.name() +
                  " -o jsonpath='{.spec.template.spec.containers[0]}'",
              false)
          .output,
      nullptr, false);
  ASSERT_TRUE(probes.is_object());
  std::map<std::string, int> named_ports;
  for (const auto& port : probes["ports"])
    named_ports[port.value("name", "")] = port["containerPort"];
  int probed = 0;
  for (const char* kind : {"livenessProbe", "readinessProbe", "startupProbe"}) {
    if (!probes.contains(kind)) continue;
    const auto& get = probes[kind]["httpGet"];
    ASSERT_TRUE(get.is_object()) << kind << " is not an HTTP probe";
    const int port = get["port"].is_number() ? get["port"].get<int>()
                                             : named_ports[get["port"].get<std::string>()];
    for (const std::string& pod : pods) {
      const std::string ip = Get(ops.name(), "pod " + pod, "{.status.podIP}");
      const auto code = RunCommand("curl -s -o /dev/null -m 5 -w '%{http_code}' http://" + ip +
                                       ":" + std::to_string(port) + get["path"].get<std::string>(),
                                   false);
      EXPECT_EQ(code.output, "200")
          << kind << " of " << pod << " at " << ip << ":" << port << get["path"].get<std::string>();
      ++probed;
    }
  }
  EXPECT_GE(probed, 4) << "the Deployment declares fewer probes than liveness and readiness";
  const std::string restarts = Get(ops.name(), "pods -l " + kOperatorSelector,
                                   "{.items[*].status.containerStatuses[0].restartCount}");
  EXPECT_EQ(restarts, "0 0") << DescribePods(ops.name(), kOperatorSelector);

  // A real Prometheus scraping the Service's address as the chart's ServiceMonitor tells the
  // Prometheus Operator to: its port, path, scheme and TLS settings, and a bearer token (here
  // the scraper's, in a file, instead of Prometheus's own in-pod token file).
  const auto rendered =
      Helm("template " + std::string(kRelease) + " " + kChart + " -n " + ops.name() +
               " --show-only templates/monitoring/servicemonitor.yaml"
               " --set serviceMonitor.enabled=true",
           false);
  ASSERT_EQ(rendered.exit_code, 0) << rendered.output;
  const YAML::Node endpoint = YAML::Load(rendered.output)["spec"]["endpoints"][0];
  ASSERT_TRUE(endpoint && endpoint["port"]) << rendered.output;
  EXPECT_EQ(endpoint["bearerTokenFile"].as<std::string>(""),
            "/var/run/secrets/kubernetes.io/serviceaccount/token");
  const std::string service = std::string(kFullname) + "-metrics";
  const std::string service_ip = Get(ops.name(), "service " + service, "{.spec.clusterIP}");
  const std::string service_port =
      Get(ops.name(), "service " + service,
          "{.spec.ports[?(@.name==\"" + endpoint["port"].as<std::string>() + "\")].port}");
  ASSERT_FALSE(service_ip.empty());
  ASSERT_FALSE(service_port.empty()) << "no port " << endpoint["port"] << " in Service " << service;
  const std::string token_file = ClusterDir() + "/real-scraper-" + ops.name() + ".token";
  std::ofstream(token_file) << ServiceAccountToken(ops.name(), "scraper");
  PrometheusProcess prometheus(
      service_ip + ":" + service_port,
      "  metrics_path: " + endpoint["path"].as<std::string>("/metrics") +
          "\n  scheme: " + endpoint["scheme"].as<std::string>("http") +
          "\n  authorization: {credentials_file: " + token_file +
          "}\n  tls_config: {insecure_skip_verify: " +
          (endpoint["tlsConfig"]["insecureSkipVerify"].as<bool>(false) ? "true" : "false") + "}\n");
  ASSERT_TRUE(prometheus.WaitReady()) << prometheus.Log();
  EXPECT_TRUE(Eventually([&] { return prometheus.Query("up{job=\"tpujob-operator\"}") == "1"; },
                         std::chrono::seconds(60), std::chrono::milliseconds(500)))
      << "last scrape error: " << prometheus.LastScrapeError();
  std::cout << "== Prometheus through the Service " << service_ip << ":" << service_port << " ("
            << endpoint["scheme"].as<std::string>("http")
            << "): up=" << prometheus.Query("up{job=\"tpujob-operator\"}") << "\n";

  // The leader's pod goes; another replica takes the lease and runs a job created meanwhile.
  TestNamespace jobs("real-chart-jobs");
  const std::string prefix = "real-fo-" + std::to_string(::getpid());
  CreateTpuNodes(prefix, 2, "tpu-v5-lite-podslice", "2x4", prefix + "-pool");
  struct Cleanup {
    std::string prefix;
    ~Cleanup() { DeleteTpuNodes(prefix); }
  } cleanup{prefix};
  ASSERT_EQ(Kubectl("delete pod -n " + ops.name() + " " + leader + " --wait=false").exit_code, 0);
  ASSERT_EQ(ApplyYaml(jobs.name(), JobYaml("failover", 2, "2x4")).exit_code, 0);
  // Another replica takes the lease: the standby, or the Deployment's replacement pod, whichever
  // asks first once the leader released it on its way out.
  std::string new_leader;
  ASSERT_TRUE(Eventually(
      [&] {
        std::vector<std::string> others = PodNames(ops.name(), kOperatorSelector);
        std::erase(others, leader);
        new_leader = LeaderPod(ops.name(), others);
        return !new_leader.empty();
      },
      std::chrono::seconds(60), std::chrono::milliseconds(250)))
      << "no other replica took the lease:\n"
      << DescribePods(ops.name(), kOperatorSelector);
  std::cout << "== " << leader << " deleted; " << new_leader << " leads\n";
  EXPECT_TRUE(JobFieldBecomes(jobs.name(), "failover", "{.status.phase}", "Running",
                              std::chrono::seconds(90)))
      << DescribePods(ops.name(), kOperatorSelector);
  const std::vector<std::string> job_pods = JobPods(jobs.name(), "failover");
  EXPECT_EQ(job_pods.size(), 2u);
  // Nothing duplicated, also once the replacement replica (a third pod) is up and standing by.
  ASSERT_TRUE(PodsBecomeReady(ops.name(), kOperatorSelector, 2));
  // "Nothing changes" has no event to wait for: watch it for a while.
  const bool changed = Eventually([&] { return JobPods(jobs.name(), "failover") != job_pods; },
                                  std::chrono::seconds(5), std::chrono::milliseconds(250));
  EXPECT_FALSE(changed) << "the job's pods changed after the failover";
  EXPECT_EQ(LeaderPod(ops.name(), {new_leader}), new_leader) << "the lease moved again";
}

TEST_F(ChartRealE2E, UpgradeRollsThePodsAndUninstallLeavesNothing) {
  TestNamespace ops("real-upgrade");
  RestrictNamespace(ops.name());
  Release release(ops.name(), "--set nodeAgent.enabled=false");
  ASSERT_EQ(release.install().exit_code, 0) << release.install().output;
  ASSERT_TRUE(PodsBecomeReady(ops.name(), kOperatorSelector, 2));
  const std::vector<std::string> before = PodNames(ops.name(), kOperatorSelector);

  const auto upgrade =
      Helm("upgrade " + std::string(kRelease) + " " + kChart + " -n " + ops.name() +
           " --reuse-values --set operator.logLevel=debug --wait --timeout 180s");
  ASSERT_EQ(upgrade.exit_code, 0) << upgrade.output << DescribePods(ops.name(), kOperatorSelector);
  ASSERT_TRUE(PodsBecomeReady(ops.name(), kOperatorSelector, 2));
  const std::vector<std::string> after = PodNames(ops.name(), kOperatorSelector);
  for (const std::string& pod : after) {
    EXPECT_EQ(std::find(before.begin(), before.end(), pod), before.end())
        << pod << " survived the upgrade";
    const std::string args = Get(ops.name(), "pod " + pod, "{.spec.containers[0].args}");
    EXPECT_NE(args.find("--log-level=debug"), std::string::npos) << args;
  }

  const auto uninstall = release.Uninstall();
  ASSERT_EQ(uninstall.exit_code, 0) << uninstall.output;
  const std::string selector = std::string("app.kubernetes.io/instance=") + kRelease;
  EXPECT_TRUE(Eventually(
      [&] {
        return Trim(Kubectl("get all,serviceaccounts,roles,rolebindings,leases -n " + ops.name() +
                                " -l " + selector + " -o name",
                            false)
                        .output)
            .empty();
      },
      std::chrono::seconds(60), std::chrono::milliseconds(500)))
      << Kubectl("get all,serviceaccounts,roles,rolebindings -n " + ops.name() + " -l " + selector)
             .output;
  EXPECT_EQ(Trim(Kubectl("get clusterroles,clusterrolebindings -l " + selector + " -o name", false)
                     .output),
            "");
}

TEST_F(ChartRealE2E, ABrokenImageIsReportedWithTheKubeletsReason) {
  // A test-only image: the project image with its entrypoint renamed.
  const std::string archive = ClusterDir() + "/broken-image.oci.tar";
  const auto built = RunCommand(std::string(TPUJOB_SOURCE_DIR) + "/e2e/lib/broken_image.sh " +
                                ImageArchive() + " " + archive);
  ASSERT_EQ(built.exit_code, 0) << built.output;
  const auto loaded =
      RunCommand(ClusterScript() + " load-image " + archive + " --dir " + ClusterDir());
  ASSERT_EQ(loaded.exit_code, 0) << loaded.output;

  TestNamespace ops("real-broken");
  Release release(ops.name(),
                  "--set nodeAgent.enabled=false --set replicaCount=1"
                  " --set leaderElection.enabled=true --set image.tag=broken-entrypoint");
  ASSERT_EQ(release.install().exit_code, 0) << release.install().output;
  const auto ready = PodsBecomeReady(ops.name(), kOperatorSelector, 1, std::chrono::seconds(30));
  ASSERT_FALSE(ready) << "a pod of the broken image became Ready";
  const std::string why = ready.message();
  std::cout << "== what the broken image's failure says:\n" << why;
  EXPECT_NE(why.find("/usr/local/bin/tpujob-operator"), std::string::npos) << why;
  EXPECT_NE(why.find("no such file or directory"), std::string::npos) << why;
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
