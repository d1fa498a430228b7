#!/usr/bin/env bash
# Smoke test of `e2e/cluster up --real-node`: the node registers and is Ready; real containers run
# on it; cluster DNS resolves a Service, a headless Service's pod name and nothing outside the
# cluster; a Service's ClusterIP reaches its pod through kube-proxy and the `kubernetes` Service
# reaches the API server; `kubectl logs` and `kubectl exec` go through the kubelet; after kill -9 of
# containerd and the kubelet, `up` brings the node back; the node is a one-host TPU pool (GKE's
# labels and taint) whose fake device plugin hands a container four /dev/accel<N> and GKE's
# variables, reports a chip marked unhealthy and registers again after the kubelet restarts;
# a second node, the spare (cordoned, its own pool), runs pods that reach the first one's;
# `down` leaves no process, mount, cgroup, netns, veth, bridge or iptables rule behind and restores
# net.ipv4.ip_forward.
#
# Usage: e2e/lib/real_node_selftest.sh [DIR]   (default: a fresh directory under /tmp)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster=$here/../cluster
dir=${1:-$(mktemp -d /tmp/tpujob-real-node-selftest.XXXXXX)}
dir=$(realpath -m -- "$dir")
fail() {
  printf 'SELFTEST FAILED: %s\n' "$*" >&2
  [[ -n ${kubeconfig:-} ]] && k get pods -A -o wide >&2 2>/dev/null
  exit 1
}
cleanup() { "$cluster" down --dir "$dir" >/dev/null 2>&1 || true; }
trap cleanup EXIT
# shellcheck source=e2e/lib/selftest_common.sh
source "$here/selftest_common.sh"

forward_before=$(</proc/sys/net/ipv4/ip_forward)

step "up --real-node (cold)"
t=$(ms)
kubeconfig=$("$cluster" up --real-node --dir "$dir" </dev/null)
echo "up took $(($(ms) - t)) ms" >&2
# shellcheck disable=SC1091
source "$dir/ports.env"
# shellcheck disable=SC1091
source "$REAL_NODE_TOOLS/images/images.env"
k() { "$KUBECTL" --kubeconfig "$kubeconfig" "$@"; }
[[ $(k get node "$REAL_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]] ||
  fail "node $REAL_NODE is not Ready"
[[ $(k get node "$REAL_NODE" -o jsonpath='{.status.nodeInfo.kubeletVersion}') == v1.* ]] ||
  fail "kubelet version not stamped: $(k get node "$REAL_NODE" -o jsonpath='{.status.nodeInfo.kubeletVersion}')"
"$cluster" status --dir "$dir" >&2 || fail "status does not show every component healthy"

step "a web pod behind a headless Service and a ClusterIP Service, and a client pod"
k apply -f - <<EOF
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{port: 8000}]
---
apiVersion: v1
kind: Service
metadata: {name: websvc}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8000}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, labels: {app: web}}
spec:
  hostname: web-0
  subdomain: web
  tolerations: [{key: google.com/tpu, operator: Exists}]
  containers:
  - name: c
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'mkdir -p /tmp/www && echo hello-from-web > /tmp/www/index.html && exec httpd -f -p 8000 -h /tmp/www']
    readinessProbe:
      tcpSocket: {port: 8000}
      periodSeconds: 1
EOF
wait_for 60 "pod web-0 Ready" k wait --for=condition=Ready pod/web-0 --timeout=1s
# DNS and kube-proxy work from the EndpointSlices: wait until both Services' list web-0 as ready.
for svc in web websvc; do
  wait_for 60 "the EndpointSlice of Service $svc to list web-0" sh -c "'$KUBECTL' --kubeconfig '$kubeconfig' \
    get endpointslices -l kubernetes.io/service-name=$svc \
    -o jsonpath='{.items[*].endpoints[?(@.targetRef.name==\"web-0\")].conditions.ready}' | grep -q true"
done
k apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  restartPolicy: Never
  tolerations: [{key: google.com/tpu, operator: Exists}]
  containers:
  - name: c
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command:
    - sh
    - -c
    - |
      # CoreDNS's own watch may lag the API server a little: a few tries, past its 5 s cache.
      for i in 1 2 3 4 5 6 7 8 9 10; do
        nslookup web-0.web.default.svc.cluster.local 2>&1 | grep -q 'Address: 10.250' && break
        sleep 1
      done
      echo "pod-name: \$(nslookup web-0.web.default.svc.cluster.local 2>&1 | grep -c 'Address: 10.250')"
      echo "headless: \$(timeout 5 wget -q -O- http://web-0.web:8000/)"
      # kube-proxy programs the Service a moment after its EndpointSlice: a few tries.
      for i in 1 2 3 4 5 6 7 8 9 10; do
        timeout 2 wget -q -O- http://websvc/ >/dev/null 2>&1 && break
        sleep 1
      done
      echo "service: \$(timeout 5 wget -q -O- http://websvc/)"
      # Plain HTTP to the API server's TLS port: only the API server answers 400 to that.
      timeout 5 wget -O- http://kubernetes.default.svc:443/ 2>&1 | grep -q '400 Bad Request' &&
        echo "apiserver: reachable"
      echo "outside: \$(nslookup example.com 2>&1 | grep -c REFUSED)"
EOF
wait_for 60 "pod client to finish" sh -c "[ \"\$('$KUBECTL' --kubeconfig '$kubeconfig' get pod client -o jsonpath='{.status.phase}')\" = Succeeded ]"
out=$(k logs client)
echo "$out" >&2
grep -qx 'pod-name: [1-9]' <<<"$out" || fail "web-0.web.default.svc.cluster.local did not resolve to a pod address"
grep -qx 'headless: hello-from-web' <<<"$out" || fail "the pod was not reachable by its headless Service name"
grep -qx 'service: hello-from-web' <<<"$out" || fail "the ClusterIP Service did not reach its pod (kube-proxy)"
grep -qx 'apiserver: reachable' <<<"$out" || fail "the kubernetes Service did not reach the API server"
grep -qx 'outside: [1-9]' <<<"$out" || fail "a name outside the cluster was not refused"

step "the node is a one-host TPU pool with 4 chips from the fake device plugin"
labels=$(k get node "$REAL_NODE" -o jsonpath='{.metadata.labels.cloud\.google\.com/gke-tpu-accelerator} {.metadata.labels.cloud\.google\.com/gke-tpu-topology} {.metadata.labels.cloud\.google\.com/gke-nodepool}')
[[ $labels == "$REAL_TPU_ACCELERATOR $REAL_TPU_TOPOLOGY $REAL_NODE_POOL" ]] || fail "node labels: $labels"
[[ $(k get node "$REAL_NODE" -o jsonpath='{.spec.taints[?(@.key=="google.com/tpu")].effect}') == NoSchedule ]] ||
  fail "no google.com/tpu taint: $(k get node "$REAL_NODE" -o jsonpath='{.spec.taints}')"
tpu() { k get node "$REAL_NODE" -o jsonpath="{.status.$1.google\.com/tpu}"; }
[[ $(tpu capacity)/$(tpu allocatable) == 4/4 ]] || fail "google.com/tpu capacity/allocatable: $(tpu capacity)/$(tpu allocatable)"
# tpu_pod NAME CHIPS SCRIPT: a pod asking for CHIPS chips that runs SCRIPT once.
tpu_pod() {
  k apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  restartPolicy: Never
  tolerations: [{key: google.com/tpu, operator: Exists}]
  containers:
  - name: c
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [sh, -c, '$3']
    resources: {limits: {google.com/tpu: $2}}
EOF
}
# shellcheck disable=SC2016 # expanded in the container
tpu_pod chips 4 'ls /dev | grep "^accel" | tr "\n" " "; echo; echo "visible=$TPU_VISIBLE_CHIPS bounds=$TPU_CHIPS_PER_HOST_BOUNDS type=$TPU_ACCELERATOR_TYPE"; cat /dev/accel0 && echo read-ok'
wait_for 60 "pod chips to finish" sh -c "[ \"\$('$KUBECTL' --kubeconfig '$kubeconfig' get pod chips -o jsonpath='{.status.phase}')\" = Succeeded ]"
out=$(k logs chips)
echo "$out" >&2
[[ $out == *"accel0 accel1 accel2 accel3"* ]] || fail "the container did not get four /dev/accel<N>"
[[ $out == *"visible=0,1,2,3 bounds=2,2,1 type=v5litepod-4"* ]] || fail "the container did not get the TPU variables"
[[ $out == *read-ok* ]] || fail "a device node could not be read"
k delete pod chips --wait=false >/dev/null
# A chip marked unhealthy: the kubelet lowers allocatable, its device node goes.
echo 2 >"$REAL_TPU_DIR/unhealthy"
wait_for 30 "allocatable google.com/tpu to drop to 3" sh -c "[ \"\$('$KUBECTL' --kubeconfig '$kubeconfig' get node $REAL_NODE -o jsonpath='{.status.allocatable.google\.com/tpu}')\" = 3 ]"
[[ ! -e $REAL_TPU_DIR/dev/accel2 ]] || fail "the unhealthy chip's device node is still there"
: >"$REAL_TPU_DIR/unhealthy"
wait_for 30 "allocatable google.com/tpu back at 4" sh -c "[ \"\$('$KUBECTL' --kubeconfig '$kubeconfig' get node $REAL_NODE -o jsonpath='{.status.allocatable.google\.com/tpu}')\" = 4 ]"
[[ -c $REAL_TPU_DIR/dev/accel2 ]] || fail "the recovered chip's device node is missing"

step "the spare node: cordoned, its own pool of 4 chips, and its pods reach the first node's"
[[ $(k get node "$REAL_NODE_1" -o jsonpath='{.spec.unschedulable}') == true ]] ||
  fail "node $REAL_NODE_1 is not cordoned"
labels=$(k get node "$REAL_NODE_1" -o jsonpath='{.metadata.labels.cloud\.google\.com/gke-tpu-topology} {.metadata.labels.cloud\.google\.com/gke-nodepool} {.status.allocatable.google\.com/tpu}')
[[ $labels == "$REAL_TPU_TOPOLOGY $REAL_NODE_1_POOL 4" ]] || fail "node $REAL_NODE_1: $labels"
# Placed by name: a cordon keeps the scheduler away, not a pod that names its node.
k apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: spare}
spec:
  nodeName: $REAL_NODE_1
  restartPolicy: Never
  tolerations: [{key: google.com/tpu, operator: Exists}]
  containers:
  - name: c
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'echo "chips: \$(ls /dev | grep -c "^accel")"; echo "headless: \$(timeout 5 wget -q -O- http://web-0.web:8000/)"']
    resources: {limits: {google.com/tpu: 4}}
EOF
wait_for 60 "pod spare to finish" sh -c "'$KUBECTL' --kubeconfig '$kubeconfig' get pod spare -o jsonpath='{.status.phase}' | grep -qE 'Succeeded|Failed'"
out=$(k logs spare)
echo "$out" >&2
grep -qx 'chips: 4' <<<"$out" || fail "the spare's pod did not get four chips of its own"
grep -qx 'headless: hello-from-web' <<<"$out" || fail "a pod of the spare did not reach web-0 on $REAL_NODE"
[[ $(k get pod web-0 -o jsonpath='{.spec.nodeName}') == "$REAL_NODE" ]] || fail "web-0 is not on $REAL_NODE"

step "kubectl exec goes through the kubelet"
[[ $(k exec web-0 -- cat /tmp/www/index.html) == hello-from-web ]] || fail "kubectl exec failed"

step "the kubelet restarts alone: the running device plugin registers again"
# As after a kubelet upgrade or crash: the new kubelet clears the device-plugin directory, and
# the plugin (the same process) notices the new registration socket, serves again and registers.
plugin_pid=$(<"$dir/pids/tpu-device-plugin.pid")
registrations=$(grep -c 'registered google.com/tpu' "$dir/logs/tpu-device-plugin.log")
kill -KILL "$(<"$dir/pids/kubelet.pid")"
mapfile -d '' -t kubelet_argv <"$dir/args/kubelet"
# shellcheck disable=SC2016 # expanded by that bash
setsid bash -c 'echo $$ >"$0"; exec "$@"' "$dir/pids/kubelet.pid" "${kubelet_argv[@]}" \
  </dev/null >>"$dir/logs/kubelet.log" 2>&1 &
disown
wait_for 60 "the device plugin to register with the new kubelet" sh -c \
  "[ \$(grep -c 'registered google.com/tpu' '$dir/logs/tpu-device-plugin.log') -gt $registrations ]"
[[ $(<"$dir/pids/tpu-device-plugin.pid") == "$plugin_pid" ]] && kill -0 "$plugin_pid" ||
  fail "the device plugin was restarted rather than registering again"
# A pod admitted in the moment between the registration and the plugin's first device list is
# refused by the kubelet (UnexpectedAdmissionError, as on any node right after a kubelet
# restart): such a pod is made again, for up to 60 s.
deadline=$((SECONDS + 60))
while :; do
  # shellcheck disable=SC2016 # expanded in the container
  tpu_pod reregistered 4 'echo chips $(ls /dev | grep -c "^accel")' >/dev/null
  wait_for 60 "pod reregistered to finish" sh -c "'$KUBECTL' --kubeconfig '$kubeconfig' get pod reregistered -o jsonpath='{.status.phase}' | grep -qE 'Succeeded|Failed'"
  [[ $(k get pod reregistered -o jsonpath='{.status.phase}') == Succeeded ]] && break
  reason=$(k get pod reregistered -o jsonpath='{.status.reason}')
  [[ $reason == UnexpectedAdmissionError ]] || fail "pod reregistered failed after the kubelet's restart: $reason"
  ((SECONDS < deadline)) || fail "pods asking for 4 chips were still refused 60 s after the kubelet's restart"
  echo "refused at admission ($reason), once more" >&2
  k delete pod reregistered --wait=true >/dev/null
done
[[ $(k logs reregistered) == "chips 4" ]] || fail "after the kubelet's restart the pod saw: $(k logs reregistered)"

step "kill -9 containerd and the kubelet, then up brings the node back"
kill -KILL "$(cat "$dir/pids/containerd.pid")" "$(cat "$dir/pids/kubelet.pid")"
"$cluster" status --dir "$dir" >/dev/null 2>&1 && fail "status reports healthy with containerd and the kubelet killed"
"$cluster" up --dir "$dir" >/dev/null </dev/null
[[ $(k get node "$REAL_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]] ||
  fail "node $REAL_NODE not Ready after recovery"
# up restarted the node's components, the device plugin among them: a pod asking for every chip
# runs.
# shellcheck disable=SC2016 # expanded in the container
tpu_pod again 4 'echo again $(ls /dev | grep -c "^accel")'
wait_for 60 "a pod with 4 chips to run after recovery" sh -c "[ \"\$('$KUBECTL' --kubeconfig '$kubeconfig' get pod again -o jsonpath='{.status.phase}')\" = Succeeded ]"
[[ $(k logs again) == "again 4" ]] || fail "after the kubelet's restart the pod saw: $(k logs again)"

step "down leaves nothing behind"
k apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: left-running}
spec:
  tolerations: [{key: google.com/tpu, operator: Exists}]
  containers:
  - {name: c, image: $BUSYBOX_IMAGE, imagePullPolicy: Never, command: [sleep, "3600"]}
EOF
wait_for 60 "pod left-running Ready" k wait --for=condition=Ready pod/left-running --timeout=1s
"$cluster" down --dir "$dir" >&2
if pgrep -f -- "$dir/" >/dev/null; then pgrep -af -- "$dir/" >&2; fail "processes left after down"; fi
pgrep -x httpd >/dev/null && fail "a pod's process survived down"
left=$(
  # shellcheck disable=SC2034 # read by real_node.sh
  DIR=$dir IP_FORWARD_BEFORE=$forward_before
  # shellcheck source=e2e/lib/real_node.sh
  source "$here/real_node.sh"
  real_node_leftovers
)
[[ -z $left ]] || fail "left behind after down: $left"
echo "real node self-test passed" >&2
