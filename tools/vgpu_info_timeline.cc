// vgpu-info timeline: draws a memory history (allocator/memory_history.h's JSON) as an SVG,
// one panel per allocator with events: bytes in use and reserved over time, and the limit
// line. The limits come from the history's optional "limits" object (written by
// `vgpu-info --selftest --memory-history`) or from --limit. Reading, checking and drawing are
// tools/history_reader.h; this file is the flags and the files.
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "vgpu/runtime/file_io.h"
#include "vgpu/runtime/gzip.h"
#include "vgpu/tools/flags.h"
#include "vgpu/tools/history_reader.h"
#include "vgpu/tools/info_flags.h"
#include "vgpu/tools/vgpu_info.h"

namespace vgpu_info {
namespace {

int Fail(const std::string& why, int code) {
  std::fprintf(stderr, "vgpu-info timeline: %s\n", why.c_str());
  if (code == 2) std::fputs(TimelineUsage(), stderr);
  return code;
}

}  // namespace

int TimelineMain(int argc, char** argv) {
  absl::StatusOr<TimelineFlags> flags = ParseTimelineFlags(vgpu::flags::Args(argc, argv));
  if (!flags.ok()) return Fail(std::string(flags.status().message()), 2);
  if (flags->help) {
    std::fputs(TimelineUsage(), stdout);
    return 0;
  }
  const std::string& in = flags->history_path;
  const std::string& out = flags->svg_path;
  const uint64_t limit_flag = flags->limit;
  absl::StatusOr<std::string> text =
      vgpu::ReadInputFile(in, kMaxHistoryFileBytes, "memory history");
  // A gzip-compressed history (history.json.gz) is inflated within the same cap.
  if (text.ok()) text = vgpu::GunzipIfCompressed(*std::move(text), kMaxHistoryFileBytes, in);
  if (!text.ok()) return Fail(std::string(text.status().message()), 1);
  absl::StatusOr<MemoryHistoryData> history = ParseMemoryHistory(*text, limit_flag);
  if (!history.ok()) return Fail(absl::StrCat(in, ": ", history.status().message()), 1);
  const TimelineSvg svg = RenderTimelineSvg(*history);
  if (absl::Status w = vgpu::WriteOutputFile(out, svg.svg, "SVG file"); !w.ok()) {
    return Fail(std::string(w.message()), 1);
  }
  // The summary goes to stderr when the drawing took standard output ("--svg -").
  std::FILE* const report = out == "-" ? stderr : stdout;
  std::fprintf(report, "%s: %zu allocator(s), %llu event(s), %.1f ms",
               out == "-" ? "standard output" : out.c_str(), history->series.size(),
               static_cast<unsigned long long>(history->events), history->t_max_ms);
  if (svg.left_out > 0 || svg.without_events > 0) {
    std::fprintf(report, "; %zu panel(s) drawn (%zu without events, %zu past the %zu-panel cap)",
                 svg.panels, svg.without_events, svg.left_out, kMaxTimelinePanels);
  }
  std::fprintf(report, "\n");
  return 0;
}

}  // namespace vgpu_info
