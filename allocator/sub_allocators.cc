#include "vgpu/allocator/sub_allocators.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vgpu/allocator/allocator.h"
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

absl::StatusOr<void*> SubAllocator::GatherPages(void*, absl::Span<const PageRun>) {
  return absl::UnimplementedError(absl::StrCat(name(), " cannot move pages"));
}

absl::Status SubAllocator::ReturnPages(void*, void*, absl::Span<const PageRun>) {
  return absl::UnimplementedError(absl::StrCat(name(), " cannot move pages"));
}

absl::StatusOr<void*> SubAllocator::MapEdgeView(void*, void*) {
  return absl::UnimplementedError(absl::StrCat(name(), " cannot map edge views"));
}

absl::Status SubAllocator::UnmapEdgeView(void*) {
  return absl::UnimplementedError(absl::StrCat(name(), " cannot map edge views"));
}

absl::StatusOr<std::unique_ptr<PagedDeviceSubAllocator>> PagedDeviceSubAllocator::Create(
    Executor* executor) {
  absl::StatusOr<uint64_t> g = executor->VirtualMemoryGranularity();
  if (!g.ok() || *g == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        executor->platform()->name(), " device ", executor->ordinal(),
        " has no virtual memory calls", g.ok() ? "" : absl::StrCat(": ", g.status().message())));
  }
  return std::unique_ptr<PagedDeviceSubAllocator>(new PagedDeviceSubAllocator(executor, *g));
}

PagedDeviceSubAllocator::~PagedDeviceSubAllocator() {
  // The allocator above gives every region back first; whatever it did not is leaked rather
  // than unmapped under a possible user.
}

std::string PagedDeviceSubAllocator::name() const {
  return absl::StrCat(executor_->platform()->name(), " device ", executor_->ordinal(), " pages");
}

void PagedDeviceSubAllocator::ReleaseHandles(const PhysicalMemoryHandle* handles, size_t n) {
  size_t released = 0;
  absl::Status s = executor_->ReleasePhysicalMemories(handles, n, &released);
  if (!s.ok()) ReportAllocatorError(absl::StrCat("vgpu: ", name(), ": ", s.ToString()));
}

absl::StatusOr<void*> PagedDeviceSubAllocator::Alloc(uint64_t bytes, uint64_t alignment) {
  if (bytes == 0 || bytes > UINT64_MAX - page_) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": cannot map a region of ", bytes, " bytes"));
  }
  const uint64_t whole = (bytes + page_ - 1) / page_ * page_;
  const size_t n = whole / page_;
  PagedRegion r;
  r.bytes = whole;
  r.pages.resize(n);
  for (size_t made = 0; made < n;) {
    absl::StatusOr<size_t> k =
        executor_->CreatePhysicalMemories(page_, n - made, r.pages.data() + made);
    if (!k.ok()) {
      ReleaseHandles(r.pages.data(), made);
      return k.status();
    }
    made += *k;
  }
  absl::StatusOr<void*> va = executor_->ReserveAddressRange(whole);
  if (!va.ok()) {
    ReleaseHandles(r.pages.data(), n);
    return va.status();
  }
  absl::Status s = executor_->MapAll(*va, r.pages.data(), n);
  if (s.ok()) s = CheckAligned(name(), *va, alignment);
  if (!s.ok()) {
    executor_->Unmap(*va, whole).IgnoreError();
    executor_->FreeAddressRange(*va, whole).IgnoreError();
    ReleaseHandles(r.pages.data(), n);
    return s;
  }
  vgpu::MutexLock l(&mu_);
  regions_.emplace(reinterpret_cast<uint64_t>(*va), std::move(r));
  return *va;
}

absl::Status PagedDeviceSubAllocator::Free(void* ptr, uint64_t /*bytes*/) {
  PagedRegion r;
  {
    vgpu::MutexLock l(&mu_);
    auto it = regions_.find(reinterpret_cast<uint64_t>(ptr));
    if (it == regions_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": ", P(ptr), " is not a region it handed out"));
    }
    r = std::move(it->second);
    regions_.erase(it);
  }
  if (!executor_->Unmap(ptr, r.bytes).ok()) {
    // Pages still lent out (an allocator that did not return them): page by page.
    for (uint64_t o = 0; o < r.bytes; o += page_) {
      executor_->Unmap(static_cast<char*>(ptr) + o, page_).IgnoreError();
    }
  }
  VGPU_RETURN_IF_ERROR(executor_->FreeAddressRange(ptr, r.bytes));
  ReleaseHandles(r.pages.data(), r.pages.size());
  return absl::OkStatus();
}

absl::Status PagedDeviceSubAllocator::CheckRun(const PageRun& run, const PagedRegion& r,
                                               const void* region) const {
  if (run.bytes == 0 || run.offset % page_ != 0 || run.bytes % page_ != 0 || run.offset > r.bytes ||
      run.bytes > r.bytes - run.offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), ": pages [", run.offset, ", +", run.bytes, ") are not whole pages of ", P(region)));
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> PagedDeviceSubAllocator::GatherPages(void* region,
                                                           absl::Span<const PageRun> runs) {
  const uint64_t base = reinterpret_cast<uint64_t>(region);
  uint64_t total = 0;
  std::vector<PhysicalMemoryHandle> handles;
  {
    vgpu::MutexLock l(&mu_);
    auto it = regions_.find(base);
    if (it == regions_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": ", P(region), " is not a region it handed out"));
    }
    for (const PageRun& run : runs) {
      VGPU_RETURN_IF_ERROR(CheckRun(run, it->second, region));
      for (uint64_t o = run.offset; o < run.offset + run.bytes; o += page_) {
        handles.push_back(it->second.pages[o / page_]);
      }
      total += run.bytes;
    }
  }
  if (total == 0) return absl::InvalidArgumentError(absl::StrCat(name(), ": no pages to gather"));
  // Mapped at the new range first (a page may be mapped at two places at once), then unmapped
  // where it was, so a failure leaves everything where it was.
  VGPU_ASSIGN_OR_RETURN(void* va, executor_->ReserveAddressRange(total));
  if (absl::Status s = executor_->MapAll(va, handles.data(), handles.size()); !s.ok()) {
    executor_->FreeAddressRange(va, total).IgnoreError();
    return s;
  }
  for (const PageRun& run : runs) {
    for (uint64_t o = run.offset; o < run.offset + run.bytes; o += page_) {
      absl::Status s = executor_->Unmap(reinterpret_cast<void*>(base + o), page_);
      // Still mapped there too: harmless (the allocator lends those pages out, so nothing uses
      // the old address), but worth saying.
      if (!s.ok()) ReportAllocatorError(absl::StrCat("vgpu: ", name(), ": ", s.ToString()));
    }
  }
  vgpu::MutexLock l(&mu_);
  ranges_[reinterpret_cast<uint64_t>(va)] = total;
  return va;
}

absl::Status PagedDeviceSubAllocator::ReturnPages(void* range, void* region,
                                                  absl::Span<const PageRun> runs) {
  const uint64_t base = reinterpret_cast<uint64_t>(region);
  uint64_t total = 0;
  std::vector<std::pair<uint64_t, std::vector<PhysicalMemoryHandle>>> back;
  {
    vgpu::MutexLock l(&mu_);
    auto r = ranges_.find(reinterpret_cast<uint64_t>(range));
    auto it = regions_.find(base);
    if (r == ranges_.end() || it == regions_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": ", P(range), " is not a range gathered from ", P(region)));
    }
    for (const PageRun& run : runs) {
      VGPU_RETURN_IF_ERROR(CheckRun(run, it->second, region));
      back.emplace_back(run.offset,
                        std::vector<PhysicalMemoryHandle>(
                            it->second.pages.begin() + run.offset / page_,
                            it->second.pages.begin() + (run.offset + run.bytes) / page_));
      total += run.bytes;
    }
    if (total != r->second) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": the runs cover ", total, " bytes, the range ", r->second));
    }
  }
  for (const auto& [offset, handles] : back) {
    VGPU_RETURN_IF_ERROR(
        executor_->MapAll(reinterpret_cast<void*>(base + offset), handles.data(), handles.size()));
  }
  VGPU_RETURN_IF_ERROR(executor_->Unmap(range, total));
  VGPU_RETURN_IF_ERROR(executor_->FreeAddressRange(range, total));
  vgpu::MutexLock l(&mu_);
  ranges_.erase(reinterpret_cast<uint64_t>(range));
  return absl::OkStatus();
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
