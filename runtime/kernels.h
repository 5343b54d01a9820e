// Device kernels the strategies need (element-wise ops, reductions, the MLP's layers and
// optimizers), one implementation per backend: vectorised loops run on the stream's worker on
// `host` (runtime/host/host_kernels.cc), CUDA C++ from the embedded fatbin on `cuda`
// (runtime/cuda/). All work is enqueued on `stream`, in order with everything else on it.
// Matrices are ROW-major here (rows x cols, leading dimension cols), unlike Blas.
// Pointers are device memory reachable from the stream's executor.
//
// Thread safety: a Kernels object is stateless once created; safe from any thread.
#ifndef VGPU_RUNTIME_KERNELS_H_
#define VGPU_RUNTIME_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {

class Kernels {
 public:
  virtual ~Kernels() = default;
  static constexpr int kMaxSumInputs = 16;

  // out[i] = scale * sum_j inputs[j][i], i < count, in ONE pass over the inputs (the local
  // all-reduce's workhorse). `out` may alias an input. 1..kMaxSumInputs inputs.
  virtual absl::Status SumN(Stream* stream, absl::Span<const float* const> inputs, float* out,
                            uint64_t count, float scale) = 0;
  // x[i] = value
  virtual absl::Status Fill(Stream* stream, float* x, uint64_t count, float value) = 0;
  // y[r][c] += bias[c]
  virtual absl::Status BiasAdd(Stream* stream, int rows, int cols, const float* bias,
                               float* y) = 0;
  // db[c] = sum_r dy[r][c]
  virtual absl::Status BiasGrad(Stream* stream, int rows, int cols, const float* dy,
                                float* db) = 0;
  // y = max(x, 0); y may alias x.
  virtual absl::Status Relu(Stream* stream, uint64_t count, const float* x, float* y) = 0;
  // dx = y > 0 ? dy : 0 (y the ReLU output); dx may alias dy.
  virtual absl::Status ReluGrad(Stream* stream, uint64_t count, const float* y, const float* dy,
                                float* dx) = 0;
  // Softmax cross-entropy, fused forward and backward, for `rows` examples of `cols` classes:
  //   loss_sum[0] = sum over rows of -log softmax(logits[r])[labels[r]]
  //   dlogits[r][c] = grad_scale * (softmax(logits[r])[c] - (c == labels[r]))
  //   correct[0] = number of rows whose argmax equals the label
  // loss_sum and correct are single device values; dlogits may be null (evaluation only).
  // A label outside [0, cols) makes the stream fail with InvalidArgument.
  virtual absl::Status SoftmaxCrossEntropy(Stream* stream, int rows, int cols,
                                           const float* logits, const int32_t* labels,
                                           float grad_scale, float* dlogits, float* loss_sum,
                                           int32_t* correct) = 0;
  // param -= lr * grad
  virtual absl::Status SgdUpdate(Stream* stream, uint64_t count, float lr, const float* grad,
                                 float* param) = 0;
  // Adam (Kingma & Ba) with bias correction at 1-based step `step`.
  virtual absl::Status AdamUpdate(Stream* stream, uint64_t count, float lr, float beta1,
                                  float beta2, float epsilon, int64_t step, const float* grad,
                                  float* m, float* v, float* param) = 0;
};

}  // namespace vgpu

#endif  // VGPU_RUNTIME_KERNELS_H_
