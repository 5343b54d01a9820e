// The "cuda" platform of a build without the CUDA toolkit (runtime/cuda/sources.cmake builds
// only this file then): 0 devices, and Summary() says why, so "cuda" means the same in every
// build and "auto" falls back to the next platform.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/platform_registry.h"

namespace vgpu::cuda {
namespace {

class UnavailableCudaPlatform : public Platform {
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

}  // namespace
}  // namespace vgpu::cuda

VGPU_REGISTER_PLATFORM(cuda, 100, [](const vgpu::SettingLookup&) {
  return absl::StatusOr<std::unique_ptr<vgpu::Platform>>(
      std::make_unique<vgpu::cuda::UnavailableCudaPlatform>());
})
