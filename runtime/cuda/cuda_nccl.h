// The cuda side of runtime/nccl.h: libnccl.so.2 loaded with dlopen, ncclCommInitAll over the
// executors' devices (or ncclCommInitRank for one rank of a communicator across processes),
// all-reduce in a ncclGroupStart/End; CudaPlatform::CreateCommunicator and
// CreateRankCommunicator call it. Thread safety: as runtime/nccl.h.
#ifndef VGPU_RUNTIME_CUDA_CUDA_NCCL_H_
#define VGPU_RUNTIME_CUDA_CUDA_NCCL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vgpu/runtime/nccl.h"

namespace vgpu::cuda {

// Environment variable naming the NCCL library (default "libnccl.so.2").
inline constexpr char kNcclLibraryEnv[] = "VGPU_NCCL_LIBRARY";

// `executors` are distinct devices of the cuda platform (checked by NcclCommunicator::Create).
absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicator(
    absl::Span<Executor* const> executors);

// ncclGetUniqueId's NCCL_UNIQUE_ID_BYTES bytes.
absl::StatusOr<std::vector<uint8_t>> NcclUniqueId();
// ncclCommInitRank(nranks, id, rank) on `executor`'s device, inside its context. `id` must be
// NcclUniqueId's bytes (InvalidArgument otherwise). Two ranks on one GPU: FailedPrecondition
// with NCCL's "Duplicate GPU detected" text, which names the ranks.
absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclRankCommunicator(
    Executor* executor, int rank, int nranks, absl::Span<const uint8_t> id);

}  // namespace vgpu::cuda

#endif  // VGPU_RUNTIME_CUDA_CUDA_NCCL_H_
