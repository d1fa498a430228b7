#!/usr/bin/env bash
# A deliberately broken copy of the project image, for the test that a broken image is reported
# with the reason: the entrypoint binary /usr/local/bin/tpujob-operator renamed, everything else
# unchanged. Reads the image archive `make image` wrote and writes another one, tagged
# tpujob-operator:broken-entrypoint (the chart's repository), for `e2e/cluster load-image`.
#
# Usage: e2e/lib/broken_image.sh PROJECT_IMAGE_ARCHIVE OUTPUT_ARCHIVE
set -euo pipefail
(($# == 2)) || { echo "usage: $0 PROJECT_IMAGE_ARCHIVE OUTPUT_ARCHIVE" >&2; exit 2; }
in=$1 out=$2
name=docker.io/library/tpujob-operator:broken-entrypoint
ctr=$(buildah from --quiet --pull-never "oci-archive:$in")
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
root=$(buildah mount "$ctr")
mv "$root/usr/local/bin/tpujob-operator" "$root/usr/local/bin/tpujob-operator.renamed"
buildah umount "$ctr" >/dev/null
buildah commit --quiet "$ctr" "$name" >/dev/null
rm -f "$out"
buildah push --quiet "$name" "oci-archive:$out:$name"
buildah rmi "$name" >/dev/null 2>&1 || true
echo "$out"
