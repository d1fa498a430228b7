// The end-to-end tests' reads through the client print what `kubectl get -o jsonpath` prints for
// the templates they use (e2e/jsonpath.h), and leave every other template to kubectl.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "jsonpath.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

const nlohmann::json& Job() {
  static const nlohmann::json job = nlohmann::json::parse(R"({
    "metadata": {"name": "j", "uid": "u-1",
                 "labels": {"tpujob.dev/attempt": "2", "cloud.google.com/gke-nodepool": "p"}},
    "spec": {"unschedulable": true, "containers": [{"command": ["sh", "-c"]}]},
    "status": {"phase": "Running", "attempt": 2, "jobRetries": 0, "ready": false,
               "faults": [{"kind": "NodeFailure", "action": "Recreate"},
                          {"kind": "Preempted", "action": "Requeue", "node": "n-2"}],
               "cordonedNodes": ["n-1", "n-2"], "sliceSlots": [0, 2], "empty": [],
               "ratio": 0.5, "nothing": null,
               "allocatable": {"google.com/tpu": "4"},
               "conditions": [{"type": "Admitted", "status": "True", "reason": "Fits"},
                              {"type": "Ready", "status": "False", "ready": true},
                              {"type": "Degraded", "status": "True", "reason": "SliceLost",
                               "detail": {"slice": "1"}}]}
  })");
  return job;
}

std::optional<std::string> Print(const std::string& tmpl) { return JsonPathText(Job(), tmpl); }

TEST(E2eJsonPathTest, PrintsFieldsAsKubectlDoes) {
  EXPECT_EQ(Print("{.status.phase}"), "Running");
  EXPECT_EQ(Print("{.status.attempt}"), "2");
  EXPECT_EQ(Print("{.status.jobRetries}"), "0");
  EXPECT_EQ(Print("{.spec.unschedulable}"), "true");
  EXPECT_EQ(Print("{.status.ready}"), "false");
  EXPECT_EQ(Print("{.metadata.uid}"), "u-1");
}

TEST(E2eJsonPathTest, JoinsExpressionsWithTheTextBetweenThem) {
  EXPECT_EQ(Print("{.status.attempt}/{.status.phase}"), "2/Running");
  EXPECT_EQ(Print("attempt {.status.attempt} of {.metadata.name}."), "attempt 2 of j.");
}

TEST(E2eJsonPathTest, EscapedDotsBelongToTheFieldName) {
  EXPECT_EQ(Print("{.metadata.labels.tpujob\\.dev/attempt}"), "2");
  EXPECT_EQ(Print("{.metadata.labels.cloud\\.google\\.com/gke-nodepool}"), "p");
  EXPECT_EQ(Print("{.status.allocatable.google\\.com/tpu}"), "4");
}

TEST(E2eJsonPathTest, IndexesLastElementAndEveryElement) {
  EXPECT_EQ(Print("{.status.faults[0].kind}"), "NodeFailure");
  EXPECT_EQ(Print("{.status.faults[1].action}"), "Requeue");
  EXPECT_EQ(Print("{.status.faults[-1:].kind} {.status.faults[-1:].node}"), "Preempted n-2");
  EXPECT_EQ(Print("{.status.faults[*].action}"), "Recreate Requeue");
  EXPECT_EQ(Print("{.status.cordonedNodes[*]}"), "n-1 n-2");
  EXPECT_EQ(Print("{.spec.containers[0].command[0]}"), "sh");
  // A wildcard skips the elements that lack the field, as kubectl does.
  EXPECT_EQ(Print("{.status.faults[*].node}"), "n-2");
}

TEST(E2eJsonPathTest, FiltersSelectTheElementsWhoseStringFieldIsTheText) {
  EXPECT_EQ(Print("{.status.conditions[?(@.type==\"Ready\")].status}"), "False");
  EXPECT_EQ(Print("{.status.conditions[?(@.type=='Admitted')].reason}"), "Fits");
  EXPECT_EQ(Print("{.status.conditions[?(@.type==\"Degraded\")].status}/"
                  "{.status.conditions[?(@.type==\"Degraded\")].reason}"),
            "True/SliceLost");
  // Every element that matches, one space apart; an element without the field is skipped.
  EXPECT_EQ(Print("{.status.faults[?(@.action==\"Requeue\")].node}"), "n-2");
  EXPECT_EQ(Print("{.status.conditions[?(@.status==\"True\")].type}"), "Admitted Degraded");
  EXPECT_EQ(Print("{.status.conditions[?(@.detail.slice==\"1\")].type}"), "Degraded");
  EXPECT_EQ(Print("{.status.conditions[?(@.type==\"Failed\")].status}"), "");
  EXPECT_EQ(Print("{.status.missing[?(@.type==\"Ready\")].status}"), "");
}

TEST(E2eJsonPathTest, MissingFieldsAndElementsPrintNothing) {
  EXPECT_EQ(Print("{.status.queuePosition}"), "");
  EXPECT_EQ(Print("{.status.progress.step}"), "");
  EXPECT_EQ(Print("{.status.faults[5].kind}"), "");
  EXPECT_EQ(Print("{.status.empty[-1:].kind}"), "");
  EXPECT_EQ(Print("{.status.empty[*]}"), "");
  EXPECT_EQ(Print("[{.status.phase.deeper}]"), "[]");
}

TEST(E2eJsonPathTest, LeavesKubectlsOwnRenderingsAndSyntaxToKubectl) {
  // Objects, arrays, nulls and non-integral numbers print in kubectl's own way.
  EXPECT_EQ(Print("{.status}"), std::nullopt);
  EXPECT_EQ(Print("{.status.sliceSlots}"), std::nullopt);
  EXPECT_EQ(Print("{.status.nothing}"), std::nullopt);
  EXPECT_EQ(Print("{.status.ratio}"), std::nullopt);
  // Ranges, filters, functions and unbalanced braces.
  EXPECT_EQ(Print("{range .status.faults[*]}{.kind}{\"\\n\"}{end}"), std::nullopt);
  EXPECT_EQ(Print("{.status.faults[?(@.kind!=\"Preempted\")].node}"), std::nullopt);
  EXPECT_EQ(Print("{.status.faults[?(@.kind==Preempted)].node}"), std::nullopt);
  EXPECT_EQ(Print("{.status.conditions[?(@.ready==\"true\")].type}"), std::nullopt);  // a bool
  EXPECT_EQ(Print("{.metadata[?(@.name==\"j\")].uid}"), std::nullopt);  // not an array
  EXPECT_EQ(Print("{.metadata.labels['tpujob.dev/attempt']}"), std::nullopt);
  EXPECT_EQ(Print("{.status.phase"), std::nullopt);
  EXPECT_EQ(Print("x}{.status.phase}"), std::nullopt);
  EXPECT_EQ(Print("{status.phase}"), std::nullopt);
  EXPECT_EQ(Print("{.status..phase}"), std::nullopt);
  // A wildcard over an object's values: kubectl's order is its own.
  EXPECT_EQ(Print("{.metadata.labels[*]}"), std::nullopt);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
