#!/usr/bin/env bash
# tpujob-supervise's output passthrough with progress tracking on, measured on this machine:
#  1. throughput: BENCH_MB (default 512) MB of log lines (~110 bytes, one in BENCH_STEP_EVERY
#     (default 20) a step line the log pattern matches) from `cat FILE`, passed on through the
#     supervisor to a pipe (`tpujob-supervise -- cat FILE | cat >/dev/null`) against passed on
#     through `cat` (`cat FILE | cat | cat >/dev/null`), best of BENCH_RUNS (3) each, interleaved,
#     in the same run; prints both in MB/s and their ratio (goal: >= 0.8);
#  2. CPU: a program writing 10 MB/s of log lines in 64 KiB blocks for BENCH_SECONDS (10); prints
#     the supervisor's own CPU time (user + system, from /proc, its children not included) as a
#     percentage of one core (goal: <= 2);
#  3. stall to stop: a program that prints one step, then hangs (SIGTERM ends it), under
#     TPUJOB_PROGRESS_STALL_SECONDS=1; the time from its step line to the supervisor's exit,
#     beyond the 1 s stall window, median of BENCH_STALL_RUNS (5) (goal: <= 1 s).
# Usage: scripts/bench-supervisor.sh [BUILD_DIR]   (BUILD_DIR default: build; needs python3 and
# tpujob-supervise built: cmake --build BUILD_DIR --target tpujob-supervise)
# Nothing here asserts a number.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
if [[ $build == /* ]]; then supervise="$build/tpujob-supervise"; else supervise="$root/$build/tpujob-supervise"; fi
mb=${BENCH_MB:-512}
runs=${BENCH_RUNS:-3}
seconds=${BENCH_SECONDS:-10}
step_every=${BENCH_STEP_EVERY:-20}
[[ -x $supervise ]] || { echo "bench-supervisor: no $supervise (build tpujob-supervise)" >&2; exit 2; }
dir=$(mktemp -d /tmp/tpujob-bench-supervisor-XXXXXX)
trap 'rm -rf "$dir"' EXIT

export TPUJOB_SUPERVISOR_MODE=once
export TPUJOB_SUPERVISOR_MESSAGE="$dir/message"
export TPUJOB_PROGRESS_LOG_PATTERN='completed step: (\d+)'
export TPUJOB_PROGRESS_CHECKPOINT_PATTERN='saved checkpoint (\d+)'

# Log lines like a trainer's: mostly metrics, a step line in every few.
python3 - "$dir/data" "$mb" "$step_every" <<'EOF'
import sys
path, mb, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "wb") as f:
    line, step, size = 0, 0, 0
    while size < mb << 20:
        block = []
        for _ in range(2000):
            line += 1
            if line % every == 0:
                step += 1
                block.append(b"I1205 01:02:03.456789  1234 train.py:321] completed step: %d "
                             b"loss=2.%04d lr=3.0e-04 tokens/s=123456 mfu=45.6%%\n" % (step, step % 9999))
            else:
                block.append(b"I1205 01:02:03.456790  1234 metrics.py:88] grad_norm=0.%04d "
                             b"param_norm=1234.5 step_time=0.123s data_wait=0.001s\n" % (line % 9999))
        data = b"".join(block)
        f.write(data)
        size += len(data)
EOF
bytes=$(stat -c %s "$dir/data")

now() { date +%s.%N; }
best_cat=
best_sup=
for ((i = 0; i < runs; i++)); do
  t0=$(now)
  cat "$dir/data" | cat | cat >/dev/null
  t1=$(now)
  "$supervise" -- cat "$dir/data" 2>/dev/null | cat >/dev/null
  t2=$(now)
  best_cat=$(python3 -c "a = $t1 - $t0; b = '$best_cat'; print(min(a, float(b)) if b else a)")
  best_sup=$(python3 -c "a = $t2 - $t1; b = '$best_sup'; print(min(a, float(b)) if b else a)")
done
python3 - "$bytes" "$best_cat" "$best_sup" "$step_every" <<'EOF'
import sys
size, cat, sup = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
mb = size / (1 << 20)
print(f"throughput: {mb:.0f} MB (a step line in {sys.argv[4]}) through cat {mb / cat:.0f} MB/s, through tpujob-supervise "
      f"{mb / sup:.0f} MB/s, ratio {cat / sup:.2f} (goal >= 0.8)")
EOF

# 10 MB/s for BENCH_SECONDS, then a pause in which the supervisor's CPU time is read.
cat >"$dir/writer.py" <<'EOF'
import sys, time
seconds = float(sys.argv[1])
out = sys.stdout.buffer
lines = []
for i in range(600):
    lines.append(b"I1205 01:02:03.456789  1234 metrics.py:88] grad_norm=0.%04d "
                 b"param_norm=1234.5 step_time=0.123s data_wait=0.001s\n" % i)
filler = b"".join(lines)
rate = 10 << 20
start = time.monotonic()
sent, step = 0, 0
while time.monotonic() - start < seconds:
    step += 1
    block = (b"completed step: %d\n" % step + filler)[: 64 << 10]
    out.write(block)
    out.flush()
    sent += len(block)
    delay = start + sent / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
open(sys.argv[2], "w").write("%d %f\n" % (sent, time.monotonic() - start))
time.sleep(1.5)
EOF
"$supervise" -- python3 "$dir/writer.py" "$seconds" "$dir/sent" 2>/dev/null > >(cat >/dev/null) &
sup_pid=$!
while [[ ! -s $dir/sent ]]; do sleep 0.1; done
read -r _ _ _ _ _ _ _ _ _ _ _ _ _ utime stime _ <"/proc/$sup_pid/stat"
wait
python3 - "$utime" "$stime" "$(getconf CLK_TCK)" "$dir/sent" <<'EOF'
import sys
utime, stime, tck = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
sent, elapsed = open(sys.argv[4]).read().split()
sent, elapsed = int(sent), float(elapsed)
cpu = (utime + stime) / tck
print(f"cpu: {sent / elapsed / (1 << 20):.1f} MB/s for {elapsed:.1f} s: tpujob-supervise used "
      f"{cpu:.2f} s of CPU ({utime / tck:.2f} user, {stime / tck:.2f} system), "
      f"{100 * cpu / elapsed:.2f}% of one core (goal <= 2)")
EOF

# 3. From the last step to the program stopped, beyond stallSeconds.
python3 - "$supervise" "$dir" "${BENCH_STALL_RUNS:-5}" <<'EOF'
import os, statistics, subprocess, sys, time
supervise, work, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = dict(os.environ, TPUJOB_PROGRESS_STALL_SECONDS="1", TPUJOB_SUPERVISOR_GRACE_SECONDS="5",
           TPUJOB_SUPERVISOR_MESSAGE=work + "/stall-message")
beyond = []
for _ in range(runs):
    p = subprocess.Popen([supervise, "--", "sh", "-c", "echo 'completed step: 1'; exec sleep 60"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    p.stdout.readline()
    stepped = time.monotonic()
    code = p.wait()
    beyond.append(time.monotonic() - stepped - 1.0)
    if code != 124:
        print(f"stall: tpujob-supervise exited {code}, not 124")
print("stall to stop: " + " ".join(f"{b:.3f}" for b in beyond) +
      f" s beyond stallSeconds 1; median {statistics.median(beyond):.3f} s (goal <= 1)")
EOF
