// Fuzzes vgpu-info's command lines (ParseInfoFlags, ParseTimelineFlags): never crashes; refusals
// are InvalidArgument, non-empty and bounded; --memory-history is only accepted with --selftest.
#include "vgpu/tests/fuzz/flags_fuzz_util.h"
#include "vgpu/tools/info_flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<vgpu_info::InfoFlags> f =
      vgpu_info::ParseInfoFlags(vgpu_fuzz::SplitArgs(data, size));
  vgpu_fuzz::CheckError(f.status());
  if (f.ok() && !f->help) {
    if (!f->history_path.empty() && !f->selftest) std::abort();
    if (!f->platform.empty() && f->platform != "host" && f->platform != "cuda" &&
        f->platform != "auto") {
      std::abort();
    }
  }
  // The same input as `vgpu-info timeline ...`'s arguments.
  absl::StatusOr<vgpu_info::TimelineFlags> t =
      vgpu_info::ParseTimelineFlags(vgpu_fuzz::SplitArgs(data, size));
  vgpu_fuzz::CheckError(t.status());
  if (t.ok() && !t->help && (t->history_path.empty() || t->svg_path.empty())) std::abort();
  return 0;
}
