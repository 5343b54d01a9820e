#!/bin/sh
# Issue 12: hostile input FILES fed to the real binaries under a timeout. Every run must end
# with exit 1 or 2 (a clear error) or 0 where the input is valid, never a signal (>128), an
# abort or the timeout (124), and must say what is wrong on stderr.
# usage: cli_files_test.sh VGPU_INFO VGPU_BENCH WORKDIR
set -u
INFO=$1
BENCH=$2
W=$3
rm -rf "$W" && mkdir -p "$W" || exit 1
cd "$W" || exit 1
fails=0
checks=0

# run NAME EXPECTED_EXITS STDERR_REGEX CMD...: EXPECTED_EXITS like "1|2".
run() {
  name=$1 codes=$2 pattern=$3
  shift 3
  checks=$((checks + 1))
  timeout 20 "$@" >"$name.out" 2>"$name.err" </dev/null
  rc=$?
  if ! echo "$rc" | grep -Eqx "$codes"; then
    echo "FAIL $name: exit $rc (expected $codes)"; sed 's/^/  /' "$name.err" | head -5
    fails=$((fails + 1)); return
  fi
  if [ -n "$pattern" ] && ! grep -Eq -- "$pattern" "$name.err"; then
    echo "FAIL $name: stderr lacks /$pattern/"; sed 's/^/  /' "$name.err" | head -5
    fails=$((fails + 1)); return
  fi
  echo "ok   $name (exit $rc)"
}

mkdir adir
mkfifo fifo
printf 'a 1 8\nf 1\n' > good.trace

# Traces.
run trace_dir 1 "adir is a directory, not a trace file" "$BENCH" replay adir
run trace_dev_zero 1 "/dev/zero is not a regular file" "$BENCH" replay /dev/zero
run trace_fifo 1 "fifo is not a regular file \\(it is a FIFO\\)" "$BENCH" replay fifo
run trace_missing 1 "cannot open trace file missing.trace: no such file" "$BENCH" replay missing.trace
printf 'a 1 0\na 2 0\nf 1\n' > zero.trace
run trace_zero_peak 1 "allocates 0 bytes at its peak; nothing to replay" "$BENCH" replay zero.trace
printf 'a 1 9223372036854775808\n' > huge.trace
run trace_huge 1 "huge.trace:1: allocating 9223372036854775808 bytes" "$BENCH" replay huge.trace
printf 'a 1 18446744073709551615\na 2 18446744073709551615\n' > wrap.trace
run trace_wrap 1 "a trace may hold live" "$BENCH" replay wrap.trace
printf '\357\273\277# bom\r\na 1 4096\r\nf 1\r\n' > bom.trace
run trace_bom_crlf 0 "" "$BENCH" replay bom.trace --no-baseline

# Imported formats (issue 16): told apart by content, so a name proves nothing.
printf '\200\004\225\377\377\377\377\377\377\377\177' > frame.trace
run pickle_huge_frame 1 "pickle at offset 2: opcode 0x95 \\(FRAME\\): frame of" "$BENCH" replay frame.trace
printf '\200\004X\377\377\377\377' > str.pickle
run pickle_huge_string 1 "needs 4294967295 bytes but 0 remain" "$BENCH" replay str.pickle
printf '\200\002cos\nsystem\n(S"echo hi"\ntR.' > code.pickle
run pickle_code 1 "opcode 0x63 'c' \\(GLOBAL\\) is not supported" "$BENCH" replay code.pickle
deep_marks() { i=0; printf '\200\004'; while [ $i -lt 5000 ]; do printf '('; i=$((i + 1)); done; printf '.'; }
deep_marks > marks.pickle
run pickle_deep_marks 1 "more than 4096 MARKs open" "$BENCH" replay marks.pickle
printf '\200\004}.' > empty.pickle
run pickle_no_history 1 "no \"device_traces\"" "$BENCH" convert empty.pickle out.trace
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,t,free,0x10,16,0x0\n' > free.csv
run rmm_free_unknown 1 "free.csv:2: free of 0x10, which is not live" "$BENCH" replay free.csv
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,t,allocate,0x10,99999999999999999999,0x0\n' > big.csv
run rmm_bad_size 1 "big.csv:2: bad size" "$BENCH" plan --card 1GiB big.csv
# --limit as a percentage of the trace's peak live (1 MiB here).
printf '# x\n# peak_live_bytes 1048576\na 1 1048576\nf 1\n' > mib.trace
run replay_limit_percent 0 "bfc at limit 1.5 MiB" "$BENCH" replay mib.trace --limit 150% --no-baseline
run replay_limit_percent_bad 2 "--limit=0%: expected a size such as 12GiB or a percentage" "$BENCH" replay mib.trace --limit 0%
# Standard input ("-"): a pipe or a redirected file; a device (here /dev/null, run's stdin, and
# /dev/zero) is refused rather than read; nothing piped in is an empty trace.
run trace_stdin 0 "" sh -c "'$BENCH' replay - --no-baseline < good.trace"
run trace_stdin_gzip_convert 0 "" sh -c "gzip -c good.trace | '$BENCH' convert - stdin.trace"
run trace_stdin_device 1 "standard input \\(-\\): it is a character device" "$BENCH" replay -
run trace_stdin_zero 1 "it is a character device" sh -c "'$BENCH' replay - < /dev/zero"
run trace_stdin_empty_pipe 1 "stdin: the trace has no events" sh -c "printf '' | '$BENCH' replay -"
# convert writes gzip when OUT ends in .gz (gzip itself reads it), and to stdout for "-".
run convert_gzip_out 0 "" "$BENCH" convert good.trace out.trace.gz
run convert_gzip_out_valid 0 "" sh -c "gzip -t out.trace.gz && '$BENCH' replay out.trace.gz --no-baseline"
run convert_stdout 0 "" sh -c "'$BENCH' convert good.trace - | grep -q '^a 1 8'"
# Compressed logs are told apart by content; a broken one is an error naming it.
gzip -c good.trace > good.trace.gz
run trace_gzip 0 "" "$BENCH" replay good.trace.gz --no-baseline
gzip -c free.csv > free.csv.gz
run rmm_gzip_free_unknown 1 "free.csv.gz:2: free of 0x10, which is not live" "$BENCH" replay free.csv.gz
head -c 12 good.trace.gz > cut.trace.gz
run trace_gzip_truncated 1 "cut.trace.gz: the gzip stream ends early" "$BENCH" convert cut.trace.gz out.trace
printf '\037\213junk' > junk.gz
run trace_gzip_corrupt 1 "junk.gz: corrupt gzip stream at byte" "$BENCH" plan --card 1GiB junk.gz
gzip -c good.trace.gz > twice.gz
run trace_gzip_twice 1 "compressed twice" "$BENCH" replay twice.gz

# Other compressors are named (their magic bytes), not read as text.
printf '\050\265\057\375junk' > snap.pickle.zst
run other_compressor_zstd 1 "snap.pickle.zst: compressed with zstd, which is not read" "$BENCH" replay snap.pickle.zst
printf 'BZh91AY&SYjunk' > log.csv.bz2
run other_compressor_bzip2 1 "log.csv.bz2: compressed with bzip2" "$BENCH" convert log.csv.bz2 out.trace

# Zip archives, written by Python's zipfile (another writer than the unit tests' own):
# torch.save's layout ("<name>/data.pkl" beside its version), a zipped log, and the broken.
# pyzip OUT METHOD MEMBER=FILE...: METHOD stored or deflated.
pyzip() {
  python3 - "$@" <<'PY'
import sys, zipfile
out, method = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED if method == "deflated" else zipfile.ZIP_STORED) as z:
    for spec in sys.argv[3:]:
        name, path = spec.split("=", 1)
        z.write(path, name)
PY
}
printf '3\n' > version
printf '\200\002}q\000(X\015\000\000\000device_tracesq\001]q\002]q\003}q\004(X\006\000\000\000actionq\005X\005\000\000\000allocq\006X\004\000\000\000addrq\007K\020X\004\000\000\000sizeq\010M\000\004X\006\000\000\000streamq\011K\000uaaX\010\000\000\000segmentsq\012]q\013u.' > snap.pickle
pyzip snap.pt stored snap/data.pkl=snap.pickle snap/version=version
run zip_torch_save 0 "zip: \"snap/data.pkl\" \(torch.save\)" "$BENCH" replay snap.pt --no-baseline
run zip_torch_save_gz 0 "" sh -c "gzip -c snap.pt | '$BENCH' convert - snap.trace && grep -q '^a 0 1024' snap.trace"
pyzip log.zip deflated logs/free.csv=free.csv
run zip_log_checked 1 "log.zip:2: free of 0x10, which is not live" "$BENCH" replay log.zip
pyzip two.zip deflated a.trace=good.trace b.csv=free.csv
run zip_two_logs 1 "two.zip: a zip archive of 2 files without a torch.save data.pkl" "$BENCH" plan --card 1GiB two.zip
head -c 60 snap.pt > cut.pt
run zip_truncated 1 "cut.pt: zip archive: no end of central directory record" "$BENCH" replay cut.pt
pyzip inner.zip stored a.trace=good.trace
pyzip outer.zip stored inner.zip=inner.zip
run zip_twice 1 "zipped twice" "$BENCH" replay outer.zip

# TensorFlow's memory log (TF_CPP_VMODULE=log_memory=2), among other log lines.
M='I1130 12:00:01.000001 42 log_memory.cc:39] __LOG_MEMORY__'
{ echo 'I1130 12:00:00.000000 42 gpu_device.cc:2019] Created device GPU:0'
  echo "$M MemoryLogRawAllocation { step_id: 1 operation: \"Sum\" num_bytes: 4096 ptr: 1 allocation_id: 1 allocator_name: \"GPU_0_bfc\" }"
  echo "$M MemoryLogRawDeallocation { step_id: 1 operation: \"Sum\" allocation_id: 1 allocator_name: \"GPU_0_bfc\" deferred: false }"; } > tf.log
run tf_log 0 "TensorFlow memory log: allocator GPU_0_bfc" "$BENCH" replay tf.log --no-baseline
run tf_log_device 1 "no allocator of GPU 3 \\(GPU_3_...\\) in the log" "$BENCH" replay tf.log --device 3
echo "$M MemoryLogRawAllocation { num_bytes: -1 allocation_id: 1 allocator_name: \"GPU_0_bfc\" }" > neg.log
run tf_log_negative 1 "neg.log:1: MemoryLogRawAllocation: num_bytes is negative" "$BENCH" convert neg.log out.trace
printf '%s MemoryLogStep {%s\n' "$M" "$(printf ' a {%.0s' $(seq 1 5000))" > deep.log
run tf_log_deep 1 "deep.log:1: .*nested more than 32 deep" "$BENCH" plan --card 1GiB deep.log

# PyTorch profiler traces (Chrome trace JSON with "[memory]" events).
P='{"name": "[memory]", "ph": "i", "ts": %s, "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": %s, "Total Reserved": 2097152}}'
{ printf '{"traceEvents": ['; printf "$P, " 2 -512; printf "$P" 1 512; printf ']}\n'; } > prof.json
run profiler_trace 0 "PyTorch profiler trace: cuda:0" "$BENCH" replay prof.json --no-baseline
run profiler_trace_gz 0 "" sh -c "gzip -c prof.json | '$BENCH' replay - --no-baseline"
printf '{"traceEvents": [{"name": "[memory]", "ts": 1, "args": {"Addr": "x}]}' > cut.json
run profiler_trace_cut 1 "cut.json: invalid JSON at byte 64: unterminated string" "$BENCH" replay cut.json
printf '{"traceEvents": [{"name": "aten::mm", "ph": "X"}]}' > nomem.json
run profiler_trace_no_memory 1 "nomem.json: no \\[memory\\] events: profile with" "$BENCH" plan --card 1GiB nomem.json
{ printf '['; head -c 100000 /dev/zero | tr '\0' '['; } > deep.json
run profiler_trace_deep 1 "deep.json: invalid JSON at byte 257: nested more than 256 deep" "$BENCH" replay deep.json

# Memory histories for the timeline.
H() { printf '{%s"allocators":[%s],"events":[{"t_ns":%s,"allocator":%s,"in_use":1,"reserved":1}]}' "$1" "$2" "$3" "$4"; }
H '' '"a"' 1e999 0 > inf.json
H '' '"a"' 5e-318 0 > denormal.json
H '"dropped":-1,' '"a"' 5 0 > dropped.json
H '' '"a\u0000b"' 5 0 > nul.json
H '' '"a"' 5 1e999 > index_inf.json
H '' '"a"' 5 -1 > index_neg.json
H '' '"a"' 5 1.5 > index_frac.json
printf '{"allocators":[],"events":[+-.e]}' > badnum.json
run tl_inf 1 "\"t_ns\" is 1e999" "$INFO" timeline inf.json --svg inf.svg
run tl_denormal 0 "" "$INFO" timeline denormal.json --svg=denormal.svg
run tl_dropped 1 "\"dropped\" is -1" "$INFO" timeline dropped.json --svg dropped.svg
run tl_nul 0 "" "$INFO" timeline nul.json --svg nul.svg
run tl_index_inf 1 "\"allocator\" is 1e999" "$INFO" timeline index_inf.json --svg x.svg
run tl_index_neg 1 "\"allocator\" is -1" "$INFO" timeline index_neg.json --svg x.svg
run tl_index_frac 1 "\"allocator\" is 1.5" "$INFO" timeline index_frac.json --svg x.svg
run tl_bad_number 1 "malformed JSON at offset" "$INFO" timeline badnum.json --svg x.svg
gzip -c denormal.json > denormal.json.gz
run tl_gzip 0 "" "$INFO" timeline denormal.json.gz --svg gz.svg
head -c 15 denormal.json.gz > cut.json.gz
run tl_gzip_truncated 1 "cut.json.gz: the gzip stream ends early" "$INFO" timeline cut.json.gz --svg x.svg
run tl_dir 1 "adir is a directory, not a memory history" "$INFO" timeline adir --svg x.svg
run tl_dev_zero 1 "/dev/zero is not a regular file" "$INFO" timeline /dev/zero --svg x.svg
run tl_fifo 1 "not a regular file" "$INFO" timeline fifo --svg x.svg
run tl_help 0 "" "$INFO" timeline --help
run tl_svg_needs_value 2 "--svg needs a value" "$INFO" timeline inf.json --svg --limit 1GiB
run tl_unwritable 1 "cannot write" "$INFO" timeline denormal.json --svg adir/no/such.svg

# 20 000 names (an 80 KB file made a 44 MB SVG): at most 64 panels, a bounded file.
i=0 names="" 
names=$(awk 'BEGIN { for (i = 0; i < 20000; ++i) printf "%s\"n%d\"", (i ? "," : ""), i }')
events=$(awk 'BEGIN { for (i = 0; i < 20000; ++i) printf "%s{\"t_ns\":%d,\"allocator\":%d,\"in_use\":1,\"reserved\":2}", (i ? "," : ""), i, i }')
printf '{"allocators":[%s],"events":[%s]}' "$names" "$events" > many.json
run tl_many 0 "" "$INFO" timeline many.json --svg many.svg
checks=$((checks + 1))
size=$(wc -c < many.svg 2>/dev/null || echo 0)
if [ "$size" -gt 0 ] && [ "$size" -lt 2000000 ] && grep -q "past the 64-panel cap" tl_many.out; then
  echo "ok   tl_many_size ($size bytes)"
else
  echo "FAIL tl_many_size: $size bytes"; fails=$((fails + 1))
fi

# The SVGs drawn from hostile histories are well-formed XML (where xmllint is installed).
if command -v xmllint >/dev/null 2>&1; then
  for f in denormal.svg nul.svg many.svg; do
    checks=$((checks + 1))
    if xmllint --noout "$f" 2>"$f.xmlerr"; then
      echo "ok   xml $f"
    else
      echo "FAIL xml $f"; head -3 "$f.xmlerr"; fails=$((fails + 1))
    fi
  done
else
  echo "note: xmllint not installed; the XML well-formedness checks did not run"
fi

if [ "$fails" -ne 0 ]; then
  echo "cli_files: $fails of $checks checks failed"
  exit 1
fi
echo "cli_files: all $checks checks passed"
