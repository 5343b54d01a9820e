#include "vgpu/strategies/tensor.h"

#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace strategies {

absl::StatusOr<Tensor> Tensor::Create(LogicalDevice* device, std::vector<int64_t> shape,
                                      DType dtype) {
  if (device == nullptr || device->allocator() == nullptr || device->stream() == nullptr) {
    return absl::InvalidArgumentError("Tensor::Create: device without allocator or stream");
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Tensor::Create: negative dimension in [", absl::StrJoin(shape, ","), "]"));
    }
    n *= d;
  }
  Tensor t;
  VGPU_ASSIGN_OR_RETURN(t.buffer_, device->allocator()->Allocate(static_cast<uint64_t>(n) * 4));
  t.device_ = device;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.num_elements_ = n;
  return t;
}

absl::StatusOr<Tensor> Tensor::FromHost(LogicalDevice* device, std::vector<int64_t> shape,
                                        absl::Span<const float> values) {
  VGPU_ASSIGN_OR_RETURN(Tensor t, Create(device, std::move(shape)));
  if (static_cast<int64_t>(values.size()) != t.num_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Tensor::FromHost: ", values.size(), " values for ", t.DebugString()));
  }
  if (values.empty()) return t;
  // The staging copy lives until the stream has run the upload.
  auto staging = std::make_shared<std::vector<float>>(values.begin(), values.end());
  VGPU_RETURN_IF_ERROR(t.CopyFromHostAsync(staging->data(), t.bytes()));
  VGPU_RETURN_IF_ERROR(device->stream()->LaunchHostFunc([staging] {}));
  return t;
}

std::string Tensor::DebugString() const {
  return absl::StrCat(dtype_ == DType::kFloat32 ? "f32[" : "i32[", absl::StrJoin(shape_, ","),
                      "] on ", device_ ? device_->name() : "nothing");
}

absl::Status Tensor::CopyFromHostAsync(const void* src, uint64_t bytes) {
  if (bytes != this->bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyFromHostAsync: ", bytes, " bytes into ", DebugString()));
  }
  if (bytes == 0) return absl::OkStatus();
  return device_->stream()->MemcpyH2D(data(), src, bytes);
}

absl::Status Tensor::CopyToHost(void* dst, uint64_t bytes) const {
  if (bytes != this->bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyToHost: ", bytes, " bytes from ", DebugString()));
  }
  if (bytes > 0) VGPU_RETURN_IF_ERROR(device_->stream()->MemcpyD2H(dst, data(), bytes));
  return device_->stream()->Synchronize();
}

absl::StatusOr<std::vector<float>> Tensor::ToHost() const {
  std::vector<float> out(num_elements_);
  VGPU_RETURN_IF_ERROR(CopyToHost(out.data(), bytes()));
  return out;
}

absl::Status Tensor::CopyFrom(const Tensor& src) {
  if (src.num_elements() != num_elements_ || src.dtype() != dtype_) {
    return absl::InvalidArgumentError(
        absl::StrCat("Tensor::CopyFrom: ", src.DebugString(), " into ", DebugString()));
  }
  if (num_elements_ == 0) return absl::OkStatus();
  Stream* src_stream = src.device()->stream();
  Stream* dst_stream = device_->stream();
  if (src_stream == dst_stream) return dst_stream->MemcpyD2D(data(), src.data(), bytes());
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<Event> event, src_stream->executor()->CreateEvent());
  VGPU_RETURN_IF_ERROR(
      CopyAcrossStreams(src_stream, dst_stream, event.get(), data(), src.data(), bytes()));
  // The event must outlive the wait enqueued on dst_stream.
  std::shared_ptr<Event> keep(std::move(event));
  return dst_stream->LaunchHostFunc([keep] {});
}

absl::Status CopyAcrossStreams(Stream* src_stream, Stream* dst_stream, Event* event, void* dst,
                               const void* src, uint64_t bytes) {
  if (src_stream != dst_stream) {
    VGPU_RETURN_IF_ERROR(src_stream->RecordEvent(event));
    VGPU_RETURN_IF_ERROR(dst_stream->WaitEvent(event));
  }
  if (bytes == 0) return absl::OkStatus();
  return dst_stream->MemcpyD2D(dst, src, bytes);
}

}  // namespace strategies
}  // namespace vgpu
