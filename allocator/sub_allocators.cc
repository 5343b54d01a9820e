#include "vgpu/allocator/sub_allocators.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace {

std::string P(const void* p) { return absl::StrFormat("%p", p); }

absl::Status CheckAligned(const std::string& who, void* p, uint64_t alignment) {
  if (alignment != 0 && reinterpret_cast<uintptr_t>(p) % alignment != 0) {
    return absl::InternalError(
        absl::StrCat(who, ": region ", P(p), " is not aligned to ", alignment, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string DeviceSubAllocator::name() const {
  return absl::StrCat(executor_->platform()->name(), " device ", executor_->ordinal());
}

absl::StatusOr<void*> DeviceSubAllocator::Alloc(uint64_t bytes, uint64_t alignment) {
  VGPU_ASSIGN_OR_RETURN(void* p, executor_->Allocate(bytes));
  absl::Status s = CheckAligned(name(), p, alignment);
  if (!s.ok()) {
    executor_->Free(p).IgnoreError();
    return s;
  }
  return p;
}

absl::Status DeviceSubAllocator::Free(void* ptr, uint64_t /*bytes*/) {
  return executor_->Free(ptr);
}

std::string PinnedHostSubAllocator::name() const {
  return absl::StrCat(executor_->platform()->name(), " pinned host memory (device ",
                      executor_->ordinal(), ")");
}

absl::StatusOr<void*> PinnedHostSubAllocator::Alloc(uint64_t bytes, uint64_t alignment) {
  VGPU_ASSIGN_OR_RETURN(void* p, executor_->HostAllocate(bytes));
  absl::Status s = CheckAligned(name(), p, alignment);
  if (!s.ok()) {
    executor_->HostFree(p).IgnoreError();
    return s;
  }
  return p;
}

absl::Status PinnedHostSubAllocator::Free(void* ptr, uint64_t /*bytes*/) {
  return executor_->HostFree(ptr);
}

absl::StatusOr<void*> HostMemorySubAllocator::Alloc(uint64_t bytes, uint64_t alignment) {
  if (alignment < 4096) alignment = 4096;
  uint64_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name(), ": cannot allocate ", FormatBytes(bytes)));
  }
  vgpu::MutexLock l(&mu_);
  live_[p] = bytes;
  return p;
}

absl::Status HostMemorySubAllocator::Free(void* ptr, uint64_t bytes) {
  {
    vgpu::MutexLock l(&mu_);
    auto it = live_.find(ptr);
    if (it == live_.end() || it->second != bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": ", P(ptr), " (", bytes, " bytes) was not allocated here"));
    }
    live_.erase(it);
  }
  std::free(ptr);
  return absl::OkStatus();
}

FakeSubAllocator::FakeSubAllocator(FakeSubAllocatorOptions options)
    : options_(options), next_(options.base_address) {}

absl::StatusOr<void*> FakeSubAllocator::Alloc(uint64_t bytes, uint64_t alignment) {
  vgpu::MutexLock l(&mu_);
  ++alloc_calls_;
  if (options_.fail_after_calls >= 0 && alloc_calls_ > options_.fail_after_calls) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name(), ": injected failure of call ", alloc_calls_, " (fails after ",
                     options_.fail_after_calls, " calls), request of ", FormatBytes(bytes)));
  }
  if (bytes == 0) return absl::InvalidArgumentError(absl::StrCat(name(), ": region of 0 bytes"));
  if (options_.capacity != 0 && bytes > options_.capacity - outstanding_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name(), ": request of ", FormatBytes(bytes), " with ", FormatBytes(outstanding_), " of ",
        FormatBytes(options_.capacity), " capacity outstanding"));
  }
  if (alignment < 256) alignment = 256;
  uint64_t addr = (next_ + alignment - 1) / alignment * alignment;
  next_ = addr + bytes;
  outstanding_ += bytes;
  live_[addr] = bytes;
  return reinterpret_cast<void*>(addr);
}

absl::Status FakeSubAllocator::Free(void* ptr, uint64_t bytes) {
  vgpu::MutexLock l(&mu_);
  auto it = live_.find(reinterpret_cast<uint64_t>(ptr));
  if (it == live_.end() || it->second != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": ", P(ptr), " (", bytes, " bytes) is not a live fake region"));
  }
  ++free_calls_;
  outstanding_ -= bytes;
  live_.erase(it);
  return absl::OkStatus();
}

int64_t FakeSubAllocator::alloc_calls() const {
  vgpu::MutexLock l(&mu_);
  return alloc_calls_;
}
int64_t FakeSubAllocator::free_calls() const {
  vgpu::MutexLock l(&mu_);
  return free_calls_;
}
uint64_t FakeSubAllocator::bytes_outstanding() const {
  vgpu::MutexLock l(&mu_);
  return outstanding_;
}
uint64_t FakeSubAllocator::regions_outstanding() const {
  vgpu::MutexLock l(&mu_);
  return live_.size();
}

}  // namespace vgpu
