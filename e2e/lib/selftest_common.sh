# shellcheck shell=bash
# Helpers of the self-tests (cluster_selftest.sh, real_node_selftest.sh); they define fail.

step() { printf '\n== %s\n' "$*" >&2; }
ms() { local t; t=$(date +%s%N); echo $((t / 1000000)); }

# wait_for SECONDS DESCRIPTION COMMAND...: poll until COMMAND succeeds.
wait_for() {
  local secs=$1 what=$2 end
  shift 2
  end=$(($(ms) + secs * 1000))
  until "$@" >/dev/null 2>&1; do
    (($(ms) < end)) || fail "timed out after ${secs}s waiting for $what"
    sleep 0.2
  done
}
