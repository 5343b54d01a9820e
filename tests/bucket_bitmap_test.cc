#include "vgpu/allocator/bucket_bitmap.h"

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace vgpu {
namespace {

TEST(BucketBitmapTest, EmptyFindsNothing) {
  BucketBitmap b;
  EXPECT_EQ(b.Next(-1), -1);
  EXPECT_EQ(b.Prev(0), -1);
  EXPECT_EQ(b.AtLeast(0), -1);
  EXPECT_EQ(b.AtMost(5), -1);
  b.Resize(100);
  EXPECT_EQ(b.Next(-1), -1);
  EXPECT_EQ(b.Prev(100), -1);
  EXPECT_EQ(b.AtMost(1000), -1);
  EXPECT_FALSE(b.Test(3));
  EXPECT_FALSE(b.Test(1000)) << "past the end is empty, not out of bounds";
}

TEST(BucketBitmapTest, NeighboursAcrossWordsAndSummaryWords) {
  BucketBitmap b;
  b.Resize(10000);
  const std::vector<int64_t> set = {0, 63, 64, 4095, 4096, 9999};
  for (int64_t i : set) b.Set(static_cast<size_t>(i));
  // Each set bucket's neighbours are the next and previous in the list, -1 past either end.
  EXPECT_EQ(b.Next(-1), set.front());
  EXPECT_EQ(b.Prev(10000), set.back());
  for (size_t i = 0; i < set.size(); ++i) {
    EXPECT_EQ(b.Next(set[i]), i + 1 < set.size() ? set[i + 1] : -1) << "Next(" << set[i] << ")";
    EXPECT_EQ(b.Prev(set[i]), i > 0 ? set[i - 1] : -1) << "Prev(" << set[i] << ")";
  }
  EXPECT_EQ(b.AtLeast(64), 64);
  EXPECT_EQ(b.AtLeast(65), 4095);
  EXPECT_EQ(b.AtMost(4094), 64);
  EXPECT_EQ(b.AtMost(20000), 9999);
  b.Clear(64);
  b.Clear(63);
  EXPECT_EQ(b.Next(0), 4095) << "a word emptied by Clear leaves the summary";
  EXPECT_EQ(b.Prev(4095), 0);
}

TEST(BucketBitmapTest, GrowingKeepsMarks) {
  BucketBitmap b;
  b.Resize(10);
  b.Set(7);
  b.Resize(70000);
  b.Set(65000);
  EXPECT_TRUE(b.Test(7));
  EXPECT_EQ(b.Next(7), 65000);
  EXPECT_EQ(b.Prev(65000), 7);
}

// Against std::set on random sets and queries.
TEST(BucketBitmapTest, MatchesAnOrderedSet) {
  std::mt19937_64 rng(7);
  for (size_t n : {1, 63, 64, 65, 4095, 4096, 4097, 70000}) {
    BucketBitmap b;
    b.Resize(n);
    std::set<int64_t> s;
    for (int step = 0; step < 3000; ++step) {
      const int64_t i = static_cast<int64_t>(rng() % n);
      if (rng() % 3 == 0) {
        b.Clear(i);
        s.erase(i);
      } else {
        b.Set(i);
        s.insert(i);
      }
      const int64_t q = static_cast<int64_t>(rng() % (n + 4)) - 2;  // past both ends too
      auto up = s.upper_bound(q);
      ASSERT_EQ(b.Next(q), up == s.end() ? -1 : *up) << "n " << n << " q " << q;
      auto lo = s.lower_bound(q);
      ASSERT_EQ(b.Prev(q), lo == s.begin() ? -1 : *std::prev(lo)) << "n " << n << " q " << q;
      ASSERT_EQ(b.AtLeast(q), lo == s.end() ? -1 : *lo) << "n " << n << " q " << q;
      ASSERT_EQ(b.AtMost(q), up == s.begin() ? -1 : *std::prev(up)) << "n " << n << " q " << q;
    }
  }
}

}  // namespace
}  // namespace vgpu
