#!/usr/bin/env bash
# Slice recovery, measured (scripts/bench.sh runs it on its control plane; alone it starts its own
# in $TPUJOB_BENCH_DIR, default /tmp/tpujob-bench-slice, and stops it):
#   - for each size in SLICE_SIZES (default "4x16 8x32": slices x hosts, 4 chips per host), one
#     TPUJob of that shape (grace 0) on S + 1 KWOK node pools, a hardware fault (TPUUnhealthy=True)
#     on a node of slice 1, until every pod of the next attempt is Running (through a pod watch),
#     with recovery: Slice (a new pool for slice 1, the other slices' pods bound back to their
#     nodes) beside recovery: Job (the whole job admitted and scheduled again), SLICE_RUNS (3)
#     runs each, interleaved; and the operator's API writes over each recovery (its /metrics);
#     medians and the ratios Slice/Job, measured in the same run;
#   - hot swap: HOT_SWAP_RUNS (3) more faults per size with the spare pool held by a 1-slice job
#     of priority 1 (the job's is 100): the replaced slice preempts it; fault -> all Running.
#   - SLICE_RESTART=InPlace: the recovery Slice jobs restart in place (the kept slices' pods stay;
#     timed until every program of the next generation runs, the pods' supervisors played by
#     tpujob-bench); recovery Job still creates every pod again (scripts/bench.sh's `largest`
#     section runs 64 x 64 this way).
# Usage: bench-slice.sh [BUILD_DIR [KUBECONFIG]]   (make bench-slice)
# Nothing here asserts a number.
set -euo pipefail
build=${1:-build}
kubeconfig=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TPUJOB_BENCH_DIR:-/tmp/tpujob-bench-slice}
sizes=${SLICE_SIZES:-4x16 8x32}
runs=${SLICE_RUNS:-3}
hot_swap_runs=${HOT_SWAP_RUNS:-3}
restart=${SLICE_RESTART:-Recreate}
operator="$root/$build/tpujob-operator"
bench="$root/$build/tpujob-bench"
PATH="$(bash "$root/scripts/install-go.sh"):$PATH"
bin=$("$root/e2e/tools/build.sh")
own_cluster=
op_pid=
cleanup() {
  [[ -n $op_pid ]] && kill -9 "$op_pid" 2>/dev/null || true
  [[ -n $own_cluster ]] && "$root/e2e/cluster" down --dir "$dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT
if [[ -z $kubeconfig ]]; then
  # As scripts/bench.sh sets them up: KWOK's node Leases renewed rarely, the node controller
  # patient with them.
  export TPUJOB_E2E_KWOK_ARGS="--node-lease-duration-seconds=600 ${TPUJOB_E2E_KWOK_ARGS:-}"
  export TPUJOB_E2E_KCM_ARGS="--node-monitor-grace-period=700s --node-startup-grace-period=700s ${TPUJOB_E2E_KCM_ARGS:-}"
  own_cluster=1
  kubeconfig=$("$root/e2e/cluster" up --dir "$dir")
  "$bin/kubectl" --kubeconfig "$kubeconfig" apply -f "$root/crds/" >/dev/null
  "$bin/kubectl" --kubeconfig "$kubeconfig" wait --for=jsonpath='{.status.acceptedNames.kind}'=TPUJob \
    crd/tpujobs.tpujob.dev --timeout=30s >/dev/null
  "$bin/kubectl" --kubeconfig "$kubeconfig" wait --for=condition=Established crd/tpujobs.tpujob.dev \
    --timeout=30s >/dev/null
fi
mkdir -p "$dir"
kubectl() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

for size in $sizes; do
  IFS=x read -r slices hosts <<<"$size"
  ns="slice-recovery-$size"
  kubectl create namespace "$ns" >/dev/null 2>&1 || true
  # Every fault cordons a node: the operator's cordon cap, rate limit and breaker lifted, as for
  # the other fault benchmarks; metrics on plain HTTP for the write counts.
  metrics_port=$(free_port)
  "$operator" run --kubeconfig "$kubeconfig" --namespace "$ns" --health-address 127.0.0.1:0 \
    --metrics-secure=false --metrics-address "127.0.0.1:$metrics_port" \
    --max-cordoned-nodes 1000 --max-cordoned-fraction 1 --cordon-rate 0 --cordon-breaker-nodes 0 \
    >"$dir/operator-slice-$size.log" 2>&1 &
  op_pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$metrics_port/metrics" >/dev/null && break
    sleep 0.1
  done
  echo "-- $slices slices x $hosts hosts ($((slices * hosts)) pods): recovery Slice (restart $restart) beside Job, $runs runs each interleaved; hot swap, $hot_swap_runs runs"
  "$bench" slice-recovery --kubeconfig "$kubeconfig" --namespace "$ns" --prefix "sr$size" \
    --slices "$slices" --hosts "$hosts" --runs "$runs" --hot-swap-runs "$hot_swap_runs" --restart "$restart" \
    --metrics-url "http://127.0.0.1:$metrics_port/metrics" || echo "  (failed: see the error above)"
  kill -TERM "$op_pid"; wait "$op_pid" || true; op_pid=
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
done
