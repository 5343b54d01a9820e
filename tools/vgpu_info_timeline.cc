// vgpu-info timeline: draws a memory history (allocator/memory_history.h's JSON) as an SVG,
// one panel per allocator with events: bytes in use and reserved over time, and the limit
// line. The limits come from the history's optional "limits" object (written by
// `vgpu-info --selftest --memory-history`) or from --limit. Reading, checking and drawing are
// tools/history_reader.h; this file is the flags and the files.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/bytes.h"
#include "runtime/file_io.h"
#include "tools/history_reader.h"
#include "tools/vgpu_info.h"

namespace vgpu_info {
namespace {

constexpr char kUsage[] =
    "usage: vgpu-info timeline HISTORY.json --svg OUT.svg [--limit BYTES]\n"
    "  --svg OUT.svg, --svg=OUT.svg   where to write the drawing (required)\n"
    "  --limit BYTES, --limit=BYTES   limit line for allocators the history gives none\n"
    "  -h, --help                     this text\n";

int Fail(const std::string& why, int code) {
  std::fprintf(stderr, "vgpu-info timeline: %s\n", why.c_str());
  if (code == 2) std::fputs(kUsage, stderr);
  return code;
}

}  // namespace

int TimelineMain(int argc, char** argv) {
  std::string in, out;
  bool have_out = false;
  uint64_t limit_flag = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    // --flag=VALUE, or --flag VALUE where VALUE is not itself a flag.
    std::string name = a, value;
    bool has_value = false;
    if (absl::StartsWith(a, "--")) {
      if (size_t eq = a.find('='); eq != std::string::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
        has_value = true;
      }
    }
    if (name == "--svg" || name == "--limit") {
      if (!has_value) {
        if (i + 1 >= argc || absl::StartsWith(argv[i + 1], "-")) {
          return Fail(absl::StrCat(name, " needs a value"), 2);
        }
        value = argv[++i];
      }
      if (value.empty()) return Fail(absl::StrCat(name, " needs a value"), 2);
      if (name == "--svg") {
        out = value;
        have_out = true;
      } else {
        absl::StatusOr<uint64_t> v = vgpu::ParseBytes(value);
        if (!v.ok()) return Fail(absl::StrCat("--limit: ", v.status().message()), 2);
        limit_flag = *v;
      }
    } else if (!a.empty() && a[0] != '-' && in.empty()) {
      in = a;
    } else {
      return Fail(absl::StrCat("unexpected argument \"", a, "\""), 2);
    }
  }
  if (in.empty() || !have_out) return Fail("needs a history file and --svg OUT.svg", 2);
  absl::StatusOr<std::string> text =
      vgpu::ReadInputFile(in, kMaxHistoryFileBytes, "memory history");
  if (!text.ok()) return Fail(std::string(text.status().message()), 1);
  absl::StatusOr<MemoryHistoryData> history = ParseMemoryHistory(*text, limit_flag);
  if (!history.ok()) return Fail(absl::StrCat(in, ": ", history.status().message()), 1);
  const TimelineSvg svg = RenderTimelineSvg(*history);
  std::ofstream o(out, std::ios::binary | std::ios::trunc);
  o << svg.svg;
  o.close();
  if (!o) return Fail(absl::StrCat("cannot write ", out), 1);
  std::printf("%s: %zu allocator(s), %llu event(s), %.1f ms", out.c_str(), history->series.size(),
              static_cast<unsigned long long>(history->events), history->t_max_ms);
  if (svg.left_out > 0 || svg.without_events > 0) {
    std::printf("; %zu panel(s) drawn (%zu without events, %zu past the %zu-panel cap)", svg.panels,
                svg.without_events, svg.left_out, kMaxTimelinePanels);
  }
  std::printf("\n");
  return 0;
}

}  // namespace vgpu_info
