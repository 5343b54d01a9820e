#!/bin/sh
# The mutation check of the CUDA simulator (docs/cuda.md): with the simulated driver dropping
# every cuEventRecord, or every cuStreamWaitEvent (what deleting the platform's call, or making
# Stream::WaitEvent a no-op, would do), the cuda suite must fail. A mutation counts as caught
# when at least one run of the suite fails; the un-mutated runs must pass first.
# usage: cudasim_mutation_test.sh SCRIPTS_CUDASIM LIB_DIR CUDA_PLATFORM_GPU_TEST VGPU_TRAIN
sim="$1"
export VGPU_CUDASIM_LIB_DIR="$2"
platform_test="$3"
train="$4"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME COMMAND...: 0 when the command passed.
run() {
  name="$1"
  shift
  if "$@" >"$tmp/$name.log" 2>&1; then
    return 0
  fi
  return 1
}
suite() {
  ok=0
  run platform "$sim" "$platform_test" || ok=1
  run train env VGPU_CUDASIM_PROFILE=h100 "$sim" "$train" --platform cuda --strategy mirrored \
    --devices 4 --epochs 1 --train-limit 2048 --batch 256 --quiet || ok=1
  return $ok
}

unset VGPU_CUDASIM_MUTATE
if ! suite; then
  echo "FAIL: the suite fails without any mutation:" >&2
  tail -n 20 "$tmp"/*.log >&2
  exit 1
fi
caught=0
for m in drop_event_record drop_stream_wait; do
  export VGPU_CUDASIM_MUTATE=$m
  if suite; then
    echo "FAIL: mutation $m was not caught: every run passed" >&2
    exit 1
  fi
  echo "mutation $m caught: $(grep -h -m1 -o 'cudasim: data race[^,]*\|FAILED.*\|ILLEGAL[A-Z_]*\|LAUNCH_FAILED' "$tmp"/*.log | head -n 1)"
  caught=$((caught + 1))
done
echo "cudasim mutations: all $caught caught"
