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
# A second node of the same shape, tpujob-real-1, is the spare: its own node pool (tpujob-real-1),
# mount namespace, containerd, kubelet and device plugin (state under DIR/node/n1, chips in
# DIR/node/n1/tpu, which its mount namespace shows at DIR/node/tpu: the hostPath of a node agent
# finds each node's own chips), address 10.250.0.2 on the same bridge, pods under the cgroup /tpujob-e2e/n1,
# and kube-proxy and CoreDNS shared with the first (one host network). It starts cordoned, so that
# nothing lands there unasked: a test that needs two hosts (a job of two one-host slices, shrinking
# to one and growing back) uncordons it, and cordons it again when done. Both nodes' processes
# run on one bridge, so a pod of one reaches a pod of the other directly.
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
REAL_NODE1_NAME=tpujob-real-1
REAL_BRIDGE=tpujob0
REAL_SUBNET=10.250.0.0/24
REAL_GATEWAY=10.250.0.1
REAL_CGROUP=tpujob-e2e
REAL_DIR=$DIR/node
REAL_MARKER=$REAL_DIR/enabled
# shellcheck disable=SC2034 # used by e2e/cluster
NODE_COMPONENTS=(mount-namespace containerd kubelet kube-proxy coredns tpu-device-plugin
  mount-namespace-1 containerd-1 kubelet-1 tpu-device-plugin-1)
REAL_TPU_ACCELERATOR=tpu-v5-lite-podslice
REAL_TPU_TOPOLOGY=2x2
REAL_TPU_CHIPS=4
# The same host by its TPU type name (one v5e host of 2x2: v5litepod-4).
REAL_TPU_TYPE=v5litepod-4
REAL_NODE_POOL=tpujob-real
REAL_NODE1_POOL=tpujob-real-1
REAL_TPU_DIR=$REAL_DIR/tpu
REAL_DIR1=$REAL_DIR/n1
REAL_TPU_DIR1=$REAL_DIR1/tpu
CONTAINERD_SOCKET=$REAL_DIR/containerd/containerd.sock
CONTAINERD1_SOCKET=$REAL_DIR1/containerd/containerd.sock

# node_vars N: what tells node N (0, or 1: the spare) apart, in N_* variables: its state
# directory, name, address, node pool, cgroup (under /$REAL_CGROUP), containerd socket, the
# suffix of its components' names, the kubelet's ports (once picked), its chips' directory and
# the share of the subnet its pods get.
node_vars() {
  if (($1 == 0)); then
    N_DIR=$REAL_DIR N_NAME=$REAL_NODE_NAME N_IP=$REAL_GATEWAY N_POOL=$REAL_NODE_POOL
    N_CGROUP=/$REAL_CGROUP N_SOCKET=$CONTAINERD_SOCKET N_SUFFIX="" N_TPU=$REAL_TPU_DIR
    N_KUBELET_PORT=${KUBELET_PORT:-} N_KUBELET_HEALTHZ_PORT=${KUBELET_HEALTHZ_PORT:-}
    N_RANGE_START=${REAL_SUBNET%.*/*}.10 N_RANGE_END=${REAL_SUBNET%.*/*}.127
  else
    N_DIR=$REAL_DIR1 N_NAME=$REAL_NODE1_NAME N_IP=${REAL_SUBNET%.*/*}.2 N_POOL=$REAL_NODE1_POOL
    N_CGROUP=/$REAL_CGROUP/n1 N_SOCKET=$CONTAINERD1_SOCKET N_SUFFIX=-1 N_TPU=$REAL_TPU_DIR1
    N_KUBELET_PORT=${KUBELET1_PORT:-} N_KUBELET_HEALTHZ_PORT=${KUBELET1_HEALTHZ_PORT:-}
    N_RANGE_START=${REAL_SUBNET%.*/*}.130 N_RANGE_END=${REAL_SUBNET%.*/*}.250
  fi
}

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
  # The longest unix socket path of the nodes (108 bytes at most, NUL included).
  local socket=$REAL_DIR1/kubelet/device-plugins/tpujob-fake-tpu.sock
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

# node_configure N TOOLS NS_PID: the configuration files and arguments of node N's own
# components (containerd, the kubelet, the device plugin), run in the mount namespace NS_PID.
node_configure() {
  local n=$1 tools=$2 ns_pid=$3
  node_vars "$n"
  mkdir -p "$N_DIR/containerd" "$N_DIR/cni/net.d" "$N_DIR/cni/ipam" "$N_DIR/pod-logs"
  cat >"$N_DIR/containerd.toml" <<EOF
version = 2
root = "$N_DIR/containerd/root"
state = "$N_DIR/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$N_SOCKET"
[ttrpc]
  address = "$N_SOCKET.ttrpc"
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
    conf_dir = "$N_DIR/cni/net.d"
EOF
  # One bridge for both nodes; each node's pods take addresses from their own share of it.
  cat >"$N_DIR/cni/net.d/10-tpujob-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "tpujob-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "$REAL_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$N_DIR/cni/ipam",
              "ranges": [[{"subnet": "$REAL_SUBNET", "gateway": "$REAL_GATEWAY",
                           "rangeStart": "$N_RANGE_START", "rangeEnd": "$N_RANGE_END"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
EOF
  node_kubeconfig "$N_DIR/kubelet.kubeconfig" "kubelet$N_SUFFIX"
  cat >"$N_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 only on these machines, and no systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $N_CGROUP
address: $N_IP
port: $N_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $N_KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
clusterDNS: [$REAL_GATEWAY]
resolvConf: ""
containerRuntimeEndpoint: unix://$N_SOCKET
podLogsDir: $N_DIR/pod-logs
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
  local -a extra=()
  mapfile -d '' -t extra < <(extra_args TPUJOB_E2E_CONTAINERD_ARGS)
  write_args "containerd$N_SUFFIX" nsenter --mount="/proc/$ns_pid/ns/mnt" -- \
    containerd --config "$N_DIR/containerd.toml" "${extra[@]}"
  mapfile -d '' -t extra < <(extra_args TPUJOB_E2E_KUBELET_ARGS)
  write_args "kubelet$N_SUFFIX" nsenter --mount="/proc/$ns_pid/ns/mnt" -- \
    "$tools/bin/kubelet" --config="$N_DIR/kubelet.yaml" \
    --kubeconfig="$N_DIR/kubelet.kubeconfig" --root-dir=/var/lib/kubelet \
    --hostname-override="$N_NAME" --node-ip="$N_IP" \
    --node-labels="tpujob.dev/real-node=true,cloud.google.com/gke-tpu-accelerator=$REAL_TPU_ACCELERATOR,cloud.google.com/gke-tpu-topology=$REAL_TPU_TOPOLOGY,cloud.google.com/gke-nodepool=$N_POOL" \
    --register-with-taints=google.com/tpu=present:NoSchedule "${extra[@]}"
  # The kubelet's device-plugin directory is /var/lib/kubelet/device-plugins in the node's mount
  # namespace, bound from N_DIR/kubelet: the plugin uses the host path.
  write_args "tpu-device-plugin$N_SUFFIX" "$tools/bin/tpu-device-plugin" \
    --plugin-dir "$N_DIR/kubelet/device-plugins" --chips "$REAL_TPU_CHIPS" \
    --dev-dir "$N_TPU/dev" --unhealthy-file "$N_TPU/unhealthy" \
    --hidden-file "$N_TPU/hidden"
}

# real_node_configure TOOLS NS_PID NS1_PID: the configuration files and arguments of the
# nodes' components (kube-proxy and CoreDNS serve both).
real_node_configure() {
  local tools=$1
  # shellcheck disable=SC1091
  source "$tools/images/images.env"
  node_configure 0 "$tools" "$2"
  node_configure 1 "$tools" "$3"
  node_kubeconfig "$REAL_DIR/kube-proxy.kubeconfig" kube-proxy
  node_kubeconfig "$REAL_DIR/coredns.kubeconfig" coredns
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
  write_args kube-proxy "$tools/bin/kube-proxy" --config="$REAL_DIR/kube-proxy.yaml"
  write_args coredns "$tools/bin/coredns" -conf "$REAL_DIR/Corefile"
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

# node_mount_namespace N: node N's private mount namespace, made and running; sets N_NS_PID.
# The paths containerd and the kubelet write outside their configured directories (netns files,
# shim sockets and runc state, the device-plugin socket directory, which the kubelet does not let
# one move) are mounted over there, so that nothing of the node is left on the host and the two
# nodes do not meet. A mount point that does not exist yet is made here and removed again by down.
node_mount_namespace() {
  local name p i
  node_vars "$1"
  name=mount-namespace$N_SUFFIX
  mkdir -p "$N_DIR/run-containerd" "$N_DIR/kubelet" "$N_TPU/dev" "$REAL_TPU_DIR"
  for p in /run/netns /run/containerd /var/lib/kubelet; do
    [[ -d $p ]] || { mkdir -p "$p" && echo "$p" >>"$REAL_DIR/made-dirs"; }
  done
  # The spare's chips are where the first node's are, as on machines of one shape: a hostPath of
  # DIR/node/tpu (the node agent's) finds each node's own.
  # shellcheck disable=SC2016 # expanded by that bash
  write_args "$name" unshare --mount --propagation private -- bash -c '
    set -e
    mount -t tmpfs -o mode=0755 tmpfs /run/netns
    mount --bind "$1/run-containerd" /run/containerd
    mount --bind "$1/kubelet" /var/lib/kubelet
    [[ $2 == "$3" ]] || mount --bind "$2" "$3"
    exec -a "$0" sleep infinity' "$N_DIR/mount-namespace" "$N_DIR" "$N_TPU" "$REAL_TPU_DIR"
  launch "$name"
  N_NS_PID=$(pid_of "$name")
  # Ready once it has made its mounts and become `sleep` under its own name.
  for ((i = 0; i < 200; i++)); do
    [[ $(tr '\0' ' ' <"/proc/$N_NS_PID/cmdline" 2>/dev/null) == "$N_DIR/mount-namespace "* ]] && break
    # Gone, or exited and not yet reaped. Not `running`: while unshare and bash exec the next
    # program, the command line reads empty for a moment, longer on a loaded machine.
    if ! kill -0 "$N_NS_PID" 2>/dev/null || [[ $(cut -d' ' -f3 "/proc/$N_NS_PID/stat" 2>/dev/null) == Z ]]; then
      fail_component "$name" "could not make the node's mounts"
    fi
    sleep 0.05
  done
  ((i < 200)) || fail_component "$name" "timed out making the node's mounts"
}

# real_node_start: start the nodes (after the control plane is healthy) and wait until both are
# Ready, DNS answers and the spare is cordoned.
real_node_start() {
  local tools=$1 deadline=$2 kubectl=$3 ns_pid ns1_pid ports
  real_node_check
  mkdir -p "$REAL_DIR" "$REAL_DIR1"
  touch "$REAL_MARKER"
  read -r -a ports <<<"$(pick_ports 8)"
  KUBELET_PORT=${ports[0]} KUBELET_HEALTHZ_PORT=${ports[1]} PROXY_HEALTHZ_PORT=${ports[2]}
  PROXY_METRICS_PORT=${ports[3]} DNS_HEALTH_PORT=${ports[4]} DNS_READY_PORT=${ports[5]}
  KUBELET1_PORT=${ports[6]} KUBELET1_HEALTHZ_PORT=${ports[7]}
  cat >>"$PORTS_ENV" <<EOF
KUBELET_PORT=$KUBELET_PORT
KUBELET_HEALTHZ_PORT=$KUBELET_HEALTHZ_PORT
KUBELET1_PORT=$KUBELET1_PORT
KUBELET1_HEALTHZ_PORT=$KUBELET1_HEALTHZ_PORT
PROXY_HEALTHZ_PORT=$PROXY_HEALTHZ_PORT
PROXY_METRICS_PORT=$PROXY_METRICS_PORT
DNS_HEALTH_PORT=$DNS_HEALTH_PORT
DNS_READY_PORT=$DNS_READY_PORT
REAL_NODE=$REAL_NODE_NAME
REAL_NODE_1=$REAL_NODE1_NAME
REAL_NODE_TOOLS=$tools
CONTAINERD_SOCKET=$CONTAINERD_SOCKET
CONTAINERD1_SOCKET=$CONTAINERD1_SOCKET
REAL_NODE_POOL=$REAL_NODE_POOL
REAL_NODE_1_POOL=$REAL_NODE1_POOL
REAL_TPU_ACCELERATOR=$REAL_TPU_ACCELERATOR
REAL_TPU_TOPOLOGY=$REAL_TPU_TOPOLOGY
REAL_TPU_CHIPS=$REAL_TPU_CHIPS
REAL_TPU_TYPE=$REAL_TPU_TYPE
REAL_TPU_DIR=$REAL_TPU_DIR
REAL_TPU_DIR_1=$REAL_TPU_DIR1
EOF
  real_node_cert kubelet "system:node:$REAL_NODE_NAME" system:nodes
  real_node_cert kubelet-1 "system:node:$REAL_NODE1_NAME" system:nodes
  real_node_cert kube-proxy system:kube-proxy ""
  real_node_cert coredns tpujob-e2e:coredns ""
  real_node_rbac "$kubectl"

  # The host side: the bridge with both nodes' addresses (made here so the kubelets can bind
  # them before the first pod), forwarding for Service traffic between pods, the pods' cgroups.
  cat /proc/sys/net/ipv4/ip_forward >"$REAL_DIR/ip_forward"
  ip link add "$REAL_BRIDGE" type bridge
  echo "$DIR" >"$REAL_DIR/bridge"
  ip addr add "$REAL_GATEWAY/${REAL_SUBNET#*/}" dev "$REAL_BRIDGE"
  node_vars 1
  ip addr add "$N_IP/${REAL_SUBNET#*/}" dev "$REAL_BRIDGE"
  ip link set "$REAL_BRIDGE" up
  echo 1 >/proc/sys/net/ipv4/ip_forward
  if [[ -w /proc/sys/net/bridge/bridge-nf-call-iptables ]]; then
    echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
  fi
  local d
  for d in $(cgroup_dirs); do mkdir -p "$d" "$d/n1"; done

  : >"$REAL_DIR/made-dirs"
  node_mount_namespace 0
  ns_pid=$N_NS_PID
  node_mount_namespace 1
  ns1_pid=$N_NS_PID
  real_node_configure "$tools" "$ns_pid" "$ns1_pid"

  log "starting containerd (sockets $CONTAINERD_SOCKET, $CONTAINERD1_SOCKET)"
  launch containerd
  launch containerd-1
  wait_healthy "$deadline" containerd containerd
  wait_healthy "$deadline" containerd-1 containerd-1
  local image
  for image in "$tools"/images/*.oci.tar; do real_node_import "$image"; done
  log "starting the kubelets, kube-proxy, coredns and the TPU device plugins for nodes $REAL_NODE_NAME ($REAL_GATEWAY) and $REAL_NODE1_NAME ($N_IP)"
  launch kubelet
  launch kubelet-1
  launch kube-proxy
  launch coredns
  launch tpu-device-plugin
  launch tpu-device-plugin-1
  wait_healthy "$deadline" node-ready kubelet containerd kube-apiserver
  wait_healthy "$deadline" node-ready-1 kubelet-1 containerd-1 kube-apiserver
  # The spare stays out of the way until a test takes it.
  local out
  out=$("$kubectl" --kubeconfig "$ADMIN_KUBECONFIG.tmp" cordon "$REAL_NODE1_NAME" 2>&1) ||
    die "could not cordon $REAL_NODE1_NAME: $out"
  wait_healthy "$deadline" kube-proxy kube-proxy
  wait_healthy "$deadline" coredns coredns
  wait_healthy "$deadline" tpu-device-plugin tpu-device-plugin kubelet
  wait_healthy "$deadline" tpu-device-plugin-1 tpu-device-plugin-1 kubelet-1
  log "nodes $REAL_NODE_NAME and $REAL_NODE1_NAME (cordoned) Ready"
}

# real_node_import ARCHIVE: load an OCI or docker archive into both nodes' containerd.
real_node_import() {
  local out socket
  for socket in "$CONTAINERD_SOCKET" "$CONTAINERD1_SOCKET"; do
    out=$(ctr --address "$socket" -n k8s.io images import --all-platforms "$1" 2>&1) ||
      die "could not import $1 into the node's containerd ($socket): $out"
  done
  log "imported $(sed -n 's/^unpacking \([^ ]*\) .*/\1/p' <<<"$out" | tr '\n' ' ')"
}

# real_node_health NAME: a node component's check; NAME-1 is the spare's.
real_node_health() {
  local out name=$1
  node_vars 0
  [[ $name == *-1 ]] && { node_vars 1; name=${name%-1}; }
  case $name in
    containerd) ctr --address "$N_SOCKET" version >/dev/null 2>&1 ;;
    kubelet) out=$(curl -sS --noproxy '*' --max-time 3 "http://127.0.0.1:$N_KUBELET_HEALTHZ_PORT/healthz" 2>/dev/null) && [[ $out == ok ]] ;;
    node-ready)
      out=$(curl_api "https://127.0.0.1:$APISERVER_PORT/api/v1/nodes/$N_NAME" 2>/dev/null) || return 1
      python3 -c 'import json,sys; c=[x for x in json.load(sys.stdin)["status"].get("conditions",[]) if x["type"]=="Ready"]; sys.exit(0 if c and c[0]["status"]=="True" else 1)' <<<"$out" 2>/dev/null
      ;;
    kube-proxy) curl -sS --noproxy '*' --max-time 3 "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz" >/dev/null 2>&1 ;;
    coredns) out=$(curl -sS --noproxy '*' --max-time 3 "http://127.0.0.1:$DNS_READY_PORT/ready" 2>/dev/null) && [[ $out == OK ]] ;;
    mount-namespace) running "$1" ;;
    tpu-device-plugin)  # the kubelet counts every chip as allocatable
      running "$1" || return 1
      out=$(curl_api "https://127.0.0.1:$APISERVER_PORT/api/v1/nodes/$N_NAME" 2>/dev/null) || return 1
      python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["status"].get("allocatable",{}).get("google.com/tpu")==sys.argv[1] else 1)' "$REAL_TPU_CHIPS" <<<"$out" 2>/dev/null
      ;;
    *) return 1 ;;
  esac
}

real_node_endpoint() {
  local name=$1
  node_vars 0
  [[ $name == *-1 ]] && { node_vars 1; name=${name%-1}; }
  case $name in
    containerd) echo "unix://$N_SOCKET" ;;
    kubelet) echo "https://$N_IP:${N_KUBELET_PORT:-?} (node $N_NAME)" ;;
    kube-proxy) echo "http://127.0.0.1:${PROXY_HEALTHZ_PORT:-?}/healthz" ;;
    coredns) echo "$REAL_GATEWAY:53 (ready: http://127.0.0.1:${DNS_READY_PORT:-?}/ready)" ;;
    mount-namespace) echo "/proc/$(pid_of "$1")/ns/mnt" ;;
    tpu-device-plugin) echo "google.com/tpu x$REAL_TPU_CHIPS (devices $N_TPU/dev)" ;;
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
  for name in kubelet kubelet-1 kube-proxy coredns tpu-device-plugin tpu-device-plugin-1; do
    pid=$(pid_of "$name")
    [[ -n $pid ]] && mentions_dir "$pid" && pids+=("$pid")
  done
  if ((${#pids[@]})); then
    log "stopping the nodes' kubelets, kube-proxy, coredns and device plugins (${pids[*]})"
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
