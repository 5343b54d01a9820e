# vgpu-info's logical-device contracts on the host platform (issue 3's "Done when").
set(_vgpu_gpu_json "")
foreach(i 0 1 2 3)
  string(APPEND _vgpu_gpu_json
    ".*\"name\":\"/job:localhost/replica:0/task:0/device:GPU:${i}\",\"type\":\"GPU\",\"id\":${i},"
    "\"physical_ordinal\":0,\"memory_limit\":1073741824")
endforeach()
add_test(NAME vgpu_info_four_logical_devices
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_HOST_DEVICES=1x8GiB
          VGPU_LOGICAL_DEVICES=0:1GiB,1GiB,1GiB,1GiB
          $<TARGET_FILE:vgpu-info> --json)
set_tests_properties(vgpu_info_four_logical_devices PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "\"logical_devices\":\\[${_vgpu_gpu_json}.*device:CPU:0"
  FAIL_REGULAR_EXPRESSION "device:GPU:4")

# Over capacity: exit status 2 and a message naming the sum and the capacity.
add_test(NAME vgpu_info_logical_devices_over_capacity
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_HOST_DEVICES=1x8GiB
          VGPU_LOGICAL_DEVICES=0:5GiB,5GiB
          sh -c "$<TARGET_FILE:vgpu-info> --json 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_info_logical_devices_over_capacity PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "5 GiB \\+ 5 GiB = 10 GiB exceed its capacity of 8 GiB.*exit=2")
add_test(NAME vgpu_info_logical_devices_over_capacity_fails
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_HOST_DEVICES=1x8GiB
          VGPU_LOGICAL_DEVICES=0:5GiB,5GiB $<TARGET_FILE:vgpu-info>)
set_tests_properties(vgpu_info_logical_devices_over_capacity_fails PROPERTIES LABELS unit
  WILL_FAIL TRUE)

# Text output: priorities, growth and where each setting came from.
add_test(NAME vgpu_info_logical_devices_text
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_HOST_DEVICES=2x4GiB
          VGPU_LOGICAL_DEVICES=1:50%,25%@-1 VGPU_ALLOW_GROWTH=true
          $<TARGET_FILE:vgpu-info>)
set_tests_properties(vgpu_info_logical_devices_text PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "Logical devices: 3 GPU\\(s\\) \\+ CPU:0.*device:GPU:0  physical 0  limit 4 GiB \\(default\\).*device:GPU:2  physical 1  limit 1 GiB \\(environment\\)  priority -1 \\(environment\\).*growth on \\(environment\\).*device:CPU:0.*VGPU_ALLOW_GROWTH +true +\\(environment\\)")

# Bad configurations exit 2 with the message.
add_test(NAME vgpu_info_bad_logical_devices
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_LOGICAL_DEVICES=0:1GiB,lots
          sh -c "$<TARGET_FILE:vgpu-info> 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_info_bad_logical_devices PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "VGPU_LOGICAL_DEVICES=\"0:1GiB,lots\".*\"lots\".*exit=2")
add_test(NAME vgpu_info_sm_partition_on_host
  COMMAND ${CMAKE_COMMAND} -E env VGPU_PLATFORM=host VGPU_LOGICAL_DEVICES=0:1GiB,1GiB
          VGPU_SM_PARTITION=0:8,8 sh -c "$<TARGET_FILE:vgpu-info> 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_info_sm_partition_on_host PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "VGPU_SM_PARTITION.*host.*exit=2")
