#!/usr/bin/env bash
# Runs the unit tests, then the end-to-end tests on a real local control plane, then the unit
# tests under sanitizers (scripts/sanitize.sh) and each fuzz target for FUZZ_SECONDS (default 30,
# scripts/fuzz.sh), and prints the totals. Exit status is non-zero if anything failed.
#
# The sanitizer and fuzz builds compile while the end-to-end tests run, at the lowest CPU
# priority (nice 19): they use the cycles the control plane leaves idle and do not slow it.
# TPUJOB_SKIP_SANITIZERS=1 leaves out sanitizers and fuzzing (a quick local run).
set -uo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
# A Go new enough for the Go tools the tests build when they are not cached (Kueue below, the
# control plane under e2e/cluster): the bin directory scripts/install-go.sh prints goes first.
PATH="$(bash "$root/scripts/install-go.sh"):$PATH" || exit 1
log=$(mktemp -d)
background=
cleanup() {
  [[ -n $background ]] && kill -- -"$background" 2>/dev/null
  rm -rf "$log"
}
trap cleanup EXIT
start=$SECONDS
phase() { echo "[make test] $* (at $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s)" >&2; }
sanitizers=$([[ ${TPUJOB_SKIP_SANITIZERS:-0} == 1 ]] && echo 0 || echo 1)

phase "unit tests"
ctest --test-dir "$build" --output-on-failure -L unit -j "$(nproc)" 2>&1 | tee "$log/unit"
unit_rc=${PIPESTATUS[0]}

# The Kueue controller manager the Kueue end-to-end tests start (e2e/tools/kueue/build.sh; at
# once when cached) is built first, in the background with the sanitizer and fuzz builds; if
# the Kueue tests come before it is done, their `e2e/cluster up --with-kueue` waits for it. The
# real node's tools and the project image follow, before the sanitizer builds: the real-node
# tests run last and wait for them.
if ((sanitizers)); then
  phase "compiling Kueue, the sanitizer and fuzz builds in the background (nice 19)"
else
  phase "compiling Kueue in the background (nice 19)"
fi
set -m
(
  export TPUJOB_BUILD_ONLY=1
  nice -n 19 bash "$root/e2e/tools/kueue/build.sh" >/dev/null ||
    echo "[make test] building Kueue failed; the Kueue tests will build it again and say why"
  # The real node's kubelet, kube-proxy, CoreDNS and images, and the project image from the
  # Dockerfile, for the real-node tests at the end of the end-to-end tests (which wait for them).
  nice -n 19 bash "$root/e2e/tools/node/build.sh" >/dev/null ||
    echo "[make test] building the real node's tools failed; the real-node tests will say why"
  BUILD_DIR=$build nice -n 19 bash "$root/scripts/build-image.sh" >/dev/null ||
    echo "[make test] building the image failed; the real-node tests will build it again and say why"
  ((sanitizers)) || exit 0
  nice -n 19 bash "$root/scripts/sanitize.sh" address &&
    nice -n 19 bash "$root/scripts/sanitize.sh" thread &&
    nice -n 19 bash "$root/scripts/fuzz.sh"
) >"$log/prebuild" 2>&1 &
background=$!
set +m

phase "end-to-end tests"
ctest --test-dir "$build" --output-on-failure -L e2e 2>&1 | tee "$log/e2e"
e2e_rc=${PIPESTATUS[0]}

san_rc=0 fuzz_rc=0
if ((sanitizers)); then
  phase "waiting for the sanitizer and fuzz builds"
  wait "$background"
  background=
  cat "$log/prebuild" >&2
  phase "unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  bash "$root/scripts/sanitize.sh" address || san_rc=1
  phase "threaded unit tests under ThreadSanitizer"
  bash "$root/scripts/sanitize.sh" thread || san_rc=1
  phase "fuzzing, ${FUZZ_SECONDS:-30} s per target"
  bash "$root/scripts/fuzz.sh" "${FUZZ_SECONDS:-30}" || fuzz_rc=1
fi

count() {  # count FILE: "passed failed" from ctest's summary line
  sed -nE 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1 \2/p' "$1" | tail -1 |
    awk '{print $2 - $1, $1}'
}
read -r unit_pass unit_fail < <(count "$log/unit")
read -r e2e_pass e2e_fail < <(count "$log/e2e")
echo
echo "unit: ${unit_pass:-0} passed, ${unit_fail:-0} failed"
echo "e2e: ${e2e_pass:-0} passed, ${e2e_fail:-0} failed"
if ((sanitizers)); then
  echo "sanitizers: $([[ $san_rc == 0 ]] && echo clean || echo FAILED)"
  echo "fuzzing: $([[ $fuzz_rc == 0 ]] && echo no findings || echo FAILED)"
fi
echo "total: $(( ${unit_pass:-0} + ${e2e_pass:-0} )) passed, $(( ${unit_fail:-0} + ${e2e_fail:-0} )) failed"
echo "make test took $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s"
[[ $unit_rc == 0 && $e2e_rc == 0 && $san_rc == 0 && $fuzz_rc == 0 ]]
