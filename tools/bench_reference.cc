#include "vgpu/tools/bench_reference.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/optimization.h"

namespace vgpu::bench {
namespace {

// splitmix64: the same numbers on every platform and standard library (std's distributions are
// not specified bit for bit).
struct SplitMix64 {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

// Best fit with coalescing over fake addresses, in standard containers: the allocator a
// textbook would write (TensorFlow's BFC keeps its bins in std::set too).
class BestFit {
 public:
  uint64_t Allocate(uint64_t bytes) {
    bytes = (std::max<uint64_t>(bytes, 1) + 255) & ~uint64_t{255};  // 0 bytes: a block of its own
    uint64_t addr;
    auto it = by_size_.lower_bound({bytes, 0});
    if (it == by_size_.end()) {
      addr = top_;
      top_ += bytes;
    } else {
      addr = it->second;
      const uint64_t size = it->first;
      by_size_.erase(it);
      by_addr_.erase(addr);
      if (size > bytes) Insert(addr + bytes, size - bytes);
    }
    live_.emplace(addr, bytes);
    return addr;
  }
  void Free(uint64_t addr) {
    auto l = live_.find(addr);
    if (l == live_.end()) return;  // not ours (traces name live blocks only: never in a replay)
    uint64_t size = l->second;
    live_.erase(l);
    auto next = by_addr_.lower_bound(addr);
    if (next != by_addr_.end() && next->first == addr + size) {  // merge the range after
      size += next->second;
      by_size_.erase({next->second, next->first});
      next = by_addr_.erase(next);
    }
    if (next != by_addr_.begin()) {  // and the one before
      auto prev = std::prev(next);
      if (prev->first + prev->second == addr) {
        addr = prev->first;
        size += prev->second;
        by_size_.erase({prev->second, prev->first});
        by_addr_.erase(prev);
      }
    }
    Insert(addr, size);
  }
  uint64_t top() const { return top_; }

 private:
  void Insert(uint64_t addr, uint64_t size) {
    by_addr_.emplace(addr, size);
    by_size_.emplace(size, addr);
  }
  std::map<uint64_t, uint64_t> by_addr_;             // free ranges: address -> size
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // free ranges: (size, address)
  std::unordered_map<uint64_t, uint64_t> live_;      // live blocks: address -> size
  uint64_t top_ = uint64_t{1} << 40;
};

}  // namespace

Trace CalibrationTrace() {
  // random_mixed's recipe (scripts/gen_traces.py's random family) at a quarter of its live set:
  // sizes log-uniform in [1 KiB, 64 MiB), a free (of a random live block) with probability 0.45
  // or whenever more than 1 GiB is live.
  SplitMix64 rng{20261129};
  TraceBuilder b("event");
  std::vector<uint64_t> ids;
  uint64_t next_id = 0;
  const double lo = std::log(1024.0), hi = std::log(64.0 * 1024 * 1024);
  for (int e = 0; e < kCalibrationEvents; ++e) {
    const bool free =
        !ids.empty() && (b.live_bytes() > (uint64_t{1} << 30) || rng.Uniform() < 0.45);
    if (free) {
      const size_t k = static_cast<size_t>(rng.Next() % ids.size());
      std::swap(ids[k], ids.back());
      b.Free(ids.back(), 0).IgnoreError();  // always live: ids holds exactly the live blocks
      ids.pop_back();
    } else {
      const uint64_t bytes = static_cast<uint64_t>(std::exp(lo + (hi - lo) * rng.Uniform()));
      b.Alloc(next_id, bytes, 0, static_cast<uint64_t>(e)).IgnoreError();  // a new id: valid
      ids.push_back(next_id++);
    }
  }
  while (!ids.empty()) {
    b.Free(ids.back(), 0).IgnoreError();
    ids.pop_back();
  }
  b.trace().name = "calibration";
  absl::StatusOr<Trace> t = std::move(b).Finish("calibration");
  return t.ok() ? *std::move(t) : Trace();  // it has events: Finish cannot fail
}

ReferenceReplay ReplayOnReference(const Trace& trace, bool check_overlaps) {
  ReferenceReplay r;
  BestFit a;
  std::vector<uint64_t> slots(trace.max_live_blocks + 1, 0);
  std::map<uint64_t, uint64_t> live;  // check_overlaps: live blocks, address -> end
  const int64_t start = ThreadCpuNs();
  for (const TraceEvent& e : trace.events) {
    if (e.alloc) {
      const uint64_t p = a.Allocate(e.bytes);
      slots[e.slot] = p;
      if (ABSL_PREDICT_FALSE(check_overlaps)) {
        const uint64_t end = p + e.bytes;
        auto next = live.lower_bound(p);
        if (next != live.end() && next->first < end) ++r.overlaps;
        if (next != live.begin() && std::prev(next)->second > p) ++r.overlaps;
        live.emplace(p, end);
      }
    } else {
      if (ABSL_PREDICT_FALSE(check_overlaps)) live.erase(slots[e.slot]);
      a.Free(slots[e.slot]);
    }
  }
  const int64_t elapsed_ns = ThreadCpuNs() - start;
  r.ns_per_op = trace.events.empty()
                    ? 0.0
                    : static_cast<double>(elapsed_ns) / static_cast<double>(trace.events.size());
  r.peak_bytes = a.top() - (uint64_t{1} << 40);
  return r;
}

}  // namespace vgpu::bench
