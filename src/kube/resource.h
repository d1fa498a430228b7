// Names an API resource (group, version, plural) and builds its REST paths.
#pragma once

#include <string>
#include <string_view>

namespace tpujob::kube {

struct Resource {
  std::string group;    // "" for the core group
  std::string version;  // "v1", "v1alpha1"
  std::string plural;   // "pods", "tpujobs"
  bool namespaced = true;

  // "/api/v1" or "/apis/<group>/<version>".
  std::string GroupVersionPath() const;
  // Collection path; `ns` empty means all namespaces (or cluster-scoped).
  std::string CollectionPath(std::string_view ns) const;
  // Object path, with an optional subresource ("status").
  std::string ObjectPath(std::string_view ns, std::string_view name,
                         std::string_view subresource = {}) const;

  static Resource Pods() { return {"", "v1", "pods", true}; }
  static Resource Nodes() { return {"", "v1", "nodes", false}; }
  static Resource Services() { return {"", "v1", "services", true}; }
  static Resource Events() { return {"", "v1", "events", true}; }
  static Resource ConfigMaps() { return {"", "v1", "configmaps", true}; }
  static Resource Leases() { return {"coordination.k8s.io", "v1", "leases", true}; }
  static Resource PriorityClasses() {
    return {"scheduling.k8s.io", "v1", "priorityclasses", false};
  }
  static Resource TPUJobs() { return {"tpujob.dev", "v1alpha1", "tpujobs", true}; }
  // Kueue's (policy/kueue.h).
  static Resource Workloads() { return {"kueue.x-k8s.io", "v1beta2", "workloads", true}; }
  static Resource ResourceFlavors() {
    return {"kueue.x-k8s.io", "v1beta2", "resourceflavors", false};
  }
};

// Percent-encodes a query parameter value.
std::string UrlEncode(std::string_view value);

}  // namespace tpujob::kube
