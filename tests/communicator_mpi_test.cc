// The collectives layer across processes: run under mpirun (tests/cluster.cmake registers it
// at -np 2 and -np 3, label cluster), every kind that crosses processes ("mpi" with one device
// per process, "hierarchical" with several, "auto") passes the conformance checks of
// communicator_checks.h, and every rank of every process holds the same bytes. Run alone it
// checks the one-process path of "auto" and that "mpi" asks for a world.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/strategies/collectives/communicator.h"
#include "vgpu/strategies/strategy.h"
#include "vgpu/tests/cluster_testing.h"
#include "vgpu/tests/communicator_checks.h"

namespace vgpu::collectives {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::HostDevices;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;
using ::vgpu::testing::WorldOrNull;

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Case {
  std::string kind;
  int per_process;
  std::string want_kind;  // across processes
};

class CommunicatorAcrossProcesses : public ::testing::TestWithParam<Case> {};

TEST_P(CommunicatorAcrossProcesses, EveryPrimitiveMatchesTheReference) {
  const Case& c = GetParam();
  mpi::World* world = WorldOrNull();
  HostDevices d = testing::MakeHostDevices(c.per_process, 4 * kMiB);
  ASSERT_NE(d.runtime, nullptr);
  CommunicatorOptions o;
  o.kind = c.kind;
  o.world = world;
  auto comm = CreateCommunicator(d.runtime->gpus(), o);
  if (world == nullptr || world->size() == 1) {
    if (c.kind != "auto") {
      // Alone, only "auto" makes sense: the others need several processes' world.
      EXPECT_THAT(comm.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
      return;
    }
  }
  ASSERT_THAT(comm.status(), IsOk());
  const int processes = world ? world->size() : 1;
  if (processes > 1) EXPECT_EQ((*comm)->kind(), c.want_kind);
  EXPECT_EQ((*comm)->size(), processes * c.per_process);
  EXPECT_EQ((*comm)->first_rank(), (world ? world->rank() : 0) * c.per_process);
  testing::CheckAllPrimitives(**comm, d.runtime->gpus(), 1001);

  // Random values (inexact sums): every rank of every process still ends with the same bytes.
  const uint64_t count = 4099;
  std::vector<std::vector<float>> host(c.per_process, std::vector<float>(count));
  uint32_t x = 12345u + 977u * static_cast<uint32_t>((*comm)->first_rank());
  std::vector<RankBuffer> b;
  testing::RankTensors t = testing::MakeTensors(d.runtime->gpus(), count, 0, 0);
  for (int i = 0; i < c.per_process; ++i) {
    for (float& v : host[i]) v = static_cast<float>((x = x * 1664525u + 1013904223u) >> 8) * 1e-5f;
    ASSERT_THAT(t.t[i].CopyFromHostAsync(host[i].data(), count * 4), IsOk());
    b.push_back({d.runtime->gpus()[i]->stream(), t.ptr[i], t.ptr[i]});
  }
  ASSERT_THAT((*comm)->AllReduce(b, count, ReduceOp::kMean), IsOk());
  std::string first = strategies::ParamsChecksum(testing::Read(t.t[0]));
  for (int i = 1; i < c.per_process; ++i) {
    EXPECT_EQ(strategies::ParamsChecksum(testing::Read(t.t[i])), first) << "local rank " << i;
  }
  if (world != nullptr) {
    std::vector<char> all(16 * world->size());
    ASSERT_THAT(world->AllGather(first.data(), 16, all.data()), IsOk());
    for (int r = 0; r < world->size(); ++r) {
      EXPECT_EQ(std::string(all.data() + 16 * r, 16), first) << "process " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, CommunicatorAcrossProcesses,
                         ::testing::Values(Case{"mpi", 1, "mpi"},
                                           Case{"hierarchical", 2, "hierarchical"},
                                           Case{"hierarchical", 1, "hierarchical"},
                                           Case{"auto", 1, "mpi"}, Case{"auto", 3, "hierarchical"}),
                         [](const auto& info) {
                           return info.param.kind + "_" + std::to_string(info.param.per_process);
                         });

}  // namespace
}  // namespace vgpu::collectives
