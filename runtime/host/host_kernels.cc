#include "runtime/host/host_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/host/host_platform.h"

namespace vgpu {
namespace {

class HostKernels : public Kernels {
 public:
  absl::Status SumN(Stream* stream, absl::Span<const float* const> inputs, float* out,
                    uint64_t count, float scale) override {
    if (inputs.empty() || inputs.size() > static_cast<size_t>(kMaxSumInputs)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SumN: ", inputs.size(), " inputs; need 1..", kMaxSumInputs));
    }
    std::vector<const float*> in(inputs.begin(), inputs.end());
    return EnqueueHostTask(stream, [in = std::move(in), out, count, scale] {
      // Blocked so each block of every input is read once while the accumulator stays in L1.
      constexpr uint64_t kBlock = 2048;
      float acc[kBlock];
      for (uint64_t base = 0; base < count; base += kBlock) {
        uint64_t n = std::min(count - base, kBlock);
        const float* first = in[0] + base;
        for (uint64_t i = 0; i < n; ++i) acc[i] = first[i];
        for (size_t j = 1; j < in.size(); ++j) {
          const float* src = in[j] + base;
          for (uint64_t i = 0; i < n; ++i) acc[i] += src[i];
        }
        float* dst = out + base;
        for (uint64_t i = 0; i < n; ++i) dst[i] = acc[i] * scale;
      }
      return absl::OkStatus();
    });
  }

  absl::Status Fill(Stream* stream, float* x, uint64_t count, float value) override {
    return EnqueueHostTask(stream, [=] {
      std::fill_n(x, count, value);
      return absl::OkStatus();
    });
  }

  absl::Status BiasAdd(Stream* stream, int rows, int cols, const float* bias, float* y) override {
    return EnqueueHostTask(stream, [=] {
      for (int r = 0; r < rows; ++r) {
        float* row = y + static_cast<int64_t>(r) * cols;
        for (int c = 0; c < cols; ++c) row[c] += bias[c];
      }
      return absl::OkStatus();
    });
  }

  absl::Status BiasGrad(Stream* stream, int rows, int cols, const float* dy, float* db) override {
    return EnqueueHostTask(stream, [=] {
      std::fill_n(db, cols, 0.0f);
      for (int r = 0; r < rows; ++r) {
        const float* row = dy + static_cast<int64_t>(r) * cols;
        for (int c = 0; c < cols; ++c) db[c] += row[c];
      }
      return absl::OkStatus();
    });
  }

  absl::Status Relu(Stream* stream, uint64_t count, const float* x, float* y) override {
    return EnqueueHostTask(stream, [=] {
      for (uint64_t i = 0; i < count; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
      return absl::OkStatus();
    });
  }

  absl::Status ReluGrad(Stream* stream, uint64_t count, const float* y, const float* dy,
                        float* dx) override {
    return EnqueueHostTask(stream, [=] {
      for (uint64_t i = 0; i < count; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
      return absl::OkStatus();
    });
  }

  absl::Status SoftmaxCrossEntropy(Stream* stream, int rows, int cols, const float* logits,
                                   const int32_t* labels, float grad_scale, float* dlogits,
                                   float* loss_sum, int32_t* correct) override {
    return EnqueueHostTask(stream, [=]() -> absl::Status {
      double loss = 0.0;
      int32_t right = 0;
      for (int r = 0; r < rows; ++r) {
        const float* z = logits + static_cast<int64_t>(r) * cols;
        int32_t label = labels[r];
        if (label < 0 || label >= cols) {
          return absl::InvalidArgumentError(absl::StrCat(
              "SoftmaxCrossEntropy: label ", label, " of row ", r, " is outside [0, ", cols, ")"));
        }
        int best = 0;
        float zmax = z[0];
        for (int c = 1; c < cols; ++c) {
          if (z[c] > zmax) {
            zmax = z[c];
            best = c;
          }
        }
        if (best == label) ++right;
        float sum = 0.0f;
        for (int c = 0; c < cols; ++c) sum += std::exp(z[c] - zmax);
        float log_sum = std::log(sum);
        loss += static_cast<double>(log_sum - (z[label] - zmax));
        if (dlogits != nullptr) {
          float* d = dlogits + static_cast<int64_t>(r) * cols;
          float inv = 1.0f / sum;
          for (int c = 0; c < cols; ++c) {
            d[c] = grad_scale * (std::exp(z[c] - zmax) * inv - (c == label ? 1.0f : 0.0f));
          }
        }
      }
      *loss_sum = static_cast<float>(loss);
      *correct = right;
      return absl::OkStatus();
    });
  }

  absl::Status SgdUpdate(Stream* stream, uint64_t count, float lr, const float* grad,
                         float* param) override {
    return EnqueueHostTask(stream, [=] {
      for (uint64_t i = 0; i < count; ++i) param[i] -= lr * grad[i];
      return absl::OkStatus();
    });
  }

  absl::Status AdamUpdate(Stream* stream, uint64_t count, float lr, float beta1, float beta2,
                          float epsilon, int64_t step, const float* grad, float* m, float* v,
                          float* param) override {
    if (step < 1) return absl::InvalidArgumentError("AdamUpdate: step must be >= 1");
    return EnqueueHostTask(stream, [=] {
      const float c1 = 1.0f - static_cast<float>(std::pow(beta1, static_cast<double>(step)));
      const float c2 = 1.0f - static_cast<float>(std::pow(beta2, static_cast<double>(step)));
      const float step_size = lr / c1;
      const float inv_sqrt_c2 = 1.0f / std::sqrt(c2);
      for (uint64_t i = 0; i < count; ++i) {
        float g = grad[i];
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        param[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + epsilon);
      }
      return absl::OkStatus();
    });
  }
};

}  // namespace

std::unique_ptr<Kernels> CreateHostKernels() { return std::make_unique<HostKernels>(); }

}  // namespace vgpu
