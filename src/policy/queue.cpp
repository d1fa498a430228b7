#include "policy/queue.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "cache/store.h"

namespace tpujob::policy {

namespace {

// Three-way comparison with a shortcut for interned texts (the same address).
int Compare(std::string_view a, std::string_view b) {
  if (a.data() == b.data() && a.size() == b.size()) return 0;
  return a.compare(b);
}

// The labels BuildCapacity reads, found in one pass over a node's labels rather than a search
// for each ("" when absent, as LabelMap::Value).
struct CapacityLabels {
  std::string_view accelerator, topology, pool;
};

CapacityLabels ReadCapacityLabels(const cache::LabelMap& labels) {
  CapacityLabels out;
  for (const auto& [key, value] : labels) {
    const std::string_view k = key.view();
    if (k.size() == kAcceleratorLabel.size() && k == kAcceleratorLabel) {
      out.accelerator = value.view();
    } else if (k.size() == kTopologyLabel.size() && k == kTopologyLabel) {
      out.topology = value.view();
    } else if (k.size() == cache::kNodePoolLabel.size() && k == cache::kNodePoolLabel) {
      out.pool = value.view();
    }
  }
  return out;
}

// Where a node's class and pool texts are: nodes whose texts share their addresses (interned)
// are grouped without comparing a character. Equal texts at different addresses make two groups
// of the same rank.
struct GroupAddress {
  const char* accelerator;
  const char* topology;
  const char* pool;
  size_t accelerator_size, topology_size, pool_size;

  static GroupAddress Of(const CapacityLabels& labels) {
    return {labels.accelerator.data(), labels.topology.data(), labels.pool.data(),
            labels.accelerator.size(), labels.topology.size(), labels.pool.size()};
  }
  friend bool operator==(const GroupAddress&, const GroupAddress&) = default;
};

struct GroupAddressHash {
  size_t operator()(const GroupAddress& g) const {
    size_t h = std::hash<const void*>()(g.accelerator);
    for (const size_t part :
         {std::hash<const void*>()(g.topology), std::hash<const void*>()(g.pool),
          g.accelerator_size, g.topology_size, g.pool_size}) {
      h ^= part + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    }
    return h;
  }
};

// Node names to a value (their place in BuildCapacity's order), for the pods' lookups: one
// open-addressed array of slots, no allocation per name, where a std::unordered_map allocates a
// node per name and chases a pointer per lookup.
class NameIndex {
 public:
  explicit NameIndex(size_t names) {
    size_t size = 16;
    while (size < names * 2) size *= 2;  // at most half full: short probe runs
    slots_.assign(size, Slot{});
    names_.reserve(names);
  }

  // Adds `name` with `value` unless it is there already; returns whether it was added.
  bool Add(std::string_view name, size_t value) {
    const size_t hash = std::hash<std::string_view>()(name);
    Slot& slot = slots_[Probe(name, hash)];
    if (slot.name != 0) return false;
    names_.push_back({name, value});
    slot = {Tag(hash), static_cast<uint32_t>(names_.size())};
    return true;
  }

  // The value of `name`, or nullptr when it was never added.
  const size_t* Find(std::string_view name) const {
    const Slot& slot = slots_[Probe(name, std::hash<std::string_view>()(name))];
    return slot.name == 0 ? nullptr : &names_[slot.name - 1].second;
  }

 private:
  struct Slot {
    uint32_t tag = 0;   // the hash's high bits, to skip most other names without reading them
    uint32_t name = 0;  // 1 + the index in names_; 0: empty
  };

  static uint32_t Tag(size_t hash) { return static_cast<uint32_t>(hash >> 32); }

  // The slot holding `name`, or the empty slot where it would go.
  size_t Probe(std::string_view name, size_t hash) const {
    const size_t mask = slots_.size() - 1;
    const uint32_t tag = Tag(hash);
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      const Slot& slot = slots_[i];
      if (slot.name == 0 || (slot.tag == tag && names_[slot.name - 1].first == name)) return i;
    }
  }

  std::vector<Slot> slots_;
  std::vector<std::pair<std::string_view, size_t>> names_;
};

// A pool's name as messages show it.
std::string PoolLabel(const std::string& pool) {
  return pool.empty() ? std::string("(nodes without a node pool label)") : pool;
}

// Takes whole `chips_per_worker` slots, up to `workers` of them, from `nodes` in the order given
// (each node as often as it holds one). Returns the workers placed.
int32_t TakeSlots(const std::vector<NodeCapacity*>& nodes, int32_t workers,
                  int64_t chips_per_worker) {
  int32_t placed = 0;
  for (NodeCapacity* node : nodes) {
    if (placed == workers) break;
    const int64_t fit = std::min<int64_t>(node->free_chips / chips_per_worker, workers - placed);
    node->free_chips -= fit * chips_per_worker;
    placed += static_cast<int32_t>(fit);
  }
  return placed;
}

// --- Planning state ---------------------------------------------------------------------------

// One pool of one class while a plan is made: its nodes' free chips (name order) and, for each
// worker size asked for so far, the pool's free worker slots of that size and the first node
// that may still hold one. Free chips only go down while planning, so the cursors only move on.
class PoolState {
 public:
  explicit PoolState(const std::string& name, const std::vector<NodeCapacity>& nodes, bool faulty)
      : name_(&name), faulty_(faulty) {
    free_.reserve(nodes.size());
    for (const NodeCapacity& node : nodes) free_.push_back(std::max<int64_t>(node.free_chips, 0));
  }

  const std::string& name() const { return *name_; }
  // A node of the pool is cordoned or unhealthy (Capacity::faulty_pools).
  bool faulty() const { return faulty_; }

  // The most free chips on one node.
  int64_t MostFree() const {
    return free_.empty() ? 0 : *std::max_element(free_.begin(), free_.end());
  }

  // Free worker slots of `chips` chips (chips > 0).
  int64_t Slots(int64_t chips) { return Count(chips).slots; }

  // Places `workers` workers of `chips` chips, nodes in name order, one slot at a time. The
  // caller has checked Slots(chips) >= workers.
  void Place(int32_t workers, int64_t chips) {
    SlotCount& count = Count(chips);
    for (int32_t placed = 0; placed < workers; ++placed) {
      while (count.cursor < free_.size() && free_[count.cursor] < chips) ++count.cursor;
      if (count.cursor == free_.size()) return;  // not reached: the slots were counted
      Take(count.cursor, chips);
    }
  }

 private:
  struct SlotCount {
    int64_t chips = 0;
    int64_t slots = 0;
    size_t cursor = 0;
  };

  SlotCount& Count(int64_t chips) {
    for (SlotCount& count : counts_) {
      if (count.chips == chips) return count;
    }
    SlotCount count{.chips = chips};
    for (int64_t free : free_) count.slots += free / chips;
    counts_.push_back(count);
    return counts_.back();
  }

  void Take(size_t node, int64_t chips) {
    const int64_t before = free_[node];
    const int64_t after = before - chips;
    free_[node] = after;
    for (SlotCount& count : counts_) count.slots -= before / count.chips - after / count.chips;
  }

  const std::string* name_;
  bool faulty_ = false;
  std::vector<int64_t> free_;
  std::vector<SlotCount> counts_;  // a class rarely sees more than one or two worker sizes
};

// One class (accelerator, topology) while a plan is made.
struct ClassState {
  std::vector<PoolState> pools;  // pool name order
  // Set once a job of the class does not fit: every later one waits behind it.
  bool blocked = false;
  std::string head_job;
  int32_t head_position = 0;
  std::string head_message;
};

std::string Describe(const GangRequest& job) { return job.accelerator + " " + job.topology; }

}  // namespace

const cache::Taint* LifecycleTaint(const cache::NodeInfo& node) {
  for (const cache::Taint& t : node.taints) {
    if (t.effect == cache::TaintEffect::kNoSchedule &&
        t.key.str().starts_with("node.kubernetes.io/")) {
      return &t;
    }
  }
  return nullptr;
}

namespace {

// "; 2 nodes WHY (a, b)", the first five named; "" when `nodes` has none of `key`.
std::string LeftOut(const std::map<Capacity::Class, std::vector<std::string>>& nodes,
                    const Capacity::Class& key, const std::string& why) {
  auto it = nodes.find(key);
  if (it == nodes.end() || it->second.empty()) return "";
  const std::vector<std::string>& names = it->second;
  std::string list;
  for (size_t i = 0; i < names.size() && i < 5; ++i) list += (i == 0 ? "" : ", ") + names[i];
  if (names.size() > 5) list += ", ...";
  return "; " + std::to_string(names.size()) + (names.size() == 1 ? " node" : " nodes") + " " +
         why + " (" + list + ")";
}

// What the job could otherwise have used: "; 1 node left out: maintenance scheduled within 60m
// (a)" (announced maintenance soon), "; 2 nodes left out until Kubernetes lifts a NoSchedule
// taint (b node.kubernetes.io/not-ready, ...)" (Ready nodes with a LifecycleTaint).
std::string AvoidedMessage(const Capacity& capacity, const Capacity::Class& key) {
  const int64_t minutes =
      std::chrono::duration_cast<std::chrono::minutes>(capacity.avoid_window).count();
  return LeftOut(capacity.avoided, key,
                 "left out: maintenance scheduled within " + std::to_string(minutes) + "m") +
         LeftOut(capacity.tainted, key, "left out until Kubernetes lifts a NoSchedule taint");
}

// Why `job` does not fit. `best_pool` has the most free slots, `best_slots` (nullptr when the
// class has no node at all), `most_free` the most free chips on one node (single host).

std::string CapacityMessage(const GangRequest& job, const ClassState& state, int64_t best_slots,
                            const std::string* best_pool, int64_t most_free) {
  const std::string needs = DescribeNeeds(job);
  if (state.pools.empty()) return needs + "; no schedulable, healthy node has " + Describe(job);
  if (job.workers == 1) {
    return needs + "; none has (the most free on one node is " + std::to_string(most_free) + ")";
  }
  return needs + "; the best pool, " + PoolLabel(*best_pool) + ", has " +
         std::to_string(best_slots) + " free";
}

}  // namespace

std::string DescribeNeeds(const GangRequest& job) {
  if (!job.slice_ids.empty()) {
    std::string ids;
    for (size_t i = 0; i < job.slice_ids.size(); ++i) {
      ids += (i == 0 ? "" : ", ") + std::to_string(job.slice_ids[i]);
    }
    const bool one = job.slice_ids.size() == 1;
    std::string out = "needs " +
                      (one ? std::string("a node pool")
                           : std::to_string(job.slice_ids.size()) + " node pools each") +
                      " with " + std::to_string(job.workers) +
                      (job.workers == 1 ? " host" : " hosts") + " of " + Describe(job) + " (" +
                      std::to_string(job.chips_per_worker) + " chips each) to " +
                      (job.grow ? "add slice" : "replace slice") + (one ? " " : "s ") + ids;
    if (!job.held_pools.empty()) {
      out += " (its other slices keep ";
      for (size_t i = 0; i < job.held_pools.size() && i < 8; ++i) {
        out += (i == 0 ? "" : ", ") + job.held_pools[i];
      }
      if (job.held_pools.size() > 8) out += ", ...";
      out += ")";
    }
    return out;
  }
  if (job.slices > 1) {
    return "needs " + std::to_string(job.slices) + " node pools with " +
           std::to_string(job.workers) + (job.workers == 1 ? " host" : " hosts") + " each of " +
           Describe(job) + " (" + std::to_string(job.chips_per_worker) +
           " chips each), one per slice";
  }
  if (job.workers == 1) {
    return "needs 1 host of " + Describe(job) + " with " + std::to_string(job.chips_per_worker) +
           " free chips";
  }
  return "needs " + std::to_string(job.workers) + " hosts of " + Describe(job) + " (" +
         std::to_string(job.chips_per_worker) + " chips each) in one node pool";
}

bool QueueBefore(const GangRequest& a, const GangRequest& b) {
  // Re-issued first (true before false), higher priority first, earlier first, then the key.
  return std::tuple(!a.reissued, -int64_t{a.priority}, a.queued_at, std::string_view(a.job)) <
         std::tuple(!b.reissued, -int64_t{b.priority}, b.queued_at, std::string_view(b.job));
}

Capacity BuildCapacity(const std::vector<const cache::NodeInfo*>& nodes,
                       const std::vector<const cache::PodInfo*>& pods,
                       const std::vector<Reservation>& reservations, const NodeHealthConfig& health,
                       WallTime now) {
  Capacity capacity;
  capacity.avoid_window = health.maintenance_avoid_window;
  // The nodes that offer chips at all, with their allocatable chips, sorted by class, pool and
  // name. Label values are interned, so equal ones mostly share an address: nodes are grouped by
  // the addresses of their class and pool first (`group`), and only the groups compared by text.
  struct Entry {
    std::string_view name;
    size_t group = 0;
    int64_t free_chips = 0;
  };
  struct Group {
    std::string_view accelerator, topology, pool;
    size_t rank = 0;  // place in (accelerator, topology, pool) order; equal texts share one
  };
  std::vector<Entry> entries;
  entries.reserve(nodes.size());
  std::vector<Group> groups;
  std::unordered_map<GroupAddress, size_t, GroupAddressHash> group_of;
  for (const cache::NodeInfo* node : nodes) {
    if (node == nullptr) continue;
    const CapacityLabels labels = ReadCapacityLabels(node->labels);
    if (labels.accelerator.empty() || labels.topology.empty()) continue;
    // A cordoned or unhealthy node offers nothing, and marks its pool for re-issued attempts.
    const auto faulty = [&] {
      capacity.faulty_pools[{std::string(labels.accelerator), std::string(labels.topology)}].insert(
          std::string(labels.pool));
    };
    if (node->unschedulable) {
      faulty();
      continue;
    }
    // Announced maintenance first, so a node that is also inside the move window (and so
    // "under maintenance") is named in the message as left out for it.
    std::optional<Duration> changes_in;
    if (AvoidForMaintenance(*node, health, now, &changes_in)) {
      capacity.avoided[{std::string(labels.accelerator), std::string(labels.topology)}].push_back(
          node->name);
      continue;
    }
    if (EvaluateNode(node, health, now).verdict != NodeVerdict::kHealthy) {
      faulty();
      continue;
    }
    if (const cache::Taint* taint = LifecycleTaint(*node)) {
      capacity.tainted[{std::string(labels.accelerator), std::string(labels.topology)}].push_back(
          node->name + " " + taint->key.str());
      continue;
    }
    if (changes_in && (!capacity.changes_in || *changes_in < *capacity.changes_in)) {
      capacity.changes_in = changes_in;
    }
    const auto [at, added] = group_of.try_emplace(GroupAddress::Of(labels), groups.size());
    if (added) groups.push_back({labels.accelerator, labels.topology, labels.pool});
    entries.push_back({node->name, at->second, std::max<int64_t>(node->tpu_allocatable, 0)});
  }

  // The groups in (accelerator, topology, pool) order, then the nodes bucketed by their group's
  // rank and sorted by name within each bucket: the order of one sort by (accelerator, topology,
  // pool, name), with the texts compared once per group rather than once per node.
  std::vector<size_t> by_text(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) by_text[g] = g;
  const auto text_order = [&](size_t a, size_t b) {
    const Group& x = groups[a];
    const Group& y = groups[b];
    if (int c = Compare(x.accelerator, y.accelerator); c != 0) return c < 0;
    if (int c = Compare(x.topology, y.topology); c != 0) return c < 0;
    return Compare(x.pool, y.pool) < 0;
  };
  std::sort(by_text.begin(), by_text.end(), text_order);
  size_t ranks = 0;
  for (size_t i = 0; i < by_text.size(); ++i) {
    if (i > 0 && text_order(by_text[i - 1], by_text[i])) ++ranks;
    groups[by_text[i]].rank = ranks;
  }
  if (!by_text.empty()) ++ranks;
  std::vector<size_t> bucket_start(ranks + 1, 0);  // counting sort by rank
  for (const Entry& entry : entries) ++bucket_start[groups[entry.group].rank + 1];
  for (size_t r = 0; r < ranks; ++r) bucket_start[r + 1] += bucket_start[r];
  std::vector<Entry> sorted(entries.size());
  {
    std::vector<size_t> next(bucket_start.begin(), bucket_start.end() - 1);
    for (const Entry& entry : entries) sorted[next[groups[entry.group].rank]++] = entry;
  }
  entries.clear();
  entries.shrink_to_fit();
  // Stable: of two nodes listed with the same name, class and pool, the first listed counts.
  for (size_t r = 0; r < ranks; ++r) {
    std::stable_sort(sorted.begin() + static_cast<ptrdiff_t>(bucket_start[r]),
                     sorted.begin() + static_cast<ptrdiff_t>(bucket_start[r + 1]),
                     [](const Entry& a, const Entry& b) { return a.name < b.name; });
  }

  // What the pods bound to them use. A node name seen twice counts once, in its first place.
  NameIndex by_name(sorted.size());
  std::vector<bool> first(sorted.size());
  for (size_t i = 0; i < sorted.size(); ++i) first[i] = by_name.Add(sorted[i].name, i);
  // Pods of one node often come one after another: the same interned node name is looked up once.
  const cache::PodInfo* previous = nullptr;  // the last pod looked up, and where its node is
  int64_t* previous_free = nullptr;
  for (const cache::PodInfo* pod : pods) {
    if (pod == nullptr || pod->node_name.empty() || pod->terminated()) continue;
    const int64_t request = pod->TpuRequest();
    if (request == 0) continue;  // takes nothing
    int64_t* free = nullptr;
    if (previous != nullptr && pod->node_name.SharesStorageWith(previous->node_name)) {
      free = previous_free;
    } else {
      if (const size_t* at = by_name.Find(pod->node_name.view())) free = &sorted[*at].free_chips;
      previous = pod;
      previous_free = free;
    }
    if (free != nullptr) *free = std::max<int64_t>(*free - request, 0);
  }

  for (auto& [unused, names] : capacity.avoided) std::sort(names.begin(), names.end());
  for (auto& [unused, names] : capacity.tainted) std::sort(names.begin(), names.end());
  size_t last_rank = ranks;  // the rank of the last entry added, and the pool it went to
  std::vector<NodeCapacity>* pool = nullptr;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const Entry& entry = sorted[i];
    if (!first[i]) continue;  // a name seen twice
    const Group& group = groups[entry.group];
    if (group.rank != last_rank) {
      auto& pools = capacity.pools[{std::string(group.accelerator), std::string(group.topology)}];
      pool = &pools.emplace_hint(pools.end(), std::string(group.pool), std::vector<NodeCapacity>())
                  ->second;
      pool->reserve(bucket_start[group.rank + 1] - bucket_start[group.rank]);
      last_rank = group.rank;
    }
    pool->push_back(
        NodeCapacity{std::string(entry.name), std::string(group.pool), entry.free_chips});
  }

  Reserve(capacity, reservations);
  return capacity;
}

void Reserve(Capacity& capacity, const std::vector<Reservation>& reservations) {
  std::vector<const Reservation*> ordered;
  ordered.reserve(reservations.size());
  for (const Reservation& r : reservations) ordered.push_back(&r);
  std::sort(ordered.begin(), ordered.end(), [](const Reservation* a, const Reservation* b) {
    return std::tie(a->job, a->slice, a->accelerator, a->topology, a->pool, a->workers,
                    a->chips_per_worker) < std::tie(b->job, b->slice, b->accelerator, b->topology,
                                                    b->pool, b->workers, b->chips_per_worker);
  });
  std::map<Capacity::Class, std::vector<NodeCapacity*>> class_nodes;  // any pool, name order
  for (const Reservation* r : ordered) {
    if (r->workers <= 0 || r->chips_per_worker <= 0) continue;
    auto found = capacity.pools.find({r->accelerator, r->topology});
    if (found == capacity.pools.end()) continue;
    if (!r->pool.empty()) {
      auto pool = found->second.find(r->pool);
      if (pool == found->second.end()) continue;
      std::vector<NodeCapacity*> in_pool;
      in_pool.reserve(pool->second.size());
      for (NodeCapacity& node : pool->second) in_pool.push_back(&node);
      TakeSlots(in_pool, r->workers, r->chips_per_worker);
      continue;
    }
    auto [any, added] = class_nodes.try_emplace(found->first);
    if (added) {
      for (auto& [name, pool] : found->second) {
        for (NodeCapacity& node : pool) any->second.push_back(&node);
      }
      std::sort(any->second.begin(), any->second.end(),
                [](const NodeCapacity* a, const NodeCapacity* b) { return a->name < b->name; });
    }
    TakeSlots(any->second, r->workers, r->chips_per_worker);
  }
}

std::map<std::string, Admission> PlanAdmissions(const Capacity& capacity,
                                                std::vector<GangRequest> queued) {
  std::sort(queued.begin(), queued.end(), QueueBefore);

  std::map<std::string, Admission> out;
  std::map<Capacity::Class, ClassState> classes;  // filled as jobs ask for them
  for (size_t i = 0; i < queued.size(); ++i) {
    const GangRequest& job = queued[i];
    Admission admission;
    admission.position = static_cast<int32_t>(i + 1);

    Capacity::Class key{job.accelerator, job.topology};
    auto [it, added] = classes.try_emplace(key);
    ClassState& state = it->second;
    if (added) {
      if (auto found = capacity.pools.find(key); found != capacity.pools.end()) {
        state.pools.reserve(found->second.size());
        const auto faulty = capacity.faulty_pools.find(key);
        for (const auto& [name, nodes] : found->second) {
          state.pools.emplace_back(
              name, nodes, faulty != capacity.faulty_pools.end() && faulty->second.contains(name));
        }
      }
    }

    if (job.workers <= 0 || job.chips_per_worker <= 0) {
      // Nothing that could ever be placed (the spec's validation keeps these out): it waits,
      // and holds up no one.
      admission.reason = "WaitingForCapacity";
      admission.message = "asks for " + std::to_string(job.workers) + " workers of " +
                          std::to_string(job.chips_per_worker) + " chips: nothing to place";
      out.insert_or_assign(job.job, std::move(admission));
      continue;
    }
    if (state.blocked) {
      admission.reason = "WaitingInLine";
      admission.message = "waiting behind " + state.head_job + " (position " +
                          std::to_string(state.head_position) + "), which " + state.head_message;
      out.insert_or_assign(job.job, std::move(admission));
      continue;
    }

    if (job.slices > 1 || !job.slice_ids.empty()) {
      // Every slice in a pool of its own: the pools (with a label) that hold a whole slice, best
      // fit first, then by name; none that another slice of the job keeps.
      // A re-issued attempt takes pools without a faulty node first.
      std::vector<std::pair<int64_t, PoolState*>> fit;
      for (PoolState& pool : state.pools) {
        if (pool.name().empty()) continue;
        if (std::find(job.held_pools.begin(), job.held_pools.end(), pool.name()) !=
            job.held_pools.end()) {
          continue;
        }
        const int64_t slots = pool.Slots(job.chips_per_worker);
        if (slots >= job.workers) fit.emplace_back(slots - job.workers, &pool);
      }
      std::stable_sort(fit.begin(), fit.end(), [&](const auto& a, const auto& b) {
        const bool a_faulty = job.reissued && a.second->faulty();
        const bool b_faulty = job.reissued && b.second->faulty();
        return std::tie(a_faulty, a.first) < std::tie(b_faulty, b.first);
      });
      // A running job's grow takes as many of its missing slices as have pools free now.
      if (fit.size() >= static_cast<size_t>(job.slices) || (job.grow && !fit.empty())) {
        fit.resize(std::min(fit.size(), static_cast<size_t>(job.slices)));
        std::sort(fit.begin(), fit.end(),
                  [](const auto& a, const auto& b) { return a.second->name() < b.second->name(); });
        admission.admit = true;
        for (const auto& [left, pool] : fit) {
          pool->Place(job.workers, job.chips_per_worker);
          admission.pools.push_back(pool->name());
        }
        admission.placed_pools = admission.pools;
        out.insert_or_assign(job.job, std::move(admission));
        continue;
      }
      std::sort(fit.begin(), fit.end(),
                [](const auto& a, const auto& b) { return a.second->name() < b.second->name(); });
      std::string message = DescribeNeeds(job) + "; " + std::to_string(fit.size()) +
                            (fit.size() == 1 ? " pool has" : " pools have") + " room";
      for (size_t p = 0; p < fit.size() && p < 8; ++p) {
        message += (p == 0 ? " (" : ", ") + fit[p].second->name();
      }
      if (fit.size() > 8) message += ", ...";
      if (!fit.empty()) message += ")";
      if (job.grow) {
        // A running job's grow takes pools first when they are free, and holds up no one when
        // they are not: the job runs meanwhile, and the jobs behind it may need far less.
        admission.reason = "WaitingForCapacity";
        admission.message = message + AvoidedMessage(capacity, key);
        out.insert_or_assign(job.job, std::move(admission));
        continue;
      }
      state.blocked = true;
      state.head_job = job.job;
      state.head_position = admission.position;
      state.head_message = message + AvoidedMessage(capacity, key);
      admission.reason = "WaitingForCapacity";
      admission.message = state.head_message;
      out.insert_or_assign(job.job, std::move(admission));
      continue;
    }

    // Best fit: of the pools that hold every worker, the one left with the fewest free slots;
    // pools are in name order, so the first of equals wins the tie. A single-host job takes one
    // slot of any pool by the same rule. Nodes without a pool label are a pool of their own,
    // named "": they serve multi-host jobs too (a cluster without pool labels is one slice),
    // though the workers of such a job cannot be pinned to them by node selector.
    PoolState* chosen = nullptr;
    int64_t chosen_left = 0;
    bool chosen_faulty = false;
    PoolState* best = nullptr;  // the most free slots, for the message
    int64_t best_slots = -1;
    for (PoolState& pool : state.pools) {
      const int64_t slots = pool.Slots(job.chips_per_worker);
      if (slots > best_slots) {
        best = &pool;
        best_slots = slots;
      }
      if (slots < job.workers) continue;
      const int64_t left = slots - job.workers;
      // A re-issued attempt takes a pool without a faulty node first.
      const bool faulty = job.reissued && pool.faulty();
      if (chosen == nullptr || std::tie(faulty, left) < std::tie(chosen_faulty, chosen_left)) {
        chosen = &pool;
        chosen_left = left;
        chosen_faulty = faulty;
      }
    }

    if (chosen != nullptr) {
      chosen->Place(job.workers, job.chips_per_worker);
      admission.admit = true;
      admission.placed_pools = {chosen->name()};
      // A single-host job is not pinned: its pool is "" (any pool), whichever node it was
      // counted on.
      admission.pools = {job.workers > 1 ? chosen->name() : std::string()};
      out.insert_or_assign(job.job, std::move(admission));
      continue;
    }

    int64_t most_free = 0;  // once per class at most: it is blocked from here on
    if (job.workers == 1) {
      for (const PoolState& pool : state.pools) most_free = std::max(most_free, pool.MostFree());
    }
    state.blocked = true;
    state.head_job = job.job;
    state.head_position = admission.position;
    state.head_message = CapacityMessage(job, state, best_slots,
                                         best != nullptr ? &best->name() : nullptr, most_free) +
                         AvoidedMessage(capacity, key);
    admission.reason = "WaitingForCapacity";
    admission.message = state.head_message;
    out.insert_or_assign(job.job, std::move(admission));
  }
  return out;
}

}  // namespace tpujob::policy
