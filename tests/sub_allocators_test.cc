// Sub-allocators (fake, host device, pinned, host memory) and the allocator factory.
#include "vgpu/allocator/sub_allocators.h"

#include <cstring>
#include <memory>

#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::IsOkAndHolds;
using ::vgpu::testing::StatusIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(FakeSubAllocatorTest, BumpsAlignedAddressesAndChecksFrees) {
  FakeSubAllocator f(FakeSubAllocatorOptions{.capacity = 10 * kMiB, .base_address = 4096});
  EXPECT_TRUE(f.fake());
  auto a = f.Alloc(1000, 256);
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(reinterpret_cast<uint64_t>(*a), 4096u);
  auto b = f.Alloc(kMiB, kMiB);
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(reinterpret_cast<uint64_t>(*b), kMiB);  // aligned up past the first region
  EXPECT_EQ(f.bytes_outstanding(), kMiB + 1000);
  EXPECT_THAT(f.Alloc(9 * kMiB, 256).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("capacity")));
  EXPECT_THAT(f.Free(*a, 999), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(f.Free(*a, 1000), IsOk());
  EXPECT_THAT(f.Free(*a, 1000), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(f.Free(*b, kMiB), IsOk());
  EXPECT_EQ(f.regions_outstanding(), 0u);
  EXPECT_EQ(f.alloc_calls(), 3);
  EXPECT_EQ(f.free_calls(), 2);
}

TEST(FakeSubAllocatorTest, FailsAfterNCalls) {
  FakeSubAllocator f(FakeSubAllocatorOptions{.fail_after_calls = 1});
  ASSERT_THAT(f.Alloc(kMiB, 256), IsOk());
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(f.Alloc(256, 256).status(),
                StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("injected")));
  }
  FakeSubAllocator never(FakeSubAllocatorOptions{.fail_after_calls = 0});
  EXPECT_FALSE(never.Alloc(256, 256).ok());
}

Executor* HostExecutor() {
  auto p = GetPlatform("host");
  EXPECT_THAT(p.status(), IsOk());
  auto e = (*p)->GetExecutor(0);
  EXPECT_THAT(e.status(), IsOk());
  return *e;
}

TEST(DeviceSubAllocatorTest, RealHostPlatformMemory) {
  DeviceSubAllocator d(HostExecutor());
  EXPECT_FALSE(d.fake());
  EXPECT_THAT(d.name(), HasSubstr("host device 0"));
  auto p = d.Alloc(4 * kMiB, 256);
  ASSERT_THAT(p, IsOk());
  std::memset(*p, 7, 4 * kMiB);
  EXPECT_THAT(d.Free(*p, 4 * kMiB), IsOk());
  int local = 0;
  EXPECT_THAT(d.Free(&local, 4), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(d.Alloc(uint64_t{1} << 50, 256).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(PinnedAndHostMemorySubAllocatorTest, RoundTrip) {
  PinnedHostSubAllocator pinned(HostExecutor());
  HostMemorySubAllocator host;
  for (SubAllocator* s : {static_cast<SubAllocator*>(&pinned), static_cast<SubAllocator*>(&host)}) {
    auto p = s->Alloc(kMiB, 4096);
    ASSERT_THAT(p, IsOk()) << s->name();
    EXPECT_EQ(reinterpret_cast<uint64_t>(*p) % 4096, 0u);
    std::memset(*p, 1, kMiB);
    EXPECT_THAT(s->Free(*p, kMiB), IsOk()) << s->name();
  }
  int local = 0;
  EXPECT_THAT(host.Free(&local, 4), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(AllocatorFactoryTest, ParsesKinds) {
  EXPECT_THAT(ParseAllocatorKind("bfc"), IsOkAndHolds(AllocatorKind::kBfc));
  EXPECT_THAT(ParseAllocatorKind(" VMM "), IsOkAndHolds(AllocatorKind::kVmm));
  EXPECT_THAT(ParseAllocatorKind("Async"), IsOkAndHolds(AllocatorKind::kAsync));
  EXPECT_THAT(ParseAllocatorKind("tlsf").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"tlsf\"")));
  EXPECT_EQ(AllocatorKindName(AllocatorKind::kBfc), "bfc");
  EXPECT_EQ(AllocatorKindName(AllocatorKind::kVmm), "vmm");
  EXPECT_EQ(AllocatorKindName(AllocatorKind::kAsync), "async");
}

TEST(AllocatorFactoryTest, GrowthOffTakesTheLimitFromTheDeviceUpFront) {
  auto platform = HostPlatform::Create(HostPlatformOptions{.device_bytes = {64 * kMiB}});
  ASSERT_THAT(platform.status(), IsOk());
  Executor* e = *(*platform)->GetExecutor(0);
  DeviceAllocatorOptions o;
  o.device_name = "/job:localhost/replica:0/task:0/device:GPU:0 (physical GPU 0)";
  o.memory_limit = 48 * kMiB;
  o.allow_growth = false;
  auto a = CreateDeviceAllocator(e, o);
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ((*a)->Stats().bytes_reserved, 48 * kMiB);
  EXPECT_EQ((*a)->name(), o.device_name);
  // A second one does not fit on the 64 MiB device: ResourceExhausted naming the device.
  o.device_name = "GPU:1 (physical GPU 0)";
  EXPECT_THAT(CreateDeviceAllocator(e, o).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("GPU:1 (physical GPU 0)"), HasSubstr("48 MiB"))));
  // With growth it is created, and fails cleanly when it cannot grow.
  o.allow_growth = true;
  auto g = CreateDeviceAllocator(e, o);
  ASSERT_THAT(g.status(), IsOk());
  EXPECT_EQ((*g)->Stats().bytes_reserved, 0u);
  EXPECT_THAT((*g)->AllocateRaw(32 * kMiB).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("GPU:1")));
  auto small = (*g)->Allocate(4 * kMiB);
  EXPECT_THAT(small, IsOk());
}

TEST(AllocatorFactoryTest, RejectsBadOptions) {
  DeviceAllocatorOptions o;
  o.device_name = "GPU:0";
  EXPECT_THAT(CreateDeviceAllocator(HostExecutor(), o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("GPU:0")));
  o.memory_limit = kMiB;
  EXPECT_THAT(CreateDeviceAllocator(nullptr, o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(AllocatorFactoryTest, HostMemoryAllocator) {
  for (Executor* e : {static_cast<Executor*>(nullptr), HostExecutor()}) {
    auto a = CreateHostMemoryAllocator(e, "/device:CPU:0", 0);
    ASSERT_THAT(a.status(), IsOk());
    auto b = (*a)->Allocate(3 * kMiB);
    ASSERT_THAT(b, IsOk());
    std::memset(b->data(), 3, 3 * kMiB);
    EXPECT_THAT((*a)->CheckInvariants(), IsOk());
  }
}

}  // namespace
}  // namespace vgpu
