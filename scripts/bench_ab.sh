#!/bin/sh
# Compares two vgpu-bench builds on the same traces, alternately (the machine's load moves
# both alike): best ns_per_op of RUNS (3) replays each, growth off and on.
# Usage: [ALLOC=bfc|vmm] [RUNS=3] sh scripts/bench_ab.sh BENCH_A BENCH_B TRACE...
# Prints: A B trace growth
set -eu
if [ $# -lt 3 ]; then
  echo "usage: [ALLOC=bfc|vmm] [RUNS=3] sh scripts/bench_ab.sh BENCH_A BENCH_B TRACE..." >&2
  exit 2
fi
a=$1 b=$2
shift 2
best() {  # best ns_per_op of RUNS replays: best BENCH TRACE [--allow-growth]
  m=""
  i=0
  while [ "$i" -lt "${RUNS:-3}" ]; do
    n=$(OPENBLAS_NUM_THREADS=1 "$1" replay "$2" --allocator "${ALLOC:-bfc}" ${3:-} --no-baseline \
        2>/dev/null | tail -1 | sed -n 's/.*"ns_per_op":\([0-9.]*\).*/\1/p')
    if [ -z "$n" ]; then
      echo "bench_ab: $1 replay $2 failed" >&2
      exit 1
    fi
    m=$(echo "$n ${m:-$n}" | awk '{print ($1 < $2) ? $1 : $2}')
    i=$((i + 1))
  done
  echo "$m"
}
for t in "$@"; do
  for g in "" --allow-growth; do
    printf '%8.1f %8.1f  %-24s %s\n' "$(best "$a" "$t" "$g")" "$(best "$b" "$t" "$g")" \
      "$(basename "$t" .trace)" "${g:-off}"
  done
done
