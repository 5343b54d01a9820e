// tools/bench_reference.h: the calibration trace is fixed (the same events on every run, the
// shape it claims) and the best-fit reference allocator is a correct allocator (no live blocks
// overlap, freed ranges are reused and coalesced), so its time measures the machine and nothing
// else.
#include "vgpu/tools/bench_reference.h"

#include <cstdint>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu::bench {
namespace {

using ::testing::Ge;
using ::testing::Le;
using ::vgpu::testing::IsOk;

TEST(CalibrationTraceTest, IsDeterministicAndShapedLikeRandomMixed) {
  const Trace a = CalibrationTrace(), b = CalibrationTrace();
  ASSERT_EQ(a.events.size(), b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    ASSERT_EQ(a.events[i].alloc, b.events[i].alloc) << i;
    ASSERT_EQ(a.events[i].bytes, b.events[i].bytes) << i;
    ASSERT_EQ(a.events[i].slot, b.events[i].slot) << i;
  }
  // kCalibrationEvents generated, then the blocks still live freed: 120 of them (the figure
  // tools/bench_reference.h and docs/allocator.md give).
  EXPECT_EQ(a.events.size(), static_cast<size_t>(kCalibrationEvents) + 120);
  EXPECT_EQ(a.unfreed_blocks, 0u);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const TraceEvent& e : a.events) {
    if (!e.alloc) continue;
    lo = std::min(lo, e.bytes);
    hi = std::max(hi, e.bytes);
  }
  EXPECT_THAT(lo, Ge(1024u));
  EXPECT_THAT(hi, Le(uint64_t{64} << 20));
  EXPECT_GT(hi, uint64_t{32} << 20);  // log-uniform: the top octave is reached
  // Live set bounded near 1 GiB: over it by at most one block.
  EXPECT_THAT(a.peak_live_bytes, Ge(uint64_t{1} << 30));
  EXPECT_THAT(a.peak_live_bytes, Le((uint64_t{1} << 30) + (uint64_t{64} << 20)));
}

TEST(ReferenceAllocatorTest, NoLiveBlocksOverlapOnTheCalibrationTrace) {
  const Trace t = CalibrationTrace();
  const ReferenceReplay r = ReplayOnReference(t, /*check_overlaps=*/true);
  EXPECT_EQ(r.overlaps, 0u);
  EXPECT_GT(r.ns_per_op, 0);
  // Best fit with coalescing reuses freed ranges: its footprint stays within a small factor of
  // the peak live bytes (a bump allocator's would be the sum of every allocation).
  uint64_t total = 0;
  for (const TraceEvent& e : t.events) total += e.alloc ? e.bytes : 0;
  EXPECT_GE(r.peak_bytes, t.peak_live_bytes);
  EXPECT_LT(r.peak_bytes, 2 * t.peak_live_bytes);
  EXPECT_LT(r.peak_bytes, total / 4);
}

TEST(ReferenceAllocatorTest, ReusesTheBestFitAndCoalesces) {
  // a(4 KiB) b(1 KiB) c(4 KiB) d(1 KiB) e(8 KiB); free b and d, then 1 KiB fits b's range
  // exactly (no growth); free a, b', c: one 9 KiB range, which takes 9 KiB without growth.
  TraceBuilder b("event");
  uint64_t at = 0;
  auto alloc = [&](uint64_t id, uint64_t bytes) {
    ASSERT_THAT(b.Alloc(id, bytes, 0, at++), IsOk());
  };
  auto free = [&](uint64_t id) { ASSERT_THAT(b.Free(id, 0), IsOk()); };
  alloc(1, 4096);
  alloc(2, 1024);
  alloc(3, 4096);
  alloc(4, 1024);
  alloc(5, 8192);
  free(2);
  free(4);
  alloc(6, 1000);  // best fit: one of the 1 KiB holes
  free(1);
  free(6);
  free(3);
  alloc(7, 9216);  // the coalesced a + b + c (or a + b' + c: 4 + 1 + 4 KiB)
  absl::StatusOr<Trace> t = std::move(b).Finish("test");
  ASSERT_THAT(t.status(), IsOk());
  const ReferenceReplay r = ReplayOnReference(*t, /*check_overlaps=*/true);
  EXPECT_EQ(r.overlaps, 0u);
  EXPECT_EQ(r.peak_bytes, 4096u + 1024 + 4096 + 1024 + 8192);
}

}  // namespace
}  // namespace vgpu::bench
