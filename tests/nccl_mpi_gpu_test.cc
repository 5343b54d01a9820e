// Communicator "nccl-mpi" (NCCL across processes, bootstrapped over MPI) on the cuda platform:
// run under mpirun, on a GPU node or the CUDA simulator (tests/cudasim_cluster.cmake runs it
// through scripts/cudasim at -np 2 with 2 simulated cards), each rank on card local_rank:
// "nccl-mpi" passes the conformance checks of communicator_checks.h and every process ends
// with the same bytes; "auto" picks it. With every rank on card 0, NCCL refuses ("Duplicate GPU
// detected") on every rank alike and "auto" falls back to "mpi", keeping the reason. On the
// host platform "nccl-mpi" is FailedPrecondition. Without a cuda device it skips.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/strategies/collectives/communicator.h"
#include "vgpu/strategies/strategy.h"
#include "vgpu/tests/cluster_testing.h"
#include "vgpu/tests/communicator_checks.h"
#include "vgpu/tests/testing_runtime.h"

namespace vgpu::collectives {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;
using ::vgpu::testing::WorldOrNull;

constexpr uint64_t kMiB = uint64_t{1} << 20;

class NcclMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = WorldOrNull();
    auto platform = DefaultPlatform();
    ASSERT_THAT(platform.status(), IsOk());
    platform_ = *platform;
    if (platform_->name() != "cuda" || platform_->DeviceCount() == 0) {
      GTEST_SKIP() << "no cuda device (run it on a GPU or through scripts/cudasim): "
                   << platform_->Summary();
    }
  }
  // One logical GPU of 64 MiB on `card`.
  std::unique_ptr<Runtime> RuntimeOn(int card) {
    auto r = testing::CreateTestingRuntime(platform_, card, {64 * kMiB});
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? *std::move(r) : nullptr;
  }
  bool Across() const { return world_ != nullptr && world_->size() > 1; }
  int OwnCard() const { return world_->local_rank() % platform_->DeviceCount(); }
  bool DistinctCards() const { return platform_->DeviceCount() >= world_->local_size(); }

  // Every process's AllReduce of random values ends with the same bytes.
  void CheckSameBytes(Communicator& comm, const std::vector<LogicalDevice*>& devices) {
    const uint64_t count = 4099;
    std::vector<float> host(count);
    uint32_t x = 12345u + 977u * static_cast<uint32_t>(comm.first_rank());
    for (float& v : host) v = static_cast<float>((x = x * 1664525u + 1013904223u) >> 8) * 1e-5f;
    testing::RankTensors t = testing::MakeTensors(devices, count, 0, 0);
    ASSERT_THAT(t.t[0].CopyFromHostAsync(host.data(), count * 4), IsOk());
    std::vector<RankBuffer> b = {{devices[0]->stream(), t.ptr[0], t.ptr[0]}};
    ASSERT_THAT(comm.AllReduce(b, count, ReduceOp::kMean), IsOk());
    std::string mine = strategies::ParamsChecksum(testing::Read(t.t[0]));
    std::vector<char> all(16 * world_->size());
    ASSERT_THAT(world_->AllGather(mine.data(), 16, all.data()), IsOk());
    for (int r = 0; r < world_->size(); ++r) {
      EXPECT_EQ(std::string(all.data() + 16 * r, 16), mine) << "process " << r;
    }
  }

  mpi::World* world_ = nullptr;
  Platform* platform_ = nullptr;
};

TEST_F(NcclMpiTest, PassesTheConformanceChecksOnDistinctCards) {
  if (!Across() || !DistinctCards()) GTEST_SKIP() << "needs mpirun and a card per process";
  std::unique_ptr<Runtime> rt = RuntimeOn(OwnCard());
  ASSERT_NE(rt, nullptr);
  CommunicatorOptions o;
  o.kind = "nccl-mpi";
  o.world = world_;
  auto comm = CreateCommunicator(rt->gpus(), o);
  ASSERT_THAT(comm.status(), IsOk());
  EXPECT_EQ((*comm)->kind(), "nccl-mpi");
  EXPECT_EQ((*comm)->size(), world_->size());
  EXPECT_EQ((*comm)->local_size(), 1);
  EXPECT_EQ((*comm)->first_rank(), world_->rank());
  testing::CheckAllPrimitives(**comm, rt->gpus(), 1001);
  CheckSameBytes(**comm, rt->gpus());
}

TEST_F(NcclMpiTest, AutoPicksNcclMpiWithOneCardPerProcess) {
  if (!Across() || !DistinctCards()) GTEST_SKIP() << "needs mpirun and a card per process";
  std::unique_ptr<Runtime> rt = RuntimeOn(OwnCard());
  ASSERT_NE(rt, nullptr);
  CommunicatorOptions o;
  o.world = world_;
  auto comm = CreateCommunicator(rt->gpus(), o);
  ASSERT_THAT(comm.status(), IsOk());
  EXPECT_EQ((*comm)->kind(), "nccl-mpi");
  EXPECT_THAT((*comm)->fallback_reason(), IsEmpty());
  CheckSameBytes(**comm, rt->gpus());
}

TEST_F(NcclMpiTest, TwoRanksOnOneCardAreRefusedAndAutoFallsBackToMpi) {
  if (!Across()) GTEST_SKIP() << "needs mpirun";
  std::unique_ptr<Runtime> rt = RuntimeOn(0);  // every process on card 0: one GPU
  ASSERT_NE(rt, nullptr);
  CommunicatorOptions o;
  o.kind = "nccl-mpi";
  o.world = world_;
  auto explicit_comm = CreateCommunicator(rt->gpus(), o);
  EXPECT_THAT(explicit_comm.status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("Duplicate GPU detected")));
  EXPECT_THAT(explicit_comm.status().message(), HasSubstr("rank"));

  o.kind = "auto";
  auto comm = CreateCommunicator(rt->gpus(), o);
  ASSERT_THAT(comm.status(), IsOk());
  EXPECT_EQ((*comm)->kind(), "mpi");
  EXPECT_THAT((*comm)->fallback_reason(), HasSubstr("Duplicate GPU detected : rank"));
  testing::CheckAllPrimitives(**comm, rt->gpus(), 7);
  CheckSameBytes(**comm, rt->gpus());
}

// Not a cuda case: the host platform's communicator cannot span processes.
TEST(NcclMpiHostTest, HostPlatformIsFailedPrecondition) {
  mpi::World* world = WorldOrNull();
  testing::HostDevices d = testing::MakeHostDevices(1, 4 * kMiB);
  ASSERT_NE(d.runtime, nullptr);
  CommunicatorOptions o;
  o.kind = "nccl-mpi";
  o.world = world;
  auto comm = CreateCommunicator(d.runtime->gpus(), o);
  EXPECT_THAT(comm.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  if (world != nullptr) {
    EXPECT_THAT(comm.status().message(), HasSubstr("host platform has no NCCL across processes"));
    o.kind = "auto";  // falls back alike, and says why only when it tried
    auto fallback = CreateCommunicator(d.runtime->gpus(), o);
    ASSERT_THAT(fallback.status(), IsOk());
    if (world->size() > 1) EXPECT_EQ((*fallback)->kind(), "mpi");
  }
}

}  // namespace
}  // namespace vgpu::collectives
