#!/usr/bin/env bash
# The fault campaign (`make chaos`): e2e/chaos_e2e_test.cpp on a control plane of its own, in
# $TPUJOB_CHAOS_DIR (default /tmp/tpujob-chaos), started here and stopped at the end.
#   CHAOS_SEEDS    the seeds to run, one campaign each (default: one random seed, printed first)
#   CHAOS_SECONDS  how long each schedule runs (default 600)
#   CHAOS_JOBS     jobs per campaign (default 60; after them new jobs keep coming while fewer
#                  than half that number are unfinished)
#   CHAOS_REAL_NODE  1 (default): the control plane has a real node (e2e/cluster up --real-node),
#                  which takes part with a fifth of the jobs; 0: KWOK nodes only
# Each campaign prints its seed, the steps done by kind and the checks made; a failure names the
# seed, the invariant and the objects. TPUJOB_CHAOS_SEED=<seed> with the same CHAOS_SECONDS
# replays a schedule. After the campaigns every line the operators logged must parse.
# Usage: chaos.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TPUJOB_CHAOS_DIR:-/tmp/tpujob-chaos}
seeds=${CHAOS_SEEDS:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
seconds=${CHAOS_SECONDS:-600}
jobs=${CHAOS_JOBS:-60}
real_node=${CHAOS_REAL_NODE:-1}
up_args=()
((real_node)) && up_args=(--real-node)
PATH="$(bash "$root/scripts/install-go.sh"):$PATH"
"$root/e2e/tools/build.sh" >/dev/null
echo "chaos: seeds $seeds, $seconds s each, $jobs jobs$( ((real_node)) && echo ", a real node"); control plane in $dir"
cleanup() { "$root/e2e/cluster" down --dir "$dir" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$root/e2e/cluster" up --dir "$dir" "${up_args[@]}" >/dev/null
find "$dir" -name '*operator*.log' -type f -delete
failed=
for seed in $seeds; do
  echo "chaos: seed $seed"
  if ! TPUJOB_E2E_DIR="$dir" TPUJOB_CHAOS_SEED="$seed" TPUJOB_CHAOS_SECONDS="$seconds" \
    TPUJOB_CHAOS_JOBS="$jobs" "$root/$build/e2e_tests" \
    --gtest_filter='ChaosE2E.SeededCampaignKeepsEveryPromise'; then
    failed+=" $seed"
  fi
done
if ! TPUJOB_OPERATOR_LOG_DIR="$dir" "$root/$build/unit_tests" \
  --gtest_filter=OperatorLogFiles.EveryLineTheEndToEndSuiteWrote; then
  failed+=" (operator logs)"
fi
if [[ -n $failed ]]; then
  echo "chaos: FAILED for seed(s)$failed" >&2
  exit 1
fi
echo "chaos: every campaign kept every promise (seeds $seeds)"
