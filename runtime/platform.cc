#include "vgpu/runtime/platform.h"

#include <cstdlib>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "vgpu/runtime/cuda/cuda_platform.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {
namespace {

#if !VGPU_HAVE_CUDA
// Stands in for the cuda platform in builds without the CUDA toolkit.
class NoCudaPlatform : public Platform {
 public:
  std::string name() const override { return "cuda"; }
  int DeviceCount() const override { return 0; }
  std::string Summary() const override {
    return "0 CUDA devices: vgpu was built without CUDA support (VGPU_WITH_CUDA=OFF or no "
           "toolkit at build time)";
  }
  absl::StatusOr<PhysicalDeviceInfo> Describe(int ordinal) override {
    return absl::NotFoundError(absl::StrCat("cuda device ", ordinal, ": ", Summary()));
  }
  absl::StatusOr<Executor*> GetExecutor(int ordinal) override {
    return absl::NotFoundError(absl::StrCat("cuda device ", ordinal, ": ", Summary()));
  }
};
#endif

absl::StatusOr<Platform*> HostPlatformSingleton() {
  static absl::StatusOr<Platform*>* result = [] {
    HostPlatformOptions options;
    if (const char* env = std::getenv("VGPU_HOST_DEVICES"); env != nullptr) {
      absl::StatusOr<std::vector<uint64_t>> devices = ParseHostDevices(env);
      if (!devices.ok()) return new absl::StatusOr<Platform*>(devices.status());
      options.device_bytes = *std::move(devices);
    }
    absl::StatusOr<std::unique_ptr<HostPlatform>> p = HostPlatform::Create(options);
    if (!p.ok()) return new absl::StatusOr<Platform*>(p.status());
    return new absl::StatusOr<Platform*>(p->release());
  }();
  return *result;
}

Platform* CudaPlatformSingleton() {
#if VGPU_HAVE_CUDA
  static Platform* p = CreateCudaPlatform().release();
#else
  static Platform* p = new NoCudaPlatform();
#endif
  return p;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MemoryPool>> Executor::CreateMemoryPool(
    const MemoryPoolOptions& /*options*/) {
  return absl::UnimplementedError(absl::StrCat("platform ", platform()->name(), " device ",
                                               ordinal(), " has no stream-ordered memory pools"));
}

absl::StatusOr<Platform*> GetPlatform(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(StripUserValue(name));
  if (lower == "host") return HostPlatformSingleton();
  if (lower == "cuda") return CudaPlatformSingleton();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown platform ", QuoteUserText(name), " (expected host, cuda or auto)"));
}

absl::StatusOr<Platform*> AutoPlatform() {
  Platform* cuda = CudaPlatformSingleton();
  if (cuda->DeviceCount() > 0) return cuda;
  return HostPlatformSingleton();
}

absl::StatusOr<Platform*> DefaultPlatform() {
  const char* env = std::getenv("VGPU_PLATFORM");
  std::string choice = env == nullptr ? "auto" : absl::AsciiStrToLower(StripUserValue(env));
  if (env != nullptr && choice.empty()) {
    // Empty is an error for every VGPU_* variable (docs/devices.md), not a silent default.
    return absl::InvalidArgumentError(absl::StrCat(
        "VGPU_PLATFORM=", QuoteUserText(env),
        ": empty value; unset VGPU_PLATFORM for the default (auto), or give a value, e.g. "
        "VGPU_PLATFORM=host"));
  }
  if (choice == "auto") return AutoPlatform();
  if (choice != "host" && choice != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("VGPU_PLATFORM=", QuoteUserText(env), ": expected auto, cuda or host"));
  }
  return GetPlatform(choice);
}

}  // namespace vgpu
