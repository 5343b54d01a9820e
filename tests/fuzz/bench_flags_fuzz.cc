// Fuzzes vgpu-bench's command line (ParseBenchArgs) and its tuning knobs (ReadBenchTuning):
// never crashes; refusals are InvalidArgument, non-empty and bounded; what is accepted is
// consistent (a replay has its trace, knobs are in range).
#include <cmath>
#include <map>

#include "vgpu/tests/fuzz/flags_fuzz_util.h"
#include "vgpu/tools/vgpu_bench.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = vgpu_fuzz::SplitArgs(data, size);
  absl::StatusOr<vgpu::bench::BenchArgs> a = vgpu::bench::ParseBenchArgs(args);
  vgpu_fuzz::CheckError(a.status());
  if (a.ok() && !a->help) {
    if (a->command == "replay" && a->trace_path.empty()) std::abort();
    if (a->command == "convert" && (a->trace_path.empty() || a->output_path.empty())) std::abort();
    if (a->command == "plan" && (!a->card || a->trace_paths.empty() || a->trace_paths.size() > 64 ||
                                 a->headroom_percent < 0 || a->headroom_percent > 1000)) {
      std::abort();
    }
    if (a->limit.has_value() && *a->limit == 0) std::abort();
    if (a->devices < 1 || a->devices > 16 || a->iterations < 1 || a->size < 4) std::abort();
  }
  // The same words as the eight knobs' values.
  const char* kKnobs[] = {"VGPU_BFC_SMALL_REQUEST_BYTES", "VGPU_BFC_MIN_SPLIT_BYTES",
                          "VGPU_BFC_MIN_SPLIT_FRACTION",  "VGPU_VMM_SLAB_BYTES",
                          "VGPU_VMM_SMALL_BLOCK_MAX",     "VGPU_BFC_SEGMENT_BYTES",
                          "VGPU_BFC_SMALL_FROM_TOP_BYTES", "VGPU_BFC_SMALL_FROM_TOP_HOLE_BYTES"};
  constexpr size_t kNumKnobs = sizeof(kKnobs) / sizeof(kKnobs[0]);
  std::map<std::string, std::string> env;
  for (size_t i = 0; i < kNumKnobs && i < args.size(); ++i) env[kKnobs[i]] = args[i];
  absl::StatusOr<vgpu::bench::BenchTuning> t =
      vgpu::bench::ReadBenchTuning([&env](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      });
  vgpu_fuzz::CheckError(t.status());
  if (t.ok()) {
    if (t->bfc_min_split_fraction &&
        !(*t->bfc_min_split_fraction >= 0 && *t->bfc_min_split_fraction <= 1)) {
      std::abort();
    }
    if (t->vmm_slab_bytes && *t->vmm_slab_bytes % vgpu::bench::kBenchVmmGranule != 0) {
      std::abort();
    }
    if (t->bfc_min_split_bytes && *t->bfc_min_split_bytes == 0) std::abort();
    if (t->bfc_segment_bytes && *t->bfc_segment_bytes > (uint64_t{1} << 40)) std::abort();
  }
  return 0;
}
