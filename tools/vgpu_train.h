// vgpu-train's parts that the cluster strategies add (tools/vgpu_train_cluster.cc): who this
// process is in the job (launcher, MPI world, cluster spec) and the parameter-server roles.
//
// Thread safety: called from vgpu-train's main thread only.
#ifndef VGPU_TOOLS_VGPU_TRAIN_H_
#define VGPU_TOOLS_VGPU_TRAIN_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "vgpu/devices/cluster.h"
#include "vgpu/runtime/mpi/world.h"
#include "vgpu/strategies/parameter_server.h"
#include "vgpu/strategies/strategy.h"
#include "vgpu/tools/train_flags.h"

namespace vgpu {

struct TrainCluster {
  mpi::LaunchInfo launch;
  // Null for a single-process strategy (and for a cluster strategy run as one plain process).
  mpi::World* world = nullptr;
  std::shared_ptr<const ClusterSpec> spec;  // null for a single-process strategy
  bool is_ps = false;                       // this rank is a ps task
  strategies::ParameterServerOptions ps;    // parameter-server: ranks, sharding, mode
  int processes() const { return spec ? spec->size() : 1; }
  int rank() const { return spec ? spec->rank() : 0; }
  std::string job() const { return spec ? spec->self().job : "localhost"; }
};

// Reads the launcher's environment and TF_CONFIG and checks them against the strategy, before
// any device or data is touched. InvalidArgument for a bad cluster (a single-process strategy
// under mpirun -np > 1, a parameter server without ps tasks or workers, a TF_CONFIG that does
// not fit); the world's own errors otherwise.
absl::StatusOr<TrainCluster> SetUpCluster(const TrainFlags& f, strategies::StrategyKind kind);

// Every rank must run the same job: `values` (name, value) are gathered over the world and
// compared with rank 0's. InvalidArgument naming the first that differs and both ranks' values.
// A collective; a no-op without a world.
absl::Status CheckRanksAgree(const TrainCluster& c,
                             const std::vector<std::pair<std::string, int64_t>>& values);

// Compares the parameters of every replica of every process (hashes, gathered over the world):
// InternalError naming the step, the replica and the ranks that differ.
absl::Status CheckReplicasEqual(const TrainCluster& c, const std::vector<std::string>& checksums,
                                int64_t step);

}  // namespace vgpu

#endif  // VGPU_TOOLS_VGPU_TRAIN_H_
