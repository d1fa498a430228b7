#!/usr/bin/env bash
# The demo: a local control plane with four fake TPU hosts (KWOK nodes advertising
# google.com/tpu), the TPUJob CRD, the operator, and a multi-host TPUJob going
# Queued -> Starting -> Running -> Succeeded, surviving on the way a worker crash (restarted in
# place) and the operator itself killed with SIGKILL.
# Set KEEP_CLUSTER=1 to leave the control plane running afterwards.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TPUJOB_DEMO_DIR:-/tmp/tpujob-demo}
operator="$root/$build/tpujob-operator"
# A Go new enough to build the control plane when it is not cached yet (scripts/install-go.sh).
PATH="$(bash "$root/scripts/install-go.sh"):$PATH"
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
# A new CRD's status.conditions is null until its names are accepted, and `kubectl wait
# --for=condition` fails on null instead of waiting: wait for the accepted names first.
kubectl wait --for=jsonpath='{.status.acceptedNames.kind}'=TPUJob crd/tpujobs.tpujob.dev --timeout=30s
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

# tpu_host NAME TOPOLOGY POOL: a fake TPU host (KWOK keeps it Ready) with 4 chips, labelled and
# tainted as GKE labels and taints TPU nodes.
tpu_host() {
  cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations: {kwok.x-k8s.io/node: fake}
  labels:
    cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice
    cloud.google.com/gke-tpu-topology: $2
    cloud.google.com/gke-nodepool: $3
spec:
  taints: [{key: google.com/tpu, value: present, effect: NoSchedule}]
status:
  capacity: &r {cpu: "32", memory: 128Gi, pods: "110", google.com/tpu: "4"}
  allocatable: *r
EOF
}

say "Adding four fake TPU hosts: tpu-v5-lite-podslice, 4x4 slice, 4 chips each"
for i in 0 1 2 3; do tpu_host "tpu-host-$i" 4x4 tpu-pool; done | kubectl apply -f -
kubectl wait --for=condition=Ready node -l cloud.google.com/gke-nodepool=tpu-pool --timeout=60s
kubectl get nodes -L cloud.google.com/gke-tpu-topology | cut -c1-100

job=multi-host
phase() { kubectl get tpujob "$job" -o jsonpath='{.status.phase}'; }
wait_for() {  # wait_for DESCRIPTION COMMAND...: polls for up to 60 s
  local what=$1; shift
  for _ in $(seq 1 600); do
    "$@" && return 0
    sleep 0.1
  done
  echo "timed out waiting for: $what" >&2
  kubectl get tpujob "$job" -o yaml >&2 || true
  tail -20 "$dir/operator.log" >&2
  exit 1
}
is() { [[ $("${@:2}") == "$1" ]]; }  # is WANT COMMAND...: the command prints WANT
restarts() { kubectl get tpujob "$job" -o jsonpath='{.status.workerRestarts.Worker-2.count}'; }
job_pods() { kubectl get pods -l tpujob.dev/job-name=$job -o name | wc -l; }
# Write a terminated container into a pod's status, as the kubelet does when the program exits.
terminate() {  # terminate POD EXIT_CODE
  local phase=Failed reason=Error
  if [[ $2 == 0 ]]; then phase=Succeeded reason=Completed; fi
  kubectl patch pod "$1" --subresource=status --type=merge -p "{\"status\":{\"phase\":\"$phase\",
    \"containerStatuses\":[{\"name\":\"trainer\",\"ready\":false,\"restartCount\":0,
    \"image\":\"busybox\",\"imageID\":\"\",\"state\":{\"terminated\":{\"exitCode\":$2,
    \"reason\":\"$reason\"}}}]}}" >/dev/null
}

say "Applying examples/multi-host.yaml: 4 workers of 4 chips on one 4x4 slice"
kubectl apply -f "$root/examples/multi-host.yaml"
# Record every status the job goes through; the operator starts once the watch is running.
kubectl get tpujobs --watch \
  -o custom-columns=NAME:.metadata.name,PHASE:.status.phase,ATTEMPT:.status.attempt,READY:.status.readyWorkers \
  >"$dir/phases.log" 2>&1 &
watch_pid=$!
wait_for "the watch to start" grep -q "^$job" "$dir/phases.log"

say "Starting the operator (log: $dir/operator.log)"
: >"$dir/operator.log"
start_operator
echo "ready: $(curl -s "http://127.0.0.1:$health_port/readyz")"
wait_for "phase Running" is Running phase
kubectl get tpujob "$job"
kubectl get pods -l tpujob.dev/job-name=$job -o wide | cut -c1-110
echo "worker 2's environment:"
kubectl get pod $job-worker-2 \
  -o jsonpath='{range .spec.containers[0].env[*]}  {.name}={.value}{"\n"}{end}' | grep -v NODE_NAME

say "Fault: worker 2 crashes with exit code 143 (retryable) -> restarted in place"
terminate $job-worker-2 143
wait_for "the restart counted" is 1 restarts
wait_for "phase Running again" is Running phase
kubectl get tpujob "$job" \
  -o jsonpath='{range .status.faults[*]}fault: {.pod} exit code {.exitCode} -> {.action}{"\n"}{end}'

say "Fault: the operator is killed with SIGKILL and started again"
kill -9 "$op_pid"
wait "$op_pid" 2>/dev/null || true
start_operator
grep 'caches synced' "$dir/operator.log" | tail -1
kubectl get tpujob "$job"

say "Worker 0 exits 0 -> the job succeeded, the other workers are stopped"
terminate $job-worker-0 0
wait_for "phase Succeeded" is Succeeded phase
wait_for "the other workers stopped" is 1 job_pods
kubectl get pods -l tpujob.dev/job-name=$job
kill "$watch_pid" 2>/dev/null || true
echo
echo "every status the job went through (kubectl get --watch):"
uniq "$dir/phases.log"
echo
echo "the job's Events, in the order they were written:"
kubectl get events --field-selector involvedObject.name=$job --no-headers \
  -o custom-columns=RV:.metadata.resourceVersion,TYPE:.type,REASON:.reason,MESSAGE:.message |
  sort -n | cut -d' ' -f2- | sed 's/^ *//' | cut -c1-160
echo
echo "where the job's time went (status.goodput; kubectl tpujob describe shows the same):"
kubectl get tpujob "$job" -o wide
kubectl get tpujob "$job" -o jsonpath='productive {.status.goodput.productiveSeconds} s, lost {.status.goodput.lostSeconds} (seconds by cause){"\n"}'

say "Multislice: three node pools of two 2x4 hosts, and examples/multislice.yaml (3 slices x 2 hosts)"
for pool in a b c; do
  for i in 0 1; do tpu_host "slice-host-$pool-$i" 2x4 "slice-pool-$pool"; done
done | kubectl apply -f -
kubectl wait --for=condition=Ready node -l cloud.google.com/gke-tpu-topology=2x4 --timeout=60s
kubectl apply -f "$root/examples/multislice.yaml"
job=multislice
wait_for "the multislice job Running" is Running phase
kubectl get tpujob "$job"
kubectl get tpujob "$job" -o jsonpath='node pools, one per slice: {.status.nodePools}{"\n"}'
kubectl get pods -l tpujob.dev/job-name=$job \
  -o custom-columns='POD:.metadata.name,SLICE:.metadata.labels.tpujob\.dev/slice-index,NODE:.spec.nodeName,POOL:.spec.nodeSelector.cloud\.google\.com/gke-nodepool'
echo "the environment of $job-worker-1-1 (slice 1, host 1):"
kubectl get pod $job-worker-1-1 \
  -o jsonpath='{range .spec.containers[0].env[*]}  {.name}={.value}{"\n"}{end}' |
  grep -E '^  (TPU_WORKER|MEGASCALE)'
kubectl delete tpujob "$job" --wait=false

say "Stopping the operator with SIGTERM"
kill -TERM "$op_pid"
wait "$op_pid" && echo "operator exited cleanly (status 0)"
op_pid=
grep -E 'api requests|msg="stopped"' "$dir/operator.log" | tail -2 | cut -c1-200
say "Demo finished"
