// The Kubernetes REST client: typed verbs over JSON documents, errors as values.
//
// Client is an interface so reconcilers and the cache can be unit-tested against fakes; the
// real implementation (NewClient) speaks HTTPS to the API server through cpprestsdk (watches
// over connections of their own, kube/http_stream.h), retries
// throttling (429), server errors (5xx) and transport failures with jittered exponential
// backoff honouring Retry-After, and applies a client-side QPS/burst limit.
//
// Thread-safety: every method may be called concurrently from any thread. Calls block until
// they have a result (including retries). Watch streams are consumed by one thread each.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "kube/config.h"
#include "kube/error.h"
#include "kube/json.h"
#include "kube/resource.h"
#include "kube/watch.h"

namespace tpujob::kube {

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;        // "" = most recent (quorum read)
  std::string resource_version_match;  // "NotOlderThan" | "Exact" | ""
  int64_t limit = 0;                   // page size; 0 = server default (everything)
  std::string continue_token;
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // start after this version
  bool allow_bookmarks = true;
  std::optional<int> timeout_seconds;  // server closes the watch after this
  // A "watch list" (sendInitialEvents=true, resourceVersionMatch=NotOlderThan): the server first
  // streams every object matching the selectors as ADDED events, from its watch cache, then a
  // BOOKMARK annotated k8s.io/initial-events-end=true, then the watch goes on as usual. With
  // an empty resource_version the initial state is at least as new as a consistent read. A
  // server that does not serve it answers 4xx (Invalid or BadRequest).
  bool send_initial_events = false;
  // Events of objects come undecoded, with a digest that leaves these fields out
  // (WatchDecoder::set_volatile_fields); the reader decodes them. Null: every event decoded.
  std::shared_ptr<const VolatileFields> volatile_fields;
};

// The annotation of the BOOKMARK that ends a watch list's initial events.
inline constexpr std::string_view kInitialEventsEndAnnotation = "k8s.io/initial-events-end";

enum class PatchType { kMerge, kJson, kStrategicMerge, kApply };

struct PatchOptions {
  std::string field_manager = "tpujob-operator";
  bool force = false;       // server-side apply: take ownership of conflicting fields
  std::string subresource;  // "" or "status"
  // Called right before each attempt of this request is sent, once the client's rate limiter let
  // it through (the first attempt included); an error stops the request and is returned instead.
  // Leader election uses it so that a write that waited for its turn or a backoff is not sent
  // once this replica may no longer write.
  std::function<Status()> before_send = nullptr;
};

struct DeleteOptions {
  std::optional<int64_t> grace_period_seconds;
  std::string propagation_policy;  // "Foreground" | "Background" | "Orphan" | ""
  std::optional<std::string> precondition_uid;
  std::optional<std::string> precondition_resource_version;
  // Called right before each attempt of this request is sent, once the client's rate limiter let
  // it through (the first attempt included); an error stops the request and is returned instead.
  // Leader election uses it so that a write that waited for its turn or a backoff is not sent
  // once this replica may no longer write.
  std::function<Status()> before_send = nullptr;
};

struct WriteOptions {
  std::string field_manager = "tpujob-operator";
  std::string subresource;  // "" or "status" (update only)
  // Called right before each attempt of this request is sent, once the client's rate limiter let
  // it through (the first attempt included); an error stops the request and is returned instead.
  // Leader election uses it so that a write that waited for its turn or a backoff is not sent
  // once this replica may no longer write.
  std::function<Status()> before_send = nullptr;
};

// One open watch. Destroying it closes the connection.
class WatchStream {
 public:
  virtual ~WatchStream() = default;
  // Blocks until the next event. std::nullopt means the server ended the stream normally
  // (timeout reached); an Error means the connection broke or a line could not be decoded.
  virtual Result<std::optional<WatchEvent>> Next() = 0;
  // Unblocks Next() from another thread; Next() then returns an Error of kind kCancelled.
  virtual void Cancel() = 0;
};

// Counts of requests by verb and outcome, for tests and metrics.
struct RequestObserver {
  // verb ("GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE"), resource plural, HTTP
  // status (0 for transport errors), latency.
  std::function<void(std::string_view verb, std::string_view resource, int status,
                     Duration latency)>
      on_request;
};

class Client {
 public:
  virtual ~Client() = default;

  virtual Result<Json> Get(const Resource& r, const std::string& ns, const std::string& name,
                           const std::string& subresource = {}) = 0;
  // One page. The result is the List object: items, metadata.resourceVersion,
  // metadata.continue.
  virtual Result<Json> List(const Resource& r, const std::string& ns,
                            const ListOptions& options = {}) = 0;
  virtual Result<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                                     const WatchOptions& options) = 0;
  virtual Result<Json> Create(const Resource& r, const std::string& ns, const Json& object,
                              const WriteOptions& options = {}) = 0;
  // PUT: optimistic concurrency through metadata.resourceVersion in `object` (409 if stale).
  virtual Result<Json> Update(const Resource& r, const std::string& ns, const Json& object,
                              const WriteOptions& options = {}) = 0;
  // `body` is the patch document for the given type (for kApply: the full intended object).
  virtual Result<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                             PatchType type, const Json& body,
                             const PatchOptions& options = {}) = 0;
  // Returns the server's answer (the object being deleted, or a Status).
  virtual Result<Json> Delete(const Resource& r, const std::string& ns, const std::string& name,
                              const DeleteOptions& options = {}) = 0;
};

// Lists every page (following `continue`) and returns the items plus the collection's
// resourceVersion. Restarts from scratch if a continue token expires (410).
struct ListAllResult {
  std::vector<Json> items;
  std::string resource_version;
  int pages = 0;
};
Result<ListAllResult> ListAll(Client& client, const Resource& r, const std::string& ns,
                              ListOptions options);

// The real client.
std::unique_ptr<Client> NewClient(Config config, RequestObserver observer = {});

// OpenSSL cleans itself up from an atexit handler, registered when it is first initialised. If
// that comes after cpprestsdk's static thread pool exists, the clean-up runs before the pool is
// joined at exit, and a pool thread still closing a TLS connection (a failed handshake is closed
// after its request has returned) uses OpenSSL's destroyed locks: the process hangs or crashes
// on its way out. Called before the first TLS use (NewClient and the HTTPS server do), this
// initialises OpenSSL without that handler, so it stays usable until the process is gone.
void KeepOpenSslUntilExit();

}  // namespace tpujob::kube
