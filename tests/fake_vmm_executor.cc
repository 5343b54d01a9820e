#include "vgpu/tests/fake_vmm_executor.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/runtime/status.h"

namespace vgpu::testing {

using bench::FakeAddressExecutor;

FakeVmmExecutor::FakeVmmExecutor(uint64_t granularity, uint64_t physical_capacity, bool checked,
                                 uint64_t va_base)
    : FakeAddressExecutor(granularity, physical_capacity, va_base), checked_(checked) {}

absl::StatusOr<void*> FakeVmmExecutor::ReserveAddressRange(uint64_t bytes) {
  if (!checked_) return FakeAddressExecutor::ReserveAddressRange(bytes);
  VGPU_RETURN_IF_ERROR(CheckGranular("ReserveAddressRange", bytes));
  uint64_t va = NextRange(bytes);
  vgpu::MutexLock l(&mu_);
  ranges_.emplace(va, bytes);
  return reinterpret_cast<void*>(va);
}

absl::Status FakeVmmExecutor::FreeAddressRange(void* va, uint64_t bytes) {
  if (!checked_) return FakeAddressExecutor::FreeAddressRange(va, bytes);
  vgpu::MutexLock l(&mu_);
  uint64_t v = reinterpret_cast<uint64_t>(va);
  auto it = ranges_.find(v);
  if (it == ranges_.end() || it->second != bytes) {
    return absl::InvalidArgumentError(absl::StrCat("fake-vmm FreeAddressRange: 0x", absl::Hex(v),
                                                   " + ", bytes, " is not a reserved range"));
  }
  for (uint64_t g = v; g < v + bytes; g += granularity()) {
    if (granules_.contains(g)) {
      return absl::FailedPreconditionError(absl::StrCat("fake-vmm FreeAddressRange: granule at 0x",
                                                        absl::Hex(g), " is still mapped"));
    }
  }
  ranges_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<PhysicalMemoryHandle> FakeVmmExecutor::CreatePhysicalMemory(uint64_t bytes) {
  if (!checked_) return FakeAddressExecutor::CreatePhysicalMemory(bytes);
  VGPU_RETURN_IF_ERROR(CheckGranular("CreatePhysicalMemory", bytes));
  vgpu::MutexLock l(&mu_);
  if (physical_capacity() != 0 && physical_bytes_ + bytes > physical_capacity()) {
    return RefuseCreate(bytes, physical_bytes_);
  }
  uint64_t h = NextHandle();
  handles_.emplace(h, bytes);
  physical_bytes_ += bytes;
  return PhysicalMemoryHandle{h, bytes};
}

absl::Status FakeVmmExecutor::ReleasePhysicalMemory(PhysicalMemoryHandle handle) {
  if (!checked_) return FakeAddressExecutor::ReleasePhysicalMemory(handle);
  vgpu::MutexLock l(&mu_);
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

absl::StatusOr<size_t> FakeVmmExecutor::CreatePhysicalMemories(uint64_t bytes, size_t n,
                                                               PhysicalMemoryHandle* out) {
  if (!checked_) return FakeAddressExecutor::CreatePhysicalMemories(bytes, n, out);
  return Executor::CreatePhysicalMemories(bytes, n, out);
}

absl::Status FakeVmmExecutor::ReleasePhysicalMemories(const PhysicalMemoryHandle* handles, size_t n,
                                                      size_t* released) {
  if (!checked_) return FakeAddressExecutor::ReleasePhysicalMemories(handles, n, released);
  return Executor::ReleasePhysicalMemories(handles, n, released);
}

absl::Status FakeVmmExecutor::Map(void* va, uint64_t bytes, PhysicalMemoryHandle handle,
                                  uint64_t offset) {
  if (!checked_) return FakeAddressExecutor::Map(va, bytes, handle, offset);
  VGPU_RETURN_IF_ERROR(CheckGranular("Map", bytes));
  VGPU_RETURN_IF_ERROR(CheckMapsWholeAllocation(handle, offset, bytes));
  const uint64_t v = reinterpret_cast<uint64_t>(va), g = granularity();
  vgpu::MutexLock l(&mu_);
  auto h = handles_.find(handle.value);
  if (h == handles_.end() || offset % g != 0 || offset + bytes > h->second) {
    return absl::InvalidArgumentError(absl::StrCat("fake-vmm Map: unknown handle ", handle.value,
                                                   " or range past its end (offset ", offset, ", ",
                                                   bytes, " bytes)"));
  }
  auto r = ranges_.upper_bound(v);
  if (v % g != 0 || r == ranges_.begin() || (--r, v + bytes > r->first + r->second)) {
    return absl::InvalidArgumentError(absl::StrCat("fake-vmm Map: 0x", absl::Hex(v), " + ", bytes,
                                                   " is not inside a reserved range"));
  }
  for (uint64_t a = v; a < v + bytes; a += g) {
    if (granules_.contains(a)) {
      return absl::FailedPreconditionError(
          absl::StrCat("fake-vmm Map: granule at 0x", absl::Hex(a), " is already mapped"));
    }
  }
  for (uint64_t i = 0; i < bytes; i += g) {
    granules_.emplace(v + i, std::make_pair(handle.value, offset + i));
  }
  map_refs_[handle.value] += bytes / g;
  mapped_bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status FakeVmmExecutor::MapAll(void* va, const PhysicalMemoryHandle* handles, size_t n) {
  if (!checked_) return FakeAddressExecutor::MapAll(va, handles, n);
  return Executor::MapAll(va, handles, n);  // NOLINT(bugprone-parent-virtual-call)
}

absl::Status FakeVmmExecutor::Unmap(void* va, uint64_t bytes) {
  if (!checked_) return FakeAddressExecutor::Unmap(va, bytes);
  VGPU_RETURN_IF_ERROR(CheckGranular("Unmap", bytes));
  const uint64_t v = reinterpret_cast<uint64_t>(va), g = granularity();
  vgpu::MutexLock l(&mu_);
  for (uint64_t a = v; a < v + bytes; a += g) {
    if (!granules_.contains(a)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fake-vmm Unmap: granule at 0x", absl::Hex(a), " is not mapped"));
    }
  }
  // Whole mappings only (cuMemUnmap): a mapping is a whole allocation, so the range starts at
  // an allocation's first granule and ends after one's last.
  const auto& first = granules_.at(v);
  const auto& last = granules_.at(v + bytes - g);
  auto last_handle = handles_.find(last.first);
  if (first.second != 0 || last_handle == handles_.end() ||
      last.second + g != last_handle->second) {
    return absl::InvalidArgumentError(absl::StrCat("fake-vmm Unmap: 0x", absl::Hex(v), " + ", bytes,
                                                   " is not a run of whole mappings"));
  }
  for (uint64_t a = v; a < v + bytes; a += g) {
    auto it = granules_.find(a);
    --map_refs_[it->second.first];
    granules_.erase(it);
  }
  mapped_bytes_ -= bytes;
  return absl::OkStatus();
}

uint64_t FakeVmmExecutor::reserved_ranges() const {
  if (!checked_) return FakeAddressExecutor::reserved_ranges();
  vgpu::MutexLock l(&mu_);
  return ranges_.size();
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> FakeVmmExecutor::Translate(const void* va) const {
  if (!checked_) return absl::FailedPreconditionError("fake-vmm: Translate needs checked mode");
  vgpu::MutexLock l(&mu_);
  auto it = granules_.find(reinterpret_cast<uint64_t>(va));
  if (it == granules_.end()) {
    return absl::NotFoundError(
        absl::StrCat("fake-vmm: nothing mapped at 0x", absl::Hex(reinterpret_cast<uint64_t>(va))));
  }
  return it->second;
}

FakeVmm MakeFakeVmm(uint64_t granularity, VmmOptions options, uint64_t capacity, bool checked,
                    uint64_t va_base, absl::Status* status) {
  FakeVmm f;
  f.backend = std::make_unique<FakeVmmExecutor>(granularity, capacity, checked, va_base);
  absl::StatusOr<std::unique_ptr<VmmAllocator>> a =
      VmmAllocator::Create(f.backend.get(), std::move(options));
  if (status != nullptr) *status = a.status();
  if (a.ok()) f.alloc = *std::move(a);
  return f;
}

namespace {

// Devices outlive every allocator of the test program: kept here, never reused.
void KeepUntilExit(std::unique_ptr<FakeVmmExecutor> device) {
  static vgpu::Mutex mu;
  static auto* devices = new std::vector<std::unique_ptr<FakeVmmExecutor>>();
  vgpu::MutexLock l(&mu);
  devices->push_back(std::move(device));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Allocator>> CreateFakeVmmAllocator(uint64_t granularity,
                                                                  VmmOptions options) {
  auto device = std::make_unique<FakeVmmExecutor>(granularity, 0, /*checked=*/false);
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<VmmAllocator> a,
                        VmmAllocator::Create(device.get(), std::move(options)));
  KeepUntilExit(std::move(device));
  return std::unique_ptr<Allocator>(std::move(a));
}

absl::StatusOr<std::unique_ptr<BFCAllocator>> CreatePagedBfc(Executor* executor, uint64_t limit,
                                                             bool gather) {
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<PagedDeviceSubAllocator> sub,
                        PagedDeviceSubAllocator::Create(executor));
  BFCOptions o;
  o.name = "GPU:0 (paged)";
  o.memory_limit = limit;
  o.allow_growth = false;
  o.gather_pages = gather;
  return BFCAllocator::Create(std::move(sub), o);
}

absl::StatusOr<std::unique_ptr<Allocator>> CreateFakePagedBfc(uint64_t page, uint64_t va_base,
                                                              uint64_t limit) {
  auto device = std::make_unique<FakeVmmExecutor>(page, 0, /*checked=*/true, va_base);
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<BFCAllocator> a, CreatePagedBfc(device.get(), limit));
  KeepUntilExit(std::move(device));
  return std::unique_ptr<Allocator>(std::move(a));
}

absl::Status PhysicalMap::Add(const void* p, uint64_t bytes) {
  const uint64_t g = device_->granularity();
  const uint64_t start = reinterpret_cast<uint64_t>(p);
  std::vector<Piece> pieces;
  for (uint64_t va = start; va < start + bytes;) {
    const uint64_t base = va / g * g, end = std::min(base + g, start + bytes);
    absl::StatusOr<std::pair<uint64_t, uint64_t>> t =
        device_->Translate(reinterpret_cast<void*>(base));
    if (!t.ok()) {
      return absl::InternalError(absl::StrCat("block at ", start, " of ", bytes,
                                              " bytes: its byte ", va - start,
                                              " is not mapped: ", t.status().message()));
    }
    pieces.push_back({t->first, t->second + (va - base), t->second + (end - base)});
    va = end;
  }
  // One piece at a time, so a block that maps one physical byte twice is caught too; on a clash
  // the pieces already added are taken out again.
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::map<uint64_t, uint64_t>& m = by_handle_[pieces[i].handle];
    auto next = m.lower_bound(pieces[i].lo);
    if ((next != m.end() && next->first < pieces[i].hi) ||
        (next != m.begin() && std::prev(next)->second > pieces[i].lo)) {
      for (size_t j = 0; j < i; ++j) by_handle_[pieces[j].handle].erase(pieces[j].lo);
      return absl::InternalError(absl::StrCat(
          "block at ", start, " of ", bytes, " bytes shares physical bytes ", pieces[i].lo, "-",
          pieces[i].hi, " of granule ", pieces[i].handle, " with a live block"));
    }
    m.emplace(pieces[i].lo, pieces[i].hi);
  }
  pieces_[start] = std::move(pieces);
  return absl::OkStatus();
}

absl::Status PhysicalMap::Remove(const void* p) {
  auto it = pieces_.find(reinterpret_cast<uint64_t>(p));
  if (it == pieces_.end()) {
    return absl::NotFoundError(absl::StrCat("no block at ", reinterpret_cast<uint64_t>(p)));
  }
  for (const Piece& piece : it->second) by_handle_[piece.handle].erase(piece.lo);
  pieces_.erase(it);
  return absl::OkStatus();
}

absl::Status CheckFakeVmm(const FakeVmm& f) { return CheckFakeVmm(*f.alloc, *f.backend); }

absl::Status CheckFakeVmm(const VmmAllocator& alloc, const FakeVmmExecutor& backend) {
  VGPU_RETURN_IF_ERROR(alloc.CheckInvariants());
  const VmmAllocator::GranuleCounts c = alloc.Granules();
  const uint64_t g = alloc.granularity();
  // (A granule shared by blocks, VmmOptions::share_tail_granules, is mapped once for each.)
  if (backend.mapped_bytes() != c.views * g) {
    return absl::InternalError(absl::StrCat(alloc.name(), ": invariant broken: backend has ",
                                            backend.mapped_bytes(),
                                            " bytes mapped, allocator counts ", c.views * g));
  }
  if (backend.physical_bytes() != c.created * g) {
    return absl::InternalError(absl::StrCat(alloc.name(), ": invariant broken: backend holds ",
                                            backend.physical_bytes(),
                                            " physical bytes, allocator counts ", c.created * g));
  }
  return absl::OkStatus();
}

}  // namespace vgpu::testing
