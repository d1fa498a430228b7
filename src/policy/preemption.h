// Gang preemption as a pure function of the queue's snapshot: when the first waiting job of a
// class (accelerator, topology) cannot be admitted, which running jobs of lower priority to stop
// so that it fits. No I/O, no clock.
//
// When. Only for the head of a class (the jobs behind it wait in line anyway), only when the
// head does not fit even once the pods already on their way out are gone (the caller passes
// that capacity: a preemption decided a moment ago frees its chips only when its victims' pods
// have ended, and the head must not take a second set of victims meanwhile), and only when
// stopping the candidates would make it fit.
//
// The jobs of the class before the head keep the places this plan gives them on the capacity
// free now; the victims' chips go to the head alone.
//
// Candidates. Running jobs of the head's class with a strictly lower priority, whose spec allows
// preemption (spec.preemptible), whose every worker is bound to a node, and which are not the
// job that the head itself was preempted by, since that job's current admission (no
// ping-pong). A head whose PriorityClass says preemptionPolicy: Never preempts nobody.
//
// Which. The victims of one preemption come from one node pool (a multi-host head needs all its
// workers in one pool); a multislice victim is a candidate in each pool it holds chips in. For a
// multislice head, which needs several pools, the candidates of every pool are taken together,
// in the same order. In each pool the candidates are taken lowest priority first, then the
// most recently admitted (the least work lost), then by key, until the head fits; then every
// victim not needed after all is given back, the most valuable first (highest priority, oldest).
// Of the pools where the head can be made to fit, the set chosen is the one whose
// highest-priority victim has the lowest priority, then the fewest victims, then the one whose
// oldest victim started the latest, then the fewest chips stopped, then the pool name.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "policy/queue.h"

namespace tpujob::policy {

// A running job the head might preempt.
struct RunningGang {
  std::string job;  // "namespace/name"
  std::string accelerator;
  std::string topology;
  int32_t priority = 0;
  bool preemptible = true;  // spec.preemptible
  WallTime admitted_at{};   // the current attempt's admission
  // The chips its live pods hold, by node. Empty: some worker is not bound yet (not a candidate).
  std::vector<std::pair<std::string, int64_t>> chips;
};

// What the head of a class is, beyond its GangRequest.
struct PreemptorInfo {
  bool may_preempt = true;  // false: its PriorityClass has preemptionPolicy: Never
  // The job that last preempted it, and when; that job is not a candidate while its current
  // admission is the one it won by preempting (admitted at or after this).
  std::string preempted_by;
  WallTime preempted_at{};
};

// One decided preemption.
struct Preemption {
  std::string preemptor;
  std::string pool;                  // where its victims' chips are ("a, b" for several pools)
  std::vector<std::string> victims;  // in the order they were chosen
  // What it takes, e.g. "preempting team/low (priority 10) in node pool pool-a".
  std::string taken;
  // For the preemptor's condition and Event: `taken`, then what it needs, e.g. "preempting
  // team/low (priority 10) in node pool pool-a: needs 2 hosts of tpu-v5-lite-podslice 2x4 (4
  // chips each) in one node pool".
  std::string message;
  // For each victim's condition, Event and faults[] entry, e.g. "preempted by team/high
  // (priority 100), which needs 2 hosts of tpu-v5-lite-podslice 2x4 (4 chips each) in one node
  // pool".
  std::string victim_message;
};

// The heads that preemption can help, and their victims, in queue order. `after_release` is the
// capacity with the chips of pods already going counted as free; `queued` is every waiting job
// (any order); `preemptors` has an entry for a queued job only when it differs from the default.
std::vector<Preemption> PlanPreemptions(const Capacity& after_release,
                                        std::vector<GangRequest> queued,
                                        const std::map<std::string, PreemptorInfo>& preemptors,
                                        const std::vector<RunningGang>& running);

}  // namespace tpujob::policy
