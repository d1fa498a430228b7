#include <gtest/gtest.h>

#include <chrono>

#include "cache/intern.h"
#include "cache/objects.h"

namespace tpujob::cache {
namespace TPUJOB_TEST_NS {

using std::chrono::seconds;

// A worker pod as the API server returns it after the pre-flight init container failed.
constexpr const char* kFailedPreflightPod = R"json({
  "apiVersion": "v1",
  "kind": "Pod",
  "metadata": {
    "name": "llm-pretrain-worker-1",
    "namespace": "team-a",
    "uid": "5f1c7a3e-7d7e-4f1e-9f43-2b1c0a1d9e01",
    "resourceVersion": "123456",
    "generation": 1,
    "creationTimestamp": "2024-05-01T10:00:00Z",
    "labels": {
      "tpujob.dev/job-name": "llm-pretrain",
      "tpujob.dev/replica-type": "worker",
      "tpujob.dev/replica-index": "1",
      "tpujob.dev/attempt": "2"
    },
    "annotations": {"kubectl.kubernetes.io/default-container": "trainer"},
    "ownerReferences": [
      {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "x"},
      {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TPUJob", "name": "llm-pretrain",
       "uid": "0b7a6c1e-1111-2222-3333-444455556666", "controller": true,
       "blockOwnerDeletion": true}
    ],
    "managedFields": [{"manager": "tpujob-operator", "operation": "Apply",
                       "fieldsV1": {"f:metadata": {"f:labels": {}}}}]
  },
  "spec": {
    "nodeName": "gke-tpu-pool-a-1",
    "restartPolicy": "Never",
    "initContainers": [{
      "name": "preflight",
      "image": "tpujob-operator:dev",
      "args": ["preflight"],
      "resources": {"requests": {"cpu": "100m", "google.com/tpu": "4"},
                    "limits": {"google.com/tpu": "4"}}
    }],
    "containers": [{
      "name": "trainer",
      "image": "trainer:1",
      "env": [{"name": "TPU_WORKER_ID", "value": "1"}],
      "resources": {"limits": {"google.com/tpu": "4", "memory": "64Gi"}}
    }, {
      "name": "sidecar",
      "image": "logger:1"
    }]
  },
  "status": {
    "phase": "Failed",
    "podIP": "10.4.2.17",
    "conditions": [
      {"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized"},
      {"type": "Ready", "status": "False", "reason": "PodFailed"},
      {"type": "PodScheduled", "status": "True"}
    ],
    "initContainerStatuses": [{
      "name": "preflight",
      "ready": false,
      "restartCount": 0,
      "image": "tpujob-operator:dev",
      "state": {"terminated": {
        "exitCode": 3,
        "reason": "Error",
        "message": "{\"node\":\"gke-tpu-pool-a-1\",\"items\":[{\"item\":\"dns\",\"ok\":false,\"detail\":\"llm-pretrain-worker-0 did not resolve\"}]}",
        "startedAt": "2024-05-01T10:00:05Z",
        "finishedAt": "2024-05-01T10:01:05Z"
      }}
    }],
    "containerStatuses": [{
      "name": "trainer",
      "ready": false,
      "restartCount": 2,
      "state": {"waiting": {"reason": "PodInitializing"}},
      "lastState": {"terminated": {"exitCode": 143, "reason": "Error"}}
    }]
  }
})json";

constexpr const char* kTpuNode = R"json({
  "apiVersion": "v1",
  "kind": "Node",
  "metadata": {
    "name": "gke-tpu-pool-a-1",
    "uid": "node-uid-1",
    "resourceVersion": "998",
    "labels": {
      "cloud.google.com/gke-nodepool": "tpu-pool-a",
      "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
      "cloud.google.com/gke-tpu-topology": "2x4",
      "kubernetes.io/hostname": "gke-tpu-pool-a-1"
    },
    "annotations": {
      "node.alpha.kubernetes.io/ttl": "0",
      "tpujob.dev/cordoned-by": "tpujob-operator",
      "tpujob.dev/cordon-reason": "preflight item accelerator failed"
    }
  },
  "spec": {
    "unschedulable": true,
    "taints": [
      {"key": "tpujob.dev/faulty", "value": "preflight", "effect": "NoSchedule"},
      {"key": "cloud.google.com/impending-node-termination", "effect": "NoExecute",
       "timeAdded": "2024-05-01T10:02:00Z"},
      {"key": "google.com/tpu", "value": "present", "effect": "PreferNoSchedule"}
    ]
  },
  "status": {
    "capacity": {"cpu": "224", "google.com/tpu": "4"},
    "allocatable": {"cpu": "223800m", "google.com/tpu": "4", "memory": "394Gi"},
    "conditions": [
      {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
       "lastHeartbeatTime": "2024-05-01T10:03:00Z",
       "lastTransitionTime": "2024-04-30T08:00:00Z"},
      {"type": "Ready", "status": "True", "reason": "KubeletReady",
       "message": "kubelet is posting ready status",
       "lastTransitionTime": "2024-04-30T08:00:10.5Z"},
      {"type": "TPUHealthy", "status": "False", "reason": "ChipError",
       "message": "chip 2 unresponsive", "lastTransitionTime": "2024-05-01T10:01:30+02:00"}
    ]
  }
})json";

Json Parse(const char* text) { return Json::parse(text); }

TEST(CachePodInfoTest, DecodesRealisticPod) {
  kube::Result<PodInfo> decoded = PodInfo::FromJson(Parse(kFailedPreflightPod));
  ASSERT_TRUE(decoded.has_value()) << decoded.error().message;
  const PodInfo& pod = *decoded;
  EXPECT_EQ(pod.ns, "team-a");
  EXPECT_EQ(pod.name, "llm-pretrain-worker-1");
  EXPECT_EQ(pod.Key(), "team-a/llm-pretrain-worker-1");
  EXPECT_EQ(pod.uid, "5f1c7a3e-7d7e-4f1e-9f43-2b1c0a1d9e01");
  EXPECT_EQ(pod.resource_version, "123456");
  EXPECT_EQ(pod.labels.size(), 4u);
  EXPECT_EQ(pod.labels.Value("tpujob.dev/job-name"), "llm-pretrain");
  EXPECT_EQ(pod.labels.Value("tpujob.dev/attempt"), "2");
  EXPECT_FALSE(pod.labels.Has("missing"));
  EXPECT_EQ(pod.owner.kind, "TPUJob");
  EXPECT_EQ(pod.owner.name, "llm-pretrain");
  EXPECT_EQ(pod.owner.uid, "0b7a6c1e-1111-2222-3333-444455556666");
  EXPECT_EQ(pod.node_name, "gke-tpu-pool-a-1");
  EXPECT_EQ(pod.phase, PodPhase::kFailed);
  EXPECT_TRUE(pod.terminated());
  EXPECT_EQ(pod.pod_ip, "10.4.2.17");
  EXPECT_FALSE(pod.ready);
  EXPECT_FALSE(pod.unschedulable);
  EXPECT_FALSE(pod.deleting());

  ASSERT_EQ(pod.init_containers.size(), 1u);
  const ContainerInfo& preflight = pod.init_containers[0];
  EXPECT_EQ(preflight.name, "preflight");
  EXPECT_EQ(preflight.state, ContainerState::kTerminated);
  EXPECT_EQ(preflight.exit_code, 3);
  EXPECT_EQ(preflight.reason, "Error");
  EXPECT_EQ(preflight.tpu_request, 4);
  // The termination message is the pre-flight report, kept verbatim and still valid JSON.
  Json report = Json::parse(preflight.message.view());
  EXPECT_EQ(report["items"][0]["item"], "dns");
  EXPECT_EQ(report["items"][0]["ok"], false);

  ASSERT_EQ(pod.containers.size(), 2u);
  const ContainerInfo* trainer = pod.FindContainer("trainer");
  ASSERT_NE(trainer, nullptr);
  EXPECT_EQ(trainer->state, ContainerState::kWaiting);
  EXPECT_EQ(trainer->reason, "PodInitializing");
  EXPECT_EQ(trainer->restart_count, 2);
  EXPECT_EQ(trainer->last_exit_code, 143);
  EXPECT_EQ(trainer->last_reason, "Error");
  EXPECT_EQ(trainer->tpu_request, 4);  // from limits, as the API server defaults requests
  const ContainerInfo* sidecar = pod.FindContainer("sidecar");
  ASSERT_NE(sidecar, nullptr);
  EXPECT_EQ(sidecar->state, ContainerState::kNone);
  EXPECT_EQ(sidecar->tpu_request, 0);
  EXPECT_EQ(pod.FindInitContainer("preflight"), &pod.init_containers[0]);
  EXPECT_EQ(pod.FindContainer("preflight"), nullptr);
  EXPECT_EQ(pod.TpuRequest(), 4);  // max(sum of containers, max of init containers)
}

TEST(CachePodInfoTest, IsCompactAndSharesRepeatedStrings) {
  Json json = Parse(kFailedPreflightPod);
  kube::Result<PodInfo> a = PodInfo::FromJson(json);
  json["metadata"]["name"] = "llm-pretrain-worker-2";
  kube::Result<PodInfo> b = PodInfo::FromJson(json);
  ASSERT_TRUE(a && b);
  // Three containers and a pre-flight report: still under 2 KiB (Go operators hold ~36 KiB).
  EXPECT_LT(ApproximateBytes(*a), 2048u);
  EXPECT_GT(ApproximateBytes(*a), sizeof(PodInfo));
  // A running worker (one init and one main container, no messages) is under 1 KiB.
  Json running = json;
  running["spec"]["containers"].erase(1);
  running["status"].erase("initContainerStatuses");
  running["status"]["containerStatuses"][0]["state"] = {{"running", Json::object()}};
  running["status"]["containerStatuses"][0].erase("lastState");
  kube::Result<PodInfo> worker = PodInfo::FromJson(running);
  ASSERT_TRUE(worker.has_value());
  EXPECT_LT(ApproximateBytes(*worker), 1024u);
  // Label keys and values, namespaces, node and container names are stored once.
  auto a_label = a->labels.begin();
  auto b_label = b->labels.begin();
  EXPECT_TRUE(a_label->first.SharesStorageWith(b_label->first));
  EXPECT_TRUE(a_label->second.SharesStorageWith(b_label->second));
  EXPECT_TRUE(a->ns.SharesStorageWith(b->ns));
  EXPECT_TRUE(a->node_name.SharesStorageWith(b->node_name));
  EXPECT_TRUE(a->containers[0].name.SharesStorageWith(b->containers[0].name));
  // So are messages: the same pre-flight report held by two pods is one text.
  EXPECT_TRUE(a->init_containers[0].message.SharesStorageWith(b->init_containers[0].message));
}

TEST(CachePodInfoTest, MinimalPodTakesDefaults) {
  kube::Result<PodInfo> pod = PodInfo::FromJson(Json{{"metadata", {{"name", "p"}}}});
  ASSERT_TRUE(pod.has_value()) << pod.error().message;
  EXPECT_EQ(pod->Key(), "p");  // no namespace: just the name
  EXPECT_EQ(pod->phase, PodPhase::kPending);
  EXPECT_TRUE(pod->owner.empty());
  EXPECT_TRUE(pod->node_name.empty());
  EXPECT_TRUE(pod->containers.empty());
  EXPECT_EQ(pod->TpuRequest(), 0);
}

TEST(CachePodInfoTest, DeletionAndSchedulingState) {
  Json json = {{"metadata",
                {{"name", "p"},
                 {"namespace", "ns"},
                 {"deletionTimestamp", "2024-05-01T10:00:00Z"},
                 {"deletionGracePeriodSeconds", 300}}},
               {"spec", {{"initContainers", Json::array()}, {"containers", {{{"name", "c"}}}}}},
               {"status",
                {{"phase", "Pending"},
                 {"reason", "Evicted"},
                 {"conditions",
                  {{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"}},
                   {{"type", "Ready"}, {"status", "True"}}}}}}};
  kube::Result<PodInfo> pod = PodInfo::FromJson(json);
  ASSERT_TRUE(pod.has_value()) << pod.error().message;
  EXPECT_TRUE(pod->deleting());
  EXPECT_EQ(*pod->deletion_timestamp, ParseRfc3339("2024-05-01T10:00:00Z"));
  EXPECT_TRUE(pod->unschedulable);
  EXPECT_TRUE(pod->ready);
  EXPECT_EQ(pod->reason, "Evicted");
  EXPECT_EQ(pod->phase, PodPhase::kPending);
}

TEST(CachePodInfoTest, MalformedInputsAreErrorsNotCrashes) {
  const Json good = Parse(kFailedPreflightPod);
  struct Case {
    const char* what;
    Json pod;
    const char* expect_in_message;
  };
  auto with = [&](const char* pointer, Json value) {
    Json copy = good;
    copy[Json::json_pointer(pointer)] = std::move(value);
    return copy;
  };
  std::vector<Case> cases = {
      {"array instead of object", Json::array({1, 2}), "expected object"},
      {"string instead of object", Json("pod"), "expected object"},
      {"no metadata", Json{{"spec", Json::object()}}, "metadata: missing"},
      {"metadata not object", Json{{"metadata", 5}}, "metadata: expected object"},
      {"no name", Json{{"metadata", {{"namespace", "a"}}}}, "metadata.name: missing"},
      {"name not string", with("/metadata/name", 7), "metadata.name: expected string"},
      {"labels not object", with("/metadata/labels", Json::array()), "metadata.labels"},
      {"label value not string", with("/metadata/labels/x", 1), "metadata.labels.x"},
      {"bad deletion timestamp", with("/metadata/deletionTimestamp", "yesterday"),
       "deletionTimestamp: malformed"},
      {"restartCount not integer", with("/status/containerStatuses/0/restartCount", "two"),
       "status.containerStatuses[0].restartCount: expected integer"},
      {"exitCode out of range",
       with("/status/initContainerStatuses/0/state/terminated/exitCode", 1LL << 40),
       "exitCode: integer out of range"},
      {"containers not array", with("/spec/containers", Json::object()), "spec.containers"},
      {"container not object", with("/spec/containers/1", "sidecar"), "spec.containers[1]"},
      {"container without name", with("/spec/containers/1", Json{{"image", "x"}}),
       "spec.containers[1].name: missing"},
      {"bad quantity", with("/spec/initContainers/0/resources/requests/google.com~1tpu", "four"),
       "malformed quantity"},
      {"conditions not array", with("/status/conditions", "Ready"), "status.conditions"},
      {"owner not object", with("/metadata/ownerReferences/0", 3), "ownerReferences[0]"},
  };
  for (const Case& c : cases) {
    kube::Result<PodInfo> pod = PodInfo::FromJson(c.pod);
    ASSERT_FALSE(pod.has_value()) << c.what;
    EXPECT_EQ(pod.error().kind, kube::ErrorKind::kDecode) << c.what;
    EXPECT_NE(pod.error().message.find(c.expect_in_message), std::string::npos)
        << c.what << ": " << pod.error().message;
  }
}

TEST(CacheNodeInfoTest, DecodesTaintsConditionsAndAnnotations) {
  kube::Result<NodeInfo> decoded = NodeInfo::FromJson(Parse(kTpuNode));
  ASSERT_TRUE(decoded.has_value()) << decoded.error().message;
  const NodeInfo& node = *decoded;
  EXPECT_EQ(node.Key(), "gke-tpu-pool-a-1");
  EXPECT_EQ(node.uid, "node-uid-1");
  EXPECT_EQ(node.resource_version, "998");
  EXPECT_EQ(node.labels.Value("cloud.google.com/gke-tpu-topology"), "2x4");
  // Only the operator's own annotations are kept.
  EXPECT_EQ(node.annotations.size(), 2u);
  EXPECT_EQ(node.annotations.Value("tpujob.dev/cordoned-by"), "tpujob-operator");
  EXPECT_FALSE(node.annotations.Has("node.alpha.kubernetes.io/ttl"));
  EXPECT_TRUE(node.unschedulable);
  ASSERT_EQ(node.taints.size(), 3u);
  EXPECT_EQ(node.taints[0].key, "tpujob.dev/faulty");
  EXPECT_EQ(node.taints[0].value, "preflight");
  EXPECT_EQ(node.taints[0].effect, TaintEffect::kNoSchedule);
  const Taint* termination = node.FindTaint("cloud.google.com/impending-node-termination");
  ASSERT_NE(termination, nullptr);
  EXPECT_EQ(termination->effect, TaintEffect::kNoExecute);
  EXPECT_TRUE(termination->value.empty());
  EXPECT_EQ(node.taints[2].effect, TaintEffect::kPreferNoSchedule);
  EXPECT_EQ(node.FindTaint("nope"), nullptr);
  EXPECT_EQ(node.tpu_allocatable, 4);
  EXPECT_EQ(node.ready, ConditionStatus::kTrue);
  ASSERT_EQ(node.conditions.size(), 3u);
  const NodeCondition* ready = node.FindCondition("Ready");
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->reason, "KubeletReady");
  EXPECT_EQ(ready->message, "kubelet is posting ready status");
  EXPECT_EQ(*ready->last_transition_time,
            *ParseRfc3339("2024-04-30T08:00:10Z") + std::chrono::milliseconds(500));
  const NodeCondition* tpu = node.FindCondition("TPUHealthy");
  ASSERT_NE(tpu, nullptr);
  EXPECT_EQ(tpu->status, ConditionStatus::kFalse);
  EXPECT_EQ(tpu->reason, "ChipError");
  EXPECT_EQ(*tpu->last_transition_time, *ParseRfc3339("2024-05-01T08:01:30Z"));
  EXPECT_LT(ApproximateBytes(node), 2048u);
}

TEST(CacheNodeInfoTest, ConditionMessagesRepeatedByEveryNodeAreStoredOnce) {
  Json json = Parse(kTpuNode);
  kube::Result<NodeInfo> a = NodeInfo::FromJson(json);
  json["metadata"]["name"] = "gke-tpu-pool-a-2";
  kube::Result<NodeInfo> b = NodeInfo::FromJson(json);
  ASSERT_TRUE(a && b);
  const NodeCondition* a_ready = a->FindCondition("Ready");
  const NodeCondition* b_ready = b->FindCondition("Ready");
  ASSERT_TRUE(a_ready != nullptr && b_ready != nullptr);
  EXPECT_EQ(a_ready->message, "kubelet is posting ready status");
  EXPECT_TRUE(a_ready->message.SharesStorageWith(b_ready->message));
}

TEST(CacheNodeInfoTest, NoReadyConditionIsUnknown) {
  kube::Result<NodeInfo> node = NodeInfo::FromJson(Json{{"metadata", {{"name", "n"}}}});
  ASSERT_TRUE(node.has_value());
  EXPECT_EQ(node->ready, ConditionStatus::kUnknown);
  EXPECT_FALSE(node->unschedulable);
  EXPECT_EQ(node->tpu_allocatable, 0);
}

TEST(CacheNodeInfoTest, MalformedInputsAreErrors) {
  const Json good = Parse(kTpuNode);
  auto with = [&](const char* pointer, Json value) {
    Json copy = good;
    copy[Json::json_pointer(pointer)] = std::move(value);
    return copy;
  };
  for (const Json& bad : {with("/spec/taints", Json::object()), with("/spec/taints/0", 1),
                          with("/spec/unschedulable", "yes"),
                          with("/status/conditions/1/lastTransitionTime", "2024-13-01T00:00:00Z"),
                          with("/status/allocatable/google.com~1tpu", Json::array()),
                          with("/metadata/annotations/tpujob.dev~1x", 1), Json(nullptr)}) {
    kube::Result<NodeInfo> node = NodeInfo::FromJson(bad);
    EXPECT_FALSE(node.has_value()) << bad.dump();
    if (!node) {
      EXPECT_EQ(node.error().kind, kube::ErrorKind::kDecode);
    }
  }
}

TEST(CacheTPUJobInfoTest, DecodesMetadataAndKeepsSpecAndStatus) {
  Json json = {{"apiVersion", "tpujob.dev/v1alpha1"},
               {"kind", "TPUJob"},
               {"metadata",
                {{"name", "llm-pretrain"},
                 {"namespace", "team-a"},
                 {"uid", "job-uid"},
                 {"resourceVersion", "77"},
                 {"generation", 3},
                 {"creationTimestamp", "2024-05-01T09:00:00Z"},
                 {"finalizers", {"tpujob.dev/cleanup"}},
                 {"labels", {{"team", "a"}}},
                 {"annotations",
                  {{"fault-tolerance/job-retry-num", "3"},
                   {"kubectl.kubernetes.io/last-applied-configuration", "{\"huge\": true}"}}}}},
               {"spec", {{"priority", 100}, {"tpu", {{"chipsPerWorker", 4}}}}},
               {"status", {{"phase", "Running"}, {"attempt", 2}}}};
  kube::Result<TPUJobInfo> job = TPUJobInfo::FromJson(json);
  ASSERT_TRUE(job.has_value()) << job.error().message;
  EXPECT_EQ(job->Key(), "team-a/llm-pretrain");
  EXPECT_EQ(job->uid, "job-uid");
  EXPECT_EQ(job->generation, 3);
  EXPECT_EQ(job->annotations.Value("fault-tolerance/job-retry-num"), "3");
  EXPECT_FALSE(job->annotations.Has("kubectl.kubernetes.io/last-applied-configuration"));
  EXPECT_EQ(job->labels.Value("team"), "a");
  EXPECT_EQ(job->finalizers, std::vector<std::string>{"tpujob.dev/cleanup"});
  EXPECT_EQ(job->creation_timestamp, ParseRfc3339("2024-05-01T09:00:00Z"));
  EXPECT_FALSE(job->deleting());
  EXPECT_EQ(job->spec["tpu"]["chipsPerWorker"], 4);
  EXPECT_EQ(job->status["attempt"], 2);

  json["metadata"]["generation"] = "3";
  EXPECT_FALSE(TPUJobInfo::FromJson(json).has_value());
  json["metadata"]["generation"] = 3;
  json["metadata"]["finalizers"] = Json::array({1});
  EXPECT_FALSE(TPUJobInfo::FromJson(json).has_value());
  json["metadata"]["finalizers"] = Json::array();
  json["spec"] = "not an object";
  EXPECT_FALSE(TPUJobInfo::FromJson(json).has_value());
}

TEST(CacheTimeTest, ParsesAndFormatsRfc3339) {
  std::optional<WallTime> t = ParseRfc3339("1970-01-01T00:00:10Z");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->time_since_epoch(), seconds(10));
  EXPECT_EQ(ParseRfc3339("2024-02-29T23:59:59.123456789Z")->time_since_epoch() % seconds(1),
            std::chrono::nanoseconds(123456789));
  EXPECT_EQ(ParseRfc3339("2024-05-01T12:00:00+02:00"), ParseRfc3339("2024-05-01T10:00:00Z"));
  EXPECT_EQ(ParseRfc3339("2024-05-01T08:30:00-01:30"), ParseRfc3339("2024-05-01T10:00:00Z"));
  EXPECT_EQ(FormatRfc3339(*ParseRfc3339("2024-05-01T10:00:00.9Z")), "2024-05-01T10:00:00Z");
  EXPECT_EQ(FormatRfc3339(*ParseRfc3339("1999-12-31T23:59:59Z")), "1999-12-31T23:59:59Z");
  for (const char* bad : {"", "2024-05-01", "2024-05-01T10:00:00", "2024-02-30T00:00:00Z",
                          "2024-05-01T24:00:00Z", "2024-05-01T10:00:00.Z", "2024-05-01T10:00Z",
                          "2024-05-01T10:00:00Zjunk", "2024-05-01T10:00:00+0200", "abcd"}) {
    EXPECT_FALSE(ParseRfc3339(bad).has_value()) << bad;
  }
}

// Found by tests/fuzz/objects_fuzzer: a year past 2262 overflowed the nanosecond count (undefined
// behaviour) instead of being refused.
TEST(CacheTimeTest, ATimeOutsideTheNanosecondClocksRangeIsMalformed) {
  for (const char* bad : {"4052-05-01T10:00:00Z", "9999-12-31T23:59:59Z", "2262-04-12T00:00:00Z",
                          "1677-09-21T00:00:00Z", "0000-01-01T00:00:00Z"}) {
    EXPECT_FALSE(ParseRfc3339(bad).has_value()) << bad;
  }
  EXPECT_EQ(FormatRfc3339(*ParseRfc3339("2262-04-11T00:00:00Z")), "2262-04-11T00:00:00Z");
  EXPECT_EQ(FormatRfc3339(*ParseRfc3339("1677-09-22T00:00:00Z")), "1677-09-22T00:00:00Z");

  Json node = {{"metadata", {{"name", "n"}}},
               {"status",
                {{"conditions",
                  {{{"type", "Ready"},
                    {"status", "True"},
                    {"lastTransitionTime", "4052-05-01T10:00:00Z"}}}}}}};
  auto projected = NodeInfo::FromJson(node);
  ASSERT_FALSE(projected.has_value());
  EXPECT_NE(projected.error().message.find("malformed RFC 3339 timestamp"), std::string::npos)
      << projected.error().message;
}

TEST(CacheQuantityTest, ParsesIntegerQuantities) {
  struct Case {
    const char* text;
    std::optional<int64_t> want;
  };
  const Case cases[] = {
      {"4", 4},
      {"0", 0},
      {"+8", 8},
      {"-2", -2},
      {"8k", 8000},
      {"2Ki", 2048},
      {"1Mi", 1 << 20},
      {"3G", 3000000000},
      {"1e3", 1000},
      {"1E3", 1000},
      {"2e+2", 200},
      {"1500m", 2},
      {"500m", 1},
      {"0.5Ki", 512},
      {"1.5", 2},
      {"-0.5", -1},
      {"1n", 1},
      {"12345678901234", 12345678901234},
      {"", std::nullopt},
      {"four", std::nullopt},
      {"4x", std::nullopt},
      {"4KB", std::nullopt},
      {".", std::nullopt},
      {"1e", std::nullopt},
      {"9Ei", std::nullopt},
      {"99999999999999999999", std::nullopt},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ParseQuantity(c.text), c.want) << c.text;
  }
}

TEST(CacheInternTest, PoolSharesAndForgets) {
  const size_t before = InternedString::PoolSize();
  {
    InternedString a = InternedString::Intern("cache-intern-test-unique-text");
    InternedString b = InternedString::Intern(std::string("cache-intern-test-unique-") + "text");
    EXPECT_TRUE(a.SharesStorageWith(b));
    EXPECT_EQ(a, b);
    EXPECT_EQ(a, "cache-intern-test-unique-text");
    EXPECT_EQ(InternedString::PoolSize(), before + 1);
    InternedString c = InternedString::Intern("other-cache-intern-text");
    EXPECT_NE(a, c);
    EXPECT_LT(a, c);
  }
  EXPECT_EQ(InternedString::PoolSize(), before);  // the last holder gone, the text is forgotten
  EXPECT_TRUE(InternedString::Intern("").empty());
  EXPECT_EQ(InternedString().str(), "");
}

TEST(CacheLabelMapTest, SortedSetGetErase) {
  LabelMap labels{{"b", "2"}, {"a", "1"}, {"c", "3"}, {"a", "one"}};
  EXPECT_EQ(labels.size(), 3u);
  EXPECT_EQ(labels.Value("a"), "one");
  EXPECT_EQ(labels.begin()->first, "a");
  labels.Erase("b");
  labels.Erase("zzz");
  EXPECT_EQ(labels.size(), 2u);
  EXPECT_FALSE(labels.Get("b").has_value());
  EXPECT_EQ(labels, (LabelMap{{"c", "3"}, {"a", "one"}}));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::cache
