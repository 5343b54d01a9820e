// MultiWorkerMirroredStrategy: every replica of every process holds bitwise-equal parameters
// after every step, and the job matches single-process mirrored training over the same global
// batch and the same number of replicas (rel 1e-4 after 30 Adam steps). Under mpirun
// (tests/cluster.cmake: -np 2 and -np 4, label cluster) the replicas are spread over the
// processes; run alone, the job is this process (no world).
#include "vgpu/strategies/multi_worker_mirrored.h"

#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/strategies/nn.h"
#include "vgpu/tests/cluster_testing.h"

namespace vgpu::strategies {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::HostDevices;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::RelativeDifference;
using ::vgpu::testing::StatusIs;
using ::vgpu::testing::WorldOrNull;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int kFeatures = 24, kClasses = 5, kRows = 2048, kBatch = 100, kSteps = 30;

StrategyOptions Options() {
  StrategyOptions o;
  o.model = MakeMlp({kFeatures, 32, 16, kClasses});
  o.global_batch = kBatch;
  o.seed = 3;
  o.optimizer.lr = 0.01f;
  return o;
}

class MultiWorkerMirroredTest : public ::testing::TestWithParam<int> {};

TEST_P(MultiWorkerMirroredTest, BitwiseEqualEveryStepAndMatchesMirrored) {
  const int per_process = GetParam();
  mpi::World* world = WorldOrNull();
  const int processes = world ? world->size() : 1;
  const int rank = world ? world->rank() : 0;
  HostDevices d = testing::MakeHostDevices(per_process, 8 * kMiB);
  ASSERT_NE(d.runtime, nullptr);
  auto mwm = CreateMultiWorkerMirrored(d.runtime->gpus(), Options(), world);
  ASSERT_THAT(mwm.status(), IsOk());
  MirroredStrategy& s = **mwm;
  EXPECT_EQ(s.kind(), StrategyKind::kMultiWorkerMirrored);
  EXPECT_EQ(s.total_replicas(), processes * per_process);
  EXPECT_EQ(s.first_replica(), rank * per_process);
  EXPECT_THAT(s.PlacementReport(), HasSubstr("of " + std::to_string(processes * per_process)));
  const testing::SyntheticData data = testing::MakeSyntheticData(kRows, kFeatures, kClasses, 7);
  // A batch smaller than the replicas leaves some without rows: still equal.
  const int sizes[] = {kBatch, 3, kBatch - 1};
  for (int step = 0; step < kSteps; ++step) {
    const int rows = sizes[step % 3];
    const int start = (step * kBatch) % (kRows - kBatch);
    ASSERT_THAT(
        s.Step(data.x.data() + static_cast<size_t>(start) * kFeatures, data.y.data() + start, rows),
        IsOk());
    auto p0 = s.ReplicaParams(0);
    ASSERT_THAT(p0.status(), IsOk());
    const std::string mine = ParamsChecksum(*p0);
    for (int i = 1; i < per_process; ++i) {
      auto pi = s.ReplicaParams(i);
      ASSERT_THAT(pi.status(), IsOk());
      ASSERT_EQ(ParamsChecksum(*pi), mine) << "step " << step << " replica " << i;
    }
    if (world != nullptr) {
      std::vector<char> all(16 * processes);
      ASSERT_THAT(world->AllGather(mine.data(), 16, all.data()), IsOk());
      for (int r = 0; r < processes; ++r) {
        ASSERT_EQ(std::string(all.data() + 16 * r, 16), mine) << "step " << step << " rank " << r;
      }
    }
  }
  auto flushed = s.Flush();
  ASSERT_THAT(flushed.status(), IsOk());
  auto params = s.Params();
  ASSERT_THAT(params.status(), IsOk());

  // The same job in one process: mirrored over as many replicas, same batches.
  HostDevices one = testing::MakeHostDevices(processes * per_process, 8 * kMiB);
  ASSERT_NE(one.runtime, nullptr);
  auto mirrored = MirroredStrategy::Create(one.runtime->gpus(), Options());
  ASSERT_THAT(mirrored.status(), IsOk());
  for (int step = 0; step < kSteps; ++step) {
    const int rows = sizes[step % 3];
    const int start = (step * kBatch) % (kRows - kBatch);
    ASSERT_THAT((*mirrored)->Step(data.x.data() + static_cast<size_t>(start) * kFeatures,
                                  data.y.data() + start, rows),
                IsOk());
  }
  auto want = (*mirrored)->Params();
  ASSERT_THAT(want.status(), IsOk());
  EXPECT_LT(RelativeDifference(*params, *want), 1e-4);
  EXPECT_NE(ParamsChecksum(*params), ParamsChecksum(Options().model->InitialParams(3)));
}

INSTANTIATE_TEST_SUITE_P(DevicesPerProcess, MultiWorkerMirroredTest, ::testing::Values(1, 2));

TEST(MultiWorkerMirroredBadInput, NoDevicesOrUnknownCommunicator) {
  EXPECT_THAT(CreateMultiWorkerMirrored({}, Options(), nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no devices")));
  HostDevices d = testing::MakeHostDevices(1, 8 * kMiB);
  ASSERT_NE(d.runtime, nullptr);
  EXPECT_THAT(
      CreateMultiWorkerMirrored(d.runtime->gpus(), Options(), nullptr, "smoke-signals").status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("smoke-signals")));
}

}  // namespace
}  // namespace vgpu::strategies
