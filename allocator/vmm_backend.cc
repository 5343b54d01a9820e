#include "vgpu/allocator/vmm_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace {

class ExecutorVmmBackend final : public VmmBackend {
 public:
  ExecutorVmmBackend(Executor* executor, uint64_t granularity)
      : executor_(executor), granularity_(granularity) {}

  std::string name() const override {
    return absl::StrCat(executor_->platform()->name(), "-vmm:", executor_->ordinal());
  }
  uint64_t granularity() const override { return granularity_; }
  bool fake() const override { return false; }

  absl::StatusOr<void*> ReserveAddressRange(uint64_t bytes) override {
    return executor_->ReserveAddressRange(bytes);
  }
  absl::Status FreeAddressRange(void* va, uint64_t bytes) override {
    return executor_->FreeAddressRange(va, bytes);
  }
  absl::StatusOr<PhysicalMemoryHandle> CreatePhysicalMemory(uint64_t bytes) override {
    return executor_->CreatePhysicalMemory(bytes);
  }
  absl::Status ReleasePhysicalMemory(PhysicalMemoryHandle handle) override {
    return executor_->ReleasePhysicalMemory(handle);
  }
  absl::Status Map(void* va, uint64_t bytes, PhysicalMemoryHandle handle,
                   uint64_t offset) override {
    return executor_->Map(va, bytes, handle, offset);
  }
  absl::Status Unmap(void* va, uint64_t bytes) override { return executor_->Unmap(va, bytes); }

 private:
  Executor* executor_;
  uint64_t granularity_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<VmmBackend>> CreateExecutorVmmBackend(Executor* executor) {
  if (executor == nullptr) return absl::InvalidArgumentError("vmm backend: executor is null");
  VGPU_ASSIGN_OR_RETURN(uint64_t granularity, executor->VirtualMemoryGranularity());
  if (granularity == 0 || (granularity & (granularity - 1)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("vmm backend: device ", executor->ordinal(),
                                                      " reports VMM granularity ", granularity,
                                                      " (need a power of two)"));
  }
  return std::unique_ptr<VmmBackend>(new ExecutorVmmBackend(executor, granularity));
}

FakeVmmBackend::FakeVmmBackend(uint64_t granularity, uint64_t physical_capacity, bool checked,
                               uint64_t va_base)
    : granularity_(granularity),
      physical_capacity_(physical_capacity),
      checked_(checked),
      next_va_(granularity == 0 ? va_base
                                : (va_base + granularity - 1) / granularity * granularity) {}

absl::Status FakeVmmBackend::CheckGranular(const char* what, uint64_t bytes) const {
  // A mask for the usual power-of-two granule (a division costs more than the rest of a call).
  const bool pow2 = (granularity_ & (granularity_ - 1)) == 0;
  if (bytes == 0 || (pow2 ? (bytes & (granularity_ - 1)) : bytes % granularity_) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("fake-vmm ", what, ": ", bytes,
                                                   " bytes is not a positive multiple of the "
                                                   "granularity ",
                                                   granularity_));
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> FakeVmmBackend::ReserveAddressRange(uint64_t bytes) {
  VGPU_RETURN_IF_ERROR(CheckGranular("ReserveAddressRange", bytes));
  // Leave one granule unreserved between ranges so an overrun is caught as "not reserved".
  uint64_t va = next_va_.fetch_add(bytes + granularity_);
  if (!checked_) {
    ++unchecked_ranges_;
    return reinterpret_cast<void*>(va);
  }
  std::lock_guard<std::mutex> l(mu_);
  ranges_.emplace(va, bytes);
  return reinterpret_cast<void*>(va);
}

absl::Status FakeVmmBackend::FreeAddressRange(void* va, uint64_t bytes) {
  if (!checked_) {
    --unchecked_ranges_;
    return absl::OkStatus();
  }
  std::lock_guard<std::mutex> l(mu_);
  uint64_t v = reinterpret_cast<uint64_t>(va);
  auto it = ranges_.find(v);
  if (it == ranges_.end() || it->second != bytes) {
    return absl::InvalidArgumentError(absl::StrCat("fake-vmm FreeAddressRange: 0x", absl::Hex(v),
                                                   " + ", bytes, " is not a reserved range"));
  }
  for (uint64_t g = v; g < v + bytes; g += granularity_) {
    if (granules_.contains(g)) {
      return absl::FailedPreconditionError(absl::StrCat("fake-vmm FreeAddressRange: granule at 0x",
                                                        absl::Hex(g), " is still mapped"));
    }
  }
  ranges_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<PhysicalMemoryHandle> FakeVmmBackend::CreatePhysicalMemory(uint64_t bytes) {
  VGPU_RETURN_IF_ERROR(CheckGranular("CreatePhysicalMemory", bytes));
  auto refuse = [&](uint64_t created) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "fake-vmm CreatePhysicalMemory of ", FormatBytes(bytes), ": ", FormatBytes(created), " of ",
        FormatBytes(physical_capacity_), " already created"));
  };
  if (!checked_) {
    // Counters only, no lock: the capacity check and the update are one compare-exchange.
    uint64_t created = physical_bytes_.load(std::memory_order_relaxed);
    do {
      if (physical_capacity_ != 0 && created + bytes > physical_capacity_) return refuse(created);
    } while (!physical_bytes_.compare_exchange_weak(created, created + bytes));
    return PhysicalMemoryHandle{next_handle_++, bytes};
  }
  std::lock_guard<std::mutex> l(mu_);
  if (physical_capacity_ != 0 && physical_bytes_ + bytes > physical_capacity_) {
    return refuse(physical_bytes_);
  }
  uint64_t h = next_handle_++;
  handles_.emplace(h, bytes);
  physical_bytes_ += bytes;
  return PhysicalMemoryHandle{h, bytes};
}

absl::Status FakeVmmBackend::ReleasePhysicalMemory(PhysicalMemoryHandle handle) {
  if (!checked_) {
    physical_bytes_ -= handle.bytes;
    return absl::OkStatus();
  }
  std::lock_guard<std::mutex> l(mu_);
  auto it = handles_.find(handle.value);
  if (it == handles_.end() || it->second != handle.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("fake-vmm ReleasePhysicalMemory: unknown handle ", handle.value));
  }
  auto refs = map_refs_.find(handle.value);
  if (refs != map_refs_.end() && refs->second != 0) {
    return absl::FailedPreconditionError(absl::StrCat("fake-vmm ReleasePhysicalMemory: handle ",
                                                      handle.value, " still has ", refs->second,
                                                      " mapped granules"));
  }
  map_refs_.erase(handle.value);
  physical_bytes_ -= it->second;
  handles_.erase(it);
  return absl::OkStatus();
}

absl::Status FakeVmmBackend::Map(void* va, uint64_t bytes, PhysicalMemoryHandle handle,
                                 uint64_t offset) {
  VGPU_RETURN_IF_ERROR(CheckGranular("Map", bytes));
  uint64_t v = reinterpret_cast<uint64_t>(va);
  if (!checked_) {
    mapped_bytes_ += bytes;
    return absl::OkStatus();
  }
  std::lock_guard<std::mutex> l(mu_);
  auto h = handles_.find(handle.value);
  if (h == handles_.end() || offset % granularity_ != 0 || offset + bytes > h->second) {
    return absl::InvalidArgumentError(absl::StrCat("fake-vmm Map: unknown handle ", handle.value,
                                                   " or range past its end (offset ", offset, ", ",
                                                   bytes, " bytes)"));
  }
  auto r = ranges_.upper_bound(v);
  if (v % granularity_ != 0 || r == ranges_.begin() || (--r, v + bytes > r->first + r->second)) {
    return absl::InvalidArgumentError(absl::StrCat("fake-vmm Map: 0x", absl::Hex(v), " + ", bytes,
                                                   " is not inside a reserved range"));
  }
  for (uint64_t g = v; g < v + bytes; g += granularity_) {
    if (granules_.contains(g)) {
      return absl::FailedPreconditionError(
          absl::StrCat("fake-vmm Map: granule at 0x", absl::Hex(g), " is already mapped"));
    }
  }
  for (uint64_t i = 0; i < bytes; i += granularity_) {
    granules_.emplace(v + i, std::make_pair(handle.value, offset + i));
  }
  map_refs_[handle.value] += bytes / granularity_;
  mapped_bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status FakeVmmBackend::Unmap(void* va, uint64_t bytes) {
  VGPU_RETURN_IF_ERROR(CheckGranular("Unmap", bytes));
  uint64_t v = reinterpret_cast<uint64_t>(va);
  if (!checked_) {
    mapped_bytes_ -= bytes;
    return absl::OkStatus();
  }
  std::lock_guard<std::mutex> l(mu_);
  for (uint64_t g = v; g < v + bytes; g += granularity_) {
    if (!granules_.contains(g)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fake-vmm Unmap: granule at 0x", absl::Hex(g), " is not mapped"));
    }
  }
  for (uint64_t g = v; g < v + bytes; g += granularity_) {
    auto it = granules_.find(g);
    --map_refs_[it->second.first];
    granules_.erase(it);
  }
  mapped_bytes_ -= bytes;
  return absl::OkStatus();
}

uint64_t FakeVmmBackend::physical_bytes() const { return physical_bytes_.load(); }
uint64_t FakeVmmBackend::mapped_bytes() const { return mapped_bytes_.load(); }
uint64_t FakeVmmBackend::reserved_ranges() const {
  if (!checked_) return unchecked_ranges_.load();
  std::lock_guard<std::mutex> l(mu_);
  return ranges_.size();
}
absl::StatusOr<std::pair<uint64_t, uint64_t>> FakeVmmBackend::Translate(const void* va) const {
  if (!checked_) return absl::FailedPreconditionError("fake-vmm: Translate needs checked mode");
  std::lock_guard<std::mutex> l(mu_);
  auto it = granules_.find(reinterpret_cast<uint64_t>(va));
  if (it == granules_.end()) {
    return absl::NotFoundError(
        absl::StrCat("fake-vmm: nothing mapped at 0x", absl::Hex(reinterpret_cast<uint64_t>(va))));
  }
  return it->second;
}

}  // namespace vgpu
