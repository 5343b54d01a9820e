// Helpers shared by the vmm allocator's tests on real memory (vmm_allocator_test on the host
// platform's memfd mappings, vmm_allocator_gpu_test on a GPU): making the allocator the way the
// runtime does, and the scenario that forces a block to be stitched from scattered granules.
//
// Thread safety: test helpers, called from the test's thread.
#ifndef VGPU_TESTS_VMM_TEST_UTIL_H_
#define VGPU_TESTS_VMM_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu::testing {

// A vmm allocator of GPU:0 over `executor`, made by the factory as the runtime makes it; null
// (and a test failure) when it cannot be made.
inline std::unique_ptr<Allocator> MakeVmmAllocator(Executor* executor, uint64_t limit,
                                                   bool growth) {
  DeviceAllocatorOptions o;
  o.kind = AllocatorKind::kVmm;
  o.device_name = "/job:localhost/replica:0/task:0/device:GPU:0 (physical GPU 0)";
  o.memory_limit = limit;
  o.allow_growth = growth;
  auto a = CreateDeviceAllocator(executor, o);
  EXPECT_THAT(a.status(), IsOk());
  return a.ok() ? *std::move(a) : nullptr;
}

// What StitchScatteredGranules leaves live.
struct StitchedBlock {
  std::vector<void*> blocks;  // the 16 one-granule blocks; the odd ones are freed
  void* big = nullptr;        // 8 granules, necessarily stitched from the freed ones
};

// Fills `vmm` (a limit of 16 granules) with one-granule blocks, running `fill(i, block)` on
// each, frees the odd ones, trims the cache so that nothing mapped can be reused, and takes one
// 8-granule block. Call under ASSERT_NO_FATAL_FAILURE.
inline void StitchScatteredGranules(VmmAllocator* vmm, uint64_t granule, StitchedBlock* out,
                                    const std::function<void(int, void*)>& fill = nullptr) {
  for (int i = 0; i < 16; ++i) {
    auto p = vmm->AllocateRaw(granule);
    ASSERT_THAT(p.status(), IsOk());
    out->blocks.push_back(*p);
    if (fill) fill(i, *p);
  }
  EXPECT_THAT(vmm->AllocateRaw(granule).status(), StatusIs(absl::StatusCode::kResourceExhausted));
  for (int i = 1; i < 16; i += 2) ASSERT_THAT(vmm->Deallocate(out->blocks[i]), IsOk());
  ASSERT_THAT(vmm->Trim(), IsOk());
  auto big = vmm->AllocateRaw(8 * granule);
  ASSERT_THAT(big.status(), IsOk());
  out->big = *big;
}

// Frees what StitchScatteredGranules left live; the allocator's invariants must hold.
inline void FreeStitchedBlock(VmmAllocator* vmm, const StitchedBlock& s) {
  ASSERT_THAT(vmm->Deallocate(s.big), IsOk());
  for (size_t i = 0; i < s.blocks.size(); i += 2) ASSERT_THAT(vmm->Deallocate(s.blocks[i]), IsOk());
  EXPECT_THAT(vmm->CheckInvariants(), IsOk());
}

// `kib` KiB of a 2 MiB granule, scaled to `granule`.
inline uint64_t EdgeHolePart(uint64_t granule, uint64_t kib) { return kib * granule / 2048; }
// The edge-view layout: a vmm allocator at a limit of two granules, both one-granule slabs
// filled with blocks of 600, 800, 648 | 648, 800, 600 KiB (EdgeHolePart), running
// `fill(i, block, bytes)` on each; then blocks 2 and 3 are freed, which leaves 648 KiB free at
// the end of the first slab and at the start of the second, and no hole that fits 1000 KiB.
// `blocks` gets all six (2 and 3 freed). Call under ASSERT_NO_FATAL_FAILURE.
inline void MakeEdgeHoles(Allocator* a, uint64_t granule, std::vector<char*>* blocks,
                          const std::function<void(int, void*, uint64_t)>& fill = nullptr) {
  for (uint64_t kib : {600, 800, 648, 648, 800, 600}) {
    const uint64_t bytes = EdgeHolePart(granule, kib);
    auto p = a->AllocateRaw(bytes);
    ASSERT_THAT(p.status(), IsOk()) << kib;
    if (fill) fill(static_cast<int>(blocks->size()), *p, bytes);
    blocks->push_back(static_cast<char*>(*p));
  }
  char* a3 = (*blocks)[2];
  char* b1 = (*blocks)[3];
  ASSERT_EQ(reinterpret_cast<uint64_t>(a3 + EdgeHolePart(granule, 648)) % granule, 0u);
  ASSERT_EQ(reinterpret_cast<uint64_t>(b1) % granule, 0u);
  ASSERT_THAT(a->Deallocate(a3), IsOk());
  ASSERT_THAT(a->Deallocate(b1), IsOk());
}

}  // namespace vgpu::testing

#endif  // VGPU_TESTS_VMM_TEST_UTIL_H_
