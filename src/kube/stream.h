// A GET whose answer is bytes as the server writes them rather than one JSON document: a
// followed container log (pods/log with follow=true), or a log tail. Apart from Client because
// only the kubectl plugin and the operator's progress refresh read such answers, and the
// controller's fakes need not know about them.
//
// Thread-safety: one thread reads a stream; Cancel() may come from any thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "kube/config.h"
#include "kube/error.h"
#include "kube/resource.h"

namespace tpujob::kube {

// One open response body. Destroying it closes the connection.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Blocks until bytes arrive and returns them (as many as have arrived, in order).
  // std::nullopt: the body ended; an Error: the connection broke, or Cancel() was called (kind
  // kCancelled).
  virtual Result<std::optional<std::string>> Read() = 0;
  virtual void Cancel() = 0;
};

// Query parameters in order: {"container", "trainer"}, {"follow", "true"}.
using QueryParams = std::vector<std::pair<std::string, std::string>>;

// GET <object path>/<subresource>?<query> on its own connection. Waits for the response headers:
// a non-2xx answer is returned as its Error (400 for a container not started yet, 404 for a pod
// gone). Never retried (the caller decides, knowing what it already read). The body has no read
// timeout worth the name (24 h by default), since a followed log may stay quiet for a long time;
// `read_timeout` bounds the wait for the headers and for each piece of the body.
Result<std::unique_ptr<ByteStream>> StreamGet(const Config& config, const Resource& r,
                                              const std::string& ns, const std::string& name,
                                              const std::string& subresource,
                                              const QueryParams& query,
                                              Duration read_timeout = std::chrono::hours(24));

// The whole body of a bounded answer (a log tail: tailLines, limitBytes) as StreamGet reads it,
// given up (a transport error) when the headers or the end of the body take longer than
// `timeout`.
Result<std::string> GetText(const Config& config, const Resource& r, const std::string& ns,
                            const std::string& name, const std::string& subresource,
                            const QueryParams& query, Duration timeout);

}  // namespace tpujob::kube
