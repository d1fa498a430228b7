// Cordoner: takes a faulty node out of scheduling, within the safety limits of
// policy::CordonSafety (see policy/cordon.h for the rules and their order).
//
// A cordon is one JSON merge patch on the node (policy::CordonPatch): spec.unschedulable, the
// tpujob.dev/faulty NoSchedule taint valued with the reason, and annotations saying who, why,
// when, for which job and on what evidence; then a Warning Event NodeCordoned on the node. The
// job's own Event is the caller's, who gets the verdict and a one-line message for it.
//
// The cap counts nodes the cache shows cordoned by us, plus nodes this process cordoned that
// the cache does not show yet: without them, reconcile workers running right after a cordon
// would see the old node and cordon past the cap. Such a node stops being counted separately
// once the cache shows our annotations on it or any later version of the node (the patch is
// conditioned on the version it was decided on, so the next one is the cordon: an uncordon that
// drops our annotations does not make it look unconfirmed again), once it leaves the cache
// (deleted), or after kUnconfirmedCordonTtl, after which the cache is trusted whatever it says.
// Until then a second request for the same node is answered kAlreadyCordoned.
//
// Dry run changes nothing in the cluster: no patch and no Event, only the decision's log line;
// the verdict kDryRun lets the caller report "would cordon node X".
//
// A failed write (the API server refused, or answered 409 Conflict because the cache was older
// than the node) leaves the node as it was, gives the rate token back and is reported in
// Outcome::error. The request is kept and the retry hook is called with the node's name; the
// node reconciler then calls Retry(node) with the work queue's backoff until the write succeeds
// or the request gets a verdict other than kCordon (the node was cordoned by then, the cap
// filled up, ...). The job's own decision is not repeated: its status already records it.
//
// The safety limits' memory (the rate bucket, the breaker's recent failures) is kept in a
// ConfigMap when KeepStateIn names one, so that the next leader resumes it instead of starting
// afresh: a leader's cordons may be gone from the nodes already (auto-uncordon removes them) and
// a cordon the breaker refused leaves no mark anywhere else. At the first decision the Cordoner
// reads it back (policy::CordonSafety::Restore, merged with the cordons the nodes show); after
// each decision that changed it, it writes it (policy::CordonSafety::Save) before any node is
// patched. Both fail closed: while the state cannot be read, or the write before a cordon
// fails, no node is cordoned (the request fails like a failed node write and is retried), since
// a cordon decided on forgotten limits is what the limits exist to prevent. Writes go through
// the manager's fenced client, so a replica that lost the Lease writes nothing.
//
// Every decision logs one line:
//   msg="cordon" node=n1 job=team/llm reason=PreflightFailed verdict=Cordon dry_run=false ...
//
// Thread-safety: Cordon() and CordonedByUs() may be called concurrently from any thread.
// Decisions are serialised by one mutex, the writes are not: a cordon decided kCordon is
// reserved (counted against the cap, answered kAlreadyCordoned to a second request for the same
// node) before the lock is released for its patch, and the reservation is dropped again, with
// the rate token, when the write fails. So concurrent requests never exceed the cap, and a
// burst of faults on many nodes is not held to one API round trip at a time.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "cache/objects.h"
#include "cache/store.h"
#include "controller/event_recorder.h"
#include "kube/client.h"
#include "kube/error.h"
#include "policy/cordon.h"

namespace tpujob::controller {

// How long a node cordoned by this process counts against the cap while the cache does not
// show the cordon. The cache normally catches up within a second; this only bounds the damage
// of a cordon that never shows up (undone by a person before the cache saw it).
inline constexpr Duration kUnconfirmedCordonTtl = std::chrono::minutes(2);

// How many times a cordon is sent while the API server answers that the node changed since the
// version it was built on (409): the first from the cache, the others from a fresh read.
inline constexpr int kCordonWriteAttempts = 3;

// The node as the API server holds it now (a quorum read, whatever the node watch delivered);
// nullptr when it is deleted (404). For decisions that must not rest on a cache that may be
// behind.
kube::Result<cache::Store<cache::NodeInfo>::Ptr> ReadNode(kube::Client& client,
                                                          const std::string& name);

// Where the cordon safety limits' memory is kept between processes: data key kCordonStateKey of
// a ConfigMap, written by the leader and read back by the next one.
struct CordonStateLocation {
  std::string ns;
  std::string name;
};
inline constexpr std::string_view kCordonStateKey = "state.json";

// The Event reason recorded on a node the operator cordoned.
inline constexpr std::string_view kNodeCordonedReason = "NodeCordoned";

// Index of the node store: nodes cordoned by us (policy::IsCordonedByUs), by the job named in
// their tpujob.dev/cordon-job annotation ("namespace/name").
inline constexpr std::string_view kNodesByCordonJobIndex = "nodes-by-cordon-job";
void AddCordonJobIndexer(cache::Store<cache::NodeInfo>& nodes);

class Cordoner {
 public:
  Cordoner(kube::Client& client, const cache::Store<cache::NodeInfo>& nodes,
           EventRecorder& recorder, policy::CordonPolicy policy, Clock& clock = Clock::Real());

  Cordoner(const Cordoner&) = delete;
  Cordoner& operator=(const Cordoner&) = delete;

  struct Outcome {
    policy::CordonVerdict verdict = policy::CordonVerdict::kDisabled;
    // For the job's Event and faults: "cordoned node n1", "would cordon node n1 (dry run)",
    // "node n1 not cordoned: 10 nodes already cordoned (cap 10 of 100 nodes)".
    std::string message;
    // Set only with kCordon, when the write failed: the node was not cordoned.
    std::optional<kube::Error> error;

    // Whether the node is now cordoned by this request.
    bool cordoned() const { return verdict == policy::CordonVerdict::kCordon && !error; }
  };

  // Keeps the safety limits' memory in the ConfigMap at `location` (see above). Call once,
  // before the first Cordon; without it the memory is rebuilt from the nodes alone.
  void KeepStateIn(CordonStateLocation location) { state_ = std::move(location); }

  // Decides on `request` and, for kCordon, patches the node and records the node's Event.
  Outcome Cordon(const policy::CordonRequest& request);

  // Decides on several findings of one moment in order, after recording every pre-flight item
  // among them for the circuit breaker: the same item failing on every worker of an attempt
  // trips the breaker before the first node is cordoned.
  std::vector<Outcome> CordonAll(const std::vector<policy::CordonRequest>& requests);

  // Called (outside the lock) with the node's name when a cordon write failed and is kept for
  // Retry. Set once, before the first Cordon.
  void SetRetryHook(std::function<void(const std::string& node)> hook) {
    retry_hook_ = std::move(hook);
  }
  // Retries the failed cordon kept for `node`; std::nullopt when none is kept. The request is
  // dropped unless the retry failed again (Outcome::error set).
  std::optional<Outcome> Retry(const std::string& node);
  // Nodes with a failed cordon kept for retry.
  size_t PendingRetries() const;
  // Their names, sorted: nodes decided faulty that are not cordoned yet.
  std::vector<std::string> PendingRetryNodes() const;

  // Nodes cordoned by us: those the cache shows (policy::IsCordonedByUs) plus those cordoned
  // by this process that the cache does not show yet.
  int CordonedByUs() const;

  const policy::CordonPolicy& policy() const { return safety_.policy(); }

 private:
  // A cordon this process wrote. `evidence` is the annotation value written, which tells when
  // the cache has seen the write.
  struct Unconfirmed {
    std::string evidence;
    TimePoint at;
    std::string based_on;  // the node's resourceVersion the patch was conditioned on, if any
    bool writing = false;  // the patch is not answered yet: counted whatever the cache shows
  };

  // A decision taken under the lock; `patch` is set when it is kCordon and the write is due.
  struct Decision {
    Outcome outcome;
    std::optional<kube::Json> patch;
    std::string node_uid;
    // Set by Write when the API server's node was read after a conflict: the version the patch
    // was rebuilt on, or the node's reason not to be cordoned after all.
    std::optional<std::string> reread_version;
    std::optional<policy::CordonVerdict> ruled_out;
    int cordoned = 0;     // nodes counted against the cap when it was decided
    int total_nodes = 0;  // nodes in the cache then
  };

  // Whether `entry` no longer needs counting on its own: the cache shows it (or the node is
  // gone), or it is too old to wait for.
  static bool Settled(const Unconfirmed& entry, const cache::NodeInfo* node, TimePoint now);
  int CordonedByUsLocked(TimePoint now) const;
  // Decides on `request`; for kCordon reserves the node in unconfirmed_ (writing) and returns
  // the patch to send once the lock is released.
  Decision DecideLocked(const policy::CordonRequest& request, TimePoint now);
  // Sends the decision's patch (outside the lock). The patch is conditioned on the cached
  // node's resourceVersion; when the API server refuses it as stale (409), the node is read
  // from the API server and the patch rebuilt on what it holds, up to kCordonWriteAttempts
  // times: a cache whose watch is broken must not hold a faulty node open for new pods. A node
  // that needs no cordon as read (NodeRulesOutCordon) sets `ruled_out` and writes nothing.
  kube::Result<kube::Json> Write(const policy::CordonRequest& request, Decision& decision);
  // Applies the answer to a decision's patch: the reservation confirmed and the node's Event
  // recorded, or the reservation dropped and the rate token given back.
  void FinishLocked(const policy::CordonRequest& request, Decision& decision,
                    kube::Result<kube::Json> written);
  // Decides on `requests` in order, writes the cordons outside the lock, and keeps the failed
  // ones for Retry; returns one outcome per request and the nodes whose write failed.
  std::vector<Outcome> Run(const std::vector<policy::CordonRequest>& requests, bool record_failures,
                           std::vector<std::string>& failed);
  // The saved state (null when there is none yet), read from the ConfigMap.
  kube::Result<kube::Json> LoadState() const;
  // Writes `saved`, the state at `generation`, unless a later generation was written already.
  kube::Result<void> SaveState(const kube::Json& saved, uint64_t generation);
  // The decision's log line and metric.
  void Report(const policy::CordonRequest& request, const Decision& decision) const;
  void NotifyRetry(const std::vector<std::string>& nodes) const;
  std::string Describe(policy::CordonVerdict verdict, const policy::CordonRequest& request,
                       int cordoned, int total_nodes, TimePoint now) const;

  kube::Client& client_;
  const cache::Store<cache::NodeInfo>& nodes_;
  EventRecorder& recorder_;
  Clock& clock_;

  mutable std::mutex mu_;
  policy::CordonSafety safety_;
  bool restored_ = false;  // safety_.Restore has run (at the first decision)
  std::optional<CordonStateLocation> state_;
  uint64_t queued_generation_ = 0;  // the latest generation handed to SaveState (under mu_)
  std::mutex save_mu_;              // serialises SaveState; held without mu_
  uint64_t saved_generation_ = 0;   // the latest generation written (under save_mu_)
  std::map<std::string, Unconfirmed, std::less<>> unconfirmed_;      // by node name
  std::map<std::string, policy::CordonRequest, std::less<>> retry_;  // failed writes, by node
  std::function<void(const std::string& node)> retry_hook_;
};

}  // namespace tpujob::controller
