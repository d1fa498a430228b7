# shellcheck shell=bash
# The real node of the local cluster (`e2e/cluster up --real-node`), sourced by e2e/cluster.
#
# One node whose pods run as real containers: Debian's containerd (CRI, overlayfs snapshotter) and
# runc, the kubelet and kube-proxy (iptables mode) of the pinned Kubernetes release, Debian's CNI
# plugins (bridge + host-local + loopback; no portmap: hostPorts would need chains shared with
# every other CNI user of the host) and CoreDNS answering cluster names only.
# e2e/tools/node/build.sh builds and caches the binaries, the pause image and a busybox test image.
#
# The node is a one-host TPU pool as GKE makes them: the labels of a v5e 2x2 host
# (cloud.google.com/gke-tpu-accelerator, -topology, gke-nodepool) and the taint
# google.com/tpu=present:NoSchedule, and a fake TPU device plugin (e2e/tools/node/tpu-device-plugin)
# registering 4 chips of google.com/tpu with the kubelet. Its device nodes live under DIR/node/tpu/dev;
# chip numbers written to DIR/node/tpu/unhealthy are reported Unhealthy (and their device nodes
# vanish), those in DIR/node/tpu/hidden are left out of the containers' devices.
#
# Containment, so that `down` can leave nothing behind:
#   - containerd and the kubelet run in a private mount namespace held by one process
#     (DIR/node/mount-namespace): every overlay, shm, volume and netns mount of a pod lives there
#     and goes with it;
#   - every pod process lives under the cgroup /tpujob-e2e (each v1 hierarchy), so `down` finds
#     and kills them even after a crash, then removes the cgroups;
#   - pods get network namespaces on the bridge tpujob0 (10.250.0.0/24, the host is 10.250.0.1);
#     a netns is freed with its last process and mount, its veth with it;
#   - kube-proxy's rules are removed with `kube-proxy --cleanup` and the KUBE-* chains it or the
#     kubelet leave by name (a host running another Kubernetes node is not supported), the bridge
#     is deleted and net.ipv4.ip_forward gets its old value back. The CNI bridge plugin adds no
#     iptables rule here (ipMasq off).
# The API server listens on every address (the pods reach it at 10.250.0.1 through the
# `kubernetes` Service); nothing here sends traffic anywhere but loopback and the bridge.

REAL_NODE_NAME=tpujob-real-0
REAL_BRIDGE=tpujob0
REAL_SUBNET=10.250.0.0/24
REAL_GATEWAY=10.250.0.1
REAL_CGROUP=tpujob-e2e
REAL_DIR=$DIR/node
REAL_MARKER=$REAL_DIR/enabled
# shellcheck disable=SC2034 # used by e2e/cluster
NODE_COMPONENTS=(mount-namespace containerd kubelet kube-proxy coredns tpu-device-plugin)
REAL_TPU_ACCELERATOR=tpu-v5-lite-podslice
REAL_TPU_TOPOLOGY=2x2
REAL_TPU_CHIPS=4
# The same host by its TPU type name (one v5e host of 2x2: v5litepod-4).
REAL_TPU_TYPE=v5litepod-4
REAL_NODE_POOL=tpujob-real
REAL_TPU_DIR=$REAL_DIR/tpu
CONTAINERD_SOCKET=$REAL_DIR/containerd/containerd.sock

# real_node_wanted: --real-node was asked for, by this command or an earlier up (until down).
real_node_wanted() { ((WITH_REAL_NODE)) || [[ -f $REAL_MARKER ]]; }

# real_node_tools: the directory made by e2e/tools/node/build.sh (bin/, images/).
real_node_tools() {
  local dir
  dir=$("$REPO_ROOT/e2e/tools/node/build.sh") || die "e2e/tools/node/build.sh failed"
  echo "$dir"
}

# real_node_check: the machine can run it (root, the packages, the cgroup v1 hierarchies, a free
# bridge name).
real_node_check() {
  local c
  (($(id -u) == 0)) || die "--real-node needs root (containerd, cgroups, network namespaces)"
  for c in containerd runc containerd-shim-runc-v2 ctr iptables ip unshare nsenter; do
    command -v "$c" >/dev/null || die "--real-node needs $c (run: make deps)"
  done
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
    die "--real-node needs the CNI plugins in /usr/lib/cni (package containernetworking-plugins; run: make deps)"
  [[ -d /sys/fs/cgroup/memory && -d /sys/fs/cgroup/pids ]] ||
    die "--real-node expects cgroup v1 hierarchies under /sys/fs/cgroup (memory, pids, ...)"
  # The longest unix socket path of the node (108 bytes at most, NUL included).
  local socket=$REAL_DIR/kubelet/device-plugins/tpujob-fake-tpu.sock
  ((${#socket} < 108)) || die "--dir is too long for the node's unix sockets ($socket: ${#socket} bytes, at most 107)"
  if ip link show "$REAL_BRIDGE" >/dev/null 2>&1 && [[ ! -f $REAL_DIR/bridge ]]; then
    die "bridge $REAL_BRIDGE exists but was not made for $DIR (another cluster with a real node? run its down)"
  fi
}

# cgroup_dirs: the /tpujob-e2e cgroup of every v1 hierarchy.
cgroup_dirs() {
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -f ${h}cgroup.procs && $h != */unified/ ]] || continue
    echo "${h}$REAL_CGROUP"
  done
}

# cgroup_pids: every process in the pods' cgroups.
cgroup_pids() {
  local d
  for d in $(cgroup_dirs); do
    [[ -d $d ]] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -un
}

real_node_cert() {
  local name=$1 cn=$2 org=$3
  cert "$name" "$cn" "$org" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
}

# node_kubeconfig FILE USER: a kubeconfig for a node component, certificates by path.
node_kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tpujob-e2e
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: tpujob-e2e
  context: {cluster: tpujob-e2e, user: $2}
current-context: tpujob-e2e
EOF
  chmod 600 "$1"
}

# real_node_configure TOOLS: the configuration files and arguments of the node's components.
real_node_configure() {
  local tools=$1 ns_pid=$2
  # shellcheck disable=SC1091
  source "$tools/images/images.env"
  mkdir -p "$REAL_DIR/containerd" "$REAL_DIR/cni/net.d" "$REAL_DIR/cni/ipam" "$REAL_DIR/pod-logs"
  cat >"$REAL_DIR/containerd.toml" <<EOF
version = 2
root = "$REAL_DIR/containerd/root"
state = "$REAL_DIR/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$CONTAINERD_SOCKET"
[ttrpc]
  address = "$CONTAINERD_SOCKET.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # No CAP_SYS_RESOURCE here: lowering a process's oom_score_adj would fail every sandbox.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$REAL_DIR/cni/net.d"
EOF
  cat >"$REAL_DIR/cni/net.d/10-tpujob-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "tpujob-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "$REAL_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$REAL_DIR/cni/ipam",
              "ranges": [[{"subnet": "$REAL_SUBNET", "gateway": "$REAL_GATEWAY"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
EOF
  node_kubeconfig "$REAL_DIR/kubelet.kubeconfig" kubelet
  node_kubeconfig "$REAL_DIR/kube-proxy.kubeconfig" kube-proxy
  node_kubeconfig "$REAL_DIR/coredns.kubeconfig" coredns
  cat >"$REAL_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 only on these machines, and no systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$REAL_CGROUP
address: $REAL_GATEWAY
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
clusterDNS: [$REAL_GATEWAY]
resolvConf: ""
containerRuntimeEndpoint: unix://$CONTAINERD_SOCKET
podLogsDir: $REAL_DIR/pod-logs
failSwapOn: false
enforceNodeAllocatable: []
# A shared machine: never evict for the host's disk or memory, never collect images.
evictionHard: {"memory.available": "0%", "nodefs.available": "0%", "imagefs.available": "0%", "nodefs.inodesFree": "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
makeIPTablesUtilChains: false
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
EOF
  cat >"$REAL_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $REAL_DIR/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $REAL_NODE_NAME
clusterCIDR: $REAL_SUBNET
detectLocalMode: ClusterCIDR
bindAddress: $REAL_GATEWAY
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
nodePortAddresses: [$REAL_GATEWAY/32]
# Leave the host's conntrack sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  # Cluster names only: no forward plugin, so every other name is REFUSED.
  cat >"$REAL_DIR/Corefile" <<EOF
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $REAL_GATEWAY
    errors
    health 127.0.0.1:$DNS_HEALTH_PORT
    ready 127.0.0.1:$DNS_READY_PORT
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $REAL_DIR/coredns.kubeconfig
        pods insecure
    }
    cache 5
}
EOF
  local -a extra=()
  mapfile -d '' -t extra < <(extra_args TPUJOB_E2E_CONTAINERD_ARGS)
  write_args containerd nsenter --mount="/proc/$ns_pid/ns/mnt" -- \
    containerd --config "$REAL_DIR/containerd.toml" "${extra[@]}"
  mapfile -d '' -t extra < <(extra_args TPUJOB_E2E_KUBELET_ARGS)
  write_args kubelet nsenter --mount="/proc/$ns_pid/ns/mnt" -- \
    "$tools/bin/kubelet" --config="$REAL_DIR/kubelet.yaml" \
    --kubeconfig="$REAL_DIR/kubelet.kubeconfig" --root-dir=/var/lib/kubelet \
    --hostname-override="$REAL_NODE_NAME" --node-ip="$REAL_GATEWAY" \
    --node-labels="tpujob.dev/real-node=true,cloud.google.com/gke-tpu-accelerator=$REAL_TPU_ACCELERATOR,cloud.google.com/gke-tpu-topology=$REAL_TPU_TOPOLOGY,cloud.google.com/gke-nodepool=$REAL_NODE_POOL" \
    --register-with-taints=google.com/tpu=present:NoSchedule "${extra[@]}"
  write_args kube-proxy "$tools/bin/kube-proxy" --config="$REAL_DIR/kube-proxy.yaml"
  write_args coredns "$tools/bin/coredns" -conf "$REAL_DIR/Corefile"
  # The kubelet's device-plugin directory is /var/lib/kubelet/device-plugins in the node's mount
  # namespace, bound from DIR/node/kubelet: the plugin uses the host path.
  mkdir -p "$REAL_TPU_DIR/dev"
  write_args tpu-device-plugin "$tools/bin/tpu-device-plugin" \
    --plugin-dir "$REAL_DIR/kubelet/device-plugins" --chips "$REAL_TPU_CHIPS" \
    --dev-dir "$REAL_TPU_DIR/dev" --unhealthy-file "$REAL_TPU_DIR/unhealthy" \
    --hidden-file "$REAL_TPU_DIR/hidden"
}

# real_node_rbac KUBECTL: what CoreDNS reads (the kubelet and kube-proxy use the built-in roles of
# the groups their certificates name).
real_node_rbac() {
  local out
  out=$("$1" --kubeconfig "$ADMIN_KUBECONFIG.tmp" apply -f - 2>&1 <<'EOF'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "tpujob-e2e:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "tpujob-e2e:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "tpujob-e2e:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "tpujob-e2e:coredns"}
EOF
) || die "could not create CoreDNS's RBAC: $out"
}

# real_node_start: start the node (after the control plane is healthy) and wait until it is Ready
# and DNS answers.
real_node_start() {
  local tools=$1 deadline=$2 kubectl=$3 ns_pid ports
  real_node_check
  mkdir -p "$REAL_DIR"
  touch "$REAL_MARKER"
  read -r -a ports <<<"$(pick_ports 6)"
  KUBELET_PORT=${ports[0]} KUBELET_HEALTHZ_PORT=${ports[1]} PROXY_HEALTHZ_PORT=${ports[2]}
  PROXY_METRICS_PORT=${ports[3]} DNS_HEALTH_PORT=${ports[4]} DNS_READY_PORT=${ports[5]}
  cat >>"$PORTS_ENV" <<EOF
KUBELET_PORT=$KUBELET_PORT
KUBELET_HEALTHZ_PORT=$KUBELET_HEALTHZ_PORT
PROXY_HEALTHZ_PORT=$PROXY_HEALTHZ_PORT
PROXY_METRICS_PORT=$PROXY_METRICS_PORT
DNS_HEALTH_PORT=$DNS_HEALTH_PORT
DNS_READY_PORT=$DNS_READY_PORT
REAL_NODE=$REAL_NODE_NAME
REAL_NODE_TOOLS=$tools
CONTAINERD_SOCKET=$CONTAINERD_SOCKET
REAL_NODE_POOL=$REAL_NODE_POOL
REAL_TPU_ACCELERATOR=$REAL_TPU_ACCELERATOR
REAL_TPU_TOPOLOGY=$REAL_TPU_TOPOLOGY
REAL_TPU_CHIPS=$REAL_TPU_CHIPS
REAL_TPU_TYPE=$REAL_TPU_TYPE
REAL_TPU_DIR=$REAL_TPU_DIR
EOF
  real_node_cert kubelet "system:node:$REAL_NODE_NAME" system:nodes
  real_node_cert kube-proxy system:kube-proxy ""
  real_node_cert coredns tpujob-e2e:coredns ""
  real_node_rbac "$kubectl"

  # The host side: the bridge (made here so the kubelet can bind its address before the first
  # pod), forwarding for Service traffic between pods, the pods' cgroups.
  cat /proc/sys/net/ipv4/ip_forward >"$REAL_DIR/ip_forward"
  ip link add "$REAL_BRIDGE" type bridge
  echo "$DIR" >"$REAL_DIR/bridge"
  ip addr add "$REAL_GATEWAY/${REAL_SUBNET#*/}" dev "$REAL_BRIDGE"
  ip link set "$REAL_BRIDGE" up
  echo 1 >/proc/sys/net/ipv4/ip_forward
  if [[ -w /proc/sys/net/bridge/bridge-nf-call-iptables ]]; then
    echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
  fi
  local d
  for d in $(cgroup_dirs); do mkdir -p "$d"; done

  # The node's private mount namespace: the paths containerd and the kubelet write outside their
  # configured directories (netns files, shim sockets and runc state, the device-plugin socket
  # directory) are mounted over there, so that nothing of the node is left on the host. A mount
  # point that does not exist yet is made here and removed again by down.
  local p
  : >"$REAL_DIR/made-dirs"
  mkdir -p "$REAL_DIR/run-containerd" "$REAL_DIR/kubelet"
  for p in /run/netns /run/containerd /var/lib/kubelet; do
    [[ -d $p ]] || { mkdir -p "$p" && echo "$p" >>"$REAL_DIR/made-dirs"; }
  done
  # shellcheck disable=SC2016 # expanded by that bash
  write_args mount-namespace unshare --mount --propagation private -- bash -c '
    set -e
    mount -t tmpfs -o mode=0755 tmpfs /run/netns
    mount --bind "$1/run-containerd" /run/containerd
    mount --bind "$1/kubelet" /var/lib/kubelet
    exec -a "$0" sleep infinity' "$REAL_DIR/mount-namespace" "$REAL_DIR"
  launch mount-namespace
  ns_pid=$(pid_of mount-namespace)
  # Ready once it has made its mounts and become `sleep` under its own name.
  local i
  for ((i = 0; i < 200; i++)); do
    [[ $(tr '\0' ' ' <"/proc/$ns_pid/cmdline" 2>/dev/null) == "$REAL_DIR/mount-namespace "* ]] && break
    # Gone, or exited and not yet reaped. Not `running`: while unshare and bash exec the next
    # program, the command line reads empty for a moment, longer on a loaded machine.
    if ! kill -0 "$ns_pid" 2>/dev/null || [[ $(cut -d' ' -f3 "/proc/$ns_pid/stat" 2>/dev/null) == Z ]]; then
      fail_component mount-namespace "could not make the node's mounts"
    fi
    sleep 0.05
  done
  ((i < 200)) || fail_component mount-namespace "timed out making the node's mounts"
  real_node_configure "$tools" "$ns_pid"

  log "starting containerd (socket $CONTAINERD_SOCKET)"
  launch containerd
  wait_healthy "$deadline" containerd containerd
  local image
  for image in "$tools"/images/*.oci.tar; do real_node_import "$image"; done
  log "starting kubelet, kube-proxy, coredns and the TPU device plugin for node $REAL_NODE_NAME ($REAL_GATEWAY)"
  launch kubelet
  launch kube-proxy
  launch coredns
  launch tpu-device-plugin
  wait_healthy "$deadline" node-ready kubelet containerd kube-apiserver
  wait_healthy "$deadline" kube-proxy kube-proxy
  wait_healthy "$deadline" coredns coredns
  wait_healthy "$deadline" tpu-device-plugin tpu-device-plugin kubelet
  log "node $REAL_NODE_NAME Ready"
}

# real_node_import ARCHIVE: load an OCI or docker archive into the node's containerd.
real_node_import() {
  local out
  out=$(ctr --address "$CONTAINERD_SOCKET" -n k8s.io images import --all-platforms "$1" 2>&1) ||
    die "could not import $1 into the node's containerd: $out"
  log "imported $(sed -n 's/^unpacking \([^ ]*\) .*/\1/p' <<<"$out" | tr '\n' ' ')"
}

real_node_health() {
  local out
  case $1 in
    containerd) ctr --address "$CONTAINERD_SOCKET" version >/dev/null 2>&1 ;;
    kubelet) out=$(curl -sS --noproxy '*' --max-time 3 "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz" 2>/dev/null) && [[ $out == ok ]] ;;
    node-ready)
      out=$(curl_api "https://127.0.0.1:$APISERVER_PORT/api/v1/nodes/$REAL_NODE_NAME" 2>/dev/null) || return 1
      python3 -c 'import json,sys; c=[x for x in json.load(sys.stdin)["status"].get("conditions",[]) if x["type"]=="Ready"]; sys.exit(0 if c and c[0]["status"]=="True" else 1)' <<<"$out" 2>/dev/null
      ;;
    kube-proxy) curl -sS --noproxy '*' --max-time 3 "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz" >/dev/null 2>&1 ;;
    coredns) out=$(curl -sS --noproxy '*' --max-time 3 "http://127.0.0.1:$DNS_READY_PORT/ready" 2>/dev/null) && [[ $out == OK ]] ;;
    mount-namespace) running mount-namespace ;;
    tpu-device-plugin)  # the kubelet counts every chip as allocatable
      running tpu-device-plugin || return 1
      out=$(curl_api "https://127.0.0.1:$APISERVER_PORT/api/v1/nodes/$REAL_NODE_NAME" 2>/dev/null) || return 1
      python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["status"].get("allocatable",{}).get("google.com/tpu")==sys.argv[1] else 1)' "$REAL_TPU_CHIPS" <<<"$out" 2>/dev/null
      ;;
    *) return 1 ;;
  esac
}

real_node_endpoint() {
  case $1 in
    containerd) echo "unix://$CONTAINERD_SOCKET" ;;
    kubelet) echo "https://$REAL_GATEWAY:${KUBELET_PORT:-?} (node $REAL_NODE_NAME)" ;;
    kube-proxy) echo "http://127.0.0.1:${PROXY_HEALTHZ_PORT:-?}/healthz" ;;
    coredns) echo "$REAL_GATEWAY:53 (ready: http://127.0.0.1:${DNS_READY_PORT:-?}/ready)" ;;
    mount-namespace) echo "/proc/$(pid_of mount-namespace)/ns/mnt" ;;
    tpu-device-plugin) echo "google.com/tpu x$REAL_TPU_CHIPS (devices $REAL_TPU_DIR/dev)" ;;
  esac
}

# node_pids: the processes whose command line mentions the node's directory (containerd, its
# shims, the kubelet, ...).
node_pids() {
  local DIR=$REAL_DIR
  stray_pids
}

# real_node_stop: stop the node and undo everything it changed on the host. Safe to run when
# nothing runs, or after a crash or kill -9 of any part.
real_node_stop() {
  [[ -d $REAL_DIR ]] || return 0
  local grace=${TPUJOB_E2E_STOP_GRACE:-5} name pid i
  local -a pids=()
  # The kubelet first, so that it restarts nothing; then the pods' processes; then containerd, its
  # shims and the mount namespace with every mount of the node.
  for name in kubelet kube-proxy coredns tpu-device-plugin; do
    pid=$(pid_of "$name")
    [[ -n $pid ]] && mentions_dir "$pid" && pids+=("$pid")
  done
  if ((${#pids[@]})); then
    log "stopping the node's kubelet, kube-proxy, coredns and device plugin (${pids[*]})"
    terminate "$grace" "${pids[@]}"
  fi
  for ((i = 0; i < 100; i++)); do
    mapfile -t pids < <(cgroup_pids)
    ((${#pids[@]})) || break
    ((i == 0)) && log "killing ${#pids[@]} pod process(es)"
    kill -KILL "${pids[@]}" 2>/dev/null || true
    sleep 0.05
  done
  ((${#pids[@]} == 0)) || { log "pod processes still running: ${pids[*]}"; return 1; }
  mapfile -t pids < <(node_pids)
  if ((${#pids[@]})); then
    log "stopping containerd, its shims and the node's mount namespace (${pids[*]})"
    terminate "$grace" "${pids[@]}"
  fi
  local d
  for d in $(cgroup_dirs); do
    [[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    [[ -d $d ]] && { log "could not remove cgroup $d"; return 1; }
  done
  if [[ -f $REAL_DIR/bridge ]]; then
    local tools
    tools=$(sed -n 's/^REAL_NODE_TOOLS=//p' "$PORTS_ENV" 2>/dev/null | tail -1)
    if [[ -x $tools/bin/kube-proxy ]]; then
      "$tools/bin/kube-proxy" --cleanup >>"$LOGS/kube-proxy.log" 2>&1 || true
    fi
    real_node_flush_chains
    ip link del "$REAL_BRIDGE" 2>/dev/null || true
    if [[ -s $REAL_DIR/ip_forward ]]; then
      cat "$REAL_DIR/ip_forward" >/proc/sys/net/ipv4/ip_forward
    fi
    rm -f "$REAL_DIR/bridge"
  fi
  if [[ -f $REAL_DIR/made-dirs ]]; then
    local made
    while read -r made; do rmdir "$made" 2>/dev/null || true; done < <(sort -r "$REAL_DIR/made-dirs")
  fi
  rm -rf "$REAL_DIR"
}

# real_node_flush_chains: remove what kube-proxy --cleanup leaves (it keeps chains it did not
# create in this run, and the kubelet's KUBE-FIREWALL and canaries), and any rule naming the
# node's bridge or subnet.
real_node_flush_chains() {
  local cmd table chain rule
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for table in nat filter mangle; do
      while read -r rule; do
        [[ -n $rule ]] || continue
        # shellcheck disable=SC2086
        eval "$cmd -t $table ${rule/-A/-D}" 2>/dev/null || true
      done < <("$cmd" -t "$table" -S 2>/dev/null |
        grep -E "^-A [A-Z]+ .*(-j KUBE-|$REAL_BRIDGE|${REAL_SUBNET%.*/*}\.)" || true)
      for chain in $("$cmd" -t "$table" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[^ ]*\)$/\1/p'); do
        "$cmd" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$cmd" -t "$table" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[^ ]*\)$/\1/p'); do
        "$cmd" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# real_node_leftovers: what a stopped node must not leave on the host, one line each (empty when
# clean). The self-test checks it after down.
real_node_leftovers() {
  local d
  for d in $(cgroup_dirs); do [[ -d $d ]] && echo "cgroup $d"; done
  ip link show "$REAL_BRIDGE" >/dev/null 2>&1 && echo "bridge $REAL_BRIDGE"
  ip -o link show type veth 2>/dev/null | grep -q "master $REAL_BRIDGE" && echo "veth on $REAL_BRIDGE"
  grep -F " $DIR/" /proc/self/mountinfo | sed 's/^/mount /'
  { iptables-save 2>/dev/null; ip6tables-save 2>/dev/null; } |
    grep -E "KUBE-|$REAL_BRIDGE|${REAL_SUBNET%.*/*}\." | sed 's/^/iptables /' | head -5
  ip netns list 2>/dev/null | grep '^cni-' | sed 's/^/netns /'
  [[ -z ${IP_FORWARD_BEFORE:-} || $(</proc/sys/net/ipv4/ip_forward) == "$IP_FORWARD_BEFORE" ]] ||
    echo "net.ipv4.ip_forward $(</proc/sys/net/ipv4/ip_forward), was $IP_FORWARD_BEFORE"
  [[ -d $REAL_DIR ]] && echo "directory $REAL_DIR"
  return 0
}
