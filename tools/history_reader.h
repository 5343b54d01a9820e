// The timeline's input and drawing, apart from vgpu-info's flags so a fuzzer can call them:
// ParseMemoryHistory reads a memory history (allocator/memory_history.h's JSON, with an
// optional "limits" object) strictly, validating every number, and RenderTimelineSvg draws it
// as one panel per allocator with events, with an output size bounded whatever the input.
//
// Thread safety: free functions without shared state.
#ifndef VGPU_TOOLS_HISTORY_READER_H_
#define VGPU_TOOLS_HISTORY_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vgpu_info {

// Bounds on what a history may hold (InvalidArgument past them) and on what is drawn.
inline constexpr size_t kMaxHistoryAllocators = 65536;  // names in "allocators"
inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kMaxTimelinePanels = 64;      // panels drawn; the rest are counted
inline constexpr size_t kMaxTimelineNameBytes = 200;  // a longer name is shortened with "..."
inline constexpr uint64_t kMaxHistoryFileBytes = uint64_t{256} << 20;

struct HistoryPoint {
  double t_ms = 0;
  double in_use = 0;    // bytes
  double reserved = 0;  // bytes
  // External fragmentation after the event, 1 - largest free block / (reserved - in use), in
  // [0, 1]; -1 when the event has no "largest_free" (older files, allocators without it).
  double fragmentation = -1;
};

struct HistorySeries {
  std::string name;
  std::vector<HistoryPoint> points;  // sorted by time
  uint64_t limit = 0;                // bytes; 0 = unknown
};

struct MemoryHistoryData {
  std::vector<HistorySeries> series;  // one per name in "allocators", in order
  uint64_t dropped = 0;               // oldest events the recorder dropped
  uint64_t events = 0;
  double t_min_ms = 0;  // earliest event (0 when there is none)
  double t_max_ms = 0;  // latest event
};

// Parses a history. `default_limit` (e.g. --limit; 0 = none) is the limit of allocators that
// the file's "limits" does not name. Errors are InvalidArgument: malformed JSON (offset, line
// and column), a missing field, or a value out of range (t_ns, in_use and reserved must be
// finite and in [0, 2^64]; "allocator", "dropped" and limits non-negative integers).
absl::StatusOr<MemoryHistoryData> ParseMemoryHistory(absl::string_view json,
                                                     uint64_t default_limit = 0);

struct TimelineSvg {
  std::string svg;
  size_t panels = 0;          // panels drawn
  size_t without_events = 0;  // allocators with no events (not drawn)
  size_t left_out = 0;        // allocators with events past kMaxTimelinePanels
};

// Draws the history. Panels for allocators with events, at most kMaxTimelinePanels (a note
// says how many were left out); ticks and polyline points are bounded by the plot's pixels,
// so the SVG stays under a few MB. Names are escaped into valid XML 1.0 (control characters
// and invalid UTF-8 become U+FFFD).
TimelineSvg RenderTimelineSvg(const MemoryHistoryData& history);

// Text as valid XML 1.0 character data / attribute value (exposed for tests).
std::string XmlEscape(absl::string_view s, size_t max_bytes = std::string::npos);

}  // namespace vgpu_info

#endif  // VGPU_TOOLS_HISTORY_READER_H_
