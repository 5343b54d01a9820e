// BucketBitmap: which of n buckets are non-empty, with the nearest non-empty bucket above or
// below any index in a few word scans (a bit per bucket plus a summary bit per word). The vmm
// allocator's size-indexed free lists use it (open parts of shared granules by bytes, cached
// ranges by granule count), so finding the best fit allocates nothing and walks no tree.
//
// Thread safety: not thread-safe; its owner serialises access (the allocator's lock).
#ifndef VGPU_ALLOCATOR_BUCKET_BITMAP_H_
#define VGPU_ALLOCATOR_BUCKET_BITMAP_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vgpu {

class BucketBitmap {
 public:
  // Buckets 0 .. n-1, all empty. Growing keeps the marks already set.
  void Resize(size_t n) {
    n_ = n;
    bits_.resize((n + 63) / 64, 0);
    top_.resize((bits_.size() + 63) / 64, 0);
  }
  size_t size() const { return n_; }

  void Set(size_t b) {
    bits_[b >> 6] |= uint64_t{1} << (b & 63);
    top_[b >> 12] |= uint64_t{1} << ((b >> 6) & 63);
  }
  void Clear(size_t b) {
    bits_[b >> 6] &= ~(uint64_t{1} << (b & 63));
    if (bits_[b >> 6] == 0) top_[b >> 12] &= ~(uint64_t{1} << ((b >> 6) & 63));
  }
  bool Test(size_t b) const { return b < n_ && (bits_[b >> 6] >> (b & 63) & 1) != 0; }

  // The highest set bucket below b / the lowest above b, or -1.
  int64_t Prev(int64_t b) const { return AtMost(b - 1); }
  int64_t Next(int64_t b) const { return b < 0 ? AtLeast(0) : AtLeast(b + 1); }

  // The highest set bucket <= b / the lowest >= b, or -1. The word of b first (the common
  // case: one load and a bit scan), then the summary.
  [[gnu::always_inline]] int64_t AtMost(int64_t b) const {
    if (b < 0 || n_ == 0) return -1;
    if (b >= static_cast<int64_t>(n_)) b = static_cast<int64_t>(n_) - 1;
    const int64_t w = b >> 6;
    if (const uint64_t m = bits_[w] & (~uint64_t{0} >> (63 - (b & 63))); m != 0) {
      return w * 64 + 63 - std::countl_zero(m);
    }
    // The highest non-empty word below w.
    for (int64_t t = w >> 6; t >= 0; --t) {
      uint64_t m = top_[t];
      if (t == (w >> 6)) m &= (uint64_t{1} << (w & 63)) - 1;
      if (m != 0) {
        const int64_t pw = t * 64 + 63 - std::countl_zero(m);
        return pw * 64 + 63 - std::countl_zero(bits_[pw]);
      }
    }
    return -1;
  }
  [[gnu::always_inline]] int64_t AtLeast(int64_t b) const {
    if (b < 0) b = 0;
    if (b >= static_cast<int64_t>(n_)) return -1;
    const int64_t w = b >> 6;
    if (const uint64_t m = bits_[w] & (~uint64_t{0} << (b & 63)); m != 0) {
      return w * 64 + std::countr_zero(m);
    }
    // The lowest non-empty word above w.
    for (int64_t t = (w + 1) >> 6; t < static_cast<int64_t>(top_.size()); ++t) {
      uint64_t m = top_[t];
      if (t == ((w + 1) >> 6)) m &= ~uint64_t{0} << ((w + 1) & 63);
      if (m != 0) {
        const int64_t nw = t * 64 + std::countr_zero(m);
        return nw * 64 + std::countr_zero(bits_[nw]);
      }
    }
    return -1;
  }

 private:
  size_t n_ = 0;
  std::vector<uint64_t> bits_;
  std::vector<uint64_t> top_;  // bit w: bits_[w] != 0
};

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_BUCKET_BITMAP_H_
