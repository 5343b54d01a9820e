// Fuzzes the runtime-configuration grammars (every row of the settings table) and validation
// against two fixed cards: never crashes; accepted logical-device lists format and parse back to
// the same limits; validation either fails with a message or yields devices within each card's
// capacity.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "vgpu/devices/config.h"
#include "vgpu/devices/settings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  // Every setting of the table (devices/settings.h) parses the text as its variable's or its
  // flag's value: a refusal says something; an accepted value formats and is read back the
  // same from the environment.
  for (const vgpu::Setting& s : vgpu::SettingsTable()) {
    vgpu::RuntimeConfig c;
    absl::Status st = s.parse(text, c);
    if (!st.ok()) {
      if (st.message().empty()) std::abort();
      continue;
    }
    const std::string shown = s.format(c);
    absl::StatusOr<vgpu::RuntimeConfig> env =
        vgpu::RuntimeConfig::FromEnvironment([&](const char* name) -> std::optional<std::string> {
          if (name == s.env) return text;
          return std::nullopt;
        });
    if (env.ok() &&
        (s.format(*env) != shown || env->SourceOf(s.name) != vgpu::ConfigSource::kEnvironment)) {
      std::abort();
    }
  }
  absl::StatusOr<std::vector<vgpu::PhysicalDeviceConfig>> d = vgpu::ParseLogicalDevices(text);
  if (!d.ok()) {
    if (d.status().message().empty()) std::abort();
    return 0;
  }
  absl::StatusOr<std::vector<vgpu::PhysicalDeviceConfig>> again =
      vgpu::ParseLogicalDevices(vgpu::FormatLogicalDevices(*d));
  if (!again.ok() || again->size() != d->size()) std::abort();
  for (size_t i = 0; i < d->size(); ++i) {
    const auto& a = (*d)[i].logical_devices;
    const auto& b = (*again)[i].logical_devices;
    if (a.size() != b.size()) std::abort();
    for (size_t j = 0; j < a.size(); ++j) {
      if (a[j].priority != b[j].priority ||
          a[j].memory_percent.has_value() != b[j].memory_percent.has_value()) {
        std::abort();
      }
      if (!a[j].memory_percent && a[j].memory_bytes != b[j].memory_bytes) std::abort();
    }
  }
  std::vector<vgpu::PhysicalDeviceInfo> cards(2);
  for (int i = 0; i < 2; ++i) {
    cards[i].ordinal = i;
    cards[i].total_bytes = cards[i].free_bytes = uint64_t{8} << 30;
  }
  vgpu::RuntimeConfig c;
  c.logical_devices = *d;
  absl::StatusOr<std::vector<vgpu::ResolvedLogicalDevice>> r =
      vgpu::ResolveLogicalDevices(c, cards);
  if (!r.ok()) {
    if (r.status().message().empty()) std::abort();
    return 0;
  }
  uint64_t sum[2] = {0, 0};
  for (const auto& dev : *r) {
    if (dev.memory_limit == 0 || dev.physical_ordinal < 0 || dev.physical_ordinal > 1) std::abort();
    sum[dev.physical_ordinal] += dev.memory_limit;
    if (sum[dev.physical_ordinal] > cards[dev.physical_ordinal].total_bytes) std::abort();
  }
  return 0;
}
