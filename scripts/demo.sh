#!/usr/bin/env bash
# The demo: a local control plane, the TPUJob CRD, the operator, a sample TPUJob — and the
# operator killed with SIGKILL and restarted, picking the job up again from the API server.
# Set KEEP_CLUSTER=1 to leave the control plane running afterwards.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TPUJOB_DEMO_DIR:-/tmp/tpujob-demo}
operator="$root/$build/tpujob-operator"
bin=$("$root/e2e/tools/build.sh")
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

cleanup() {
  [[ -n ${op_pid:-} ]] && kill "$op_pid" 2>/dev/null && wait "$op_pid" 2>/dev/null || true
  if [[ -z ${KEEP_CLUSTER:-} ]]; then "$root/e2e/cluster" down --dir "$dir" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

say "Starting a local control plane (etcd, kube-apiserver, controller-manager, scheduler, KWOK)"
kubeconfig=$("$root/e2e/cluster" up --dir "$dir")
kubectl() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
echo "kube-apiserver /readyz: $(kubectl get --raw /readyz)"

say "Installing the TPUJob CRD"
kubectl apply -f "$root/crds/"
kubectl wait --for=condition=Established crd/tpujobs.tpujob.dev --timeout=30s

health_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_operator() {
  "$operator" run --kubeconfig "$kubeconfig" --health-address "127.0.0.1:$health_port" \
    >>"$dir/operator.log" 2>&1 &
  op_pid=$!
  for _ in $(seq 1 200); do
    curl -sf "http://127.0.0.1:$health_port/readyz" >/dev/null && return 0
    sleep 0.1
  done
  echo "operator did not become ready; its log:" >&2
  tail -20 "$dir/operator.log" >&2
  exit 1
}

say "Starting the operator (log: $dir/operator.log)"
: >"$dir/operator.log"
start_operator
echo "ready: $(curl -s "http://127.0.0.1:$health_port/readyz")"

say "Applying a sample TPUJob"
kubectl apply -f "$root/examples/single-host.yaml"
wait_for_log() {
  for _ in $(seq 1 100); do
    grep -q "$1" "$dir/operator.log" && return 0
    sleep 0.1
  done
  echo "the operator never logged: $1" >&2
  exit 1
}
wait_for_log 'observed TPUJob" tpujob=default/single-host'
grep 'observed TPUJob' "$dir/operator.log" | tail -1
kubectl get tpujobs

say "Fault: killing the operator with SIGKILL and starting it again"
kill -9 "$op_pid"
wait "$op_pid" 2>/dev/null || true
before=$(grep -c 'observed TPUJob" tpujob=default/single-host' "$dir/operator.log")
start_operator
for _ in $(seq 1 100); do
  after=$(grep -c 'observed TPUJob" tpujob=default/single-host' "$dir/operator.log")
  ((after > before)) && break
  sleep 0.1
done
((after > before)) || { echo "the restarted operator did not see the job" >&2; exit 1; }
grep 'caches synced' "$dir/operator.log" | tail -1
grep 'observed TPUJob' "$dir/operator.log" | tail -1

say "Stopping the operator with SIGTERM"
kill -TERM "$op_pid"
wait "$op_pid" && echo "operator exited cleanly (status 0)"
op_pid=
tail -2 "$dir/operator.log"
say "Demo finished"
