// Host emulations of runtime/cuda/kernels.cu for the CUDA simulator. Each reads its parameters
// exactly as the real kernel declares them (so a packing mistake in the launcher shows up as a
// wrong result or an illegal address), declares every range it touches (checked and fed to the
// race detector before it runs) and computes the same result on the stream's thread.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>

#include "vgpu/tests/cudasim/internal.h"

namespace vgpu::cudasim {
namespace {

using u64 = unsigned long long;

struct SumArgs {  // struct VgpuSumArgs in kernels.cu
  const float* in[16];
  int n;
};

template <typename T>
T Arg(void** params, int i) {
  T v;
  std::memcpy(&v, params[i], sizeof(T));
  return v;
}

CUdeviceptr D(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

template <typename T>
T* H(const WorkContext& wc, const T* p) {
  return static_cast<T*>(wc.host(D(p)));
}

}  // namespace

bool IsKnownKernel(const std::string& name) {
  static const std::set<std::string> kKnown = {
      "vgpu_sum_n", "vgpu_sum_n_vec4", "vgpu_fill",         "vgpu_bias_add",   "vgpu_bias_grad",
      "vgpu_relu",  "vgpu_relu_grad",  "vgpu_softmax_xent", "vgpu_sgd_update", "vgpu_adam_update"};
  return kKnown.count(name) != 0;
}

CUresult PrepareKernel(const std::string& name, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, void** p, std::vector<Access>* acc, Work* work) {
  if (gx == 0 || bx == 0 || by == 0 || gy != 1 || gz != 1 || bz != 1 || bx * by > 1024) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto read = [&](const void* ptr, uint64_t bytes) {
    acc->push_back(Access{D(ptr), bytes, false});
  };
  auto write = [&](const void* ptr, uint64_t bytes) {
    acc->push_back(Access{D(ptr), bytes, true});
  };
  if (name == "vgpu_sum_n" || name == "vgpu_sum_n_vec4") {
    auto a = Arg<SumArgs>(p, 0);
    auto out = Arg<float*>(p, 1);
    auto n = Arg<u64>(p, 2);
    auto scale = Arg<float>(p, 3);
    if (a.n < 1 || a.n > 16) return CUDA_ERROR_INVALID_VALUE;
    const bool vec4 = name == "vgpu_sum_n_vec4";
    for (int j = 0; j < a.n; ++j) read(a.in[j], n * 4);
    write(out, n * 4);
    *work = [a, out, n, scale, vec4](const WorkContext& wc) -> CUresult {
      if (vec4) {  // float4 loads fault on a misaligned address, as on the GPU
        for (int j = 0; j < a.n; ++j) {
          if (D(a.in[j]) % 16 != 0) return CUDA_ERROR_MISALIGNED_ADDRESS;
        }
        if (D(out) % 16 != 0) return CUDA_ERROR_MISALIGNED_ADDRESS;
      }
      const float* in[16];
      for (int j = 0; j < a.n; ++j) in[j] = H(wc, a.in[j]);
      float* o = H(wc, out);
      for (u64 i = 0; i < n; ++i) {
        float s = in[0][i];
        for (int j = 1; j < a.n; ++j) s += in[j][i];
        o[i] = s * scale;
      }
      return CUDA_SUCCESS;
    };
  } else if (name == "vgpu_fill") {
    auto x = Arg<float*>(p, 0);
    auto n = Arg<u64>(p, 1);
    auto v = Arg<float>(p, 2);
    write(x, n * 4);
    *work = [=](const WorkContext& wc) {
      std::fill_n(H(wc, x), n, v);
      return CUDA_SUCCESS;
    };
  } else if (name == "vgpu_bias_add") {
    int rows = Arg<int>(p, 0), cols = Arg<int>(p, 1);
    auto bias = Arg<const float*>(p, 2);
    auto y = Arg<float*>(p, 3);
    read(bias, uint64_t(cols) * 4);
    write(y, uint64_t(rows) * cols * 4);
    *work = [=](const WorkContext& wc) {
      const float* b = H(wc, bias);
      float* o = H(wc, y);
      for (long i = 0; i < long(rows) * cols; ++i) o[i] += b[i % cols];
      return CUDA_SUCCESS;
    };
  } else if (name == "vgpu_bias_grad") {
    if (bx != 32 || by != 8) return CUDA_ERROR_INVALID_VALUE;  // the kernel assumes (32, 8)
    int rows = Arg<int>(p, 0), cols = Arg<int>(p, 1);
    auto dy = Arg<const float*>(p, 2);
    auto db = Arg<float*>(p, 3);
    if (uint64_t(gx) * 32 < uint64_t(cols)) return CUDA_ERROR_INVALID_VALUE;  // too few blocks
    read(dy, uint64_t(rows) * cols * 4);
    write(db, uint64_t(cols) * 4);
    *work = [=](const WorkContext& wc) {
      const float* d = H(wc, dy);
      float* o = H(wc, db);
      for (int c = 0; c < cols; ++c) {
        float s = 0;
        for (int r = 0; r < rows; ++r) s += d[long(r) * cols + c];
        o[c] = s;
      }
      return CUDA_SUCCESS;
    };
  } else if (name == "vgpu_relu") {
    auto n = Arg<u64>(p, 0);
    auto x = Arg<const float*>(p, 1);
    auto y = Arg<float*>(p, 2);
    read(x, n * 4);
    write(y, n * 4);
    *work = [=](const WorkContext& wc) {
      const float* in = H(wc, x);
      float* o = H(wc, y);
      for (u64 i = 0; i < n; ++i) o[i] = in[i] > 0 ? in[i] : 0;
      return CUDA_SUCCESS;
    };
  } else if (name == "vgpu_relu_grad") {
    auto n = Arg<u64>(p, 0);
    auto y = Arg<const float*>(p, 1);
    auto dy = Arg<const float*>(p, 2);
    auto dx = Arg<float*>(p, 3);
    read(y, n * 4);
    read(dy, n * 4);
    write(dx, n * 4);
    *work = [=](const WorkContext& wc) {
      const float* yy = H(wc, y);
      const float* d = H(wc, dy);
      float* o = H(wc, dx);
      for (u64 i = 0; i < n; ++i) o[i] = yy[i] > 0 ? d[i] : 0;
      return CUDA_SUCCESS;
    };
  } else if (name == "vgpu_softmax_xent") {
    if (bx % 32 != 0) return CUDA_ERROR_INVALID_VALUE;  // one warp per row
    int rows = Arg<int>(p, 0), cols = Arg<int>(p, 1);
    auto z = Arg<const float*>(p, 2);
    auto labels = Arg<const int*>(p, 3);
    auto scale = Arg<float>(p, 4);
    auto dl = Arg<float*>(p, 5);
    auto loss = Arg<float*>(p, 6);
    auto correct = Arg<int*>(p, 7);
    auto error = Arg<unsigned long long*>(p, 8);
    read(z, uint64_t(rows) * cols * 4);
    read(labels, uint64_t(rows) * 4);
    if (dl != nullptr) write(dl, uint64_t(rows) * cols * 4);
    write(loss, 4);
    write(correct, 4);
    write(error, 8);
    *work = [=](const WorkContext& wc) {
      const float* zz = H(wc, z);
      const int* lab = H(wc, labels);
      float* d = dl == nullptr ? nullptr : H(wc, dl);
      float* ls = H(wc, loss);
      int* cr = H(wc, correct);
      auto* err = H(wc, error);
      for (int r = 0; r < rows; ++r) {
        const float* row = zz + long(r) * cols;
        int label = lab[r];
        if (label < 0 || label >= cols) {
          *err = (u64(r + 1) << 32) | unsigned(label);
          if (d != nullptr) std::fill_n(d + long(r) * cols, cols, 0.0f);
          continue;
        }
        int best = 0;
        for (int c = 1; c < cols; ++c) best = row[c] > row[best] ? c : best;
        float sum = 0;
        for (int c = 0; c < cols; ++c) sum += std::exp(row[c] - row[best]);
        *ls += std::log(sum) - (row[label] - row[best]);
        if (best == label) ++*cr;
        if (d != nullptr) {
          for (int c = 0; c < cols; ++c) {
            d[long(r) * cols + c] =
                scale * (std::exp(row[c] - row[best]) / sum - (c == label ? 1.0f : 0.0f));
          }
        }
      }
      return CUDA_SUCCESS;
    };
  } else if (name == "vgpu_sgd_update") {
    auto n = Arg<u64>(p, 0);
    auto lr = Arg<float>(p, 1);
    auto g = Arg<const float*>(p, 2);
    auto w = Arg<float*>(p, 3);
    read(g, n * 4);
    write(w, n * 4);
    *work = [=](const WorkContext& wc) {
      const float* gg = H(wc, g);
      float* ww = H(wc, w);
      for (u64 i = 0; i < n; ++i) ww[i] -= lr * gg[i];
      return CUDA_SUCCESS;
    };
  } else if (name == "vgpu_adam_update") {
    auto n = Arg<u64>(p, 0);
    float b1 = Arg<float>(p, 1), b2 = Arg<float>(p, 2), eps = Arg<float>(p, 3);
    float step_size = Arg<float>(p, 4), inv_sqrt_c2 = Arg<float>(p, 5);
    auto g = Arg<const float*>(p, 6);
    auto m = Arg<float*>(p, 7);
    auto v = Arg<float*>(p, 8);
    auto w = Arg<float*>(p, 9);
    read(g, n * 4);
    write(m, n * 4);
    write(v, n * 4);
    write(w, n * 4);
    *work = [=](const WorkContext& wc) {
      const float* gg = H(wc, g);
      float* mm = H(wc, m);
      float* vv = H(wc, v);
      float* ww = H(wc, w);
      for (u64 i = 0; i < n; ++i) {
        mm[i] = b1 * mm[i] + (1 - b1) * gg[i];
        vv[i] = b2 * vv[i] + (1 - b2) * gg[i] * gg[i];
        ww[i] -= step_size * mm[i] / (std::sqrt(vv[i]) * inv_sqrt_c2 + eps);
      }
      return CUDA_SUCCESS;
    };
  } else {
    return CUDA_ERROR_NOT_FOUND;
  }
  return CUDA_SUCCESS;
}

}  // namespace vgpu::cudasim
