# The CUDA simulator (tests/cudasim/): strict stand-ins for libcuda.so.1, libcublas.so and
# libnccl.so, built only with the cuda backend and never installed. `vgpu_cudasim` builds them
# and links them under ${PROJECT_BINARY_DIR}/cudasim/lib by the names the platform dlopens;
# scripts/cudasim runs any command against that directory. They take the preset's compiler
# flags, so the asan and tsan builds get sanitized simulators.
get_property(_vgpu_sim_cuda_built GLOBAL PROPERTY VGPU_CUDA_BACKEND_BUILT)
if(_vgpu_sim_cuda_built)
  set(_vgpu_sim_dir ${PROJECT_SOURCE_DIR}/tests/cudasim)
  add_library(vgpu_cudasim_cuda SHARED ${_vgpu_sim_dir}/driver.cc ${_vgpu_sim_dir}/kernels.cc)
  target_include_directories(vgpu_cudasim_cuda PUBLIC ${VGPU_CUDA_INCLUDE_DIR} ${VGPU_INCLUDE_ROOT})
  target_link_libraries(vgpu_cudasim_cuda PRIVATE Threads::Threads)
  set_target_properties(vgpu_cudasim_cuda PROPERTIES CXX_VISIBILITY_PRESET hidden
                                                     VISIBILITY_INLINES_HIDDEN ON)
  set(_vgpu_sim_targets vgpu_cudasim_cuda)
  set(_vgpu_sim_links
      COMMAND ${CMAKE_COMMAND} -E create_symlink $<TARGET_FILE:vgpu_cudasim_cuda>
              ${PROJECT_BINARY_DIR}/cudasim/lib/libcuda.so.1)
  if(EXISTS ${_vgpu_sim_dir}/cublas.cc)
    add_library(vgpu_cudasim_cublas SHARED ${_vgpu_sim_dir}/cublas.cc)
    target_include_directories(vgpu_cudasim_cublas PRIVATE ${OpenBLAS_INCLUDE_DIRS})
    target_link_libraries(vgpu_cudasim_cublas PRIVATE vgpu_cudasim_cuda ${OpenBLAS_LIBRARIES}
                                                      Threads::Threads)
    set_target_properties(vgpu_cudasim_cublas PROPERTIES CXX_VISIBILITY_PRESET hidden)
    list(APPEND _vgpu_sim_targets vgpu_cudasim_cublas)
    list(APPEND _vgpu_sim_links
         COMMAND ${CMAKE_COMMAND} -E create_symlink $<TARGET_FILE:vgpu_cudasim_cublas>
                 ${PROJECT_BINARY_DIR}/cudasim/lib/libcublas.so.13
         COMMAND ${CMAKE_COMMAND} -E create_symlink $<TARGET_FILE:vgpu_cudasim_cublas>
                 ${PROJECT_BINARY_DIR}/cudasim/lib/libcublas.so.12)
  endif()
  if(EXISTS ${_vgpu_sim_dir}/nccl.cc)
    add_library(vgpu_cudasim_nccl SHARED ${_vgpu_sim_dir}/nccl.cc)
    target_link_libraries(vgpu_cudasim_nccl PRIVATE vgpu_cudasim_cuda Threads::Threads)
    set_target_properties(vgpu_cudasim_nccl PROPERTIES CXX_VISIBILITY_PRESET hidden)
    list(APPEND _vgpu_sim_targets vgpu_cudasim_nccl)
    list(APPEND _vgpu_sim_links
         COMMAND ${CMAKE_COMMAND} -E create_symlink $<TARGET_FILE:vgpu_cudasim_nccl>
                 ${PROJECT_BINARY_DIR}/cudasim/lib/libnccl.so.2)
  endif()
  add_custom_target(vgpu_cudasim ALL
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/cudasim/lib
    ${_vgpu_sim_links}
    DEPENDS ${_vgpu_sim_targets}
    COMMENT "cudasim: linking the simulator under ${PROJECT_BINARY_DIR}/cudasim/lib")

  # The simulator's own test dlopens the driver library directly.
  if(TARGET cudasim_test)
    add_dependencies(cudasim_test vgpu_cudasim)
    target_include_directories(cudasim_test PRIVATE ${VGPU_CUDA_INCLUDE_DIR})
    target_compile_definitions(cudasim_test PRIVATE VGPU_HAVE_CUDA=1
      VGPU_CUDASIM_LIBCUDA="$<TARGET_FILE:vgpu_cudasim_cuda>")
    target_link_libraries(cudasim_test PRIVATE ${CMAKE_DL_LIBS})
    set_property(TEST cudasim_test APPEND PROPERTY LABELS cudasim)
  endif()
  # The platform's tests over the simulator: they point VGPU_CUDA_DRIVER_LIBRARY at it.
  foreach(_vgpu_sim_test cuda_fake_driver_test cuda_async_pool_test)
    if(TARGET ${_vgpu_sim_test})
      add_dependencies(${_vgpu_sim_test} vgpu_cudasim)
      target_compile_definitions(${_vgpu_sim_test}
        PRIVATE VGPU_CUDASIM_LIBCUDA="$<TARGET_FILE:vgpu_cudasim_cuda>")
      target_link_libraries(${_vgpu_sim_test} PRIVATE ${CMAKE_DL_LIBS})
      set_property(TEST ${_vgpu_sim_test} APPEND PROPERTY LABELS cudasim)
    endif()
  endforeach()
elseif(TARGET cudasim_test)
  target_compile_definitions(cudasim_test PRIVATE VGPU_HAVE_CUDA=0)
endif()

# --- h2: call_log_test and cudasim_libs_test ---
# call_log_test: the call log's formatting needs no CUDA; its driver, cuBLAS and NCCL parts
# run on the simulator. cudasim_libs_test drives the simulator's
# cuBLAS and NCCL libraries directly through dlopen.
get_property(_vgpu_h2_cuda_built GLOBAL PROPERTY VGPU_CUDA_BACKEND_BUILT)
if(TARGET call_log_test)
  if(_vgpu_h2_cuda_built)
    target_include_directories(call_log_test PRIVATE ${VGPU_CUDA_INCLUDE_DIR})
    target_compile_definitions(call_log_test PRIVATE VGPU_HAVE_CUDA=1)
    if(TARGET vgpu_cudasim)
      add_dependencies(call_log_test vgpu_cudasim)
      target_compile_definitions(call_log_test
        PRIVATE VGPU_CUDASIM_LIBDIR="${PROJECT_BINARY_DIR}/cudasim/lib")
    endif()
  else()
    # The library has no runtime/cuda sources in this build: compile the log's own.
    target_sources(call_log_test PRIVATE ${PROJECT_SOURCE_DIR}/runtime/cuda/call_log.cc)
    target_compile_definitions(call_log_test PRIVATE VGPU_HAVE_CUDA=0)
  endif()
  set_property(TEST call_log_test APPEND PROPERTY LABELS cudasim)
endif()
if(TARGET cudasim_libs_test)
  if(_vgpu_h2_cuda_built AND TARGET vgpu_cudasim)
    add_dependencies(cudasim_libs_test vgpu_cudasim)
    target_include_directories(cudasim_libs_test PRIVATE ${VGPU_CUDA_INCLUDE_DIR}
                                                         ${OpenBLAS_INCLUDE_DIRS})
    target_compile_definitions(cudasim_libs_test PRIVATE VGPU_HAVE_CUDA=1
      VGPU_CUDASIM_LIBDIR="${PROJECT_BINARY_DIR}/cudasim/lib")
    target_link_libraries(cudasim_libs_test PRIVATE ${CMAKE_DL_LIBS} ${OpenBLAS_LIBRARIES})
  else()
    target_compile_definitions(cudasim_libs_test PRIVATE VGPU_HAVE_CUDA=0)
  endif()
  set_property(TEST cudasim_libs_test APPEND PROPERTY LABELS cudasim)
endif()
