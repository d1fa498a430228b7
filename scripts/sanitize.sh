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
# The tests run in JOBS processes (GoogleTest's shards: each process runs every JOBS-th test), as
# the plain unit tests run under ctest -j; each shard's output goes to a log, and on failure its
# tail (the failing test and the report) is shown.
shards=$((jobs > 0 ? jobs : 1))
rm -f "$build"/sanitize-test-*.log
pids=()
for ((i = 0; i < shards; i++)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$build/$target" --gtest_brief=1 \
    >"$build/sanitize-test-$i.log" 2>&1 &
  pids+=($!)
done
failed_logs=() shard_failed=()
for ((i = 0; i < shards; i++)); do
  shard_failed[i]=0
  wait "${pids[$i]}" || { shard_failed[i]=1; failed_logs+=("$build/sanitize-test-$i.log"); }
done
log=$build/sanitize-test.log
cat "$build"/sanitize-test-[0-9]*.log >"$log"
# Counted per shard: "[  PASSED  ] N tests.", "[  SKIPPED ] N tests." and "[  FAILED  ] N tests,
# listed below"; a shard a sanitizer stopped inside a test counts that test as failed.
passed=0 failed_count=0 skipped=0
for ((i = 0; i < shards; i++)); do
  shard_log=$build/sanitize-test-$i.log
  n=$(sed -nE 's/^\[  PASSED  \] ([0-9]+) tests?\./\1/p' "$shard_log" | tail -1)
  k=$(sed -nE 's/^\[  SKIPPED \] ([0-9]+) tests?\..*/\1/p' "$shard_log" | tail -1)
  skipped=$((skipped + ${k:-0}))
  f=$(sed -nE 's/^\[  FAILED  \] ([0-9]+) tests?, listed below.*/\1/p' "$shard_log" | tail -1)
  passed=$((passed + ${n:-0}))
  if [[ -n $f ]]; then
    failed_count=$((failed_count + f))
  elif ((shard_failed[i])); then
    failed_count=$((failed_count + 1))
  fi
done
if ((${#failed_logs[@]} == 0)); then
  say "$passed tests passed, $skipped skipped, no findings"
else
  for f in "${failed_logs[@]}"; do tail -n 80 "$f" >&2; done
  say "$passed tests passed, $failed_count failed, $skipped skipped (logs: ${failed_logs[*]})"
  # The failed tests by name (a sanitizer's abort ends the run inside its test, which --gtest_brief
  # leaves unnamed: its report's SUMMARY line then says where).
  failed=$(cat "${failed_logs[@]}" | sed -nE 's/^\[  FAILED  \] ([A-Za-z0-9_]+\.[A-Za-z0-9_/]+).*/\1/p' |
    sort -u | head -n 5 | paste -sd, -)
  summary=$(cat "${failed_logs[@]}" | grep -m1 '^SUMMARY: ' || true)
  echo "$mode: ${failed:-no test finished failing}${summary:+; $summary} ($log)" >"$failure"
  exit 1
fi
