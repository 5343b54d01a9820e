#include "vgpu/allocator/factory.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "vgpu/allocator/async_allocator.h"
#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {

absl::StatusOr<AllocatorKind> ParseAllocatorKind(absl::string_view text) {
  std::string t = absl::AsciiStrToLower(StripUserValue(text));
  if (t == "bfc") return AllocatorKind::kBfc;
  if (t == "vmm") return AllocatorKind::kVmm;
  if (t == "async") return AllocatorKind::kAsync;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown allocator ", QuoteUserText(text), "; expected bfc, vmm or async"));
}

absl::string_view AllocatorKindName(AllocatorKind kind) {
  switch (kind) {
    case AllocatorKind::kBfc:
      return "bfc";
    case AllocatorKind::kVmm:
      return "vmm";
    case AllocatorKind::kAsync:
      return "async";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<Allocator>> CreateDeviceAllocator(
    Executor* executor, const DeviceAllocatorOptions& options) {
  if (executor == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.device_name, ": no executor to allocate from"));
  }
  if (options.memory_limit == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.device_name, ": memory limit must be > 0"));
  }
  switch (options.kind) {
    case AllocatorKind::kBfc: {
      BFCOptions o;
      o.name = options.device_name;
      o.memory_limit = options.memory_limit;
      o.allow_growth = options.allow_growth;
      o.garbage_collection = options.garbage_collection;
      VGPU_ASSIGN_OR_RETURN(
          std::unique_ptr<BFCAllocator> a,
          BFCAllocator::Create(std::make_unique<DeviceSubAllocator>(executor), std::move(o)));
      return std::unique_ptr<Allocator>(std::move(a));
    }
    case AllocatorKind::kVmm:
      return CreateVmmAllocator(executor, options);
    case AllocatorKind::kAsync:
      return CreateAsyncAllocator(executor, options);
  }
  return absl::InvalidArgumentError("unknown allocator kind");
}

absl::StatusOr<std::unique_ptr<Allocator>> CreateHostMemoryAllocator(Executor* executor,
                                                                     absl::string_view device_name,
                                                                     uint64_t memory_limit) {
  BFCOptions o;
  o.name = std::string(device_name);
  // "Unlimited": the largest 256-byte multiple, so growth is bounded only by the system.
  o.memory_limit = memory_limit != 0 ? memory_limit : ~uint64_t{0} >> 1;
  o.allow_growth = true;
  std::unique_ptr<SubAllocator> sub;
  if (executor != nullptr) {
    sub = std::make_unique<PinnedHostSubAllocator>(executor);
  } else {
    sub = std::make_unique<HostMemorySubAllocator>();
  }
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<BFCAllocator> a,
                        BFCAllocator::Create(std::move(sub), std::move(o)));
  return std::unique_ptr<Allocator>(std::move(a));
}

}  // namespace vgpu
