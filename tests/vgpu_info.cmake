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
