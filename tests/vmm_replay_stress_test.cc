// Replays the shipped allocation traces on the vmm allocator (fake backend, 2 MiB granules) and
// checks the memory bars of docs/allocator.md and docs/vmm.md: the smallest limit above which every
// limit in 0.5 % steps replays (min_limit_ratio over peak live bytes). Timing is printed, not
// asserted (vgpu-bench measures speed). The traces ship in tools/traces.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "vgpu/allocator/trace.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/tests/fake_vmm_executor.h"

namespace vgpu {
namespace {

// True when the whole trace replays under `limit`; frees everything either way.
bool Replays(const Trace& t, uint64_t limit, bool growth, double* ns_per_op = nullptr) {
  VmmOptions o;
  o.name = "replay";
  o.memory_limit = limit;
  o.allow_growth = growth;
  auto a = ::vgpu::testing::CreateFakeVmmAllocator(uint64_t{2} << 20, o);
  if (!a.ok()) return false;
  // Stops at the first refused allocation and frees what is still live (allocator/trace.h);
  // the time is the replaying thread's CPU time: on a shared 2-core machine wall time mostly
  // measures the others.
  absl::StatusOr<ReplayResult> r = ReplayTrace(t, **a, /*stop_at_failure=*/true);
  if (!r.ok()) return false;
  const bool ok = r->failures == 0;
  const double ns = static_cast<double>(r->elapsed_ns);
  if (ns_per_op != nullptr) {
    *ns_per_op = ns / static_cast<double>(t.events.size());
    auto* vmm = static_cast<VmmAllocator*>(a->get());
    auto g = vmm->Granules();
    if (std::getenv("VGPU_REPLAY_VERBOSE") != nullptr)
      std::printf("  %s\n  cache hits %llu evictions %llu\n", vmm->Stats().ToString().c_str(),
                  static_cast<unsigned long long>(g.cache_hits),
                  static_cast<unsigned long long>(g.cache_evictions));
  }
  return ok;
}

struct MinLimit {
  double min_limit_ratio = 0;
  double first_fit_ratio = 0;
};

// As vgpu-bench --min-limit (docs/allocator.md): limits (1 + k/200) x peak live; the first of 20
// consecutive passes.
MinLimit Scan(const Trace& t, bool growth) {
  MinLimit m;
  int run = 0;
  for (int k = 0; k < 400; ++k) {
    double ratio = 1.0 + k / 200.0;
    bool ok =
        Replays(t, static_cast<uint64_t>(ratio * static_cast<double>(t.peak_live_bytes)), growth);
    if (ok && m.first_fit_ratio == 0) m.first_fit_ratio = ratio;
    run = ok ? run + 1 : 0;
    if (run == 20) {
      m.min_limit_ratio = ratio - 19 / 200.0;
      return m;
    }
  }
  return m;
}

// VGPU_TRACE_DIR, else tools/traces of the source tree (CTest sets VGPU_TEST_SRCDIR).
std::string TracePath(const std::string& name) {
  std::string dir = "tools/traces";
  if (const char* d = std::getenv("VGPU_TRACE_DIR")) {
    dir = d;
  } else if (const char* src = std::getenv("VGPU_TEST_SRCDIR")) {
    dir = std::string(src) + "/tools/traces";
  }
  return dir + "/" + name + ".trace";
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

void Check(const std::string& name, double bar) {
  absl::StatusOr<Trace> read = ReadTraceFile(TracePath(name));
  ASSERT_TRUE(read.ok()) << read.status();
  const Trace& t = *read;
  if (kSanitized) {
    // Sanitizers are 10-20x slower: check only that the 20 limits from the bar up replay,
    // which bounds min_limit_ratio by the bar, growth off.
    for (int k = 0; k < 20; ++k) {
      double ratio = bar + k / 200.0;
      EXPECT_TRUE(
          Replays(t, static_cast<uint64_t>(ratio * static_cast<double>(t.peak_live_bytes)), false))
          << name << " at " << ratio;
    }
    return;
  }
  for (bool growth : {false, true}) {
    MinLimit m = Scan(t, growth);
    // Best of 5: the machine is shared, the minimum is the allocator's own cost.
    double ns = 1e18;
    for (int i = 0; i < 5; ++i) {
      double n = 0;
      Replays(t, 2 * t.peak_live_bytes, growth, &n);
      ns = std::min(ns, n);
    }
    std::printf("%s growth=%d: min_limit_ratio %.3f first_fit_ratio %.3f ns_per_op %.0f\n",
                name.c_str(), growth, m.min_limit_ratio, m.first_fit_ratio, ns);
    EXPECT_GT(m.min_limit_ratio, 0.0);
    EXPECT_LE(m.min_limit_ratio, bar) << name << " growth " << growth;
  }
}

TEST(VmmReplayTest, TransformerTrain) { Check("transformer_train", 1.05); }
TEST(VmmReplayTest, RandomMixed) { Check("random_mixed", 1.10); }

}  // namespace
}  // namespace vgpu
