// Task-aware device names (RuntimeConfig::cluster): a Runtime on the host platform named after
// its cluster task; Find, FindAll and Place with local, remote and unknown tasks; soft
// placement never falls back from a remote name to a local device; a local runtime unchanged.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/devices/cluster.h"
#include "vgpu/devices/device_name.h"
#include "vgpu/devices/runtime.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/strategies/model_parallel.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

class ClusterNamesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostPlatformOptions o;
    o.device_bytes = {8 * kGiB};
    auto p = HostPlatform::Create(o);
    ASSERT_THAT(p, IsOk());
    host_ = *std::move(p);
  }

  // Two logical GPUs on the host card, for rank `rank` of `size` (ps_tasks parameter servers).
  std::unique_ptr<Runtime> Make(std::shared_ptr<const ClusterSpec> cluster, bool soft = false) {
    RuntimeConfig c;
    c.logical_devices = {{0, {LogicalDeviceConfig::Bytes(kGiB), LogicalDeviceConfig::Bytes(kGiB)}}};
    c.allow_growth = true;
    c.soft_placement = soft;
    c.log_placement = true;
    c.cluster = std::move(cluster);
    auto rt = Runtime::Create(c, host_.get());
    EXPECT_THAT(rt, IsOk());
    if (!rt.ok()) return nullptr;
    (*rt)->SetPlacementLogSink([this](absl::string_view line) { lines_.emplace_back(line); });
    return *std::move(rt);
  }

  static std::shared_ptr<const ClusterSpec> Cluster(int rank, int size, int ps_tasks = 0,
                                                    std::optional<std::string> tf = {}) {
    mpi::LaunchInfo l;
    l.under_launcher = true;
    l.rank = rank;
    l.size = size;
    auto c = ClusterSpec::Create(l, tf, ps_tasks);
    EXPECT_THAT(c, IsOk());
    return std::make_shared<const ClusterSpec>(c.ok() ? *std::move(c) : ClusterSpec::Local());
  }

  static std::vector<std::string> Names(const Runtime& rt) {
    std::vector<std::string> out;
    for (const LogicalDevice* d : rt.devices()) out.push_back(d->name());
    return out;
  }

  std::unique_ptr<HostPlatform> host_;
  std::vector<std::string> lines_;
};

TEST_F(ClusterNamesTest, DevicesAreNamedAfterTheTask) {
  auto w1 = Make(Cluster(1, 3));
  ASSERT_NE(w1, nullptr);
  EXPECT_THAT(Names(*w1), ElementsAre("/job:worker/replica:0/task:1/device:GPU:0",
                                      "/job:worker/replica:0/task:1/device:GPU:1",
                                      "/job:worker/replica:0/task:1/device:CPU:0"));
  EXPECT_EQ(w1->task_prefix(), "/job:worker/replica:0/task:1");
  ASSERT_NE(w1->cluster(), nullptr);
  EXPECT_EQ(w1->cluster()->self(), (TaskId{"worker", 1}));

  auto ps = Make(Cluster(2, 3, /*ps_tasks=*/1));
  ASSERT_NE(ps, nullptr);
  EXPECT_THAT(Names(*ps), ElementsAre("/job:ps/replica:0/task:0/device:GPU:0",
                                      "/job:ps/replica:0/task:0/device:GPU:1",
                                      "/job:ps/replica:0/task:0/device:CPU:0"));
  EXPECT_EQ(DeviceName::ForTask("ps", 0, "GPU", 1).ToString(), ps->gpus()[1]->name());
}

TEST_F(ClusterNamesTest, LocalRuntimeIsUnchanged) {
  auto rt = Make(nullptr);
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->cluster(), nullptr);
  EXPECT_EQ(rt->task_prefix(), "/job:localhost/replica:0/task:0");
  EXPECT_THAT(Names(*rt), ElementsAre("/job:localhost/replica:0/task:0/device:GPU:0",
                                      "/job:localhost/replica:0/task:0/device:GPU:1",
                                      "/job:localhost/replica:0/task:0/device:CPU:0"));
  auto d = rt->Find("/job:localhost/replica:0/task:0/device:GPU:1");
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(*d, rt->gpus()[1]);
  // Other jobs are simply not found, as before.
  EXPECT_THAT(rt->Find("/job:worker/task:1/device:GPU:0"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no device matches")));
  // ClusterSpec::Local() names the devices the same way.
  auto local = Make(std::make_shared<const ClusterSpec>(ClusterSpec::Local()));
  ASSERT_NE(local, nullptr);
  EXPECT_EQ(Names(*local), Names(*rt));
  EXPECT_THAT(local->Find("/job:localhost/device:CPU:0"), IsOk());
}

TEST_F(ClusterNamesTest, FindLocalSpecs) {
  auto rt = Make(Cluster(0, 2));
  ASSERT_NE(rt, nullptr);
  for (const char* spec :
       {"/job:worker/replica:0/task:0/device:GPU:1", "/job:worker/device:GPU:1",
        "/task:0/device:GPU:1", "GPU:1", "/device:GPU:1", "/gpu:1", "/job:*/task:0/device:GPU:1"}) {
    auto d = rt->Find(spec);
    ASSERT_THAT(d, IsOk()) << spec;
    EXPECT_EQ(*d, rt->gpus()[1]) << spec;
  }
  auto cpu = rt->Find("/job:worker/task:0/device:CPU:0");
  ASSERT_THAT(cpu, IsOk());
  EXPECT_EQ(*cpu, rt->cpu());
  auto all = rt->FindAll("/job:worker/task:0");
  ASSERT_THAT(all, IsOk());
  EXPECT_EQ(all->size(), 3u);
  // Our task but no such device: NotFound listing the devices, as in a local run.
  EXPECT_THAT(rt->Find("/job:worker/task:0/device:GPU:7"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("no device matches"),
                             HasSubstr("/job:worker/replica:0/task:0/device:GPU:0"))));
}

TEST_F(ClusterNamesTest, RemoteTaskIsFailedPreconditionNeverALocalDevice) {
  auto rt = Make(Cluster(0, 3, /*ps_tasks=*/1));
  ASSERT_NE(rt, nullptr);
  EXPECT_THAT(rt->Find("/job:worker/task:1/device:GPU:0"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("\"/job:worker/task:1/device:GPU:0\" is a device of remote "
                                       "task /job:worker/task:1 (rank 1)"),
                             HasSubstr("this process is /job:worker/task:0"),
                             HasSubstr("remote devices are reached through collectives, not "
                                       "handed out as local"))));
  EXPECT_THAT(rt->Find("/job:ps/task:0/device:CPU:0"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("remote task /job:ps/task:0 (rank 2)")));
  // A job alone that is only remote; a task alone that is only remote.
  EXPECT_THAT(rt->Find("/job:ps"), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(rt->Find("/task:1/device:GPU:0"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("/job:worker/task:1")));
  EXPECT_THAT(rt->FindAll("/job:worker/replica:0/task:1/device:GPU:0"),
              StatusIs(absl::StatusCode::kFailedPrecondition));

  // On the ps task, a worker's device is remote.
  auto ps = Make(Cluster(2, 3, 1));
  ASSERT_NE(ps, nullptr);
  EXPECT_THAT(ps->Find("/job:worker/task:0/device:GPU:0"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("remote task /job:worker/task:0 (rank 0)"),
                             HasSubstr("this process is /job:ps/task:0"))));
  EXPECT_THAT(ps->Find("/job:ps/task:0/device:GPU:0"), IsOk());
}

TEST_F(ClusterNamesTest, UnknownTaskIsNotFoundListingTheTasks) {
  auto rt = Make(Cluster(0, 3, /*ps_tasks=*/1));
  ASSERT_NE(rt, nullptr);
  const auto tasks =
      AllOf(HasSubstr("names no task of this cluster; its tasks: "
                      "/job:worker/task:0 (this process), /job:worker/task:1, "
                      "/job:ps/task:0"));
  EXPECT_THAT(rt->Find("/job:worker/task:2/device:GPU:0"),
              StatusIs(absl::StatusCode::kNotFound, tasks));
  EXPECT_THAT(rt->Find("/job:chief/task:0/device:GPU:0"),
              StatusIs(absl::StatusCode::kNotFound, tasks));
  EXPECT_THAT(rt->FindAll("/job:evaluator"), StatusIs(absl::StatusCode::kNotFound, tasks));
  EXPECT_THAT(rt->Find("/job:localhost/replica:0/task:0/device:GPU:0"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(tasks, HasSubstr("/job:localhost names the devices of a plain local "
                                              "run, this process's are "
                                              "/job:worker/replica:0/task:0/device:..."))));
  // A bad name is still InvalidArgument.
  EXPECT_THAT(rt->Find("/job:Worker/task:0"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ClusterNamesTest, LongTaskListsAreBounded) {
  auto rt = Make(Cluster(0, 20));
  ASSERT_NE(rt, nullptr);
  EXPECT_THAT(rt->Find("/job:ps/task:0"), StatusIs(absl::StatusCode::kNotFound,
                                                   HasSubstr("/job:worker/task:7, ... (12 more)")));
}

TEST_F(ClusterNamesTest, PlaceNeverFallsBackFromARemoteName) {
  auto rt = Make(Cluster(0, 2), /*soft=*/true);
  ASSERT_NE(rt, nullptr);
  EXPECT_THAT(rt->Place("/job:worker/task:1/device:GPU:0", {.what = "dense/kernel"}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("cannot place dense/kernel on "
                                       "\"/job:worker/task:1/device:GPU:0\" is a device of remote "
                                       "task /job:worker/task:1 (rank 1)"),
                             HasSubstr("not handed out as local"))));
  EXPECT_THAT(rt->Place("/job:worker/task:1/device:GPU:9"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(rt->Place("/job:ps/task:0/device:CPU:0"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(lines_.empty());  // no decision, no line

  // Our own task still gets soft placement.
  auto d = rt->Place("/job:worker/task:0/device:GPU:7", {.what = "op"});
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(*d, rt->gpus()[0]);
  EXPECT_THAT(lines_, ElementsAre("op -> /job:worker/replica:0/task:0/device:GPU:0 "
                                  "(requested /job:worker/task:0/device:GPU:7, soft)"));
  auto any = rt->Place("GPU:1");
  ASSERT_THAT(any, IsOk());
  EXPECT_EQ(*any, rt->gpus()[1]);
}

TEST_F(ClusterNamesTest, PlaceStrictRemoteIsFailedPrecondition) {
  auto rt = Make(Cluster(1, 2), /*soft=*/false);
  ASSERT_NE(rt, nullptr);
  EXPECT_THAT(rt->Place("/job:worker/task:0/device:GPU:0"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("this process is /job:worker/task:1 (rank 1)")));
  EXPECT_THAT(rt->Place("/job:worker/task:1/device:GPU:0"), IsOk());
}

TEST_F(ClusterNamesTest, TfConfigChiefNames) {
  auto rt = Make(Cluster(0, 3, 0, R"({"cluster": {"chief": ["c:1"], "worker": ["a:1", "b:1"]}})"));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->gpus()[0]->name(), "/job:chief/replica:0/task:0/device:GPU:0");
  EXPECT_THAT(rt->Find("/job:worker/task:0/device:GPU:0"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("(rank 1)")));
}

TEST_F(ClusterNamesTest, ModelParallelSpecsUseTheTaskPrefix) {
  auto rt = Make(Cluster(1, 2));
  ASSERT_NE(rt, nullptr);
  const LogicalDevice& gpu1 = *rt->gpus()[1];
  EXPECT_TRUE(strategies::DeviceMatchesSpec(gpu1, "/job:worker/replica:0/task:1/device:GPU:1"));
  EXPECT_TRUE(strategies::DeviceMatchesSpec(gpu1, "GPU:1"));
  EXPECT_TRUE(strategies::DeviceMatchesSpec(gpu1, "/gpu:1"));
  EXPECT_FALSE(strategies::DeviceMatchesSpec(gpu1, "/job:worker/replica:0/task:0/device:GPU:1"));
  EXPECT_FALSE(strategies::DeviceMatchesSpec(gpu1, "/job:localhost/replica:0/task:0/device:GPU:1"));
  EXPECT_TRUE(
      strategies::DeviceMatchesSpec(*rt->cpu(), "/job:worker/replica:0/task:1/device:CPU:0"));
  EXPECT_THAT(rt->gpus()[0]->name(), Not(HasSubstr("localhost")));
}

}  // namespace
}  // namespace vgpu
