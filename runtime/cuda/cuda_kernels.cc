// runtime/kernels.h on the cuda platform: argument checks, launch geometry and cuLaunchKernel
// of the kernels in runtime/cuda/kernels.cu (from the module of the stream's context).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/cuda/cuda_executor.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/runtime/status.h"

namespace vgpu::cuda {
namespace {

// Must match struct VgpuSumArgs in kernels.cu.
struct SumArgs {
  const float* in[Kernels::kMaxSumInputs];
  int n;
};

constexpr unsigned kThreads = 256;

class CudaKernels : public Kernels {
 public:
  explicit CudaKernels(CudaExecutor* executor) : executor_(executor) {}

  absl::Status SumN(Stream* stream, absl::Span<const float* const> inputs, float* out,
                    uint64_t count, float scale) override {
    if (inputs.empty() || inputs.size() > static_cast<size_t>(kMaxSumInputs)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SumN: ", inputs.size(), " inputs; need 1..", kMaxSumInputs));
    }
    SumArgs args = {};
    args.n = static_cast<int>(inputs.size());
    bool aligned = reinterpret_cast<uintptr_t>(out) % 16 == 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      args.in[i] = inputs[i];
      aligned = aligned && reinterpret_cast<uintptr_t>(inputs[i]) % 16 == 0;
    }
    if (count == 0) return absl::OkStatus();
    const uint64_t work = aligned ? std::max<uint64_t>(count / 4, 1) : count;
    void* params[] = {&args, &out, &count, &scale};
    return Launch(stream, aligned ? KernelId::kSumNVec4 : KernelId::kSumN, Blocks(work), kThreads,
                  params, "SumN");
  }

  absl::Status Fill(Stream* stream, float* x, uint64_t count, float value) override {
    if (count == 0) return absl::OkStatus();
    void* params[] = {&x, &count, &value};
    return Launch(stream, KernelId::kFill, Blocks(count), kThreads, params, "Fill");
  }

  absl::Status BiasAdd(Stream* stream, int rows, int cols, const float* bias, float* y) override {
    VGPU_RETURN_IF_ERROR(CheckShape("BiasAdd", rows, cols));
    if (rows == 0 || cols == 0) return absl::OkStatus();
    void* params[] = {&rows, &cols, &bias, &y};
    return Launch(stream, KernelId::kBiasAdd, Blocks(uint64_t(rows) * cols), kThreads, params,
                  "BiasAdd");
  }

  absl::Status BiasGrad(Stream* stream, int rows, int cols, const float* dy, float* db) override {
    VGPU_RETURN_IF_ERROR(CheckShape("BiasGrad", rows, cols));
    if (cols == 0) return absl::OkStatus();
    void* params[] = {&rows, &cols, &dy, &db};
    return Launch(stream, KernelId::kBiasGrad, (cols + 31) / 32, 32, params, "BiasGrad",
                  /*block_y=*/8);
  }

  absl::Status Relu(Stream* stream, uint64_t count, const float* x, float* y) override {
    if (count == 0) return absl::OkStatus();
    void* params[] = {&count, &x, &y};
    return Launch(stream, KernelId::kRelu, Blocks(count), kThreads, params, "Relu");
  }

  absl::Status ReluGrad(Stream* stream, uint64_t count, const float* y, const float* dy,
                        float* dx) override {
    if (count == 0) return absl::OkStatus();
    void* params[] = {&count, &y, &dy, &dx};
    return Launch(stream, KernelId::kReluGrad, Blocks(count), kThreads, params, "ReluGrad");
  }

  absl::Status SoftmaxCrossEntropy(Stream* stream, int rows, int cols, const float* logits,
                                   const int32_t* labels, float grad_scale, float* dlogits,
                                   float* loss_sum, int32_t* correct) override {
    VGPU_RETURN_IF_ERROR(CheckShape("SoftmaxCrossEntropy", rows, cols));
    if (cols == 0) return absl::InvalidArgumentError("SoftmaxCrossEntropy: zero classes");
    if (loss_sum == nullptr || correct == nullptr) {
      return absl::InvalidArgumentError("SoftmaxCrossEntropy: null loss_sum or correct");
    }
    VGPU_ASSIGN_OR_RETURN(CudaStream * s, Check(stream, "SoftmaxCrossEntropy"));
    VGPU_ASSIGN_OR_RETURN(CUdeviceptr slot, s->DeviceErrorSlot());
    // The kernel accumulates with atomics: zero both results first, in stream order.
    VGPU_RETURN_IF_ERROR(s->Memset32(loss_sum, 0, 1));
    VGPU_RETURN_IF_ERROR(s->Memset32(correct, 0, 1));
    if (rows == 0) return absl::OkStatus();
    auto* error = reinterpret_cast<unsigned long long*>(slot);
    void* params[] = {&rows,    &cols,     &logits,  &labels, &grad_scale,
                      &dlogits, &loss_sum, &correct, &error};
    constexpr unsigned kRowsPerBlock = kThreads / 32;
    VGPU_RETURN_IF_ERROR(Launch(stream, KernelId::kSoftmaxXent,
                                BlocksFor((rows + kRowsPerBlock - 1) / kRowsPerBlock), kThreads,
                                params, "SoftmaxCrossEntropy"));
    return s->CheckDeviceErrorSlot([cols](int row, int label) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SoftmaxCrossEntropy: label ", label, " of row ", row, " is outside [0, ", cols, ")"));
    });
  }

  absl::Status SgdUpdate(Stream* stream, uint64_t count, float lr, const float* grad,
                         float* param) override {
    if (count == 0) return absl::OkStatus();
    void* params[] = {&count, &lr, &grad, &param};
    return Launch(stream, KernelId::kSgdUpdate, Blocks(count), kThreads, params, "SgdUpdate");
  }

  absl::Status AdamUpdate(Stream* stream, uint64_t count, float lr, float beta1, float beta2,
                          float epsilon, int64_t step, const float* grad, float* m, float* v,
                          float* param) override {
    if (step < 1) return absl::InvalidArgumentError("AdamUpdate: step must be >= 1");
    if (count == 0) return absl::OkStatus();
    // Exactly as the host kernel computes them, so both platforms agree to rounding.
    const float c1 = 1.0f - static_cast<float>(std::pow(beta1, static_cast<double>(step)));
    const float c2 = 1.0f - static_cast<float>(std::pow(beta2, static_cast<double>(step)));
    float step_size = lr / c1;
    float inv_sqrt_c2 = 1.0f / std::sqrt(c2);
    void* params[] = {&count,       &beta1, &beta2, &epsilon, &step_size,
                      &inv_sqrt_c2, &grad,  &m,     &v,       &param};
    return Launch(stream, KernelId::kAdamUpdate, Blocks(count), kThreads, params, "AdamUpdate");
  }

 private:
  static absl::Status CheckShape(const char* what, int rows, int cols) {
    if (rows < 0 || cols < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": negative shape ", rows, " x ", cols));
    }
    return absl::OkStatus();
  }

  // Grid-stride kernels: enough blocks to fill the device a few times over, no more.
  unsigned Blocks(uint64_t work) const { return BlocksFor((work + kThreads - 1) / kThreads); }
  unsigned BlocksFor(uint64_t blocks) const {
    const uint64_t cap = static_cast<uint64_t>(std::max(1, executor_->sm_count())) * 16;
    return static_cast<unsigned>(std::clamp<uint64_t>(blocks, 1, cap));
  }

  absl::StatusOr<CudaStream*> Check(Stream* stream, const char* what) {
    CudaStream* s = AsCudaStream(stream);
    if (s == nullptr || s->cuda_executor() != executor_) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the stream does not belong to ", executor_->label()));
    }
    return s;
  }

  absl::Status Launch(Stream* stream, KernelId id, unsigned blocks, unsigned threads, void** params,
                      const char* what, unsigned block_y = 1) {
    VGPU_ASSIGN_OR_RETURN(CudaStream * s, Check(stream, what));
    VGPU_CUDA_SCOPE(executor_->driver(), s->context());
    VGPU_RETURN_IF_ERROR(s->Begin());
    VGPU_ASSIGN_OR_RETURN(const KernelFunctions* fns, executor_->KernelFunctionsFor(s));
    return s->Check(
        executor_->driver().cuLaunchKernel(fns->get(id), blocks, 1, 1, threads, block_y, 1, 0,
                                           s->handle(), params, nullptr),
        absl::StrCat("cuLaunchKernel(", kKernelNames[static_cast<int>(id)], ") for ", what));
  }

  CudaExecutor* executor_;
};

}  // namespace

std::unique_ptr<Kernels> CreateCudaKernels(CudaExecutor* executor) {
  return std::make_unique<CudaKernels>(executor);
}

}  // namespace vgpu::cuda
