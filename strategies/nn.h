// A minimal neural-network layer set for the seed model (a ReLU MLP, e.g. 784-256-256-10):
// Glorot-uniform initialisation from a seed, Dense + ReLU layers, softmax cross-entropy, SGD
// and Adam, all enqueued on a logical device's stream through runtime/kernels.h and Blas.
//
// MlpStage holds a run of consecutive layers on ONE device with everything pre-allocated for
// up to `max_rows` examples (parameters, gradients, optimizer state, activations, loss slots),
// so training allocates nothing per step. A whole model on one device is one stage (single,
// mirrored replicas); model parallelism chains several (MlpChain moves activations and their
// gradients between devices with device-to-device copies ordered by events).
//
// Parameter layout (host vectors and device buffers): for each layer, W (in x out, row-major)
// then b (out); a stage's parameters are the contiguous slice of its layers.
//
// Thread safety: a stage or chain is used from one thread at a time.
#ifndef VGPU_STRATEGIES_NN_H_
#define VGPU_STRATEGIES_NN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "vgpu/devices/logical_device.h"
#include "vgpu/runtime/kernels.h"
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

enum class OptimizerKind { kSgd, kAdam };
absl::StatusOr<OptimizerKind> ParseOptimizer(absl::string_view text);  // "sgd" | "adam"

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdam;
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-7f;                                                    // Keras' default
  int StateCopies() const { return kind == OptimizerKind::kAdam ? 2 : 0; }  // m, v
};

// Device bytes a stage of layers [first, last) needs for `max_rows` examples: parameters,
// gradients, optimizer state, activations and their gradients, its input (and input
// gradient when first > 0), labels and loss slots. What placement policies budget with.
uint64_t StageBytes(const MlpSpec& spec, int first, int last, int max_rows,
                    const OptimizerOptions& opt, int max_slots);

class MlpStage {
 public:
  static absl::StatusOr<std::unique_ptr<MlpStage>> Create(LogicalDevice* device,
                                                          const MlpSpec& spec, int first, int last,
                                                          int max_rows, const OptimizerOptions& opt,
                                                          int max_slots);
  ~MlpStage();

  LogicalDevice* device() const { return device_; }
  Stream* stream() const { return device_->stream(); }
  int first() const { return first_; }
  int last() const { return last_; }
  bool is_final() const { return last_ == spec_.num_layers(); }
  int max_rows() const { return max_rows_; }
  int max_slots() const { return max_slots_; }
  uint64_t param_count() const { return param_count_; }
  int in_width() const { return spec_.in(first_); }
  int out_width() const { return spec_.out(last_ - 1); }

  float* params() const { return params_.data(); }
  float* grads() const { return grads_.data(); }
  float* input() const { return input_.data(); }               // max_rows x in_width
  float* output() const { return acts_.back().data(); }        // max_rows x out_width
  float* output_grad() const { return dacts_.back().data(); }  // gradient w.r.t. output
  float* input_grad() const { return input_grad_.data(); }     // only when first > 0
  int32_t* labels() const { return labels_.int_data(); }       // final stage only

  // Uploads this stage's slice of the full flat parameter vector (asynchronously, from a
  // staging copy) and zeroes the optimizer state.
  absl::Status LoadParams(absl::Span<const float> all_params);
  // Writes this stage's slice into the full vector (waits for the stream).
  absl::Status ReadParams(std::vector<float>& all_params) const;

  // input -> output through the stage's layers (ReLU after every layer but the model's last).
  absl::Status Forward(int rows);
  // Final stage: softmax cross-entropy of the output against labels(); loss sum and correct
  // count go to `slot`; with `grad_scale` != 0 the logits' gradient goes to output_grad().
  absl::Status Loss(int rows, float grad_scale, int slot);
  // From output_grad(): parameter gradients (overwritten) and input_grad() when first > 0.
  absl::Status Backward(int rows);
  // A replica with no examples this step: zero gradients and the slot.
  absl::Status ZeroGradsAndSlot(int slot);
  // One optimizer step (1-based `step` for Adam's bias correction) from `grads` (default: ours;
  // may be another device's buffer on the same physical device).
  absl::Status Update(int64_t step, const float* grads = nullptr);
  // The same for parameters [begin, end) only (a shard); `grads` points at the gradient of
  // parameter 0 (the shard is read at grads + begin).
  absl::Status UpdateRange(int64_t step, const float* grads, uint64_t begin, uint64_t end);
  // Reads slots [0, n): adds their losses and correct counts (waits for the stream).
  absl::Status AccumulateSlots(int n, double& loss_sum, int64_t& correct) const;

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

// Stages in layer order, possibly on different devices; activations forward and gradients
// backward cross device boundaries by D2D copies after an event.
class MlpChain {
 public:
  static absl::StatusOr<std::unique_ptr<MlpChain>> Create(
      std::vector<std::unique_ptr<MlpStage>> stages);
  ~MlpChain();

  const std::vector<std::unique_ptr<MlpStage>>& stages() const { return stages_; }
  MlpStage* front() const { return stages_.front().get(); }
  MlpStage* back() const { return stages_.back().get(); }

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
  std::vector<std::unique_ptr<MlpStage>> stages_;
  // Per stage boundary: activations ready, activations copied (the producer may overwrite
  // them; without a backward pass in between, e.g. evaluation, nothing else orders that),
  // gradients ready.
  std::vector<std::unique_ptr<Event>> fwd_events_, consumed_events_, bwd_events_;
};

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_NN_H_
