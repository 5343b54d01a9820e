#include "vgpu/runtime/host/host_kernels.h"

#include <cblas.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/host/host_platform.h"

// The hot loops are compiled for AVX-512, AVX2 and baseline x86-64, picked at load time
// (GCC function multi-versioning), with -O3 vectorisation. The build itself stays portable (no
// -march).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define VGPU_HOT __attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3")))
#elif defined(__GNUC__) && !defined(__clang__)
#define VGPU_HOT __attribute__((optimize("O3")))
#else
#define VGPU_HOT
#endif

namespace vgpu {
namespace {

// ---- loops (free functions so each can be multi-versioned) --------------------------------

// Blocked so each block of every input is read once while the accumulator stays in L1.
VGPU_HOT void SumNLoop(const float* const* in, int n_in, float* out, uint64_t count, float scale) {
  constexpr uint64_t kBlock = 2048;
  alignas(64) float acc[kBlock];
  for (uint64_t base = 0; base < count; base += kBlock) {
    const uint64_t n = count - base < kBlock ? count - base : kBlock;
    const float* first = in[0] + base;
    for (uint64_t i = 0; i < n; ++i) acc[i] = first[i];
    int j = 1;
    // Two inputs per pass halves the accumulator traffic.
    for (; j + 1 < n_in; j += 2) {
      const float* a = in[j] + base;
      const float* b = in[j + 1] + base;
      for (uint64_t i = 0; i < n; ++i) acc[i] += a[i] + b[i];
    }
    for (; j < n_in; ++j) {
      const float* a = in[j] + base;
      for (uint64_t i = 0; i < n; ++i) acc[i] += a[i];
    }
    float* dst = out + base;
    if (scale == 1.0f) {
      for (uint64_t i = 0; i < n; ++i) dst[i] = acc[i];
    } else {
      for (uint64_t i = 0; i < n; ++i) dst[i] = acc[i] * scale;
    }
  }
}

VGPU_HOT void FillLoop(float* __restrict x, uint64_t count, float value) {
  for (uint64_t i = 0; i < count; ++i) x[i] = value;
}

VGPU_HOT void BiasAddLoop(int rows, int cols, const float* __restrict bias, float* __restrict y) {
  for (int r = 0; r < rows; ++r) {
    float* row = y + static_cast<int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

VGPU_HOT void BiasGradLoop(int rows, int cols, const float* __restrict dy, float* __restrict db) {
  for (int c = 0; c < cols; ++c) db[c] = 0.0f;
  for (int r = 0; r < rows; ++r) {
    const float* row = dy + static_cast<int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c) db[c] += row[c];
  }
}

VGPU_HOT void ReluLoop(uint64_t count, const float* x, float* y) {
  for (uint64_t i = 0; i < count; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

VGPU_HOT void ReluGradLoop(uint64_t count, const float* y, const float* dy, float* dx) {
  for (uint64_t i = 0; i < count; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

VGPU_HOT void SgdLoop(uint64_t count, float lr, const float* __restrict grad,
                      float* __restrict param) {
  for (uint64_t i = 0; i < count; ++i) param[i] -= lr * grad[i];
}

void AdamScalar(uint64_t begin, uint64_t count, float beta1, float beta2, float epsilon,
                float step_size, float inv_sqrt_c2, const float* __restrict grad,
                float* __restrict m, float* __restrict v, float* __restrict param) {
  const float a1 = 1.0f - beta1, a2 = 1.0f - beta2;
  for (uint64_t i = begin; i < count; ++i) {
    const float g = grad[i];
    const float mi = beta1 * m[i] + a1 * g;
    const float vi = beta2 * v[i] + a2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= step_size * mi / (std::sqrt(vi) * inv_sqrt_c2 + epsilon);
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// sqrtf's errno keeps the compiler from vectorising the loop above, so the AVX2 path is
// written with intrinsics.
__attribute__((target("avx2,fma"))) void AdamAvx2(uint64_t count, float beta1, float beta2,
                                                  float epsilon, float step_size, float inv_sqrt_c2,
                                                  const float* grad, float* m, float* v,
                                                  float* param) {
  const __m256 b1 = _mm256_set1_ps(beta1), b2 = _mm256_set1_ps(beta2);
  const __m256 a1 = _mm256_set1_ps(1.0f - beta1), a2 = _mm256_set1_ps(1.0f - beta2);
  const __m256 eps = _mm256_set1_ps(epsilon), step = _mm256_set1_ps(step_size);
  const __m256 inv = _mm256_set1_ps(inv_sqrt_c2);
  uint64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 g = _mm256_loadu_ps(grad + i);
    const __m256 mi = _mm256_fmadd_ps(b1, _mm256_loadu_ps(m + i), _mm256_mul_ps(a1, g));
    const __m256 vi =
        _mm256_fmadd_ps(b2, _mm256_loadu_ps(v + i), _mm256_mul_ps(_mm256_mul_ps(a2, g), g));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(vi), inv, eps);
    const __m256 upd = _mm256_div_ps(_mm256_mul_ps(step, mi), denom);
    _mm256_storeu_ps(param + i, _mm256_sub_ps(_mm256_loadu_ps(param + i), upd));
  }
  AdamScalar(i, count, beta1, beta2, epsilon, step_size, inv_sqrt_c2, grad, m, v, param);
}
#endif

void AdamLoop(uint64_t count, float beta1, float beta2, float epsilon, float step_size,
              float inv_sqrt_c2, const float* grad, float* m, float* v, float* param) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) {
    AdamAvx2(count, beta1, beta2, epsilon, step_size, inv_sqrt_c2, grad, m, v, param);
    return;
  }
#endif
  AdamScalar(0, count, beta1, beta2, epsilon, step_size, inv_sqrt_c2, grad, m, v, param);
}

// ---- the Kernels implementation ----------------------------------------------------------

class HostKernels : public Kernels {
 public:
  absl::Status SumN(Stream* stream, absl::Span<const float* const> inputs, float* out,
                    uint64_t count, float scale) override {
    if (inputs.empty() || inputs.size() > static_cast<size_t>(kMaxSumInputs)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SumN: ", inputs.size(), " inputs; need 1..", kMaxSumInputs));
    }
    struct Inputs {
      const float* p[kMaxSumInputs];
    } in;
    const int n = static_cast<int>(inputs.size());
    std::copy(inputs.begin(), inputs.end(), in.p);
    return EnqueueHostTask(stream, [in, n, out, count, scale] {
      SumNLoop(in.p, n, out, count, scale);
      return absl::OkStatus();
    });
  }

  absl::Status Fill(Stream* stream, float* x, uint64_t count, float value) override {
    return EnqueueHostTask(stream, [=] {
      FillLoop(x, count, value);
      return absl::OkStatus();
    });
  }

  absl::Status BiasAdd(Stream* stream, int rows, int cols, const float* bias, float* y) override {
    return EnqueueHostTask(stream, [=] {
      BiasAddLoop(rows, cols, bias, y);
      return absl::OkStatus();
    });
  }

  absl::Status BiasGrad(Stream* stream, int rows, int cols, const float* dy, float* db) override {
    return EnqueueHostTask(stream, [=] {
      BiasGradLoop(rows, cols, dy, db);
      return absl::OkStatus();
    });
  }

  absl::Status Relu(Stream* stream, uint64_t count, const float* x, float* y) override {
    return EnqueueHostTask(stream, [=] {
      ReluLoop(count, x, y);
      return absl::OkStatus();
    });
  }

  absl::Status ReluGrad(Stream* stream, uint64_t count, const float* y, const float* dy,
                        float* dx) override {
    return EnqueueHostTask(stream, [=] {
      ReluGradLoop(count, y, dy, dx);
      return absl::OkStatus();
    });
  }

  absl::Status SoftmaxCrossEntropy(Stream* stream, int rows, int cols, const float* logits,
                                   const int32_t* labels, float grad_scale, float* dlogits,
                                   float* loss_sum, int32_t* correct) override {
    return EnqueueHostTask(stream, [=]() -> absl::Status {
      double loss = 0.0;
      int32_t right = 0;
      std::vector<float> e(cols);
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
        for (int c = 0; c < cols; ++c) {
          e[c] = std::exp(z[c] - zmax);
          sum += e[c];
        }
        loss += static_cast<double>(std::log(sum) - (z[label] - zmax));
        if (dlogits != nullptr) {
          float* d = dlogits + static_cast<int64_t>(r) * cols;
          const float k = grad_scale / sum;
          for (int c = 0; c < cols; ++c) d[c] = k * e[c];
          d[label] -= grad_scale;
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
      SgdLoop(count, lr, grad, param);
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
      AdamLoop(count, beta1, beta2, epsilon, lr / c1, 1.0f / std::sqrt(c2), grad, m, v, param);
      return absl::OkStatus();
    });
  }
};

}  // namespace

std::unique_ptr<Kernels> CreateHostKernels() { return std::make_unique<HostKernels>(); }

void SetHostBlasThreads(int threads) { openblas_set_num_threads(threads < 1 ? 1 : threads); }
int HostBlasThreads() { return openblas_get_num_threads(); }

}  // namespace vgpu
