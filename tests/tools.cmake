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
