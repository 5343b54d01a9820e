// The cuda side of runtime/nccl.h: libnccl.so.2 loaded with dlopen, ncclCommInitAll over the
// executors' devices, all-reduce in a ncclGroupStart/End; CudaPlatform::CreateCommunicator
// calls it. Thread safety: as runtime/nccl.h.
#ifndef VGPU_RUNTIME_CUDA_CUDA_NCCL_H_
#define VGPU_RUNTIME_CUDA_CUDA_NCCL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vgpu/runtime/nccl.h"

namespace vgpu::cuda {

// Environment variable naming the NCCL library (default "libnccl.so.2").
inline constexpr char kNcclLibraryEnv[] = "VGPU_NCCL_LIBRARY";

// `executors` are distinct devices of the cuda platform (checked by NcclCommunicator::Create).
absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicator(
    absl::Span<Executor* const> executors);

}  // namespace vgpu::cuda

#endif  // VGPU_RUNTIME_CUDA_CUDA_NCCL_H_
