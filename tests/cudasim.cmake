# --- h2: the simulator's cuBLAS and NCCL (temporary: h1's block above builds them once it
# exists; this one steps aside when the targets are already defined) ---
get_property(_vgpu_cudasim_cuda_built GLOBAL PROPERTY VGPU_CUDA_BACKEND_BUILT)
if(_vgpu_cudasim_cuda_built AND NOT TARGET vgpu_cudasim_cublas
   AND EXISTS ${CMAKE_CURRENT_LIST_DIR}/cudasim/cublas.cc)
  foreach(_vgpu_sim_lib cublas nccl)
    add_library(vgpu_cudasim_${_vgpu_sim_lib} SHARED
                ${CMAKE_CURRENT_LIST_DIR}/cudasim/${_vgpu_sim_lib}.cc)
    target_include_directories(vgpu_cudasim_${_vgpu_sim_lib}
      PRIVATE ${PROJECT_SOURCE_DIR} ${VGPU_CUDA_INCLUDE_DIR} ${OpenBLAS_INCLUDE_DIRS})
    set_target_properties(vgpu_cudasim_${_vgpu_sim_lib} PROPERTIES CXX_VISIBILITY_PRESET hidden)
    if(TARGET vgpu_cudasim_cuda)
      target_link_libraries(vgpu_cudasim_${_vgpu_sim_lib} PRIVATE vgpu_cudasim_cuda)
    endif()
  endforeach()
  target_link_libraries(vgpu_cudasim_cublas PRIVATE ${OpenBLAS_LIBRARIES})
endif()

# --- h2: call_log_test (the call log's formatting needs no CUDA; its driver part runs on the
# fake libcuda, its cuBLAS/NCCL part on the simulator when built) ---
if(TARGET call_log_test)
  if(_vgpu_cudasim_cuda_built)
    target_include_directories(call_log_test PRIVATE ${VGPU_CUDA_INCLUDE_DIR})
    target_compile_definitions(call_log_test PRIVATE VGPU_HAVE_CUDA=1)
    if(TARGET vgpu_fake_libcuda)
      add_dependencies(call_log_test vgpu_fake_libcuda)
      target_compile_definitions(call_log_test
        PRIVATE VGPU_FAKE_LIBCUDA="$<TARGET_FILE:vgpu_fake_libcuda>")
    endif()
  else()
    # The library has no runtime/cuda sources in this build: compile the log's own.
    target_sources(call_log_test PRIVATE ${PROJECT_SOURCE_DIR}/runtime/cuda/call_log.cc)
    target_compile_definitions(call_log_test PRIVATE VGPU_HAVE_CUDA=0)
  endif()
endif()
