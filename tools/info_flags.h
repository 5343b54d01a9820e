// vgpu-info's command lines (the main one and `timeline`): parsed with tools/flags.h's rules,
// in the vgpu_tools_lib library so the tests and the fuzzer call exactly what the tool does.
//
// Thread safety: ParseInfoFlags is reentrant; it never touches the environment.
#ifndef VGPU_TOOLS_INFO_FLAGS_H_
#define VGPU_TOOLS_INFO_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "vgpu/devices/config.h"

namespace vgpu_info {

struct InfoFlags {
  bool help = false;
  bool json = false;
  bool selftest = false;
  bool settings_table = false;  // --settings-table: print README's settings table
  std::string history_path;
  // Each overrides its VGPU_* variable when set.
  std::string platform;  // host | cuda | auto; "" = not given
  std::optional<std::string> host_devices;
  // The runtime settings given by a flag (devices/settings.h), each with source kFlag; the
  // tool completes them from the environment (RuntimeConfig::FromEnvironmentAndFlags).
  vgpu::RuntimeConfig settings;
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
