// Tensor: a dense float32 (or int32, for labels) array on one logical device, owning a
// DeviceBuffer from that device's allocator. Copies are enqueued on the device's stream;
// cross-device copies are ordered after the source device's earlier work with an event.
//
// Thread safety: a Tensor is a move-only value; use one object from one thread at a time.
// The data it points to follows the stream rules of runtime/platform.h.
#ifndef VGPU_STRATEGIES_TENSOR_H_
#define VGPU_STRATEGIES_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vgpu/allocator/allocator.h"
#include "vgpu/devices/logical_device.h"

namespace vgpu {
namespace strategies {

enum class DType { kFloat32, kInt32 };

class Tensor {
 public:
  Tensor() = default;
  Tensor(Tensor&&) = default;
  Tensor& operator=(Tensor&&) = default;

  // Uninitialised memory for `shape` (every dimension >= 0) from `device`'s allocator.
  static absl::StatusOr<Tensor> Create(LogicalDevice* device, std::vector<int64_t> shape,
                                       DType dtype = DType::kFloat32);
  // Create + an asynchronous upload of `values` (copied to a staging area first, so the caller's
  // span may go away at once). values.size() must equal the element count.
  static absl::StatusOr<Tensor> FromHost(LogicalDevice* device, std::vector<int64_t> shape,
                                         absl::Span<const float> values);

  LogicalDevice* device() const { return device_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t num_elements() const { return num_elements_; }
  uint64_t bytes() const { return num_elements_ * 4; }
  float* data() const { return static_cast<float*>(buffer_.data()); }
  int32_t* int_data() const { return static_cast<int32_t*>(buffer_.data()); }
  std::string DebugString() const;  // "f32[256,784] on /job:.../device:GPU:0"

  // Enqueues host -> device on the device's stream; `src` must stay valid until the stream
  // has run it (Synchronize). Size mismatch is InvalidArgument.
  absl::Status CopyFromHostAsync(const void* src, uint64_t bytes);
  // Device -> host, waits for completion (and everything before it on the stream).
  absl::Status CopyToHost(void* dst, uint64_t bytes) const;
  absl::StatusOr<std::vector<float>> ToHost() const;
  // This tensor = `src` (same element count and dtype), on this device's stream, after all
  // work enqueued on `src`'s stream so far.
  absl::Status CopyFrom(const Tensor& src);

 private:
  LogicalDevice* device_ = nullptr;
  DeviceBuffer buffer_;
  std::vector<int64_t> shape_;
  DType dtype_ = DType::kFloat32;
  int64_t num_elements_ = 0;
};

// dst (on dst_stream) = src (written by src_stream's earlier work): records an event on
// src_stream and makes dst_stream wait for it when the streams differ, then copies.
// `event` is reused (a caller-owned event of src_stream's executor).
absl::Status CopyAcrossStreams(Stream* src_stream, Stream* dst_stream, Event* event, void* dst,
                               const void* src, uint64_t bytes);

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_TENSOR_H_
