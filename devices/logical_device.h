// A logical device: one slice of a physical device (or the host, for CPU:0) with its own name,
// hard memory limit, allocator and stream. Created and owned by devices::Runtime; users get
// plain pointers that live as long as the Runtime.
//
// Thread safety: all accessors are const and safe from any thread; the allocator is
// thread-safe; the stream follows runtime/platform.h's rules.
#ifndef VGPU_DEVICES_LOGICAL_DEVICE_H_
#define VGPU_DEVICES_LOGICAL_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "vgpu/allocator/allocator.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {

enum class DeviceType { kGpu, kCpu };

struct LogicalDeviceInfo {
  DeviceType type = DeviceType::kGpu;
  int id = 0;                 // GPU:<id> / CPU:<id>
  std::string name;           // canonical full name, /job:localhost/replica:0/task:0/device:GPU:0
  int physical_ordinal = -1;  // -1 for CPU:0
  uint64_t memory_limit = 0;  // hard limit in bytes (0 for CPU:0 = unlimited)
  int priority = 0;           // stream priority (lower = higher, as CUDA)
  int sm_count = 0;           // SMs of its partition (0 = whole device / not partitioned)
  bool allow_growth = false;
  std::string allocator_kind;  // "bfc", "vmm", "async", "host"
  // vgpu's own device memory on this device, charged to memory_limit (issue 13): the cuBLAS
  // workspace of its stream (allocated from its allocator) and the NCCL buffers a collective
  // over its physical devices takes (kept out of its allocator's limit).
  uint64_t blas_workspace = 0;
  uint64_t collective_reserve = 0;
  uint64_t runtime_overhead() const { return blas_workspace + collective_reserve; }
};

class LogicalDevice {
 public:
  LogicalDevice(LogicalDeviceInfo info, Executor* executor, std::unique_ptr<Stream> stream,
                std::unique_ptr<Allocator> allocator)
      : info_(std::move(info)),
        executor_(executor),
        stream_(std::move(stream)),
        allocator_(std::move(allocator)) {}
  ~LogicalDevice() {
    if (workspace_ == nullptr) return;
    // The stream's work is drained (Runtime's destructor): give the library its own back.
    blas_->SetWorkspace(stream_.get(), nullptr, 0).IgnoreError();
    allocator_->Deallocate(workspace_).IgnoreError();
  }
  LogicalDevice(const LogicalDevice&) = delete;
  LogicalDevice& operator=(const LogicalDevice&) = delete;

  // Gives `blas` a workspace of `bytes` from this device's allocator for work on its stream
  // (Runtime::Create; once).
  absl::Status SetUpBlasWorkspace(Blas* blas, uint64_t bytes) {
    absl::StatusOr<void*> w = allocator_->AllocateRaw(bytes);
    if (!w.ok()) return w.status();
    absl::Status s = blas->SetWorkspace(stream_.get(), *w, bytes);
    if (!s.ok()) {
      allocator_->Deallocate(*w).IgnoreError();
      return s;
    }
    blas_ = blas;
    workspace_ = *w;
    info_.blas_workspace = bytes;
    return absl::OkStatus();
  }

  const LogicalDeviceInfo& info() const { return info_; }
  const std::string& name() const { return info_.name; }
  DeviceType type() const { return info_.type; }
  bool is_gpu() const { return info_.type == DeviceType::kGpu; }
  int id() const { return info_.id; }
  uint64_t memory_limit() const { return info_.memory_limit; }
  // GPU: its physical device. CPU:0: physical device 0 when there is one (for pinned memory
  // and copies), else nullptr.
  Executor* executor() const { return executor_; }
  // The device's compute/copy stream (CPU:0: a stream of physical device 0, or nullptr).
  Stream* stream() const { return stream_.get(); }
  Allocator* allocator() const { return allocator_.get(); }

 private:
  LogicalDeviceInfo info_;
  Executor* executor_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Allocator> allocator_;
  Blas* blas_ = nullptr;
  void* workspace_ = nullptr;
};

}  // namespace vgpu

#endif  // VGPU_DEVICES_LOGICAL_DEVICE_H_
