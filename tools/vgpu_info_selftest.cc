// vgpu-info --selftest: does every logical GPU work? Limits, memcpy, peer copies, all-reduce.
// Quick by design: the limit check allocates in big chunks and never touches that memory
// (the host platform commits pages only when touched), the copies move up to 1 MiB. Every
// size scales with the device's limit, so the smallest logical device (2 MiB) passes too.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "vgpu/allocator/memory_history.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status.h"
#include "vgpu/strategies/collectives.h"
#include "vgpu/tools/vgpu_info.h"

namespace vgpu_info {
namespace {

constexpr uint64_t kMaxCopyBytes = uint64_t{1} << 20;

// The limit the device's allocator enforces: the configured one, or less where the allocator
// rounds it down (the vmm allocator keeps whole granules).
uint64_t EffectiveLimit(vgpu::LogicalDevice& d) {
  const uint64_t own = d.allocator()->Stats().bytes_limit;
  return own > 0 ? std::min(own, d.memory_limit()) : d.memory_limit();
}

// The largest power of two <= x (x >= 1).
uint64_t FloorPow2(uint64_t x) { return x == 0 ? 1 : std::bit_floor(x); }

// The limit check's first step: a sixteenth of the limit, so a few dozen allocations fill any
// device, from 2 MiB to 64 TiB.
uint64_t ChunkFor(uint64_t limit) { return std::max<uint64_t>(FloorPow2(limit / 16), 4096); }
// The copies: 1 MiB, or an eighth of a smaller device.
uint64_t CopyBytesFor(uint64_t limit) {
  return std::clamp<uint64_t>(FloorPow2(limit / 8), 4096, kMaxCopyBytes);
}

std::string Short(const vgpu::LogicalDevice& d) {
  const std::string& n = d.name();
  size_t p = n.rfind("device:");
  return p == std::string::npos ? n : n.substr(p + 7);
}

struct Tally {
  int checks = 0;
  int failed = 0;
};

// Runs one check and prints "PASS|FAIL  <name>  <detail>  (<ms> ms)".
void Check(Tally& t, const std::string& name, const std::function<absl::Status(std::string*)>& fn) {
  auto start = std::chrono::steady_clock::now();
  std::string detail;
  absl::Status s = fn(&detail);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ++t.checks;
  if (!s.ok()) ++t.failed;
  std::printf("%s  %-24s %s  (%.1f ms)\n", s.ok() ? "PASS" : "FAIL", name.c_str(),
              s.ok() ? detail.c_str() : std::string(s.message()).c_str(), ms);
  std::fflush(stdout);
}

std::vector<uint8_t> Pattern(uint64_t bytes, uint32_t seed) {
  std::vector<uint8_t> v(bytes);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

absl::Status Compare(const std::vector<uint8_t>& want, const std::vector<uint8_t>& got) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != got[i]) {
      return absl::DataLossError(absl::StrCat("byte ", i, " of ", want.size(), " is ", int{got[i]},
                                              ", expected ", int{want[i]}));
    }
  }
  return absl::OkStatus();
}

// Allocates chunks (then halves down to a 64th of that) until the allocator refuses; the refusal
// must be ResourceExhausted, near the limit and never past it; after freeing everything the device
// must allocate again.
absl::Status LimitCheck(vgpu::LogicalDevice& d, std::string* detail) {
  vgpu::Allocator* a = d.allocator();
  // What vgpu itself holds in the allocator (the BLAS workspace) is not the user's to take.
  const uint64_t own = a->Stats().bytes_in_use;
  const uint64_t full = EffectiveLimit(d);
  const uint64_t limit = full > own ? full - own : 0;
  const uint64_t chunk = ChunkFor(limit);
  const uint64_t min_step = std::max<uint64_t>(chunk / 64, 256);
  std::vector<vgpu::DeviceBuffer> held;
  uint64_t total = 0;
  absl::Status refusal;
  for (uint64_t step = chunk; step >= min_step; step /= 2) {
    while (true) {
      if (total > limit) break;  // a broken limit: stop before taking the machine
      absl::StatusOr<vgpu::DeviceBuffer> b = a->Allocate(step);
      if (!b.ok()) {
        refusal = b.status();
        break;
      }
      total += step;
      held.push_back(*std::move(b));
    }
    if (total > limit || (!refusal.ok() && !absl::IsResourceExhausted(refusal))) break;
  }
  if (total > limit) {
    return absl::InternalError(absl::StrCat("allocated ", vgpu::FormatBytes(total),
                                            ", over the limit of ", vgpu::FormatBytes(limit)));
  }
  if (!absl::IsResourceExhausted(refusal)) {
    return absl::InternalError(absl::StrCat("after ", vgpu::FormatBytes(total),
                                            " the next allocation failed with ", refusal.ToString(),
                                            ", not RESOURCE_EXHAUSTED"));
  }
  // Alignment and rounding may leave a little under the limit unusable, never a whole chunk.
  if (total + chunk < limit) {
    return absl::InternalError(absl::StrCat("RESOURCE_EXHAUSTED after only ",
                                            vgpu::FormatBytes(total), " of the limit of ",
                                            vgpu::FormatBytes(limit), ": ", refusal.message()));
  }
  size_t n = held.size();
  held.clear();
  vgpu::AllocatorStats st = a->Stats();
  if (st.bytes_in_use != own) {
    return absl::InternalError(absl::StrCat(
        "after freeing everything ", vgpu::FormatBytes(st.bytes_in_use), " still in use",
        own > 0 ? absl::StrCat(" (vgpu's own: ", vgpu::FormatBytes(own), ")") : std::string()));
  }
  absl::StatusOr<vgpu::DeviceBuffer> again = a->Allocate(chunk);
  if (!again.ok()) {
    return absl::InternalError(
        absl::StrCat("not usable after freeing: ", again.status().ToString()));
  }
  *detail = absl::StrCat(vgpu::FormatBytes(total), " of ", vgpu::FormatBytes(limit), " in ", n,
                         " allocations, then RESOURCE_EXHAUSTED; usable after freeing");
  return absl::OkStatus();
}

absl::Status RoundTrip(vgpu::LogicalDevice& d, uint32_t seed, std::string* detail) {
  const uint64_t kCopyBytes = CopyBytesFor(EffectiveLimit(d));
  VGPU_ASSIGN_OR_RETURN(vgpu::DeviceBuffer buf, d.allocator()->Allocate(kCopyBytes));
  std::vector<uint8_t> want = Pattern(kCopyBytes, seed), got(kCopyBytes, 0);
  VGPU_RETURN_IF_ERROR(d.stream()->MemcpyH2D(buf.data(), want.data(), kCopyBytes));
  VGPU_RETURN_IF_ERROR(d.stream()->MemcpyD2H(got.data(), buf.data(), kCopyBytes));
  VGPU_RETURN_IF_ERROR(d.stream()->Synchronize());
  VGPU_RETURN_IF_ERROR(Compare(want, got));
  *detail = absl::StrCat(vgpu::FormatBytes(kCopyBytes), " host -> device -> host, pattern intact");
  return absl::OkStatus();
}

absl::Status PeerCopy(vgpu::LogicalDevice& src, vgpu::LogicalDevice& dst, uint32_t seed,
                      std::string* detail) {
  const uint64_t kCopyBytes = CopyBytesFor(std::min(EffectiveLimit(src), EffectiveLimit(dst)));
  VGPU_ASSIGN_OR_RETURN(vgpu::DeviceBuffer a, src.allocator()->Allocate(kCopyBytes));
  VGPU_ASSIGN_OR_RETURN(vgpu::DeviceBuffer b, dst.allocator()->Allocate(kCopyBytes));
  std::vector<uint8_t> want = Pattern(kCopyBytes, seed), got(kCopyBytes, 0);
  VGPU_RETURN_IF_ERROR(src.stream()->MemcpyH2D(a.data(), want.data(), kCopyBytes));
  VGPU_RETURN_IF_ERROR(src.stream()->MemcpyD2D(b.data(), a.data(), kCopyBytes));
  VGPU_RETURN_IF_ERROR(src.stream()->Synchronize());
  VGPU_RETURN_IF_ERROR(dst.stream()->MemcpyD2H(got.data(), b.data(), kCopyBytes));
  VGPU_RETURN_IF_ERROR(dst.stream()->Synchronize());
  VGPU_RETURN_IF_ERROR(Compare(want, got));
  *detail = absl::StrCat(vgpu::FormatBytes(kCopyBytes), " copied, pattern intact");
  return absl::OkStatus();
}

absl::Status AllReduceCheck(const std::vector<vgpu::LogicalDevice*>& gpus, std::string* detail) {
  uint64_t smallest = UINT64_MAX;
  for (vgpu::LogicalDevice* d : gpus) smallest = std::min(smallest, EffectiveLimit(*d));
  const uint64_t count = CopyBytesFor(smallest) / sizeof(float);
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<vgpu::strategies::AllReducer> reducer,
                        vgpu::strategies::AllReducer::Create(gpus));
  std::vector<vgpu::DeviceBuffer> bufs;
  std::vector<float*> ptrs;
  std::vector<std::vector<float>> inputs(gpus.size());
  std::vector<double> want(count, 0.0);
  for (size_t r = 0; r < gpus.size(); ++r) {
    inputs[r].resize(count);
    for (uint64_t k = 0; k < count; ++k) {
      // Small integers: exact in float whatever the summation order.
      inputs[r][k] = static_cast<float>(static_cast<int>((k * 7 + r * 13) % 101) - 50);
      want[k] += inputs[r][k];
    }
    VGPU_ASSIGN_OR_RETURN(vgpu::DeviceBuffer b, gpus[r]->allocator()->Allocate(count * 4));
    VGPU_RETURN_IF_ERROR(gpus[r]->stream()->MemcpyH2D(b.data(), inputs[r].data(), count * 4));
    ptrs.push_back(static_cast<float*>(b.data()));
    bufs.push_back(std::move(b));
  }
  VGPU_RETURN_IF_ERROR(reducer->AllReduce(ptrs, count, vgpu::AllReduceOp::kSum));
  for (size_t r = 0; r < gpus.size(); ++r) {
    std::vector<float> got(count);
    VGPU_RETURN_IF_ERROR(gpus[r]->stream()->MemcpyD2H(got.data(), ptrs[r], count * 4));
    VGPU_RETURN_IF_ERROR(gpus[r]->stream()->Synchronize());
    for (uint64_t k = 0; k < count; ++k) {
      if (std::fabs(got[k] - want[k]) > 1e-3) {
        return absl::DataLossError(absl::StrCat(Short(*gpus[r]), " element ", k, " is ", got[k],
                                                ", host reference ", want[k]));
      }
    }
  }
  *detail = absl::StrCat(count, " floats summed over ", gpus.size(), " devices (",
                         vgpu::strategies::AllReduceAlgorithmName(reducer->algorithm()),
                         "), equal to the host reference");
  return absl::OkStatus();
}

}  // namespace

int RunSelftest(vgpu::Runtime& runtime, const std::string& history_path) {
  const std::vector<vgpu::LogicalDevice*>& gpus = runtime.gpus();
  vgpu::MemoryHistory history;
  if (!history_path.empty()) {
    for (vgpu::LogicalDevice* d : gpus) vgpu::AttachMemoryHistory(*d->allocator(), &history);
  }
  Tally t;
  std::printf("Selftest: %zu logical GPU(s) on platform %s\n", gpus.size(),
              runtime.platform()->name().c_str());
  for (vgpu::LogicalDevice* d : gpus) {
    Check(t, absl::StrCat("limit ", Short(*d)), [&](std::string* s) { return LimitCheck(*d, s); });
  }
  uint32_t seed = 1;
  for (vgpu::LogicalDevice* d : gpus) {
    Check(t, absl::StrCat("memcpy ", Short(*d)),
          [&](std::string* s) { return RoundTrip(*d, seed++, s); });
  }
  for (vgpu::LogicalDevice* a : gpus) {
    for (vgpu::LogicalDevice* b : gpus) {
      if (a == b) continue;
      Check(t, absl::StrCat("copy ", Short(*a), " -> ", Short(*b)),
            [&](std::string* s) { return PeerCopy(*a, *b, seed++, s); });
    }
  }
  if (gpus.empty()) {
    // Nothing checked is not a pass: a runner without GPUs must say so.
    Check(t, "logical GPUs", [&](std::string*) {
      return absl::NotFoundError(absl::StrCat("no logical GPUs on platform ",
                                              runtime.platform()->name(), ": ",
                                              runtime.platform()->Summary()));
    });
  } else {
    Check(t, "all-reduce", [&](std::string* s) { return AllReduceCheck(gpus, s); });
  }
  if (!history_path.empty()) {
    for (vgpu::LogicalDevice* d : gpus) vgpu::DetachMemoryHistory(*d->allocator(), &history);
    // With the limits, so the timeline can draw them.
    for (vgpu::LogicalDevice* d : gpus) history.SetLimit(d->allocator()->name(), d->memory_limit());
    absl::Status w = history.WriteJson(history_path);
    if (!w.ok()) {
      std::printf("FAIL  %-24s %s\n", "memory history", std::string(w.message()).c_str());
      ++t.failed;
    }
  }
  std::printf("Selftest: %d check(s), %d failed: %s\n", t.checks, t.failed,
              t.failed ? "FAIL" : "PASS");
  return t.failed;
}

}  // namespace vgpu_info
