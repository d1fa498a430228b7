#!/usr/bin/env bash
# Builds the Kueue controller manager (sigs.k8s.io/kueue, cmd/kueue) from the Go module proxy at
# a pinned version and caches it outside the repository, keyed by this script (which pins the
# version). Prints the directory holding the binary `kueue`; Kueue's CRDs (every file of the
# module's config/components/crd/bases/) are in ../crds/ from there. Only `e2e/cluster up
# --with-kueue` needs them; the rest of the control plane never builds them.
#
# A fresh build takes about 4.5 minutes on 2 cores; a cached one returns at once. Each step is
# printed on stderr with the time elapsed. The binary carries its real version (GitVersion).
# Environment:
#   TPUJOB_TOOLS_CACHE  cache root (default: $HOME/.cache/tpujob-operator/tools)
set -euo pipefail
KUEUE_VERSION=v0.17.0

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
key=$(sha256sum <"$here/build.sh" | cut -c1-16)
root=${TPUJOB_TOOLS_CACHE:-$HOME/.cache/tpujob-operator/tools}
dest="$root/kueue-$key"

complete() { [[ -x "$dest/bin/kueue" && -s "$dest/crds/kueue.x-k8s.io_workloads.yaml" ]]; }
if complete; then
  echo "$dest/bin"
  exit 0
fi
command -v go >/dev/null || { echo "kueue/build.sh: Go is required to build Kueue" >&2; exit 1; }
mkdir -p "$dest/bin"
# One build at a time: `make test` starts one in the background, and the Kueue tests' `up
# --with-kueue` then waits for it here rather than build a second copy.
exec 9>"$dest/build.lock"
flock 9
if complete; then
  echo "$dest/bin"
  exit 0
fi
started=$SECONDS
log() { printf '[kueue %02d:%02d] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*" >&2; }

log "building kueue (sigs.k8s.io/kueue@$KUEUE_VERSION) into $dest (first time only; about 4.5 minutes on 2 cores)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -n $src && -d $src/cmd/kueue ]] || { echo "kueue/build.sh: could not download sigs.k8s.io/kueue@$KUEUE_VERSION" >&2; exit 1; }
# The module cache is read-only; build a writable copy.
cp -r "$src" "$work/kueue" && chmod -R u+w "$work/kueue"
log "sources in place; compiling ./cmd/kueue"
# The version stamp the upstream release builds set with -X.
(cd "$work/kueue" && GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false" CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
  -o "$dest/bin/kueue.tmp" ./cmd/kueue)
rm -rf "$dest/crds" "$dest/crds.tmp"
mkdir -p "$dest/crds.tmp"
cp "$work/kueue"/config/components/crd/bases/*.yaml "$dest/crds.tmp/"
mv "$dest/crds.tmp" "$dest/crds"
mv "$dest/bin/kueue.tmp" "$dest/bin/kueue"
log "done"
complete || { echo "kueue/build.sh: kueue or its CRDs are missing in $dest/bin" >&2; exit 1; }
echo "$dest/bin"
