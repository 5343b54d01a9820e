// The host platform's stand-in for NCCL: an all-reduce communicator over simulated GPUs (one
// rank per host executor) with NCCL's contract, so the NCCL and hierarchical all-reduce paths
// of the strategies run, and are tested, without a GPU.
//
// Like NCCL it is stream-ordered: AllReduce only enqueues. Each rank's stream runs, after its
// earlier work: wait for every rank's input; reduce its own slice of the buffer (the sum over
// ranks 0..N-1 in rank order, in float as NCCL does) in place; wait for every rank's slice;
// gather the other slices; wait until every rank has gathered (so no later work on one stream
// overwrites a slice another rank still reads). Every slice is summed once, so all ranks hold
// the same bits. The steps are joined by events, which complete even on a failed stream, so a
// rank whose stream has a sticky error never hangs the others (its error stays on its stream).
//
// Thread safety: Create is safe from any thread; one communicator's AllReduce calls are
// serialized internally (NCCL's rule for one communicator).
#ifndef VGPU_RUNTIME_HOST_HOST_COLLECTIVES_H_
#define VGPU_RUNTIME_HOST_HOST_COLLECTIVES_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vgpu/runtime/nccl.h"
#include "vgpu/runtime/platform.h"

namespace vgpu::host {

// One rank per executor, in order; the executors must be distinct host-platform executors
// (NcclCommunicator::Create checks that before calling this).
absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateHostCommunicator(
    absl::Span<Executor* const> executors);

}  // namespace vgpu::host

#endif  // VGPU_RUNTIME_HOST_HOST_COLLECTIVES_H_
