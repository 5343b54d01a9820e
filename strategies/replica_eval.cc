#include "vgpu/strategies/replica_eval.h"

#include <algorithm>

#include "vgpu/runtime/status.h"

namespace vgpu {
namespace strategies {

absl::StatusOr<StepTotals> EvaluateRoundRobin(
    const std::vector<std::unique_ptr<StageChain>>& replicas, int in_features, int max_slots,
    const float* x, const int32_t* y, int n) {
  StepTotals t;
  const int count = static_cast<int>(replicas.size());
  const int chunk = replicas[0]->front()->max_rows();
  std::vector<int> used(count, 0);
  int i = 0;
  for (int start = 0; start < n; start += chunk, i = (i + 1) % count) {
    const int rows = std::min(chunk, n - start);
    StageChain& rep = *replicas[i];
    if (used[i] == max_slots) {
      VGPU_RETURN_IF_ERROR(rep.back()->AccumulateSlots(used[i], t.loss_sum, t.correct));
      used[i] = 0;
    }
    VGPU_RETURN_IF_ERROR(
        rep.Upload(x + static_cast<int64_t>(start) * in_features, y + start, rows));
    VGPU_RETURN_IF_ERROR(rep.Forward(rows));
    VGPU_RETURN_IF_ERROR(rep.back()->Loss(rows, 0.0f, used[i]++));
  }
  for (int r = 0; r < count; ++r) {
    VGPU_RETURN_IF_ERROR(replicas[r]->back()->AccumulateSlots(used[r], t.loss_sum, t.correct));
  }
  t.examples = n;
  return t;
}

absl::StatusOr<std::vector<std::unique_ptr<StageChain>>> CreateDataParallelReplicas(
    const std::vector<LogicalDevice*>& devices, const StrategyOptions& options, int total_replicas,
    absl::Span<const float> init) {
  const int per_replica = RowsForReplica(options.global_batch, total_replicas, 0);
  const int max_rows = std::max(per_replica, std::min(options.eval_batch, options.global_batch));
  std::vector<std::unique_ptr<StageChain>> replicas;
  for (LogicalDevice* d : devices) {
    VGPU_ASSIGN_OR_RETURN(auto chain, CreateReplica(*options.model, d, max_rows, options.optimizer,
                                                    options.max_slots));
    VGPU_RETURN_IF_ERROR(chain->LoadParams(init));
    replicas.push_back(std::move(chain));
  }
  return replicas;
}

absl::StatusOr<StepTotals> FlushReplicas(const std::vector<std::unique_ptr<StageChain>>& replicas,
                                         StepAccounting& accounting) {
  absl::Status status;
  for (const auto& rep : replicas) status.Update(accounting.ReadSlotsAndDrain(*rep));
  VGPU_RETURN_IF_ERROR(status);
  return accounting.TakeTotals();
}

int RowsForReplica(int rows, int replicas, int i) {
  return rows / replicas + (i < rows % replicas ? 1 : 0);
}

int RowsBeforeReplica(int rows, int replicas, int i) {
  return i * (rows / replicas) + std::min(i, rows % replicas);
}

absl::StatusOr<int> ReplicaGradients(const std::vector<std::unique_ptr<StageChain>>& replicas,
                                     int in_features, const float* x, const int32_t* y, int rows,
                                     int total, int first, int slot) {
  const float grad_scale = 1.0f / static_cast<float>(rows);
  int offset = RowsBeforeReplica(rows, total, first);
  int local_rows = 0;
  for (size_t i = 0; i < replicas.size(); ++i) {
    const int r = RowsForReplica(rows, total, first + static_cast<int>(i));
    StageChain& rep = *replicas[i];
    if (r == 0) {
      VGPU_RETURN_IF_ERROR(rep.back()->ZeroGradsAndSlot(slot));
      continue;
    }
    VGPU_RETURN_IF_ERROR(rep.Upload(x + static_cast<int64_t>(offset) * in_features, y + offset, r));
    VGPU_RETURN_IF_ERROR(rep.Forward(r));
    VGPU_RETURN_IF_ERROR(rep.back()->Loss(r, grad_scale, slot));
    VGPU_RETURN_IF_ERROR(rep.Backward(r));
    offset += r;
    local_rows += r;
  }
  return local_rows;
}

}  // namespace strategies
}  // namespace vgpu
