#!/usr/bin/env bash
# Builds the unit tests with sanitizers and runs them (part of `make test`; `make sanitize` alone).
#
#   scripts/sanitize.sh address [BUILD_DIR]   every unit test under AddressSanitizer (with
#                                              LeakSanitizer) and UndefinedBehaviorSanitizer,
#                                              built in BUILD_DIR (default build-asan)
#   scripts/sanitize.sh thread [BUILD_DIR]    the unit tests that run threads of their own
#                                              (CMake target threaded_tests) under
#                                              ThreadSanitizer, in BUILD_DIR (default build-tsan)
#
# TPUJOB_BUILD_ONLY=1 only builds (`make test` builds beside the end-to-end tests, then runs).
#
# The first finding fails the run with the sanitizer's report (halt_on_error). The builds are
# incremental: a second run only recompiles what changed. Both use -O1 and line tables only,
# which keeps the compile short and the reports readable.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
case $mode in
  address) build=${2:-$root/build-asan} sanitize=address,undefined target=unit_tests ;;
  thread) build=${2:-$root/build-tsan} sanitize=thread target=threaded_tests ;;
  *)
    echo "usage: scripts/sanitize.sh address|thread [BUILD_DIR]" >&2
    exit 2
    ;;
esac
jobs=${JOBS:-$(nproc)}
start=$SECONDS
say() { echo "[sanitize $mode] $* ($((SECONDS - start)) s)" >&2; }

if [[ ! -f $build/build.ninja ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DTPUJOB_SANITIZE="$sanitize" -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_CXX_FLAGS="-O1 -g1" >/dev/null
fi
# One line saying what failed, for the summary at the end of `make test` (scripts/run-tests.sh).
failure=$build/sanitize-failure.txt
rm -f "$failure"
say "building $target in $build"
cmake --build "$build" -j "$jobs" --target "$target" >"$build/sanitize-build.log" 2>&1 || {
  tail -n 60 "$build/sanitize-build.log" >&2
  say "build failed (log: $build/sanitize-build.log)"
  echo "$mode: the build failed ($build/sanitize-build.log)" >"$failure"
  exit 1
}
say "built"
[[ ${TPUJOB_BUILD_ONLY:-0} == 1 ]] && exit 0

# fast_unwind_on_malloc=0: OpenSSL is built without frame pointers, and the leak suppressions
# (tests/lsan.supp) need whole allocation stacks.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:fast_unwind_on_malloc=0
export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$root/tests/ubsan.supp"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp"
# The gtest output goes to a log; on failure its tail (the failing test and the report) is shown.
log=$build/sanitize-test.log
if "$build/$target" --gtest_brief=1 >"$log" 2>&1; then
  passed=$(sed -nE 's/^\[  PASSED  \] ([0-9]+) tests?\./\1/p' "$log" | tail -1)
  say "${passed:-?} tests passed, no findings"
else
  tail -n 80 "$log" >&2
  say "FAILED (log: $log)"
  # The failed tests by name (a sanitizer's abort ends the run inside its test, which --gtest_brief
  # leaves unnamed: its report's SUMMARY line then says where).
  failed=$(sed -nE 's/^\[  FAILED  \] ([A-Za-z0-9_]+\.[A-Za-z0-9_/]+).*/\1/p' "$log" | sort -u | head -n 5 |
    paste -sd, -)
  summary=$(grep -m1 '^SUMMARY: ' "$log" || true)
  echo "$mode: ${failed:-no test finished failing}${summary:+; $summary} ($log)" >"$failure"
  exit 1
fi
