// The kernels of runtime/cuda/kernels.cu as the fatbin nvcc built at compile time (sm_90 SASS
// + compute_80 PTX), embedded in the library. Loaded per executor with cuModuleLoadData.
//
// Needs no CUDA header, so tests can inspect the image on machines without a GPU.
// Thread safety: immutable data.
#ifndef VGPU_RUNTIME_CUDA_CUDA_FATBIN_H_
#define VGPU_RUNTIME_CUDA_CUDA_FATBIN_H_

#include <cstdint>

#include "absl/types/span.h"

namespace vgpu::cuda {

// The fatbin's first four bytes, little-endian 0xBA55ED50 (the fatbin wrapper magic).
inline constexpr uint32_t kFatbinMagic = 0xBA55ED50u;

absl::Span<const uint8_t> KernelsFatbin();

}  // namespace vgpu::cuda

#endif  // VGPU_RUNTIME_CUDA_CUDA_FATBIN_H_
