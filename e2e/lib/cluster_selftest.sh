#!/usr/bin/env bash
# Smoke test of e2e/cluster against the real control plane: up, kubectl, a KWOK fake node with a
# pod that the scheduler binds and KWOK runs, a test-written terminated container status that
# KWOK must leave alone, compact + restart-apiserver (410 Gone on an old watch), apf-tight and
# apf-reset, start-stopped after the scheduler was killed, an idempotent up, crash recovery after
# kill -9, and down leaving no process behind.
#
# Usage: e2e/lib/cluster_selftest.sh [DIR]   (default: a fresh directory under /tmp)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster=$here/../cluster
dir=${1:-$(mktemp -d /tmp/tpujob-cluster-selftest.XXXXXX)}
fail() { printf 'SELFTEST FAILED: %s\n' "$*" >&2; exit 1; }
cleanup() { "$cluster" down --dir "$dir" >/dev/null 2>&1 || true; }
trap cleanup EXIT

# shellcheck source=e2e/lib/selftest_common.sh
source "$here/selftest_common.sh"

step "up (cold)"
t=$(ms)
kubeconfig=$("$cluster" up --dir "$dir" </dev/null)
echo "up took $(($(ms) - t)) ms" >&2
[[ $kubeconfig == "$dir/admin.kubeconfig" && -f $kubeconfig ]] || fail "up printed '$kubeconfig'"
# shellcheck disable=SC1091
source "$dir/ports.env"
k() { "$KUBECTL" --kubeconfig "$kubeconfig" "$@"; }

step "kubectl get ns"
k get ns
k get ns default -o name | grep -qx namespace/default || fail "no default namespace"

step "KWOK fake node and a pod on it"
k apply -f - <<'EOF'
apiVersion: v1
kind: Node
metadata:
  name: selftest-node
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    type: kwok
spec:
  taints:
  - key: kwok.x-k8s.io/node
    value: fake
    effect: NoSchedule
---
apiVersion: v1
kind: Pod
metadata:
  name: selftest-pod
  namespace: default
spec:
  restartPolicy: Never
  nodeSelector:
    type: kwok
  tolerations:
  - key: kwok.x-k8s.io/node
    operator: Exists
    effect: NoSchedule
  initContainers:
  - name: preflight
    image: busybox
  containers:
  - name: main
    image: busybox
EOF
node_ready() { [[ $(k get node selftest-node -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
pod_ready() {
  [[ $(k get pod selftest-pod -o jsonpath='{.spec.nodeName}/{.status.phase}/{.status.conditions[?(@.type=="Ready")].status}') == selftest-node/Running/True ]]
}
wait_for 30 "node Ready" node_ready
wait_for 30 "pod bound and Running/Ready" pod_ready
k get pod selftest-pod -o wide

step "a test-written terminated status is not overwritten by KWOK"
k patch pod selftest-pod --subresource=status --type=merge -p '{"status":{"phase":"Failed",
  "conditions":[{"type":"Ready","status":"False"}],
  "containerStatuses":[{"name":"main","image":"busybox","imageID":"","ready":false,"restartCount":0,
    "state":{"terminated":{"exitCode":42,"reason":"Error","message":"selftest"}}}]}}' >/dev/null
sleep 5
got=$(k get pod selftest-pod -o jsonpath='{.status.phase}/{.status.containerStatuses[0].state.terminated.exitCode}')
[[ $got == Failed/42 ]] || fail "pod status after 5s: $got (KWOK overwrote it?)"
echo "status kept: $got" >&2

step "compact + restart-apiserver: an old watch gets 410 Gone"
old=$(k get --raw /api/v1/namespaces/default/configmaps | sed -n 's/.*"resourceVersion":"\([0-9]*\)".*/\1/p' | head -1)
k create configmap selftest-1 >/dev/null
k create configmap selftest-2 >/dev/null
"$cluster" compact --dir "$dir" >/dev/null
t=$(ms)
"$cluster" restart-apiserver --dir "$dir"
echo "restart-apiserver took $(($(ms) - t)) ms" >&2
out=$(k get --raw "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=$old&timeoutSeconds=1" 2>&1 || true)
[[ $out == *'"code":410'* ]] || fail "expected 410 on watch from $old, got: ${out:0:300}"
echo "old watch: 410 Expired" >&2
k get pods -o wide

step "apf-tight, then apf-reset leaves the cluster as before"
t=$(ms)
"$cluster" apf-tight --subject user:selftest-throttled --dir "$dir"
echo "apf-tight took $(($(ms) - t)) ms" >&2
k get flowschema tpujob-e2e-tight -o name >/dev/null || fail "no FlowSchema after apf-tight"
"$cluster" status --dir "$dir" | grep -q 'apf .*tight for user:selftest-throttled' ||
  fail "status does not show the tight configuration"
tr '\0' ' ' <"$dir/args/kube-apiserver" | grep -q -- '--max-requests-inflight=' ||
  fail "kube-apiserver not restarted with tight inflight limits"
t=$(ms)
"$cluster" apf-reset --dir "$dir"
echo "apf-reset took $(($(ms) - t)) ms" >&2
! k get flowschema tpujob-e2e-tight -o name >/dev/null 2>&1 || fail "FlowSchema left after apf-reset"
! tr '\0' ' ' <"$dir/args/kube-apiserver" | grep -q -- '--max-requests-inflight=' ||
  fail "tight inflight limits left after apf-reset"
k get ns default -o name >/dev/null || fail "cluster not usable after apf-reset"

step "start-stopped brings back a component that exited, and only that one"
[[ -z $("$cluster" start-stopped --dir "$dir") ]] || fail "start-stopped started something on a healthy cluster"
kill -9 "$(cat "$dir/pids/kube-scheduler.pid")"
t=$(ms)
started=$("$cluster" start-stopped --dir "$dir")
[[ $started == kube-scheduler ]] || fail "start-stopped printed '$started', want kube-scheduler"
"$cluster" status --dir "$dir" >/dev/null || fail "not every component runs after start-stopped"
echo "start-stopped took $(($(ms) - t)) ms" >&2

step "up again while healthy is quick"
t=$(ms)
[[ $("$cluster" up --dir "$dir") == "$kubeconfig" ]] || fail "second up printed something else"
echo "idempotent up took $(($(ms) - t)) ms" >&2

step "kill -9 everything, then up recovers"
# shellcheck disable=SC2046
kill -9 $(cat "$dir"/pids/*.pid)
sleep 0.5
t=$(ms)
kubeconfig=$("$cluster" up --dir "$dir" </dev/null)
echo "recovery up took $(($(ms) - t)) ms" >&2
source "$dir/ports.env"
k get ns default -o name >/dev/null || fail "cluster not usable after recovery"
"$cluster" status --dir "$dir"

step "down"
t=$(ms)
"$cluster" down --dir "$dir"
echo "down took $(($(ms) - t)) ms" >&2
if pgrep -f -- "$dir/" >/dev/null; then pgrep -af -- "$dir/" >&2; fail "processes left after down"; fi
[[ ! -d $dir/etcd-data ]] || fail "etcd data left after down"
trap - EXIT
rm -rf "$dir"
echo "SELFTEST PASSED" >&2
