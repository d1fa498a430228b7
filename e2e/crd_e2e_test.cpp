// The TPUJob CRD (crds/tpujob.dev_tpujobs.yaml) against a real kube-apiserver: the examples
// apply and come back with their defaults, invalid manifests are refused with a clear message
// (OpenAPI bounds and the CEL rules), the pod templates are checked against the full
// PodTemplateSpec schema (a misspelt or mistyped field is refused, not kept or dropped), the
// replica layout cannot change while the job runs, `kubectl explain` documents the fields, and
// the status schema keeps every field the operator writes. All assertions go through kubectl,
// not the operator's own client.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "operator_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using Json = nlohmann::json;

const std::string kSourceDir = TPUJOB_SOURCE_DIR;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Writes `content` to a file of its own under the cluster directory and returns its path.
std::string WriteManifest(const std::string& name, const std::string& content) {
  const std::filesystem::path dir = std::filesystem::path(ClusterDir()) / "crd-manifests";
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / (name + ".yaml");
  std::ofstream(path) << content;
  return path.string();
}

Json GetJson(const std::string& args) {
  const CommandResult r = Kubectl("get " + args + " -o json", false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return Json::parse(r.output, nullptr, false);
}

// A TPUJob manifest with a valid default (2x4 slice, 2 workers of 4 chips) that each case
// changes in one place.
struct JobYaml {
  std::string name = "job";
  std::string annotations;  // lines under metadata.annotations, indented 4
  std::string topology = "2x4";
  std::string chips = "4";
  std::string workers = "2";
  std::string slices;  // spec.tpu.slices; empty: not given
  std::string worker_template =
      "{spec: {containers: [{name: trainer, image: python:3.11-slim, command: [python, -c, "
      "\"print(1)\"]}]}}";
  std::string replicas_extra;  // more replica types, lines indented 4
  std::string spec_extra;      // more spec fields, lines indented 2
  // The whole spec.tpu mapping's content instead of the fields above (e.g. "type: v5p-128").
  std::string tpu;

  std::string Render() const {
    std::string out =
        "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: " + name + "\n";
    if (!annotations.empty()) out += "  annotations:\n" + annotations;
    out += "spec:\n  tpu: {" +
           (!tpu.empty() ? tpu
                         : "accelerator: tpu-v5-lite-podslice, topology: \"" + topology +
                               "\", chipsPerWorker: " + chips +
                               (slices.empty() ? "" : ", slices: " + slices)) +
           "}\n  replicaSpecs:\n" + replicas_extra + "    Worker:\n" +
           (workers.empty() ? "" : "      replicas: " + workers + "\n") +
           "      template: " + worker_template + "\n" + spec_extra;
    return out;
  }
};

class CrdE2E : public ::testing::Test {
 protected:
  // Installs the CRD (InstallCrd(): with client-side apply, as docs/install.md does, since the
  // whole CRD must fit in the last-applied annotation; once per cluster) and waits until the API
  // server serves this schema (a CRD that was already established from an older file is
  // Established at once, before the new schema is live, so the wait ends only when the typed pod
  // template answers).
  static void SetUpTestSuite() {
    install_output_.clear();
    InstallCrd();
    if (::testing::Test::HasFatalFailure()) {
      install_output_ = "InstallCrd() failed (above)";
      return;
    }
    JobYaml probe;
    probe.name = "schema-probe";
    probe.worker_template = "{spec: {containers: [{name: c, image: i, imagePullPolicyy: x}]}}";
    const std::string path = WriteManifest("schema-probe", probe.Render());
    installed_ = Eventually([&] {
      const CommandResult r = Kubectl("apply --dry-run=server -n default -f " + path);
      return r.exit_code != 0 && Contains(r.output, "imagePullPolicyy");
    });
    if (!installed_) install_output_ += "\nthe API server never served the schema of crds/";
  }

  void SetUp() override { ASSERT_TRUE(installed_) << install_output_; }

  static inline bool installed_ = false;
  static inline std::string install_output_;
};

// ---------------------------------------------------------------------------------------------
// Examples

struct ExampleCase {
  std::string file;
  std::string name;
  std::string success_policy;
  int priority;
  int max_worker_restarts;
  std::string topology;
  int workers;
  bool has_master;
  int slices = 1;            // spec.tpu.slices (1: the schema's default)
  int max_job_retries = -1;  // spec.faultTolerance.maxJobRetries; -1: absent
};

const std::vector<ExampleCase>& Examples() {
  static const std::vector<ExampleCase> examples = {
      {"single-host.yaml", "single-host", "AllWorkers", 0, 5, "2x2", 1, false},
      {"multi-host.yaml", "multi-host", "Master", 10, 3, "4x4", 4, false},
      {"master-workers.yaml", "master-workers", "Master", 0, 5, "2x4", 2, true},
      {"checkpoint.yaml", "checkpointed", "AllWorkers", 0, 5, "2x4", 2, false},
      {"multislice.yaml", "multislice", "AllWorkers", 0, 5, "2x4", 2, false, 3, 2},
      // Named by spec.tpu.type alone: no topology or Worker replicas stored.
      {"tpu-type.yaml", "tpu-type", "AllWorkers", 0, 5, "", -1, false},
  };
  return examples;
}

TEST_F(CrdE2E, EveryExampleFileIsCovered) {
  std::set<std::string> covered;
  for (const auto& example : Examples()) covered.insert(example.file);
  for (const auto& entry : std::filesystem::directory_iterator(kSourceDir + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    EXPECT_TRUE(covered.contains(entry.path().filename().string()))
        << entry.path() << " is not applied by CrdE2E.ExamplesApplyAndRoundTripWithDefaults";
  }
}

TEST_F(CrdE2E, ExamplesApplyAndRoundTripWithDefaults) {
  TestNamespace ns("crd-examples");
  for (const auto& example : Examples()) {
    SCOPED_TRACE(example.file);
    const CommandResult applied =
        Kubectl("apply -n " + ns.name() + " -f " + kSourceDir + "/examples/" + example.file);
    ASSERT_EQ(applied.exit_code, 0) << applied.output;
    const Json job = GetJson("tpujob " + example.name + " -n " + ns.name());
    ASSERT_FALSE(job.is_discarded());
    const Json& spec = job.at("spec");
    // Defaults filled in by the API server, or the example's own values.
    EXPECT_EQ(spec.value("successPolicy", ""), example.success_policy);
    EXPECT_EQ(spec.value("priority", -1), example.priority);
    ASSERT_TRUE(spec.contains("faultTolerance")) << spec.dump(2);
    const Json& ft = spec.at("faultTolerance");
    EXPECT_EQ(ft.value("maxWorkerRestarts", -1), example.max_worker_restarts);
    EXPECT_EQ(ft.value("maintenanceGracePeriodSeconds", -1), 300);
    EXPECT_EQ(ft.value("cordonFaultyNodes", false), true);
    // No schema default for this one: the annotation and the operator decide.
    EXPECT_EQ(ft.value("maxJobRetries", -1), example.max_job_retries) << ft.dump(2);
    EXPECT_EQ(spec.at("tpu").value("slices", -1), example.slices);
    // The layout and the pod templates survive.
    EXPECT_EQ(spec.at("tpu").value("topology", ""), example.topology);
    const Json& replicas = spec.at("replicaSpecs");
    EXPECT_EQ(replicas.at("Worker").value("replicas", -1), example.workers);
    EXPECT_EQ(
        replicas.at("Worker").at("template").at("spec").at("containers").at(0).value("image", ""),
        "python:3.11-slim");
    EXPECT_EQ(replicas.contains("Master"), example.has_master) << replicas.dump(2);
    if (example.has_master) {
      EXPECT_EQ(replicas.at("Master").value("replicas", -1), 1);
    }
  }
  // The template's metadata keeps its labels (the schema declares them, so they are not pruned).
  const Json labelled = GetJson("tpujob master-workers -n " + ns.name());
  EXPECT_EQ(labelled.at("spec").at("replicaSpecs").at("Worker").at("template").at("metadata"),
            Json::parse(R"({"labels": {"team": "research"}})"));
  // The checkpoint example keeps its nested settings and its annotation.
  const Json checkpointed = GetJson("tpujob checkpointed -n " + ns.name());
  EXPECT_EQ(checkpointed.at("spec").at("checkpoint").value("path", ""),
            "gs://example-bucket/checkpointed/run1");
  EXPECT_EQ(
      checkpointed.at("metadata").at("annotations").value("fault-tolerance/job-retry-num", ""),
      "2");
  EXPECT_EQ(checkpointed.at("spec").at("faultTolerance").at("preflight").at("checks").size(), 4u);
  // Examples without the field get no queueTimeoutSeconds: the operator applies its default.
  const Json single = GetJson("tpujob single-host -n " + ns.name());
  EXPECT_FALSE(single.at("spec").contains("queueTimeoutSeconds")) << single.at("spec").dump(2);

  const CommandResult listed = Kubectl("get tj -n " + ns.name());
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  for (const auto& example : Examples()) EXPECT_TRUE(Contains(listed.output, example.name));
}

TEST_F(CrdE2E, ValidEdgeCasesAreAccepted) {
  TestNamespace ns("crd-edges");
  std::vector<std::pair<std::string, JobYaml>> cases;
  {
    JobYaml job;
    job.name = std::string("a") + std::string(44, 'b');  // 45 characters: the longest allowed
    cases.emplace_back("name-of-45-characters", job);
  }
  {
    JobYaml job;
    job.name = "three-dims";
    job.topology = "2x2x4";  // 16 chips = 4 workers of 4 chips
    job.workers = "4";
    cases.emplace_back("three-dimensional-topology", job);
  }
  {
    JobYaml job;
    job.name = "retryable-137";
    job.spec_extra = "  faultTolerance: {exitCodes: {permanent: [2, 3], retryable: [137, 143]}}\n";
    cases.emplace_back("disjoint-exit-codes", job);
  }
  {
    JobYaml job;
    job.name = "master-default";
    job.replicas_extra =
        "    Master: {template: {spec: {containers: [{name: c, image: python:3.11-slim}]}}}\n";
    cases.emplace_back("master-replicas-defaulted", job);
  }
  {
    JobYaml job;
    job.name = "most-workers";
    job.topology = "32x64";  // 512 workers of 4 chips per slice, 32 slices: 16384 pods
    job.workers = "512";
    job.slices = "32";
    cases.emplace_back("slices-times-workers-16384", job);
  }
  {
    JobYaml job;
    job.name = "typed";
    job.tpu = "type: v5p-128";  // accelerator, topology, chips and hosts from the type
    job.workers = "";
    cases.emplace_back("tpu-type-alone", job);
  }
  {
    JobYaml job;
    job.name = "typed-explicit";
    job.tpu = "type: v6e-8, accelerator: tpu-v6e-slice, topology: 2x4, chipsPerWorker: 8";
    job.workers = "1";
    cases.emplace_back("tpu-type-with-agreeing-fields", job);
  }
  for (const auto& [label, job] : cases) {
    SCOPED_TRACE(label);
    const CommandResult r =
        Kubectl("apply -n " + ns.name() + " -f " + WriteManifest("edge-" + label, job.Render()));
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  const Json master = GetJson("tpujob master-default -n " + ns.name());
  EXPECT_EQ(master.at("spec").at("replicaSpecs").at("Master").value("replicas", -1), 1);
}

// ---------------------------------------------------------------------------------------------
// Invalid manifests

struct InvalidCase {
  std::string label;
  JobYaml job;
  std::string expected;  // a substring of kubectl's output
};

// Names the case in test listings (and so in ctest) instead of dumping its bytes.
void PrintTo(const InvalidCase& c, std::ostream* os) { *os << c.label; }

std::vector<InvalidCase> InvalidCases() {
  std::vector<InvalidCase> cases;
  auto add = [&](std::string label, auto edit, std::string expected) {
    JobYaml job;
    edit(job);
    cases.push_back({std::move(label), job, std::move(expected)});
  };
  const std::string ps_message =
      "parameter servers are not supported with TPUs; use Master and Worker replicas";
  const std::string name_message =
      "metadata.name must be a DNS-1035 label of at most 45 characters";
  add(
      "ParameterServerReplica",
      [](JobYaml& j) { j.replicas_extra = "    PS: {replicas: 2, template: {}}\n"; }, ps_message);
  add(
      "ParameterServerLongName",
      [](JobYaml& j) { j.replicas_extra = "    ParameterServer: {replicas: 1}\n"; }, ps_message);
  add(
      "WorkersDoNotMatchTopology", [](JobYaml& j) { j.workers = "3"; },
      "replicaSpecs.Worker.replicas * tpu.chipsPerWorker must equal the chips in tpu.topology");
  add(
      "ThreeDimensionalTopologyMismatch",
      [](JobYaml& j) {
        j.topology = "2x2x2";
        j.workers = "1";
      },
      "replicaSpecs.Worker.replicas * tpu.chipsPerWorker must equal the chips in tpu.topology");
  add(
      "SlicesZero", [](JobYaml& j) { j.slices = "0"; },
      "spec.tpu.slices in body should be greater than or equal to 1");
  add(
      "SlicesSixtyFive", [](JobYaml& j) { j.slices = "65"; },
      "spec.tpu.slices in body should be less than or equal to 64");
  add(
      "SlicesTimesWorkersOver16384",
      [](JobYaml& j) {
        j.topology = "32x64";  // 2048 chips: 512 workers of 4 chips per slice
        j.workers = "512";
        j.slices = "33";
      },
      "tpu.slices * replicaSpecs.Worker.replicas (the job's worker pods) must be at most 16384");
  add(
      "TpuTypeUnknownV5pName",
      [](JobYaml& j) {
        j.tpu = "type: v5p-100";
        j.workers = "";
      },
      "tpu.type: v5p-100 is not a v5p TPU type; v5p types are: v5p-8, v5p-16, v5p-32");
  add(
      "TpuTypeUnknownGeneration",
      [](JobYaml& j) {
        j.tpu = "type: v9-8";
        j.workers = "";
      },
      "tpu.type: the generation must be one of v4, v5litepod (v5e), v5p, v6e, tpu7x");
  add(
      "TpuTypeDisagreesWithTopology",
      [](JobYaml& j) {
        j.tpu = "type: v5p-128, topology: 2x4x8";
        j.workers = "";
      },
      "tpu.type: v5p-128 means accelerator tpu-v5p-slice, topology 4x4x4, chipsPerWorker 4 and "
      "replicaSpecs.Worker.replicas 16");
  add(
      "TpuTypeTooManyWorkerPods",
      [](JobYaml& j) {
        j.tpu = "type: v5p-4x4x68, slices: 61";  // 272 hosts per slice: 16592 pods
        j.workers = "";
      },
      "tpu.type: v5p-4x4x68 has 272 hosts per slice: tpu.slices * hosts per slice, the worker "
      "pods of the job, must be at most 16384");
  add(
      "TpuTypeDisagreesWithWorkers",
      [](JobYaml& j) {
        j.tpu = "type: v6e-8";
        j.workers = "2";
      },
      "tpu.type: v6e-8 means accelerator tpu-v6e-slice, topology 2x4, chipsPerWorker 8");
  add(
      "NoTypeAndNoTopology",
      [](JobYaml& j) { j.tpu = "accelerator: tpu-v5-lite-podslice, chipsPerWorker: 4"; },
      "tpu.accelerator, tpu.topology, tpu.chipsPerWorker and replicaSpecs.Worker.replicas are "
      "required unless tpu.type names the slice");
  add(
      "NoTypeAndNoWorkerReplicas", [](JobYaml& j) { j.workers = ""; },
      "tpu.accelerator, tpu.topology, tpu.chipsPerWorker and replicaSpecs.Worker.replicas are "
      "required unless tpu.type names the slice");
  add(
      "TopologyNotAGrid", [](JobYaml& j) { j.topology = "2by4"; },
      "spec.tpu.topology in body should match");
  add(
      "TopologyFourDimensions", [](JobYaml& j) { j.topology = "2x2x2x2"; },
      "spec.tpu.topology in body should match");
  add(
      "ChipsPerWorkerZero", [](JobYaml& j) { j.chips = "0"; },
      "spec.tpu.chipsPerWorker in body should be greater than or equal to 1");
  add(
      "ChipsPerWorkerNine", [](JobYaml& j) { j.chips = "9"; },
      "spec.tpu.chipsPerWorker in body should be less than or equal to 8");
  add(
      "UnknownSuccessPolicy", [](JobYaml& j) { j.spec_extra = "  successPolicy: bogus\n"; },
      "spec.successPolicy: Unsupported value: \"bogus\"");
  add(
      "ExitCodeBothPermanentAndRetryable",
      [](JobYaml& j) {
        j.spec_extra = "  faultTolerance: {exitCodes: {permanent: [1, 42], retryable: [42]}}\n";
      },
      "a code cannot be both permanent and retryable");
  add(
      "ExitCodeOutOfRange",
      [](JobYaml& j) { j.spec_extra = "  faultTolerance: {exitCodes: {permanent: [256]}}\n"; },
      "should be less than or equal to 255");
  add(
      "MaxJobRetriesFour",
      [](JobYaml& j) { j.spec_extra = "  faultTolerance: {maxJobRetries: 4}\n"; },
      "spec.faultTolerance.maxJobRetries in body should be less than or equal to 3");
  add(
      "UnknownPreflightCheck",
      [](JobYaml& j) { j.spec_extra = "  faultTolerance: {preflight: {checks: [dns, gpu]}}\n"; },
      "Unsupported value: \"gpu\"");
  add(
      "NameTooLong", [](JobYaml& j) { j.name = std::string("a") + std::string(45, 'b'); },
      name_message);
  add(
      "NameWithDot", [](JobYaml& j) { j.name = "llm.pretrain"; }, name_message);
  add(
      "NameStartingWithDigit", [](JobYaml& j) { j.name = "1job"; }, name_message);
  add(
      "WorkerTemplateWithoutContainers",
      [](JobYaml& j) { j.worker_template = "{metadata: {labels: {a: b}}}"; },
      "replicaSpecs.Worker.template.spec.containers must list at least one container");
  add(
      "WorkerTemplateEmptyContainers",
      [](JobYaml& j) { j.worker_template = "{spec: {containers: []}}"; },
      "replicaSpecs.Worker.template.spec.containers must list at least one container");
  add(
      "MasterTemplateWithoutContainers",
      [](JobYaml& j) { j.replicas_extra = "    Master: {template: {metadata: {}}}\n"; },
      "replicaSpecs.Master.template.spec.containers must list at least one container");
  add(
      "MasterTemplateEmptyContainers",
      [](JobYaml& j) { j.replicas_extra = "    Master: {template: {spec: {containers: []}}}\n"; },
      "replicaSpecs.Master.template.spec.containers must list at least one container");
  // A PodSpec requires containers: the schema answers before the rule does.
  add(
      "MasterPodSpecWithoutContainers",
      [](JobYaml& j) { j.replicas_extra = "    Master: {template: {spec: {}}}\n"; },
      "spec.replicaSpecs.Master.template.spec.containers: Required value");
  add(
      "TwoMasters",
      [](JobYaml& j) {
        j.replicas_extra =
            "    Master: {replicas: 2, template: {spec: {containers: [{name: c, image: i}]}}}\n";
      },
      "spec.replicaSpecs.Master.replicas in body should be less than or equal to 1");
  add(
      "QueueTimeoutZero", [](JobYaml& j) { j.spec_extra = "  queueTimeoutSeconds: 0\n"; },
      "spec.queueTimeoutSeconds in body should be greater than or equal to 1");
  add(
      "MaintenanceGraceTooLong",
      [](JobYaml& j) {
        j.spec_extra = "  faultTolerance: {maintenanceGracePeriodSeconds: 3601}\n";
      },
      "should be less than or equal to 3600");

  // The pod templates: the full PodTemplateSpec schema of the pinned Kubernetes version, and
  // kubectl's default strict field validation, refuse misspelt fields by name and wrong types.
  auto worker_container = [](const std::string& fields) {
    return "{spec: {containers: [{name: trainer, image: python:3.11-slim, " + fields + "}]}}";
  };
  add(
      "WorkerContainerFieldMisspelt",
      [&](JobYaml& j) { j.worker_template = worker_container("imagePullPolicyy: Always"); },
      "unknown field \"spec.replicaSpecs.Worker.template.spec.containers[0].imagePullPolicyy\"");
  add(
      "WorkerResourcesFieldMisspelt",
      [&](JobYaml& j) { j.worker_template = worker_container("resources: {limitz: {cpu: 1}}"); },
      "unknown field \"spec.replicaSpecs.Worker.template.spec.containers[0].resources.limitz\"");
  add(
      "WorkerPodSpecFieldMisspelt",
      [](JobYaml& j) {
        j.worker_template =
            "{spec: {nodeSelektor: {a: b}, containers: [{name: trainer, image: i}]}}";
      },
      "unknown field \"spec.replicaSpecs.Worker.template.spec.nodeSelektor\"");
  add(
      "WorkerTemplateMetadataMisspelt",
      [](JobYaml& j) {
        j.worker_template =
            "{metadata: {lables: {a: b}}, spec: {containers: [{name: c, image: i}]}}";
      },
      "unknown field \"spec.replicaSpecs.Worker.template.metadata.lables\"");
  add(
      "MasterContainerFieldMisspelt",
      [](JobYaml& j) {
        j.replicas_extra =
            "    Master: {template: {spec: {containers: [{name: c, image: i, comand: [x]}]}}}\n";
      },
      "unknown field \"spec.replicaSpecs.Master.template.spec.containers[0].comand\"");
  add(
      "ContainerPortNotANumber",
      [&](JobYaml& j) { j.worker_template = worker_container("ports: [{containerPort: abc}]"); },
      "spec.replicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort in body must "
      "be of type integer");
  add(
      "HostNetworkNotABoolean",
      [](JobYaml& j) {
        j.worker_template = "{spec: {hostNetwork: \"yes\", containers: [{name: c, image: i}]}}";
      },
      "spec.replicaSpecs.Worker.template.spec.hostNetwork in body must be of type boolean");
  add(
      "ResourceQuantityMalformed",
      [&](JobYaml& j) {
        j.worker_template = worker_container("resources: {limits: {memory: lots}}");
      },
      "spec.replicaSpecs.Worker.template.spec.containers[0].resources.limits.memory in body "
      "should match");
  add(
      "ContainerWithoutName",
      [](JobYaml& j) { j.worker_template = "{spec: {containers: [{image: i}]}}"; },
      "spec.replicaSpecs.Worker.template.spec.containers[0].name: Required value");
  add(
      "DuplicateContainerNames",
      [](JobYaml& j) {
        j.worker_template = "{spec: {containers: [{name: c, image: i}, {name: c, image: j}]}}";
      },
      "spec.replicaSpecs.Worker.template.spec.containers[1]: Duplicate value");
  return cases;
}

class CrdInvalidE2E : public CrdE2E, public ::testing::WithParamInterface<InvalidCase> {};

TEST_P(CrdInvalidE2E, IsRejectedWithAClearMessage) {
  const InvalidCase& c = GetParam();
  TestNamespace ns("crd-invalid");
  const CommandResult r = Kubectl("apply -n " + ns.name() + " -f " +
                                  WriteManifest("invalid-" + c.label, c.job.Render()));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, c.expected)) << "expected \"" << c.expected << "\" in:\n"
                                              << r.output << "\nmanifest:\n"
                                              << c.job.Render();
  const CommandResult listed = Kubectl("get tpujobs -n " + ns.name() + " -o name", false);
  EXPECT_EQ(Trim(listed.output), "") << "a rejected job was stored anyway";
}

INSTANTIATE_TEST_SUITE_P(Manifests, CrdInvalidE2E, ::testing::ValuesIn(InvalidCases()),
                         [](const auto& info) { return info.param.label; });

// ---------------------------------------------------------------------------------------------
// Pod templates

// What a template declares is stored as written (quantities keep their form, labels and
// annotations stay), and the only defaults added are those the Pod API declares itself
// (ports[].protocol TCP, which also keys the list): no empty objects or zero values appear.
TEST_F(CrdE2E, PodTemplateIsStoredAsWrittenWithThePodDefaults) {
  TestNamespace ns("crd-template");
  JobYaml job;
  job.name = "typed";
  job.worker_template =
      "{metadata: {labels: {team: research}, annotations: {note: kept}}, spec: {nodeSelector: "
      "{pool: a}, volumes: [{name: cache, emptyDir: {sizeLimit: 1Gi}}], containers: [{name: "
      "trainer, image: python:3.11-slim, ports: [{containerPort: 8471}], env: [{name: A, value: "
      "\"1\"}], resources: {limits: {cpu: 500m, memory: 1Gi, google.com/tpu: 4}}}]}}";
  const CommandResult r =
      Kubectl("apply -n " + ns.name() + " -f " + WriteManifest("typed", job.Render()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json stored = GetJson("tpujob typed -n " + ns.name());
  ASSERT_FALSE(stored.is_discarded());
  const Json& tmpl = stored.at("spec").at("replicaSpecs").at("Worker").at("template");
  const Json expected = Json::parse(R"json({
    "metadata": {"labels": {"team": "research"}, "annotations": {"note": "kept"}},
    "spec": {
      "nodeSelector": {"pool": "a"},
      "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}],
      "containers": [{
        "name": "trainer", "image": "python:3.11-slim",
        "ports": [{"containerPort": 8471, "protocol": "TCP"}],
        "env": [{"name": "A", "value": "1"}],
        "resources": {"limits": {"cpu": "500m", "memory": "1Gi", "google.com/tpu": 4}}
      }]
    }
  })json");
  EXPECT_EQ(tmpl, expected) << "stored:\n" << tmpl.dump(2) << "\nexpected:\n" << expected.dump(2);
}

// Without strict field validation a misspelt field is dropped with a warning naming it, never
// stored: the operator never sees a field the Pod API does not know.
TEST_F(CrdE2E, MisspeltTemplateFieldIsDroppedWithAWarningWhenValidationIsLax) {
  TestNamespace ns("crd-template-lax");
  JobYaml job;
  job.name = "lax";
  job.worker_template =
      "{spec: {containers: [{name: trainer, image: python:3.11-slim, imagePullPolicyy: Never}]}}";
  const CommandResult r = Kubectl("apply --validate=warn -n " + ns.name() + " -f " +
                                  WriteManifest("lax", job.Render()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(
      r.output,
      "unknown field \"spec.replicaSpecs.Worker.template.spec.containers[0].imagePullPolicyy\""))
      << r.output;
  const Json stored = GetJson("tpujob lax -n " + ns.name());
  ASSERT_FALSE(stored.is_discarded());
  const Json& container = stored.at("spec")
                              .at("replicaSpecs")
                              .at("Worker")
                              .at("template")
                              .at("spec")
                              .at("containers")
                              .at(0);
  EXPECT_EQ(container, Json::parse(R"({"name": "trainer", "image": "python:3.11-slim"})"))
      << container.dump(2);
}

// ---------------------------------------------------------------------------------------------
// Immutability while the job runs

TEST_F(CrdE2E, LayoutIsImmutableWhileStartingRunningOrRestarting) {
  TestNamespace ns("crd-immutable");
  JobYaml job;
  job.name = "immutable";
  const std::string manifest = WriteManifest("immutable", job.Render());
  ASSERT_EQ(Kubectl("apply -n " + ns.name() + " -f " + manifest).exit_code, 0);
  const std::string target = "tpujob immutable -n " + ns.name() + " ";
  auto set_phase = [&](const std::string& phase) {
    const CommandResult r = Kubectl("patch " + target +
                                    "--subresource=status --type=merge -p "
                                    "'{\"status\":{\"phase\":\"" +
                                    phase + "\"}}'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ASSERT_EQ(Trim(Kubectl("get " + target + "-o jsonpath={.status.phase}").output), phase);
  };
  auto resize = [&](const std::string& topology, int workers) {
    return Kubectl(
        "patch " + target + "--type=merge -p '{\"spec\":{\"tpu\":{\"topology\":\"" + topology +
        "\"},\"replicaSpecs\":{\"Worker\":{\"replicas\":" + std::to_string(workers) + "}}}}'");
  };
  auto layout = [&] {
    return Trim(Kubectl("get " + target +
                        "-o jsonpath={.spec.tpu.topology}/{.spec.replicaSpecs.Worker.replicas}")
                    .output);
  };
  const std::string message =
      "spec.tpu and spec.replicaSpecs cannot change while the job is Starting, Running or "
      "Restarting";

  // No status yet: the layout may change.
  CommandResult r = resize("4x4", 4);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(layout(), "4x4/4");

  // Queued: still nothing created, so it may change.
  set_phase("Queued");
  r = resize("2x4", 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(layout(), "2x4/2");

  for (const char* phase : {"Starting", "Running", "Restarting"}) {
    SCOPED_TRACE(phase);
    set_phase(phase);
    r = resize("4x4", 4);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_TRUE(Contains(r.output, message)) << r.output;
    EXPECT_EQ(layout(), "2x4/2");
  }

  // While Running, the pod template is part of the layout too; other fields are not.
  set_phase("Running");
  r = Kubectl("patch " + target +
              "--type=json -p '[{\"op\":\"replace\",\"path\":\"/spec/replicaSpecs/Worker/template/"
              "spec/containers/0/image\",\"value\":\"python:3.12-slim\"}]'");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, message)) << r.output;
  r = Kubectl("patch " + target + "--type=merge -p '{\"spec\":{\"priority\":7}}'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Trim(Kubectl("get " + target + "-o jsonpath={.spec.priority}").output), "7");

  // spec.faultTolerance.restart: the pods are built for one way of restarting (the supervisor,
  // restartPolicy OnFailure), so it cannot change while they exist; absent reads as Recreate.
  auto set_restart = [&](const std::string& mode) {
    return Kubectl("patch " + target + "--type=merge -p '{\"spec\":{\"faultTolerance\":" +
                   "{\"restart\":\"" + mode + "\"}}}'");
  };
  const std::string restart_message =
      "spec.faultTolerance.restart cannot change while the job's pods exist";
  r = set_restart("InPlace");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, restart_message)) << r.output;
  r = set_restart("Recreate");  // the same as absent
  EXPECT_EQ(r.exit_code, 0) << r.output;

  // Once finished, it may change again.
  set_phase("Failed");
  r = resize("4x4", 4);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(layout(), "4x4/4");
  r = set_restart("InPlace");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// ---------------------------------------------------------------------------------------------
// Documentation

TEST_F(CrdE2E, KubectlExplainDocumentsTheFields) {
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"tpujob.spec.faultTolerance.maxWorkerRestarts",
       "maxWorkerRestarts is how many times one worker may be restarted in place"},
      {"tpujob.spec.faultTolerance.exitCodes", "Listing a code as retryable overrides"},
      {"tpujob.spec.faultTolerance.maxJobRetries", "fault-tolerance/job-retry-num"},
      {"tpujob.spec.successPolicy", "with no Master replica, worker 0"},
      {"tpujob.spec.queueTimeoutSeconds", "1800"},
      {"tpujob.status.workerRestarts", "Worker-3"},
      {"tpujob.spec.preemptible", "queues again by its priority"},
      {"tpujob.status.preemptedBy", "the job (namespace/name) that last preempted this one"},
      {"tpujob.spec.tpu.slices", "<name>-worker-<slice>-<host>"},
      {"tpujob.spec.tpu.minSlices", "ids kept contiguous"},
      {"tpujob.status.tpu.sliceSlots", "for each slice id the job runs on"},
      {"tpujob.spec.faultTolerance.elastic", "scaleUp\t<string>"},
      {"tpujob.status.nodePools", "one per slice in slice order"},
      {"tpujob.spec.tpu.type", "v6e-1, v6e-4, v6e-8, v6e-16"},
  };
  for (const auto& [field, expected] : fields) {
    SCOPED_TRACE(field);
    CommandResult last;
    // The OpenAPI document is aggregated asynchronously after the CRD changes.
    const bool documented = Eventually([&] {
      last = Kubectl("explain " + field);
      return last.exit_code == 0 && Contains(last.output, expected);
    });
    EXPECT_TRUE(documented) << last.output;
  }
}

TEST_F(CrdE2E, KubectlExplainDescribesThePodTemplate) {
  // Field names and types all the way down; descriptions down to the PodSpec's own fields.
  const std::vector<std::pair<std::string, std::vector<std::string>>> fields = {
      {"tpujob.spec.replicaSpecs.Worker.template.spec.containers.resources",
       {"limits\t<map[string]", "requests\t<map[string]", "claims\t<[]Object>"}},
      {"tpujob.spec.replicaSpecs.Worker.template.spec.containers.ports",
       {"containerPort\t<integer> -required-", "protocol\t<string>"}},
      {"tpujob.spec.replicaSpecs.Master.template.spec",
       {"containers\t<[]Object> -required-", "List of containers belonging to the pod.",
        "nodeSelector\t<map[string]string>"}},
      {"tpujob.spec.replicaSpecs.Worker.template.metadata", {"labels\t<map[string]string>"}},
  };
  for (const auto& [field, expected] : fields) {
    SCOPED_TRACE(field);
    CommandResult last;
    const bool documented = Eventually([&] {
      last = Kubectl("explain " + field);
      return last.exit_code == 0 && std::ranges::all_of(expected, [&](const std::string& text) {
               return Contains(last.output, text);
             });
    });
    EXPECT_TRUE(documented) << last.output;
  }
}

// Below this depth in a pod template (metadata and spec, then the PodSpec's fields), fields carry
// no description: with every description the CRD would not fit client-side `kubectl apply`
// (docs/api.md).
constexpr int kTemplateDescriptionDepth = 2;

// Depth of `path` below a pod template (".spec.replicaSpecs.Worker.template.spec.containers[]"
// is 2), or -1 outside the pod templates.
int TemplateDepth(const std::string& path) {
  static const std::string kReplicas = ".spec.replicaSpecs.";
  if (!path.starts_with(kReplicas)) return -1;
  const size_t at = path.find(".template.");
  if (at == std::string::npos) return -1;
  return static_cast<int>(std::ranges::count(path.substr(at + 9), '.'));
}

// Walks the served schema: every property has a description (root metadata excepted: the API
// server forbids anything but name and generateName there; deep pod template fields excepted).
void CollectUndocumented(const Json& schema, const std::string& path,
                         std::vector<std::string>& out) {
  auto check = [&](const Json& child, const std::string& child_path) {
    if (TemplateDepth(child_path) > kTemplateDescriptionDepth) return;
    if (child.value("description", "").empty()) out.push_back(child_path);
  };
  if (schema.contains("properties")) {
    for (const auto& [name, child] : schema.at("properties").items()) {
      const std::string child_path = path + "." + name;
      if (child_path == ".metadata") continue;
      check(child, child_path);
      CollectUndocumented(child, child_path, out);
    }
  }
  if (schema.contains("additionalProperties") && schema.at("additionalProperties").is_object()) {
    const Json& child = schema.at("additionalProperties");
    check(child, path + ".<key>");
    CollectUndocumented(child, path + ".<key>", out);
  }
  if (schema.contains("items")) CollectUndocumented(schema.at("items"), path + "[]", out);
}

// Paths under `schema` that keep unknown fields.
void CollectPreserved(const Json& schema, const std::string& path, std::vector<std::string>& out) {
  if (schema.value("x-kubernetes-preserve-unknown-fields", false)) out.push_back(path);
  if (schema.contains("properties")) {
    for (const auto& [name, child] : schema.at("properties").items()) {
      CollectPreserved(child, path + "." + name, out);
    }
  }
  if (schema.contains("additionalProperties") && schema.at("additionalProperties").is_object()) {
    CollectPreserved(schema.at("additionalProperties"), path + ".<key>", out);
  }
  if (schema.contains("items")) CollectPreserved(schema.at("items"), path + "[]", out);
}

TEST_F(CrdE2E, EveryFieldHasADescription) {
  const Json crd = GetJson("crd tpujobs.tpujob.dev");
  ASSERT_FALSE(crd.is_discarded());
  const Json& schema = crd.at("spec").at("versions").at(0).at("schema").at("openAPIV3Schema");
  std::vector<std::string> undocumented;
  CollectUndocumented(schema, "", undocumented);
  EXPECT_TRUE(undocumented.empty()) << "fields without a description: " << [&] {
    std::string list;
    for (const auto& field : undocumented) list += field + " ";
    return list;
  }();
  // And the schema is what it claims to be: a status the operator owns completely, and pod
  // templates typed all the way down (nothing in them kept unchecked).
  EXPECT_FALSE(
      schema.at("properties").at("status").contains("x-kubernetes-preserve-unknown-fields"));
  const Json& replicas =
      schema.at("properties").at("spec").at("properties").at("replicaSpecs").at("properties");
  for (const char* type : {"Master", "Worker"}) {
    SCOPED_TRACE(type);
    const Json& tmpl = replicas.at(type).at("properties").at("template");
    std::vector<std::string> preserved;
    CollectPreserved(tmpl, std::string(".spec.replicaSpecs.") + type + ".template", preserved);
    EXPECT_TRUE(preserved.empty()) << preserved.front();
    ASSERT_TRUE(tmpl.contains("properties")) << tmpl.dump(2);
    EXPECT_TRUE(tmpl.at("properties")
                    .at("spec")
                    .at("properties")
                    .at("containers")
                    .at("items")
                    .at("properties")
                    .contains("resources"));
  }
}

// ---------------------------------------------------------------------------------------------
// Status

Json FullStatus() {
  return Json::parse(R"json({
    "phase": "Failed",
    "conditions": [
      {"type": "Valid", "status": "True", "reason": "SpecValid", "message": "the spec is valid",
       "lastTransitionTime": "2026-01-02T03:04:05Z", "observedGeneration": 3},
      {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "gang fits",
       "lastTransitionTime": "2026-01-02T03:04:06Z", "observedGeneration": 3},
      {"type": "Ready", "status": "False", "reason": "WorkersNotReady", "message": "1/2 ready",
       "lastTransitionTime": "2026-01-02T03:04:07Z", "observedGeneration": 3},
      {"type": "Succeeded", "status": "False", "reason": "PermanentError", "message": "failed",
       "lastTransitionTime": "2026-01-02T03:04:08Z", "observedGeneration": 3},
      {"type": "Failed", "status": "True", "reason": "PermanentError",
       "message": "Worker-1 exited 1 (permanent)",
       "lastTransitionTime": "2026-01-02T03:04:09Z", "observedGeneration": 3}
    ],
    "observedGeneration": 3,
    "attempt": 2,
    "jobRetries": 1,
    "readyWorkers": "1/2",
    "tpu": {"summary": "tpu-v5-lite-podslice 2x4", "accelerator": "tpu-v5-lite-podslice",
            "topology": "2x4", "chipsPerWorker": 4, "hostsPerSlice": 2, "slices": 1,
            "activeSlices": 1, "slicesSummary": "1/1"},
    "elastic": {"degradedSince": "2026-01-02T03:02:30Z", "scaleUpOfferedAt": "2026-01-02T03:03:30Z",
                "checkpointAtOffer": 1200},
    "replicaStatuses": {
      "Master": {"active": 1, "ready": 1, "succeeded": 0, "failed": 0, "restarts": 0},
      "Worker": {"active": 2, "ready": 1, "succeeded": 0, "failed": 1, "restarts": 4}
    },
    "workerRestarts": {
      "Worker-0": {"count": 1, "podUID": "0b9a0f6e-1111-4c3e-9a51-000000000000"},
      "Worker-3": {"count": 3, "podUID": "0b9a0f6e-2222-4c3e-9a51-000000000003"}
    },
    "queuedAt": "2026-01-02T03:00:00Z",
    "admittedAt": "2026-01-02T03:01:00Z",
    "startTime": "2026-01-02T03:01:01Z",
    "runningAt": "2026-01-02T03:02:00Z",
    "completionTime": "2026-01-02T03:04:09Z",
    "queuePosition": 4,
    "reissued": true,
    "faults": [
      {"time": "2026-01-02T03:03:00Z", "attempt": 1, "kind": "InitContainerFailed",
       "node": "node-7", "pod": "full-worker-1", "container": "preflight",
       "item": "disk-size shm", "exitCode": 3, "reason": "Error",
       "message": "/dev/shm is 0.5 GB, need more than 1 GB", "action": "ReissueJob"},
      {"time": "2026-01-02T03:04:09Z", "attempt": 2, "kind": "ContainerFailed",
       "node": "node-2", "pod": "full-worker-1", "container": "trainer",
       "item": "", "exitCode": 1, "reason": "Error",
       "message": "Traceback (most recent call last)", "action": "FailJob"}
    ],
    "cordonedNodes": ["node-7", "node-9"],
    "goodput": {
      "state": "Productive", "stateSince": "2026-01-02T03:02:00.250Z",
      "accountedUntil": "2026-01-02T03:04:09.125Z", "chips": 8,
      "productiveSeconds": 120.5, "productiveChipSeconds": 964,
      "lostSeconds": {"queued": 60, "requeued": 1.5, "preflight": 2, "starting": 3.25,
                      "restarting": 4, "reissue": 5, "maintenance": 6, "preemption": 7,
                      "suspended": 8, "uncheckpointed": 9.125},
      "lostChipSeconds": {"queued": 480, "requeued": 12, "preflight": 16, "starting": 26,
                          "restarting": 32, "reissue": 40, "maintenance": 48, "preemption": 56,
                          "suspended": 64, "uncheckpointed": 73, "degraded": 80},
      "missingChips": 8, "degradedSeconds": 10.5,
      "ratio": "0.533"
    }
})json");
}

TEST_F(CrdE2E, StatusSchemaKeepsEveryFieldTheOperatorWrites) {
  TestNamespace ns("crd-status");
  JobYaml job;
  job.name = "full";
  ASSERT_EQ(
      Kubectl("apply -n " + ns.name() + " -f " + WriteManifest("full", job.Render())).exit_code, 0);
  const Json status = FullStatus();
  Json patch = {{"status", status}};
  patch["status"]["bogus"] = "pruned";  // not in the schema: must not be kept
  const std::string patch_file = WriteManifest("full-status", patch.dump());
  const CommandResult r = Kubectl("patch tpujob full -n " + ns.name() +
                                  " --subresource=status --type=merge --patch-file " + patch_file);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const Json stored = GetJson("tpujob full -n " + ns.name());
  ASSERT_TRUE(stored.contains("status")) << stored.dump(2);
  const Json& got = stored.at("status");
  // One field from each group, then the whole document.
  EXPECT_EQ(got.value("phase", ""), "Failed");
  EXPECT_EQ(got.at("conditions").at(4).value("reason", ""), "PermanentError");
  EXPECT_EQ(got.at("conditions").at(0).value("observedGeneration", -1), 3);
  EXPECT_EQ(got.value("jobRetries", -1), 1);
  EXPECT_EQ(got.at("replicaStatuses").at("Worker").value("restarts", -1), 4);
  EXPECT_EQ(got.at("workerRestarts").at("Worker-3").value("count", -1), 3);
  EXPECT_EQ(got.at("workerRestarts").at("Worker-3").value("podUID", ""),
            "0b9a0f6e-2222-4c3e-9a51-000000000003");
  EXPECT_EQ(got.value("runningAt", ""), "2026-01-02T03:02:00Z");
  EXPECT_EQ(got.value("queuePosition", -1), 4);
  EXPECT_EQ(got.value("reissued", false), true);
  EXPECT_EQ(got.at("faults").at(0).value("item", ""), "disk-size shm");
  EXPECT_EQ(got.at("cordonedNodes"), Json::parse(R"(["node-7", "node-9"])"));
  EXPECT_EQ(got.at("goodput").at("lostSeconds").value("uncheckpointed", -1.0), 9.125);
  EXPECT_FALSE(got.contains("bogus")) << "status keeps unknown fields";
  EXPECT_EQ(got, status) << "written:\n" << status.dump(2) << "\nread back:\n" << got.dump(2);

  // The wide printer columns show why the job failed.
  const CommandResult wide = Kubectl("get tj full -o wide -n " + ns.name());
  ASSERT_EQ(wide.exit_code, 0) << wide.output;
  for (const char* text :
       {"REASON", "MESSAGE", "Failed", "PermanentError", "Worker-1 exited 1 (permanent)", "1/2",
        "GOODPUT", "0.533", "tpu-v5-lite-podslice 2x4"}) {
    EXPECT_TRUE(Contains(wide.output, text)) << text << "\n" << wide.output;
  }
  const CommandResult narrow = Kubectl("get tj full -n " + ns.name());
  EXPECT_FALSE(Contains(narrow.output, "PermanentError")) << narrow.output;
  EXPECT_TRUE(Contains(narrow.output, "1/1")) << narrow.output;  // column SLICES
}

TEST_F(CrdE2E, StatusSchemaRejectsValuesOutsideItsEnums) {
  TestNamespace ns("crd-status-enum");
  JobYaml job;
  job.name = "enum";
  ASSERT_EQ(
      Kubectl("apply -n " + ns.name() + " -f " + WriteManifest("enum", job.Render())).exit_code, 0);
  const std::string target = "patch tpujob enum -n " + ns.name() + " --subresource=status ";
  CommandResult r = Kubectl(target + "--type=merge -p '{\"status\":{\"phase\":\"Paused\"}}'");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "status.phase: Unsupported value: \"Paused\"")) << r.output;
  r = Kubectl(target +
              "--type=merge -p '{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":"
              "\"Maybe\"}]}}'");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "Unsupported value: \"Maybe\"")) << r.output;
  r = Kubectl(target +
              "--type=merge -p '{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":"
              "\"True\"},{\"type\":\"Ready\",\"status\":\"False\"}]}}'");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "Duplicate value")) << r.output;
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
