// Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics, and the fence
// that keeps a replica which may no longer hold the Lease from writing anything.
//
// Protocol (client-go `leaderelection`): a replica reads the Lease and takes it when it is
// absent (create), names this replica already, names nobody (released), or has expired; it
// then renews it every `retry_period`. A Lease held by another replica has expired when
// `leaseDurationSeconds` of that record have passed since this replica last saw the record
// change, measured on this replica's monotonic clock: remote timestamps (renewTime) are never
// compared with the local clock, so clock skew between machines does not matter. Writes carry
// the resourceVersion read, so two replicas racing for the same Lease cannot both win (409).
// Taking the Lease from another holder (or from nobody) increments leaseTransitions and sets
// acquireTime; renewing keeps both.
//
// Losing: leadership is lost when no renewal has succeeded for `renew_deadline` (measured from
// the start of the last successful renewal request, so it errs on the early side), or when a
// renewal finds the Lease held by someone else. A watchdog thread declares the loss on time
// even while a renewal request hangs. Loss is final: the elector stops and the process is
// expected to exit (`on_stopped_leading`), as controller-runtime does.
//
// Fencing: CheckFence() passes only while this replica leads and the last successful renewal
// is younger than `renew_deadline` on the monotonic clock (CLOCK_MONOTONIC keeps running while
// a process is stopped, so a replica resumed after SIGSTOP sees at once that its lease is stale,
// before the watchdog had a chance to run). Since another replica can take over only
// `lease_duration` after it saw our last renewal, and lease_duration > renew_deadline, the two
// never write at the same time. FencedClient applies the check to every mutating request; the
// elector applies it to its own Lease writes. The check is made when a request is handed to the
// client and again right before each attempt is sent, after the client's rate limiter (where a
// write can wait for seconds at a low QPS) and before each retry the client makes on its own
// (429, 5xx, transport errors), through the request's `before_send` hook.
//
// Release: Stop() on a replica that still leads (and whose Lease is fresh) writes the Lease
// with an empty holderIdentity and leaseDurationSeconds 1, as client-go's ReleaseOnCancel, so
// a standby takes over at its next attempt instead of waiting for the Lease to expire.
//
// Thread-safety: every method may be called from any thread. Callbacks run on the elector's
// threads and must not call Stop().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "base/clock.h"
#include "kube/client.h"

namespace tpujob::controller {

struct LeaderElectionOptions {
  std::string ns = "default";            // namespace of the Lease
  std::string name = "tpujob-operator";  // name of the Lease
  std::string identity;                  // this replica; must be unique among the replicas
  Duration lease_duration = std::chrono::seconds(15);
  Duration renew_deadline = std::chrono::seconds(10);
  Duration retry_period = std::chrono::seconds(2);
};

// Whether the options can work: non-empty namespace, name and identity, and
// lease_duration > renew_deadline > retry_period > 0. The error names the offending values.
kube::Status ValidateLeaderElectionOptions(const LeaderElectionOptions& options);

// The default identity: $POD_NAME when set, else the host name, then "_" and a random suffix
// (so two processes on one host, or a restarted pod, never share one).
std::string DefaultLeaderElectionIdentity();

// The default namespace of the Lease: the content of `namespace_file` (the service account's
// namespace when running in a pod), else "default".
std::string DefaultLeaderElectionNamespace(
    const std::string& namespace_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace");

struct LeaderCallbacks {
  // This replica now holds the Lease.
  std::function<void()> on_started_leading;
  // Leadership was lost (not called when Stop() ends it); `reason` says why.
  std::function<void(const std::string& reason)> on_stopped_leading;
  // The holder seen in the Lease changed to someone else ("" = released, nobody).
  std::function<void(const std::string& holder)> on_new_leader;
};

class LeaderElector {
 public:
  LeaderElector(kube::Client& client, LeaderElectionOptions options, Clock& clock = Clock::Real());
  ~LeaderElector();  // Stop()
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // Starts campaigning for the Lease on a background thread. Call once.
  void Start(LeaderCallbacks callbacks = {});
  // Stops campaigning and, if this replica still leads with a fresh Lease, releases it. Blocks
  // until the threads have finished (a request in flight completes first). Idempotent.
  void Stop();

  // Whether this replica leads: it acquired the Lease and has not lost or released it. A
  // replica whose renewal is overdue but not yet declared lost still reads true here; writes
  // are governed by CheckFence().
  bool IsLeader() const;
  // Whether leadership was lost (final).
  bool Lost() const;
  // Ok when a write may be sent now; otherwise an error saying why not (not the leader, lost,
  // or the last renewal older than the renew deadline).
  kube::Status CheckFence() const;
  // The holder seen in the Lease at the last read or write ("" when none or not read yet).
  std::string ObservedHolder() const;
  // "namespace/name", for messages.
  std::string LeaseKey() const;
  const LeaderElectionOptions& options() const { return options_; }

 private:
  // A Lease's spec as a leader election record.
  struct Record {
    std::string holder;
    int64_t lease_duration_seconds = 0;
    int64_t transitions = 0;
    std::string acquire_time;
    std::string raw;  // the whole spec, to tell whether the record changed
  };
  enum class Attempt { kSucceeded, kHeldByOther, kFailed };

  void Loop();
  void Watchdog();
  // One try, as client-go's tryAcquireOrRenew. On success renewed_at_ is the start of the try.
  Attempt TryAcquireOrRenew();
  // Records what a read or write of the Lease showed; reports a new holder.
  void Observe(const kube::Json& lease, TimePoint now);
  // Whether a Lease write may be sent now: not lost, and if leading, the renewal is fresh.
  bool MayWriteLease(std::string* why);
  // For the writes of the holder (a renewal, the release): the client checks, before sending
  // each attempt of the request, that the last renewal is still within the renew deadline.
  kube::WriteOptions HolderWriteOptions();
  // Ends leadership (first call only) and tells on_stopped_leading.
  void Lose(const std::string& reason);
  void Release();
  kube::Status FenceLocked(TimePoint now) const;
  // The part of the fence that also holds while releasing: not lost, renewed within the deadline.
  kube::Status RenewalFreshLocked(TimePoint now) const;

  static Record RecordOf(const kube::Json& lease);

  kube::Client& client_;
  const LeaderElectionOptions options_;
  Clock& clock_;
  LeaderCallbacks callbacks_;

  std::mutex stop_mu_;  // serialises Stop()
  mutable std::mutex mu_;
  std::condition_variable cv_;  // stop, leadership changes
  bool started_ = false;
  bool stopping_ = false;
  bool leading_ = false;
  bool lost_ = false;
  std::string lost_reason_;
  TimePoint renewed_at_{};  // start of the last successful acquire/renew request
  // The last Lease this replica wrote or read (with its resourceVersion), for the next write.
  std::optional<kube::Json> lease_;
  Record observed_;          // the record last seen
  TimePoint observed_at_{};  // when it was first seen in that state (local monotonic clock)
  bool observed_any_ = false;
  std::thread loop_thread_;
  std::thread watchdog_thread_;
};

// A kube::Client that forwards reads (Get, List, Watch) as they are and sends a mutating
// request (Create, Update, Patch, Delete) only when `elector.CheckFence()` passes at that
// moment; otherwise it returns an Error of kind kCancelled saying why, and nothing is sent.
class FencedClient final : public kube::Client {
 public:
  FencedClient(kube::Client& inner, const LeaderElector& elector)
      : inner_(inner), elector_(elector) {}

  kube::Result<kube::Json> Get(const kube::Resource& r, const std::string& ns,
                               const std::string& name,
                               const std::string& subresource = {}) override {
    return inner_.Get(r, ns, name, subresource);
  }
  kube::Result<kube::Json> List(const kube::Resource& r, const std::string& ns,
                                const kube::ListOptions& options = {}) override {
    return inner_.List(r, ns, options);
  }
  kube::Result<std::unique_ptr<kube::WatchStream>> Watch(
      const kube::Resource& r, const std::string& ns, const kube::WatchOptions& options) override {
    return inner_.Watch(r, ns, options);
  }
  kube::Result<kube::Json> Create(const kube::Resource& r, const std::string& ns,
                                  const kube::Json& object,
                                  const kube::WriteOptions& options = {}) override;
  kube::Result<kube::Json> Update(const kube::Resource& r, const std::string& ns,
                                  const kube::Json& object,
                                  const kube::WriteOptions& options = {}) override;
  kube::Result<kube::Json> Patch(const kube::Resource& r, const std::string& ns,
                                 const std::string& name, kube::PatchType type,
                                 const kube::Json& body,
                                 const kube::PatchOptions& options = {}) override;
  kube::Result<kube::Json> Delete(const kube::Resource& r, const std::string& ns,
                                  const std::string& name,
                                  const kube::DeleteOptions& options = {}) override;

  // Writes refused so far.
  uint64_t refused() const { return refused_.load(); }

 private:
  // Ok, or the error to return instead of sending `verb` on the object.
  kube::Status Admit(std::string_view verb, const kube::Resource& r, const std::string& ns,
                     const std::string& name);
  // A before_send hook that checks the fence again right before each attempt goes out (then
  // calls `also`, the caller's own hook, if any).
  std::function<kube::Status()> SendGate(std::string_view verb, const kube::Resource& r,
                                         const std::string& ns, const std::string& name,
                                         std::function<kube::Status()> also);

  kube::Client& inner_;
  const LeaderElector& elector_;
  std::atomic<uint64_t> refused_{0};
};

}  // namespace tpujob::controller
