// The allocator conformance suite (tests/allocator_conformance.h) on the cuda platform: BFC over
// device memory (growth off and on), the factory's vmm and async allocators, and pinned host
// memory. Label gpu: every test skips without a CUDA device; CI runs it on the CUDA simulator
// (tests/cudasim.cmake), where a skip fails the run.
#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/tests/allocator_conformance.h"

namespace vgpu::testing {
namespace {

Executor* CudaExecutor() {
  auto p = GetPlatform("cuda");
  if (!p.ok() || (*p)->DeviceCount() == 0) return nullptr;
  auto e = (*p)->GetExecutor(0);
  return e.ok() ? *e : nullptr;
}

std::unique_ptr<Allocator> Factory(AllocatorKind kind, uint64_t limit, bool growth) {
  DeviceAllocatorOptions o;
  o.kind = kind;
  o.device_name = "/job:localhost/replica:0/task:0/device:GPU:0 (cuda GPU 0)";
  o.memory_limit = limit;
  o.allow_growth = growth;
  auto a = CreateDeviceAllocator(CudaExecutor(), o);
  EXPECT_THAT(a.status(), IsOk());
  return a.ok() ? std::move(*a) : nullptr;
}

// Device memory is not host-writable: the suite checks it through the allocator only
// (kRealMemory false), and a second instance is simply another allocator on the device.
template <AllocatorKind kKind, bool kGrowth>
struct CudaDevice {
  static constexpr bool kRealMemory = false;
  static bool Available() {
    if (CudaExecutor() == nullptr) return false;
    if constexpr (kKind == AllocatorKind::kVmm)
      return CudaExecutor()->VirtualMemoryGranularity().ok();
    return true;
  }
  static std::unique_ptr<Allocator> Make(uint64_t limit) { return Factory(kKind, limit, kGrowth); }
  static std::unique_ptr<Allocator> MakeOther(uint64_t limit) { return Make(limit); }
};

struct CudaBfcOverDevice {
  static constexpr bool kRealMemory = false;
  static bool Available() { return CudaExecutor() != nullptr; }
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    BFCOptions o;
    o.name = "cuda GPU:0 (conformance)";
    o.memory_limit = limit;
    o.allow_growth = true;
    auto a = BFCAllocator::Create(std::make_unique<DeviceSubAllocator>(CudaExecutor()), o);
    EXPECT_THAT(a.status(), IsOk());
    return a.ok() ? std::unique_ptr<Allocator>(std::move(*a)) : nullptr;
  }
  static std::unique_ptr<Allocator> MakeOther(uint64_t limit) { return Make(limit); }
};

// Pinned host memory is host-writable, so the suite writes and reads it back.
struct CudaPinnedHost {
  static constexpr bool kRealMemory = true;
  static bool Available() { return CudaExecutor() != nullptr; }
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    BFCOptions o;
    o.name = "cuda pinned host (conformance)";
    o.memory_limit = limit;
    o.allow_growth = true;
    auto a = BFCAllocator::Create(std::make_unique<PinnedHostSubAllocator>(CudaExecutor()), o);
    EXPECT_THAT(a.status(), IsOk());
    return a.ok() ? std::unique_ptr<Allocator>(std::move(*a)) : nullptr;
  }
};

using CudaTypes =
    ::testing::Types<CudaDevice<AllocatorKind::kBfc, false>, CudaDevice<AllocatorKind::kBfc, true>,
                     CudaDevice<AllocatorKind::kVmm, false>, CudaDevice<AllocatorKind::kVmm, true>,
                     CudaDevice<AllocatorKind::kAsync, true>, CudaBfcOverDevice, CudaPinnedHost>;
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, AllocatorConformance, CudaTypes);

}  // namespace
}  // namespace vgpu::testing
