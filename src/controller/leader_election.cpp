#include "controller/leader_election.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include "base/logging.h"

namespace tpujob::controller {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;
using std::chrono::seconds;

int64_t Millis(Duration d) { return duration_cast<milliseconds>(d).count(); }

// Whole seconds, rounded up: leaseDurationSeconds must never claim less than the option.
int64_t CeilSeconds(Duration d) { return std::chrono::ceil<seconds>(d).count(); }

std::string SecondsText(Duration d) {
  const int64_t ms = Millis(d);
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

// metav1.MicroTime: RFC 3339 in UTC with exactly six fractional digits, as the API server
// requires for Lease times.
std::string FormatMicroTime(WallTime time) {
  using namespace std::chrono;
  const auto micros = floor<microseconds>(time);
  const sys_seconds whole = floor<seconds>(micros);
  const sys_days day = floor<days>(whole);
  const year_month_day date(day);
  const hh_mm_ss<seconds> clock(whole - day);
  std::array<char, 64> buffer{};
  std::snprintf(buffer.data(), buffer.size(), "%04d-%02u-%02uT%02d:%02d:%02d.%06lldZ",
                static_cast<int>(date.year()), static_cast<unsigned>(date.month()),
                static_cast<unsigned>(date.day()), static_cast<int>(clock.hours().count()),
                static_cast<int>(clock.minutes().count()),
                static_cast<int>(clock.seconds().count()),
                static_cast<long long>((micros - whole).count()));
  return std::string(buffer.data());
}

std::string ObjectName(const kube::Json& object) {
  const auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return {};
  const std::string name = meta->value("name", "");
  return name.empty() ? meta->value("generateName", "") : name;
}

}  // namespace

kube::Status ValidateLeaderElectionOptions(const LeaderElectionOptions& options) {
  auto fail = [](std::string message) -> kube::Status {
    return std::unexpected(kube::Error::Config(std::move(message)));
  };
  if (options.ns.empty()) return fail("the namespace of the leader lease is empty");
  if (options.name.empty()) return fail("the name of the leader lease is empty");
  if (options.identity.empty()) return fail("the leader election identity is empty");
  if (options.retry_period <= Duration::zero()) {
    return fail("the retry period (" + SecondsText(options.retry_period) + ") must be positive");
  }
  if (options.renew_deadline <= options.retry_period) {
    return fail("the renew deadline (" + SecondsText(options.renew_deadline) +
                ") must be greater than the retry period (" + SecondsText(options.retry_period) +
                ")");
  }
  if (options.lease_duration <= options.renew_deadline) {
    return fail("the lease duration (" + SecondsText(options.lease_duration) +
                ") must be greater than the renew deadline (" +
                SecondsText(options.renew_deadline) + ")");
  }
  return {};
}

std::string DefaultLeaderElectionIdentity() {
  std::string base;
  if (const char* pod = std::getenv("POD_NAME"); pod != nullptr && *pod != '\0') {
    base = pod;
  } else {
    std::array<char, 256> host{};
    if (::gethostname(host.data(), host.size() - 1) == 0) base = host.data();
  }
  if (base.empty()) base = "tpujob-operator";
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device random;
  std::uniform_int_distribution<int> digit(0, 15);
  std::string suffix;
  for (int i = 0; i < 10; ++i) suffix.push_back(kHex[digit(random)]);
  return base + "_" + suffix;
}

std::string DefaultLeaderElectionNamespace(const std::string& namespace_file) {
  std::ifstream in(namespace_file);
  std::string ns;
  if (in) std::getline(in, ns);
  while (!ns.empty() && std::isspace(static_cast<unsigned char>(ns.back()))) ns.pop_back();
  return ns.empty() ? "default" : ns;
}

// --- LeaderElector ----------------------------------------------------------------------------

LeaderElector::LeaderElector(kube::Client& client, LeaderElectionOptions options, Clock& clock)
    : client_(client), options_(std::move(options)), clock_(clock) {}

LeaderElector::~LeaderElector() { Stop(); }

std::string LeaderElector::LeaseKey() const { return options_.ns + "/" + options_.name; }

void LeaderElector::Start(LeaderCallbacks callbacks) {
  {
    std::lock_guard<std::mutex> guard(mu_);
    if (started_ || stopping_) return;
    started_ = true;
  }
  callbacks_ = std::move(callbacks);
  log::Info("waiting for the leader lease", {{"lease", LeaseKey()},
                                             {"identity", options_.identity},
                                             {"lease_duration", options_.lease_duration},
                                             {"renew_deadline", options_.renew_deadline},
                                             {"retry_period", options_.retry_period}});
  loop_thread_ = std::thread([this] { Loop(); });
  watchdog_thread_ = std::thread([this] { Watchdog(); });
}

void LeaderElector::Stop() {
  std::lock_guard<std::mutex> serial(stop_mu_);
  {
    std::lock_guard<std::mutex> guard(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (loop_thread_.joinable()) loop_thread_.join();
  if (watchdog_thread_.joinable()) watchdog_thread_.join();
  Release();
}

bool LeaderElector::IsLeader() const {
  std::lock_guard<std::mutex> guard(mu_);
  return leading_;
}

bool LeaderElector::Lost() const {
  std::lock_guard<std::mutex> guard(mu_);
  return lost_;
}

std::string LeaderElector::ObservedHolder() const {
  std::lock_guard<std::mutex> guard(mu_);
  return observed_.holder;
}

kube::Status LeaderElector::CheckFence() const {
  std::lock_guard<std::mutex> guard(mu_);
  return FenceLocked(clock_.Now());
}

kube::Status LeaderElector::FenceLocked(TimePoint now) const {
  if (!leading_ && !lost_) {
    std::string message =
        "this replica (" + options_.identity + ") does not hold the leader lease " + LeaseKey();
    if (!observed_.holder.empty()) message += " (held by " + observed_.holder + ")";
    return std::unexpected(kube::Error::Cancelled(std::move(message)));
  }
  return RenewalFreshLocked(now);
}

kube::Status LeaderElector::RenewalFreshLocked(TimePoint now) const {
  if (lost_) {
    return std::unexpected(kube::Error::Cancelled("leadership of lease " + LeaseKey() +
                                                  " was lost (" + lost_reason_ + ")"));
  }
  const Duration age = now - renewed_at_;
  if (age >= options_.renew_deadline) {
    return std::unexpected(kube::Error::Cancelled(
        "the leader lease " + LeaseKey() + " was last renewed " + std::to_string(Millis(age)) +
        "ms ago, beyond the renew deadline of " + SecondsText(options_.renew_deadline) +
        "; another replica may hold it by now"));
  }
  return {};
}

bool LeaderElector::MayWriteLease(std::string* why) {
  std::lock_guard<std::mutex> guard(mu_);
  if (lost_) {
    *why = "leadership was lost (" + lost_reason_ + ")";
    return false;
  }
  if (!leading_) return true;  // acquiring: the resourceVersion read guards the write
  const Duration age = clock_.Now() - renewed_at_;
  if (age >= options_.renew_deadline) {
    *why = "no renewal succeeded within the renew deadline of " +
           SecondsText(options_.renew_deadline) + " (the last one started " +
           std::to_string(Millis(age)) + "ms ago)";
    return false;
  }
  return true;
}

kube::WriteOptions LeaderElector::HolderWriteOptions() {
  // The client retries a write that failed in transport or with a 5xx, backing off for seconds:
  // a renewal retried once the API server answers again, after the deadline, would renew for
  // another lease duration a Lease this replica has given up (and delay the standby by as much).
  kube::WriteOptions options;
  options.before_send = [this]() -> kube::Status {
    std::lock_guard<std::mutex> guard(mu_);
    return RenewalFreshLocked(clock_.Now());
  };
  return options;
}

LeaderElector::Record LeaderElector::RecordOf(const kube::Json& lease) {
  Record record;
  const auto spec = lease.find("spec");
  if (spec == lease.end() || !spec->is_object()) return record;
  record.raw = spec->dump();
  if (auto it = spec->find("holderIdentity"); it != spec->end() && it->is_string()) {
    record.holder = it->get<std::string>();
  }
  if (auto it = spec->find("leaseDurationSeconds"); it != spec->end() && it->is_number()) {
    record.lease_duration_seconds = it->get<int64_t>();
  }
  if (auto it = spec->find("leaseTransitions"); it != spec->end() && it->is_number()) {
    record.transitions = it->get<int64_t>();
  }
  if (auto it = spec->find("acquireTime"); it != spec->end() && it->is_string()) {
    record.acquire_time = it->get<std::string>();
  }
  return record;
}

void LeaderElector::Observe(const kube::Json& lease, TimePoint now) {
  Record record = RecordOf(lease);
  bool holder_changed = false;
  {
    std::lock_guard<std::mutex> guard(mu_);
    lease_ = lease;
    if (observed_any_ && record.raw == observed_.raw) return;
    holder_changed = !observed_any_ || record.holder != observed_.holder;
    observed_ = record;
    observed_at_ = now;
    observed_any_ = true;
  }
  if (holder_changed && record.holder != options_.identity) {
    log::Info("observed new leader",
              {{"lease", LeaseKey()},
               {"identity", options_.identity},
               {"holder", record.holder.empty() ? std::string_view("<none>") : record.holder}});
    if (callbacks_.on_new_leader) callbacks_.on_new_leader(record.holder);
  }
}

LeaderElector::Attempt LeaderElector::TryAcquireOrRenew() {
  const TimePoint start = clock_.Now();
  const kube::Resource leases = kube::Resource::Leases();
  const int64_t duration_seconds = CeilSeconds(options_.lease_duration);
  bool leading = false;
  std::optional<kube::Json> cached;
  {
    std::lock_guard<std::mutex> guard(mu_);
    leading = leading_;
    cached = lease_;
  }
  auto succeeded = [&](const kube::Json& written) {
    Observe(written, clock_.Now());
    std::lock_guard<std::mutex> guard(mu_);
    renewed_at_ = start;
    return Attempt::kSucceeded;
  };
  std::string why;

  // As the leader, renew the Lease as last written; a conflict means someone else wrote it
  // since, and the full read below finds out who.
  if (leading && cached) {
    kube::Json lease = *cached;
    lease["spec"]["holderIdentity"] = options_.identity;
    lease["spec"]["leaseDurationSeconds"] = duration_seconds;
    lease["spec"]["renewTime"] = FormatMicroTime(clock_.WallNow());
    if (!MayWriteLease(&why)) return Attempt::kFailed;
    auto updated = client_.Update(leases, options_.ns, lease, HolderWriteOptions());
    if (updated) return succeeded(*updated);
    if (!updated.error().IsConflict()) {
      log::Warn("cannot renew the leader lease", {{"lease", LeaseKey()},
                                                  {"identity", options_.identity},
                                                  {"error", updated.error().ToString()}});
      return Attempt::kFailed;
    }
  }

  auto got = client_.Get(leases, options_.ns, options_.name);
  if (!got) {
    if (!got.error().IsNotFound()) {
      log::Warn("cannot read the leader lease", {{"lease", LeaseKey()},
                                                 {"identity", options_.identity},
                                                 {"error", got.error().ToString()}});
      return Attempt::kFailed;
    }
    const std::string now = FormatMicroTime(clock_.WallNow());
    const kube::Json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                              {"kind", "Lease"},
                              {"metadata", {{"name", options_.name}, {"namespace", options_.ns}}},
                              {"spec",
                               {{"holderIdentity", options_.identity},
                                {"leaseDurationSeconds", duration_seconds},
                                {"acquireTime", now},
                                {"renewTime", now},
                                {"leaseTransitions", 0}}}};
    if (!MayWriteLease(&why)) return Attempt::kFailed;
    auto created = client_.Create(leases, options_.ns, lease);
    if (!created) {
      // AlreadyExists: another replica created it first; the next try reads it.
      if (!created.error().IsAlreadyExists()) {
        log::Warn("cannot create the leader lease", {{"lease", LeaseKey()},
                                                     {"identity", options_.identity},
                                                     {"error", created.error().ToString()}});
      }
      return Attempt::kFailed;
    }
    return succeeded(*created);
  }

  const TimePoint read_at = clock_.Now();
  Observe(*got, read_at);
  const Record record = RecordOf(*got);
  const bool ours = record.holder == options_.identity;
  if (!ours && (leading || !record.holder.empty())) {
    // A leader that finds another name (or none) in the Lease has lost it. A standby waits
    // until the record has not changed for its leaseDurationSeconds.
    if (leading) return Attempt::kHeldByOther;
    std::lock_guard<std::mutex> guard(mu_);
    if (read_at < observed_at_ + seconds(record.lease_duration_seconds)) {
      return Attempt::kHeldByOther;
    }
  }

  kube::Json lease = *got;
  const std::string now = FormatMicroTime(clock_.WallNow());
  kube::Json& spec = lease["spec"];
  spec["holderIdentity"] = options_.identity;
  spec["leaseDurationSeconds"] = duration_seconds;
  spec["renewTime"] = now;
  if (!ours || record.acquire_time.empty()) spec["acquireTime"] = now;
  spec["leaseTransitions"] = ours ? record.transitions : record.transitions + 1;
  if (!MayWriteLease(&why)) return Attempt::kFailed;
  auto updated = client_.Update(leases, options_.ns, lease);
  if (!updated) {
    if (updated.error().IsConflict()) {
      log::Debug("another replica wrote the leader lease first",
                 {{"lease", LeaseKey()}, {"identity", options_.identity}});
    } else {
      log::Warn("cannot update the leader lease", {{"lease", LeaseKey()},
                                                   {"identity", options_.identity},
                                                   {"error", updated.error().ToString()}});
    }
    return Attempt::kFailed;
  }
  return succeeded(*updated);
}

void LeaderElector::Loop() {
  while (true) {
    bool leading = false;
    {
      std::lock_guard<std::mutex> guard(mu_);
      if (stopping_ || lost_) return;
      leading = leading_;
    }
    const TimePoint start = clock_.Now();
    std::string why;
    if (leading && !MayWriteLease(&why)) {
      Lose(why);
      return;
    }
    const Attempt attempt = TryAcquireOrRenew();
    TimePoint next = start + options_.retry_period;
    if (leading) {
      if (attempt == Attempt::kHeldByOther) {
        const std::string holder = ObservedHolder();
        Lose(holder.empty() ? "the lease was released by someone else"
                            : "the lease is now held by " + holder);
        return;
      }
      if (attempt == Attempt::kFailed && !MayWriteLease(&why)) {
        Lose(why);
        return;
      }
    } else if (attempt == Attempt::kSucceeded) {
      int64_t transitions = 0;
      {
        std::lock_guard<std::mutex> guard(mu_);
        leading_ = true;
        transitions = observed_.transitions;
      }
      cv_.notify_all();
      log::Info(
          "acquired leader lease",
          {{"lease", LeaseKey()}, {"identity", options_.identity}, {"transitions", transitions}});
      if (callbacks_.on_started_leading) callbacks_.on_started_leading();
    } else if (attempt == Attempt::kHeldByOther) {
      // Try again the moment the holder's lease expires, when that comes before the next
      // period: a standby then takes over lease_duration after it saw the last renewal.
      std::lock_guard<std::mutex> guard(mu_);
      next = std::min(next, observed_at_ + seconds(observed_.lease_duration_seconds));
    }
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_ && !lost_ && clock_.Now() < next) clock_.WaitUntil(cv_, lock, next);
  }
}

void LeaderElector::Watchdog() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_ && !lost_) {
    if (!leading_) {
      cv_.wait(lock);
      continue;
    }
    const TimePoint deadline = renewed_at_ + options_.renew_deadline;
    const TimePoint now = clock_.Now();
    if (now >= deadline) {
      const std::string reason = "no renewal succeeded within the renew deadline of " +
                                 SecondsText(options_.renew_deadline) + " (the last one started " +
                                 std::to_string(Millis(now - renewed_at_)) + "ms ago)";
      lock.unlock();
      Lose(reason);
      return;
    }
    clock_.WaitUntil(cv_, lock, deadline);
  }
}

void LeaderElector::Lose(const std::string& reason) {
  {
    std::lock_guard<std::mutex> guard(mu_);
    if (lost_ || !leading_) return;
    lost_ = true;
    leading_ = false;
    lost_reason_ = reason;
  }
  cv_.notify_all();
  log::Error("leader election lost",
             {{"lease", LeaseKey()}, {"identity", options_.identity}, {"reason", reason}});
  if (callbacks_.on_stopped_leading) callbacks_.on_stopped_leading(reason);
}

void LeaderElector::Release() {
  std::optional<kube::Json> cached;
  {
    std::lock_guard<std::mutex> guard(mu_);
    if (!leading_ || lost_) return;
    leading_ = false;  // from here on the fence refuses every write
    const Duration age = clock_.Now() - renewed_at_;
    if (age >= options_.renew_deadline || !lease_) {
      log::Warn("not releasing the leader lease: its last renewal is older than the renew deadline",
                {{"lease", LeaseKey()}, {"identity", options_.identity}, {"age_ms", Millis(age)}});
      return;
    }
    cached = lease_;
  }
  kube::Json lease = std::move(*cached);
  const std::string now = FormatMicroTime(clock_.WallNow());
  kube::Json& spec = lease["spec"];
  spec["holderIdentity"] = "";
  spec["leaseDurationSeconds"] = 1;
  spec["acquireTime"] = now;
  spec["renewTime"] = now;
  auto updated = client_.Update(kube::Resource::Leases(), options_.ns, lease, HolderWriteOptions());
  if (!updated) {
    log::Warn("cannot release the leader lease; a standby takes over when it expires",
              {{"lease", LeaseKey()},
               {"identity", options_.identity},
               {"error", updated.error().ToString()}});
    return;
  }
  Observe(*updated, clock_.Now());
  log::Info("released leader lease", {{"lease", LeaseKey()}, {"identity", options_.identity}});
}

// --- FencedClient -----------------------------------------------------------------------------

kube::Status FencedClient::Admit(std::string_view verb, const kube::Resource& r,
                                 const std::string& ns, const std::string& name) {
  auto fence = elector_.CheckFence();
  if (fence) return {};
  ++refused_;
  const std::string object = r.plural + " " + (ns.empty() ? name : ns + "/" + name);
  log::Warn("write not sent: this replica may not write",
            {{"verb", verb}, {"object", object}, {"reason", fence.error().message}});
  return std::unexpected(kube::Error::Cancelled("write not sent (" + std::string(verb) + " " +
                                                object + "): " + fence.error().message));
}

std::function<kube::Status()> FencedClient::SendGate(std::string_view verb, const kube::Resource& r,
                                                     const std::string& ns, const std::string& name,
                                                     std::function<kube::Status()> also) {
  // A write can wait in the client's rate limiter, and its retries (429, 5xx, transport errors)
  // back off for up to seconds: the fence is checked again right before each attempt is sent.
  return [this, verb = std::string(verb), r, ns, name, also = std::move(also)]() -> kube::Status {
    if (auto admitted = Admit(verb, r, ns, name); !admitted) return admitted;
    return also ? also() : kube::Status{};
  };
}

kube::Result<kube::Json> FencedClient::Create(const kube::Resource& r, const std::string& ns,
                                              const kube::Json& object,
                                              const kube::WriteOptions& options) {
  if (auto admitted = Admit("create", r, ns, ObjectName(object)); !admitted) {
    return std::unexpected(admitted.error());
  }
  kube::WriteOptions fenced = options;
  fenced.before_send = SendGate("create", r, ns, ObjectName(object), options.before_send);
  return inner_.Create(r, ns, object, fenced);
}

kube::Result<kube::Json> FencedClient::Update(const kube::Resource& r, const std::string& ns,
                                              const kube::Json& object,
                                              const kube::WriteOptions& options) {
  if (auto admitted = Admit("update", r, ns, ObjectName(object)); !admitted) {
    return std::unexpected(admitted.error());
  }
  kube::WriteOptions fenced = options;
  fenced.before_send = SendGate("update", r, ns, ObjectName(object), options.before_send);
  return inner_.Update(r, ns, object, fenced);
}

kube::Result<kube::Json> FencedClient::Patch(const kube::Resource& r, const std::string& ns,
                                             const std::string& name, kube::PatchType type,
                                             const kube::Json& body,
                                             const kube::PatchOptions& options) {
  if (auto admitted = Admit("patch", r, ns, name); !admitted) {
    return std::unexpected(admitted.error());
  }
  kube::PatchOptions fenced = options;
  fenced.before_send = SendGate("patch", r, ns, name, options.before_send);
  return inner_.Patch(r, ns, name, type, body, fenced);
}

kube::Result<kube::Json> FencedClient::Delete(const kube::Resource& r, const std::string& ns,
                                              const std::string& name,
                                              const kube::DeleteOptions& options) {
  if (auto admitted = Admit("delete", r, ns, name); !admitted) {
    return std::unexpected(admitted.error());
  }
  kube::DeleteOptions fenced = options;
  fenced.before_send = SendGate("delete", r, ns, name, options.before_send);
  return inner_.Delete(r, ns, name, fenced);
}

}  // namespace tpujob::controller
