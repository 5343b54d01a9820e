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
