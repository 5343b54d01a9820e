// Recording a workload with AttachTraceRecorder and reading it back: the file parses with the
// trace parser `vgpu-bench replay` uses, holds exactly the workload's allocations and frees
// with its peak live bytes, and replays on a fresh allocator of any kind.
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/allocator/trace.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/fake_vmm_executor.h"

namespace vgpu {
namespace {

using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::unique_ptr<Allocator> FakeBfc(uint64_t limit, const std::string& name = "GPU:0") {
  BFCOptions o;
  o.name = name;
  o.memory_limit = limit;
  o.allow_growth = true;
  auto a = BFCAllocator::Create(std::make_unique<FakeSubAllocator>(), o);
  EXPECT_THAT(a.status(), IsOk());
  return a.ok() ? std::unique_ptr<Allocator>(*std::move(a)) : nullptr;
}

std::unique_ptr<Allocator> FakeVmm(uint64_t limit) {
  VmmOptions o;
  o.name = "GPU:1";
  o.memory_limit = limit;
  o.allow_growth = true;
  auto a = ::vgpu::testing::CreateFakeVmmAllocator(2 * kMiB, o);
  EXPECT_THAT(a.status(), IsOk());
  return a.ok() ? *std::move(a) : nullptr;
}

// What the recorder should write: the requests of the allocations and the frees, in order.
struct Expected {
  std::vector<std::pair<bool, uint64_t>> events;  // (alloc, bytes)
  uint64_t live = 0, peak = 0, live_blocks = 0;
  void Alloc(uint64_t bytes) {
    events.emplace_back(true, bytes);
    live += bytes;
    peak = std::max(peak, live);
    ++live_blocks;
  }
  void Free(uint64_t bytes) {
    events.emplace_back(false, 0);
    live -= bytes;
    --live_blocks;
  }
};

// A random workload of `ops` operations on `a` (sizes 1 B .. 8 MiB, log-uniform), recorded
// between attach and detach; blocks from before attach are freed during it (not recorded) and
// some blocks stay live past detach (unfreed in the trace).
Expected RecordWorkload(Allocator& a, TraceRecorder& rec, int ops, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto size = [&] { return uint64_t{1} + (rng() % (uint64_t{1} << (rng() % 24))); };
  std::vector<void*> before;
  for (int i = 0; i < 3; ++i) before.push_back(*a.AllocateRaw(size()));
  AttachTraceRecorder(a, &rec);
  Expected e;
  std::vector<std::pair<void*, uint64_t>> live;
  for (int op = 0; op < ops; ++op) {
    if (op == ops / 3) {
      for (void* p : before) EXPECT_THAT(a.Deallocate(p), IsOk());  // not recorded
      EXPECT_THAT(a.Allocate(0).status(), IsOk());                  // no block: not recorded
      EXPECT_THAT(a.AllocateRaw(uint64_t{1} << 62).status(),        // failed: not recorded
                  StatusIs(absl::StatusCode::kResourceExhausted));
    }
    if (live.empty() || rng() % 100 < 55) {
      uint64_t bytes = size();
      auto p = a.AllocateRaw(bytes);
      EXPECT_THAT(p.status(), IsOk());
      if (!p.ok()) continue;
      live.emplace_back(*p, bytes);
      e.Alloc(bytes);
    } else {
      size_t k = rng() % live.size();
      EXPECT_THAT(a.Deallocate(live[k].first), IsOk());
      e.Free(live[k].second);
      live[k] = live.back();
      live.pop_back();
    }
  }
  DetachTraceRecorder(a, &rec);
  for (auto& [p, bytes] : live) EXPECT_THAT(a.Deallocate(p), IsOk());  // after detach
  return e;
}

void CheckTrace(const Trace& t, const Expected& e) {
  ASSERT_EQ(t.events.size(), e.events.size());
  EXPECT_EQ(t.peak_live_bytes, e.peak);
  EXPECT_EQ(t.header_peak_live_bytes, e.peak);
  EXPECT_EQ(t.unfreed_blocks, e.live_blocks);
  uint64_t allocs = 0;
  for (size_t i = 0; i < e.events.size(); ++i) {
    ASSERT_EQ(t.events[i].alloc, e.events[i].first) << "event " << i;
    if (t.events[i].alloc) {
      ASSERT_EQ(t.events[i].bytes, e.events[i].second) << "event " << i;
      ++allocs;
    }
  }
  EXPECT_EQ(t.allocations, allocs);
}

TEST(TraceRecorderTest, RecordsABfcWorkloadThatReplays) {
  auto a = FakeBfc(uint64_t{16} << 30);
  ASSERT_NE(a, nullptr);
  TraceRecorder rec("bfc_workload");
  const Expected e = RecordWorkload(*a, rec, 3000, 1);
  EXPECT_EQ(rec.events(), e.events.size());
  EXPECT_EQ(rec.peak_live_bytes(), e.peak);
  EXPECT_THAT(a->CheckInvariants(), IsOk());

  const std::string path = ::testing::TempDir() + "/bfc_workload.trace";
  ASSERT_THAT(rec.WriteFile(path), IsOk());
  absl::StatusOr<Trace> t = ReadTraceFile(path);  // what vgpu-bench replay reads
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->name, "bfc_workload");
  ASSERT_NO_FATAL_FAILURE(CheckTrace(*t, e));

  // Replays on fresh allocators of both kinds at twice the recorded peak, every block fits.
  for (bool vmm : {false, true}) {
    std::unique_ptr<Allocator> fresh =
        vmm ? FakeVmm(2 * e.peak + 64 * kMiB) : FakeBfc(2 * e.peak + 64 * kMiB);
    ASSERT_NE(fresh, nullptr);
    absl::StatusOr<ReplayResult> r = ReplayTrace(*t, *fresh, /*stop_at_failure=*/false);
    ASSERT_THAT(r.status(), IsOk());
    EXPECT_EQ(r->events, e.events.size());
    EXPECT_EQ(r->failures, 0u);
    AllocatorStats s = fresh->Stats();
    EXPECT_EQ(s.num_allocs, t->allocations);
    EXPECT_EQ(s.bytes_in_use, 0u);  // leftovers freed
    EXPECT_GE(s.peak_bytes_in_use, e.peak);
    EXPECT_THAT(fresh->CheckInvariants(), IsOk());
  }
}

// Any allocator: the vmm kind's small (slab) and large (stitched) blocks are both recorded,
// once each.
TEST(TraceRecorderTest, RecordsAVmmWorkload) {
  auto a = FakeVmm(uint64_t{16} << 30);
  ASSERT_NE(a, nullptr);
  TraceRecorder rec("vmm_workload");
  const Expected e = RecordWorkload(*a, rec, 2000, 2);
  const std::string path = ::testing::TempDir() + "/vmm_workload.trace";
  ASSERT_THAT(rec.WriteFile(path), IsOk());
  absl::StatusOr<Trace> t = ReadTraceFile(path);
  ASSERT_THAT(t.status(), IsOk());
  ASSERT_NO_FATAL_FAILURE(CheckTrace(*t, e));
  auto fresh = FakeBfc(2 * e.peak + 64 * kMiB);
  absl::StatusOr<ReplayResult> r = ReplayTrace(*t, *fresh, /*stop_at_failure=*/true);
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ(r->failures, 0u);
}

// Threads: the recorder sees each block's free after its allocation, so the trace parses
// (the parser rejects a free of a block that is not live) and counts every operation.
TEST(TraceRecorderTest, ThreadsRecordAConsistentTrace) {
  auto a = FakeBfc(uint64_t{64} << 30);
  TraceRecorder rec("threads");
  AttachTraceRecorder(*a, &rec);
  std::vector<std::thread> threads;
  std::vector<uint64_t> ops(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<void*> live;
      for (int i = 0; i < 1000; ++i) {
        if (live.empty() || rng() % 2) {
          auto p = a->AllocateRaw(256 + rng() % (4 * kMiB));
          if (p.ok()) {
            live.push_back(*p);
            ++ops[t];
          }
        } else {
          EXPECT_THAT(a->Deallocate(live.back()), IsOk());
          live.pop_back();
          ++ops[t];
        }
      }
      for (void* p : live) {
        EXPECT_THAT(a->Deallocate(p), IsOk());
        ++ops[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  DetachTraceRecorder(*a, &rec);
  absl::StatusOr<Trace> t = ParseTrace(rec.Text(), "threads");
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->events.size(), ops[0] + ops[1] + ops[2] + ops[3]);
  EXPECT_EQ(t->unfreed_blocks, 0u);
  EXPECT_EQ(rec.events(), t->events.size());
}

}  // namespace
}  // namespace vgpu
