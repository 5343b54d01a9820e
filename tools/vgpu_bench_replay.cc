// vgpu-bench replay: replays an allocation trace (tools/traces/README.md format) on an allocator
// and reports speed against malloc/free and the smallest limit the trace reliably fits in.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vgpu/allocator/memory_history.h"
#include "vgpu/allocator/trace.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/json.h"
#include "vgpu/tools/vgpu_bench.h"

namespace vgpu::bench {
namespace {

constexpr int kScanSteps = 200;   // limits (1 + k/200) x peak live
constexpr int kConsecutive = 20;  // passes in a row for min_limit
constexpr int kMaxK = 200 * 10;   // give up past 11x peak live
constexpr int64_t kTimedBudgetNs = 300'000'000;
constexpr int kMinTimedRuns = 3, kMaxTimedRuns = 25;

// Peak resident set (VmHWM) of this process so far, in bytes; 0 when unknown.
uint64_t PeakRssBytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "VmHWM: %lu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

uint64_t LimitFor(uint64_t peak, int k) {
  uint64_t l =
      static_cast<uint64_t>(static_cast<long double>(peak) * (kScanSteps + k) / kScanSteps);
  return (l + 255) & ~uint64_t{255};
}

// Replays once at `limit` on a fresh allocator; whether every allocation succeeded.
absl::StatusOr<bool> Fits(const Trace& trace, BenchAllocatorSpec spec, uint64_t limit) {
  spec.limit = limit;
  absl::StatusOr<BenchAllocator> a = MakeBenchAllocator(spec);
  if (!a.ok()) {
    // Growth off and the limit is not there (real device): does not fit.
    if (absl::IsResourceExhausted(a.status())) return false;
    return a.status();
  }
  absl::StatusOr<ReplayResult> r = ReplayTrace(trace, *a->allocator, /*stop_at_failure=*/true);
  if (!r.ok()) return r.status();
  return r->failures == 0;
}

// Best of several timed malloc/free replays, in this process.
int64_t BestMallocNs(const Trace& trace) {
  int64_t best = -1, total = 0;
  for (int run = 0; run < kMaxTimedRuns; ++run) {
    int64_t ns = ReplayTraceWithMalloc(trace);
    best = best < 0 ? ns : std::min(best, ns);
    total += ns;
    if (run + 1 >= kMinTimedRuns && total >= kTimedBudgetNs) break;
  }
  return best;
}

// The malloc baseline runs in a child process: glibc keeps its headers inside the blocks, so a
// 4 GiB live set leaves ~150 MiB of touched heap pages that are the baseline's, not the
// allocator's, and a fresh heap is also the fairest baseline. In-process if fork fails.
int64_t MallocBaselineNs(const Trace& trace) {
  std::fflush(nullptr);
  int fds[2];
  if (pipe(fds) != 0) return BestMallocNs(trace);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return BestMallocNs(trace);
  }
  if (pid == 0) {
    close(fds[0]);
    int64_t ns = BestMallocNs(trace);
    ssize_t n = write(fds[1], &ns, sizeof(ns));
    _exit(n == sizeof(ns) ? 0 : 1);
  }
  close(fds[1]);
  int64_t ns = -1;
  ssize_t n = read(fds[0], &ns, sizeof(ns));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n != sizeof(ns) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return BestMallocNs(trace);
  return ns;
}

}  // namespace

int RunReplay(const BenchArgs& args) {
  absl::StatusOr<Trace> trace = ReadTraceFile(args.trace_path);
  if (!trace.ok()) {
    std::fprintf(stderr, "vgpu-bench replay: %s\n", trace.status().ToString().c_str());
    return 1;
  }
  BenchAllocatorSpec spec;
  spec.kind = args.allocator;
  spec.allow_growth = args.allow_growth;
  spec.name = absl::StrCat("replay/", trace->name);
  spec.tuning = args.tuning_values;
  if (!args.platform.empty()) {
    absl::StatusOr<Executor*> e = BenchExecutor(args.platform);
    if (!e.ok()) {
      std::fprintf(stderr, "vgpu-bench replay: --platform %s: %s\n", args.platform.c_str(),
                   e.status().ToString().c_str());
      return 1;
    }
    spec.executor = *e;
  }
  const uint64_t peak = trace->peak_live_bytes;
  // The default limit and the scan are multiples of the peak: a zero peak has nothing to
  // measure, and ParseTrace bounds the peak so that 11x it cannot overflow.
  if (peak == 0) {
    std::fprintf(stderr,
                 "vgpu-bench replay: %s: the trace allocates 0 bytes at its peak; nothing to "
                 "replay\n",
                 trace->name.c_str());
    return 1;
  }
  if (peak > kMaxTraceLiveBytes) {
    std::fprintf(stderr,
                 "vgpu-bench replay: %s: the trace's peak of %s live is above the %s a trace "
                 "may hold\n",
                 trace->name.c_str(), FormatBytes(peak).c_str(),
                 FormatBytes(kMaxTraceLiveBytes).c_str());
    return 1;
  }
  std::fprintf(stderr, "trace %s: %zu events, %llu allocations, peak live %s\n",
               trace->name.c_str(), trace->events.size(),
               static_cast<unsigned long long>(trace->allocations), FormatBytes(peak).c_str());

  // Limit scan: not a bisection, fitting is not monotone in the limit.
  std::optional<int> first_fit_k, min_limit_k;
  if (args.min_limit) {
    int run = 0;
    for (int k = 0; k <= kMaxK; ++k) {
      absl::StatusOr<bool> fits = Fits(*trace, spec, LimitFor(peak, k));
      if (!fits.ok()) {
        std::fprintf(stderr, "vgpu-bench replay: %s\n", fits.status().ToString().c_str());
        return 1;
      }
      if (!*fits) {
        run = 0;
        continue;
      }
      if (!first_fit_k) first_fit_k = k;
      if (++run == kConsecutive) {
        min_limit_k = k - kConsecutive + 1;
        break;
      }
    }
  }

  // Timed replays at --limit (default 2x peak live), best of several fresh runs.
  spec.limit = args.limit ? *args.limit : LimitFor(peak, kScanSteps);
  MemoryHistory history(1 << 20);
  history.SetLimit(spec.name, spec.limit);  // the timeline draws it
  int64_t best_ns = -1;
  int64_t total_ns = 0;
  uint64_t peak_reserved = 0;
  // vmm only: backend Map calls (cuMemMap + cuMemSetAccess on cuda) per GiB mapped, run 0.
  std::optional<double> map_calls_per_gib;
  // Device map / unmap calls (vmm: Map/Unmap, one cuMemMap/cuMemUnmap each; bfc: regions taken
  // from and given back to the sub-allocator) per 1000 trace events, run 0.
  double map_calls_per_kop = 0, unmap_calls_per_kop = 0;
  // Reserved (mapped) bytes right after the last free of run 0, when the allocator is idle:
  // what it did not give back (vmm with growth keeps a reserve of pool_keep_bytes).
  uint64_t idle_reserved = 0;
  ReplayResult first;
  double setup_ms = 0;
  for (int run = 0; run < kMaxTimedRuns; ++run) {
    auto setup_start = std::chrono::steady_clock::now();
    absl::StatusOr<BenchAllocator> a = MakeBenchAllocator(spec);
    if (run == 0) {
      setup_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - setup_start)
              .count();
    }
    if (!a.ok()) {
      std::fprintf(stderr, "vgpu-bench replay: %s\n", a.status().ToString().c_str());
      return 1;
    }
    bool record = run == 0 && !args.memory_history_path.empty();
    Allocator& allocator = *a->allocator;
    if (record) AttachMemoryHistory(allocator, &history);
    absl::StatusOr<ReplayResult> r = ReplayTrace(*trace, allocator, /*stop_at_failure=*/false);
    if (record) DetachMemoryHistory(allocator, &history);
    if (!r.ok()) {
      std::fprintf(stderr, "vgpu-bench replay: %s\n", r.status().ToString().c_str());
      return 1;
    }
    if (run == 0) {
      first = *r;
      const AllocatorStats stats = allocator.Stats();
      peak_reserved = stats.peak_bytes_reserved;
      idle_reserved = stats.bytes_reserved;
      if (stats.mapping_granularity > 0) {  // vmm: regions are granules
        const double gib = static_cast<double>(stats.regions_mapped) *
                           static_cast<double>(stats.mapping_granularity) /
                           double(uint64_t{1} << 30);
        if (gib > 0) map_calls_per_gib = static_cast<double>(stats.map_calls) / gib;
      }
      const double kops = static_cast<double>(trace->events.size()) / 1000.0;
      if (const auto* vmm = dynamic_cast<const VmmAllocator*>(&allocator); vmm != nullptr) {
        const VmmAllocator::GranuleCounts g = vmm->Granules();
        map_calls_per_kop = static_cast<double>(g.map_calls) / kops;
        unmap_calls_per_kop = static_cast<double>(g.unmap_calls) / kops;
      } else {
        map_calls_per_kop = static_cast<double>(stats.regions_mapped) / kops;
        unmap_calls_per_kop = static_cast<double>(stats.regions_unmapped) / kops;
      }
    }
    best_ns = best_ns < 0 ? r->elapsed_ns : std::min(best_ns, r->elapsed_ns);
    total_ns += r->elapsed_ns;
    if (run + 1 >= kMinTimedRuns && total_ns >= kTimedBudgetNs) break;
  }
  const int64_t best_malloc_ns = args.baseline ? MallocBaselineNs(*trace) : -1;
  if (!args.memory_history_path.empty()) {
    absl::Status s = history.WriteJson(args.memory_history_path);
    if (!s.ok()) {
      std::fprintf(stderr, "vgpu-bench replay: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const double events = static_cast<double>(trace->events.size());
  if (first.failures > 0) {
    std::fprintf(stderr,
                 "vgpu-bench replay: %llu allocations failed at limit %s; first at event %llu: "
                 "%s\n",
                 static_cast<unsigned long long>(first.failures), FormatBytes(spec.limit).c_str(),
                 static_cast<unsigned long long>(first.first_failure),
                 first.first_error.ToString().c_str());
  }
  std::fprintf(
      stderr, "%s at limit %s%s: setup %.3f ms, %.1f ns/op (malloc %s), peak reserved %s",
      args.allocator.c_str(), FormatBytes(spec.limit).c_str(), args.allow_growth ? " (growth)" : "",
      setup_ms, best_ns / events,
      best_malloc_ns >= 0 ? absl::StrFormat("%.1f", best_malloc_ns / events).c_str() : "not run",
      FormatBytes(peak_reserved).c_str());
  if (min_limit_k) {
    std::fprintf(stderr, ", min limit %s (%.3fx), first fit %.3fx",
                 FormatBytes(LimitFor(peak, *min_limit_k)).c_str(),
                 1.0 + *min_limit_k / double{kScanSteps}, 1.0 + *first_fit_k / double{kScanSteps});
  }
  std::fprintf(stderr, "\n");
  // This process's high-water mark: trace, replays, scan; the malloc baseline ran in a child.
  const uint64_t peak_rss = PeakRssBytes();
  std::fprintf(stderr, "peak RSS of this process %s (%llu bytes)\n", FormatBytes(peak_rss).c_str(),
               static_cast<unsigned long long>(peak_rss));

  JsonWriter w;
  w.BeginObject();
  w.Field("trace", trace->name);
  w.Field("allocator", args.allocator);
  w.Field("allow_growth", args.allow_growth);
  w.Field("events", static_cast<uint64_t>(trace->events.size()));
  w.Field("ns_per_op", best_ns / events);
  w.Key("baseline_ns_per_op");
  if (best_malloc_ns >= 0)
    w.Double(best_malloc_ns / events);
  else
    w.Null();
  w.Field("peak_live_bytes", peak);
  w.Field("peak_reserved_bytes", peak_reserved);
  w.Key("min_limit_bytes");
  if (min_limit_k)
    w.Uint(LimitFor(peak, *min_limit_k));
  else
    w.Null();
  w.Key("min_limit_ratio");
  if (min_limit_k)
    w.Double(1.0 + *min_limit_k / double{kScanSteps});
  else
    w.Null();
  w.Key("first_fit_ratio");
  if (first_fit_k)
    w.Double(1.0 + *first_fit_k / double{kScanSteps});
  else
    w.Null();
  w.Field("peak_rss_bytes", peak_rss);
  // Issue 13 (vmm only): contiguous granules map in one call; 512 per GiB would be one per
  // 2 MiB granule.
  if (map_calls_per_gib) w.Field("vmm_map_calls_per_gib", *map_calls_per_gib);
  w.Field("map_calls_per_kop", map_calls_per_kop);
  w.Field("unmap_calls_per_kop", unmap_calls_per_kop);
  w.Field("idle_reserved_bytes", idle_reserved);
  w.EndObject();
  std::printf("%s\n", w.str().c_str());
  std::fflush(stdout);
  // Allocations that failed at the given limit make the run a failure (the JSON still says
  // how far it got).
  return first.failures > 0 ? 3 : 0;
}

}  // namespace vgpu::bench
