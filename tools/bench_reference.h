// The machine's speed at allocator work, measured beside a replay (`vgpu-bench replay
// --calibrate`), so speed bars can be checked as ratios on machines slower than the one they
// were set on: a textbook best-fit allocator (free ranges in a std::map by address and a
// std::set by size, coalescing on free, live blocks in a std::unordered_map; node allocations
// from malloc) replays a fixed synthetic trace in the shape of random_mixed (log-uniform
// 1 KiB - 64 MiB, live set bounded near 1 GiB) on fake addresses. Its cost is the same kind as
// a replay's (pointer chasing, cache misses, branches) and none of it is ours, so a change to
// our allocators never moves it: the ratio of a replay's ns/op to it is the allocator's speed,
// the machine's mostly divided out (docs/allocator.md, "Speed bars on a slower machine").
//
// Thread safety: every function here is reentrant (no shared state).
#ifndef VGPU_TOOLS_BENCH_REFERENCE_H_
#define VGPU_TOOLS_BENCH_REFERENCE_H_

#include <cstdint>

#include "vgpu/allocator/trace.h"

namespace vgpu::bench {

// The calibration trace: deterministic (its own generator, the same on every machine and
// compiler), kCalibrationEvents events generated, then a free of each block still live
// (40 120 events in all).
inline constexpr int kCalibrationEvents = 40000;
Trace CalibrationTrace();

struct ReferenceReplay {
  // Thread CPU time of the replay per event (ThreadCpuNs, the clock ReplayTrace times ours by).
  double ns_per_op = 0;
  uint64_t peak_bytes = 0;  // the highest address the best-fit allocator used (its footprint)
  // With check_overlaps: live blocks that overlapped (never, for a correct allocator).
  uint64_t overlaps = 0;
};
// Replays `trace` (allocations and frees; streams ignored) on the textbook best-fit allocator;
// check_overlaps also checks every block against the live ones (timed with it: a test's mode).
ReferenceReplay ReplayOnReference(const Trace& trace, bool check_overlaps = false);

}  // namespace vgpu::bench

#endif  // VGPU_TOOLS_BENCH_REFERENCE_H_
