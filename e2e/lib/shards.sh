#!/usr/bin/env bash
# The end-to-end suite's control planes: one per shard, each a whole e2e/cluster of its own
# (directory, ports, etcd, KWOK), so that ctest can run one test on each at the same time.
#
#   e2e/lib/shards.sh up ROOT [N|SPEC]  start ROOT/shard-1 ... ROOT/shard-N together and wait
#                                     for all of them (N: a number, or as many as the resource
#                                     specification SPEC has clusters; default
#                                     $TPUJOB_E2E_SHARDS, else 1); a shard above N left by an
#                                     earlier run is stopped
#   e2e/lib/shards.sh down ROOT       stop every ROOT/shard-* (and the MultiKueue managers the
#                                     tests start beside them, ROOT/shard-*-manager) together
#   e2e/lib/shards.sh spec FILE N     write ctest's resource specification: N slots of resource
#                                     "cluster" (ids 1..N, one per shard) and one of "realnode"
#
# A test that holds resource "cluster" with id K runs against ROOT/shard-K (e2e/e2e_env.h,
# ClusterDir()). Each shard's `up` output goes to ROOT/shard-K/up.log; a shard that does not come
# up fails `up` with that log's tail, and the shards that did come up keep running for `down`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster=$here/../cluster
command=${1:-}
say() { echo "[shards] $*" >&2; }

case $command in
  up)
    root=${2:?usage: shards.sh up ROOT [N]}
    n=${3:-${TPUJOB_E2E_SHARDS:-1}}
    if [[ -f $n ]]; then
      n=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["local"][0]["cluster"]))' "$n") ||
        { say "cannot read the clusters of the resource specification $3"; exit 2; }
    fi
    [[ $n =~ ^[1-9][0-9]*$ ]] || { say "the shard count must be a positive number, not '$n'"; exit 2; }
    mkdir -p "$root"
    # Shards of an earlier run with more of them: stopped, so that none is left running unseen.
    for dir in "$root"/shard-*; do
      [[ -d $dir ]] || continue
      k=${dir##*/shard-}
      [[ $k =~ ^[0-9]+$ ]] && ((k > n)) && "$cluster" down --dir "$dir" >/dev/null 2>&1 || true
    done
    start=$SECONDS
    declare -A pids=()
    for ((k = 1; k <= n; k++)); do
      mkdir -p "$root/shard-$k"
      "$cluster" up --dir "$root/shard-$k" >"$root/shard-$k/up.log" 2>&1 &
      pids[$k]=$!
    done
    failed=0
    for ((k = 1; k <= n; k++)); do
      if ! wait "${pids[$k]}"; then
        say "shard $k did not come up ($root/shard-$k/up.log):"
        tail -n 30 "$root/shard-$k/up.log" >&2
        failed=1
      fi
    done
    ((failed == 0)) || exit 1
    say "$n control plane(s) up in $((SECONDS - start)) s under $root"
    ;;
  down)
    root=${2:?usage: shards.sh down ROOT}
    declare -a pids=()
    for dir in "$root"/shard-*; do
      [[ -d $dir ]] || continue
      "$cluster" down --dir "$dir" >"$dir.down.log" 2>&1 &
      pids+=($!)
    done
    failed=0
    for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
    ((failed == 0)) || { say "a shard did not stop cleanly (logs: $root/shard-*.down.log)"; exit 1; }
    ;;
  spec)
    file=${2:?usage: shards.sh spec FILE N}
    n=${3:?usage: shards.sh spec FILE N}
    [[ $n =~ ^[1-9][0-9]*$ ]] || { say "the shard count must be a positive number, not '$n'"; exit 2; }
    {
      printf '{"version": {"major": 1, "minor": 0}, "local": [{\n  "cluster": ['
      for ((k = 1; k <= n; k++)); do
        printf '%s{"id": "%d", "slots": 1}' "$([[ $k == 1 ]] || echo ', ')" "$k"
      done
      printf '],\n  "realnode": [{"id": "real", "slots": 1}]\n}]}\n'
    } >"$file.tmp"
    mv "$file.tmp" "$file"
    ;;
  *)
    sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
