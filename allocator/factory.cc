#include "vgpu/allocator/factory.h"

#include <iterator>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "vgpu/allocator/async_allocator.h"
#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {
namespace {

using Creator = absl::StatusOr<std::unique_ptr<Allocator>> (*)(Executor*,
                                                               const DeviceAllocatorOptions&);

// Every allocator kind: its name (what VGPU_ALLOCATOR and --allocator take, "" for kinds the
// runtime picks itself) and its creator. A new allocator is one row here.
struct KindRow {
  AllocatorKind kind;
  const char* name;
  bool user_selectable;
  bool needs_device;  // an executor and a limit > 0
  Creator create;
};
constexpr KindRow kKinds[] = {
    {AllocatorKind::kBfc, "bfc", true, true, CreateBfcAllocator},
    {AllocatorKind::kVmm, "vmm", true, true, CreateVmmAllocator},
    {AllocatorKind::kAsync, "async", true, true, CreateAsyncAllocator},
    {AllocatorKind::kHostMemory, "host", false, false, CreateHostBfcAllocator},
};

const KindRow* Find(AllocatorKind kind) {
  for (const KindRow& r : kKinds) {
    if (r.kind == kind) return &r;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<AllocatorKind> ParseAllocatorKind(absl::string_view text) {
  std::string t = absl::AsciiStrToLower(StripUserValue(text));
  for (const KindRow& r : kKinds) {
    if (r.user_selectable && t == r.name) return r.kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown allocator ", QuoteUserText(text), "; expected bfc, vmm or async"));
}

absl::string_view AllocatorKindName(AllocatorKind kind) {
  const KindRow* r = Find(kind);
  return r != nullptr ? r->name : "unknown";
}

absl::StatusOr<std::unique_ptr<Allocator>> CreateDeviceAllocator(
    Executor* executor, const DeviceAllocatorOptions& options) {
  const KindRow* r = Find(options.kind);
  if (r == nullptr) return absl::InvalidArgumentError("unknown allocator kind");
  if (r->needs_device && executor == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.device_name, ": no executor to allocate from"));
  }
  if (r->needs_device && options.memory_limit == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.device_name, ": memory limit must be > 0"));
  }
  absl::StatusOr<std::unique_ptr<Allocator>> a = r->create(executor, options);
  // Stream order: nullptr in Allocate means the logical device's stream (the async kind set
  // its own, the same one or one it made).
  if (a.ok() && options.stream != nullptr && (*a)->default_stream() == nullptr) {
    absl::Status s = (*a)->SetDefaultStream(options.stream);
    if (!s.ok()) return s;
  }
  return a;
}

absl::StatusOr<std::unique_ptr<Allocator>> CreateHostMemoryAllocator(Executor* executor,
                                                                     absl::string_view device_name,
                                                                     uint64_t memory_limit) {
  DeviceAllocatorOptions o;
  o.kind = AllocatorKind::kHostMemory;
  o.device_name = std::string(device_name);
  o.memory_limit = memory_limit;
  return CreateDeviceAllocator(executor, o);
}

}  // namespace vgpu
