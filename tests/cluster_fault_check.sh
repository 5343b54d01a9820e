#!/bin/bash
# A rank lost mid-run ends the job: the others exit non-zero within LIMIT seconds with a
# message naming the lost rank, never hang.
# usage: cluster_fault_check.sh MPIEXEC VGPU_TRAIN MODE LIMIT [vgpu-train flags...]
#   MODE kill: rank 1 is killed (SIGKILL) once training has started (the launcher notices);
#   MODE stop: rank 1 is stopped (SIGSTOP: alive but stuck), so only the other rank's collective
#              deadline (--collective-timeout) can end the job;
#   MODE fail: rank 1's device fails a copy mid-run (VGPU_HOST_FAULTS on that rank only).
mpiexec="$1"
train="$2"
mode="$3"
limit="$4"
shift 4
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
if [ "$mode" = kill ] || [ "$mode" = stop ]; then
  "$mpiexec" --oversubscribe -np 2 "$train" "$@" >"$log" 2>&1 &
  job=$!
  # rank 1 prints its pid first; training has started once an epoch line shows.
  for _ in $(seq 1 600); do
    pid=$(sed -n 's/^cluster: rank 1 of 2, .*, pid \([0-9]*\)$/\1/p' "$log")
    [ -n "$pid" ] && grep -q '^epoch 1/' "$log" && break
    sleep 0.1
  done
  if [ -z "$pid" ]; then
    echo "FAIL: rank 1 never started training" >&2
    cat "$log"
    kill -9 "$job" 2>/dev/null
    exit 1
  fi
  if [ "$mode" = kill ]; then kill -9 "$pid"; else kill -STOP "$pid"; fi
  killed=$(date +%s)
else
  "$mpiexec" --oversubscribe -np 1 "$train" "$@" : -np 1 -x VGPU_HOST_FAULTS=fail_memcpy_at=3000 \
    "$train" "$@" >"$log" 2>&1 &
  job=$!
  killed=$start
fi
# Wait at most LIMIT seconds after the loss.
rc=
for _ in $(seq 1 $((limit * 10))); do
  if ! kill -0 "$job" 2>/dev/null; then
    wait "$job"
    rc=$?
    break
  fi
  sleep 0.1
done
end=$(date +%s)
cat "$log"
if [ -z "$rc" ]; then
  echo "FAIL: the job still runs $limit s after rank 1 was lost" >&2
  kill -9 "$job" 2>/dev/null
  [ -n "${pid:-}" ] && kill -9 "$pid" 2>/dev/null
  exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the job exited 0 although rank 1 was lost" >&2
  exit 1
fi
# (the "cluster: rank 1 of 2" line each rank prints at start does not count; a stuck rank must
# be named by another one)
ignore='^cluster: '
[ "$mode" = stop ] && ignore='^(cluster: |vgpu: rank 1:)'
if ! grep -Ev "$ignore" "$log" | grep -Eq 'rank(\(s\))? 1([^0-9]|$)'; then
  echo "FAIL: no message names rank 1" >&2
  exit 1
fi
echo "PASS: exit $rc $((end - killed)) s after rank 1 was lost ($mode), and a message names it"
