#include "vgpu/strategies/nn.h"

#include <cmath>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace strategies {

uint64_t MlpSpec::LayerParams(int layer) const {
  return static_cast<uint64_t>(in(layer)) * out(layer) + out(layer);
}

uint64_t MlpSpec::ParamOffset(int layer) const {
  uint64_t off = 0;
  for (int l = 0; l < layer; ++l) off += LayerParams(l);
  return off;
}

absl::Status MlpSpec::Validate() const {
  if (sizes.size() < 2) return absl::InvalidArgumentError("MlpSpec: need at least 2 sizes");
  for (int s : sizes) {
    if (s <= 0) return absl::InvalidArgumentError(absl::StrCat("MlpSpec: layer size ", s));
  }
  return absl::OkStatus();
}

std::vector<float> GlorotUniformInit(const MlpSpec& spec, uint64_t seed) {
  std::vector<float> p(spec.TotalParams(), 0.0f);
  std::mt19937_64 rng(seed);
  for (int l = 0; l < spec.num_layers(); ++l) {
    const double a = std::sqrt(6.0 / (spec.in(l) + spec.out(l)));
    float* w = p.data() + spec.ParamOffset(l);
    const uint64_t n = static_cast<uint64_t>(spec.in(l)) * spec.out(l);
    // Our own mapping of the 53 high bits, so the values do not depend on the standard
    // library's distribution implementation.
    for (uint64_t i = 0; i < n; ++i) {
      double u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
      w[i] = static_cast<float>((2.0 * u - 1.0) * a);
    }
  }
  return p;
}

uint64_t StageBytes(const MlpSpec& spec, int first, int last, int max_rows,
                    const OptimizerOptions& opt, int max_slots) {
  auto round = [](uint64_t b) { return (b + 255) / 256 * 256; };
  uint64_t params = spec.ParamOffset(last) - spec.ParamOffset(first);
  uint64_t bytes = round(params * 4) * (2 + opt.StateCopies());
  bytes += round(uint64_t{4} * max_rows * spec.in(first));                 // input
  if (first > 0) bytes += round(uint64_t{4} * max_rows * spec.in(first));  // input grad
  for (int l = first; l < last; ++l) bytes += 2 * round(uint64_t{4} * max_rows * spec.out(l));
  if (last == spec.num_layers()) bytes += round(uint64_t{4} * max_rows);  // labels
  bytes += 2 * round(uint64_t{4} * max_slots);
  return bytes;
}

absl::StatusOr<std::unique_ptr<MlpStage>> MlpStage::Create(LogicalDevice* device,
                                                           const MlpSpec& spec, int first, int last,
                                                           int max_rows,
                                                           const OptimizerOptions& opt,
                                                           int max_slots) {
  VGPU_RETURN_IF_ERROR(spec.Validate());
  if (device == nullptr || device->executor() == nullptr || device->stream() == nullptr) {
    return absl::InvalidArgumentError("MlpStage: device without executor or stream");
  }
  if (first < 0 || last > spec.num_layers() || first >= last) {
    return absl::InvalidArgumentError(
        absl::StrCat("MlpStage: bad layer range [", first, ", ", last, ") of ", spec.num_layers()));
  }
  if (max_rows <= 0 || max_slots <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MlpStage: max_rows ", max_rows, " and max_slots ", max_slots));
  }
  std::unique_ptr<MlpStage> s(new MlpStage());
  s->device_ = device;
  s->spec_ = spec;
  s->opt_ = opt;
  s->first_ = first;
  s->last_ = last;
  s->max_rows_ = max_rows;
  s->max_slots_ = max_slots;
  s->param_count_ = spec.ParamOffset(last) - spec.ParamOffset(first);
  VGPU_ASSIGN_OR_RETURN(s->blas_, device->executor()->GetBlas());
  VGPU_ASSIGN_OR_RETURN(s->kernels_, device->executor()->GetKernels());
  const int64_t n = static_cast<int64_t>(s->param_count_);
  VGPU_ASSIGN_OR_RETURN(s->params_, Tensor::Create(device, {n}));
  VGPU_ASSIGN_OR_RETURN(s->grads_, Tensor::Create(device, {n}));
  if (opt.kind == OptimizerKind::kAdam) {
    VGPU_ASSIGN_OR_RETURN(s->m_, Tensor::Create(device, {n}));
    VGPU_ASSIGN_OR_RETURN(s->v_, Tensor::Create(device, {n}));
  }
  VGPU_ASSIGN_OR_RETURN(s->input_, Tensor::Create(device, {max_rows, spec.in(first)}));
  if (first > 0) {
    VGPU_ASSIGN_OR_RETURN(s->input_grad_, Tensor::Create(device, {max_rows, spec.in(first)}));
  }
  for (int l = first; l < last; ++l) {
    VGPU_ASSIGN_OR_RETURN(Tensor a, Tensor::Create(device, {max_rows, spec.out(l)}));
    VGPU_ASSIGN_OR_RETURN(Tensor d, Tensor::Create(device, {max_rows, spec.out(l)}));
    s->acts_.push_back(std::move(a));
    s->dacts_.push_back(std::move(d));
  }
  if (s->is_final()) {
    VGPU_ASSIGN_OR_RETURN(s->labels_, Tensor::Create(device, {max_rows}, DType::kInt32));
  }
  VGPU_ASSIGN_OR_RETURN(s->loss_slots_, Tensor::Create(device, {max_slots}));
  VGPU_ASSIGN_OR_RETURN(s->correct_slots_, Tensor::Create(device, {max_slots}, DType::kInt32));
  VGPU_RETURN_IF_ERROR(device->stream()->Memset32(s->grads_.data(), 0, s->param_count_));
  return s;
}

MlpStage::~MlpStage() {
  if (device_ != nullptr) (void)device_->stream()->Synchronize();
}

absl::Status MlpStage::LoadParams(absl::Span<const float> all_params) {
  if (all_params.size() != spec_.TotalParams()) {
    return absl::InvalidArgumentError(absl::StrCat("LoadParams: ", all_params.size(),
                                                   " values for a model of ", spec_.TotalParams()));
  }
  auto staging =
      std::make_shared<std::vector<float>>(all_params.begin() + spec_.ParamOffset(first_),
                                           all_params.begin() + spec_.ParamOffset(last_));
  VGPU_RETURN_IF_ERROR(stream()->MemcpyH2D(params(), staging->data(), param_count_ * 4));
  VGPU_RETURN_IF_ERROR(stream()->LaunchHostFunc([staging] {}));
  if (opt_.kind == OptimizerKind::kAdam) {
    VGPU_RETURN_IF_ERROR(stream()->Memset32(m_.data(), 0, param_count_));
    VGPU_RETURN_IF_ERROR(stream()->Memset32(v_.data(), 0, param_count_));
  }
  return absl::OkStatus();
}

absl::Status MlpStage::ReadParams(std::vector<float>& all_params) const {
  all_params.resize(spec_.TotalParams());
  VGPU_RETURN_IF_ERROR(stream()->MemcpyD2H(all_params.data() + spec_.ParamOffset(first_), params(),
                                           param_count_ * 4));
  return stream()->Synchronize();
}

absl::Status MlpStage::Forward(int rows) {
  if (rows <= 0 || rows > max_rows_) {
    return absl::InvalidArgumentError(
        absl::StrCat("MlpStage::Forward: ", rows, " rows; the stage holds 1..", max_rows_));
  }
  Stream* s = stream();
  const float* x = input();
  for (int l = first_; l < last_; ++l) {
    const int in = spec_.in(l), out = spec_.out(l);
    const float* w = params() + (spec_.ParamOffset(l) - spec_.ParamOffset(first_));
    const float* b = w + static_cast<uint64_t>(in) * out;
    float* y = acts_[l - first_].data();
    // Row-major Y = X W is column-major Y^T = W^T X^T.
    VGPU_RETURN_IF_ERROR(blas_->Sgemm(s, Transpose::kNo, Transpose::kNo, out, rows, in, 1.0f, w,
                                      out, x, in, 0.0f, y, out));
    VGPU_RETURN_IF_ERROR(kernels_->BiasAdd(s, rows, out, b, y));
    if (l + 1 < spec_.num_layers()) {
      VGPU_RETURN_IF_ERROR(kernels_->Relu(s, static_cast<uint64_t>(rows) * out, y, y));
    }
    x = y;
  }
  return absl::OkStatus();
}

absl::Status MlpStage::Loss(int rows, float grad_scale, int slot) {
  if (!is_final()) return absl::FailedPreconditionError("MlpStage::Loss on a non-final stage");
  if (slot < 0 || slot >= max_slots_) {
    return absl::InvalidArgumentError(
        absl::StrCat("MlpStage::Loss: slot ", slot, " of ", max_slots_));
  }
  return kernels_->SoftmaxCrossEntropy(stream(), rows, out_width(), output(), labels(), grad_scale,
                                       grad_scale != 0.0f ? output_grad() : nullptr,
                                       loss_slots_.data() + slot, correct_slots_.int_data() + slot);
}

absl::Status MlpStage::Backward(int rows) {
  Stream* s = stream();
  for (int l = last_ - 1; l >= first_; --l) {
    const int in = spec_.in(l), out = spec_.out(l);
    const uint64_t off = spec_.ParamOffset(l) - spec_.ParamOffset(first_);
    const float* w = params() + off;
    float* dw = grads() + off;
    float* db = dw + static_cast<uint64_t>(in) * out;
    float* dy = dacts_[l - first_].data();
    const float* y = acts_[l - first_].data();
    const float* x = l == first_ ? input() : acts_[l - first_ - 1].data();
    if (l + 1 < spec_.num_layers()) {
      VGPU_RETURN_IF_ERROR(kernels_->ReluGrad(s, static_cast<uint64_t>(rows) * out, y, dy, dy));
    }
    // dW (in x out) = X^T dY: column-major dW^T = dY^T X.
    VGPU_RETURN_IF_ERROR(blas_->Sgemm(s, Transpose::kNo, Transpose::kYes, out, in, rows, 1.0f, dy,
                                      out, x, in, 0.0f, dw, out));
    VGPU_RETURN_IF_ERROR(kernels_->BiasGrad(s, rows, out, dy, db));
    float* dx = nullptr;
    if (l > first_) {
      dx = dacts_[l - first_ - 1].data();
    } else if (first_ > 0) {
      dx = input_grad();
    }
    if (dx != nullptr) {
      // dX = dY W^T: column-major dX^T = W dY^T (W^T stored column-major).
      VGPU_RETURN_IF_ERROR(blas_->Sgemm(s, Transpose::kYes, Transpose::kNo, in, rows, out, 1.0f, w,
                                        out, dy, out, 0.0f, dx, in));
    }
  }
  return absl::OkStatus();
}

absl::Status MlpStage::ZeroGradsAndSlot(int slot) {
  VGPU_RETURN_IF_ERROR(stream()->Memset32(grads(), 0, param_count_));
  if (is_final()) {
    VGPU_RETURN_IF_ERROR(stream()->Memset32(loss_slots_.data() + slot, 0, 1));
    VGPU_RETURN_IF_ERROR(stream()->Memset32(correct_slots_.int_data() + slot, 0, 1));
  }
  return absl::OkStatus();
}

absl::Status MlpStage::UpdateRange(int64_t step, const float* grads, uint64_t begin, uint64_t end) {
  if (begin > end || end > param_count_) {
    return absl::InvalidArgumentError(absl::StrCat("MlpStage::UpdateRange: [", begin, ", ", end,
                                                   ") of ", param_count_, " parameters"));
  }
  if (begin == end) return absl::OkStatus();
  const uint64_t n = end - begin;
  if (opt_.kind == OptimizerKind::kSgd) {
    return kernels_->SgdUpdate(stream(), n, opt_.lr, grads + begin, params() + begin);
  }
  return kernels_->AdamUpdate(stream(), n, opt_.lr, opt_.beta1, opt_.beta2, opt_.epsilon, step,
                              grads + begin, m_.data() + begin, v_.data() + begin,
                              params() + begin);
}

absl::Status MlpStage::AccumulateSlots(int n, double& loss_sum, int64_t& correct) const {
  if (!is_final() || n <= 0) return absl::OkStatus();
  std::vector<float> loss(n);
  std::vector<int32_t> right(n);
  VGPU_RETURN_IF_ERROR(stream()->MemcpyD2H(loss.data(), loss_slots_.data(), uint64_t{4} * n));
  VGPU_RETURN_IF_ERROR(
      stream()->MemcpyD2H(right.data(), correct_slots_.int_data(), uint64_t{4} * n));
  VGPU_RETURN_IF_ERROR(stream()->Synchronize());
  for (int i = 0; i < n; ++i) {
    loss_sum += loss[i];
    correct += right[i];
  }
  return absl::OkStatus();
}

std::string Mlp::name() const { return absl::StrCat("MLP ", absl::StrJoin(spec_.sizes, "-")); }

std::vector<Model::Variable> Mlp::Variables() const {
  std::vector<Variable> v;
  for (int l = 0; l < spec_.num_layers(); ++l) {
    const uint64_t w = spec_.ParamOffset(l);
    const uint64_t b = w + static_cast<uint64_t>(spec_.in(l)) * spec_.out(l);
    v.push_back({absl::StrCat("dense_", l, "/kernel"), w, b});
    v.push_back({absl::StrCat("dense_", l, "/bias"), b, spec_.ParamOffset(l + 1)});
  }
  return v;
}

std::string Mlp::LayerShape(int layer) const {
  return absl::StrCat(spec_.in(layer), "x", spec_.out(layer));
}

absl::StatusOr<std::unique_ptr<ModelStage>> Mlp::CreateStage(LogicalDevice* device, int first,
                                                             int last, int max_rows,
                                                             const OptimizerOptions& opt,
                                                             int max_slots) const {
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<MlpStage> stage,
                        MlpStage::Create(device, spec_, first, last, max_rows, opt, max_slots));
  return std::unique_ptr<ModelStage>(std::move(stage));
}

std::shared_ptr<const Model> MakeMlp(std::vector<int> sizes) {
  MlpSpec spec;
  spec.sizes = std::move(sizes);
  return std::make_shared<Mlp>(std::move(spec));
}

}  // namespace strategies
}  // namespace vgpu
