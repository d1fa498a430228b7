// The Helm chart charts/tpujob-operator against a real control plane: it lints clean, takes its
// CRD from the top-level crds/ directory, renders objects the API server accepts (the optional
// monitoring objects included), installs into a namespace that enforces the "restricted" Pod
// Security Standard, and grants its ServiceAccount exactly the permissions the operator uses.
// The operator binary, run here with the Deployment's own arguments and that ServiceAccount's
// token, syncs its caches and runs a job with pre-flight checks in a restricted namespace
// without one refused request. The alert rules pass promtool (syntax and unit tests), and every
// metric the dashboard and the alerts query is one the operator or the workers' supervisor
// exports. A real Prometheus scrapes real supervisors as the PodMonitor labels them, and the
// dashboard's step-rate and slowest-worker expressions answer with the slower worker.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "operator_env.h"
#include "policy/lifecycle.h"
#include "prometheus_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

const std::string kChart = std::string(TPUJOB_SOURCE_DIR) + "/charts/tpujob-operator";
const std::string kTestdata = std::string(TPUJOB_SOURCE_DIR) + "/e2e/testdata";

// The release name used throughout; the chart then names its objects "chart-tpujob-operator".
constexpr const char* kRelease = "chart";
constexpr const char* kFullname = "chart-tpujob-operator";

// Every combination of values the checks render: the defaults, every optional object on, and a
// single watched namespace (`watched`, which must exist for a dry run).
std::vector<std::pair<std::string, std::string>> ValueSets(const std::string& watched) {
  return {{"defaults", ""},
          {"monitoring",
           "--set serviceMonitor.enabled=true --set podMonitor.enabled=true "
           "--set prometheusRule.enabled=true --set grafanaDashboard.enabled=true"},
          {"watchNamespace", "--set watchNamespace=" + watched}};
}

// The project version (CMakeLists.txt), as the operator binary reports it.
std::string ProjectVersion() {
  const std::string out =
      Trim(RunCommand(std::string(TPUJOB_OPERATOR_BINARY) + " version", false).output);
  const size_t space = out.rfind(' ');
  return space == std::string::npos ? "" : out.substr(space + 1);
}

// The chart rendered by `helm template` (stdout only) into a file; returns its path.
std::string RenderToFile(const std::string& ns, const std::string& values,
                         const std::string& file) {
  const std::string path = ClusterDir() + "/" + file;
  const auto rendered =
      Helm("template " + std::string(kRelease) + " " + kChart + " -n " + ns + " " + values, false);
  EXPECT_EQ(rendered.exit_code, 0) << rendered.output;
  std::ofstream(path) << rendered.output;
  return path;
}

// The documents of a rendered file, by kind (the first of each kind).
std::map<std::string, YAML::Node> DocumentsByKind(const std::string& path) {
  std::map<std::string, YAML::Node> by_kind;
  try {
    for (const YAML::Node& doc : YAML::LoadAllFromFile(path)) {
      if (doc.IsMap() && doc["kind"]) by_kind.try_emplace(doc["kind"].as<std::string>(), doc);
    }
  } catch (const YAML::Exception& e) {
    ADD_FAILURE() << path << ": " << e.what();
  }
  return by_kind;
}

// A release of the chart, uninstalled on destruction (its ClusterRole and ClusterRoleBinding
// outlive the namespace otherwise).
class Release {
 public:
  Release(std::string ns, const std::string& values) : ns_(std::move(ns)) {
    install_ =
        Helm("install " + std::string(kRelease) + " " + kChart + " -n " + ns_ + " " + values);
  }
  ~Release() { Helm("uninstall " + std::string(kRelease) + " -n " + ns_); }
  const CommandResult& install() const { return install_; }
  const std::string& ns() const { return ns_; }

 private:
  std::string ns_;
  CommandResult install_;
};

// One permission as `kubectl auth can-i` asks for it. `ns`: "" for cluster-scoped, "*" for all
// namespaces.
struct Permission {
  std::string verb;
  std::string resource;
  std::string ns;
  std::string subresource = "";
  std::string name = "";

  std::string Describe() const {
    std::string out = verb + " " + resource;
    if (!subresource.empty()) out += "/" + subresource;
    if (!name.empty()) out += " named " + name;
    if (ns == "*") return out + " in all namespaces";
    if (ns.empty()) return out + " (cluster-scoped)";
    return out + " in " + ns;
  }
};

// Asks the API server whether the ServiceAccount may do `p` (SubjectAccessReview through
// impersonation); true on "yes".
bool CanI(const std::string& account, const Permission& p) {
  std::string args = "auth can-i '" + p.verb + "' '" + p.resource +
                     (p.name.empty() ? "" : "/" + p.name) + "' --as=" + account;
  if (!p.subresource.empty()) args += " --subresource=" + p.subresource;
  if (p.ns == "*") {
    args += " --all-namespaces";
  } else if (!p.ns.empty()) {
    args += " -n " + p.ns;
  }
  // The answer is the last line; kubectl warns before it about cluster-scoped resources.
  const std::string output = Trim(Kubectl(args).output);
  const size_t last_line = output.find_last_of('\n');
  return output.substr(last_line == std::string::npos ? 0 : last_line + 1) == "yes";
}

// Checks both lists, printing every answer, so the output documents the permissions.
void ExpectPermissions(const std::string& title, const std::string& account,
                       const std::vector<Permission>& allowed,
                       const std::vector<Permission>& denied) {
  std::cout << "== " << title << " (" << account << ")\n";
  for (const Permission& p : allowed) {
    const bool yes = CanI(account, p);
    std::cout << "  must allow: " << (yes ? "yes" : "NO ") << "  " << p.Describe() << "\n";
    EXPECT_TRUE(yes) << account << " must be allowed to " << p.Describe();
  }
  for (const Permission& p : denied) {
    const bool yes = CanI(account, p);
    std::cout << "  must deny:  " << (yes ? "YES" : "no ") << "  " << p.Describe() << "\n";
    EXPECT_FALSE(yes) << account << " must not be allowed to " << p.Describe();
  }
}

// The operator binary with the arguments of the chart's Deployment (its addresses moved to free
// loopback ports) and a kubeconfig of its own; POD_NAME is set as the downward API sets it.
// OperatorProcess always passes the admin kubeconfig, and `run` takes --kubeconfig once.
class ChartOperator {
 public:
  ChartOperator(const std::string& kubeconfig, const std::vector<std::string>& deployment_args,
                const std::string& pod_name)
      : ports_(TwoFreePorts()),
        process_(Args(kubeconfig, deployment_args, ports_),
                 ClusterDir() + "/chart-operator-" + std::to_string(ports_.first) + ".log",
                 {{"POD_NAME", pod_name}}) {}
  int health_port() const { return ports_.first; }
  int metrics_port() const { return ports_.second; }
  std::string Log() const { return "command: " + process_.command_line() + "\n" + process_.Log(); }

 private:
  static std::vector<std::string> Args(const std::string& kubeconfig,
                                       const std::vector<std::string>& deployment_args,
                                       std::pair<int, int> ports) {
    std::vector<std::string> args = {TPUJOB_OPERATOR_BINARY, "run", "--kubeconfig", kubeconfig};
    for (const std::string& arg : deployment_args) {
      if (arg == "run") continue;
      if (arg.starts_with("--health-address=")) {
        args.push_back("--health-address=127.0.0.1:" + std::to_string(ports.first));
      } else if (arg.starts_with("--metrics-address=")) {
        args.push_back("--metrics-address=127.0.0.1:" + std::to_string(ports.second));
      } else {
        args.push_back(arg);
      }
    }
    return args;
  }
  std::pair<int, int> ports_;
  ChildProcess process_;
};

// The ServiceAccount "scraper" in `ns`, bound by the release to the metrics-reader ClusterRole
// (pass ReaderValues to the install), as Prometheus's account would be.
constexpr const char* kScraper = "scraper";
std::string ReaderValues(const std::string& ns) {
  return " --set metrics.reader.serviceAccounts[0].name=" + std::string(kScraper) +
         " --set metrics.reader.serviceAccounts[0].namespace=" + ns;
}

struct Scrape {
  int status = 0;  // 0: no HTTP answer
  std::string body;
};

// GET /metrics over HTTPS (the self-signed certificate is not verified), with a bearer token
// unless `token` is empty.
Scrape ScrapeHttps(int port, const std::string& token) {
  const std::string body_file = ClusterDir() + "/scrape-" + std::to_string(port) + ".txt";
  std::string command = "curl -sk -o " + body_file + " -w '%{http_code}' ";
  if (!token.empty()) command += "-H 'Authorization: Bearer " + token + "' ";
  const auto r =
      RunCommand(command + "https://127.0.0.1:" + std::to_string(port) + "/metrics", false);
  return {r.output.empty() ? 0 : std::atoi(r.output.c_str()), ReadFile(body_file)};
}

// The arguments of the installed Deployment's operator container.
std::vector<std::string> DeploymentArgs(const std::string& ns) {
  const auto r = Kubectl("get deployment " + std::string(kFullname) + " -n " + ns +
                             " -o jsonpath='{.spec.template.spec.containers[0].args}'",
                         false);
  const nlohmann::json args = nlohmann::json::parse(r.output, nullptr, false);
  std::vector<std::string> out;
  if (!args.is_array()) {
    ADD_FAILURE() << "no args in the Deployment: " << r.output;
    return out;
  }
  for (const auto& arg : args) out.push_back(arg.get<std::string>());
  return out;
}

// Deletes the KWOK nodes of a test when it ends.
struct NodesGuard {
  std::string prefix;
  ~NodesGuard() { DeleteTpuNodes(prefix); }
};

// A TPUJob with two workers and pre-flight checks whose pod template passes the "restricted"
// Pod Security Standard by itself; the operator adds the pre-flight init container.
std::string RestrictedPreflightJob(const std::string& name, const std::string& accelerator) {
  return "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: " + name +
         "\n  annotations: {fault-tolerance/job-retry-num: \"1\"}\nspec:\n"
         "  tpu: {accelerator: " +
         accelerator +
         ", topology: 2x4, chipsPerWorker: 4}\n"
         "  faultTolerance: {preflight: {enabled: true}}\n"
         "  replicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n        spec:\n"
         "          securityContext:\n"
         "            runAsNonRoot: true\n            runAsUser: 1000\n"
         "            seccompProfile: {type: RuntimeDefault}\n"
         "          volumes: [{name: shm, emptyDir: {medium: Memory}}]\n"
         "          containers:\n"
         "          - name: trainer\n            image: busybox\n"
         "            command: [sh, -c, train]\n"
         "            volumeMounts: [{name: shm, mountPath: /dev/shm}]\n"
         "            securityContext:\n              allowPrivilegeEscalation: false\n"
         "              capabilities: {drop: [ALL]}\n";
}

// The metric names a PromQL expression reads: what remains after removing string literals,
// label matchers ({...}), ranges and subqueries ([...]) and the label lists of by, without, on,
// ignoring, group_left and group_right, that is not a function (followed by "("), an
// aggregation, a keyword or a number.
std::set<std::string> MetricNames(const std::string& expr) {
  std::string text;
  char quote = 0;
  int nesting = 0;
  for (size_t i = 0; i < expr.size(); ++i) {
    const char c = expr[i];
    if (quote != 0) {
      if (c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '"' || c == '\'' || c == '`') {
      quote = c;
    } else if (c == '{' || c == '[') {
      ++nesting;
    } else if (c == '}' || c == ']') {
      --nesting;
      text += ' ';
    } else if (nesting == 0) {
      text += c;
    }
  }
  static const std::set<std::string> kLabelLists = {"by",       "without",    "on",
                                                    "ignoring", "group_left", "group_right"};
  static const std::set<std::string> kNotMetrics = {
      "and",          "or",      "unless", "bool",     "offset", "atan2",      "inf",    "nan",
      "sum",          "min",     "max",    "avg",      "group",  "stddev",     "stdvar", "count",
      "count_values", "bottomk", "topk",   "quantile", "limitk", "limit_ratio"};
  auto is_start = [](char c) {
    return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_' || c == ':';
  };
  auto is_part = [&](char c) {
    return is_start(c) || std::isdigit(static_cast<unsigned char>(c)) != 0;
  };
  std::set<std::string> names;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '.') {  // 0.99, 5m, 1e3
      while (i < text.size() && (is_part(text[i]) || text[i] == '.')) ++i;
      continue;
    }
    if (!is_start(c)) {
      ++i;
      continue;
    }
    const size_t begin = i;
    while (i < text.size() && is_part(text[i])) ++i;
    const std::string word = text.substr(begin, i - begin);
    size_t next = i;
    while (next < text.size() && std::isspace(static_cast<unsigned char>(text[next])) != 0) ++next;
    const bool call = next < text.size() && text[next] == '(';
    if (call && kLabelLists.contains(word)) {  // skip the label list
      int depth = 0;
      for (i = next; i < text.size(); ++i) {
        if (text[i] == '(') ++depth;
        if (text[i] == ')' && --depth == 0) break;
      }
      ++i;
      continue;
    }
    if (call || kNotMetrics.contains(word) || kLabelLists.contains(word)) continue;
    names.insert(word);
  }
  return names;
}

// Family name -> type from "# TYPE <name> <type>" lines of the Prometheus text format.
std::map<std::string, std::string> MetricFamilies(const std::string& exposition) {
  std::map<std::string, std::string> families;
  std::istringstream in(exposition);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string hash, keyword, name, type;
    fields >> hash >> keyword >> name >> type;
    if (hash == "#" && keyword == "TYPE") families[name] = type;
  }
  return families;
}

// Whether a series name belongs to an exported family: the family itself, a histogram's or
// summary's _bucket/_sum/_count series, or a counter named without _total (OpenMetrics).
bool Exported(const std::map<std::string, std::string>& families, const std::string& name) {
  if (families.contains(name)) return true;
  for (const std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (name.ends_with(suffix)) {
      auto it = families.find(name.substr(0, name.size() - suffix.size()));
      if (it != families.end() && (it->second == "histogram" || it->second == "summary")) {
        return true;
      }
    }
  }
  if (name.ends_with("_total")) {
    auto it = families.find(name.substr(0, name.size() - 6));
    return it != families.end() && it->second == "counter";
  }
  return false;
}

std::string Join(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// A worker's supervisor as a pod of a job with spec.faultTolerance.progress runs it: the real
// tpujob-supervise (mode once) with the progress variables the operator sets and its metrics
// endpoint on a free port, running a program that prints "completed step: N" every
// `step_seconds` (and a checkpoint line every 5 steps). Stopped (SIGTERM, forwarded to the
// program) on destruction.
class WorkerSupervisor {
 public:
  WorkerSupervisor(const std::string& name, const std::string& step_seconds)
      : port_(FreePort()), dir_(ClusterDir() + "/" + name) {
    RunCommand("rm -rf " + dir_ + " && mkdir -p " + dir_);
    const std::string program =
        "i=0; while true; do i=$((i+1)); echo \"completed step: $i\"; "
        "if [ $((i % 5)) -eq 0 ]; then echo \"saved checkpoint $i\"; fi; sleep " +
        step_seconds + "; done";
    process_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{TPUJOB_SUPERVISE_BINARY, "--", "/bin/sh", "-c", program},
        dir_ + "/log",
        std::vector<std::pair<std::string, std::string>>{
            {"TPUJOB_SUPERVISOR_MODE", "once"},
            {"TPUJOB_SUPERVISOR_MESSAGE", dir_ + "/message"},
            {"TPUJOB_PROGRESS_LOG_PATTERN", R"(completed step: (\d+))"},
            {"TPUJOB_PROGRESS_CHECKPOINT_PATTERN", R"(saved checkpoint (\d+))"},
            {"TPUJOB_PROGRESS_METRICS_PORT", std::to_string(port_)}});
  }
  ~WorkerSupervisor() { process_->StopWith(SIGTERM); }
  int port() const { return port_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  // GET /metrics: the body, "" until it answers.
  std::string Metrics() const {
    return RunCommand("curl -sf -m 5 http://" + target() + "/metrics", false).output;
  }
  std::string Log() const { return process_->Log(); }

 private:
  int port_;
  std::string dir_;
  std::unique_ptr<ChildProcess> process_;
};

// A dashboard expression as Grafana sends it: every job namespace, a rate window that holds
// several of the test's 1 s scrapes.
std::string AsGrafanaSends(std::string expr) {
  for (const auto& [variable, value] :
       {std::pair<std::string, std::string>{"$__rate_interval", "30s"},
        {"$job_namespace", ".*"},
        {"$namespace", ".*"}}) {
    for (size_t at; (at = expr.find(variable)) != std::string::npos;) {
      expr.replace(at, variable.size(), value);
    }
  }
  return expr;
}

class ChartE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    InstallCrd();
    // Stand-ins for the Prometheus Operator's CRDs (see the file's header).
    const auto applied = Kubectl("apply -f " + kTestdata + "/monitoring-crds.yaml");
    ASSERT_EQ(applied.exit_code, 0) << applied.output;
    const auto established = Kubectl(
        "wait --for=condition=Established crd/servicemonitors.monitoring.coreos.com "
        "crd/podmonitors.monitoring.coreos.com crd/prometheusrules.monitoring.coreos.com "
        "--timeout=30s");
    ASSERT_EQ(established.exit_code, 0) << established.output;
  }
};

TEST_F(ChartE2E, LintIsClean) {
  for (const auto& [name, values] : ValueSets("tpujob-jobs")) {
    const auto lint = Helm("lint --strict " + kChart + " " + values);
    std::cout << "== helm lint --strict (" << name << ")\n" << lint.output;
    EXPECT_EQ(lint.exit_code, 0) << name << "\n" << lint.output;
    EXPECT_NE(lint.output.find("1 chart(s) linted, 0 chart(s) failed"), std::string::npos)
        << name << "\n"
        << lint.output;
    EXPECT_EQ(lint.output.find("[WARNING]"), std::string::npos) << name << "\n" << lint.output;
    EXPECT_EQ(lint.output.find("[ERROR]"), std::string::npos) << name << "\n" << lint.output;
  }
  // Two active replicas without leader election would both reconcile: refused at render time.
  const auto refused = Helm("template " + std::string(kRelease) + " " + kChart +
                            " --set leaderElection.enabled=false");
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("leaderElection.enabled"), std::string::npos) << refused.output;
}

// The chart's version and appVersion follow the project version; the default image tag is the
// appVersion.
TEST_F(ChartE2E, ChartVersionFollowsTheProjectVersion) {
  const std::string version = ProjectVersion();
  ASSERT_FALSE(version.empty());
  const YAML::Node chart = YAML::LoadFile(kChart + "/Chart.yaml");
  EXPECT_EQ(chart["apiVersion"].as<std::string>(), "v2");
  EXPECT_EQ(chart["version"].as<std::string>(), version);
  EXPECT_EQ(chart["appVersion"].as<std::string>(), version);
}

// The control-plane tools carry their real versions (the build stamps them as the upstream
// release builds do), so Helm sees the cluster's real version and the chart can state the
// oldest it supports.
TEST_F(ChartE2E, ToolsReportTheirPinnedVersionsAndTheChartStatesKubeVersion) {
  const std::string go_mod = ReadFile(std::string(TPUJOB_SOURCE_DIR) + "/e2e/tools/go.mod");
  const size_t at = go_mod.find("require k8s.io/kubernetes ");
  ASSERT_NE(at, std::string::npos) << go_mod;
  const std::string pinned =
      Trim(go_mod.substr(at + 26, go_mod.find('\n', at) - at - 26));  // e.g. v1.36.3
  const nlohmann::json versions =
      nlohmann::json::parse(Kubectl("version -o json", false).output, nullptr, false);
  ASSERT_TRUE(versions.is_object());
  EXPECT_EQ(versions["clientVersion"].value("gitVersion", ""), pinned) << versions.dump();
  EXPECT_EQ(versions["serverVersion"].value("gitVersion", ""), pinned) << versions.dump();
  EXPECT_EQ(versions["serverVersion"].value("gitTreeState", ""), "clean") << versions.dump();
  const std::string helm = Trim(Helm("version --template '{{.Version}}'", false).output);
  EXPECT_TRUE(helm.starts_with("v3.")) << helm;

  const YAML::Node chart = YAML::LoadFile(kChart + "/Chart.yaml");
  ASSERT_TRUE(chart["kubeVersion"]) << "Chart.yaml states no kubeVersion";
  EXPECT_EQ(chart["kubeVersion"].as<std::string>(), ">= 1.29.0-0");
  // Helm enforces it against the version the cluster reports...
  const auto too_old =
      Helm("template " + std::string(kRelease) + " " + kChart + " --kube-version 1.28.0");
  EXPECT_NE(too_old.exit_code, 0);
  EXPECT_NE(too_old.output.find("kubeVersion"), std::string::npos) << too_old.output;
  // ...and the real one passes: the capabilities Helm reads from this cluster.
  const auto here = Helm("template " + std::string(kRelease) + " " + kChart +
                         " --validate --show-only templates/controller/serviceaccount.yaml");
  EXPECT_EQ(here.exit_code, 0) << here.output;
}

// One source of truth: the chart's crds/ is a link to the top-level crds/, and Helm follows it
// when rendering, showing and packaging the chart (installing it is checked by
// InstallIntoRestrictedNamespaceAdmitsTheOperatorPods).
TEST_F(ChartE2E, CrdComesFromTheTopLevelCrdsDirectory) {
  const std::string crd_file = "tpujob.dev_tpujobs.yaml";
  const std::string crd = ReadFile(std::string(TPUJOB_SOURCE_DIR) + "/crds/" + crd_file);
  ASSERT_FALSE(crd.empty());
  EXPECT_EQ(Trim(RunCommand("readlink " + kChart + "/crds", false).output), "../../crds");

  const auto shown = Helm("show crds " + kChart, false);
  ASSERT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_NE(shown.output.find(crd), std::string::npos) << shown.output.substr(0, 2000);

  const auto rendered =
      Helm("template " + std::string(kRelease) + " " + kChart + " --include-crds", false);
  ASSERT_EQ(rendered.exit_code, 0) << rendered.output;
  EXPECT_NE(rendered.output.find("name: tpujobs.tpujob.dev"), std::string::npos);

  const std::string dir = ClusterDir() + "/chart-package";
  ASSERT_EQ(RunCommand("rm -rf " + dir + " && mkdir -p " + dir).exit_code, 0);
  const auto packaged = Helm("package " + kChart + " -d " + dir);
  ASSERT_EQ(packaged.exit_code, 0) << packaged.output;
  const std::string archive = dir + "/tpujob-operator-" + ProjectVersion() + ".tgz";
  const auto listed = RunCommand("tar -tzvf " + archive, false);
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  // A regular file in the archive, not a link that would dangle outside the source tree.
  bool crd_is_file = false;
  std::istringstream lines(listed.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.ends_with("tpujob-operator/crds/" + crd_file)) crd_is_file = line.starts_with("-");
  }
  EXPECT_TRUE(crd_is_file) << listed.output;
  const auto extracted =
      RunCommand("tar -xzOf " + archive + " tpujob-operator/crds/" + crd_file, false);
  EXPECT_EQ(extracted.output, crd);
}

TEST_F(ChartE2E, RenderedObjectsPassServerSideDryRun) {
  TestNamespace ns("chart-dry");
  TestNamespace watched("chart-dry-watched");
  for (const auto& [name, values] : ValueSets(watched.name())) {
    const std::string path = RenderToFile(ns.name(), values, "chart-dry-" + name + ".yaml");
    // Every rendered object names its namespace (the release's, the watched one, "default").
    const auto applied = Kubectl("apply --dry-run=server -f " + path);
    std::cout << "== helm template (" << name << ") | kubectl apply --dry-run=server\n"
              << applied.output;
    EXPECT_EQ(applied.exit_code, 0) << name << "\n" << applied.output;
    std::vector<std::string> kinds = {"deployment.apps/",
                                      "serviceaccount/",
                                      "service/",
                                      "clusterrole.rbac.authorization.k8s.io/",
                                      "clusterrolebinding.rbac.authorization.k8s.io/",
                                      "role.rbac.authorization.k8s.io/",
                                      "rolebinding.rbac.authorization.k8s.io/",
                                      "poddisruptionbudget.policy/"};
    if (name == "monitoring") {
      kinds.insert(kinds.end(),
                   {"servicemonitor.monitoring.coreos.com/", "podmonitor.monitoring.coreos.com/",
                    "prometheusrule.monitoring.coreos.com/", "configmap/"});
    }
    for (const std::string& kind : kinds) {
      EXPECT_NE(applied.output.find(kind), std::string::npos) << name << ": no " << kind;
    }
    EXPECT_EQ(applied.output.find("Warning"), std::string::npos) << name << "\n" << applied.output;
  }
}

TEST_F(ChartE2E, InstallIntoRestrictedNamespaceAdmitsTheOperatorPods) {
  // The release brings the CRD itself (from crds/, through the link).
  const auto deleted =
      Kubectl("delete crd tpujobs.tpujob.dev --ignore-not-found --wait --timeout=60s");
  ASSERT_EQ(deleted.exit_code, 0) << deleted.output;
  TestNamespace ns("chart-psa");
  RestrictNamespace(ns.name());
  // The node agent's DaemonSet mounts the host's /dev, which only the "privileged" level allows:
  // it is left out here (NodeAgentE2E installs it into a namespace of its own).
  Release release(ns.name(), "--set nodeAgent.enabled=false");
  ASSERT_EQ(release.install().exit_code, 0) << release.install().output;
  EXPECT_EQ(release.install().output.find("PodSecurity"), std::string::npos)
      << release.install().output;
  EXPECT_NE(release.install().output.find("STATUS: deployed"), std::string::npos)
      << release.install().output;
  const auto established =
      Kubectl("wait --for=condition=Established crd/tpujobs.tpujob.dev --timeout=30s");
  ASSERT_EQ(established.exit_code, 0) << established.output;

  // The Deployment's leader election, and POD_NAME from the downward API.
  const std::string args = Get(ns.name(), std::string("deployment ") + kFullname,
                               "{.spec.template.spec.containers[0].args}");
  EXPECT_NE(args.find("\"--leader-elect\""), std::string::npos) << args;
  EXPECT_NE(args.find("\"--leader-elect-namespace=" + ns.name() + "\""), std::string::npos) << args;
  EXPECT_NE(args.find("\"--cordon-state-configmap=" + std::string(kFullname) + "-cordon-state\""),
            std::string::npos)
      << args;
  EXPECT_EQ(Get(ns.name(), std::string("deployment ") + kFullname,
                "{.spec.template.spec.containers[0].env[?(@.name==\"POD_NAME\")]"
                ".valueFrom.fieldRef.fieldPath}"),
            "metadata.name");

  // kube-controller-manager creates the pods; PodSecurity admission would refuse them.
  const std::string selector = "-l app.kubernetes.io/instance=" + std::string(kRelease);
  std::string pods;
  EXPECT_TRUE(Eventually(
      [&] {
        pods = Get(ns.name(), "pods " + selector, "{.items[*].metadata.name}");
        return std::count(pods.begin(), pods.end(), ' ') == 1;  // two names
      },
      std::chrono::seconds(60), std::chrono::milliseconds(200)))
      << pods << "\n"
      << Kubectl("get rs,pods,events -n " + ns.name()).output;
  // The ReplicaSet controller writes its status after the pods it created: awaited, not read once.
  std::string replicas;
  EXPECT_TRUE(Eventually(
      [&] {
        replicas = Get(ns.name(), "replicaset " + selector, "{.items[0].status.replicas}");
        return replicas == "2";
      },
      std::chrono::seconds(30), std::chrono::milliseconds(200)))
      << "status.replicas " << replicas;
  EXPECT_EQ(Get(ns.name(), "events --field-selector reason=FailedCreate", "{.items[*].message}"),
            "");

  // The same check sees a refusal: a container allowed to escalate privileges is not admitted.
  TestNamespace bad_ns("chart-psa-bad");
  RestrictNamespace(bad_ns.name());
  Release bad(bad_ns.name(), "--set securityContext.allowPrivilegeEscalation=true");
  ASSERT_EQ(bad.install().exit_code, 0) << bad.install().output;
  std::string refused;
  EXPECT_TRUE(Eventually(
      [&] {
        refused = Get(bad_ns.name(), "events --field-selector reason=FailedCreate",
                      "{.items[*].message}");
        return !refused.empty();
      },
      std::chrono::seconds(60), std::chrono::milliseconds(200)));
  EXPECT_NE(refused.find("allowPrivilegeEscalation"), std::string::npos) << refused;
}

TEST_F(ChartE2E, ServiceAccountHasExactlyTheOperatorsPermissions) {
  TestNamespace ns("chart-rbac");
  TestNamespace other("chart-other");
  const std::string lease = kFullname;
  const std::string state = std::string(kFullname) + "-cordon-state";  // cordon.keepState
  const std::string account = "system:serviceaccount:" + ns.name() + ":" + kFullname;
  {
    Release release(ns.name(), "");
    ASSERT_EQ(release.install().exit_code, 0) << release.install().output;
    const std::string o = other.name();
    const std::string r = ns.name();
    const std::vector<Permission> allowed = {
        {"list", "pods", "*"},
        {"watch", "pods", "*"},
        {"create", "pods", o},
        {"delete", "pods", o},
        {"patch", "pods", o},       // in-place restart: the generation and barrier annotations
        {"get", "pods", o, "log"},  // status.progress from worker 0's log tail
        {"create", "services", o},
        {"create", "events", o},
        {"patch", "events", o},
        {"create", "events", "default"},  // Events about Nodes
        {"list", "tpujobs.tpujob.dev", "*"},
        {"watch", "tpujobs.tpujob.dev", "*"},
        {"delete", "tpujobs.tpujob.dev", o},  // ttlSecondsAfterFinished
        {"patch", "tpujobs.tpujob.dev", o, "status"},
        {"update", "tpujobs.tpujob.dev", o, "finalizers"},  // blockOwnerDeletion
        {"get", "nodes", ""},  // confirms a node's health before a permanent failure
        {"list", "nodes", ""},
        {"watch", "nodes", ""},
        {"patch", "nodes", ""},
        {"get", "priorityclasses.scheduling.k8s.io", ""},
        {"create", "leases.coordination.k8s.io", r},
        {"get", "leases.coordination.k8s.io", r, "", lease},
        {"update", "leases.coordination.k8s.io", r, "", lease},
        {"create", "configmaps", r},
        {"get", "configmaps", r, "", state},
        {"patch", "configmaps", r, "", state},
        {"create", "tokenreviews.authentication.k8s.io", ""},  // secure /metrics
        {"create", "subjectaccessreviews.authorization.k8s.io", ""},
    };
    const std::vector<Permission> denied = {
        {"get", "secrets", r},
        {"list", "secrets", "*"},
        {"watch", "secrets", o},
        {"get", "configmaps", r},
        {"create", "configmaps", o},
        {"update", "configmaps", r, "", state},
        {"delete", "configmaps", r, "", state},
        {"get", "configmaps", r, "", "another-configmap"},
        {"patch", "configmaps", o, "", state},
        {"get", "pods", o},  // reads come from the watch caches
        {"update", "pods", o},
        {"create", "pods", o, "exec"},
        {"create", "pods", o, "eviction"},
        {"patch", "pods", o, "status"},
        {"delete", "services", o},
        {"get", "services", o},
        {"delete", "events", o},
        {"create", "nodes", ""},
        {"delete", "nodes", ""},
        {"update", "nodes", ""},
        {"patch", "nodes", "", "status"},
        {"create", "deployments.apps", o},
        {"delete", "deployments.apps", r},
        {"get", "tpujobs.tpujob.dev", o},
        {"create", "tpujobs.tpujob.dev", o},
        {"update", "tpujobs.tpujob.dev", o},
        {"patch", "tpujobs.tpujob.dev", o},
        {"update", "tpujobs.tpujob.dev", o, "status"},
        {"list", "priorityclasses.scheduling.k8s.io", ""},
        {"create", "priorityclasses.scheduling.k8s.io", ""},
        {"list", "leases.coordination.k8s.io", r},
        {"delete", "leases.coordination.k8s.io", r, "", lease},
        {"get", "leases.coordination.k8s.io", r, "", "another-lease"},
        {"update", "leases.coordination.k8s.io", r, "", "another-lease"},
        {"create", "leases.coordination.k8s.io", o},
        {"get", "leases.coordination.k8s.io", o, "", lease},
        {"update", "leases.coordination.k8s.io", "kube-system", "", lease},
        {"create", "serviceaccounts", r, "token"},
        {"create", "rolebindings.rbac.authorization.k8s.io", r},
        {"create", "clusterrolebindings.rbac.authorization.k8s.io", ""},
        {"escalate", "clusterroles.rbac.authorization.k8s.io", ""},
        {"bind", "clusterroles.rbac.authorization.k8s.io", ""},
        {"impersonate", "serviceaccounts", r},
        {"create", "customresourcedefinitions.apiextensions.k8s.io", ""},
        {"*", "pods", o},
        {"*", "nodes", ""},
        {"*", "tpujobs.tpujob.dev", o},
        {"*", "*", "*"},
    };
    ExpectPermissions("cluster-wide release (watchNamespace unset)", account, allowed, denied);
  }

  // watchNamespace: the namespaced permissions hold in that namespace only.
  TestNamespace watched("chart-watched");
  Release release(ns.name(), "--set watchNamespace=" + watched.name());
  ASSERT_EQ(release.install().exit_code, 0) << release.install().output;
  const std::string w = watched.name();
  const std::string o = other.name();
  const std::string r = ns.name();
  const std::vector<Permission> allowed = {
      {"list", "pods", w},
      {"watch", "pods", w},
      {"create", "pods", w},
      {"delete", "pods", w},
      {"patch", "pods", w},
      {"create", "services", w},
      {"create", "events", w},
      {"patch", "events", w},
      {"create", "events", "default"},
      {"patch", "events", "default"},
      {"list", "tpujobs.tpujob.dev", w},
      {"watch", "tpujobs.tpujob.dev", w},
      {"delete", "tpujobs.tpujob.dev", w},  // ttlSecondsAfterFinished
      {"patch", "tpujobs.tpujob.dev", w, "status"},
      {"update", "tpujobs.tpujob.dev", w, "finalizers"},
      {"get", "nodes", ""},
      {"list", "nodes", ""},
      {"watch", "nodes", ""},
      {"patch", "nodes", ""},
      {"get", "priorityclasses.scheduling.k8s.io", ""},
      {"create", "leases.coordination.k8s.io", r},
      {"get", "leases.coordination.k8s.io", r, "", lease},
      {"update", "leases.coordination.k8s.io", r, "", lease},
  };
  const std::vector<Permission> denied = {
      {"list", "pods", "*"},
      {"list", "pods", o},
      {"create", "pods", o},
      {"patch", "pods", o},
      {"delete", "pods", r},
      {"create", "services", o},
      {"create", "events", o},
      {"list", "tpujobs.tpujob.dev", "*"},
      {"list", "tpujobs.tpujob.dev", o},
      {"patch", "tpujobs.tpujob.dev", o, "status"},
      {"create", "pods", "default"},
      {"get", "secrets", w},
      {"get", "configmaps", w},
      {"create", "pods", w, "exec"},
      {"delete", "tpujobs.tpujob.dev", o},
      {"delete", "nodes", ""},
      {"create", "leases.coordination.k8s.io", w},
      {"*", "*", "*"},
  };
  ExpectPermissions("namespaced release (watchNamespace=" + w + ")", account, allowed, denied);
}

TEST_F(ChartE2E, OperatorWithTheServiceAccountTokenRunsAPreflightJob) {
  TestNamespace ops("chart-op");
  TestNamespace jobs("chart-jobs");
  RestrictNamespace(ops.name());
  RestrictNamespace(jobs.name());
  ASSERT_EQ(
      Kubectl("create serviceaccount " + std::string(kScraper) + " -n " + ops.name()).exit_code, 0);
  Release release(ops.name(), "--set watchNamespace=" + jobs.name() + ReaderValues(ops.name()));
  ASSERT_EQ(release.install().exit_code, 0) << release.install().output;
  const std::string kubeconfig = ServiceAccountKubeconfig(ops.name(), kFullname);
  ASSERT_FALSE(kubeconfig.empty());
  EXPECT_EQ(Trim(RunCommand(ToolsBin() + "/kubectl --kubeconfig " + kubeconfig +
                                " auth whoami -o jsonpath='{.status.userInfo.username}'",
                            false)
                     .output),
            "system:serviceaccount:" + ops.name() + ":" + kFullname);

  static int counter = 0;
  const std::string prefix =
      "ch" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
  NodesGuard nodes{prefix};
  CreateTpuNodes(prefix, 2, "tpu-" + prefix, "2x4", "pool-" + prefix);

  const std::vector<std::string> args = DeploymentArgs(ops.name());
  ASSERT_FALSE(args.empty());
  const std::string pod_name = std::string(kFullname) + "-6d4cf56db6-x7k2p";
  ChartOperator op(kubeconfig, args, pod_name);
  ASSERT_TRUE(Eventually([&] { return HttpStatus(op.health_port(), "/readyz") == 200; },
                         std::chrono::seconds(60), std::chrono::milliseconds(100)))
      << op.Log();

  ASSERT_EQ(ApplyYaml(jobs.name(), RestrictedPreflightJob("pf", "tpu-" + prefix)).exit_code, 0);
  EXPECT_TRUE(
      JobFieldBecomes(jobs.name(), "pf", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();
  const std::vector<std::string> pods = JobPods(jobs.name(), "pf");
  EXPECT_EQ(pods, (std::vector<std::string>{"pf-worker-0", "pf-worker-1"}))
      << Kubectl("get events -n " + jobs.name()).output << op.Log();
  for (const std::string& pod : pods) {
    EXPECT_EQ(Get(jobs.name(), "pod " + pod, "{.spec.initContainers[0].name}"),
              std::string(policy::kPreflightContainer))
        << pod;
    // The chart's default pre-flight image is the operator image.
    EXPECT_EQ(Get(jobs.name(), "pod " + pod, "{.spec.initContainers[0].image}"),
              "tpujob-operator:" + ProjectVersion())
        << pod;
  }
  // The Lease in the release namespace names this replica.
  std::string holder;
  EXPECT_TRUE(Eventually(
      [&] {
        holder = Get(ops.name(), "lease " + std::string(kFullname), "{.spec.holderIdentity}");
        return holder.starts_with(pod_name);
      },
      std::chrono::seconds(30), std::chrono::milliseconds(200)))
      << "holder \"" << holder << "\"\n"
      << op.Log();

  // No request was refused: neither in the log (errors read "403 Forbidden: ... is forbidden")
  // nor in the request counter.
  const std::string log = op.Log();
  EXPECT_EQ(log.find("403 Forbidden"), std::string::npos) << log;
  EXPECT_EQ(log.find("orbidden"), std::string::npos) << log;
  const Scrape scraped = ScrapeHttps(op.metrics_port(), ServiceAccountToken(ops.name(), kScraper));
  EXPECT_EQ(scraped.status, 200) << scraped.body;
  std::istringstream lines(scraped.body);
  int request_series = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("tpujob_api_requests_total{")) {
      ++request_series;
      EXPECT_EQ(line.find("code=\"403\""), std::string::npos) << line;
    }
  }
  EXPECT_GT(request_series, 0) << scraped.body;
  ASSERT_EQ(Kubectl("delete tpujob pf -n " + jobs.name()).exit_code, 0);
}

// The operator's node watch breaks and cannot be opened again (list and watch on nodes taken
// from the release's ClusterRole, as an API server that restarted refuses them until its RBAC is
// loaded); a worker exits with a permanent code and its node is flagged a second later. The node
// cache never shows the flag, but the failure is final, so the operator reads the node (the
// chart's `get nodes`) before failing the job: it finds the fault, and the exit is the
// hardware's, a re-issue.
// Replaces the verbs the release's ClusterRole grants on nodes with `verbs`; false when the
// role has no rule for nodes or cannot be replaced.
bool LimitNodeVerbs(const std::string& ops, const std::vector<std::string>& verbs) {
  const std::string role = std::string(kFullname) + "-" + ops;
  nlohmann::json cluster_role = nlohmann::json::parse(
      Kubectl("get clusterrole " + role + " -o json", false).output, nullptr, false);
  if (!cluster_role.is_object()) return false;
  bool limited = false;
  for (auto& rule : cluster_role["rules"]) {
    const auto resources = rule.value("resources", std::vector<std::string>{});
    if (std::find(resources.begin(), resources.end(), "nodes") != resources.end()) {
      rule["verbs"] = verbs;
      limited = true;
    }
  }
  if (!limited) {
    ADD_FAILURE() << "no rule for nodes in " << cluster_role.dump();
    return false;
  }
  const std::string role_file = ClusterDir() + "/" + role + "-limited-nodes.json";
  std::ofstream(role_file) << cluster_role.dump();
  return Kubectl("replace -f " + role_file).exit_code == 0;
}

// A chip kill on a node the operator's node watch no longer sees: the chart's operator runs with
// only `node_verbs` on nodes (list and watch taken away once the job runs), the worker exits 1
// and the node agent flags the node. The exit is attributed to the node by a read, and the job
// is re-issued; `then` checks the rest with the jobs' namespace, the node and the operator. The
// read comes at the end of the job's fault attribution window (8 s rather than the default 30),
// well after the condition, which is written right after the exit.
void ChipKillBehindABrokenNodeWatch(
    const std::vector<std::string>& node_verbs,
    const std::function<void(const std::string&, const std::string&, const ChartOperator&)>& then) {
  TestNamespace ops("chart-op");
  TestNamespace jobs("chart-jobs");
  Release release(ops.name(), "--set watchNamespace=" + jobs.name());
  ASSERT_EQ(release.install().exit_code, 0) << release.install().output;
  const std::string kubeconfig = ServiceAccountKubeconfig(ops.name(), kFullname);
  ASSERT_FALSE(kubeconfig.empty());
  static int counter = 0;
  const std::string prefix =
      "cs" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
  NodesGuard nodes{prefix};
  CreateTpuNodes(prefix, 2, "tpu-" + prefix, "2x4", "pool-" + prefix);

  std::vector<std::string> args = DeploymentArgs(ops.name());
  ASSERT_FALSE(args.empty());
  args.push_back("--watch-idle-timeout=10");  // the server ends each watch within 8 s
  ChartOperator op(kubeconfig, args, std::string(kFullname) + "-stale-nodes");
  ASSERT_TRUE(Eventually([&] { return HttpStatus(op.health_port(), "/readyz") == 200; },
                         std::chrono::seconds(60), std::chrono::milliseconds(100)))
      << op.Log();
  ASSERT_EQ(ApplyYaml(jobs.name(),
                      JobYaml("st", 2, "2x4",
                              "  faultTolerance: {maxJobRetries: 1, faultAttributionSeconds: 8}\n",
                              false, "", "tpu-" + prefix))
                .exit_code,
            0);
  ASSERT_TRUE(
      JobFieldBecomes(jobs.name(), "st", "{.status.phase}", "Running", std::chrono::seconds(60)))
      << op.Log();

  // Take list and watch on nodes away; the next node watch is refused.
  ASSERT_TRUE(LimitNodeVerbs(ops.name(), node_verbs));
  ASSERT_TRUE(Eventually(
      [&] {
        const std::string log = op.Log();
        return log.find("reflector=nodes error=\"403") != std::string::npos;
      },
      std::chrono::seconds(60), std::chrono::milliseconds(200)))
      << op.Log();

  const std::string pod = "st-worker-1";
  const std::string node = NodeOf(jobs.name(), pod);
  ASSERT_FALSE(node.empty());
  ASSERT_EQ(
      TerminatePod(jobs.name(), pod, 1, "Error", "libtpu: chip 1 stopped responding").exit_code, 0);
  ASSERT_EQ(
      SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chip 1: HBM errors").exit_code,
      0);

  EXPECT_TRUE(
      JobFieldBecomes(jobs.name(), "st", "{.status.attempt}", "2", std::chrono::seconds(60)))
      << JobField(jobs.name(), "st", "{.status}") << "\n"
      << op.Log();
  const nlohmann::json status =
      JobJson(jobs.name(), "st").value("status", nlohmann::json::object());
  EXPECT_NE(status.value("phase", ""), "Failed") << status.dump();
  const nlohmann::json faults = status.value("faults", nlohmann::json::array());
  ASSERT_FALSE(faults.empty()) << status.dump();
  EXPECT_EQ(faults.back().value("kind", ""), "NodeUnhealthy") << status.dump();
  EXPECT_EQ(faults.back().value("node", ""), node) << status.dump();
  EXPECT_EQ(faults.back().value("exitCode", 0), 1) << status.dump();
  // The node cache still showed the node healthy: the read decided.
  EXPECT_NE(op.Log().find("the node cache is behind the API server"), std::string::npos)
      << op.Log();
  then(jobs.name(), node, op);
  ASSERT_EQ(Kubectl("delete tpujob st -n " + jobs.name()).exit_code, 0);
}

TEST_F(ChartE2E, AFaultTheNodeWatchMissedStillMakesTheExitTheHardwares) {
  ChipKillBehindABrokenNodeWatch({"get", "patch"}, [](const std::string&, const std::string& node,
                                                      const ChartOperator& op) {
    // The cordon, built on the cache's older version of the node, was refused as stale (409); it
    // is written on the node as read, while the watch is still refused, before the next attempt
    // can be placed there.
    EXPECT_TRUE(Eventually(
        [&] {
          return NodeField(node, "{.spec.unschedulable}") == "true" &&
                 NodeField(node, "{.spec.taints[?(@.key==\"tpujob.dev/faulty\")].effect}") ==
                     "NoSchedule";
        },
        std::chrono::seconds(30), std::chrono::milliseconds(200)))
        << Kubectl("get node " + node + " -o yaml", false).output << "\n"
        << op.Log();
    EXPECT_NE(op.Log().find("deciding the cordon again on the node as read"), std::string::npos)
        << op.Log();
    EXPECT_EQ(op.Log().find("cordoning node " + node + " failed"), std::string::npos) << op.Log();
  });
}

// The cordon cannot be written at all (patch taken away too): it is kept for retry, and the next
// attempt's workers are kept off the node by their node affinity, though the cache that would
// show the node unhealthy is as far behind as the write.
TEST_F(ChartE2E, ANodeWhoseCordonCannotBeWrittenIsKeptOutOfTheNextAttempt) {
  ChipKillBehindABrokenNodeWatch({"get"}, [](const std::string& ns, const std::string& node,
                                             const ChartOperator& op) {
    nlohmann::json pods;
    EXPECT_TRUE(Eventually(
        [&] {
          pods = nlohmann::json::parse(
              Kubectl(
                  "get pods -n " + ns + " -l tpujob.dev/job-name=st,tpujob.dev/attempt=2 -o json",
                  false)
                  .output,
              nullptr, false);
          return pods.is_object() && pods.value("items", nlohmann::json::array()).size() == 2;
        },
        std::chrono::seconds(60), std::chrono::milliseconds(200)))
        << pods.dump() << "\n"
        << op.Log();
    for (const nlohmann::json& pod : pods.value("items", nlohmann::json::array())) {
      bool avoided = false;
      const nlohmann::json terms = pod.value(
          "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"_json_pointer,
          nlohmann::json::array());
      for (const nlohmann::json& term : terms) {
        for (const nlohmann::json& field : term.value("matchFields", nlohmann::json::array())) {
          avoided = avoided || (field.value("key", "") == "metadata.name" &&
                                field.value("operator", "") == "NotIn" &&
                                field.value("values", nlohmann::json::array()) ==
                                    nlohmann::json::array({node}));
        }
      }
      EXPECT_TRUE(avoided) << "pod " << pod["metadata"]["name"] << " may run on " << node << ": "
                           << pod["spec"].dump();
      EXPECT_NE(pod["spec"].value("nodeName", ""), node) << pod.dump();
    }
    // Refused (403), and kept for retry: the node was never cordoned.
    EXPECT_NE(op.Log().find("cordoning node " + node + " failed: 403"), std::string::npos)
        << op.Log();
    EXPECT_NE(NodeField(node, "{.spec.unschedulable}"), "true");
  });
}

TEST_F(ChartE2E, PromtoolAcceptsTheAlertRules) {
  const std::string promtool = Trim(RunCommand("command -v promtool", false).output);
  ASSERT_FALSE(promtool.empty())
      << "promtool is missing: install the Debian package prometheus (scripts/install-deps.sh)";
  const std::string path =
      RenderToFile("monitoring", "--set prometheusRule.enabled=true", "chart-rules-rendered.yaml");
  const auto docs = DocumentsByKind(path);
  ASSERT_TRUE(docs.contains("PrometheusRule"));
  const YAML::Node spec = YAML::Clone(docs.at("PrometheusRule")["spec"]);
  ASSERT_TRUE(spec["groups"] && spec["groups"].size() == 1);

  const std::string dir = ClusterDir() + "/chart-rules";
  ASSERT_EQ(RunCommand("rm -rf " + dir + " && mkdir -p " + dir).exit_code, 0);
  YAML::Emitter full;
  full << spec;
  std::ofstream(dir + "/rules-full.yaml") << full.c_str() << "\n";
  const auto checked = RunCommand(promtool + " check rules " + dir + "/rules-full.yaml");
  std::cout << "== promtool check rules\n" << checked.output;
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_NE(checked.output.find("SUCCESS: 8 rules found"), std::string::npos) << checked.output;

  // The unit tests compare alerts without annotations (see the test file's header).
  for (YAML::Node group : spec["groups"]) {
    for (YAML::Node rule : group["rules"]) rule.remove("annotations");
  }
  YAML::Emitter bare;
  bare << spec;
  std::ofstream(dir + "/rules.yaml") << bare.c_str() << "\n";
  ASSERT_EQ(RunCommand("cp " + kTestdata + "/chart-alerts.test.yaml " + dir).exit_code, 0);
  const auto tested = RunCommand(promtool + " test rules " + dir + "/chart-alerts.test.yaml");
  std::cout << "== promtool test rules\n" << tested.output;
  EXPECT_EQ(tested.exit_code, 0) << tested.output;
  EXPECT_NE(tested.output.find("SUCCESS"), std::string::npos) << tested.output;
}

TEST_F(ChartE2E, EveryMetricTheDashboardAndAlertsQueryIsExported) {
  // The expressions as rendered: the dashboard's panels and the alert rules.
  const std::string path = RenderToFile(
      "monitoring", "--set prometheusRule.enabled=true --set grafanaDashboard.enabled=true",
      "chart-monitoring-rendered.yaml");
  const auto docs = DocumentsByKind(path);
  ASSERT_TRUE(docs.contains("PrometheusRule"));
  ASSERT_TRUE(docs.contains("ConfigMap"));
  std::set<std::string> dashboard_names;
  const nlohmann::json dashboard = nlohmann::json::parse(
      docs.at("ConfigMap")["data"]["tpujob-operator.json"].as<std::string>(), nullptr, false);
  ASSERT_TRUE(dashboard.is_object()) << "the dashboard is not valid JSON";
  int expressions = 0;
  for (const auto& panel : dashboard.at("panels")) {
    for (const auto& target : panel.value("targets", nlohmann::json::array())) {
      ++expressions;
      for (const std::string& n : MetricNames(target.value("expr", ""))) dashboard_names.insert(n);
    }
  }
  std::set<std::string> rule_names;
  for (const YAML::Node& group : docs.at("PrometheusRule")["spec"]["groups"]) {
    for (const YAML::Node& rule : group["rules"]) {
      for (const std::string& n : MetricNames(rule["expr"].as<std::string>())) rule_names.insert(n);
    }
  }
  std::cout << "== " << expressions << " dashboard expressions read: " << Join(dashboard_names)
            << "\n== alert rules read: " << Join(rule_names) << "\n";
  // The extraction itself: a sample of what must be there, and nothing that is not a metric.
  for (const char* name :
       {"tpujob_jobs", "tpujob_queue_wait_seconds_bucket", "tpujob_api_requests_total",
        "process_resident_memory_bytes", "tpujob_worker_step", "tpujob_worker_steps_total"}) {
    EXPECT_TRUE(dashboard_names.contains(name)) << name;
  }
  for (const char* name : {"up", "tpujob_queue_oldest_wait_seconds", "tpujob_job_reissues_total",
                           "tpujob_cordoned_nodes", "tpujob_cordon_limit_nodes",
                           "tpujob_node_cordons_refused_total", "tpujob_job_preemptions_total"}) {
    EXPECT_TRUE(rule_names.contains(name)) << name;
  }
  EXPECT_EQ(MetricNames("histogram_quantile(0.99, sum by (le, verb) (rate(a_bucket{x=\"y\"}"
                        "[$__rate_interval]))) > on(pod) group_left(version) b offset 5m"),
            (std::set<std::string>{"a_bucket", "b"}));

  std::set<std::string> wanted = dashboard_names;
  wanted.insert(rule_names.begin(), rule_names.end());
  wanted.erase("up");  // made by Prometheus for every target

  // The operator as the chart runs it, with the chart's ServiceAccount, after some work.
  TestNamespace ops("chart-metrics");
  TestNamespace jobs("chart-metrics-jobs");
  ASSERT_EQ(
      Kubectl("create serviceaccount " + std::string(kScraper) + " -n " + ops.name()).exit_code, 0);
  Release release(ops.name(), "--set watchNamespace=" + jobs.name() + ReaderValues(ops.name()));
  ASSERT_EQ(release.install().exit_code, 0) << release.install().output;
  const std::string kubeconfig = ServiceAccountKubeconfig(ops.name(), kFullname);
  ASSERT_FALSE(kubeconfig.empty());
  const std::vector<std::string> args = DeploymentArgs(ops.name());
  ASSERT_FALSE(args.empty());
  ChartOperator op(kubeconfig, args, std::string(kFullname) + "-metrics-test");
  ASSERT_TRUE(Eventually([&] { return HttpStatus(op.health_port(), "/readyz") == 200; },
                         std::chrono::seconds(60), std::chrono::milliseconds(100)))
      << op.Log();
  ASSERT_EQ(ApplyYaml(jobs.name(), RestrictedPreflightJob("mx", "tpu-none")).exit_code, 0);
  EXPECT_TRUE(JobFieldBecomes(jobs.name(), "mx", "{.status.phase}", "Queued")) << op.Log();

  const std::string token = ServiceAccountToken(ops.name(), kScraper);
  Scrape scraped;
  ASSERT_TRUE(Eventually(
      [&] {
        scraped = ScrapeHttps(op.metrics_port(), token);
        return scraped.status == 200 && scraped.body.find("# TYPE") != std::string::npos;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(200)))
      << "/metrics answered " << scraped.status << ": " << scraped.body.substr(0, 2000) << "\n"
      << op.Log();
  auto families = MetricFamilies(scraped.body);
  // The workers' families come from tpujob-supervise's own endpoint, after a step and a
  // checkpoint (the chart's PodMonitor scrapes it).
  WorkerSupervisor worker("chart-metrics-worker", "0.2");
  std::string worker_metrics;
  ASSERT_TRUE(Eventually(
      [&] {
        worker_metrics = worker.Metrics();
        return worker_metrics.find("\ntpujob_worker_checkpoint_step ") != std::string::npos;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(200)))
      << worker_metrics << worker.Log();
  const auto worker_families = MetricFamilies(worker_metrics);
  EXPECT_FALSE(worker_families.empty()) << worker_metrics;
  families.insert(worker_families.begin(), worker_families.end());
  std::set<std::string> missing;
  for (const std::string& name : wanted) {
    if (!Exported(families, name)) missing.insert(name);
  }
  std::cout << "== " << wanted.size() << " metrics queried, " << families.size()
            << " families exported; not exported: " << (missing.empty() ? "none" : Join(missing))
            << "\n";
  EXPECT_TRUE(missing.empty()) << "queried by the dashboard or the alerts but not exported: "
                               << Join(missing);
}

// Secure metrics as the chart deploys them: HTTPS, and a scrape allowed only to an identity the
// API server authenticates (TokenReview) and authorizes for GET /metrics (SubjectAccessReview);
// the operator makes both reviews with the chart's ServiceAccount. Then a real Prometheus scrapes
// it with the scheme, token and TLS settings of the chart's ServiceMonitor.
TEST_F(ChartE2E, SecureMetricsAnswer401403And200AndPrometheusScrapesThem) {
  TestNamespace ops("chart-secure");
  TestNamespace jobs("chart-secure-jobs");
  for (const char* account : {kScraper, "stranger"}) {
    ASSERT_EQ(
        Kubectl("create serviceaccount " + std::string(account) + " -n " + ops.name()).exit_code,
        0);
  }
  const std::string values = "--set watchNamespace=" + jobs.name() + ReaderValues(ops.name());
  Release release(ops.name(), values);
  ASSERT_EQ(release.install().exit_code, 0) << release.install().output;
  const std::vector<std::string> args = DeploymentArgs(ops.name());
  EXPECT_NE(std::find(args.begin(), args.end(), "--metrics-secure=true"), args.end())
      << Join(std::set<std::string>(args.begin(), args.end()));
  const std::string kubeconfig = ServiceAccountKubeconfig(ops.name(), kFullname);
  ASSERT_FALSE(kubeconfig.empty());
  ChartOperator op(kubeconfig, args, std::string(kFullname) + "-secure-test");
  ASSERT_TRUE(Eventually([&] { return HttpStatus(op.health_port(), "/readyz") == 200; },
                         std::chrono::seconds(60), std::chrono::milliseconds(100)))
      << op.Log();

  const std::string scraper = ServiceAccountToken(ops.name(), kScraper);
  const std::string stranger = ServiceAccountToken(ops.name(), "stranger");
  ASSERT_FALSE(scraper.empty());
  ASSERT_FALSE(stranger.empty());
  const Scrape anonymous = ScrapeHttps(op.metrics_port(), "");
  const Scrape forged = ScrapeHttps(op.metrics_port(), "not-a-token");
  const Scrape refused = ScrapeHttps(op.metrics_port(), stranger);
  const Scrape allowed = ScrapeHttps(op.metrics_port(), scraper);
  std::cout << "== scrapes of https://127.0.0.1:" << op.metrics_port() << "/metrics\n"
            << "  no token:            " << anonymous.status << " " << Trim(anonymous.body) << "\n"
            << "  invalid token:       " << forged.status << " " << Trim(forged.body) << "\n"
            << "  token of 'stranger': " << refused.status << " " << Trim(refused.body) << "\n"
            << "  token of 'scraper':  " << allowed.status << " ("
            << std::count(allowed.body.begin(), allowed.body.end(), '\n') << " lines)\n";
  EXPECT_EQ(anonymous.status, 401) << anonymous.body << op.Log();
  EXPECT_EQ(forged.status, 401) << forged.body << op.Log();
  EXPECT_EQ(refused.status, 403) << refused.body << op.Log();
  EXPECT_NE(refused.body.find("system:serviceaccount:" + ops.name() + ":stranger"),
            std::string::npos)
      << refused.body;
  EXPECT_EQ(allowed.status, 200) << allowed.body << op.Log();
  EXPECT_NE(allowed.body.find("# TYPE tpujob_jobs gauge"), std::string::npos) << allowed.body;
  // Plain HTTP gets no metrics from the HTTPS port.
  const auto plain = RunCommand(
      "curl -s -m 5 http://127.0.0.1:" + std::to_string(op.metrics_port()) + "/metrics", false);
  EXPECT_EQ(plain.output.find("# TYPE"), std::string::npos) << plain.output;

  // A real Prometheus, configured as the chart's ServiceMonitor configures the Prometheus
  // Operator: its scheme, TLS settings and bearer token file (here holding the scraper's token
  // instead of the in-pod path).
  const auto monitor = DocumentsByKind(
      RenderToFile(ops.name(), values + " --set serviceMonitor.enabled=true", "secure-sm.yaml"));
  ASSERT_TRUE(monitor.contains("ServiceMonitor"));
  const YAML::Node endpoint = monitor.at("ServiceMonitor")["spec"]["endpoints"][0];
  ASSERT_TRUE(endpoint["scheme"]) << "no scheme in the ServiceMonitor";
  EXPECT_EQ(endpoint["scheme"].as<std::string>(), "https");
  EXPECT_EQ(endpoint["bearerTokenFile"].as<std::string>(""),
            "/var/run/secrets/kubernetes.io/serviceaccount/token");
  const bool skip_verify = endpoint["tlsConfig"]["insecureSkipVerify"].as<bool>(false);
  EXPECT_TRUE(skip_verify) << "the default certificate is self-signed";
  const std::string token_file = ClusterDir() + "/scraper-" + ops.name() + ".token";
  std::ofstream(token_file) << scraper;
  PrometheusProcess prometheus(
      "127.0.0.1:" + std::to_string(op.metrics_port()),
      "  metrics_path: " + endpoint["path"].as<std::string>() +
          "\n  scheme: " + endpoint["scheme"].as<std::string>() +
          "\n  authorization: {credentials_file: " + token_file +
          "}\n  tls_config: {insecure_skip_verify: " + (skip_verify ? "true" : "false") + "}\n");
  ASSERT_TRUE(prometheus.WaitReady()) << prometheus.Log();
  EXPECT_TRUE(Eventually([&] { return prometheus.Query("up{job=\"tpujob-operator\"}") == "1"; },
                         std::chrono::seconds(30), std::chrono::milliseconds(500)))
      << "last scrape error: " << prometheus.LastScrapeError() << "\n"
      << prometheus.Log() << op.Log();
  EXPECT_EQ(prometheus.Query("tpujob_leader"), "1") << prometheus.LastScrapeError();
  std::cout << "== Prometheus scraping with the ServiceMonitor's settings: up="
            << prometheus.Query("up{job=\"tpujob-operator\"}")
            << " tpujob_leader=" << prometheus.Query("tpujob_leader") << "\n";
}

// The workers' progress as the chart's PodMonitor and dashboard see it: two real supervisors
// stand for two workers of one job, one slower; a real Prometheus scrapes their endpoints with
// the labels the PodMonitor's relabelling gives (namespace, tpujob, worker), and the dashboard's
// own "Step rate" and "Slowest worker" expressions, read from the rendered chart, return data,
// the latter naming the slower worker.
TEST_F(ChartE2E, PrometheusScrapesTheWorkersAndTheDashboardNamesTheSlowestWorker) {
  const auto docs = DocumentsByKind(RenderToFile(
      "monitoring", "--set podMonitor.enabled=true --set grafanaDashboard.enabled=true",
      "chart-podmonitor.yaml"));
  ASSERT_TRUE(docs.contains("PodMonitor"));
  ASSERT_TRUE(docs.contains("ConfigMap"));
  const YAML::Node endpoint = docs.at("PodMonitor")["spec"]["podMetricsEndpoints"][0];
  EXPECT_EQ(endpoint["port"].as<std::string>(""), "tpujob-progress");
  // The relabelling: which pod label becomes which series label.
  std::map<std::string, std::string> relabelled;
  for (const YAML::Node& rule : endpoint["relabelings"]) {
    relabelled[rule["targetLabel"].as<std::string>("")] =
        rule["sourceLabels"][0].as<std::string>("");
  }
  EXPECT_EQ(relabelled["namespace"], "__meta_kubernetes_namespace");
  EXPECT_EQ(relabelled["tpujob"], "__meta_kubernetes_pod_label_tpujob_dev_job_name");
  EXPECT_EQ(relabelled["worker"], "__meta_kubernetes_pod_label_tpujob_dev_replica_index");

  const nlohmann::json dashboard = nlohmann::json::parse(
      docs.at("ConfigMap")["data"]["tpujob-operator.json"].as<std::string>(), nullptr, false);
  ASSERT_TRUE(dashboard.is_object());
  std::map<std::string, std::string> panel_expr;
  for (const auto& panel : dashboard.at("panels")) {
    for (const auto& target : panel.value("targets", nlohmann::json::array())) {
      panel_expr[panel.value("title", "")] = target.value("expr", "");
    }
  }
  ASSERT_TRUE(panel_expr.contains("Step rate"));
  ASSERT_TRUE(panel_expr.contains("Slowest worker"));

  WorkerSupervisor fast("chart-worker-0", "0.1");
  WorkerSupervisor slow("chart-worker-1", "0.5");
  // The pods' labels after the PodMonitor's relabelling, as static labels.
  const auto scrape = [](const std::string& name, const WorkerSupervisor& worker,
                         const std::string& index) {
    return "- job_name: " + name + "\n  static_configs: [{targets: ['" + worker.target() +
           "'], labels: {namespace: team-a, tpujob: llm, worker: '" + index + "'}}]\n";
  };
  PrometheusProcess prometheus(PrometheusProcess::ScrapeConfigs{scrape("worker-0", fast, "0") +
                                                                scrape("worker-1", slow, "1")});
  ASSERT_TRUE(prometheus.WaitReady()) << prometheus.Log();
  EXPECT_TRUE(Eventually(
      [&] { return prometheus.QueryResult("tpujob_worker_step{tpujob=\"llm\"}").size() == 2; },
      std::chrono::seconds(60), std::chrono::milliseconds(500)))
      << prometheus.LastScrapeError() << prometheus.Log() << fast.Log() << slow.Log();

  const std::string step_rate = AsGrafanaSends(panel_expr.at("Step rate"));
  nlohmann::json rate;
  EXPECT_TRUE(Eventually(
      [&] {
        rate = prometheus.QueryResult(step_rate);
        return rate.size() == 1 && rate[0]["metric"].value("tpujob", "") == "llm" &&
               rate[0]["metric"].value("namespace", "") == "team-a" &&
               std::stod(rate[0]["value"][1].get<std::string>()) > 0;
      },
      std::chrono::seconds(60), std::chrono::milliseconds(500)))
      << step_rate << " -> " << rate.dump();

  const std::string slowest = AsGrafanaSends(panel_expr.at("Slowest worker"));
  nlohmann::json behind;
  EXPECT_TRUE(Eventually(
      [&] {
        behind = prometheus.QueryResult(slowest);
        return behind.size() == 1 && behind[0]["metric"].value("worker", "") == "1" &&
               std::stod(behind[0]["value"][1].get<std::string>()) > 0;
      },
      std::chrono::seconds(60), std::chrono::milliseconds(500)))
      << slowest << " -> " << behind.dump();
  std::cout << "== Step rate: " << step_rate << "\n   -> " << rate.dump()
            << "\n== Slowest worker: " << slowest << "\n   -> " << behind.dump() << "\n";
}

// The chart's aggregated ClusterRoles extend the built-in roles: a namespace user bound to
// "edit" (or "admin") may create and change TPUJobs, one bound to "view" may read them, and
// neither may write a TPUJob's status or reach another namespace.
TEST_F(ChartE2E, AggregatedRolesGiveNamespaceEditAndViewUsersTPUJobs) {
  TestNamespace ops("chart-agg");
  TestNamespace team("chart-team");
  TestNamespace other("chart-team-other");
  const std::string t = team.name();
  for (const auto& [user, role] : std::vector<std::pair<std::string, std::string>>{
           {"alice", "edit"}, {"bob", "view"}, {"carol", "admin"}}) {
    ASSERT_EQ(Kubectl("create rolebinding " + user + "-" + role + " --clusterrole=" + role +
                      " --user=" + user + " -n " + t)
                  .exit_code,
              0);
  }
  // Without the chart, the built-in roles know nothing of TPUJobs.
  EXPECT_FALSE(CanI("alice", {"create", "tpujobs.tpujob.dev", t}));
  EXPECT_FALSE(CanI("bob", {"list", "tpujobs.tpujob.dev", t}));

  Release release(ops.name(), "");
  ASSERT_EQ(release.install().exit_code, 0) << release.install().output;
  // kube-controller-manager folds the labelled ClusterRoles into the built-in ones.
  ASSERT_TRUE(Eventually(
      [&] {
        return CanI("alice", {"create", "tpujobs.tpujob.dev", t});
      },
      std::chrono::seconds(30), std::chrono::milliseconds(200)));
  ASSERT_TRUE(Eventually(
      [&] {
        return CanI("bob", {"list", "tpujobs.tpujob.dev", t});
      },
      std::chrono::seconds(30), std::chrono::milliseconds(200)));

  const std::string o = other.name();
  std::vector<Permission> write_verbs;
  for (const char* verb : {"create", "update", "patch", "delete", "deletecollection"}) {
    write_verbs.push_back({verb, "tpujobs.tpujob.dev", t});
  }
  std::vector<Permission> read_verbs;
  for (const char* verb : {"get", "list", "watch"}) {
    read_verbs.push_back({verb, "tpujobs.tpujob.dev", t});
  }
  read_verbs.push_back({"get", "tpujobs.tpujob.dev", t, "status"});
  std::vector<Permission> editor = read_verbs;
  editor.insert(editor.end(), write_verbs.begin(), write_verbs.end());
  const std::vector<Permission> never = {
      {"update", "tpujobs.tpujob.dev", t, "status"}, {"patch", "tpujobs.tpujob.dev", t, "status"},
      {"create", "tpujobs.tpujob.dev", o},           {"list", "tpujobs.tpujob.dev", o},
      {"list", "tpujobs.tpujob.dev", "*"},
  };
  ExpectPermissions("namespace user with the built-in edit role", "alice", editor, never);
  ExpectPermissions("namespace user with the built-in admin role", "carol", editor, never);
  std::vector<Permission> viewer_denied = never;
  viewer_denied.insert(viewer_denied.end(), write_verbs.begin(), write_verbs.end());
  ExpectPermissions("namespace user with the built-in view role", "bob", read_verbs, viewer_denied);

  // And for real, through the API server's authorization of the actual request.
  const std::string job =
      "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata: {name: mine}\nspec:\n"
      "  tpu: {accelerator: tpu-v5-lite-podslice, topology: 2x4, chipsPerWorker: 4}\n"
      "  replicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n        spec:\n"
      "          containers: [{name: train, image: busybox}]\n";
  const std::string file = ClusterDir() + "/aggregated-job.yaml";
  std::ofstream(file) << job;
  const auto by_bob = Kubectl("--as=bob create -n " + t + " -f " + file);
  EXPECT_NE(by_bob.exit_code, 0) << by_bob.output;
  EXPECT_NE(by_bob.output.find("forbidden"), std::string::npos) << by_bob.output;
  const auto by_alice = Kubectl("--as=alice create -n " + t + " -f " + file);
  EXPECT_EQ(by_alice.exit_code, 0) << by_alice.output;
  EXPECT_EQ(Trim(Kubectl("--as=bob get tpujob mine -n " + t + " -o name", false).output),
            "tpujob.tpujob.dev/mine");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
