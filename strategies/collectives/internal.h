// The communicator implementations behind communicator.h's CreateCommunicator, and what they
// share: argument checks written once, events that order the ranks' streams, and host staging.
// Private to strategies/collectives/.
//
// Thread safety: as communicator.h: one thread at a time per communicator.
#ifndef VGPU_STRATEGIES_COLLECTIVES_INTERNAL_H_
#define VGPU_STRATEGIES_COLLECTIVES_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vgpu/devices/logical_device.h"
#include "vgpu/runtime/mpi/world.h"
#include "vgpu/runtime/nccl.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/strategies/collectives/communicator.h"

namespace vgpu {
namespace collectives {
namespace internal {

// The primitives, for the argument checks and messages.
enum class Op { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce };

// Ranks, argument checks and the public entry points: each checks its arguments once, returns
// at once for count 0, then calls the implementation's Do* (RMM's habit).
class CommunicatorBase : public Communicator {
 public:
  CommunicatorBase(std::vector<LogicalDevice*> devices, mpi::World* world,
                   int local_size_everywhere);

  int size() const override { return size_; }
  int local_size() const override { return static_cast<int>(devices_.size()); }
  int first_rank() const override { return first_rank_; }
  const std::string& fallback_reason() const override { return fallback_reason_; }
  void set_fallback_reason(std::string reason) { fallback_reason_ = std::move(reason); }

  absl::Status AllReduce(absl::Span<const RankBuffer> buffers, uint64_t count, ReduceOp op) final;
  absl::Status ReduceScatter(absl::Span<const RankBuffer> buffers, uint64_t count,
                             ReduceOp op) final;
  absl::Status AllGather(absl::Span<const RankBuffer> buffers, uint64_t count) final;
  absl::Status Broadcast(absl::Span<const RankBuffer> buffers, uint64_t count, int root) final;
  absl::Status Reduce(absl::Span<const RankBuffer> buffers, uint64_t count, ReduceOp op,
                      int root) final;

 protected:
  virtual absl::Status DoAllReduce(absl::Span<const RankBuffer> b, uint64_t count, ReduceOp op) = 0;
  virtual absl::Status DoReduceScatter(absl::Span<const RankBuffer> b, uint64_t count,
                                       ReduceOp op) = 0;
  virtual absl::Status DoAllGather(absl::Span<const RankBuffer> b, uint64_t count) = 0;
  virtual absl::Status DoBroadcast(absl::Span<const RankBuffer> b, uint64_t count, int root) = 0;
  virtual absl::Status DoReduce(absl::Span<const RankBuffer> b, uint64_t count, ReduceOp op,
                                int root) = 0;

  // The local index of global rank `rank`, or -1 when another process holds it.
  int LocalIndex(int rank) const {
    return rank >= first_rank_ && rank < first_rank_ + local_size() ? rank - first_rank_ : -1;
  }
  float Scale(ReduceOp op) const { return op == ReduceOp::kMean ? 1.0f / size_ : 1.0f; }

  std::vector<LogicalDevice*> devices_;
  mpi::World* world_ = nullptr;  // null: this process is the whole communicator
  int size_ = 0;
  int first_rank_ = 0;
  std::string fallback_reason_;

 private:
  absl::Status Check(Op op, absl::Span<const RankBuffer> b, int root) const;
};

// Every rank's stream records an event, then waits for every other rank's: work enqueued
// after Fence on any stream runs after the work enqueued before it on all of them.
class StreamFence {
 public:
  static absl::StatusOr<StreamFence> Create(const std::vector<LogicalDevice*>& devices);
  absl::Status Apply(absl::Span<const RankBuffer> buffers);

 private:
  std::vector<std::unique_ptr<Event>> events_;
};

// out = scale * sum(inputs) on `stream`, any number of inputs (Kernels::SumN takes a bounded
// number; the partial sum is folded back in).
absl::Status SumInto(LogicalDevice* device, Stream* stream, std::vector<const float*> inputs,
                     float* out, uint64_t count, float scale);

// Host staging: `buffers[i]`'s `count` floats at `offset` to `host` (all streams drained
// before return), and back (drained before return, so `host` may be reused).
absl::Status Download(absl::Span<const RankBuffer> buffers, bool from_send, uint64_t offset,
                      uint64_t count, std::vector<std::vector<float>>& host);
absl::Status UploadAll(absl::Span<const RankBuffer> buffers, const float* host, uint64_t count);

// A communicator whose AllReduce is `nccl`'s (every local rank's buffer in one call) and whose
// other primitives are `staged`'s: "nccl" (one process, world null) and "nccl-mpi" (one rank
// per process of `world`).
std::unique_ptr<Communicator> MakeNcclBacked(std::vector<LogicalDevice*> devices, mpi::World* world,
                                             std::string kind,
                                             std::unique_ptr<NcclCommunicator> nccl,
                                             std::unique_ptr<Communicator> staged);

// Creation of each kind (CreateCommunicator validates the devices and picks the kind).
absl::StatusOr<std::unique_ptr<Communicator>> CreateLocal(std::vector<LogicalDevice*> devices);
absl::StatusOr<std::unique_ptr<Communicator>> CreateNccl(std::vector<LogicalDevice*> devices);
// "nccl-mpi" (nccl_mpi.cc): one device per process, `world` non-null. Collective over the
// world: every rank returns the same error when any rank cannot join.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclMpi(std::vector<LogicalDevice*> devices,
                                                            mpi::World* world);
// "via-host" (world null or of size 1), "mpi" (one device per process), "hierarchical"
// (several per process: `inner` reduces inside the process first).
absl::StatusOr<std::unique_ptr<Communicator>> CreateStaged(std::vector<LogicalDevice*> devices,
                                                           mpi::World* world, std::string kind,
                                                           std::unique_ptr<Communicator> inner);

}  // namespace internal
}  // namespace collectives
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_COLLECTIVES_INTERNAL_H_
