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
