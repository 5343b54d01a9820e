// The conformance suite every Platform passes: discovery, memory accounting, stream and event
// ordering, memcpy round trips, BLAS and kernels against host references, virtual memory.
// A test file instantiates it with a PlatformFactory:
//   INSTANTIATE_TEST_SUITE_P(Host, PlatformConformance,
//                            ::testing::Values(PlatformFactory{"host", [] { ... }}));
// The fixture skips (GTEST_SKIP) when the platform has no device, so the cuda instance
// passes as "skipped" on GPU-less machines.
#ifndef VGPU_TESTS_PLATFORM_CONFORMANCE_H_
#define VGPU_TESTS_PLATFORM_CONFORMANCE_H_

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu::testing {

struct PlatformFactory {
  std::string name;
  std::function<Platform*()> get;
};
inline std::ostream& operator<<(std::ostream& os, const PlatformFactory& f) { return os << f.name; }

class PlatformConformance : public ::testing::TestWithParam<PlatformFactory> {
 protected:
  void SetUp() override {
    platform_ = GetParam().get();
    ASSERT_NE(platform_, nullptr);
    if (platform_->DeviceCount() == 0) {
      GTEST_SKIP() << platform_->name() << " has no device: " << platform_->Summary();
    }
    auto e = platform_->GetExecutor(0);
    ASSERT_THAT(e, IsOk());
    exec_ = *e;
    auto s = exec_->CreateStream(StreamOptions{});
    ASSERT_THAT(s, IsOk());
    stream_ = std::move(*s);
  }

  // Device buffer freed at scope exit.
  struct Mem {
    Mem(Executor* e, void* p) : e(e), p(p) {}
    Mem(Mem&& o) noexcept : e(o.e), p(std::exchange(o.p, nullptr)) {}
    Mem(const Mem&) = delete;
    Mem& operator=(const Mem&) = delete;
    Executor* e;
    void* p;
    ~Mem() {
      if (p != nullptr) EXPECT_THAT(e->Free(p), IsOk());
    }
  };
  Mem Alloc(uint64_t bytes) {
    auto p = exec_->Allocate(bytes);
    EXPECT_THAT(p, IsOk());
    return Mem{exec_, p.ok() ? *p : nullptr};
  }

  Platform* platform_ = nullptr;
  Executor* exec_ = nullptr;
  std::unique_ptr<Stream> stream_;
};

TEST_P(PlatformConformance, DiscoversDevices) {
  EXPECT_FALSE(platform_->name().empty());
  EXPECT_FALSE(platform_->Summary().empty());
  for (int i = 0; i < platform_->DeviceCount(); ++i) {
    auto info = platform_->Describe(i);
    ASSERT_THAT(info, IsOk());
    EXPECT_EQ(info->ordinal, i);
    EXPECT_FALSE(info->name.empty());
    EXPECT_FALSE(info->uuid.empty());
    EXPECT_FALSE(info->pci_bus_id.empty());
    EXPECT_GT(info->total_bytes, 0u);
    EXPECT_LE(info->free_bytes, info->total_bytes);
    auto e = platform_->GetExecutor(i);
    ASSERT_THAT(e, IsOk());
    EXPECT_EQ((*e)->ordinal(), i);
    EXPECT_EQ((*e)->platform(), platform_);
  }
  EXPECT_THAT(platform_->Describe(platform_->DeviceCount()), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(platform_->GetExecutor(-1), StatusIs(absl::StatusCode::kNotFound));
}

TEST_P(PlatformConformance, AccountsMemoryAndRejectsBadFrees) {
  auto before = exec_->Describe();
  ASSERT_THAT(before, IsOk());
  constexpr uint64_t kBytes = 64 << 20;
  {
    Mem m = Alloc(kBytes);
    ASSERT_NE(m.p, nullptr);
    auto during = exec_->Describe();
    ASSERT_THAT(during, IsOk());
    // Other processes may allocate on a real GPU; our allocation must show at least.
    EXPECT_LE(during->free_bytes + kBytes, before->free_bytes + (before->total_bytes / 100));
    int local = 0;
    EXPECT_THAT(exec_->Free(&local), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  auto after = exec_->Describe();
  ASSERT_THAT(after, IsOk());
  EXPECT_GE(after->free_bytes + before->total_bytes / 100, before->free_bytes);
  // More than the device has fails cleanly, and the device still works.
  EXPECT_THAT(exec_->Allocate(before->total_bytes + (uint64_t{1} << 30)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  auto p = exec_->Allocate(1 << 20);
  ASSERT_THAT(p, IsOk());
  EXPECT_THAT(exec_->Free(*p), IsOk());
  EXPECT_THAT(exec_->Free(*p), StatusIs(absl::StatusCode::kInvalidArgument));  // double free
}

TEST_P(PlatformConformance, MemcpyRoundTrip) {
  constexpr size_t kCount = (1 << 20) + 13;
  std::vector<uint32_t> host(kCount), back(kCount, 0);
  std::mt19937 rng(42);
  for (auto& v : host) v = rng();
  Mem a = Alloc(kCount * 4), b = Alloc(kCount * 4);
  ASSERT_THAT(stream_->MemcpyH2D(a.p, host.data(), kCount * 4), IsOk());
  ASSERT_THAT(stream_->MemcpyD2D(b.p, a.p, kCount * 4), IsOk());
  ASSERT_THAT(stream_->MemcpyD2H(back.data(), b.p, kCount * 4), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  EXPECT_EQ(host, back);
}

TEST_P(PlatformConformance, PeerCopyBetweenDevices) {
  if (platform_->DeviceCount() < 2) GTEST_SKIP() << "needs two devices";
  auto e1 = platform_->GetExecutor(1);
  ASSERT_THAT(e1, IsOk());
  std::vector<float> host(1000), back(1000);
  std::iota(host.begin(), host.end(), 0.5f);
  Mem a = Alloc(4000);
  auto b = (*e1)->Allocate(4000);
  ASSERT_THAT(b, IsOk());
  ASSERT_THAT(stream_->MemcpyH2D(a.p, host.data(), 4000), IsOk());
  ASSERT_THAT(stream_->MemcpyD2D(*b, a.p, 4000), IsOk());
  ASSERT_THAT(stream_->MemcpyD2H(back.data(), *b, 4000), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  EXPECT_EQ(host, back);
  EXPECT_THAT((*e1)->Free(*b), IsOk());
  // Memory of device 1 is not device 0's to free.
  auto c = (*e1)->Allocate(4096);
  ASSERT_THAT(c, IsOk());
  EXPECT_THAT(exec_->Free(*c), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*e1)->Free(*c), IsOk());
}

TEST_P(PlatformConformance, StreamRunsWorkInOrder) {
  constexpr size_t kCount = 4096;
  Mem d = Alloc(kCount * 4);
  std::vector<uint32_t> out(kCount);
  std::vector<int> order;
  std::mutex mu;
  for (uint32_t round = 1; round <= 20; ++round) {
    ASSERT_THAT(stream_->Memset32(d.p, round, kCount), IsOk());
    ASSERT_THAT(stream_->LaunchHostFunc([&, round] {
      std::lock_guard<std::mutex> l(mu);
      order.push_back(static_cast<int>(round));
    }), IsOk());
  }
  ASSERT_THAT(stream_->Memset8(d.p, 0xab, 8), IsOk());
  ASSERT_THAT(stream_->MemcpyD2H(out.data(), d.p, kCount * 4), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  EXPECT_EQ(out[0], 0xababababu);
  EXPECT_EQ(out[1], 0xababababu);
  EXPECT_EQ(out[2], 20u);
  EXPECT_EQ(out[kCount - 1], 20u);
  std::vector<int> expected(20);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(order, expected);
}

TEST_P(PlatformConformance, EventsOrderWorkAcrossStreams) {
  auto s2 = exec_->CreateStream(StreamOptions{});
  ASSERT_THAT(s2, IsOk());
  auto ev = exec_->CreateEvent();
  ASSERT_THAT(ev, IsOk());
  EXPECT_THAT((*ev)->Query(), IsOkAndHolds(true));  // never recorded
  constexpr size_t kCount = 1 << 20;
  Mem a = Alloc(kCount * 4), b = Alloc(kCount * 4);
  std::vector<uint32_t> out(kCount);
  for (int round = 0; round < 10; ++round) {
    // Stream 1 holds its work behind a host function so that stream 2 really has to wait.
    ASSERT_THAT(stream_->LaunchHostFunc([] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }), IsOk());
    ASSERT_THAT(stream_->Memset32(a.p, 1000 + round, kCount), IsOk());
    ASSERT_THAT(stream_->RecordEvent(ev->get()), IsOk());
    ASSERT_THAT((*s2)->WaitEvent(ev->get()), IsOk());
    ASSERT_THAT((*s2)->MemcpyD2D(b.p, a.p, kCount * 4), IsOk());
    ASSERT_THAT((*s2)->MemcpyD2H(out.data(), b.p, kCount * 4), IsOk());
    ASSERT_THAT((*s2)->Synchronize(), IsOk());
    EXPECT_EQ(out[0], 1000u + round);
    EXPECT_EQ(out[kCount - 1], 1000u + round);
    EXPECT_THAT((*ev)->Synchronize(), IsOk());
    EXPECT_THAT((*ev)->Query(), IsOkAndHolds(true));
  }
}

TEST_P(PlatformConformance, StreamPrioritiesAreClamped) {
  auto [least, greatest] = exec_->StreamPriorityRange();
  EXPECT_LE(greatest, least);
  auto hi = exec_->CreateStream(StreamOptions{.priority = greatest - 100});
  ASSERT_THAT(hi, IsOk());
  EXPECT_EQ((*hi)->priority(), greatest);
  auto lo = exec_->CreateStream(StreamOptions{.priority = least + 100});
  ASSERT_THAT(lo, IsOk());
  EXPECT_EQ((*lo)->priority(), least);
}

// Column-major reference.
inline void ReferenceSgemm(bool ta, bool tb, int m, int n, int k, float alpha,
                           const std::vector<float>& a, int lda, const std::vector<float>& b,
                           int ldb, float beta, std::vector<float>& c, int ldc) {
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int p = 0; p < k; ++p) {
        double av = ta ? a[p + i * lda] : a[i + p * lda];
        double bv = tb ? b[j + p * ldb] : b[p + j * ldb];
        acc += av * bv;
      }
      c[i + j * ldc] = static_cast<float>(alpha * acc + beta * c[i + j * ldc]);
    }
  }
}

TEST_P(PlatformConformance, SgemmMatchesReference) {
  auto blas = exec_->GetBlas();
  ASSERT_THAT(blas, IsOk());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  const int m = 37, n = 29, k = 53;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb);
      int lda = ta ? k : m, ldb = tb ? n : k, ldc = m;
      std::vector<float> a(lda * (ta ? m : k)), b(ldb * (tb ? k : n)), c(ldc * n), ref;
      for (auto* v : {&a, &b, &c}) for (auto& x : *v) x = dist(rng);
      ref = c;
      ReferenceSgemm(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, 0.5f, ref, ldc);
      Mem da = Alloc(a.size() * 4), db = Alloc(b.size() * 4), dc = Alloc(c.size() * 4);
      ASSERT_THAT(stream_->MemcpyH2D(da.p, a.data(), a.size() * 4), IsOk());
      ASSERT_THAT(stream_->MemcpyH2D(db.p, b.data(), b.size() * 4), IsOk());
      ASSERT_THAT(stream_->MemcpyH2D(dc.p, c.data(), c.size() * 4), IsOk());
      ASSERT_THAT((*blas)->Sgemm(stream_.get(), ta ? Transpose::kYes : Transpose::kNo,
                                 tb ? Transpose::kYes : Transpose::kNo, m, n, k, 0.75f,
                                 static_cast<float*>(da.p), lda, static_cast<float*>(db.p), ldb,
                                 0.5f, static_cast<float*>(dc.p), ldc),
                  IsOk());
      ASSERT_THAT(stream_->MemcpyD2H(c.data(), dc.p, c.size() * 4), IsOk());
      ASSERT_THAT(stream_->Synchronize(), IsOk());
      for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], ref[i], 1e-4) << i;
    }
  }
  // axpy and scal
  std::vector<float> x(1001), y(1001);
  std::iota(x.begin(), x.end(), 0.0f);
  std::fill(y.begin(), y.end(), 1.0f);
  Mem dx = Alloc(x.size() * 4), dy = Alloc(y.size() * 4);
  ASSERT_THAT(stream_->MemcpyH2D(dx.p, x.data(), x.size() * 4), IsOk());
  ASSERT_THAT(stream_->MemcpyH2D(dy.p, y.data(), y.size() * 4), IsOk());
  ASSERT_THAT((*blas)->Saxpy(stream_.get(), 1001, 2.0f, static_cast<float*>(dx.p), static_cast<float*>(dy.p)), IsOk());
  ASSERT_THAT((*blas)->Sscal(stream_.get(), 1001, 0.5f, static_cast<float*>(dy.p)), IsOk());
  ASSERT_THAT(stream_->MemcpyD2H(y.data(), dy.p, y.size() * 4), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  for (int i = 0; i < 1001; ++i) ASSERT_FLOAT_EQ(y[i], (2.0f * i + 1.0f) * 0.5f);
}

TEST_P(PlatformConformance, SumNKernelMatchesReference) {
  auto kernels = exec_->GetKernels();
  ASSERT_THAT(kernels, IsOk());
  for (int n : {1, 2, 3, 4, 8, 16}) {
    for (uint64_t count : {uint64_t{1}, uint64_t{7}, uint64_t{1000003}}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " count=" << count);
      std::vector<std::vector<float>> host(n, std::vector<float>(count));
      std::vector<Mem> dev;
      std::vector<const float*> ptrs;
      for (int j = 0; j < n; ++j) {
        for (uint64_t i = 0; i < count; ++i) host[j][i] = static_cast<float>((i * 7 + j * 13) % 101) - 50.0f;
        dev.push_back(Alloc(count * 4));
        ASSERT_THAT(stream_->MemcpyH2D(dev.back().p, host[j].data(), count * 4), IsOk());
        ptrs.push_back(static_cast<const float*>(dev.back().p));
      }
      // Output aliases input 0, as the in-place all-reduce uses it.
      float* out = static_cast<float*>(dev[0].p);
      ASSERT_THAT((*kernels)->SumN(stream_.get(), ptrs, out, count, 0.25f), IsOk());
      std::vector<float> got(count);
      ASSERT_THAT(stream_->MemcpyD2H(got.data(), out, count * 4), IsOk());
      ASSERT_THAT(stream_->Synchronize(), IsOk());
      for (uint64_t i = 0; i < count; ++i) {
        double ref = 0;
        for (int j = 0; j < n; ++j) ref += host[j][i];
        ASSERT_NEAR(got[i], 0.25 * ref, 1e-4) << i;
      }
    }
  }
  std::vector<const float*> too_many(Kernels::kMaxSumInputs + 1, nullptr);
  EXPECT_THAT((*kernels)->SumN(stream_.get(), too_many, nullptr, 1, 1.0f),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A mapping covers a whole physical allocation: an H200 (driver 580) answers
// CUDA_ERROR_NOT_SUPPORTED to an offset into it and to a part of it. Every platform keeps that
// rule, so code that passes on the host platform does not fail on a card.
TEST_P(PlatformConformance, VirtualMemoryMapsWholeAllocationsOnly) {
  auto g = exec_->VirtualMemoryGranularity();
  if (!g.ok()) GTEST_SKIP() << "no VMM: " << g.status();
  const uint64_t gran = *g;
  auto va = exec_->ReserveAddressRange(2 * gran);
  ASSERT_THAT(va, IsOk());
  auto h = exec_->CreatePhysicalMemory(2 * gran);
  ASSERT_THAT(h, IsOk());
  char* base = static_cast<char*>(*va);
  EXPECT_THAT(exec_->Map(base + gran, gran, *h, gran),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("whole")));
  EXPECT_THAT(exec_->Map(base, gran, *h, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("whole")));
  ASSERT_THAT(exec_->Map(base, 2 * gran, *h, 0), IsOk());
  std::vector<uint32_t> pattern(2 * gran / 4, 0x5a5a5a5au), back(2 * gran / 4);
  ASSERT_THAT(stream_->MemcpyH2D(base, pattern.data(), 2 * gran), IsOk());
  ASSERT_THAT(stream_->MemcpyD2H(back.data(), base, 2 * gran), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  EXPECT_EQ(back, pattern);
  EXPECT_THAT(exec_->Unmap(base, 2 * gran), IsOk());
  EXPECT_THAT(exec_->ReleasePhysicalMemory(*h), IsOk());
  // MapAll: allocations back to back, usable as one range, unmapped in one call.
  auto h0 = exec_->CreatePhysicalMemory(gran), h1 = exec_->CreatePhysicalMemory(gran);
  ASSERT_THAT(h0, IsOk());
  ASSERT_THAT(h1, IsOk());
  const PhysicalMemoryHandle both[] = {*h0, *h1};
  ASSERT_THAT(exec_->MapAll(base, both, 2), IsOk());
  ASSERT_THAT(stream_->MemcpyH2D(base, pattern.data(), 2 * gran), IsOk());
  ASSERT_THAT(stream_->MemcpyD2H(back.data(), base, 2 * gran), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  EXPECT_EQ(back, pattern);
  EXPECT_THAT(exec_->Unmap(base, 2 * gran), IsOk());
  EXPECT_THAT(exec_->ReleasePhysicalMemory(*h0), IsOk());
  EXPECT_THAT(exec_->ReleasePhysicalMemory(*h1), IsOk());
  EXPECT_THAT(exec_->FreeAddressRange(base, 2 * gran), IsOk());
}

TEST_P(PlatformConformance, VirtualMemoryStitchesGranules) {
  auto g = exec_->VirtualMemoryGranularity();
  if (!g.ok()) GTEST_SKIP() << "no VMM: " << g.status();
  const uint64_t gran = *g;
  auto va = exec_->ReserveAddressRange(2 * gran);
  ASSERT_THAT(va, IsOk());
  auto va2 = exec_->ReserveAddressRange(2 * gran);
  ASSERT_THAT(va2, IsOk());
  auto h0 = exec_->CreatePhysicalMemory(gran), h1 = exec_->CreatePhysicalMemory(gran);
  ASSERT_THAT(h0, IsOk());
  ASSERT_THAT(h1, IsOk());
  char* base = static_cast<char*>(*va);
  char* base2 = static_cast<char*>(*va2);
  // Granules in swapped order: the virtual range is contiguous, the physical memory is not.
  ASSERT_THAT(exec_->Map(base, gran, *h1, 0), IsOk());
  ASSERT_THAT(exec_->Map(base + gran, gran, *h0, 0), IsOk());
  ASSERT_THAT(exec_->Map(base2, gran, *h0, 0), IsOk());
  ASSERT_THAT(exec_->Map(base2 + gran, gran, *h1, 0), IsOk());
  const uint64_t n = 2 * gran / 4;
  std::vector<uint32_t> pattern(n), back(n);
  for (uint64_t i = 0; i < n; ++i) pattern[i] = static_cast<uint32_t>(i * 2654435761u);
  ASSERT_THAT(stream_->MemcpyH2D(base, pattern.data(), 2 * gran), IsOk());  // spans both
  ASSERT_THAT(stream_->MemcpyD2H(back.data(), base2, 2 * gran), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  const uint64_t half = gran / 4;
  // base2 sees h0 then h1 = the second half of the pattern, then the first.
  EXPECT_TRUE(std::equal(back.begin(), back.begin() + half, pattern.begin() + half));
  EXPECT_TRUE(std::equal(back.begin() + half, back.end(), pattern.begin()));
  for (char* b : {base, base2}) {
    EXPECT_THAT(exec_->Unmap(b, gran), IsOk());
    EXPECT_THAT(exec_->Unmap(b + gran, gran), IsOk());
  }
  EXPECT_THAT(exec_->ReleasePhysicalMemory(*h0), IsOk());
  EXPECT_THAT(exec_->ReleasePhysicalMemory(*h1), IsOk());
  EXPECT_THAT(exec_->ReleasePhysicalMemory(*h1), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(exec_->FreeAddressRange(base, 2 * gran), IsOk());
  EXPECT_THAT(exec_->FreeAddressRange(base2, 2 * gran), IsOk());
  EXPECT_THAT(exec_->CreatePhysicalMemory(gran + 1), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace vgpu::testing

#endif  // VGPU_TESTS_PLATFORM_CONFORMANCE_H_
