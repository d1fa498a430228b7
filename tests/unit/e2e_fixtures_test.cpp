// The objects e2e/fixtures.h builds for the fake kubelet and the benchmarks, read back through the
// operator's own projections: what a test or a benchmark creates is what the operator sees.
#include <gtest/gtest.h>

#include "cache/objects.h"
#include "fixtures.h"
#include "policy/job_spec.h"

namespace tpujob::fixtures {
namespace TPUJOB_TEST_NS {

TEST(E2eFixturesTest, ANodeIsATaintedTpuHostWithItsSliceLabels) {
  FakeNode fake{.name = "tpu-0", .labels = TpuNodeLabels("tpu-v5-lite-podslice", "2x2", "pool-a")};
  auto node = cache::NodeInfo::FromJson(NodeManifest(fake));
  ASSERT_TRUE(node.has_value()) << node.error().message;
  EXPECT_EQ(node->name, "tpu-0");
  EXPECT_EQ(node->tpu_allocatable, 4);
  EXPECT_EQ(node->labels.Value("cloud.google.com/gke-tpu-accelerator"), "tpu-v5-lite-podslice");
  EXPECT_EQ(node->labels.Value("cloud.google.com/gke-tpu-topology"), "2x2");
  EXPECT_EQ(node->labels.Value("cloud.google.com/gke-nodepool"), "pool-a");
  const cache::Taint* taint = node->FindTaint(cache::kTpuResource);
  ASSERT_NE(taint, nullptr);
  EXPECT_EQ(taint->effect, cache::TaintEffect::kNoSchedule);

  auto plain = cache::NodeInfo::FromJson(
      NodeManifest({.name = "cpu-0", .labels = {}, .taint_key = "", .chips = 0}));
  ASSERT_TRUE(plain.has_value()) << plain.error().message;
  EXPECT_EQ(plain->tpu_allocatable, 0);
  EXPECT_TRUE(plain->taints.empty());
}

TEST(E2eFixturesTest, AWorkerPodIsBoundLabelledAndAsksForItsChips) {
  auto pod = cache::PodInfo::FromJson(
      WorkerPodManifest({.job = "j", .index = 3, .node = "tpu-1", .chips = 8}));
  ASSERT_TRUE(pod.has_value()) << pod.error().message;
  EXPECT_EQ(pod->name, "j-worker-3");
  EXPECT_EQ(pod->node_name, "tpu-1");
  EXPECT_EQ(pod->labels.Value(cache::kJobNameLabel), "j");
  EXPECT_EQ(pod->TpuRequest(), 8);
}

TEST(E2eFixturesTest, ATPUJobIsAValidSpecOfItsSlices) {
  Json manifest = TPUJobManifest({.name = "train", .topology = "4x4", .workers = 4, .slices = 2});
  manifest["metadata"]["namespace"] = "default";
  manifest["metadata"]["uid"] = "u";
  auto job = cache::TPUJobInfo::FromJson(manifest);
  ASSERT_TRUE(job.has_value()) << job.error().message;
  auto spec = policy::ParseJobSpec(*job);
  ASSERT_TRUE(spec.has_value()) << spec.error();
  EXPECT_EQ(spec->tpu.slices, 2);
  EXPECT_EQ(spec->tpu.chips_per_worker, 4);
}

TEST(E2eFixturesTest, ContainerStatusesReadAsTheKubeletsWould) {
  Json pod = WorkerPodManifest({.job = "j", .index = 0, .node = "tpu-0"});
  const std::string container = pod["spec"]["containers"][0]["name"];
  pod["status"] = {
      {"phase", "Running"},
      {"containerStatuses",
       {RestartedContainerStatus(container, "img", 2, 17, "boom", "2026-01-01T00:00:00Z")}}};
  auto restarted = cache::PodInfo::FromJson(pod);
  ASSERT_TRUE(restarted.has_value()) << restarted.error().message;
  const cache::ContainerInfo* c = restarted->FindContainer(container);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->restart_count, 2);
  EXPECT_TRUE(c->ready);
  EXPECT_EQ(c->state, cache::ContainerState::kRunning);

  pod["status"]["containerStatuses"] = {
      ContainerStatus(container, {{"terminated", {{"exitCode", 1}, {"reason", "Error"}}}}, "img")};
  auto failed = cache::PodInfo::FromJson(pod);
  ASSERT_TRUE(failed.has_value()) << failed.error().message;
  c = failed->FindContainer(container);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->state, cache::ContainerState::kTerminated);
  EXPECT_EQ(c->exit_code, 1);
}

TEST(E2eFixturesTest, AConditionPatchSetsOneConditionByType) {
  Json patch =
      NodeConditionPatch("TPUUnhealthy", "True", "ChipFault", "chip 2", "2026-01-01T00:00:00Z");
  ASSERT_TRUE(patch.contains("status"));
  const Json& conditions = patch["status"]["conditions"];
  ASSERT_EQ(conditions.size(), 1u);
  EXPECT_EQ(conditions[0]["type"], "TPUUnhealthy");
  EXPECT_EQ(conditions[0]["status"], "True");
  EXPECT_EQ(conditions[0]["reason"], "ChipFault");
  EXPECT_EQ(conditions[0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::fixtures
