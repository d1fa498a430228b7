#include "kube/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <utility>
#include <vector>

#include "base/logging.h"
#include "base/strings.h"

namespace tpujob::kube {
namespace {

namespace fs = std::filesystem;

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

// Reads a whole file; the error is the system's reason ("No such file or directory").
std::expected<std::string, std::string> ReadFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return std::unexpected(std::string(std::strerror(errno)));
  std::string content;
  char buffer[8192];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) content.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int read_errno = errno;
  std::fclose(file);
  if (failed) return std::unexpected(std::string(std::strerror(read_errno)));
  return content;
}

// Standard base64 (RFC 4648 section 4). Whitespace anywhere is ignored, as YAML folding may add
// line breaks; padding may be omitted but, when present, must complete the last quantum.
std::optional<std::string> DecodeBase64(std::string_view text) {
  std::string chars;
  chars.reserve(text.size());
  for (const char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) chars.push_back(c);
  }
  size_t padding = 0;
  while (!chars.empty() && chars.back() == '=') {
    chars.pop_back();
    ++padding;
  }
  if (padding > 2 || chars.size() % 4 == 1) return std::nullopt;
  if (padding > 0 && (chars.size() + padding) % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(chars.size() * 3 / 4);
  uint32_t bits = 0;
  int bit_count = 0;
  for (const char c : chars) {
    int value;
    if (c >= 'A' && c <= 'Z') {
      value = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      value = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      value = c - '0' + 52;
    } else if (c == '+') {
      value = 62;
    } else if (c == '/') {
      value = 63;
    } else {
      return std::nullopt;  // includes '=' before the end
    }
    bits = (bits << 6) | static_cast<uint32_t>(value);
    bit_count += 6;
    if (bit_count >= 8) {
      bit_count -= 8;
      out.push_back(static_cast<char>((bits >> bit_count) & 0xFF));
    }
  }
  return out;
}

std::string ResolvePath(const std::string& base_dir, const std::string& path) {
  if (path.empty() || base_dir.empty() || fs::path(path).is_absolute()) return path;
  return (fs::path(base_dir) / path).lexically_normal().string();
}

std::string LineOf(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? std::string() : " (line " + std::to_string(mark.line + 1) + ")";
}

// Reads the kubeconfig schema (clientcmd/api/v1) out of a parsed document. Every error names
// the file and the entry at fault.
class KubeconfigReader {
 public:
  KubeconfigReader(std::string label, std::string base_dir)
      : label_(std::move(label)), base_dir_(std::move(base_dir)) {}

  Result<Config> Read(const YAML::Node& root, const std::string& context_override) {
    if (!root.IsDefined() || root.IsNull()) return Fail("the file is empty");
    if (!root.IsMap()) return Fail("the top level must be a mapping" + LineOf(root));

    std::string context_name = context_override;
    if (context_name.empty()) {
      auto current = String(root, "current-context", "");
      if (!current) return std::unexpected(current.error());
      context_name = *current;
    }
    if (context_name.empty()) {
      return Fail("no context given and current-context is not set");
    }
    auto context = Named(root, "contexts", "context", context_name);
    if (!context) return std::unexpected(context.error());
    const std::string context_scope = "context " + Quote(context_name);
    auto cluster_name = String(*context, "cluster", context_scope);
    auto user_name = String(*context, "user", context_scope);
    auto ns = String(*context, "namespace", context_scope);
    if (!cluster_name) return std::unexpected(cluster_name.error());
    if (!user_name) return std::unexpected(user_name.error());
    if (!ns) return std::unexpected(ns.error());
    if (cluster_name->empty()) return Fail(context_scope + " names no cluster");

    Config config;
    config.source = label_ + ", context " + context_name;
    if (!ns->empty()) config.default_namespace = *ns;

    auto cluster = Named(root, "clusters", "cluster", *cluster_name, context_name);
    if (!cluster) return std::unexpected(cluster.error());
    if (auto status = ReadCluster(*cluster, *cluster_name, config); !status) {
      return std::unexpected(status.error());
    }
    // A context without a user is legal: the server may allow anonymous requests.
    if (!user_name->empty()) {
      auto user = Named(root, "users", "user", *user_name, context_name);
      if (!user) return std::unexpected(user.error());
      if (auto status = ReadUser(*user, *user_name, config); !status) {
        return std::unexpected(status.error());
      }
    }
    return config;
  }

 private:
  std::unexpected<Error> Fail(const std::string& message) const {
    return std::unexpected(Error::Config(label_ + ": " + message));
  }

  // A string field of `map`; "" when absent or null. `scope` prefixes error messages.
  Result<std::string> String(const YAML::Node& map, const char* key,
                             const std::string& scope) const {
    const YAML::Node value = map[key];
    if (!value.IsDefined() || value.IsNull()) return std::string();
    if (!value.IsScalar()) {
      return Fail((scope.empty() ? "" : scope + ": ") + key + " must be a string" + LineOf(value));
    }
    return value.Scalar();
  }

  Result<bool> Bool(const YAML::Node& map, const char* key, const std::string& scope) const {
    const YAML::Node value = map[key];
    if (!value.IsDefined() || value.IsNull()) return false;
    bool out = false;
    if (!value.IsScalar() || !YAML::convert<bool>::decode(value, out)) {
      return Fail(scope + ": " + key + " must be true or false" + LineOf(value));
    }
    return out;
  }

  // Finds the entry named `name` in the list `list_key` ("clusters") and returns its body (the
  // `body_key` map, "cluster"). `used_by` is the context that referred to it, for messages.
  Result<YAML::Node> Named(const YAML::Node& root, const char* list_key, const char* body_key,
                           const std::string& name, const std::string& used_by = {}) const {
    const std::string what = std::string(body_key) + " " + Quote(name) +
                             (used_by.empty() ? "" : " (used by context " + Quote(used_by) + ")");
    const YAML::Node list = root[list_key];
    // A missing key gives an invalid node, on which only IsDefined() may be called.
    const bool present = list.IsDefined() && !list.IsNull();
    if (present && !list.IsSequence()) {
      return Fail(std::string(list_key) + " must be a list" + LineOf(list));
    }
    std::vector<std::string> available;
    if (present) {
      for (const YAML::Node& entry : list) {
        if (!entry.IsMap())
          return Fail(std::string(list_key) + " entries must be mappings" + LineOf(entry));
        auto entry_name = String(entry, "name", list_key);
        if (!entry_name) return std::unexpected(entry_name.error());
        if (*entry_name != name) {
          available.push_back(Quote(*entry_name));
          continue;
        }
        const YAML::Node body = entry[body_key];
        if (!body.IsDefined() || body.IsNull()) return YAML::Node(YAML::NodeType::Map);
        if (!body.IsMap())
          return Fail(what + ": " + body_key + " must be a mapping" + LineOf(body));
        return body;  // the first entry of a name wins, as in kubectl
      }
    }
    std::string message = what + " not found";
    if (available.empty()) {
      message += std::string(" (") + list_key + " is empty)";
    } else {
      message += " (have";
      for (size_t i = 0; i < available.size(); ++i) message += (i ? ", " : " ") + available[i];
      message += ")";
    }
    return Fail(message);
  }

  // Inline `<key>-data` (base64) wins over the file `<key>`, as in client-go. Returns "" when
  // neither is set.
  Result<std::string> DataOrFile(const YAML::Node& map, const std::string& key,
                                 const std::string& scope) const {
    auto data = String(map, (key + "-data").c_str(), scope);
    if (!data) return std::unexpected(data.error());
    if (!Trim(*data).empty()) {
      std::optional<std::string> decoded = DecodeBase64(*data);
      if (!decoded) return Fail(scope + ": " + key + "-data is not valid base64");
      if (decoded->empty()) return Fail(scope + ": " + key + "-data is empty");
      return *decoded;
    }
    auto file = String(map, key.c_str(), scope);
    if (!file) return std::unexpected(file.error());
    if (file->empty()) return std::string();
    const std::string path = ResolvePath(base_dir_, *file);
    auto content = ReadFile(path);
    if (!content) return Fail(scope + ": cannot read " + key + " " + path + ": " + content.error());
    if (content->empty()) return Fail(scope + ": " + key + " " + path + " is empty");
    return *content;
  }

  Status ReadCluster(const YAML::Node& cluster, const std::string& name, Config& config) const {
    const std::string scope = "cluster " + Quote(name);
    auto server = String(cluster, "server", scope);
    if (!server) return std::unexpected(server.error());
    if (Trim(*server).empty()) return Fail("no server for cluster " + Quote(name));
    config.server = std::string(Trim(*server));
    // client-go accepts "host:port" and assumes HTTPS.
    if (config.server.find("://") == std::string::npos) config.server = "https://" + config.server;
    while (config.server.size() > 1 && config.server.back() == '/') config.server.pop_back();

    auto tls_server_name = String(cluster, "tls-server-name", scope);
    if (!tls_server_name) return std::unexpected(tls_server_name.error());
    config.tls_server_name = *tls_server_name;

    auto ca = DataOrFile(cluster, "certificate-authority", scope);
    if (!ca) return std::unexpected(ca.error());
    config.ca_pem = *ca;

    auto insecure = Bool(cluster, "insecure-skip-tls-verify", scope);
    if (!insecure) return std::unexpected(insecure.error());
    if (*insecure) {
      // Same rule as client-go: trusting a CA and skipping verification contradict each other.
      if (!config.ca_pem.empty()) {
        return Fail(scope +
                    ": insecure-skip-tls-verify cannot be combined with a "
                    "certificate-authority");
      }
      log::Warn(
          "insecure-skip-tls-verify is set; the API server's certificate will NOT be verified",
          {{"config", label_}, {"scope", scope}});
      config.insecure_skip_tls_verify = true;
    }
    return {};
  }

  Status ReadUser(const YAML::Node& user, const std::string& name, Config& config) const {
    const std::string scope = "user " + Quote(name);
    if (user["exec"].IsDefined() && !user["exec"].IsNull()) {
      return Fail(scope +
                  ": exec credential plugins are not supported; use a client "
                  "certificate, token or tokenFile");
    }
    if (user["auth-provider"].IsDefined() && !user["auth-provider"].IsNull()) {
      return Fail(scope +
                  ": auth-provider is not supported; use a client certificate, token "
                  "or tokenFile");
    }
    if (user["username"].IsDefined() || user["password"].IsDefined()) {
      return Fail(scope + ": basic authentication (username/password) is not supported");
    }

    auto cert = DataOrFile(user, "client-certificate", scope);
    if (!cert) return std::unexpected(cert.error());
    auto key = DataOrFile(user, "client-key", scope);
    if (!key) return std::unexpected(key.error());
    if (cert->empty() != key->empty()) {
      return Fail(scope + (cert->empty() ? ": client-key given without client-certificate"
                                         : ": client-certificate given without client-key"));
    }
    config.client_cert_pem = *cert;
    config.client_key_pem = *key;

    auto token = String(user, "token", scope);
    if (!token) return std::unexpected(token.error());
    auto token_file = String(user, "tokenFile", scope);
    if (!token_file) return std::unexpected(token_file.error());
    if (!Trim(*token).empty()) {  // an inline token wins over tokenFile, as in client-go
      config.token = TokenSource::Static(std::string(Trim(*token)));
    } else if (!token_file->empty()) {
      config.token = TokenSource::FromFile(ResolvePath(base_dir_, *token_file));
      // Fail now rather than on the first request if the file was never readable.
      if (auto first = config.token->Token(); !first) {
        return Fail(scope + ": " + first.error().message);
      }
    }
    return {};
  }

  std::string label_;
  std::string base_dir_;
};

Result<Config> Parse(const std::string& yaml_text, const std::string& context,
                     const std::string& base_dir, const std::string& label) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    std::string where;
    if (!e.mark.is_null()) {
      where = " at line " + std::to_string(e.mark.line + 1) + ", column " +
              std::to_string(e.mark.column + 1);
    }
    return std::unexpected(Error::Config(label + ": malformed YAML" + where + ": " + e.msg));
  }
  // The reader checks types before converting, so these are only a safety net: no yaml-cpp
  // exception may escape this module.
  try {
    return KubeconfigReader(label, base_dir).Read(root, context);
  } catch (const YAML::Exception& e) {
    return std::unexpected(Error::Config(label + ": " + e.what()));
  } catch (const std::exception& e) {
    return std::unexpected(Error::Config(label + ": " + e.what()));
  }
}

}  // namespace

TokenSource::TokenSource(std::string token, std::string path, Duration refresh, Clock& clock)
    : token_(std::move(token)), path_(std::move(path)), refresh_(refresh), clock_(clock) {}

std::shared_ptr<TokenSource> TokenSource::Static(std::string token) {
  return std::shared_ptr<TokenSource>(
      new TokenSource(std::move(token), {}, Duration::zero(), Clock::Real()));
}

std::shared_ptr<TokenSource> TokenSource::FromFile(std::string path, Duration refresh,
                                                   Clock& clock) {
  return std::shared_ptr<TokenSource>(new TokenSource({}, std::move(path), refresh, clock));
}

bool TokenSource::Reload() {
  std::lock_guard<std::mutex> lock(mu_);
  if (path_.empty()) return false;
  auto content = ReadFile(path_);
  if (!content) return false;
  const std::string_view fresh = Trim(*content);
  if (fresh.empty() || fresh == token_) return false;
  token_ = std::string(fresh);
  read_at_ = clock_.Now();
  log::Info("the token file holds a new token; using it", {{"path", path_}});
  return true;
}

Result<std::string> TokenSource::Token() {
  std::lock_guard<std::mutex> lock(mu_);
  if (path_.empty()) return token_;
  const TimePoint now = clock_.Now();
  if (read_at_ && now - *read_at_ < refresh_) return token_;

  std::string why;
  if (auto content = ReadFile(path_); !content) {
    why = content.error();
  } else if (const std::string_view fresh = Trim(*content); fresh.empty()) {
    why = "the file is empty";
  } else {
    token_ = std::string(fresh);
    read_at_ = now;
    return token_;
  }
  if (token_.empty()) {
    // Never read successfully: try again on the next call rather than after `refresh_`.
    return std::unexpected(Error::Config("cannot read token file " + path_ + ": " + why));
  }
  // The kubelet replaces the file atomically, so a failed read is transient; the old token is
  // valid for a while longer. Retry after the next refresh period.
  log::Warn("cannot re-read the token file; keeping the previous token",
            {{"path", path_}, {"error", why}});
  read_at_ = now;
  return token_;
}

Result<Config> ParseKubeconfig(const std::string& yaml_text, const std::string& context,
                               const std::string& base_dir) {
  return Parse(yaml_text, context, base_dir, "kubeconfig");
}

Result<Config> LoadKubeconfig(const std::string& path, const std::string& context) {
  const std::string label = "kubeconfig " + path;
  auto text = ReadFile(path);
  if (!text) return std::unexpected(Error::Config(label + ": cannot read: " + text.error()));
  std::string base_dir = fs::path(path).parent_path().string();
  if (base_dir.empty()) base_dir = ".";
  return Parse(*text, context, base_dir, label);
}

Result<Config> InClusterConfig(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return std::unexpected(Error::Config(
        "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set "
        "(is this running in a pod?)"));
  }
  std::string host_part = host;
  if (host_part.find(':') != std::string::npos && host_part.front() != '[') {
    host_part = "[" + host_part + "]";  // IPv6 literal
  }
  Config config;
  config.server = "https://" + host_part + ":" + port;
  config.source = "in-cluster (service account " + sa_dir + ")";

  const std::string dir = sa_dir.empty() || sa_dir.back() == '/' ? sa_dir : sa_dir + "/";
  config.token = TokenSource::FromFile(dir + "token");
  if (auto first = config.token->Token(); !first) {
    return std::unexpected(Error::Config("in-cluster config: " + first.error().message));
  }
  // Unlike client-go, which logs and falls back to the system trust store, a missing CA is an
  // error: the cluster's CA is what signs the API server's certificate.
  auto ca = ReadFile(dir + "ca.crt");
  if (!ca) {
    return std::unexpected(
        Error::Config("in-cluster config: cannot read CA bundle " + dir + "ca.crt: " + ca.error()));
  }
  if (Trim(*ca).empty()) {
    return std::unexpected(
        Error::Config("in-cluster config: CA bundle " + dir + "ca.crt is empty"));
  }
  config.ca_pem = *ca;
  if (auto ns = ReadFile(dir + "namespace"); ns && !Trim(*ns).empty()) {
    config.default_namespace = std::string(Trim(*ns));
  }
  return config;
}

Result<Config> ResolveConfig(const std::string& kubeconfig_path, const std::string& context) {
  if (!kubeconfig_path.empty()) return LoadKubeconfig(kubeconfig_path, context);

  std::vector<std::string> tried = {"no --kubeconfig given"};
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
    // Only the first entry of the list is used; merging several files is not supported.
    const std::string_view list = env;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t end = std::min(list.find(':', start), list.size());
      const std::string entry(Trim(list.substr(start, end - start)));
      if (!entry.empty()) return LoadKubeconfig(entry, context);
      start = end + 1;
    }
    tried.push_back("$KUBECONFIG names no file");
  } else {
    tried.push_back("$KUBECONFIG is not set");
  }

  const char* service_host = std::getenv("KUBERNETES_SERVICE_HOST");
  if (service_host != nullptr && *service_host != '\0') {
    // A context only means something in a kubeconfig, so asking for one skips in-cluster.
    if (context.empty()) return InClusterConfig();
    tried.push_back("in-cluster config skipped because context " + Quote(context) +
                    " was requested");
  } else {
    tried.push_back("not in a cluster (KUBERNETES_SERVICE_HOST is not set)");
  }

  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    const std::string path = (fs::path(home) / ".kube" / "config").string();
    std::error_code ec;
    if (fs::exists(path, ec)) return LoadKubeconfig(path, context);
    tried.push_back(path + " does not exist");
  } else {
    tried.push_back("$HOME is not set, so no ~/.kube/config");
  }

  std::string message = "no Kubernetes configuration found:";
  for (size_t i = 0; i < tried.size(); ++i) message += (i ? "; " : " ") + tried[i];
  return std::unexpected(Error::Config(message));
}

bool TrustOnlyTheConfiguredCa(const Config& config) {
  if (config.ca_pem.empty() || config.insecure_skip_tls_verify) return false;
  return ::setenv("SSL_CERT_FILE", "/dev/null", /*overwrite=*/1) == 0;
}

}  // namespace tpujob::kube
