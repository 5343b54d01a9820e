#include "vgpu/runtime/platform.h"

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/fault_injector.h"
#include "vgpu/runtime/nccl.h"
#include "vgpu/runtime/status.h"

namespace vgpu {

absl::Status CheckMapsWholeAllocation(PhysicalMemoryHandle handle, uint64_t offset,
                                      uint64_t bytes) {
  if (offset == 0 && bytes == handle.bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "Map: ", bytes, " bytes at offset ", offset, " of a ", handle.bytes,
      "-byte physical allocation; a mapping covers a whole allocation (offset 0, its size), "
      "as cuMemMap requires on a real card"));
}

absl::StatusOr<size_t> Executor::CreatePhysicalMemories(uint64_t bytes, size_t n,
                                                        PhysicalMemoryHandle* out) {
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<PhysicalMemoryHandle> h = CreatePhysicalMemory(bytes);
    if (!h.ok()) {
      if (i == 0) return h.status();
      return i;
    }
    out[i] = *h;
  }
  return n;
}

absl::Status Executor::ReleasePhysicalMemories(const PhysicalMemoryHandle* handles, size_t n,
                                               size_t* released) {
  *released = 0;
  for (size_t i = 0; i < n; ++i) {
    VGPU_RETURN_IF_ERROR(ReleasePhysicalMemory(handles[i]));
    ++*released;
  }
  return absl::OkStatus();
}

absl::Status Executor::MapAll(void* va, const PhysicalMemoryHandle* handles, size_t n) {
  char* at = static_cast<char*>(va);
  for (size_t i = 0; i < n; ++i) {
    absl::Status s = Map(at, handles[i].bytes, handles[i], 0);
    if (!s.ok()) {
      if (at != va) Unmap(va, static_cast<uint64_t>(at - static_cast<char*>(va))).IgnoreError();
      return s;
    }
    at += handles[i].bytes;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MemoryPool>> Executor::CreateMemoryPool(
    const MemoryPoolOptions& /*options*/) {
  return absl::UnimplementedError(absl::StrCat("platform ", platform()->name(), " device ",
                                               ordinal(), " has no stream-ordered memory pools"));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> Platform::CreateCommunicator(
    absl::Span<Executor* const> /*executors*/) {
  return absl::UnimplementedError(absl::StrCat(
      "NCCL needs the cuda platform; these executors are on the ", name(), " platform"));
}

absl::StatusOr<std::vector<uint8_t>> Platform::NcclUniqueId() {
  return absl::UnimplementedError(absl::StrCat(
      "NCCL across processes needs the cuda platform; this is the ", name(), " platform"));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> Platform::CreateRankCommunicator(
    Executor* /*executor*/, int /*rank*/, int /*nranks*/, absl::Span<const uint8_t> /*id*/) {
  return absl::UnimplementedError(
      absl::StrCat("NCCL across processes needs the cuda platform; the ", name(),
                   " platform's communicator cannot span processes"));
}

absl::StatusOr<FaultInjector*> Platform::GetFaultInjector() {
  return absl::UnimplementedError(absl::StrCat("platform ", name(), " has no fault injection"));
}

}  // namespace vgpu
