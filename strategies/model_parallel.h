// Model parallelism: the model's layers are placed on logical devices by a policy, consecutive
// layers on the same device form one stage, and forward/backward run stage by stage, moving
// activations (forward) and their gradients (backward) between devices by device-to-device
// copies ordered with events (stage_chain.h). Policies:
//   explicit        layer i -> a device spec ("GPU:1", "/device:GPU:1", full names, "/gpu:1")
//   round-robin     layer i -> device i mod N
//   least-loaded    each layer to the device with the fewest parameter bytes so far
//                   (TensorFlow's GreedyLoadBalancingStrategy for parameter servers)
//   memory-balanced fill devices in order within each one's free memory, counting parameters,
//                   gradients, optimizer state and activations for the batch (Accelerate's
//                   infer_auto_device_map); ResourceExhausted naming the layer and the device
//                   when the model does not fit.
//
// Thread safety: PlaceLayers is a pure function; the strategy is driven from one thread.
#ifndef VGPU_STRATEGIES_MODEL_PARALLEL_H_
#define VGPU_STRATEGIES_MODEL_PARALLEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vgpu/strategies/stage_chain.h"
#include "vgpu/strategies/step_accounting.h"
#include "vgpu/strategies/strategy.h"

namespace vgpu {
namespace strategies {

enum class PlacementPolicy { kExplicit, kRoundRobin, kLeastLoaded, kMemoryBalanced };
absl::string_view PlacementPolicyName(PlacementPolicy policy);
// "explicit" | "round-robin" | "least-loaded" | "memory-balanced"
absl::StatusOr<PlacementPolicy> ParsePlacementPolicy(absl::string_view text);

// True when `spec` names `device`: a full name, "/device:GPU:1", "GPU:1", "/gpu:1", "cpu:0".
bool DeviceMatchesSpec(const LogicalDevice& device, absl::string_view spec);

struct LayerPlacement {
  int layer = 0;
  LogicalDevice* device = nullptr;
  uint64_t param_bytes = 0;
  uint64_t total_bytes = 0;  // params, grads, optimizer state, activations (StageBytes)
};

struct PlacementOptions {
  PlacementPolicy policy = PlacementPolicy::kRoundRobin;
  std::vector<std::string> explicit_specs;  // kExplicit: one spec per layer
};

// One entry per layer. Errors: InvalidArgument for no devices or a wrong number of explicit
// specs; NotFound for a spec no device matches; ResourceExhausted (memory-balanced) naming the
// layer, its bytes and the last device tried with its free bytes.
absl::StatusOr<std::vector<LayerPlacement>> PlaceLayers(
    const Model& model, const std::vector<LogicalDevice*>& devices, const PlacementOptions& options,
    int max_rows, const OptimizerOptions& optimizer, int max_slots);

// "layer 0 (784x256): GPU:0  params 785.0 KiB  total 2.3 MiB" lines plus per-device totals.
std::string FormatPlacementReport(const Model& model, const std::vector<LayerPlacement>& placement);

class ModelParallelStrategy : public Strategy {
 public:
  static absl::StatusOr<std::unique_ptr<ModelParallelStrategy>> Create(
      std::vector<LogicalDevice*> devices, const StrategyOptions& options,
      const PlacementOptions& placement);

  StrategyKind kind() const override { return StrategyKind::kModelParallel; }
  std::vector<LogicalDevice*> devices() const override;
  absl::Status Step(const float* x, const int32_t* y, int rows) override;
  absl::StatusOr<StepTotals> Flush() override;
  absl::StatusOr<StepTotals> Evaluate(const float* x, const int32_t* y, int n) override;
  absl::StatusOr<std::vector<float>> Params() override;
  std::string PlacementReport() const override;
  const std::vector<LayerPlacement>& placement() const { return placement_; }
  int num_stages() const { return static_cast<int>(chain_->stages().size()); }

 private:
  ModelParallelStrategy() = default;
  StrategyOptions options_;
  std::vector<LayerPlacement> placement_;
  std::unique_ptr<StageChain> chain_;
  int64_t step_ = 0;
  StepAccounting accounting_;
};

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_MODEL_PARALLEL_H_
