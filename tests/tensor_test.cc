// Tensor: allocation from the device's allocator, copies host<->device and device<->device.
#include "vgpu/strategies/tensor.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/testing_runtime.h"

namespace vgpu::strategies {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;

class TensorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostPlatformOptions o;
    o.device_bytes = {64 * kMiB, 64 * kMiB};
    auto p = HostPlatform::Create(o);
    ASSERT_THAT(p.status(), IsOk());
    platform_ = *std::move(p);
    auto runtime = testing::CreateTestingRuntime(platform_.get(), 0, {4 * kMiB, 4 * kMiB});
    ASSERT_THAT(runtime.status(), IsOk());
    runtime_ = *std::move(runtime);
  }
  std::unique_ptr<HostPlatform> platform_;
  std::unique_ptr<Runtime> runtime_;
};

TEST_F(TensorTest, RoundTripAndShape) {
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  auto t = Tensor::FromHost(runtime_->gpus()[0], {2, 3}, v);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->num_elements(), 6);
  EXPECT_EQ(t->bytes(), 24u);
  EXPECT_EQ(t->device(), runtime_->gpus()[0]);
  EXPECT_THAT(t->DebugString(),
              HasSubstr("f32[2,3] on /job:localhost/replica:0/task:0/device:GPU:0"));
  EXPECT_THAT(*t->ToHost(), ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_GE(runtime_->gpus()[0]->allocator()->Stats().bytes_in_use, 24u);
}

TEST_F(TensorTest, CopyBetweenDevicesAndToCpu) {
  std::vector<float> v(1000);
  for (int i = 0; i < 1000; ++i) v[i] = i * 0.5f;
  auto a = Tensor::FromHost(runtime_->gpus()[0], {1000}, v);
  auto b = Tensor::Create(runtime_->gpus()[1], {10, 100});
  auto c = Tensor::Create(runtime_->cpu(), {1000});
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  ASSERT_THAT(c.status(), IsOk());
  ASSERT_THAT(b->CopyFrom(*a), IsOk());
  ASSERT_THAT(c->CopyFrom(*b), IsOk());
  EXPECT_EQ(*c->ToHost(), v);
  EXPECT_EQ(*b->ToHost(), v);
}

TEST_F(TensorTest, Errors) {
  EXPECT_THAT(Tensor::Create(runtime_->gpus()[0], {2, -1}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
  EXPECT_THAT(Tensor::Create(nullptr, {2}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  // Past the 4 MiB limit of GPU:0: ResourceExhausted naming the device.
  EXPECT_THAT(Tensor::Create(runtime_->gpus()[0], {2, 1024 * 1024}).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("GPU:0")));
  std::vector<float> three = {1, 2, 3};
  EXPECT_THAT(Tensor::FromHost(runtime_->gpus()[0], {4}, three).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3 values")));
  auto a = Tensor::Create(runtime_->gpus()[0], {4});
  auto b = Tensor::Create(runtime_->gpus()[1], {5});
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_THAT(b->CopyFrom(*a), StatusIs(absl::StatusCode::kInvalidArgument));
  float out[3];
  EXPECT_THAT(a->CopyToHost(out, sizeof(out)), StatusIs(absl::StatusCode::kInvalidArgument));
  // The failed calls left the allocator consistent: only a and b are live.
  EXPECT_EQ(runtime_->gpus()[0]->allocator()->Stats().num_allocs -
                runtime_->gpus()[0]->allocator()->Stats().num_frees,
            1u);
}

TEST_F(TensorTest, EmptyTensor) {
  auto t = Tensor::Create(runtime_->gpus()[0], {0, 5});
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->num_elements(), 0);
  EXPECT_THAT(t->ToHost(), ::vgpu::testing::IsOkAndHolds(::testing::IsEmpty()));
}

TEST_F(TensorTest, TestingRuntimeRejectsOversizedSlices) {
  EXPECT_THAT(testing::CreateTestingRuntime(platform_.get(), 0, {40 * kMiB, 40 * kMiB}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exceed its capacity")));
}

}  // namespace
}  // namespace vgpu::strategies
