// The runtime's settings in one table: for each, its name, environment variable, command-line
// flag, parser, formatter, the RuntimeConfig field it sets and a one-line doc. The environment
// reader (RuntimeConfig::FromEnvironment), the tools' setting flags (tools/flags.h,
// FlagSet::RuntimeSettings), vgpu-info's "Settings" section, the configuration fuzzer and the
// README's settings table (vgpu-info --settings-table) all iterate this table.
//
// Adding a setting: its field in RuntimeConfig (config.h), its name constant below, and one
// row in SettingsTable() (settings.cc); README.md's table is then regenerated with
// `vgpu-info --settings-table` (a test fails until it is). See docs/architecture.md.
//
// Thread safety: the table is immutable and built on first use (thread-safe); the functions
// are pure.
#ifndef VGPU_DEVICES_SETTINGS_H_
#define VGPU_DEVICES_SETTINGS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace vgpu {

struct RuntimeConfig;  // config.h

// Where a setting's value came from, shown by vgpu-info.
enum class ConfigSource { kDefault, kEnvironment, kFlag, kApi };
// "default", "environment", "flag", "api".
absl::string_view ConfigSourceName(ConfigSource source);

// Names of the settings, for RuntimeConfig::sources and vgpu-info.
inline constexpr absl::string_view kSettingVisibleDevices = "visible_devices";
inline constexpr absl::string_view kSettingLogicalDevices = "logical_devices";
inline constexpr absl::string_view kSettingMemoryFraction = "memory_fraction";
inline constexpr absl::string_view kSettingAllowGrowth = "allow_growth";
inline constexpr absl::string_view kSettingReservedMemory = "reserved_memory";
inline constexpr absl::string_view kSettingAllocator = "allocator";
inline constexpr absl::string_view kSettingSmPartition = "sm_partition";
inline constexpr absl::string_view kSettingSoftPlacement = "soft_placement";
inline constexpr absl::string_view kSettingLogPlacement = "log_placement";

// One row of the table. The functions work on the row's own RuntimeConfig field.
struct Setting {
  absl::string_view name;        // kSetting...: the key of RuntimeConfig::sources
  absl::string_view env;         // "VGPU_ALLOW_GROWTH"
  absl::string_view flag;        // "--allow-growth"
  absl::string_view value_name;  // the flag's value in --help ("SPEC"); "BOOL" for booleans
  absl::string_view example;     // a valid value, for the empty-value error ("0:33,33")
  absl::string_view usage;       // the value as README and --help show it ("bfc|vmm|async")
  absl::string_view doc;         // one line (markdown), README's "meaning"
  bool is_bool = false;          // a boolean flag: `--flag` alone means true
  bool empty_allowed = false;    // "" is a value (VGPU_VISIBLE_DEVICES="": no GPUs)
  // Parses `text` into the field; InvalidArgument naming the bad part (the caller adds the
  // variable or the flag). Does not touch `sources`.
  std::function<absl::Status(absl::string_view text, RuntimeConfig& config)> parse;
  // Checks a flag's value at once where the environment's is checked later, by
  // ResolveLogicalDevices (a fraction outside (0, 1]); null when there is nothing to check.
  std::function<absl::Status(const RuntimeConfig& config)> check_flag;
  // The value as vgpu-info shows it ("all", "0.4", "unset", "512 MiB", "bfc", ...).
  std::function<std::string(const RuntimeConfig& config)> format;
  // Whether the field holds its default value (RuntimeConfig::SourceOf's "api" test).
  std::function<bool(const RuntimeConfig& config)> is_default;
  // Copies the field from `from` to `to`.
  std::function<void(const RuntimeConfig& from, RuntimeConfig& to)> copy;
};

// Every setting, in display order (vgpu-info, README).
const std::vector<Setting>& SettingsTable();
// The row named `name` (kSetting...), or nullptr.
const Setting* FindSetting(absl::string_view name);

// Shorthands over the table, for callers that only need one column.
// All the names, in display order.
const std::vector<absl::string_view>& AllSettings();
// The environment variable of a setting ("VGPU_ALLOW_GROWTH"), "" for unknown names.
absl::string_view SettingEnvVar(absl::string_view setting);
// The value of a setting as text, for vgpu-info ("all", "0:1073741824,1073741824", "0.4",
// "unset", "true", "512 MiB", "bfc", ...); "" for unknown names.
std::string FormatSetting(const RuntimeConfig& config, absl::string_view setting);

// README.md's settings table (markdown, one row per setting: variable, flag, meaning), as
// `vgpu-info --settings-table` prints it.
std::string SettingsMarkdownTable();

}  // namespace vgpu

#endif  // VGPU_DEVICES_SETTINGS_H_
