#!/usr/bin/env bash
# In-place restart, measured (scripts/bench.sh runs it on its control plane; alone it starts its
# own in $TPUJOB_BENCH_DIR, default /tmp/tpujob-bench-inplace, and stops it): for each worker
# count in INPLACE_SIZES (default "64 256"), a TPUJob of that many workers (4 chips each, grace
# 0) on as many KWOK nodes, a program exit, until every program of the next generation runs,
# with restart InPlace (worker 0 exits; the pods' supervisors, played by tpujob-bench, stop and
# wait at the barrier) beside Recreate (every program exits, as collectives break, and every pod
# is created again), INPLACE_RUNS (3) runs each, interleaved; and the operator's API writes over
# each restart (its /metrics); medians and the ratio InPlace/Recreate, measured in the same run.
# Usage: bench-inplace.sh [BUILD_DIR [KUBECONFIG]]   (make bench-inplace)
# Nothing here asserts a number.
set -euo pipefail
build=${1:-build}
kubeconfig=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TPUJOB_BENCH_DIR:-/tmp/tpujob-bench-inplace}
sizes=${INPLACE_SIZES:-64 256}
runs=${INPLACE_RUNS:-3}
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
  export TPUJOB_E2E_KWOK_ARGS="--node-lease-duration-seconds=600 ${TPUJOB_E2E_KWOK_ARGS:-}"
  export TPUJOB_E2E_KCM_ARGS="--node-monitor-grace-period=700s --node-startup-grace-period=700s ${TPUJOB_E2E_KCM_ARGS:-}"
  own_cluster=1
  kubeconfig=$("$root/e2e/cluster" up --dir "$dir")
  "$bin/kubectl" --kubeconfig "$kubeconfig" apply -f "$root/crds/" >/dev/null
  "$bin/kubectl" --kubeconfig "$kubeconfig" wait --for=condition=Established crd/tpujobs.tpujob.dev \
    --timeout=30s >/dev/null
fi
mkdir -p "$dir"
kubectl() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

for workers in $sizes; do
  ns="in-place-$workers"
  kubectl create namespace "$ns" >/dev/null 2>&1 || true
  metrics_port=$(free_port)
  "$operator" run --kubeconfig "$kubeconfig" --namespace "$ns" --health-address 127.0.0.1:0 \
    --metrics-secure=false --metrics-address "127.0.0.1:$metrics_port" \
    >"$dir/operator-inplace-$workers.log" 2>&1 &
  op_pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$metrics_port/metrics" >/dev/null && break
    sleep 0.1
  done
  echo "-- $workers workers: restart InPlace beside Recreate, $runs runs each interleaved"
  "$bench" in-place --kubeconfig "$kubeconfig" --namespace "$ns" --prefix "ip$workers" \
    --workers "$workers" --runs "$runs" \
    --metrics-url "http://127.0.0.1:$metrics_port/metrics" || echo "  (failed: see the error above)"
  kill -TERM "$op_pid"; wait "$op_pid" || true; op_pid=
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
done
