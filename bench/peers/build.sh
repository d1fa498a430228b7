#!/usr/bin/env bash
# Builds the Go peers `make bench` measures the operator beside, from the Go module proxy at
# pinned versions, and caches them outside the repository keyed by what pins them. Prints the
# directory holding the binaries. Only `make bench` needs them; `make test` never builds them.
#   informer-peer       client-go shared informers for Pods and Nodes (bench/peers/informer), the
#                       Go baseline for cache memory and sync time
#   jobset-controller   the JobSet controller manager (sigs.k8s.io/jobset), with its CRD beside
#                       the binaries as jobset-crd.yaml, for gang creation beside a JobSet
# A fresh build takes about 5 minutes on 2 cores when the control plane was built before (the
# client-go packages are then in Go's build cache); a cached one returns at once.
# Environment:
#   TPUJOB_PEERS_CACHE  cache root (default: $HOME/.cache/tpujob-operator/peers)
set -euo pipefail
JOBSET_VERSION=v0.12.0

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
key=$(cat "$here/build.sh" "$here"/informer/{go.mod,go.sum,main.go} | sha256sum | cut -c1-16)
root=${TPUJOB_PEERS_CACHE:-$HOME/.cache/tpujob-operator/peers}
dest="$root/$key"
binaries=(informer-peer jobset-controller)

complete() {
  local b
  for b in "${binaries[@]}"; do [[ -x "$dest/bin/$b" ]] || return 1; done
}
if complete; then
  echo "$dest/bin"
  exit 0
fi
command -v go >/dev/null || { echo "peers/build.sh: Go is required to build the peers" >&2; exit 1; }
mkdir -p "$dest/bin"
started=$SECONDS
log() { printf '[peers %02d:%02d] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*" >&2; }
export GOFLAGS=-buildvcs=false CGO_ENABLED=0

if [[ ! -x "$dest/bin/informer-peer" ]]; then
  log "building informer-peer (client-go, pinned in bench/peers/informer/go.mod)"
  (cd "$here/informer" && go build -trimpath -ldflags "-s -w" -o "$dest/bin/informer-peer.tmp" .)
  mv "$dest/bin/informer-peer.tmp" "$dest/bin/informer-peer"
fi
if [[ ! -x "$dest/bin/jobset-controller" ]]; then
  log "building jobset-controller (sigs.k8s.io/jobset@$JOBSET_VERSION); about 4 minutes"
  work=$(mktemp -d)
  src=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/jobset@$JOBSET_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  # The module cache is read-only; build a writable copy.
  cp -r "$src" "$work/jobset" && chmod -R u+w "$work/jobset"
  (cd "$work/jobset" && go build -trimpath -ldflags "-s -w" -o "$dest/bin/jobset-controller.tmp" .)
  cp "$work/jobset/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$dest/bin/jobset-crd.yaml"
  mv "$dest/bin/jobset-controller.tmp" "$dest/bin/jobset-controller"
  rm -rf "$work"
fi
log "done"
complete || { echo "peers/build.sh: some binaries are missing in $dest/bin" >&2; exit 1; }
echo "$dest/bin"
