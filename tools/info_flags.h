// vgpu-info's command lines (the main one and `timeline`): parsed with tools/flags.h's rules,
// in the vgpu_tools_lib library so the tests and the fuzzer call exactly what the tool does.
//
// Thread safety: ParseInfoFlags is reentrant; it never touches the environment (main applies
// the result with setenv).
#ifndef VGPU_TOOLS_INFO_FLAGS_H_
#define VGPU_TOOLS_INFO_FLAGS_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vgpu_info {

struct InfoFlags {
  bool help = false;
  bool json = false;
  bool selftest = false;
  std::string history_path;
  // Each overrides its VGPU_* variable when set; `flagged` names the settings given by a flag.
  std::string platform;  // host | cuda | auto; "" = not given
  std::optional<std::string> host_devices;
  std::optional<std::string> logical_devices;
  std::optional<bool> allow_growth;
  std::optional<std::string> memory_fraction;
  std::set<std::string> flagged;
};

// argv without the program name. InvalidArgument naming the flag; the caller adds InfoUsage().
absl::StatusOr<InfoFlags> ParseInfoFlags(const std::vector<std::string>& args);
const char* InfoUsage();

// `vgpu-info timeline HISTORY.json --svg OUT.svg [--limit BYTES]`, same rules.
struct TimelineFlags {
  bool help = false;
  std::string history_path;
  std::string svg_path;
  uint64_t limit = 0;  // 0 = none given
};
// args after "timeline".
absl::StatusOr<TimelineFlags> ParseTimelineFlags(const std::vector<std::string>& args);
const char* TimelineUsage();

}  // namespace vgpu_info

#endif  // VGPU_TOOLS_INFO_FLAGS_H_
