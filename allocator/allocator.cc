#include "vgpu/allocator/allocator.h"

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/bytes.h"

namespace vgpu {

std::string AllocatorStats::ToString() const {
  return absl::StrFormat(
      "in use %s (peak %s), reserved %s (peak %s), limit %s, allocs %d, frees %d, "
      "largest alloc %s, largest free block %s, fragmentation %.3f, OOMs %d, "
      "regions mapped %d unmapped %d",
      FormatBytes(bytes_in_use), FormatBytes(peak_bytes_in_use), FormatBytes(bytes_reserved),
      FormatBytes(peak_bytes_reserved), bytes_limit ? FormatBytes(bytes_limit) : "none", num_allocs,
      num_frees, FormatBytes(largest_alloc_size), FormatBytes(largest_free_block), fragmentation,
      num_ooms, regions_mapped, regions_unmapped);
}

namespace {

vgpu::Mutex sink_mu;
std::function<void(absl::string_view)>* error_sink ABSL_GUARDED_BY(sink_mu) = nullptr;

void ReportFreeFailure(const absl::Status& s) {
  if (!s.ok()) ReportAllocatorError(absl::StrCat("vgpu: DeviceBuffer free failed: ", s.ToString()));
}

}  // namespace

void SetAllocatorErrorSink(std::function<void(absl::string_view message)> sink) {
  auto* next = sink ? new std::function<void(absl::string_view)>(std::move(sink)) : nullptr;
  std::function<void(absl::string_view)>* old;
  {
    vgpu::MutexLock l(&sink_mu);
    old = std::exchange(error_sink, next);
  }
  delete old;
}

void ReportAllocatorError(absl::string_view message) {
  vgpu::MutexLock l(&sink_mu);
  if (error_sink != nullptr) (*error_sink)(message);
}

DeviceBuffer::~DeviceBuffer() { ReportFreeFailure(Reset()); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    ReportFreeFailure(Reset());
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

absl::Status DeviceBuffer::Reset() {
  if (data_ == nullptr) return absl::OkStatus();
  void* p = std::exchange(data_, nullptr);
  size_ = 0;
  return std::exchange(allocator_, nullptr)->Deallocate(p);
}

void* DeviceBuffer::Release() {
  allocator_ = nullptr;
  size_ = 0;
  return std::exchange(data_, nullptr);
}

absl::StatusOr<void*> Allocator::AllocateRaw(uint64_t bytes, uint64_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": alignment ", alignment,
                                                   " is not a power of two (request of ", bytes,
                                                   " bytes)"));
  }
  if (alignment < kDefaultAlignment) alignment = kDefaultAlignment;
  if (bytes == 0) return nullptr;
  return DoAllocate(bytes, alignment);
}

absl::StatusOr<DeviceBuffer> Allocator::Allocate(uint64_t bytes, uint64_t alignment) {
  absl::StatusOr<void*> p = AllocateRaw(bytes, alignment);
  if (!p.ok()) return p.status();
  if (*p == nullptr) return DeviceBuffer();
  return DeviceBuffer(this, *p, bytes);
}

absl::Status Allocator::Deallocate(void* ptr) {
  if (ptr == nullptr) return absl::OkStatus();
  return DoDeallocate(ptr);
}

void Allocator::AddObserver(AllocatorObserver* observer) {
  if (observer == nullptr) return;
  StdMutexLock l(&observers_mu_);
  observers_.push_back(observer);
  has_observers_.store(true, std::memory_order_relaxed);
}

void Allocator::RemoveObserver(AllocatorObserver* observer) {
  StdMutexLock l(&observers_mu_);
  observers_.erase(std::remove(observers_.begin(), observers_.end(), observer), observers_.end());
  has_observers_.store(!observers_.empty(), std::memory_order_relaxed);
}

void Allocator::NotifySlow(const std::string& allocator_name, const AllocatorEvent& e) const {
  StdMutexLock l(&observers_mu_);
  for (AllocatorObserver* o : observers_) o->OnAllocatorEvent(allocator_name, e);
}

absl::Status Allocator::OutOfMemoryError(const OutOfMemoryReport& r) const {
  return absl::ResourceExhaustedError(
      absl::StrFormat("%s: out of memory allocating %s (%d bytes, rounded to %s): %s. %s. Hint: %s",
                      name(), FormatBytes(r.bytes), r.bytes, r.rounded, r.why, r.usage, r.hint));
}

}  // namespace vgpu
