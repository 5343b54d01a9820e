// The collectives layer in one process (host platform): every kind passes the same
// conformance checks (communicator_checks.h), "auto" follows the topology table, and bad
// arguments are clear errors. The kinds across processes run under mpirun
// (communicator_mpi_test.cc, label cluster).
#include "vgpu/strategies/collectives/communicator.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/communicator_checks.h"
#include "vgpu/tests/testing_runtime.h"

namespace vgpu::collectives {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Layout {
  std::string kind;
  std::vector<int> per_physical;  // logical GPUs on each physical device
  uint64_t count;
};

struct Devices {
  std::unique_ptr<HostPlatform> platform;
  std::unique_ptr<Runtime> runtime;
};

Devices Make(const std::vector<int>& per_physical) {
  Devices d;
  HostPlatformOptions o;
  std::vector<testing::PhysicalSlices> slices;
  for (size_t p = 0; p < per_physical.size(); ++p) {
    o.device_bytes.push_back(per_physical[p] * 4 * kMiB + 16 * kMiB);
    slices.push_back({static_cast<int>(p), std::vector<uint64_t>(per_physical[p], 4 * kMiB)});
  }
  auto platform = HostPlatform::Create(o);
  EXPECT_THAT(platform.status(), IsOk());
  d.platform = *std::move(platform);
  auto runtime = testing::CreateTestingRuntime(d.platform.get(), slices);
  EXPECT_THAT(runtime.status(), IsOk());
  if (runtime.ok()) d.runtime = *std::move(runtime);
  return d;
}

class CommunicatorConformance : public ::testing::TestWithParam<Layout> {};

TEST_P(CommunicatorConformance, EveryPrimitiveMatchesTheReference) {
  const Layout& l = GetParam();
  Devices d = Make(l.per_physical);
  ASSERT_NE(d.runtime, nullptr);
  CommunicatorOptions o;
  o.kind = l.kind;
  auto comm = CreateCommunicator(d.runtime->gpus(), o);
  ASSERT_THAT(comm.status(), IsOk());
  EXPECT_EQ((*comm)->kind(), l.kind);
  EXPECT_EQ((*comm)->size(), static_cast<int>(d.runtime->gpus().size()));
  EXPECT_EQ((*comm)->local_size(), (*comm)->size());
  EXPECT_EQ((*comm)->first_rank(), 0);
  testing::CheckAllPrimitives(**comm, d.runtime->gpus(), l.count);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, CommunicatorConformance,
    ::testing::Values(Layout{"local", {1}, 5}, Layout{"local", {2}, 1}, Layout{"local", {3}, 1001},
                      Layout{"local", {20}, 33},  // more ranks than one SumN takes
                      Layout{"via-host", {3}, 1001}, Layout{"via-host", {2, 1}, 7},
                      Layout{"nccl", {1, 1}, 1001}, Layout{"nccl", {1, 1, 1}, 5}),
    [](const auto& info) {
      std::string name = info.param.kind;
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      for (int n : info.param.per_physical) name += "_" + std::to_string(n);
      return name + "_x" + std::to_string(info.param.count);
    });

TEST(CommunicatorTest, AutoFollowsTheTopologyTable) {
  struct Want {
    std::vector<int> per_physical;
    std::string kind;
  };
  for (const Want& w :
       {Want{{1}, "local"}, Want{{4}, "local"}, Want{{1, 1}, "nccl"}, Want{{2, 1}, "via-host"}}) {
    Devices d = Make(w.per_physical);
    ASSERT_NE(d.runtime, nullptr);
    auto comm = CreateCommunicator(d.runtime->gpus());
    ASSERT_THAT(comm.status(), IsOk());
    EXPECT_EQ((*comm)->kind(), w.kind) << w.per_physical.size() << " physical devices";
  }
}

TEST(CommunicatorTest, BadArgumentsAreClearErrors) {
  Devices d = Make({2, 1});
  ASSERT_NE(d.runtime, nullptr);
  const std::vector<LogicalDevice*>& gpus = d.runtime->gpus();
  EXPECT_THAT(CreateCommunicator({}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no devices")));
  EXPECT_THAT(CreateCommunicator({gpus[0], gpus[0]}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("listed twice")));
  CommunicatorOptions local;
  local.kind = "local";
  EXPECT_THAT(CreateCommunicator(gpus, local).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("one physical GPU")));
  CommunicatorOptions unknown;
  unknown.kind = "carrier-pigeon";
  EXPECT_THAT(CreateCommunicator(gpus, unknown).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("carrier-pigeon")));
  CommunicatorOptions mpi;
  mpi.kind = "mpi";
  EXPECT_THAT(CreateCommunicator(gpus, mpi).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("MPI world")));
  // NCCL refuses two ranks on one GPU.
  CommunicatorOptions nccl;
  nccl.kind = "nccl";
  EXPECT_THAT(CreateCommunicator({gpus[0], gpus[1]}, nccl).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));

  auto comm = CreateCommunicator({gpus[0], gpus[1]});
  ASSERT_THAT(comm.status(), IsOk());
  testing::RankTensors t = testing::MakeTensors({gpus[0], gpus[1]}, 4, 0, 0);
  std::vector<RankBuffer> one = {{gpus[0]->stream(), t.ptr[0], t.ptr[0]}};
  EXPECT_THAT((*comm)->AllReduce(one, 4, ReduceOp::kSum),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 buffers for 2")));
  std::vector<RankBuffer> two = {{gpus[0]->stream(), t.ptr[0], t.ptr[0]},
                                 {gpus[1]->stream(), nullptr, t.ptr[1]}};
  EXPECT_THAT((*comm)->AllReduce(two, 4, ReduceOp::kSum),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 1")));
  two[1].send = t.ptr[1];
  EXPECT_THAT((*comm)->Broadcast(two, 4, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("root 2")));
  EXPECT_THAT((*comm)->Reduce(two, 4, ReduceOp::kSum, -1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("root -1")));
  // Nothing was touched by the refused calls; count 0 is a no-op.
  EXPECT_THAT((*comm)->AllReduce(two, 0, ReduceOp::kSum), IsOk());
  EXPECT_EQ(testing::Read(t.t[1])[0], testing::CommValue(1, 0, 0));
}

}  // namespace
}  // namespace vgpu::collectives
