# The cuda backend's part of vgpu_runtime, included by runtime/CMakeLists.txt for "cuda" in
# VGPU_PLATFORMS before the library target exists. Without the toolkit (VGPU_HAVE_CUDA off) it
# builds only cuda_unavailable.cc, a "cuda" platform with 0 devices that says why. Otherwise
# it appends the backend's sources and generates the kernels' fatbin header. Nothing here
# links libcuda or libcudart: they are dlopen'ed.
if(NOT VGPU_HAVE_CUDA)
  list(APPEND VGPU_RUNTIME_SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_unavailable.cc)
  return()
endif()
file(GLOB VGPU_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cc)
list(REMOVE_ITEM VGPU_CUDA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_unavailable.cc)

# nvcc builds kernels.cu into ONE fatbin: sm_90 SASS for Hopper plus compute_80 PTX that the
# driver JIT-compiles for any other GPU >= sm_80. This is a custom command, not a CUDA
# language target, so CMAKE_CXX_FLAGS (sanitizers!) never reach nvcc, and CMake needs no
# CUDA language support.
set(VGPU_CUDA_FATBIN ${PROJECT_BINARY_DIR}/generated/vgpu_kernels.fatbin)
set(VGPU_CUDA_FATBIN_HEADER ${PROJECT_BINARY_DIR}/generated/vgpu/runtime/cuda/kernels_fatbin.h)
set(VGPU_NVCC_FLAGS --fatbin -O3 -std=c++17
    -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=compute_80)
add_custom_command(
  OUTPUT ${VGPU_CUDA_FATBIN}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/generated
  COMMAND ${VGPU_NVCC} ${VGPU_NVCC_FLAGS} -o ${VGPU_CUDA_FATBIN}
          ${CMAKE_CURRENT_LIST_DIR}/kernels.cu
  DEPENDS ${CMAKE_CURRENT_LIST_DIR}/kernels.cu
  COMMENT "nvcc: runtime/cuda/kernels.cu -> fatbin (sm_90 SASS + compute_80 PTX)"
  VERBATIM)
add_custom_command(
  OUTPUT ${VGPU_CUDA_FATBIN_HEADER}
  COMMAND ${CMAKE_COMMAND} -DINPUT=${VGPU_CUDA_FATBIN} -DOUTPUT=${VGPU_CUDA_FATBIN_HEADER}
          -DNAME=kVgpuCudaKernelsFatbin -P ${CMAKE_CURRENT_LIST_DIR}/embed_fatbin.cmake
  DEPENDS ${VGPU_CUDA_FATBIN} ${CMAKE_CURRENT_LIST_DIR}/embed_fatbin.cmake
  COMMENT "Embedding the kernels' fatbin"
  VERBATIM)
list(APPEND VGPU_RUNTIME_SOURCES ${VGPU_CUDA_SOURCES} ${VGPU_CUDA_FATBIN_HEADER})
list(APPEND VGPU_RUNTIME_PRIVATE_INCLUDES ${VGPU_CUDA_INCLUDE_DIR})
list(APPEND VGPU_RUNTIME_PRIVATE_DEPS ${CMAKE_DL_LIBS})
# Lets tests/cuda.cmake know the backend is really in the library.
set_property(GLOBAL PROPERTY VGPU_CUDA_BACKEND_BUILT ON)
