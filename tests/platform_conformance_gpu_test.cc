// The platform conformance suite on the cuda platform (label gpu). Every test skips when the
// machine has no GPU or driver.
#include "platform_conformance.h"

namespace vgpu {
namespace {

using ::vgpu::testing::PlatformConformance;
INSTANTIATE_TEST_SUITE_P(Cuda, PlatformConformance,
                         ::testing::Values(::vgpu::testing::PlatformFactory{
                             "cuda", [] {
                               auto p = GetPlatform("cuda");
                               return p.ok() ? *p : nullptr;
                             }}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace vgpu
