// CentralStorageStrategy (TensorFlow's): the variables and optimizer state live on CPU:0;
// compute is replicated on the GPUs. Each step every GPU replica fetches the current
// parameters from CPU:0, computes the gradient of its share of the global batch (split as in
// MirroredStrategy, scaled by 1/global rows), and sends it to CPU:0, where the gradients are
// summed (Kernels::SumN over the staging buffers) and the optimizer updates the variables.
// Streams are ordered with events: a replica's fetch waits for the previous update, the
// update waits for every replica's gradient.
//
// Thread safety: drive from one thread (see strategy.h).
#ifndef VGPU_STRATEGIES_CENTRAL_STORAGE_H_
#define VGPU_STRATEGIES_CENTRAL_STORAGE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "vgpu/strategies/stage_chain.h"
#include "vgpu/strategies/step_accounting.h"
#include "vgpu/strategies/strategy.h"
#include "vgpu/strategies/tensor.h"

namespace vgpu {
namespace strategies {

class CentralStorageStrategy : public Strategy {
 public:
  // `cpu` holds the variables (its memory must be reachable from the GPUs' streams: host
  // memory on the host platform, pinned memory on cuda).
  static absl::StatusOr<std::unique_ptr<CentralStorageStrategy>> Create(
      LogicalDevice* cpu, std::vector<LogicalDevice*> gpus, const StrategyOptions& options);
  ~CentralStorageStrategy() override;

  StrategyKind kind() const override { return StrategyKind::kCentralStorage; }
  std::vector<LogicalDevice*> devices() const override;
  absl::Status Step(const float* x, const int32_t* y, int rows) override;
  absl::StatusOr<StepTotals> Flush() override;
  absl::StatusOr<StepTotals> Evaluate(const float* x, const int32_t* y, int n) override;
  absl::StatusOr<std::vector<float>> Params() override;
  std::string PlacementReport() const override;

 private:
  CentralStorageStrategy() = default;
  absl::Status FetchParams(int replica);

  LogicalDevice* cpu_ = nullptr;
  std::vector<LogicalDevice*> gpus_;
  StrategyOptions options_;
  std::unique_ptr<ModelStage> central_;  // variables, gradient sum and optimizer state on CPU:0
  std::vector<Tensor> staging_;          // per replica: its gradient, on CPU:0
  std::vector<std::unique_ptr<StageChain>> replicas_;
  std::unique_ptr<Event> updated_;
  std::vector<std::unique_ptr<Event>> sent_;
  int64_t step_ = 0;
  StepAccounting accounting_;
};

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_CENTRAL_STORAGE_H_
