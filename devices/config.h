// The runtime's configuration: which physical devices are used, how each is split into
// logical devices (hard memory limits, stream priorities, SM partitions), the allocator and
// the placement behaviour. Filled by the API, read from the environment
// (RuntimeConfig::FromEnvironment) or from a tool's flags; each setting is one row of the
// table in settings.h (variable, flag, parser, doc), and the config records where each value
// came from. Checked and turned into concrete logical devices by ResolveLogicalDevices before
// anything is allocated. Grammars and errors: docs/devices.md; the list of variables: README.
//
// Thread safety: RuntimeConfig is a plain value; the functions here are pure (FromEnvironment
// reads the environment, which must not be modified concurrently).
#ifndef VGPU_DEVICES_CONFIG_H_
#define VGPU_DEVICES_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/devices/cluster.h"
#include "vgpu/devices/settings.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {

// Bounds of the grammars, so a hostile value is refused when parsed instead of building
// millions of devices or wrapping an int.
inline constexpr int kMaxPhysicalOrdinal = 1023;
inline constexpr size_t kMaxLogicalDevicesPerPhysicalDevice = 64;
inline constexpr int kMaxSmCount = 1 << 16;
inline constexpr int kMinStreamPriority = -1000;  // platforms clamp to their own range
inline constexpr int kMaxStreamPriority = 1000;
// The smallest logical device: one VMM granule of current NVIDIA GPUs and of the host
// platform (the platform's own granularity when larger), so every allocator kind can hold at
// least one block. Checked by ResolveLogicalDevices.
inline constexpr uint64_t kMinLogicalDeviceBytes = uint64_t{2} << 20;

// One logical device of a physical device: a limit in bytes or in percent of the card.
struct LogicalDeviceConfig {
  uint64_t memory_bytes = 0;             // used when memory_percent is unset
  std::optional<double> memory_percent;  // of the card's total memory, in (0, 100]
  int priority = 0;                      // stream priority: lower = higher, as CUDA
  bool priority_given = false;           // written by the user (SIZE@PRIORITY or the API)

  bool operator==(const LogicalDeviceConfig&) const = default;

  static LogicalDeviceConfig Bytes(uint64_t bytes, std::optional<int> priority = std::nullopt) {
    return {bytes, std::nullopt, priority.value_or(0), priority.has_value()};
  }
  static LogicalDeviceConfig Percent(double percent, std::optional<int> priority = std::nullopt) {
    return {0, percent, priority.value_or(0), priority.has_value()};
  }
};

struct PhysicalDeviceConfig {
  int ordinal = 0;
  std::vector<LogicalDeviceConfig> logical_devices;  // GPU ids in this order

  bool operator==(const PhysicalDeviceConfig&) const = default;
};

struct SmPartitionConfig {
  int ordinal = 0;
  std::vector<int> sm_counts;  // one per logical device of `ordinal`, in order

  bool operator==(const SmPartitionConfig&) const = default;
};

struct RuntimeConfig {
  // Physical ordinals used, in this order (logical GPU ids follow it); nullopt = all.
  std::optional<std::vector<int>> visible_devices;
  // Explicit logical devices; a visible physical device not listed gets one logical device
  // with all its free memory (less the reserve). Exclusive with memory_fraction.
  std::vector<PhysicalDeviceConfig> logical_devices;
  // One logical device per visible physical device with limit = fraction x total.
  std::optional<double> memory_fraction;
  bool allow_growth = false;
  // Left free on every card. While it is the default (SourceOf(kSettingReservedMemory) ==
  // kDefault), a device given all of its free memory keeps PhysicalDeviceInfo::
  // default_reserve free instead (cuda: max(512 MiB, 5% of the card), at most half of it):
  // room for the CUDA context, the kernels' module and the libraries' own state, which no
  // allocator sees. Set it (VGPU_RESERVED_MEMORY=0 included) to override.
  uint64_t reserved_memory = 0;
  AllocatorKind allocator = AllocatorKind::kBfc;
  std::vector<SmPartitionConfig> sm_partitions;
  bool soft_placement = false;
  bool log_placement = false;
  // The cluster this process is a task of (devices/cluster.h). API only: not a setting of the
  // table, never read from the environment or flags (FromEnvironment* leave it null; set it
  // afterwards). Null: a plain local run, devices named /job:localhost/replica:0/task:0/...
  // Set: this process's devices are named /job:<job>/replica:0/task:<index>/..., and Find,
  // FindAll and Place refuse the devices of the cluster's other tasks (Runtime, runtime.h).
  std::shared_ptr<const ClusterSpec> cluster;
  // API only, like `cluster`: a task that owns no GPU (a parameter server). No logical GPU is
  // built, whatever the GPU settings say; CPU:0 still takes the first visible physical device's
  // executor (0 when none is listed) for its memory and copies (pinned memory on cuda), so it
  // has a stream. A platform without devices gives CPU:0 without one, as always.
  bool cpu_only = false;

  // Setting name (kSetting..., settings.h) -> where its value came from. Settings absent
  // here count as "api" when they differ from the default and "default" otherwise (see
  // SourceOf), so API users need not fill this.
  std::map<std::string, ConfigSource, std::less<>> sources;
  ConfigSource SourceOf(absl::string_view setting) const;

  // Reads the VGPU_* variables (one per row of SettingsTable()); InvalidArgument naming the
  // variable and its value when one does not parse. Unset variables keep the defaults.
  static absl::StatusOr<RuntimeConfig> FromEnvironment();
  // The same with an injectable lookup (tests); `getenv` returns nullopt for unset variables.
  using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
  static absl::StatusOr<RuntimeConfig> FromEnvironment(const EnvLookup& getenv);
  // What a tool runs with: each setting that `flags` has from a flag (SourceOf == kFlag, as
  // FlagSet::RuntimeSettings records it) is taken from there, the others from the environment
  // as FromEnvironment reads them. The flags win; an environment value they override is not
  // read (so not refused either).
  static absl::StatusOr<RuntimeConfig> FromEnvironmentAndFlags(const RuntimeConfig& flags);
  static absl::StatusOr<RuntimeConfig> FromEnvironmentAndFlags(const RuntimeConfig& flags,
                                                               const EnvLookup& getenv);
};

// The grammars (each InvalidArgument naming the bad part; whitespace around items ignored).
// "0,1" -> {0, 1}; "" -> {} (no GPUs).
absl::StatusOr<std::vector<int>> ParseVisibleDevices(absl::string_view text);
// "0:1GiB,1GiB@-1;1:40%,60%": groups by ';', ORDINAL ':' then SIZE['@'PRIORITY] by ','.
absl::StatusOr<std::vector<PhysicalDeviceConfig>> ParseLogicalDevices(absl::string_view text);
// "0:33,33,66;1:64": groups by ';', ORDINAL ':' then SM counts by ','.
absl::StatusOr<std::vector<SmPartitionConfig>> ParseSmPartitions(absl::string_view text);
// A decimal number ("0.4"); the (0, 1] range is checked by ResolveLogicalDevices.
absl::StatusOr<double> ParseMemoryFraction(absl::string_view text);
// VGPU_RESERVED_MEMORY: bytes ("512MiB"); a percentage is refused (one reserve for all cards).
absl::StatusOr<uint64_t> ParseReservedMemory(absl::string_view text);
// true/false, 1/0, yes/no, on/off (case-insensitive).
absl::StatusOr<bool> ParseBool(absl::string_view text);
// Inverse of ParseLogicalDevices (for messages and vgpu-info).
std::string FormatLogicalDevices(absl::Span<const PhysicalDeviceConfig> devices);

// A logical GPU as the configuration defines it, limits in bytes.
struct ResolvedLogicalDevice {
  int gpu_id = 0;
  int physical_ordinal = 0;
  uint64_t memory_limit = 0;
  int priority = 0;
  int sm_count = 0;  // requested SMs (0 = whole device)
};

// Checks `config` against the platform's physical devices (`physical[i]` is ordinal i, fresh
// from Describe) and lists the logical GPUs in id order. Errors (nothing is allocated):
//   NotFound          visible or configured ordinal the platform does not have
//   InvalidArgument   duplicate ordinals; logical devices for a device not visible; fraction
//                     outside (0, 1]; fraction together with logical devices; a zero limit or
//                     a percentage outside (0, 100]; sum of limits + reserve over the card's
//                     total; reserve >= total; SM partitions that do not match the devices
//   ResourceExhausted growth off (memory taken at start) and limits + reserve over the
//                     card's free memory
absl::StatusOr<std::vector<ResolvedLogicalDevice>> ResolveLogicalDevices(
    const RuntimeConfig& config, absl::Span<const PhysicalDeviceInfo> physical);

}  // namespace vgpu

#endif  // VGPU_DEVICES_CONFIG_H_
