#!/usr/bin/env bash
# Builds the operator image from the Dockerfile with buildah, without any container registry,
# and writes it as an OCI archive. Prints the archive's path on stdout as the last line.
#
#   1. Base: the Dockerfile's FROM is `ARG DEBIAN_IMAGE=` (a dated Debian slim tag). That image
#      is made here with `debootstrap --variant=minbase` from the Debian mirror apt already uses
#      (read from /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list), trimmed like the
#      official slim images (no documentation, man pages, locales, apt lists or caches), with the
#      updates of the -updates and -security suites applied and an apt sources list naming the
#      same mirror, and committed in buildah's storage under the name FROM resolves to
#      (docker.io/library/debian:<tag>). The root file system is cached as a tar file outside
#      the repository, keyed by this script, the suite and the base name, so a later run only
#      imports it again when buildah's storage lacks it.
#      It is built from the mirror's current release of that suite: the same Debian release and
#      package names as the dated tag, not necessarily the same package versions.
#   2. `buildah bud --pull=never`: the Dockerfile as it is; its RUN steps reach the mirror
#      through the host network. Tagged docker.io/library/tpujob-operator:<version> (the
#      chart's default image: repository `tpujob-operator`, tag its appVersion) and
#      localhost/tpujob-operator:<version>; the image a rebuild replaces is removed.
#   3. `buildah push` into $BUILD_DIR/image/tpujob-operator.oci.tar, named
#      docker.io/library/tpujob-operator:<version>, so a node that has it needs no pull.
#
# The archive is not rebuilt while a hash of the inputs (Dockerfile, .dockerignore,
# CMakeLists.txt, operator/, src/, scripts/install-deps.sh, this script, the chart's image
# values) matches the one stored beside it (<archive>.inputs): a second run takes seconds. The
# last three archives built are also kept in the cache ($TPUJOB_IMAGE_CACHE/archives, by that
# hash): a new clone or build directory of the same sources copies the archive from there.
# On 2 cores a first run takes about 4 minutes: the base about 25 s (debootstrap; importing the
# cached one again takes 1-2 s), `buildah bud` about 3 minutes (the build stage's packages, then
# compiling), the push 1-2 s. After a change of an input, a run rebuilds with `buildah bud`
# (about 3 minutes); with none, it returns at once. Each step is printed on stderr with the
# time elapsed.
#
# Usage: scripts/build-image.sh [--force] [--import] [--containerd-socket PATH]
#   --force                    rebuild even when the archive matches its inputs
#   --import                   then load the archive into containerd's k8s.io namespace
#                              (`ctr images import`), where the kubelet finds it
#   --containerd-socket PATH   containerd's socket for --import
#                              (default /run/containerd/containerd.sock)
# Environment:
#   BUILD_DIR            where image/ goes (default: build, relative to the repository)
#   JOBS                 parallel compile jobs in the build stage (default: nproc)
#   TPUJOB_IMAGE_CACHE   cache of base root file systems
#                        (default: $HOME/.cache/tpujob-operator/images)
#   TPUJOB_IMAGE_MIRROR  Debian mirror for the base (default: the one apt uses)
#   BUILDAH_ISOLATION    RUN isolation (default here: chroot, which needs no cgroup setup,
#                        network namespace or OCI runtime, so it also works inside a container)
#   STORAGE_DRIVER       buildah's storage driver (default: buildah's configuration, usually
#                        overlay; vfs where overlay cannot mount)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

force=0
import=0
socket=/run/containerd/containerd.sock
while (($#)); do
  case $1 in
    --force) force=1 ;;
    --import) import=1 ;;
    --containerd-socket)
      (($# >= 2)) || { echo "build-image.sh: --containerd-socket needs a path" >&2; exit 2; }
      socket=$2
      shift
      ;;
    --containerd-socket=*) socket=${1#*=} ;;
    -h | --help)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
      exit 0
      ;;
    *)
      echo "build-image.sh: unknown argument $1 (see --help)" >&2
      exit 2
      ;;
  esac
  shift
done

started=$SECONDS
log() { printf '[image %02d:%02d] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*" >&2; }
die() { echo "build-image.sh: $*" >&2; exit 1; }

TPUJOB_DEPS=image bash scripts/install-deps.sh
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}

# normalize NAME: the fully qualified name a short image name resolves to (Docker Hub rules),
# the name the kubelet and containerd use.
normalize() {
  local name=$1 first=${1%%/*}
  if [[ $name != */* ]]; then
    name=docker.io/library/$name
  elif [[ $first != *.* && $first != *:* && $first != localhost ]]; then
    name=docker.io/$name
  fi
  [[ ${name##*/} == *:* || $name == *@* ]] || name=$name:latest
  echo "$name"
}

# What the Dockerfile and the chart name.
base=$(sed -n 's/^ARG DEBIAN_IMAGE=\(.*\)$/\1/p' Dockerfile | head -n1)
[[ $base == debian:* ]] || die "the Dockerfile's DEBIAN_IMAGE ($base) is not a debian:<tag> image"
base_tag=${base#debian:}
suite=${base_tag%%-*}
base_ref=$(normalize "$base")
version=$(sed -n 's/^project(tpujob-operator VERSION \([0-9][0-9.]*\).*/\1/p' CMakeLists.txt)
[[ -n $version ]] || die "no project VERSION in CMakeLists.txt"
chart=charts/tpujob-operator
app_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$chart/Chart.yaml")
repository=$(awk '/^image:/ {in_image = 1; next} /^[^ #]/ {in_image = 0}
  in_image && $1 == "repository:" {print $2; exit}' "$chart/values.yaml")
chart_tag=$(awk '/^image:/ {in_image = 1; next} /^[^ #]/ {in_image = 0}
  in_image && $1 == "tag:" {gsub(/"/, "", $2); print $2; exit}' "$chart/values.yaml")
[[ -n $repository ]] || die "no image.repository in $chart/values.yaml"
[[ $app_version == "$version" ]] ||
  log "warning: the chart's appVersion ($app_version) differs from CMakeLists.txt ($version)"
# The chart's default image (tag empty: the appVersion), and the local short name.
image=$(normalize "$repository:${chart_tag:-$app_version}")
local_image=localhost/tpujob-operator:$version

build_dir=${BUILD_DIR:-build}
[[ $build_dir == /* ]] || build_dir=$root/$build_dir
out=$build_dir/image
archive=$out/tpujob-operator.oci.tar
[[ $archive != *:* ]] || die "the archive path $archive contains ':', which oci-archive: cannot name"

# --- the archive, unless its inputs are unchanged --------------------------------------------
inputs_hash() {
  {
    find Dockerfile .dockerignore CMakeLists.txt scripts/install-deps.sh scripts/build-image.sh \
      operator src supervisor -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    echo "$base_ref $image $local_image"
  } | sha256sum | cut -c1-32
}

import_archive() {
  command -v ctr >/dev/null || die "ctr (package containerd) is needed for --import"
  [[ -S $socket ]] || die "no containerd socket at $socket (--containerd-socket PATH)"
  log "importing $archive into containerd ($socket, namespace k8s.io) as $image"
  # The archive names the image in full; --base-name keeps that name (ctr drops names outside it).
  ctr -n k8s.io --address "$socket" images import --base-name "${image%:*}" "$archive" >&2
  ctr -n k8s.io --address "$socket" images ls -q "name==$image" | grep -qx "$image" ||
    die "containerd does not list $image after the import"
}

# One build at a time (the base's name and the archive are shared): a second run waits, then
# finds the archive up to date.
cache=${TPUJOB_IMAGE_CACHE:-$HOME/.cache/tpujob-operator/images}
mkdir -p "$cache"
exec 9>"$cache/.lock"
if ! flock -n 9; then
  log "waiting for another scripts/build-image.sh to finish (lock $cache/.lock)"
  flock 9
fi

key=$(inputs_hash)
if ((force == 0)) && [[ -f $archive && -f $archive.inputs && $(cat "$archive.inputs") == "$key" ]]; then
  log "$archive is up to date ($image)"
  ((import == 0)) || import_archive
  echo "$archive"
  exit 0
fi
# Archives built before are kept in the cache by their inputs' hash, so that another clone or
# build directory of the same sources (a CI run) copies one instead of building it again.
archives=$cache/archives
cached_archive=$archives/$key.oci.tar
if ((force == 0)) && [[ -f $cached_archive ]]; then
  mkdir -p "$out"
  cp "$cached_archive" "$archive.tmp" && mv "$archive.tmp" "$archive"
  echo "$key" >"$archive.inputs"
  log "$archive copied from the cache ($cached_archive; same inputs)"
  ((import == 0)) || import_archive
  echo "$archive"
  exit 0
fi

# image_id NAME: the ID of NAME in buildah's storage, empty when it has none.
image_id() { buildah inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null || true; }

# drop_if_untagged ID: removes an image this script replaced (a name moved to a new build), so
# that rebuilds do not pile up unnamed images.
drop_if_untagged() {
  [[ -n $1 ]] || return 0
  buildah images --noheading --no-trunc --format '{{.ID}} {{.Name}}' |
    awk -v id="sha256:$1" '$1 == id && $2 != "<none>" {found = 1} END {exit !found}' && return 0
  buildah rmi "$1" >/dev/null 2>&1 || true
}

# --- 1. the base image -----------------------------------------------------------------------
# mirror_stanzas: "URI SUITE" for each suite of this release that apt uses (deb822 and
# one-line sources), e.g. "http://mirror/debian bookworm".
mirror_stanzas() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk 'function flush() { if (deb) for (i = 1; i <= ns; i++) for (j = 1; j <= nu; j++) print u[j], s[i];
           deb = 0; ns = 0; nu = 0 }
         /^[ \t]*$/ { flush(); next }
         /^Types:/ { deb = ($0 ~ /[ \t]deb([ \t]|$)/) }
         /^URIs:/ { nu = split(substr($0, 6), u) }
         /^Suites:/ { ns = split(substr($0, 8), s) }
         /^Enabled: *no/ { deb = 0 }
         END { flush() }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    awk '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }; print $i, $(i + 1) }' "$f"
  done
}
stanzas=$(mirror_stanzas | awk -v s="$suite" '$2 == s || $2 == s "-updates" || $2 == s "-security"' | sort -u)
mirror=${TPUJOB_IMAGE_MIRROR:-$(awk -v s="$suite" '$2 == s {print $1; exit}' <<<"$stanzas")}
[[ -n $mirror ]] || die "apt names no mirror for $suite; set TPUJOB_IMAGE_MIRROR"
mirror=${mirror%/}
[[ -z ${TPUJOB_IMAGE_MIRROR:-} ]] || stanzas=$(printf '%s %s\n' "$mirror" "$suite" "$mirror" "$suite-updates")

# sources_list: the base's /etc/apt/sources.list.d/debian.sources, the layout of the official
# images, naming the mirrors apt uses here (security only when apt uses it).
sources_list() {
  local uri suites first=1
  awk '{print $1}' <<<"$stanzas" | sort -u | while read -r uri; do
    suites=$(awk -v u="$uri" '$1 == u {print $2}' <<<"$stanzas" | sort | xargs)
    [[ -n $suites ]] || continue
    ((first)) || echo
    first=0
    printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
      "$uri" "$suites" /usr/share/keyrings/debian-archive-keyring.gpg
  done
}

# slim ROOTFS: the configuration and removals of the official slim images (debuerreotype), and
# like them the updates of the -updates and -security suites (debootstrap installs the release).
slim() {
  local r=${1:?}
  mkdir -p "$r/etc/dpkg/dpkg.cfg.d" "$r/etc/apt/apt.conf.d" "$r/etc/apt/sources.list.d"
  cat >"$r/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
# The "slim" variant: files that are unnecessary in containers are not installed.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/all_languages
path-include /usr/share/locale/currency/*
path-include /usr/share/locale/l10n/*
path-include /usr/share/locale/languages
path-exclude /usr/share/man/*
EOF
  echo 'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";' >"$r/etc/apt/apt.conf.d/docker-clean"
  echo 'Acquire::GzipIndexes "true";' >"$r/etc/apt/apt.conf.d/docker-gzip-indexes"
  echo 'Acquire::Languages "none";' >"$r/etc/apt/apt.conf.d/docker-no-languages"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$r/etc/apt/apt.conf.d/docker-autoremove-suggests"
  rm -f "$r/etc/apt/sources.list"
  sources_list >"$r/etc/apt/sources.list.d/debian.sources"
  printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"  # no service starts while upgrading
  chmod 755 "$r/usr/sbin/policy-rc.d"
  chroot "$r" apt-get -qq update
  DEBIAN_FRONTEND=noninteractive chroot "$r" apt-get -qq -y dist-upgrade >/dev/null
  rm -f "$r/usr/sbin/policy-rc.d"
  find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$r"/usr/share/{groff,info,linda,man}/* "$r"/usr/share/lintian/overrides/*
  find "$r/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name all_languages -not -name currency \
    -not -name l10n -not -name languages -exec rm -rf {} +
  rm -rf "${r:?}"/var/lib/apt/lists/* "$r"/var/cache/apt/* "$r"/var/cache/debconf/*-old \
    "$r"/var/cache/ldconfig/aux-cache "$r"/var/log/apt/* "$r"/var/lib/dpkg/*-old \
    "${r:?}"/dev/* "${r:?}"/run/* "${r:?}"/tmp/* "${r:?}"/var/tmp/*
  mkdir -p "$r/var/lib/apt/lists/partial" "$r/var/cache/apt/archives/partial"
  : >"$r/var/log/dpkg.log"
  : >"$r/var/log/alternatives.log"
  : >"$r/etc/machine-id"
  rm -f "$r/etc/hostname" "$r/etc/resolv.conf"
}

# unmount_under DIR: what debootstrap may leave mounted in DIR (proc, sys) when it fails.
unmount_under() {
  local m
  awk -v d="$1/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" || true
  done
}

work=
cleanup() {
  if [[ -n $work ]]; then
    unmount_under "$work"
    rm -rf --one-file-system "$work"
  fi
}
trap cleanup EXIT

make_base_tar() {
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/rootfs.XXXXXX")
  log "debootstrap --variant=minbase $suite from $mirror (first time only; about 30 s)"
  if ! debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    "$suite" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1; then
    tail -n 30 "$work/debootstrap.log" >&2
    die "debootstrap failed (log above)"
  fi
  unmount_under "$work"
  slim "$work/rootfs"
  tar -C "$work/rootfs" --numeric-owner --xattrs --xattrs-include='*' -cf "$work/base.tar" .
  mv "$work/base.tar" "$base_tar"
  rm -rf --one-file-system "$work"
  work=
  log "cached the base root file system: $base_tar ($(du -h "$base_tar" | cut -f1))"
}

import_base() {
  local ctr mnt id
  log "importing $base_tar as $base_ref"
  ctr=$(buildah from --quiet scratch)
  mnt=$(buildah mount "$ctr")
  tar -C "$mnt" --numeric-owner --xattrs --xattrs-include='*' -xpf "$base_tar"
  buildah umount "$ctr" >/dev/null
  buildah config --os linux --arch "$(dpkg --print-architecture)" --cmd bash \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  id=$(buildah commit --quiet --rm "$ctr" "$base_ref")
  echo "$id" >"$base_id_file"
}

# The cache key: the code above that makes the base (not the rest of this script), the suite,
# the base's name.
base_key=$({ declare -f sources_list slim make_base_tar import_base; echo "$suite $base"; } |
  sha256sum | cut -c1-16)
base_tar=$cache/${base//[:\/]/_}-$base_key.tar
base_id_file=$base_tar.id

log "base $base (suite $suite)"
previous_base=$(image_id "$base_ref")
if [[ -n $previous_base && -f $base_id_file && $previous_base == "$(cat "$base_id_file")" ]]; then
  log "$base_ref is in buildah's storage"
else
  [[ -f $base_tar ]] || make_base_tar
  import_base
  drop_if_untagged "$previous_base"
fi
t_base=$((SECONDS - started))

# --- 2. buildah bud --------------------------------------------------------------------------
jobs=${JOBS:-$(nproc)}
previous_images="$(image_id "$image") $(image_id "$local_image")"
log "buildah bud (isolation $BUILDAH_ISOLATION, $jobs compile jobs; about 3 minutes on 2 cores)"
mkdir -p "$out"
rm -f "$out/image.id"
# --layers: a rebuild after a source change reuses the build stage's package layer. The compile
# goes through the host's ccache (the Dockerfile's build stage installs ccache, and CMakeLists.txt
# uses it from $HOME/.cache/tpujob-operator/ccache): the stage builds in /src/build, the same
# place relative to the sources as build/ in a clone, with the same compiler and headers as the
# host, so it reuses what the host's build compiled.
ccache_dir=${CCACHE_DIR:-$HOME/.cache/tpujob-operator/ccache}
mkdir -p "$ccache_dir"
buildah bud --pull=never --layers --network host --isolation "$BUILDAH_ISOLATION" \
  --iidfile "$out/image.id" --volume "$ccache_dir:/root/.cache/tpujob-operator/ccache" \
  --build-arg "JOBS=$jobs" -t "$image" -t "$local_image" -f Dockerfile . >&2
built=$(sed "s/^sha256://" "$out/image.id")
for previous in $previous_images; do drop_if_untagged "$previous"; done
t_bud=$((SECONDS - started - t_base))

# --- 3. the archive --------------------------------------------------------------------------
log "buildah push $image into $archive"
rm -f "$archive.inputs" "$archive.tmp"
# By ID: the image this build made, even if the name has been given to another one since.
buildah push --quiet "$built" "oci-archive:$archive.tmp:$image" >&2
mv "$archive.tmp" "$archive"
echo "$key" >"$archive.inputs"
mkdir -p "$archives"
cp "$archive" "$cached_archive.tmp" && mv "$cached_archive.tmp" "$cached_archive"
# The three newest archives stay.
ls -1t "$archives"/*.oci.tar 2>/dev/null | tail -n +4 | xargs -r rm -f
t_push=$((SECONDS - started - t_base - t_bud))
log "done: base ${t_base}s, bud ${t_bud}s, push ${t_push}s; $image ($(du -h "$archive" | cut -f1))"

((import == 0)) || import_archive
echo "$archive"
