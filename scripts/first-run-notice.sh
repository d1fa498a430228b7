#!/usr/bin/env bash
# Says up front how long `make demo` / `make test` will take when the pinned control plane is not
# built yet (the first run on a machine), so nobody takes a long silent build for a hang.
# Prints nothing when the control plane is already cached.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools=$root/e2e/tools
# The cache key of e2e/tools/build.sh: the pinned versions and the build script itself.
key=$(cat "$tools/go.mod" "$tools/go.sum" "$tools/etcd/go.mod" "$tools/etcd/go.sum" "$tools/build.sh" |
  sha256sum | cut -c1-16)
dest=${TPUJOB_TOOLS_CACHE:-$HOME/.cache/tpujob-operator/tools}/$key/bin
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm; do
  [[ -x $dest/$b ]] || {
    cat >&2 <<MSG
[make $1] First run on this machine: the pinned control plane (etcd, kube-apiserver,
[make $1] kube-controller-manager, kube-scheduler, kubectl, KWOK, Helm) is built from the Go
[make $1] module proxy into ${dest%/bin}. That takes about 15-40 minutes on 2 cores,
[make $1] then about 8 minutes to compile the operator and its tests; each step is printed
[make $1] with the time elapsed. Later runs reuse both and start in seconds.
MSG
    if [[ $1 == test ]]; then
      cat >&2 <<MSG
[make test] While the end-to-end tests run, the real node's kubelet, kube-proxy and CoreDNS
[make test] (a few minutes) and the project image (scripts/build-image.sh, about 4 minutes)
[make test] are built in the background too, for the real-node tests at the end.
MSG
    fi
    exit 0
  }
done
