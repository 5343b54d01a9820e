// vgpu-bench convert: any trace format (allocator/trace_import.h) to vgpu's text format.
// vgpu-bench plan: from recorded workloads, the smallest safe limit of each with each allocator
// and growth policy (the scan of `replay --min-limit`), the configuration that fits them on one
// card with headroom, and the VGPU_LOGICAL_DEVICES line for it (docs/allocator.md, "Planning a
// card").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "vgpu/allocator/trace.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/file_io.h"
#include "vgpu/runtime/gzip.h"
#include "vgpu/runtime/json.h"
#include "vgpu/tools/vgpu_bench.h"

namespace vgpu::bench {
namespace {

// Planned limits are whole granules: the card's VMM granularity (2 MiB on the host platform and
// current GPUs), which is also the smallest logical device (kMinLogicalDeviceBytes).
constexpr uint64_t kPlanGranule = uint64_t{2} << 20;

struct Policy {
  const char* allocator;
  bool growth;
  const char* key;  // JSON key and table column
};
constexpr Policy kPolicies[] = {{"bfc", false, "bfc"},
                                {"bfc", true, "bfc_growth"},
                                {"vmm", false, "vmm"},
                                {"vmm", true, "vmm_growth"}};
constexpr int kNumPolicies = 4;

// The spelling VGPU_LOGICAL_DEVICES accepts (runtime/bytes.h): whole GiB or MiB.
std::string SpecBytes(uint64_t bytes) {
  constexpr uint64_t kGiB = uint64_t{1} << 30, kMiB = uint64_t{1} << 20;
  if (bytes % kGiB == 0) return absl::StrCat(bytes / kGiB, "GiB");
  if (bytes % kMiB == 0) return absl::StrCat(bytes / kMiB, "MiB");
  return absl::StrCat(bytes);
}

uint64_t Planned(uint64_t min_limit, double headroom_percent) {
  const long double with =
      std::ceil(static_cast<long double>(min_limit) * (1.0L + headroom_percent / 100.0L));
  uint64_t bytes = static_cast<uint64_t>(with);
  bytes = (bytes + kPlanGranule - 1) / kPlanGranule * kPlanGranule;
  return std::max(bytes, kPlanGranule);
}

struct PlannedTrace {
  std::string path;
  Trace trace;
  std::optional<uint64_t> min_limit[kNumPolicies];
  int best = -1;  // the policy with the smallest min limit
};

}  // namespace

int RunConvert(const BenchArgs& args) {
  std::optional<Trace> trace = ReadBenchTrace("convert", args.trace_path, args.device);
  if (!trace) return 1;
  // OUT named *.gz is written gzip-compressed (what replay reads back); "-" is standard output,
  // and the summary line then goes to stderr with the rest.
  absl::StatusOr<std::string> out = GzipIfNamed(args.output_path, FormatTrace(*trace));
  if (!out.ok()) {
    std::fprintf(stderr, "vgpu-bench convert: %s\n", std::string(out.status().message()).c_str());
    return 1;
  }
  const std::string& text = *out;
  const bool gz = IsGzip(text);  // FormatTrace's text starts with "# "
  const bool to_stdout = args.output_path == "-";  // WriteOutputFile's standard output
  if (absl::Status w = WriteOutputFile(args.output_path, text, "trace file"); !w.ok()) {
    std::fprintf(stderr, "vgpu-bench convert: %s\n", std::string(w.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "%s (%s): %zu events, %u stream(s), peak live %s -> %s\n",
               args.trace_path.c_str(), trace->format.c_str(), trace->events.size(),
               trace->num_streams, FormatBytes(trace->peak_live_bytes).c_str(),
               args.output_path.c_str());
  JsonWriter w;
  w.BeginObject();
  w.Field("input", args.trace_path);
  w.Field("output", args.output_path);
  w.Field("format", trace->format);
  w.Field("events", static_cast<uint64_t>(trace->events.size()));
  w.Field("allocations", trace->allocations);
  w.Field("streams", static_cast<uint64_t>(trace->num_streams));
  w.Field("peak_live_bytes", trace->peak_live_bytes);
  w.Field("gzip", gz);
  w.Field("output_bytes", static_cast<uint64_t>(text.size()));
  w.EndObject();
  std::fprintf(to_stdout ? stderr : stdout, "%s\n", w.str().c_str());
  std::fflush(to_stdout ? stderr : stdout);
  return 0;
}

int RunPlan(const BenchArgs& args) {
  const uint64_t card = *args.card;
  std::vector<PlannedTrace> traces;
  for (const std::string& path : args.trace_paths) {
    std::optional<Trace> t = ReadBenchTrace("plan", path, args.device);
    if (!t) return 1;
    PlannedTrace p{.path = path, .trace = *std::move(t)};
    for (int i = 0; i < kNumPolicies; ++i) {
      BenchAllocatorSpec spec;
      spec.kind = kPolicies[i].allocator;
      spec.allow_growth = kPolicies[i].growth;
      spec.name = absl::StrCat("plan/", p.trace.name);
      // The allocators as the runtime builds them: vgpu-bench's tuning knobs are not runtime
      // settings, so they are not applied here.
      absl::StatusOr<MinLimitScan> scan = ScanMinLimit(p.trace, spec);
      if (!scan.ok()) {
        std::fprintf(stderr, "vgpu-bench plan: %s: %s\n", path.c_str(),
                     scan.status().ToString().c_str());
        return 1;
      }
      p.min_limit[i] = scan->min_limit_bytes;
      if (p.min_limit[i] && (p.best < 0 || *p.min_limit[i] < *p.min_limit[p.best])) p.best = i;
    }
    traces.push_back(std::move(p));
  }
  // One allocator and one growth policy apply to every logical device (VGPU_ALLOCATOR,
  // VGPU_ALLOW_GROWTH). --prefer memory: the policy whose planned limits sum to the least.
  // --prefer speed: the first that fits the card in kPolicies' order (fastest first), else the
  // least.
  auto estimate = [&](int i) -> std::optional<uint64_t> {
    uint64_t total = 0;
    for (const PlannedTrace& p : traces) {
      if (!p.min_limit[i]) return std::nullopt;
      total += (Planned(*p.min_limit[i], args.headroom_percent) + args.workspace +
                kPlanGranule - 1) / kPlanGranule * kPlanGranule;
    }
    return total;
  };
  std::optional<uint64_t> totals[kNumPolicies];
  int smallest = -1;
  for (int i = 0; i < kNumPolicies; ++i) {
    totals[i] = estimate(i);
    if (totals[i] && (smallest < 0 || *totals[i] < *totals[smallest])) smallest = i;
  }
  if (smallest < 0) {
    std::fprintf(stderr,
                 "vgpu-bench plan: no allocator and growth policy fits every trace within 11x "
                 "its peak live memory\n");
    return 1;
  }
  // A policy's limits, each checked by a replay at the planned limit (a granule more until it
  // fits: fitting is not monotone in the limit; the scan found 20 fits in a row, so this
  // rarely moves).
  struct Candidate {
    std::vector<uint64_t> planned, device_limits;
    uint64_t total = 0;
  };
  auto compute = [&](int i) -> std::optional<Candidate> {
    Candidate c;
    BenchAllocatorSpec spec;
    spec.kind = kPolicies[i].allocator;
    spec.allow_growth = kPolicies[i].growth;
    for (const PlannedTrace& p : traces) {
      uint64_t limit = Planned(*p.min_limit[i], args.headroom_percent);
      spec.name = absl::StrCat("plan/", p.trace.name);
      for (int tries = 0;; ++tries) {
        absl::StatusOr<bool> fits = ReplayFits(p.trace, spec, limit);
        if (!fits.ok()) {
          std::fprintf(stderr, "vgpu-bench plan: %s: %s\n", p.path.c_str(),
                       fits.status().ToString().c_str());
          return std::nullopt;
        }
        if (*fits) break;
        if (tries == 64) {
          std::fprintf(stderr, "vgpu-bench plan: %s does not replay at %s\n", p.path.c_str(),
                       FormatBytes(limit).c_str());
          return std::nullopt;
        }
        limit += kPlanGranule;
      }
      c.planned.push_back(limit);
      // The device's limit also holds the BLAS workspace the runtime allocates in it.
      c.device_limits.push_back((limit + args.workspace + kPlanGranule - 1) / kPlanGranule *
                                kPlanGranule);
      c.total += c.device_limits.back();
    }
    return c;
  };
  auto fits_card = [&](uint64_t total) {
    return args.reserve <= card && total <= card - args.reserve;
  };
  int chosen = -1;
  std::optional<Candidate> plan;
  if (args.prefer == "speed") {
    for (int i = 0; i < kNumPolicies && chosen < 0; ++i) {
      if (!totals[i]) continue;
      plan = compute(i);
      if (!plan) return 1;
      if (fits_card(plan->total)) chosen = i;
    }
  }
  if (chosen < 0) {  // --prefer memory, or nothing fits: the smallest total
    chosen = smallest;
    plan = compute(smallest);
    if (!plan) return 1;
  }
  const uint64_t chosen_total = plan->total;
  const std::vector<uint64_t>& planned = plan->planned;
  const std::vector<uint64_t>& device_limits = plan->device_limits;
  const Policy& policy = kPolicies[chosen];
  std::vector<std::string> sizes;
  for (uint64_t d : device_limits) sizes.push_back(SpecBytes(d));
  const std::string logical_devices = absl::StrCat("0:", absl::StrJoin(sizes, ","));
  const bool fits = fits_card(chosen_total);
  std::string env = absl::StrCat("VGPU_ALLOCATOR=", policy.allocator,
                                 " VGPU_ALLOW_GROWTH=", policy.growth ? "true" : "false");
  if (args.reserve > 0) absl::StrAppend(&env, " VGPU_RESERVED_MEMORY=", args.reserve);
  absl::StrAppend(&env, " VGPU_LOGICAL_DEVICES=\"", logical_devices, "\"");

  // The table: min limit per policy (* = the trace's own best), then the planned limit.
  auto cell = [](const std::optional<uint64_t>& v) {
    return v ? FormatBytes(*v) : std::string("over 11x");
  };
  std::printf("%-6s %-28s %-16s %-12s %-12s %-12s %-12s %-12s %-12s %-12s\n", "device", "trace",
              "format", "peak live", "bfc", "bfc+growth", "vmm", "vmm+growth", "planned", "device");
  for (size_t t = 0; t < traces.size(); ++t) {
    const PlannedTrace& p = traces[t];
    std::string cells[kNumPolicies];
    for (int i = 0; i < kNumPolicies; ++i) {
      cells[i] = absl::StrCat(cell(p.min_limit[i]), i == p.best ? "*" : "");
    }
    std::printf("GPU:%-2zu %-28s %-16s %-12s %-12s %-12s %-12s %-12s %-12s %-12s\n", t,
                p.trace.name.substr(0, 28).c_str(), p.trace.format.c_str(),
                FormatBytes(p.trace.peak_live_bytes).c_str(), cells[0].c_str(), cells[1].c_str(),
                cells[2].c_str(), cells[3].c_str(), FormatBytes(planned[t]).c_str(),
                FormatBytes(device_limits[t]).c_str());
  }
  std::printf(
      "min limits: the scan of `replay --min-limit` (* = that trace's smallest); planned = the "
      "min limit of %s, growth %s (%s; one allocator and growth policy serve every logical "
      "device) + %s%% headroom, rounded up to %s, replayed once at that limit to check; each "
      "device's limit adds %s for the BLAS workspace the runtime allocates in it "
      "(--workspace)\n",
      policy.allocator, policy.growth ? "on" : "off",
      args.prefer == "memory" ? "the smallest total of the four"
      : fits                  ? "the fastest of the four that fits the card: bfc before vmm, "
                                "growth off before on (--prefer memory: the smallest total)"
                              : "none fits the card: the smallest total of the four",
      absl::StrFormat("%g", args.headroom_percent).c_str(), FormatBytes(kPlanGranule).c_str(),
      FormatBytes(args.workspace).c_str());
  std::printf("card %s, reserve %s: the logical devices take %s, %s\n", FormatBytes(card).c_str(),
              FormatBytes(args.reserve).c_str(), FormatBytes(chosen_total).c_str(),
              fits ? "fits" : "DOES NOT FIT");
  std::printf("%s\n", env.c_str());

  JsonWriter w;
  w.BeginObject();
  w.Field("card_bytes", card);
  w.Field("reserve_bytes", args.reserve);
  w.Field("headroom_percent", args.headroom_percent);
  w.Field("granule_bytes", kPlanGranule);
  w.Field("workspace_bytes", args.workspace);
  w.Field("prefer", args.prefer);
  w.Field("allocator", std::string(policy.allocator));
  w.Field("allow_growth", policy.growth);
  w.Field("total_bytes", chosen_total);
  w.Field("env", env);
  w.Key("traces");
  w.BeginArray();
  for (size_t t = 0; t < traces.size(); ++t) {
    const PlannedTrace& p = traces[t];
    w.BeginObject();
    w.Field("device", absl::StrCat("/job:localhost/replica:0/task:0/device:GPU:", t));
    w.Field("path", p.path);
    w.Field("trace", p.trace.name);
    w.Field("format", p.trace.format);
    w.Field("events", static_cast<uint64_t>(p.trace.events.size()));
    w.Field("streams", static_cast<uint64_t>(p.trace.num_streams));
    w.Field("peak_live_bytes", p.trace.peak_live_bytes);
    w.Key("original_peak_reserved_bytes");
    if (p.trace.original_peak_reserved_bytes > 0)
      w.Uint(p.trace.original_peak_reserved_bytes);
    else
      w.Null();
    w.Key("min_limit_bytes");
    w.BeginObject();
    for (int i = 0; i < kNumPolicies; ++i) {
      w.Key(kPolicies[i].key);
      if (p.min_limit[i])
        w.Uint(*p.min_limit[i]);
      else
        w.Null();
    }
    w.EndObject();
    w.Field("best", std::string(p.best >= 0 ? kPolicies[p.best].key : ""));
    w.Field("planned_limit_bytes", planned[t]);
    w.Field("device_limit_bytes", device_limits[t]);
    w.EndObject();
  }
  w.EndArray();
  w.Field("logical_devices", logical_devices);
  w.Field("fits", fits);
  w.EndObject();
  std::printf("%s\n", w.str().c_str());
  std::fflush(stdout);
  if (!fits) {
    std::fprintf(stderr,
                 "vgpu-bench plan: the planned limits (%s) and the reserve (%s) exceed the %s "
                 "card\n",
                 FormatBytes(chosen_total).c_str(), FormatBytes(args.reserve).c_str(),
                 FormatBytes(card).c_str());
    return 3;
  }
  return 0;
}

}  // namespace vgpu::bench
