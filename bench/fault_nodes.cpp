#include "fault_nodes.h"

#include <cstdio>

#include "fixtures.h"

namespace tpujob::bench {

std::string FaultAccelerator(const std::string& prefix) { return "tpu-" + prefix; }

std::string FaultTopology(int workers) { return "2x" + std::to_string(2 * workers); }

// Deletes the nodes CreateFaultNodes made.
void DeleteFaultNodes(tpujob::kube::Client& client, const std::string& prefix, int count) {
  Parallel(count, 4, [&](int i) {
    auto deleted = client.Delete(Resource::Nodes(), "", prefix + "-node-" + std::to_string(i));
    return deleted.has_value() || deleted.error().IsNotFound();
  });
}

bool CreateFaultNodes(tpujob::kube::Client& client, const std::string& prefix,
                      const std::string& accelerator, const std::string& topology, int count) {
  const int node_failures = Parallel(count, 4, [&](int i) {
    fixtures::FakeNode node{.name = prefix + "-node-" + std::to_string(i),
                            .labels = fixtures::TpuNodeLabels(accelerator, topology, prefix)};
    node.labels["type"] = "kwok";
    node.labels[std::string(kBenchNodesLabel)] = prefix;
    auto created = client.Create(Resource::Nodes(), "", fixtures::NodeManifest(node));
    return created.has_value() || created.error().IsAlreadyExists();
  });
  if (node_failures > 0) {
    std::fprintf(stderr, "error: %d of %d nodes not created\n", node_failures, count);
    DeleteFaultNodes(client, prefix, count);
    return false;
  }
  tpujob::kube::ListOptions by_nodes;
  by_nodes.label_selector = std::string(kBenchNodesLabel) + "=" + prefix;
  const bool ready = WaitFor(
      [&] {
        auto nodes = client.List(Resource::Nodes(), "", by_nodes);
        if (!nodes) return false;
        // Ready, and without the node controller's not-ready taint, which it lifts once it saw
        // the node Ready: minutes after KWOK's Ready with thousands of new nodes. The operator
        // admits nothing onto a node with that taint (policy::LifecycleTaint).
        int ready_nodes = 0;
        for (const auto& node : (*nodes)["items"]) {
          bool ready = false, tainted = false;
          for (const auto& c : node.value("/status/conditions"_json_pointer, Json::array())) {
            ready = ready || (c.value("type", "") == "Ready" && c.value("status", "") == "True");
          }
          for (const auto& t : node.value("/spec/taints"_json_pointer, Json::array())) {
            tainted = tainted || t.value("key", "") == "node.kubernetes.io/not-ready";
          }
          ready_nodes += ready && !tainted;
        }
        return ready_nodes >= count;
      },
      300, std::chrono::milliseconds(500));  // KWOK takes minutes with thousands of nodes
  if (!ready) {
    std::fprintf(stderr, "error: the %d nodes did not all become Ready\n", count);
    DeleteFaultNodes(client, prefix, count);
  }
  return ready;
}

// Writes `condition`=`status` on `node` as node-problem-detector reports it: a strategic merge on
// the status subresource, which merges conditions by type and leaves the ones KWOK keeps alone.
tpujob::kube::Status WriteNodeCondition(tpujob::kube::Client& client, const std::string& node,
                                        const std::string& condition, const std::string& status,
                                        const std::string& reason, const std::string& message) {
  const Json patch = fixtures::NodeConditionPatch(condition, status, reason, message, UtcNow());
  tpujob::kube::PatchOptions status_options;
  status_options.subresource = "status";
  auto written = client.Patch(Resource::Nodes(), "", node, tpujob::kube::PatchType::kStrategicMerge,
                              patch, status_options);
  if (!written) return std::unexpected(written.error());
  return {};
}

// Writes the hardware fault `condition`=True on `node`.
tpujob::kube::Status WriteNodeFault(tpujob::kube::Client& client, const std::string& node,
                                    const std::string& condition) {
  return WriteNodeCondition(client, node, condition, "True", "ChipError",
                            "injected by tpujob-bench");
}

tpujob::kube::Status UncordonNode(tpujob::kube::Client& client, const std::string& node) {
  auto got = client.Get(Resource::Nodes(), "", node);
  if (!got) return std::unexpected(got.error());
  Json taints = Json::array();
  for (const auto& taint : got->value("/spec/taints"_json_pointer, Json::array())) {
    if (taint.value("key", "") != "tpujob.dev/faulty") taints.push_back(taint);
  }
  const Json ours = got->value("/metadata/annotations"_json_pointer, Json::object());
  Json annotations = Json::object();
  for (const auto& [key, value] : ours.items()) {
    if (key.starts_with("tpujob.dev/")) annotations[key] = nullptr;
  }
  Json patch = {{"metadata", {{"annotations", annotations}}},
                {"spec", {{"unschedulable", false}, {"taints", taints}}}};
  auto written = client.Patch(Resource::Nodes(), "", node, tpujob::kube::PatchType::kMerge, patch,
                              tpujob::kube::PatchOptions{});
  if (!written) return std::unexpected(written.error());
  return {};
}

}  // namespace tpujob::bench
