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

}  // namespace strategies
}  // namespace vgpu
