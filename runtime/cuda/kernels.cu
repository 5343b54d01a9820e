// The device side of runtime/kernels.h for the cuda platform. nvcc compiles this file alone
// into one fatbin (sm_90 SASS + compute_80 PTX) that is embedded in the library and loaded
// with cuModuleLoadData; runtime/cuda/cuda_kernels.cc launches these by name. extern "C" keeps
// the names unmangled. Every kernel uses a grid-stride loop, so any grid size is correct.
#include <stdint.h>

#define VGPU_MAX_SUM_INPUTS 16

// Passed by value: the kernel reads the input pointers from the parameter bank, not memory.
struct VgpuSumArgs {
  const float* in[VGPU_MAX_SUM_INPUTS];
  int n;
};

extern "C" {

// out[i] = scale * sum_j in[j][i]. One pass: every input element is read exactly once.
__global__ void vgpu_sum_n(VgpuSumArgs args, float* out, unsigned long long count, float scale) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < count; i += stride) {
    float acc = args.in[0][i];
    for (int j = 1; j < args.n; ++j) acc += args.in[j][i];
    out[i] = acc * scale;
  }
}

// The same with float4 loads and stores; the launcher uses it only when every pointer is
// 16-byte aligned. Elements past the last full float4 are done by the first threads.
__global__ void vgpu_sum_n_vec4(VgpuSumArgs args, float* out, unsigned long long count,
                                float scale) {
  const unsigned long long vecs = count / 4;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (unsigned long long i = first; i < vecs; i += stride) {
    float4 acc = reinterpret_cast<const float4*>(args.in[0])[i];
    for (int j = 1; j < args.n; ++j) {
      float4 x = reinterpret_cast<const float4*>(args.in[j])[i];
      acc.x += x.x;
      acc.y += x.y;
      acc.z += x.z;
      acc.w += x.w;
    }
    acc.x *= scale;
    acc.y *= scale;
    acc.z *= scale;
    acc.w *= scale;
    reinterpret_cast<float4*>(out)[i] = acc;
  }
  const unsigned long long tail = vecs * 4 + first;
  if (tail < count) {
    float acc = args.in[0][tail];
    for (int j = 1; j < args.n; ++j) acc += args.in[j][tail];
    out[tail] = acc * scale;
  }
}

__global__ void vgpu_fill(float* x, unsigned long long count, float value) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < count; i += stride) {
    x[i] = value;
  }
}

__global__ void vgpu_bias_add(int rows, int cols, const float* bias, float* y) {
  const unsigned long long count = (unsigned long long)rows * cols;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < count; i += stride) {
    y[i] += bias[i % cols];
  }
}

// Block (32, 8): 32 adjacent columns (coalesced row reads), 8 row lanes reduced in shared
// memory. The order of additions is fixed, so results are deterministic.
__global__ void vgpu_bias_grad(int rows, int cols, const float* dy, float* db) {
  __shared__ float partial[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < cols) {
    for (int r = threadIdx.y; r < rows; r += 8) acc += dy[(long long)r * cols + c];
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float sum = 0.0f;
    for (int k = 0; k < 8; ++k) sum += partial[k][threadIdx.x];
    db[c] = sum;
  }
}

__global__ void vgpu_relu(unsigned long long count, const float* x, float* y) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < count; i += stride) {
    float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void vgpu_relu_grad(unsigned long long count, const float* y, const float* dy,
                               float* dx) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < count; i += stride) {
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }
}

// One warp per row. loss_sum and correct are zeroed by the launcher (memset on the stream)
// and accumulated with atomics. A label outside [0, cols) stores ((row + 1) << 32 | label) to
// `error` (mapped pinned host memory; one 8-byte store, so no atomics over PCIe and no torn
// value; with several bad rows any one is reported) and leaves that row's dlogits zero; the
// launcher turns it into the stream's InvalidArgument.
__global__ void vgpu_softmax_xent(int rows, int cols, const float* logits, const int* labels,
                                  float grad_scale, float* dlogits, float* loss_sum,
                                  int* correct, volatile unsigned long long* error) {
  const int lane = threadIdx.x & 31;
  const int warps_per_block = blockDim.x / 32;
  const int warp_stride = gridDim.x * warps_per_block;
  for (int r = blockIdx.x * warps_per_block + threadIdx.x / 32; r < rows; r += warp_stride) {
    const float* z = logits + (long long)r * cols;
    float* d = dlogits == nullptr ? nullptr : dlogits + (long long)r * cols;
    const int label = labels[r];
    if (label < 0 || label >= cols) {
      if (lane == 0) {
        *error = ((unsigned long long)(r + 1) << 32) | (unsigned)label;
        __threadfence_system();
      }
      if (d != nullptr) {
        for (int c = lane; c < cols; c += 32) d[c] = 0.0f;
      }
      continue;
    }
    // Max and argmax; ties go to the lowest column, as on the host.
    float best = -INFINITY;
    int best_c = cols;
    for (int c = lane; c < cols; c += 32) {
      float v = z[c];
      if (v > best) {
        best = v;
        best_c = c;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      float ob = __shfl_xor_sync(0xffffffffu, best, off);
      int oc = __shfl_xor_sync(0xffffffffu, best_c, off);
      if (ob > best || (ob == best && oc < best_c)) {
        best = ob;
        best_c = oc;
      }
    }
    float sum = 0.0f;
    for (int c = lane; c < cols; c += 32) sum += expf(z[c] - best);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (d != nullptr) {
      const float inv = 1.0f / sum;
      for (int c = lane; c < cols; c += 32) {
        d[c] = grad_scale * (expf(z[c] - best) * inv - (c == label ? 1.0f : 0.0f));
      }
    }
    if (lane == 0) {
      atomicAdd(loss_sum, logf(sum) - (z[label] - best));
      if (best_c == label) atomicAdd(correct, 1);
    }
  }
}

__global__ void vgpu_sgd_update(unsigned long long count, float lr, const float* grad,
                                float* param) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < count; i += stride) {
    param[i] -= lr * grad[i];
  }
}

// step_size = lr / (1 - beta1^t) and inv_sqrt_c2 = 1 / sqrt(1 - beta2^t) come from the host,
// computed exactly as the host kernel does.
__global__ void vgpu_adam_update(unsigned long long count, float beta1, float beta2,
                                 float epsilon, float step_size, float inv_sqrt_c2,
                                 const float* grad, float* m, float* v, float* param) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < count; i += stride) {
    float g = grad[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= step_size * mi / (sqrtf(vi) * inv_sqrt_c2 + epsilon);
  }
}

}  // extern "C"
