// The fault campaign's schedule (e2e/chaos_e2e_test.cpp): a seeded, reproducible list of what
// happens when. Pure: no cluster, no clock; the same seed and duration give the same list on
// every machine and compiler (SplitMix64 and integer arithmetic only, no <random>
// distributions, whose results the standard leaves to the library).
//
// A step names a kind of fault or action, when it happens (milliseconds after the campaign
// starts) and `choice`, a number the driver maps onto what exists at that moment (the n-th
// running job, the n-th node...). So the same seed replays the same kinds at the same times with
// the same choices; which object a choice lands on follows from the cluster's state then.
//
// Hangs (kHang) come from a stream of their own (another generator, seeded from the same seed),
// merged into the weighted draw of the other kinds: adding them left every step of the other
// kinds of a seed where it was, at the same time with the same choice.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tpujob::e2e::chaos {

enum class Kind {
  kHardwareFault,        // TPUUnhealthy=True on a node
  kHardwareHeal,         // a hardware condition cleared
  kNodeNotReady,         // Ready=False written on a node (a kubelet that reports trouble)
  kNodeLost,             // a node with pods deleted (its VM gone); it registers again 10 s later
  kMaintenance,          // the GKE maintenance taint / scheduled-maintenance label on a node
  kMaintenanceOver,      // one removed again
  kDeletePod,            // a worker pod deleted by hand
  kHumanCordon,          // `kubectl cordon` of a healthy node
  kHumanUncordon,        // `kubectl uncordon` of any cordoned node
  kWorkerExitRetryable,  // a worker's program exits 42 (retryable)
  kWorkerExitPermanent,  // a worker's program exits 1 (permanent, after fault attribution)
  kPreflightFailure,     // a pod's pre-flight init container fails (environment at fault)
  kJobSucceeds,          // worker 0 exits 0: the job is done
  kKillOperator,         // SIGKILL of one operator replica (restarted at the next step)
  kCreateJob,            // a new job of the mix
  kDeleteJob,            // a job deleted (foreground: its pods and Service go with it)
  kSuspend,              // spec.suspend true on a job
  kResume,               // spec.suspend false again
  kRestartApiServer,     // kube-apiserver SIGKILLed and started again
  kRestartEtcd,          // etcd SIGKILLed, then started again (its data kept)
  kBlackhole,            // the proxy in front of one replica silent for 10 s
  kApfThrottle,          // the replicas' ServiceAccount on a priority level that rejects (real
                         // API Priority and Fairness 429s) for 15 s
  kHang,                 // every worker of a running job with spec.faultTolerance.progress stops
                         // making progress; stallSeconds later each one's supervisor reports the
                         // stall (exit 124). Drawn from its own stream (see MakeSchedule)
};

inline constexpr Kind kAllKinds[] = {Kind::kHardwareFault,
                                     Kind::kHardwareHeal,
                                     Kind::kNodeNotReady,
                                     Kind::kNodeLost,
                                     Kind::kMaintenance,
                                     Kind::kMaintenanceOver,
                                     Kind::kDeletePod,
                                     Kind::kHumanCordon,
                                     Kind::kHumanUncordon,
                                     Kind::kWorkerExitRetryable,
                                     Kind::kWorkerExitPermanent,
                                     Kind::kPreflightFailure,
                                     Kind::kJobSucceeds,
                                     Kind::kKillOperator,
                                     Kind::kCreateJob,
                                     Kind::kDeleteJob,
                                     Kind::kSuspend,
                                     Kind::kResume,
                                     Kind::kRestartApiServer,
                                     Kind::kRestartEtcd,
                                     Kind::kBlackhole,
                                     Kind::kApfThrottle,
                                     Kind::kHang};

inline std::string_view KindName(Kind kind) {
  switch (kind) {
    case Kind::kHardwareFault:
      return "hardware-fault";
    case Kind::kHardwareHeal:
      return "hardware-heal";
    case Kind::kNodeNotReady:
      return "node-not-ready";
    case Kind::kNodeLost:
      return "node-lost";
    case Kind::kMaintenance:
      return "maintenance";
    case Kind::kMaintenanceOver:
      return "maintenance-over";
    case Kind::kDeletePod:
      return "delete-pod";
    case Kind::kHumanCordon:
      return "human-cordon";
    case Kind::kHumanUncordon:
      return "human-uncordon";
    case Kind::kWorkerExitRetryable:
      return "worker-exit-retryable";
    case Kind::kWorkerExitPermanent:
      return "worker-exit-permanent";
    case Kind::kPreflightFailure:
      return "preflight-failure";
    case Kind::kJobSucceeds:
      return "job-succeeds";
    case Kind::kKillOperator:
      return "kill-operator";
    case Kind::kCreateJob:
      return "create-job";
    case Kind::kDeleteJob:
      return "delete-job";
    case Kind::kSuspend:
      return "suspend";
    case Kind::kResume:
      return "resume";
    case Kind::kRestartApiServer:
      return "restart-apiserver";
    case Kind::kRestartEtcd:
      return "restart-etcd";
    case Kind::kBlackhole:
      return "blackhole";
    case Kind::kApfThrottle:
      return "apf-throttle";
    case Kind::kHang:
      return "hang";
  }
  return "?";
}

// How often each kind is drawn, relative to the others. Faults that heal (conditions cleared,
// nodes uncordoned) come about as often as the faults themselves, so the cluster neither runs
// dry nor stays healthy; jobs finish and new ones arrive at about the same rate. kHang has none:
// it is not drawn here but from its own stream.
inline int Weight(Kind kind) {
  switch (kind) {
    case Kind::kHardwareFault:
      return 8;
    case Kind::kHardwareHeal:
      return 8;
    case Kind::kNodeNotReady:
      return 3;
    case Kind::kNodeLost:
      return 2;
    case Kind::kMaintenance:
      return 3;
    case Kind::kMaintenanceOver:
      return 3;
    case Kind::kDeletePod:
      return 6;
    case Kind::kHumanCordon:
      return 3;
    case Kind::kHumanUncordon:
      return 4;
    case Kind::kWorkerExitRetryable:
      return 8;
    case Kind::kWorkerExitPermanent:
      return 3;
    case Kind::kPreflightFailure:
      return 4;
    case Kind::kJobSucceeds:
      return 10;
    case Kind::kKillOperator:
      return 2;
    case Kind::kCreateJob:
      return 10;
    case Kind::kDeleteJob:
      return 3;
    case Kind::kSuspend:
      return 3;
    case Kind::kResume:
      return 4;
    case Kind::kRestartApiServer:
    case Kind::kRestartEtcd:
    case Kind::kBlackhole:
    case Kind::kApfThrottle:
      return 1;
    case Kind::kHang:
      return 0;
  }
  return 0;
}

// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit generator fully defined by its arithmetic.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // In [0, n); n > 0. The modulo bias (n / 2^64) does not matter here.
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t state_;
};

struct Step {
  int64_t at_ms = 0;  // after the campaign's start
  Kind kind = Kind::kCreateJob;
  uint64_t choice = 0;  // mapped by the driver onto what exists at `at_ms`

  bool operator==(const Step&) const = default;
};

// Steps over `seconds`, `mean_gap_ms` apart on average (gaps uniform in [0, 2 * mean]), so
// several faults are usually in flight at once: a re-issue takes seconds, the gap less than one.
// Hangs come `mean_hang_gap_ms` apart on average (0: none), from a generator of their own, so
// that the other kinds' steps of a seed do not depend on them; at the same time, a hang comes
// after the other step.
inline std::vector<Step> MakeSchedule(uint64_t seed, int seconds, int mean_gap_ms = 700,
                                      int mean_hang_gap_ms = 8000) {
  SplitMix64 rng(seed);
  int total_weight = 0;
  for (Kind kind : kAllKinds) total_weight += Weight(kind);
  std::vector<Step> steps;
  const int64_t end_ms = static_cast<int64_t>(seconds) * 1000;
  for (int64_t at = 0;;) {
    at += static_cast<int64_t>(rng.Below(2 * static_cast<uint64_t>(mean_gap_ms) + 1));
    if (at >= end_ms) break;
    int64_t draw = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(total_weight)));
    Kind kind = kAllKinds[0];
    for (Kind candidate : kAllKinds) {
      draw -= Weight(candidate);
      if (draw < 0) {
        kind = candidate;
        break;
      }
    }
    steps.push_back({at, kind, rng.Next()});
  }
  if (mean_hang_gap_ms <= 0) return steps;
  SplitMix64 hang_rng(seed ^ 0x68616e67ULL);  // "hang"
  std::vector<Step> hangs;
  for (int64_t at = 0;;) {
    at += static_cast<int64_t>(hang_rng.Below(2 * static_cast<uint64_t>(mean_hang_gap_ms) + 1));
    if (at >= end_ms) break;
    hangs.push_back({at, Kind::kHang, hang_rng.Next()});
  }
  std::vector<Step> merged;
  merged.reserve(steps.size() + hangs.size());
  std::merge(steps.begin(), steps.end(), hangs.begin(), hangs.end(), std::back_inserter(merged),
             [](const Step& a, const Step& b) { return a.at_ms < b.at_ms; });
  return merged;
}

// How many steps of each kind, by name (for the report).
inline std::map<std::string, int> CountByKind(const std::vector<Step>& steps) {
  std::map<std::string, int> counts;
  for (const Step& step : steps) ++counts[std::string(KindName(step.kind))];
  return counts;
}

}  // namespace tpujob::e2e::chaos
