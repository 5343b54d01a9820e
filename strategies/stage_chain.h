// A model's stages (model.h) in layer order, possibly on different devices: activations
// forward and their gradients backward cross device boundaries by device-to-device copies
// ordered by events. One stage on one device is a whole replica (single, mirrored, central
// storage); model parallelism chains several.
//
// Thread safety: a chain is used from one thread at a time.
#ifndef VGPU_STRATEGIES_STAGE_CHAIN_H_
#define VGPU_STRATEGIES_STAGE_CHAIN_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/strategies/model.h"

namespace vgpu {
namespace strategies {

class StageChain {
 public:
  // InvalidArgument for no stages, stages that are not consecutive layers, or a last stage
  // without the model's last layer.
  static absl::StatusOr<std::unique_ptr<StageChain>> Create(
      std::vector<std::unique_ptr<ModelStage>> stages);
  ~StageChain();

  const std::vector<std::unique_ptr<ModelStage>>& stages() const { return stages_; }
  ModelStage* front() const { return stages_.front().get(); }
  ModelStage* back() const { return stages_.back().get(); }

  // Enqueues uploads of `rows` examples (x: rows x in, row-major; y: rows labels). The host
  // memory must stay valid until the streams have run them.
  absl::Status Upload(const float* x, const int32_t* y, int rows);
  absl::Status Forward(int rows);
  absl::Status Backward(int rows);
  absl::Status Update(int64_t step);
  absl::Status LoadParams(absl::Span<const float> all_params);
  absl::Status ReadParams(std::vector<float>& all_params) const;
  absl::Status Synchronize() const;

 private:
  std::vector<std::unique_ptr<ModelStage>> stages_;
  // Per stage boundary: activations ready, activations copied (the producer may overwrite
  // them; without a backward pass in between, e.g. evaluation, nothing else orders that),
  // gradients ready.
  std::vector<std::unique_ptr<Event>> fwd_events_, consumed_events_, bwd_events_;
};

// One replica: the whole model as one stage on `device`.
absl::StatusOr<std::unique_ptr<StageChain>> CreateReplica(const Model& model, LogicalDevice* device,
                                                          int max_rows, const OptimizerOptions& opt,
                                                          int max_slots);

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_STAGE_CHAIN_H_
