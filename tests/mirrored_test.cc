// MirroredStrategy: replicas bitwise equal after every step, the global batch split with the
// remainder kept, and N replicas equivalent to one device with the same global batch.
#include "vgpu/strategies/mirrored.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/host/host_kernels.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/strategies/nn.h"
#include "vgpu/tests/testing_runtime.h"

namespace vgpu::strategies {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Data {
  std::vector<float> x;
  std::vector<int32_t> y;
};

// Inputs whose class shows in a few features, so training makes progress.
Data MakeData(int rows, int features, int classes, uint64_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Data d;
  d.x.resize(static_cast<size_t>(rows) * features);
  d.y.resize(rows);
  for (int r = 0; r < rows; ++r) {
    d.y[r] = static_cast<int32_t>(rng() % classes);
    for (int f = 0; f < features; ++f) d.x[r * features + f] = u(rng) * 0.5f;
    d.x[r * features + d.y[r] % features] += 1.0f;
  }
  return d;
}

double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

class MirroredTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetHostBlasThreads(1);  // the replicas' streams already fill the cores
    HostPlatformOptions o;
    o.device_bytes = {uint64_t{1} << 30, 256 * kMiB, 256 * kMiB, 256 * kMiB};
    auto p = HostPlatform::Create(o);
    ASSERT_THAT(p.status(), IsOk());
    platform_ = *std::move(p);
    auto set =
        testing::CreateTestingRuntime(platform_.get(), 0, std::vector<uint64_t>(5, 64 * kMiB));
    ASSERT_THAT(set.status(), IsOk());
    runtime_ = *std::move(set);
  }
  std::vector<LogicalDevice*> Gpus(int n) {
    return std::vector<LogicalDevice*>(runtime_->gpus().begin(), runtime_->gpus().begin() + n);
  }
  // Four replicas laid out as `algorithm`'s row of the topology table, none of them GPU:0 of
  // physical device 0 (the one-device reference): local and via-host on physical device 0;
  // NCCL one on each of physical devices 0..3; hierarchical two on each of physical 0 and 1.
  std::vector<LogicalDevice*> FourReplicas(AllReduceAlgorithm algorithm) {
    if (algorithm == AllReduceAlgorithm::kLocal || algorithm == AllReduceAlgorithm::kViaHost) {
      return {runtime_->gpus()[1], runtime_->gpus()[2], runtime_->gpus()[3], runtime_->gpus()[4]};
    }
    if (algorithm == AllReduceAlgorithm::kHierarchical) {
      auto more = testing::CreateTestingRuntime(platform_.get(), 1, {64 * kMiB, 64 * kMiB});
      EXPECT_THAT(more.status(), IsOk());
      if (!more.ok()) return {};
      std::vector<LogicalDevice*> out = {runtime_->gpus()[1], runtime_->gpus()[2],
                                         (*more)->gpus()[0], (*more)->gpus()[1]};
      extra_.push_back(*std::move(more));
      return out;
    }
    std::vector<LogicalDevice*> out = {runtime_->gpus()[1]};
    for (int p = 1; p < 4; ++p) {
      auto more = testing::CreateTestingRuntime(platform_.get(), p, {64 * kMiB});
      EXPECT_THAT(more.status(), IsOk());
      if (!more.ok()) return {};
      out.push_back((*more)->gpus()[0]);
      extra_.push_back(*std::move(more));
    }
    return out;
  }
  std::unique_ptr<HostPlatform> platform_;
  std::unique_ptr<Runtime> runtime_;
  std::vector<std::unique_ptr<Runtime>> extra_;  // on physical devices 1..3
};

StrategyOptions SmallOptions(int batch) {
  StrategyOptions o;
  o.model = MakeMlp({32, 16, 16, 5});
  o.global_batch = batch;
  o.seed = 7;
  return o;
}

class MirroredAlgorithmTest : public MirroredTest,
                              public ::testing::WithParamInterface<AllReduceAlgorithm> {};

TEST_P(MirroredAlgorithmTest, ReplicasBitwiseEqualAfterEveryStep) {
  StrategyOptions o = SmallOptions(10);  // 10 over 4 replicas: 3, 3, 2, 2
  auto m = MirroredStrategy::Create(FourReplicas(GetParam()), o, GetParam());
  ASSERT_THAT(m.status(), IsOk());
  EXPECT_EQ((*m)->algorithm(), GetParam());
  Data d = MakeData(200, 32, 5, 1);
  for (int step = 0; step < 12; ++step) {
    const int rows = step == 11 ? 3 : 10;  // the last one leaves a replica without examples
    ASSERT_THAT((*m)->Step(d.x.data() + step * 10 * 32, d.y.data() + step * 10, rows), IsOk());
    auto p0 = (*m)->ReplicaParams(0);
    ASSERT_THAT(p0.status(), IsOk());
    for (int r = 1; r < 4; ++r) {
      auto pr = (*m)->ReplicaParams(r);
      ASSERT_THAT(pr.status(), IsOk());
      ASSERT_EQ(pr->size(), p0->size());
      ASSERT_EQ(std::memcmp(pr->data(), p0->data(), p0->size() * 4), 0)
          << "replica " << r << " differs after step " << step;
    }
  }
  auto totals = (*m)->Flush();
  ASSERT_THAT(totals.status(), IsOk());
  EXPECT_EQ(totals->examples, 11 * 10 + 3);
  EXPECT_TRUE(std::isfinite(totals->mean_loss()));
  EXPECT_GT(totals->mean_loss(), 0.0);
}

// The bar, for every all-reduce row: 784-256-256-10, global batch 256, Adam, 50 steps,
// same seed; 4 replicas agree with one device to a relative 1e-4.
TEST_P(MirroredAlgorithmTest, FourReplicasMatchOneDeviceOnTheSeedModel) {
  StrategyOptions o;
  o.model = MakeMlp();
  o.global_batch = 256;
  o.seed = 42;
  auto one = MirroredStrategy::Create(Gpus(1), o);
  auto four = MirroredStrategy::Create(FourReplicas(GetParam()), o, GetParam());
  ASSERT_THAT(one.status(), IsOk());
  ASSERT_THAT(four.status(), IsOk());
  EXPECT_EQ((*four)->algorithm(), GetParam());
  Data d = MakeData(256 * 5, 784, 10, 3);
  for (int step = 0; step < 50; ++step) {
    const int off = (step % 5) * 256;
    ASSERT_THAT((*one)->Step(d.x.data() + off * 784, d.y.data() + off, 256), IsOk());
    ASSERT_THAT((*four)->Step(d.x.data() + off * 784, d.y.data() + off, 256), IsOk());
  }
  auto a = (*one)->Params();
  auto b = (*four)->Params();
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  const double rel = RelativeDifference(*b, *a);
  EXPECT_LT(rel, 1e-4);
  std::vector<float> init = o.model->InitialParams(o.seed);
  EXPECT_GT(RelativeDifference(*a, init), 1e-3) << "training did not move the weights";
  // And training worked: the loss went down on these separable data.
  auto t = (*four)->Evaluate(d.x.data(), d.y.data(), 256 * 5);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_GT(t->accuracy(), 0.9);
}

INSTANTIATE_TEST_SUITE_P(HostAlgorithms, MirroredAlgorithmTest,
                         ::testing::Values(AllReduceAlgorithm::kLocal, AllReduceAlgorithm::kNccl,
                                           AllReduceAlgorithm::kHierarchical,
                                           AllReduceAlgorithm::kViaHost),
                         [](const auto& info) {
                           std::string name(AllReduceAlgorithmName(info.param));
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

TEST_F(MirroredTest, SplitKeepsTheRemainder) {
  int total = 0;
  for (int i = 0; i < 4; ++i) total += MirroredStrategy::RowsForReplica(10, 4, i);
  EXPECT_EQ(total, 10);
  EXPECT_EQ(MirroredStrategy::RowsForReplica(10, 4, 0), 3);
  EXPECT_EQ(MirroredStrategy::RowsForReplica(10, 4, 3), 2);
  EXPECT_EQ(MirroredStrategy::RowsForReplica(3, 4, 3), 0);
}

TEST_F(MirroredTest, UnevenBatchMatchesOneDevice) {
  // 3 replicas with a batch of 11 (4, 4, 3) compute the gradient of all 11 examples.
  StrategyOptions o = SmallOptions(11);
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.lr = 0.1f;
  auto one = MirroredStrategy::Create(Gpus(1), o);
  auto three =
      MirroredStrategy::Create({runtime_->gpus()[1], runtime_->gpus()[2], runtime_->gpus()[3]}, o);
  ASSERT_THAT(one.status(), IsOk());
  ASSERT_THAT(three.status(), IsOk());
  Data d = MakeData(110, 32, 5, 2);
  for (int step = 0; step < 10; ++step) {
    ASSERT_THAT((*one)->Step(d.x.data() + step * 11 * 32, d.y.data() + step * 11, 11), IsOk());
    ASSERT_THAT((*three)->Step(d.x.data() + step * 11 * 32, d.y.data() + step * 11, 11), IsOk());
  }
  auto a = (*one)->Params();
  auto b = (*three)->Params();
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_LT(RelativeDifference(*b, *a), 1e-5);
  auto ta = (*one)->Flush();
  auto tb = (*three)->Flush();
  EXPECT_NEAR(ta->mean_loss(), tb->mean_loss(), 1e-4);
  EXPECT_EQ(ta->examples, tb->examples);
}

TEST_F(MirroredTest, Errors) {
  EXPECT_THAT(MirroredStrategy::Create({}, SmallOptions(8)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(MirroredStrategy::Create(Gpus(2), SmallOptions(0)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("global batch")));
  auto m = MirroredStrategy::Create(Gpus(2), SmallOptions(8));
  ASSERT_THAT(m.status(), IsOk());
  Data d = MakeData(16, 32, 5, 4);
  EXPECT_THAT((*m)->Step(d.x.data(), d.y.data(), 9),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1..8")));
  EXPECT_THAT((*m)->ReplicaParams(2).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  // A bad label fails the step's stream; the sticky error comes back from a later enqueue of
  // the same step or at Flush, whichever sees it first.
  d.y[0] = 77;
  absl::Status step = (*m)->Step(d.x.data(), d.y.data(), 8);
  absl::Status flushed = (*m)->Flush().status();
  EXPECT_THAT(step.ok() ? flushed : step,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("label 77")));
  EXPECT_FALSE(flushed.ok());
  EXPECT_THAT((*m)->PlacementReport(), HasSubstr("replica 1 -> "));
}

// The strategy names have one table: every kind parses back from its name, and a bad name
// lists the choices.
TEST(StrategyKindTest, NamesRoundTrip) {
  for (StrategyKind kind : AllStrategyKinds()) {
    EXPECT_THAT(ParseStrategyKind(StrategyKindName(kind)), ::vgpu::testing::IsOkAndHolds(kind));
  }
  EXPECT_EQ(AllStrategyKinds().size(), 6u);
  EXPECT_EQ(StrategyKindName(StrategyKind::kModelParallel), "model-parallel");
  EXPECT_EQ(StrategyKindName(StrategyKind::kMultiWorkerMirrored), "multi-worker-mirrored");
  EXPECT_EQ(StrategyKindName(StrategyKind::kParameterServer), "parameter-server");
  EXPECT_TRUE(IsClusterStrategy(StrategyKind::kParameterServer));
  EXPECT_FALSE(IsClusterStrategy(StrategyKind::kMirrored));
  EXPECT_THAT(ParseStrategyKind("Central-Storage"),
              ::vgpu::testing::IsOkAndHolds(StrategyKind::kCentralStorage));
  EXPECT_THAT(ParseStrategyKind("ring").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'ring'; use single, mirrored, model-parallel, central-storage")));
}

TEST_F(MirroredTest, OutOfMemoryNamesTheDevice) {
  auto small = testing::CreateTestingRuntime(platform_.get(), 0, {kMinLogicalDeviceBytes});
  ASSERT_THAT(small.status(), IsOk());
  StrategyOptions o;  // the seed model needs ~4 MiB
  o.model = MakeMlp();
  EXPECT_THAT(MirroredStrategy::Create((*small)->gpus(), o).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("GPU:0")));
}

}  // namespace
}  // namespace vgpu::strategies
