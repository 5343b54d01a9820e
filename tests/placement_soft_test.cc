// Runtime::Place: strict and soft placement, both directions, and placement logging.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "vgpu/devices/runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostPlatformOptions o;
    o.device_bytes = {8 * kGiB};
    auto p = HostPlatform::Create(o);
    ASSERT_THAT(p, IsOk());
    host_ = *std::move(p);
  }

  std::unique_ptr<Runtime> Make(bool soft, bool log) {
    RuntimeConfig c;
    c.logical_devices = {{0, {LogicalDeviceConfig::Bytes(kGiB), LogicalDeviceConfig::Bytes(kGiB)}}};
    c.allow_growth = true;
    c.soft_placement = soft;
    c.log_placement = log;
    auto rt = Runtime::Create(c, host_.get());
    EXPECT_THAT(rt, IsOk());
    if (!rt.ok()) return nullptr;
    (*rt)->SetPlacementLogSink([this](absl::string_view line) { lines_.emplace_back(line); });
    return *std::move(rt);
  }

  std::unique_ptr<HostPlatform> host_;
  std::vector<std::string> lines_;
};

TEST_F(PlacementTest, ExactMatchIsPlacedAndLogged) {
  auto rt = Make(/*soft=*/false, /*log=*/true);
  ASSERT_NE(rt, nullptr);
  auto d = rt->Place("GPU:1", {.what = "dense_1/kernel"});
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(*d, rt->gpus()[1]);
  EXPECT_THAT(lines_, ElementsAre("dense_1/kernel -> /job:localhost/replica:0/task:0/device:GPU:1 "
                                  "(requested GPU:1)"));
}

TEST_F(PlacementTest, StrictUnknownDeviceIsNotFoundListingDevices) {
  auto rt = Make(/*soft=*/false, /*log=*/true);
  ASSERT_NE(rt, nullptr);
  EXPECT_THAT(rt->Place("GPU:7", {.what = "matmul"}),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("matmul"), HasSubstr("\"GPU:7\""),
                             HasSubstr("/job:localhost/replica:0/task:0/device:GPU:1"),
                             HasSubstr("/job:localhost/replica:0/task:0/device:CPU:0"),
                             HasSubstr("VGPU_SOFT_PLACEMENT"))));
  EXPECT_THAT(rt->Place("/device:TPU:0"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(lines_.empty());  // no decision, no line
}

TEST_F(PlacementTest, SoftFallsBackToAnotherIdOfTheSameType) {
  auto rt = Make(/*soft=*/true, /*log=*/true);
  ASSERT_NE(rt, nullptr);
  auto d = rt->Place("GPU:7", {.what = "op"});
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(*d, rt->gpus()[0]);
  EXPECT_THAT(lines_, ElementsAre("op -> /job:localhost/replica:0/task:0/device:GPU:0 "
                                  "(requested GPU:7, soft)"));
  // Another job is not a local device either: soft placement keeps the type.
  auto w = rt->Place("/job:worker/replica:0/task:0/device:GPU:1");
  ASSERT_THAT(w, IsOk());
  EXPECT_TRUE((*w)->is_gpu());
}

TEST_F(PlacementTest, SoftFallsBackToCpuForAnUnknownType) {
  auto rt = Make(/*soft=*/true, /*log=*/true);
  ASSERT_NE(rt, nullptr);
  auto d = rt->Place("/device:TPU:0", {.what = "embedding"});
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(*d, rt->cpu());
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0],
            "embedding -> /job:localhost/replica:0/task:0/device:CPU:0 (requested "
            "/device:TPU:0, soft: no TPU device, fell back to CPU)");
  // "/device:gpu:0" keeps its lower-case type, so it is not a GPU: soft placement says so.
  auto g = rt->Place("/device:gpu:0");
  ASSERT_THAT(g, IsOk());
  EXPECT_EQ(*g, rt->cpu());
}

TEST_F(PlacementTest, GpuFallsBackToCpuWhenThereAreNoGpus) {
  RuntimeConfig c;
  c.visible_devices = std::vector<int>{};
  c.soft_placement = true;
  auto rt = Runtime::Create(c, host_.get());
  ASSERT_THAT(rt, IsOk());
  auto d = (*rt)->Place("GPU:0");
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(*d, (*rt)->cpu());
}

TEST_F(PlacementTest, PerCallOptionsOverrideTheConfig) {
  auto strict = Make(/*soft=*/false, /*log=*/false);
  ASSERT_NE(strict, nullptr);
  auto d = strict->Place("GPU:9", {.what = "x", .soft_placement = true, .log_placement = true});
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(*d, strict->gpus()[0]);
  EXPECT_THAT(lines_, ElementsAre(HasSubstr("(requested GPU:9, soft)")));
  lines_.clear();
  auto soft = Make(/*soft=*/true, /*log=*/false);
  ASSERT_NE(soft, nullptr);
  EXPECT_THAT(soft->Place("GPU:9", {.soft_placement = false}),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(soft->Place("GPU:1"), IsOk());
  EXPECT_TRUE(lines_.empty());  // logging off
}

TEST_F(PlacementTest, BadNamesAreInvalidEvenWhenSoft) {
  auto rt = Make(/*soft=*/true, /*log=*/true);
  ASSERT_NE(rt, nullptr);
  EXPECT_THAT(rt->Place("/gpu:"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad device name")));
  EXPECT_TRUE(lines_.empty());
}

TEST_F(PlacementTest, MergeThenPlace) {
  // A layer's spec merged with an op's spec, as TensorFlow's placer does: soft placement
  // clears the conflicting id and the runtime then picks a device of that type.
  auto rt = Make(/*soft=*/true, /*log=*/false);
  ASSERT_NE(rt, nullptr);
  auto spec = DeviceName::Parse("/job:localhost/device:GPU:1");
  ASSERT_THAT(spec, IsOk());
  ASSERT_THAT(MergeDeviceNames(&*spec, *DeviceName::Parse("GPU:0"), true), IsOk());
  auto d = rt->Place(spec->ToString());
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE((*d)->is_gpu());
}

TEST_F(PlacementTest, ConcurrentPlaceAndLog) {
  auto rt = Make(/*soft=*/true, /*log=*/true);
  ASSERT_NE(rt, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto d = rt->Place(absl::StrCat("GPU:", (t + i) % 3));
        EXPECT_THAT(d, IsOk());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(lines_.size(), 800u);
}

}  // namespace
}  // namespace vgpu
