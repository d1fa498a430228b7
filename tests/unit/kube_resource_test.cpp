#include <gtest/gtest.h>

#include "kube/resource.h"

namespace tpujob::kube {
namespace TPUJOB_TEST_NS {

TEST(KubeResourceTest, GroupVersionPathForCoreAndNamedGroups) {
  EXPECT_EQ(Resource::Pods().GroupVersionPath(), "/api/v1");
  EXPECT_EQ(Resource::Leases().GroupVersionPath(), "/apis/coordination.k8s.io/v1");
  EXPECT_EQ(Resource::TPUJobs().GroupVersionPath(), "/apis/tpujob.dev/v1alpha1");
}

TEST(KubeResourceTest, NamespacedCollectionPath) {
  EXPECT_EQ(Resource::Pods().CollectionPath("ns"), "/api/v1/namespaces/ns/pods");
  EXPECT_EQ(Resource::TPUJobs().CollectionPath("team-a"),
            "/apis/tpujob.dev/v1alpha1/namespaces/team-a/tpujobs");
}

TEST(KubeResourceTest, EmptyNamespaceMeansAllNamespaces) {
  EXPECT_EQ(Resource::Pods().CollectionPath(""), "/api/v1/pods");
  EXPECT_EQ(Resource::TPUJobs().CollectionPath(""), "/apis/tpujob.dev/v1alpha1/tpujobs");
}

TEST(KubeResourceTest, ClusterScopedResourceIgnoresNamespace) {
  EXPECT_EQ(Resource::Nodes().CollectionPath(""), "/api/v1/nodes");
  EXPECT_EQ(Resource::Nodes().CollectionPath("ns"), "/api/v1/nodes");
  EXPECT_EQ(Resource::Nodes().ObjectPath("ns", "node-1"), "/api/v1/nodes/node-1");
  EXPECT_EQ(Resource::Nodes().ObjectPath("", "node-1", "status"), "/api/v1/nodes/node-1/status");
}

TEST(KubeResourceTest, ObjectPathWithAndWithoutSubresource) {
  EXPECT_EQ(Resource::Pods().ObjectPath("ns", "p-0"), "/api/v1/namespaces/ns/pods/p-0");
  EXPECT_EQ(Resource::TPUJobs().ObjectPath("ns", "name", "status"),
            "/apis/tpujob.dev/v1alpha1/namespaces/ns/tpujobs/name/status");
  EXPECT_EQ(Resource::Leases().ObjectPath("kube-system", "tpujob-operator"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/tpujob-operator");
}

TEST(KubeResourceTest, PathSegmentsCannotInjectUrlSyntax) {
  // A name can never contain these, but a bug upstream must not turn into a different request.
  EXPECT_EQ(Resource::Pods().ObjectPath("ns", "a/b?c#d"),
            "/api/v1/namespaces/ns/pods/a%2Fb%3Fc%23d");
  // ':' is legal in a path segment and common in RBAC names.
  const Resource cluster_roles{"rbac.authorization.k8s.io", "v1", "clusterroles", false};
  EXPECT_EQ(cluster_roles.ObjectPath("", "system:node"),
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:node");
}

TEST(KubeResourceTest, UrlEncodeKeepsOnlyUnreservedCharacters) {
  EXPECT_EQ(UrlEncode("AZaz09-._~"), "AZaz09-._~");
  EXPECT_EQ(UrlEncode("app=web,tier!=db"), "app%3Dweb%2Ctier%21%3Ddb");
  EXPECT_EQ(UrlEncode("a b+c&d/e:f"), "a%20b%2Bc%26d%2Fe%3Af");
  EXPECT_EQ(UrlEncode("metadata.name=x"), "metadata.name%3Dx");
  EXPECT_EQ(UrlEncode(""), "");
  // Bytes above 0x7F are encoded one by one, upper-case hex.
  EXPECT_EQ(UrlEncode("\xC3\xA9"), "%C3%A9");
  EXPECT_EQ(UrlEncode(std::string_view("\0\x7F", 2)), "%00%7F");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::kube
