// MultiWorkerMirroredStrategy (TensorFlow's): mirrored training across processes. Each process
// (an MPI rank, runtime/mpi/world.h) runs MirroredStrategy over its own logical devices; the
// replicas of all processes are numbered process by process (rank 0's first), every replica
// takes its share of the same global batch (as mirrored.h splits it), and gradients are summed
// over every replica of every process by a communicator (collectives/communicator.h; "auto" is
// "hierarchical" with several devices per process: inside the process on the devices, across
// processes over MPI, then back; "mpi" with one). The cross-process sum is done in rank order
// on rank 0 and sent to everyone, so every replica of every process applies the same bytes and
// the parameters stay bitwise equal on every rank after every step.
//
// Thread safety: drive from one thread (see strategy.h); every process must call Step, Flush
// and Evaluate the same number of times (each Step is a collective).
#ifndef VGPU_STRATEGIES_MULTI_WORKER_MIRRORED_H_
#define VGPU_STRATEGIES_MULTI_WORKER_MIRRORED_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "vgpu/runtime/mpi/world.h"
#include "vgpu/strategies/mirrored.h"

namespace vgpu {
namespace strategies {

// `world` null: a job of this process alone (the same numbers as MirroredStrategy over
// `devices`). Every process must bring the same number of devices (InvalidArgument naming the
// ranks otherwise). `communicator`: "auto", "mpi", "hierarchical" (collectives/communicator.h).
inline absl::StatusOr<std::unique_ptr<MirroredStrategy>> CreateMultiWorkerMirrored(
    std::vector<LogicalDevice*> devices, const StrategyOptions& options, mpi::World* world,
    const std::string& communicator = "auto") {
  return MirroredStrategy::CreateMultiWorker(std::move(devices), options, world, communicator);
}

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_MULTI_WORKER_MIRRORED_H_
