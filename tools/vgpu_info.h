// vgpu-info's parts (internal to the tool): the self-test and the timeline renderer.
// Thread safety: each function runs on the calling thread only.
#ifndef VGPU_TOOLS_VGPU_INFO_H_
#define VGPU_TOOLS_VGPU_INFO_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "vgpu/devices/cluster.h"
#include "vgpu/devices/runtime.h"
#include "vgpu/runtime/mpi/world.h"

namespace vgpu_info {

// Runs every check on `runtime`'s logical GPUs, one line each on stdout; returns the number of
// failed checks. `history_path`, when not empty, receives the allocators' memory history
// (allocator/memory_history.h's JSON plus a "limits" object: allocator name -> bytes).
int RunSelftest(vgpu::Runtime& runtime, const std::string& history_path);

// `vgpu-info timeline HISTORY.json --svg OUT.svg [--limit BYTES]`; argv[0] is "timeline".
// Returns the exit status (0, 1 for unreadable input, 2 for bad flags).
int TimelineMain(int argc, char** argv);

// Under mpirun (more than one process): the cluster this rank is a task of (TF_CONFIG when
// set, else every rank a worker) and the MPI world; a plain run has neither.
struct InfoCluster {
  std::shared_ptr<const vgpu::ClusterSpec> spec;
  vgpu::mpi::World* world = nullptr;
};
absl::StatusOr<InfoCluster> SetUpInfoCluster();

// Prints `report` (this process's text, or its JSON object): alone as it is; under mpirun rank
// 0 gathers every rank's report and prints one for the whole cluster (the tasks, then each
// rank's report; with --json one object {"cluster": ..., "ranks": [...]}) and the other ranks
// print nothing. Returns the exit status.
int PrintReport(const std::string& report, bool json, const InfoCluster& cluster);

}  // namespace vgpu_info

#endif  // VGPU_TOOLS_VGPU_INFO_H_
