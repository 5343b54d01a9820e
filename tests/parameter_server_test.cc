// ParameterServerStrategy: variable sharding (round-robin as replica_device_setter, by size),
// argument checks, and, under mpirun (tests/cluster.cmake: 1 ps + 2 workers, 2 ps + 2 workers,
// label cluster), synchronous training equal to mirrored training over the same replicas and
// batches (rel 1e-4), the same final bytes on every rank, and asynchronous training with its
// staleness counted. The last ranks are the ps tasks (VGPU_TEST_PS_TASKS, default 1).
#include "vgpu/strategies/parameter_server.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/strategies/mirrored.h"
#include "vgpu/strategies/nn.h"
#include "vgpu/tests/cluster_testing.h"

namespace vgpu::strategies {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::vgpu::testing::HostDevices;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::RelativeDifference;
using ::vgpu::testing::StatusIs;
using ::vgpu::testing::WorldOrNull;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int kFeatures = 24, kClasses = 5, kRows = 2048, kBatch = 96, kSteps = 25;

StrategyOptions Options() {
  StrategyOptions o;
  o.model = MakeMlp({kFeatures, 32, 16, kClasses});
  o.global_batch = kBatch;
  o.seed = 5;
  o.optimizer.lr = 0.01f;
  return o;
}

TEST(ShardVariablesTest, RoundRobinIsReplicaDeviceSetter) {
  auto vars = Options().model->Variables();
  ASSERT_EQ(vars.size(), 6u);  // kernel, bias per layer
  EXPECT_EQ(vars[0].name, "dense_0/kernel");
  EXPECT_EQ(vars[1].name, "dense_0/bias");
  EXPECT_EQ(vars.back().end, Options().model->TotalParams());
  for (size_t i = 1; i < vars.size(); ++i) EXPECT_EQ(vars[i].begin, vars[i - 1].end);
  EXPECT_THAT(ShardVariables(vars, 2, ShardPolicy::kRoundRobin),
              ::vgpu::testing::IsOkAndHolds(ElementsAre(0, 1, 0, 1, 0, 1)));
  EXPECT_THAT(ShardVariables(vars, 4, ShardPolicy::kRoundRobin),
              ::vgpu::testing::IsOkAndHolds(ElementsAre(0, 1, 2, 3, 0, 1)));
  // By size: 768 -> 0, 32 -> 1, 512 -> 1 (32 < 768), 16 -> 1 (544 < 768), 80 -> 1, 5 -> 1.
  EXPECT_THAT(ShardVariables(vars, 2, ShardPolicy::kBySize),
              ::vgpu::testing::IsOkAndHolds(ElementsAre(0, 1, 1, 1, 1, 1)));
  EXPECT_THAT(ShardVariables(vars, 0, ShardPolicy::kRoundRobin).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 ps tasks")));
  EXPECT_THAT(ParseShardPolicy("by-size"), ::vgpu::testing::IsOkAndHolds(ShardPolicy::kBySize));
  EXPECT_THAT(ParseShardPolicy("random").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("random")));
}

TEST(ParameterServerTest, ClusterChecks) {
  HostDevices d = testing::MakeHostDevices(1, 8 * kMiB);
  ASSERT_NE(d.runtime, nullptr);
  ParameterServerOptions ps;
  EXPECT_THAT(ParameterServerStrategy::Create(d.runtime->gpus(), Options(), ps).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no MPI world")));
  EXPECT_THAT(ParameterServer::Create(d.runtime->cpu(), Options(), ps).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no MPI world")));
}

// Whether this rank is a ps task, and the options, for a job whose last `ps_tasks` ranks serve.
ParameterServerOptions JobOptions(mpi::World* world, int ps_tasks, bool async) {
  ParameterServerOptions o;
  o.world = world;
  for (int r = 0; r < world->size(); ++r) {
    (r < world->size() - ps_tasks ? o.worker_ranks : o.ps_ranks).push_back(r);
  }
  o.async = async;
  return o;
}

// One job: workers train kSteps; returns the final parameters (every rank).
std::vector<float> RunJob(mpi::World* world, int ps_tasks, bool async, int per_worker,
                          ParameterServerStats* stats) {
  ParameterServerOptions o = JobOptions(world, ps_tasks, async);
  const bool is_ps = world->rank() >= world->size() - ps_tasks;
  HostDevices d = testing::MakeHostDevices(per_worker, 8 * kMiB);
  EXPECT_NE(d.runtime, nullptr);
  if (is_ps) {
    auto server = ParameterServer::Create(d.runtime->cpu(), Options(), o);
    EXPECT_THAT(server.status(), IsOk());
    if (!server.ok()) return {};
    EXPECT_THAT((*server)->Serve(), IsOk());
    *stats = (*server)->stats();
    return (*server)->Params();
  }
  auto s = ParameterServerStrategy::Create(d.runtime->gpus(), Options(), o);
  EXPECT_THAT(s.status(), IsOk());
  if (!s.ok()) return {};
  EXPECT_THAT((*s)->PlacementReport(), HasSubstr("/job:ps/task:0"));
  const testing::SyntheticData data = testing::MakeSyntheticData(kRows, kFeatures, kClasses, 11);
  for (int step = 0; step < kSteps; ++step) {
    const int start = (step * kBatch) % (kRows - kBatch);
    EXPECT_THAT((*s)->Step(data.x.data() + static_cast<size_t>(start) * kFeatures,
                           data.y.data() + start, kBatch),
                IsOk());
  }
  auto final_params = (*s)->Finish();
  EXPECT_THAT(final_params.status(), IsOk());
  *stats = (*s)->stats();
  EXPECT_THAT((*s)->Finish().status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  return final_params.ok() ? *final_params : std::vector<float>();
}

// Every rank's checksum of `params`, gathered; true when all are equal.
bool SameEverywhere(mpi::World* world, const std::vector<float>& params) {
  const std::string mine = ParamsChecksum(params);
  std::vector<char> all(16 * world->size());
  EXPECT_THAT(world->AllGather(mine.data(), 16, all.data()), IsOk());
  for (int r = 0; r < world->size(); ++r) {
    if (std::string(all.data() + 16 * r, 16) != mine) return false;
  }
  return true;
}

int PsTasks() {
  const char* v = std::getenv("VGPU_TEST_PS_TASKS");
  return v != nullptr ? std::atoi(v) : 1;
}

TEST(ParameterServerTest, SynchronousEqualsMirroredOverTheSameReplicas) {
  mpi::World* world = WorldOrNull();
  if (world == nullptr || world->size() < 2) {
    // Alone there is no job to run; the cluster tests run this under mpirun.
    EXPECT_EQ(world == nullptr ? 1 : world->size(), 1);
    return;
  }
  const int ps_tasks = PsTasks();
  const int workers = world->size() - ps_tasks;
  ASSERT_GE(workers, 1);
  for (int per_worker : {1, 2}) {
    ParameterServerStats stats;
    std::vector<float> params = RunJob(world, ps_tasks, /*async=*/false, per_worker, &stats);
    ASSERT_FALSE(params.empty());
    EXPECT_EQ(stats.updates, kSteps);
    EXPECT_EQ(stats.max_staleness, 0);
    EXPECT_TRUE(SameEverywhere(world, params)) << "rank " << world->rank();
    // Mirrored training over workers x per_worker replicas, the same batches.
    HostDevices one = testing::MakeHostDevices(workers * per_worker, 8 * kMiB);
    auto mirrored = MirroredStrategy::Create(one.runtime->gpus(), Options());
    ASSERT_THAT(mirrored.status(), IsOk());
    const testing::SyntheticData data = testing::MakeSyntheticData(kRows, kFeatures, kClasses, 11);
    for (int step = 0; step < kSteps; ++step) {
      const int start = (step * kBatch) % (kRows - kBatch);
      ASSERT_THAT((*mirrored)->Step(data.x.data() + static_cast<size_t>(start) * kFeatures,
                                    data.y.data() + start, kBatch),
                  IsOk());
    }
    auto want = (*mirrored)->Params();
    ASSERT_THAT(want.status(), IsOk());
    EXPECT_LT(RelativeDifference(params, *want), 1e-4) << per_worker << " device(s) per worker";
  }
}

TEST(ParameterServerTest, AsynchronousEndsTheSameEverywhereAndCountsStaleness) {
  mpi::World* world = WorldOrNull();
  if (world == nullptr || world->size() < 2) {
    EXPECT_EQ(world == nullptr ? 1 : world->size(), 1);
    return;
  }
  const int ps_tasks = PsTasks();
  const int workers = world->size() - ps_tasks;
  ParameterServerStats stats;
  std::vector<float> params = RunJob(world, ps_tasks, /*async=*/true, 1, &stats);
  ASSERT_FALSE(params.empty());
  EXPECT_TRUE(SameEverywhere(world, params));
  const bool is_ps = world->rank() >= workers;
  // A server applies every push of every worker; a worker answered once per step.
  EXPECT_EQ(stats.updates, is_ps ? int64_t{kSteps} * workers : kSteps);
  if (is_ps) {
    EXPECT_GE(stats.max_staleness, 0);
    EXPECT_LE(stats.mean_staleness, stats.max_staleness);
    // One worker is never stale: nobody else moves the variables between its pull and push.
    if (workers == 1) EXPECT_EQ(stats.max_staleness, 0);
  }
  EXPECT_NE(ParamsChecksum(params), ParamsChecksum(Options().model->InitialParams(5)));
}

}  // namespace
}  // namespace vgpu::strategies
