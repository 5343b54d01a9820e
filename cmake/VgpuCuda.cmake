# Finds what the cuda platform needs at BUILD time: the toolkit headers (cuda.h, cublas_api.h,
# nccl.h) and nvcc for the kernel fatbin. Nothing is linked: libcuda, libcublas and libnccl
# are dlopen'ed at run time, so binaries start on machines without a GPU or driver.
set(VGPU_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit root")
set(VGPU_HAVE_CUDA OFF)
if(NOT VGPU_WITH_CUDA STREQUAL "OFF")
  find_path(VGPU_CUDA_INCLUDE_DIR cuda.h HINTS ${VGPU_CUDA_ROOT}/include)
  find_program(VGPU_NVCC nvcc HINTS ${VGPU_CUDA_ROOT}/bin)
  if(VGPU_CUDA_INCLUDE_DIR AND VGPU_NVCC)
    set(VGPU_HAVE_CUDA ON)
    message(STATUS "vgpu: cuda platform ON (headers ${VGPU_CUDA_INCLUDE_DIR}, nvcc ${VGPU_NVCC})")
  elseif(VGPU_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "vgpu: VGPU_WITH_CUDA=ON but cuda.h or nvcc not found under ${VGPU_CUDA_ROOT}")
  else()
    message(STATUS "vgpu: cuda platform OFF (cuda.h or nvcc not found under ${VGPU_CUDA_ROOT}; "
                   "set VGPU_CUDA_ROOT or VGPU_WITH_CUDA=ON)")
  endif()
else()
  message(STATUS "vgpu: cuda platform OFF (VGPU_WITH_CUDA=OFF)")
endif()
