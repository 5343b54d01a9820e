#include "vgpu/runtime/host/host_platform.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/host/host_collectives.h"
#include "vgpu/runtime/host/host_internal.h"
#include "vgpu/runtime/host/host_kernels.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/platform_registry.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {

absl::Status CheckHostDeviceSizes(absl::Span<const uint64_t> device_bytes) {
  if (device_bytes.empty()) return absl::InvalidArgumentError("host platform: no devices");
  if (device_bytes.size() > kHostMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat("host platform: ", device_bytes.size(),
                                                   " devices; at most ", kHostMaxDevices));
  }
  uint64_t total = 0;
  for (size_t i = 0; i < device_bytes.size(); ++i) {
    const uint64_t b = device_bytes[i];
    if (b < kHostVmmGranularity) {
      return absl::InvalidArgumentError(
          absl::StrCat("host device ", i, ": ", FormatBytes(b), "; a device needs at least 2 MiB"));
    }
    if (b > kHostMaxDeviceBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host device ", i, ": ", FormatBytes(b), " (", b, " bytes) is larger than ",
          FormatBytes(kHostMaxDeviceBytes),
          ", the most a simulated card may have: its memory and the vmm allocator's address "
          "ranges must fit in the process's address space (128 TiB on x86-64)"));
    }
    total += b;  // no overflow: at most 64 devices of at most 64 TiB
    if (total > kHostMaxTotalBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host devices 0..", i, " add up to ", FormatBytes(total), ", more than the ",
          FormatBytes(kHostMaxTotalBytes),
          " all simulated cards may have together (they share the process's address space)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> ParseHostDevices(absl::string_view spec) {
  auto bad = [&](absl::string_view part, absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("VGPU_HOST_DEVICES=", QuoteUserText(spec), ": bad part ", QuoteUserText(part),
                     ": ", why, " (expected e.g. \"2x16GiB\" or \"16GiB,8GiB\")"));
  };
  std::vector<uint64_t> out;
  absl::string_view text = StripUserValue(spec);
  if (text.empty()) return bad(spec, "empty");
  uint64_t total = 0;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) return bad(part, "empty entry");
    uint64_t count = 1;
    absl::string_view size = part;
    size_t x = part.find_first_of("xX");
    if (x != absl::string_view::npos) {
      absl::string_view n = absl::StripAsciiWhitespace(part.substr(0, x));
      absl::StatusOr<uint64_t> c = ParseUint64(n);
      if (n.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(n[0])) || !c.ok() ||
          *c == 0 || *c > kHostMaxDevices) {
        return bad(part, absl::StrCat("count before 'x' must be 1..", kHostMaxDevices));
      }
      count = *c;
      size = part.substr(x + 1);
    }
    absl::StatusOr<uint64_t> bytes = ParseBytes(size);
    if (!bytes.ok()) return bad(part, bytes.status().message());
    if (*bytes < kHostVmmGranularity) return bad(part, "a device needs at least 2 MiB");
    if (*bytes > kHostMaxDeviceBytes) {
      return bad(
          part, absl::StrCat("a simulated card may have at most ", FormatBytes(kHostMaxDeviceBytes),
                             " (it and the vmm allocator's address ranges must fit in the "
                             "process's address space, 128 TiB on x86-64)"));
    }
    if (out.size() + count > kHostMaxDevices) {
      return bad(part, absl::StrCat("more than ", kHostMaxDevices, " devices"));
    }
    for (uint64_t i = 0; i < count; ++i) out.push_back(*bytes);
    total += count * *bytes;  // no overflow: at most 64 x 64 TiB
    if (total > kHostMaxTotalBytes) {
      return bad(part, absl::StrCat("the cards add up to ", FormatBytes(total), ", more than the ",
                                    FormatBytes(kHostMaxTotalBytes),
                                    " all simulated cards may have together"));
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<HostPlatform>> HostPlatform::Create(
    const HostPlatformOptions& options) {
  VGPU_RETURN_IF_ERROR(CheckHostDeviceSizes(options.device_bytes));
  std::unique_ptr<HostPlatform> p(new HostPlatform());
  for (size_t i = 0; i < options.device_bytes.size(); ++i) {
    p->executors_.push_back(host::CreateHostExecutor(p.get(), static_cast<int>(i),
                                                     options.device_bytes[i], &p->faults_));
  }
  return p;
}

HostPlatform::~HostPlatform() = default;

int HostPlatform::DeviceCount() const { return static_cast<int>(executors_.size()); }

std::string HostPlatform::Summary() const {
  std::vector<std::string> sizes;
  for (const auto& e : executors_) sizes.push_back(FormatBytes(e->Describe()->total_bytes));
  return absl::StrCat("host platform: ", executors_.size(), " simulated GPU(s) [",
                      absl::StrJoin(sizes, ", "), "] in host memory, VMM granularity ",
                      FormatBytes(kHostVmmGranularity));
}

absl::StatusOr<PhysicalDeviceInfo> HostPlatform::Describe(int ordinal) {
  VGPU_ASSIGN_OR_RETURN(Executor * e, GetExecutor(ordinal));
  return e->Describe();
}

absl::StatusOr<Executor*> HostPlatform::GetExecutor(int ordinal) {
  if (ordinal < 0 || ordinal >= DeviceCount()) {
    return absl::NotFoundError(absl::StrCat("host platform has no device ", ordinal, " (it has ",
                                            DeviceCount(), ", ordinals 0..", DeviceCount() - 1,
                                            ")"));
  }
  return executors_[ordinal].get();
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> HostPlatform::CreateCommunicator(
    absl::Span<Executor* const> executors) {
  return host::CreateHostCommunicator(executors);
}

void HostPlatform::SetBlasThreads(int threads) { SetHostBlasThreads(threads); }

absl::StatusOr<std::unique_ptr<HostPlatform>> CreateHostPlatform(const SettingLookup& settings) {
  HostPlatformOptions options;
  if (std::optional<std::string> devices = settings("VGPU_HOST_DEVICES"); devices.has_value()) {
    VGPU_ASSIGN_OR_RETURN(options.device_bytes, ParseHostDevices(*devices));
  }
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<HostPlatform> platform, HostPlatform::Create(options));
  if (std::optional<std::string> faults = settings(kHostFaultsEnv); faults.has_value()) {
    VGPU_ASSIGN_OR_RETURN(FaultInjector * injector, platform->GetFaultInjector());
    VGPU_RETURN_IF_ERROR(ApplyFaultSpec(*injector, kHostFaultsEnv, *faults));
  }
  return platform;
}

}  // namespace vgpu

VGPU_REGISTER_PLATFORM(host, 0, [](const vgpu::SettingLookup& settings) {
  return absl::StatusOr<std::unique_ptr<vgpu::Platform>>(vgpu::CreateHostPlatform(settings));
})
