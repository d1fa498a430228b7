#!/usr/bin/env bash
# The fault campaign's checker, shown to catch what it claims (`make chaos-selftest`): for each
# deliberately broken operator in e2e/chaos-breaks/ (a patch, applied only here), the operator is
# built with it and a short campaign run with that build; the campaign must fail and its output
# name what the patch breaks (the patch's `expect:` line), with the seed. The broken builds live
# in a git worktree of HEAD in the tool cache (only the operator is built there; switching
# patches rebuilds only the files they touch). The campaigns run on a control plane of their own
# in $TPUJOB_CHAOS_DIR (default /tmp/tpujob-chaos-breaks), started and stopped here.
#   CHAOS_BREAKS   which patches (default: every one), e.g. "retries orphans"
#   CHAOS_SEED     the seed (default 1); CHAOS_SECONDS the schedule's length (default 120)
# Usage: chaos-breaks.sh [BUILD_DIR]   (BUILD_DIR holds the e2e_tests binary)
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TPUJOB_CHAOS_DIR:-/tmp/tpujob-chaos-breaks}
seed=${CHAOS_SEED:-1}
seconds=${CHAOS_SECONDS:-120}
breaks=${CHAOS_BREAKS:-$(cd "$root/e2e/chaos-breaks" && ls -- *.patch | sed 's/\.patch$//' | tr '\n' ' ')}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/tpujob-operator
worktree=$cache/chaos-break
PATH="$(bash "$root/scripts/install-go.sh"):$PATH"
"$root/e2e/tools/build.sh" >/dev/null

# A worktree of this clone (one left by another clone is replaced).
common=$(cd "$root" && realpath "$(git rev-parse --git-common-dir)")
if [[ ! -e $worktree/.git ]] ||
  [[ $(cd "$worktree" && realpath "$(git rev-parse --git-common-dir 2>/dev/null || echo none)") != "$common" ]]; then
  rm -rf "$worktree"
  mkdir -p "$cache"
  git -C "$root" worktree prune
  git -C "$root" worktree add --detach "$worktree" HEAD >/dev/null
fi
cleanup() {
  "$root/e2e/cluster" down --dir "$dir" >/dev/null 2>&1 || true
  git -C "$worktree" checkout -q -- . 2>/dev/null || true
}
trap cleanup EXIT
"$root/e2e/cluster" up --dir "$dir" >/dev/null

failed=
for name in $breaks; do
  patch=$root/e2e/chaos-breaks/$name.patch
  expect=$(sed -n 's/^expect: //p' "$patch" | head -n 1)
  [[ -n $expect ]] || { echo "chaos-breaks: $patch has no 'expect:' line" >&2; exit 2; }
  echo "chaos-breaks: $name: building the operator with $patch"
  git -C "$worktree" checkout -q -- .
  git -C "$worktree" checkout -q --detach "$(git -C "$root" rev-parse HEAD)"
  git -C "$worktree" apply "$patch"
  cmake -S "$worktree" -B "$worktree/build" -G Ninja -DTPUJOB_BUILD_TESTS=OFF >/dev/null
  cmake --build "$worktree/build" -j "$(nproc)" --target tpujob-operator >/dev/null
  echo "chaos-breaks: $name: a campaign of $seconds s, seed $seed; it must fail with: $expect"
  log=$dir/$name.log
  set +e
  TPUJOB_E2E_DIR="$dir" TPUJOB_E2E_OPERATOR_BINARY="$worktree/build/tpujob-operator" \
    TPUJOB_CHAOS_SEED="$seed" TPUJOB_CHAOS_SECONDS="$seconds" TPUJOB_CHAOS_SETTLE_SECONDS=90 \
    "$root/$build/e2e_tests" --gtest_filter='ChaosE2E.SeededCampaignKeepsEveryPromise' >"$log" 2>&1
  rc=$?
  set -e
  if ((rc != 0)) && grep -qF -- "$expect" "$log" && grep -qF -- "chaos seed $seed" "$log"; then
    echo "chaos-breaks: $name: caught, as it must be:"
    grep -m 3 -F -- "$expect" "$log" | cut -c1-400 | sed 's/^/    /'
  else
    echo "chaos-breaks: $name: NOT caught (exit $rc; the campaign's output: $log)" >&2
    tail -n 40 "$log" >&2
    failed+=" $name"
  fi
done
if [[ -n $failed ]]; then
  echo "chaos-breaks: the checker missed:$failed" >&2
  exit 1
fi
echo "chaos-breaks: every broken operator was caught ($breaks)"
