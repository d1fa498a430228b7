#!/usr/bin/env bash
# Checks the Dockerfile's final stage against the binary it ships, without a container engine:
#   1. the base image is a dated bookworm-slim tag, and this machine runs the same release, so
#      the package names found here are the ones the image gets;
#   2. every shared library the built binary links (ldd) comes from a Debian package (dpkg -S)
#      that the final stage installs by name, or from one every Debian image contains (libc6,
#      libgcc-s1): the image states what it needs instead of relying on what other packages
#      happen to depend on;
#   3. every package the final stage installs exists in this release (apt-cache show);
#   4. the final stage runs as a numeric non-root user, with the operator as entrypoint, and the
#      build stage installs only the build dependencies (TPUJOB_DEPS=build).
#
# Usage: scripts/check-image-deps.sh [--self-test] BINARY [DOCKERFILE]
#   --self-test  also check that removing each needed package from a copy of the Dockerfile
#                makes the check fail (so the check itself can fail)
# Exit status: 0 passed, 1 a problem (each listed on stderr), 2 usage, 77 skipped (not Debian
# bookworm: the mapping would name another release's packages).
set -euo pipefail

self_test=0
if [[ ${1:-} == --self-test ]]; then
  self_test=1
  shift
fi
if (($# < 1 || $# > 2)); then
  echo "usage: $0 [--self-test] BINARY [DOCKERFILE]" >&2
  exit 2
fi
binary=$1
dockerfile=${2:-$(cd "$(dirname "$0")/.." && pwd)/Dockerfile}
[[ -x $binary ]] || { echo "check-image-deps: $binary is not an executable" >&2; exit 2; }
[[ -f $dockerfile ]] || { echo "check-image-deps: $dockerfile does not exist" >&2; exit 2; }

# Present in every Debian image: libc6 is a pre-dependency of the Essential packages and
# libgcc-s1 one of libc6.
base_packages=(libc6 libgcc-s1)

codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
if [[ $codename != bookworm ]] || ! command -v dpkg >/dev/null || ! command -v apt-cache >/dev/null; then
  echo "check-image-deps: skipped: needs Debian 12 (bookworm) with dpkg and apt-cache," \
    "this machine is '${codename:-unknown}'" >&2
  exit 77
fi

# The packages the binary needs, filled once: needed_pkg[library] = package. dpkg -S is asked
# about every form the path may be recorded under (/lib and /usr/lib are the same directory on
# a merged-/usr system, but dpkg knows only one of them), in one call.
declare -A needed_pkg=()
map_libraries() {
  local line lib path real candidate status=0
  local -A lib_path=() owner=()
  local -a candidates=()
  while read -r line; do
    case $line in
      *"=> not found"*)
        echo "check-image-deps: ldd: ${line%% *} not found on this machine" >&2
        status=1
        ;;
      *" => /"*)
        lib=${line%% *}
        path=${line#*=> }
        path=${path%% (*}
        lib_path[$lib]=$path
        real=$(readlink -f "$path")
        candidates+=("$path" "$real" "${path#/usr}" "${real#/usr}" "/usr$path" "/usr$real")
        ;;
    esac
  done < <(ldd "$binary")
  # "libssl3:amd64: /usr/lib/x86_64-linux-gnu/libssl.so.3"; diversion lines are skipped.
  while IFS= read -r line; do
    [[ $line == *": /"* && $line != *diversion* ]] || continue
    path=${line#*: }
    line=${line%%: /*}
    line=${line%%,*}
    owner[$path]=${line%%:*}
  done < <(dpkg -S "${candidates[@]}" 2>/dev/null || true)
  for lib in "${!lib_path[@]}"; do
    path=${lib_path[$lib]}
    real=$(readlink -f "$path")
    for candidate in "$path" "$real" "${path#/usr}" "${real#/usr}" "/usr$path" "/usr$real"; do
      if [[ -n ${owner[$candidate]:-} ]]; then
        needed_pkg[$lib]=${owner[$candidate]}
        break
      fi
    done
    if [[ -z ${needed_pkg[$lib]:-} ]]; then
      echo "check-image-deps: $lib ($path) belongs to no Debian package" >&2
      status=1
    fi
  done
  if ((${#lib_path[@]} == 0)); then
    echo "check-image-deps: ldd lists no shared library of $binary" >&2
    status=1
  fi
  return $status
}

# Which of the given packages apt-cache knows (one call): known_pkg[package] = 1.
declare -A known_pkg=()
look_up_packages() {
  local line
  while read -r line; do
    if [[ $line == "Package: "* ]]; then known_pkg[${line#Package: }]=1; fi
  done < <(apt-cache show --no-all-versions "$@" 2>/dev/null || true)
}

# The final stage's lines (after the last FROM), continuation lines joined.
final_stage() {
  awk '/^[[:space:]]*FROM[[:space:]]/ {stage = ""} {stage = stage $0 "\n"} END {printf "%s", stage}' \
    "$1" | sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta'
}

# Packages named by `apt-get install` in the final stage.
installed_by() {
  final_stage "$1" | awk '
    {
      for (i = 1; i <= NF; i++) {
        if ($i == "install" && i > 1 && $(i - 1) ~ /apt(-get)?$/) {
          for (j = i + 1; j <= NF; j++) {
            if ($j ~ /^(&&|;|\|\||\|)$/) break
            if ($j ~ /^-/) continue
            sub(/=.*/, "", $j)  # a version pin: package=version
            print $j
          }
        }
      }
    }' | sort -u
}

# Checks one Dockerfile; prints what it found and returns 1 on any problem.
check() {
  local file=$1 status=0 pkg lib
  local -A named=() base=()
  for pkg in "${base_packages[@]}"; do base[$pkg]=1; done

  if ! grep -Eq '^ARG DEBIAN_IMAGE=(docker\.io/library/)?debian:bookworm-[0-9]{8}-slim$' "$file"; then
    echo "check-image-deps: $file: want 'ARG DEBIAN_IMAGE=debian:bookworm-YYYYMMDD-slim'" >&2
    status=1
  fi

  while read -r pkg; do
    [[ -n $pkg ]] || continue
    named[$pkg]=1
    if [[ -z ${known_pkg[$pkg]:-} ]]; then
      echo "check-image-deps: $file installs '$pkg', which apt-cache does not know" >&2
      status=1
    fi
  done < <(installed_by "$file")
  if ((${#named[@]} == 0)); then
    echo "check-image-deps: $file: the final stage installs no packages" >&2
    status=1
  fi

  for lib in $(printf '%s\n' "${!needed_pkg[@]}" | sort); do
    pkg=${needed_pkg[$lib]}
    if [[ -n ${named[$pkg]:-} ]]; then
      echo "ok   $lib <- $pkg (installed by the final stage)"
    elif [[ -n ${base[$pkg]:-} ]]; then
      echo "ok   $lib <- $pkg (in every Debian image)"
    else
      echo "MISSING $lib <- $pkg: add $pkg to the final stage's apt-get install" >&2
      status=1
    fi
    if [[ -z ${known_pkg[$pkg]:-} ]]; then
      echo "check-image-deps: $pkg (for $lib) is unknown to apt-cache" >&2
      status=1
    fi
  done

  local stage
  stage=$(final_stage "$file")
  if ! grep -Eq '^[[:space:]]*USER[[:space:]]+[1-9][0-9]*(:[0-9]+)?[[:space:]]*$' <<<"$stage"; then
    echo "check-image-deps: $file: the final stage needs 'USER <numeric non-root uid>'" >&2
    status=1
  fi
  if ! grep -Eq '^[[:space:]]*ENTRYPOINT[[:space:]]+\[[[:space:]]*"[^"]*/tpujob-operator"' <<<"$stage"; then
    echo "check-image-deps: $file: the final stage's ENTRYPOINT must be the operator" >&2
    status=1
  fi
  if ! grep -Eq 'TPUJOB_DEPS=build[[:space:]]+bash[[:space:]]+scripts/install-deps\.sh' "$file"; then
    echo "check-image-deps: $file: the build stage must run TPUJOB_DEPS=build scripts/install-deps.sh" >&2
    status=1
  fi
  return $status
}

status=0
map_libraries || status=1
look_up_packages $(installed_by "$dockerfile") "${needed_pkg[@]}"
check "$dockerfile" || status=1

if ((self_test)); then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  # Each package the binary needs that the Dockerfile names: without it the check must fail.
  mapfile -t removable < <(printf '%s\n' "${needed_pkg[@]}" | sort -u |
    grep -vxF -f <(printf '%s\n' "${base_packages[@]}"))
  if ((${#removable[@]} == 0)); then
    echo "check-image-deps: self-test: no package to remove" >&2
    status=1
  fi
  for pkg in "${removable[@]}"; do
    pattern=$(sed 's/[][\.*^$+?(){}|/]/\\&/g' <<<"$pkg")
    sed -E "s/([[:space:]])${pattern}([[:space:]]|\\\\|$)/\\1\\2/" "$dockerfile" >"$scratch/Dockerfile"
    if cmp -s "$dockerfile" "$scratch/Dockerfile"; then
      echo "check-image-deps: self-test: $pkg is not named in $dockerfile" >&2
      status=1
    elif check "$scratch/Dockerfile" >/dev/null 2>&1; then
      echo "check-image-deps: self-test: the check passed without $pkg" >&2
      status=1
    else
      echo "self-test: without $pkg the check fails, as it must"
    fi
  done
fi

if ((status == 0)); then
  echo "check-image-deps: $dockerfile provides every library of $binary"
fi
exit $status
