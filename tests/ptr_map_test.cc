#include "vgpu/allocator/ptr_map.h"

#include <cstdint>
#include <random>
#include <unordered_map>

#include "gtest/gtest.h"

namespace vgpu {
namespace {

TEST(PtrMapTest, InsertFindErase) {
  PtrMap m;
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.Find(0x1000), PtrMap::kNotFound);
  EXPECT_TRUE(m.Insert(0x1000, 7));
  EXPECT_FALSE(m.Insert(0x1000, 8)) << "a present key is not overwritten";
  EXPECT_EQ(m.Find(0x1000), 7u);
  EXPECT_EQ(m.size(), 1u);
  EXPECT_EQ(m.Erase(0x1100), PtrMap::kNotFound);
  EXPECT_EQ(m.size(), 1u);
  EXPECT_EQ(m.Erase(0x1000), 7u);
  EXPECT_EQ(m.Erase(0x1000), PtrMap::kNotFound) << "second erase finds nothing";
  EXPECT_TRUE(m.empty());
  EXPECT_TRUE(m.Insert(0, 3)) << "address 0 is a valid key";
  EXPECT_EQ(m.Find(0), 3u);
}

// ~0 marks empty slots. It is never a 256-byte-aligned address, but callers pass whatever
// pointer they were given (MAP_FAILED is (void*)-1): it must never "find" an empty slot and
// hand back the stale value left there by an earlier erase.
TEST(PtrMapTest, EmptyMarkerKeyIsNeverFound) {
  constexpr uint64_t kMarker = ~uint64_t{0};
  PtrMap m;
  EXPECT_EQ(m.Find(kMarker), PtrMap::kNotFound) << "fresh map";
  EXPECT_EQ(m.Erase(kMarker), PtrMap::kNotFound) << "fresh map";
  EXPECT_TRUE(m.empty());
  // Leave stale values in empty slots (erase does not clear them), keep a few live.
  for (uint32_t i = 0; i < 64; ++i) ASSERT_TRUE(m.Insert(uint64_t{1} << 40 | i << 8, i));
  for (uint32_t i = 0; i < 64; i += 2) ASSERT_EQ(m.Erase(uint64_t{1} << 40 | i << 8), i);
  EXPECT_EQ(m.Find(kMarker), PtrMap::kNotFound);
  EXPECT_EQ(m.Erase(kMarker), PtrMap::kNotFound);
  EXPECT_FALSE(m.Insert(kMarker, 5)) << "the marker is not a key";
  EXPECT_EQ(m.Find(kMarker), PtrMap::kNotFound);
  EXPECT_EQ(m.size(), 32u);
  for (uint32_t i = 1; i < 64; i += 2) EXPECT_EQ(m.Find(uint64_t{1} << 40 | i << 8), i);
  size_t seen = 0;
  m.ForEach([&](uint64_t key, uint32_t) {
    EXPECT_NE(key, kMarker);
    ++seen;
  });
  EXPECT_EQ(seen, 32u);
}

TEST(PtrMapTest, GrowsAndKeepsEverything) {
  PtrMap m(1);
  for (uint32_t i = 0; i < 10000; ++i) ASSERT_TRUE(m.Insert(uint64_t{1} << 40 | i << 8, i));
  EXPECT_EQ(m.size(), 10000u);
  for (uint32_t i = 0; i < 10000; ++i) ASSERT_EQ(m.Find(uint64_t{1} << 40 | i << 8), i);
  size_t seen = 0;
  m.ForEach([&](uint64_t key, uint32_t value) {
    EXPECT_EQ((key >> 8) & 0xffffffff, value);
    ++seen;
  });
  EXPECT_EQ(seen, 10000u);
}

// Backward-shift deletion is the subtle part: compare with std::unordered_map under a random
// mix of inserts and erases on a small, crowded key space (long probe runs, wrap-around).
TEST(PtrMapTest, RandomOpsMatchReference) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 4; ++round) {
    PtrMap m;
    std::unordered_map<uint64_t, uint32_t> ref;
    for (int op = 0; op < 200000; ++op) {
      // Keys collide often: 512 distinct addresses, some sharing a home slot by design.
      const uint64_t key = (rng() % 512) << (8 + round * 6);
      const uint32_t value = static_cast<uint32_t>(rng());
      switch (rng() % 3) {
        case 0: {
          const bool inserted = ref.emplace(key, value).second;
          ASSERT_EQ(m.Insert(key, value), inserted);
          break;
        }
        case 1: {
          auto it = ref.find(key);
          const uint32_t expect = it == ref.end() ? PtrMap::kNotFound : it->second;
          if (it != ref.end()) ref.erase(it);
          ASSERT_EQ(m.Erase(key), expect);
          break;
        }
        default: {
          auto it = ref.find(key);
          ASSERT_EQ(m.Find(key), it == ref.end() ? PtrMap::kNotFound : it->second);
        }
      }
      ASSERT_EQ(m.size(), ref.size());
    }
    for (const auto& [key, value] : ref) ASSERT_EQ(m.Find(key), value);
  }
}

}  // namespace
}  // namespace vgpu
