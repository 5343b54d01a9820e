#!/usr/bin/env bash
# CLI robustness: feeds vgpu-info, vgpu-bench and vgpu-train hostile inputs (special files,
# FIFOs, unreadable and looping paths, CRLF, BOM, huge lines, binary junk, huge and non-UTF-8
# arguments, hostile VGPU_* values, a decimal-comma locale, closed or full stdout) under a
# timeout. A case fails on a signal exit (abort, segfault), a timeout, a sanitizer or
# std::terminate report, an error message longer than a screen, or an exit status other
# than the one expected.
#   robustness_test.sh VGPU_INFO VGPU_BENCH VGPU_TRAIN SMALL_TRACE
set -u
info=$1 bench=$2 train=$3 trace=$4
limit=${VGPU_ROBUSTNESS_TIMEOUT:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export VGPU_PLATFORM=host
unset VGPU_HOST_DEVICES VGPU_LOGICAL_DEVICES VGPU_MEMORY_FRACTION VGPU_ALLOW_GROWTH \
  VGPU_VISIBLE_DEVICES VGPU_RESERVED_MEMORY VGPU_ALLOCATOR VGPU_SM_PARTITION VGPU_HOST_FAULTS
runs=0 failed=0

# case NAME EXPECT CMD...: EXPECT is ok (exit 0), err (exit 1 or 2) or any (exit 0, 1 or 2).
case_() {
  local name=$1 expect=$2
  shift 2
  runs=$((runs + 1))
  timeout -k 5 "$limit" "$@" >"$work/out" 2>"$work/err" </dev/null
  local rc=$? why=""
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    why="timed out after ${limit}s"
  elif [ "$rc" -gt 128 ]; then
    why="killed by signal $((rc - 128))"
  elif grep -qE "AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:|terminate called|Assertion .* failed" "$work/err"; then
    why="sanitizer or abort report"
  elif [ "$(wc -c <"$work/err")" -gt 8192 ]; then
    why="error output of $(wc -c <"$work/err") bytes (more than a screen)"
  elif [ "$expect" = ok ] && [ "$rc" -ne 0 ]; then
    why="expected success, got exit $rc"
  elif [ "$expect" = err ] && [ "$rc" -ne 1 ] && [ "$rc" -ne 2 ]; then
    why="expected exit 1 or 2, got $rc"
  elif [ "$expect" = err ] && [ ! -s "$work/err" ]; then
    why="failed without saying why on stderr"
  elif [ "$rc" -gt 2 ]; then
    why="exit $rc"
  fi
  if [ -n "$why" ]; then
    failed=$((failed + 1))
    echo "FAIL $name: $why"
    head -c 600 "$work/err" | sed 's/^/    /'
    echo
  else
    echo "ok   $name (exit $rc)"
  fi
}

# --- Hostile files ---------------------------------------------------------------------------
mkdir -p "$work/dir"
mkfifo "$work/fifo"
: >"$work/empty"
printf 'regular\n' >"$work/regular"
ln -s "$work/loop" "$work/loop"
head -c 16777216 /dev/zero | tr '\0' 'a' >"$work/hugeline"          # 16 MiB, no newline
head -c 65536 /dev/zero >"$work/nuls"
awk 'BEGIN { srand(7); for (i = 0; i < 65536; i++) printf "%c", int(rand() * 256) }' \
  >"$work/binary" 2>/dev/null || head -c 65536 /dev/urandom >"$work/binary"
sed 's/$/\r/' "$trace" >"$work/crlf.trace"
{ printf '\xef\xbb\xbf'; cat "$trace"; } >"$work/bom.trace"
cp "$trace" "$work/unreadable.trace" && chmod 000 "$work/unreadable.trace"
bad_files=(dir fifo empty loop hugeline nuls binary missing regular/child)
for f in "${bad_files[@]}"; do
  case_ "bench replay $f" err "$bench" replay "$work/$f" --no-baseline
  case_ "timeline $f" err "$info" timeline "$work/$f" --svg "$work/out.svg"
done
for f in /dev/zero /dev/null /dev/full /proc/self/mem; do
  case_ "bench replay $f" err "$bench" replay "$f" --no-baseline
  case_ "timeline $f" err "$info" timeline "$f" --svg "$work/out.svg"
done
case_ "bench replay unreadable (root may read it)" any "$bench" replay "$work/unreadable.trace" --no-baseline
case_ "bench replay CRLF trace" any "$bench" replay "$work/crlf.trace" --no-baseline
case_ "bench replay BOM trace" any "$bench" replay "$work/bom.trace" --no-baseline
case_ "bench replay, history to /dev/full" err "$bench" replay "$trace" --no-baseline --memory-history /dev/full
case_ "bench replay, history to a directory" err "$bench" replay "$trace" --no-baseline --memory-history "$work/dir"

# A real history, then hostile variants of it and hostile output paths.
case_ "bench replay writes a history" ok "$bench" replay "$trace" --no-baseline --memory-history "$work/h.json"
if [ -s "$work/h.json" ]; then
  case_ "timeline of a real history" ok "$info" timeline "$work/h.json" --svg "$work/h.svg"
  sed 's/$/\r/' "$work/h.json" >"$work/h_crlf.json"
  case_ "timeline CRLF history" any "$info" timeline "$work/h_crlf.json" --svg "$work/h2.svg"
  { printf '\xef\xbb\xbf'; cat "$work/h.json"; } >"$work/h_bom.json"
  case_ "timeline BOM history" any "$info" timeline "$work/h_bom.json" --svg "$work/h3.svg"
  head -c "$(( $(wc -c <"$work/h.json") / 2 ))" "$work/h.json" >"$work/h_cut.json"
  case_ "timeline truncated history" err "$info" timeline "$work/h_cut.json" --svg "$work/h4.svg"
  case_ "timeline to /dev/full" err "$info" timeline "$work/h.json" --svg /dev/full
  case_ "timeline to a directory" err "$info" timeline "$work/h.json" --svg "$work/dir"
  case_ "timeline to a missing directory" err "$info" timeline "$work/h.json" --svg "$work/missing/x.svg"
fi
for n in 1e999 5e-318 -1 1e308 nan '"x"' null; do
  printf '{"allocators":["a"],"dropped":%s,"events":[{"t_ns":%s,"allocator":0,"in_use":%s,"reserved":%s}]}' \
    0 "$n" 1 1 >"$work/t.json"
  case_ "timeline t_ns=$n" any "$info" timeline "$work/t.json" --svg "$work/t.svg"
  printf '{"allocators":["a"],"events":[{"t_ns":1,"allocator":%s,"in_use":%s,"reserved":1}]}' \
    "$n" "$n" >"$work/a.json"
  case_ "timeline allocator/in_use=$n" any "$info" timeline "$work/a.json" --svg "$work/a.svg"
done

# --- vgpu-train data folders ------------------------------------------------------------------
idx_names=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
make_data() {  # make_data DIR KIND: every IDX file of the set becomes KIND
  mkdir -p "$1"
  for n in "${idx_names[@]}"; do
    case $2 in
      fifo) mkfifo "$1/$n.gz" ;;
      dir) mkdir -p "$1/$n.gz" ;;
      zero) ln -sf /dev/zero "$1/$n" ;;
      empty) : >"$1/$n.gz" ;;
      junk) cp "$work/binary" "$1/$n.gz" ;;
      plainjunk) cp "$work/binary" "$1/$n" ;;
      crlf) printf '\r\n\r\n' >"$1/$n" ;;
    esac
  done
}
for kind in fifo dir zero empty junk plainjunk crlf; do
  make_data "$work/data_$kind" "$kind"
  case_ "train --data with $kind files" err "$train" --data "$work/data_$kind" --epochs 1 --quiet
done
case_ "train --data missing" err "$train" --data "$work/nope" --epochs 1 --quiet
case_ "train --data is a file" err "$train" --data "$work/regular" --epochs 1 --quiet
case_ "train --data /dev/zero" err "$train" --data /dev/zero --epochs 1 --quiet

# --- Hostile command lines --------------------------------------------------------------------
# Linux caps one argument or variable at 128 KiB (MAX_ARG_STRLEN): 120 000 bytes each.
huge_arg=$(head -c 120000 /dev/zero | tr '\0' 'x')
for tool in "$info" "$bench" "$train"; do
  t=$(basename "$tool")
  case_ "$t empty argument" err "$tool" ""
  case_ "$t lone --" any "$tool" --
  case_ "$t --=x" err "$tool" --=x
  case_ "$t 120 kB argument" err "$tool" "--$huge_arg"
  case_ "$t non-UTF-8 argument" err "$tool" $'--\xff\xfe'
  case_ "$t --help with closed stdout" any sh -c '"$0" --help >&-' "$tool"
  case_ "$t --help to /dev/full" err sh -c '"$0" --help >/dev/full' "$tool"
  case_ "$t closed stdin" any sh -c '"$0" --help >/dev/null <&-' "$tool"
done
case_ "bench 120 kB value" err "$bench" replay "$trace" --limit "$huge_arg"
case_ "bench 10000 arguments" err "$bench" replay "$trace" $(seq 1 10000)
case_ "train 120 kB --devices" err "$train" --devices "$huge_arg"
case_ "train many --devices" err "$train" --devices "$(seq -s, 1 20000)"

# --- Hostile VGPU_* values ----------------------------------------------------------------------
long_value=$(seq -s, 1 20000)  # 109 kB
vars=(VGPU_PLATFORM VGPU_HOST_DEVICES VGPU_LOGICAL_DEVICES VGPU_VISIBLE_DEVICES
  VGPU_MEMORY_FRACTION VGPU_ALLOW_GROWTH VGPU_RESERVED_MEMORY VGPU_ALLOCATOR VGPU_SM_PARTITION
  VGPU_SOFT_PLACEMENT VGPU_LOG_PLACEMENT VGPU_HOST_FAULTS)
for v in "${vars[@]}"; do
  case_ "$v long value" err env "$v=$long_value" "$info"
  case_ "$v binary value" err env "$v=$(printf '\x01\x02\xff')" "$info"
  case_ "$v CR-terminated" any env "$v=$(printf '1\r')" "$info"
  case_ "$v BOM" any env "$v=$(printf '\xef\xbb\xbf1')" "$info"  # a BOM is stripped
  case_ "$v ;;;" err env "$v=;;;,,,::" "$info"
done
case_ "host devices 64x1TiB" any env VGPU_HOST_DEVICES=64x1TiB "$info"
case_ "host devices 1x200TiB growth" err env VGPU_HOST_DEVICES=1x200TiB VGPU_ALLOW_GROWTH=1 "$info" --selftest
case_ "host devices 2^64-1" err env VGPU_HOST_DEVICES=1x18446744073709551615 "$info"
case_ "memory fraction 0,5" err env VGPU_MEMORY_FRACTION=0,5 "$info"
case_ "memory fraction hex" err env VGPU_MEMORY_FRACTION=0x1p-1 "$info"
case_ "percent hex" err env VGPU_HOST_DEVICES=1x8GiB VGPU_LOGICAL_DEVICES=0:0x10% "$info"
case_ "10000 logical devices" err env VGPU_HOST_DEVICES=1x8GiB \
  VGPU_LOGICAL_DEVICES="0:$(seq -s, 1 10000 | sed 's/[0-9]\+/1MiB/g')" "$info"

# --- A locale with a decimal comma: numbers are still read and printed with a point. ---------
if command -v localedef >/dev/null && [ -d /usr/share/i18n/locales ] &&
  localedef -i de_DE -f UTF-8 "$work/de_DE.UTF-8" >/dev/null 2>&1; then
  export LOCPATH=$work
  case_ "de_DE: fraction 0.5" ok env LC_ALL=de_DE.UTF-8 VGPU_HOST_DEVICES=1x1GiB VGPU_MEMORY_FRACTION=0.5 "$info"
  case_ "de_DE: fraction 0,5 refused" err env LC_ALL=de_DE.UTF-8 VGPU_MEMORY_FRACTION=0,5 "$info"
  case_ "de_DE: bench replay --limit 1.5GiB" ok env LC_ALL=de_DE.UTF-8 "$bench" replay "$trace" --no-baseline --limit 1.5GiB
  # Same JSON and same text report as in the C locale, byte for byte.
  for fmt in --json ""; do
    env LC_ALL=C VGPU_HOST_DEVICES=1x1GiB VGPU_MEMORY_FRACTION=0.25 "$info" $fmt >"$work/c.out" 2>&1
    env LC_ALL=de_DE.UTF-8 VGPU_HOST_DEVICES=1x1GiB VGPU_MEMORY_FRACTION=0.25 "$info" $fmt \
      >"$work/de.out" 2>&1
    runs=$((runs + 1))
    if cmp -s "$work/c.out" "$work/de.out"; then
      echo "ok   de_DE: vgpu-info $fmt prints as in the C locale"
    else
      failed=$((failed + 1))
      echo "FAIL de_DE: vgpu-info $fmt differs from the C locale"
      diff "$work/c.out" "$work/de.out" | head -5
    fi
  done
  unset LOCPATH
else
  echo "note: no de_DE locale source (package 'locales'); decimal-comma cases not run"
fi

echo "$((runs - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
