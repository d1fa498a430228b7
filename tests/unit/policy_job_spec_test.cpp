#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "cache/objects.h"
#include "policy/job_spec.h"
#include "policy_fixtures.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using fixtures::ContainerTemplate;
using fixtures::MakeJob;
using fixtures::SpecJson;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::expected<JobSpec, std::string> Parse(const Json& spec, cache::LabelMap annotations = {}) {
  return ParseJobSpec(MakeJob(spec, Json::object(), std::move(annotations)));
}

std::string ErrorOf(const Json& spec, cache::LabelMap annotations = {}) {
  auto parsed = Parse(spec, std::move(annotations));
  if (parsed) return "<no error>";
  return parsed.error();
}

cache::LabelMap RetryAnnotation(std::string_view value) {
  return cache::LabelMap{{kJobRetryAnnotation, value}};
}

// --- ParseJobSpec: the minimal spec and its defaults --------------------------------------------

TEST(PolicyJobSpecTest, MinimalSpecTakesEveryDefault) {
  auto parsed = Parse(SpecJson(2));
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  const JobSpec& spec = *parsed;
  EXPECT_EQ(spec.priority, 0);
  EXPECT_EQ(spec.priority_class_name, "");
  EXPECT_EQ(spec.queue_timeout_seconds, std::nullopt);
  EXPECT_FALSE(spec.suspend);
  EXPECT_EQ(spec.ttl_seconds_after_finished, std::nullopt);
  EXPECT_EQ(spec.active_deadline_seconds, std::nullopt);
  EXPECT_EQ(spec.tpu.accelerator, "tpu-v5-lite-podslice");
  EXPECT_EQ(spec.tpu.topology, "2x4");
  EXPECT_EQ(spec.tpu.chips_per_worker, 4);
  EXPECT_FALSE(spec.master.has_value());
  EXPECT_EQ(spec.worker.replicas, 2);
  EXPECT_EQ(spec.worker.template_, ContainerTemplate());
  EXPECT_EQ(spec.success_policy, SuccessPolicy::kMaster);
  EXPECT_EQ(spec.checkpoint_path, "");

  const FaultTolerance& ft = spec.fault_tolerance;
  EXPECT_EQ(ft.max_job_retries, 0);
  EXPECT_EQ(ft.max_worker_restarts, 5);
  EXPECT_EQ(ft.exit_codes.permanent, (std::set<int32_t>{1, 137}));
  EXPECT_THAT(ft.exit_codes.retryable, IsEmpty());
  EXPECT_EQ(ft.exit_codes.permanent_reasons.size(), 1u);
  EXPECT_TRUE(ft.exit_codes.permanent_reasons.contains("OOMKilled"));
  EXPECT_TRUE(ft.cordon_faulty_nodes);
  EXPECT_EQ(ft.recovery, Recovery::kSlice);
  EXPECT_EQ(ft.maintenance_grace_period_seconds, 300);
  EXPECT_FALSE(ft.preflight_enabled);
  EXPECT_THAT(ft.preflight_checks, IsEmpty());
  EXPECT_EQ(ft.preflight_thresholds, Json::object());

  EXPECT_EQ(spec.Replicas(ReplicaType::kMaster), 0);
  EXPECT_EQ(spec.Replicas(ReplicaType::kWorker), 2);
  EXPECT_EQ(spec.Replica(ReplicaType::kMaster), nullptr);
  EXPECT_EQ(spec.Replica(ReplicaType::kWorker), &spec.worker);
}

TEST(PolicyJobSpecTest, ManagedByNamesWhoRunsTheJob) {
  Json spec = SpecJson();
  EXPECT_TRUE(ManagedByUs(MakeJob(spec)));
  spec["managedBy"] = "";
  EXPECT_TRUE(ManagedByUs(MakeJob(spec)));
  spec["managedBy"] = "tpujob.dev/operator";
  EXPECT_TRUE(ManagedByUs(MakeJob(spec)));
  spec["managedBy"] = "kueue.x-k8s.io/multikueue";
  EXPECT_FALSE(ManagedByUs(MakeJob(spec)));
  // Even an invalid spec is not ours when it says so.
  Json broken = {{"managedBy", "example.com/other"}};
  EXPECT_FALSE(ManagedByUs(MakeJob(broken)));
}

TEST(PolicyJobSpecTest, MasterIsOptionalAndDefaultsToOneReplica) {
  Json spec = SpecJson(2);
  spec["replicaSpecs"]["Master"] = {{"template", ContainerTemplate("coordinator")}};
  auto parsed = Parse(spec);
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  ASSERT_TRUE(parsed->master.has_value());
  EXPECT_EQ(parsed->master->replicas, 1);
  EXPECT_EQ(parsed->master->template_, ContainerTemplate("coordinator"));
  EXPECT_EQ(parsed->Replicas(ReplicaType::kMaster), 1);
  EXPECT_EQ(parsed->Replica(ReplicaType::kMaster), &*parsed->master);
  // The Master's chips do not count against the slice: 2 workers still make 2x4.
  EXPECT_EQ(parsed->worker.replicas, 2);

  spec["replicaSpecs"]["Master"]["replicas"] = 2;
  EXPECT_EQ(ErrorOf(spec), "spec.replicaSpecs.Master.replicas: 2 is outside [1, 1]");
}

TEST(PolicyJobSpecTest, EveryFieldIsRead) {
  Json spec = SpecJson(4, /*master=*/true);
  spec["priority"] = -7;
  spec["priorityClassName"] = "research";
  spec["queueTimeoutSeconds"] = 600;
  spec["suspend"] = true;
  spec["ttlSecondsAfterFinished"] = 0;
  spec["activeDeadlineSeconds"] = 3600;
  spec["successPolicy"] = "AllWorkers";
  spec["checkpoint"] = {{"path", "gs://bucket/run1"}};
  spec["faultTolerance"] = {
      {"maxJobRetries", 2},
      {"maxWorkerRestarts", 9},
      {"cordonFaultyNodes", false},
      {"recovery", "Job"},
      {"maintenanceGracePeriodSeconds", 60},
      {"exitCodes", {{"permanent", {3, 4}}, {"retryable", {5}}}},
      {"preflight",
       {{"enabled", true}, {"checks", {"dns", "disk"}}, {"thresholds", {{"shmGB", 2}}}}}};
  auto parsed = Parse(spec);
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  EXPECT_EQ(parsed->priority, -7);
  EXPECT_EQ(parsed->priority_class_name, "research");
  EXPECT_EQ(parsed->queue_timeout_seconds, 600);
  EXPECT_TRUE(parsed->suspend);
  EXPECT_EQ(parsed->ttl_seconds_after_finished, 0);  // 0 is a value: delete at once
  EXPECT_EQ(parsed->active_deadline_seconds, 3600);
  EXPECT_EQ(parsed->success_policy, SuccessPolicy::kAllWorkers);
  EXPECT_EQ(parsed->checkpoint_path, "gs://bucket/run1");
  EXPECT_EQ(parsed->tpu.topology, "2x8");
  EXPECT_EQ(parsed->worker.replicas, 4);
  const FaultTolerance& ft = parsed->fault_tolerance;
  EXPECT_EQ(ft.max_job_retries, 2);
  EXPECT_EQ(ft.max_worker_restarts, 9);
  EXPECT_FALSE(ft.cordon_faulty_nodes);
  EXPECT_EQ(ft.recovery, Recovery::kJob);
  EXPECT_EQ(ft.maintenance_grace_period_seconds, 60);
  EXPECT_EQ(ft.exit_codes.permanent, (std::set<int32_t>{3, 4}));
  EXPECT_EQ(ft.exit_codes.retryable, (std::set<int32_t>{5}));
  EXPECT_TRUE(ft.preflight_enabled);
  EXPECT_THAT(ft.preflight_checks, ElementsAre("dns", "disk"));
  EXPECT_EQ(ft.preflight_thresholds, (Json{{"shmGB", 2}}));
}

TEST(PolicyJobSpecTest, NullMembersCountAsAbsent) {
  Json spec = SpecJson(2);
  spec["priority"] = nullptr;
  spec["queueTimeoutSeconds"] = nullptr;
  spec["successPolicy"] = nullptr;
  spec["faultTolerance"] = {{"maxJobRetries", nullptr}, {"exitCodes", nullptr}};
  spec["replicaSpecs"]["Master"] = nullptr;
  auto parsed = Parse(spec);
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  EXPECT_EQ(parsed->priority, 0);
  EXPECT_EQ(parsed->queue_timeout_seconds, std::nullopt);
  EXPECT_FALSE(parsed->master.has_value());
  EXPECT_EQ(parsed->fault_tolerance.max_job_retries, 0);
  EXPECT_EQ(parsed->fault_tolerance.exit_codes.permanent, (std::set<int32_t>{1, 137}));
}

// --- ParseJobSpec: what is refused -----------------------------------------------------------

struct BadSpecCase {
  const char* name;
  Json spec;
  std::string error;
};

void PrintTo(const BadSpecCase& c, std::ostream* os) { *os << c.name; }

class PolicyJobSpecErrorTest : public ::testing::TestWithParam<BadSpecCase> {};

TEST_P(PolicyJobSpecErrorTest, IsRefusedWithAMessageNamingTheField) {
  EXPECT_EQ(ErrorOf(GetParam().spec), GetParam().error);
}

Json With(Json spec, const Json::json_pointer& at, Json value) {
  spec[at] = std::move(value);
  return spec;
}

Json Without(Json spec, const Json::json_pointer& at) {
  spec[at.parent_pointer()].erase(at.back());
  return spec;
}

using P = Json::json_pointer;

INSTANTIATE_TEST_SUITE_P(
    PolicyJobSpec, PolicyJobSpecErrorTest,
    ::testing::Values(
        BadSpecCase{"SpecNotObject", Json::array(), "spec: is required"},
        BadSpecCase{"NoTpu", Without(SpecJson(2), P("/tpu")), "spec.tpu: is required"},
        BadSpecCase{"NoAccelerator", Without(SpecJson(2), P("/tpu/accelerator")),
                    "spec.tpu.accelerator: is required"},
        BadSpecCase{"AcceleratorNotString", With(SpecJson(2), P("/tpu/accelerator"), 5),
                    "spec.tpu.accelerator: must be a string"},
        BadSpecCase{"NoTopology", Without(SpecJson(2), P("/tpu/topology")),
                    "spec.tpu.topology: \"\" is not a topology such as 2x4 or 4x4x4"},
        BadSpecCase{"TopologyTrailingX", With(SpecJson(2), P("/tpu/topology"), "2x"),
                    "spec.tpu.topology: \"2x\" is not a topology such as 2x4 or 4x4x4"},
        BadSpecCase{"TopologyZero", With(SpecJson(2), P("/tpu/topology"), "2x0x4"),
                    "spec.tpu.topology: \"2x0x4\" is not a topology such as 2x4 or 4x4x4"},
        BadSpecCase{"NoChipsPerWorker", Without(SpecJson(2), P("/tpu/chipsPerWorker")),
                    "spec.tpu.chipsPerWorker: is required"},
        BadSpecCase{"ChipsPerWorkerTooMany", With(SpecJson(2), P("/tpu/chipsPerWorker"), 9),
                    "spec.tpu.chipsPerWorker: 9 is outside [1, 8]"},
        BadSpecCase{"ChipsPerWorkerFloat", With(SpecJson(2), P("/tpu/chipsPerWorker"), 4.5),
                    "spec.tpu.chipsPerWorker: must be an integer"},
        BadSpecCase{"WorkersDoNotMakeTheSlice",
                    With(SpecJson(2), P("/replicaSpecs/Worker/replicas"), 3),
                    "spec.replicaSpecs.Worker.replicas: 3 workers of 4 chips do not make a 2x4 "
                    "slice (8 chips)"},
        BadSpecCase{"ChipsDoNotMakeTheSlice", With(SpecJson(2), P("/tpu/chipsPerWorker"), 2),
                    "spec.replicaSpecs.Worker.replicas: 2 workers of 2 chips do not make a 2x4 "
                    "slice (8 chips)"},
        BadSpecCase{"NoReplicaSpecs", Without(SpecJson(2), P("/replicaSpecs")),
                    "spec.replicaSpecs: is required"},
        BadSpecCase{"NoWorker", With(SpecJson(2), P("/replicaSpecs"), Json::object()),
                    "spec.replicaSpecs.Worker: is required"},
        BadSpecCase{"WorkerReplicasMissing",
                    Without(SpecJson(2), P("/replicaSpecs/Worker/replicas")),
                    "spec.replicaSpecs.Worker.replicas: is required"},
        BadSpecCase{"WorkerReplicasZero", With(SpecJson(2), P("/replicaSpecs/Worker/replicas"), 0),
                    "spec.replicaSpecs.Worker.replicas: 0 is outside [1, 4096]"},
        BadSpecCase{"WorkerNotObject", With(SpecJson(2), P("/replicaSpecs/Worker"), "x"),
                    "spec.replicaSpecs.Worker: must be an object"},
        BadSpecCase{"PS",
                    With(SpecJson(2), P("/replicaSpecs/PS"),
                         {{"replicas", 1}, {"template", ContainerTemplate()}}),
                    "spec.replicaSpecs.PS: parameter servers are not supported with TPUs; use "
                    "Master and Worker replicas"},
        BadSpecCase{"ParameterServer",
                    With(SpecJson(2), P("/replicaSpecs/ParameterServer"),
                         {{"replicas", 1}, {"template", ContainerTemplate()}}),
                    "spec.replicaSpecs.ParameterServer: parameter servers are not supported with "
                    "TPUs; use Master and Worker replicas"},
        BadSpecCase{"UnknownReplicaType",
                    With(SpecJson(2), P("/replicaSpecs/Evaluator"),
                         {{"replicas", 1}, {"template", ContainerTemplate()}}),
                    "spec.replicaSpecs.Evaluator: unknown replica type (Master or Worker)"},
        BadSpecCase{"NoTemplate", Without(SpecJson(2), P("/replicaSpecs/Worker/template")),
                    "spec.replicaSpecs.Worker.template: is required"},
        BadSpecCase{
            "TemplateWithoutContainers",
            With(SpecJson(2), P("/replicaSpecs/Worker/template/spec/containers"), Json::array()),
            "spec.replicaSpecs.Worker.template.spec.containers: at least one container "
            "is required"},
        BadSpecCase{"TemplateWithoutPodSpec",
                    With(SpecJson(2), P("/replicaSpecs/Worker/template"), Json::object()),
                    "spec.replicaSpecs.Worker.template.spec.containers: at least one container "
                    "is required"},
        BadSpecCase{"MasterTemplateWithoutContainers",
                    With(SpecJson(2), P("/replicaSpecs/Master"),
                         {{"replicas", 1}, {"template", {{"spec", Json::object()}}}}),
                    "spec.replicaSpecs.Master.template.spec.containers: at least one container "
                    "is required"},
        BadSpecCase{"ContainerWithoutName",
                    With(SpecJson(2), P("/replicaSpecs/Worker/template/spec/containers/1"),
                         {{"image", "x"}}),
                    "spec.replicaSpecs.Worker.template.spec.containers[1].name: is required"},
        BadSpecCase{"UnknownSuccessPolicy", With(SpecJson(2), P("/successPolicy"), "AnyWorker"),
                    "spec.successPolicy: \"AnyWorker\" is not Master or AllWorkers"},
        BadSpecCase{"QueueTimeoutZero", With(SpecJson(2), P("/queueTimeoutSeconds"), 0),
                    "spec.queueTimeoutSeconds: 0 is outside [1, 9223372036854775807]"},
        BadSpecCase{"SuspendString", With(SpecJson(2), P("/suspend"), "yes"),
                    "spec.suspend: must be true or false"},
        BadSpecCase{"TtlNegative", With(SpecJson(2), P("/ttlSecondsAfterFinished"), -1),
                    "spec.ttlSecondsAfterFinished: -1 is outside [0, 9223372036854775807]"},
        BadSpecCase{"DeadlineZero", With(SpecJson(2), P("/activeDeadlineSeconds"), 0),
                    "spec.activeDeadlineSeconds: 0 is outside [1, 9223372036854775807]"},
        BadSpecCase{"PriorityString", With(SpecJson(2), P("/priority"), "high"),
                    "spec.priority: must be an integer"},
        BadSpecCase{"FaultToleranceNotObject", With(SpecJson(2), P("/faultTolerance"), 3),
                    "spec.faultTolerance: must be an object"},
        BadSpecCase{"MaxJobRetriesTooMany",
                    With(SpecJson(2), P("/faultTolerance/maxJobRetries"), 4),
                    "spec.faultTolerance.maxJobRetries: 4 is outside [0, 3]"},
        BadSpecCase{"MaxWorkerRestartsNegative",
                    With(SpecJson(2), P("/faultTolerance/maxWorkerRestarts"), -1),
                    "spec.faultTolerance.maxWorkerRestarts: -1 is outside [0, 100]"},
        BadSpecCase{"CordonNotBool",
                    With(SpecJson(2), P("/faultTolerance/cordonFaultyNodes"), "yes"),
                    "spec.faultTolerance.cordonFaultyNodes: must be true or false"},
        BadSpecCase{"RecoveryUnknown", With(SpecJson(2), P("/faultTolerance/recovery"), "Pod"),
                    "spec.faultTolerance.recovery: \"Pod\" is not Slice or Job"},
        BadSpecCase{"GraceTooLong",
                    With(SpecJson(2), P("/faultTolerance/maintenanceGracePeriodSeconds"), 3601),
                    "spec.faultTolerance.maintenanceGracePeriodSeconds: 3601 is outside [0, 3600]"},
        BadSpecCase{"ExitCodesNotObject",
                    With(SpecJson(2), P("/faultTolerance/exitCodes"), Json::array()),
                    "spec.faultTolerance.exitCodes: must be an object"},
        BadSpecCase{"PermanentNotList",
                    With(SpecJson(2), P("/faultTolerance/exitCodes/permanent"), 1),
                    "spec.faultTolerance.exitCodes.permanent: must be a list of exit codes"},
        BadSpecCase{"ExitCodeZero",
                    With(SpecJson(2), P("/faultTolerance/exitCodes/permanent"), {0}),
                    "spec.faultTolerance.exitCodes.permanent: 0 is not an exit code between 1 and "
                    "255"},
        BadSpecCase{"ExitCode256",
                    With(SpecJson(2), P("/faultTolerance/exitCodes/retryable"), {143, 256}),
                    "spec.faultTolerance.exitCodes.retryable: 256 is not an exit code between 1 "
                    "and 255"},
        BadSpecCase{"ExitCodeNegative",
                    With(SpecJson(2), P("/faultTolerance/exitCodes/retryable"), {-1}),
                    "spec.faultTolerance.exitCodes.retryable: -1 is not an exit code between 1 "
                    "and 255"},
        BadSpecCase{"ExitCodeString",
                    With(SpecJson(2), P("/faultTolerance/exitCodes/permanent"), {"1"}),
                    "spec.faultTolerance.exitCodes.permanent: \"1\" is not an exit code between "
                    "1 and 255"},
        BadSpecCase{"PermanentAndRetryableOverlap",
                    With(SpecJson(2), P("/faultTolerance/exitCodes"),
                         {{"permanent", {1, 137}}, {"retryable", {137, 143}}}),
                    "spec.faultTolerance.exitCodes: 137 is listed both permanent and retryable"},
        BadSpecCase{"PreflightChecksNotNames",
                    With(SpecJson(2), P("/faultTolerance/preflight/checks"), {"dns", 3}),
                    "spec.faultTolerance.preflight.checks: must be names"},
        BadSpecCase{"CheckpointNotObject", With(SpecJson(2), P("/checkpoint"), "gs://x"),
                    "spec.checkpoint: must be an object"}),
    [](const ::testing::TestParamInfo<BadSpecCase>& info) { return info.param.name; });

TEST(PolicyJobSpecTest, RetryableOverridesADefaultPermanentCode) {
  Json spec = SpecJson(2);
  spec["faultTolerance"] = {{"exitCodes", {{"retryable", {1}}}}};
  auto parsed = Parse(spec);
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  const ExitCodeRules& rules = parsed->fault_tolerance.exit_codes;
  EXPECT_EQ(rules.permanent, (std::set<int32_t>{137}));
  EXPECT_EQ(rules.retryable, (std::set<int32_t>{1}));
  EXPECT_EQ(ClassifyExit(rules, 1, "Error"), ExitClass::kRetryable);
  EXPECT_EQ(ClassifyExit(rules, 137, "Error"), ExitClass::kPermanent);
}

TEST(PolicyJobSpecTest, ExplicitPermanentReplacesTheDefaults) {
  Json spec = SpecJson(2);
  spec["faultTolerance"] = {{"exitCodes", {{"permanent", {42}}}}};
  auto parsed = Parse(spec);
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  const ExitCodeRules& rules = parsed->fault_tolerance.exit_codes;
  EXPECT_EQ(rules.permanent, (std::set<int32_t>{42}));
  EXPECT_EQ(ClassifyExit(rules, 42, "Error"), ExitClass::kPermanent);
  EXPECT_EQ(ClassifyExit(rules, 1, "Error"), ExitClass::kRetryable);
  // The OOM rule is on the reason, not on a code: it stays.
  EXPECT_EQ(ClassifyExit(rules, 137, "OOMKilled"), ExitClass::kPermanent);
}

// --- The fault-tolerance/job-retry-num annotation --------------------------------------------

TEST(PolicyJobSpecTest, RetryAnnotationAcceptsZeroToThree) {
  for (int n = 0; n <= 3; ++n) {
    SCOPED_TRACE(n);
    auto parsed = Parse(SpecJson(2), RetryAnnotation(std::to_string(n)));
    ASSERT_TRUE(parsed.has_value()) << parsed.error();
    EXPECT_EQ(parsed->fault_tolerance.max_job_retries, n);
  }
}

// As docs/api.md's four fault cases say, opting into re-issue with the annotation turns the
// environment check on; the spec can still turn it off, and maxJobRetries alone does not.
TEST(PolicyJobSpecTest, RetryAnnotationTurnsPreflightOnUnlessTheSpecSaysOtherwise) {
  auto parsed = Parse(SpecJson(2), RetryAnnotation("2"));
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  EXPECT_TRUE(parsed->fault_tolerance.preflight_enabled);
  EXPECT_FALSE(Parse(SpecJson(2), RetryAnnotation("0"))->fault_tolerance.preflight_enabled);

  Json off = SpecJson(2);
  off["faultTolerance"] = {{"preflight", {{"enabled", false}}}};
  EXPECT_FALSE(Parse(off, RetryAnnotation("2"))->fault_tolerance.preflight_enabled);
  Json checks_only = SpecJson(2);
  checks_only["faultTolerance"] = {{"preflight", {{"checks", {"dns"}}}}};
  EXPECT_TRUE(Parse(checks_only, RetryAnnotation("1"))->fault_tolerance.preflight_enabled);
  EXPECT_FALSE(Parse(checks_only)->fault_tolerance.preflight_enabled);

  Json spec_retries = SpecJson(2);
  spec_retries["faultTolerance"] = {{"maxJobRetries", 2}};
  EXPECT_FALSE(Parse(spec_retries)->fault_tolerance.preflight_enabled);
}

TEST(PolicyJobSpecTest, HighSpeedNetworkIsReadFromTheTpuSpec) {
  EXPECT_FALSE(Parse(SpecJson(2))->tpu.high_speed_network);
  Json spec = SpecJson(2);
  spec["tpu"]["highSpeedNetwork"] = true;
  EXPECT_TRUE(Parse(spec)->tpu.high_speed_network);
  spec["tpu"]["highSpeedNetwork"] = "yes";
  EXPECT_EQ(ErrorOf(spec), "spec.tpu.highSpeedNetwork: must be true or false");
}

TEST(PolicyJobSpecTest, RetryAnnotationRejectsAnythingElse) {
  for (const char* value : {"4", "-1", "five", "", " 2", "2 ", "+1", "1.0", "0x1", "99999999999"}) {
    SCOPED_TRACE(value);
    const std::string error = ErrorOf(SpecJson(2), RetryAnnotation(value));
    EXPECT_EQ(error, "annotation fault-tolerance/job-retry-num: \"" + std::string(value) +
                         "\" is not a number between 0 and 3 (the maximum re-issues of the job; 0 "
                         "turns re-issue off)");
  }
}

TEST(PolicyJobSpecTest, RetryAnnotationAndSpecMustAgree) {
  Json spec = SpecJson(2);
  spec["faultTolerance"] = {{"maxJobRetries", 2}};
  auto agree = Parse(spec, RetryAnnotation("2"));
  ASSERT_TRUE(agree.has_value()) << agree.error();
  EXPECT_EQ(agree->fault_tolerance.max_job_retries, 2);

  EXPECT_EQ(ErrorOf(spec, RetryAnnotation("3")),
            "annotation fault-tolerance/job-retry-num (\"3\") disagrees with "
            "spec.faultTolerance.maxJobRetries (2); set one of them");
  spec["faultTolerance"]["maxJobRetries"] = 0;
  EXPECT_THAT(ErrorOf(spec, RetryAnnotation("1")), HasSubstr("disagrees"));
}

TEST(PolicyJobSpecTest, RetriesComeFromWhicheverIsSet) {
  // Annotation only.
  auto annotation = Parse(SpecJson(2), RetryAnnotation("3"));
  ASSERT_TRUE(annotation.has_value()) << annotation.error();
  EXPECT_EQ(annotation->fault_tolerance.max_job_retries, 3);
  // Annotation only, with a faultTolerance block that leaves maxJobRetries out.
  Json spec = SpecJson(2);
  spec["faultTolerance"] = {{"maxWorkerRestarts", 1}};
  auto partial = Parse(spec, RetryAnnotation("1"));
  ASSERT_TRUE(partial.has_value()) << partial.error();
  EXPECT_EQ(partial->fault_tolerance.max_job_retries, 1);
  EXPECT_EQ(partial->fault_tolerance.max_worker_restarts, 1);
  // Spec only.
  spec["faultTolerance"]["maxJobRetries"] = 2;
  auto only_spec = Parse(spec);
  ASSERT_TRUE(only_spec.has_value()) << only_spec.error();
  EXPECT_EQ(only_spec->fault_tolerance.max_job_retries, 2);
  // Neither.
  auto neither = Parse(SpecJson(2));
  ASSERT_TRUE(neither.has_value()) << neither.error();
  EXPECT_EQ(neither->fault_tolerance.max_job_retries, 0);
}

TEST(PolicyJobSpecTest, OtherAnnotationsAreIgnored) {
  auto parsed = Parse(SpecJson(2), cache::LabelMap{{"fault-tolerance/other", "x"}});
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  EXPECT_EQ(parsed->fault_tolerance.max_job_retries, 0);
}

// --- TopologyChips ---------------------------------------------------------------------------

TpuSpec Topology(const char* topology) {
  TpuSpec tpu;
  tpu.topology = topology;
  return tpu;
}

TEST(PolicyTopologyTest, ChipsAreTheProductOfTheDimensions) {
  struct Case {
    const char* topology;
    int64_t chips;
  };
  for (const Case& c :
       {Case{"2x4", 8}, Case{"4x4", 16}, Case{"1x1", 1}, Case{"2x2x1", 4}, Case{"4x4x4", 64},
        Case{"2x4x8", 64}, Case{"8", 8}, Case{"16x16x16", 4096}}) {
    SCOPED_TRACE(c.topology);
    EXPECT_EQ(Topology(c.topology).TopologyChips(), c.chips);
  }
}

TEST(PolicyTopologyTest, MalformedTopologiesHaveNoChips) {
  for (const char* topology :
       {"", "x", "2x", "x4", "2xx4", "2x0", "0x4", "-2x4", "2x-4", "2X4", "2*4", "2x4 ", " 2x4",
        "a", "2xa", "+2x4", "65536x65536", "2147483647x2"}) {
    SCOPED_TRACE(topology);
    EXPECT_EQ(Topology(topology).TopologyChips(), 0);
  }
}

TEST(PolicyTopologyTest, ThreeDimensionalSliceMatchesItsWorkers) {
  Json spec = SpecJson(2);
  spec["tpu"]["topology"] = "2x2x4";
  spec["replicaSpecs"]["Worker"]["replicas"] = 4;
  auto parsed = Parse(spec);
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  EXPECT_EQ(parsed->tpu.TopologyChips(), 16);

  spec["replicaSpecs"]["Worker"]["replicas"] = 2;
  EXPECT_EQ(ErrorOf(spec),
            "spec.replicaSpecs.Worker.replicas: 2 workers of 4 chips do not make a 2x2x4 slice "
            "(16 chips)");
}

// --- ClassifyExit ----------------------------------------------------------------------------

TEST(PolicyClassifyExitTest, Defaults) {
  const ExitCodeRules rules;
  struct Case {
    int32_t code;
    const char* reason;
    ExitClass want;
  };
  for (const Case& c :
       {Case{1, "Error", ExitClass::kPermanent}, Case{137, "Error", ExitClass::kPermanent},
        Case{137, "OOMKilled", ExitClass::kPermanent}, Case{143, "Error", ExitClass::kRetryable},
        Case{2, "Error", ExitClass::kRetryable}, Case{139, "Error", ExitClass::kRetryable},
        Case{255, "", ExitClass::kRetryable}, Case{143, "OOMKilled", ExitClass::kPermanent},
        Case{2, "OOMKilled", ExitClass::kPermanent},
        Case{143, "oomkilled", ExitClass::kRetryable}}) {
    SCOPED_TRACE(std::to_string(c.code) + " " + c.reason);
    EXPECT_EQ(ClassifyExit(rules, c.code, c.reason), c.want);
  }
}

TEST(PolicyClassifyExitTest, Overrides) {
  ExitCodeRules rules;
  rules.permanent = {3};
  rules.retryable = {1};
  rules.permanent_reasons = {"ContainerCannotRun"};
  EXPECT_EQ(ClassifyExit(rules, 3, "Error"), ExitClass::kPermanent);
  EXPECT_EQ(ClassifyExit(rules, 1, "Error"), ExitClass::kRetryable);
  EXPECT_EQ(ClassifyExit(rules, 137, "Error"), ExitClass::kRetryable);
  EXPECT_EQ(ClassifyExit(rules, 137, "OOMKilled"), ExitClass::kRetryable);
  EXPECT_EQ(ClassifyExit(rules, 128, "ContainerCannotRun"), ExitClass::kPermanent);
}

// A job that lists 137 retryable (to retry a SIGKILL after the maintenance grace period) must
// still fail on an out-of-memory kill: the reason wins over the code lists.
TEST(PolicyClassifyExitTest, OomKilledIsPermanentEvenWhenItsCodeIsRetryable) {
  Json spec = SpecJson(2);
  spec["faultTolerance"] = {{"exitCodes", {{"retryable", {137, 143}}}}};
  auto parsed = Parse(spec);
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  const ExitCodeRules& rules = parsed->fault_tolerance.exit_codes;
  EXPECT_EQ(ClassifyExit(rules, 137, "Error"), ExitClass::kRetryable);
  EXPECT_EQ(ClassifyExit(rules, 137, "OOMKilled"), ExitClass::kPermanent);
  EXPECT_EQ(ClassifyExit(rules, 143, "OOMKilled"), ExitClass::kPermanent);
}

TEST(PolicyClassifyExitTest, Names) {
  EXPECT_EQ(ToString(ExitClass::kPermanent), "permanent");
  EXPECT_EQ(ToString(ExitClass::kRetryable), "retryable");
  EXPECT_EQ(ToString(ReplicaType::kMaster), "Master");
  EXPECT_EQ(ToString(ReplicaType::kWorker), "Worker");
  EXPECT_EQ(LowerName(ReplicaType::kMaster), "master");
  EXPECT_EQ(LowerName(ReplicaType::kWorker), "worker");
  EXPECT_EQ(ToString(SuccessPolicy::kMaster), "Master");
  EXPECT_EQ(ToString(SuccessPolicy::kAllWorkers), "AllWorkers");
}

TEST(PolicyJobSpecTest, SlicesDefaultToOneAndMultiplyTheWorkers) {
  auto single = Parse(SpecJson(2));
  ASSERT_TRUE(single.has_value()) << single.error();
  EXPECT_EQ(single->tpu.slices, 1);
  EXPECT_FALSE(single->Multislice());
  EXPECT_EQ(single->Replicas(ReplicaType::kWorker), 2);

  Json spec = SpecJson(4);
  spec["tpu"]["slices"] = 3;
  auto multi = Parse(spec);
  ASSERT_TRUE(multi.has_value()) << multi.error();
  EXPECT_EQ(multi->tpu.slices, 3);
  EXPECT_TRUE(multi->Multislice());
  EXPECT_EQ(multi->HostsPerSlice(), 4);
  EXPECT_EQ(multi->Replicas(ReplicaType::kWorker), 12);
  EXPECT_EQ(multi->SliceOf(7), 1);
  EXPECT_EQ(multi->HostOf(7), 3);
}

TEST(PolicyJobSpecTest, SlicesOutsideTheirBoundsAreRefused) {
  Json spec = SpecJson(2);
  spec["tpu"]["slices"] = 0;
  EXPECT_EQ(ErrorOf(spec), "spec.tpu.slices: 0 is outside [1, 64]");
  spec["tpu"]["slices"] = 65;
  EXPECT_EQ(ErrorOf(spec), "spec.tpu.slices: 65 is outside [1, 64]");
  spec["tpu"]["slices"] = "two";
  EXPECT_EQ(ErrorOf(spec), "spec.tpu.slices: must be an integer");
  // 64 slices of 512 hosts: more worker pods than a job may have.
  Json big = SpecJson(512);
  big["tpu"]["topology"] = "32x64";
  big["tpu"]["slices"] = 64;
  EXPECT_EQ(ErrorOf(big),
            "spec.tpu.slices: 64 slices of 512 workers make 32768 worker pods, more than 16384");
  big["tpu"]["slices"] = 32;
  EXPECT_EQ(ErrorOf(big), "<no error>");
}

// --- spec.tpu.type -------------------------------------------------------------------------------

// A spec that names its slice by type only: no accelerator, topology, chipsPerWorker or Worker
// replicas.
Json TypedSpec(std::string_view type) {
  Json spec = SpecJson(2);
  spec["tpu"] = {{"type", type}};
  spec["replicaSpecs"]["Worker"].erase("replicas");
  return spec;
}

TEST(PolicyJobSpecTpuTypeTest, TypeAloneDerivesTheSlice) {
  auto parsed = Parse(TypedSpec("v5p-128"));
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  EXPECT_EQ(parsed->tpu.type, "v5p-128");
  EXPECT_EQ(parsed->tpu.accelerator, "tpu-v5p-slice");
  EXPECT_EQ(parsed->tpu.topology, "4x4x4");
  EXPECT_EQ(parsed->tpu.chips_per_worker, 4);
  EXPECT_EQ(parsed->worker.replicas, 16);
  EXPECT_EQ(parsed->HostsPerSlice(), 16);
  EXPECT_EQ(parsed->Replicas(ReplicaType::kWorker), 16);
}

TEST(PolicyJobSpecTpuTypeTest, SingleHostTypesAndTopologyNames) {
  struct Case {
    const char* type;
    const char* accelerator;
    const char* topology;
    int32_t chips;
    int32_t hosts;
  };
  for (const Case& c :
       {Case{"v5litepod-1", "tpu-v5-lite-podslice", "1x1", 1, 1},
        Case{"v5litepod-4", "tpu-v5-lite-podslice", "2x2", 4, 1},
        Case{"v5litepod-8", "tpu-v5-lite-podslice", "2x4", 8, 1},
        Case{"v6e-8", "tpu-v6e-slice", "2x4", 8, 1}, Case{"v6e-4x8", "tpu-v6e-slice", "4x8", 4, 8},
        Case{"v4-8", "tpu-v4-podslice", "2x2x1", 4, 1},
        Case{"tpu7x-4x4x4", "tpu7x", "4x4x4", 4, 16}}) {
    auto parsed = Parse(TypedSpec(c.type));
    ASSERT_TRUE(parsed.has_value()) << c.type << ": " << parsed.error();
    EXPECT_EQ(parsed->tpu.accelerator, c.accelerator) << c.type;
    EXPECT_EQ(parsed->tpu.topology, c.topology) << c.type;
    EXPECT_EQ(parsed->tpu.chips_per_worker, c.chips) << c.type;
    EXPECT_EQ(parsed->worker.replicas, c.hosts) << c.type;
  }
}

TEST(PolicyJobSpecTpuTypeTest, ExplicitFieldsThatAgreeAreAccepted) {
  Json spec = TypedSpec("v5litepod-16");
  spec["tpu"]["accelerator"] = "tpu-v5-lite-podslice";
  spec["tpu"]["topology"] = "4x4";
  spec["tpu"]["chipsPerWorker"] = 4;
  spec["tpu"]["slices"] = 2;
  spec["replicaSpecs"]["Worker"]["replicas"] = 4;
  auto parsed = Parse(spec);
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  EXPECT_EQ(parsed->Replicas(ReplicaType::kWorker), 8);
}

TEST(PolicyJobSpecTpuTypeTest, ExplicitFieldsThatDisagreeAreInvalidAndSayWhatTheTypeMeans) {
  Json topology = TypedSpec("v5p-128");
  topology["tpu"]["topology"] = "2x4x8";
  EXPECT_EQ(ErrorOf(topology),
            "spec.tpu.topology: \"2x4x8\" disagrees with spec.tpu.type v5p-128, whose topology "
            "is 4x4x4; leave topology out or set it to 4x4x4");

  Json accelerator = TypedSpec("v6e-16");
  accelerator["tpu"]["accelerator"] = "tpu-v5-lite-podslice";
  EXPECT_THAT(ErrorOf(accelerator),
              HasSubstr("spec.tpu.accelerator: \"tpu-v5-lite-podslice\" disagrees with "
                        "spec.tpu.type v6e-16, whose accelerator is tpu-v6e-slice"));

  Json chips = TypedSpec("v6e-8");
  chips["tpu"]["chipsPerWorker"] = 4;
  EXPECT_EQ(ErrorOf(chips),
            "spec.tpu.chipsPerWorker: 4 disagrees with spec.tpu.type v6e-8, whose hosts have 8 "
            "chips; leave chipsPerWorker out or set it to 8");

  Json replicas = TypedSpec("v5p-128");
  replicas["replicaSpecs"]["Worker"]["replicas"] = 8;
  EXPECT_EQ(ErrorOf(replicas),
            "spec.replicaSpecs.Worker.replicas: 8 disagrees with spec.tpu.type, whose 4x4x4 slice "
            "has 16 hosts; leave replicas out or set it to 16");
}

TEST(PolicyJobSpecTpuTypeTest, UnknownTypesAreInvalidWithTheValidChoices) {
  EXPECT_THAT(ErrorOf(TypedSpec("v5p-100")),
              HasSubstr("spec.tpu.type: \"v5p-100\" is not a v5p TPU type; v5p types are: "
                        "v5p-8, v5p-16,"));
  EXPECT_THAT(ErrorOf(TypedSpec("v3-8")),
              HasSubstr("spec.tpu.type: \"v3-8\" is not a TPU type: the generation must be one "
                        "of v4, v5litepod (v5e), v5p, v6e, tpu7x"));
  Json number = TypedSpec("v5p-8");
  number["tpu"]["type"] = 8;
  EXPECT_EQ(ErrorOf(number), "spec.tpu.type: must be a string");
}

TEST(PolicyJobSpecTpuTypeTest, WithoutTypeTheFieldsAreStillRequired) {
  Json spec = SpecJson(2);
  spec["tpu"].erase("accelerator");
  EXPECT_EQ(ErrorOf(spec), "spec.tpu.accelerator: is required");
  spec = SpecJson(2);
  spec["replicaSpecs"]["Worker"].erase("replicas");
  EXPECT_EQ(ErrorOf(spec), "spec.replicaSpecs.Worker.replicas: is required");
  spec = SpecJson(2);
  spec["tpu"].erase("chipsPerWorker");
  EXPECT_EQ(ErrorOf(spec), "spec.tpu.chipsPerWorker: is required");
}

TEST(PolicyJobSpecTpuTypeTest, SlicesOfATypeStillCountAgainstTheWorkerLimit) {
  Json spec = TypedSpec("tpu7x-16384");  // 2048 hosts per slice
  spec["tpu"]["slices"] = 9;
  EXPECT_THAT(ErrorOf(spec), HasSubstr("spec.tpu.slices: 9 slices of 2048 workers"));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
