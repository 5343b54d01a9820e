# The cuda backend's tests read its internal headers (which include cuda.h), so they get the
# toolkit's include directory and VGPU_HAVE_CUDA, matching the library. Nothing is linked.
get_property(_vgpu_cuda_built GLOBAL PROPERTY VGPU_CUDA_BACKEND_BUILT)
foreach(_vgpu_cuda_test cuda_platform_test cuda_platform_gpu_test cuda_fake_driver_test
                        cuda_async_pool_test)
  if(TARGET ${_vgpu_cuda_test})
    if(_vgpu_cuda_built)
      target_include_directories(${_vgpu_cuda_test} PRIVATE ${VGPU_CUDA_INCLUDE_DIR})
      target_compile_definitions(${_vgpu_cuda_test} PRIVATE VGPU_HAVE_CUDA=1)
    else()
      target_compile_definitions(${_vgpu_cuda_test} PRIVATE VGPU_HAVE_CUDA=0)
    endif()
  endif()
endforeach()

# cuda_fake_driver_test and cuda_async_pool_test run on the CUDA simulator: see tests/cudasim.cmake.

# ---- issue 13 (h3): the cuda platform's fixes on the CUDA simulator ---------------------------
# cuda_sim_platform_test loads the simulator from build/cudasim/lib (tests/cudasim.cmake);
# the h100 selftest runs vgpu-info through scripts/cudasim with no VGPU_* memory setting.
if(TARGET cuda_sim_platform_test)
  if(_vgpu_cuda_built)
    add_dependencies(cuda_sim_platform_test vgpu_cudasim)
    target_include_directories(cuda_sim_platform_test PRIVATE ${VGPU_CUDA_INCLUDE_DIR})
    target_compile_definitions(cuda_sim_platform_test PRIVATE VGPU_HAVE_CUDA=1
      VGPU_CUDASIM_LIB_DIR="${PROJECT_BINARY_DIR}/cudasim/lib")
    target_link_libraries(cuda_sim_platform_test PRIVATE ${CMAKE_DL_LIBS})
    set_property(TEST cuda_sim_platform_test APPEND PROPERTY LABELS cudasim)
  else()
    target_compile_definitions(cuda_sim_platform_test PRIVATE VGPU_HAVE_CUDA=0)
  endif()
endif()
if(_vgpu_cuda_built AND TARGET vgpu-info)
  # Bug 1: with no reserve the default limit leaves the context, module and libraries room.
  add_test(NAME cuda_sim_vgpu_info_selftest_h100_defaults
    COMMAND ${CMAKE_COMMAND} -E env VGPU_CUDASIM_PROFILE=h100
            VGPU_CUDASIM_LIB_DIR=${PROJECT_BINARY_DIR}/cudasim/lib
            ${PROJECT_SOURCE_DIR}/scripts/cudasim $<TARGET_FILE:vgpu-info> --selftest)
  set_tests_properties(cuda_sim_vgpu_info_selftest_h100_defaults PROPERTIES
    LABELS "unit;cudasim" TIMEOUT 300
    PASS_REGULAR_EXPRESSION "check\\(s\\), 0 failed: PASS"
    FAIL_REGULAR_EXPRESSION "FAIL  ")
endif()
