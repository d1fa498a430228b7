// tpujob-bench: load generators for `make bench` (not part of the product).
//
//   tpujob-bench create-pods --kubeconfig K --namespace NS --count N --jobs J --nodes M [--first F]
//     creates pods F..N-1, labelled as J TPUJobs' workers, bound round-robin to the KWOK nodes
//     bench-node-0..M-1, with 16 threads and no client-side rate limit, and prints the rate.
//   tpujob-bench jobset --kubeconfig K --namespace NS --name J --workers W --topology T
//     the JobSet peer of `gang`: one replicated Job of W indexed pods on the same nodes, timed
//     from the JobSet's create until all its pods exist, then deleted.
//   tpujob-bench create-nodes --kubeconfig K --count M [--first F]
//     creates the KWOK-managed fake TPU nodes bench-node-F..M-1.
//   tpujob-bench plain-gang --kubeconfig K --namespace NS --name J --workers W --topology T
//     the raw ceiling for `gang`: creates a TPUJob no operator watches, then the very pods the
//     operator would create for it (BuildPod) with a plain client, 16 threads, no client-side
//     limit, connections warm; reports the time until all were created the way `gang` does,
//     then deletes them.
//   tpujob-bench gang --kubeconfig K --namespace NS --name J --workers W --topology T
//       [--slices S] [--finish]
//     creates a TPUJob of W workers (per slice, S slices) and reports the time until the operator
//     created all its pods (seen through a watch opened before the create); with --finish it then
//     drives the job to success (worker 0 exits 0), waits for Succeeded, deletes it and waits until
//     its pods are gone: one job's whole life
//   tpujob-bench fault-latency --kubeconfig K --namespace NS --faults F [--workers W]
//     creates F + 4W fake TPU nodes of an accelerator of their own, then F times: runs a
//     W-worker TPUJob until Running, writes the hardware condition TPUUnhealthy=True on worker
//     0's node and times, through watches opened beforehand, how long until that node is
//     cordoned and every pod of the job is being deleted; prints p50/p90/p99/max of both and
//     of each, then deletes what it created. With --ceiling the same, but the tool itself
//     cordons and deletes as each fault write returns (the operator only runs the jobs).
//   tpujob-bench reissue --kubeconfig K --namespace NS --workers W --runs R
//     creates W + R fake TPU nodes of an accelerator of their own, then R times: runs a W-worker
//     TPUJob (termination grace 0) until Running, writes TPUUnhealthy=True on worker 0's node and
//     times until the job's attempt 2 has all W pods created and all Running; p50/p90/p99/max.
//   tpujob-bench slice-recovery --kubeconfig K --namespace NS --slices S --hosts H --runs R
//       --metrics-url URL [--hot-swap-runs N] [--grace G] [--restart InPlace]
//     creates S + 1 node pools of H fake TPU nodes (4 chips each), then R times each, recovery
//     Slice and recovery Job interleaved: runs a TPUJob of S slices x H hosts (grace G) until
//     Running, writes TPUUnhealthy=True on a node of slice 1 and times, through a pod watch,
//     until attempt 2's pods are all Running (and the old ones all gone, the new ones all
//     created); counts the operator's API writes over the recovery from its /metrics at URL and
//     the new pods the scheduler placed; then deletes the job and heals the node. N more faults
//     with the spare pool held by a 1-slice job of lower priority (hot swap: the replaced slice
//     preempts it). Prints medians and the ratios Slice/Job. With --restart InPlace the recovery
//     Slice jobs restart in place: the kept slices' pods stay, timed until every program of the
//     next generation runs (their supervisors played, as in `in-place`).
//   tpujob-bench elastic --kubeconfig K --namespace NS [--slices 8] [--hosts 2] [--pool-after 60]
//       [--window 600] [--wait-seconds 0] [--grace 0]
//     creates S node pools of H fake TPU nodes (no spare); a TPUJob of S slices with minSlices
//     S - 1 runs, TPUUnhealthy=True is written on a node of slice 1, and a pool is created T s
//     later; times, through a pod watch, the job running on S - 1 slices, its stop to grow back
//     and all S running again; then the same job without minSlices (it waits whole). Prints the
//     times and the useful chip-seconds of the first W s after the fault, each as a share of the
//     no-fault figure.
//   tpujob-bench in-place --kubeconfig K --namespace NS --workers W --runs R --metrics-url URL
//     creates W fake TPU nodes, then R times each, restart InPlace and Recreate interleaved:
//     runs a W-worker TPUJob (grace 0) until Running, then a program exit, and times until every
//     program of the next generation runs. The kubelet and the supervisors of the pods are played
//     here (KWOK runs no container): in place, worker 0's program exits, and a pod told a newer
//     generation (tpujob.dev/generation) has its container restarted to the barrier, its program
//     running once tpujob.dev/barrier reaches it; recreated, every worker's program exits (worker
//     0's, then the others' as their collectives break: at once here) and the operator creates
//     every pod again. Counts the operator's API writes over each restart from its /metrics at
//     URL. Prints medians and the ratio InPlace/Recreate.
//   tpujob-bench admission --nodes 5000 --jobs 1000 [--runs 21] [--seed S]
//     needs no cluster: builds a random cluster in memory (several accelerators and topologies,
//     node pools of 4-64 nodes with 4 or 8 chips, about 70% of the chips used by pods, a few
//     nodes cordoned or unhealthy, a few reservations) and a queue of mixed gangs (a quarter of
//     the multi-host ones multislice, 2-8 slices), then times
//     the queue's BuildCapacity + PlanAdmissions per run: median, p90, min, max, and how many
//     jobs were admitted.
//   tpujob-bench cache-memory [--pods 20000] [--nodes 5000]
//     needs no cluster: decodes pods and nodes shaped as KWOK reports them into the operator's
//     stores (with their indexes) and prints the heap held per pod and per node.
//   tpujob-bench preemption --nodes 5000 --running 500 --jobs 1000 [--runs 21] [--seed S]
//     needs no cluster: 5,000 nodes in memory held by 500 running gangs (whole nodes, ~90% of
//     them), 1,000 queued gangs of mixed priority (a quarter of the multi-host ones multislice,
//     2-8 slices); times the queue's victim selection
//     (PlanPreemptions) per run beside PlanAdmissions on the same queue: median, p99.
//   tpujob-bench curves [--out FILE] [--seed S]
//     needs no cluster: the growth curves of the pure parts, each timing a median of several
//     runs: the admission plan at 1,000-65,000 nodes (4 TPU pods each) with 5,000 queued jobs
//     and at 65,000 nodes with 1,000-20,000 jobs; victim selection at those node counts (~90%
//     of the nodes held, 1,000 queued); one job's fault decision (Decide, a worker's node
//     TPUUnhealthy) and slice recovery's (ReplaceSlice) at 64-4,096 workers (slices x 64
//     hosts), and the queue planning of the replaced slice; the caches' heap per pod and per
//     node. Prints one line per point, each series' growth exponent (least-squares slope of
//     log y over log x) and the goals; with --out, writes every point as TSV (series, x_label,
//     y_label, x, y, goal).
//   tpujob-bench concurrent-gets --kubeconfig K [--count 50]
//     N GETs of one namespace at once from N threads, with a fresh connection pool and again
//     with the pool warm: each request's time, sorted (what opening connections costs).

// The subcommands are one table (kSubcommands): its name, its one-line help, the flags it takes
// and the scenario it runs (bench/scenarios.h); CLI11 builds the command line and --help from it.

#include <CLI/CLI.hpp>
#include <string>
#include <utility>
#include <vector>

#include "scenarios.h"

namespace tpujob::bench {
namespace {

// Every flag of every subcommand, with its default; a subcommand binds the ones it takes.
struct Flags {
  std::string kubeconfig, ns = "default";
  // create-pods, create-nodes
  int count = 1000, jobs = 100, nodes = 20, threads = 16, first = 0;
  // gang, plain-gang, jobset
  std::string name = "gang", topology = "16x16";
  int workers = 64, chips = 4, slices = 1;
  bool finish = false;
  // concurrent-gets
  int probe_count = 50;
  // fault-latency, reissue, in-place, slice-recovery
  std::string prefix = "fault-latency", condition = "TPUUnhealthy", metrics_url;
  int faults = 50, fault_workers = 2, fault_burst = 1, timeout_seconds = 30;
  bool fault_ceiling = false;
  int reissue_workers = 64, reissue_runs = 5;
  int in_place_workers = 64, in_place_runs = 3;
  int slice_count = 4, slice_hosts = 16, slice_runs = 3, hot_swap_runs = 0, slice_grace = 0;
  std::string slice_restart = "Recreate";
  int elastic_slices = 8, elastic_hosts = 2, pool_after = 60, window = 600, elastic_wait = 0;
  // admission, preemption, cache-memory
  int admission_nodes = 5000, admission_jobs = 1000, runs = 21;
  unsigned seed = 1;
  int preemption_running = 500;
  int memory_pods = 20000, memory_nodes = 5000;
  // curves
  std::string curves_out;
};

void Kubeconfig(CLI::App& cmd, Flags& f) {
  cmd.add_option("--kubeconfig", f.kubeconfig)->required();
}

// --kubeconfig and --namespace: a scenario against a cluster.
void Cluster(CLI::App& cmd, Flags& f) {
  Kubeconfig(cmd, f);
  cmd.add_option("--namespace", f.ns)->capture_default_str();
}

// Where, and the names of the nodes and jobs a fault scenario creates.
void FaultCluster(CLI::App& cmd, Flags& f) {
  Cluster(cmd, f);
  cmd.add_option("--prefix", f.prefix, "Names of the nodes and jobs it creates.")
      ->capture_default_str();
}

// The options of the gang-shaped commands: where, what name, and the shape of the gang.
void GangShape(CLI::App& cmd, Flags& f) {
  Cluster(cmd, f);
  cmd.add_option("--name", f.name)->capture_default_str();
  cmd.add_option("--workers", f.workers, "Workers (TPU hosts) per slice.")->capture_default_str();
  cmd.add_option("--topology", f.topology)->capture_default_str();
  cmd.add_option("--chips-per-worker", f.chips)->capture_default_str();
}

void MetricsUrl(CLI::App& cmd, Flags& f) {
  cmd.add_option("--metrics-url", f.metrics_url,
                 "The operator's plain-HTTP /metrics (--metrics-secure=false).")
      ->required();
}

// The in-memory benchmarks' options: the cluster's size, the queue's, the runs, the seed.
void InMemory(CLI::App& cmd, Flags& f) {
  cmd.add_option("--nodes", f.admission_nodes, "TPU nodes.")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd.add_option("--jobs", f.admission_jobs, "Queued jobs.")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  cmd.add_option("--runs", f.runs, "Timed runs.")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  cmd.add_option("--seed", f.seed, "Random seed of the cluster and queue.")->capture_default_str();
}

void CreatePodsFlags(CLI::App& cmd, Flags& f) {
  Cluster(cmd, f);
  cmd.add_option("--count", f.count)->capture_default_str();
  cmd.add_option("--jobs", f.jobs)->capture_default_str();
  cmd.add_option("--nodes", f.nodes)->capture_default_str();
  cmd.add_option("--threads", f.threads)->capture_default_str();
  cmd.add_option("--first", f.first, "Start at pod number F (the ones before exist already).")
      ->capture_default_str();
}

void GangFlags(CLI::App& cmd, Flags& f) {
  GangShape(cmd, f);
  cmd.add_option("--slices", f.slices, "Slices of --workers hosts each (spec.tpu.slices).")
      ->capture_default_str();
  cmd.add_flag("--finish", f.finish, "Drive the job to success and delete it.");
}

void PlainGangFlags(CLI::App& cmd, Flags& f) {
  GangShape(cmd, f);
  cmd.add_option("--slices", f.slices)->capture_default_str();
  cmd.add_option("--threads", f.threads)->capture_default_str();
}

void ConcurrentGetsFlags(CLI::App& cmd, Flags& f) {
  Kubeconfig(cmd, f);
  cmd.add_option("--count", f.probe_count)->check(CLI::Range(1, 1000))->capture_default_str();
}

void CreateNodesFlags(CLI::App& cmd, Flags& f) {
  Kubeconfig(cmd, f);
  cmd.add_option("--count", f.nodes)->capture_default_str();
  cmd.add_option("--first", f.first, "Start at node number F (the ones before exist already).")
      ->capture_default_str();
}

void FaultLatencyFlags(CLI::App& cmd, Flags& f) {
  FaultCluster(cmd, f);
  cmd.add_option("--faults", f.faults, "Faults injected, one per TPUJob, --burst at a time.")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  cmd.add_option("--burst", f.fault_burst, "Faults written at once (one job each).")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd.add_flag("--ceiling", f.fault_ceiling,
               "The raw ceiling: write a condition the operator ignores and cordon the "
               "node and delete the pods from here as each fault write returns.");
  cmd.add_option("--workers", f.fault_workers, "Workers (TPU hosts) of each TPUJob.")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd.add_option("--condition", f.condition,
                 "Node condition written True (the operator's "
                 "--hardware-condition).")
      ->capture_default_str();
  cmd.add_option("--timeout", f.timeout_seconds, "Seconds to wait for the action per fault.")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
}

void ReissueFlags(CLI::App& cmd, Flags& f) {
  FaultCluster(cmd, f);
  cmd.add_option("--workers", f.reissue_workers, "Workers (TPU hosts) of the TPUJob.")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd.add_option("--runs", f.reissue_runs, "Faults, one TPUJob each.")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
}

void InPlaceFlags(CLI::App& cmd, Flags& f) {
  FaultCluster(cmd, f);
  cmd.add_option("--workers", f.in_place_workers, "Workers (TPU hosts) of the TPUJob.")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd.add_option("--runs", f.in_place_runs, "Restarts of each kind, one TPUJob each.")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  MetricsUrl(cmd, f);
}

void SliceRecoveryFlags(CLI::App& cmd, Flags& f) {
  FaultCluster(cmd, f);
  cmd.add_option("--slices", f.slice_count, "Slices of the TPUJob (spec.tpu.slices).")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  cmd.add_option("--hosts", f.slice_hosts, "Hosts (workers) per slice.")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd.add_option("--runs", f.slice_runs, "Faults per recovery mode.")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd.add_option("--hot-swap-runs", f.hot_swap_runs,
                 "Faults with the spare pool held by a "
                 "lower-priority job.")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd.add_option("--grace", f.slice_grace, "The pods' grace period, seconds.")
      ->check(CLI::Range(0, 300))
      ->capture_default_str();
  cmd.add_option("--restart", f.slice_restart,
                 "spec.faultTolerance.restart of the recovery Slice jobs: InPlace keeps the kept "
                 "slices' pods and times until every program of the next generation runs (the "
                 "supervisors played here); recovery Job recreates every pod either way.")
      ->check(CLI::IsMember({"Recreate", "InPlace"}))
      ->capture_default_str();
  MetricsUrl(cmd, f);
}

void ElasticFlags(CLI::App& cmd, Flags& f) {
  FaultCluster(cmd, f);
  cmd.add_option("--slices", f.elastic_slices, "Slices of the TPUJob; minSlices is one fewer.")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  cmd.add_option("--hosts", f.elastic_hosts, "Hosts (workers) per slice.")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd.add_option("--pool-after", f.pool_after,
                 "Seconds from the fault until a node pool comes free.")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  cmd.add_option("--window", f.window,
                 "Seconds after the fault over which the useful work is reckoned.")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  cmd.add_option("--wait-seconds", f.elastic_wait,
                 "spec.faultTolerance.elastic.waitSeconds of the elastic job (0: the mechanism "
                 "alone; add the production value to its figure).")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  cmd.add_option("--grace", f.slice_grace, "The pods' grace period, seconds.")
      ->check(CLI::Range(0, 300))
      ->capture_default_str();
}

void PreemptionFlags(CLI::App& cmd, Flags& f) {
  InMemory(cmd, f);
  cmd.add_option("--running", f.preemption_running, "Running gangs (whole nodes).")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
}

void CacheMemoryFlags(CLI::App& cmd, Flags& f) {
  cmd.add_option("--pods", f.memory_pods)->check(CLI::Range(1, 10000000))->capture_default_str();
  cmd.add_option("--nodes", f.memory_nodes)->check(CLI::Range(1, 1000000))->capture_default_str();
}

void CurvesFlags(CLI::App& cmd, Flags& f) {
  cmd.add_option("--out", f.curves_out, "Write every point to this TSV file.");
  cmd.add_option("--seed", f.seed, "Random seed of the clusters and queues.")
      ->capture_default_str();
}

// One subcommand: its name, its line in --help, its flags and what it runs.
struct Subcommand {
  const char* name;
  const char* help;
  void (*flags)(CLI::App&, Flags&);
  int (*run)(Flags&);
};

// In the order --help lists them.
constexpr Subcommand kSubcommands[] = {
    {"create-pods", "Create worker-like pods bound to fake nodes.", CreatePodsFlags,
     [](Flags& f) {
       return CreatePods(f.kubeconfig, f.ns, f.count, f.first, f.jobs, f.nodes, f.threads);
     }},
    {"gang", "Time a TPUJob's gang creation (and its whole life).", GangFlags,
     [](Flags& f) {
       return Gang(f.kubeconfig, f.ns, f.name, f.workers, f.topology, f.chips, f.slices, f.finish);
     }},
    {"plain-gang", "Time a plain client creating the pods the operator would for `gang`.",
     PlainGangFlags,
     [](Flags& f) {
       return PlainGang(f.kubeconfig, f.ns, f.name, f.workers, f.topology, f.chips, f.slices,
                        f.threads);
     }},
    {"jobset", "Time the equivalent JobSet's pod creation (the JobSet controller must run).",
     GangShape,
     [](Flags& f) {
       return JobSetGang(f.kubeconfig, f.ns, f.name, f.workers, f.topology, f.chips);
     }},
    {"concurrent-gets", "Time N GETs at once from N threads, with a fresh and a warm pool.",
     ConcurrentGetsFlags, [](Flags& f) { return ConcurrentGets(f.kubeconfig, f.probe_count); }},
    {"create-nodes", "Create KWOK-managed fake TPU nodes.", CreateNodesFlags,
     [](Flags& f) { return CreateNodes(f.kubeconfig, f.nodes, f.first); }},
    {"fault-latency",
     "Time node condition written -> node cordoned and the job's pods deleted, per fault.",
     FaultLatencyFlags,
     [](Flags& f) {
       if (f.fault_ceiling) f.condition = "TPUJobBenchCeiling";  // a condition the operator ignores
       return FaultLatency(f.kubeconfig, f.ns, f.prefix, f.faults, f.fault_workers, f.fault_burst,
                           f.condition, f.timeout_seconds, f.fault_ceiling);
     }},
    {"reissue", "Time hardware fault -> the next attempt all Running (grace 0), per run.",
     ReissueFlags,
     [](Flags& f) {
       return Reissue(f.kubeconfig, f.ns, f.prefix, f.reissue_workers, f.reissue_runs, f.condition);
     }},
    {"in-place",
     "Time fault -> every program of the next generation running and count the operator's API "
     "writes, restart InPlace beside Recreate, interleaved.",
     InPlaceFlags,
     [](Flags& f) {
       return InPlaceBench(f.kubeconfig, f.ns, f.prefix, f.in_place_workers, f.in_place_runs,
                           f.metrics_url);
     }},
    {"slice-recovery",
     "Time fault -> the next attempt all Running and count the operator's API writes, recovery "
     "Slice beside recovery Job, interleaved; and hot swap.",
     SliceRecoveryFlags,
     [](Flags& f) {
       return SliceRecovery(f.kubeconfig, f.ns, f.prefix, f.slice_count, f.slice_hosts,
                            f.slice_runs, f.hot_swap_runs, f.slice_grace, f.metrics_url,
                            f.condition, f.slice_restart == "InPlace");
     }},
    {"elastic",
     "Time a fault on one of S slices with no spare pool, a pool free T s later: the job "
     "running on S - 1 (minSlices) beside waiting whole; the useful work of the first W s.",
     ElasticFlags,
     [](Flags& f) {
       return Elastic(f.kubeconfig, f.ns, f.prefix, f.elastic_slices, f.elastic_hosts, f.pool_after,
                      f.window, f.elastic_wait, f.slice_grace);
     }},
    {"admission", "Time the queue's admission plan on a random in-memory cluster (no cluster).",
     InMemory,
     [](Flags& f) { return AdmissionBench(f.admission_nodes, f.admission_jobs, f.runs, f.seed); }},
    {"preemption", "Time victim selection on a random in-memory cluster (no cluster).",
     PreemptionFlags,
     [](Flags& f) {
       return PreemptionBench(f.admission_nodes, f.preemption_running, f.admission_jobs, f.runs,
                              f.seed);
     }},
    {"cache-memory", "Heap the cache holds per pod and per node (in memory, no cluster).",
     CacheMemoryFlags, [](Flags& f) { return CacheMemory(f.memory_pods, f.memory_nodes); }},
    {"curves",
     "Growth curves of the admission and preemption plans, the fault decision, slice recovery "
     "and the caches' heap (in memory, no cluster).",
     CurvesFlags, [](Flags& f) { return Curves(f.curves_out, f.seed); }},
};

}  // namespace
}  // namespace tpujob::bench

int main(int argc, char** argv) {
  using tpujob::bench::Subcommand;
  CLI::App app{"Load generators for the tpujob-operator benchmarks.", "tpujob-bench"};
  app.require_subcommand(1);
  tpujob::bench::Flags flags;
  std::vector<std::pair<CLI::App*, const Subcommand*>> commands;
  for (const Subcommand& subcommand : tpujob::bench::kSubcommands) {
    CLI::App* cmd = app.add_subcommand(subcommand.name, subcommand.help);
    subcommand.flags(*cmd, flags);
    commands.emplace_back(cmd, &subcommand);
  }
  CLI11_PARSE(app, argc, argv);
  for (const auto& [cmd, subcommand] : commands) {
    if (cmd->parsed()) return subcommand->run(flags);
  }
  return 1;
}
