// The `cuda` platform: NVIDIA GPUs through the CUDA Driver API, loaded at run time with
// dlopen("libcuda.so.1") + cuGetProcAddress (libcuda is never linked), so one binary starts
// on machines with and without a GPU. cuBLAS and NCCL are loaded the same way when first
// needed. Kernels are CUDA C++ compiled by nvcc into an embedded fatbin (sm_90 SASS +
// compute_80 PTX) loaded with cuModuleLoadData.
//
// Thread safety: as in runtime/platform.h; every class here is safe from any thread.
#ifndef VGPU_RUNTIME_CUDA_CUDA_PLATFORM_H_
#define VGPU_RUNTIME_CUDA_CUDA_PLATFORM_H_

#include <memory>

#include "vgpu/runtime/platform.h"

namespace vgpu {

// Never fails: without a driver or a GPU the platform has 0 devices and Summary() says why
// ("0 CUDA devices: libcuda.so.1 not found: ...").
std::unique_ptr<Platform> CreateCudaPlatform();

}  // namespace vgpu

#endif  // VGPU_RUNTIME_CUDA_CUDA_PLATFORM_H_
