// MirroredStrategy: data parallelism over N logical devices (TensorFlow's MirroredStrategy).
// Every replica holds the whole model; variables start equal (same seeded init) and stay
// bitwise equal because every replica applies the same optimizer update to the same all-reduced
// gradient. The global batch is split evenly, the first (rows % N) replicas taking one more
// example; each replica's loss gradient is scaled by 1/rows of the GLOBAL batch and the
// gradients are SUM-all-reduced, so N replicas compute exactly the single-device gradient of
// the global batch (up to float summation order). Replicas run concurrently, each on its own
// device stream; the all-reduce algorithm comes from collectives.h (topology, overridable).
// When every replica is on one physical device (the local algorithm) the all-reduce is fused
// with the optimizer: replica k sums shard k of all N gradients in one SumN pass (they share
// the card's memory), applies the optimizer to shard k of its parameters, and every replica
// then copies the other shards' parameters from their owners (reduce-scatter, update,
// all-gather). Each parameter is updated once, so the replicas stay bitwise equal, and the
// optimizer work is not repeated N times. Streams are ordered with events only.
// With one device it is the "single" strategy. CreateMultiWorker makes it one process of a
// multi-worker job (multi_worker_mirrored.h): gradients then go through the collectives layer
// across processes instead of the fused path.
//
// Thread safety: drive from one thread (see strategy.h).
#ifndef VGPU_STRATEGIES_MIRRORED_H_
#define VGPU_STRATEGIES_MIRRORED_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "vgpu/strategies/collectives.h"
#include "vgpu/strategies/collectives/communicator.h"
#include "vgpu/strategies/stage_chain.h"
#include "vgpu/strategies/step_accounting.h"
#include "vgpu/strategies/strategy.h"

namespace vgpu {
namespace strategies {

class MirroredStrategy : public Strategy {
 public:
  static absl::StatusOr<std::unique_ptr<MirroredStrategy>> Create(
      std::vector<LogicalDevice*> devices, const StrategyOptions& options,
      AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto);
  // One process of a multi-worker job (multi_worker_mirrored.h): these devices are replicas
  // first .. first + N - 1 of every process's replicas, and gradients are summed over all of
  // them by a communicator (collectives/communicator.h) of `communicator_kind` over `world`
  // (null: this process alone).
  static absl::StatusOr<std::unique_ptr<MirroredStrategy>> CreateMultiWorker(
      std::vector<LogicalDevice*> devices, const StrategyOptions& options, mpi::World* world,
      const std::string& communicator_kind = "auto");
  ~MirroredStrategy() override;

  StrategyKind kind() const override {
    if (comm_ != nullptr) return StrategyKind::kMultiWorkerMirrored;
    return replicas_.size() == 1 ? StrategyKind::kSingle : StrategyKind::kMirrored;
  }
  std::vector<LogicalDevice*> devices() const override { return devices_; }
  absl::Status Step(const float* x, const int32_t* y, int rows) override;
  absl::StatusOr<StepTotals> Flush() override;
  absl::StatusOr<StepTotals> Evaluate(const float* x, const int32_t* y, int n) override;
  absl::StatusOr<std::vector<float>> Params() override;
  std::string PlacementReport() const override;

  int num_replicas() const { return static_cast<int>(replicas_.size()); }
  // The single-process all-reduce (kViaHost for a multi-worker strategy, which uses
  // communicator() instead).
  AllReduceAlgorithm algorithm() const {
    return reducer_ ? reducer_->algorithm() : AllReduceAlgorithm::kViaHost;
  }
  // The multi-worker communicator; null for single-process mirrored.
  const collectives::Communicator* communicator() const { return comm_.get(); }
  // Every replica of every process, and the global index of this process's first.
  int total_replicas() const { return total_replicas_; }
  int first_replica() const { return first_replica_; }
  // Replica i's parameters (for the bitwise-equality checks).
  absl::StatusOr<std::vector<float>> ReplicaParams(int i);
  // Examples replica i gets from a global batch of `rows`.
  static int RowsForReplica(int rows, int replicas, int i);
  // Examples before replica i's in a global batch of `rows`.
  static int RowsBeforeReplica(int rows, int replicas, int i);

 private:
  MirroredStrategy() = default;
  static absl::StatusOr<std::unique_ptr<MirroredStrategy>> CreateReplicas(
      std::vector<LogicalDevice*> devices, const StrategyOptions& options);
  std::unique_ptr<collectives::Communicator> comm_;
  int first_replica_ = 0;
  int total_replicas_ = 0;
  std::vector<LogicalDevice*> devices_;
  StrategyOptions options_;
  std::vector<std::unique_ptr<StageChain>> replicas_;
  std::unique_ptr<AllReducer> reducer_;
  absl::Status ShardedUpdate();
  std::vector<float*> grad_buffers_;
  bool sharded_ = false;
  std::vector<uint64_t> shard_begin_;  // N+1 boundaries
  std::vector<std::unique_ptr<Event>> grads_ready_, shard_updated_;
  int64_t step_ = 0;
  StepAccounting accounting_;
};

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_MIRRORED_H_
