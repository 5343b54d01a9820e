// vgpu-info: what devices this machine has, as the runtime sees them: the platform, its
// physical devices, and the logical devices the VGPU_* configuration makes of them (with
// where each setting came from).
//   vgpu-info [flags] [--json] [--selftest [--memory-history FILE]]
//   vgpu-info timeline HISTORY.json --svg OUT.svg [--limit BYTES]
// Flags override the VGPU_* environment (see --help). Exit status: 0 on success, 1 when a
// selftest check fails, 2 for a bad flag or configuration.
// The configuration is validated exactly as Runtime::Create does, but the devices are built
// with growth on, so looking at a machine never takes its memory.
#include "vgpu/tools/vgpu_info.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "vgpu/devices/config.h"
#include "vgpu/devices/runtime.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/json.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/platform_registry.h"
#include "vgpu/tools/flags.h"
#include "vgpu/tools/info_flags.h"

namespace {

int Usage(const std::string& why) {
  std::fprintf(stderr, "vgpu-info: %s\n%s", why.c_str(), vgpu_info::InfoUsage());
  return vgpu::flags::kExitUsage;
}

// Runtime::Create failed on a configuration that validated: a device that failed at run time
// (a stream, a driver call, an injected fault) is a device error, exit 1; what the
// configuration asks and cannot have is a bad configuration, exit 2.
int CreateFailed(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kAborted:
      std::fprintf(stderr, "vgpu-info: device error: %s\n", std::string(s.message()).c_str());
      return 1;
    default:
      std::fprintf(stderr, "vgpu-info: bad configuration: %s\n", std::string(s.message()).c_str());
      return vgpu::flags::kExitUsage;
  }
}

// "same_physical", "peer" (the hardware is capable) or "none" for two logical GPUs.
std::string LinkKind(const vgpu::LogicalDevice& a, const vgpu::LogicalDevice& b) {
  if (a.info().physical_ordinal == b.info().physical_ordinal) return "same_physical";
  if (a.executor() != nullptr && b.executor() != nullptr &&
      a.executor()->CanAccessPeer(*b.executor()))
    return "peer";
  return "none";
}

// Peer access enabled both ways (on cuda: cuCtxEnablePeerAccess succeeded), not just capable.
bool PeerEnabled(const vgpu::LogicalDevice& a, const vgpu::LogicalDevice& b) {
  return a.executor() != nullptr && b.executor() != nullptr &&
         a.executor()->PeerAccessEnabled(*b.executor()) &&
         b.executor()->PeerAccessEnabled(*a.executor());
}

std::string ShortName(const vgpu::LogicalDevice& d) {
  size_t p = d.name().rfind("device:");
  return p == std::string::npos ? d.name() : d.name().substr(p + 7);
}

}  // namespace

int main(int argc, char** argv) {
  vgpu::flags::ExitFailsOnStdoutError("vgpu-info");
  vgpu::flags::ReportLibraryErrorsToStderr();
  if (argc > 1 && std::string(argv[1]) == "timeline") {
    return vgpu_info::TimelineMain(argc - 1, argv + 1);
  }
  absl::StatusOr<vgpu_info::InfoFlags> parsed =
      vgpu_info::ParseInfoFlags(vgpu::flags::Args(argc, argv));
  if (!parsed.ok()) return Usage(std::string(parsed.status().message()));
  if (parsed->help) {
    std::printf("%s", vgpu_info::InfoUsage());
    return 0;
  }
  if (parsed->settings_table) {
    std::printf("%s", vgpu::SettingsMarkdownTable().c_str());
    return 0;
  }
  const bool json = parsed->json;
  const bool selftest = parsed->selftest;
  const std::string& history_path = parsed->history_path;
  const std::string& platform_name = parsed->platform;
  // --platform wins over VGPU_PLATFORM; "auto" is VGPU_PLATFORM=auto's rule.
  absl::StatusOr<vgpu::Platform*> platform = platform_name.empty() ? vgpu::DefaultPlatform()
                                             : platform_name == "auto"
                                                 ? vgpu::AutoPlatform()
                                                 : vgpu::GetPlatform(platform_name);
  // --host-devices: the chosen platform is made afresh with the flag over the environment
  // (the process-wide one reads the environment, which a tool does not change).
  std::unique_ptr<vgpu::Platform> owned_platform;
  if (platform.ok() && parsed->host_devices) {
    const std::string host_devices = *parsed->host_devices;
    absl::StatusOr<std::unique_ptr<vgpu::Platform>> made = vgpu::CreatePlatform(
        (*platform)->name(), [&](absl::string_view name) -> std::optional<std::string> {
          if (name == "VGPU_HOST_DEVICES") return host_devices;
          return vgpu::ProcessEnvironment()(name);
        });
    if (made.ok()) {
      owned_platform = std::move(*made);
      platform = owned_platform.get();
    } else {
      platform = made.status();
    }
  }
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

  // Logical devices from the flags' and the environment's configuration (a flag wins).
  absl::StatusOr<vgpu::RuntimeConfig> config =
      vgpu::RuntimeConfig::FromEnvironmentAndFlags(parsed->settings);
  if (!config.ok()) {
    std::fprintf(stderr, "vgpu-info: bad configuration: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  if (absl::Status v = vgpu::ResolveLogicalDevices(*config, infos).status(); !v.ok()) {
    std::fprintf(stderr, "vgpu-info: bad configuration: %s\n", std::string(v.message()).c_str());
    return 2;
  }
  // Under mpirun each rank is a task of the cluster, its devices named after it.
  absl::StatusOr<vgpu_info::InfoCluster> cluster = vgpu_info::SetUpInfoCluster();
  if (!cluster.ok()) {
    std::fprintf(stderr, "vgpu-info: %s\n", std::string(cluster.status().message()).c_str());
    return cluster.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  config->cluster = cluster->spec;
  if (selftest) {
    // The real configuration (growth as configured): the check is of what applications get.
    absl::StatusOr<std::unique_ptr<vgpu::Runtime>> real = vgpu::Runtime::Create(*config, p);
    if (!real.ok()) return CreateFailed(real.status());
    return vgpu_info::RunSelftest(**real, history_path) == 0 ? 0 : 1;
  }
  vgpu::RuntimeConfig probe = *config;
  probe.allow_growth = true;  // validated above; don't take the memory just to look
  // The sources stay those of the configuration (growth is not the API's here).
  for (const vgpu::Setting& row : vgpu::SettingsTable()) {
    probe.sources[std::string(row.name)] = config->SourceOf(row.name);
  }
  absl::StatusOr<std::unique_ptr<vgpu::Runtime>> runtime = vgpu::Runtime::Create(probe, p);
  if (!runtime.ok()) return CreateFailed(runtime.status());
  const vgpu::Runtime& rt = **runtime;
  auto src = [](vgpu::ConfigSource s) { return vgpu::ConfigSourceName(s); };
  const std::vector<vgpu::LogicalDevice*>& gpus = rt.gpus();
  std::string report;
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
      vgpu::AllocatorStats st = d->allocator()->Stats();
      w.Field("bytes_in_use", st.bytes_in_use)
          .Field("bytes_reserved", st.bytes_reserved)
          .Field("peak_bytes_in_use", st.peak_bytes_in_use)
          .Field("runtime_overhead_bytes", i.runtime_overhead())
          .Field("blas_workspace_bytes", i.blas_workspace)
          .Field("collective_reserve_bytes", i.collective_reserve);
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
    for (const vgpu::Setting& row : vgpu::SettingsTable()) {
      w.BeginObject()
          .Field("name", row.name)
          .Field("env", row.env)
          .Field("value", row.format(*config))
          .Field("source", src(config->SourceOf(row.name)))
          .EndObject();
    }
    w.EndArray();
    w.Key("links").BeginArray();
    for (size_t a = 0; a < gpus.size(); ++a) {
      for (size_t b = a + 1; b < gpus.size(); ++b) {
        w.BeginObject()
            .Field("a", gpus[a]->name())
            .Field("b", gpus[b]->name())
            .Field("kind", LinkKind(*gpus[a], *gpus[b]))
            .Field("peer_capable", LinkKind(*gpus[a], *gpus[b]) == "peer")
            .Field("peer_enabled",
                   LinkKind(*gpus[a], *gpus[b]) == "peer" && PeerEnabled(*gpus[a], *gpus[b]))
            .EndObject();
      }
    }
    w.EndArray().EndObject();
    report = w.str();
  } else {
    absl::StrAppendFormat(&report, "Platform: %s\n  %s\n", p->name().c_str(), p->Summary().c_str());
    absl::StrAppendFormat(&report, "Physical devices: %zu\n", infos.size());
    for (const auto& d : infos) {
      absl::StrAppendFormat(
          &report, "  [%d] %s  uuid %s  bus %s  cc %d.%d  SMs %d  memory %s total, %s free\n",
          d.ordinal, d.name.c_str(), d.uuid.c_str(), d.pci_bus_id.c_str(),
          d.compute_capability_major, d.compute_capability_minor, d.sm_count,
          vgpu::FormatBytes(d.total_bytes).c_str(), vgpu::FormatBytes(d.free_bytes).c_str());
    }
    // GPUs and the CPU counted apart: "4 GPU(s) + CPU:0", never a total that reads as 5 GPUs.
    std::vector<std::string> cpus;
    for (const vgpu::LogicalDevice* d : rt.devices()) {
      if (!d->is_gpu()) cpus.push_back(ShortName(*d));
    }
    absl::StrAppendFormat(&report, "Logical devices: %zu GPU(s)%s%s\n", gpus.size(),
                          cpus.empty() ? "" : " + ", absl::StrJoin(cpus, " + ").c_str());
    for (const vgpu::LogicalDevice* d : rt.devices()) {
      const vgpu::LogicalDeviceInfo& i = d->info();
      vgpu::DeviceSettingSources so = rt.SourcesOf(*d);
      const std::string sms = i.sm_count > 0 ? absl::StrCat(i.sm_count) : "all";
      vgpu::AllocatorStats st = d->allocator()->Stats();
      if (!d->is_gpu()) {
        absl::StrAppendFormat(&report, "  %s  host memory  allocator %s\n", i.name.c_str(),
                              i.allocator_kind.c_str());
        continue;
      }
      absl::StrAppendFormat(
          &report,
          "  %s  physical %d  limit %s (%s)  priority %d (%s)  SMs %s (%s)  allocator %s (%s)  "
          "growth %s (%s)  in use %s  reserved %s  peak %s\n",
          i.name.c_str(), i.physical_ordinal, vgpu::FormatBytes(i.memory_limit).c_str(),
          std::string(src(so.memory_limit)).c_str(), i.priority,
          std::string(src(so.priority)).c_str(), sms.c_str(),
          std::string(src(so.sm_partition)).c_str(), i.allocator_kind.c_str(),
          std::string(src(so.allocator)).c_str(), config->allow_growth ? "on" : "off",
          std::string(src(so.allow_growth)).c_str(), vgpu::FormatBytes(st.bytes_in_use).c_str(),
          vgpu::FormatBytes(st.bytes_reserved).c_str(),
          vgpu::FormatBytes(st.peak_bytes_in_use).c_str());
      if (i.runtime_overhead() > 0) {
        // vgpu's own memory inside the limit: the BLAS workspace is in use in the allocator,
        // the NCCL buffers are kept out of its limit.
        absl::StrAppendFormat(
            &report, "      runtime overhead %s in the limit: BLAS workspace %s, NCCL buffers %s\n",
            vgpu::FormatBytes(i.runtime_overhead()).c_str(),
            vgpu::FormatBytes(i.blas_workspace).c_str(),
            vgpu::FormatBytes(i.collective_reserve).c_str());
      }
    }
    if (gpus.size() > 1) {
      // A matrix as `nvidia-smi topo -m`: SAME = same physical device, PEER = peer access
      // enabled, CAP = capable but not enabled (copies go through the host).
      absl::StrAppendFormat(
          &report,
          "Links (SAME = same physical device, PEER = peer access enabled, CAP = peer-capable but "
          "not enabled, NONE = via host):\n");
      absl::StrAppendFormat(&report, "  %-8s", "");
      for (const vgpu::LogicalDevice* b : gpus)
        absl::StrAppendFormat(&report, " %-8s", ShortName(*b).c_str());
      absl::StrAppendFormat(&report, "\n");
      for (const vgpu::LogicalDevice* a : gpus) {
        absl::StrAppendFormat(&report, "  %-8s", ShortName(*a).c_str());
        for (const vgpu::LogicalDevice* b : gpus) {
          std::string k = a == b ? "X" : LinkKind(*a, *b);
          if (k == "peer" && !PeerEnabled(*a, *b)) k = "CAP";
          k = k == "same_physical" ? "SAME" : k == "peer" ? "PEER" : k == "none" ? "NONE" : k;
          absl::StrAppendFormat(&report, " %-8s", k.c_str());
        }
        absl::StrAppendFormat(&report, "\n");
      }
    }
    absl::StrAppendFormat(&report, "Settings:\n");
    for (const vgpu::Setting& row : vgpu::SettingsTable()) {
      absl::StrAppendFormat(&report, "  %-22s %-28s (%s)\n", std::string(row.env).c_str(),
                            row.format(*config).c_str(),
                            std::string(src(config->SourceOf(row.name))).c_str());
    }
  }
  return vgpu_info::PrintReport(report, json, *cluster);
}