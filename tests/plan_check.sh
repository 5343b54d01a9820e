#!/bin/sh
# tests/plan_check.sh BENCH INFO CARD TRACE...: `vgpu-bench plan` must print a configuration that
# fits (exit 0, "fits":true), that `vgpu-info --selftest` accepts on a simulated card of CARD
# (with the planned VGPU_ALLOCATOR and VGPU_ALLOW_GROWTH), and in which every trace replays at
# its planned limit. Prints "plan check passed" or why not (tests/import.cmake).
set -u
bench=$1 info=$2 card=$3
shift 3
out=$("$bench" plan --card "$card" "$@" 2>&1)
rc=$?
json=$(printf '%s\n' "$out" | tail -n 1)
if [ "$rc" -ne 0 ]; then echo "plan exited $rc: $out"; exit 1; fi
case "$json" in *'"fits":true}') ;; *) echo "plan's JSON does not end with \"fits\":true: $json"; exit 1 ;; esac
ld=$(printf '%s' "$json" | sed -n 's/.*"logical_devices":"\([^"]*\)".*/\1/p')
alloc=$(printf '%s' "$json" | sed -n 's/^{.*"allocator":"\([a-z]*\)","allow_growth".*/\1/p')
growth=$(printf '%s' "$json" | sed -n 's/^{.*"allow_growth":\(true\|false\),"total_bytes".*/\1/p')
limits=$(printf '%s' "$json" | grep -o '"planned_limit_bytes":[0-9]*' | cut -d: -f2)
if [ -z "$ld" ] || [ -z "$alloc" ] || [ -z "$growth" ] || [ -z "$limits" ]; then
  echo "cannot read the plan: $json"; exit 1
fi
echo "plan: VGPU_ALLOCATOR=$alloc VGPU_ALLOW_GROWTH=$growth VGPU_LOGICAL_DEVICES=$ld"
if ! VGPU_PLATFORM=host VGPU_HOST_DEVICES="1x$card" VGPU_LOGICAL_DEVICES="$ld" \
    VGPU_ALLOCATOR="$alloc" VGPU_ALLOW_GROWTH="$growth" "$info" --selftest >selftest.out 2>&1; then
  echo "vgpu-info --selftest failed:"; cat selftest.out; exit 1
fi
n=0
for limit in $limits; do
  n=$((n + 1))
  trace=$(eval echo "\${$n}")
  if ! "$bench" replay "$trace" --allocator "$alloc" --allow-growth="$growth" --limit "$limit" \
      --no-baseline >replay.out 2>&1; then
    echo "$trace does not replay at its planned limit $limit:"; tail -n 3 replay.out; exit 1
  fi
done
if [ "$n" -ne "$#" ]; then echo "plan gave $n limits for $# traces"; exit 1; fi
echo "plan check passed: $n traces"
