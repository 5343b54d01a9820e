// devices::Runtime on the host platform: building logical devices, their names, limits,
// priorities, streams and allocators; Find; creation failures.
#include <memory>
#include <string>
#include <vector>

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

std::unique_ptr<HostPlatform> MakeHost(std::vector<uint64_t> bytes) {
  HostPlatformOptions o;
  o.device_bytes = std::move(bytes);
  absl::StatusOr<std::unique_ptr<HostPlatform>> p = HostPlatform::Create(o);
  EXPECT_THAT(p, IsOk());
  return p.ok() ? *std::move(p) : nullptr;
}

RuntimeConfig Logical(absl::string_view text) {
  RuntimeConfig c;
  auto d = ParseLogicalDevices(text);
  EXPECT_THAT(d, IsOk());
  if (d.ok()) c.logical_devices = *d;
  return c;
}

std::vector<std::string> Names(const std::vector<LogicalDevice*>& devices) {
  std::vector<std::string> out;
  for (const LogicalDevice* d : devices) out.push_back(d->name());
  return out;
}

// A priority's source is the setting only where the user wrote one ("@-1", "@0"); the others
// are the default, although the same setting gave every device its memory limit.
TEST(RuntimeTest, PrioritySourceOnlyWhereWritten) {
  auto host = MakeHost({8 * kGiB});
  RuntimeConfig c = Logical("0:1GiB,1GiB@-1,1GiB@0");
  c.sources[std::string(kSettingLogicalDevices)] = ConfigSource::kEnvironment;
  auto rt = Runtime::Create(c, host.get());
  ASSERT_THAT(rt, IsOk());
  const std::vector<LogicalDevice*>& g = (*rt)->gpus();
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ((*rt)->SourcesOf(*g[0]).memory_limit, ConfigSource::kEnvironment);
  EXPECT_EQ((*rt)->SourcesOf(*g[0]).priority, ConfigSource::kDefault);
  EXPECT_EQ((*rt)->SourcesOf(*g[1]).priority, ConfigSource::kEnvironment);
  EXPECT_EQ((*rt)->SourcesOf(*g[2]).priority, ConfigSource::kEnvironment);
  EXPECT_EQ(LogicalDeviceConfig::Bytes(kGiB).priority_given, false);
  EXPECT_EQ(LogicalDeviceConfig::Bytes(kGiB, 0).priority_given, true);
}

TEST(RuntimeTest, FourLogicalDevicesOnOneCard) {
  auto host = MakeHost({8 * kGiB});
  auto rt = Runtime::Create(Logical("0:1GiB,1GiB,1GiB@-2,1GiB"), host.get());
  ASSERT_THAT(rt, IsOk());
  EXPECT_THAT(Names((*rt)->devices()), ElementsAre("/job:localhost/replica:0/task:0/device:GPU:0",
                                                   "/job:localhost/replica:0/task:0/device:GPU:1",
                                                   "/job:localhost/replica:0/task:0/device:GPU:2",
                                                   "/job:localhost/replica:0/task:0/device:GPU:3",
                                                   "/job:localhost/replica:0/task:0/device:CPU:0"));
  ASSERT_EQ((*rt)->gpus().size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const LogicalDevice* d = (*rt)->gpus()[i];
    EXPECT_TRUE(d->is_gpu());
    EXPECT_EQ(d->id(), i);
    EXPECT_EQ(d->info().physical_ordinal, 0);
    EXPECT_EQ(d->memory_limit(), kGiB);
    EXPECT_EQ(d->info().allocator_kind, "bfc");
    ASSERT_NE(d->stream(), nullptr);
    EXPECT_EQ(d->stream()->priority(), i == 2 ? -2 : 0);
    EXPECT_EQ(d->info().priority, i == 2 ? -2 : 0);
    EXPECT_EQ(d->executor()->ordinal(), 0);
    ASSERT_NE(d->allocator(), nullptr);
    EXPECT_EQ(d->allocator()->Stats().bytes_limit, kGiB);
    EXPECT_THAT(d->allocator()->name(), HasSubstr(d->name()));
  }
  // Each device has its own stream and allocator.
  EXPECT_NE((*rt)->gpus()[0]->stream(), (*rt)->gpus()[1]->stream());
  EXPECT_NE((*rt)->gpus()[0]->allocator(), (*rt)->gpus()[1]->allocator());
  const LogicalDevice* cpu = (*rt)->cpu();
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->type(), DeviceType::kCpu);
  EXPECT_EQ(cpu->info().physical_ordinal, -1);
  EXPECT_EQ(cpu->info().allocator_kind, "host");
  EXPECT_THAT(cpu->allocator()->Allocate(4096), IsOk());
}

TEST(RuntimeTest, PreallocatesWithoutGrowthAndGrowsWithIt) {
  auto host = MakeHost({8 * kGiB});
  {
    auto rt = Runtime::Create(Logical("0:1GiB,2GiB"), host.get());
    ASSERT_THAT(rt, IsOk());
    auto info = host->Describe(0);
    ASSERT_THAT(info, IsOk());
    EXPECT_EQ(info->free_bytes, 5 * kGiB);  // both limits taken at start
  }
  EXPECT_EQ(host->Describe(0)->free_bytes, 8 * kGiB);  // and given back
  RuntimeConfig c = Logical("0:1GiB,2GiB");
  c.allow_growth = true;
  auto rt = Runtime::Create(c, host.get());
  ASSERT_THAT(rt, IsOk());
  EXPECT_GT(host->Describe(0)->free_bytes, 7 * kGiB);
  EXPECT_TRUE((*rt)->gpus()[1]->info().allow_growth);
}

TEST(RuntimeTest, TwoCardsIdsInPhysicalOrder) {
  auto host = MakeHost({4 * kGiB, 4 * kGiB});
  RuntimeConfig c = Logical("1:50%,50%;0:1GiB");
  c.allow_growth = true;
  auto rt = Runtime::Create(c, host.get());
  ASSERT_THAT(rt, IsOk());
  ASSERT_EQ((*rt)->gpus().size(), 3u);
  EXPECT_EQ((*rt)->gpus()[0]->info().physical_ordinal, 0);
  EXPECT_EQ((*rt)->gpus()[1]->info().physical_ordinal, 1);
  EXPECT_EQ((*rt)->gpus()[1]->memory_limit(), 2 * kGiB);
  EXPECT_EQ((*rt)->gpus()[2]->info().physical_ordinal, 1);
  EXPECT_EQ((*rt)->gpus()[2]->executor()->ordinal(), 1);
}

TEST(RuntimeTest, DefaultConfigIsOneDevicePerCard) {
  auto host = MakeHost({2 * kGiB, 1 * kGiB});
  RuntimeConfig c;
  c.reserved_memory = 256 * kMiB;
  auto rt = Runtime::Create(c, host.get());
  ASSERT_THAT(rt, IsOk());
  ASSERT_EQ((*rt)->gpus().size(), 2u);
  EXPECT_EQ((*rt)->gpus()[0]->memory_limit(), 2 * kGiB - 256 * kMiB);
  EXPECT_EQ((*rt)->gpus()[1]->memory_limit(), kGiB - 256 * kMiB);
}

TEST(RuntimeTest, ValidationFailsBeforeAnythingIsAllocated) {
  auto host = MakeHost({8 * kGiB});
  EXPECT_THAT(Runtime::Create(Logical("0:5GiB,5GiB"), host.get()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("10 GiB"), HasSubstr("capacity of 8 GiB"))));
  EXPECT_EQ(host->faults().allocate_calls.load(), 0);
  EXPECT_EQ(host->faults().stream_calls.load(), 0);
}

TEST(RuntimeTest, OverFreeMemoryWithoutGrowth) {
  auto host = MakeHost({8 * kGiB});
  auto exec = host->GetExecutor(0);
  ASSERT_THAT(exec, IsOk());
  auto hog = (*exec)->Allocate(6 * kGiB);
  ASSERT_THAT(hog, IsOk());
  EXPECT_THAT(Runtime::Create(Logical("0:2GiB,2GiB"), host.get()),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("free memory of 2 GiB")));
  RuntimeConfig grow = Logical("0:2GiB,2GiB");
  grow.allow_growth = true;
  EXPECT_THAT(Runtime::Create(grow, host.get()), IsOk());
  ASSERT_THAT((*exec)->Free(*hog), IsOk());
}

TEST(RuntimeTest, PriorityOutsideTheStreamRange) {
  auto host = MakeHost({8 * kGiB});
  EXPECT_THAT(Runtime::Create(Logical("0:1GiB@-9"), host.get()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("priority -9"), HasSubstr("[-5, 0]"))));
  EXPECT_THAT(Runtime::Create(Logical("0:1GiB@1"), host.get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("priority 1")));
}

TEST(RuntimeTest, SmPartitionsAreUnimplementedOnHost) {
  auto host = MakeHost({8 * kGiB});
  RuntimeConfig c = Logical("0:1GiB,1GiB");
  c.sm_partitions = {{0, {8, 8}}};
  EXPECT_THAT(Runtime::Create(c, host.get()),
              StatusIs(absl::StatusCode::kUnimplemented,
                       AllOf(HasSubstr("VGPU_SM_PARTITION"), HasSubstr("host"))));
}

TEST(RuntimeTest, StreamFailureIsReportedAndNothingLeaks) {
  auto host = MakeHost({8 * kGiB});
  host->faults().fail_stream_at = 2;
  EXPECT_THAT(Runtime::Create(Logical("0:1GiB,1GiB"), host.get()),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("/job:localhost/replica:0/task:0/device:GPU:1")));
  EXPECT_EQ(host->Describe(0)->free_bytes, 8 * kGiB);
}

TEST(RuntimeTest, NoGpusStillHasCpu) {
  auto host = MakeHost({8 * kGiB});
  RuntimeConfig c;
  c.visible_devices = std::vector<int>{};
  auto rt = Runtime::Create(c, host.get());
  ASSERT_THAT(rt, IsOk());
  EXPECT_TRUE((*rt)->gpus().empty());
  EXPECT_THAT(Names((*rt)->devices()), ElementsAre("/job:localhost/replica:0/task:0/device:CPU:0"));
  EXPECT_EQ((*rt)->cpu()->executor(), nullptr);
  EXPECT_THAT((*rt)->cpu()->allocator()->Allocate(1024), IsOk());
}

TEST(RuntimeTest, FindAcceptsEveryNameForm) {
  auto host = MakeHost({8 * kGiB});
  RuntimeConfig c = Logical("0:1GiB,1GiB");
  c.allow_growth = true;
  auto rt = Runtime::Create(c, host.get());
  ASSERT_THAT(rt, IsOk());
  const Runtime& r = **rt;
  LogicalDevice* gpu1 = r.gpus()[1];
  for (absl::string_view spec :
       {"GPU:1", "/gpu:1", "/device:GPU:1", "device:GPU:1",
        "/job:localhost/replica:0/task:0/device:GPU:1", "/job:localhost/device:GPU:1"}) {
    auto d = r.Find(spec);
    ASSERT_THAT(d, IsOk()) << spec;
    EXPECT_EQ(*d, gpu1) << spec;
  }
  EXPECT_EQ(*r.Find("GPU:*"), r.gpus()[0]);
  EXPECT_EQ(*r.Find("/cpu:0"), r.cpu());
  EXPECT_EQ(*r.Find(""), r.gpus()[0]);
  auto all_gpus = r.FindAll("/device:GPU:*");
  ASSERT_THAT(all_gpus, IsOk());
  EXPECT_EQ(all_gpus->size(), 2u);
  EXPECT_EQ(r.FindAll("/job:localhost")->size(), 3u);
}

TEST(RuntimeTest, FindErrors) {
  auto host = MakeHost({8 * kGiB});
  RuntimeConfig c = Logical("0:1GiB,1GiB");
  c.allow_growth = true;
  auto rt = Runtime::Create(c, host.get());
  ASSERT_THAT(rt, IsOk());
  EXPECT_THAT((*rt)->Find("GPU:7"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("\"GPU:7\""),
                             HasSubstr("/job:localhost/replica:0/task:0/device:GPU:0, "
                                       "/job:localhost/replica:0/task:0/device:GPU:1, "
                                       "/job:localhost/replica:0/task:0/device:CPU:0"))));
  EXPECT_THAT((*rt)->Find("/device:gpu:0"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT((*rt)->Find("/job:worker/device:GPU:0"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT((*rt)->Find("/gpu:x"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*rt)->FindAll("GPU:7"), ::vgpu::testing::IsOkAndHolds(ElementsAre()));
}

TEST(RuntimeTest, AllocationsLandOnTheDevice) {
  auto host = MakeHost({8 * kGiB});
  RuntimeConfig c = Logical("0:64MiB,64MiB");
  auto rt = Runtime::Create(c, host.get());
  ASSERT_THAT(rt, IsOk());
  LogicalDevice* d = (*rt)->gpus()[1];
  auto buf = d->allocator()->Allocate(kMiB);
  ASSERT_THAT(buf, IsOk());
  std::vector<uint8_t> in(kMiB, 7), out(kMiB, 0);
  ASSERT_THAT(d->stream()->MemcpyH2D(buf->data(), in.data(), kMiB), IsOk());
  ASSERT_THAT(d->stream()->MemcpyD2H(out.data(), buf->data(), kMiB), IsOk());
  ASSERT_THAT(d->stream()->Synchronize(), IsOk());
  EXPECT_EQ(in, out);
  EXPECT_THAT(d->allocator()->Allocate(65 * kMiB), StatusIs(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace vgpu
