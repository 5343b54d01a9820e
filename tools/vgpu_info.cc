// vgpu-info: what devices this machine has, as the runtime sees them.
//   vgpu-info [--platform host|cuda|auto] [--json]
// Exit status: 0 on success, 2 for a bad flag or configuration.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  absl::StatusOr<vgpu::Platform*> platform =
      platform_name.empty() || platform_name == "auto" ? vgpu::DefaultPlatform()
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
  return 0;
}
