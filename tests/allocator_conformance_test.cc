// The allocator conformance suite (tests/allocator_conformance.h) on BFCAllocator over every
// sub-allocator that works here, and on the allocators the factory builds.
#include "vgpu/tests/allocator_conformance.h"

#include <memory>

#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/tests/fake_vmm_executor.h"

namespace vgpu::testing {
namespace {

Executor* HostExecutor() {
  auto p = GetPlatform("host");
  if (!p.ok()) return nullptr;
  auto e = (*p)->GetExecutor(0);
  return e.ok() ? *e : nullptr;
}

// segment_bytes: BFCOptions' default (4 MiB) unless given.
std::unique_ptr<Allocator> Bfc(std::unique_ptr<SubAllocator> sub, uint64_t limit, bool growth,
                               uint64_t segment_bytes = BFCOptions().segment_bytes,
                               uint64_t small_from_top_bytes = 0) {
  BFCOptions o;
  o.name = "GPU:0 (conformance)";
  o.memory_limit = limit;
  o.allow_growth = growth;
  o.segment_bytes = segment_bytes;
  o.small_from_top_bytes = small_from_top_bytes;
  auto a = BFCAllocator::Create(std::move(sub), o);
  EXPECT_THAT(a.status(), IsOk());
  return a.ok() ? std::unique_ptr<Allocator>(std::move(*a)) : nullptr;
}

// MakeOther: a fake pool at another base address (FakeSubAllocator's default is 1 << 40).
std::unique_ptr<SubAllocator> FakeElsewhere() {
  FakeSubAllocatorOptions o;
  o.base_address = uint64_t{3} << 40;
  return std::make_unique<FakeSubAllocator>(o);
}

struct BfcFakeGrowthOff {
  static constexpr bool kRealMemory = false;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    return Bfc(std::make_unique<FakeSubAllocator>(), limit, false);
  }
  static std::unique_ptr<Allocator> MakeOther(uint64_t limit) {
    return Bfc(FakeElsewhere(), limit, false);
  }
};
struct BfcFakeGrowthOn {
  static constexpr bool kRealMemory = false;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    return Bfc(std::make_unique<FakeSubAllocator>(), limit, true);
  }
  static std::unique_ptr<Allocator> MakeOther(uint64_t limit) {
    return Bfc(FakeElsewhere(), limit, true);
  }
};
// Segments from 64 KiB: most of the suite's blocks (the threads' too) are segments.
struct BfcFakeSmallSegments {
  static constexpr bool kRealMemory = false;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    return Bfc(std::make_unique<FakeSubAllocator>(), limit, true, 64 << 10);
  }
  static std::unique_ptr<Allocator> MakeOther(uint64_t limit) {
    return Bfc(FakeElsewhere(), limit, true, 64 << 10);
  }
};
// Small blocks from the top (BFCOptions::small_from_top_bytes): the suite's blocks up to
// 64 KiB, growth off.
struct BfcFakeSmallFromTop {
  static constexpr bool kRealMemory = false;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    return Bfc(std::make_unique<FakeSubAllocator>(), limit, false, 0, 64 << 10);
  }
  static std::unique_ptr<Allocator> MakeOther(uint64_t limit) {
    return Bfc(FakeElsewhere(), limit, false, 0, 64 << 10);
  }
};
// Growth off over 4 KiB pages of the checked fake VMM device, gathering them (BFCOptions::
// gather_pages): the suite's fragmenting and threaded cases gather and return pages.
std::unique_ptr<Allocator> BfcPages(uint64_t limit, uint64_t va_base) {
  auto a = CreateFakePagedBfc(4096, va_base, limit);
  EXPECT_THAT(a.status(), IsOk());
  return a.ok() ? *std::move(a) : nullptr;
}
struct BfcFakePagesGrowthOff {
  static constexpr bool kRealMemory = false;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    return BfcPages(limit, FakeVmmExecutor::kDefaultVaBase);
  }
  static std::unique_ptr<Allocator> MakeOther(uint64_t limit) {
    return BfcPages(limit, FakeVmmExecutor::kDefaultVaBase + (uint64_t{1} << 40));
  }
};
struct BfcHostDeviceSmallSegments {
  static constexpr bool kRealMemory = true;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    return Bfc(std::make_unique<DeviceSubAllocator>(HostExecutor()), limit, true, 64 << 10);
  }
};
struct BfcHostDeviceGrowthOff {
  static constexpr bool kRealMemory = true;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    return Bfc(std::make_unique<DeviceSubAllocator>(HostExecutor()), limit, false);
  }
};
struct BfcHostDeviceGrowthOn {
  static constexpr bool kRealMemory = true;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    return Bfc(std::make_unique<DeviceSubAllocator>(HostExecutor()), limit, true);
  }
};
struct BfcPinnedHost {
  static constexpr bool kRealMemory = true;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    return Bfc(std::make_unique<PinnedHostSubAllocator>(HostExecutor()), limit, true);
  }
};
struct BfcHostMemory {
  static constexpr bool kRealMemory = true;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    return Bfc(std::make_unique<HostMemorySubAllocator>(), limit, true);
  }
};
struct FactoryDeviceBfc {
  static constexpr bool kRealMemory = true;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    DeviceAllocatorOptions o;
    o.kind = AllocatorKind::kBfc;
    o.device_name = "/job:localhost/replica:0/task:0/device:GPU:0 (physical GPU 0)";
    o.memory_limit = limit;
    auto a = CreateDeviceAllocator(HostExecutor(), o);
    EXPECT_THAT(a.status(), IsOk());
    return a.ok() ? std::move(*a) : nullptr;
  }
};
struct FactoryHostMemory {
  static constexpr bool kRealMemory = true;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    auto a = CreateHostMemoryAllocator(nullptr, "/device:CPU:0", limit);
    EXPECT_THAT(a.status(), IsOk());
    return a.ok() ? std::move(*a) : nullptr;
  }
};

using BfcTypes =
    ::testing::Types<BfcFakeGrowthOff, BfcFakeGrowthOn, BfcFakeSmallSegments, BfcFakeSmallFromTop,
                     BfcFakePagesGrowthOff, BfcHostDeviceGrowthOff, BfcHostDeviceGrowthOn,
                     BfcHostDeviceSmallSegments, BfcPinnedHost, BfcHostMemory, FactoryDeviceBfc,
                     FactoryHostMemory>;
INSTANTIATE_TYPED_TEST_SUITE_P(Bfc, AllocatorConformance, BfcTypes);

}  // namespace
}  // namespace vgpu::testing
