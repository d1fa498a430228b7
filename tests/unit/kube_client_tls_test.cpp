// Which certificate authorities the API client trusts. As in client-go, a configured CA is the
// only one: a server whose certificate chains to something else is refused, even when that
// something is in the CA bundle OpenSSL would load by default (SSL_CERT_FILE here, so that the
// test does not depend on the machine's bundle).

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "kube/client.h"
#include "kube/config.h"
#include "metrics/http_server.h"
#include "metrics/tls.h"
#include "scratch.h"

namespace tpujob::kube {
namespace TPUJOB_TEST_NS {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

using ::tpujob::testing_util::ScopedEnv;
using ::tpujob::testing_util::TempDir;

TEST(KubeClientTls, OnlyTheConfiguredCaIsTrustedNotTheDefaultBundle) {
  TempDir serving("tpujob-client-tls");
  TempDir other("tpujob-client-tls");
  auto files = metrics::WriteSelfSignedCertificate(serving.path(), {"localhost"});
  ASSERT_TRUE(files);
  ASSERT_TRUE(metrics::WriteSelfSignedCertificate(other.path(), {"localhost"}));
  metrics::HttpServer server("127.0.0.1:0", *files);
  server.Handle("/api/v1/namespaces/default/configmaps/c", [] {
    return metrics::HttpResponse{
        200, "application/json", R"({"kind":"ConfigMap","metadata":{"name":"c"}})", {}};
  });
  ASSERT_TRUE(server.Start());

  Config config;
  config.server = "https://localhost:" + std::to_string(server.port());
  config.max_retries = 0;
  // The default bundle trusts the server's certificate; the configured CA does not.
  ScopedEnv bundle("SSL_CERT_FILE", files->cert_file);
  config.ca_pem = ReadFile(other.path() + "/tls.crt");
  auto refused = NewClient(config)->Get(Resource::ConfigMaps(), "default", "c");
  ASSERT_FALSE(refused) << "a server the configured CA did not sign was trusted";
  EXPECT_EQ(refused.error().kind, ErrorKind::kTransport) << refused.error().ToString();

  // The configured CA signed it: trusted, with no bundle file loaded at all.
  config.ca_pem = ReadFile(files->cert_file);
  ASSERT_TRUE(TrustOnlyTheConfiguredCa(config));
  ASSERT_STREQ(std::getenv("SSL_CERT_FILE"), "/dev/null");
  auto trusted = NewClient(config)->Get(Resource::ConfigMaps(), "default", "c");
  ASSERT_TRUE(trusted) << trusted.error().ToString();
  EXPECT_EQ((*trusted)["metadata"]["name"], "c");
}

TEST(KubeClientTls, AConfiguredCaWithNoCertificateTrustsNothing) {
  TempDir serving("tpujob-client-tls");
  auto files = metrics::WriteSelfSignedCertificate(serving.path(), {"localhost"});
  ASSERT_TRUE(files);
  metrics::HttpServer server("127.0.0.1:0", *files);
  server.Handle("/api/v1/namespaces/default/configmaps/c", [] {
    return metrics::HttpResponse{200, "application/json", R"({"kind":"ConfigMap"})", {}};
  });
  ASSERT_TRUE(server.Start());
  ScopedEnv bundle("SSL_CERT_FILE", files->cert_file);
  Config config;
  config.server = "https://localhost:" + std::to_string(server.port());
  config.max_retries = 0;
  config.ca_pem = "not a certificate\n";
  auto refused = NewClient(config)->Get(Resource::ConfigMaps(), "default", "c");
  ASSERT_FALSE(refused) << "an unreadable CA fell back to the default bundle";
  EXPECT_EQ(refused.error().kind, ErrorKind::kTransport) << refused.error().ToString();
}

// Watches have a transport of their own (kube/http_stream.h): the same trust, and the server's
// name checked against its certificate (or the kubeconfig's tls-server-name).
TEST(KubeClientTls, AWatchTrustsOnlyTheConfiguredCaAndChecksTheServersName) {
  TempDir serving("tpujob-client-tls");
  TempDir other("tpujob-client-tls");
  auto files = metrics::WriteSelfSignedCertificate(serving.path(), {"localhost"});
  ASSERT_TRUE(files);
  ASSERT_TRUE(metrics::WriteSelfSignedCertificate(other.path(), {"localhost"}));
  metrics::HttpServer server("127.0.0.1:0", *files);
  server.Handle("/api/v1/namespaces/default/pods", [] {
    return metrics::HttpResponse{
        200,
        "application/json",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"p\"}}}\n",
        {}};
  });
  ASSERT_TRUE(server.Start());
  ScopedEnv bundle("SSL_CERT_FILE", files->cert_file);
  const std::string port = std::to_string(server.port());
  auto watch = [](const Config& config) {
    return NewClient(config)->Watch(Resource::Pods(), "default", WatchOptions{});
  };

  Config config;
  config.server = "https://localhost:" + port;
  config.ca_pem = ReadFile(other.path() + "/tls.crt");
  auto refused = watch(config);
  ASSERT_FALSE(refused) << "a server the configured CA did not sign was trusted";
  EXPECT_EQ(refused.error().kind, ErrorKind::kTransport);
  EXPECT_NE(refused.error().message.find("certificate verify failed"), std::string::npos)
      << refused.error().message;

  config.ca_pem = ReadFile(files->cert_file);
  auto trusted = watch(config);
  ASSERT_TRUE(trusted) << trusted.error().ToString();
  auto event = (*trusted)->Next();
  ASSERT_TRUE(event && event->has_value()) << (event ? "ended" : event.error().ToString());
  EXPECT_EQ((*event)->object["metadata"]["name"], "p");

  // The certificate names localhost, not 127.0.0.1.
  config.server = "https://127.0.0.1:" + port;
  auto wrong_name = watch(config);
  ASSERT_FALSE(wrong_name) << "a certificate for another name was accepted";
  EXPECT_NE(wrong_name.error().message.find("certificate verify failed"), std::string::npos)
      << wrong_name.error().message;
  config.tls_server_name = "localhost";
  auto renamed = watch(config);
  ASSERT_TRUE(renamed) << renamed.error().ToString();

  // An unreadable CA trusts nothing, as for every other request.
  config.ca_pem = "not a certificate\n";
  auto unreadable = watch(config);
  ASSERT_FALSE(unreadable);
  EXPECT_EQ(unreadable.error().kind, ErrorKind::kConfig) << unreadable.error().ToString();
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::kube
