#!/usr/bin/env bash
# Makes sure a Go toolchain new enough for the Go tools this repository builds (e2e/tools/build.sh,
# e2e/tools/kueue/build.sh, bench/peers/build.sh) is at hand, and prints the directory to put first
# on the PATH (the toolchain's bin/). The version needed is the highest `go` or `toolchain` line of
# the go.mod files under e2e/tools and bench/peers; the modules the build scripts fetch at a pinned
# version (Kueue, JobSet, KWOK, Helm) ask for no more than that.
#
#   1. `go` on the PATH is new enough: prints its bin directory at once (no network).
#   2. Otherwise the toolchain pinned below (GO_TOOLCHAIN), cached in
#      $TPUJOB_TOOLS_CACHE/go/<version> (default ~/.cache/tpujob-operator/tools/go/go1.26.8):
#      the first time it is downloaded from the Go module proxy, which serves Go's releases as the
#      module golang.org/toolchain (about 70 MB; with the unpacking, a few seconds on a fast
#      link), checked against its pinned checksum (the `h1:` hash that go.sum files and Go's
#      checksum database hold for it) and put in place with one rename, so an interrupted run
#      leaves no half-made toolchain behind.
#
# The proxy is the first URL in $GOPROXY; when GOPROXY is unset, the one an older `go` on the PATH
# uses (`go env GOPROXY`); with no Go at all, the default of the distribution's Go package, asked of
# its `go` binary, fetched with `apt-get download` (about 60 MB, nothing installed). Asking Go
# itself follows the machine's own setup and keeps every address out of this script.
#
# Usage: scripts/install-go.sh [--self-test]
#   --self-test  checks the choices above with fake `go` programs, offline, in about a second
# Environment:
#   TPUJOB_TOOLS_CACHE  cache root (default: $HOME/.cache/tpujob-operator/tools)
#   GOPROXY             the module proxy to download from, as for `go`
# The download needs curl and python3 (scripts/install-deps.sh installs both).
set -euo pipefail
shopt -s inherit_errexit

GO_TOOLCHAIN=go1.26.8
# The h1 checksum of golang.org/toolchain@v0.0.1-<GO_TOOLCHAIN>.<platform>, as go.sum holds it.
# With a new GO_TOOLCHAIN, `go mod download -json golang.org/toolchain@v0.0.1-<version>.linux-amd64`
# (and .linux-arm64) prints it as "Sum", checked against Go's checksum database.
declare -A GO_TOOLCHAIN_SUMS=(
  [go1.26.8.linux-amd64]=h1:ZOmGe1OnfREDMIdb1Qi4G9JSuDPBLGExZMQ4nis1RXM=
  [go1.26.8.linux-arm64]=h1:sYL/O6MqS68ML0kjsQ36WoYIpJqkw60TxizWUYUKQMc=
)

self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
root=$(cd "$(dirname "$self")/.." && pwd)
cache=${TPUJOB_TOOLS_CACHE:-$HOME/.cache/tpujob-operator/tools}/go
say() { echo "[go] $*" >&2; }
die() {
  echo "install-go.sh: $*" >&2
  exit 1
}

# version_key V: Go version V (1.26, 1.26rc1, 1.26.0, go1.26.8) as a number ordered as Go orders
# versions: 1.26 < 1.26beta1 < 1.26rc1 < 1.26.0 < 1.26.1. Fails on anything else.
version_key() {
  [[ $1 =~ ^(go)?([0-9]+)\.([0-9]+)(\.([0-9]+)|(beta|rc)([0-9]+))?$ ]] || return 1
  local stage=0 n=0
  if [[ -n ${BASH_REMATCH[5]} ]]; then
    stage=3 n=${BASH_REMATCH[5]}
  elif [[ -n ${BASH_REMATCH[6]} ]]; then
    stage=$([[ ${BASH_REMATCH[6]} == beta ]] && echo 1 || echo 2) n=${BASH_REMATCH[7]}
  fi
  echo $((10#${BASH_REMATCH[2]} * 1000000000 + 10#${BASH_REMATCH[3]} * 1000000 +
    stage * 10000 + 10#$n))
}
version_ge() { # version_ge A B: A is B or newer (false when either is not a Go version)
  local a b
  a=$(version_key "$1") && b=$(version_key "$2") && ((a >= b))
}

# go_version GO: the version the Go binary GO reports (go1.26.8), empty if it says none. Asked
# from / with GOTOOLCHAIN=local, so that no go.mod makes it hand over to another toolchain.
go_version() {
  local v
  v=$(cd / && GOTOOLCHAIN=local "$1" env GOVERSION 2>/dev/null) || v=
  [[ -n $v ]] || v=$(cd / && GOTOOLCHAIN=local "$1" version 2>/dev/null | awk '{print $3}') || v=
  echo "$v"
}

# debian_go_proxy: the default module proxy of the distribution's Go package, asked of its `go`
# binary (the package is downloaded into $work, not installed).
debian_go_proxy() {
  if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    die "GOPROXY is unset and no Go here names a module proxy: set GOPROXY to the proxy's URL"
  fi
  local pkg out sudo="" go
  pkg_of() { # golang-go depends on the versioned package that holds the go binary
    apt-cache depends golang-go 2>/dev/null |
      awk '$1 == "Depends:" && $2 ~ /^golang-[0-9.]+-go$/ && !found++ {print $2}'
  }
  pkg=$(pkg_of) || pkg=
  if [[ -z $pkg ]]; then # no package lists yet
    [[ $(id -u) == 0 ]] || sudo=sudo
    $sudo apt-get update -qq >&2 || true
    pkg=$(pkg_of) || pkg=
  fi
  [[ -n $pkg ]] || die "GOPROXY is unset, no Go here names a module proxy and apt knows no" \
    "golang-go: set GOPROXY to the proxy's URL"
  say "GOPROXY is unset and no Go here names a module proxy: asking Debian's $pkg (downloaded," \
    "not installed; about 60 MB) for its default one"
  mkdir -p "$work/deb"
  if ! out=$(cd "$work/deb" && apt-get download -qq "$pkg" 2>&1); then
    echo "$out" >&2
    die "apt-get download $pkg failed"
  fi
  dpkg-deb --fsys-tarfile "$work/deb/${pkg}"_*.deb | tar -x -C "$work/deb" --wildcards '*/bin/go'
  go=$(find "$work/deb" -path '*/bin/go' -type f | head -1)
  [[ -n $go ]] || die "$pkg holds no bin/go"
  # Only the binary was unpacked: GOROOT names its (otherwise empty) tree.
  (cd / && GOROOT=$(dirname "$(dirname "$go")") GOTOOLCHAIN=local "$go" env GOPROXY)
  rm -rf "$work/deb"
}

# module_proxy: the URL to download from (see the header), without a trailing slash.
module_proxy() {
  local list url
  if [[ -n ${GOPROXY:-} ]]; then
    list=$GOPROXY
  elif [[ -n ${current:-} ]]; then
    list=$(cd / && GOTOOLCHAIN=local "$current" env GOPROXY 2>/dev/null) || list=
  fi
  [[ -n ${list:-} ]] || list=$(debian_go_proxy)
  url=$(tr ',' '\n' <<<"${list//|/,}" | grep -E -m1 '^[a-z][a-z0-9+.-]*://' || true)
  [[ -n $url ]] || die "GOPROXY=$list names no module proxy to download Go from (only direct/off)"
  echo "${url%/}"
}

# unpack ZIP PREFIX SUM DEST: checks that every file of the module zip ZIP is under PREFIX, unpacks
# them into DEST (without PREFIX) and checks that their h1 hash (Go's dirhash.Hash1: the SHA-256
# of the lines "<sha256 of the file>  <name>" in name order) is SUM.
unpack() {
  python3 - "$@" <<'PY'
import base64, hashlib, os, sys, zipfile

zip_path, prefix, want, dest = sys.argv[1:]
with zipfile.ZipFile(zip_path) as z:
    infos = sorted(z.infolist(), key=lambda i: i.filename.encode())
    for i in infos:
        parts = i.filename[len(prefix):].split("/")
        if (not i.filename.startswith(prefix) or i.is_dir() or "\n" in i.filename
                or any(p in ("", ".", "..") for p in parts)):
            sys.exit("install-go.sh: unexpected entry in the toolchain zip: %r" % i.filename)
    summary = hashlib.sha256()
    for i in infos:
        rel = i.filename[len(prefix):]
        path = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        h = hashlib.sha256()
        with z.open(i) as src, open(path, "wb") as out:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                h.update(chunk)
                out.write(chunk)
        summary.update(("%s  %s\n" % (h.hexdigest(), i.filename)).encode())
        # Module zips need not keep file modes: Go's own download marks bin/ and pkg/tool/
        # executable, and so does this.
        mode = (i.external_attr >> 16) & 0o777
        executable = mode & 0o111 or rel.startswith(("bin/", "pkg/tool/"))
        os.chmod(path, 0o755 if executable else 0o644)
got = "h1:" + base64.b64encode(summary.digest()).decode()
if got != want:
    sys.exit("install-go.sh: checksum mismatch for %s: got %s, want %s" % (zip_path, got, want))
PY
}

# self_test: the choices of this script with fake `go` programs and a fake cache, offline.
# shellcheck disable=SC2317  # the tests are called through check()
self_test() {
  local fails=0
  t=$(mktemp -d)
  trap 'rm -rf "$t"' EXIT
  check() { # check NAME TEST...: runs the function TEST, reporting NAME
    if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1" >&2; fails=$((fails + 1)); fi
  }
  fake_go() { # fake_go DIR VERSION: a `go` in DIR/bin that says it is VERSION
    mkdir -p "$1/bin"
    cat >"$1/bin/go" <<EOF
#!/bin/sh
case "\$*" in
  "env GOVERSION") echo $2 ;;
  "env GOROOT") echo $1 ;;
  "env GOPROXY") echo \${FAKE_GOPROXY:-off} ;;
  version) echo "go version $2 linux/amd64" ;;
  *) exit 2 ;;
esac
EOF
    chmod +x "$1/bin/go"
  }
  run() { # run DIR [VAR=VALUE...]: this script with DIR first on the PATH and GOPROXY unset
    env -u GOPROXY TPUJOB_TOOLS_CACHE="$t/cache" PATH="$1:$PATH" "${@:2}" bash "$self" 2>"$t/stderr"
  }

  version_order() {
    version_ge 1.26.0 1.26 && version_ge 1.26rc1 1.26beta2 && version_ge go1.26.0 1.26rc1 &&
      version_ge 1.26.8 go1.26.0 && version_ge 1.100 1.26.8 && ! version_ge 1.26 1.26.0 &&
      ! version_ge 1.25.9 1.26 && ! version_ge 1.9 1.26 && ! version_ge "devel +abc" 1.26 &&
      ! version_ge "" 1.26
  }
  new_go_used() { [[ $(run "$t/new/bin") == "$t/new/bin" ]]; }
  old_go_gives_way() { [[ $(run "$t/old/bin") == "$t/cache/go/$GO_TOOLCHAIN/bin" ]]; }
  proxy_off() {
    ! run "$t/old/bin" GOPROXY=off >/dev/null && grep -q "names no module proxy" "$t/stderr"
  }
  bad_zip_refused() {
    ! run "$t/old/bin" FAKE_GOPROXY="file://$t/proxy/,direct" >/dev/null &&
      grep -q "checksum mismatch" "$t/stderr" && [[ -z $(ls -A "$t/cache/go") ]]
  }

  check "version order" version_order
  fake_go "$t/new" "go${required#go}"
  fake_go "$t/old" go1.19.8
  fake_go "$t/cache/go/$GO_TOOLCHAIN" "$GO_TOOLCHAIN"
  check "a new enough go on the PATH is used" new_go_used
  check "an old go on the PATH gives way to the cached toolchain" old_go_gives_way
  # No cache: GOPROXY=off forbids the download; with GOPROXY unset, it comes from the proxy the
  # old go names, here a file:// one serving a zip that does not match the pinned checksum.
  rm -rf "$t/cache/go"
  check "GOPROXY=off: no download, and says so" proxy_off
  if [[ -n $platform ]] && command -v curl >/dev/null && command -v python3 >/dev/null; then
    local v=v0.0.1-$GO_TOOLCHAIN.$platform
    mkdir -p "$t/proxy/golang.org/toolchain/@v"
    python3 -c 'import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr(sys.argv[2] + "bin/go", "#!/bin/sh\necho not go\n")' \
      "$t/proxy/golang.org/toolchain/@v/$v.zip" "golang.org/toolchain@$v/"
    check "a toolchain failing its checksum is refused, and nothing is cached" bad_zip_refused
  fi
  ((fails == 0)) || { cat "$t/stderr" >&2; return 1; }
  echo "install-go.sh: self-test passed"
}

# The version the tools need, and where it is asked for.
required=1.0 required_by=
while read -r file v; do
  version_key "$v" >/dev/null || continue
  version_ge "$required" "$v" || required=$v required_by=${file#"$root"/}
done < <(find "$root/e2e/tools" "$root/bench/peers" -name go.mod -exec awk '
  ($1 == "go" || $1 == "toolchain") && NF >= 2 {sub(/^go/, "", $2); print FILENAME, $2}' {} +)
version_ge "$GO_TOOLCHAIN" "$required" ||
  die "GO_TOOLCHAIN=$GO_TOOLCHAIN is older than go $required, which $required_by asks for: raise it"

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) platform=linux-amd64 ;;
  Linux-aarch64 | Linux-arm64) platform=linux-arm64 ;;
  *) platform= ;;
esac

if [[ ${1:-} == --self-test ]]; then
  self_test
  exit
fi

current=$(command -v go || true)
if [[ -n $current ]]; then
  have=$(go_version "$current")
  if version_ge "$have" "$required"; then
    goroot=$(cd / && GOTOOLCHAIN=local "$current" env GOROOT 2>/dev/null) || goroot=
    if [[ -n $goroot && -x $goroot/bin/go ]]; then echo "$goroot/bin"; else dirname "$current"; fi
    exit 0
  fi
fi

dest=$cache/$GO_TOOLCHAIN
if [[ -x $dest/bin/go ]]; then
  echo "$dest/bin"
  exit 0
fi

[[ -n $platform ]] ||
  die "no Go toolchain for $(uname -s) $(uname -m) here: put go >= $required on the PATH"
sum=${GO_TOOLCHAIN_SUMS[$GO_TOOLCHAIN.$platform]:-}
[[ -n $sum ]] || die "no checksum for $GO_TOOLCHAIN.$platform in GO_TOOLCHAIN_SUMS (see its comment)"
if ! command -v curl >/dev/null || ! command -v python3 >/dev/null; then
  die "downloading Go needs curl and python3 (make deps installs them)"
fi
mkdir -p "$cache"
work=$(mktemp -d "$cache/.download.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [[ -n $current ]]; then
  say "go on the PATH ($current) is ${have:-of no known version};" \
    "$required_by asks for go >= $required"
fi
proxy=$(module_proxy)
module=golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.$platform
say "downloading $GO_TOOLCHAIN ($platform, about 70 MB) from the Go module proxy into $dest" \
  "(first time only)"
progress=(-sS)
[[ -t 2 ]] && progress=(--progress-bar)
curl -fL "${progress[@]}" --retry 3 --netrc-optional -o "$work/toolchain.zip" \
  "$proxy/${module%@*}/@v/${module#*@}.zip" || die "could not download $module from $proxy"
unpack "$work/toolchain.zip" "$module/" "$sum" "$work/goroot" || exit 1
rm -f "$work/toolchain.zip"
version=$(cd / && GOTOOLCHAIN=local "$work/goroot/bin/go" version) ||
  die "the downloaded go does not run"
[[ $version == "go version $GO_TOOLCHAIN "* ]] ||
  die "the downloaded go says '$version', not $GO_TOOLCHAIN"
# One rename puts it in place; when another run did so first, that one is kept.
mv -T "$work/goroot" "$dest" 2>/dev/null || [[ -x $dest/bin/go ]] ||
  die "could not move the toolchain to $dest"
say "$version, in $dest"
echo "$dest/bin"
