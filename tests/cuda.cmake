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

# A fake libcuda (host-memory Driver API with emulated kernels) so the platform's own code runs
# on GPU-less CI: cuda_fake_driver_test dlopens it through VGPU_CUDA_DRIVER_LIBRARY.
if(_vgpu_cuda_built AND TARGET cuda_fake_driver_test)
  add_library(vgpu_fake_libcuda SHARED ${PROJECT_SOURCE_DIR}/runtime/cuda/testing/fake_libcuda.cc)
  target_include_directories(vgpu_fake_libcuda PRIVATE ${VGPU_CUDA_INCLUDE_DIR})
  set_target_properties(vgpu_fake_libcuda PROPERTIES CXX_VISIBILITY_PRESET hidden)
  foreach(_vgpu_fake_test cuda_fake_driver_test cuda_async_pool_test)
    if(TARGET ${_vgpu_fake_test})
      add_dependencies(${_vgpu_fake_test} vgpu_fake_libcuda)
      target_compile_definitions(${_vgpu_fake_test}
        PRIVATE VGPU_FAKE_LIBCUDA="$<TARGET_FILE:vgpu_fake_libcuda>")
      target_link_libraries(${_vgpu_fake_test} PRIVATE ${CMAKE_DL_LIBS})
    endif()
  endforeach()
endif()

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
