// The record the lifecycle invariants are checked against (PodWatch in tpujob_env.h) against a
// real API server: it must hold every pod event even when its watch is cut in the middle, as the
// API server does to a watcher that falls behind a burst.

#include <gtest/gtest.h>

#include <string>

#include "e2e_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

std::string LabelledPod(const std::string& name, int index) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\n  labels:\n    tpujob.dev/job-name: w\n    tpujob.dev/replica-type: worker\n"
         "    tpujob.dev/replica-index: \"" +
         std::to_string(index) +
         "\"\n    tpujob.dev/attempt: \"1\"\nspec:\n  nodeSelector: {tpujob.dev/pod-watch-test: "
         "none}\n"
         "  containers:\n  - name: c\n    image: busybox\n";
}

TEST(PodWatchE2E, KeepsEveryEventWhenItsWatchIsCut) {
  TestNamespace ns("pod-watch");
  const std::string n = ns.name();
  PodWatch watch(n);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(ApplyYaml(n, LabelledPod("a" + std::to_string(i), i)).exit_code, 0);
  ASSERT_EQ(watch.CheckAfterCreations(3).creations, 3) << watch.Raw();
  // Cut the stream; what happens before the watch is open again must still be recorded.
  ASSERT_EQ(RunCommand("pkill -f 'namespaces/" + n + "/pods[?]watch=1'").exit_code, 0);
  ASSERT_EQ(Kubectl("delete pod a0 -n " + n + " --grace-period=0 --force").exit_code, 0);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(ApplyYaml(n, LabelledPod("b" + std::to_string(i), i + 3)).exit_code, 0);
  const PodWatch::Report report = watch.CheckAfterCreations(6);
  EXPECT_EQ(report.creations, 6) << watch.Raw();
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  // A pod of attempt 1 for replica 1 again, while a0 is gone but a1 lives: the record still knows
  // a1 (and that a0 was deleted during the cut).
  ASSERT_EQ(ApplyYaml(n, LabelledPod("c0", 0)).exit_code, 0);
  ASSERT_EQ(ApplyYaml(n, LabelledPod("c1", 1)).exit_code, 0);
  const PodWatch::Report after = watch.CheckAfterCreations(8);
  ASSERT_EQ(after.violations.size(), 1u) << testing::PrintToString(after.violations);
  EXPECT_NE(after.violations[0].find("two live pods for w/worker-1"), std::string::npos)
      << after.violations[0];
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
