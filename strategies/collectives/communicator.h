// Collectives as one layer: NCCL's primitives (AllReduce, ReduceScatter, AllGather, Broadcast,
// Reduce; sum and average) over float buffers of logical devices, stream-ordered, behind one
// interface that strategies compose (the cluster strategies do; single-process mirrored keeps
// its fused all-reduce, collectives.h). Implementations (communicator.cc chooses by the
// topology table of docs/cluster.md):
//   "local"         every rank is a logical device of ONE physical card (one process): the
//                   card's memory is shared, so SumN passes and device-to-device copies.
//   "nccl"          one process, one rank per physical GPU: AllReduce by NcclCommunicator
//                   (runtime/nccl.h; on the host platform the host communicator with NCCL's
//                   contract), the other primitives through the host.
//   "nccl-mpi"      one rank per process across processes: ncclCommInitRank bootstrapped by
//                   an MPI broadcast of rank 0's unique id (cuda only; FailedPrecondition on a
//                   platform without NCCL across processes). AllReduce by NCCL on the rank's
//                   stream, the other primitives staged as "mpi". "auto" picks it for one GPU
//                   per process on such a platform and falls back to "mpi" when NCCL refuses
//                   (two ranks on one GPU: "Duplicate GPU detected"), keeping the reason in
//                   fallback_reason(). Creation is collective: every rank gets the same error.
//   "mpi"           across processes over MPI (runtime/mpi/world.h): host memory directly,
//                   device memory staged through the host.
//   "via-host"      anything else in one process (several cards with several ranks each,
//                   CPU:0, mixed platforms): copy to host, sum in float64, copy back.
//   "hierarchical"  several ranks per process and several processes (or several cards each
//                   with several logical devices): inside the group, then across groups, then
//                   back inside.
// Every rank of every process gets bitwise-equal results from AllReduce/AllGather/Broadcast.
//
// Thread safety: a Communicator is used from one thread at a time (its events and staging are
// reused); in a job of several processes every process calls the same collectives in the same
// order. Different Communicators are independent.
#ifndef VGPU_STRATEGIES_COLLECTIVES_COMMUNICATOR_H_
#define VGPU_STRATEGIES_COLLECTIVES_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "vgpu/devices/logical_device.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {
namespace mpi {
class World;
}  // namespace mpi

namespace collectives {

enum class ReduceOp { kSum, kMean };

// One local rank's buffers for one call: device memory of the rank's device, used on `stream`
// (the device's stream). `send` may equal `recv` (in place) for AllReduce and Broadcast.
struct RankBuffer {
  Stream* stream = nullptr;
  const float* send = nullptr;
  float* recv = nullptr;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  // "local", "nccl", "nccl-mpi", "mpi", "via-host", "hierarchical".
  virtual absl::string_view kind() const = 0;
  // Ranks of the whole job, and those of this process (one RankBuffer each per call, in the
  // order the communicator was created with), whose global ranks are
  // first_rank() .. first_rank() + local_size() - 1.
  virtual int size() const = 0;
  virtual int local_size() const = 0;
  virtual int first_rank() const = 0;
  // Why "auto" did not build the kind the topology table chose (e.g. "nccl-mpi" refused by
  // NCCL: two ranks on one GPU); empty when it did, or when the kind was explicit.
  virtual const std::string& fallback_reason() const = 0;

  // Each is enqueued after the work already on every buffer's stream; work enqueued later on
  // those streams sees the result. Implementations that cannot be asynchronous (MPI) wait for
  // the streams and return when done. `count` is in floats.
  //   AllReduce:     recv = op over every rank's send (count each).
  //   ReduceScatter: send holds size() * count; rank r's recv gets block r of the reduction.
  //   AllGather:     send holds count; recv holds size() * count, block r from rank r.
  //   Broadcast:     every recv gets root's send (count); root is a global rank.
  //   Reduce:        root's recv gets op over every send; other ranks' recv may be null.
  virtual absl::Status AllReduce(absl::Span<const RankBuffer> buffers, uint64_t count,
                                 ReduceOp op) = 0;
  virtual absl::Status ReduceScatter(absl::Span<const RankBuffer> buffers, uint64_t count,
                                     ReduceOp op) = 0;
  virtual absl::Status AllGather(absl::Span<const RankBuffer> buffers, uint64_t count) = 0;
  virtual absl::Status Broadcast(absl::Span<const RankBuffer> buffers, uint64_t count,
                                 int root) = 0;
  virtual absl::Status Reduce(absl::Span<const RankBuffer> buffers, uint64_t count, ReduceOp op,
                              int root) = 0;
};

// What to build. kAuto picks by the topology table; an explicit kind that cannot be built
// returns its error (InvalidArgument naming the devices, FailedPrecondition when NCCL or MPI
// is missing). `world` null: this process only.
struct CommunicatorOptions {
  std::string kind = "auto";
  mpi::World* world = nullptr;
};
// `devices`: this process's ranks, in order. InvalidArgument for none or a device twice.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    std::vector<LogicalDevice*> devices, const CommunicatorOptions& options = {});

}  // namespace collectives
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_COLLECTIVES_COMMUNICATOR_H_
