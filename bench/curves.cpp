// The curves of the pure parts, in memory: how the queue's admission and preemption plans, one
// job's fault decision, slice recovery and the caches' heap grow with the cluster and the job.
// Each series prints one line per point and its fitted growth exponent (the least-squares slope
// of log y over log x: 1 is linear, 2 quadratic), with the goal where there is one; goals are
// printed, never asserted. Every point also goes to a TSV file (series, x_label, y_label, x, y,
// goal) for plotting.
//
// The clusters are simulated_cluster.h's (4 TPU pods per node in the admission cluster), the job
// simulated_job.h's, the heap cache_memory.h's. A timing is the median of several runs, fewer at
// the largest sizes.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "cache_memory.h"
#include "common.h"
#include "policy/lifecycle.h"
#include "policy/node_health.h"
#include "policy/preemption.h"
#include "policy/queue.h"
#include "scenarios.h"
#include "simulated_cluster.h"
#include "simulated_job.h"

namespace tpujob::bench {
namespace {

namespace policy = tpujob::policy;

constexpr int kNodeSizes[] = {1000, 5000, 20000, 65000};
constexpr int kQueuedJobs = 5000;
constexpr int kJobSizes[] = {1000, 5000, 20000};
constexpr int kPreemptionQueued = 1000;
constexpr int kPodsPerNode = 4;
constexpr int32_t kHostsPerSlice = 64;
constexpr int32_t kFaultSlices[] = {1, 4, 16, 64};
constexpr int32_t kRecoverySlices[] = {2, 4, 16, 64};  // slice recovery needs 2 slices or more

constexpr double kPlanGoalMs = 50;
constexpr double kAdmissionExponentGoal = 1.2;
constexpr double kFaultDecisionGoalMs = 5;
constexpr double kHeapGoalBytes = 1.5 * 1024;

struct Point {
  double x = 0, y = 0;
  std::optional<double> goal;  // of y at this point
  std::string note;            // printed after the point
};

struct Series {
  const char* id;
  const char* title;
  const char* x_label;
  const char* y_label;
  std::optional<double> exponent_goal;
  std::vector<Point> points;
};

// Runs at a size: fewer at the largest, so that the whole curve set takes a few minutes.
int RunsAt(double size, double large) {
  if (size >= large) return 5;
  if (size >= large / 4) return 7;
  return 15;
}

// The median of `runs` timings of `work`, in milliseconds.
template <typename Work>
double MedianMs(int runs, Work&& work) {
  std::vector<double> ms;
  for (int run = 0; run < runs; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    work();
    ms.push_back(MsSince(t0));
  }
  return Median(std::move(ms));
}

// The least-squares slope of log y over log x; nullopt with fewer than 2 usable points.
std::optional<double> GrowthExponent(const std::vector<Point>& points) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const Point& p : points) {
    if (p.x <= 0 || p.y <= 0) continue;
    const double lx = std::log(p.x), ly = std::log(p.y);
    n += 1;
    sx += lx;
    sy += ly;
    sxx += lx * lx;
    sxy += lx * ly;
  }
  const double d = n * sxx - sx * sx;
  if (n < 2 || d <= 0) return std::nullopt;
  return (n * sxy - sx * sy) / d;
}

std::string Number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

// Prints a finished series: its points, then its exponent.
void Print(const Series& s) {
  for (const Point& p : s.points) {
    std::printf("  %8.0f %-12s %10.3f %-5s%s%s\n", p.x, s.x_label, p.y, s.y_label,
                p.goal ? ("  (goal <= " + Number(*p.goal) + " " + s.y_label + ")").c_str() : "",
                p.note.empty() ? "" : ("  " + p.note).c_str());
  }
  const std::optional<double> e = GrowthExponent(s.points);
  char exponent[32] = "n/a";
  if (e) std::snprintf(exponent, sizeof exponent, "%.2f", *e);
  std::printf("  growth exponent in %s: %s%s\n", s.x_label, exponent,
              s.exponent_goal ? (" (goal <= " + Number(*s.exponent_goal) + ")").c_str() : "");
  std::fflush(stdout);
}

void Begin(const Series& s) {
  std::printf("%s [%s]\n", s.title, s.id);
  std::fflush(stdout);
}

bool WriteTsv(const std::string& path, const std::vector<Series>& all) {
  std::ofstream out(path);
  out << "series\tx_label\ty_label\tx\ty\tgoal\n";
  for (const Series& s : all) {
    for (const Point& p : s.points) {
      out << s.id << '\t' << s.x_label << '\t' << s.y_label << '\t' << Number(p.x) << '\t'
          << Number(p.y) << '\t' << (p.goal ? Number(*p.goal) : "") << '\n';
    }
  }
  out.close();
  if (!out) {
    std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

// The goal of a point whose x is `at` in a series whose goal holds only there.
std::optional<double> GoalAt(double x, double at, double goal) {
  return x == at ? std::optional<double>(goal) : std::nullopt;
}

// 1, 4: the admission plan in nodes, then the replaced slice's queue planning on the same
// clusters (the one-slice request alone, the capacity built once per cluster).
void AdmissionCurves(unsigned seed, Series& nodes_series, Series& slice_series) {
  const std::vector<SliceKind> kinds = SliceKinds();
  const policy::NodeHealthConfig health;
  Begin(nodes_series);
  std::vector<std::pair<int, policy::Capacity>> capacities;
  for (const int n : kNodeSizes) {
    Random random(seed);
    const WallTime now = std::chrono::system_clock::now();
    const AdmissionCluster cluster =
        MakeAdmissionCluster(random, kinds, n, kQueuedJobs, now, kPodsPerNode);
    const auto node_ptrs = Pointers(cluster.nodes);
    const auto pod_ptrs = Pointers(cluster.pods);
    size_t admitted = 0;
    const double ms = MedianMs(RunsAt(n, 65000), [&] {
      const policy::Capacity capacity =
          policy::BuildCapacity(node_ptrs, pod_ptrs, cluster.reservations, health, now);
      const auto plan = policy::PlanAdmissions(capacity, cluster.queued);
      admitted =
          std::count_if(plan.begin(), plan.end(), [](const auto& a) { return a.second.admit; });
    });
    nodes_series.points.push_back({static_cast<double>(n), ms, GoalAt(n, 65000, kPlanGoalMs),
                                   std::to_string(cluster.pods.size()) + " pods, " +
                                       std::to_string(admitted) + " of " +
                                       std::to_string(kQueuedJobs) + " admitted"});
    capacities.emplace_back(
        n, policy::BuildCapacity(node_ptrs, pod_ptrs, cluster.reservations, health, now));
  }
  Print(nodes_series);

  // The replaced slice of a 4-slice job of 64-host tpu-v6e-slice 16x16 slices: slice 1 asks for
  // a pool of its own, the pools of slices 0, 2 and 3 held.
  Begin(slice_series);
  policy::GangRequest slice;
  slice.job = "team-0/recovering";
  slice.accelerator = "tpu-v6e-slice";
  slice.topology = "16x16";
  slice.workers = kHostsPerSlice;
  slice.chips_per_worker = 4;
  slice.slices = 1;
  slice.slice_ids = {1};
  slice.held_pools = {"pool-0", "pool-2", "pool-3"};
  slice.reissued = true;
  for (const auto& [n, capacity] : capacities) {
    bool admit = false;
    const double ms = MedianMs(RunsAt(n, 65000) * 3, [&, &capacity = capacity] {
      admit = policy::PlanAdmissions(capacity, {slice}).begin()->second.admit;
    });
    slice_series.points.push_back(
        {static_cast<double>(n), ms, std::nullopt, admit ? "placed" : "waits for capacity"});
  }
  Print(slice_series);
}

// 1: the admission plan in queued jobs, on the largest cluster (the queue's first k jobs).
void AdmissionJobsCurve(unsigned seed, Series& s) {
  Begin(s);
  Random random(seed);
  const WallTime now = std::chrono::system_clock::now();
  const int largest = kNodeSizes[std::size(kNodeSizes) - 1];
  const AdmissionCluster cluster = MakeAdmissionCluster(
      random, SliceKinds(), largest, kJobSizes[std::size(kJobSizes) - 1], now, kPodsPerNode);
  const auto node_ptrs = Pointers(cluster.nodes);
  const auto pod_ptrs = Pointers(cluster.pods);
  for (const int jobs : kJobSizes) {
    const std::vector<policy::GangRequest> queued(cluster.queued.begin(),
                                                  cluster.queued.begin() + jobs);
    const double ms = MedianMs(RunsAt(jobs, 20000), [&] {
      const policy::Capacity capacity = policy::BuildCapacity(
          node_ptrs, pod_ptrs, cluster.reservations, policy::NodeHealthConfig{}, now);
      policy::PlanAdmissions(capacity, queued);
    });
    s.points.push_back({static_cast<double>(jobs), ms, GoalAt(jobs, kQueuedJobs, kPlanGoalMs),
                        "at " + std::to_string(largest) + " nodes"});
  }
  Print(s);
}

// 2: victim selection in nodes, running gangs holding ~90% of the nodes.
void PreemptionCurve(unsigned seed, Series& s) {
  Begin(s);
  for (const int n : kNodeSizes) {
    Random random(seed);
    const WallTime now = std::chrono::system_clock::now();
    const PreemptionCluster cluster =
        MakePreemptionCluster(random, SliceKinds(), n, n, kPreemptionQueued, now);
    const policy::Capacity capacity = policy::BuildCapacity(
        Pointers(cluster.nodes), Pointers(cluster.pods), {}, policy::NodeHealthConfig{}, now);
    size_t preemptions = 0;
    const double ms = MedianMs(RunsAt(n, 65000), [&] {
      preemptions = policy::PlanPreemptions(capacity, cluster.queued, {}, cluster.running).size();
    });
    s.points.push_back({static_cast<double>(n), ms, GoalAt(n, 65000, kPlanGoalMs),
                        std::to_string(cluster.running.size()) + " running on " +
                            std::to_string(cluster.taken) + " nodes, " +
                            std::to_string(preemptions) + " heads preempt"});
  }
  Print(s);
}

// 3, 4: one Decide for a Running job whose one worker's node turned TPUUnhealthy. Fails when
// the decision is not the `action` expected of it.
bool DecisionCurve(const int32_t (&slices)[4], const std::string& recovery,
                   const std::string& action, std::optional<double> goal_at_largest, Series& s) {
  Begin(s);
  for (const int32_t slice_count : slices) {
    const RunningJob job(slice_count, kHostsPerSlice, recovery);
    if (!job.ok()) {
      std::fprintf(stderr, "error: a %dx%d job: %s\n", slice_count, kHostsPerSlice,
                   job.error().c_str());
      return false;
    }
    // A worker of slice 1 (of the only slice for a 1-slice job), not its first host.
    const int32_t worker = (slice_count > 1 ? kHostsPerSlice : 0) + 1;
    const policy::LifecycleInput input = job.FaultInput(worker);
    policy::Plan plan;
    const double ms =
        MedianMs(RunsAt(job.workers(), 4096) * 3, [&] { plan = policy::Decide(input); });
    const std::string taken =
        plan.status.faults.empty() ? "none" : plan.status.faults.back().action;
    if (taken != action) {
      std::fprintf(stderr, "error: a %dx%d job's fault decided %s, not %s\n", slice_count,
                   kHostsPerSlice, taken.c_str(), action.c_str());
      return false;
    }
    const double x = job.workers();
    s.points.push_back({x, ms, goal_at_largest ? GoalAt(x, 4096, *goal_at_largest) : std::nullopt,
                        std::to_string(slice_count) + "x" + std::to_string(kHostsPerSlice) + ": " +
                            action + ", " + std::to_string(plan.remove.size()) + " pods removed"});
  }
  Print(s);
  return true;
}

// 5: the caches' heap per pod and per node, 4 pods per node.
bool HeapCurves(Series& pods, Series& nodes) {
  Begin(pods);
  std::vector<CacheHeap> heaps;
  for (const int n : kNodeSizes) {
    const std::optional<CacheHeap> heap = MeasureCacheHeap(n * kPodsPerNode, n);
    if (!heap) return false;
    heaps.push_back(*heap);
    pods.points.push_back({static_cast<double>(n), heap->per_pod, kHeapGoalBytes,
                           std::to_string(n * kPodsPerNode) + " pods"});
  }
  Print(pods);
  Begin(nodes);
  for (size_t i = 0; i < heaps.size(); ++i) {
    nodes.points.push_back(
        {static_cast<double>(kNodeSizes[i]), heaps[i].per_node, kHeapGoalBytes, ""});
  }
  Print(nodes);
  return true;
}

}  // namespace

int Curves(const std::string& out, unsigned seed) {
  const auto start = std::chrono::steady_clock::now();
  Series admission_nodes{"admission-nodes",
                         "admission plan (BuildCapacity + PlanAdmissions), 5,000 queued jobs",
                         "nodes",
                         "ms",
                         kAdmissionExponentGoal,
                         {}};
  Series slice_queue{"slice-queue-nodes",
                     "the replaced slice's queue planning (PlanAdmissions of its one-slice "
                     "request, 64 hosts, 3 pools held)",
                     "nodes",
                     "ms",
                     std::nullopt,
                     {}};
  Series admission_jobs{
      "admission-jobs", "admission plan at 65,000 nodes", "queued jobs", "ms", std::nullopt, {}};
  Series preemption{"preemption-nodes",
                    "victim selection (PlanPreemptions), ~90% of the nodes held, 1,000 queued",
                    "nodes",
                    "ms",
                    std::nullopt,
                    {}};
  Series fault{"fault-decision-workers",
               "one fault decision (Decide: a worker's node TPUUnhealthy, recovery Job), "
               "slices x 64 hosts",
               "workers",
               "ms",
               std::nullopt,
               {}};
  Series recovery{"slice-recovery-workers",
                  "slice recovery decision (Decide: the fault confined to slice 1, recovery "
                  "Slice), slices x 64 hosts",
                  "workers",
                  "ms",
                  std::nullopt,
                  {}};
  Series heap_pod{
      "heap-pod-nodes", "cache heap per pod, 4 pods per node", "nodes", "bytes", std::nullopt, {}};
  Series heap_node{"heap-node-nodes", "cache heap per node", "nodes", "bytes", std::nullopt, {}};

  AdmissionCurves(seed, admission_nodes, slice_queue);
  AdmissionJobsCurve(seed, admission_jobs);
  PreemptionCurve(seed, preemption);
  bool ok = DecisionCurve(kFaultSlices, "Job", "ReissueJob", kFaultDecisionGoalMs, fault);
  ok = ok && DecisionCurve(kRecoverySlices, "Slice", "ReplaceSlice", std::nullopt, recovery);
  ok = ok && HeapCurves(heap_pod, heap_node);
  std::printf("curves took %.0f s\n", MsSince(start) / 1000);
  if (!out.empty() && !WriteTsv(out, {admission_nodes, admission_jobs, preemption, fault, recovery,
                                      slice_queue, heap_pod, heap_node})) {
    return 1;
  }
  return ok ? 0 : 1;
}

}  // namespace tpujob::bench
