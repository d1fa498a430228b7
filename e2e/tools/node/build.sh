#!/usr/bin/env bash
# Builds what the real node of the local cluster (`e2e/cluster up --real-node`) runs beside Debian's
# containerd, runc and CNI plugins, and caches it outside the repository, keyed by the pins:
#   bin/kubelet, bin/kube-proxy   the Kubernetes release pinned in ./go.mod (the same as ../go.mod)
#   bin/coredns                   CoreDNS pinned in ../coredns/go.mod, cluster names only
#   bin/pause                     the pod sandbox's process, from the same Kubernetes source
#   images/pause.oci.tar          an OCI image of it (the sandbox image containerd is told to use)
#   bin/tpu-device-plugin         the fake TPU device plugin (./tpu-device-plugin: google.com/tpu)
#   bin/tpu-worker                the test workload (./tpu-worker: a trainer's edges, no TPU)
#   images/busybox.oci.tar        a test image with Debian's static busybox (sh, wget, nslookup)
#   images/worker.oci.tar         the busybox image plus /bin/tpu-worker as its entrypoint
#   images/images.env             their names: PAUSE_IMAGE=... BUSYBOX_IMAGE=... WORKER_IMAGE=...
# Prints the directory holding bin/ and images/.
#
# A fresh build takes about 5 minutes on 2 cores (less when the control plane was just built:
# kubelet shares most packages with kube-apiserver); a cached one returns at once.
# Environment:
#   TPUJOB_TOOLS_CACHE  cache root (default: $HOME/.cache/tpujob-operator/tools)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools=$(cd "$here/.." && pwd)
key=$(cat "$here/go.mod" "$here/go.sum" "$tools/coredns/go.mod" "$tools/coredns/go.sum" \
  "$tools/coredns/main.go" "$here/build.sh" "$here/tpu-device-plugin/main.go" \
  "$here/tpu-worker/main.go" | sha256sum | cut -c1-16)
root=${TPUJOB_TOOLS_CACHE:-$HOME/.cache/tpujob-operator/tools}
dest="$root/node-$key"
outputs=(bin/kubelet bin/kube-proxy bin/coredns bin/pause bin/tpu-device-plugin bin/tpu-worker
  images/pause.oci.tar images/busybox.oci.tar images/worker.oci.tar images/images.env)

complete() {
  local f
  for f in "${outputs[@]}"; do [[ -s "$dest/$f" ]] || return 1; done
}

if complete; then
  echo "$dest"
  exit 0
fi

# One build at a time (make test starts one in the background; e2e/cluster may ask meanwhile).
mkdir -p "$root"
exec 9>"$dest.lock"
flock 9
if complete; then
  echo "$dest"
  exit 0
fi

for c in go gcc buildah; do
  command -v "$c" >/dev/null || { echo "node/build.sh: $c is required (make deps installs it)" >&2; exit 1; }
done
[[ -x /bin/busybox ]] || { echo "node/build.sh: /bin/busybox (Debian busybox-static) is required" >&2; exit 1; }
mkdir -p "$dest/bin" "$dest/images"
started=$SECONDS
log() { printf '[node tools %02d:%02d] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*" >&2; }
# The control plane's flags (../build.sh), so that the packages both build are compiled once.
export GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false" CGO_ENABLED=0

kube_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/go.mod")
[[ -n $kube_version ]] || kube_version=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$here/go.mod")
kube_minor=$(echo "$kube_version" | cut -d. -f2)
kube_ldflags="-s -w"
for v in gitVersion=$kube_version gitMajor=1 gitMinor=$kube_minor gitTreeState=clean \
  buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ); do
  kube_ldflags+=" -X k8s.io/component-base/version.$v"
done

# build DIR OUTPUT PACKAGE LDFLAGS: go build PACKAGE with the versions pinned in DIR.
build() {
  local dir=$1 out=$2 pkg=$3 flags=$4
  [[ -s "$dest/bin/$out" ]] && return 0
  log "building $out ($pkg, pinned in ${dir#"$tools"/})"
  (cd "$dir" && go build -trimpath -ldflags "$flags" -o "$dest/bin/$out.tmp" "$pkg")
  mv "$dest/bin/$out.tmp" "$dest/bin/$out"
}
build "$here" kubelet k8s.io/kubernetes/cmd/kubelet "$kube_ldflags"
build "$here" kube-proxy k8s.io/kubernetes/cmd/kube-proxy "$kube_ldflags"
build "$tools/coredns" coredns . "-s -w"
build "$here" tpu-device-plugin ./tpu-device-plugin "-s -w"
build "$here" tpu-worker ./tpu-worker "-s -w"

if [[ ! -s "$dest/bin/pause" ]]; then
  log "building pause (build/pause/linux/pause.c of k8s.io/kubernetes@$kube_version)"
  src=$(cd "$here" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
  gcc -Os -static -DVERSION="$kube_version" -o "$dest/bin/pause.tmp" "$src"
  strip "$dest/bin/pause.tmp"
  mv "$dest/bin/pause.tmp" "$dest/bin/pause"
fi

# image NAME ARCHIVE FILE:PATH... -- CONFIG...: a one-layer image made of the given files, exported
# as an OCI archive.
image() {
  local name=$1 archive=$2 ctr spec
  shift 2
  [[ -s $archive ]] && return 0
  log "making image $name"
  ctr=$(buildah from scratch)
  while (($#)) && [[ $1 != -- ]]; do
    spec=$1
    buildah copy --quiet "$ctr" "${spec%%:*}" "${spec#*:}" >/dev/null
    shift
  done
  shift
  buildah config "$@" "$ctr"
  buildah commit --quiet --rm "$ctr" "$name" >/dev/null
  rm -f "$archive.tmp"
  buildah push --quiet "$name" "oci-archive:$archive.tmp:$name"
  mv "$archive.tmp" "$archive"
}
pause_image=localhost/tpujob-e2e/pause:$kube_version
# The version from busybox's banner ("BusyBox v1.35.0 (Debian ...)"), read without a pipe: `head`
# closing it early would end busybox with SIGPIPE, which pipefail turns into a failed build.
bb_banner=$(/bin/busybox 2>&1 || true)
bb_banner=${bb_banner%%$'\n'*}
read -r _ bb_version _ <<<"$bb_banner"
busybox_image=localhost/tpujob-e2e/busybox:$bb_version
image "$pause_image" "$dest/images/pause.oci.tar" \
  "$dest/bin/pause:/pause" -- --entrypoint '["/pause"]' --user 65535:65535
# busybox's applets are links made at build time: no RUN step, so no container is started here.
bb=$(mktemp -d)
mkdir -p "$bb/bin" "$bb/tmp"
cp /bin/busybox "$bb/bin/busybox"
for applet in $(/bin/busybox --list); do [[ $applet == busybox ]] || ln -s busybox "$bb/bin/$applet"; done
image "$busybox_image" "$dest/images/busybox.oci.tar" "$bb/bin:/bin" "$bb/tmp:/tmp" -- --cmd '["sh"]'
# The worker image: busybox (for kubectl exec) and the test workload, keyed like this directory.
worker_image=localhost/tpujob-e2e/tpu-worker:$key
cp "$dest/bin/tpu-worker" "$bb/bin/tpu-worker"
image "$worker_image" "$dest/images/worker.oci.tar" "$bb/bin:/bin" "$bb/tmp:/tmp" -- \
  --entrypoint '["/bin/tpu-worker"]' --cmd '[]'
rm -rf "$bb"
printf 'PAUSE_IMAGE=%s\nBUSYBOX_IMAGE=%s\nWORKER_IMAGE=%s\n' "$pause_image" "$busybox_image" \
  "$worker_image" >"$dest/images/images.env"
log "done"

complete || { echo "node/build.sh: some outputs are missing in $dest" >&2; exit 1; }
echo "$dest"
