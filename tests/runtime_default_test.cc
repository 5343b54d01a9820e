// The process-wide default runtime: lazy creation from SetDefaultRuntimeConfig or the
// environment, and FailedPrecondition for configuration changes afterwards. One test: the
// default runtime is process state, so the order of these steps matters.
#include <cstdlib>

#include "vgpu/devices/runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

TEST(DefaultRuntimeTest, LazyCreationThenConfigurationIsFrozen) {
  setenv("VGPU_PLATFORM", "host", 1);
  setenv("VGPU_HOST_DEVICES", "1x8GiB", 1);
  // A bad environment is reported, and nothing is created, so it can still be fixed.
  setenv("VGPU_LOGICAL_DEVICES", "0:5GiB,5GiB", 1);
  EXPECT_THAT(DefaultRuntime(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("capacity of 8 GiB")));
  unsetenv("VGPU_LOGICAL_DEVICES");

  // The API config wins over the environment.
  setenv("VGPU_ALLOW_GROWTH", "not-a-bool", 1);
  RuntimeConfig c;
  c.logical_devices = {{0, {LogicalDeviceConfig::Bytes(kGiB), LogicalDeviceConfig::Bytes(kGiB)}}};
  c.allow_growth = true;
  ASSERT_THAT(SetDefaultRuntimeConfig(c), IsOk());
  ASSERT_THAT(SetDefaultRuntimeConfig(c), IsOk());  // still allowed: nothing exists yet

  absl::StatusOr<Runtime*> rt = DefaultRuntime();
  ASSERT_THAT(rt, IsOk());
  EXPECT_EQ((*rt)->gpus().size(), 2u);
  EXPECT_EQ((*rt)->platform()->name(), "host");
  EXPECT_EQ(*DefaultRuntime(), *rt);  // the same one every time

  EXPECT_THAT(SetDefaultRuntimeConfig(RuntimeConfig()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("cannot be modified after it has been initialized")));
  EXPECT_EQ((*DefaultRuntime())->gpus().size(), 2u);  // unchanged
  unsetenv("VGPU_ALLOW_GROWTH");
}

}  // namespace
}  // namespace vgpu
