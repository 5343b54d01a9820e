// Fixture shared by the cuda platform's tests (the fake-driver unit test and the real-GPU test):
// buffers on the cuda executor under test and on a host-platform executor, freed in TearDown,
// and the check that a kernel computes the same on both. The subclass's SetUp sets exec_ and
// stream_ and calls SetUpHost.
//
// Thread safety: a GoogleTest fixture, used from the test's thread.
#ifndef VGPU_TESTS_CUDA_TEST_UTIL_H_
#define VGPU_TESTS_CUDA_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu::testing {

// The cuda platform's device 0, or null with the reason in `why` (no driver, no device): the
// gpu-labelled tests GTEST_SKIP with it.
inline Executor* FirstCudaExecutor(std::string* why) {
  absl::StatusOr<Platform*> p = GetPlatform("cuda");
  if (!p.ok() || (*p)->DeviceCount() == 0) {
    *why = p.ok() ? (*p)->Summary() : p.status().ToString();
    return nullptr;
  }
  absl::StatusOr<Executor*> e = (*p)->GetExecutor(0);
  if (!e.ok()) *why = e.status().ToString();
  return e.ok() ? *e : nullptr;
}

class CudaVsHostTest : public ::testing::Test {
 protected:
  // The host platform (one device of `bytes`) the cuda results are compared with.
  void SetUpHost(uint64_t bytes) {
    HostPlatformOptions options;
    options.device_bytes = {bytes};
    auto h = HostPlatform::Create(options);
    ASSERT_THAT(h, IsOk());
    host_ = *std::move(h);
    host_exec_ = *host_->GetExecutor(0);
    host_stream_ = *host_exec_->CreateStream(StreamOptions{});
  }
  void TearDown() override {
    // Streams first: a test may leave one with a sticky error.
    stream_.reset();
    host_stream_.reset();
    for (auto& [e, p] : owned_) EXPECT_THAT(e->Free(p), IsOk());
  }

  // A device buffer on `e` holding `values` (freed in TearDown).
  template <typename T>
  T* Upload(Executor* e, Stream* s, const std::vector<T>& values) {
    auto p = e->Allocate(std::max<size_t>(values.size() * sizeof(T), 4));
    EXPECT_THAT(p, IsOk());
    if (!p.ok()) return nullptr;
    owned_.push_back({e, *p});
    if (!values.empty()) {
      EXPECT_THAT(s->MemcpyH2D(*p, values.data(), values.size() * sizeof(T)), IsOk());
      // `values` may be a temporary: the copy must finish before it dies.
      EXPECT_THAT(s->Synchronize(), IsOk());
    }
    return static_cast<T*>(*p);
  }
  template <typename T>
  std::vector<T> Download(Stream* s, const T* p, size_t n) {
    std::vector<T> out(n);
    EXPECT_THAT(s->MemcpyD2H(out.data(), p, n * sizeof(T)), IsOk());
    EXPECT_THAT(s->Synchronize(), IsOk());
    return out;
  }
  static std::vector<float> Random(size_t n, uint32_t seed, float lo = -2, float hi = 2) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
  }
  static void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tol) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "at " << i;
    }
  }

  // Runs `op(kernels, stream, buffers)` on both platforms over the same float inputs and
  // compares buffer `out_index` afterwards.
  template <typename Op>
  void CompareWithHost(std::vector<std::vector<float>> buffers, size_t out_index, Op op,
                       float tol = 1e-5f) {
    Kernels* ck = *exec_->GetKernels();
    Kernels* hk = *host_exec_->GetKernels();
    std::vector<float*> c, h;
    for (const auto& b : buffers) {
      c.push_back(Upload(exec_, stream_.get(), b));
      h.push_back(Upload(host_exec_, host_stream_.get(), b));
    }
    ASSERT_THAT(op(ck, stream_.get(), c), IsOk());
    ASSERT_THAT(op(hk, host_stream_.get(), h), IsOk());
    size_t n = buffers[out_index].size();
    ExpectNear(Download(stream_.get(), c[out_index], n),
               Download(host_stream_.get(), h[out_index], n), tol);
  }

  Executor* exec_ = nullptr;  // the cuda executor under test
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<HostPlatform> host_;
  Executor* host_exec_ = nullptr;
  std::unique_ptr<Stream> host_stream_;
  std::vector<std::pair<Executor*, void*>> owned_;
};

}  // namespace vgpu::testing

#endif  // VGPU_TESTS_CUDA_TEST_UTIL_H_
