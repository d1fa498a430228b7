// Where the API server is and how to authenticate to it: from a kubeconfig file (contexts,
// client certificate/key, bearer token or token file, CA as inline data or a file), or from
// the in-cluster service account (token file re-read periodically, CA bundle).
//
// TLS is always verified; `insecure_skip_tls_verify` is honoured only when the kubeconfig
// explicitly sets it, and a warning is logged.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/clock.h"
#include "kube/error.h"

namespace tpujob::kube {

// A bearer token that may come from a file the kubelet rotates (projected service-account
// token). Token() re-reads the file at most every `refresh` and keeps the last good value if a
// read fails. The server refusing the token (401) is a reason to read the file again at once:
// Reload(), as client-go does when a rotated token was revoked before its refresh. Thread-safe.
class TokenSource {
 public:
  static std::shared_ptr<TokenSource> Static(std::string token);
  static std::shared_ptr<TokenSource> FromFile(std::string path,
                                               Duration refresh = std::chrono::minutes(1),
                                               Clock& clock = Clock::Real());
  Result<std::string> Token();
  // Reads the file again now; true when it holds another token than the one in use.
  bool Reload();

 private:
  TokenSource(std::string token, std::string path, Duration refresh, Clock& clock);
  std::mutex mu_;
  std::string token_;
  std::string path_;
  Duration refresh_;
  Clock& clock_;
  std::optional<TimePoint> read_at_;
};

struct Config {
  std::string server;           // "https://127.0.0.1:6443"
  std::string tls_server_name;  // SNI / verification name override; empty = host of `server`
  std::string ca_pem;           // PEM bundle; empty = system trust store
  std::string client_cert_pem;  // client certificate authentication
  std::string client_key_pem;
  std::shared_ptr<TokenSource> token;  // bearer token authentication; null = none
  bool insecure_skip_tls_verify = false;
  std::string default_namespace = "default";
  std::string source;  // where this came from, for logs ("kubeconfig /x, context y")

  double qps = 0;  // client-side limit; <= 0 disables it (the API server's APF throttles)
  int burst = 100;
  std::chrono::seconds request_timeout{30};
  // A watch that delivers nothing (no event, no bookmark, no end) for this long is given up as
  // silently dead (a half-open connection): its read fails with Error::IsSilent(). The caller
  // must ask the server to end its watches sooner than this (WatchOptions::timeout_seconds), so
  // a healthy watch always delivers something in time. 0: no limit (reads wait up to 15
  // minutes, the watch request's timeout).
  std::chrono::seconds watch_idle_timeout{0};
  int max_retries = 5;  // for 429, 5xx and transport errors; 0 = no retries
  std::string user_agent = "tpujob-operator";
};

// Loads `path` (a kubeconfig file) using `context`, or its current-context when empty.
// Relative file references are resolved against the file's directory, as kubectl does.
Result<Config> LoadKubeconfig(const std::string& path, const std::string& context = {});

// Same, from the YAML text itself; `base_dir` resolves relative paths.
Result<Config> ParseKubeconfig(const std::string& yaml_text, const std::string& context,
                               const std::string& base_dir);

// In-cluster configuration: KUBERNETES_SERVICE_HOST/PORT and the service-account files under
// `sa_dir` (token, ca.crt, namespace).
Result<Config> InClusterConfig(
    const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// The usual resolution order: explicit path, then $KUBECONFIG, then in-cluster, then
// ~/.kube/config.
Result<Config> ResolveConfig(const std::string& kubeconfig_path, const std::string& context);

// When `config` names its own CA, as kubeconfigs and the in-cluster configuration do, keeps
// OpenSSL from loading a CA bundle file into every new connection, by pointing SSL_CERT_FILE at
// /dev/null (replacing any value it had); returns whether it did. The client trusts only the
// configured CA either way, as client-go does (see NewClient): this only saves the work.
//
// Why: cpprestsdk loads the system trust store (SSL_CTX_set_default_verify_paths) into the TLS
// context of every new connection before the client replaces it. With Debian's bundle of ~140
// certificates that is about 30 ms of CPU per connection, and the connection pool drops
// connections left idle for 30-60 s: a 64-worker gang created in 16 parallel requests after a
// quiet minute paid about half a second for it, and 50 cold requests at once 2-3 s of CPU.
//
// Call it once, before any other thread starts (setenv is not thread-safe).
bool TrustOnlyTheConfiguredCa(const Config& config);

}  // namespace tpujob::kube
