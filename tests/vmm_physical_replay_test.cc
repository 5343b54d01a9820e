// Replays generated workloads (scripts/gen_traces.py, written into the build tree by the
// family_traces fixture) at limits from the smallest that fits to twice the peak live bytes, on
// the checked fake VMM device: the vmm allocator with growth off and on, and bfc without growth
// (its VMM pages, gathered into segments of their own near the limit). After every allocation
// each granule of the new block is translated through the device's own page table and its
// physical bytes checked against every live block's: tail sharing, edge views, slab views and
// gathered pages map one granule at several addresses, so virtual addresses alone prove
// nothing. Refused requests are skipped (and their frees), so the replay goes on past each
// OOM, which must leave the allocator consistent: its invariants (and, for vmm, the device's
// counts) are checked every 512 events, and once everything is freed and the cached memory
// released a block of the whole limit (less what the allocators keep back) fits again.
//
// The traces' directory comes from VGPU_FAMILY_TRACES (CTest sets it); without it the test is
// skipped (GTEST_SKIP), never passed. The shared traces the bars are set on
// (transformer_train, random_mixed) come from VGPU_SHARED_TRACES, and are skipped the same way
// where that directory is absent; the workloads PyTorch and RMM recorded on a card (PyTorch
// snapshots and RMM logs in tests/data, several streams each, replayed in their order on one)
// from VGPU_TEST_SRCDIR.
//
// Thread safety: single-threaded (the concurrency of these allocators has its own tests).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/allocator/trace.h"
#include "vgpu/allocator/trace_import.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/tests/fake_vmm_executor.h"
#include "vgpu/tools/vgpu_bench.h"

namespace vgpu::testing {
namespace {

constexpr uint64_t kG = bench::kBenchVmmGranule;

// The checker itself: one physical granule mapped at two addresses, a block at each, and a
// block whose two granules are the same physical one, are clashes; apart, they are not.
TEST(PhysicalMapTest, SeesOnePhysicalByteUnderTwoAddresses) {
  FakeVmmExecutor device(kG);
  absl::StatusOr<void*> va1 = device.ReserveAddressRange(kG);
  absl::StatusOr<void*> va2 = device.ReserveAddressRange(2 * kG);
  absl::StatusOr<PhysicalMemoryHandle> h = device.CreatePhysicalMemory(kG);
  ASSERT_TRUE(va1.ok() && va2.ok() && h.ok());
  char* a = static_cast<char*>(*va1);
  char* b = static_cast<char*>(*va2);
  ASSERT_TRUE(device.Map(a, kG, *h, 0).ok());
  ASSERT_TRUE(device.Map(b, kG, *h, 0).ok());
  ASSERT_TRUE(device.Map(b + kG, kG, *h, 0).ok());
  PhysicalMap physical(&device);
  ASSERT_TRUE(physical.Add(a, kG / 2).ok());
  EXPECT_FALSE(physical.Add(b + kG / 4, 256).ok());  // inside a's bytes, through b
  EXPECT_TRUE(physical.Add(b + kG / 2, kG / 4).ok());
  EXPECT_TRUE(physical.Remove(a).ok());
  EXPECT_FALSE(physical.Remove(a).ok());  // not live any more
  EXPECT_TRUE(physical.Add(b, 256).ok());
  EXPECT_TRUE(physical.Remove(b).ok());
  EXPECT_TRUE(physical.Remove(b + kG / 2).ok());
  EXPECT_FALSE(physical.Add(b, kG + 256).ok());  // its last 256 bytes are its first ones
  EXPECT_TRUE(physical.Add(b + 256, kG).ok());   // ends where it starts: no byte twice
  for (void* p : {b, b + kG}) EXPECT_TRUE(device.Unmap(p, kG).ok());
  EXPECT_TRUE(device.Unmap(a, kG).ok());
  EXPECT_TRUE(device.ReleasePhysicalMemory(*h).ok());
  EXPECT_TRUE(device.FreeAddressRange(a, kG).ok());
  EXPECT_TRUE(device.FreeAddressRange(b, 2 * kG).ok());
}

struct Outcome {
  uint64_t served = 0, refused = 0;
};

// Replays `trace` at `limit`; every failure is a gtest failure naming the event.
Outcome ReplayChecked(const Trace& trace, AllocatorKind kind, uint64_t limit, bool growth) {
  Outcome out;
  FakeVmmExecutor device(kG, /*physical_capacity=*/0, /*checked=*/true);
  DeviceAllocatorOptions o;
  o.kind = kind;
  o.device_name = "replay/" + trace.name;
  o.memory_limit = limit;
  o.allow_growth = growth;
  absl::StatusOr<std::unique_ptr<Allocator>> made = CreateDeviceAllocator(&device, o);
  EXPECT_TRUE(made.ok()) << made.status();
  if (!made.ok()) return out;
  Allocator* a = made->get();
  auto* vmm = dynamic_cast<VmmAllocator*>(a);
  // vmm: its invariants and its granule counts against the device's; bfc: its invariants.
  auto check = [&] { return vmm != nullptr ? CheckFakeVmm(*vmm, device) : a->CheckInvariants(); };
  PhysicalMap physical(&device);
  std::vector<void*> slots(trace.max_live_blocks, nullptr);
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.alloc) {
      absl::StatusOr<void*> p = a->AllocateRaw(e.bytes);
      if (!p.ok()) {
        EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted)
            << "event " << i << ": " << p.status();
        ++out.refused;
        continue;
      }
      ++out.served;
      slots[e.slot] = *p;
      absl::Status s = physical.Add(*p, e.bytes);
      EXPECT_TRUE(s.ok()) << "event " << i << ": " << s;
      if (!s.ok()) return out;
    } else if (slots[e.slot] != nullptr) {
      EXPECT_TRUE(physical.Remove(slots[e.slot]).ok()) << "event " << i;
      absl::Status s = a->Deallocate(slots[e.slot]);
      EXPECT_TRUE(s.ok()) << "event " << i << ": " << s;
      if (!s.ok()) return out;
      slots[e.slot] = nullptr;
    }
    if (i % 512 == 0) {
      absl::Status s = check();
      EXPECT_TRUE(s.ok()) << "event " << i << ": " << s;
      if (!s.ok()) return out;
    }
  }
  for (void*& p : slots) {
    if (p == nullptr) continue;
    EXPECT_TRUE(physical.Remove(p).ok());
    EXPECT_TRUE(a->Deallocate(p).ok());
    p = nullptr;
  }
  EXPECT_TRUE(check().ok());
  EXPECT_EQ(a->Stats().bytes_in_use, 0u);
  EXPECT_TRUE(a->ReleaseCachedMemory().ok());
  EXPECT_TRUE(check().ok());
  // Everything freed: a block of the whole limit, less a granule per 64 (what the allocators
  // keep for themselves: vmm's reserve, bfc's pages' rounding), fits again, so the refusals
  // lost nothing.
  absl::StatusOr<void*> whole = a->AllocateRaw(limit - limit / 64 - 2 * kG);
  EXPECT_TRUE(whole.ok()) << whole.status();
  if (whole.ok()) EXPECT_TRUE(a->Deallocate(*whole).ok());
  EXPECT_TRUE(check().ok());
  return out;
}

class VmmPhysicalReplay : public ::testing::TestWithParam<std::string> {};

TEST_P(VmmPhysicalReplay, NoTwoLiveBlocksShareAByte) {
  // "shared_NAME": NAME.trace in VGPU_SHARED_TRACES; "recorded_NAME": tests/data/NAME (a
  // PyTorch snapshot or an RMM log, read as vgpu-bench reads them); else NAME.trace in
  // VGPU_FAMILY_TRACES.
  const std::string& name = GetParam();
  const bool shared = absl::StartsWith(name, "shared_");
  const bool recorded = absl::StartsWith(name, "recorded_");
  const char* var = shared     ? "VGPU_SHARED_TRACES"
                    : recorded ? "VGPU_TEST_SRCDIR"
                               : "VGPU_FAMILY_TRACES";
  const char* dir = std::getenv(var);
  if (dir == nullptr) GTEST_SKIP() << var << " is not set";
  std::string path;
  if (recorded) {
    // Workloads PyTorch and RMM recorded on a card (tests/data/torch, tests/data/rmm).
    static const auto* const kRecorded = new std::map<std::string, std::string>{
        {"recorded_torch_two_streams", "torch/two_streams.pickle"},
        {"recorded_torch_expandable", "torch/expandable.pickle"},
        {"recorded_torch_ring", "torch/ring.pickle"},
        {"recorded_rmm_streams", "rmm/streams.dev0.csv"},
        {"recorded_rmm_torch", "rmm/torch.dev0.csv"}};
    auto it = kRecorded->find(name);
    ASSERT_NE(it, kRecorded->end()) << name;
    path = absl::StrCat(dir, "/tests/data/", it->second);
  } else {
    path = absl::StrCat(dir, "/", shared ? name.substr(std::strlen("shared_")) : name, ".trace");
  }
  if (shared && !std::ifstream(path).good()) GTEST_SKIP() << path << " is absent";
  absl::StatusOr<Trace> trace = ReadAnyTraceFile(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  // vmm, growth off and on; bfc without growth (its pages, gathered near the limit; with growth
  // its regions are plain device allocations, one address each).
  const std::pair<AllocatorKind, bool> configs[] = {
      {AllocatorKind::kVmm, false}, {AllocatorKind::kVmm, true}, {AllocatorKind::kBfc, false}};
  for (const auto& [kind, growth] : configs) {
    for (double ratio : {1.0, 1.02, 1.04, 1.06, 1.1, 2.0}) {
      const char* name = kind == AllocatorKind::kVmm ? "vmm" : "bfc";
      SCOPED_TRACE(::testing::Message() << GetParam() << ", " << name << " at " << ratio
                                        << "x peak live, growth " << (growth ? "on" : "off"));
      const uint64_t limit = static_cast<uint64_t>(ratio * trace->peak_live_bytes);
      const auto start = std::chrono::steady_clock::now();
      Outcome r = ReplayChecked(*trace, kind, limit, growth);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      if (::testing::Test::HasFailure()) return;
      std::printf("%s %s growth %s %.2fx: %lu served, %lu refused, %.0f ms\n", GetParam().c_str(),
                  name, growth ? "on" : "off", ratio, static_cast<unsigned long>(r.served),
                  static_cast<unsigned long>(r.refused), ms);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, VmmPhysicalReplay,
                         ::testing::Values("random_small_s3", "random_mid_s3", "random_16m_s3",
                                           "random_1g_s3", "random_large_s3", "random_wide_s3",
                                           "kv_concat_small_s3", "kv_concat_small_s6",
                                           "kv_concat_s3", "kv_concat_mid_s3",
                                           "kv_inference_small_s3", "transformer_small_s3",
                                           "transformer_s3", "shared_transformer_train",
                                           "shared_random_mixed", "recorded_torch_two_streams",
                                           "recorded_torch_expandable", "recorded_torch_ring",
                                           "recorded_rmm_streams", "recorded_rmm_torch"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace vgpu::testing
