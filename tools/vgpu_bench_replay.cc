// vgpu-bench replay: replays an allocation trace (tools/traces/README.md format, a PyTorch
// snapshot or an RMM log: allocator/trace_import.h) on an allocator, or several (--allocators),
// and reports speed against malloc/free and the smallest limit the trace reliably fits in.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "vgpu/allocator/memory_history.h"
#include "vgpu/allocator/trace.h"
#include "vgpu/allocator/trace_import.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/file_io.h"
#include "vgpu/runtime/json.h"
#include "vgpu/runtime/status.h"
#include "vgpu/tools/bench_reference.h"
#include "vgpu/tools/vgpu_bench.h"

namespace vgpu::bench {
namespace {

constexpr int kScanSteps = 200;   // limits (1 + k/200) x peak live
constexpr int kConsecutive = 20;  // passes in a row for min_limit
constexpr int kMaxK = 200 * 10;   // give up past 11x peak live
// Timed replays: at least kMinTimedRuns, then until kTimedBudgetNs of replay (thread CPU time)
// or kWallBudgetNs of wall time (setup and calibration included) is spent, best of them. The
// machines we measure on are shared: a replay of 1 ms (a short trace) reads up to 1.5x slower
// for tens of milliseconds at a time, so 25 runs of it (the old cap) often saw only slow ones,
// while 300 ms of runs finds the quiet ones (kv_concat s41, vmm: 69-101 ns/op over 14
// invocations with 25 runs, 67-68 but one 81 with the budget; docs/allocator.md).
constexpr int64_t kTimedBudgetNs = 300'000'000;
constexpr int64_t kWallBudgetNs = 1'000'000'000;
constexpr int kMinTimedRuns = 3, kMaxTimedRuns = 2000;

int64_t WallNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Whether the timed loop stops after `runs` runs that took `timed_ns` of replay, started at
// `wall_start` (WallNs()).
bool TimedRunsDone(int runs, int64_t timed_ns, int64_t wall_start) {
  if (runs < kMinTimedRuns) return false;
  return runs >= kMaxTimedRuns || timed_ns >= kTimedBudgetNs ||
         WallNs() - wall_start >= kWallBudgetNs;
}

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

// The limit of a replay without --limit: 2x peak live, at least the allocator's floor.
uint64_t DefaultLimit(const BenchAllocatorSpec& spec, uint64_t peak) {
  absl::StatusOr<uint64_t> floor = AllocatorFloorBytes(spec);
  return std::max(LimitFor(peak, kScanSteps), floor.ok() ? *floor : 0);
}

// --limit as given (a size, or N% of peak live rounded up to 256 bytes), else DefaultLimit.
uint64_t ReplayLimit(const BenchArgs& args, const BenchAllocatorSpec& spec, uint64_t peak) {
  if (args.limit) return *args.limit;
  if (args.limit_percent) {
    const long double l = std::ceil(static_cast<long double>(peak) *
                                    static_cast<long double>(*args.limit_percent) / 100.0L);
    const uint64_t bytes = l >= 0x1p64L ? UINT64_MAX - 255 : static_cast<uint64_t>(l);
    return std::max<uint64_t>(256, (bytes + 255) & ~uint64_t{255});
  }
  return DefaultLimit(spec, peak);
}

// Replays `trace` on `a`. A trace with several streams runs each on a stream of its own, made
// on the allocator's device (order-only streams on the fake-address device, real ones with
// --platform) and released from the allocator before they go.
absl::StatusOr<ReplayResult> ReplayOnStreams(const Trace& trace, const BenchAllocatorSpec& spec,
                                             BenchAllocator& a, bool stop_at_failure,
                                             bool log_first_failure = false) {
  if (trace.num_streams <= 1) {
    return ReplayTrace(trace, *a.allocator, stop_at_failure, {}, log_first_failure);
  }
  Executor* executor = spec.executor != nullptr ? spec.executor : a.fake_device.get();
  if (executor == nullptr) return absl::InternalError("no device to make the trace's streams on");
  std::vector<std::unique_ptr<Stream>> owned;
  std::vector<Stream*> streams;
  for (uint32_t i = 0; i < trace.num_streams; ++i) {
    absl::StatusOr<std::unique_ptr<Stream>> s = executor->CreateStream(StreamOptions{});
    if (!s.ok()) return s.status();
    streams.push_back(s->get());
    owned.push_back(*std::move(s));
  }
  absl::StatusOr<ReplayResult> r =
      ReplayTrace(trace, *a.allocator, stop_at_failure, streams, log_first_failure);
  for (Stream* s : streams) {
    absl::Status released = a.allocator->ReleaseStream(s);
    // NotFound: a stream the replay never reached (it stopped at a failure).
    if (!released.ok() && !absl::IsNotFound(released) && r.ok()) r = released;
  }
  return r;
}

// Best of several timed malloc/free replays, in this process.
int64_t BestMallocNs(const Trace& trace) {
  int64_t best = -1, total = 0;
  const int64_t wall_start = WallNs();
  for (int run = 0;; ++run) {
    int64_t ns = ReplayTraceWithMalloc(trace);
    best = best < 0 ? ns : std::min(best, ns);
    total += ns;
    if (TimedRunsDone(run + 1, total, wall_start)) break;
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

// The timed replays at one limit: best of several fresh runs, run 0 also recorded.
struct TimedReplay {
  int64_t best_ns = -1;
  uint64_t peak_reserved = 0;
  // vmm only: backend Map calls (cuMemMap + cuMemSetAccess on cuda) per GiB mapped, run 0.
  std::optional<double> map_calls_per_gib;
  // Device map / unmap calls (vmm: Map/Unmap, one cuMemMap/cuMemUnmap each; bfc: regions taken
  // from and given back to the sub-allocator) per 1000 trace events, run 0.
  double map_calls_per_kop = 0, unmap_calls_per_kop = 0;
  // vmm only: physical granules created from the device (cuMemCreate on cuda, each released
  // later) per 1000 trace events, run 0: with growth, what going to the device costs.
  std::optional<double> granule_creates_per_kop;
  // vmm only: edge views made in run 0 (small blocks mapped across two slabs' free edges at
  // the limit, docs/vmm.md).
  std::optional<uint64_t> edge_views;
  // Reserved (mapped) bytes right after the last free of run 0, when the allocator is idle:
  // what it did not give back (vmm with growth keeps a reserve of pool_keep_bytes).
  uint64_t idle_reserved = 0;
  // Stream order, run 0: blocks that moved between streams and the event waits they cost.
  uint64_t cross_stream_reuses = 0;
  uint64_t stream_waits = 0;
  ReplayResult first;
  double setup_ms = 0;
  // --calibrate: the best ns/op of the reference replays of the calibration trace, one after
  // each timed run (tools/bench_reference.h), so a slow phase of the machine slows both.
  std::optional<double> calibration_ns_per_op;
};

absl::StatusOr<TimedReplay> RunTimed(const Trace& trace, const BenchAllocatorSpec& spec,
                                     MemoryHistory* history, const Trace* calibration = nullptr) {
  TimedReplay out;
  int64_t total_ns = 0;
  const int64_t wall_start = WallNs();
  for (int run = 0;; ++run) {
    auto setup_start = std::chrono::steady_clock::now();
    absl::StatusOr<BenchAllocator> a = MakeBenchAllocator(spec);
    if (run == 0) {
      out.setup_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - setup_start)
              .count();
    }
    if (!a.ok()) return a.status();
    bool record = run == 0 && history != nullptr;
    Allocator& allocator = *a->allocator;
    if (record) AttachMemoryHistory(allocator, history);
    absl::StatusOr<ReplayResult> r = ReplayOnStreams(trace, spec, *a, /*stop_at_failure=*/false);
    if (record) DetachMemoryHistory(allocator, history);
    if (!r.ok()) return r.status();
    if (run == 0) {
      out.first = *r;
      const AllocatorStats stats = allocator.Stats();
      out.peak_reserved = stats.peak_bytes_reserved;
      out.cross_stream_reuses = stats.cross_stream_reuses;
      out.stream_waits = stats.stream_waits;
      out.idle_reserved = stats.bytes_reserved;
      const double kops = static_cast<double>(trace.events.size()) / 1000.0;
      if (stats.mapping_granularity > 0) {  // vmm: its Map/Unmap calls
        out.map_calls_per_kop = static_cast<double>(stats.map_calls) / kops;
        out.unmap_calls_per_kop = static_cast<double>(stats.unmap_calls) / kops;
      } else {  // regions, and bfc's gathered pages (map_calls / unmap_calls)
        out.map_calls_per_kop = static_cast<double>(stats.regions_mapped + stats.map_calls) / kops;
        out.unmap_calls_per_kop =
            static_cast<double>(stats.regions_unmapped + stats.unmap_calls) / kops;
      }
      if (const auto* vmm = dynamic_cast<const VmmAllocator*>(&allocator)) {
        const VmmAllocator::GranuleCounts counts = vmm->Granules();
        out.granule_creates_per_kop = static_cast<double>(counts.granule_creates) / kops;
        out.edge_views = counts.edge_views_made;
      }
      if (stats.mapping_granularity > 0) {  // vmm: regions are granules
        const double gib = static_cast<double>(stats.regions_mapped) *
                           static_cast<double>(stats.mapping_granularity) /
                           double(uint64_t{1} << 30);
        if (gib > 0) out.map_calls_per_gib = static_cast<double>(stats.map_calls) / gib;
      }
    }
    out.best_ns = out.best_ns < 0 ? r->elapsed_ns : std::min(out.best_ns, r->elapsed_ns);
    total_ns += r->elapsed_ns;
    if (calibration != nullptr) {
      const double ns = ReplayOnReference(*calibration).ns_per_op;
      out.calibration_ns_per_op = std::min(out.calibration_ns_per_op.value_or(ns), ns);
    }
    if (TimedRunsDone(run + 1, total_ns, wall_start)) break;
  }
  return out;
}

void NullOr(JsonWriter& w, const char* key, std::optional<double> v) {
  w.Key(key);
  if (v)
    w.Double(*v);
  else
    w.Null();
}

// One allocator of a comparison: its min limit scan (when asked) and timed replay.
struct ComparedRun {
  std::string kind;
  uint64_t limit = 0;
  TimedReplay timed;
  std::optional<MinLimitScan> scan;
};

absl::StatusOr<ComparedRun> RunCompared(const BenchArgs& args, const Trace& trace,
                                        const BenchAllocatorSpec& base, const std::string& kind,
                                        const Trace* calibration) {
  ComparedRun run;
  run.kind = kind;
  BenchAllocatorSpec spec = base;
  spec.kind = kind;
  if (args.min_limit) {
    absl::StatusOr<MinLimitScan> s = ScanMinLimit(trace, spec);
    if (!s.ok()) return s.status();
    run.scan = *s;
  }
  spec.limit = ReplayLimit(args, spec, trace.peak_live_bytes);
  run.limit = spec.limit;
  absl::StatusOr<TimedReplay> t = RunTimed(trace, spec, nullptr, calibration);
  if (!t.ok()) return t.status();
  run.timed = *std::move(t);
  return run;
}

// The min limit as a multiple of the peak live bytes and, when the file says what the original
// allocator reserved at its peak, of that ("against the peak the original allocator reached").
std::optional<double> VsOriginal(const Trace& trace, const std::optional<MinLimitScan>& scan) {
  if (!scan || !scan->min_limit_bytes || trace.original_peak_reserved_bytes == 0) {
    return std::nullopt;
  }
  return static_cast<double>(*scan->min_limit_bytes) /
         static_cast<double>(trace.original_peak_reserved_bytes);
}

std::string MinLimitText(const Trace& trace, const std::optional<MinLimitScan>& scan) {
  if (!scan) return "not scanned";
  if (!scan->min_limit_bytes) return "over 11x";
  std::string text = absl::StrFormat(
      "%s (%.3fx peak live", FormatBytes(*scan->min_limit_bytes),
      static_cast<double>(*scan->min_limit_bytes) / static_cast<double>(trace.peak_live_bytes));
  if (std::optional<double> v = VsOriginal(trace, scan)) {
    absl::StrAppendFormat(&text, ", %.3fx the original's peak reserved", *v);
  }
  return text + ")";
}

// Its stderr line and its entry of the "allocators" array.
void ReportCompared(const Trace& trace, const ComparedRun& run, JsonWriter& w) {
  const double events = static_cast<double>(trace.events.size());
  std::fprintf(stderr, "%-5s at limit %s: %.1f ns/op, peak reserved %s, min limit %s\n",
               run.kind.c_str(), FormatBytes(run.limit).c_str(), run.timed.best_ns / events,
               FormatBytes(run.timed.peak_reserved).c_str(), MinLimitText(trace, run.scan).c_str());
  w.BeginObject();
  w.Field("allocator", run.kind);
  w.Field("limit_bytes", run.limit);
  w.Field("failures", run.timed.first.failures);
  w.Field("ns_per_op", run.timed.best_ns / events);
  if (run.timed.calibration_ns_per_op) {  // --calibrate: the machine's speed beside this one's
    w.Field("calibration_ns_per_op", *run.timed.calibration_ns_per_op);
  }
  w.Field("peak_reserved_bytes", run.timed.peak_reserved);
  w.Key("min_limit_bytes");
  if (run.scan && run.scan->min_limit_bytes)
    w.Uint(*run.scan->min_limit_bytes);
  else
    w.Null();
  NullOr(w, "min_limit_ratio", run.scan ? run.scan->min_limit_ratio : std::nullopt);
  NullOr(w, "first_fit_ratio", run.scan ? run.scan->first_fit_ratio : std::nullopt);
  NullOr(w, "min_limit_vs_original", VsOriginal(trace, run.scan));
  w.EndObject();
}

// What the file says the original allocator reserved at its peak, if it says; `then` follows
// on the line (the single replay's "; bfc needs ...").
void PrintOriginalPeak(const Trace& trace, absl::string_view then = "") {
  if (trace.original_peak_reserved_bytes > 0) {
    std::fprintf(stderr, "the original allocator reserved at most %s (%.3fx peak live)%s\n",
                 FormatBytes(trace.original_peak_reserved_bytes).c_str(),
                 static_cast<double>(trace.original_peak_reserved_bytes) /
                     static_cast<double>(trace.peak_live_bytes),
                 std::string(then).c_str());
  }
}

// --failure-log: one allocator's section. Its memory log at the first allocation that fails,
// replayed afresh (untimed) at the scan's step just under the min limit when there is one, else
// at `limit` when an allocation failed there; otherwise a line saying why there is nothing.
absl::StatusOr<std::string> FailureLogSection(const Trace& trace, BenchAllocatorSpec spec,
                                              const std::optional<MinLimitScan>& scan,
                                              uint64_t limit, bool failed_at_limit) {
  const uint64_t peak = trace.peak_live_bytes;
  std::string head = absl::StrCat("== ", trace.name, ": ", spec.kind,
                                  spec.allow_growth ? " (growth on)" : " (growth off)");
  auto ratio = [&](uint64_t bytes) {
    return absl::StrFormat("%.3fx peak live", static_cast<double>(bytes) / peak);
  };
  std::string where;
  if (scan && scan->below_min_limit_bytes) {
    limit = *scan->below_min_limit_bytes;
    where = "one scan step under the min limit";
  } else if (scan && scan->min_limit_bytes) {
    return absl::StrCat(head, ": fits at ", FormatBytes(*scan->min_limit_bytes), " (",
                        ratio(*scan->min_limit_bytes),
                        "), the scan's first step: no failure to show ==\n");
  } else if (failed_at_limit) {
    where = "the replay's limit";
  } else {
    return absl::StrCat(head, ": no allocation failed at ", FormatBytes(limit), " (", ratio(limit),
                        "); with --min-limit the log is taken one scan step under the min "
                        "limit ==\n");
  }
  spec.limit = limit;
  absl::StrAppend(&head, ", limit ", FormatBytes(limit), " (", ratio(limit), ", ", where, ")");
  absl::StatusOr<BenchAllocator> a = MakeBenchAllocator(spec);
  if (!a.ok()) {
    return absl::StrCat(head, " ==\nthe allocator could not be made: ", a.status().ToString(),
                        "\n");
  }
  VGPU_ASSIGN_OR_RETURN(ReplayResult r, ReplayOnStreams(trace, spec, *a, /*stop_at_failure=*/true,
                                                        /*log_first_failure=*/true));
  if (r.failures == 0) {
    // The scan saw it fail; a replay that fits now says so rather than showing nothing.
    return absl::StrCat(head, " ==\nevery allocation succeeded this time\n");
  }
  return absl::StrCat(head, " ==\nfirst failure at event ", r.first_failure, " of ",
                      trace.events.size(), ": ", r.first_error.ToString(), "\n",
                      r.first_failure_log);
}

// Writes the sections to --failure-log's file (a no-op without it); false after printing why
// it could not.
bool WriteFailureLog(const BenchArgs& args, const std::vector<std::string>& sections) {
  if (args.failure_log_path.empty()) return true;
  std::string text;
  for (const std::string& s : sections) absl::StrAppend(&text, text.empty() ? "" : "\n", s);
  absl::Status s = WriteOutputFile(args.failure_log_path, text, "failure log");
  if (!s.ok()) {
    std::fprintf(stderr, "vgpu-bench replay: %s\n", s.ToString().c_str());
    return false;
  }
  std::fprintf(stderr, "memory log at the first failure written to %s\n",
               args.failure_log_path.c_str());
  return true;
}

// A section for each run of a comparison (--failure-log), in order; false after printing why.
bool AppendFailureSection(const BenchArgs& args, const Trace& trace, const BenchAllocatorSpec& base,
                          const std::string& kind, const std::optional<MinLimitScan>& scan,
                          uint64_t limit, bool failed_at_limit,
                          std::vector<std::string>* sections) {
  if (args.failure_log_path.empty()) return true;
  BenchAllocatorSpec spec = base;
  spec.kind = kind;
  absl::StatusOr<std::string> s = FailureLogSection(trace, spec, scan, limit, failed_at_limit);
  if (!s.ok()) {
    std::fprintf(stderr, "vgpu-bench replay: %s: failure log: %s\n", kind.c_str(),
                 s.status().ToString().c_str());
    return false;
  }
  sections->push_back(*std::move(s));
  return true;
}

// Compare mode (--allocators): each allocator's min limit (with --min-limit) and speed at the
// limit (--limit, default 2x peak live), one JSON line with an array.
int RunCompare(const BenchArgs& args, const Trace& trace, const BenchAllocatorSpec& base) {
  JsonWriter w;
  w.BeginObject();
  w.Field("trace", trace.name);
  w.Field("format", trace.format);
  w.Field("allow_growth", args.allow_growth);
  w.Field("events", static_cast<uint64_t>(trace.events.size()));
  w.Field("streams", static_cast<uint64_t>(trace.num_streams));
  w.Field("peak_live_bytes", trace.peak_live_bytes);
  w.Key("original_peak_reserved_bytes");
  if (trace.original_peak_reserved_bytes > 0)
    w.Uint(trace.original_peak_reserved_bytes);
  else
    w.Null();
  w.Key("allocators");
  w.BeginArray();
  int status = 0;
  const Trace calibration = args.calibrate ? CalibrationTrace() : Trace();
  std::vector<std::string> failure_sections;  // --failure-log
  for (const std::string& kind : args.allocators) {
    absl::StatusOr<ComparedRun> run =
        RunCompared(args, trace, base, kind, args.calibrate ? &calibration : nullptr);
    if (!run.ok()) {
      std::fprintf(stderr, "vgpu-bench replay: %s: %s\n", kind.c_str(),
                   run.status().ToString().c_str());
      return 1;
    }
    if (run->timed.first.failures > 0) status = 3;
    ReportCompared(trace, *run, w);
    if (!AppendFailureSection(args, trace, base, kind, run->scan, run->limit,
                              run->timed.first.failures > 0, &failure_sections)) {
      return 1;
    }
  }
  if (!WriteFailureLog(args, failure_sections)) return 1;
  w.EndArray();
  w.EndObject();
  PrintOriginalPeak(trace);
  std::printf("%s\n", w.str().c_str());
  std::fflush(stdout);
  return status;
}

}  // namespace

absl::StatusOr<bool> ReplayFits(const Trace& trace, BenchAllocatorSpec spec, uint64_t limit) {
  spec.limit = limit;
  absl::StatusOr<BenchAllocator> a = MakeBenchAllocator(spec);
  if (!a.ok()) {
    // Growth off and the limit is not there (real device): does not fit.
    if (absl::IsResourceExhausted(a.status())) return false;
    return a.status();
  }
  absl::StatusOr<ReplayResult> r = ReplayOnStreams(trace, spec, *a, /*stop_at_failure=*/true);
  if (!r.ok()) return r.status();
  return r->failures == 0;
}

absl::StatusOr<uint64_t> AllocatorFloorBytes(const BenchAllocatorSpec& spec) {
  if (spec.kind != "vmm") return uint64_t{256};
  if (spec.tuning.vmm_page_bytes) return *spec.tuning.vmm_page_bytes;
  if (spec.executor == nullptr) return kBenchVmmGranule;
  return spec.executor->VirtualMemoryGranularity();
}

absl::StatusOr<MinLimitScan> ScanMinLimit(const Trace& trace, const BenchAllocatorSpec& spec) {
  const uint64_t peak = trace.peak_live_bytes;
  if (peak == 0 || peak > kMaxTraceLiveBytes) {
    return absl::InvalidArgumentError(absl::StrCat("trace ", trace.name, ": peak live of ", peak,
                                                   " bytes has no limit scan (needs 1 B to ",
                                                   FormatBytes(kMaxTraceLiveBytes), ")"));
  }
  VGPU_ASSIGN_OR_RETURN(const uint64_t floor, AllocatorFloorBytes(spec));
  auto limit_at = [&](int k) { return std::max(LimitFor(peak, k), floor); };
  auto ratio_at = [&](int k) {
    return LimitFor(peak, k) >= floor ? 1.0 + k / double{kScanSteps}
                                      : static_cast<double>(floor) / static_cast<double>(peak);
  };
  std::optional<int> first_fit_k, min_limit_k;
  std::optional<bool> fits_at_floor;  // every step below the floor replays the same limit
  int run = 0;
  for (int k = 0; k <= kMaxK; ++k) {
    const bool at_floor = LimitFor(peak, k) <= floor;
    bool fits;
    if (at_floor && fits_at_floor) {
      fits = *fits_at_floor;
    } else {
      VGPU_ASSIGN_OR_RETURN(fits, ReplayFits(trace, spec, limit_at(k)));
      if (at_floor) fits_at_floor = fits;
    }
    if (!fits) {
      run = 0;
      continue;
    }
    if (!first_fit_k) first_fit_k = k;
    if (++run == kConsecutive) {
      min_limit_k = k - kConsecutive + 1;
      break;
    }
  }
  MinLimitScan out;
  if (min_limit_k) {
    out.min_limit_bytes = limit_at(*min_limit_k);
    out.min_limit_ratio = ratio_at(*min_limit_k);
    if (*min_limit_k > 0 && limit_at(*min_limit_k - 1) < *out.min_limit_bytes) {
      out.below_min_limit_bytes = limit_at(*min_limit_k - 1);
    }
  }
  if (first_fit_k) out.first_fit_ratio = ratio_at(*first_fit_k);
  return out;
}

std::optional<Trace> ReadBenchTrace(const std::string& command, const std::string& path,
                                    std::optional<int> device) {
  ImportOptions options;
  options.device = device;
  absl::StatusOr<Trace> trace = ReadAnyTraceFile(path, options);
  if (!trace.ok()) {
    std::fprintf(stderr, "vgpu-bench %s: %s\n", command.c_str(), trace.status().ToString().c_str());
    return std::nullopt;
  }
  if (!trace->import_note.empty()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), trace->import_note.c_str());
  }
  return *std::move(trace);
}

int RunReplay(const BenchArgs& args) {
  std::optional<Trace> trace = ReadBenchTrace("replay", args.trace_path, args.device);
  if (!trace) return 1;
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
  std::fprintf(
      stderr, "trace %s: %zu events, %llu allocations, peak live %s%s\n", trace->name.c_str(),
      trace->events.size(), static_cast<unsigned long long>(trace->allocations),
      FormatBytes(peak).c_str(),
      trace->num_streams > 1 ? absl::StrCat(", ", trace->num_streams, " streams").c_str() : "");

  if (!args.allocators.empty()) return RunCompare(args, *trace, spec);
  // A recorded workload (not a vgpu trace) with no allocator named: what its owner wants to
  // know is what each allocator needs against what theirs reserved. The line is bfc's, as for
  // a vgpu trace, with its min limit unless --min-limit=false, plus an "allocators" array
  // comparing bfc and vmm as --allocators does (--allocator NAME replays one alone).
  const bool compare_recorded =
      trace->format != "vgpu" && !args.allocator_given && args.memory_history_path.empty();
  BenchArgs a = args;  // the arguments in effect
  if (compare_recorded) {
    if (!args.min_limit_given) a.min_limit = true;
    std::fprintf(stderr,
                 "a recorded workload: bfc and vmm compared%s (--allocator NAME replays one)\n",
                 a.min_limit ? ", with their min limits" : "");
  }

  // Limit scan: not a bisection, fitting is not monotone in the limit.
  MinLimitScan scan;
  if (a.min_limit) {
    absl::StatusOr<MinLimitScan> s = ScanMinLimit(*trace, spec);
    if (!s.ok()) {
      std::fprintf(stderr, "vgpu-bench replay: %s\n", s.status().ToString().c_str());
      return 1;
    }
    scan = *s;
  }

  // Timed replays at --limit (default 2x peak live), best of several fresh runs.
  spec.limit = ReplayLimit(args, spec, peak);
  MemoryHistory history(1 << 20);
  history.SetLimit(spec.name, spec.limit);  // the timeline draws it
  const Trace calibration = args.calibrate ? CalibrationTrace() : Trace();
  absl::StatusOr<TimedReplay> timed =
      RunTimed(*trace, spec, args.memory_history_path.empty() ? nullptr : &history,
               args.calibrate ? &calibration : nullptr);
  if (!timed.ok()) {
    std::fprintf(stderr, "vgpu-bench replay: %s\n", timed.status().ToString().c_str());
    return 1;
  }
  const int64_t best_ns = timed->best_ns;
  const uint64_t peak_reserved = timed->peak_reserved;
  const std::optional<double> map_calls_per_gib = timed->map_calls_per_gib;
  const ReplayResult& first = timed->first;
  const double setup_ms = timed->setup_ms;
  const int64_t best_malloc_ns = args.baseline ? MallocBaselineNs(*trace) : -1;
  // The comparison of a recorded workload: bfc's run above, vmm's here.
  std::optional<ComparedRun> vmm_run;
  if (compare_recorded) {
    absl::StatusOr<ComparedRun> r =
        RunCompared(a, *trace, spec, "vmm", args.calibrate ? &calibration : nullptr);
    if (!r.ok()) {
      std::fprintf(stderr, "vgpu-bench replay: vmm: %s\n", r.status().ToString().c_str());
      return 1;
    }
    vmm_run = *std::move(r);
  }
  std::vector<std::string> failure_sections;  // --failure-log
  if (!AppendFailureSection(args, *trace, spec, args.allocator,
                            a.min_limit ? std::optional<MinLimitScan>(scan) : std::nullopt,
                            spec.limit, first.failures > 0, &failure_sections) ||
      (vmm_run && !AppendFailureSection(args, *trace, spec, "vmm", vmm_run->scan, vmm_run->limit,
                                        vmm_run->timed.first.failures > 0, &failure_sections)) ||
      !WriteFailureLog(args, failure_sections)) {
    return 1;
  }
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
  if (scan.min_limit_bytes) {
    std::fprintf(stderr, ", min limit %s (%.3fx), first fit %.3fx",
                 FormatBytes(*scan.min_limit_bytes).c_str(), *scan.min_limit_ratio,
                 *scan.first_fit_ratio);
  }
  std::fprintf(stderr, "\n");
  if (timed->calibration_ns_per_op) {
    std::fprintf(stderr, "calibration (best-fit reference allocator): %.1f ns/op\n",
                 *timed->calibration_ns_per_op);
  }
  PrintOriginalPeak(*trace, scan.min_limit_bytes
                                ? absl::StrFormat("; %s needs %s", args.allocator,
                                                  FormatBytes(*scan.min_limit_bytes))
                                : "");
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
  NullOr(w, "calibration_ns_per_op", timed->calibration_ns_per_op);
  w.Field("peak_live_bytes", peak);
  w.Field("peak_reserved_bytes", peak_reserved);
  w.Key("min_limit_bytes");
  if (scan.min_limit_bytes)
    w.Uint(*scan.min_limit_bytes);
  else
    w.Null();
  NullOr(w, "min_limit_ratio", scan.min_limit_ratio);
  NullOr(w, "first_fit_ratio", scan.first_fit_ratio);
  w.Field("peak_rss_bytes", peak_rss);
  // vmm only: contiguous granules map in one call; 512 per GiB would be one per
  // 2 MiB granule.
  if (map_calls_per_gib) w.Field("vmm_map_calls_per_gib", *map_calls_per_gib);
  w.Field("map_calls_per_kop", timed->map_calls_per_kop);
  w.Field("unmap_calls_per_kop", timed->unmap_calls_per_kop);
  if (timed->granule_creates_per_kop)
    w.Field("granule_creates_per_kop", *timed->granule_creates_per_kop);
  if (timed->edge_views) w.Field("vmm_edge_views", *timed->edge_views);
  w.Field("idle_reserved_bytes", timed->idle_reserved);
  // Imported workloads (allocator/trace_import.h) say where they came from; a vgpu trace's
  // line keeps its keys.
  if (trace->format != "vgpu" || trace->num_streams > 1) {
    w.Field("format", trace->format);
    w.Field("streams", static_cast<uint64_t>(trace->num_streams));
    w.Key("original_peak_reserved_bytes");
    if (trace->original_peak_reserved_bytes > 0)
      w.Uint(trace->original_peak_reserved_bytes);
    else
      w.Null();
  }
  if (trace->num_streams > 1) {
    w.Field("cross_stream_reuses", timed->cross_stream_reuses);
    w.Field("stream_waits", timed->stream_waits);
  }
  if (vmm_run) {
    ComparedRun bfc_run;
    bfc_run.kind = args.allocator;
    bfc_run.limit = spec.limit;
    bfc_run.timed = *timed;
    if (a.min_limit) bfc_run.scan = scan;
    w.Key("allocators");
    w.BeginArray();
    ReportCompared(*trace, bfc_run, w);
    ReportCompared(*trace, *vmm_run, w);
    w.EndArray();
  }
  w.EndObject();
  std::printf("%s\n", w.str().c_str());
  std::fflush(stdout);
  // Allocations that failed at the given limit make the run a failure (the JSON still says
  // how far it got).
  return first.failures > 0 || (vmm_run && vmm_run->timed.first.failures > 0) ? 3 : 0;
}

}  // namespace vgpu::bench
