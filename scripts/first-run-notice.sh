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
[make $1] module proxy into ${dest%/bin}, beside the first compile of the operator
[make $1] and its tests (through ccache, into ~/.cache/tpujob-operator/ccache). Together
[make $1] that takes about 25 minutes on 2 cores; each step is printed with the time elapsed.
[make $1] Later runs, in this clone or another, reuse both and start in seconds.
MSG
    if [[ $1 == test ]]; then
      cat >&2 <<MSG
[make test] Kueue and the real node's kubelet, kube-proxy and CoreDNS are built after the
[make test] control plane, the sanitizer and fuzz builds after the operator, the project image
[make test] (scripts/build-image.sh) before the end-to-end tests: docs/testing.md says how long
[make test] each part takes.
MSG
    fi
    exit 0
  }
done
