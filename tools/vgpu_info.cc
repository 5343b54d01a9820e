// vgpu-info: what devices this machine has, as the runtime sees them: the platform, its
// physical devices, and the logical devices the VGPU_* configuration makes of them (with
// where each setting came from).
//   vgpu-info [--platform host|cuda|auto] [--json]
// Exit status: 0 on success, 2 for a bad flag or configuration.
// The configuration is validated exactly as Runtime::Create does, but the devices are built
// with growth on, so looking at a machine never takes its memory.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "devices/config.h"
#include "devices/runtime.h"
#include "runtime/bytes.h"
#include "runtime/json.h"
#include "runtime/platform.h"

namespace {

int Usage(const char* why) {
  std::fprintf(stderr,
               "vgpu-info: %s\n"
               "usage: vgpu-info [--platform host|cuda|auto] [--json]\n"
               "  VGPU_PLATFORM=host VGPU_HOST_DEVICES=2x16GiB vgpu-info --json\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  std::string platform_name;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--platform" && i + 1 < argc) {
      platform_name = argv[++i];
    } else if (a.rfind("--platform=", 0) == 0) {
      platform_name = a.substr(11);
    } else if (a == "--help" || a == "-h") {
      Usage("show devices");
      return 0;
    } else {
      return Usage(absl::StrCat("unknown flag \"", a, "\"").c_str());
    }
  }
  absl::StatusOr<vgpu::Platform*> platform = platform_name.empty() || platform_name == "auto"
                                                 ? vgpu::DefaultPlatform()
                                                 : vgpu::GetPlatform(platform_name);
  if (!platform.ok()) {
    std::fprintf(stderr, "vgpu-info: %s\n", std::string(platform.status().message()).c_str());
    return 2;
  }
  vgpu::Platform* p = *platform;
  std::vector<vgpu::PhysicalDeviceInfo> infos;
  for (int i = 0; i < p->DeviceCount(); ++i) {
    absl::StatusOr<vgpu::PhysicalDeviceInfo> info = p->Describe(i);
    if (!info.ok()) {
      std::fprintf(stderr, "vgpu-info: device %d: %s\n", i, info.status().ToString().c_str());
      return 1;
    }
    infos.push_back(*info);
  }

  // Logical devices from the environment's configuration.
  absl::StatusOr<vgpu::RuntimeConfig> config = vgpu::RuntimeConfig::FromEnvironment();
  if (!config.ok()) {
    std::fprintf(stderr, "vgpu-info: bad configuration: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  if (absl::Status v = vgpu::ResolveLogicalDevices(*config, infos).status(); !v.ok()) {
    std::fprintf(stderr, "vgpu-info: bad configuration: %s\n", std::string(v.message()).c_str());
    return 2;
  }
  vgpu::RuntimeConfig probe = *config;
  probe.allow_growth = true;  // validated above; don't take the memory just to look
  for (absl::string_view setting : vgpu::AllSettings()) {
    probe.sources[std::string(setting)] = config->SourceOf(setting);
  }
  absl::StatusOr<std::unique_ptr<vgpu::Runtime>> runtime = vgpu::Runtime::Create(probe, p);
  if (!runtime.ok()) {
    std::fprintf(stderr, "vgpu-info: bad configuration: %s\n",
                 std::string(runtime.status().message()).c_str());
    return 2;
  }
  const vgpu::Runtime& rt = **runtime;
  auto src = [](vgpu::ConfigSource s) { return vgpu::ConfigSourceName(s); };
  if (json) {
    vgpu::JsonWriter w;
    w.BeginObject().Field("platform", p->name()).Field("summary", p->Summary());
    w.Key("physical_devices").BeginArray();
    for (const auto& d : infos) {
      w.BeginObject()
          .Field("ordinal", d.ordinal)
          .Field("name", d.name)
          .Field("uuid", d.uuid)
          .Field("pci_bus_id", d.pci_bus_id)
          .Field("compute_capability",
                 absl::StrCat(d.compute_capability_major, ".", d.compute_capability_minor))
          .Field("sm_count", d.sm_count)
          .Field("total_bytes", d.total_bytes)
          .Field("free_bytes", d.free_bytes)
          .Field("vmm_granularity", d.vmm_granularity)
          .EndObject();
    }
    w.EndArray();
    w.Key("logical_devices").BeginArray();
    for (const vgpu::LogicalDevice* d : rt.devices()) {
      const vgpu::LogicalDeviceInfo& i = d->info();
      vgpu::DeviceSettingSources so = rt.SourcesOf(*d);
      w.BeginObject()
          .Field("name", i.name)
          .Field("type", d->is_gpu() ? "GPU" : "CPU")
          .Field("id", i.id)
          .Field("physical_ordinal", i.physical_ordinal)
          .Field("memory_limit", i.memory_limit)
          .Field("priority", i.priority)
          .Field("sm_count", i.sm_count)
          .Field("allocator", i.allocator_kind)
          .Field("allow_growth", d->is_gpu() ? config->allow_growth : true);
      w.Key("sources")
          .BeginObject()
          .Field("memory_limit", src(so.memory_limit))
          .Field("priority", src(so.priority))
          .Field("allocator", src(so.allocator))
          .Field("allow_growth", src(so.allow_growth))
          .Field("sm_partition", src(so.sm_partition))
          .EndObject();
      w.EndObject();
    }
    w.EndArray();
    w.Key("settings").BeginArray();
    for (absl::string_view setting : vgpu::AllSettings()) {
      w.BeginObject()
          .Field("name", setting)
          .Field("env", vgpu::SettingEnvVar(setting))
          .Field("value", vgpu::FormatSetting(*config, setting))
          .Field("source", src(config->SourceOf(setting)))
          .EndObject();
    }
    w.EndArray().EndObject();
    std::printf("%s\n", w.str().c_str());
    return 0;
  }
  std::printf("Platform: %s\n  %s\n", p->name().c_str(), p->Summary().c_str());
  std::printf("Physical devices: %zu\n", infos.size());
  for (const auto& d : infos) {
    std::printf("  [%d] %s  uuid %s  bus %s  cc %d.%d  SMs %d  memory %s total, %s free\n",
                d.ordinal, d.name.c_str(), d.uuid.c_str(), d.pci_bus_id.c_str(),
                d.compute_capability_major, d.compute_capability_minor, d.sm_count,
                vgpu::FormatBytes(d.total_bytes).c_str(), vgpu::FormatBytes(d.free_bytes).c_str());
  }
  std::printf("Logical devices: %zu\n", rt.devices().size());
  for (const vgpu::LogicalDevice* d : rt.devices()) {
    const vgpu::LogicalDeviceInfo& i = d->info();
    vgpu::DeviceSettingSources so = rt.SourcesOf(*d);
    const std::string sms = i.sm_count > 0 ? absl::StrCat(i.sm_count) : "all";
    if (!d->is_gpu()) {
      std::printf("  %s  host memory  allocator %s\n", i.name.c_str(), i.allocator_kind.c_str());
      continue;
    }
    std::printf(
        "  %s  physical %d  limit %s (%s)  priority %d (%s)  SMs %s (%s)  allocator %s (%s)  "
        "growth %s (%s)\n",
        i.name.c_str(), i.physical_ordinal, vgpu::FormatBytes(i.memory_limit).c_str(),
        std::string(src(so.memory_limit)).c_str(), i.priority,
        std::string(src(so.priority)).c_str(), sms.c_str(),
        std::string(src(so.sm_partition)).c_str(), i.allocator_kind.c_str(),
        std::string(src(so.allocator)).c_str(), config->allow_growth ? "on" : "off",
        std::string(src(so.allow_growth)).c_str());
  }
  std::printf("Settings:\n");
  for (absl::string_view setting : vgpu::AllSettings()) {
    std::string env(vgpu::SettingEnvVar(setting));
    std::printf("  %-22s %-28s (%s)\n", env.c_str(), vgpu::FormatSetting(*config, setting).c_str(),
                std::string(src(config->SourceOf(setting))).c_str());
  }
  return 0;
}
