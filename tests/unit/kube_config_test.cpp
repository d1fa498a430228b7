#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "base/clock.h"
#include "kube/config.h"
#include "scratch.h"

namespace tpujob::kube {
namespace TPUJOB_TEST_NS {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kCaPem =
    "-----BEGIN CERTIFICATE-----\nMIIBcaCERTIFICATEauthority\n-----END CERTIFICATE-----\n";
const std::string kCertPem =
    "-----BEGIN CERTIFICATE-----\nMIIBclientCERTIFICATE\n-----END CERTIFICATE-----\n";
const std::string kKeyPem =
    "-----BEGIN EC PRIVATE KEY-----\nMHcclientKEY\n-----END EC PRIVATE KEY-----\n";

// Encoded with OpenSSL, independently of the decoder under test.
std::string Base64(const std::string& data) {
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(data.data()),
                                static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

// Replaces each "{key}" in `text` with its value: lets the YAML stay readable in raw strings.
std::string Fill(std::string text,
                 std::initializer_list<std::pair<std::string_view, std::string>> values) {
  for (const auto& [key, value] : values) {
    const std::string placeholder = "{" + std::string(key) + "}";
    for (size_t at = text.find(placeholder); at != std::string::npos;
         at = text.find(placeholder, at + value.size())) {
      text.replace(at, placeholder.size(), value);
    }
  }
  return text;
}

using ::tpujob::testing_util::ScopedEnv;

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "kube_config_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Writes `content` to `relative` under the temp dir (creating directories) and returns the
  // absolute path.
  std::string Write(const std::string& relative, const std::string& content) {
    const fs::path path = dir_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    return path.string();
  }

  fs::path dir_;
};

using KubeConfigTest = TempDirTest;

// A kubeconfig with two contexts: "cert" (client certificate, inline data) is current, "token"
// uses a bearer token and its own namespace.
std::string TwoContextKubeconfig() {
  return Fill(R"(apiVersion: v1
kind: Config
current-context: cert
clusters:
- name: prod
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: {ca}
    tls-server-name: api.prod.internal
contexts:
- name: cert
  context:
    cluster: prod
    user: admin
- name: token
  context:
    cluster: prod
    user: robot
    namespace: team-a
users:
- name: admin
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
- name: robot
  user:
    token: s3cr3t-token
)",
              {{"ca", Base64(kCaPem)}, {"cert", Base64(kCertPem)}, {"key", Base64(kKeyPem)}});
}

TEST_F(KubeConfigTest, CurrentContextWithClientCertificateData) {
  const std::string path = Write("config", TwoContextKubeconfig());
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  EXPECT_EQ(config->server, "https://10.0.0.1:6443");
  EXPECT_EQ(config->tls_server_name, "api.prod.internal");
  EXPECT_EQ(config->ca_pem, kCaPem);
  EXPECT_EQ(config->client_cert_pem, kCertPem);
  EXPECT_EQ(config->client_key_pem, kKeyPem);
  EXPECT_EQ(config->token, nullptr);
  EXPECT_FALSE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->default_namespace, "default");
  EXPECT_EQ(config->source, "kubeconfig " + path + ", context cert");
}

TEST_F(KubeConfigTest, ExplicitContextWithTokenAndNamespace) {
  const std::string path = Write("config", TwoContextKubeconfig());
  auto config = LoadKubeconfig(path, "token");
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  EXPECT_EQ(config->default_namespace, "team-a");
  EXPECT_TRUE(config->client_cert_pem.empty());
  EXPECT_TRUE(config->client_key_pem.empty());
  ASSERT_NE(config->token, nullptr);
  auto token = config->token->Token();
  ASSERT_TRUE(token.has_value());
  EXPECT_EQ(*token, "s3cr3t-token");
  EXPECT_THAT(config->source, HasSubstr("context token"));
}

TEST_F(KubeConfigTest, FilesAreResolvedRelativeToTheKubeconfigDirectory) {
  Write("kube/pki/ca.crt", kCaPem);
  Write("kube/pki/client.crt", kCertPem);
  Write("kube/pki/client.key", kKeyPem);
  const std::string path = Write("kube/config",
                                 "current-context: c\n"
                                 "clusters:\n"
                                 "- name: k\n"
                                 "  cluster:\n"
                                 "    server: https://k:443\n"
                                 "    certificate-authority: pki/ca.crt\n"
                                 "contexts:\n"
                                 "- name: c\n"
                                 "  context: {cluster: k, user: u}\n"
                                 "users:\n"
                                 "- name: u\n"
                                 "  user:\n"
                                 "    client-certificate: pki/client.crt\n"
                                 "    client-key: ./pki/client.key\n");
  // The working directory must not matter.
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  EXPECT_EQ(config->ca_pem, kCaPem);
  EXPECT_EQ(config->client_cert_pem, kCertPem);
  EXPECT_EQ(config->client_key_pem, kKeyPem);
}

TEST_F(KubeConfigTest, AbsoluteFilePathsAreKept) {
  const std::string ca = Write("elsewhere/ca.pem", kCaPem);
  const std::string path = Write("kube/config", Fill(R"(current-context: c
clusters:
- name: k
  cluster: {server: 'https://k:443', certificate-authority: '{ca}'}
contexts:
- name: c
  context: {cluster: k}
)",
                                                     {{"ca", ca}}));
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  EXPECT_EQ(config->ca_pem, kCaPem);
  // A context without a user means no credentials, which is allowed.
  EXPECT_EQ(config->token, nullptr);
  EXPECT_TRUE(config->client_cert_pem.empty());
}

TEST_F(KubeConfigTest, TokenFileIsReadRelativeAndTrimmed) {
  Write("kube/token", "  file-token\n\n");
  const std::string path = Write("kube/config",
                                 "current-context: c\n"
                                 "clusters: [{name: k, cluster: {server: 'https://k'}}]\n"
                                 "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                                 "users: [{name: u, user: {tokenFile: token}}]\n");
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  ASSERT_NE(config->token, nullptr);
  auto token = config->token->Token();
  ASSERT_TRUE(token.has_value());
  EXPECT_EQ(*token, "file-token");
}

TEST_F(KubeConfigTest, UnreadableTokenFileFailsAtLoad) {
  const std::string path = Write("config",
                                 "current-context: c\n"
                                 "clusters: [{name: k, cluster: {server: 'https://k'}}]\n"
                                 "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                                 "users: [{name: u, user: {tokenFile: missing-token}}]\n");
  auto config = LoadKubeconfig(path);
  ASSERT_FALSE(config.has_value());
  EXPECT_EQ(config.error().kind, ErrorKind::kConfig);
  EXPECT_THAT(config.error().message, HasSubstr("user \"u\": cannot read token file"));
  EXPECT_THAT(config.error().message, HasSubstr((dir_ / "missing-token").string()));
}

TEST_F(KubeConfigTest, InlineDataWinsOverFile) {
  auto config = ParseKubeconfig(Fill(R"(current-context: c
clusters:
- name: k
  cluster:
    server: https://k
    certificate-authority: /does/not/exist.crt
    certificate-authority-data: {ca}
contexts: [{name: c, context: {cluster: k}}]
)",
                                     {{"ca", Base64(kCaPem)}}),
                                "", dir_.string());
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  EXPECT_EQ(config->ca_pem, kCaPem);
}

TEST_F(KubeConfigTest, Base64WithLineBreaksOrWithoutPadding) {
  std::string folded = Base64(kCaPem);
  folded.insert(20, "\n      ");        // a folded YAML scalar keeps the break as a space
  std::string unpadded = Base64("ab");  // "YWI="
  ASSERT_EQ(unpadded.back(), '=');
  unpadded.pop_back();
  auto config =
      ParseKubeconfig(Fill(R"(current-context: c
clusters:
- name: k
  cluster:
    server: https://k
    certificate-authority-data: >-
      {folded}
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {client-certificate-data: {cert}, client-key-data: {key}}}]
)",
                           {{"folded", folded}, {"cert", unpadded}, {"key", Base64("k")}}),
                      "", "");
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  EXPECT_EQ(config->ca_pem, kCaPem);
  EXPECT_EQ(config->client_cert_pem, "ab");
  EXPECT_EQ(config->client_key_pem, "k");
}

TEST_F(KubeConfigTest, MissingContext) {
  const std::string path = Write("config", TwoContextKubeconfig());
  auto config = LoadKubeconfig(path, "foo");
  ASSERT_FALSE(config.has_value());
  EXPECT_EQ(config.error().kind, ErrorKind::kConfig);
  EXPECT_THAT(config.error().message,
              StartsWith("kubeconfig " + path + ": context \"foo\" not found"));
  EXPECT_THAT(config.error().message, HasSubstr("\"cert\", \"token\""));  // what is there
}

TEST_F(KubeConfigTest, NoCurrentContext) {
  auto config = ParseKubeconfig("clusters: [{name: k, cluster: {server: 'https://k'}}]\n", "", "");
  ASSERT_FALSE(config.has_value());
  EXPECT_THAT(config.error().message, HasSubstr("current-context is not set"));
}

TEST_F(KubeConfigTest, MissingCluster) {
  auto config = ParseKubeconfig(
      "current-context: c\n"
      "clusters: [{name: k, cluster: {server: 'https://k'}}]\n"
      "contexts: [{name: c, context: {cluster: gone, user: u}}]\n",
      "", "");
  ASSERT_FALSE(config.has_value());
  EXPECT_THAT(config.error().message,
              HasSubstr("cluster \"gone\" (used by context \"c\") not found (have \"k\")"));
}

TEST_F(KubeConfigTest, ContextWithoutCluster) {
  auto config = ParseKubeconfig(
      "current-context: c\n"
      "contexts: [{name: c, context: {user: u}}]\n",
      "", "");
  ASSERT_FALSE(config.has_value());
  EXPECT_THAT(config.error().message, HasSubstr("context \"c\" names no cluster"));
}

TEST_F(KubeConfigTest, MissingUser) {
  auto config = ParseKubeconfig(
      "current-context: c\n"
      "clusters: [{name: k, cluster: {server: 'https://k'}}]\n"
      "contexts: [{name: c, context: {cluster: k, user: ghost}}]\n",
      "", "");
  ASSERT_FALSE(config.has_value());
  EXPECT_THAT(config.error().message,
              HasSubstr("user \"ghost\" (used by context \"c\") not found (users is empty)"));
}

TEST_F(KubeConfigTest, ClusterWithoutServer) {
  auto config = ParseKubeconfig(
      "current-context: c\n"
      "clusters: [{name: k, cluster: {tls-server-name: x}}]\n"
      "contexts: [{name: c, context: {cluster: k}}]\n",
      "", "");
  ASSERT_FALSE(config.has_value());
  EXPECT_THAT(config.error().message, HasSubstr("no server for cluster \"k\""));
}

TEST_F(KubeConfigTest, ServerWithoutSchemeDefaultsToHttps) {
  auto config = ParseKubeconfig(
      "current-context: c\n"
      "clusters: [{name: k, cluster: {server: 'k.example:6443/'}}]\n"
      "contexts: [{name: c, context: {cluster: k}}]\n",
      "", "");
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  EXPECT_EQ(config->server, "https://k.example:6443");
}

TEST_F(KubeConfigTest, MalformedYamlNamesTheLine) {
  const std::string path = Write("config",
                                 "current-context: c\n"
                                 "clusters:\n"
                                 "  - name: [unclosed\n"
                                 "contexts: []\n");
  auto config = LoadKubeconfig(path);
  ASSERT_FALSE(config.has_value());
  EXPECT_EQ(config.error().kind, ErrorKind::kConfig);
  EXPECT_THAT(config.error().message,
              StartsWith("kubeconfig " + path + ": malformed YAML at line"));
}

TEST_F(KubeConfigTest, MalformedYamlLineNumberIsOneBased) {
  auto config = ParseKubeconfig("current-context: c\nclusters: []\n  contexts: []\n", "", "");
  ASSERT_FALSE(config.has_value());
  EXPECT_THAT(config.error().message, HasSubstr("malformed YAML at line 3, column"));
}

TEST_F(KubeConfigTest, WrongShapesAreErrorsNotCrashes) {
  auto list_is_map = ParseKubeconfig(
      "current-context: c\n"
      "contexts: {c: {cluster: k}}\n",
      "", "");
  ASSERT_FALSE(list_is_map.has_value());
  EXPECT_THAT(list_is_map.error().message, HasSubstr("contexts must be a list (line 2)"));

  auto server_is_list = ParseKubeconfig(
      "current-context: c\n"
      "clusters: [{name: k, cluster: {server: [a, b]}}]\n"
      "contexts: [{name: c, context: {cluster: k}}]\n",
      "", "");
  ASSERT_FALSE(server_is_list.has_value());
  EXPECT_THAT(server_is_list.error().message, HasSubstr("cluster \"k\": server must be a string"));

  auto bad_bool = ParseKubeconfig(
      "current-context: c\n"
      "clusters: [{name: k, cluster: {server: 'https://k', insecure-skip-tls-verify: maybe}}]\n"
      "contexts: [{name: c, context: {cluster: k}}]\n",
      "", "");
  ASSERT_FALSE(bad_bool.has_value());
  EXPECT_THAT(bad_bool.error().message,
              HasSubstr("insecure-skip-tls-verify must be true or false"));

  auto scalar_root = ParseKubeconfig("just a string\n", "", "");
  ASSERT_FALSE(scalar_root.has_value());
  EXPECT_THAT(scalar_root.error().message, HasSubstr("top level must be a mapping"));

  auto empty = ParseKubeconfig("", "", "");
  ASSERT_FALSE(empty.has_value());
  EXPECT_THAT(empty.error().message, HasSubstr("empty"));
}

TEST_F(KubeConfigTest, InvalidBase64) {
  auto cert = ParseKubeconfig(Fill(R"(current-context: c
clusters: [{name: k, cluster: {server: 'https://k'}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {client-certificate-data: 'not*base64!', client-key-data: {key}}}]
)",
                                   {{"key", Base64(kKeyPem)}}),
                              "", "");
  ASSERT_FALSE(cert.has_value());
  EXPECT_EQ(cert.error().kind, ErrorKind::kConfig);
  EXPECT_THAT(cert.error().message,
              HasSubstr("user \"u\": client-certificate-data is not valid base64"));

  // Raw PEM pasted where base64 belongs.
  auto ca = ParseKubeconfig(
      "current-context: c\n"
      "clusters:\n"
      "- name: k\n"
      "  cluster:\n"
      "    server: https://k\n"
      "    certificate-authority-data: '-----BEGIN CERTIFICATE-----'\n"
      "contexts: [{name: c, context: {cluster: k}}]\n",
      "", "");
  ASSERT_FALSE(ca.has_value());
  EXPECT_THAT(ca.error().message,
              HasSubstr("cluster \"k\": certificate-authority-data is not valid base64"));

  // Padding that does not complete a quantum, and padding in the middle.
  for (const char* bad : {"QQ=", "QQ==QQ==", "Q", "QUJD===="}) {
    auto result = ParseKubeconfig(Fill(R"(current-context: c
clusters: [{name: k, cluster: {server: 'https://k', certificate-authority-data: '{bad}'}}]
contexts: [{name: c, context: {cluster: k}}]
)",
                                       {{"bad", bad}}),
                                  "", "");
    ASSERT_FALSE(result.has_value()) << bad;
    EXPECT_THAT(result.error().message, HasSubstr("not valid base64")) << bad;
  }
}

TEST_F(KubeConfigTest, MissingCertificateFile) {
  const std::string path = Write("config",
                                 "current-context: c\n"
                                 "clusters:\n"
                                 "- name: k\n"
                                 "  cluster: {server: 'https://k', certificate-authority: ca.crt}\n"
                                 "contexts: [{name: c, context: {cluster: k}}]\n");
  auto config = LoadKubeconfig(path);
  ASSERT_FALSE(config.has_value());
  EXPECT_THAT(config.error().message,
              HasSubstr("cluster \"k\": cannot read certificate-authority " +
                        (dir_ / "ca.crt").string() + ": No such file or directory"));
}

TEST_F(KubeConfigTest, CertificateWithoutKey) {
  auto config = ParseKubeconfig(Fill(R"(current-context: c
clusters: [{name: k, cluster: {server: 'https://k'}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {client-certificate-data: {cert}}}]
)",
                                     {{"cert", Base64(kCertPem)}}),
                                "", "");
  ASSERT_FALSE(config.has_value());
  EXPECT_THAT(config.error().message,
              HasSubstr("user \"u\": client-certificate given without client-key"));
}

TEST_F(KubeConfigTest, UnsupportedAuthenticationIsAnError) {
  auto exec = ParseKubeconfig(
      "current-context: c\n"
      "clusters: [{name: k, cluster: {server: 'https://k'}}]\n"
      "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
      "users: [{name: u, user: {exec: {command: gke-gcloud-auth-plugin}}}]\n",
      "", "");
  ASSERT_FALSE(exec.has_value());
  EXPECT_THAT(exec.error().message, HasSubstr("user \"u\": exec credential plugins"));
}

TEST_F(KubeConfigTest, InsecureSkipTlsVerify) {
  auto insecure = ParseKubeconfig(
      "current-context: c\n"
      "clusters: [{name: k, cluster: {server: 'https://k', insecure-skip-tls-verify: true}}]\n"
      "contexts: [{name: c, context: {cluster: k}}]\n",
      "", "");
  ASSERT_TRUE(insecure.has_value()) << insecure.error().ToString();
  EXPECT_TRUE(insecure->insecure_skip_tls_verify);

  auto contradictory = ParseKubeconfig(Fill(R"(current-context: c
clusters:
- name: k
  cluster:
    server: https://k
    insecure-skip-tls-verify: true
    certificate-authority-data: {ca}
contexts: [{name: c, context: {cluster: k}}]
)",
                                            {{"ca", Base64(kCaPem)}}),
                                       "", "");
  ASSERT_FALSE(contradictory.has_value());
  EXPECT_THAT(contradictory.error().message, HasSubstr("cannot be combined"));
}

TEST_F(KubeConfigTest, UnreadableKubeconfigFile) {
  const std::string path = (dir_ / "nope").string();
  auto config = LoadKubeconfig(path);
  ASSERT_FALSE(config.has_value());
  EXPECT_EQ(config.error().message,
            "kubeconfig " + path + ": cannot read: No such file or directory");
}

// --- TokenSource -------------------------------------------------------------------------

using KubeTokenSourceTest = TempDirTest;

TEST_F(KubeTokenSourceTest, StaticTokenNeverChanges) {
  auto source = TokenSource::Static("abc");
  auto token = source->Token();
  ASSERT_TRUE(token.has_value());
  EXPECT_EQ(*token, "abc");
}

TEST_F(KubeTokenSourceTest, FileIsReReadOnlyAfterRefresh) {
  FakeClock clock;
  const std::string path = Write("token", "one\n");
  auto source = TokenSource::FromFile(path, std::chrono::minutes(1), clock);
  EXPECT_EQ(source->Token().value(), "one");

  Write("token", "two\n");  // the kubelet rotates the token
  EXPECT_EQ(source->Token().value(), "one");
  clock.Advance(std::chrono::seconds(59));
  EXPECT_EQ(source->Token().value(), "one");
  clock.Advance(std::chrono::seconds(1));
  EXPECT_EQ(source->Token().value(), "two");
}

TEST_F(KubeTokenSourceTest, ReloadReadsTheFileAtOnceAndSaysWhetherTheTokenChanged) {
  FakeClock clock;
  const std::string path = Write("token", "one\n");
  auto source = TokenSource::FromFile(path, std::chrono::minutes(1), clock);
  EXPECT_EQ(source->Token().value(), "one");
  EXPECT_FALSE(source->Reload());  // the same token
  Write("token", "two\n");
  EXPECT_TRUE(source->Reload());
  EXPECT_EQ(source->Token().value(), "two");
  EXPECT_FALSE(source->Reload());
  fs::remove(path);
  EXPECT_FALSE(source->Reload());  // unreadable: keeps the token
  EXPECT_EQ(source->Token().value(), "two");
  EXPECT_FALSE(TokenSource::Static("abc")->Reload());
}

TEST_F(KubeTokenSourceTest, KeepsLastGoodTokenWhenAReReadFails) {
  FakeClock clock;
  const std::string path = Write("token", "one");
  auto source = TokenSource::FromFile(path, std::chrono::minutes(1), clock);
  EXPECT_EQ(source->Token().value(), "one");

  fs::remove(path);
  clock.Advance(std::chrono::minutes(1));
  auto kept = source->Token();
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(*kept, "one");

  Write("token", "   \n");  // empty counts as a failed read too
  clock.Advance(std::chrono::minutes(1));
  EXPECT_EQ(source->Token().value(), "one");

  Write("token", "three");
  EXPECT_EQ(source->Token().value(), "one");  // a failure also waits out the refresh period
  clock.Advance(std::chrono::minutes(1));
  EXPECT_EQ(source->Token().value(), "three");
}

TEST_F(KubeTokenSourceTest, NeverReadableIsAnErrorAndRetriedImmediately) {
  FakeClock clock;
  const std::string path = (dir_ / "token").string();
  auto source = TokenSource::FromFile(path, std::chrono::minutes(1), clock);
  auto missing = source->Token();
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().kind, ErrorKind::kConfig);
  EXPECT_EQ(missing.error().message,
            "cannot read token file " + path + ": No such file or directory");

  Write("token", "");
  auto empty = source->Token();
  ASSERT_FALSE(empty.has_value());
  EXPECT_THAT(empty.error().message, HasSubstr("empty"));

  Write("token", "late\n");  // no clock movement needed: there was never a good token
  EXPECT_EQ(source->Token().value(), "late");
}

// --- InClusterConfig ---------------------------------------------------------------------

using KubeInClusterTest = TempDirTest;

TEST_F(KubeInClusterTest, ReadsServiceAccountFiles) {
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
  Write("sa/token", "sa-token\n");
  Write("sa/ca.crt", kCaPem);
  Write("sa/namespace", "tpujob-system\n");
  auto config = InClusterConfig((dir_ / "sa").string());
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->ca_pem, kCaPem);
  EXPECT_EQ(config->default_namespace, "tpujob-system");
  ASSERT_NE(config->token, nullptr);
  EXPECT_EQ(config->token->Token().value(), "sa-token");
  EXPECT_THAT(config->source, HasSubstr("in-cluster"));
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST_F(KubeInClusterTest, Ipv6HostIsBracketedAndNamespaceDefaults) {
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "fd00:10:96::1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "6443");
  Write("sa/token", "t");
  Write("sa/ca.crt", kCaPem);
  auto config = InClusterConfig((dir_ / "sa").string() + "/");
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  EXPECT_EQ(config->server, "https://[fd00:10:96::1]:6443");
  EXPECT_EQ(config->default_namespace, "default");
}

TEST_F(KubeInClusterTest, MissingEnvironment) {
  ScopedEnv host("KUBERNETES_SERVICE_HOST", std::nullopt);
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
  auto config = InClusterConfig(dir_.string());
  ASSERT_FALSE(config.has_value());
  EXPECT_THAT(config.error().message, HasSubstr("KUBERNETES_SERVICE_HOST"));
}

TEST_F(KubeInClusterTest, MissingTokenOrCa) {
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
  Write("sa/ca.crt", kCaPem);
  auto no_token = InClusterConfig((dir_ / "sa").string());
  ASSERT_FALSE(no_token.has_value());
  EXPECT_THAT(no_token.error().message, HasSubstr("in-cluster config: cannot read token file " +
                                                  (dir_ / "sa/token").string()));

  Write("sa/token", "t");
  fs::remove(dir_ / "sa/ca.crt");
  auto no_ca = InClusterConfig((dir_ / "sa").string());
  ASSERT_FALSE(no_ca.has_value());
  EXPECT_THAT(no_ca.error().message, HasSubstr("cannot read CA bundle"));
}

// --- ResolveConfig -----------------------------------------------------------------------

class KubeResolveConfigTest : public TempDirTest {
 protected:
  // A kubeconfig whose server names the file, so each test can tell which one was used.
  std::string WriteKubeconfig(const std::string& relative, const std::string& server) {
    return Write(relative, Fill(R"(current-context: c
clusters: [{name: k, cluster: {server: '{server}'}}]
contexts: [{name: c, context: {cluster: k}}]
)",
                                {{"server", server}}));
  }
};

TEST_F(KubeResolveConfigTest, ExplicitPathWins) {
  const std::string explicit_path = WriteKubeconfig("explicit", "https://explicit");
  const std::string env_path = WriteKubeconfig("env", "https://env");
  ScopedEnv kubeconfig("KUBECONFIG", env_path);
  auto config = ResolveConfig(explicit_path, "");
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  EXPECT_EQ(config->server, "https://explicit");
}

TEST_F(KubeResolveConfigTest, ExplicitPathErrorDoesNotFallBack) {
  const std::string env_path = WriteKubeconfig("env", "https://env");
  ScopedEnv kubeconfig("KUBECONFIG", env_path);
  auto config = ResolveConfig((dir_ / "missing").string(), "");
  ASSERT_FALSE(config.has_value());
  EXPECT_THAT(config.error().message, HasSubstr("missing: cannot read"));
}

TEST_F(KubeResolveConfigTest, FirstEntryOfKubeconfigList) {
  const std::string first = WriteKubeconfig("first", "https://first");
  const std::string second = WriteKubeconfig("second", "https://second");
  ScopedEnv kubeconfig("KUBECONFIG", ":" + first + ":" + second);
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");  // a kubeconfig beats in-cluster
  auto config = ResolveConfig("", "");
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  EXPECT_EQ(config->server, "https://first");
}

TEST_F(KubeResolveConfigTest, InClusterBeforeHomeKubeconfig) {
  WriteKubeconfig("home/.kube/config", "https://home");
  ScopedEnv kubeconfig("KUBECONFIG", std::nullopt);
  ScopedEnv home("HOME", (dir_ / "home").string());
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
  auto config = ResolveConfig("", "");
  // In-cluster was chosen; the default service-account directory is absent in tests (if it is
  // not, we really are in a pod and the config is valid).
  if (config.has_value()) {
    EXPECT_EQ(config->server, "https://10.96.0.1:443");
  } else {
    EXPECT_THAT(config.error().message, StartsWith("in-cluster config:"));
  }

  // Asking for a context means a kubeconfig, so in-cluster is skipped.
  auto with_context = ResolveConfig("", "c");
  ASSERT_TRUE(with_context.has_value()) << with_context.error().ToString();
  EXPECT_EQ(with_context->server, "https://home");
}

TEST_F(KubeResolveConfigTest, HomeKubeconfigLast) {
  WriteKubeconfig("home/.kube/config", "https://home");
  ScopedEnv kubeconfig("KUBECONFIG", std::nullopt);
  ScopedEnv host("KUBERNETES_SERVICE_HOST", std::nullopt);
  ScopedEnv home("HOME", (dir_ / "home").string());
  auto config = ResolveConfig("", "");
  ASSERT_TRUE(config.has_value()) << config.error().ToString();
  EXPECT_EQ(config->server, "https://home");
  EXPECT_THAT(config->source, HasSubstr(".kube/config"));
}

TEST_F(KubeResolveConfigTest, NothingFoundExplainsWhatWasTried) {
  ScopedEnv kubeconfig("KUBECONFIG", std::nullopt);
  ScopedEnv host("KUBERNETES_SERVICE_HOST", std::nullopt);
  ScopedEnv home("HOME", (dir_ / "empty-home").string());
  auto config = ResolveConfig("", "");
  ASSERT_FALSE(config.has_value());
  EXPECT_EQ(config.error().kind, ErrorKind::kConfig);
  const std::string& message = config.error().message;
  EXPECT_THAT(message, HasSubstr("no Kubernetes configuration found"));
  EXPECT_THAT(message, HasSubstr("--kubeconfig"));
  EXPECT_THAT(message, HasSubstr("$KUBECONFIG is not set"));
  EXPECT_THAT(message, HasSubstr("KUBERNETES_SERVICE_HOST is not set"));
  EXPECT_THAT(message, HasSubstr((dir_ / "empty-home/.kube/config").string() + " does not exist"));
}

std::optional<std::string> CertFile() {
  const char* value = std::getenv("SSL_CERT_FILE");
  return value ? std::optional<std::string>(value) : std::nullopt;
}

TEST(KubeTrustTest, AConfiguredCaReplacesTheSystemBundleAsInClientGo) {
  ScopedEnv cert_file("SSL_CERT_FILE", std::nullopt);
  Config config;
  config.server = "https://127.0.0.1:6443";
  EXPECT_FALSE(TrustOnlyTheConfiguredCa(config)) << "no CA of its own: the system bundle stays";
  EXPECT_EQ(CertFile(), std::nullopt);

  config.ca_pem = "-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n";
  config.insecure_skip_tls_verify = true;
  EXPECT_FALSE(TrustOnlyTheConfiguredCa(config)) << "nothing is verified anyway";
  EXPECT_EQ(CertFile(), std::nullopt);

  config.insecure_skip_tls_verify = false;
  EXPECT_TRUE(TrustOnlyTheConfiguredCa(config));
  EXPECT_EQ(CertFile(), "/dev/null");
}

// The client would load it and then trust the configured CA alone (kube_client_tls_test), as
// kubectl ignores it; so it is not loaded at all.
TEST(KubeTrustTest, AnSslCertFileSetBeforeIsNotLoadedEither) {
  ScopedEnv cert_file("SSL_CERT_FILE", "/etc/pki/corporate.pem");
  Config config;
  config.ca_pem = "-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n";
  EXPECT_TRUE(TrustOnlyTheConfiguredCa(config));
  EXPECT_EQ(CertFile(), "/dev/null");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::kube
