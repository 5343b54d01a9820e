// The seed model, a ReLU MLP (e.g. 784-256-256-10), as one implementation of model.h:
// Glorot-uniform initialisation from a seed, Dense + ReLU layers, softmax cross-entropy, SGD
// and Adam, all enqueued on a logical device's stream through runtime/kernels.h and Blas.
//
// MlpStage holds a run of consecutive layers on ONE device with everything pre-allocated for
// up to `max_rows` examples (parameters, gradients, optimizer state, activations, loss slots),
// so training allocates nothing per step. A whole model on one device is one stage (single,
// mirrored replicas); model parallelism chains several (stage_chain.h).
//
// Parameter layout (host vectors and device buffers): for each layer, W (in x out, row-major)
// then b (out); a stage's parameters are the contiguous slice of its layers.
//
// Thread safety: an Mlp is immutable; a stage is used from one thread at a time.
#ifndef VGPU_STRATEGIES_NN_H_
#define VGPU_STRATEGIES_NN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "vgpu/devices/logical_device.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/strategies/model.h"
#include "vgpu/strategies/tensor.h"

namespace vgpu {
namespace strategies {

struct MlpSpec {
  std::vector<int> sizes = {784, 256, 256, 10};  // input, hidden..., classes
  int num_layers() const { return static_cast<int>(sizes.size()) - 1; }
  int in(int layer) const { return sizes[layer]; }
  int out(int layer) const { return sizes[layer + 1]; }
  uint64_t LayerParams(int layer) const;
  uint64_t ParamOffset(int layer) const;  // first float of layer's W in the flat layout
  uint64_t TotalParams() const { return ParamOffset(num_layers()); }
  absl::Status Validate() const;
};

// W ~ U(-a, a), a = sqrt(6 / (in + out)); b = 0. Same seed, same values, on every machine
// (std::mt19937_64 and our own uniform mapping).
std::vector<float> GlorotUniformInit(const MlpSpec& spec, uint64_t seed);

// Device bytes a stage of layers [first, last) needs for `max_rows` examples: parameters,
// gradients, optimizer state, activations and their gradients, its input (and input
// gradient when first > 0), labels and loss slots. What placement policies budget with.
uint64_t StageBytes(const MlpSpec& spec, int first, int last, int max_rows,
                    const OptimizerOptions& opt, int max_slots);

class MlpStage : public ModelStage {
 public:
  static absl::StatusOr<std::unique_ptr<MlpStage>> Create(LogicalDevice* device,
                                                          const MlpSpec& spec, int first, int last,
                                                          int max_rows, const OptimizerOptions& opt,
                                                          int max_slots);
  ~MlpStage() override;

  LogicalDevice* device() const override { return device_; }
  int first() const override { return first_; }
  int last() const override { return last_; }
  bool is_final() const override { return last_ == spec_.num_layers(); }
  int max_rows() const override { return max_rows_; }
  int max_slots() const override { return max_slots_; }
  uint64_t param_count() const override { return param_count_; }
  int in_width() const override { return spec_.in(first_); }
  int out_width() const override { return spec_.out(last_ - 1); }

  float* params() const override { return params_.data(); }
  float* grads() const override { return grads_.data(); }
  float* input() const override { return input_.data(); }
  float* output() const override { return acts_.back().data(); }
  float* output_grad() const override { return dacts_.back().data(); }
  float* input_grad() const override { return input_grad_.data(); }
  int32_t* labels() const override { return labels_.int_data(); }

  // ModelStage's operations; Forward applies ReLU after every layer but the model's last,
  // Loss is softmax cross-entropy.
  absl::Status LoadParams(absl::Span<const float> all_params) override;
  absl::Status ReadParams(std::vector<float>& all_params) const override;
  absl::Status Forward(int rows) override;
  absl::Status Loss(int rows, float grad_scale, int slot) override;
  absl::Status Backward(int rows) override;
  absl::Status ZeroGradsAndSlot(int slot) override;
  absl::Status UpdateRange(int64_t step, const float* grads, uint64_t begin, uint64_t end) override;
  absl::Status AccumulateSlots(int n, double& loss_sum, int64_t& correct) const override;

 private:
  MlpStage() = default;
  LogicalDevice* device_ = nullptr;
  MlpSpec spec_;
  OptimizerOptions opt_;
  int first_ = 0, last_ = 0, max_rows_ = 0, max_slots_ = 0;
  uint64_t param_count_ = 0;
  Blas* blas_ = nullptr;
  Kernels* kernels_ = nullptr;
  Tensor params_, grads_, m_, v_, input_, input_grad_, labels_, loss_slots_, correct_slots_;
  std::vector<Tensor> acts_, dacts_;  // per layer of the stage
};

// The MLP as a Model (model.h) for the strategies.
class Mlp : public Model {
 public:
  explicit Mlp(MlpSpec spec) : spec_(std::move(spec)) {}
  const MlpSpec& spec() const { return spec_; }

  std::string name() const override;
  absl::Status Validate() const override { return spec_.Validate(); }
  int num_layers() const override { return spec_.num_layers(); }
  int input_width() const override { return spec_.in(0); }
  uint64_t LayerParams(int layer) const override { return spec_.LayerParams(layer); }
  std::string LayerShape(int layer) const override;
  // dense_<l>/kernel (in x out), then dense_<l>/bias (out), per layer.
  std::vector<Variable> Variables() const override;
  std::vector<float> InitialParams(uint64_t seed) const override {
    return GlorotUniformInit(spec_, seed);
  }
  uint64_t StageBytes(int first, int last, int max_rows, const OptimizerOptions& opt,
                      int max_slots) const override {
    return strategies::StageBytes(spec_, first, last, max_rows, opt, max_slots);
  }
  absl::StatusOr<std::unique_ptr<ModelStage>> CreateStage(LogicalDevice* device, int first,
                                                          int last, int max_rows,
                                                          const OptimizerOptions& opt,
                                                          int max_slots) const override;

 private:
  MlpSpec spec_;
};

// The seed model (784-256-256-10 by default) for StrategyOptions::model.
std::shared_ptr<const Model> MakeMlp(std::vector<int> sizes = MlpSpec().sizes);

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_NN_H_
