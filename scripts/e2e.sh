#!/usr/bin/env bash
# Runs the end-to-end tests in parallel shards, each on a control plane of its own (part of
# `make test`; `make e2e` alone). ctest schedules them (e2e/lib/shards.sh writes its resource
# specification): every test holds one shard's control plane while it runs, the longest known
# tests start first, and the tests of the real node take the one real node in turn, beside the
# shards.
#
#   scripts/e2e.sh [BUILD_DIR] [CTEST_ARGS...]     e.g. scripts/e2e.sh build -R 'QueueE2E'
#
# Environment:
#   TPUJOB_E2E_SHARDS      how many control planes (default 3, which keeps both cores of this
#                          project's machines busy; docs/testing.md has the figures)
#   TPUJOB_E2E_SAVE_COSTS  1: after a green run of the whole suite, write each test's time into
#                          e2e/test-costs.txt (the order a new build directory starts them in)
#
# Left for a look after the run, under BUILD_DIR:
#   Testing/Temporary/LastTest.log   every test's whole output (ctest's own log)
#   e2e-junit.xml                    each test's result and time
#   e2e-timings.tsv                  each gtest test's shard, start and end (e2e/lib/test_timings.cpp)
#   e2e-cluster/shard-K/logs/        the logs of shard K's control plane and operators
# A failed test is listed at the end with the shard it ran on and that shard's logs.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
shift || true
build=$(cd "$build" && pwd) || exit 1
shards=${TPUJOB_E2E_SHARDS:-3}
[[ $shards =~ ^[1-9][0-9]*$ ]] || { echo "[e2e] TPUJOB_E2E_SHARDS must be a positive number, not '$shards'" >&2; exit 2; }

spec=$build/e2e-resources.json
bash "$root/e2e/lib/shards.sh" spec "$spec" "$shards" || exit 1
# ctest starts the tests it knows to be long first (its cost data, kept in the build
# directory: "NAME RUNS SECONDS" lines, then "---" and the tests that failed last). The tests it
# has no figure for yet (a new build directory, where only the unit tests ran) get the committed
# ones (e2e/test-costs.txt), so that a clean clone does not start the longest test last.
costs=$build/Testing/Temporary/CTestCostData.txt
mkdir -p "$(dirname "$costs")"
python3 - "$costs" "$root/e2e/test-costs.txt" <<'PY' || exit 1
import os, sys
path, committed = sys.argv[1], sys.argv[2]
def read(p):
    known, failed, section = {}, [], "costs"
    if os.path.exists(p):
        for line in open(p, encoding="utf-8").read().splitlines():
            if line == "---":
                section = "failed"
            elif section == "failed":
                failed.append(line)
            elif line.strip():
                known[line.rsplit(" ", 2)[0]] = line
    return known, failed
known, failed = read(path)
for name, line in read(committed)[0].items():
    known.setdefault(name, line)
with open(path + ".tmp", "w", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in known.values()) + "---\n")
    f.write("".join(line + "\n" for line in failed))
os.replace(path + ".tmp", path)
PY
export TPUJOB_E2E_SHARDS=$shards
export TPUJOB_E2E_TIMINGS=$build/e2e-timings.tsv
rm -f "$TPUJOB_E2E_TIMINGS"
echo "[e2e] $shards shard(s) and the real node, under $build/e2e-cluster and $build/e2e-real" >&2
# -j: one test per shard, one on the real node, and the fixtures' own steps beside them.
ctest --test-dir "$build" --output-on-failure -L e2e -j $((shards + 2)) \
  --resource-spec-file "$spec" --output-junit "$build/e2e-junit.xml" "$@"
rc=$?
if [[ $rc == 0 && ${TPUJOB_E2E_SAVE_COSTS:-0} == 1 && $# == 0 ]]; then
  # ctest's own file: "NAME RUNS SECONDS" lines, then "---" and the tests that failed last.
  sed -E '/^---$/,$d; s/ [0-9]+ ([0-9.]+)$/ 1 \1/' "$costs" >"$root/e2e/test-costs.txt"
  printf -- '---\n' >>"$root/e2e/test-costs.txt"
  echo "[e2e] wrote $root/e2e/test-costs.txt" >&2
fi
if [[ -s $TPUJOB_E2E_TIMINGS ]]; then
  while IFS=$'\t' read -r name shard _ _ result; do
    [[ $result == failed ]] || continue
    case $shard in
      real) logs=$build/e2e-real/logs ;;
      -) logs="(not run on a shard)" ;;
      *) logs=$build/e2e-cluster/shard-$shard/logs ;;
    esac
    echo "[e2e] FAILED $name on shard $shard; its cluster's logs: $logs; its output: $build/Testing/Temporary/LastTest.log" >&2
  done <"$TPUJOB_E2E_TIMINGS"
fi
exit $rc
