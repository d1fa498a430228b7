#!/usr/bin/env bash
# Fault attribution, measured (called by scripts/bench.sh on its running control plane):
#   - a worker exits 1 while a TPU device of its node is missing: the time from the exit to the
#     node condition TPUUnhealthy=True and to the job's decision (re-issued), with the node
#     agent's immediate round (it watches the pods of its node), beside the agent's --interval
#     (60 s: without the immediate round the verdict waits for the next periodic round, and with
#     the default 30 s window that is too late in about half the cases, failing the job for good);
#   - a worker exits 1 on a healthy node (the agent's immediate round passes): the time from the
#     exit to Failed with the default window (30 s) beside faultAttributionSeconds: 0, the added
#     latency of a real permanent failure.
# Usage: bench-attribution.sh OPERATOR KUBECTL KUBECONFIG DIR [RUNS]
# Nothing here asserts a number.
set -euo pipefail
operator=$1 kubectl_bin=$2 kubeconfig=$3 dir=$4 runs=${5:-3}
interval=60
kubectl() { "$kubectl_bin" --kubeconfig "$kubeconfig" "$@"; }
ns=attribution
work="$dir/attribution"
rm -rf "$work" && mkdir -p "$work"
agents=()
op_pid=
cleanup() {
  for pid in "${agents[@]}" $op_pid; do kill -9 "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# Three fake TPU hosts of an accelerator of their own (one spare for the re-issued attempt), each
# with a directory of plain files standing in for its /dev (4 chips) and a node agent.
nodes=(attr-host-0 attr-host-1 attr-host-2)
for n in "${nodes[@]}"; do
  cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $n
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {cloud.google.com/gke-tpu-accelerator: tpu-attr, cloud.google.com/gke-tpu-topology: 2x4, cloud.google.com/gke-nodepool: attr}
status:
  capacity: &r {cpu: "64", memory: 256Gi, pods: "110", google.com/tpu: "4"}
  allocatable: *r
EOF
done | kubectl apply -f - >/dev/null
kubectl wait --for=condition=Ready node "${nodes[@]}" --timeout=120s >/dev/null
kubectl create namespace "$ns" >/dev/null 2>&1 || true

devices() {  # devices NODE COUNT: the node's stand-in /dev holds COUNT chips
  rm -rf "$work/$1/dev" && mkdir -p "$work/$1/dev"
  for i in $(seq 0 $(($2 - 1))); do : >"$work/$1/dev/accel$i"; done
}
start_agent() {  # start_agent NODE [ARGS...]
  local n=$1
  shift
  "$operator" node-agent --kubeconfig "$kubeconfig" --node-name "$n" --dev-root "$work/$n/dev" \
    --checks accelerator --interval "$interval" "$@" >>"$work/agent-$n.log" 2>&1 &
  agents+=($!)
  eval "agent_$(tr - _ <<<"$n")=$!"
}
stop_agent() {  # stop_agent NODE
  local var
  var="agent_$(tr - _ <<<"$1")"
  kill -TERM "${!var}" 2>/dev/null || true
  wait "${!var}" 2>/dev/null || true
}
reset_node() {  # reset_node NODE: healthy again, uncordoned, condition cleared, agent restarted
  stop_agent "$1"
  devices "$1" 4
  kubectl uncordon "$1" >/dev/null
  kubectl taint node "$1" tpujob.dev/faulty- >/dev/null 2>&1 || true
  local now
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  kubectl patch node "$1" --subresource=status --type=strategic -p \
    "{\"status\":{\"conditions\":[{\"type\":\"TPUUnhealthy\",\"status\":\"False\",\"reason\":\"HardwareHealthy\",\"message\":\"reset\",\"lastHeartbeatTime\":\"$now\",\"lastTransitionTime\":\"$now\"}]}}" >/dev/null
  start_agent "$1" "${agent_args[@]}"
}
for n in "${nodes[@]}"; do devices "$n" 4; done

now_s() { date +%s.%N; }
# exit_worker POD: writes exit 1 into the pod's status as a kubelet does, finishedAt now.
exit_worker() {
  local stamp
  stamp=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  kubectl patch pod "$1" -n "$ns" --subresource=status --type=merge -p \
    "{\"status\":{\"phase\":\"Failed\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"False\"}],\"containerStatuses\":[{\"name\":\"trainer\",\"ready\":false,\"restartCount\":0,\"image\":\"busybox\",\"imageID\":\"\",\"state\":{\"terminated\":{\"exitCode\":1,\"reason\":\"Error\",\"message\":\"libtpu: chip halted\",\"startedAt\":\"$stamp\",\"finishedAt\":\"$stamp\"}}}]}}" >/dev/null
}
job() {  # job NAME WINDOW
  cat <<EOF | kubectl apply -n "$ns" -f - >/dev/null
apiVersion: tpujob.dev/v1alpha1
kind: TPUJob
metadata: {name: $1, annotations: {fault-tolerance/job-retry-num: "3"}}
spec:
  tpu: {accelerator: tpu-attr, topology: 2x4, chipsPerWorker: 4}
  faultTolerance: {faultAttributionSeconds: $2, maintenanceGracePeriodSeconds: 0, preflight: {enabled: false}}
  replicaSpecs:
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: trainer, image: busybox}]}}
EOF
}
wait_field() {  # wait_field NAME JSONPATH WANT TIMEOUT_S: polls every 50 ms
  local deadline=$(($(date +%s) + $4))
  while (($(date +%s) < deadline)); do
    [[ $(kubectl get tpujob "$1" -n "$ns" -o jsonpath="$2" 2>/dev/null) == "$3" ]] && return 0
    sleep 0.05
  done
  echo "  $1: $2 did not become $3 within $4 s" >&2
  return 1
}
delete_job() {
  kubectl delete tpujob "$1" -n "$ns" --wait=true >/dev/null
  while [[ -n $(kubectl get pods -n "$ns" -l "tpujob.dev/job-name=$1" -o name) ]]; do sleep 0.1; done
}
stats() {  # stats LABEL VALUES...: median, min and max in seconds
  local label=$1
  shift
  printf '%s\n' "$@" | sort -g | awk -v l="$label" '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "  %s: median %.2f s (min %.2f, max %.2f, %d runs)\n", l, m, v[1], v[NR], NR }'
}

"$operator" run --kubeconfig "$kubeconfig" --namespace "$ns" --health-address 127.0.0.1:0 \
  --max-cordoned-nodes 1000 --max-cordoned-fraction 1 --cordon-rate 0 --cordon-breaker-nodes 0 \
  >"$work/operator.log" 2>&1 &
op_pid=$!

# hardware RUN_PREFIX: exit 1 with a device missing, until the job is re-issued.
hardware() {
  local prefix=$1 run name node t0 t_cond t_done
  cond_times=() decide_times=() failed_runs=0
  for run in $(seq 1 "$runs"); do
    name="$prefix-$run"
    job "$name" 30
    wait_field "$name" '{.status.phase}' Running 60
    node=$(kubectl get pod "$name-worker-1" -n "$ns" -o jsonpath='{.spec.nodeName}')
    rm -f "$work/$node/dev/accel3"
    t0=$(now_s)
    exit_worker "$name-worker-1"
    t_cond= t_done=
    local phase deadline=$(($(date +%s) + interval + 10))
    # Until the condition is written (or the interval is over) and the job decided.
    while [[ -z $t_done || (-z $t_cond && $(date +%s) -lt $deadline) ]]; do
      if [[ -z $t_cond && $(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="TPUUnhealthy")].status}') == True ]]; then
        t_cond=$(now_s)
      fi
      if [[ -z $t_done ]]; then
        phase=$(kubectl get tpujob "$name" -n "$ns" -o jsonpath='{.status.phase}/{.status.attempt}')
        [[ $phase == */2 || $phase == Failed/* ]] && t_done=$(now_s)
      fi
      sleep 0.05
    done
    [[ -n $t_cond ]] && cond_times+=("$(awk -v a="$t_cond" -v b="$t0" 'BEGIN { print a - b }')")
    if [[ $phase == Failed/* ]]; then
      failed_runs=$((failed_runs + 1))
    else
      decide_times+=("$(awk -v a="$t_done" -v b="$t0" 'BEGIN { print a - b }')")
    fi
    delete_job "$name"
    reset_node "$node"
  done
}

echo "  (3 fake hosts, a node agent each: --interval ${interval}s, --checks accelerator; 2-worker jobs)"
agent_args=()
for n in "${nodes[@]}"; do start_agent "$n"; done
hardware attr-hw
stats "exit 1 with a chip missing -> TPUUnhealthy=True written (immediate round)" "${cond_times[@]}"
stats "exit 1 with a chip missing -> job re-issued, not failed (default window 30 s)" "${decide_times[@]}"
echo "  the agent's interval: ${interval} s; immediate verdict / interval = $(printf '%s\n' "${cond_times[@]}" | sort -g | awk -v i="$interval" '{ v[NR] = $1 } END { printf "%.3f", ((NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) / i }')"

for n in "${nodes[@]}"; do stop_agent "$n"; done
agent_args=(--watch-pods=false)
for n in "${nodes[@]}"; do start_agent "$n" "${agent_args[@]}"; done
hardware attr-periodic
if ((${#cond_times[@]} > 0)); then
  stats "the same without the immediate round (--watch-pods=false): TPUUnhealthy=True written" "${cond_times[@]}"
fi
if ((${#decide_times[@]} > 0)); then
  stats "the same without the immediate round (--watch-pods=false): re-issued" "${decide_times[@]}"
fi
echo "  the same without the immediate round: $failed_runs of $runs runs failed for good (PermanentError: the periodic round came after the 30 s window)"
for n in "${nodes[@]}"; do stop_agent "$n"; done
agent_args=()
for n in "${nodes[@]}"; do start_agent "$n"; done

# healthy WINDOW: exit 1 on a healthy node, until Failed.
healthy() {
  local window=$1 run name t0
  failed_times=()
  for run in $(seq 1 "$runs"); do
    name="attr-ok-$window-$run"
    job "$name" "$window"
    wait_field "$name" '{.status.phase}' Running 60
    t0=$(now_s)
    exit_worker "$name-worker-1"
    wait_field "$name" '{.status.phase}' Failed $((window + 30))
    failed_times+=("$(awk -v a="$(now_s)" -v b="$t0" 'BEGIN { print a - b }')")
    delete_job "$name"
  done
}
healthy 30
with_window=("${failed_times[@]}")
healthy 0
stats "exit 1 on a healthy node -> Failed, default window (30 s)" "${with_window[@]}"
stats "exit 1 on a healthy node -> Failed, faultAttributionSeconds: 0" "${failed_times[@]}"
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
awk -v a="$(med "${with_window[@]}")" -v b="$(med "${failed_times[@]}")" \
  'BEGIN { printf "  added latency of a real permanent failure with the default window: %.2f s (finishedAt has whole seconds: 29-30 s expected)\n", a - b }'
