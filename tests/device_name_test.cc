#include "vgpu/devices/device_name.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

DeviceName P(absl::string_view text) {
  absl::StatusOr<DeviceName> n = DeviceName::Parse(text);
  EXPECT_THAT(n, IsOk()) << text;
  return n.ok() ? *n : DeviceName();
}

TEST(DeviceNameTest, FullName) {
  DeviceName n = P("/job:localhost/replica:0/task:0/device:GPU:3");
  EXPECT_EQ(n.job, "localhost");
  EXPECT_EQ(n.replica, 0);
  EXPECT_EQ(n.task, 0);
  EXPECT_EQ(n.type, "GPU");
  EXPECT_EQ(n.id, 3);
  EXPECT_TRUE(n.IsFullySpecified());
  EXPECT_EQ(n.ToString(), "/job:localhost/replica:0/task:0/device:GPU:3");
  EXPECT_EQ(n, DeviceName::Local("GPU", 3));
}

TEST(DeviceNameTest, PartialForms) {
  DeviceName a = P("/device:GPU:3");
  EXPECT_FALSE(a.job.has_value());
  EXPECT_EQ(a.type, "GPU");
  EXPECT_EQ(a.id, 3);
  EXPECT_FALSE(a.IsFullySpecified());
  EXPECT_EQ(a.ToString(), "/device:GPU:3");

  EXPECT_EQ(P("GPU:3"), a);
  EXPECT_EQ(P("device:GPU:3"), a);

  DeviceName any_gpu = P("/device:GPU:*");
  EXPECT_EQ(any_gpu.type, "GPU");
  EXPECT_FALSE(any_gpu.id.has_value());
  EXPECT_EQ(any_gpu.ToString(), "/device:GPU:*");
  EXPECT_EQ(P("/device:GPU"), any_gpu);
  EXPECT_EQ(P("GPU"), any_gpu);
  EXPECT_EQ(P("GPU:*"), any_gpu);

  DeviceName job = P("/job:localhost");
  EXPECT_EQ(job.job, "localhost");
  EXPECT_FALSE(job.type.has_value());
  EXPECT_EQ(job.ToString(), "/job:localhost");

  DeviceName r = P("/replica:1/task:2");
  EXPECT_EQ(r.replica, 1);
  EXPECT_EQ(r.task, 2);
}

TEST(DeviceNameTest, EmptyAndSlashAreTheEmptySpec) {
  EXPECT_TRUE(P("").IsEmpty());
  EXPECT_TRUE(P("/").IsEmpty());
  EXPECT_EQ(DeviceName().ToString(), "/");
}

TEST(DeviceNameTest, LegacyFormsUpperCaseTheType) {
  EXPECT_EQ(P("/gpu:3"), P("/device:GPU:3"));
  EXPECT_EQ(P("/cpu:0"), P("/device:CPU:0"));
  EXPECT_EQ(P("/GPU:1").type, "GPU");
  EXPECT_EQ(P("gpu:2"), P("GPU:2"));
  EXPECT_EQ(P("/job:worker/replica:1/task:2/gpu:0").ToString(),
            "/job:worker/replica:1/task:2/device:GPU:0");
  DeviceName wild = P("/gpu:*");
  EXPECT_EQ(wild.type, "GPU");
  EXPECT_FALSE(wild.id.has_value());
}

TEST(DeviceNameTest, DeviceFormKeepsTheCase) {
  DeviceName n = P("/device:gpu:0");
  EXPECT_EQ(n.type, "gpu");
  EXPECT_FALSE(IsSpecification(n, DeviceName::Local("GPU", 0)));
  EXPECT_EQ(P("device:gpu:0").type, "gpu");
  // Other types keep their spelling everywhere.
  EXPECT_EQ(P("/device:TPU_SYSTEM:0").type, "TPU_SYSTEM");
}

TEST(DeviceNameTest, Wildcards) {
  DeviceName n = P("/job:*/replica:*/task:*/device:*:*");
  EXPECT_TRUE(n.IsEmpty());
  DeviceName id_only = P("/device:*:2");
  EXPECT_FALSE(id_only.type.has_value());
  EXPECT_EQ(id_only.id, 2);
  EXPECT_EQ(id_only.ToString(), "/device:*:2");
  EXPECT_EQ(P(id_only.ToString()), id_only);
}

TEST(DeviceNameTest, AnyOrderOfParts) {
  // TensorFlow's parser accepts the parts in any order; so do we.
  EXPECT_EQ(P("/device:GPU:1/job:localhost"), P("/job:localhost/device:GPU:1"));
}

TEST(DeviceNameTest, RoundTrips) {
  for (absl::string_view text : {"/job:localhost/replica:0/task:0/device:GPU:3", "/device:CPU:0",
                                 "/job:w_1", "/replica:7", "/task:0/device:GPU:*", "/device:*:4"}) {
    EXPECT_EQ(P(text).ToString(), text);
    EXPECT_EQ(P(P(text).ToString()), P(text));
  }
}

TEST(DeviceNameTest, ShortString) {
  EXPECT_EQ(P("/job:localhost/replica:0/task:0/device:GPU:3").ShortString(), "GPU:3");
  EXPECT_EQ(P("GPU").ShortString(), "GPU:*");
  EXPECT_EQ(P("/job:x").ShortString(), "*");
}

TEST(DeviceNameTest, RejectsMalformedNames) {
  for (absl::string_view bad : {"/job:",
                                "/job:Local",
                                "/job:1abc",
                                "/replica:",
                                "/replica:x",
                                "/replica:-1",
                                "/task:0x",
                                "/device:",
                                "/device:GPU:",
                                "/device:GPU:x",
                                "/device:GPU:-1",
                                "/device:3",
                                "/gpu",
                                "/gpu:",
                                "/gpu:a",
                                "/tpu:0",
                                "//device:GPU:0",
                                "GPU:3:4",
                                "/device:GPU:0/",
                                "/device:GPU:0 ",
                                " /device:GPU:0",
                                "/job:a/job:b",
                                "/device:GPU:0/gpu:1",
                                "/replica:0/replica:0",
                                "/device:GPU:99999999999",
                                "GPU:",
                                ":0",
                                "device:",
                                "/foo:1",
                                "/device:GPU:0junk",
                                "/job:localhost/"}) {
    EXPECT_THAT(DeviceName::Parse(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad device name")))
        << bad;
  }
}

TEST(DeviceNameTest, ErrorNamesTheOffendingPart) {
  EXPECT_THAT(DeviceName::Parse("/job:localhost/replica:x/task:0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("replica number or * at \"x/task:0\"")));
}

TEST(DeviceNameTest, IsSpecification) {
  DeviceName full = DeviceName::Local("GPU", 1);
  EXPECT_TRUE(IsSpecification(P(""), full));
  EXPECT_TRUE(IsSpecification(P("GPU:1"), full));
  EXPECT_TRUE(IsSpecification(P("/device:GPU:*"), full));
  EXPECT_TRUE(IsSpecification(P("/job:localhost"), full));
  EXPECT_TRUE(IsSpecification(full, full));
  EXPECT_FALSE(IsSpecification(P("GPU:0"), full));
  EXPECT_FALSE(IsSpecification(P("CPU:1"), full));
  EXPECT_FALSE(IsSpecification(P("/job:worker"), full));
  EXPECT_FALSE(IsSpecification(P("/replica:1"), full));
  // A more specific spec is not a specification of a less specific name.
  EXPECT_FALSE(IsSpecification(full, P("GPU:1")));
  EXPECT_TRUE(IsSpecification(P("GPU"), P("GPU:1")));
}

TEST(DeviceNameTest, IsCompleteSpecification) {
  EXPECT_TRUE(IsCompleteSpecification(P("GPU:1"), DeviceName::Local("GPU", 1)));
  EXPECT_FALSE(IsCompleteSpecification(P("GPU"), P("GPU:1")));
  EXPECT_FALSE(IsCompleteSpecification(P("GPU:2"), DeviceName::Local("GPU", 1)));
}

TEST(DeviceNameTest, Matches) {
  const std::string full = "/job:localhost/replica:0/task:0/device:GPU:3";
  EXPECT_TRUE(Matches("/gpu:3", full));
  EXPECT_TRUE(Matches("GPU:*", full));
  EXPECT_TRUE(Matches("/job:localhost/device:GPU:3", full));
  EXPECT_FALSE(Matches("/device:gpu:3", full));
  EXPECT_FALSE(Matches("GPU:2", full));
  EXPECT_FALSE(Matches("/job:", full));
  EXPECT_FALSE(Matches("GPU:3", "not a name"));
}

TEST(DeviceNameTest, MergeFillsUnsetFields) {
  DeviceName t = P("/device:GPU:1");
  EXPECT_THAT(MergeDeviceNames(&t, P("/job:localhost/replica:0/task:0")), IsOk());
  EXPECT_EQ(t, DeviceName::Local("GPU", 1));
  DeviceName u = P("/job:localhost");
  EXPECT_THAT(MergeDeviceNames(&u, P("GPU:2")), IsOk());
  EXPECT_EQ(u.ToString(), "/job:localhost/device:GPU:2");
  // Agreeing fields are fine.
  DeviceName v = P("GPU:2");
  EXPECT_THAT(MergeDeviceNames(&v, P("/gpu:2")), IsOk());
  EXPECT_EQ(v, P("GPU:2"));
}

TEST(DeviceNameTest, MergeConflictingIdWithoutSoftPlacementFails) {
  DeviceName t = P("GPU:1");
  EXPECT_THAT(MergeDeviceNames(&t, P("GPU:2")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("incompatible device ids")));
  EXPECT_EQ(t, P("GPU:1"));  // unchanged
  EXPECT_THAT(MergeDeviceNames(&t, P("CPU:1")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("incompatible device types")));
  EXPECT_EQ(t, P("GPU:1"));
}

TEST(DeviceNameTest, MergeConflictWithSoftPlacementClears) {
  DeviceName t = P("/job:localhost/device:GPU:1");
  EXPECT_THAT(MergeDeviceNames(&t, P("GPU:2"), /*allow_soft_placement=*/true), IsOk());
  EXPECT_EQ(t.type, "GPU");
  EXPECT_FALSE(t.id.has_value());
  EXPECT_EQ(t.job, "localhost");

  DeviceName u = P("/job:localhost/device:GPU:1");
  EXPECT_THAT(MergeDeviceNames(&u, P("CPU:0"), true), IsOk());
  EXPECT_FALSE(u.type.has_value());
  EXPECT_FALSE(u.id.has_value());
  EXPECT_EQ(u.job, "localhost");
}

TEST(DeviceNameTest, MergeJobReplicaTaskConflictsFailEvenWhenSoft) {
  for (auto [a, b] : {std::pair{"/job:a", "/job:b"}, std::pair{"/replica:0", "/replica:1"},
                      std::pair{"/task:0", "/task:1"}}) {
    DeviceName t = P(a);
    EXPECT_THAT(MergeDeviceNames(&t, P(b), true),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("incompatible")))
        << a << " " << b;
    EXPECT_EQ(t, P(a));
  }
}

}  // namespace
}  // namespace vgpu
