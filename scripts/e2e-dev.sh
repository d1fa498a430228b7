#!/usr/bin/env bash
# The edit-test loop of the end-to-end tests: builds what changed, keeps one control plane up
# between runs, and runs only the tests a gtest filter names against it (`make e2e-dev E2E=...`).
#
#   scripts/e2e-dev.sh [BUILD_DIR] FILTER    e.g. scripts/e2e-dev.sh build 'QueueE2E.*'
#   scripts/e2e-dev.sh [BUILD_DIR] --down    stop the kept control plane
#
# The first run starts the control plane in BUILD_DIR/e2e-dev (about 15 s); later runs find it up
# and go straight to the tests (e2e/cluster up returns at once when every component is healthy,
# and recovers the ones that died). A test that needs Kueue starts it there itself, once. The
# real-node tests need a real node: `e2e/cluster up --real-node --dir BUILD_DIR/e2e-real`, then
# TPUJOB_E2E_DIR=BUILD_DIR/e2e-real BUILD_DIR/e2e_tests --gtest_filter=...
# Extra arguments after FILTER go to the test binary (e.g. --gtest_repeat=5).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=build
if [[ $# -ge 2 || -d ${1:-} ]]; then build=$1; shift; fi
filter=${1:-}
shift || true
dir=$(cd "$build" && pwd)/e2e-dev
if [[ $filter == --down ]]; then
  exec "$root/e2e/cluster" down --dir "$dir"
fi
[[ -n $filter ]] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
t0=$SECONDS
cmake --build "$build" --target e2e_tests tpujob-operator tpujob-supervise >/dev/null ||
  { echo "[e2e-dev] build failed: cmake --build $build" >&2; exit 1; }
"$root/e2e/cluster" up --dir "$dir" >/dev/null
echo "[e2e-dev] built and control plane up in $((SECONDS - t0)) s ($dir)" >&2
TPUJOB_E2E_DIR=$dir exec "$build/e2e_tests" --gtest_filter="$filter" "$@"
