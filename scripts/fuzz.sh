#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (AddressSanitizer and
# UndefinedBehaviorSanitizer on) and runs each for a bounded time, starting from its committed
# corpus tests/fuzz/corpus/<target>/ (part of `make test`; `make fuzz` alone).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [BUILD_DIR]     defaults: 30, build-fuzz
#
# TPUJOB_BUILD_ONLY=1 only builds (`make test` builds beside the end-to-end tests, then runs).
#
# The committed corpus is only read; what a run adds goes to BUILD_DIR/corpus/<target>/ and
# persists there for the next run (merge it into tests/fuzz/corpus with -merge=1 when it finds new
# coverage worth keeping). A crash, a sanitizer finding or a violated property fails the run and
# leaves the input in BUILD_DIR/crashes/<target>/; it prints the input as a C string so it can
# become a unit test at once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-30}
build=${2:-$root/build-fuzz}
jobs=${JOBS:-$(nproc)}
start=$SECONDS
say() { echo "[fuzz] $* ($((SECONDS - start)) s)" >&2; }

cxx=${TPUJOB_FUZZ_CXX:-}
if [[ -z $cxx ]]; then
  for candidate in clang++-16 clang++; do
    command -v "$candidate" >/dev/null && { cxx=$candidate; break; }
  done
fi
[[ -n $cxx ]] || { say "no clang++ found (make deps installs clang-16)"; exit 1; }
if [[ ! -f $build/build.ninja ]]; then
  CXX=$cxx cmake -S "$root" -B "$build" -G Ninja -DTPUJOB_FUZZ=ON \
    -DTPUJOB_SANITIZE=address,undefined -DTPUJOB_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_CXX_FLAGS="-O1 -g1" >/dev/null
fi
say "building the fuzz targets with $cxx in $build"
cmake --build "$build" -j "$jobs" --target fuzzers >"$build/fuzz-build.log" 2>&1 || {
  tail -n 60 "$build/fuzz-build.log" >&2
  say "build failed (log: $build/fuzz-build.log)"
  exit 1
}
say "built"
[[ ${TPUJOB_BUILD_ONLY:-0} == 1 ]] && exit 0

export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1
command -v llvm-symbolizer-16 >/dev/null && export ASAN_SYMBOLIZER_PATH=$(command -v llvm-symbolizer-16)
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=0
for source in "$root"/tests/fuzz/*_fuzzer.cpp; do
  target=$(basename "$source" .cpp)
  seeds=$root/tests/fuzz/corpus/$target
  work=$build/corpus/$target
  crashes=$build/crashes/$target
  mkdir -p "$work" "$crashes"
  log=$build/$target.log
  if "$build/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$crashes/" "$work" "$seeds" >"$log" 2>&1; then
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -1)
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    corpus=$(find "$work" -type f | wc -l)
    say "$target: ${runs:-?} executions in ${seconds} s, coverage ${cov:-?}, corpus $corpus, no findings"
  else
    failed=1
    grep -vE '^#[0-9]+' "$log" | tail -n 60 >&2
    for crash in "$crashes"/*; do
      [[ -f $crash ]] || continue
      echo "[fuzz] $target input $crash as a C string:" >&2
      python3 - "$crash" >&2 <<'PY'
import sys
text = open(sys.argv[1], "rb").read().decode("latin-1")
escape = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
out = (escape.get(c) or (c if 32 <= ord(c) < 127 else '\\x%02x""' % ord(c)) for c in text)
print('"' + "".join(out) + '"')
PY
    done
    say "$target: FAILED (log: $log)"
  fi
done
exit $failed
