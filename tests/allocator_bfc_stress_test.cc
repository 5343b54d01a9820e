// Stress: the random_mixed trace replayed at a tight limit with periodic invariant
// checks, and 8 threads hammering one allocator near its limit (runs under TSan in CI).
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/allocator/trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

std::unique_ptr<BFCAllocator> Make(uint64_t limit, bool growth) {
  BFCOptions o;
  o.name = "stress";
  o.memory_limit = limit;
  o.allow_growth = growth;
  return std::make_unique<BFCAllocator>(std::make_unique<FakeSubAllocator>(), o);
}

TEST(BfcStressTest, SharedTraceWithInvariants) {
  const char* src = std::getenv("VGPU_TEST_SRCDIR");
  if (src == nullptr) GTEST_SKIP() << "VGPU_TEST_SRCDIR is not set";
  std::string path = std::string(src) + "/tools/traces/random_mixed.trace";
  auto trace = ReadTraceFile(path);
  ASSERT_THAT(trace, IsOk());
  for (bool growth : {false, true}) {
    // 1.3x peak live: the documented bar, so every allocation must succeed.
    auto a = Make(trace->peak_live_bytes * 13 / 10, growth);
    std::vector<void*> slots(trace->max_live_blocks, nullptr);
    size_t n = 0;
    for (const TraceEvent& e : trace->events) {
      if (e.alloc) {
        auto p = a->AllocateRaw(e.bytes);
        ASSERT_THAT(p, IsOk()) << "event " << n;
        slots[e.slot] = *p;
      } else {
        ASSERT_THAT(a->Deallocate(slots[e.slot]), IsOk());
      }
      if (++n % 5000 == 0) ASSERT_THAT(a->CheckInvariants(), IsOk()) << "event " << n;
    }
    EXPECT_THAT(a->CheckInvariants(), IsOk());
    EXPECT_EQ(a->Stats().bytes_in_use, 0u);
  }
}

TEST(BfcStressTest, EightThreadsNearTheLimit) {
  for (bool growth : {false, true}) {
    auto a = Make(uint64_t{64} << 20, growth);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&a, t] {
        std::mt19937_64 rng(t * 31 + 7);
        std::vector<void*> mine;
        for (int i = 0; i < 4000; ++i) {
          if (mine.empty() || (mine.size() < 32 && rng() % 2 == 0)) {
            uint64_t bytes = uint64_t{256} << (rng() % 17);  // up to 16 MiB
            auto p = a->AllocateRaw(bytes + rng() % bytes, rng() % 16 == 0 ? 65536 : 256);
            if (p.ok()) {
              mine.push_back(*p);
            } else {
              EXPECT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted));
            }
          } else {
            size_t k = rng() % mine.size();
            EXPECT_THAT(a->Deallocate(mine[k]), IsOk());
            mine[k] = mine.back();
            mine.pop_back();
          }
          if (i % 1000 == 0) EXPECT_THAT(a->CheckInvariants(), IsOk());
        }
        for (void* p : mine) EXPECT_THAT(a->Deallocate(p), IsOk());
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_THAT(a->CheckInvariants(), IsOk());
    AllocatorStats s = a->Stats();
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.num_allocs, s.num_frees);
    EXPECT_GT(s.num_ooms, 0u);  // it did run into the limit
  }
}

}  // namespace
}  // namespace vgpu
