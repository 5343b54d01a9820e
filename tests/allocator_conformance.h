// The conformance suite every Allocator passes: alignment, distinct blocks, zero-byte
// requests, bad alignments, the hard limit and clean OOMs, bad pointers, stats, DeviceBuffer
// ownership, threads and invariants.
//
// To add an allocator, write a type with
//   static constexpr bool kRealMemory;   // true: blocks may be written (not fake addresses)
//   static std::unique_ptr<Allocator> Make(uint64_t limit);  // limit: a multiple of 2 MiB
//   // Fake-address types only (required when kRealMemory is false): another instance whose
//   // addresses differ from Make's (a different fake base address), for the foreign-pointer
//   // test. Real-memory types get a second Make().
//   static std::unique_ptr<Allocator> MakeOther(uint64_t limit);
//   // Optional: false when the type cannot run here (no GPU); the tests then skip.
//   static bool Available();
//   // Optional: a stronger check than CheckInvariants (the fake-VMM types also compare the
//   // fake device's counts); the suite calls it wherever it checks invariants.
//   static absl::Status Check(const Allocator& allocator);
// and instantiate the suite in your own test file:
//   using MyTypes = ::testing::Types<MyAllocatorType>;
//   INSTANTIATE_TYPED_TEST_SUITE_P(Mine, AllocatorConformance, MyTypes);
#ifndef VGPU_TESTS_ALLOCATOR_CONFORMANCE_H_
#define VGPU_TESTS_ALLOCATOR_CONFORMANCE_H_

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "vgpu/allocator/allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu::testing {

inline constexpr uint64_t kConformanceLimit = uint64_t{64} << 20;

// The suite's invariant check: T::Check when the type has one, else CheckInvariants.
template <typename T>
absl::Status CheckAllocator(const Allocator& a) {
  if constexpr (requires { T::Check(a); }) {
    return T::Check(a);
  } else {
    return a.CheckInvariants();
  }
}

template <typename T>
class AllocatorConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    if constexpr (requires { T::Available(); }) {
      if (!T::Available()) GTEST_SKIP() << "not available on this machine (no GPU)";
    }
    allocator_ = T::Make(kConformanceLimit);
    ASSERT_NE(allocator_, nullptr);
  }
  void TearDown() override {
    if (allocator_ != nullptr) EXPECT_THAT(CheckAllocator<T>(*allocator_), IsOk());
  }
  std::unique_ptr<Allocator> allocator_;
};

TYPED_TEST_SUITE_P(AllocatorConformance);

// A second allocator of the same kind whose blocks cannot be the first one's.
template <typename T>
std::unique_ptr<Allocator> MakeOtherAllocator(uint64_t limit) {
  if constexpr (requires { T::MakeOther(limit); }) {
    return T::MakeOther(limit);
  } else {
    static_assert(T::kRealMemory,
                  "a fake-address allocator type needs MakeOther(limit) with a different base "
                  "address: two fake pools from one base hand out the same addresses");
    return T::Make(limit);
  }
}

TYPED_TEST_P(AllocatorConformance, DistinctAlignedBlocks) {
  Allocator& a = *this->allocator_;
  std::vector<std::pair<uint64_t, uint64_t>> blocks;
  std::vector<void*> ptrs;
  for (uint64_t bytes : {1, 255, 256, 257, 4096, 100000, 1 << 20, 3 << 20, 5000, 7}) {
    auto p = a.AllocateRaw(bytes);
    ASSERT_THAT(p, IsOk()) << bytes;
    ASSERT_EQ(reinterpret_cast<uint64_t>(*p) % 256, 0u) << bytes;
    blocks.emplace_back(reinterpret_cast<uint64_t>(*p), bytes);
    ptrs.push_back(*p);
    if (TypeParam::kRealMemory) std::memset(*p, static_cast<int>(bytes & 0xff), bytes);
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    EXPECT_LE(blocks[i - 1].first + blocks[i - 1].second, blocks[i].first) << "overlap";
  }
  if (TypeParam::kRealMemory) {
    for (void* p : ptrs) {
      auto it = std::find_if(blocks.begin(), blocks.end(), [&](const auto& b) {
        return b.first == reinterpret_cast<uint64_t>(p);
      });
      const auto* bytes = static_cast<const unsigned char*>(p);
      EXPECT_EQ(bytes[0], it->second & 0xff);
      EXPECT_EQ(bytes[it->second - 1], it->second & 0xff);
    }
  }
  for (void* p : ptrs) EXPECT_THAT(a.Deallocate(p), IsOk());
  EXPECT_EQ(a.Stats().bytes_in_use, 0u);
}

TYPED_TEST_P(AllocatorConformance, ZeroBytesAndNullptr) {
  Allocator& a = *this->allocator_;
  auto b = a.Allocate(0);
  ASSERT_THAT(b, IsOk());
  EXPECT_TRUE(b->empty());
  EXPECT_THAT(a.Deallocate(nullptr), IsOk());
  EXPECT_EQ(a.Stats().num_allocs, 0u);
}

TYPED_TEST_P(AllocatorConformance, LargeAlignments) {
  Allocator& a = *this->allocator_;
  std::vector<void*> ptrs;
  for (uint64_t alignment : {512, 4096, 65536, 1 << 20, 2 << 20}) {
    auto p = a.AllocateRaw(1000 + alignment / 3, alignment);
    ASSERT_THAT(p, IsOk()) << alignment;
    EXPECT_EQ(reinterpret_cast<uint64_t>(*p) % alignment, 0u) << alignment;
    ptrs.push_back(*p);
  }
  for (void* p : ptrs) EXPECT_THAT(a.Deallocate(p), IsOk());
}

TYPED_TEST_P(AllocatorConformance, BadAlignmentIsInvalidArgument) {
  Allocator& a = *this->allocator_;
  EXPECT_THAT(a.AllocateRaw(1024, 3).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(a.AllocateRaw(1024, uint64_t{0}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(a.Stats().num_allocs, 0u);
}

TYPED_TEST_P(AllocatorConformance, FillsToTheLimitThenFailsCleanly) {
  Allocator& a = *this->allocator_;
  std::vector<void*> ptrs;
  uint64_t total = 0;
  absl::Status last;
  while (true) {
    auto p = a.AllocateRaw(1 << 20);
    if (!p.ok()) {
      last = p.status();
      break;
    }
    ptrs.push_back(*p);
    total += 1 << 20;
    ASSERT_LE(total, kConformanceLimit) << "allocated past the limit";
  }
  EXPECT_THAT(last, StatusIs(absl::StatusCode::kResourceExhausted, ::testing::HasSubstr(a.name())));
  EXPECT_GE(total, kConformanceLimit / 2);  // the limit is usable
  AllocatorStats s = a.Stats();
  EXPECT_LE(s.bytes_reserved, kConformanceLimit);
  EXPECT_GE(s.num_ooms, 1u);
  EXPECT_THAT(CheckAllocator<TypeParam>(a), IsOk());
  // Freeing makes room again.
  ASSERT_FALSE(ptrs.empty());
  EXPECT_THAT(a.Deallocate(ptrs.back()), IsOk());
  ptrs.pop_back();
  auto again = a.AllocateRaw(1 << 20);
  EXPECT_THAT(again, IsOk());
  if (again.ok()) ptrs.push_back(*again);
  EXPECT_THAT(a.AllocateRaw(kConformanceLimit + 1).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  for (void* p : ptrs) EXPECT_THAT(a.Deallocate(p), IsOk());
  EXPECT_EQ(a.Stats().bytes_in_use, 0u);
}

// Double frees, interior pointers, stack addresses, MAP_FAILED ((void*)-1) and live blocks of
// another allocator of the same kind: a clear InvalidArgument naming this allocator, and no
// change to its stats or bookkeeping (the other allocator's blocks stay its own).
TYPED_TEST_P(AllocatorConformance, BadPointersChangeNothing) {
  Allocator& a = *this->allocator_;
  auto p = a.AllocateRaw(4096);
  auto big = a.AllocateRaw(3 << 20);
  ASSERT_THAT(p, IsOk());
  ASSERT_THAT(big, IsOk());
  std::unique_ptr<Allocator> other = MakeOtherAllocator<TypeParam>(kConformanceLimit);
  ASSERT_NE(other, nullptr);
  auto q = other->AllocateRaw(4096);
  auto qbig = other->AllocateRaw(3 << 20);
  ASSERT_THAT(q, IsOk());
  ASSERT_THAT(qbig, IsOk());
  ASSERT_NE(*q, *p) << "the other allocator must hand out different addresses";
  ASSERT_NE(*qbig, *big) << "the other allocator must hand out different addresses";
  const AllocatorStats before = a.Stats();
  const AllocatorStats other_before = other->Stats();
  auto expect_same = [&](const AllocatorStats& s, const AllocatorStats& b, const char* what) {
    EXPECT_EQ(s.num_allocs, b.num_allocs) << what;
    EXPECT_EQ(s.num_frees, b.num_frees) << what;
    EXPECT_EQ(s.bytes_in_use, b.bytes_in_use) << what;
    EXPECT_EQ(s.bytes_reserved, b.bytes_reserved) << what;
    EXPECT_EQ(s.largest_free_block, b.largest_free_block) << what;
    EXPECT_EQ(s.regions_unmapped, b.regions_unmapped) << what;
  };
  int local = 0;
  const std::pair<void*, const char*> bad[] = {
      {&local, "a stack address"},
      {static_cast<char*>(*p) + 256, "inside a small block"},
      {static_cast<char*>(*big) + 256, "inside a large block"},
      {reinterpret_cast<void*>(~uintptr_t{0}), "(void*)-1 (MAP_FAILED)"},
      {*q, "another allocator's small block"},
      {*qbig, "another allocator's large block"},
  };
  for (const auto& [ptr, what] : bad) {
    absl::Status s = a.Deallocate(ptr);
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr(a.name())))
        << what;
    expect_same(a.Stats(), before, what);
    EXPECT_THAT(CheckAllocator<TypeParam>(a), IsOk()) << what;
  }
  expect_same(other->Stats(), other_before, "the other allocator");
  EXPECT_THAT(a.Deallocate(*p), IsOk());
  EXPECT_THAT(a.Deallocate(*p), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(a.Stats().num_frees, before.num_frees + 1);
  EXPECT_THAT(a.Deallocate(*big), IsOk());
  EXPECT_THAT(other->Deallocate(*q), IsOk());
  EXPECT_THAT(other->Deallocate(*qbig), IsOk());
  EXPECT_THAT(CheckAllocator<TypeParam>(*other), IsOk());
  EXPECT_EQ(a.Stats().bytes_in_use, 0u);
}

TYPED_TEST_P(AllocatorConformance, StatsTrackUsage) {
  Allocator& a = *this->allocator_;
  auto x = a.AllocateRaw(1000);
  auto y = a.AllocateRaw(3 << 20);
  ASSERT_THAT(x, IsOk());
  ASSERT_THAT(y, IsOk());
  AllocatorStats s = a.Stats();
  EXPECT_EQ(s.num_allocs, 2u);
  EXPECT_GE(s.bytes_in_use, 1000u + (3 << 20));
  EXPECT_GE(s.bytes_reserved, s.bytes_in_use);
  EXPECT_LE(s.bytes_reserved, kConformanceLimit);
  EXPECT_EQ(s.bytes_limit, kConformanceLimit);
  EXPECT_EQ(s.largest_alloc_size, uint64_t{3} << 20);
  EXPECT_GE(s.regions_mapped, 1u);
  EXPECT_GE(s.fragmentation, 0.0);
  EXPECT_LE(s.fragmentation, 1.0);
  EXPECT_FALSE(s.ToString().empty());
  EXPECT_THAT(a.Deallocate(*y), IsOk());
  EXPECT_THAT(a.Deallocate(*x), IsOk());
  s = a.Stats();
  EXPECT_EQ(s.num_frees, 2u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_GE(s.peak_bytes_in_use, 1000u + (3 << 20));
  EXPECT_THAT(a.DumpMemoryLog(), ::testing::HasSubstr(a.name()));
}

TYPED_TEST_P(AllocatorConformance, DeviceBufferFreesOnDestruction) {
  Allocator& a = *this->allocator_;
  {
    auto b = a.Allocate(12345);
    ASSERT_THAT(b, IsOk());
    EXPECT_EQ(b->size(), 12345u);
    EXPECT_EQ(b->allocator(), &a);
    DeviceBuffer moved = std::move(*b);
    EXPECT_TRUE(b->empty());
    EXPECT_FALSE(moved.empty());
    EXPECT_EQ(a.Stats().num_frees, 0u);
  }
  EXPECT_EQ(a.Stats().num_frees, 1u);
  EXPECT_EQ(a.Stats().bytes_in_use, 0u);
}

TYPED_TEST_P(AllocatorConformance, ConcurrentUse) {
  Allocator& a = *this->allocator_;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, t] {
      std::mt19937 rng(t + 1);
      std::vector<std::pair<void*, uint64_t>> mine;
      for (int i = 0; i < 500; ++i) {
        if (mine.size() < 8 && rng() % 2 == 0) {
          uint64_t bytes = 256 + rng() % (1 << 20);
          auto p = a.AllocateRaw(bytes);
          if (p.ok()) {
            if (TypeParam::kRealMemory) std::memset(*p, t, 256);
            mine.emplace_back(*p, bytes);
          }
        } else if (!mine.empty()) {
          if (TypeParam::kRealMemory) {
            EXPECT_EQ(static_cast<unsigned char*>(mine.back().first)[255], t);
          }
          EXPECT_THAT(a.Deallocate(mine.back().first), IsOk());
          mine.pop_back();
        }
      }
      for (auto& [p, n] : mine) EXPECT_THAT(a.Deallocate(p), IsOk());
    });
  }
  // Meanwhile a fifth thread empties the cache and restarts the peaks (what a training loop's
  // monitoring does between steps), which must neither race nor disturb the blocks.
  std::atomic<bool> done{false};
  std::thread housekeeping([&a, &done] {
    while (!done.load()) {
      EXPECT_THAT(a.ReleaseCachedMemory().status(), IsOk());
      a.ResetPeakStats();
      const AllocatorStats s = a.Stats();
      EXPECT_LE(s.bytes_in_use, s.bytes_reserved);
      std::this_thread::yield();
    }
  });
  for (auto& t : threads) t.join();
  done = true;
  housekeeping.join();
  AllocatorStats s = a.Stats();
  EXPECT_EQ(s.num_allocs, s.num_frees);
  EXPECT_EQ(s.bytes_in_use, 0u);
}

// ResetPeakStats (TensorFlow's reset_memory_stats, PyTorch's reset_peak_memory_stats): the
// peaks restart from the current values, then track again; the counts keep counting.
TYPED_TEST_P(AllocatorConformance, ResetPeakStatsRestartsThePeaks) {
  Allocator& a = *this->allocator_;
  auto big = a.AllocateRaw(8 << 20);
  auto small = a.AllocateRaw(1 << 20);
  ASSERT_THAT(big, IsOk());
  ASSERT_THAT(small, IsOk());
  ASSERT_THAT(a.Deallocate(*big), IsOk());
  const AllocatorStats before = a.Stats();
  EXPECT_GE(before.peak_bytes_in_use, uint64_t{9} << 20);
  a.ResetPeakStats();
  AllocatorStats s = a.Stats();
  EXPECT_EQ(s.peak_bytes_in_use, s.bytes_in_use);
  EXPECT_GE(s.bytes_in_use, uint64_t{1} << 20);
  EXPECT_LT(s.peak_bytes_in_use, uint64_t{8} << 20);  // the small block's, not the big one's
  EXPECT_EQ(s.peak_bytes_reserved, s.bytes_reserved);
  EXPECT_EQ(s.num_allocs, before.num_allocs);
  EXPECT_EQ(s.num_frees, before.num_frees);
  auto more = a.AllocateRaw(2 << 20);
  ASSERT_THAT(more, IsOk());
  s = a.Stats();
  EXPECT_GE(s.peak_bytes_in_use, uint64_t{3} << 20);
  EXPECT_GE(s.peak_bytes_in_use, s.bytes_in_use);
  EXPECT_GE(s.peak_bytes_reserved, s.bytes_reserved);
  EXPECT_THAT(a.Deallocate(*more), IsOk());
  EXPECT_THAT(a.Deallocate(*small), IsOk());
}

// ReleaseCachedMemory (PyTorch's empty_cache): what it reports is what Stats' reserved bytes
// fell by, live blocks keep their place and contents, and the allocator works on after it.
TYPED_TEST_P(AllocatorConformance, ReleaseCachedMemoryKeepsLiveBlocks) {
  Allocator& a = *this->allocator_;
  std::vector<void*> blocks;
  for (uint64_t bytes : {uint64_t{1} << 10, uint64_t{3} << 20, uint64_t{5} << 20,
                         uint64_t{300} << 10, uint64_t{7} << 20}) {
    auto p = a.AllocateRaw(bytes);
    ASSERT_THAT(p, IsOk());
    blocks.push_back(*p);
  }
  if (TypeParam::kRealMemory) std::memset(blocks[2], 0x5a, 5 << 20);
  for (int i : {1, 3, 4}) ASSERT_THAT(a.Deallocate(blocks[i]), IsOk());
  const AllocatorStats before = a.Stats();
  absl::StatusOr<uint64_t> released = a.ReleaseCachedMemory();
  ASSERT_THAT(released, IsOk());
  AllocatorStats after = a.Stats();
  EXPECT_EQ(*released, before.bytes_reserved - after.bytes_reserved);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_GE(after.bytes_reserved, after.bytes_in_use);
  EXPECT_THAT(CheckAllocator<TypeParam>(a), IsOk());
  if (TypeParam::kRealMemory) {
    const unsigned char* b = static_cast<const unsigned char*>(blocks[2]);
    EXPECT_EQ(b[0], 0x5a);
    EXPECT_EQ(b[(5 << 20) - 1], 0x5a);
  }
  EXPECT_THAT(a.Deallocate(blocks[0]), IsOk());
  EXPECT_THAT(a.Deallocate(blocks[2]), IsOk());
  released = a.ReleaseCachedMemory();
  ASSERT_THAT(released, IsOk());
  after = a.Stats();
  EXPECT_EQ(after.bytes_in_use, 0u);
  auto again = a.AllocateRaw(4 << 20);
  ASSERT_THAT(again, IsOk());
  EXPECT_THAT(a.Deallocate(*again), IsOk());
}

TYPED_TEST_P(AllocatorConformance, RandomOpsKeepInvariants) {
  Allocator& a = *this->allocator_;
  std::mt19937_64 rng(99);
  std::vector<void*> live;
  for (int op = 0; op < 400; ++op) {
    if (live.empty() || rng() % 3 != 0) {
      auto p = a.AllocateRaw(uint64_t{256} << (rng() % 14), rng() % 4 == 0 ? 4096 : 256);
      if (p.ok())
        live.push_back(*p);
      else
        ASSERT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted));
    } else {
      size_t i = rng() % live.size();
      ASSERT_THAT(a.Deallocate(live[i]), IsOk());
      live[i] = live.back();
      live.pop_back();
    }
    ASSERT_THAT(CheckAllocator<TypeParam>(a), IsOk()) << "op " << op;
  }
  for (void* p : live) ASSERT_THAT(a.Deallocate(p), IsOk());
}

REGISTER_TYPED_TEST_SUITE_P(AllocatorConformance, DistinctAlignedBlocks, ZeroBytesAndNullptr,
                            LargeAlignments, BadAlignmentIsInvalidArgument,
                            FillsToTheLimitThenFailsCleanly, BadPointersChangeNothing,
                            StatsTrackUsage, DeviceBufferFreesOnDestruction, ConcurrentUse,
                            ResetPeakStatsRestartsThePeaks, ReleaseCachedMemoryKeepsLiveBlocks,
                            RandomOpsKeepInvariants);

}  // namespace vgpu::testing

#endif  // VGPU_TESTS_ALLOCATOR_CONFORMANCE_H_
