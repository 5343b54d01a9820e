#!/bin/sh
# scripts/bench_sweep.sh BENCH TRACE... : min_limit_ratio, ns_per_op and (vmm) map/unmap calls
# per 1000 operations for bfc and vmm, growth off and on, one line per trace and allocator.
# Extra vgpu-bench flags go in $BENCH_FLAGS (e.g. "--vmm-slab-bytes 4MiB").
bench="$1"; shift
printf '%-26s %-4s %8s %8s %7s %7s %7s %7s\n' trace alloc min_off min_on ns_off ns_on map_kop res_2x
for t in "$@"; do
  for a in bfc vmm; do
    off=$("$bench" replay "$t" --allocator $a --min-limit --no-baseline $BENCH_FLAGS 2>/dev/null | tail -n 1)
    on=$("$bench" replay "$t" --allocator $a --min-limit --allow-growth --no-baseline $BENCH_FLAGS 2>/dev/null | tail -n 1)
    get() { echo "$1" | sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p"; }
    res=$(awk -v r="$(get "$on" peak_reserved_bytes)" -v p="$(get "$on" peak_live_bytes)" 'BEGIN { if (p > 0) printf "%.3f", r / p }')
    printf '%-26s %-4s %8s %8s %7.1f %7.1f %7s %7s\n' "$(basename "$t" .trace)" $a \
      "$(get "$off" min_limit_ratio)" "$(get "$on" min_limit_ratio)" "$(get "$off" ns_per_op)" \
      "$(get "$on" ns_per_op)" "$(get "$on" map_calls_per_kop)" "$res"
  done
done
