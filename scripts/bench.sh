#!/usr/bin/env bash
# Benchmarks that print numbers (nothing here asserts a target):
#   - gang creation: time from creating a 64-worker TPUJob to all its pods created by the
#     operator (5 runs, median), and the API requests the operator made for each job's whole
#     life (create, Running, success, delete);
#   - multislice gang creation: 4 slices x 16 hosts (64 pods) and 4 x 64 (256 pods) beside one
#     slice of the same pod count, 3 runs each interleaved (median, and the ratio);
#   - fault-to-action latency: from writing the node condition TPUUnhealthy=True to that node
#     cordoned and the job's pods deleted, seen through watches, over FAULT_COUNT (50) faults,
#     one 2-worker TPUJob each (p50, p90, p99, max; the target is p99 <= 200 ms);
#   - API write throughput of a plain client creating pods (the machine's raw ceiling);
#   - RSS of `tpujob-operator run` with no pods cached and with POD_COUNT (10,000) pods cached,
#     and the bytes per cached pod; the time to sync the caches at that size;
#   - admission planning (first, needs no cluster): the queue's BuildCapacity + PlanAdmissions
#     on an in-memory cluster of ADMISSION_NODES (5,000) nodes with ADMISSION_JOBS (1,000)
#     queued jobs, 21 runs (median, p90, min, max; the target is tens of ms).
#   - victim selection (needs no cluster): the queue's PlanPreemptions on an in-memory cluster
#     of ADMISSION_NODES nodes held by 500 running gangs with ADMISSION_JOBS queued jobs of
#     mixed priority, 101 runs (median, p99), beside PlanAdmissions on the same queue.
# Runs its own control plane in $TPUJOB_BENCH_DIR (default /tmp/tpujob-bench) and stops it.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TPUJOB_BENCH_DIR:-/tmp/tpujob-bench}
pods=${POD_COUNT:-10000}
faults=${FAULT_COUNT:-50}
admission_nodes=${ADMISSION_NODES:-5000}
admission_jobs=${ADMISSION_JOBS:-1000}
operator="$root/$build/tpujob-operator"
bench="$root/$build/tpujob-bench"

echo "== admission planning: $admission_nodes nodes, $admission_jobs queued jobs (in memory, no cluster)"
"$bench" admission --nodes "$admission_nodes" --jobs "$admission_jobs" --runs 21
echo

echo "== victim selection (gang preemption): $admission_nodes nodes, 500 running, $admission_jobs queued jobs (in memory)"
"$bench" preemption --nodes "$admission_nodes" --running 500 --jobs "$admission_jobs" --runs 101
echo

bin=$("$root/e2e/tools/build.sh")

cleanup() {
  [[ -n ${op_pid:-} ]] && kill -9 "$op_pid" 2>/dev/null || true
  "$root/e2e/cluster" down --dir "$dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT

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

"$bench" create-nodes --kubeconfig "$kubeconfig" --count 20 >/dev/null

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
  # The operator's own count, minus the 3 LISTs and 3 WATCHes its caches always make.
  grep -o 'msg="api requests".*' "$dir/operator-gang-$run.log" |
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^total=/) { split($i, t, "="); n = t[2] } }
         { print "  API requests for the job'"'"'s whole life: " n - 6 "   (" $0 ")" }' | cut -c1-240
done
median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 3p)
echo "gang creation, 64 workers: median ${median} ms over 5 runs (${times[*]} ms)"
echo

echo "== multislice gang creation: 4 slices x 16 hosts and 4 x 64 beside one slice of 64 and of 256, 3 runs each, interleaved"
# KWOK nodes of 16 chips (four 4-chip workers each): four pools of 4 (8x8 slices of 16 hosts),
# four pools of 16 (16x16 slices of 64 hosts), and 64 nodes for one 32x32 slice of 256 hosts.
tpu_nodes() {  # tpu_nodes NAME_PREFIX COUNT TOPOLOGY POOL
  for i in $(seq 0 $(($2 - 1))); do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $1-$i
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice, cloud.google.com/gke-tpu-topology: $3, cloud.google.com/gke-nodepool: $4}
status:
  capacity: &r {cpu: "64", memory: 256Gi, pods: "110", google.com/tpu: "16"}
  allocatable: *r
EOF
  done
}
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

start_operator "$dir/operator-empty.log"
rss_empty=$(rss_kib "$op_pid")
stop_operator

echo "== creating $pods pods with a plain client (16 threads, no client-side limit)"
"$bench" create-pods --kubeconfig "$kubeconfig" --namespace bench --count "$pods" --jobs 100 --nodes 20
running=0
for _ in $(seq 1 600); do
  running=$(kubectl get pods -n bench --field-selector=status.phase=Running --no-headers 2>/dev/null | wc -l)
  ((running >= pods)) && break
  sleep 1
done
echo "pods Running (KWOK): $running"

start_operator "$dir/operator-full.log"
rss_full=$(rss_kib "$op_pid")
synced=$(grep -o 'caches synced.*' "$dir/operator-full.log" | head -1)
stop_operator

echo
echo "== tpujob-operator run: memory"
echo "RSS with 0 pods cached:        $rss_empty KiB"
echo "RSS with $pods pods cached:  $rss_full KiB"
awk -v e="$rss_empty" -v f="$rss_full" -v n="$pods" \
  'BEGIN { printf "bytes per cached pod:          %.0f\n", (f - e) * 1024 / n }'
echo "sync: $synced"
