# vgpu-info --selftest, flags and timeline on the host platform (issue 6's "Done when").
set(_vgpu_info_env VGPU_PLATFORM=host VGPU_HOST_DEVICES=1x8GiB
    VGPU_LOGICAL_DEVICES=0:1GiB,1GiB,1GiB,1GiB)

# Four 1 GiB logical devices: every check passes (limits, memcpy, 12 copies, all-reduce).
add_test(NAME vgpu_info_selftest_passes
  COMMAND ${CMAKE_COMMAND} -E env ${_vgpu_info_env} $<TARGET_FILE:vgpu-info> --selftest)
set_tests_properties(vgpu_info_selftest_passes PROPERTIES LABELS unit TIMEOUT 60
  PASS_REGULAR_EXPRESSION "PASS  limit GPU:3.*PASS  memcpy GPU:3.*PASS  copy GPU:3 -> GPU:2.*PASS  all-reduce.*21 check\\(s\\), 0 failed: PASS"
  FAIL_REGULAR_EXPRESSION "FAIL  ")

# One corrupted memcpy (the 3rd: GPU:1's host -> device copy): exit 1, the check named.
add_test(NAME vgpu_info_selftest_corrupt_memcpy_exits_1
  COMMAND ${CMAKE_COMMAND} -E env ${_vgpu_info_env} VGPU_HOST_FAULTS=corrupt_memcpy_at=3
          $<TARGET_FILE:vgpu-info> --selftest)
set_tests_properties(vgpu_info_selftest_corrupt_memcpy_exits_1 PROPERTIES LABELS unit TIMEOUT 60
  WILL_FAIL TRUE)
add_test(NAME vgpu_info_selftest_corrupt_memcpy_names_check
  COMMAND ${CMAKE_COMMAND} -E env ${_vgpu_info_env} VGPU_HOST_FAULTS=corrupt_memcpy_at=3
          sh -c "$<TARGET_FILE:vgpu-info> --selftest; echo \"exit=$?\"")
set_tests_properties(vgpu_info_selftest_corrupt_memcpy_names_check PROPERTIES LABELS unit
  TIMEOUT 60
  PASS_REGULAR_EXPRESSION "FAIL  memcpy GPU:1 +byte [0-9]+ of 1048576 is [0-9]+, expected [0-9]+.*1 failed: FAIL.*exit=1")

# A failed memcpy (an error, not corruption) in a device-to-device copy: named, exit 1.
add_test(NAME vgpu_info_selftest_failed_memcpy
  COMMAND ${CMAKE_COMMAND} -E env ${_vgpu_info_env} VGPU_HOST_FAULTS=fail_memcpy_at=10
          sh -c "$<TARGET_FILE:vgpu-info> --selftest; echo \"exit=$?\"")
set_tests_properties(vgpu_info_selftest_failed_memcpy PROPERTIES LABELS unit TIMEOUT 60
  PASS_REGULAR_EXPRESSION "FAIL  copy GPU:0 -> GPU:1 +.*injected failure of memcpy #10.*exit=1")

# ignore_capacity lifts only the simulated physical capacity: the limit is the allocator's, so
# the limit checks still pass (this is what proves the limit does not rely on the platform).
add_test(NAME vgpu_info_selftest_limit_is_the_allocators
  COMMAND ${CMAKE_COMMAND} -E env ${_vgpu_info_env} VGPU_HOST_FAULTS=ignore_capacity=1
          $<TARGET_FILE:vgpu-info> --selftest)
set_tests_properties(vgpu_info_selftest_limit_is_the_allocators PROPERTIES LABELS unit TIMEOUT 60
  PASS_REGULAR_EXPRESSION "PASS  limit GPU:0 +1 GiB of 1 GiB.*0 failed: PASS")

add_test(NAME vgpu_info_bad_host_faults
  COMMAND ${CMAKE_COMMAND} -E env ${_vgpu_info_env} VGPU_HOST_FAULTS=explode=1
          sh -c "$<TARGET_FILE:vgpu-info> --selftest 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_info_bad_host_faults PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "unknown fault \"explode\".*exit=2")

# Flags override the environment and say so ("flag"); links between logical devices.
add_test(NAME vgpu_info_flags_override_environment
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=cuda VGPU_HOST_DEVICES=1x1GiB
          VGPU_LOGICAL_DEVICES=0:9GiB
          $<TARGET_FILE:vgpu-info> --platform host --host-devices 2x8GiB
          --logical-devices "0:1GiB,1GiB@-1;1:2GiB" --allow-growth)
set_tests_properties(vgpu_info_flags_override_environment PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "2 simulated GPU.*device:GPU:1  physical 0  limit 1 GiB \\(flag\\)  priority -1 \\(flag\\).*growth on \\(flag\\)  in use 0 B  reserved 0 B  peak 0 B.*GPU:0 +X +SAME +PEER.*VGPU_LOGICAL_DEVICES +0:1GiB,1GiB@-1;1:2GiB +\\(flag\\).*VGPU_ALLOW_GROWTH +true +\\(flag\\)")
add_test(NAME vgpu_info_flags_json
  COMMAND $<TARGET_FILE:vgpu-info> --platform=host --host-devices=2x8GiB --memory-fraction=0.5
          --json)
set_tests_properties(vgpu_info_flags_json PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "\"memory_limit\":4294967296.*\"bytes_in_use\":0,\"bytes_reserved\":0,\"peak_bytes_in_use\":0,[^{]*\"sources\":{\"memory_limit\":\"flag\".*\"name\":\"memory_fraction\",\"env\":\"VGPU_MEMORY_FRACTION\",\"value\":\"0.5\",\"source\":\"flag\".*\"links\":\\[{\"a\":\"/job:localhost/replica:0/task:0/device:GPU:0\",\"b\":\"/job:localhost/replica:0/task:0/device:GPU:1\",\"kind\":\"peer\",\"peer_capable\":true,\"peer_enabled\":true}\\]}")

# Bad flags and bad flag values: exit 2, the flag named.
foreach(bad "--bogus|unknown flag \"--bogus\"" "--memory-fraction=1.5|--memory-fraction=1.5: must be in \\(0, 1\\]"
            "--logical-devices=0:lots|--logical-devices=0:lots: .*lots" "--allow-growth=maybe|--allow-growth=maybe"
            "--host-devices=3xlots|--host-devices=3xlots" "--platform=tpu|--platform=tpu: expected host, cuda or auto")
  string(REPLACE "|" ";" parts "${bad}")
  list(GET parts 0 flag)
  list(GET parts 1 expect)
  string(REGEX REPLACE "[^a-z]" "_" tname "${flag}")
  add_test(NAME vgpu_info_bad_flag${tname}
    COMMAND sh -c "$<TARGET_FILE:vgpu-info> --platform host '${flag}' 2>&1; echo \"exit=$?\"")
  set_tests_properties(vgpu_info_bad_flag${tname} PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "vgpu-info: ${expect}.*usage: vgpu-info.*exit=2")
endforeach()
# A flag-made configuration that does not fit: exit 2 with the resolver's message.
add_test(NAME vgpu_info_flag_configuration_over_capacity
  COMMAND sh -c "$<TARGET_FILE:vgpu-info> --platform host --host-devices 1x8GiB --logical-devices 0:5GiB,5GiB 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_info_flag_configuration_over_capacity PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "bad configuration: .*exceed its capacity of 8 GiB.*exit=2")
add_test(NAME vgpu_info_help
  COMMAND sh -c "$<TARGET_FILE:vgpu-info> --help; echo \"exit=$?\"")
set_tests_properties(vgpu_info_help PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "usage: vgpu-info.*--memory-fraction.*examples:.*--selftest.*exit=0")

# Timeline: a selftest records its memory history, the timeline draws it, rsvg-convert parses
# the SVG into a non-empty PNG (skipped where librsvg2-bin is absent).
find_program(VGPU_RSVG_CONVERT rsvg-convert)
set(_vgpu_tl ${CMAKE_CURRENT_BINARY_DIR}/vgpu_info_timeline)
add_test(NAME vgpu_info_timeline_renders
  COMMAND ${CMAKE_COMMAND} -E env ${_vgpu_info_env} sh -c "\
set -e; rm -f ${_vgpu_tl}.json ${_vgpu_tl}.svg ${_vgpu_tl}.png; \
$<TARGET_FILE:vgpu-info> --allow-growth --selftest --memory-history ${_vgpu_tl}.json >/dev/null; \
$<TARGET_FILE:vgpu-info> timeline ${_vgpu_tl}.json --svg ${_vgpu_tl}.svg; \
test -s ${_vgpu_tl}.svg; grep -q 'limit 1 GiB' ${_vgpu_tl}.svg; grep -q 'time (ms)' ${_vgpu_tl}.svg; \
if [ -z '${VGPU_RSVG_CONVERT}' ] || [ ! -x '${VGPU_RSVG_CONVERT}' ]; then echo SKIPPED: no rsvg-convert; exit 0; fi; \
'${VGPU_RSVG_CONVERT}' ${_vgpu_tl}.svg -o ${_vgpu_tl}.png; test -s ${_vgpu_tl}.png; echo RENDERED")
set_tests_properties(vgpu_info_timeline_renders PROPERTIES LABELS unit TIMEOUT 60
  PASS_REGULAR_EXPRESSION "RENDERED" SKIP_REGULAR_EXPRESSION "SKIPPED:")
add_test(NAME vgpu_info_timeline_bad_input
  COMMAND sh -c "echo '{\"events\":[' > ${_vgpu_tl}_bad.json; \
$<TARGET_FILE:vgpu-info> timeline ${_vgpu_tl}_bad.json --svg ${_vgpu_tl}_bad.svg 2>&1; echo \"exit=$?\"; \
$<TARGET_FILE:vgpu-info> timeline ${_vgpu_tl}_bad.json 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_info_timeline_bad_input PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "malformed JSON at offset [0-9]+.*exit=1.*needs a history file and --svg.*exit=2")

# "--svg -": the drawing on standard output (here read from standard input too), the summary on
# stderr, and no file named "-".
add_test(NAME vgpu_info_timeline_to_stdout
  COMMAND sh -c "cd ${CMAKE_CURRENT_BINARY_DIR} && rm -f ./- && \
echo '{\"allocators\":[\"a\"],\"events\":[{\"t_ns\":1000,\"allocator\":0,\"in_use\":1,\"reserved\":2,\"largest_free\":1}]}' | \
$<TARGET_FILE:vgpu-info> timeline - --svg - 2>timeline_stderr.txt | tail -n 1; \
cat timeline_stderr.txt; test ! -e ./- && echo NO-DASH-FILE")
set_tests_properties(vgpu_info_timeline_to_stdout PROPERTIES LABELS unit TIMEOUT 60
  PASS_REGULAR_EXPRESSION "^</svg>\nstandard output: 1 allocator\\(s\\), 1 event\\(s\\)[^\n]*\nNO-DASH-FILE")

# No logical GPUs (cuda without a driver here): nothing checked is a failure, not a pass.
add_test(NAME vgpu_info_selftest_without_gpus_fails
  COMMAND ${CMAKE_COMMAND} -E env VGPU_VISIBLE_DEVICES=
          sh -c "$<TARGET_FILE:vgpu-info> --platform host --selftest; echo \"exit=$?\"")
set_tests_properties(vgpu_info_selftest_without_gpus_fails PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "FAIL  logical GPUs +no logical GPUs on platform host.*exit=1")

# ---- Issue 12 (configuration, platform and allocators): hostile configurations ----------
# Percent splits that add up to 100 % build (limits derived from percentages are rounded down
# to a granule), on every allocator; the README's own example below.
set(_vgpu_i12_n 0)
foreach(_vgpu_i12_case
    "1x8GiB|0:40%,60%|bfc" "1x8GiB|0:33%,33%,34%|bfc"
    "1x8GiB|0:40%,60%|vmm" "1x8GiB|0:33%,33%,34%|vmm"
    # Small logical devices: every selftest step scales to the limit, down to the 2 MiB minimum.
    "1x8GiB|0:8MiB,8MiB|bfc" "1x8GiB|0:3MiB|bfc" "1x8GiB|0:2MiB,2MiB|bfc"
    "1x8GiB|0:8MiB,8MiB|vmm" "1x8GiB|0:3MiB|vmm" "1x8GiB|0:2MiB,2MiB|vmm"
    "1x8GiB|0:2MiB,2MiB|async")
  string(REPLACE "|" ";" _vgpu_i12_parts "${_vgpu_i12_case}")
  list(GET _vgpu_i12_parts 0 _vgpu_i12_host)
  list(GET _vgpu_i12_parts 1 _vgpu_i12_logical)
  list(GET _vgpu_i12_parts 2 _vgpu_i12_alloc)
  math(EXPR _vgpu_i12_n "${_vgpu_i12_n} + 1")
  add_test(NAME vgpu_info_i12_selftest_${_vgpu_i12_n}
    COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_HOST_DEVICES=${_vgpu_i12_host}
            "VGPU_LOGICAL_DEVICES=${_vgpu_i12_logical}" VGPU_ALLOCATOR=${_vgpu_i12_alloc}
            $<TARGET_FILE:vgpu-info> --selftest)
  set_tests_properties(vgpu_info_i12_selftest_${_vgpu_i12_n} PROPERTIES LABELS unit TIMEOUT 60
    PASS_REGULAR_EXPRESSION "check\\(s\\), 0 failed: PASS" FAIL_REGULAR_EXPRESSION "FAIL  ")
endforeach()

foreach(_vgpu_i12_alloc bfc vmm)
  add_test(NAME vgpu_info_i12_selftest_readme_${_vgpu_i12_alloc}
    COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_HOST_DEVICES=2x16GiB
            VGPU_ALLOCATOR=${_vgpu_i12_alloc} $<TARGET_FILE:vgpu-info>
            --logical-devices "0:1GiB,1GiB@-1;1:40%,60%" --selftest)
  set_tests_properties(vgpu_info_i12_selftest_readme_${_vgpu_i12_alloc} PROPERTIES LABELS unit
    TIMEOUT 60 PASS_REGULAR_EXPRESSION "21 check\\(s\\), 0 failed: PASS" FAIL_REGULAR_EXPRESSION "FAIL  ")
endforeach()

# Below the minimum logical device size: exit 2, the minimum named.
add_test(NAME vgpu_info_i12_below_minimum
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_HOST_DEVICES=1x8GiB
          VGPU_LOGICAL_DEVICES=0:1MiB sh -c "$<TARGET_FILE:vgpu-info> --selftest 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_info_i12_below_minimum PROPERTIES LABELS unit TIMEOUT 60
  PASS_REGULAR_EXPRESSION "below the minimum logical device size of 2 MiB.*exit=2")

# Cards past the address space: refused when VGPU_HOST_DEVICES is parsed (no abort, no
# "mmap of 0 B"), with or without growth.
foreach(_vgpu_i12_size 200TiB 18446744073709551615)
  add_test(NAME vgpu_info_i12_host_card_${_vgpu_i12_size}
    COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_HOST_DEVICES=1x${_vgpu_i12_size}
            VGPU_ALLOW_GROWTH=1 sh -c "$<TARGET_FILE:vgpu-info> --selftest 2>&1; echo \"exit=$?\"")
  set_tests_properties(vgpu_info_i12_host_card_${_vgpu_i12_size} PROPERTIES LABELS unit TIMEOUT 60
    PASS_REGULAR_EXPRESSION "VGPU_HOST_DEVICES=.*at most 64 TiB.*exit=2"
    FAIL_REGULAR_EXPRESSION "bad_alloc;mmap of 0 B")
endforeach()

# Decimal only; empty values are errors naming the variable (VGPU_VISIBLE_DEVICES aside).
add_test(NAME vgpu_info_i12_hex_percent
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_LOGICAL_DEVICES=0:0x10%
          sh -c "$<TARGET_FILE:vgpu-info> 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_info_i12_hex_percent PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "\"0x10%\" is not a percentage.*exit=2")
add_test(NAME vgpu_info_i12_hex_fraction
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_MEMORY_FRACTION=0x1p-1
          sh -c "$<TARGET_FILE:vgpu-info> 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_info_i12_hex_fraction PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "bad memory fraction \"0x1p-1\".*exit=2")
add_test(NAME vgpu_info_i12_empty_sm_partition
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_SM_PARTITION=
          sh -c "$<TARGET_FILE:vgpu-info> 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_info_i12_empty_sm_partition PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "VGPU_SM_PARTITION=\"\": empty value.*VGPU_SM_PARTITION=0:33,33.*exit=2"
  FAIL_REGULAR_EXPRESSION "GiB")

# A driver library that exists but is not a library: "cannot be loaded" with dlerror's text.
get_property(_vgpu_i12_cuda GLOBAL PROPERTY VGPU_CUDA_BACKEND_BUILT)
if(_vgpu_i12_cuda)
  add_test(NAME vgpu_info_i12_driver_library_not_elf
    COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=cuda VGPU_CUDA_DRIVER_LIBRARY=/dev/zero
            sh -c "$<TARGET_FILE:vgpu-info> 2>&1; echo \"exit=$?\"")
  set_tests_properties(vgpu_info_i12_driver_library_not_elf PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "/dev/zero exists but cannot be loaded: /dev/zero: "
    FAIL_REGULAR_EXPRESSION "not found")
endif()
# ---- end of issue 12 (configuration, platform and allocators) ---------------------------

# README.md's settings table is generated from devices/settings.h: it must be exactly what
# `vgpu-info --settings-table` prints (regenerate it with that command after adding a setting).
add_test(NAME readme_settings_table
  COMMAND sh -c "sed -n '/^<!-- BEGIN settings-table/,/^<!-- END settings-table/{/^<!--/d;p;}' \"$1\" > \"$2\" && $<TARGET_FILE:vgpu-info> --settings-table | diff -u \"$2\" -"
          sh ${PROJECT_SOURCE_DIR}/README.md ${CMAKE_CURRENT_BINARY_DIR}/readme_settings_table.md)
set_tests_properties(readme_settings_table PROPERTIES LABELS unit)
