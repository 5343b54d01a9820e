// Stress (issue 7): 8 threads allocate and free random sizes on 4 logical devices of ONE
// physical device, each operation on a randomly chosen device, for a fixed number of
// operations. A monitor thread checks at every moment that no device is over its limit; at the
// end every allocator's invariants hold, live data was never overwritten by a neighbour, and
// all memory goes back to the card.
#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "vgpu/allocator/factory.h"
#include "vgpu/devices/config.h"
#include "vgpu/devices/runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::vgpu::testing::IsOk;

class LogicalDevicesStress : public ::testing::TestWithParam<AllocatorKind> {};

TEST_P(LogicalDevicesStress, EightThreadsFourDevicesOneCard) {
  auto platform = HostPlatform::Create(HostPlatformOptions{{2 * kGiB}});
  ASSERT_THAT(platform, IsOk());
  RuntimeConfig config;
  PhysicalDeviceConfig card;
  card.ordinal = 0;
  for (int i = 0; i < 4; ++i) card.logical_devices.push_back(LogicalDeviceConfig::Bytes(256 * kMiB));
  config.logical_devices.push_back(card);
  config.allow_growth = true;
  config.allocator = GetParam();
  auto rt = Runtime::Create(config, platform->get());
  ASSERT_THAT(rt, IsOk());
  std::vector<LogicalDevice*> gpus = (*rt)->gpus();
  ASSERT_EQ(gpus.size(), 4u);

  std::atomic<bool> done{false};
  std::atomic<int64_t> violations{0}, monitor_checks{0};
  std::thread monitor([&] {
    while (!done.load()) {
      for (LogicalDevice* d : gpus) {
        AllocatorStats s = d->allocator()->Stats();
        if (s.bytes_in_use > d->memory_limit() || s.bytes_reserved > d->memory_limit()) ++violations;
      }
      ++monitor_checks;
      std::this_thread::yield();
    }
  });

  constexpr int kThreads = 8, kOpsPerThread = 40000;
  std::atomic<int64_t> ooms{0}, corrupt{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      struct Held { LogicalDevice* d; void* p; uint64_t n; uint8_t tag; };
      std::vector<Held> held;
      for (int op = 0; op < kOpsPerThread; ++op) {
        if (!held.empty() && (rng() % 2 == 0 || held.size() > 24)) {
          size_t i = rng() % held.size();
          const Held& h = held[i];
          const auto* b = static_cast<const uint8_t*>(h.p);
          if (b[0] != h.tag || b[h.n - 1] != h.tag) ++corrupt;
          EXPECT_THAT(h.d->allocator()->Deallocate(h.p), IsOk());
          held[i] = held.back();
          held.pop_back();
        } else {
          LogicalDevice* d = gpus[rng() % gpus.size()];
          uint64_t n = (uint64_t{1} << (8 + rng() % 17)) + rng() % 4096;  // 256 B .. 32 MiB
          auto p = d->allocator()->AllocateRaw(n);
          if (!p.ok()) {
            EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << p.status();
            ++ooms;
            continue;
          }
          uint8_t tag = static_cast<uint8_t>(rng() | 1);
          auto* b = static_cast<uint8_t*>(*p);
          b[0] = tag;  // touch only the ends: pages commit when written
          b[n - 1] = tag;
          held.push_back({d, *p, n, tag});
        }
      }
      for (const Held& h : held) EXPECT_THAT(h.d->allocator()->Deallocate(h.p), IsOk());
    });
  }
  for (auto& th : threads) th.join();
  done = true;
  monitor.join();

  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(monitor_checks.load(), 0);  // the monitor really ran during the storm
  EXPECT_EQ(corrupt.load(), 0);
  for (LogicalDevice* d : gpus) {
    EXPECT_THAT(d->allocator()->CheckInvariants(), IsOk()) << d->name();
    AllocatorStats s = d->allocator()->Stats();
    EXPECT_EQ(s.bytes_in_use, 0u) << d->name();
    EXPECT_LE(s.peak_bytes_in_use, d->memory_limit()) << d->name();
  }
  rt->reset();
  EXPECT_EQ((*platform)->Describe(0)->free_bytes, 2 * kGiB);  // nothing leaked on the card
}

INSTANTIATE_TEST_SUITE_P(Kinds, LogicalDevicesStress,
                         ::testing::Values(AllocatorKind::kBfc, AllocatorKind::kVmm),
                         [](const auto& info) { return std::string(AllocatorKindName(info.param)); });

}  // namespace
}  // namespace vgpu
