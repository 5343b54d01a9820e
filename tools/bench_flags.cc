// vgpu-bench's command line and tuning knobs (in the vgpu_tools_flags library so that the
// tests and the fuzzer call exactly what the tool does).
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/status.h"
#include "vgpu/tools/flags.h"
#include "vgpu/tools/vgpu_bench.h"

namespace vgpu::bench {
namespace {

constexpr uint64_t kTiB = uint64_t{1} << 40;

constexpr char kSynopsis[] =
    "usage: vgpu-bench replay TRACE [--allocator bfc|vmm|async] [--allow-growth[=BOOL]]\n"
    "                         [--limit SIZE|N%] [--min-limit[=BOOL]] [--platform host|cuda]\n"
    "                         [--memory-history FILE] [--no-baseline[=BOOL]] [--calibrate[=BOOL]]\n"
    "                         [--failure-log FILE] [--device N]\n"
    "                         [--allocators bfc,vmm[,async]] [tuning knobs]\n"
    "       vgpu-bench convert IN OUT [--device N]\n"
    "       vgpu-bench plan --card SIZE [--headroom PERCENT] [--reserve SIZE] [--workspace SIZE]\n"
    "                       [--prefer speed|memory] [--device N]\n"
    "                       TRACE...\n"
    "       vgpu-bench alloc [--allocator bfc|vmm|async] [--platform host|cuda] [--limit SIZE]\n"
    "                        [tuning knobs] [--benchmark_* flags]\n"
    "       vgpu-bench allreduce [--devices N] [--size SIZE]\n"
    "                            [--algorithm auto|local|via-host|nccl|hierarchical]\n"
    "                            [--iterations K] [--platform host|cuda]\n"
    "       vgpu-bench COMMAND --help\n";

// One tuning knob: its variable, its flag, how its value is read.
struct Knob {
  const char* env;
  const char* flag;
  const char* help;
  absl::Status (*read)(absl::string_view value, BenchTuning& t);
  const char* value_name = "SIZE";  // in --help
};

absl::StatusOr<uint64_t> SizeIn(absl::string_view v, uint64_t min, uint64_t max) {
  VGPU_ASSIGN_OR_RETURN(uint64_t b, ParseBytes(v));
  if (b < min || b > max) {
    return absl::InvalidArgumentError(absl::StrCat("must be in [", FormatBytes(min), ", ",
                                                   FormatBytes(max), "], not ", FormatBytes(b)));
  }
  return b;
}

// replay --limit: a size of at least 1 byte ("12GiB"), or a percentage of the trace's peak
// live bytes ("120%", more than 0 and at most 100000%), known only once the trace is read.
// Either output may be null (a check only); *percent is 0 for a size.
absl::Status ParseReplayLimit(absl::string_view v, uint64_t* bytes, double* percent) {
  if (absl::ConsumeSuffix(&v, "%")) {
    absl::StatusOr<double> p = ParseDecimal(v);
    if (!p.ok() || !(*p > 0) || *p > 100000) {
      return absl::InvalidArgumentError(
          "expected a size such as 12GiB or a percentage of the trace's peak live bytes such "
          "as 120% (more than 0, at most 100000%)");
    }
    if (percent != nullptr) *percent = *p;
    return absl::OkStatus();
  }
  VGPU_ASSIGN_OR_RETURN(uint64_t b, SizeIn(v, 1, UINT64_MAX));
  if (bytes != nullptr) *bytes = b;
  if (percent != nullptr) *percent = 0;
  return absl::OkStatus();
}

// What replay's TRACE and convert's IN may be.
constexpr char kTraceInputHelp[] =
    "a trace, PyTorch snapshot or profiler trace, RMM log or TensorFlow memory log, plain, gzip "
    "or zip (told apart by content; - is stdin)";

// A switch: 0 (off) or 1 (on).
absl::StatusOr<bool> ZeroOrOne(absl::string_view v) {
  if (v == "0" || v == "1") return v == "1";
  return absl::InvalidArgumentError("must be 0 or 1");
}

// A 0|1 knob's reader: the flag or variable into its BenchTuning field.
template <std::optional<bool> BenchTuning::*kField>
absl::Status ReadZeroOrOne(absl::string_view v, BenchTuning& t) {
  VGPU_ASSIGN_OR_RETURN(t.*kField, ZeroOrOne(v));
  return absl::OkStatus();
}

// A divisor knob's reader (0 .. 2^20, 0 = the rule off): into its BenchTuning field.
template <std::optional<uint64_t> BenchTuning::*kField>
absl::Status ReadDivisor(absl::string_view v, BenchTuning& t) {
  VGPU_ASSIGN_OR_RETURN(int64_t n, ParseInt64InRange(v, 0, int64_t{1} << 20));
  t.*kField = static_cast<uint64_t>(n);
  return absl::OkStatus();
}

const Knob kKnobs[] = {
    {"VGPU_BFC_SMALL_REQUEST_BYTES", "--bfc-small-request-bytes",
     "BFC: requests up to SIZE are carved from the high end of a region (0 = off)",
     [](absl::string_view v, BenchTuning& t) -> absl::Status {
       VGPU_ASSIGN_OR_RETURN(t.bfc_small_request_bytes, SizeIn(v, 0, kTiB));
       return absl::OkStatus();
     }},
    {"VGPU_BFC_SMALL_FROM_TOP_BYTES", "--bfc-small-from-top-bytes",
     "BFC: requests up to SIZE that no smaller hole fits come from the top of the pool (0 = off; "
     "default 64 KiB without growth)",
     [](absl::string_view v, BenchTuning& t) -> absl::Status {
       VGPU_ASSIGN_OR_RETURN(t.bfc_small_from_top_bytes, SizeIn(v, 0, kTiB));
       return absl::OkStatus();
     }},
    {"VGPU_BFC_SMALL_FROM_TOP_HOLE_BYTES", "--bfc-small-from-top-hole-bytes",
     "BFC: ... only when their best fit is a hole of at least SIZE (default 1 MiB without growth)",
     [](absl::string_view v, BenchTuning& t) -> absl::Status {
       VGPU_ASSIGN_OR_RETURN(t.bfc_small_from_top_hole_bytes, SizeIn(v, 0, kTiB));
       return absl::OkStatus();
     }},
    {"VGPU_BFC_MIN_SPLIT_BYTES", "--bfc-min-split-bytes",
     "BFC: a remainder below SIZE is not split off (1 B .. 1 TiB)",
     [](absl::string_view v, BenchTuning& t) -> absl::Status {
       VGPU_ASSIGN_OR_RETURN(t.bfc_min_split_bytes, SizeIn(v, 1, kTiB));
       return absl::OkStatus();
     }},
    {"VGPU_BFC_MIN_SPLIT_FRACTION", "--bfc-min-split-fraction",
     "BFC: a remainder below X times the request is not split off (0 .. 1)",
     [](absl::string_view v, BenchTuning& t) -> absl::Status {
       VGPU_ASSIGN_OR_RETURN(t.bfc_min_split_fraction, ParseDecimalInRange(v, 0, 1));
       return absl::OkStatus();
     },
     "X"},
    {"VGPU_BFC_PARK_SLIVERS", "--bfc-park-slivers",
     "BFC: split off remainders under the fraction but park them (0 = off, the default; 1 = on)",
     ReadZeroOrOne<&BenchTuning::bfc_park_slivers>, "0|1"},
    {"VGPU_BFC_RECLAIM_SLIVERS", "--bfc-reclaim-slivers",
     "BFC: a freed block takes the remainder kept inside the live block before it (0 = off, the "
     "default; 1 = on)",
     ReadZeroOrOne<&BenchTuning::bfc_reclaim_slivers>, "0|1"},
    {"VGPU_BFC_SEGMENT_BYTES", "--bfc-segment-bytes",
     "BFC with growth: requests of at least SIZE get a region of their own, cached whole "
     "(0 = off: TensorFlow's doubling regions)",
     [](absl::string_view v, BenchTuning& t) -> absl::Status {
       VGPU_ASSIGN_OR_RETURN(t.bfc_segment_bytes, SizeIn(v, 0, kTiB));
       return absl::OkStatus();
     }},
    {"VGPU_BFC_SEGMENT_WASTE_DIVISOR", "--bfc-segment-waste-divisor",
     "BFC with growth: a request that whole pages would waste more than 1/N of comes from the "
     "shared regions, not a segment (0 = any waste, the default)",
     ReadDivisor<&BenchTuning::bfc_segment_waste_divisor>, "N"},
    {"VGPU_BFC_SEGMENT_WASTE_DIVISOR_BEFORE_FREE", "--bfc-segment-waste-divisor-before-free",
     "BFC with growth: until the first free, a request that whole pages would waste more than "
     "1/N of comes from the shared regions (0 = no such rule; default 32)",
     ReadDivisor<&BenchTuning::bfc_segment_waste_divisor_before_free>, "N"},
    {"VGPU_BFC_GATHER_PAGES", "--bfc-gather-pages",
     "BFC without growth: take the limit as VMM pages and gather free ones for a request no hole "
     "fits (1 = on, the default; 0 = one region, TensorFlow's)",
     ReadZeroOrOne<&BenchTuning::bfc_gather_pages>, "0|1"},
    {"VGPU_VMM_SLAB_BYTES", "--vmm-slab-bytes",
     "VMM: slab size, a whole number of 2 MiB granules up to 1 TiB",
     [](absl::string_view v, BenchTuning& t) -> absl::Status {
       VGPU_ASSIGN_OR_RETURN(uint64_t b, SizeIn(v, kBenchVmmGranule, kTiB));
       if (b % kBenchVmmGranule != 0) {
         return absl::InvalidArgumentError(absl::StrCat("must be a whole number of ",
                                                        FormatBytes(kBenchVmmGranule),
                                                        " granules, not ", FormatBytes(b)));
       }
       t.vmm_slab_bytes = b;
       return absl::OkStatus();
     }},
    {"VGPU_VMM_PAGE_BYTES", "--vmm-page-bytes",
     "VMM: the allocator's granule, a power-of-two multiple of 2 MiB up to 1 GiB",
     [](absl::string_view v, BenchTuning& t) -> absl::Status {
       VGPU_ASSIGN_OR_RETURN(uint64_t b, SizeIn(v, kBenchVmmGranule, uint64_t{1} << 30));
       if ((b & (b - 1)) != 0) {
         return absl::InvalidArgumentError(absl::StrCat("must be a power-of-two multiple of ",
                                                        FormatBytes(kBenchVmmGranule), ", not ",
                                                        FormatBytes(b)));
       }
       t.vmm_page_bytes = b;
       return absl::OkStatus();
     }},
    {"VGPU_VMM_SMALL_BLOCK_MAX", "--vmm-small-block-max",
     "VMM: blocks below SIZE come from slabs (1 B .. the slab size)",
     [](absl::string_view v, BenchTuning& t) -> absl::Status {
       VGPU_ASSIGN_OR_RETURN(t.vmm_small_block_max, SizeIn(v, 1, kTiB));
       return absl::OkStatus();
     }},
    {"VGPU_VMM_RECLAIM_SLIVERS", "--vmm-reclaim-slivers",
     "VMM: near the limit a freed small block takes the remainder kept inside the block before "
     "it (1 = on, the default; 0 = off)",
     ReadZeroOrOne<&BenchTuning::vmm_reclaim_slivers>, "0|1"},
    {"VGPU_VMM_MID_BLOCKS", "--vmm-mid-blocks",
     "VMM: near the limit (less than a third of it left) blocks of half the small-block size and "
     "up try open parts of shared granules before the slabs (1 = on, the default; 0 = off)",
     ReadZeroOrOne<&BenchTuning::vmm_mid_blocks>, "0|1"},
    {"VGPU_VMM_INNER_BLOCKS", "--vmm-inner-blocks",
     "VMM: a block below one granule that would take a fresh granule for its tail takes the "
     "start of a gap between two live blocks instead (1 = on, the default; 0 = off)",
     ReadZeroOrOne<&BenchTuning::vmm_inner_blocks>, "0|1"},
    {"VGPU_VMM_EDGE_BEST_FIT", "--vmm-edge-best-fit",
     "VMM: near the limit (less than an eighth of it left) a free slab end and start joined by an "
     "edge view serve a small request of 64 KiB or more when they leave less than its best slab "
     "hole (1 = on, the default; 0 = off)",
     ReadZeroOrOne<&BenchTuning::vmm_edge_best_fit>, "0|1"},
    {"VGPU_VMM_WHOLE_GRANULE_DIVISOR", "--vmm-whole-granule-divisor",
     "VMM: far from the limit a large block that wastes at most 1/N of its size in whole granules "
     "takes them instead of a shared tail (0 = always share; default 32)",
     ReadDivisor<&BenchTuning::vmm_whole_granule_divisor>, "N"},
};

absl::Status ReadKnob(const Knob& k, absl::string_view value, BenchTuning& t) {
  if (absl::Status s = k.read(value, t); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(k.env, "=", flags::Quote(value), ": ", flags::BoundedMessage(s.message())));
  }
  return absl::OkStatus();
}

// The slab bounds the small blocks (the allocator checks it too, later and less clearly).
absl::Status CheckTuning(const BenchTuning& t) {
  const uint64_t slab = t.vmm_slab_bytes.value_or(t.vmm_page_bytes.value_or(kBenchVmmGranule));
  if (t.vmm_small_block_max && *t.vmm_small_block_max > slab) {
    return absl::InvalidArgumentError(
        absl::StrCat("VGPU_VMM_SMALL_BLOCK_MAX=", FormatBytes(*t.vmm_small_block_max),
                     " exceeds the slab size ", FormatBytes(slab), " (VGPU_VMM_SLAB_BYTES)"));
  }
  return absl::OkStatus();
}

// Declares the knob flags: each stores its text, checked as its variable would be.
void AddKnobFlags(flags::FlagSet& fs, std::vector<std::pair<std::string, std::string>>& out,
                  std::vector<std::string>& storage) {
  storage.resize(std::size(kKnobs));
  for (size_t i = 0; i < std::size(kKnobs); ++i) {
    const Knob& k = kKnobs[i];
    fs.String(k.flag, &storage[i], k.value_name, absl::StrCat(k.help, " (", k.env, ")"),
              [&k, &out](absl::string_view v) -> absl::Status {
                BenchTuning t;
                if (absl::Status s = k.read(v, t); !s.ok()) return s;
                out.emplace_back(k.env, std::string(v));
                return absl::OkStatus();
              });
  }
}

}  // namespace

std::string BenchUsage() { return kSynopsis; }

absl::StatusOr<BenchTuning> ReadBenchTuning(const std::function<const char*(const char*)>& getenv,
                                            const BenchArgs& args) {
  BenchTuning t;
  for (const Knob& k : kKnobs) {
    // The knob's flag, when given, replaces its variable (the last flag of a knob wins).
    const char* v = getenv(k.env);
    std::string flag_value;
    for (const auto& [env, value] : args.tuning) {
      if (env == k.env) {
        flag_value = value;
        v = flag_value.c_str();
      }
    }
    if (v != nullptr) VGPU_RETURN_IF_ERROR(ReadKnob(k, v, t));
  }
  VGPU_RETURN_IF_ERROR(CheckTuning(t));
  return t;
}

void BenchTuning::ApplyTo(DeviceAllocatorOptions& options) const {
  options.bfc_small_request_bytes = bfc_small_request_bytes;
  options.bfc_small_from_top_bytes = bfc_small_from_top_bytes;
  options.bfc_small_from_top_hole_bytes = bfc_small_from_top_hole_bytes;
  options.bfc_min_split_bytes = bfc_min_split_bytes;
  options.bfc_min_split_fraction = bfc_min_split_fraction;
  options.bfc_park_slivers = bfc_park_slivers;
  options.bfc_reclaim_slivers = bfc_reclaim_slivers;
  options.bfc_gather_pages = bfc_gather_pages;
  options.bfc_segment_bytes = bfc_segment_bytes;
  options.bfc_segment_waste_divisor = bfc_segment_waste_divisor;
  options.bfc_segment_waste_divisor_before_free = bfc_segment_waste_divisor_before_free;
  options.vmm_slab_bytes = vmm_slab_bytes;
  options.vmm_page_bytes = vmm_page_bytes;
  options.vmm_small_block_max = vmm_small_block_max;
  options.vmm_reclaim_slivers = vmm_reclaim_slivers;
  options.vmm_mid_blocks = vmm_mid_blocks;
  options.vmm_inner_blocks = vmm_inner_blocks;
  options.vmm_edge_best_fit = vmm_edge_best_fit;
  options.vmm_whole_granule_divisor = vmm_whole_granule_divisor;
}

absl::StatusOr<BenchArgs> ParseBenchArgs(const std::vector<std::string>& argv) {
  BenchArgs a;
  a.usage = kSynopsis;
  if (!argv.empty() && (argv[0] == "--help" || argv[0] == "-h")) {
    a.help = true;
    return a;
  }
  if (argv.empty()) {
    return absl::InvalidArgumentError("missing command (replay, convert, plan, alloc, allreduce)");
  }
  a.command = argv[0];
  if (a.command != "replay" && a.command != "alloc" && a.command != "allreduce" &&
      a.command != "convert" && a.command != "plan") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown command ", flags::Quote(a.command),
                     ": expected replay, convert, plan, alloc or allreduce"));
  }
  flags::FlagSet fs(absl::StrCat("vgpu-bench ", a.command), kSynopsis);
  const std::vector<std::string> kAllocators = {"bfc", "vmm", "async"};
  const std::vector<std::string> kPlatforms = {"host", "cuda"};
  bool no_baseline = false;
  std::vector<std::string> knob_text;
  std::string allocators;
  std::string limit_text;  // replay --limit: a size or N%
  // PyTorch snapshots and TensorFlow logs hold several devices (default: the most events).
  auto device_flag = [&a](flags::FlagSet& f) -> flags::FlagSet& {
    return f.Int(
        "--device", &a.device_value, 0, 1023,
        "PyTorch snapshot or profiler trace, TensorFlow log: the GPU whose records are read "
        "(default: most events)");
  };
  if (a.command == "replay") {
    fs.Positional("TRACE", &a.trace_path, /*required=*/true, kTraceInputHelp)
        .Enum("--allocator", &a.allocator, kAllocators,
              "the allocator replayed (default bfc; a recorded workload, not a vgpu trace: "
              "bfc and vmm compared, with their min limits)")
        .Bool("--allow-growth", &a.allow_growth, "reserve memory as needed (default off)")
        .String("--limit", &limit_text, "SIZE",
                "memory limit: a size, or N% of the trace's peak live (default 200%)",
                [](absl::string_view v) { return ParseReplayLimit(v, nullptr, nullptr); })
        .Bool("--min-limit", &a.min_limit, "also find the smallest limit the trace fits in")
        .Bool("--no-baseline", &no_baseline, "skip timing malloc/free of the same sizes")
        .Bool("--calibrate", &a.calibrate,
              "also time a fixed trace on a best-fit reference allocator after each timed run: "
              "the machine's speed (calibration_ns_per_op)")
        .Enum("--platform", &a.platform, kPlatforms, "real device memory (default: fake)")
        .OutputPath("--memory-history", &a.memory_history_path, "write the memory history (JSON)",
                    "vgpu-bench's report")
        .OutputPath("--failure-log", &a.failure_log_path,
                    "write the allocator's memory log at the first allocation that fails: one "
                    "scan step under the min limit with --min-limit, else at --limit",
                    "vgpu-bench's report")
        .String("--allocators", &allocators, "LIST",
                "compare allocators (bfc,vmm[,async]): min limit and ns/op of each, one JSON line",
                [](absl::string_view v) -> absl::Status {
                  for (absl::string_view x : absl::StrSplit(v, ',')) {
                    if (x != "bfc" && x != "vmm" && x != "async") {
                      return absl::InvalidArgumentError(absl::StrCat(
                          "unknown allocator ", flags::Quote(x), " (expected bfc, vmm or async)"));
                    }
                  }
                  return absl::OkStatus();
                });
    device_flag(fs);
    AddKnobFlags(fs, a.tuning, knob_text);
  } else if (a.command == "convert") {
    fs.Positional("IN", &a.trace_path, /*required=*/true, kTraceInputHelp)
        .Positional("OUT", &a.output_path, /*required=*/true,
                    "the vgpu trace written (gzip-compressed if it ends in .gz; - is stdout)");
    device_flag(fs);
  } else if (a.command == "plan") {
    fs.Bytes("--card", &a.card, 2 << 20, uint64_t{64} << 40, "the card's memory (required)")
        .Percent("--headroom", &a.headroom_percent, 0, 1000,
                 "percent added to each min limit, 10 or 10% (default 5)")
        .Bytes("--reserve", &a.reserve, 0, uint64_t{64} << 40,
               "memory left free on the card, VGPU_RESERVED_MEMORY (default 0)")
        .Bytes("--workspace", &a.workspace, 0, uint64_t{1} << 30,
               "added to each device for the BLAS workspace the runtime allocates in it "
               "(default 32MiB, cuBLAS on Hopper; 0 on the host platform)")
        .Enum("--prefer", &a.prefer, {"speed", "memory"},
              "speed: the fastest allocator and growth policy that fits the card (default); "
              "memory: the smallest total")
        .Rest("TRACE...", &a.trace_paths,
              "traces, PyTorch snapshots or profiler traces, RMM or TensorFlow logs (1 to 64)");
    device_flag(fs);
  } else if (a.command == "alloc") {
    fs.Enum("--allocator", &a.allocator, kAllocators, "the allocator measured (default bfc)")
        .Bytes("--limit", &a.limit, 1, UINT64_MAX, "memory limit (default 2 GiB)")
        .Enum("--platform", &a.platform, kPlatforms, "the platform (default host)")
        .PassThrough("--benchmark_", &a.passthrough, "Google Benchmark's flags");
    AddKnobFlags(fs, a.tuning, knob_text);
  } else {
    fs.Int("--devices", &a.devices, 1, 16, "replicas (default 4)")
        .Bytes("--size", &a.size, 4, kTiB, "bytes per replica (default 64 MiB)")
        .Enum("--algorithm", &a.algorithm, {"auto", "local", "via-host", "nccl", "hierarchical"},
              "all-reduce algorithm")
        .Int("--iterations", &a.iterations, 1, 1000000, "timed iterations (default 10)")
        .Enum("--platform", &a.platform, kPlatforms, "the platform (default host)");
  }
  a.usage = fs.Usage();
  std::vector<std::string> rest(argv.begin() + 1, argv.end());
  VGPU_ASSIGN_OR_RETURN(flags::ParseResult r, fs.Parse(rest));
  if (r.help) {
    a.help = true;
    return a;
  }
  a.baseline = !no_baseline;
  if (!limit_text.empty()) {
    uint64_t bytes = 0;
    double percent = 0;
    VGPU_RETURN_IF_ERROR(ParseReplayLimit(limit_text, &bytes, &percent));
    if (percent > 0) {
      a.limit_percent = percent;
    } else {
      a.limit = bytes;
    }
  }
  if (r.seen.contains("--device")) a.device = a.device_value;
  a.allocator_given = r.seen.contains("--allocator") || r.seen.contains("--allocators");
  a.min_limit_given = r.seen.contains("--min-limit");
  if (!allocators.empty()) {
    for (absl::string_view x : absl::StrSplit(allocators, ',')) a.allocators.emplace_back(x);
    if (absl::c_find(a.allocators, "async") != a.allocators.end() && a.platform.empty()) {
      return absl::InvalidArgumentError(
          "--allocators async needs --platform host|cuda: it replays on the driver's pool, "
          "which has no fake-address mode");
    }
  }
  if (a.command == "plan") {
    if (!a.card)
      return absl::InvalidArgumentError("vgpu-bench plan needs --card SIZE (see --help)");
    if (a.trace_paths.empty()) {
      return absl::InvalidArgumentError("vgpu-bench plan needs at least one TRACE (see --help)");
    }
    if (a.trace_paths.size() > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("vgpu-bench plan: ", a.trace_paths.size(),
                       " traces; a card holds at most 64 logical devices"));
    }
    // Standard input is read once: a second "-" would find it at its end ("no events").
    if (absl::c_count(a.trace_paths, "-") > 1) {
      return absl::InvalidArgumentError(
          "vgpu-bench plan: \"-\" (standard input) is given more than once; it can be read "
          "only once: save the other workloads to files");
    }
  }
  if (a.command == "replay" && a.allocator == "async" && a.platform.empty()) {
    return absl::InvalidArgumentError(
        "--allocator async needs --platform host|cuda: it replays on the driver's pool, "
        "which has no fake-address mode");
  }
  // The knobs given as flags, checked together as the environment's are.
  BenchTuning t;
  for (const auto& [env, value] : a.tuning) {
    for (const Knob& k : kKnobs) {
      if (env == k.env) VGPU_RETURN_IF_ERROR(ReadKnob(k, value, t));
    }
  }
  VGPU_RETURN_IF_ERROR(CheckTuning(t));
  return a;
}

}  // namespace vgpu::bench
