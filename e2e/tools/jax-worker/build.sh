#!/usr/bin/env bash
# Builds the jax-worker test image for the real node (`e2e/cluster up --real-node`): Debian
# bookworm with its python3, a venv holding the wheels pinned in ./requirements.txt (jax[cpu],
# orbax-checkpoint and their closure) and ./train.py as the entrypoint (`python3 /app/train.py`).
# Everything is cached outside the repository, without a container registry:
#   jax-wheels-<key>/              the pinned wheels (CPython 3.11, manylinux x86_64), fetched once
#                                  with `pip download`; key: requirements.txt
#   jax-base-<key>.tar             the root file system from `debootstrap --variant=minbase
#                                  --include=python3,python3-venv` (slimmed); key: the code below
#                                  that makes it
#   jax-worker-<key>/jax-worker.oci.tar   the image, named localhost/tpujob-e2e/jax-worker:<key>
#   jax-worker-<key>/images.env           JAX_IMAGE=<that name>
#                                  key: requirements.txt, train.py, this script
# The image gets the wheels with `pip install --no-index --find-links` at build time: nothing is
# fetched while it is made but the Debian packages of the base and the wheels, each once.
# Prints the directory holding jax-worker.oci.tar and images.env (its last line on stdout);
# `e2e/cluster load-image DIR/jax-worker.oci.tar` puts it on the real node.
#
# A first build takes about 3 minutes on 2 cores: the 160 MB of wheels about 5 s, debootstrap
# about 90 s (both once), then the image 1-2 minutes (installing the wheels into the venv, the
# commit and the push); a cached one returns at once. The image is about 870 MB unpacked (jaxlib
# and scipy are most of it), its archive about 250 MB.
# Environment:
#   TPUJOB_TOOLS_CACHE   cache root (default: $HOME/.cache/tpujob-operator/tools)
#   TPUJOB_IMAGE_MIRROR  Debian mirror for the base (default: the one apt uses for bookworm)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${TPUJOB_TOOLS_CACHE:-$HOME/.cache/tpujob-operator/tools}
wheels_key=$(sha256sum <"$here/requirements.txt" | cut -c1-16)
key=$(cat "$here/requirements.txt" "$here/train.py" "$here/build.sh" | sha256sum | cut -c1-16)
wheels="$root/jax-wheels-$wheels_key"
dest="$root/jax-worker-$key"
image_name=localhost/tpujob-e2e/jax-worker:$key
suite=bookworm

complete() { [[ -s "$dest/jax-worker.oci.tar" && -s "$dest/images.env" ]]; }
if complete; then
  echo "$dest"
  exit 0
fi

mkdir -p "$root"
exec 9>"$root/jax-worker.lock"
flock 9
if complete; then
  echo "$dest"
  exit 0
fi

for c in buildah debootstrap pip3; do
  command -v "$c" >/dev/null || { echo "jax-worker/build.sh: $c is required" >&2; exit 1; }
done
started=$SECONDS
log() { printf '[jax-worker %02d:%02d] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*" >&2; }
work=
cleanup() {
  if [[ -n $work ]]; then
    awk -v d="$work/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | xargs -r umount -l || true
    rm -rf --one-file-system "$work"
  fi
  if [[ -n ${ctr:-} ]]; then buildah rm "$ctr" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

# --- the wheels ------------------------------------------------------------------------------
if [[ ! -f "$wheels/.complete" ]]; then
  log "pip download of requirements.txt into $wheels (first time only)"
  rm -rf "$wheels.tmp"
  platforms=()
  for p in manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_27_x86_64 \
    manylinux_2_28_x86_64 manylinux_2_34_x86_64 manylinux_2_36_x86_64; do
    platforms+=(--platform "$p")
  done
  # The file pins the whole closure: --no-deps keeps exactly that set.
  pip3 download --quiet --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
    --abi cp311 --abi abi3 --abi none "${platforms[@]}" -d "$wheels.tmp" -r "$here/requirements.txt" >&2
  cp "$here/requirements.txt" "$wheels.tmp/requirements.txt"
  touch "$wheels.tmp/.complete"
  rm -rf "$wheels"
  mv "$wheels.tmp" "$wheels"
fi

# --- the base root file system ---------------------------------------------------------------
# mirror: the URI apt uses for the suite (deb822 .sources, then one-line lists).
mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk -v s="$1" '/^[ \t]*$/ {u = ""; ok = 0} /^URIs:/ {u = $2} /^Suites:/ {for (i = 2; i <= NF; i++) if ($i == s) ok = 1}
      u != "" && ok {print u; exit}' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    awk -v s="$1" '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }; if ($(i + 1) == s) print $i }' "$f"
  done
}
make_base() {
  local r=$1 m=$2
  debootstrap --variant=minbase --include=python3,python3-venv \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg "$suite" "$r" "$m"
  awk -v d="$r/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | xargs -r umount -l
  rm -rf "$r"/usr/share/{doc,man,info,groff,lintian,locale}/* "${r:?}"/var/lib/apt/lists/* \
    "$r"/var/cache/apt/* "$r"/var/log/* "${r:?}"/dev/* "${r:?}"/run/* "${r:?}"/tmp/*
  : >"$r/etc/machine-id"
  rm -f "$r/etc/hostname" "$r/etc/resolv.conf"
}
base_key=$({ declare -f make_base; echo "$suite"; } | sha256sum | cut -c1-16)
base_tar="$root/jax-base-$base_key.tar"
if [[ ! -s $base_tar ]]; then
  m=${TPUJOB_IMAGE_MIRROR:-$(mirror "$suite" | head -n1)}
  [[ -n $m ]] || { echo "jax-worker/build.sh: apt names no mirror for $suite; set TPUJOB_IMAGE_MIRROR" >&2; exit 1; }
  work=$(mktemp -d "$root/jax-base.XXXXXX")
  log "debootstrap --variant=minbase --include=python3,python3-venv $suite (first time only)"
  if ! make_base "$work/rootfs" "$m" >"$work/debootstrap.log" 2>&1; then
    tail -n 30 "$work/debootstrap.log" >&2
    echo "jax-worker/build.sh: debootstrap failed (log above)" >&2
    exit 1
  fi
  tar -C "$work/rootfs" --numeric-owner -cf "$work/base.tar" .
  mv "$work/base.tar" "$base_tar"
  rm -rf --one-file-system "$work"
  work=
  log "cached the base: $base_tar ($(du -h "$base_tar" | cut -f1))"
fi

# --- the image -------------------------------------------------------------------------------
log "making $image_name"
mkdir -p "$dest"
ctr=$(buildah from --quiet scratch)
mnt=$(buildah mount "$ctr")
tar -C "$mnt" --numeric-owner -xpf "$base_tar"
mkdir -p "$mnt/app"
cp "$here/train.py" "$here/requirements.txt" "$mnt/app/"
buildah umount "$ctr" >/dev/null
# --no-index: the wheels come from the cache only.
buildah run --isolation chroot --volume "$wheels:/wheels:ro" "$ctr" -- sh -ec '
  python3 -m venv /opt/venv
  /opt/venv/bin/pip install --quiet --no-index --no-cache-dir --disable-pip-version-check \
    --find-links /wheels -r /app/requirements.txt
  rm -rf /root/.cache /tmp/*' >&2
buildah config --os linux --arch amd64 --workingdir /app \
  --env PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env PYTHONUNBUFFERED=1 --env JAX_PLATFORMS=cpu \
  --entrypoint '["python3", "/app/train.py"]' --cmd '[]' "$ctr"
buildah commit --quiet --rm "$ctr" "$image_name" >/dev/null
ctr=
rm -f "$dest/jax-worker.oci.tar.tmp"
buildah push --quiet "$image_name" "oci-archive:$dest/jax-worker.oci.tar.tmp:$image_name" >&2
mv "$dest/jax-worker.oci.tar.tmp" "$dest/jax-worker.oci.tar"
printf 'JAX_IMAGE=%s\n' "$image_name" >"$dest/images.env"
# The archive is what is used: buildah's copy (about 870 MB) goes, and of the images built
# from other sources the three newest stay.
buildah rmi "$image_name" >/dev/null 2>&1 || true
ls -1dt "$root"/jax-worker-*/ | tail -n +4 | xargs -r rm -rf
log "done: $image_name ($(du -h "$dest/jax-worker.oci.tar" | cut -f1) archive)"

complete || { echo "jax-worker/build.sh: outputs missing in $dest" >&2; exit 1; }
echo "$dest"
