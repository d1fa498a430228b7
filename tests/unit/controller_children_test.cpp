#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cache/objects.h"
#include "controller/children.h"
#include "policy/elastic.h"

namespace tpujob::controller {
namespace TPUJOB_TEST_NS {

using policy::ReplicaType;
using ::testing::ElementsAre;
using ::testing::Optional;

cache::TPUJobInfo Job() {
  cache::TPUJobInfo job;
  job.ns = cache::InternedString::Intern("team");
  job.name = "llm";
  job.uid = "uid-llm";
  return job;
}

Json WorkerTemplate() {
  return Json::parse(R"json({
    "metadata": {
      "labels": {"team": "ml", "tpujob.dev/attempt": "99", "tpujob.dev/job-name": "other"},
      "annotations": {"sidecar.istio.io/inject": "false"}
    },
    "spec": {
      "restartPolicy": "OnFailure",
      "nodeSelector": {"cloud.google.com/gke-spot": "true"},
      "tolerations": [{"key": "spot", "operator": "Exists"}],
      "securityContext": {"runAsUser": 1000},
      "volumes": [{"name": "data", "emptyDir": {}}],
      "initContainers": [{"name": "fetch", "image": "busybox"}],
      "containers": [
        {
          "name": "trainer",
          "image": "trainer:1",
          "args": ["--steps=1000"],
          "env": [{"name": "TPU_WORKER_ID", "value": "bogus"},
                  {"name": "LR", "value": "0.1"},
                  {"name": "RUN", "value": "$(TPUJOB_NAME)-$(TPUJOB_ATTEMPT)"}],
          "resources": {"requests": {"memory": "8Gi"}, "limits": {"memory": "8Gi"}},
          "volumeMounts": [{"name": "data", "mountPath": "/data"}]
},
        {"name": "logger", "image": "fluent-bit"}
      ]
}
})json");
}

Json MasterTemplate() {
  return Json::parse(R"({
    "spec": {"containers": [{"name": "coordinator", "image": "trainer:1"}]}
  })");
}

policy::JobSpec Spec() {
  policy::JobSpec spec;
  spec.tpu.accelerator = "tpu-v5-lite-podslice";
  spec.tpu.topology = "2x4";
  spec.tpu.chips_per_worker = 4;
  spec.worker.replicas = 2;
  spec.worker.template_ = WorkerTemplate();
  spec.master = policy::ReplicaSpec{1, MasterTemplate()};
  spec.checkpoint_path = "gs://bucket/run1";
  return spec;
}

// A container's variables by name, and their names in order.
std::map<std::string, Json> EnvOf(const Json& container) {
  std::map<std::string, Json> env;
  for (const Json& var : container["env"]) env[var["name"]] = var;
  return env;
}
std::vector<std::string> EnvNames(const Json& container) {
  std::vector<std::string> names;
  for (const Json& var : container["env"]) names.push_back(var["name"]);
  return names;
}
std::string EnvValue(const Json& container, const std::string& name) {
  const auto env = EnvOf(container);
  auto it = env.find(name);
  return it == env.end() ? "<absent>" : it->second.value("value", "<no value>");
}

TEST(ChildrenNamesTest, PodServiceAndHostnames) {
  EXPECT_EQ(PodName("llm", ReplicaType::kWorker, 3), "llm-worker-3");
  EXPECT_EQ(PodName("llm", ReplicaType::kMaster, 0), "llm-master-0");
  EXPECT_EQ(ServiceName("llm"), "llm");

  policy::JobSpec spec = Spec();
  spec.worker.replicas = 3;
  EXPECT_EQ(WorkerHostnames("llm", spec), "llm-worker-0.llm,llm-worker-1.llm,llm-worker-2.llm");
  spec.worker.replicas = 1;
  EXPECT_EQ(WorkerHostnames("llm", spec), "llm-worker-0.llm");
  spec.worker.replicas = 0;
  EXPECT_EQ(WorkerHostnames("llm", spec), "");
}

TEST(ChildrenBuildPodTest, WorkerMetadataLabelsAndOwner) {
  const Json pod = BuildPod(Job(), Spec(), ReplicaType::kWorker, 1, 2);
  EXPECT_EQ(pod["apiVersion"], "v1");
  EXPECT_EQ(pod["kind"], "Pod");
  const Json& metadata = pod["metadata"];
  EXPECT_EQ(metadata["name"], "llm-worker-1");
  EXPECT_EQ(metadata["namespace"], "team");
  EXPECT_EQ(metadata["labels"], (Json{{"team", "ml"},
                                      {"tpujob.dev/job-name", "llm"},
                                      {"tpujob.dev/replica-type", "Worker"},
                                      {"tpujob.dev/replica-index", "1"},
                                      {"tpujob.dev/attempt", "2"}}));
  EXPECT_EQ(metadata["annotations"], (Json{{"sidecar.istio.io/inject", "false"}}));
  EXPECT_EQ(metadata["ownerReferences"], Json::array({Json{{"apiVersion", "tpujob.dev/v1alpha1"},
                                                           {"kind", "TPUJob"},
                                                           {"name", "llm"},
                                                           {"uid", "uid-llm"},
                                                           {"controller", true},
                                                           {"blockOwnerDeletion", true}}}));
}

TEST(ChildrenBuildPodTest, AWorkerOfAKeptSliceIsBoundToItsNode) {
  const Json pinned = BuildPod(Job(), Spec(), ReplicaType::kWorker, 1, 2, {}, "", "node-7");
  EXPECT_FALSE(pinned["spec"].contains("nodeName"));  // a restarted worker: the scheduler places it
  const Json bound =
      BuildPod(Job(), Spec(), ReplicaType::kWorker, 1, 2, {}, "pool-a", "node-7", /*bind=*/true);
  EXPECT_EQ(bound["spec"]["nodeName"], "node-7");
  EXPECT_EQ(bound["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"], "pool-a");
}

TEST(ChildrenBuildPodTest, InPlaceRunsTheProgramUnderTheSupervisor) {
  policy::JobSpec spec = Spec();
  spec.fault_tolerance.restart = policy::RestartMode::kInPlace;
  spec.worker.template_["spec"]["containers"][0]["command"] = {"python3", "train.py"};
  spec.worker.template_["spec"]["terminationGracePeriodSeconds"] = 45;
  PodBuildOptions options;
  options.preflight_image = "operator:1";
  options.generation = 3;
  const Json open = BuildPod(Job(), spec, ReplicaType::kWorker, 1, 2, options);
  const Json& pod = open["spec"];
  EXPECT_EQ(pod["restartPolicy"], "OnFailure");
  EXPECT_EQ(open["metadata"]["annotations"]["tpujob.dev/generation"], "3");
  EXPECT_EQ(open["metadata"]["annotations"]["tpujob.dev/barrier"], "3");
  EXPECT_EQ(open["metadata"]["annotations"]["sidecar.istio.io/inject"], "false");
  // The template's own init container first, then the supervisor's installation.
  ASSERT_EQ(pod["initContainers"].size(), 2u);
  const Json& install = pod["initContainers"][1];
  EXPECT_EQ(install["name"], "tpujob-supervisor");
  EXPECT_EQ(install["image"], "operator:1");
  EXPECT_EQ(install["command"],
            Json::array({"tpujob-supervise", "--install", "/tpujob/bin/tpujob-supervise"}));
  EXPECT_EQ(install["securityContext"]["runAsNonRoot"], true);
  EXPECT_EQ(install["securityContext"]["readOnlyRootFilesystem"], true);
  const Json& program = pod["containers"][0];
  EXPECT_EQ(program["command"],
            Json::array({"/tpujob/bin/tpujob-supervise", "--", "python3", "train.py"}));
  EXPECT_EQ(program["args"], Json::array({"--steps=1000"}));
  EXPECT_EQ(EnvValue(program, "TPUJOB_SUPERVISOR_GRACE_SECONDS"), "45");
  std::vector<std::string> mounts;
  for (const Json& m : program["volumeMounts"]) mounts.push_back(m["mountPath"]);
  EXPECT_THAT(mounts, ElementsAre("/data", "/tpujob", "/tpujob/podinfo"));
  std::vector<std::string> volumes;
  for (const Json& v : pod["volumes"]) volumes.push_back(v["name"]);
  EXPECT_THAT(volumes, ElementsAre("data", "tpujob-supervisor", "tpujob-podinfo"));
  EXPECT_EQ(pod["volumes"][2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"],
            "metadata.annotations");
  // The logger sidecar is left as it is.
  EXPECT_FALSE(pod["containers"][1].contains("command"));

  options.barrier_open = false;
  const Json closed = BuildPod(Job(), spec, ReplicaType::kWorker, 1, 2, options);
  EXPECT_EQ(closed["metadata"]["annotations"]["tpujob.dev/generation"], "3");
  EXPECT_FALSE(closed["metadata"]["annotations"].contains("tpujob.dev/barrier"));
  // Recreate: none of it.
  const Json plain = BuildPod(Job(), Spec(), ReplicaType::kWorker, 1, 2, options);
  EXPECT_EQ(plain["spec"]["restartPolicy"], "Never");
  EXPECT_FALSE(plain["metadata"]["annotations"].contains("tpujob.dev/generation"));
}

TEST(ChildrenBuildPodTest, ProgressTrackingServesMetricsOnTheProgressPort) {
  policy::JobSpec spec = Spec();
  policy::ProgressSpec progress;
  progress.log_pattern = R"(step (\d+))";
  spec.fault_tolerance.progress = progress;
  const auto ports = [](const Json& container) {
    std::vector<std::string> names;
    for (const Json& port : container.value("ports", Json::array())) {
      names.push_back(port.value("name", "") + ":" +
                      std::to_string(port.value("containerPort", 0)));
    }
    return names;
  };
  PodBuildOptions options;
  const Json pod = BuildPod(Job(), spec, ReplicaType::kWorker, 1, 2, options);
  const Json& program = pod["spec"]["containers"][0];
  EXPECT_EQ(EnvValue(program, "TPUJOB_PROGRESS_LOG_PATTERN"), R"(step (\d+))");
  EXPECT_EQ(EnvValue(program, "TPUJOB_PROGRESS_METRICS_PORT"), "9464");
  EXPECT_THAT(ports(program), ElementsAre("tpujob-progress:9464"));
  EXPECT_EQ(program["ports"][0]["protocol"], "TCP");
  // Only the program's container gets it.
  EXPECT_FALSE(pod["spec"]["containers"][1].contains("ports"));

  // Another port, by the operator's flag.
  options.progress_metrics_port = 19000;
  const Json other = BuildPod(Job(), spec, ReplicaType::kWorker, 1, 2, options);
  EXPECT_EQ(EnvValue(other["spec"]["containers"][0], "TPUJOB_PROGRESS_METRICS_PORT"), "19000");
  EXPECT_THAT(ports(other["spec"]["containers"][0]), ElementsAre("tpujob-progress:19000"));

  // A container that declares the number already keeps its own declaration.
  spec.worker.template_["spec"]["containers"][0]["ports"] =
      Json::array({{{"name", "http"}, {"containerPort", 8080}},
                   {{"name", "exporter"}, {"containerPort", 19000}}});
  const Json declared = BuildPod(Job(), spec, ReplicaType::kWorker, 1, 2, options);
  EXPECT_EQ(EnvValue(declared["spec"]["containers"][0], "TPUJOB_PROGRESS_METRICS_PORT"), "19000");
  EXPECT_THAT(ports(declared["spec"]["containers"][0]), ElementsAre("http:8080", "exporter:19000"));

  // 0: no endpoint, no port.
  options.progress_metrics_port = 0;
  spec.worker.template_["spec"]["containers"][0].erase("ports");
  const Json off_progress = BuildPod(Job(), spec, ReplicaType::kWorker, 1, 2, options);
  EXPECT_EQ(EnvValue(off_progress["spec"]["containers"][0], "TPUJOB_PROGRESS_METRICS_PORT"),
            "<absent>");
  EXPECT_FALSE(off_progress["spec"]["containers"][0].contains("ports"));
  // No progress tracking: neither.
  options.progress_metrics_port = 9464;
  const Json untracked = BuildPod(Job(), Spec(), ReplicaType::kWorker, 1, 2, options);
  EXPECT_EQ(EnvValue(untracked["spec"]["containers"][0], "TPUJOB_PROGRESS_METRICS_PORT"),
            "<absent>");
  EXPECT_FALSE(untracked["spec"]["containers"][0].contains("ports"));
}

TEST(ChildrenBuildPodTest, WorkerSchedulingAndTpuResources) {
  const Json spec = BuildPod(Job(), Spec(), ReplicaType::kWorker, 1, 2)["spec"];
  EXPECT_EQ(spec["restartPolicy"], "Never");
  EXPECT_EQ(spec["hostname"], "llm-worker-1");
  EXPECT_EQ(spec["subdomain"], "llm");
  EXPECT_EQ(spec["nodeSelector"],
            (Json{{"cloud.google.com/gke-spot", "true"},
                  {"cloud.google.com/gke-tpu-accelerator", "tpu-v5-lite-podslice"},
                  {"cloud.google.com/gke-tpu-topology", "2x4"}}));
  EXPECT_EQ(spec["tolerations"], Json::parse(R"([{"key": "spot", "operator": "Exists"},
                            {"key": "google.com/tpu", "operator": "Exists",
                             "effect": "NoSchedule"}])"));
  EXPECT_EQ(spec["containers"][0]["resources"],
            Json::parse(R"({"requests": {"memory": "8Gi", "google.com/tpu": "4"},
                            "limits": {"memory": "8Gi", "google.com/tpu": "4"}})"));
  // Only the first container holds the chips.
  EXPECT_FALSE(spec["containers"][1].contains("resources"));
  EXPECT_FALSE(spec["initContainers"][0].contains("resources"));
}

TEST(ChildrenBuildPodTest, ExistingTpuTolerationIsNotRepeated) {
  policy::JobSpec job_spec = Spec();
  const Json tolerate_all_effects = Json{{"key", "google.com/tpu"}, {"operator", "Exists"}};
  job_spec.worker.template_["spec"]["tolerations"] = Json::array({tolerate_all_effects});
  Json spec = BuildPod(Job(), job_spec, ReplicaType::kWorker, 0, 1)["spec"];
  EXPECT_EQ(spec["tolerations"], Json::array({tolerate_all_effects}));

  const Json exact =
      Json{{"key", "google.com/tpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}};
  job_spec.worker.template_["spec"]["tolerations"] = Json::array({exact});
  spec = BuildPod(Job(), job_spec, ReplicaType::kWorker, 0, 1)["spec"];
  EXPECT_EQ(spec["tolerations"], Json::array({exact}));

  // An Equal toleration with a value does not tolerate the taint GKE sets (value "present").
  const Json equal = Json{{"key", "google.com/tpu"}, {"value", "other"}, {"effect", "NoSchedule"}};
  job_spec.worker.template_["spec"]["tolerations"] = Json::array({equal});
  spec = BuildPod(Job(), job_spec, ReplicaType::kWorker, 0, 1)["spec"];
  EXPECT_EQ(spec["tolerations"].size(), 2u);
}

TEST(ChildrenBuildPodTest, TemplateTpuRequestIsReplaced) {
  policy::JobSpec job_spec = Spec();
  job_spec.worker.template_["spec"]["containers"][0]["resources"] =
      Json::parse(R"({"requests": {"google.com/tpu": "8"}, "limits": {"google.com/tpu": "8"}})");
  const Json spec = BuildPod(Job(), job_spec, ReplicaType::kWorker, 0, 1)["spec"];
  EXPECT_EQ(spec["containers"][0]["resources"]["requests"]["google.com/tpu"], "4");
  EXPECT_EQ(spec["containers"][0]["resources"]["limits"]["google.com/tpu"], "4");
}

TEST(ChildrenBuildPodTest, MasterHasNoTpuBits) {
  const Json pod = BuildPod(Job(), Spec(), ReplicaType::kMaster, 0, 3);
  EXPECT_EQ(pod["metadata"]["name"], "llm-master-0");
  EXPECT_EQ(pod["metadata"]["labels"]["tpujob.dev/replica-type"], "Master");
  EXPECT_EQ(pod["metadata"]["labels"]["tpujob.dev/attempt"], "3");
  EXPECT_FALSE(pod["metadata"].contains("annotations"));
  const Json& spec = pod["spec"];
  EXPECT_EQ(spec["restartPolicy"], "Never");
  EXPECT_EQ(spec["hostname"], "llm-master-0");
  EXPECT_EQ(spec["subdomain"], "llm");
  EXPECT_FALSE(spec.contains("nodeSelector"));
  EXPECT_FALSE(spec.contains("tolerations"));
  EXPECT_FALSE(spec["containers"][0].contains("resources"));

  const Json& container = spec["containers"][0];
  EXPECT_EQ(EnvValue(container, "TPU_WORKER_ID"), "<absent>");
  EXPECT_EQ(EnvValue(container, "TPUJOB_REPLICA_TYPE"), "Master");
  EXPECT_EQ(EnvValue(container, "TPU_WORKER_HOSTNAMES"), "llm-worker-0.llm,llm-worker-1.llm");
  const Json config = Json::parse(EnvValue(container, "TPU_CONFIG"));
  EXPECT_FALSE(config.contains("worker_id"));
  EXPECT_EQ(config["worker_count"], 2);
}

TEST(ChildrenBuildPodTest, OperatorEnvironmentComesFirstAndWins) {
  const Json pod = BuildPod(Job(), Spec(), ReplicaType::kWorker, 1, 2);
  const Json& trainer = pod["spec"]["containers"][0];
  EXPECT_THAT(
      EnvNames(trainer),
      ElementsAre("TPUJOB_NAME", "TPUJOB_NAMESPACE", "TPUJOB_ATTEMPT", "TPUJOB_REPLICA_TYPE",
                  "TPUJOB_REPLICA_INDEX", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES",
                  "TPUJOB_CHECKPOINT_PATH", "TPU_CONFIG", "NODE_NAME", "LR", "RUN"));
  EXPECT_EQ(EnvValue(trainer, "TPUJOB_NAME"), "llm");
  EXPECT_EQ(EnvValue(trainer, "TPUJOB_NAMESPACE"), "team");
  EXPECT_EQ(EnvValue(trainer, "TPUJOB_ATTEMPT"), "2");
  EXPECT_EQ(EnvValue(trainer, "TPUJOB_REPLICA_TYPE"), "Worker");
  EXPECT_EQ(EnvValue(trainer, "TPUJOB_REPLICA_INDEX"), "1");
  EXPECT_EQ(EnvValue(trainer, "TPU_WORKER_ID"), "1");  // the template's "bogus" is gone
  EXPECT_EQ(EnvValue(trainer, "TPU_WORKER_HOSTNAMES"), "llm-worker-0.llm,llm-worker-1.llm");
  EXPECT_EQ(EnvValue(trainer, "TPUJOB_CHECKPOINT_PATH"), "gs://bucket/run1");
  EXPECT_EQ(EnvValue(trainer, "LR"), "0.1");
  EXPECT_EQ(EnvOf(trainer)["NODE_NAME"], Json::parse(R"({"name": "NODE_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})"));

  // Every container and init container gets the same variables.
  for (const Json& container : {pod["spec"]["containers"][1], pod["spec"]["initContainers"][0]}) {
    EXPECT_THAT(
        EnvNames(container),
        ElementsAre("TPUJOB_NAME", "TPUJOB_NAMESPACE", "TPUJOB_ATTEMPT", "TPUJOB_REPLICA_TYPE",
                    "TPUJOB_REPLICA_INDEX", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES",
                    "TPUJOB_CHECKPOINT_PATH", "TPU_CONFIG", "NODE_NAME"));
    EXPECT_EQ(EnvValue(container, "TPU_WORKER_ID"), "1");
  }
}

TEST(ChildrenBuildPodTest, CheckpointVariableAbsentWithoutPath) {
  policy::JobSpec spec = Spec();
  spec.checkpoint_path.clear();
  const Json pod = BuildPod(Job(), spec, ReplicaType::kWorker, 0, 1);
  EXPECT_EQ(EnvValue(pod["spec"]["containers"][0], "TPUJOB_CHECKPOINT_PATH"), "<absent>");
}

TEST(ChildrenBuildPodTest, TpuConfigIsCompactJson) {
  const Json pod = BuildPod(Job(), Spec(), ReplicaType::kWorker, 1, 2);
  const std::string text = EnvValue(pod["spec"]["containers"][0], "TPU_CONFIG");
  EXPECT_EQ(text.find_first_of(" \n"), std::string::npos);
  const Json config = Json::parse(text);
  EXPECT_EQ(config, (Json{{"tpu_node_name", "llm"},
                          {"namespace", "team"},
                          {"accelerator", "tpu-v5-lite-podslice"},
                          {"topology", "2x4"},
                          {"chips_per_worker", 4},
                          {"worker_id", 1},
                          {"worker_count", 2},
                          {"worker_hostnames", {"llm-worker-0.llm", "llm-worker-1.llm"}},
                          {"attempt", 2}}));
}

TEST(ChildrenBuildPodTest, TemplateIsOtherwisePreserved) {
  const Json pod = BuildPod(Job(), Spec(), ReplicaType::kWorker, 0, 1);
  Json spec = pod["spec"];
  Json expected = WorkerTemplate()["spec"];
  // Take out exactly what the builder adds or replaces; everything else must be untouched.
  for (Json* each : {&spec, &expected}) {
    for (const char* field : {"restartPolicy", "hostname", "subdomain", "nodeSelector",
                              "tolerations", "terminationGracePeriodSeconds"}) {
      each->erase(field);
    }
    for (const char* list : {"containers", "initContainers"}) {
      for (Json& container : (*each)[list]) {
        container.erase("env");
        container.erase("resources");
      }
    }
  }
  EXPECT_EQ(spec, expected);
  EXPECT_EQ(pod["spec"]["volumes"], WorkerTemplate()["spec"]["volumes"]);
  EXPECT_EQ(pod["spec"]["securityContext"], Json({{"runAsUser", 1000}}));
  EXPECT_EQ(pod["spec"]["containers"].size(), 2u);
}

TEST(ChildrenBuildPodTest, MistypedTemplateFieldsDoNotThrow) {
  policy::JobSpec spec = Spec();
  spec.worker.template_ = Json::parse(R"({
    "metadata": {"labels": "oops", "annotations": []},
    "spec": {"nodeSelector": "x", "tolerations": {}, "initContainers": 3,
             "containers": [{"name": "c", "env": "oops", "resources": []}, "junk"]}
  })");
  Json pod;
  ASSERT_NO_THROW(pod = BuildPod(Job(), spec, ReplicaType::kWorker, 0, 1));
  EXPECT_EQ(pod["metadata"]["labels"]["tpujob.dev/job-name"], "llm");
  EXPECT_EQ(pod["spec"]["nodeSelector"].size(), 2u);
  EXPECT_EQ(pod["spec"]["tolerations"].size(), 1u);
  EXPECT_EQ(pod["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"], "4");
  EXPECT_EQ(EnvValue(pod["spec"]["containers"][0], "TPU_WORKER_ID"), "0");
  EXPECT_EQ(pod["spec"]["containers"][1], "junk");

  spec.worker.template_ = "not a template";
  ASSERT_NO_THROW(pod = BuildPod(Job(), spec, ReplicaType::kWorker, 0, 1));
  EXPECT_EQ(pod["metadata"]["name"], "llm-worker-0");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
}

// What the Pod Security "restricted" profile (v1.25+) rejects in one container, given the pod's
// securityContext: a container field wins over the pod's. Empty when the container complies.
std::vector<std::string> RestrictedViolations(const Json& pod_security, const Json& container) {
  const Json security = container.value("securityContext", Json::object());
  auto effective = [&](const char* field) {
    if (security.contains(field)) return security[field];
    return pod_security.value(field, Json());
  };
  std::vector<std::string> violations;
  if (effective("runAsNonRoot") != true) violations.push_back("runAsNonRoot");
  if (effective("runAsUser") == 0) violations.push_back("runAsUser=0");
  if (security.value("allowPrivilegeEscalation", Json()) != false) {
    violations.push_back("allowPrivilegeEscalation");
  }
  if (security.value("privileged", false)) violations.push_back("privileged");
  const Json capabilities = security.value("capabilities", Json::object());
  const Json drop = capabilities.value("drop", Json::array());
  if (std::find(drop.begin(), drop.end(), "ALL") == drop.end()) violations.push_back("drop ALL");
  for (const Json& added : capabilities.value("add", Json::array())) {
    if (added != "NET_BIND_SERVICE") violations.push_back("capabilities.add");
  }
  const std::string seccomp = effective("seccompProfile").is_object()
                                  ? effective("seccompProfile").value("type", "")
                                  : std::string();
  if (seccomp != "RuntimeDefault" && seccomp != "Localhost") violations.push_back("seccomp");
  return violations;
}

policy::JobSpec PreflightSpec() {
  policy::JobSpec spec = Spec();
  spec.fault_tolerance.preflight_enabled = true;
  return spec;
}

TEST(ChildrenPreflightTest, InitContainerComesFirstWithTheJobsSettings) {
  policy::JobSpec spec = PreflightSpec();
  spec.fault_tolerance.preflight_thresholds = Json{{"rootDiskGB", 100}, {"nofile", 4096}};
  const Json pod_spec =
      BuildPod(Job(), spec, ReplicaType::kWorker, 0, 1, {"op:1", std::nullopt, {}, {}})["spec"];
  ASSERT_EQ(pod_spec["initContainers"].size(), 2u);
  const Json& preflight = pod_spec["initContainers"][0];
  EXPECT_EQ(preflight["name"], "preflight");
  EXPECT_EQ(preflight["image"], "op:1");
  EXPECT_EQ(preflight["command"], Json::array({"tpujob-operator", "preflight"}));
  EXPECT_EQ(preflight["terminationMessagePath"], "/dev/termination-log");
  EXPECT_EQ(preflight["volumeMounts"], WorkerTemplate()["spec"]["containers"][0]["volumeMounts"]);
  EXPECT_EQ(preflight["resources"]["limits"]["google.com/tpu"], "4");
  EXPECT_EQ(EnvValue(preflight, "TPUJOB_CHIPS_PER_WORKER"), "4");
  EXPECT_EQ(EnvValue(preflight, "TPUJOB_PREFLIGHT_ROOT_MIN_GB"), "100");
  EXPECT_EQ(EnvValue(preflight, "TPUJOB_PREFLIGHT_NOFILE_MIN"), "4096");
  EXPECT_EQ(pod_spec["initContainers"][1]["name"], "fetch");
  EXPECT_EQ(EnvValue(preflight, "TPUJOB_PREFLIGHT_CHECKS"), "dns,disk,accelerator");
  EXPECT_EQ(EnvValue(preflight, "TPUJOB_PREFLIGHT_CACHE_VOLUME"), "absent");  // mounts /data only

  // The master (no TPU) checks what applies to it: dns, with no TPU request.
  const Json master = BuildPod(Job(), spec, ReplicaType::kMaster, 0, 1)["spec"];
  ASSERT_TRUE(master.contains("initContainers"));
  const Json& master_preflight = master["initContainers"][0];
  EXPECT_EQ(master_preflight["name"], "preflight");
  EXPECT_EQ(EnvValue(master_preflight, "TPUJOB_PREFLIGHT_CHECKS"), "dns");
  EXPECT_EQ(EnvValue(master_preflight, "TPUJOB_CHIPS_PER_WORKER"), "0");
  EXPECT_FALSE(master_preflight.contains("resources"));
}

TEST(ChildrenPreflightTest, ChecksFollowTheSpecTheNetworkAndTheCacheVolume) {
  policy::JobSpec spec = PreflightSpec();
  EXPECT_EQ(PreflightChecks(spec, ReplicaType::kWorker), "dns,disk,accelerator");
  spec.tpu.high_speed_network = true;
  EXPECT_EQ(PreflightChecks(spec, ReplicaType::kWorker), "dns,disk,accelerator,ulimit");
  EXPECT_EQ(PreflightChecks(spec, ReplicaType::kMaster), "dns");
  spec.fault_tolerance.preflight_checks = {"accelerator", "ulimit"};
  EXPECT_EQ(PreflightChecks(spec, ReplicaType::kWorker), "accelerator,ulimit");
  EXPECT_EQ(PreflightChecks(spec, ReplicaType::kMaster), "ulimit");
  spec.fault_tolerance.preflight_checks = {"accelerator"};
  EXPECT_EQ(PreflightChecks(spec, ReplicaType::kMaster), "dns");

  spec.worker.template_["spec"]["containers"][0]["volumeMounts"].push_back(
      {{"name", "cache"}, {"mountPath", "/cache/"}});
  const Json pod_spec = BuildPod(Job(), spec, ReplicaType::kWorker, 0, 1)["spec"];
  EXPECT_EQ(EnvValue(pod_spec["initContainers"][0], "TPUJOB_PREFLIGHT_CACHE_VOLUME"), "present");
}

// Workers keep off nodes whose announced maintenance starts before the given time: each of the
// template's required node-affinity terms is split into "no announcement" or "later than".
TEST(ChildrenTest, WorkersAvoidNodesWithMaintenanceBeforeTheGivenTime) {
  policy::JobSpec spec = Spec();
  PodBuildOptions options;
  options.avoid_maintenance_before_unix = 1800000000;
  Json pod_spec = BuildPod(Job(), spec, ReplicaType::kWorker, 0, 1, options)["spec"];
  EXPECT_EQ(pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
            Json::parse(R"({"nodeSelectorTerms": [
      {"matchExpressions": [{"key": "cloud.google.com/scheduled-maintenance-time",
                             "operator": "DoesNotExist"}]},
      {"matchExpressions": [{"key": "cloud.google.com/scheduled-maintenance-time",
                             "operator": "Gt", "values": ["1800000000"]}]}]})"));

  // The template's own terms keep their meaning: each is ANDed with either alternative.
  spec.worker.template_["spec"]["affinity"] = Json::parse(R"({"nodeAffinity": {
      "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}})");
  pod_spec = BuildPod(Job(), spec, ReplicaType::kWorker, 0, 1, options)["spec"];
  const Json& terms =
      pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
              ["nodeSelectorTerms"];
  ASSERT_EQ(terms.size(), 4u);
  EXPECT_EQ(terms[0]["matchExpressions"][0]["values"][0], "a");
  EXPECT_EQ(terms[0]["matchExpressions"][1]["operator"], "DoesNotExist");
  EXPECT_EQ(terms[1]["matchExpressions"][0]["values"][0], "a");
  EXPECT_EQ(terms[1]["matchExpressions"][1]["operator"], "Gt");
  EXPECT_EQ(terms[3]["matchExpressions"][0]["values"][0], "b");
  EXPECT_EQ(terms[3]["matchExpressions"][1]["values"][0], "1800000000");

  // Without the option, and for the master, nothing is added.
  EXPECT_FALSE(BuildPod(Job(), Spec(), ReplicaType::kWorker, 0, 1)["spec"].contains("affinity"));
  EXPECT_FALSE(
      BuildPod(Job(), Spec(), ReplicaType::kMaster, 0, 1, options)["spec"].contains("affinity"));
}

// Workers keep off the unhealthy nodes they are given, in every term, beside the maintenance
// alternatives; the master, which has no TPU, is not constrained.
// Every pod gets the maintenance grace period as its own, so a drain or an eviction gives the
// program the same time to checkpoint as the operator's deletions; a template's own wins.
TEST(ChildrenBuildPodTest, PodsGetTheMaintenanceGracePeriodUnlessTheTemplateSetsOne) {
  policy::JobSpec spec = Spec();
  spec.fault_tolerance.maintenance_grace_period_seconds = 420;
  for (ReplicaType type : {ReplicaType::kWorker, ReplicaType::kMaster}) {
    EXPECT_EQ(BuildPod(Job(), spec, type, 0, 1)["spec"]["terminationGracePeriodSeconds"], 420)
        << policy::ToString(type);
  }
  EXPECT_EQ(
      BuildPod(Job(), Spec(), ReplicaType::kWorker, 0, 1)["spec"]["terminationGracePeriodSeconds"],
      300);
  spec.worker.template_["spec"]["terminationGracePeriodSeconds"] = 45;
  EXPECT_EQ(
      BuildPod(Job(), spec, ReplicaType::kWorker, 0, 1)["spec"]["terminationGracePeriodSeconds"],
      45);
}

// A worker restarted on its node: a required node affinity on metadata.name In [node], ANDed
// into every term (the template's own and the maintenance split).
TEST(ChildrenTest, ARestartedWorkerIsPinnedToItsNode) {
  PodBuildOptions options;
  options.avoid_nodes = {"bad-1"};
  Json pod_spec =
      BuildPod(Job(), Spec(), ReplicaType::kWorker, 0, 1, options, "", "node-7")["spec"];
  EXPECT_EQ(pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
            Json::parse(R"({"nodeSelectorTerms": [{"matchFields": [
      {"key": "metadata.name", "operator": "NotIn", "values": ["bad-1"]},
      {"key": "metadata.name", "operator": "In", "values": ["node-7"]}]}]})"));
  options.avoid_maintenance_before_unix = 1800000000;
  pod_spec = BuildPod(Job(), Spec(), ReplicaType::kWorker, 0, 1, options, "", "node-7")["spec"];
  const Json& terms =
      pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
              ["nodeSelectorTerms"];
  ASSERT_EQ(terms.size(), 2u);
  for (const Json& term : terms) {
    EXPECT_EQ(term["matchFields"].back(),
              Json::parse(R"({"key": "metadata.name", "operator": "In", "values": ["node-7"]})"));
  }
  EXPECT_FALSE(BuildPod(Job(), Spec(), ReplicaType::kWorker, 0, 1)["spec"].contains("affinity"));
}

TEST(ChildrenTest, WorkersKeepOffTheNodesTheyAreToldToAvoid) {
  PodBuildOptions options;
  options.avoid_nodes = {"bad-1", "bad-2"};
  Json pod_spec = BuildPod(Job(), Spec(), ReplicaType::kWorker, 0, 1, options)["spec"];
  EXPECT_EQ(pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
            Json::parse(R"({"nodeSelectorTerms": [{"matchFields": [
      {"key": "metadata.name", "operator": "NotIn", "values": ["bad-1"]},
      {"key": "metadata.name", "operator": "NotIn", "values": ["bad-2"]}]}]})"));

  options.avoid_maintenance_before_unix = 1800000000;
  pod_spec = BuildPod(Job(), Spec(), ReplicaType::kWorker, 0, 1, options)["spec"];
  const Json& terms =
      pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
              ["nodeSelectorTerms"];
  ASSERT_EQ(terms.size(), 2u);
  for (const Json& term : terms) {
    ASSERT_EQ(term["matchFields"].size(), 2u) << term.dump();
    EXPECT_EQ(term["matchFields"][1]["values"], Json::array({"bad-2"}));
    EXPECT_EQ(term["matchExpressions"].size(), 1u) << term.dump();
  }
  EXPECT_FALSE(
      BuildPod(Job(), Spec(), ReplicaType::kMaster, 0, 1, options)["spec"].contains("affinity"));
}

TEST(ChildrenPreflightTest, InitContainerMeetsPodSecurityRestricted) {
  const Json pod_spec = BuildPod(Job(), PreflightSpec(), ReplicaType::kWorker, 0, 1)["spec"];
  const Json& preflight = pod_spec["initContainers"][0];
  ASSERT_EQ(preflight["name"], "preflight");
  EXPECT_EQ(preflight["securityContext"], Json::parse(R"({
    "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
    "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})"));
  EXPECT_THAT(RestrictedViolations(Json::object(), preflight), ::testing::IsEmpty());
  // The template's pod-level runAsUser (1000) does not matter to it.
  EXPECT_THAT(RestrictedViolations(pod_spec["securityContext"], preflight), ::testing::IsEmpty());
}

TEST(ChildrenPreflightTest, HostilePodSecurityContextIsOverriddenForPreflightOnly) {
  // A template that runs as root with no seccomp profile and a privileged trainer: the
  // pre-flight container's own fields win over the pod's, and the user's containers and the
  // pod securityContext stay exactly as written.
  policy::JobSpec spec = PreflightSpec();
  Json& template_spec = spec.worker.template_["spec"];
  template_spec["securityContext"] =
      Json::parse(R"({"runAsUser": 0, "runAsNonRoot": false, "fsGroup": 2000,
                      "seccompProfile": {"type": "Unconfined"}})");
  const Json privileged = Json::parse(R"({"privileged": true, "runAsUser": 0})");
  template_spec["containers"][0]["securityContext"] = privileged;
  const Json pod_spec = BuildPod(Job(), spec, ReplicaType::kWorker, 0, 1)["spec"];

  EXPECT_THAT(RestrictedViolations(pod_spec["securityContext"], pod_spec["initContainers"][0]),
              ::testing::IsEmpty());
  EXPECT_EQ(pod_spec["securityContext"], template_spec["securityContext"]);
  EXPECT_EQ(pod_spec["containers"][0]["securityContext"], privileged);
  EXPECT_FALSE(pod_spec["containers"][1].contains("securityContext"));
  EXPECT_FALSE(pod_spec["initContainers"][1].contains("securityContext"));
  // The check itself notices a non-compliant container.
  EXPECT_THAT(RestrictedViolations(pod_spec["securityContext"], pod_spec["containers"][0]),
              ::testing::Not(::testing::IsEmpty()));
}

TEST(ChildrenBuildServiceTest, HeadlessServiceForPeerDns) {
  const Json service = BuildService(Job());
  EXPECT_EQ(service, Json::parse(R"({
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {
      "name": "llm",
      "namespace": "team",
      "labels": {"tpujob.dev/job-name": "llm"},
      "ownerReferences": [{"apiVersion": "tpujob.dev/v1alpha1", "kind": "TPUJob", "name": "llm",
                           "uid": "uid-llm", "controller": true, "blockOwnerDeletion": true}]
    },
    "spec": {
      "clusterIP": "None",
      "selector": {"tpujob.dev/job-name": "llm"},
      "publishNotReadyAddresses": true
    }
  })"));
}

TEST(ChildrenIdentifyPodTest, RoundTripThroughTheCache) {
  for (auto [type, index, attempt] :
       {std::tuple{ReplicaType::kWorker, 0, 1}, std::tuple{ReplicaType::kWorker, 7, 3},
        std::tuple{ReplicaType::kMaster, 0, 2}}) {
    Json pod = BuildPod(Job(), Spec(), type, index, attempt);
    pod["metadata"]["uid"] = "uid-pod";
    auto info = cache::PodInfo::FromJson(pod);
    ASSERT_TRUE(info.has_value()) << info.error().ToString();
    EXPECT_THAT(IdentifyPod(*info), Optional(PodIdentity{type, index, attempt}));
  }
}

TEST(ChildrenIdentifyPodTest, MissingOrMalformedLabels) {
  auto pod_with = [](std::initializer_list<std::pair<std::string_view, std::string_view>> labels) {
    cache::PodInfo pod;
    pod.name = "llm-worker-0";
    pod.labels = cache::LabelMap(labels);
    return pod;
  };
  EXPECT_THAT(
      IdentifyPod(pod_with(
          {{kReplicaTypeLabel, "Worker"}, {kReplicaIndexLabel, "12"}, {kAttemptLabel, "4"}})),
      Optional(PodIdentity{ReplicaType::kWorker, 12, 4}));
  EXPECT_EQ(IdentifyPod(pod_with({})), std::nullopt);
  EXPECT_EQ(IdentifyPod(pod_with({{kReplicaIndexLabel, "0"}, {kAttemptLabel, "1"}})), std::nullopt);
  EXPECT_EQ(IdentifyPod(pod_with({{kReplicaTypeLabel, "Worker"}, {kAttemptLabel, "1"}})),
            std::nullopt);
  EXPECT_EQ(IdentifyPod(pod_with({{kReplicaTypeLabel, "Worker"}, {kReplicaIndexLabel, "0"}})),
            std::nullopt);
  for (std::string_view type : {"worker", "PS", ""}) {
    EXPECT_EQ(IdentifyPod(pod_with(
                  {{kReplicaTypeLabel, type}, {kReplicaIndexLabel, "0"}, {kAttemptLabel, "1"}})),
              std::nullopt)
        << type;
  }
  for (std::string_view index : {"", "-1", "+1", "01", "1x", " 1", "2147483648"}) {
    EXPECT_EQ(
        IdentifyPod(pod_with(
            {{kReplicaTypeLabel, "Worker"}, {kReplicaIndexLabel, index}, {kAttemptLabel, "1"}})),
        std::nullopt)
        << index;
  }
  for (std::string_view attempt : {"0", "", "-2", "1.5"}) {
    EXPECT_EQ(
        IdentifyPod(pod_with(
            {{kReplicaTypeLabel, "Master"}, {kReplicaIndexLabel, "0"}, {kAttemptLabel, attempt}})),
        std::nullopt)
        << attempt;
  }
}

// --- Multislice ---------------------------------------------------------------------------------

policy::JobSpec MultisliceSpec(int32_t slices, int32_t hosts) {
  policy::JobSpec spec = Spec();
  spec.tpu.slices = slices;
  spec.worker.replicas = hosts;
  return spec;
}

TEST(ChildrenMultisliceTest, NamesAreDeterministicPerSliceAndHost) {
  const policy::JobSpec spec = MultisliceSpec(3, 4);
  EXPECT_EQ(spec.Replicas(ReplicaType::kWorker), 12);
  EXPECT_EQ(PodName("llm", spec, ReplicaType::kWorker, 0), "llm-worker-0-0");
  EXPECT_EQ(PodName("llm", spec, ReplicaType::kWorker, 3), "llm-worker-0-3");
  EXPECT_EQ(PodName("llm", spec, ReplicaType::kWorker, 4), "llm-worker-1-0");
  EXPECT_EQ(PodName("llm", spec, ReplicaType::kWorker, 11), "llm-worker-2-3");
  EXPECT_EQ(PodName("llm", spec, ReplicaType::kMaster, 0), "llm-master-0");
  EXPECT_EQ(WorkerHostnames("llm", spec, 1),
            "llm-worker-1-0.llm,llm-worker-1-1.llm,llm-worker-1-2.llm,llm-worker-1-3.llm");
  EXPECT_EQ(CoordinatorAddress("llm", spec), "llm-worker-0-0.llm");
  // A single slice keeps the names it always had.
  EXPECT_EQ(PodName("llm", MultisliceSpec(1, 4), ReplicaType::kWorker, 3), "llm-worker-3");
}

// An elastic job restarted in place whose slices carry other slices' names (status.tpu.sliceSlots
// {2, 1, 0}: slice 0's pods are the former slice 2's): names, hostnames and the coordinator
// follow the slots, the slice ids stay the ids.
TEST(ChildrenMultisliceTest, SlotsNameEachSlicesPods) {
  policy::JobSpec spec = MultisliceSpec(3, 2);
  spec.tpu.slots = {2, 1, 0};
  EXPECT_EQ(PodName("llm", spec, ReplicaType::kWorker, 0), "llm-worker-2-0");
  EXPECT_EQ(PodName("llm", spec, ReplicaType::kWorker, 3), "llm-worker-1-1");
  EXPECT_EQ(PodName("llm", spec, ReplicaType::kWorker, 5), "llm-worker-0-1");
  EXPECT_EQ(WorkerHostnames("llm", spec, 0), "llm-worker-2-0.llm,llm-worker-2-1.llm");
  EXPECT_EQ(CoordinatorAddress("llm", spec), "llm-worker-2-0.llm");
  const Json pod = BuildPod(Job(), spec, ReplicaType::kWorker, 1, 3);
  EXPECT_EQ(pod["metadata"]["name"], "llm-worker-2-1");
  EXPECT_EQ(pod["metadata"]["labels"]["tpujob.dev/slice-index"], "0");
  EXPECT_EQ(EnvValue(pod["spec"]["containers"][0], "MEGASCALE_SLICE_ID"), "0");
}

// One row per worker of a 3-slice x 4-host job: what its pod must carry.
struct MultisliceWorker {
  int32_t index;  // job-wide
  std::string name;
  int32_t slice;
  int32_t host;
  std::string pool;
};

class ChildrenMultisliceEnvTest : public ::testing::TestWithParam<MultisliceWorker> {};

TEST_P(ChildrenMultisliceEnvTest, WorkerGetsItsSlicesEnvironment) {
  const MultisliceWorker& w = GetParam();
  const policy::JobSpec spec = MultisliceSpec(3, 4);
  const Json pod = BuildPod(Job(), spec, ReplicaType::kWorker, w.index, 2, {}, w.pool);
  EXPECT_EQ(pod["metadata"]["name"], w.name);
  EXPECT_EQ(pod["spec"]["hostname"], w.name);
  EXPECT_EQ(pod["spec"]["subdomain"], "llm");
  const Json& labels = pod["metadata"]["labels"];
  EXPECT_EQ(labels["tpujob.dev/replica-index"], std::to_string(w.index));
  EXPECT_EQ(labels["tpujob.dev/slice-index"], std::to_string(w.slice));
  EXPECT_EQ(pod["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"], w.pool);

  std::string peers;
  for (int h = 0; h < 4; ++h) {
    peers += (h == 0 ? "" : ",") + std::string("llm-worker-") + std::to_string(w.slice) + "-" +
             std::to_string(h) + ".llm";
  }
  const Json& trainer = pod["spec"]["containers"][0];
  EXPECT_THAT(EnvNames(trainer),
              ElementsAre("TPUJOB_NAME", "TPUJOB_NAMESPACE", "TPUJOB_ATTEMPT",
                          "TPUJOB_REPLICA_TYPE", "TPUJOB_REPLICA_INDEX", "TPU_WORKER_ID",
                          "TPU_WORKER_HOSTNAMES", "MEGASCALE_COORDINATOR_ADDRESS",
                          "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "MEGASCALE_PORT",
                          "TPUJOB_CHECKPOINT_PATH", "TPU_CONFIG", "NODE_NAME", "LR", "RUN"));
  EXPECT_EQ(EnvValue(trainer, "TPUJOB_REPLICA_INDEX"), std::to_string(w.index));
  EXPECT_EQ(EnvValue(trainer, "TPU_WORKER_ID"), std::to_string(w.host));
  EXPECT_EQ(EnvValue(trainer, "TPU_WORKER_HOSTNAMES"), peers);
  EXPECT_EQ(EnvValue(trainer, "MEGASCALE_COORDINATOR_ADDRESS"), "llm-worker-0-0.llm");
  EXPECT_EQ(EnvValue(trainer, "MEGASCALE_NUM_SLICES"), "3");
  EXPECT_EQ(EnvValue(trainer, "MEGASCALE_SLICE_ID"), std::to_string(w.slice));
  EXPECT_EQ(EnvValue(trainer, "MEGASCALE_PORT"), "8080");

  const Json config = Json::parse(EnvValue(trainer, "TPU_CONFIG"));
  EXPECT_EQ(config["worker_id"], w.host);
  EXPECT_EQ(config["worker_count"], 4);
  EXPECT_EQ(config["num_slices"], 3);
  EXPECT_EQ(config["slice_id"], w.slice);
  EXPECT_EQ(config["coordinator_address"], "llm-worker-0-0.llm");
  EXPECT_EQ(config["megascale_port"], 8080);
  EXPECT_EQ(config["worker_hostnames"].size(), 4u);
  EXPECT_EQ(config["worker_hostnames"][0], "llm-worker-" + std::to_string(w.slice) + "-0.llm");
}

INSTANTIATE_TEST_SUITE_P(ThreeSlicesOfFour, ChildrenMultisliceEnvTest,
                         ::testing::Values(MultisliceWorker{0, "llm-worker-0-0", 0, 0, "pool-a"},
                                           MultisliceWorker{3, "llm-worker-0-3", 0, 3, "pool-a"},
                                           MultisliceWorker{4, "llm-worker-1-0", 1, 0, "pool-c"},
                                           MultisliceWorker{6, "llm-worker-1-2", 1, 2, "pool-c"},
                                           MultisliceWorker{11, "llm-worker-2-3", 2, 3, "pool-d"}));

// An elastic job restarted in place on 2 of its 3 slices: what the supervisor gives the next
// generation of a pod that stays is what a pod made now would have, the operator's variables
// with a value and nothing of the template's.
TEST(ChildrenMultisliceTest, TheProgramEnvAnnotationIsWhatAPodMadeNowWouldHave) {
  const policy::JobSpec degraded = policy::WithActiveSlices(MultisliceSpec(3, 4), 2);
  const std::string text = ProgramEnvAnnotation(Job(), degraded, ReplicaType::kWorker, 5, 4);
  const Json trainer =
      BuildPod(Job(), degraded, ReplicaType::kWorker, 5, 4)["spec"]["containers"][0];
  std::map<std::string, std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t equals = line.find('=');
    ASSERT_NE(equals, std::string::npos) << line;
    lines[line.substr(0, equals)] = line.substr(equals + 1);
  }
  EXPECT_EQ(lines.size(), 13u) << text;  // every one of the operator's but NODE_NAME
  for (const auto& [name, value] : lines) EXPECT_EQ(EnvValue(trainer, name), value) << name;
  EXPECT_EQ(lines["MEGASCALE_NUM_SLICES"], "2");
  EXPECT_EQ(lines["MEGASCALE_SLICE_ID"], "1");
  EXPECT_EQ(lines["TPUJOB_ATTEMPT"], "4");
  EXPECT_EQ(Json::parse(lines["TPU_CONFIG"])["num_slices"], 2);
  EXPECT_FALSE(lines.contains("NODE_NAME"));  // the kubelet's (valueFrom)
  EXPECT_FALSE(lines.contains("LR"));         // the template's own
}

TEST(ChildrenMultisliceTest, MasterKnowsTheCoordinatorButNoSlice) {
  const Json pod = BuildPod(Job(), MultisliceSpec(2, 2), ReplicaType::kMaster, 0, 1);
  EXPECT_EQ(pod["metadata"]["name"], "llm-master-0");
  EXPECT_FALSE(pod["metadata"]["labels"].contains("tpujob.dev/slice-index"));
  const Json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(EnvValue(c, "MEGASCALE_COORDINATOR_ADDRESS"), "llm-worker-0-0.llm");
  EXPECT_EQ(EnvValue(c, "MEGASCALE_NUM_SLICES"), "2");
  EXPECT_EQ(EnvValue(c, "MEGASCALE_SLICE_ID"), "<absent>");
  EXPECT_EQ(EnvValue(c, "TPU_WORKER_ID"), "<absent>");
  EXPECT_EQ(EnvValue(c, "TPU_WORKER_HOSTNAMES"), "llm-worker-0-0.llm,llm-worker-0-1.llm");
}

TEST(ChildrenMultisliceTest, SingleSlicePodsCarryNoSliceLabelOrMegascaleVariables) {
  const Json pod = BuildPod(Job(), MultisliceSpec(1, 2), ReplicaType::kWorker, 1, 1, {}, "pool-a");
  EXPECT_FALSE(pod["metadata"]["labels"].contains("tpujob.dev/slice-index"));
  for (const char* name : {"MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES",
                           "MEGASCALE_SLICE_ID", "MEGASCALE_PORT"}) {
    EXPECT_EQ(EnvValue(pod["spec"]["containers"][0], name), "<absent>") << name;
  }
  EXPECT_FALSE(
      Json::parse(EnvValue(pod["spec"]["containers"][0], "TPU_CONFIG")).contains("num_slices"));
}

TEST(ChildrenMultisliceTest, IdentifyPodReadsTheJobWideIndex) {
  Json pod = BuildPod(Job(), MultisliceSpec(3, 4), ReplicaType::kWorker, 9, 3, {}, "pool-b");
  pod["metadata"]["uid"] = "uid-pod";
  const auto info = cache::PodInfo::FromJson(pod);
  ASSERT_TRUE(info.has_value()) << info.error().ToString();
  EXPECT_THAT(IdentifyPod(*info), Optional(PodIdentity{ReplicaType::kWorker, 9, 3}));
}

cache::TPUJobInfo QueuedJob() {
  cache::TPUJobInfo job = Job();
  job.labels = cache::LabelMap({{"kueue.x-k8s.io/queue-name", "team-queue"}});
  return job;
}

const Json* PodSet(const Json& workload, const std::string& name) {
  for (const Json& set : workload["spec"]["podSets"]) {
    if (set["name"] == name) return &set;
  }
  return nullptr;
}

TEST(ChildrenBuildWorkloadTest, OwnedLabelledAndQueuedWithThePriority) {
  policy::JobSpec spec = Spec();
  spec.priority_class_name = "high";
  const Json w = BuildWorkload(QueuedJob(), spec, 1000);
  EXPECT_EQ(w["apiVersion"], "kueue.x-k8s.io/v1beta2");
  EXPECT_EQ(w["kind"], "Workload");
  EXPECT_EQ(w["metadata"]["name"], policy::kueue::WorkloadName("llm", "uid-llm"));
  EXPECT_EQ(w["metadata"]["namespace"], "team");
  EXPECT_EQ(w["metadata"]["labels"]["tpujob.dev/job-name"], "llm");
  EXPECT_EQ(w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"], "uid-llm");
  const Json& owner = w["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "TPUJob");
  EXPECT_EQ(owner["uid"], "uid-llm");
  EXPECT_EQ(owner["controller"], true);
  EXPECT_EQ(w["spec"]["queueName"], "team-queue");
  EXPECT_EQ(w["spec"]["priority"], 1000);
  EXPECT_EQ(w["spec"]["priorityClassRef"],
            (Json{{"group", "scheduling.k8s.io"}, {"kind", "PriorityClass"}, {"name", "high"}}));
  EXPECT_FALSE(w["spec"].contains("active"));
  spec.suspend = true;
  spec.priority_class_name.clear();
  const Json suspended = BuildWorkload(QueuedJob(), spec, 5);
  EXPECT_EQ(suspended["spec"]["active"], false);
  EXPECT_FALSE(suspended["spec"].contains("priorityClassRef"));
}

TEST(ChildrenBuildWorkloadTest, PodSetsCarryWhatKueueCountsAndMatches) {
  const Json w = BuildWorkload(QueuedJob(), Spec(), 0);
  ASSERT_EQ(w["spec"]["podSets"].size(), 2u);
  const Json* master = PodSet(w, "master");
  const Json* workers = PodSet(w, "workers");
  ASSERT_NE(master, nullptr);
  ASSERT_NE(workers, nullptr);
  EXPECT_EQ((*master)["count"], 1);
  EXPECT_EQ((*workers)["count"], 2);
  const Json& pod = (*workers)["template"]["spec"];
  // What the pods will ask for and where they may go: the chips, the template's own requests,
  // the slice-shape selectors (a flavor whose node labels contradict them is not chosen), the
  // TPU taint's toleration.
  EXPECT_EQ(pod["containers"][0]["resources"]["requests"]["google.com/tpu"], "4");
  EXPECT_EQ(pod["containers"][0]["resources"]["requests"]["memory"], "8Gi");
  EXPECT_EQ(pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"], "2x4");
  EXPECT_EQ(pod["nodeSelector"]["cloud.google.com/gke-spot"], "true");
  EXPECT_EQ(pod["initContainers"][0]["name"], "fetch");
  EXPECT_FALSE(pod["tolerations"].empty());
  // Nothing Kueue does not read: no environment, arguments, volumes or pod name.
  EXPECT_FALSE(pod["containers"][0].contains("env"));
  EXPECT_FALSE(pod["containers"][0].contains("args"));
  EXPECT_FALSE(pod.contains("volumes"));
  EXPECT_FALSE(pod.contains("hostname"));
}

TEST(ChildrenBuildWorkloadTest, MultisliceJobHasAPodSetPerSlice) {
  policy::JobSpec spec = Spec();
  spec.master.reset();
  spec.tpu.slices = 3;
  const Json w = BuildWorkload(QueuedJob(), spec, 0);
  ASSERT_EQ(w["spec"]["podSets"].size(), 3u);
  for (int slice = 0; slice < 3; ++slice) {
    const Json* set = PodSet(w, "slice-" + std::to_string(slice));
    ASSERT_NE(set, nullptr) << slice;
    EXPECT_EQ((*set)["count"], 2);
  }
  spec.tpu.slices = 12;  // more than a Workload's 8 pod sets: one for all
  const Json many = BuildWorkload(QueuedJob(), spec, 0);
  ASSERT_EQ(many["spec"]["podSets"].size(), 1u);
  EXPECT_EQ(many["spec"]["podSets"][0]["name"], "workers");
  EXPECT_EQ(many["spec"]["podSets"][0]["count"], 24);
}

TEST(ChildrenBuildPodTest, KueuePlacementAddsTheFlavorsSelectorsAndTolerations) {
  policy::JobSpec spec = Spec();
  spec.master.reset();
  spec.tpu.slices = 2;
  PodBuildOptions options;
  policy::kueue::Placement slice1;
  slice1.node_labels = {{"cloud.google.com/reservation-name", "r1"}};
  slice1.tolerations = Json::array(
      {{{"key", "spot"}, {"operator", "Exists"}}, {{"key", "team"}, {"operator", "Exists"}}});
  options.kueue_placement["slice-1"] = slice1;
  const Json on_flavor = BuildPod(Job(), spec, ReplicaType::kWorker, 3, 1, options)["spec"];
  EXPECT_EQ(on_flavor["nodeSelector"]["cloud.google.com/reservation-name"], "r1");
  EXPECT_EQ(on_flavor["nodeSelector"]["cloud.google.com/gke-tpu-topology"], "2x4");
  // The template already tolerates "spot": added once, not twice.
  const auto& tolerations = on_flavor["tolerations"];
  EXPECT_EQ(std::count(tolerations.begin(), tolerations.end(),
                       Json{{"key", "spot"}, {"operator", "Exists"}}),
            1);
  EXPECT_EQ(std::count(tolerations.begin(), tolerations.end(),
                       Json{{"key", "team"}, {"operator", "Exists"}}),
            1);
  // Slice 0's pods have no placement of their own.
  const Json other = BuildPod(Job(), spec, ReplicaType::kWorker, 1, 1, options)["spec"];
  EXPECT_FALSE(other["nodeSelector"].contains("cloud.google.com/reservation-name"));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::controller
