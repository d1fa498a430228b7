#!/usr/bin/env bash
# Installs the Debian packages needed to build and test tpujob-operator. Idempotent: does
# nothing when every package is already present. Runs unattended (as root, or with sudo).
#
# TPUJOB_DEPS selects what to install:
#   all    (default, what `make` uses) everything to build the operator and run every test,
#          the image build and the real node included
#   build  only what compiling the operator binary needs (the Dockerfile's build stage)
#   format clang-format, for `make format`
#   image  what `make image` needs (scripts/build-image.sh): buildah, debootstrap, ctr
#   bench  what `make bench` needs beyond the build and the tests: matplotlib, for its plots
set -euo pipefail

build_packages=(
  build-essential cmake ninja-build pkg-config
  ccache                                          # compiler cache shared by every build and clone
  libcpprest-dev libboost-dev libssl-dev openssl  # HTTP client/listener, TLS
  nlohmann-json3-dev libyaml-cpp-dev              # JSON documents, kubeconfig YAML
  libsimdjson-dev                                 # a node watch event's digest (kube/watch.h)
  libspdlog-dev libfmt-dev libcli11-dev           # structured logs, command line
  prometheus-cpp-dev                              # metric families, text exposition
  libre2-dev                                      # users' step patterns, linear-time (policy; libre2.a in tpujob-supervise)
)
test_packages=(
  git
  libgtest-dev libgmock-dev                       # unit tests
  curl procps iproute2 psmisc                     # the local control plane scripts, install-go.sh
  prometheus                                      # promtool and a real scrape in the tests
  python3 python3-yaml                            # gen-crd.py (test crd_generated), install-go.sh
  clang-16 libclang-rt-16-dev                     # libFuzzer targets (scripts/fuzz.sh)
)
bench_packages=(
  python3-matplotlib                              # make bench's plots (scripts/bench-plot.py; test bench_plot)
)
image_packages=(
  buildah                                         # builds the Dockerfile, no daemon
  debootstrap debian-archive-keyring              # the Debian base, from the apt mirror
  containerd                                      # ctr, to load the image into containerd
)
# The real node of the end-to-end tests (e2e/cluster up --real-node, e2e/tools/node/build.sh).
node_packages=(
  containerd runc                                 # the container runtime
  containernetworking-plugins                     # CNI: bridge, host-local, portmap, loopback
  iptables conntrack                              # kube-proxy's Services
  util-linux                                      # unshare, nsenter: the node's mount namespace
  busybox-static                                  # the test image's programs
)

case "${TPUJOB_DEPS:-all}" in
  all) packages=("${build_packages[@]}" "${test_packages[@]}" "${bench_packages[@]}" "${image_packages[@]}" "${node_packages[@]}") ;;
  build) packages=("${build_packages[@]}") ;;
  format) packages=(clang-format) ;;
  image) packages=("${image_packages[@]}") ;;
  bench) packages=("${bench_packages[@]}") ;;
  *)
    echo "[deps] TPUJOB_DEPS=${TPUJOB_DEPS}: want all, build, format, image or bench" >&2
    exit 2
    ;;
esac

# Headers that every build's compiles include, from packages the build packages pull in. The
# image's build stage (the Dockerfile) installs the release's current point version of each, and
# shares the host's ccache (scripts/build-image.sh): with an older version here its compiles
# would all miss, and a fresh machine would compile the operator twice. `all` brings them to the
# version apt offers.
current_packages=(linux-libc-dev libc6-dev libssl-dev zlib1g-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[[ ${TPUJOB_DEPS:-all} == all ]] || current_packages=()
# outdated: those of current_packages installed at an older version than apt's candidate (a
# newer one, from lists older than the package, is left alone, so nothing is retried each run).
outdated() {
  ((${#current_packages[@]} > 0)) || return 0
  local p installed candidate
  # One apt-cache call for all of them: "package candidate" lines.
  while read -r p candidate; do
    installed=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null) || continue
    if [[ $candidate != "(none)" ]] && dpkg --compare-versions "$installed" lt "$candidate"; then
      echo "$p"
    fi
  done < <(apt-cache policy "${current_packages[@]}" 2>/dev/null |
    awk '/^[^ ]+:$/ {p = substr($1, 1, length($1) - 1)} $1 == "Candidate:" {print p, $2}')
}
mapfile -t old < <(outdated)
if ((${#missing[@]} == 0 && ${#old[@]} == 0)); then
  exit 0
fi
sudo=""
[[ $(id -u) == 0 ]] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
if ((${#missing[@]} > 0)); then
  echo "[deps] installing: ${missing[*]}" >&2
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
mapfile -t old < <(outdated)
if ((${#old[@]} > 0)); then
  echo "[deps] updating to the release's current version (the image's build stage has it): ${old[*]}" >&2
  $sudo apt-get install -y -qq --no-install-recommends --only-upgrade "${old[@]}" >/dev/null
fi
