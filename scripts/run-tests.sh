#!/usr/bin/env bash
# Runs the unit tests, then the end-to-end tests on a real local control plane, and prints the
# totals. Exit status is non-zero if any test failed.
set -uo pipefail
build=${1:-build}
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

ctest --test-dir "$build" --output-on-failure -L unit -j "$(nproc)" 2>&1 | tee "$log/unit"
unit_rc=${PIPESTATUS[0]}
ctest --test-dir "$build" --output-on-failure -L e2e 2>&1 | tee "$log/e2e"
e2e_rc=${PIPESTATUS[0]}

count() {  # count FILE: "passed failed" from ctest's summary line
  sed -nE 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1 \2/p' "$1" | tail -1 |
    awk '{print $2 - $1, $1}'
}
read -r unit_pass unit_fail < <(count "$log/unit")
read -r e2e_pass e2e_fail < <(count "$log/e2e")
echo
echo "unit: ${unit_pass:-0} passed, ${unit_fail:-0} failed"
echo "e2e: ${e2e_pass:-0} passed, ${e2e_fail:-0} failed"
echo "total: $(( ${unit_pass:-0} + ${e2e_pass:-0} )) passed, $(( ${unit_fail:-0} + ${e2e_fail:-0} )) failed"
[[ $unit_rc == 0 && $e2e_rc == 0 ]]
