# Issue 16 parts 2 and 3: vgpu-bench reads users' allocator logs (PyTorch snapshots, RMM logs;
# tests/data, written by scripts/make-import-samples), converts them, compares allocators on
# them and plans a card's split. Small traces: label unit.
if(TARGET vgpu-bench)
  set(VGPU_IMPORT_DATA ${PROJECT_SOURCE_DIR}/tests/data)
  # Each import replays with the source trace's peak live bytes (6186144) and says its format.
  foreach(case "mlp_mirrored.snapshot.pickle|pytorch-snapshot|1|6188032"
               "mlp_two_streams.snapshot.pickle|pytorch-snapshot|2|6188032"
               "mlp_truncated.snapshot.pickle|pytorch-snapshot|1|6188032"
               "mlp_two_streams.rmm.csv|rmm-log|2|null"
               "mlp_two_streams.trace|vgpu|2|null")
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 file)
    list(GET parts 1 format)
    list(GET parts 2 streams)
    list(GET parts 3 reserved)
    string(REGEX REPLACE "[^a-z0-9]" "_" tname "${file}")
    # Several streams: each on a stream of its own, blocks moving between them behind waits.
    set(stream_keys "")
    if(streams GREATER 1)
      set(stream_keys ",\"cross_stream_reuses\":[1-9][0-9]*,\"stream_waits\":[1-9][0-9]*")
    endif()
    # A recorded workload (not a vgpu trace) also compares bfc and vmm when no allocator is named.
    if(NOT format STREQUAL "vgpu")
      string(APPEND stream_keys ",\"allocators\":\\[{\"allocator\":\"bfc\",[^}]*\"min_limit_ratio\":[0-9.]+,[^}]*},{\"allocator\":\"vmm\",[^}]*\"min_limit_ratio\":[0-9.]+,[^}]*}\\]")
    endif()
    add_test(NAME vgpu_bench_import_replay_${tname}
      COMMAND sh -c "$<TARGET_FILE:vgpu-bench> replay ${VGPU_IMPORT_DATA}/${file} --min-limit --no-baseline 2>/dev/null | tail -n 1")
    set_tests_properties(vgpu_bench_import_replay_${tname} PROPERTIES LABELS unit
      PASS_REGULAR_EXPRESSION "^{\"trace\":\"[^\"]*\",\"allocator\":\"bfc\",\"allow_growth\":false,\"events\":[0-9]+,.*\"peak_live_bytes\":6186144,.*\"min_limit_bytes\":[0-9]+,.*\"format\":\"${format}\",\"streams\":${streams},\"original_peak_reserved_bytes\":${reserved}${stream_keys}}")
  endforeach()

  # A trace with two streams replayed on the host platform's real streams by every allocator:
  # blocks move between the streams behind event waits (bfc, vmm) or the pool's own order
  # (async), and every allocation fits at 2x peak live (exit 0).
  foreach(alloc bfc vmm async)
    add_test(NAME vgpu_bench_replay_two_streams_host_${alloc}
      COMMAND sh -c "out=$($<TARGET_FILE:vgpu-bench> replay ${VGPU_IMPORT_DATA}/mlp_two_streams.trace --platform host --allocator ${alloc} --no-baseline 2>/dev/null); rc=$?; echo \"$out\" | tail -n 1; echo \"exit=$rc\"")
    set(waits "[1-9][0-9]*")
    if(alloc STREQUAL "async")
      set(waits "[0-9]+")
    endif()
    set_tests_properties(vgpu_bench_replay_two_streams_host_${alloc} PROPERTIES LABELS unit
      PASS_REGULAR_EXPRESSION "\"allocator\":\"${alloc}\".*\"streams\":2,.*\"stream_waits\":${waits}}\nexit=0")
  endforeach()

  # More streams over a run than an allocator tracks at once (Allocator::kMaxStreams): a
  # program that makes a stream per step. 100 streams, each used for two blocks (one freed on
  # the next stream) then never again: the replay releases each after its last event, so every
  # allocation fits, on the fake device and on the host platform's real streams. 100 streams
  # with blocks live at once cannot be tracked: the 64th fails, with the error saying why.
  add_test(NAME vgpu_bench_replay_streams_over_the_slots
    COMMAND sh -c "t=${CMAKE_CURRENT_BINARY_DIR}/streams_in_turn.trace; \
awk 'BEGIN { for (i = 0; i < 100; i++) printf \"a %d 4096 %d\\na %d 8192 %d\\nf %d\\nf %d %d\\n\", i, i, 1000 + i, i, i, 1000 + i, (i + 1) % 100 }' > \"$t\"; \
$<TARGET_FILE:vgpu-bench> replay \"$t\" --allocators bfc,vmm --no-baseline 2>/dev/null | tail -n 1; echo \"exit=$?\"; \
$<TARGET_FILE:vgpu-bench> replay \"$t\" --platform host --allocator vmm --no-baseline >/dev/null 2>&1; echo \"host exit=$?\"; \
c=${CMAKE_CURRENT_BINARY_DIR}/streams_at_once.trace; \
awk 'BEGIN { for (i = 0; i < 100; i++) printf \"a %d 4096 %d\\n\", i, i; for (i = 0; i < 100; i++) printf \"f %d\\n\", i }' > \"$c\"; \
$<TARGET_FILE:vgpu-bench> replay \"$c\" --no-baseline 2>&1 >/dev/null | grep 'allocations failed'; echo \"at once exit=$?\"")
  set_tests_properties(vgpu_bench_replay_streams_over_the_slots PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "\"streams\":100,.*\"allocator\":\"bfc\",[^}]*\"failures\":0,.*\"allocator\":\"vmm\",[^}]*\"failures\":0,.*\nexit=0\nhost exit=0\nvgpu-bench replay: 37 allocations failed at limit 800 KiB; first at event 63: RESOURCE_EXHAUSTED: replay/streams_at_once: more than 64 streams in use with this allocator[^\n]*\nat once exit=0")

  # The original allocator's peak is reported next to the min limit (one allocator named).
  add_test(NAME vgpu_bench_import_original_peak
    COMMAND sh -c "$<TARGET_FILE:vgpu-bench> replay ${VGPU_IMPORT_DATA}/mlp_two_streams.snapshot.pickle --allocator bfc --min-limit --no-baseline 2>&1 >/dev/null")
  set_tests_properties(vgpu_bench_import_original_peak PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "PyTorch snapshot: device 1 of 2 \\(the most events\\), 2 stream\\(s\\).*the original allocator reserved at most 5.9[0-9]* MiB \\(1.000x peak live\\); bfc needs [0-9.]+ MiB")

  # --allocators: one JSON line with each allocator's min limit and ns/op.
  add_test(NAME vgpu_bench_replay_compare
    COMMAND sh -c "$<TARGET_FILE:vgpu-bench> replay ${VGPU_IMPORT_DATA}/mlp_two_streams.rmm.csv --allocators bfc,vmm --min-limit --no-baseline 2>/dev/null | tail -n 1")
  set_tests_properties(vgpu_bench_replay_compare PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "^{\"trace\":\"mlp_two_streams.rmm\",\"format\":\"rmm-log\",\"allow_growth\":false,\"events\":56,\"streams\":2,\"peak_live_bytes\":6186144,\"original_peak_reserved_bytes\":null,\"allocators\":\\[{\"allocator\":\"bfc\",\"limit_bytes\":[0-9]+,\"failures\":0,\"ns_per_op\":[0-9.e+]+,\"peak_reserved_bytes\":[0-9]+,\"min_limit_bytes\":[0-9]+,\"min_limit_ratio\":[0-9.]+,\"first_fit_ratio\":[0-9.]+,\"min_limit_vs_original\":null},{\"allocator\":\"vmm\",[^}]*\"min_limit_bytes\":[0-9]+,[^}]*}\\]}")

  # A recorded workload replayed with no allocator named: bfc's line as for a vgpu trace, with
  # its min limit, and an "allocators" array comparing bfc and vmm, each min limit also against
  # what the original allocator reserved (the snapshot's segments). --min-limit=false keeps the
  # comparison without the scans.
  add_test(NAME vgpu_bench_replay_recorded_compares
    COMMAND sh -c "$<TARGET_FILE:vgpu-bench> replay ${VGPU_IMPORT_DATA}/mlp_two_streams.snapshot.pickle --no-baseline 2>&1; \
$<TARGET_FILE:vgpu-bench> replay ${VGPU_IMPORT_DATA}/mlp_two_streams.rmm.csv --min-limit=false 2>/dev/null")
  set_tests_properties(vgpu_bench_replay_recorded_compares PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "a recorded workload: bfc and vmm compared, with their min limits \\(--allocator NAME replays one\\)\nbfc at limit [^\n]*\nthe original allocator reserved at most [^\n]*; bfc needs [^\n]*\npeak RSS [^\n]*\nbfc   at limit [^\n]*, min limit [0-9.]+ MiB \\([0-9.]+x peak live, [0-9.]+x the original's peak reserved\\)\nvmm   at limit [^\n]*\\)\n{\"trace\":\"mlp_two_streams.snapshot\",\"allocator\":\"bfc\",.*\"min_limit_ratio\":[0-9.]+,.*\"format\":\"pytorch-snapshot\",.*\"original_peak_reserved_bytes\":[0-9]+,.*\"allocators\":\\[{\"allocator\":\"bfc\",[^}]*\"min_limit_ratio\":[0-9.]+,\"first_fit_ratio\":[0-9.]+,\"min_limit_vs_original\":[0-9.]+},{\"allocator\":\"vmm\",[^}]*\"min_limit_vs_original\":[0-9.]+}\\]}\n{\"trace\":\"mlp_two_streams.rmm\",\"allocator\":\"bfc\",.*\"min_limit_bytes\":null,.*\"format\":\"rmm-log\",.*\"allocators\":\\[{\"allocator\":\"bfc\",[^}]*\"min_limit_bytes\":null,[^}]*},{\"allocator\":\"vmm\",")

  # convert writes our format (stream column, peak header); replaying it gives the same workload.
  add_test(NAME vgpu_bench_convert_roundtrip
    COMMAND sh -c "out=${CMAKE_CURRENT_BINARY_DIR}/converted_two_streams.trace; rm -f \"$out\"; \
$<TARGET_FILE:vgpu-bench> convert ${VGPU_IMPORT_DATA}/mlp_two_streams.snapshot.pickle \"$out\" >/dev/null 2>&1 && \
sed -n 2,3p \"$out\" && $<TARGET_FILE:vgpu-bench> replay \"$out\" --no-baseline 2>/dev/null | tail -n 1")
  set_tests_properties(vgpu_bench_convert_roundtrip PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "^# peak_live_bytes 6186144\na 0 1077288 0\n{.*\"events\":56,.*\"peak_live_bytes\":6186144,.*\"format\":\"vgpu\",\"streams\":2,")

  # A broken pickle is an error naming the offset, exit 1.
  add_test(NAME vgpu_bench_import_truncated_pickle
    COMMAND sh -c "$<TARGET_FILE:vgpu-bench> replay ${VGPU_IMPORT_DATA}/snapshots/truncated.pickle 2>&1; echo \"exit=$?\"")
  set_tests_properties(vgpu_bench_import_truncated_pickle PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "^vgpu-bench replay: INVALID_ARGUMENT: truncated.pickle: pickle at offset [0-9]+: [^\n]*truncated pickle\\)\nexit=1\n?$")

  # plan: the configuration fits, vgpu-info --selftest accepts it, every trace replays at its
  # planned limit (tests/plan_check.sh).
  if(TARGET vgpu-info)
    add_test(NAME vgpu_bench_plan_selftest_and_replay
      COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/plan_check.sh $<TARGET_FILE:vgpu-bench>
              $<TARGET_FILE:vgpu-info> 1GiB ${PROJECT_SOURCE_DIR}/tools/traces/mlp_mirrored.trace
              ${VGPU_IMPORT_DATA}/mlp_two_streams.snapshot.pickle
              ${VGPU_IMPORT_DATA}/mlp_two_streams.rmm.csv
              ${VGPU_IMPORT_DATA}/mlp_truncated.snapshot.pickle)
    set_tests_properties(vgpu_bench_plan_selftest_and_replay PROPERTIES LABELS unit TIMEOUT 300
      PASS_REGULAR_EXPRESSION "plan check passed: 4 traces")
    # The same on logs PyTorch and RMM wrote themselves (tests/data/torch, tests/data/rmm).
    add_test(NAME vgpu_bench_plan_real_logs
      COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/plan_check.sh $<TARGET_FILE:vgpu-bench>
              $<TARGET_FILE:vgpu-info> 2GiB ${VGPU_IMPORT_DATA}/torch/train_frames.pickle
              ${VGPU_IMPORT_DATA}/torch/two_streams.pickle ${VGPU_IMPORT_DATA}/rmm/torch.dev0.csv
              ${VGPU_IMPORT_DATA}/rmm/streams.dev0.csv)
    set_tests_properties(vgpu_bench_plan_real_logs PROPERTIES LABELS unit TIMEOUT 300
      PASS_REGULAR_EXPRESSION "plan check passed: 4 traces")
    # And on the other files users have: torch.save of a snapshot, a profiler trace, a
    # TensorFlow memory log (gzipped, as written by PyTorch and TensorFlow themselves).
    add_test(NAME vgpu_bench_plan_other_formats
      COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/plan_check.sh $<TARGET_FILE:vgpu-bench>
              $<TARGET_FILE:vgpu-info> 1GiB ${VGPU_IMPORT_DATA}/torch/two_streams.pt
              ${VGPU_IMPORT_DATA}/torch/cpu_train.pt.trace.json.gz
              ${VGPU_IMPORT_DATA}/tf/cpu_train.tf.log.gz
              ${VGPU_IMPORT_DATA}/mlp_mirrored.tf.log)
    set_tests_properties(vgpu_bench_plan_other_formats PROPERTIES LABELS unit TIMEOUT 300
      PASS_REGULAR_EXPRESSION "plan check passed: 4 traces")
  endif()
  # --prefer speed (the default): the fastest policy that fits, bfc without growth here;
  # --prefer memory: the smallest total, vmm on these logs (bfc needs 1.15x on the RMM log), with
  # growth or without, whichever of the two fits them in less (they are 0.005x apart).
  foreach(prefer speed memory)
    add_test(NAME vgpu_bench_plan_prefer_${prefer}
      COMMAND sh -c "$<TARGET_FILE:vgpu-bench> plan --card 80GiB --prefer ${prefer} ${VGPU_IMPORT_DATA}/torch/two_streams.pickle ${VGPU_IMPORT_DATA}/rmm/streams.dev0.csv 2>/dev/null | tail -n 2")
  endforeach()
  set_tests_properties(vgpu_bench_plan_prefer_speed PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "^VGPU_ALLOCATOR=bfc VGPU_ALLOW_GROWTH=false VGPU_LOGICAL_DEVICES=.*\n{.*\"prefer\":\"speed\",\"allocator\":\"bfc\",\"allow_growth\":false,.*\"fits\":true}")
  set_tests_properties(vgpu_bench_plan_prefer_memory PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "^VGPU_ALLOCATOR=vmm VGPU_ALLOW_GROWTH=(true|false) VGPU_LOGICAL_DEVICES=.*\n{.*\"prefer\":\"memory\",\"allocator\":\"vmm\",.*\"fits\":true}")
  # A card too small: "fits":false and exit 3.
  add_test(NAME vgpu_bench_plan_does_not_fit
    COMMAND sh -c "out=$($<TARGET_FILE:vgpu-bench> plan --card 12MiB --workspace 0 ${PROJECT_SOURCE_DIR}/tools/traces/mlp_mirrored.trace ${VGPU_IMPORT_DATA}/mlp_two_streams.rmm.csv 2>&1); rc=$?; printf '%s\\n' \"$out\" | tail -n 2; echo \"exit=$rc\"")
  set_tests_properties(vgpu_bench_plan_does_not_fit PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "\"logical_devices\":\"0:8MiB,8MiB\",\"fits\":false}\nvgpu-bench plan: the planned limits \\(16 MiB\\) and the reserve \\(0 B\\) exceed the 12 MiB card\nexit=3")
  # The reserve counts: 16 MiB of limits and 4 MiB reserved fit 20 MiB, not 18 MiB.
  add_test(NAME vgpu_bench_plan_reserve
    COMMAND sh -c "for card in 18MiB 20MiB; do \
out=$($<TARGET_FILE:vgpu-bench> plan --card $card --reserve 4MiB --workspace 0 ${PROJECT_SOURCE_DIR}/tools/traces/mlp_mirrored.trace ${VGPU_IMPORT_DATA}/mlp_two_streams.rmm.csv 2>/dev/null); rc=$?; \
printf '%s\\n' \"$out\" | tail -n 2; echo \"exit=$rc\"; done")
  set_tests_properties(vgpu_bench_plan_reserve PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "\"fits\":false}\nexit=3\nVGPU_ALLOCATOR=bfc VGPU_ALLOW_GROWTH=false VGPU_RESERVED_MEMORY=4194304 VGPU_LOGICAL_DEVICES=\"0:8MiB,8MiB\"\n{.*\"fits\":true}\nexit=0")
  # Each device's limit holds the runtime's BLAS workspace on top of the workload's (32 MiB
  # by default, cuBLAS on Hopper): 8 MiB planned + 32 MiB = 40 MiB a device.
  add_test(NAME vgpu_bench_plan_workspace
    COMMAND sh -c "$<TARGET_FILE:vgpu-bench> plan --card 1GiB ${PROJECT_SOURCE_DIR}/tools/traces/mlp_mirrored.trace ${VGPU_IMPORT_DATA}/mlp_two_streams.rmm.csv 2>/dev/null | tail -n 1")
  set_tests_properties(vgpu_bench_plan_workspace PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "\"workspace_bytes\":33554432,.*\"planned_limit_bytes\":8388608,\"device_limit_bytes\":41943040}.*\"logical_devices\":\"0:40MiB,40MiB\",\"fits\":true}")
  # bfc without growth at or below TensorFlow's rule on the snapshot PyTorch wrote where it was
  # above it (small blocks among a side stream's tensors): 1.285x for the rule, bfc 1.025x with
  # its small pool at the top (docs/allocator.md, "Small blocks at the top"), 1.425x without.
  add_test(NAME vgpu_bench_bars_two_streams_snapshot_bfc_growth_off
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/bench_bars_check.sh $<TARGET_FILE:vgpu-bench>
      ${VGPU_IMPORT_DATA}/torch/two_streams.pickle bfc off 1.285 50)
  set_tests_properties(vgpu_bench_bars_two_streams_snapshot_bfc_growth_off PROPERTIES
    LABELS bench TIMEOUT 120 RUN_SERIAL TRUE PASS_REGULAR_EXPRESSION "ALL-WITHIN-BARS"
    FAIL_REGULAR_EXPRESSION "OVER-BAR")
  # vmm with growth on users' own workloads (PyTorch snapshots of a transformer's training):
  # min limit <= 1.05 and, at 2x peak live, peak reserved <= 1.10x peak live (PyTorch reserved
  # 1.15-1.21x on them). The growth cache's cap counts shared granules and slabs (1.23x when it
  # counted blocks' own granules only; docs/vmm.md).
  foreach(snapshot expandable ring)
    add_test(NAME vgpu_bench_bars_${snapshot}_snapshot_vmm_growth_on
      COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/bench_bars_check.sh $<TARGET_FILE:vgpu-bench>
        ${VGPU_IMPORT_DATA}/torch/${snapshot}.pickle vmm on 1.05 80 1.10)
    set_tests_properties(vgpu_bench_bars_${snapshot}_snapshot_vmm_growth_on PROPERTIES
      LABELS bench TIMEOUT 120 RUN_SERIAL TRUE PASS_REGULAR_EXPRESSION "ALL-WITHIN-BARS"
      FAIL_REGULAR_EXPRESSION "OVER-BAR")
  endforeach()
  # A workload smaller than a vmm page (300 bytes live): vmm's limit cannot go below one
  # 2 MiB page, so its min limit is that page (ratio off the 1 + k/200 grid), the default
  # limit is raised to it, and plan still plans (vgpu_bench.h, AllocatorFloorBytes): every
  # policy rounds to one 2 MiB device, so the first, bfc, is chosen.
  add_test(NAME vgpu_bench_tiny_workload_vmm
    COMMAND sh -c "t=${CMAKE_CURRENT_BINARY_DIR}/tiny_workload.trace; \
printf 'a 0 100\\na 1 200\\nf 0\\nf 1\\n' > \"$t\"; \
$<TARGET_FILE:vgpu-bench> replay \"$t\" --allocator vmm --allow-growth --min-limit --no-baseline 2>/dev/null | tail -n 1; \
$<TARGET_FILE:vgpu-bench> plan --card 1GiB --prefer memory --workspace 0 \"$t\" 2>/dev/null | tail -n 1")
  set_tests_properties(vgpu_bench_tiny_workload_vmm PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "\"peak_live_bytes\":300,\"peak_reserved_bytes\":2097152,\"min_limit_bytes\":2097152,\"min_limit_ratio\":6990.5[0-9]*,\"first_fit_ratio\":6990.5[0-9]*,.*\n{.*\"allocator\":\"bfc\",.*\"min_limit_bytes\":{\"bfc\":512,\"bfc_growth\":512,\"vmm\":2097152,\"vmm_growth\":2097152}.*\"fits\":true}")
  add_test(NAME vgpu_bench_plan_needs_card
    COMMAND sh -c "$<TARGET_FILE:vgpu-bench> plan x.trace 2>&1; echo \"exit=$?\"")
  set_tests_properties(vgpu_bench_plan_needs_card PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "vgpu-bench plan needs --card SIZE.*exit=2")
endif()
