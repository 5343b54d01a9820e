# The foundation's command-line contracts (vgpu-info on the host platform).
add_test(NAME vgpu_info_two_host_devices
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_HOST_DEVICES=2x16GiB
          $<TARGET_FILE:vgpu-info> --json)
set_tests_properties(vgpu_info_two_host_devices PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "\"platform\":\"host\".*\"ordinal\":0.*\"total_bytes\":17179869184.*\"ordinal\":1.*\"total_bytes\":17179869184")

add_test(NAME vgpu_info_bad_host_devices
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_HOST_DEVICES=2x16GiB,foo
          $<TARGET_FILE:vgpu-info>)
set_tests_properties(vgpu_info_bad_host_devices PROPERTIES LABELS unit WILL_FAIL TRUE)
add_test(NAME vgpu_info_bad_host_devices_message
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_HOST_DEVICES=2x16GiB,foo
          sh -c "$<TARGET_FILE:vgpu-info> 2>&1; true")
set_tests_properties(vgpu_info_bad_host_devices_message PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "bad part \"foo\"")

add_test(NAME vgpu_info_cuda_without_gpu
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=cuda $<TARGET_FILE:vgpu-info>)
set_tests_properties(vgpu_info_cuda_without_gpu PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "Platform: cuda|CUDA devices")

# vgpu-bench allreduce: checks the result itself (exit 1 otherwise) and ends with the JSON line.
if(TARGET vgpu-bench)
  add_test(NAME vgpu_bench_allreduce_json
    COMMAND $<TARGET_FILE:vgpu-bench> allreduce --devices 3 --size 1000003 --iterations 2)
  set_tests_properties(vgpu_bench_allreduce_json PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "\"devices\":3,\"bytes_per_replica\":1000000,\"algorithm\":\"local\".*\"bandwidth_gbps\":.*\"ratio_to_memcpy\":")
  add_test(NAME vgpu_bench_allreduce_bad_flag
    COMMAND $<TARGET_FILE:vgpu-bench> allreduce --devices 99)
  set_tests_properties(vgpu_bench_allreduce_bad_flag PROPERTIES LABELS unit WILL_FAIL TRUE)
endif()

# vgpu-train --memory-history writes a history (with the limits) that vgpu-info draws.
if(TARGET vgpu-train AND EXISTS /usr/share/datasets/fashion-mnist)
  add_test(NAME vgpu_train_memory_history_timeline
    COMMAND sh -c "rm -f train_history.json train_history.svg && \
VGPU_PLATFORM=host VGPU_HOST_DEVICES=1x8GiB VGPU_LOGICAL_DEVICES=0:1GiB,1GiB \
$<TARGET_FILE:vgpu-train> --strategy mirrored --devices 2 --epochs 1 --train-limit 2000 --quiet \
--memory-history train_history.json >/dev/null && grep -q '\"limits\":{\"/job:localhost' train_history.json && \
$<TARGET_FILE:vgpu-info> timeline train_history.json --svg train_history.svg && grep -q '</svg>' train_history.svg")
  set_tests_properties(vgpu_train_memory_history_timeline PROPERTIES LABELS unit TIMEOUT 300
    PASS_REGULAR_EXPRESSION "train_history.svg: [0-9]+ allocator")
endif()

# The async allocator has no fake-address mode: replay without --platform says which flag.
add_test(NAME vgpu_bench_replay_async_needs_platform
  COMMAND sh -c "$<TARGET_FILE:vgpu-bench> replay x.trace --allocator async 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_bench_replay_async_needs_platform PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "--allocator async needs --platform host\\|cuda.*exit=2")

# ---- issue 12: input files and the timeline ---------------------------------------------------
# The timeline's reader/renderer lives in tools/ (vgpu_tools_lib); its test links it.
if(TARGET history_reader_test AND TARGET vgpu_tools_lib)
  target_link_libraries(history_reader_test PRIVATE vgpu_tools_lib)
endif()
# Hostile files fed to the real binaries under a timeout: exit 1 or 2 with a message, never a
# signal, an abort or a hang (tests/cli_files_test.sh).
if(TARGET vgpu-info AND TARGET vgpu-bench)
  add_test(NAME cli_files_hostile_inputs
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_files_test.sh $<TARGET_FILE:vgpu-info>
            $<TARGET_FILE:vgpu-bench> ${CMAKE_CURRENT_BINARY_DIR}/cli_files_work)
  set_tests_properties(cli_files_hostile_inputs PROPERTIES LABELS unit TIMEOUT 300
    PASS_REGULAR_EXPRESSION "cli_files: all [0-9]+ checks passed")
endif()

# The calibration replay's trace and best-fit reference allocator (tools/bench_reference.h).
if(TARGET bench_reference_test AND TARGET vgpu_tools_lib)
  target_link_libraries(bench_reference_test PRIVATE vgpu_tools_lib)
endif()
# `vgpu-bench replay --calibrate` reports the calibration replay's ns/op beside the replay's, in
# the single-allocator line and in each entry of --allocators.
if(TARGET vgpu-bench)
  set(_mlp ${PROJECT_SOURCE_DIR}/tools/traces/mlp_mirrored.trace)
  add_test(NAME vgpu_bench_replay_calibrate
    COMMAND sh -c "$<TARGET_FILE:vgpu-bench> replay ${_mlp} --calibrate --no-baseline 2>&1")
  set_tests_properties(vgpu_bench_replay_calibrate PROPERTIES LABELS unit TIMEOUT 120
    PASS_REGULAR_EXPRESSION "calibration \\(best-fit reference allocator\\): [0-9.]+ ns/op.*\"calibration_ns_per_op\":[0-9.e+]*[1-9]")
  add_test(NAME vgpu_bench_replay_compare_calibrate
    COMMAND sh -c "$<TARGET_FILE:vgpu-bench> replay ${_mlp} --allocators bfc,vmm --calibrate 2>/dev/null | tail -n 1")
  set_tests_properties(vgpu_bench_replay_compare_calibrate PROPERTIES LABELS unit TIMEOUT 120
    PASS_REGULAR_EXPRESSION "\"allocator\":\"bfc\",[^}]*\"calibration_ns_per_op\":[0-9.e+]*[1-9][^}]*}.*\"allocator\":\"vmm\",[^}]*\"calibration_ns_per_op\":[0-9.e+]*[1-9]")
  # --failure-log: each allocator's memory log at its first failed allocation one scan step
  # under its min limit (a section each, in order, the failure's error first), and a line saying
  # so when nothing failed at --limit and there was no scan.
  set(_fl ${CMAKE_CURRENT_BINARY_DIR}/vgpu_bench_failure.log)
  add_test(NAME vgpu_bench_replay_failure_log
    COMMAND sh -c "rm -f ${_fl}; $<TARGET_FILE:vgpu-bench> replay ${_mlp} --allocators bfc,vmm \
--min-limit --no-baseline --failure-log ${_fl} >/dev/null 2>&1 || echo exit=$?; grep -E \
'^(==|first failure|BFC allocator|replay/|  granules:)' ${_fl} | cut -c1-100; \
$<TARGET_FILE:vgpu-bench> replay ${_mlp} --allocator vmm --no-baseline --failure-log ${_fl} \
>/dev/null 2>&1 || echo exit=$?; cat ${_fl}")
  set_tests_properties(vgpu_bench_replay_failure_log PROPERTIES LABELS unit TIMEOUT 120
    FAIL_REGULAR_EXPRESSION "exit="
    PASS_REGULAR_EXPRESSION "^== [^\n]*: bfc \\(growth off\\), limit [^\n]*\nfirst failure at event [0-9]+ of 28: RESOURCE_EXHAUSTED[^\n]*\nBFC allocator replay/[^\n]*\n== [^\n]*: vmm \\(growth off\\), limit [^\n]*\nfirst failure at event [0-9]+ of 28: RESOURCE_EXHAUSTED[^\n]*\nreplay/[^\n]*\n  granules: limit [^\n]*\nBFC allocator replay/[^\n]* slabs [^\n]*\n== [^\n]*: vmm \\(growth off\\): no allocation failed at [^\n]* \\(2.000x peak live\\); with --min-limit [^\n]*==\n$")
endif()
