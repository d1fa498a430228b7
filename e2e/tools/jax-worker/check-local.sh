#!/usr/bin/env bash
# Runs train.py as two processes joined over loopback, outside Kubernetes, and checks what the
# end-to-end tests rely on: steps in lockstep, checkpoints and their restore after a restart, a
# SIGTERM to one process stopping both at the same step with a checkpoint, and a hang in one
# process blocking the other in the collective (no progress) until it is killed, once only with
# TRAIN_HANG_ONCE=1. Takes about a minute.
#
# Usage: e2e/tools/jax-worker/check-local.sh [PYTHON]
#   PYTHON  an interpreter with the wheels of requirements.txt (default python3), e.g. a venv made
#           with `python3 -m venv V && V/bin/pip install --no-index --find-links
#           <tools cache>/jax-wheels-<key> -r requirements.txt`
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${1:-python3}
dir=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
trap 'exit 1' INT TERM
ckpt=$dir/ckpt
mkdir -p "$ckpt"
port=$((20000 + RANDOM % 20000))
passed=0 failed=0
check() {
  if eval "$2"; then
    echo "ok: $1"
    passed=$((passed + 1))
  else
    echo "FAILED: $1"
    failed=$((failed + 1))
    for i in 0 1; do echo "--- process $i"; cat "$dir/p$i.out" "$dir/p$i.err"; done
  fi
}
# start ENV...: both processes in the background, their pids in pid0 and pid1.
start() {
  local i
  for i in 0 1; do
    env JAX_COORDINATOR_ADDRESS=127.0.0.1:$port JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=$i \
      TPUJOB_CHECKPOINT_PATH="$ckpt" "$@" "$python" "$here/train.py" >"$dir/p$i.out" 2>"$dir/p$i.err" &
    eval "pid$i=$!"
  done
}
# finish: waits for both; their exit codes in rc0 and rc1.
finish() {
  { wait "$pid0"; } 2>/dev/null; rc0=$?
  { wait "$pid1"; } 2>/dev/null; rc1=$?
}
steps() { grep -c '^completed step: ' "$dir/p$1.out"; }
last_step() { grep '^completed step: ' "$dir/p$1.out" | tail -n1 | sed 's/^completed step: \([0-9]*\),.*/\1/'; }

start TRAIN_STEPS=12 TRAIN_CHECKPOINT_EVERY=5
finish
check "a first run of 12 steps exits 0 in both" '((rc0 == 0 && rc1 == 0)) && [[ $(steps 0) == 12 && $(steps 1) == 12 ]]'
check "the same loss in both (gradients all-reduced)" \
  'diff <(grep "^completed" "$dir/p0.out" | sed "s/seconds: [0-9.]*//") <(grep "^completed" "$dir/p1.out" | sed "s/seconds: [0-9.]*//") >/dev/null'
check "process 0 saved at 5, 10 and 12" \
  '[[ $(grep -c "^saved checkpoint at step" "$dir/p0.out") == 3 ]] && grep -qx "saved checkpoint at step 12" "$dir/p0.out"'

start TRAIN_STEPS=15 TRAIN_CHECKPOINT_EVERY=5
finish
check "a restart restores step 12 and runs 13..15" \
  '((rc0 == 0 && rc1 == 0)) && grep -qx "restored checkpoint at step 12" "$dir/p1.out" && [[ $(steps 0) == 3 && $(last_step 1) == 15 ]]'

start TRAIN_STEPS=0 TRAIN_STEP_SECONDS=0.3 TRAIN_CHECKPOINT_EVERY=0
for _ in $(seq 100); do [[ $(steps 1) -ge 3 ]] && break; sleep 0.3; done
kill -TERM "$pid1"
finish
check "a SIGTERM to process 1 stops both at one step, saved by process 0, exit 143" \
  '((rc0 == 143 && rc1 == 143)) && [[ $(last_step 0) == "$(last_step 1)" ]] && grep -qx "saved checkpoint at step $(last_step 0)" "$dir/p0.out"'
stopped=$(last_step 0)

start TRAIN_STEPS=0 TRAIN_HANG_AT_STEP=$((stopped + 3)) TRAIN_HANG_PROCESS=1 TRAIN_HANG_ONCE=1
sleep 20
before=$(steps 0)
sleep 10
check "a hang of process 1 in step $((stopped + 3)) blocks process 0 after step $((stopped + 2))" \
  '[[ $(last_step 0) == $((stopped + 2)) && $(steps 0) == "$before" ]] && kill -0 "$pid0" 2>/dev/null'
kill -KILL "$pid0" "$pid1"
finish

start TRAIN_STEPS=$((stopped + 6)) TRAIN_HANG_AT_STEP=$((stopped + 3)) TRAIN_HANG_PROCESS=1 TRAIN_HANG_ONCE=1
finish
check "with TRAIN_HANG_ONCE=1 a restart runs past step $((stopped + 3))" \
  '((rc0 == 0 && rc1 == 0)) && [[ $(last_step 1) == $((stopped + 6)) ]]'

start TRAIN_STEPS=$((stopped + 8)) TRAIN_SILENT=1
finish
check "TRAIN_SILENT=1 prints nothing of its own on stdout" \
  '((rc0 == 0 && rc1 == 0)) && ! grep -q "^completed\|^saved\|^restored" "$dir/p0.out" "$dir/p1.out"'

# The operator's variables instead of JAX_*: one slice of two hosts, then two slices of one.
start_operator_env() {
  local i
  for i in 0 1; do
    env -u JAX_COORDINATOR_ADDRESS JAX_COORDINATOR_PORT=$port TPUJOB_CHECKPOINT_PATH="$dir/ckpt-$1" \
      TRAIN_STEPS=3 "${@:2}" $([[ $1 == slice ]] && echo TPU_WORKER_HOSTNAMES=localhost,127.0.0.1 TPU_WORKER_ID=$i ||
        echo TPU_WORKER_HOSTNAMES=127.0.0.1 TPU_WORKER_ID=0 MEGASCALE_NUM_SLICES=2 MEGASCALE_SLICE_ID=$i \
          MEGASCALE_COORDINATOR_ADDRESS=localhost) \
      "$python" "$here/train.py" >"$dir/p$i.out" 2>"$dir/p$i.err" &
    eval "pid$i=$!"
  done
}
for layout in slice multislice; do
  start_operator_env $layout
  finish
  check "the operator's variables ($layout): processes 0 and 1 of 2 run 3 steps" \
    '((rc0 == 0 && rc1 == 0)) && grep -q "process 1 of 2, coordinator localhost:$port" "$dir/p1.err" && [[ $(steps 0) == 3 && $(steps 1) == 3 ]]'
done

echo "$passed passed, $failed failed"
((failed == 0))
