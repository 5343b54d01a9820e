// Model-parallel placement policies, the placement report, and layer-by-layer training across
// devices (equal to one device).
#include "vgpu/strategies/model_parallel.h"

#include <cmath>
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

class ModelParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetHostBlasThreads(1);
    HostPlatformOptions o;
    o.device_bytes = {256 * kMiB};
    auto p = HostPlatform::Create(o);
    ASSERT_THAT(p.status(), IsOk());
    platform_ = *std::move(p);
    auto set =
        testing::CreateTestingRuntime(platform_.get(), 0, std::vector<uint64_t>(4, 32 * kMiB));
    ASSERT_THAT(set.status(), IsOk());
    runtime_ = *std::move(set);
  }
  std::unique_ptr<HostPlatform> platform_;
  std::unique_ptr<Runtime> runtime_;
};

std::vector<int> DeviceIds(const std::vector<LayerPlacement>& p) {
  std::vector<int> out;
  for (const auto& l : p) out.push_back(l.device->id());
  return out;
}

TEST_F(ModelParallelTest, RoundRobinAndExplicit) {
  MlpSpec spec;
  spec.sizes = {8, 8, 8, 8, 8, 4};  // 5 layers over 4 devices
  OptimizerOptions opt;
  auto rr =
      PlaceLayers(Mlp(spec), runtime_->gpus(), {PlacementPolicy::kRoundRobin, {}}, 16, opt, 8);
  ASSERT_THAT(rr.status(), IsOk());
  EXPECT_THAT(DeviceIds(*rr), ::testing::ElementsAre(0, 1, 2, 3, 0));
  PlacementOptions ex{PlacementPolicy::kExplicit,
                      {"GPU:3", "/device:GPU:2", "/gpu:2",
                       "/job:localhost/replica:0/task:0/device:GPU:0", "gpu:1"}};
  auto e = PlaceLayers(Mlp(spec), runtime_->gpus(), ex, 16, opt, 8);
  ASSERT_THAT(e.status(), IsOk());
  EXPECT_THAT(DeviceIds(*e), ::testing::ElementsAre(3, 2, 2, 0, 1));
  ex.explicit_specs[4] = "GPU:9";
  EXPECT_THAT(PlaceLayers(Mlp(spec), runtime_->gpus(), ex, 16, opt, 8).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("layer 4 asks for 'GPU:9'")));
  ex.explicit_specs.pop_back();
  EXPECT_THAT(PlaceLayers(Mlp(spec), runtime_->gpus(), ex, 16, opt, 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("4 device specs")));
  EXPECT_TRUE(DeviceMatchesSpec(*runtime_->cpu(), "/cpu:0"));
  EXPECT_FALSE(DeviceMatchesSpec(*runtime_->gpus()[0], "CPU:0"));
}

TEST_F(ModelParallelTest, LeastLoadedBalancesParameterBytes) {
  MlpSpec spec;
  spec.sizes = {100, 100, 10, 10, 10};  // layer 0 is heavy: others share the rest
  OptimizerOptions opt;
  std::vector<LogicalDevice*> two = {runtime_->gpus()[0], runtime_->gpus()[1]};
  auto p = PlaceLayers(Mlp(spec), two, {PlacementPolicy::kLeastLoaded, {}}, 4, opt, 1);
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_THAT(DeviceIds(*p), ::testing::ElementsAre(0, 1, 1, 1));
}

TEST_F(ModelParallelTest, MemoryBalancedFillsInOrderAndFailsClearly) {
  MlpSpec spec;  // 784-256-256-10
  OptimizerOptions opt;
  // All of it fits GPU:0 (32 MiB): Accelerate-style filling keeps it there.
  auto p =
      PlaceLayers(Mlp(spec), runtime_->gpus(), {PlacementPolicy::kMemoryBalanced, {}}, 256, opt, 8);
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_THAT(DeviceIds(*p), ::testing::ElementsAre(0, 0, 0));
  // Small devices: layer 0 (~4.4 MiB with Adam state and activations) fills the first.
  auto small = testing::CreateTestingRuntime(platform_.get(), 0, {6 * kMiB, 6 * kMiB});
  ASSERT_THAT(small.status(), IsOk());
  auto q =
      PlaceLayers(Mlp(spec), (*small)->gpus(), {PlacementPolicy::kMemoryBalanced, {}}, 256, opt, 8);
  ASSERT_THAT(q.status(), IsOk());
  EXPECT_THAT(DeviceIds(*q), ::testing::ElementsAre(0, 1, 1));
  // Too small for layer 0 anywhere: ResourceExhausted naming the layer and the device.
  auto tiny = testing::CreateTestingRuntime(platform_.get(), 0, {2 * kMiB, 2 * kMiB});
  ASSERT_THAT(tiny.status(), IsOk());
  EXPECT_THAT(
      PlaceLayers(Mlp(spec), (*tiny)->gpus(), {PlacementPolicy::kMemoryBalanced, {}}, 256, opt, 8)
          .status(),
      StatusIs(absl::StatusCode::kResourceExhausted,
               ::testing::AllOf(HasSubstr("layer 0 (784x256)"), HasSubstr("device:GPU:1"),
                                HasSubstr("free: GPU:0 2 MiB, GPU:1 2 MiB"))));
  EXPECT_THAT(ParsePlacementPolicy("greedy").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("greedy")));
  EXPECT_THAT(ParsePlacementPolicy("Memory-Balanced"),
              ::vgpu::testing::IsOkAndHolds(PlacementPolicy::kMemoryBalanced));
}

// The placement's budget is the real one: on devices just big enough for its plan, the strategy
// it builds allocates every buffer and trains (the estimate does not undercount), the plan uses
// the second device, and nothing is left allocated afterwards.
TEST_F(ModelParallelTest, MemoryBalancedPlanFitsTheRealAllocations) {
  StrategyOptions o;  // the seed model, 784-256-256-10, batch 256, Adam
  o.model = MakeMlp();
  o.global_batch = 256;
  auto devices = testing::CreateTestingRuntime(platform_.get(), 0, {6 * kMiB, 6 * kMiB});
  ASSERT_THAT(devices.status(), IsOk());
  {
    auto mp = ModelParallelStrategy::Create((*devices)->gpus(), o,
                                            {PlacementPolicy::kMemoryBalanced, {}});
    ASSERT_THAT(mp.status(), IsOk());
    EXPECT_EQ((*mp)->num_stages(), 2);
    std::vector<float> x(256 * 784, 0.5f);
    std::vector<int32_t> y(256, 3);
    ASSERT_THAT((*mp)->Step(x.data(), y.data(), 256), IsOk());
    ASSERT_THAT((*mp)->Flush().status(), IsOk());
    for (LogicalDevice* d : (*devices)->gpus()) {
      EXPECT_LE(d->allocator()->Stats().bytes_in_use, d->memory_limit()) << d->name();
      EXPECT_GT(d->allocator()->Stats().bytes_in_use, 0u) << d->name();
    }
  }
  for (LogicalDevice* d : (*devices)->gpus()) {
    EXPECT_EQ(d->allocator()->Stats().bytes_in_use, 0u) << d->name();
  }
}

TEST_F(ModelParallelTest, TrainsLikeOneDevice) {
  StrategyOptions o;
  o.model = MakeMlp({20, 16, 12, 5});
  o.global_batch = 8;
  o.seed = 11;
  auto mp = ModelParallelStrategy::Create(runtime_->gpus(), o, {PlacementPolicy::kRoundRobin, {}});
  auto single = MirroredStrategy::Create({runtime_->gpus()[3]}, o);
  ASSERT_THAT(mp.status(), IsOk());
  ASSERT_THAT(single.status(), IsOk());
  EXPECT_EQ((*mp)->num_stages(), 3);
  EXPECT_EQ((*mp)->devices().size(), 3u);
  std::string report = (*mp)->PlacementReport();
  EXPECT_THAT(report, HasSubstr("layer 0 (20x16) -> /job:localhost/replica:0/task:0/device:GPU:0"));
  EXPECT_THAT(report, HasSubstr("layer 2 (12x5) -> /job:localhost/replica:0/task:0/device:GPU:2"));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> x(8 * 20 * 10);
  std::vector<int32_t> y(8 * 10);
  for (float& v : x) v = u(rng);
  for (int32_t& v : y) v = static_cast<int32_t>(rng() % 5);
  for (int step = 0; step < 10; ++step) {
    const int rows = step == 9 ? 5 : 8;  // a partial last batch
    ASSERT_THAT((*mp)->Step(x.data() + step * 160, y.data() + step * 8, rows), IsOk());
    ASSERT_THAT((*single)->Step(x.data() + step * 160, y.data() + step * 8, rows), IsOk());
  }
  auto a = (*mp)->Params();
  auto b = (*single)->Params();
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) ASSERT_NEAR((*a)[i], (*b)[i], 1e-5) << i;
  auto ta = (*mp)->Flush();
  auto tb = (*single)->Flush();
  ASSERT_THAT(ta.status(), IsOk());
  EXPECT_EQ(ta->examples, 77);
  EXPECT_NEAR(ta->mean_loss(), tb->mean_loss(), 1e-5);
  auto ea = (*mp)->Evaluate(x.data(), y.data(), 80);
  auto eb = (*single)->Evaluate(x.data(), y.data(), 80);
  ASSERT_THAT(ea.status(), IsOk());
  EXPECT_NEAR(ea->mean_loss(), eb->mean_loss(), 1e-5);
  EXPECT_NEAR(ea->correct, eb->correct, 1);  // float ties may flip one argmax
}

TEST_F(ModelParallelTest, ConsecutiveLayersOnOneDeviceShareAStage) {
  StrategyOptions o;
  o.model = MakeMlp({6, 5, 4, 3});
  o.global_batch = 4;
  PlacementOptions p{PlacementPolicy::kExplicit, {"GPU:1", "GPU:1", "GPU:0"}};
  auto mp = ModelParallelStrategy::Create(runtime_->gpus(), o, p);
  ASSERT_THAT(mp.status(), IsOk());
  EXPECT_EQ((*mp)->num_stages(), 2);
}

}  // namespace
}  // namespace vgpu::strategies
