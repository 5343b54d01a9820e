// All-reduce algorithms against a float64 reference (host platform), and the topology table.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/strategies/collectives.h"
#include "vgpu/strategies/tensor.h"
#include "vgpu/tests/testing_runtime.h"

namespace vgpu::strategies {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::unique_ptr<HostPlatform> MakePlatform(std::vector<uint64_t> bytes) {
  HostPlatformOptions o;
  o.device_bytes = std::move(bytes);
  auto p = HostPlatform::Create(o);
  EXPECT_THAT(p.status(), IsOk());
  return *std::move(p);
}

struct Case {
  int replicas;
  uint64_t count;
};

// The replicas laid out as each algorithm's row of the topology table: local and via-host on
// one physical device; NCCL one replica per physical device; hierarchical over two physical
// devices (three for 8 replicas: 3 + 3 + 2), several replicas each where there are enough.
struct Topology {
  std::unique_ptr<HostPlatform> platform;
  std::unique_ptr<Runtime> runtime;
  std::vector<LogicalDevice*> gpus;
};

std::vector<int> ReplicasPerPhysical(AllReduceAlgorithm algorithm, int replicas) {
  switch (algorithm) {
    case AllReduceAlgorithm::kNccl:
      return std::vector<int>(replicas, 1);
    case AllReduceAlgorithm::kHierarchical: {
      const int physical = replicas >= 8 ? 3 : 2;
      std::vector<int> out(physical, replicas / physical);
      for (int i = 0; i < replicas % physical; ++i) ++out[i];
      return out;
    }
    default:
      return {replicas};
  }
}

Topology MakeTopology(AllReduceAlgorithm algorithm, int replicas, uint64_t bytes_each) {
  Topology t;
  std::vector<int> per = ReplicasPerPhysical(algorithm, replicas);
  std::vector<uint64_t> physical_bytes;
  for (int n : per) physical_bytes.push_back(n * bytes_each + 16 * kMiB);
  t.platform = MakePlatform(physical_bytes);
  std::vector<testing::PhysicalSlices> slices;
  for (size_t p = 0; p < per.size(); ++p) {
    slices.push_back({static_cast<int>(p), std::vector<uint64_t>(per[p], bytes_each)});
  }
  auto runtime = testing::CreateTestingRuntime(t.platform.get(), slices);
  EXPECT_THAT(runtime.status(), IsOk());
  if (!runtime.ok()) return t;
  t.runtime = *std::move(runtime);
  t.gpus = t.runtime->gpus();
  return t;
}

class AllReduceTest : public ::testing::TestWithParam<std::tuple<AllReduceAlgorithm, Case>> {};

TEST_P(AllReduceTest, MatchesFloat64Reference) {
  const auto [algorithm, c] = GetParam();
  Topology topo = MakeTopology(algorithm, c.replicas, 8 * kMiB);
  ASSERT_EQ(topo.gpus.size(), static_cast<size_t>(c.replicas));
  // The table itself picks this algorithm for this layout (via-host is only ever explicit).
  if (algorithm != AllReduceAlgorithm::kViaHost && c.replicas > 1) {
    const int physical = static_cast<int>(ReplicasPerPhysical(algorithm, c.replicas).size());
    if (algorithm != AllReduceAlgorithm::kHierarchical || physical < c.replicas) {
      EXPECT_EQ(ChooseAllReduceAlgorithm(topo.gpus), algorithm);
    }
  }
  auto reducer = AllReducer::Create(topo.gpus, algorithm);
  ASSERT_THAT(reducer.status(), IsOk());
  EXPECT_EQ((*reducer)->algorithm(), algorithm);

  std::mt19937 rng(c.replicas * 1000 + c.count);
  std::uniform_real_distribution<float> dist(-10.0f, 10.0f);
  std::vector<std::vector<float>> host(c.replicas, std::vector<float>(c.count));
  std::vector<double> sum(c.count, 0.0), abs_sum(c.count, 0.0);
  std::vector<Tensor> tensors;
  std::vector<float*> buffers;
  for (int r = 0; r < c.replicas; ++r) {
    for (uint64_t i = 0; i < c.count; ++i) {
      host[r][i] = dist(rng);
      sum[i] += host[r][i];
      abs_sum[i] += std::fabs(host[r][i]);
    }
    auto t = Tensor::FromHost(topo.gpus[r], {static_cast<int64_t>(c.count)}, host[r]);
    ASSERT_THAT(t.status(), IsOk());
    buffers.push_back(t->data());
    tensors.push_back(*std::move(t));
  }
  for (AllReduceOp op : {AllReduceOp::kSum, AllReduceOp::kMean}) {
    // Sum first, then the mean of the (identical) sums.
    ASSERT_THAT((*reducer)->AllReduce(buffers, c.count, op), IsOk());
    const double scale = op == AllReduceOp::kMean ? 1.0 / c.replicas : 1.0;
    std::vector<float> first;
    for (int r = 0; r < c.replicas; ++r) {
      auto out = tensors[r].ToHost();
      ASSERT_THAT(out.status(), IsOk());
      if (r == 0) first = *out;
      // Every replica holds exactly the same bits.
      ASSERT_EQ(std::memcmp(out->data(), first.data(), c.count * 4), 0) << "replica " << r;
      for (uint64_t i = 0; i < c.count; ++i) {
        const double want = sum[i] * scale;
        const double tol = 1e-6 * abs_sum[i] * c.replicas + 1e-6;
        ASSERT_NEAR((*out)[i], want, tol) << "element " << i << " replica " << r;
      }
    }
    // Next round reduces the (identical) results again: the new reference is N x them.
    for (uint64_t i = 0; i < c.count; ++i) {
      sum[i] = static_cast<double>(first[i]) * c.replicas;
      abs_sum[i] = std::fabs(first[i]) * c.replicas;
    }
  }
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (int n : {2, 3, 4, 8}) {
    for (uint64_t count : {uint64_t{1}, uint64_t{7}, uint64_t{1000003}}) out.push_back({n, count});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(HostAlgorithms, AllReduceTest,
                         ::testing::Combine(::testing::Values(AllReduceAlgorithm::kLocal,
                                                              AllReduceAlgorithm::kNccl,
                                                              AllReduceAlgorithm::kHierarchical,
                                                              AllReduceAlgorithm::kViaHost),
                                            ::testing::ValuesIn(Cases())),
                         [](const auto& info) {
                           const Case& c = std::get<1>(info.param);
                           std::string name(AllReduceAlgorithmName(std::get<0>(info.param)));
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name + "_" + std::to_string(c.replicas) + "x" +
                                  std::to_string(c.count);
                         });

TEST(AllReduceTest, MoreReplicasThanOneSumNTakes) {
  auto platform = MakePlatform({uint64_t{256} * kMiB});
  auto set = testing::CreateTestingRuntime(platform.get(), 0, std::vector<uint64_t>(20, 4 * kMiB));
  ASSERT_THAT(set.status(), IsOk());
  auto reducer = AllReducer::Create((*set)->gpus(), AllReduceAlgorithm::kLocal);
  ASSERT_THAT(reducer.status(), IsOk());
  std::vector<Tensor> tensors;
  std::vector<float*> buffers;
  for (int r = 0; r < 20; ++r) {
    std::vector<float> v(33, static_cast<float>(r + 1));
    auto t = Tensor::FromHost((*set)->gpus()[r], {33}, v);
    ASSERT_THAT(t.status(), IsOk());
    buffers.push_back(t->data());
    tensors.push_back(*std::move(t));
  }
  ASSERT_THAT((*reducer)->AllReduce(buffers, 33, AllReduceOp::kSum), IsOk());
  for (auto& t : tensors) {
    auto out = t.ToHost();
    ASSERT_THAT(out.status(), IsOk());
    EXPECT_THAT(*out, ::testing::Each(210.0f));
  }
}

TEST(AllReduceTest, ChoosesByTopology) {
  using T = DeviceTopology;
  for (const char* platform : {"cuda", "host"}) {
    SCOPED_TRACE(platform);
    EXPECT_EQ(ChooseAllReduceAlgorithm(std::vector<T>{{true, platform, 0}, {true, platform, 0}}),
              AllReduceAlgorithm::kLocal);
    EXPECT_EQ(ChooseAllReduceAlgorithm(std::vector<T>{{true, platform, 0}, {true, platform, 1}}),
              AllReduceAlgorithm::kNccl);
    EXPECT_EQ(ChooseAllReduceAlgorithm(
                  std::vector<T>{{true, platform, 0}, {true, platform, 0}, {true, platform, 1}}),
              AllReduceAlgorithm::kHierarchical);
    EXPECT_EQ(ChooseAllReduceAlgorithm(std::vector<T>{{true, platform, 0}, {false, platform, 0}}),
              AllReduceAlgorithm::kViaHost);
  }
  EXPECT_EQ(ChooseAllReduceAlgorithm(std::vector<T>{{true, "cuda", 0}, {true, "host", 1}}),
            AllReduceAlgorithm::kViaHost);
  EXPECT_EQ(ChooseAllReduceAlgorithm(std::vector<T>{}), AllReduceAlgorithm::kViaHost);
}

TEST(AllReduceTest, AutoOnHostFollowsTheTable) {
  auto platform = MakePlatform({64 * kMiB, 64 * kMiB});
  auto same = testing::CreateTestingRuntime(platform.get(), 0, {8 * kMiB, 8 * kMiB});
  ASSERT_THAT(same.status(), IsOk());
  auto r = AllReducer::Create((*same)->gpus());
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ((*r)->algorithm(), AllReduceAlgorithm::kLocal);
  auto with_cpu = AllReducer::Create({(*same)->gpus()[0], (*same)->cpu()});
  ASSERT_THAT(with_cpu.status(), IsOk());
  EXPECT_EQ((*with_cpu)->algorithm(), AllReduceAlgorithm::kViaHost);

  auto across = testing::CreateTestingRuntime(platform.get(), {{0, {8 * kMiB}}, {1, {8 * kMiB}}});
  ASSERT_THAT(across.status(), IsOk());
  auto r2 = AllReducer::Create((*across)->gpus());
  ASSERT_THAT(r2.status(), IsOk());
  EXPECT_EQ((*r2)->algorithm(), AllReduceAlgorithm::kNccl);
  EXPECT_EQ((*r2)->fallback_reason(), "");
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30};
  auto ta = Tensor::FromHost((*across)->gpus()[0], {3}, a);
  auto tb = Tensor::FromHost((*across)->gpus()[1], {3}, b);
  ASSERT_THAT(ta.status(), IsOk());
  ASSERT_THAT(tb.status(), IsOk());
  std::vector<float*> bufs = {ta->data(), tb->data()};
  ASSERT_THAT((*r2)->AllReduce(bufs, 3, AllReduceOp::kMean), IsOk());
  EXPECT_THAT(*ta->ToHost(), ::testing::ElementsAre(5.5f, 11.0f, 16.5f));
  EXPECT_THAT(*tb->ToHost(), ::testing::ElementsAre(5.5f, 11.0f, 16.5f));

  // The local algorithm refuses devices of two physical devices; NCCL two ranks on one GPU.
  EXPECT_THAT(AllReducer::Create((*across)->gpus(), AllReduceAlgorithm::kLocal).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("one physical device")));
  EXPECT_THAT(AllReducer::Create((*same)->gpus(), AllReduceAlgorithm::kNccl).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("one device per physical")));
}

// A rank whose stream has failed (sticky error, as after a CUDA fault) must not hang the
// others: they finish the collective, the failed stream keeps its error, and nothing waits
// forever.
TEST(AllReduceTest, FailedRankDoesNotHangTheOthers) {
  for (AllReduceAlgorithm algorithm :
       {AllReduceAlgorithm::kNccl, AllReduceAlgorithm::kHierarchical}) {
    SCOPED_TRACE(std::string(AllReduceAlgorithmName(algorithm)));
    Topology topo = MakeTopology(algorithm, 4, 4 * kMiB);
    ASSERT_EQ(topo.gpus.size(), 4u);
    auto reducer = AllReducer::Create(topo.gpus, algorithm);
    ASSERT_THAT(reducer.status(), IsOk());
    std::vector<Tensor> tensors;
    std::vector<float*> buffers;
    for (int r = 0; r < 4; ++r) {
      auto t = Tensor::FromHost(topo.gpus[r], {1000}, std::vector<float>(1000, r + 1.0f));
      ASSERT_THAT(t.status(), IsOk());
      buffers.push_back(t->data());
      tensors.push_back(*std::move(t));
    }
    // The next memcpy (on the last replica's stream) fails and makes that stream's error sticky.
    HostFaultInjection& f = topo.platform->faults();
    f.fail_memcpy_at = f.memcpy_calls.load() + 1;
    Stream* bad = topo.gpus[3]->stream();
    std::vector<float> scratch(1000);
    ASSERT_THAT(bad->MemcpyD2H(scratch.data(), buffers[3], 4000), IsOk());
    EXPECT_THAT(bad->Synchronize(), StatusIs(absl::StatusCode::kInternal));
    absl::Status s = (*reducer)->AllReduce(buffers, 1000, AllReduceOp::kSum);
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInternal, HasSubstr("injected")));
    for (int r = 0; r < 3; ++r) {
      EXPECT_THAT(topo.gpus[r]->stream()->Synchronize(), IsOk()) << "replica " << r;
    }
    EXPECT_THAT(bad->Synchronize(), StatusIs(absl::StatusCode::kInternal));
  }
}

TEST(AllReduceTest, BadArguments) {
  auto platform = MakePlatform({64 * kMiB});
  auto set = testing::CreateTestingRuntime(platform.get(), 0, {8 * kMiB, 8 * kMiB});
  ASSERT_THAT(set.status(), IsOk());
  EXPECT_THAT(AllReducer::Create({}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(AllReducer::Create({(*set)->gpus()[0], (*set)->gpus()[0]}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
  auto r = AllReducer::Create((*set)->gpus());
  ASSERT_THAT(r.status(), IsOk());
  std::vector<float*> one = {nullptr};
  EXPECT_THAT((*r)->AllReduce(one, 4, AllReduceOp::kSum),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2 devices")));
  std::vector<float*> nulls = {nullptr, nullptr};
  EXPECT_THAT((*r)->AllReduce(nulls, 4, AllReduceOp::kSum),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null")));
  EXPECT_THAT(ParseAllReduceAlgorithm("ring").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ring")));
  EXPECT_THAT(ParseAllReduceAlgorithm("Via-Host"),
              ::vgpu::testing::IsOkAndHolds(AllReduceAlgorithm::kViaHost));
}

}  // namespace
}  // namespace vgpu::strategies
