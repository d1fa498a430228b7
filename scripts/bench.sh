#!/usr/bin/env bash
# Benchmarks that print numbers (nothing here asserts a target):
#   - gang creation: time from creating a 64-worker TPUJob to all its pods created by the
#     operator (5 runs, median), and the API requests the operator made for each job's whole
#     life (create, Running, success, delete);
#   - multislice gang creation: 4 slices x 16 hosts (64 pods) and 4 x 64 (256 pods) beside one
#     slice of the same pod count, 3 runs each interleaved (median, and the ratio);
#   - gang creation beside the raw ceiling: 64 and 256 workers, the operator against B0 (a plain
#     client creating the same pods, 16 threads, no limit), against the equivalent JobSet, and
#     against itself with the old client-side limit, 5 runs each interleaved (medians, ratios);
#   - fault-to-action latency: from writing the node condition TPUUnhealthy=True to that node
#     cordoned and the job's pods deleted, seen through watches, over FAULT_COUNT (50) faults,
#     one 2-worker TPUJob each (p50, p90, p99, max; the target is p99 <= 200 ms);
#   - fault to replacement: a 64-worker TPUJob (grace 0), a hardware fault on worker 0's node,
#     until the next attempt's 64 pods are all created and all Running (5 faults; p50..max);
#   - fault attribution (scripts/bench-attribution.sh, ATTRIBUTION_RUNS runs, default 3): a
#     worker's exit 1 with a chip missing to the node condition and to the re-issue, with the node
#     agent's immediate round and without it (--watch-pods=false, its 60 s interval), and exit 1
#     on a healthy node to Failed with the default 30 s window beside a window of 0;
#   - slice recovery (scripts/bench-slice.sh, alone: `make bench-slice`): multislice TPUJobs of
#     4 x 16 and 8 x 32 hosts, a hardware fault on slice 1 until the next attempt is all Running,
#     and the operator's API writes, recovery Slice beside recovery Job (SLICE_RUNS, 3, each,
#     interleaved; medians and ratios); hot swap (HOT_SWAP_RUNS, 3): the replaced slice preempts
#     a lower-priority job's pool;
#   - elastic slices: a TPUJob of 8 slices x 2 hosts (ELASTIC_SLICES, ELASTIC_HOSTS) loses a
#     slice with no spare pool, a pool frees 60 s later: with minSlices 7 (waitSeconds 0, the
#     mechanism alone) the fault to running on 7, and to all 8 again, beside the job without
#     minSlices (fault to all 8 once the pool frees); the useful chip-seconds of the first 600 s
#     after the fault as a share of the no-fault figure, each way (goal >= 0.8 elastic);
#   - in-place restart (scripts/bench-inplace.sh, alone: `make bench-inplace`): a TPUJob of 64
#     and of 256 workers, a program exit until every program of the next generation runs, restart
#     InPlace beside Recreate (INPLACE_RUNS, 3, each, interleaved; medians, the ratio, and the
#     operator's API writes per restart);
#   - the largest job (LARGEST_RUNS, 3): a TPUJob of 64 slices x 64 hosts (4,096 workers) created
#     beside the raw ceiling B0 (medians, the ratio), then scripts/bench-slice.sh at 64 x 64 with
#     restart InPlace: slice recovery in place beside whole-job re-issue (time and API writes);
#   - caches beside client-go, at three sizes (SCALE_SIZES, nodes:pods, default 500:2000
#     2000:8000 5000:20000): the RSS of `tpujob-operator run` and of a client-go program with
#     shared informers for the same Pods and Nodes (bench/peers/informer, built from the Go module
#     proxy by bench/peers/build.sh), the bytes per cached object above each one's RSS with
#     nothing cached, the time to sync the caches, and the ratios; on the way, the API write
#     throughput of a plain client creating those pods (the machine's raw ceiling);
#   - admission planning (first, needs no cluster): the queue's BuildCapacity + PlanAdmissions
#     on an in-memory cluster of ADMISSION_NODES (5,000) nodes with ADMISSION_JOBS (1,000)
#     queued jobs, 21 runs (median, p90, min, max; the target is tens of ms).
#   - the caches' own cost (needs no cluster): the heap the operator's stores hold per pod and
#     per node, decoded from objects shaped as KWOK reports them (20,000 pods, 5,000 nodes);
#   - victim selection (needs no cluster): the queue's PlanPreemptions on an in-memory cluster
#     of ADMISSION_NODES nodes held by 500 running gangs with ADMISSION_JOBS queued jobs of
#     mixed priority, 101 runs (median, p99), beside PlanAdmissions on the same queue.
#   - curves of the pure parts (needs no cluster; about 30 s on 2 cores): the admission plan
#     at 1,000-65,000 nodes (4 TPU pods each) with 5,000 queued jobs and at 65,000 nodes with
#     1,000-20,000 jobs, victim selection at those node counts, one job's fault decision and
#     slice recovery's at 64-4,096 workers, the replaced slice's queue planning, the caches'
#     heap per pod and per node; one line per point, each series' growth exponent and goals,
#     every point also in $TPUJOB_BENCH_DIR.curves.tsv for plotting.
#   - fault-to-action at scale: the operator cluster-wide with everything above cached,
#     SCALE_FAULTS (50) faults one at a time, then BURST_FAULTS (100) in bursts of 50 at once,
#     beside the raw ceiling of the bursts (tpujob-bench cordons and deletes itself the moment
#     each fault write returns; the operator only runs the jobs), alternating, twice each
#     (SCALE_OPERATOR_ARGS: more flags for that operator; SCALE_BASELINE_OPERATOR: another
#     operator binary, with SCALE_BASELINE_ARGS, whose bursts join the rotation);
#   - the idle cost: API requests and CPU seconds of the operator over 60 s with IDLE_JOBS (1,000)
#     1-worker TPUJobs Running and nothing happening (each with a progress logPattern, so the
#     status.progress refresh's log tail reads are counted too), everything above still cached; and the
#     node status updates the operator received meanwhile (KWOK's heartbeats: BENCH_NODE_STATUS),
#     beside the CPU seconds of the client-go informer peer caching the same nodes and pods over
#     the same minute: the ratio is the operator's cost per event against client-go's.
# BENCH_SECTIONS, when set, runs only the sections it names (space-separated): admission,
# cache-memory, preemption, curves, gang, multislice, ceiling, faults, reissue, attribution,
# slice-recovery, elastic, supervisor, in-place, largest, caches, scale-faults, idle. The nodes and pods of SCALE_SIZES are created whenever caches,
# scale-faults or idle runs, since the last two are measured with them cached; e.g.
#   BENCH_SECTIONS="scale-faults idle" scripts/bench.sh
# The Go peers (a client-go informer program, the JobSet controller) are built by
# bench/peers/build.sh from the Go module proxy and cached like the control plane.
# Runs its own control plane in $TPUJOB_BENCH_DIR (default /tmp/tpujob-bench) and stops it
# (none when BENCH_SECTIONS names only admission, cache-memory, preemption and curves).
# What it prints is kept whole in $TPUJOB_BENCH_DIR.output.txt; after a whole run, those lines less
# each run's detail replace the results block of docs/benchmarks.md (between its bench-results
# markers; the history is git's). BENCH_WRITE_RESULTS=0 leaves the file alone, =1 writes it after
# a run of chosen BENCH_SECTIONS too;
#   scripts/bench.sh --write-results OUTPUT
# writes a saved run's output into the block and does nothing else.
# At the end, scripts/bench-plot.py draws the run's ratios against their goals and the in-memory
# growth curves ($TPUJOB_BENCH_DIR.curves.tsv) into BUILD/bench-plots/ (a plot that fails only
# warns); writing the results block copies them to docs/images/bench/ and shows them under it
# (--write-results draws them from the saved output and the curves file beside it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
results_doc=$root/docs/benchmarks.md
results_images=$root/docs/images/bench

plot_results() {  # plot_results OUTPUT DIR: the PNGs of OUTPUT (and its curves file) into DIR
  rm -f "$2"/*.png
  if python3 "$root/scripts/bench-plot.py" "$1" --out-dir "$2"; then
    echo "plots of this run: $2"
  else
    echo "warning: no plots (scripts/bench-plot.py failed; python3-matplotlib: scripts/install-deps.sh)" >&2
  fi
}

# write_results OUTPUT PLOTS: OUTPUT's lines, less each run's detail, into the block, and the PNGs
# of PLOTS (plot_results) into docs/images/bench/, shown under the block (the last run's only).
write_results() {
  mkdir -p "$results_images"
  rm -f "$results_images"/*.png
  cp "$2"/*.png "$results_images"/ 2>/dev/null || true
  python3 - "$1" "$results_doc" "$results_images" <<'PY'
import os
import re
import sys

output, doc, images = sys.argv[1], sys.argv[2], sys.argv[3]
begin, end = "<!-- bench-results:begin -->", "<!-- bench-results:end -->"
# One line per run or per sample, where the section also prints their median or percentiles.
detail = re.compile(
    r"^\S+: all \d+ pods .*created \d+ ms after"  # one gang creation (gang, multislice, ceiling)
    r"|: Running -> Succeeded -> deleted"  # that gang's end
    r"|^  API requests for the job's whole life"  # its API requests, run by run
    r"|^  runs \(ms\):|^  samples \(ms"  # the runs behind a median, the samples behind percentiles
    r"|: fault on \S+ -> attempt 2 all"  # one re-issue (reissue)
    r"|^ {1,2}\S+ +\d+: fault -> every program"  # one in-place or recreate restart (in-place)
    r"|^ {1,2}\S+ +old pods gone"  # one slice recovery, job re-issue or hot swap (slice-recovery)
)
with open(output, encoding="utf-8", errors="replace") as f:
    lines = []
    for line in f.read().splitlines():
        line = line.rstrip().replace("```", "'''")
        if detail.search(line) or (not line and (not lines or not lines[-1])):
            continue
        lines.append(line)
while lines and not lines[-1]:
    lines.pop()
if not lines:
    sys.exit(f"{output}: nothing to write")
with open(doc, encoding="utf-8") as f:
    text = f.read()
start, stop = text.find(begin), text.find(end)
if start < 0 or stop < start:
    sys.exit(f"{doc}: no {begin} ... {end} block")
block = begin + "\n\n```\n" + "\n".join(lines) + "\n```\n\n"
# The plots of the same run (how to read them: above the block).
shown = {"ratios.png": "The ratios against their goals", "curves.png": "Growth with size, in memory (log-log)"}
for name, alt in shown.items():
    if os.path.exists(os.path.join(images, name)):
        block += f"![{alt}]({os.path.relpath(os.path.join(images, name), os.path.dirname(doc))})\n\n"
with open(doc, "w", encoding="utf-8") as f:
    f.write(text[:start] + block + text[stop:])
print(f"results written into {doc} ({len(lines)} lines)")
PY
}

if [[ ${1:-} == --write-results ]]; then
  [[ -f ${2:-} ]] || { echo "usage: $0 --write-results OUTPUT (a saved run's output)" >&2; exit 2; }
  plots=$(mktemp -d)
  plot_results "$2" "$plots"
  write_results "$2" "$plots"
  rm -rf "$plots"
  exit
fi
build=${1:-build}
dir=${TPUJOB_BENCH_DIR:-/tmp/tpujob-bench}
mkdir -p "$(dirname "$dir")"
output=$dir.output.txt  # beside the cluster's directory, which `up` starts afresh
exec 3>&1 > >(tee "$output")
tee_pid=$!
echo "make bench of $(date -u '+%Y-%m-%d %H:%M UTC') (commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
  git -C "$root" diff --quiet HEAD 2>/dev/null || echo ', with changes')), $(nproc) cores ($(
  sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), load average $(cut -d' ' -f1-3 /proc/loadavg)${BENCH_SECTIONS:+, BENCH_SECTIONS=$BENCH_SECTIONS}"
scale_sizes=${SCALE_SIZES:-500:2000 2000:8000 5000:20000}
idle_jobs=${IDLE_JOBS:-1000}
scale_faults=${SCALE_FAULTS:-50}
burst_faults=${BURST_FAULTS:-100}
faults=${FAULT_COUNT:-50}
admission_nodes=${ADMISSION_NODES:-5000}
admission_jobs=${ADMISSION_JOBS:-1000}
sections=${BENCH_SECTIONS:-}
operator="$root/$build/tpujob-operator"
section() { [[ -z $sections || " $sections " == *" $1 "* ]]; }  # section NAME: whether it runs
# Whether BENCH_SECTIONS names only sections that need no cluster.
in_memory_only() {
  local s
  [[ -n $sections ]] || return 1
  for s in $sections; do
    case $s in admission | cache-memory | preemption | curves) ;; *) return 1 ;; esac
  done
}
# The whole run printed: its lines into docs/benchmarks.md (see the top).
finish() {
  exec >&3 3>&-
  wait "$tee_pid" 2>/dev/null || true
  plot_results "$output" "$root/$build/bench-plots"
  if [[ ${BENCH_WRITE_RESULTS:-} == 1 || ( -z $sections && ${BENCH_WRITE_RESULTS:-} != 0 ) ]]; then
    write_results "$output" "$root/$build/bench-plots"
  else
    echo "docs/benchmarks.md left alone (BENCH_SECTIONS or BENCH_WRITE_RESULTS=0; BENCH_WRITE_RESULTS=1 writes it); the output: $output"
  fi
}
bench="$root/$build/tpujob-bench"

if section admission; then
echo "== admission planning: $admission_nodes nodes, $admission_jobs queued jobs (in memory, no cluster)"
"$bench" admission --nodes "$admission_nodes" --jobs "$admission_jobs" --runs 21
echo
fi

if section cache-memory; then
echo "== the caches' own cost: heap per cached pod and node (in memory, no cluster)"
"$bench" cache-memory --pods 20000 --nodes 5000
echo
fi

if section preemption; then
echo "== victim selection (gang preemption): $admission_nodes nodes, 500 running, $admission_jobs queued jobs (in memory)"
"$bench" preemption --nodes "$admission_nodes" --running 500 --jobs "$admission_jobs" --runs 101
echo
fi

if section curves; then
echo "== curves of the pure parts (in memory, no cluster): growth exponents and goals; points in $dir.curves.tsv"
"$bench" curves --out "$dir.curves.tsv"
echo
fi

# Nothing else chosen: no control plane to build or start.
if in_memory_only; then
  finish
  exit 0
fi

# A Go new enough to build the control plane and the peers when they are not cached yet
# (scripts/install-go.sh).
PATH="$(bash "$root/scripts/install-go.sh"):$PATH"
bin=$("$root/e2e/tools/build.sh")
if section caches || section ceiling || section idle; then peers=$("$root/bench/peers/build.sh"); fi

cleanup() {
  [[ -n ${op_pid:-} ]] && kill -9 "$op_pid" 2>/dev/null || true
  [[ -n ${limited_pid:-} ]] && kill -9 "$limited_pid" 2>/dev/null || true
  [[ -n ${peer_pid:-} ]] && kill -9 "$peer_pid" 2>/dev/null || true
  [[ -n ${jobset_pid:-} ]] && kill -9 "$jobset_pid" 2>/dev/null || true
  "$root/e2e/cluster" down --dir "$dir" >/dev/null 2>&1 || true
  rm -f "$dir.kwok-node-stages.yaml"
}
trap cleanup EXIT

# Thousands of KWOK nodes: KWOK renews each node's Lease every quarter of its duration (10 s by
# default, 500 writes/s at 5,000 nodes, more than this machine's API server serves); a 10-minute
# lease, with the node controller's grace period above it, keeps the nodes Ready at 33 writes/s;
# and KWOK may take minutes to report a new node at that scale, which the node controller would
# otherwise mark Unknown after 60 s.
export TPUJOB_E2E_KWOK_ARGS="--node-lease-duration-seconds=600 ${TPUJOB_E2E_KWOK_ARGS:-}"
# How often each node's status is rewritten when nothing changed (BENCH_NODE_STATUS):
#   kwok     KWOK v0.7.0's own stages: every 20-45 s per node, ~160 writes/s at 5,250 nodes. KWOK
#            means to use its lease-aware heartbeat (every 10 minutes) when leases are on, but
#            passes "lease duration == 0" where it means "!= 0" (pkg/kwok/cmd/root.go), so every
#            node reports as a kubelet without leases did before Kubernetes 1.17.
#   kubelet  what kubelets with node leases do: an unchanged status every 5 minutes
#            (nodeStatusReportFrequency), 17 writes/s at 5,250 nodes. KWOK's own node stages,
#            taken from its module, with the heartbeat's delay drawn from 1 s to 10 minutes:
#            5 minutes on average, and spread from the start, as a cluster's kubelets are,
#            instead of every node of a batch created together reporting in the same minute.
node_status=${BENCH_NODE_STATUS:-kwok}
case $node_status in
  kwok) ;;
  kubelet)
    kwok_src=$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kwok@$(
      sed -n 's/^KWOK_VERSION=//p' "$root/e2e/tools/build.sh")" |
      sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    stages=$kwok_src/kustomize/stage/node
    {
      cat "$stages/fast/node-initialize.yaml"
      echo "---"
      sed -e 's/durationMilliseconds: 600000/durationMilliseconds: 1000/' \
        -e 's/jitterDurationMilliseconds: 610000/jitterDurationMilliseconds: 600000/' \
        "$stages/heartbeat-with-lease/node-heartbeat-with-lease.yaml"
    } >"$dir.kwok-node-stages.yaml"  # beside the cluster's directory, which `up` starts afresh
    grep -q 'jitterDurationMilliseconds: 600000' "$dir.kwok-node-stages.yaml" ||
      { echo "KWOK's node stages not found in $stages" >&2; exit 1; }
    TPUJOB_E2E_KWOK_ARGS+=" --config=$dir.kwok-node-stages.yaml"
    ;;
  *) echo "BENCH_NODE_STATUS is kwok or kubelet, not '$node_status'" >&2; exit 2 ;;
esac
echo "node status reports: $node_status (BENCH_NODE_STATUS)"
# The JobSet peer's pods are created by kube-controller-manager's Job controller, which its
# default client limit (20 requests/s, burst 30) would hold to ~20 pods/s: lifted, so that JobSet
# is measured at its best.
export TPUJOB_E2E_KCM_ARGS="--node-monitor-grace-period=700s --node-startup-grace-period=700s --kube-api-qps=1000 --kube-api-burst=1000 ${TPUJOB_E2E_KCM_ARGS:-}"
kubeconfig=$("$root/e2e/cluster" up --dir "$dir")
kubectl() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
kubectl apply -f "$root/crds/" >/dev/null
# Accepted names first: until then status.conditions is null, which `wait --for=condition` fails on.
kubectl wait --for=jsonpath='{.status.acceptedNames.kind}'=TPUJob crd/tpujobs.tpujob.dev --timeout=30s >/dev/null
kubectl wait --for=condition=Established crd/tpujobs.tpujob.dev --timeout=30s >/dev/null
kubectl create namespace bench >/dev/null

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_operator() {  # start_operator LOG: starts it and waits until /readyz answers 200
  "$operator" run --kubeconfig "$kubeconfig" --health-address "127.0.0.1:$port" >"$1" 2>&1 &
  op_pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && return 0
    sleep 0.1
  done
  echo "operator not ready; log:" >&2; tail -20 "$1" >&2; exit 1
}
stop_operator() { kill -TERM "$op_pid"; wait "$op_pid" || true; op_pid=; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# run_operator LOG ARGS...: starts another operator (health and metrics on free loopback ports),
# waits until /readyz answers 200 and sets started_pid.
run_operator() {
  local log=$1 health
  shift
  health=$(free_port)
  "$operator" run --kubeconfig "$kubeconfig" --health-address "127.0.0.1:$health" \
    --metrics-address "127.0.0.1:$(free_port)" "$@" >"$log" 2>&1 &
  started_pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$health/readyz" >/dev/null && return 0
    kill -0 "$started_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "operator not ready; log:" >&2; tail -20 "$log" >&2; exit 1
}

"$bench" create-nodes --kubeconfig "$kubeconfig" --count 20 >/dev/null

# tpu_nodes NAME_PREFIX COUNT TOPOLOGY POOL [LABELS]: the YAML of COUNT KWOK nodes of 16 chips
# (four 4-chip workers each) of one tpu-v5-lite-podslice pool; LABELS (", key: value") adds labels.
tpu_nodes() {
  for i in $(seq 0 $(($2 - 1))); do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $1-$i
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice, cloud.google.com/gke-tpu-topology: $3, cloud.google.com/gke-nodepool: $4${5:-}}
status:
  capacity: &r {cpu: "64", memory: 256Gi, pods: "110", google.com/tpu: "16"}
  allocatable: *r
EOF
  done
}

if section gang; then
echo "== gang creation: a 64-worker TPUJob (16x16 slice, 4 chips per worker), 5 runs"
for i in $(seq 0 15); do
  cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: gang-host-$i
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice, cloud.google.com/gke-tpu-topology: 16x16}
status:
  capacity: &r {cpu: "64", memory: 256Gi, pods: "110", google.com/tpu: "16"}
  allocatable: *r
EOF
done | kubectl apply -f - >/dev/null
kubectl create namespace gang >/dev/null
times=()
for run in 1 2 3 4 5; do
  "$operator" run --kubeconfig "$kubeconfig" --namespace gang --health-address 127.0.0.1:0 \
    >"$dir/operator-gang-$run.log" 2>&1 &
  op_pid=$!
  out=$("$bench" gang --kubeconfig "$kubeconfig" --namespace gang --name "gang-$run" \
    --workers 64 --topology 16x16 --finish)
  echo "$out"
  times+=("$(sed -nE 's/.*created ([0-9]+) ms.*/\1/p' <<<"$out")")
  stop_operator
  # The operator's own count, less its caches' LISTs and WATCHes (made whatever the job does).
  grep -o 'msg="api requests".*' "$dir/operator-gang-$run.log" |
    awk '{ for (i = 1; i <= NF; i++) {
             split($i, t, "=")
             if (t[1] == "total") n += t[2]
             else if (t[1] ~ /^(LIST|WATCH)_(pods|nodes|tpujobs)$/) n -= t[2]
           } }
         { print "  API requests for the job'"'"'s whole life: " n "   (" $0 ")" }' | cut -c1-240
done
median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 3p)
echo "gang creation, 64 workers: median ${median} ms over 5 runs (${times[*]} ms)"
echo
fi

if section multislice; then
echo "== multislice gang creation: 4 slices x 16 hosts and 4 x 64 beside one slice of 64 and of 256, 3 runs each, interleaved"
# KWOK nodes of 16 chips (four 4-chip workers each): four pools of 4 (8x8 slices of 16 hosts),
# four pools of 16 (16x16 slices of 64 hosts), and 64 nodes for one 32x32 slice of 256 hosts.
{
  for p in a b c d; do tpu_nodes "ms8-$p" 4 8x8 "ms8-$p"; tpu_nodes "ms16-$p" 16 16x16 "ms16-$p"; done
  tpu_nodes big-host 64 32x32 big-pool
} | kubectl apply -f - >/dev/null
kubectl wait --for=condition=Ready node -l cloud.google.com/gke-tpu-topology=32x32 --timeout=120s >/dev/null
kubectl create namespace slices >/dev/null
"$operator" run --kubeconfig "$kubeconfig" --namespace slices --health-address 127.0.0.1:0 \
  >"$dir/operator-slices.log" 2>&1 &
op_pid=$!
declare -A slice_times=()
for run in 1 2 3; do
  for shape in "1 64 16x16" "4 16 8x8" "1 256 32x32" "4 64 16x16"; do
    read -r n_slices hosts topology <<<"$shape"
    out=$("$bench" gang --kubeconfig "$kubeconfig" --namespace slices \
      --name "s$n_slices-h$hosts-$run" --workers "$hosts" --slices "$n_slices" \
      --topology "$topology" --finish)
    echo "$out" | head -1
    slice_times["$n_slices x $hosts"]+="$(sed -nE 's/.*created ([0-9]+) ms.*/\1/p' <<<"$out") "
  done
done
stop_operator
slice_median() { tr ' ' '\n' <<<"${slice_times[$1]}" | grep . | sort -n | sed -n 2p; }
for pair in "4 x 16|1 x 64|64" "4 x 64|1 x 256|256"; do
  IFS='|' read -r multi single count <<<"$pair"
  m=$(slice_median "$multi") s=$(slice_median "$single")
  echo "multislice creation, $count pods: $multi ${m} ms vs $single ${s} ms (median of 3):" \
    "ratio $(awk -v m="$m" -v s="$s" 'BEGIN { printf "%.2f", m / s }')"
done
echo
fi

if section ceiling; then
echo "== gang creation beside the raw ceiling: 64 and 256 workers, 5 runs each, interleaved"
# B0 is a plain client creating the very pods the operator builds for the same TPUJob (owned by a
# TPUJob in a namespace no operator watches), 16 threads, no client-side limit, connections
# warm; the operator runs with its defaults, and once more with the client-side limit it had
# before (--kube-api-qps 50 --kube-api-burst 100) for the before/after. Same nodes as above.
kubectl create namespace plain >/dev/null
kubectl create namespace limited >/dev/null
kubectl create namespace jobsets >/dev/null
# The JobSet controller without its webhooks (every field they would default is set in the
# JobSet): no cert management, no leader election; the webhook server still starts, on loopback
# with a self-signed certificate, and nothing calls it.
mkdir -p "$dir/jobset/certs"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 \
  -keyout "$dir/jobset/certs/tls.key" -out "$dir/jobset/certs/tls.crt" 2>/dev/null
webhook_port=$(free_port)
cat >"$dir/jobset/config.yaml" <<EOF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
webhook: {host: 127.0.0.1, port: $webhook_port, certDir: $dir/jobset/certs}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "0"}
clientConnection: {qps: 500, burst: 500}
EOF
kubectl apply --server-side -f "$peers/jobset-crd.yaml" >/dev/null 2>&1 || true
kubectl wait --for=condition=Established crd/jobsets.jobset.x-k8s.io --timeout=60s >/dev/null
"$peers/jobset-controller" --kubeconfig "$kubeconfig" --config "$dir/jobset/config.yaml" \
  --zap-devel=false >"$dir/jobset-controller.log" 2>&1 &
jobset_pid=$!
run_operator "$dir/operator-ceiling.log" --namespace slices
op_pid=$started_pid
run_operator "$dir/operator-limited.log" --namespace limited --kube-api-qps 50 --kube-api-burst 100
limited_pid=$started_pid
declare -A ceiling_times=()
created_ms() { sed -nE 's/.*created ([0-9]+) ms.*/\1/p' <<<"$1"; }
for run in 1 2 3 4 5; do
  for shape in "64 16x16" "256 32x32"; do
    read -r hosts topology <<<"$shape"
    out=$("$bench" plain-gang --kubeconfig "$kubeconfig" --namespace plain --name "b0-$hosts-$run" \
      --workers "$hosts" --topology "$topology")
    ceiling_times["b0 $hosts"]+="$(created_ms "$out") "
    out=$("$bench" gang --kubeconfig "$kubeconfig" --namespace slices --name "op-$hosts-$run" \
      --workers "$hosts" --topology "$topology" --finish)
    ceiling_times["op $hosts"]+="$(created_ms "$out") "
    out=$("$bench" gang --kubeconfig "$kubeconfig" --namespace limited --name "lim-$hosts-$run" \
      --workers "$hosts" --topology "$topology" --finish)
    ceiling_times["lim $hosts"]+="$(created_ms "$out") "
    out=$("$bench" jobset --kubeconfig "$kubeconfig" --namespace jobsets --name "js-$hosts-$run" \
      --workers "$hosts" --topology "$topology")
    ceiling_times["js $hosts"]+="$(created_ms "$out") "
  done
done
stop_operator
kill -TERM "$limited_pid"; wait "$limited_pid" || true; limited_pid=
kill -TERM "$jobset_pid"; wait "$jobset_pid" || true; jobset_pid=
ceiling_median() { tr ' ' '\n' <<<"${ceiling_times[$1]}" | grep . | sort -n | sed -n 3p; }
printf '%-8s %-10s %-10s %-10s %-12s %s\n' workers "B0" "TPUJob" "JobSet" "TPUJob old" \
  "ratios B0/TPUJob, B0/JobSet, B0/TPUJob old (1.00 = the raw ceiling)"
for hosts in 64 256; do
  b=$(ceiling_median "b0 $hosts") o=$(ceiling_median "op $hosts") j=$(ceiling_median "js $hosts")
  l=$(ceiling_median "lim $hosts")
  printf '%-8s %-10s %-10s %-10s %-12s %s\n' "$hosts" "$b ms" "$o ms" "$j ms" "$l ms" \
    "$(awk -v b="$b" -v o="$o" -v j="$j" -v l="$l" 'BEGIN { printf "%.2f, %.2f, %.2f", b / o, b / j, b / l }')"
  echo "  runs (ms): B0 ${ceiling_times["b0 $hosts"]}| TPUJob ${ceiling_times["op $hosts"]}| JobSet ${ceiling_times["js $hosts"]}| old ${ceiling_times["lim $hosts"]}"
done
echo "  (B0: a plain client, 16 threads, no limit, creating the operator's very pods; TPUJob old:"
echo "  the operator with its former client-side limit, --kube-api-qps 50 --kube-api-burst 100;"
echo "  JobSet: the JobSet controller (bench/peers/build.sh), pods by kube-controller-manager's Job"
echo "  controller with its client limit lifted to 1000 requests/s)"
echo
fi

if section faults; then
echo "== fault-to-action latency: $faults faults, one 2-worker TPUJob each"
# Every fault cordons a node of its own: lift the operator's cordon cap, rate limit and breaker.
kubectl create namespace faults >/dev/null
"$operator" run --kubeconfig "$kubeconfig" --namespace faults --health-address 127.0.0.1:0 \
  --max-cordoned-nodes 1000 --max-cordoned-fraction 1 --cordon-rate 0 --cordon-breaker-nodes 0 \
  >"$dir/operator-faults.log" 2>&1 &
op_pid=$!
"$bench" fault-latency --kubeconfig "$kubeconfig" --namespace faults --faults "$faults" --workers 2
stop_operator
echo
fi

if section reissue; then
echo "== fault to replacement: a 64-worker TPUJob (termination grace 0), 5 faults, one at a time"
kubectl create namespace reissue >/dev/null
"$operator" run --kubeconfig "$kubeconfig" --namespace reissue --health-address 127.0.0.1:0 \
  --max-cordoned-nodes 1000 --max-cordoned-fraction 1 --cordon-rate 0 --cordon-breaker-nodes 0 \
  >"$dir/operator-reissue.log" 2>&1 &
op_pid=$!
"$bench" reissue --kubeconfig "$kubeconfig" --namespace reissue --prefix reissue --workers 64 --runs 5 ||
  echo "  (failed: see the error above)"
stop_operator
echo
fi

if section attribution; then
echo "== fault attribution: a worker's exit to the job's decision, with the node agent's immediate round"
bash "$root/scripts/bench-attribution.sh" "$operator" "$bin/kubectl" "$kubeconfig" "$dir" \
  "${ATTRIBUTION_RUNS:-3}" || echo "  (failed: see the error above)"
echo
fi

if section slice-recovery; then
echo "== slice recovery beside whole-job re-issue, and hot swap"
TPUJOB_BENCH_DIR="$dir" bash "$root/scripts/bench-slice.sh" "$build" "$kubeconfig" ||
  echo "  (failed: see the error above)"
echo
fi

if section elastic; then
echo "== elastic slices: 8 slices lose one with no spare pool, a pool frees 60 s later"
kubectl create namespace elastic >/dev/null
run_operator "$dir/operator-elastic.log" --namespace elastic --max-cordoned-nodes 1000 \
  --max-cordoned-fraction 1 --cordon-rate 0 --cordon-breaker-nodes 0
op_pid=$started_pid
"$bench" elastic --kubeconfig "$kubeconfig" --namespace elastic --prefix elastic \
  --slices "${ELASTIC_SLICES:-8}" --hosts "${ELASTIC_HOSTS:-2}" --pool-after 60 --window 600 ||
  echo "  (failed: see the error above)"
stop_operator
echo
fi

if section supervisor; then
echo "== tpujob-supervise with stall detection: output passthrough against cat, CPU at 10 MB/s, stall to stop"
bash "$root/scripts/bench-supervisor.sh" "$build" || echo "  (failed: see the error above)"
echo
fi

if section in-place; then
echo "== in-place restart beside recreating every pod"
TPUJOB_BENCH_DIR="$dir" bash "$root/scripts/bench-inplace.sh" "$build" "$kubeconfig" ||
  echo "  (failed: see the error above)"
echo
fi

if section largest; then
largest_runs=${LARGEST_RUNS:-3}
echo "== the largest job: 64 slices x 64 hosts (4,096 workers), creation beside the raw ceiling and slice recovery in place beside whole-job re-issue, $largest_runs runs each"
# Creation: 64 node pools of 16 KWOK nodes (16 chips: four 4-chip workers each, tpu-v5-lite 16x16
# slices of 64 hosts), B0 (a plain client creating the very pods the operator builds, 16 threads,
# no limit) beside the operator, interleaved; the nodes go afterwards. Then scripts/bench-slice.sh
# at 64 x 64 with restart InPlace: 65 pools of 64 nodes (4,160), a fault on slice 1.
# The API server (one process on the same 2 cores as everything else) is the limit: B0 is what
# it accepts.
for p in $(seq 0 63); do tpu_nodes "lg-$p" 16 16x16 "lg-$p" ", tpujob.dev/bench: largest"; done | kubectl create -f - >/dev/null
kubectl wait --for=condition=Ready node -l tpujob.dev/bench=largest --timeout=300s >/dev/null
kubectl create namespace largest >/dev/null
kubectl create namespace largest-plain >/dev/null
# Between runs the 4,096 pods go in one deletecollection with grace 0 (the operator stopped and
# the TPUJob deleted first, its pods orphaned): deleting them one by one through the garbage
# collector (20 requests/s) would take minutes per run.
clear_namespace() {  # clear_namespace NS: no pod left in NS
  kubectl delete tpujobs --all -n "$1" --cascade=orphan --wait=true >/dev/null 2>&1 || true
  # A deletecollection of thousands of pods may end at the API server's request timeout with
  # some deleted: it is sent again until none is left.
  for _ in $(seq 1 60); do
    kubectl delete --raw "/api/v1/namespaces/$1/pods?gracePeriodSeconds=0" >/dev/null 2>&1 || true
    [[ -z $(kubectl get pods -n "$1" -o name 2>/dev/null | head -1) ]] && return 0
    sleep 5
  done
  echo "  (pods of $1 still there after 60 deletecollections)"
}
declare -A largest_times=()
for run in $(seq 1 "$largest_runs"); do
  out=$("$bench" plain-gang --kubeconfig "$kubeconfig" --namespace largest-plain --name "lb0-$run" \
    --workers 64 --slices 64 --topology 16x16) || echo "  (B0 run $run: not cleaned up in time)"
  echo "$out" | head -1
  largest_times[b0]+="$(sed -nE 's/.*created ([0-9]+) ms.*/\1/p' <<<"$out") "
  clear_namespace largest-plain
  run_operator "$dir/operator-largest-$run.log" --namespace largest
  op_pid=$started_pid
  out=$("$bench" gang --kubeconfig "$kubeconfig" --namespace largest --name "lop-$run" \
    --workers 64 --slices 64 --topology 16x16) || echo "  (TPUJob run $run failed)"
  echo "$out" | head -1
  largest_times[op]+="$(sed -nE 's/.*created ([0-9]+) ms.*/\1/p' <<<"$out") "
  stop_operator
  clear_namespace largest
done
largest_median() {
  tr ' ' '\n' <<<"${largest_times[$1]:-}" | grep . | sort -n |
    awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'
}
b0=$(largest_median b0) op=$(largest_median op)
if [[ -n $b0 && -n $op ]]; then
  echo "largest job creation, 64 x 64 = 4096 pods, medians of $largest_runs: B0 $b0 ms, TPUJob $op ms:" \
    "ratio B0/TPUJob $(awk -v b="$b0" -v o="$op" 'BEGIN { printf "%.2f", b / o }') (goal >= 0.9)"
fi
kubectl delete namespace largest largest-plain --wait=false >/dev/null 2>&1 || true
kubectl delete node -l tpujob.dev/bench=largest --wait=false >/dev/null 2>&1 || true
SLICE_SIZES=64x64 SLICE_RUNS=$largest_runs HOT_SWAP_RUNS=0 SLICE_RESTART=InPlace \
  TPUJOB_BENCH_DIR="$dir" bash "$root/scripts/bench-slice.sh" "$build" "$kubeconfig" ||
  echo "  (failed: see the error above)"
echo
fi

start_peer() {  # start_peer LOG: the client-go informer peer, waits until its caches synced
  "$peers/informer-peer" --kubeconfig "$kubeconfig" >"$1" 2>&1 &
  peer_pid=$!
  for _ in $(seq 1 3000); do
    grep -q '^synced:' "$1" && return 0
    sleep 0.2
  done
  echo "informer-peer did not sync; log:" >&2; tail -20 "$1" >&2; exit 1
}
stop_peer() { kill -TERM "$peer_pid"; wait "$peer_pid" || true; peer_pid=; }
field() { sed -nE "s/.*[ ]$2=([0-9]+).*/\1/p" <<<"$1" | head -1; }

if section caches || section scale-faults || section idle; then
if section caches; then
start_operator "$dir/operator-empty.log"
rss_empty=$(rss_kib "$op_pid")
stop_operator
start_peer "$dir/peer-empty.log"
peer_empty=$(rss_kib "$peer_pid")
stop_peer

echo "== caches beside client-go: RSS and sync time with nodes:pods at $scale_sizes"
else
echo "== the nodes and pods of $scale_sizes (nodes:pods), cached by the sections below"
fi
rows=()
have_nodes=0 have_pods=0
for size in $scale_sizes; do
  IFS=: read -r want_nodes want_pods <<<"$size"
  "$bench" create-nodes --kubeconfig "$kubeconfig" --count "$want_nodes" --first "$have_nodes" >/dev/null
  echo "creating pods $have_pods..$((want_pods - 1)) bound to $want_nodes KWOK nodes with a plain client (16 threads, no client-side limit):"
  "$bench" create-pods --kubeconfig "$kubeconfig" --namespace bench --count "$want_pods" \
    --first "$have_pods" --jobs 100 --nodes "$want_nodes"
  have_nodes=$want_nodes have_pods=$want_pods
  waiting=$want_pods
  for _ in $(seq 1 300); do
    waiting=$(kubectl get pods -n bench --field-selector=status.phase!=Running -o name 2>/dev/null | wc -l)
    ((waiting == 0)) && break
    sleep 3
  done
  echo "pods not Running yet (KWOK): $waiting"
  section caches || continue
  start_operator "$dir/operator-$want_nodes.log"
  rss_op=$(rss_kib "$op_pid")
  synced=$(grep -o 'caches synced.*' "$dir/operator-$want_nodes.log" | head -1)
  stop_operator
  start_peer "$dir/peer-$want_nodes.log"
  rss_peer=$(rss_kib "$peer_pid")
  peer_synced=$(grep '^synced:' "$dir/peer-$want_nodes.log")
  stop_peer
  objects=$(($(field "$synced" pods) + $(field "$synced" nodes)))
  rows+=("$(field "$synced" nodes) $(field "$synced" pods) $rss_op $(field "$synced" duration_ms) $rss_peer $(field "$peer_synced" ms) $(field "$peer_synced" heap_inuse_kib) $objects $(field "$synced" heap_inuse_kib)")
done
if section caches; then
echo
echo "== caches beside client-go (RSS with nothing cached: operator $rss_empty KiB, client-go $peer_empty KiB)"
printf '%-6s %-6s | %-11s %-9s %-9s %-8s | %-11s %-9s %-8s %-9s | %s\n' nodes pods "op RSS KiB" "op B/obj" "op heap" "op sync" \
  "go RSS KiB" "go B/obj" "go sync" "go heap" "ratio RSS op/go, sync op/go"
for row in "${rows[@]}"; do
  read -r n p ro so rg sg hg objects ho <<<"$row"
  awk -v n="$n" -v p="$p" -v ro="$ro" -v so="$so" -v rg="$rg" -v sg="$sg" -v hg="$hg" -v o="$objects" \
    -v ho="$ho" -v eo="$rss_empty" -v eg="$peer_empty" 'BEGIN {
      printf "%-6d %-6d | %-11d %-9.0f %-9s %-8s | %-11d %-9.0f %-8s %-9s | %.2f, %.2f\n",
        n, p, ro, (ro - eo) * 1024 / o, ho " KiB", so " ms", rg, (rg - eg) * 1024 / o, sg " ms", hg " KiB",
        ro / rg, so / sg }'
done
fi
fi

if section scale-faults; then
echo
echo "== fault-to-action at scale: the operator cluster-wide, the nodes and pods above cached; $scale_faults faults one at a time, then $burst_faults in bursts of 50 at once"
kubectl create namespace faults-scale >/dev/null
# The operator for this section: no cordon limits, and the FLAGS given.
scale_operator() {  # scale_operator BINARY LOG [FLAGS]
  # shellcheck disable=SC2086  # FLAGS holds several flags
  "$1" run --kubeconfig "$kubeconfig" --health-address 127.0.0.1:0 \
    --max-cordoned-nodes 100000 --max-cordoned-fraction 1 --cordon-rate 0 --cordon-breaker-nodes 0 \
    ${3:-} >"$2" 2>&1 &
  op_pid=$!
}
scale_operator "$operator" "$dir/operator-faults-scale.log" "${SCALE_OPERATOR_ARGS:-}"
# A measurement that fails says so and the benchmark goes on to the next.
"$bench" fault-latency --kubeconfig "$kubeconfig" --namespace faults-scale --prefix scale-one \
  --faults "$scale_faults" --workers 2 || echo "  (failed: see the error above)"
grep -o 'caches synced.*' "$dir/operator-faults-scale.log" | head -1 | sed 's/^/  operator: /'
stop_operator
# The bursts: this operator, the baseline operator when one is given, and the raw ceiling (with
# this operator running the jobs but not acting on the fault), taking turns, twice each.
kinds="this${SCALE_BASELINE_OPERATOR:+ baseline} ceiling"
declare -A burst_p50 burst_p99
for round in 1 2; do
  for which in $kinds; do
    binary=$operator flags=${SCALE_OPERATOR_ARGS:-} extra=()
    [[ $which == baseline ]] && binary=$SCALE_BASELINE_OPERATOR flags=${SCALE_BASELINE_ARGS:-}
    [[ $which == ceiling ]] && extra=(--ceiling)
    scale_operator "$binary" "$dir/operator-faults-scale-$which-$round.log" "$flags"
    echo "  $which ($binary${flags:+ $flags}${extra[*]:+, ${extra[*]}}), round $round:"
    "$bench" fault-latency --kubeconfig "$kubeconfig" --namespace faults-scale \
      --prefix "scale-burst-$which-$round" --faults "$burst_faults" --workers 2 --burst 50 \
      "${extra[@]}" | tee "$dir/burst-$which-$round.txt" || echo "  (failed: see the error above)"
    line=$(grep -m1 'cordon + pods deleted:' "$dir/burst-$which-$round.txt" || true)
    burst_p50[$which-$round]=$(sed -n 's/.* p50 \([0-9]*\) ms.*/\1/p' <<<"$line")
    burst_p99[$which-$round]=$(sed -n 's/.* p99 \([0-9]*\) ms.*/\1/p' <<<"$line")
    stop_operator
  done
done
echo "  bursts of 50, cordon + pods deleted, p50 / p99 in ms, and this operator's over the ceiling's:"
for round in 1 2; do
  row="    round $round:"
  for which in $kinds; do
    row+=" $which ${burst_p50[$which-$round]:-?} / ${burst_p99[$which-$round]:-?};"
  done
  row+=" ratio $(awk -v a="${burst_p50[this-$round]:-0}" -v b="${burst_p50[ceiling-$round]:-0}" \
    -v c="${burst_p99[this-$round]:-0}" -v d="${burst_p99[ceiling-$round]:-0}" \
    'BEGIN { if (b > 0 && d > 0) printf "%.2f / %.2f", a / b, c / d; else printf "?" }')"
  echo "$row"
done
fi

if section idle; then
echo
echo "== idle cost: $idle_jobs running 1-worker TPUJobs, nothing happening, 60 s (operator cluster-wide, the nodes and pods above cached)"
{
  for i in $(seq 0 $((idle_jobs / 4 - 1))); do
    cat <<EON
---
apiVersion: v1
kind: Node
metadata:
  name: idle-host-$i
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {cloud.google.com/gke-tpu-accelerator: tpu-idle, cloud.google.com/gke-tpu-topology: 2x2, cloud.google.com/gke-nodepool: idle-$((i / 25))}
status:
  capacity: &r {cpu: "64", memory: 256Gi, pods: "110", google.com/tpu: "16"}
  allocatable: *r
EON
  done
} | kubectl apply -f - >/dev/null
# Ready before any job is admitted onto them (KWOK takes a while with thousands of nodes).
kubectl wait --for=condition=Ready node -l cloud.google.com/gke-tpu-accelerator=tpu-idle \
  --timeout=600s >/dev/null
kubectl create namespace idle >/dev/null
metrics_port=$(free_port)
"$operator" run --kubeconfig "$kubeconfig" --health-address 127.0.0.1:0 --metrics-secure=false \
  --metrics-address "127.0.0.1:$metrics_port" >"$dir/operator-idle.log" 2>&1 &
op_pid=$!
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$metrics_port/metrics" >/dev/null && break
  sleep 0.1
done
for i in $(seq 0 $((idle_jobs - 1))); do
  cat <<EOJ
---
apiVersion: tpujob.dev/v1alpha1
kind: TPUJob
metadata: {name: idle-$i, namespace: idle}
spec:
  tpu: {accelerator: tpu-idle, topology: 2x2, chipsPerWorker: 4}
  faultTolerance: {progress: {logPattern: 'completed step: (\\d+)'}}
  replicaSpecs:
    Worker:
      replicas: 1
      template: {spec: {containers: [{name: trainer, image: trainer:latest, command: [python3, train.py]}]}}
EOJ
done | kubectl create -f - >/dev/null
running=0
for _ in $(seq 1 200); do
  running=$(kubectl get tpujobs -n idle -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Running$' || true)
  ((running >= idle_jobs)) && break
  sleep 3
done
echo "TPUJobs Running: $running of $idle_jobs"
sleep 10  # the last status writes and events settle
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }
requests() {  # requests: the operator's API requests so far, "VERB_resource_code count" lines
  curl -sf "http://127.0.0.1:$metrics_port/metrics" | awk '/^tpujob_api_requests_total\{/ {
    verb = resource = code = ""
    if (match($0, /verb="[^"]*"/)) verb = substr($0, RSTART + 6, RLENGTH - 7)
    if (match($0, /resource="[^"]*"/)) resource = substr($0, RSTART + 10, RLENGTH - 11)
    if (match($0, /code="[^"]*"/)) code = substr($0, RSTART + 6, RLENGTH - 7)
    print verb "_" resource "_" code, $NF }'
}
node_status_writes() {  # node status writes the API server has served (KWOK's heartbeats)
  kubectl get --raw /metrics | awk '/^apiserver_request_total\{/ && /resource="nodes"/ &&
    /subresource="status"/ && (/verb="PATCH"/ || /verb="PUT"/ || /verb="APPLY"/) { n += $NF }
    END { printf "%d", n }'
}
refreshes() {  # status.progress refreshes so far: "written unchanged unreadable"
  curl -sf "http://127.0.0.1:$metrics_port/metrics" | awk '/^tpujob_progress_refreshes_total\{/ {
    if (/result="written"/) w += $NF; else if (/result="unchanged"/) u += $NF; else x += $NF }
    END { printf "%d %d %d", w, u, x }'
}
node_events() {  # node events the operator applied: "decoded undecoded" (tpujob_watch_events_total)
  curl -sf "http://127.0.0.1:$metrics_port/metrics" | awk '/^tpujob_watch_events_total\{/ &&
    /resource="nodes"/ { if (/decoded="false"/) u += $NF; else d += $NF }
    END { printf "%d %d", d, u }'
}
# The client-go informer peer receives the same node and pod events over the same minute.
start_peer "$dir/peer-idle.log"
before=$(requests) cpu_before=$(cpu_seconds "$op_pid") status_before=$(node_status_writes)
peer_before=$(cpu_seconds "$peer_pid") events_before=$(node_events) refresh_before=$(refreshes)
sleep 60
after=$(requests) cpu_after=$(cpu_seconds "$op_pid") status_after=$(node_status_writes)
peer_after=$(cpu_seconds "$peer_pid") events_after=$(node_events) refresh_after=$(refreshes)
rss_idle=$(rss_kib "$op_pid")
stop_peer
stop_operator
delta=$(join -a 2 -e 0 -o 0,1.2,2.2 <(sort <<<"$before") <(sort <<<"$after") | awk '$3 - $2 > 0 { printf "%s %d; ", $1, $3 - $2; n += $3 - $2 } END { printf "| total %d", n }')
echo "API requests in 60 s: ${delta#| }"
awk -v a="$cpu_after" -v b="$cpu_before" 'BEGIN { printf "CPU: %.2f s in 60 s (%.1f%% of one core)\n", a - b, (a - b) / 60 * 100 }'
echo "RSS with $idle_jobs jobs and the objects above cached: $rss_idle KiB"
status_writes=$((status_after - status_before))
echo "node status writes in those 60 s (each one a node update the operator received): $status_writes (BENCH_NODE_STATUS=$node_status)"
read -r written_before unchanged_before unreadable_before <<<"$refresh_before"
read -r written_after unchanged_after unreadable_after <<<"$refresh_after"
refresh_reads=$(((written_after + unchanged_after + unreadable_after) - (written_before + unchanged_before + unreadable_before)))
# Every idle job has a logPattern: its worker 0 log tail is read once per --progress-refresh-seconds
# (60). KWOK's pods have no kubelet to serve logs, so here each read is refused at once
# (unreadable) and none writes; with a real kubelet a read writes only when the step moved.
echo "status.progress refresh in those 60 s: $refresh_reads log tail reads for $idle_jobs jobs ($(awk -v r="$refresh_reads" -v j="$idle_jobs" 'BEGIN { printf "%.2f", j ? r / j : 0 }') per job per minute; goal <= 1): $((written_after - written_before)) written (status writes), $((unchanged_after - unchanged_before)) unchanged, $((unreadable_after - unreadable_before)) unreadable"
read -r decoded_before undecoded_before <<<"$events_before"
read -r decoded_after undecoded_after <<<"$events_after"
echo "node events the operator applied in those 60 s: $((decoded_after - decoded_before)) decoded, $((undecoded_after - undecoded_before)) without decoding (only heartbeat times changed)"
awk -v a="$cpu_after" -v b="$cpu_before" -v pa="$peer_after" -v pb="$peer_before" -v n="$status_writes" 'BEGIN {
  op = a - b; go = pa - pb
  printf "CPU in the same 60 s: operator %.2f s, client-go informer %.2f s", op, go
  if (n > 0) printf "; per node update: operator %.0f us, client-go %.0f us", op / n * 1e6, go / n * 1e6
  if (go > 0) printf "; ratio operator/client-go %.2f", op / go
  printf "\n" }'
fi

finish
