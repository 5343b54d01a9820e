// PtrMap: the allocators' live-pointer index, device address -> 32-bit record. An
// open-addressing hash table with linear probing and backward-shift deletion (no tombstones),
// keyed by 256-byte-aligned addresses, so a lookup is a multiply, a shift and usually one
// compare: about a third of what a general-purpose hash map costs on the allocator's hot path.
// It holds at most half its slots, doubling when it passes that (the only time it allocates).
//
// Thread safety: not thread-safe; its owner serialises access (the allocator's lock).
#ifndef VGPU_ALLOCATOR_PTR_MAP_H_
#define VGPU_ALLOCATOR_PTR_MAP_H_

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace vgpu {

class PtrMap {
 public:
  static constexpr uint32_t kNotFound = 0xffffffffu;

  explicit PtrMap(size_t expected = 64) {
    Rehash(std::bit_ceil(std::max<size_t>(16, 2 * expected)));
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The value stored for `key`, or kNotFound. ~0 (the empty-slot marker, never a key) is
  // always kNotFound: a caller may pass any pointer, e.g. MAP_FAILED ((void*)-1).
  uint32_t Find(uint64_t key) const {
    if (key == kEmpty) return kNotFound;
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.value;
      if (s.key == kEmpty) return kNotFound;
    }
  }

  // Adds key -> value; false (and nothing changed) if the key is present or is ~0 (the
  // empty-slot marker; never a 256-byte-aligned address).
  bool Insert(uint64_t key, uint32_t value) {
    if (key == kEmpty) return false;
    if (2 * (size_ + 1) > slots_.size()) Rehash(2 * slots_.size());
    size_t i = Home(key);
    for (; slots_[i].key != kEmpty; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return false;
    }
    slots_[i] = Slot{key, value};
    ++size_;
    return true;
  }

  // Removes `key`; returns its value, or kNotFound (nothing changed) if absent or ~0.
  uint32_t Erase(uint64_t key) {
    if (key == kEmpty) return kNotFound;
    size_t i = Home(key);
    for (; slots_[i].key != key; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty) return kNotFound;
    }
    const uint32_t value = slots_[i].value;
    // Backward shift: pull later entries of the probe run into the hole when their home
    // allows it, so lookups never need tombstones.
    for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      if (slots_[j].key == kEmpty) break;
      const size_t home = Home(slots_[j].key);
      // j's entry may move to i iff i lies cyclically in [home, j).
      if (((j - home) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].key = kEmpty;
    --size_;
    return value;
  }

  // Calls fn(key, value) for every entry (unspecified order).
  template <class Fn>
  void ForEach(Fn fn) const {
    for (const Slot& s : slots_) {
      if (s.key != kEmpty) fn(s.key, s.value);
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    uint32_t value = 0;
  };

  size_t Home(uint64_t key) const {
    // Fibonacci hashing of the address above its always-zero low bits.
    return static_cast<size_t>(((key >> 8) * 0x9e3779b97f4a7c15ull) >> shift_);
  }

  void Rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot());
    mask_ = capacity - 1;
    shift_ = 64 - std::countr_zero(capacity);
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != kEmpty) Insert(s.key, s.value);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_PTR_MAP_H_
