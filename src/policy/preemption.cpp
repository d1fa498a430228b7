#include "policy/preemption.h"

#include <algorithm>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

namespace tpujob::policy {
namespace {

// A candidate's place in a pool's order: lowest priority first, then the most recently
// admitted, then the key.
bool PreferredVictim(const RunningGang* a, const RunningGang* b) {
  return std::tuple(a->priority, b->admitted_at, std::string_view(a->job)) <
         std::tuple(b->priority, a->admitted_at, std::string_view(b->job));
}

// The head's class alone (or some of its pools), and where its nodes are, so that victims'
// chips can be given back. Victims are tried by giving their chips to this one copy for a plan
// and taking them back after it, not by copying the class for every try.
class ClassCapacity {
 public:
  // Just the pools `only` of the class.
  ClassCapacity(const Capacity& capacity, const Capacity::Class& key,
                const std::set<std::string>& only) {
    auto it = capacity.pools.find(key);
    if (it == capacity.pools.end()) return;
    auto& pools = capacity_.pools[key];
    // Looked up one by one: `only` is a few pools of a class that may have thousands.
    for (const std::string& pool : only) {
      if (auto found = it->second.find(pool); found != it->second.end()) {
        const auto at = pools.emplace(pool, found->second).first;
        Index(at->first, at->second);
      }
    }
  }
  // All of `capacity`, which holds the class alone, taken over rather than copied.
  explicit ClassCapacity(Capacity&& capacity) : capacity_(std::move(capacity)) {
    for (auto& [key, pools] : capacity_.pools) {
      for (auto& [pool, nodes] : pools) Index(pool, nodes);
    }
  }
  ClassCapacity(const ClassCapacity&) = delete;
  ClassCapacity& operator=(const ClassCapacity&) = delete;

  // The capacity as it is (no victims given).
  const Capacity& capacity() const { return capacity_; }

  // The pools the chips of `gang` are counted in (several for a multislice job), none when
  // none of its nodes offers capacity (cordoned, unhealthy: stopping it would not help).
  std::set<std::string> PoolsOf(const RunningGang& gang) const {
    std::set<std::string> out;
    for (const auto& [node, chips] : gang.chips) {
      if (auto it = where_.find(node); it != where_.end()) out.insert(*it->second.pool);
    }
    return out;
  }

  // The head's admission (`alone` is just the head) on the capacity once `victims` are gone.
  Admission PlanWithout(const std::vector<GangRequest>& alone,
                        const std::vector<const RunningGang*>& victims) {
    Give(victims, 1);
    Admission out = PlanAdmissions(capacity_, alone).at(alone.front().job);
    Give(victims, -1);  // back as it was: the chips are whole numbers
    return out;
  }

 private:
  struct Place {
    const std::string* pool;
    int64_t* free_chips;
  };

  // Where each node of `nodes` (of `pool`, both in capacity_) is: views of the names this copy
  // owns, which is why it is never copied.
  void Index(const std::string& pool, std::vector<NodeCapacity>& nodes) {
    for (NodeCapacity& node : nodes) where_.emplace(node.name, Place{&pool, &node.free_chips});
  }

  // Adds (sign 1) or takes back (-1) the chips of `victims` on the nodes of this capacity. Each
  // victim's nodes are looked up once: the same candidates are tried again and again.
  void Give(const std::vector<const RunningGang*>& victims, int64_t sign) {
    for (const RunningGang* victim : victims) {
      auto [at, added] = places_.try_emplace(victim);
      if (added) {
        for (const auto& [node, chips] : victim->chips) {
          if (auto it = where_.find(node); it != where_.end()) {
            at->second.emplace_back(it->second.free_chips, chips);
          }
        }
      }
      for (const auto& [free_chips, chips] : at->second) *free_chips += sign * chips;
    }
  }

  Capacity capacity_;
  std::unordered_map<std::string_view, Place> where_;
  // A victim's chips by where they go in `capacity_`.
  std::unordered_map<const RunningGang*, std::vector<std::pair<int64_t*, int64_t>>> places_;
};

struct Choice {
  std::string pool;  // for a multislice head: the pools the victims' chips are in, joined
  std::vector<const RunningGang*> victims;
  // Lower is better: see the header.
  std::tuple<int32_t, size_t, int64_t, int64_t, std::string> Cost() const {
    int32_t top = victims.front()->priority;
    WallTime oldest = victims.front()->admitted_at;
    int64_t chips = 0;
    for (const RunningGang* v : victims) {
      top = std::max(top, v->priority);
      oldest = std::min(oldest, v->admitted_at);
      for (const auto& [node, n] : v->chips) chips += n;
    }
    return {top, victims.size(), -oldest.time_since_epoch().count(), chips, pool};
  }
};

std::string DescribeVictims(const std::vector<const RunningGang*>& victims) {
  std::string out;
  for (size_t i = 0; i < victims.size(); ++i) {
    if (i > 0) out += ", ";
    if (i == 5) {
      out += "and " + std::to_string(victims.size() - i) + " more";
      break;
    }
    out += victims[i]->job + " (priority " + std::to_string(victims[i]->priority) + ")";
  }
  return out;
}

}  // namespace

std::vector<Preemption> PlanPreemptions(const Capacity& after_release,
                                        std::vector<GangRequest> queued,
                                        const std::map<std::string, PreemptorInfo>& preemptors,
                                        const std::vector<RunningGang>& running) {
  std::vector<Preemption> out;
  if (queued.empty() || running.empty()) return out;
  std::sort(queued.begin(), queued.end(), QueueBefore);
  const std::map<std::string, Admission> plan = PlanAdmissions(after_release, queued);

  std::set<Capacity::Class> seen;
  for (size_t h = 0; h < queued.size(); ++h) {
    const GangRequest& head = queued[h];
    const Admission& answer = plan.at(head.job);
    if (answer.admit) continue;
    if (head.workers <= 0 || head.chips_per_worker <= 0) continue;  // holds up no one
    if (head.grow) continue;  // a running job's grow never preempts, and holds up no one
    Capacity::Class key{head.accelerator, head.topology};
    if (!seen.insert(key).second) continue;  // behind the class's head: waits in line
    PreemptorInfo info;
    if (auto it = preemptors.find(head.job); it != preemptors.end()) info = it->second;
    if (!info.may_preempt) continue;

    // The jobs of the class before the head are admitted by this plan, on the capacity free now,
    // in the pools it placed them in: they keep those places whoever is preempted. Only the
    // head's class counts from here on (classes never share nodes): it alone is copied.
    Capacity reserved;
    if (auto it = after_release.pools.find(key); it != after_release.pools.end()) {
      reserved.pools.emplace(key, it->second);
    }
    std::vector<Reservation> ahead;
    for (size_t i = 0; i < h; ++i) {
      const GangRequest& job = queued[i];
      const Admission& a = plan.at(job.job);
      if (!a.admit || job.accelerator != head.accelerator || job.topology != head.topology) {
        continue;
      }
      for (size_t slice = 0; slice < a.placed_pools.size(); ++slice) {
        ahead.push_back({job.job, job.accelerator, job.topology, a.placed_pools[slice], job.workers,
                         job.chips_per_worker, static_cast<int32_t>(slice)});
      }
    }
    Reserve(reserved, ahead);
    ClassCapacity capacity(std::move(reserved));
    std::map<std::string, std::vector<const RunningGang*>> by_pool;
    std::unordered_map<const RunningGang*, std::set<std::string>> pools_of;  // of the candidates
    for (const RunningGang& gang : running) {
      if (gang.accelerator != head.accelerator || gang.topology != head.topology) continue;
      if (gang.priority >= head.priority || !gang.preemptible || gang.chips.empty()) continue;
      if (gang.job == info.preempted_by && gang.admitted_at >= info.preempted_at) continue;
      std::set<std::string> pools = capacity.PoolsOf(gang);
      if (pools.empty()) continue;
      // A single-slice head needs its victims in one pool: each pool is a choice of its own,
      // and a multislice victim is a candidate in each of its pools. A multislice head needs
      // room in several pools: one choice over all candidates ("" stands for all of them).
      if (head.slices > 1) {
        by_pool[""].push_back(&gang);
      } else {
        for (const std::string& pool : pools) by_pool[pool].push_back(&gang);
      }
      pools_of.emplace(&gang, std::move(pools));
    }
    if (by_pool.empty()) continue;

    const std::vector<GangRequest> alone = {head};
    const auto fits_in = [&](ClassCapacity& in, const std::vector<const RunningGang*>& victims) {
      return in.PlanWithout(alone, victims).admit;
    };
    // A single-slice head that fits nowhere as things are can only fit, once some victims are
    // gone, in a pool where they held chips: each pool's choice is then tried on those pools
    // alone, not on a copy of the whole class per try (quadratic in the class's pools).
    const bool per_pool = head.slices <= 1 && !fits_in(capacity, {});

    std::optional<Choice> best;
    for (auto& [pool, candidates] : by_pool) {
      std::sort(candidates.begin(), candidates.end(), PreferredVictim);
      std::optional<ClassCapacity> touched;
      if (per_pool) {
        std::set<std::string> pools;
        for (const RunningGang* c : candidates) {
          const std::set<std::string>& of = pools_of.at(c);
          pools.insert(of.begin(), of.end());
        }
        touched.emplace(capacity.capacity(), key, pools);
      }
      ClassCapacity& in = touched ? *touched : capacity;
      const auto fits = [&](const std::vector<const RunningGang*>& victims) {
        return fits_in(in, victims);
      };
      if (!fits(candidates)) continue;
      // The shortest prefix of the order that makes room (adding victims only frees chips).
      size_t lo = 1, hi = candidates.size();
      while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (fits({candidates.begin(), candidates.begin() + static_cast<ptrdiff_t>(mid)})) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      std::vector<const RunningGang*> victims(candidates.begin(),
                                              candidates.begin() + static_cast<ptrdiff_t>(lo));
      // Give back every victim not needed after all, the most valuable first.
      for (size_t i = victims.size(); i-- > 0 && victims.size() > 1;) {
        std::vector<const RunningGang*> fewer = victims;
        fewer.erase(fewer.begin() + static_cast<ptrdiff_t>(i));
        if (fits(fewer)) victims = std::move(fewer);
      }
      std::string where = pool;
      if (head.slices > 1) {
        std::set<std::string> pools;
        for (const RunningGang* v : victims) {
          const std::set<std::string>& of = pools_of.at(v);
          pools.insert(of.begin(), of.end());
        }
        where.clear();
        for (const std::string& p : pools) where += (where.empty() ? "" : ", ") + p;
      }
      Choice choice{std::move(where), std::move(victims)};
      if (!best || choice.Cost() < best->Cost()) best = std::move(choice);
    }
    if (!best) continue;
    // A single-slice head lands in the pool where the plan places it once the victims are gone:
    // that is the pool to name (a multislice victim counted under one of its pools frees the
    // others too).
    if (head.slices <= 1) {
      const Admission placed = capacity.PlanWithout(alone, best->victims);
      if (placed.admit && !placed.placed_pools.empty()) best->pool = placed.placed_pools.front();
    }

    Preemption p;
    p.preemptor = head.job;
    p.pool = best->pool;
    for (const RunningGang* v : best->victims) p.victims.push_back(v->job);
    const std::string pool_label =
        best->pool.empty() ? std::string("the nodes without a node pool label")
        : best->pool.find(", ") != std::string::npos ? "node pools " + best->pool
                                                     : "node pool " + best->pool;
    p.taken = "preempting " + DescribeVictims(best->victims) + " in " + pool_label;
    p.message = p.taken + ": " + DescribeNeeds(head);
    p.victim_message = "preempted by " + head.job + " (priority " + std::to_string(head.priority) +
                       "), which " + DescribeNeeds(head);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace tpujob::policy
