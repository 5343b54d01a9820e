# Command-line robustness: every tool under hostile inputs, under a timeout; fails
# on a signal exit, abort, sanitizer report, hang or unbounded error message.
if(TARGET vgpu-info AND TARGET vgpu-bench AND TARGET vgpu-train)
  add_test(NAME cli_robustness
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/robustness_test.sh $<TARGET_FILE:vgpu-info>
            $<TARGET_FILE:vgpu-bench> $<TARGET_FILE:vgpu-train>
            ${PROJECT_SOURCE_DIR}/tools/traces/mlp_mirrored.trace)
  set_tests_properties(cli_robustness PROPERTIES LABELS unit TIMEOUT 900
    PASS_REGULAR_EXPRESSION "[0-9]+ passed, 0 failed")
  if(VGPU_SANITIZER)
    # A case that trains (vgpu-train with no real argument) takes 15 s alone under TSan and
    # passed 60 s when the two cores were shared with other sanitized tests.
    set_tests_properties(cli_robustness PROPERTIES ENVIRONMENT VGPU_ROBUSTNESS_TIMEOUT=240)
  endif()
endif()
