#!/usr/bin/env bash
# Builds the KWOK the test clusters run (sigs.k8s.io/kwok, cmd/kwok, at the version
# e2e/tools/build.sh pins) from the Go module proxy with delete-by-uid.patch applied, and caches
# it outside the repository, keyed by this script and the patch. Prints the directory holding
# the binary `kwok`; e2e/cluster runs it in place of e2e/tools/build.sh's unpatched one.
#
# Why the patch: KWOK deletes a pod whose deletionTimestamp it saw by name alone, without the
# UID precondition a kubelet sends. When its watch lags (hundreds of pods deleted at once), that
# delete can land on a newer pod of the same name created meanwhile: a slice recovery's kept
# pods, recreated under their old names on their old nodes, were deleted again and again, every
# few seconds, and an 8 x 32-host job never had its next attempt Running. With the patch KWOK
# deletes only the pod it saw (a conflict or a pod already gone is the end of it), as a kubelet.
#
# A fresh build takes about 3 minutes on 2 cores; a cached one returns at once.
# Environment:
#   TPUJOB_TOOLS_CACHE  cache root (default: $HOME/.cache/tpujob-operator/tools)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KWOK_VERSION=$(sed -n 's/^KWOK_VERSION=//p' "$here/../build.sh")
[[ -n $KWOK_VERSION ]] || { echo "kwok/build.sh: no KWOK_VERSION in ../build.sh" >&2; exit 1; }
key=$(cat "$here/build.sh" "$here/delete-by-uid.patch" <(echo "$KWOK_VERSION") | sha256sum | cut -c1-16)
root=${TPUJOB_TOOLS_CACHE:-$HOME/.cache/tpujob-operator/tools}
dest="$root/kwok-$key"

complete() { [[ -x "$dest/bin/kwok" ]]; }
if complete; then
  echo "$dest/bin"
  exit 0
fi
command -v go >/dev/null || { echo "kwok/build.sh: Go is required to build KWOK" >&2; exit 1; }
mkdir -p "$dest/bin"
# One build at a time: `make test` starts one in the background and every shard's `e2e/cluster
# up` asks for it; they wait here rather than build copies.
exec 9>"$dest/build.lock"
flock 9
if complete; then
  echo "$dest/bin"
  exit 0
fi
started=$SECONDS
log() { printf '[kwok %02d:%02d] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*" >&2; }

log "building kwok (sigs.k8s.io/kwok@$KWOK_VERSION, delete-by-uid.patch) into $dest (first time only; about 3 minutes on 2 cores)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -n $src && -d $src/cmd/kwok ]] || { echo "kwok/build.sh: could not download sigs.k8s.io/kwok@$KWOK_VERSION" >&2; exit 1; }
# The module cache is read-only; patch and build a writable copy.
cp -r "$src" "$work/kwok" && chmod -R u+w "$work/kwok"
(cd "$work/kwok" && git apply "$here/delete-by-uid.patch")
log "sources patched; compiling ./cmd/kwok"
(cd "$work/kwok" && GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false" CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
  -o "$dest/bin/kwok.tmp" ./cmd/kwok)
mv "$dest/bin/kwok.tmp" "$dest/bin/kwok"
log "done"
complete || { echo "kwok/build.sh: kwok is missing in $dest/bin" >&2; exit 1; }
echo "$dest/bin"
