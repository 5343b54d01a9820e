// nn: Dense/ReLU/softmax-xent forward and backward on a device against a float64 host
// reference, Glorot init, optimizers, and the stage/chain plumbing.
#include "vgpu/strategies/nn.h"

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/strategies/stage_chain.h"
#include "vgpu/strategies/tensor.h"
#include "vgpu/tests/testing_runtime.h"

namespace vgpu::strategies {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Loss (mean over rows) and its gradient w.r.t. every parameter, in double.
// With `correct`, also the number of rows whose largest logit is the label's.
double Reference(const MlpSpec& spec, const std::vector<float>& params, const std::vector<float>& x,
                 const std::vector<int32_t>& y, int rows, std::vector<double>* grad,
                 int64_t* correct = nullptr) {
  const int L = spec.num_layers();
  std::vector<std::vector<double>> acts(L + 1);
  acts[0].assign(x.begin(), x.end());
  for (int l = 0; l < L; ++l) {
    const int in = spec.in(l), out = spec.out(l);
    const float* w = params.data() + spec.ParamOffset(l);
    const float* b = w + in * out;
    acts[l + 1].assign(static_cast<size_t>(rows) * out, 0.0);
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < out; ++o) {
        double s = b[o];
        for (int i = 0; i < in; ++i) s += acts[l][r * in + i] * w[i * out + o];
        acts[l + 1][r * out + o] = (l + 1 < L) ? std::max(s, 0.0) : s;
      }
    }
  }
  const int C = spec.sizes.back();
  double loss = 0;
  std::vector<double> dy(static_cast<size_t>(rows) * C);
  if (correct != nullptr) *correct = 0;
  for (int r = 0; r < rows; ++r) {
    double mx = -1e300;
    int best = 0;
    for (int c = 0; c < C; ++c) {
      if (acts[L][r * C + c] > mx) best = c;
      mx = std::max(mx, acts[L][r * C + c]);
    }
    if (correct != nullptr && best == y[r]) ++*correct;
    double sum = 0;
    for (int c = 0; c < C; ++c) sum += std::exp(acts[L][r * C + c] - mx);
    loss += std::log(sum) - (acts[L][r * C + y[r]] - mx);
    for (int c = 0; c < C; ++c) {
      dy[r * C + c] = (std::exp(acts[L][r * C + c] - mx) / sum - (c == y[r])) / rows;
    }
  }
  grad->assign(spec.TotalParams(), 0.0);
  for (int l = L - 1; l >= 0; --l) {
    const int in = spec.in(l), out = spec.out(l);
    const float* w = params.data() + spec.ParamOffset(l);
    double* gw = grad->data() + spec.ParamOffset(l);
    double* gb = gw + in * out;
    std::vector<double> dx(static_cast<size_t>(rows) * in, 0.0);
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < out; ++o) {
        double g = dy[r * out + o];
        if (l + 1 < L && acts[l + 1][r * out + o] <= 0) g = 0;
        gb[o] += g;
        for (int i = 0; i < in; ++i) {
          gw[i * out + o] += acts[l][r * in + i] * g;
          dx[r * in + i] += w[i * out + o] * g;
        }
      }
    }
    dy.swap(dx);
  }
  return loss / rows;
}

class NnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostPlatformOptions o;
    o.device_bytes = {256 * kMiB};
    auto p = HostPlatform::Create(o);
    ASSERT_THAT(p.status(), IsOk());
    platform_ = *std::move(p);
    auto set = testing::CreateTestingRuntime(platform_.get(), 0, {16 * kMiB, 16 * kMiB, 16 * kMiB});
    ASSERT_THAT(set.status(), IsOk());
    runtime_ = *std::move(set);
  }
  std::unique_ptr<HostPlatform> platform_;
  std::unique_ptr<Runtime> runtime_;
};

TEST_F(NnTest, SpecLayoutAndInit) {
  MlpSpec spec;
  EXPECT_EQ(spec.TotalParams(), 784u * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10);
  EXPECT_EQ(spec.ParamOffset(1), 784u * 256 + 256);
  std::vector<float> a = GlorotUniformInit(spec, 5), b = GlorotUniformInit(spec, 5);
  std::vector<float> c = GlorotUniformInit(spec, 6);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const float limit = std::sqrt(6.0f / (784 + 256));
  for (uint64_t i = 0; i < 784u * 256; ++i) ASSERT_LE(std::fabs(a[i]), limit);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(a[784 * 256 + i], 0.0f);  // biases start at zero
  MlpSpec bad;
  bad.sizes = {3};
  EXPECT_THAT(bad.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseOptimizer("ADAM"), ::vgpu::testing::IsOkAndHolds(OptimizerKind::kAdam));
  EXPECT_THAT(ParseOptimizer("lbfgs").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lbfgs")));
}

// One stage, and the same model split in stages over three devices, give the reference
// loss and gradients.
TEST_F(NnTest, GradientsMatchFloat64Reference) {
  MlpSpec spec;
  spec.sizes = {12, 9, 7, 4};
  const int rows = 6;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(rows * 12);
  for (float& v : x) v = u(rng);
  std::vector<int32_t> y = {0, 3, 1, 2, 3, 0};
  std::vector<float> params = GlorotUniformInit(spec, 9);
  for (int i = 0; i < 9; ++i) params[spec.ParamOffset(0) + 12 * 9 + i] = 0.1f * (i - 4);
  std::vector<double> want;
  int64_t want_correct = 0;
  const double want_loss = Reference(spec, params, x, y, rows, &want, &want_correct);

  for (int split : {1, 3}) {
    std::vector<std::unique_ptr<ModelStage>> stages;
    OptimizerOptions opt;
    for (int l = 0; l < 3;) {
      int last = split == 1 ? 3 : l + 1;
      auto s = MlpStage::Create(runtime_->gpus()[split == 1 ? 0 : l], spec, l, last, rows, opt, 4);
      ASSERT_THAT(s.status(), IsOk());
      stages.push_back(*std::move(s));
      l = last;
    }
    auto chain = StageChain::Create(std::move(stages));
    ASSERT_THAT(chain.status(), IsOk());
    ASSERT_THAT((*chain)->LoadParams(params), IsOk());
    ASSERT_THAT((*chain)->Upload(x.data(), y.data(), rows), IsOk());
    ASSERT_THAT((*chain)->Forward(rows), IsOk());
    ASSERT_THAT((*chain)->back()->Loss(rows, 1.0f / rows, 0), IsOk());
    ASSERT_THAT((*chain)->Backward(rows), IsOk());
    double loss = 0;
    int64_t correct = 0;
    ASSERT_THAT((*chain)->back()->AccumulateSlots(1, loss, correct), IsOk());
    EXPECT_NEAR(loss / rows, want_loss, 1e-5) << "split " << split;
    EXPECT_EQ(correct, want_correct) << "split " << split;
    for (const auto& s : (*chain)->stages()) {
      std::vector<float> g(s->param_count());
      ASSERT_THAT(s->stream()->MemcpyD2H(g.data(), s->grads(), g.size() * 4), IsOk());
      ASSERT_THAT(s->stream()->Synchronize(), IsOk());
      const uint64_t off = spec.ParamOffset(s->first());
      for (size_t i = 0; i < g.size(); ++i) {
        ASSERT_NEAR(g[i], want[off + i], 1e-5) << "split " << split << " param " << off + i;
      }
    }
  }
}

TEST_F(NnTest, SgdAndAdamSteps) {
  MlpSpec spec;
  spec.sizes = {2, 2};
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdam}) {
    OptimizerOptions opt;
    opt.kind = kind;
    opt.lr = 0.5f;
    auto s = MlpStage::Create(runtime_->gpus()[0], spec, 0, 1, 1, opt, 1);
    ASSERT_THAT(s.status(), IsOk());
    std::vector<float> p = {1, 2, 3, 4, 0, 0};
    ASSERT_THAT((*s)->LoadParams(p), IsOk());
    std::vector<float> g = {1, -1, 2, 0, 0.5f, 0};
    ASSERT_THAT((*s)->stream()->MemcpyH2D((*s)->grads(), g.data(), 24), IsOk());
    ASSERT_THAT((*s)->Update(1), IsOk());
    std::vector<float> out;
    ASSERT_THAT((*s)->ReadParams(out), IsOk());
    if (kind == OptimizerKind::kSgd) {
      EXPECT_THAT(out, ::testing::ElementsAre(0.5f, 2.5f, 2.0f, 4.0f, -0.25f, 0.0f));
    } else {
      // Adam's first step moves every parameter with a nonzero gradient by ~lr * sign(g).
      EXPECT_NEAR(out[0], 0.5f, 1e-5);
      EXPECT_NEAR(out[1], 2.5f, 1e-5);
      EXPECT_NEAR(out[2], 2.5f, 1e-5);
      EXPECT_EQ(out[3], 4.0f);
      EXPECT_NEAR(out[4], -0.5f, 1e-5);
    }
    EXPECT_THAT((*s)->UpdateRange(2, (*s)->grads(), 4, 9),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
}

// Adam over many steps against a float64 Kingma & Ba reference (bias correction at every
// step), on a length that leaves a tail after the vector loop.
TEST_F(NnTest, AdamMatchesFloat64ReferenceOverSteps) {
  constexpr int kCount = 37, kSteps = 12;
  constexpr float kLr = 0.01f, kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-7f;
  LogicalDevice* dev = runtime_->gpus()[0];
  auto kernels = dev->executor()->GetKernels();
  ASSERT_THAT(kernels.status(), IsOk());
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> p0(kCount);
  for (float& v : p0) v = u(rng);
  auto param = Tensor::FromHost(dev, {kCount}, p0);
  auto m = Tensor::FromHost(dev, {kCount}, std::vector<float>(kCount, 0.0f));
  auto v = Tensor::FromHost(dev, {kCount}, std::vector<float>(kCount, 0.0f));
  auto grad = Tensor::FromHost(dev, {kCount}, std::vector<float>(kCount, 0.0f));
  ASSERT_THAT(param.status(), IsOk());
  ASSERT_THAT(m.status(), IsOk());
  ASSERT_THAT(v.status(), IsOk());
  ASSERT_THAT(grad.status(), IsOk());
  std::vector<double> rp(p0.begin(), p0.end()), rm(kCount, 0.0), rv(kCount, 0.0);
  for (int step = 1; step <= kSteps; ++step) {
    std::vector<float> g(kCount);
    for (float& x : g) x = u(rng);
    ASSERT_THAT(dev->stream()->MemcpyH2D(grad->data(), g.data(), kCount * 4), IsOk());
    ASSERT_THAT((*kernels)->AdamUpdate(dev->stream(), kCount, kLr, kBeta1, kBeta2, kEps, step,
                                       grad->data(), m->data(), v->data(), param->data()),
                IsOk());
    const double c1 = 1.0 - std::pow(double{kBeta1}, step);
    const double c2 = 1.0 - std::pow(double{kBeta2}, step);
    for (int i = 0; i < kCount; ++i) {
      rm[i] = kBeta1 * rm[i] + (1.0 - kBeta1) * g[i];
      rv[i] = kBeta2 * rv[i] + (1.0 - kBeta2) * double{g[i]} * g[i];
      rp[i] -= kLr * (rm[i] / c1) / (std::sqrt(rv[i] / c2) + kEps);
    }
    auto out = param->ToHost();
    ASSERT_THAT(out.status(), IsOk());
    for (int i = 0; i < kCount; ++i) {
      ASSERT_NEAR((*out)[i], rp[i], 1e-5) << "step " << step << " element " << i;
    }
  }
  // The parameters moved (about lr per step): the test is not vacuous.
  EXPECT_GT(std::fabs(rp[0] - p0[0]), 0.01);
}

TEST_F(NnTest, StageAndChainErrors) {
  MlpSpec spec;
  spec.sizes = {4, 3, 2};
  OptimizerOptions opt;
  EXPECT_THAT(MlpStage::Create(runtime_->gpus()[0], spec, 1, 1, 4, opt, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layer range")));
  EXPECT_THAT(MlpStage::Create(runtime_->gpus()[0], spec, 0, 2, 0, opt, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  auto first = MlpStage::Create(runtime_->gpus()[0], spec, 0, 1, 4, opt, 1);
  ASSERT_THAT(first.status(), IsOk());
  EXPECT_THAT((*first)->Loss(4, 1.0f, 0), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT((*first)->Forward(5), StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<std::unique_ptr<ModelStage>> only_first;
  only_first.push_back(*std::move(first));
  EXPECT_THAT(StageChain::Create(std::move(only_first)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("last layer")));
  EXPECT_GT(StageBytes(spec, 0, 2, 4, opt, 1),
            StageBytes(spec, 0, 2, 4, OptimizerOptions{OptimizerKind::kSgd}, 1));
}

}  // namespace
}  // namespace vgpu::strategies
