#!/usr/bin/env bash
# `make test`: every step from a fresh machine to the verdict, and a table of where the time went.
#
#   1. packages        scripts/install-deps.sh (nothing to do when every package is there)
#   2. tools | build   in the background: the Go tools (control plane, Kueue, the real node's;
#                      e2e/tools/*), the real node's jax-worker image, then the project's image
#                      (scripts/build-image.sh), all cached outside the repository; beside them
#                      the C++ build of what the end-to-end tests run (ccache)
#   3. unit            the ASan+UBSan build, then the unit tests under it (GoogleTest's cases,
#                      in one process per core) and the script checks of ctest's `unit` label
#   4. e2e             the end-to-end tests in parallel shards (scripts/e2e.sh, TPUJOB_E2E_SHARDS),
#                      and beside them, at the lowest CPU priority, on what the shards leave idle:
#                      the TSan build, the fuzz build, then each fuzz target for FUZZ_SECONDS
#                      (default 30)
#   5. tsan            the unit tests that run threads of their own, under TSan
# Then the table (scripts/test-report.py): each step's wall time, each shard's, the 15 slowest
# tests, and the counts. Exit status is non-zero if anything failed.
#
# The unit tests' cases run once, under the sanitizers: compiling them a second time without
# sanitizers and running them under ctest cost about 5.5 minutes of CPU (docs/testing.md).
#
# TPUJOB_SKIP_SANITIZERS=1 leaves out sanitizers and fuzzing (a quick local run): the unit tests
# then run in the default build, under ctest.
set -uo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
mkdir -p "$build"
build=$(cd "$build" && pwd)
log=$build/test-logs
rm -rf "$log"
mkdir -p "$log"
phases=$log/phases.tsv
background=
cleanup() { [[ -n $background ]] && kill -- -"$background" 2>/dev/null; }
trap cleanup EXIT
start=$SECONDS
phase() { echo "[make test] $* (at $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s)" >&2; }
# timed NAME COMMAND...: runs COMMAND and records its wall time as step NAME.
timed() {
  local name=$1 t0=$SECONDS rc
  shift
  "$@"
  rc=$?
  printf '%s\t%d\t%s\n' "$name" $((SECONDS - t0)) "$([[ $rc == 0 ]] && echo ok || echo FAILED)" >>"$phases"
  return $rc
}
sanitizers=$([[ ${TPUJOB_SKIP_SANITIZERS:-0} == 1 ]] && echo 0 || echo 1)
jobs=${JOBS:-$(nproc)}

phase "packages"
timed packages bash scripts/install-deps.sh || exit 1
# A Go new enough for the Go tools: the bin directory scripts/install-go.sh prints goes first.
gobin=$(bash scripts/install-go.sh) || exit 1
PATH="$gobin:$PATH"

# The cache's statistics count from here, for the table's hit rate of this run.
ccache_dir=${CCACHE_DIR:-$HOME/.cache/tpujob-operator/ccache}
ccache --dir "$ccache_dir" --zero-stats >/dev/null 2>&1 || true

phase "the Go tools and the images in the background, beside the C++ build"
# On a fresh machine the C++ builds take longest; what the end-to-end tests need besides them
# is made meanwhile, so that they start as soon as the sanitizer builds end. The jax-worker
# image (the real node's JAX tests) is mostly downloads and disk; the project's image compiles
# the operator again in its build stage (through the same ccache).
set -m
(
  export TPUJOB_BUILD_ONLY=1
  rc=0
  {
    timed tools-control-plane bash e2e/tools/build.sh >/dev/null &&
      timed tools-kwok bash e2e/tools/kwok/build.sh >/dev/null &&
      timed tools-kueue bash e2e/tools/kueue/build.sh >/dev/null &&
      timed tools-real-node bash e2e/tools/node/build.sh >/dev/null &&
      timed tools-jax-worker bash e2e/tools/jax-worker/build.sh >/dev/null
  } >"$log/tools" 2>&1 || rc=1
  BUILD_DIR=$build timed image bash scripts/build-image.sh >"$log/image" 2>&1 ||
    touch "$log/image.failed"
  exit $rc
) &
background=$!
set +m

# With the sanitizers the default build makes only what the end-to-end tests run: the unit
# tests' cases are compiled and run in the ASan+UBSan build.
targets=()
((sanitizers)) && targets=(--target tpujob-operator tpujob-supervise e2e_tests operator_log_tests)
build_default() {
  { [[ -f $build/build.ninja ]] || cmake -S "$root" -B "$build" -G Ninja >/dev/null; } &&
    cmake --build "$build" -j "$jobs" "${targets[@]}"
}
phase "the C++ build"
if ! timed build build_default >"$log/build" 2>&1; then
  tail -n 60 "$log/build" >&2
  phase "the build failed (log: $log/build)"
  exit 1
fi

san_rc=0 fuzz_rc=0
if ((sanitizers)); then
  phase "the ASan+UBSan build"
  TPUJOB_BUILD_ONLY=1 timed build-asan bash scripts/sanitize.sh address || san_rc=1
  phase "unit tests: the script checks, and GoogleTest's cases under ASan+UBSan"
  # ctest's `unit` label without GoogleTest's cases (named Suite.Case), which run under the
  # sanitizer in one process per core.
  unit_run() {
    local rc=0
    ctest --test-dir "$build" --output-on-failure -L unit -E '[.]' -j "$jobs" || rc=1
    bash scripts/sanitize.sh address || rc=1
    return $rc
  }
  timed unit unit_run 2>&1 | tee "$log/unit"
  unit_rc=${PIPESTATUS[0]}
  # A sanitizer's finding (or a case failing under it) also fails the sanitizers' verdict, which
  # names it.
  [[ -s build-asan/sanitize-failure.txt ]] && san_rc=1
else
  phase "unit tests"
  timed unit ctest --test-dir "$build" --output-on-failure -L unit -j "$jobs" 2>&1 | tee "$log/unit"
  unit_rc=${PIPESTATUS[0]}
fi

beside_pid=
if ((sanitizers)); then
  # At the lowest CPU priority, from here on: on a core the wait for the background leaves idle,
  # then on what the end-to-end shards leave idle (a third of two cores in a fresh machine's
  # run): the TSan build, the fuzz build, then each fuzz target for a fixed time.
  (
    TPUJOB_BUILD_ONLY=1 timed build-tsan nice -n 19 bash scripts/sanitize.sh thread ||
      touch "$log/build-tsan.failed"
    if TPUJOB_BUILD_ONLY=1 timed build-fuzz nice -n 19 bash scripts/fuzz.sh; then
      timed fuzz nice -n 19 bash scripts/fuzz.sh "${FUZZ_SECONDS:-30}" || touch "$log/fuzz.failed"
    else
      touch "$log/fuzz.failed"
    fi
  ) >"$log/beside" 2>&1 &
  beside_pid=$!
fi
phase "waiting for the Go tools and the images"
timed wait-tools wait "$background"
tools_rc=$?
background=
cat "$log/tools" >&2
((tools_rc == 0)) || phase "building the Go tools failed; the end-to-end tests will say why"
if [[ -e $log/image.failed ]]; then
  tail -n 30 "$log/image" >&2
  phase "building the image failed; the real-node tests will build it again and say why"
fi

phase "end-to-end tests (${TPUJOB_E2E_SHARDS:-3} shards)${beside_pid:+; the TSan and fuzz builds, then fuzzing, beside them at nice 19}"
timed e2e bash scripts/e2e.sh "$build" 2>&1 | tee "$log/e2e"
e2e_rc=${PIPESTATUS[0]}

if [[ -n $beside_pid ]]; then
  phase "waiting for the TSan and fuzz builds and fuzzing"
  wait "$beside_pid"
  cat "$log/beside" >&2
  [[ -e $log/fuzz.failed ]] && fuzz_rc=1
  if [[ -e $log/build-tsan.failed ]]; then
    san_rc=1
  else
    phase "the threaded unit tests under TSan"
    timed tsan bash scripts/sanitize.sh thread 2>&1 | tee "$log/sanitizers"
    ((PIPESTATUS[0] == 0)) || san_rc=1
  fi
fi

ccache --dir "$ccache_dir" --show-stats >"$log/ccache" 2>/dev/null || true
printf 'total\t%d\t\n' $((SECONDS - start)) >>"$phases"
verdicts=()
if ((sanitizers)); then
  san_verdict=clean
  if [[ $san_rc != 0 ]]; then
    san_verdict="FAILED$(cat build-asan/sanitize-failure.txt build-tsan/sanitize-failure.txt 2>/dev/null |
      sed 's/^/ -- /' | tr -d '\n')"
  fi
  verdicts=(--sanitizers "$san_verdict"
    --fuzz "$([[ $fuzz_rc == 0 ]] && echo 'no findings' || echo FAILED)")
fi
python3 scripts/test-report.py --phases "$phases" --unit "$log/unit" --e2e "$log/e2e" \
  --timings "$build/e2e-timings.tsv" --junit "$build/e2e-junit.xml" --ccache "$log/ccache" \
  "${verdicts[@]}"
[[ $unit_rc == 0 && $e2e_rc == 0 && $san_rc == 0 && $fuzz_rc == 0 ]]
