#include "vgpu/devices/settings.h"

#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/devices/config.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace {

// The columns of a row that are text.
struct Text {
  absl::string_view name, env, flag, value_name, example, usage, doc;
};

// A row for the field `field` of RuntimeConfig: `parse` turns text into the field's value
// (absl::StatusOr<U>, U assignable to T), `format` the field into text. The rest of the row's
// functions follow from the field.
template <typename T, typename Parse, typename Format>
Setting Row(const Text& t, T RuntimeConfig::*field, Parse parse, Format format) {
  Setting s;
  s.name = t.name;
  s.env = t.env;
  s.flag = t.flag;
  s.value_name = t.value_name;
  s.example = t.example;
  s.usage = t.usage;
  s.doc = t.doc;
  s.is_bool = std::is_same_v<T, bool>;
  s.parse = [field, parse](absl::string_view text, RuntimeConfig& c) -> absl::Status {
    VGPU_ASSIGN_OR_RETURN(c.*field, parse(text));
    return absl::OkStatus();
  };
  s.format = [field, format](const RuntimeConfig& c) -> std::string { return format(c.*field); };
  s.is_default = [field](const RuntimeConfig& c) {
    static const RuntimeConfig* defaults = new RuntimeConfig();
    return c.*field == defaults->*field;
  };
  s.copy = [field](const RuntimeConfig& from, RuntimeConfig& to) { to.*field = from.*field; };
  return s;
}

std::string FormatBool(bool b) { return b ? "true" : "false"; }

std::vector<Setting> MakeTable() {
  std::vector<Setting> rows;
  rows.push_back(
      Row({kSettingVisibleDevices, "VGPU_VISIBLE_DEVICES", "--visible-devices", "LIST", "0,1",
           "0,1", "physical devices used, in this order (default all; empty = none)"},
          &RuntimeConfig::visible_devices, ParseVisibleDevices,
          [](const std::optional<std::vector<int>>& v) {
            return v ? absl::StrJoin(*v, ",") : std::string("all");
          }));
  rows.back().empty_allowed = true;  // as CUDA_VISIBLE_DEVICES="": no GPUs
  rows.push_back(
      Row({kSettingLogicalDevices, "VGPU_LOGICAL_DEVICES", "--logical-devices", "SPEC",
           "0:1GiB,1GiB", "\"0:1GiB,1GiB@-1;1:40%,60%\"",
           "logical devices per physical device: `SIZE[@PRIORITY]`, sizes in "
           "B/KiB/MiB/GiB/KB/MB/GB or % of the card ([docs/devices.md](docs/devices.md))"},
          &RuntimeConfig::logical_devices, ParseLogicalDevices,
          [](const std::vector<PhysicalDeviceConfig>& v) {
            return v.empty() ? std::string("one per physical device") : FormatLogicalDevices(v);
          }));
  rows.push_back(Row(
      {kSettingMemoryFraction, "VGPU_MEMORY_FRACTION", "--memory-fraction", "F", "0.4", "0.4",
       "one logical device per physical device, limit = fraction of its total "
       "(not with `VGPU_LOGICAL_DEVICES`)"},
      &RuntimeConfig::memory_fraction, ParseMemoryFraction,
      [](const std::optional<double>& v) { return v ? absl::StrCat(*v) : std::string("unset"); }));
  rows.back().check_flag = [](const RuntimeConfig& c) -> absl::Status {
    const double f = c.memory_fraction.value_or(1);
    if (!(f > 0 && f <= 1)) return absl::InvalidArgumentError("must be in (0, 1]");
    return absl::OkStatus();
  };
  rows.push_back(
      Row({kSettingAllowGrowth, "VGPU_ALLOW_GROWTH", "--allow-growth", "BOOL", "true", "true",
           "take memory on demand up to each limit (default: the whole limit at "
           "start)"},
          &RuntimeConfig::allow_growth, ParseBool, FormatBool));
  rows.push_back(
      Row({kSettingReservedMemory, "VGPU_RESERVED_MEMORY", "--reserved-memory", "SIZE", "512MiB",
           "512MiB",
           "left free on every physical device (unset, a device given all its free memory keeps "
           "the platform's default free: on cuda max(512 MiB, 5% of the card), at most half of it, "
           "for the CUDA context, modules and libraries; 0 on host)"},
          &RuntimeConfig::reserved_memory, ParseReservedMemory,
          [](uint64_t v) { return FormatBytes(v); }));
  rows.push_back(
      Row({kSettingAllocator, "VGPU_ALLOCATOR", "--allocator", "KIND", "bfc", "bfc|vmm|async",
           "allocator of every logical GPU (default bfc; async: the driver's "
           "stream-ordered pool with our limit)"},
          &RuntimeConfig::allocator, ParseAllocatorKind,
          [](AllocatorKind k) { return std::string(AllocatorKindName(k)); }));
  rows.push_back(
      Row({kSettingSmPartition, "VGPU_SM_PARTITION", "--sm-partition", "SPEC", "0:33,33",
           "\"0:32,32,64\"",
           "SMs per logical device of a physical device (cuda green contexts; an error on host)"},
          &RuntimeConfig::sm_partitions, ParseSmPartitions,
          [](const std::vector<SmPartitionConfig>& v) {
            if (v.empty()) return std::string("none");
            std::vector<std::string> groups;
            for (const SmPartitionConfig& p : v) {
              groups.push_back(absl::StrCat(p.ordinal, ":", absl::StrJoin(p.sm_counts, ",")));
            }
            return absl::StrJoin(groups, ";");
          }));
  rows.push_back(
      Row({kSettingSoftPlacement, "VGPU_SOFT_PLACEMENT", "--soft-placement", "BOOL", "true", "true",
           "an unknown device falls back to another of its type, then CPU:0"},
          &RuntimeConfig::soft_placement, ParseBool, FormatBool));
  rows.push_back(Row({kSettingLogPlacement, "VGPU_LOG_PLACEMENT", "--log-placement", "BOOL", "true",
                      "true", "one line on stderr per placement decision"},
                     &RuntimeConfig::log_placement, ParseBool, FormatBool));
  return rows;
}

}  // namespace

absl::string_view ConfigSourceName(ConfigSource source) {
  switch (source) {
    case ConfigSource::kDefault:
      return "default";
    case ConfigSource::kEnvironment:
      return "environment";
    case ConfigSource::kFlag:
      return "flag";
    case ConfigSource::kApi:
      return "api";
  }
  return "unknown";
}

const std::vector<Setting>& SettingsTable() {
  static const auto* table = new std::vector<Setting>(MakeTable());
  return *table;
}

const Setting* FindSetting(absl::string_view name) {
  for (const Setting& s : SettingsTable()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const std::vector<absl::string_view>& AllSettings() {
  static const auto* names = [] {
    auto* v = new std::vector<absl::string_view>;
    for (const Setting& s : SettingsTable()) v->push_back(s.name);
    return v;
  }();
  return *names;
}

absl::string_view SettingEnvVar(absl::string_view setting) {
  const Setting* s = FindSetting(setting);
  return s == nullptr ? "" : s->env;
}

std::string FormatSetting(const RuntimeConfig& config, absl::string_view setting) {
  const Setting* s = FindSetting(setting);
  return s == nullptr ? "" : s->format(config);
}

std::string SettingsMarkdownTable() {
  std::string out = "| variable | flag | meaning |\n|---|---|---|\n";
  for (const Setting& s : SettingsTable()) {
    // A '|' inside a cell would end it.
    absl::StrAppend(&out, "| `", s.env, "=", absl::StrReplaceAll(s.usage, {{"|", "\\|"}}), "` | `",
                    s.flag, "` | ", s.doc, " |\n");
  }
  return out;
}

}  // namespace vgpu
