#include "cache/store.h"

namespace tpujob::cache {

std::vector<std::string> PodJobIndex(const PodInfo& pod) {
  std::optional<std::string_view> job = pod.labels.Get(kJobNameLabel);
  if (!job || job->empty()) return {};
  return {ObjectKey(pod.ns, *job)};
}

std::vector<std::string> PodNodeIndex(const PodInfo& pod) {
  if (pod.node_name.empty()) return {};
  return {pod.node_name.str()};
}

std::vector<std::string> NodePoolIndex(const NodeInfo& node) {
  std::optional<std::string_view> pool = node.labels.Get(kNodePoolLabel);
  if (!pool || pool->empty()) return {};
  return {std::string(*pool)};
}

void AddPodIndexers(Store<PodInfo>& store) {
  // Only fails if the names are taken, which means these were added already.
  (void)store.AddIndexer(std::string(kPodsByJobIndex), PodJobIndex);
  (void)store.AddIndexer(std::string(kPodsByNodeIndex), PodNodeIndex);
}

void AddNodeIndexers(Store<NodeInfo>& store) {
  (void)store.AddIndexer(std::string(kNodesByPoolIndex), NodePoolIndex);
}

template class Store<PodInfo>;
template class Store<NodeInfo>;
template class Store<TPUJobInfo>;
template class Store<WorkloadInfo>;

}  // namespace tpujob::cache
