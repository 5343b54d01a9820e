# ---- issue 12: the tools' command lines (tools/flags.h) --------------------------------------
# tests/flags_test.cc checks the mechanism and each tool's parse function (vgpu_tools_lib);
# the CLI tests below run the real binaries on the issue's cases under a timeout
# (tests/cli_check.sh: exit status, stderr size, output regex; a signal or a timeout fails).
if(TARGET flags_test AND TARGET vgpu_tools_lib)
  target_link_libraries(flags_test PRIVATE vgpu_tools_lib)
endif()

set(_cli_check ${CMAKE_CURRENT_SOURCE_DIR}/cli_check.sh)
set(_cli_trace ${CMAKE_CURRENT_SOURCE_DIR}/data/cli_flags.trace)
# vgpu_cli_test(NAME EXIT MAX_STDERR_BYTES REGEX ENV_LIST COMMAND...)
function(vgpu_cli_test name exit max_err regex env)
  add_test(NAME cli_${name}
    COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host ${env}
            sh ${_cli_check} ${exit} ${max_err} ${regex} ${ARGN})
  set_tests_properties(cli_${name} PROPERTIES LABELS unit TIMEOUT 90 PASS_REGULAR_EXPRESSION "PASS")
endfunction()

if(TARGET vgpu-bench)
  set(_b $<TARGET_FILE:vgpu-bench>)
  # Item 10: a boolean takes its value; growth off really is off, "no" really is no.
  vgpu_cli_test(bench_allow_growth_false 0 100000 "\"allow_growth\":false" ""
    ${_b} replay ${_cli_trace} --allow-growth=false --no-baseline)
  vgpu_cli_test(bench_min_limit_no 0 100000 "\"min_limit_bytes\":null" ""
    ${_b} replay ${_cli_trace} --min-limit=no --no-baseline)
  vgpu_cli_test(bench_bools_on 0 100000 "\"allow_growth\":true.*\"min_limit_bytes\":[0-9]+" ""
    ${_b} replay ${_cli_trace} --allow-growth=yes --min-limit=on --no-baseline)
  vgpu_cli_test(bench_bool_refused 2 4096 "--allow-growth=maybe: expected true, false" ""
    ${_b} replay ${_cli_trace} --allow-growth=maybe)
  # A flag needing a value never takes the next flag; an empty file name is refused.
  vgpu_cli_test(bench_memory_history_swallow 2 4096 "--memory-history needs a value" ""
    ${_b} replay ${_cli_trace} --memory-history --no-baseline)
  vgpu_cli_test(bench_memory_history_empty 2 4096 "--memory-history needs a non-empty value" ""
    sh -c "exec ${_b} replay ${_cli_trace} --memory-history ''")
  vgpu_cli_test(bench_memory_history_empty_inline 2 4096 "--memory-history needs a non-empty value"
    "" ${_b} replay ${_cli_trace} --memory-history=)
  vgpu_cli_test(bench_two_traces 2 4096 "unexpected argument .*TRACE already given" ""
    ${_b} replay ${_cli_trace} ${_cli_trace})
  foreach(cmd replay alloc allreduce)
    vgpu_cli_test(bench_help_${cmd} 0 0 "usage: vgpu-bench" "" ${_b} ${cmd} --help)
  endforeach()
  vgpu_cli_test(bench_help 0 0 "usage: vgpu-bench replay" "" ${_b} -h)
  # Item 1: the tuning knobs: strict, ranged, the project's message, exit 2, no signal.
  foreach(knob "VGPU_BFC_SMALL_REQUEST_BYTES=" "VGPU_BFC_SMALL_REQUEST_BYTES=lots"
               "VGPU_BFC_MIN_SPLIT_BYTES=1MiBx" "VGPU_BFC_MIN_SPLIT_BYTES=-1"
               "VGPU_BFC_MIN_SPLIT_BYTES=99999999999999999999999" "VGPU_BFC_MIN_SPLIT_FRACTION=nan"
               "VGPU_BFC_MIN_SPLIT_FRACTION=1e999" "VGPU_BFC_MIN_SPLIT_FRACTION=1.5"
               "VGPU_VMM_SLAB_BYTES=3MiB" "VGPU_VMM_SLAB_BYTES=0" "VGPU_VMM_SMALL_BLOCK_MAX=-1")
    string(REGEX REPLACE "=.*" "" var "${knob}")
    string(MAKE_C_IDENTIFIER "${knob}" tname)
    vgpu_cli_test(bench_knob_${tname} 2 4096 "vgpu-bench: ${var}=\"" "${knob}"
      ${_b} replay ${_cli_trace} --no-baseline)
  endforeach()
  vgpu_cli_test(bench_knob_flag_refused 2 4096 "--bfc-min-split-fraction=nan" ""
    ${_b} replay ${_cli_trace} --bfc-min-split-fraction=nan)
  vgpu_cli_test(bench_knob_1MiB_accepted 0 100000 "\"trace\":\"cli_flags\""
    "VGPU_BFC_MIN_SPLIT_BYTES=1MiB" ${_b} replay ${_cli_trace} --no-baseline)
  vgpu_cli_test(bench_knob_flag_accepted 0 100000 "\"allocator\":\"vmm\"" ""
    ${_b} replay ${_cli_trace} --allocator vmm --vmm-slab-bytes 4MiB --vmm-small-block-max 1MiB
    --limit 64MiB --no-baseline)
endif()

if(TARGET vgpu-train)
  set(_t $<TARGET_FILE:vgpu-train>)
  # Item 5: counts checked before anything is built: fast, exit 2, a short message.
  foreach(devices 2147483647 100000000 GPU:99999 0 -3)
    string(MAKE_C_IDENTIFIER "${devices}" tname)
    vgpu_cli_test(train_devices_${tname} 2 4096 "--devices" "VGPU_HOST_DEVICES=1x8GiB"
      ${_t} --strategy mirrored --devices ${devices})
  endforeach()
  vgpu_cli_test(train_devices_beyond_the_card 2 4096 "physical GPU 0 \\(8 GiB\\) holds at most 8"
    "VGPU_HOST_DEVICES=1x8GiB" ${_t} --strategy mirrored --devices GPU:40)
  # The runtime's "no device matches" lists a few devices, then how many more.
  vgpu_cli_test(train_device_list_bounded 2 4096 "no device matches \"CPU:5\".*\\(5 more\\)"
    "VGPU_HOST_DEVICES=1x8GiB;VGPU_LOGICAL_DEVICES=0:256MiB,256MiB,256MiB,256MiB,256MiB,256MiB,256MiB,256MiB,256MiB,256MiB,256MiB,256MiB"
    ${_t} --strategy mirrored --devices GPU:0,CPU:5)
  # Item 11: non-finite or absurd hyper-parameters refused.
  foreach(lr inf 1e30 nan 0 -1)
    string(MAKE_C_IDENTIFIER "${lr}" tname)
    vgpu_cli_test(train_lr_${tname} 2 4096 "--lr=.*expected a decimal number in" ""
      ${_t} --lr ${lr})
  endforeach()
  # Outputs are checked writable before the run, not after it.
  vgpu_cli_test(train_record_trace_unwritable 2 4096
    "--record-trace \"/nonexistent-dir/x.gpu0.trace\": cannot write" ""
    ${_t} --strategy mirrored --devices 2 --record-trace /nonexistent-dir/x.trace)
  vgpu_cli_test(train_memory_history_unwritable 2 4096
    "--memory-history \"/nonexistent-dir/h.json\": cannot write" ""
    ${_t} --memory-history /nonexistent-dir/h.json)
  vgpu_cli_test(train_record_trace_swallow 2 4096 "--record-trace needs a value" ""
    ${_t} --record-trace --quiet)
  # The setting at fault is named.
  vgpu_cli_test(train_blames_memory_fraction 2 4096 "has 1 \\(VGPU_MEMORY_FRACTION"
    "VGPU_MEMORY_FRACTION=0.5;VGPU_HOST_DEVICES=1x8GiB" ${_t} --strategy mirrored)
  vgpu_cli_test(train_blames_visible_devices 2 4096 "VGPU_VISIBLE_DEVICES is empty"
    "VGPU_VISIBLE_DEVICES=" ${_t})
  vgpu_cli_test(train_help 0 0 "usage: vgpu-train" "" ${_t} --help)
endif()

if(TARGET vgpu-info)
  set(_i $<TARGET_FILE:vgpu-info>)
  set(_four "VGPU_HOST_DEVICES=1x8GiB;VGPU_LOGICAL_DEVICES=0:1GiB,1GiB,1GiB,1GiB")
  vgpu_cli_test(info_help 0 0 "usage: vgpu-info" "" ${_i} --help)
  vgpu_cli_test(info_memory_history_swallow 2 4096 "--memory-history needs a value" ""
    ${_i} --selftest --memory-history --json)
  vgpu_cli_test(info_allow_growth_false 0 100000 "growth off \\(flag\\).*VGPU_ALLOW_GROWTH +false +\\(flag\\)"
    "${_four}" ${_i} --allow-growth=false)
  # GPUs and the CPU apart; a priority nobody wrote is the default.
  vgpu_cli_test(info_counts_gpus_and_cpu 0 100000
    "Logical devices: 4 GPU\\(s\\) \\+ CPU:0.*GPU:0  physical 0  limit 1 GiB \\(environment\\)  priority 0 \\(default\\)"
    "${_four}" ${_i})
  # An injected stream failure is a device error at run time (exit 1), not a bad configuration.
  vgpu_cli_test(info_stream_fault_is_device_error 1 4096 "vgpu-info: device error: .*injected failure of stream"
    "${_four};VGPU_HOST_FAULTS=fail_stream_at=1" ${_i})
endif()
