#include "vgpu/runtime/host/host_platform.h"

#include <cstdlib>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform_conformance.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::IsOkAndHolds;
using ::vgpu::testing::StatusIs;

HostPlatform* TwoDevicePlatform() {
  static HostPlatform* p = [] {
    auto made = HostPlatform::Create(HostPlatformOptions{{kGiB, kGiB}});
    return made.ok() ? made->release() : nullptr;
  }();
  return p;
}

using ::vgpu::testing::PlatformConformance;
INSTANTIATE_TEST_SUITE_P(Host, PlatformConformance,
                         ::testing::Values(::vgpu::testing::PlatformFactory{
                             "host", [] { return static_cast<Platform*>(TwoDevicePlatform()); }}),
                         [](const auto& info) { return info.param.name; });

TEST(ParseHostDevices, Grammar) {
  EXPECT_THAT(ParseHostDevices("2x16GiB"), IsOkAndHolds(ElementsAre(16 * kGiB, 16 * kGiB)));
  EXPECT_THAT(ParseHostDevices("16GiB,8GiB"), IsOkAndHolds(ElementsAre(16 * kGiB, 8 * kGiB)));
  EXPECT_THAT(ParseHostDevices("1x8GiB, 2X1GiB"), IsOkAndHolds(ElementsAre(8 * kGiB, kGiB, kGiB)));
  EXPECT_THAT(ParseHostDevices("512MiB"), IsOkAndHolds(ElementsAre(512 * kMiB)));
}

TEST(ParseHostDevices, ErrorsNameTheBadPart) {
  EXPECT_THAT(ParseHostDevices("2x16GiB,foo"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad part \"foo\"")));
  EXPECT_THAT(ParseHostDevices("0x1GiB"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad part \"0x1GiB\"")));
  EXPECT_THAT(ParseHostDevices("65x1GiB"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHostDevices("2x"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHostDevices(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHostDevices("1GiB,,1GiB"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHostDevices("1MiB"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least 2 MiB")));
  EXPECT_THAT(ParseHostDevices("-1GiB"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(HostPlatform, CapacityIsHardAndAccountedPerDevice) {
  auto p = HostPlatform::Create(HostPlatformOptions{{64 * kMiB, 64 * kMiB}});
  ASSERT_THAT(p, IsOk());
  Executor* e0 = *(*p)->GetExecutor(0);
  Executor* e1 = *(*p)->GetExecutor(1);
  auto a = e0->Allocate(48 * kMiB);
  ASSERT_THAT(a, IsOk());
  EXPECT_THAT(e0->Allocate(17 * kMiB),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::AllOf(HasSubstr("host GPU 0"), HasSubstr("64 MiB"))));
  auto b = e1->Allocate(64 * kMiB);  // device 1's budget is its own
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(e0->Describe()->free_bytes, 16 * kMiB);
  EXPECT_EQ(e1->Describe()->free_bytes, 0u);
  // Physical VMM memory counts against the same capacity.
  EXPECT_THAT(e1->CreatePhysicalMemory(kHostVmmGranularity),
              StatusIs(absl::StatusCode::kResourceExhausted));
  // A batch stops at the capacity with what it made (Executor's loop).
  PhysicalMemoryHandle h[16];
  EXPECT_THAT(e0->CreatePhysicalMemories(kHostVmmGranularity, 16, h),
              IsOkAndHolds(16 * kMiB / kHostVmmGranularity));
  EXPECT_THAT(e0->CreatePhysicalMemories(kHostVmmGranularity, 1, h).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  size_t released = 0;
  EXPECT_THAT(e0->ReleasePhysicalMemories(h, 16 * kMiB / kHostVmmGranularity, &released), IsOk());
  EXPECT_EQ(released, 16 * kMiB / kHostVmmGranularity);
  EXPECT_EQ(e0->Describe()->free_bytes, 16 * kMiB);
  EXPECT_THAT(e0->Free(*b), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(e0->Free(*a), IsOk());
  EXPECT_THAT(e1->Free(*b), IsOk());
  EXPECT_EQ(e0->Describe()->free_bytes, 64 * kMiB);
  EXPECT_THAT(e0->Allocate(0), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(HostPlatform, ConcurrentAllocationNeverOvercommits) {
  auto p = HostPlatform::Create(HostPlatformOptions{{256 * kMiB}});
  ASSERT_THAT(p, IsOk());
  Executor* e = *(*p)->GetExecutor(0);
  std::atomic<int> ok_count{0};
  std::vector<std::thread> threads;
  std::vector<std::vector<void*>> got(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 16; ++i) {
        auto ptr = e->Allocate(4 * kMiB);
        if (ptr.ok()) {
          got[t].push_back(*ptr);
          ++ok_count;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok_count.load(), 64);  // exactly capacity / 4 MiB
  EXPECT_EQ(e->Describe()->free_bytes, 0u);
  for (auto& v : got)
    for (void* ptr : v) EXPECT_THAT(e->Free(ptr), IsOk());
  EXPECT_EQ(e->Describe()->free_bytes, 256 * kMiB);
}

TEST(HostPlatform, FaultInjection) {
  auto p = HostPlatform::Create(HostPlatformOptions{{64 * kMiB}});
  ASSERT_THAT(p, IsOk());
  HostFaultInjection& f = (*p)->faults();
  Executor* e = *(*p)->GetExecutor(0);
  f.fail_allocate_at = f.allocate_calls.load() + 2;
  auto a = e->Allocate(kMiB);
  ASSERT_THAT(a, IsOk());
  EXPECT_THAT(e->Allocate(kMiB),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("injected")));
  auto b = e->Allocate(kMiB);  // only the k-th fails
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(e->Describe()->free_bytes, 62 * kMiB);  // the failed one took nothing

  auto s = e->CreateStream(StreamOptions{});
  ASSERT_THAT(s, IsOk());
  std::vector<char> host(4096, 7), back(4096, 0);
  f.corrupt_memcpy_at = f.memcpy_calls.load() + 1;
  ASSERT_THAT((*s)->MemcpyH2D(*a, host.data(), host.size()), IsOk());
  ASSERT_THAT((*s)->MemcpyD2H(back.data(), *a, back.size()), IsOk());
  ASSERT_THAT((*s)->Synchronize(), IsOk());
  EXPECT_NE(host, back);  // corrupted silently, as a bad copy engine would

  // A failed memcpy makes the stream's error sticky; later work is refused.
  f.fail_memcpy_at = f.memcpy_calls.load() + 1;
  ASSERT_THAT((*s)->MemcpyH2D(*a, host.data(), host.size()), IsOk());  // async: fails later
  EXPECT_THAT((*s)->Synchronize(), StatusIs(absl::StatusCode::kInternal, HasSubstr("injected")));
  EXPECT_THAT((*s)->Memset8(*a, 0, 16), StatusIs(absl::StatusCode::kInternal));
  // Events recorded after the failure still complete, so nobody waits forever.
  auto ev = e->CreateEvent();
  ASSERT_THAT(ev, IsOk());
  ASSERT_THAT((*s)->RecordEvent(ev->get()), IsOk());
  EXPECT_THAT((*ev)->Synchronize(), IsOk());
  // A fresh stream works.
  auto s2 = e->CreateStream(StreamOptions{});
  ASSERT_THAT(s2, IsOk());
  ASSERT_THAT((*s2)->MemcpyH2D(*a, host.data(), host.size()), IsOk());
  ASSERT_THAT((*s2)->MemcpyD2H(back.data(), *a, back.size()), IsOk());
  ASSERT_THAT((*s2)->Synchronize(), IsOk());
  EXPECT_EQ(host, back);

  f.fail_stream_at = f.stream_calls.load() + 1;
  EXPECT_THAT(e->CreateStream(StreamOptions{}), StatusIs(absl::StatusCode::kInternal));
  f.ignore_capacity = true;
  auto big = e->Allocate(128 * kMiB);
  EXPECT_THAT(big, IsOk());
  f.ignore_capacity = false;
  if (big.ok()) EXPECT_THAT(e->Free(*big), IsOk());
  EXPECT_THAT(e->Free(*a), IsOk());
  EXPECT_THAT(e->Free(*b), IsOk());
}

TEST(HostPlatform, NoSmPartitions) {
  auto p = HostPlatform::Create(HostPlatformOptions{});
  ASSERT_THAT(p, IsOk());
  Executor* e = *(*p)->GetExecutor(0);
  std::vector<int> counts = {8, 8};
  EXPECT_THAT(e->PartitionSms(counts),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("cuda")));
  EXPECT_THAT(e->CreateStream(StreamOptions{.sm_partition = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(e->Describe()->total_bytes, kHostDefaultDeviceBytes);
}

TEST(DefaultPlatform, HonoursEnvironment) {
  // The process-wide platforms are created once; this test only reads them.
  setenv("VGPU_PLATFORM", "host", 1);
  auto p = DefaultPlatform();
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ((*p)->name(), "host");
  setenv("VGPU_PLATFORM", "tpu", 1);
  EXPECT_THAT(DefaultPlatform(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tpu")));
  unsetenv("VGPU_PLATFORM");
  auto cuda = GetPlatform("cuda");
  ASSERT_THAT(cuda, IsOk());
  EXPECT_EQ((*cuda)->name(), "cuda");
  // No GPU on CI: auto falls back to host. (With a GPU, auto picks cuda.)
  auto aut = DefaultPlatform();
  ASSERT_THAT(aut, IsOk());
  EXPECT_EQ((*aut)->name(), (*cuda)->DeviceCount() > 0 ? "cuda" : "host");
  EXPECT_THAT(GetPlatform("opencl"), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace vgpu
