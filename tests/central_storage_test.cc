// CentralStorageStrategy: variables on CPU:0, compute on the GPUs, equal to one device.
#include "vgpu/strategies/central_storage.h"

#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/host/host_kernels.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/strategies/mirrored.h"
#include "vgpu/strategies/nn.h"
#include "vgpu/tests/testing_runtime.h"

namespace vgpu::strategies {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(CentralStorageTest, VariablesOnCpuAndEqualToOneDevice) {
  SetHostBlasThreads(1);
  HostPlatformOptions po;
  po.device_bytes = {256 * kMiB};
  auto platform = HostPlatform::Create(po);
  ASSERT_THAT(platform.status(), IsOk());
  auto set = testing::CreateTestingRuntime(platform->get(), 0, std::vector<uint64_t>(4, 16 * kMiB));
  ASSERT_THAT(set.status(), IsOk());
  StrategyOptions o;
  o.model = MakeMlp({20, 16, 12, 5});
  o.global_batch = 10;  // 3, 3, 2 over three replicas
  o.seed = 5;
  auto central = CentralStorageStrategy::Create(
      (*set)->cpu(), {(*set)->gpus()[0], (*set)->gpus()[1], (*set)->gpus()[2]}, o);
  auto single = MirroredStrategy::Create({(*set)->gpus()[3]}, o);
  ASSERT_THAT(central.status(), IsOk());
  ASSERT_THAT(single.status(), IsOk());
  // The optimizer state lives on CPU:0: its allocator holds params, grads, m, v and staging.
  const uint64_t param_bytes = o.model->TotalParams() * 4;
  EXPECT_GE((*set)->cpu()->allocator()->Stats().bytes_in_use, 4 * param_bytes);
  EXPECT_THAT((*central)->PlacementReport(),
              HasSubstr("variables and optimizer state on "
                        "/job:localhost/replica:0/task:0/device:CPU:0"));
  EXPECT_EQ((*central)->devices().back(), (*set)->cpu());

  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> x(10 * 20 * 12);
  std::vector<int32_t> y(10 * 12);
  for (float& v : x) v = u(rng);
  for (int32_t& v : y) v = static_cast<int32_t>(rng() % 5);
  for (int step = 0; step < 12; ++step) {
    const int rows = step == 11 ? 2 : 10;  // the last step leaves a replica idle
    ASSERT_THAT((*central)->Step(x.data() + step * 200, y.data() + step * 10, rows), IsOk());
    ASSERT_THAT((*single)->Step(x.data() + step * 200, y.data() + step * 10, rows), IsOk());
  }
  auto a = (*central)->Params();
  auto b = (*single)->Params();
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  for (size_t i = 0; i < a->size(); ++i) ASSERT_NEAR((*a)[i], (*b)[i], 2e-5) << i;
  auto ta = (*central)->Flush();
  ASSERT_THAT(ta.status(), IsOk());
  EXPECT_EQ(ta->examples, 11 * 10 + 2);
  auto tb = (*single)->Flush();
  EXPECT_NEAR(ta->mean_loss(), tb->mean_loss(), 1e-4);
  auto ea = (*central)->Evaluate(x.data(), y.data(), 120);
  auto eb = (*single)->Evaluate(x.data(), y.data(), 120);
  ASSERT_THAT(ea.status(), IsOk());
  EXPECT_NEAR(ea->mean_loss(), eb->mean_loss(), 1e-4);
}

TEST(CentralStorageTest, Errors) {
  HostPlatformOptions po;
  po.device_bytes = {64 * kMiB};
  auto platform = HostPlatform::Create(po);
  ASSERT_THAT(platform.status(), IsOk());
  auto set = testing::CreateTestingRuntime(platform->get(), 0, {8 * kMiB});
  ASSERT_THAT(set.status(), IsOk());
  StrategyOptions o;
  o.model = MakeMlp({4, 3});
  o.global_batch = 4;
  EXPECT_THAT(CentralStorageStrategy::Create(nullptr, (*set)->gpus(), o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("CPU:0")));
  EXPECT_THAT(CentralStorageStrategy::Create((*set)->cpu(), {}, o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no GPUs")));
  auto c = CentralStorageStrategy::Create((*set)->cpu(), (*set)->gpus(), o);
  ASSERT_THAT(c.status(), IsOk());
  std::vector<float> x(20);
  std::vector<int32_t> y(5);
  EXPECT_THAT((*c)->Step(x.data(), y.data(), 5), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace vgpu::strategies
