// Evaluation shared by the replicated strategies (mirrored, central storage): examples go
// round the replicas in chunks of a replica's batch, so every replica evaluates concurrently
// on its own stream; totals are summed over all of them.
//
// Thread safety: call from the thread that drives the strategy (like its other methods).
#ifndef VGPU_STRATEGIES_REPLICA_EVAL_H_
#define VGPU_STRATEGIES_REPLICA_EVAL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "vgpu/strategies/stage_chain.h"
#include "vgpu/strategies/step_accounting.h"
#include "vgpu/strategies/strategy.h"

namespace vgpu {
namespace strategies {

// `x` holds n rows of `in_features` floats, `y` n labels. `max_slots` is how many loss slots a
// replica's last stage holds before they must be accumulated. Replicas must hold current
// parameters and have no pending work that matters.
absl::StatusOr<StepTotals> EvaluateRoundRobin(
    const std::vector<std::unique_ptr<StageChain>>& replicas, int in_features, int max_slots,
    const float* x, const int32_t* y, int n);

// Examples replica i of `replicas` gets from a global batch of `rows` (the first rows % replicas
// take one more), and the examples before its share.
int RowsForReplica(int rows, int replicas, int i);
int RowsBeforeReplica(int rows, int replicas, int i);

// The replicas of one process of a data-parallel job: the whole model on each of `devices`,
// sized for its share of a global batch split over `total_replicas` (and for evaluation
// chunks), loaded with `init`.
absl::StatusOr<std::vector<std::unique_ptr<StageChain>>> CreateDataParallelReplicas(
    const std::vector<LogicalDevice*>& devices, const StrategyOptions& options, int total_replicas,
    absl::Span<const float> init);

// A data-parallel strategy's Flush: every replica's loss slots read and its streams drained
// (all of them, even after an error: the first error is returned), then the totals since the
// previous flush.
absl::StatusOr<StepTotals> FlushReplicas(const std::vector<std::unique_ptr<StageChain>>& replicas,
                                         StepAccounting& accounting);

// One data-parallel step's compute on this process's `replicas`, which are replicas
// first .. first + N - 1 of `total` (every process's): each takes its share of the global batch
// x/y of `rows` examples, runs forward, the loss into `slot` (gradient scaled by 1/rows: the
// global batch's mean) and backward; a replica without examples zeroes its gradients and slot.
// Returns this process's examples.
absl::StatusOr<int> ReplicaGradients(const std::vector<std::unique_ptr<StageChain>>& replicas,
                                     int in_features, const float* x, const int32_t* y, int rows,
                                     int total, int first, int slot);

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_REPLICA_EVAL_H_
