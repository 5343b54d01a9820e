// The model interface the strategies train, so they know nothing of a particular network: a
// Model is a sequence of layers whose parameters form one flat float vector (layer 0's first);
// consecutive layers placed on one device form a ModelStage, which holds everything a step
// needs for up to `max_rows` examples (parameters, gradients, optimizer state, activations,
// labels and loss slots) so training allocates nothing per step. Strategies build stages
// through Model::CreateStage, chain them (stage_chain.h) and drive forward, loss, backward
// and the optimizer through ModelStage. The MLP (nn.h) is one implementation; adding another
// model is one class of each kind (see docs/strategies.md).
//
// Thread safety: a Model is immutable and safe from any thread; a stage is used from one
// thread at a time.
#ifndef VGPU_STRATEGIES_MODEL_H_
#define VGPU_STRATEGIES_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "vgpu/devices/logical_device.h"

namespace vgpu {
namespace strategies {

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

// Layers [first(), last()) of a model on one device.
class ModelStage {
 public:
  virtual ~ModelStage() = default;

  virtual LogicalDevice* device() const = 0;
  Stream* stream() const { return device()->stream(); }
  virtual int first() const = 0;
  virtual int last() const = 0;
  virtual bool is_final() const = 0;  // holds the model's last layer (and the loss)
  virtual int max_rows() const = 0;
  virtual int max_slots() const = 0;
  virtual uint64_t param_count() const = 0;
  virtual int in_width() const = 0;   // floats per example entering the stage
  virtual int out_width() const = 0;  // floats per example leaving it

  virtual float* params() const = 0;
  virtual float* grads() const = 0;
  virtual float* input() const = 0;        // max_rows x in_width
  virtual float* output() const = 0;       // max_rows x out_width
  virtual float* output_grad() const = 0;  // gradient w.r.t. output
  virtual float* input_grad() const = 0;   // only when first > 0
  virtual int32_t* labels() const = 0;     // final stage only

  // Uploads this stage's slice of the full flat parameter vector (asynchronously, from a
  // staging copy) and zeroes the optimizer state.
  virtual absl::Status LoadParams(absl::Span<const float> all_params) = 0;
  // Writes this stage's slice into the full vector (waits for the stream).
  virtual absl::Status ReadParams(std::vector<float>& all_params) const = 0;
  // input -> output through the stage's layers.
  virtual absl::Status Forward(int rows) = 0;
  // Final stage: the loss of the output against labels(); loss sum and correct count go to
  // `slot`; with `grad_scale` != 0 the output's gradient (times grad_scale) goes to
  // output_grad().
  virtual absl::Status Loss(int rows, float grad_scale, int slot) = 0;
  // From output_grad(): parameter gradients (overwritten) and input_grad() when first > 0.
  virtual absl::Status Backward(int rows) = 0;
  // A replica with no examples this step: zero gradients and the slot.
  virtual absl::Status ZeroGradsAndSlot(int slot) = 0;
  // One optimizer step (1-based `step` for Adam's bias correction) for parameters
  // [begin, end) only (a shard); `grads` points at the gradient of parameter 0 (the shard is
  // read at grads + begin; it may be another device's buffer on the same physical device).
  virtual absl::Status UpdateRange(int64_t step, const float* grads, uint64_t begin,
                                   uint64_t end) = 0;
  // The whole stage, from `grads` (default: ours).
  absl::Status Update(int64_t step, const float* grads = nullptr) {
    return UpdateRange(step, grads == nullptr ? this->grads() : grads, 0, param_count());
  }
  // Reads slots [0, n): adds their losses and correct counts (waits for the stream).
  virtual absl::Status AccumulateSlots(int n, double& loss_sum, int64_t& correct) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  // "MLP 784-256-256-10", for reports.
  virtual std::string name() const = 0;
  virtual absl::Status Validate() const = 0;
  virtual int num_layers() const = 0;
  virtual int input_width() const = 0;  // floats per example
  virtual uint64_t LayerParams(int layer) const = 0;
  // A layer's shape for placement reports ("784x256").
  virtual std::string LayerShape(int layer) const = 0;
  // The flat initial parameters; the same seed gives the same values on every machine.
  virtual std::vector<float> InitialParams(uint64_t seed) const = 0;
  // Device bytes a stage of layers [first, last) needs for `max_rows` examples: what
  // placement policies budget with.
  virtual uint64_t StageBytes(int first, int last, int max_rows, const OptimizerOptions& opt,
                              int max_slots) const = 0;
  virtual absl::StatusOr<std::unique_ptr<ModelStage>> CreateStage(LogicalDevice* device, int first,
                                                                  int last, int max_rows,
                                                                  const OptimizerOptions& opt,
                                                                  int max_slots) const = 0;

  // The model's variables as ranges of the flat vector, in order and covering it (what a
  // parameter server shards). Default: one per layer; models with several tensors per layer
  // say so (the MLP: kernel, then bias).
  struct Variable {
    std::string name;
    uint64_t begin = 0;
    uint64_t end = 0;
  };
  virtual std::vector<Variable> Variables() const {
    std::vector<Variable> v;
    for (int l = 0; l < num_layers(); ++l) {
      v.push_back({"layer" + std::to_string(l), ParamOffset(l), ParamOffset(l + 1)});
    }
    return v;
  }

  // First float of `layer` in the flat layout (num_layers(): the total).
  uint64_t ParamOffset(int layer) const {
    uint64_t off = 0;
    for (int l = 0; l < layer; ++l) off += LayerParams(l);
    return off;
  }
  uint64_t TotalParams() const { return ParamOffset(num_layers()); }
};

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_MODEL_H_
