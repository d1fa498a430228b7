// HTTPS for /metrics: the self-signed certificate, loading a mounted one, and the server
// speaking TLS with it, handing the Authorization header to the handler and picking up a
// renewed certificate without a restart. Requests are made with curl, verifying the server
// against the certificate as a CA.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "metrics/http_server.h"
#include "metrics/tls.h"
#include "scratch.h"
#include "shell.h"

namespace tpujob::metrics {
namespace TPUJOB_TEST_NS {

using ::tpujob::testing_util::TempDir;

TEST(TlsTest, SelfSignedCertificateLoadsAndNamesItsHosts) {
  TempDir dir;
  auto files = WriteSelfSignedCertificate(dir.path(), {"metrics.example", "127.0.0.1"});
  ASSERT_TRUE(files) << files.error().ToString();
  EXPECT_EQ(files->cert_file, dir.path() + "/tls.crt");
  EXPECT_EQ(std::filesystem::status(files->key_file).permissions() &
                (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
            std::filesystem::perms::none);
  auto loaded = LoadCertificateDir(dir.path());
  ASSERT_TRUE(loaded) << loaded.error().ToString();
  const Answer text = Shell("openssl x509 -noout -text -in " + files->cert_file);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("DNS:metrics.example"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("IP Address:127.0.0.1"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("TLS Web Server Authentication"), std::string::npos);
  EXPECT_NE(text.output.find("CA:FALSE"), std::string::npos);
}

TEST(TlsTest, LoadingRefusesMissingOrMismatchedFiles) {
  TempDir a;
  TempDir b;
  EXPECT_FALSE(LoadCertificateDir(a.path()));  // nothing there
  ASSERT_TRUE(WriteSelfSignedCertificate(a.path(), {"a"}));
  ASSERT_TRUE(WriteSelfSignedCertificate(b.path(), {"b"}));
  std::filesystem::copy_file(b.path() + "/tls.key", a.path() + "/tls.key",
                             std::filesystem::copy_options::overwrite_existing);
  auto mismatched = LoadCertificateDir(a.path());
  ASSERT_FALSE(mismatched);
  EXPECT_NE(mismatched.error().message.find("does not match"), std::string::npos)
      << mismatched.error().message;
  std::ofstream(b.path() + "/tls.crt") << "not a certificate\n";
  EXPECT_FALSE(LoadCertificateDir(b.path()));
  EXPECT_FALSE(WriteSelfSignedCertificate(a.path(), {}));
}

TEST(TlsTest, ServerSpeaksHttpsPassesTheAuthorizationHeaderAndReloadsItsCertificate) {
  TempDir first;
  TempDir second;
  TempDir serving;
  ASSERT_TRUE(WriteSelfSignedCertificate(first.path(), {"localhost"}));
  ASSERT_TRUE(WriteSelfSignedCertificate(second.path(), {"localhost"}));
  for (const char* file : {"tls.crt", "tls.key"}) {
    std::filesystem::copy_file(first.path() + "/" + file, serving.path() + "/" + file);
  }
  auto files = LoadCertificateDir(serving.path());
  ASSERT_TRUE(files);
  files->reload_interval = {};  // look at the files at every handshake

  HttpServer server("127.0.0.1:0", *files);
  server.Handle("/metrics", [](const HttpRequest& request) {
    return HttpResponse{200, "text/plain", "authorization=" + request.authorization + "\n", {}};
  });
  ASSERT_TRUE(server.Start());
  const std::string url = "https://localhost:" + std::to_string(server.port()) + "/metrics";
  auto get = [&](const std::string& ca) {
    return Shell("curl -sS --max-time 10 --cacert " + ca + " -H 'Authorization: Bearer t0k' " +
                 url);
  };

  const Answer trusted = get(first.path() + "/tls.crt");
  EXPECT_EQ(trusted.exit_code, 0) << trusted.output;
  EXPECT_EQ(trusted.output, "authorization=Bearer t0k\n");
  const Answer untrusted = get(second.path() + "/tls.crt");
  EXPECT_NE(untrusted.exit_code, 0) << untrusted.output;
  const Answer plain =
      Shell("curl -sS --max-time 5 http://localhost:" + std::to_string(server.port()) + "/metrics");
  EXPECT_EQ(plain.output.find("authorization="), std::string::npos) << plain.output;
  // TLS 1.1 and older are refused.
  const Answer old_tls = Shell("curl -sS --max-time 5 --tls-max 1.1 -k " + url);
  EXPECT_NE(old_tls.exit_code, 0) << old_tls.output;

  // A renewed certificate (as a Secret update writes it) is served from the next handshake.
  for (const char* file : {"tls.crt", "tls.key"}) {
    std::filesystem::copy_file(second.path() + "/" + file, serving.path() + "/" + file,
                               std::filesystem::copy_options::overwrite_existing);
  }
  const Answer renewed = get(second.path() + "/tls.crt");
  EXPECT_EQ(renewed.exit_code, 0) << renewed.output;
  EXPECT_NE(get(first.path() + "/tls.crt").exit_code, 0);

  // A renewal that cannot be read keeps the previous pair.
  std::ofstream(serving.path() + "/tls.key") << "garbage\n";
  const Answer kept = get(second.path() + "/tls.crt");
  EXPECT_EQ(kept.exit_code, 0) << kept.output;
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::metrics
