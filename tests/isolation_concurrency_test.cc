// Isolation between logical devices: several threads allocate at once on 4 logical devices of
// one 8 GiB host device; every device's limit holds at every moment, and a device at its limit
// takes nothing from the others. For each allocator kind, with and without growth.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/devices/runtime.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

constexpr int kDevices = 4;
constexpr uint64_t kLimit = kGiB;

struct Param {
  AllocatorKind kind;
  bool growth;
};

class IsolationTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    HostPlatformOptions o;
    o.device_bytes = {8 * kGiB};
    auto p = HostPlatform::Create(o);
    ASSERT_THAT(p, IsOk());
    host_ = *std::move(p);
    RuntimeConfig c;
    c.logical_devices = {
        {0, std::vector<LogicalDeviceConfig>(kDevices, LogicalDeviceConfig::Bytes(kLimit))}};
    c.allocator = GetParam().kind;
    c.allow_growth = GetParam().growth;
    auto rt = Runtime::Create(c, host_.get());
    ASSERT_THAT(rt, IsOk());
    rt_ = *std::move(rt);
  }

  std::unique_ptr<HostPlatform> host_;
  std::unique_ptr<Runtime> rt_;
};

TEST_P(IsolationTest, LimitsHoldUnderConcurrentAllocation) {
  // live[d]: bytes this test holds on device d, raised after a successful allocation and
  // lowered before the free, so it never exceeds what the allocator has handed out.
  std::atomic<uint64_t> live[kDevices] = {};
  std::atomic<uint64_t> ooms[kDevices] = {};
  std::atomic<bool> stop{false};
  std::atomic<int> violations{0};

  // A monitor samples every allocator's own numbers while the workers run.
  std::thread monitor([&] {
    while (!stop.load()) {
      for (int d = 0; d < kDevices; ++d) {
        AllocatorStats s = rt_->gpus()[d]->allocator()->Stats();
        if (s.bytes_in_use > kLimit || s.bytes_reserved > kLimit) ++violations;
      }
      std::this_thread::yield();
    }
  });

  constexpr int kThreadsPerDevice = 2;
  std::vector<std::thread> workers;
  for (int d = 0; d < kDevices; ++d) {
    for (int t = 0; t < kThreadsPerDevice; ++t) {
      workers.emplace_back([&, d, t] {
        Allocator* a = rt_->gpus()[d]->allocator();
        std::mt19937_64 rng(d * 100 + t);
        // Sizes up to 160 MiB: two threads holding up to 8 buffers each overrun 1 GiB often.
        std::uniform_int_distribution<uint64_t> size(kKiB, 160 * kMiB);
        std::vector<DeviceBuffer> held;
        for (int i = 0; i < 300; ++i) {
          if (held.size() >= 8 || (!held.empty() && rng() % 3 == 0)) {
            size_t k = rng() % held.size();
            live[d] -= held[k].size();
            EXPECT_THAT(held[k].Reset(), IsOk());
            held.erase(held.begin() + k);
            continue;
          }
          uint64_t n = size(rng);
          absl::StatusOr<DeviceBuffer> b = a->Allocate(n);
          if (!b.ok()) {
            EXPECT_THAT(b, StatusIs(absl::StatusCode::kResourceExhausted,
                                    HasSubstr(rt_->gpus()[d]->name())));
            ++ooms[d];
            continue;
          }
          if ((live[d] += n) > kLimit) ++violations;
          held.push_back(*std::move(b));
        }
        for (DeviceBuffer& b : held) live[d] -= b.size();
      });
    }
  }
  for (auto& w : workers) w.join();
  stop = true;
  monitor.join();
  EXPECT_EQ(violations.load(), 0);
  uint64_t total_ooms = 0;
  for (auto& o : ooms) total_ooms += o.load();
  EXPECT_GT(total_ooms, 0u) << "the workload never reached a limit: the test checks nothing";
  for (int d = 0; d < kDevices; ++d) {
    EXPECT_EQ(live[d].load(), 0u);
    AllocatorStats s = rt_->gpus()[d]->allocator()->Stats();
    EXPECT_EQ(s.bytes_in_use, 0u) << d;
    EXPECT_LE(s.peak_bytes_in_use, kLimit) << d;
    EXPECT_THAT(rt_->gpus()[d]->allocator()->CheckInvariants(), IsOk()) << d;
  }
}

TEST_P(IsolationTest, ADeviceAtItsLimitTakesNothingFromTheOthers) {
  // Fill GPU:0 to its limit from two threads at once.
  Allocator* full = rt_->gpus()[0]->allocator();
  std::vector<DeviceBuffer> hog[2];
  std::vector<std::thread> fillers;
  for (int t = 0; t < 2; ++t) {
    fillers.emplace_back([&, t] {
      for (;;) {
        absl::StatusOr<DeviceBuffer> b = full->Allocate(32 * kMiB);
        if (!b.ok()) break;
        hog[t].push_back(*std::move(b));
      }
    });
  }
  for (auto& f : fillers) f.join();
  EXPECT_GE((hog[0].size() + hog[1].size()) * 32 * kMiB, kLimit - 32 * kMiB);
  EXPECT_THAT(full->Allocate(32 * kMiB),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("/job:localhost/replica:0/task:0/device:GPU:0"),
                             HasSubstr("physical GPU 0"))));

  // Every other device still gets (nearly) its whole budget, concurrently.
  std::vector<std::thread> others;
  std::atomic<uint64_t> got[kDevices] = {};
  for (int d = 1; d < kDevices; ++d) {
    others.emplace_back([&, d] {
      std::vector<DeviceBuffer> mine;
      for (;;) {
        absl::StatusOr<DeviceBuffer> b = rt_->gpus()[d]->allocator()->Allocate(32 * kMiB);
        if (!b.ok()) break;
        got[d] += b->size();
        mine.push_back(*std::move(b));
      }
    });
  }
  for (auto& o : others) o.join();
  for (int d = 1; d < kDevices; ++d) {
    EXPECT_GE(got[d].load(), kLimit - 32 * kMiB) << "GPU:" << d;
    EXPECT_LE(got[d].load(), kLimit) << "GPU:" << d;
  }
  // And GPU:0 is still exactly as full as before.
  EXPECT_THAT(full->Allocate(32 * kMiB), StatusIs(absl::StatusCode::kResourceExhausted));
}

INSTANTIATE_TEST_SUITE_P(Allocators, IsolationTest,
                         ::testing::Values(Param{AllocatorKind::kBfc, false},
                                           Param{AllocatorKind::kBfc, true},
                                           Param{AllocatorKind::kVmm, false},
                                           Param{AllocatorKind::kVmm, true}),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return absl::StrCat(AllocatorKindName(info.param.kind),
                                               info.param.growth ? "_growth" : "_preallocated");
                         });

// The runtime's logical devices with vmm and growth give memory back once quiet, weights live
// (VmmOptions::kRuntimeQuietGiveBackMs): another logical device's workload on the same card
// gets it back from the device, not only once a device holds nothing.
TEST(QuietGiveBack, RuntimeVmmDevicesGiveBackWithWeightsLive) {
  HostPlatformOptions o;
  o.device_bytes = {8 * kGiB};
  auto host = HostPlatform::Create(o);
  ASSERT_THAT(host, IsOk());
  RuntimeConfig c;
  c.logical_devices = {
      {0, std::vector<LogicalDeviceConfig>(2, LogicalDeviceConfig::Bytes(kLimit))}};
  c.allocator = AllocatorKind::kVmm;
  c.allow_growth = true;
  auto rt = Runtime::Create(c, host->get());
  ASSERT_THAT(rt, IsOk());
  Allocator* a = (*rt)->gpus()[0]->allocator();
  const uint64_t before = a->Stats().bytes_reserved;  // what the device holds (BLAS workspace)
  absl::StatusOr<DeviceBuffer> weights = a->Allocate(64 * kMiB);
  ASSERT_THAT(weights.status(), IsOk());
  {
    std::vector<DeviceBuffer> acts;
    for (int i = 0; i < 8; ++i) {
      absl::StatusOr<DeviceBuffer> b = a->Allocate(48 * kMiB + i * kMiB);
      ASSERT_THAT(b.status(), IsOk());
      acts.push_back(*std::move(b));
    }
  }  // freed: cached (the weights keep the allocator from being idle)
  const auto freed = std::chrono::steady_clock::now();
  // Back to the weights plus at most the reserve (limit / 64). Not a timed test: it waits up
  // to 20 s, and prints how long it took (5-10 ms by design, plus the give-back itself).
  const uint64_t bound = before + 64 * kMiB + kLimit / 64;
  uint64_t reserved = a->Stats().bytes_reserved;
  while (reserved > bound && std::chrono::steady_clock::now() - freed < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    reserved = a->Stats().bytes_reserved;
  }
  EXPECT_LE(reserved, bound) << a->DumpMemoryLog();
  std::printf(
      "quiet give-back %.1f ms after the last free\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - freed).count());
  EXPECT_EQ(a->Stats().bytes_in_use, before + 64 * kMiB);
  EXPECT_THAT(a->CheckInvariants(), IsOk());
}

}  // namespace
}  // namespace vgpu
