// NCCL collectives over executors of one platform, behind a backend-neutral front: one rank per
// executor, all-reduce of float buffers, stream-ordered. On cuda it is NCCL itself
// (ncclCommInitAll, group calls), loaded with dlopen("libnccl.so.2") on first use
// (VGPU_NCCL_LIBRARY overrides the name), never linked; in a build without CUDA, or when libnccl
// cannot be loaded, Create returns an error with the reason, so callers fall back to another
// algorithm. On the host platform it is runtime/host/host_collectives.h, a communicator with
// NCCL's contract over the simulated GPUs, so code that uses NCCL is tested without a GPU.
//
// NCCL 2.28 refuses two ranks on one GPU; Create rejects that with InvalidArgument naming the
// duplicated device instead of calling NCCL (use the local all-reduce, Kernels::SumN).
//
// Across processes (one rank per process, cuda only): rank 0 calls UniqueId, the caller sends
// the bytes to every rank (mpi::World::Broadcast), and every rank calls CreateRank with them
// (ncclCommInitRank on its executor's device, in the device's context; it blocks until every
// rank has joined). Two ranks on one GPU in different processes are refused by NCCL at init:
// FailedPrecondition with NCCL's "Duplicate GPU detected : rank X and rank Y ..." text.
//
// Thread safety: Create, UniqueId and CreateRank are safe from any thread. A communicator's
// AllReduce calls are serialized internally (NCCL's rule for one communicator). Destroy a
// communicator only after the streams it enqueued on have drained (its events are referenced by
// queued work).
#ifndef VGPU_RUNTIME_NCCL_H_
#define VGPU_RUNTIME_NCCL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {

enum class AllReduceOp { kSum, kMean };

// One rank's buffer: reduced in place on `stream` (which must belong to the rank's executor).
struct AllReduceBuffer {
  Stream* stream = nullptr;
  float* data = nullptr;
};

class NcclCommunicator {
 public:
  virtual ~NcclCommunicator() = default;

  // One rank per executor, in order. InvalidArgument for an empty list, a null executor,
  // executors of different platforms or the same device twice; then the platform's
  // Platform::CreateCommunicator: Unimplemented on a platform without collectives;
  // FailedPrecondition on cuda when libnccl cannot be loaded.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      absl::Span<Executor* const> executors);

  // A fresh unique id of `platform` (Platform::NcclUniqueId; Unimplemented off cuda).
  static absl::StatusOr<std::vector<uint8_t>> UniqueId(Platform* platform);
  // Rank `rank` of `nranks` (one per process) of the communicator `id` names, on `executor`'s
  // device. InvalidArgument for a null executor, a rank outside 0..nranks-1 or an empty id;
  // then Platform::CreateRankCommunicator. Its size() is nranks and its AllReduce takes one
  // buffer, this rank's.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateRank(Executor* executor, int rank,
                                                                      int nranks,
                                                                      absl::Span<const uint8_t> id);

  virtual int size() const = 0;
  // buffers[i] is local rank i's (every rank for Create, this process's one for CreateRank);
  // `count` floats each. Enqueued on the streams; returns once queued.
  virtual absl::Status AllReduce(absl::Span<const AllReduceBuffer> buffers, uint64_t count,
                                 AllReduceOp op) = 0;
};

}  // namespace vgpu

#endif  // VGPU_RUNTIME_NCCL_H_
