// Fuzzes the timeline's history reader and renderer (tools/history_reader.h): never crashes
// or hangs (hostile numbers made the tick loops endless); an accepted history renders to
// bounded, NUL-free SVG with at most kMaxTimelinePanels panels; errors are InvalidArgument.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "vgpu/tools/history_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto h = vgpu_info::ParseMemoryHistory(text, /*default_limit=*/size);
  if (!h.ok()) {
    if (h.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  vgpu_info::TimelineSvg svg = vgpu_info::RenderTimelineSvg(*h);
  if (svg.panels > vgpu_info::kMaxTimelinePanels) std::abort();
  if (svg.svg.find('\0') != std::string::npos) std::abort();
  // Each panel is bounded by the plot's pixels, not by the events.
  if (svg.svg.size() > 4096 + svg.panels * 200000) std::abort();
  return 0;
}
