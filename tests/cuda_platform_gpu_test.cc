// The cuda platform on a real GPU (label gpu; every test skips when GetPlatform("cuda") has no
// device): discovery fields, memory, streams, events, host functions, VMM stitching, every
// kernel against the host platform's kernels, cuBLAS, green contexts and NCCL. The
// cross-platform contracts are in the conformance suite; this file covers what is cuda's own.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "cuda_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/runtime/nccl.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

class CudaGpuTest : public ::vgpu::testing::CudaVsHostTest {
 protected:
  void SetUp() override {
    auto p = GetPlatform("cuda");
    ASSERT_THAT(p, IsOk());
    platform_ = *p;
    if (platform_->DeviceCount() == 0) GTEST_SKIP() << platform_->Summary();
    exec_ = *platform_->GetExecutor(0);
    auto s = exec_->CreateStream(StreamOptions{});
    ASSERT_THAT(s, IsOk());
    stream_ = *std::move(s);
    ASSERT_NO_FATAL_FAILURE(SetUpHost(256 << 20));
  }

  Platform* platform_ = nullptr;
};

TEST_F(CudaGpuTest, DescribesTheDevice) {
  auto info = platform_->Describe(0);
  ASSERT_THAT(info, IsOk());
  EXPECT_THAT(info->uuid, MatchesRegex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                                       "[0-9a-f]{12}"));
  EXPECT_FALSE(info->pci_bus_id.empty());
  EXPECT_GE(info->compute_capability_major, 7);
  EXPECT_GT(info->sm_count, 0);
  EXPECT_GT(info->total_bytes, info->free_bytes);
  EXPECT_GT(info->free_bytes, 0u);
  EXPECT_THAT(platform_->Summary(), HasSubstr("CUDA driver"));
}

TEST_F(CudaGpuTest, AllocateFreeAndRejectsUnknownPointers) {
  auto p = exec_->Allocate(1 << 20);
  ASSERT_THAT(p, IsOk());
  EXPECT_THAT(exec_->Free(*p), IsOk());
  EXPECT_THAT(exec_->Free(*p), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("double")));
  int local = 0;
  EXPECT_THAT(exec_->Free(&local), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  auto info = exec_->Describe();
  ASSERT_THAT(info, IsOk());
  EXPECT_THAT(exec_->Allocate(info->total_bytes * 2),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("OUT_OF_MEMORY")));
  auto h = exec_->HostAllocate(4096);
  ASSERT_THAT(h, IsOk());
  EXPECT_THAT(exec_->HostFree(*h), IsOk());
  EXPECT_THAT(exec_->HostFree(*h), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST_F(CudaGpuTest, MemcpyMemsetAndHostFunctionsRunInOrder) {
  std::vector<uint32_t> src(1000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint32_t>(i * 7);
  uint32_t* a = Upload(exec_, stream_.get(), src);
  uint32_t* b = Upload(exec_, stream_.get(), std::vector<uint32_t>(1000, 0));
  ASSERT_THAT(stream_->MemcpyD2D(b, a, 4000), IsOk());
  ASSERT_THAT(stream_->Memset32(a, 0xdeadbeef, 10), IsOk());
  ASSERT_THAT(stream_->Memset8(reinterpret_cast<uint8_t*>(a) + 40, 0x11, 4), IsOk());
  std::atomic<int> ran{0};
  ASSERT_THAT(stream_->LaunchHostFunc([&] { ran = 1; }), IsOk());
  EXPECT_EQ(Download(stream_.get(), b, 1000), src);
  EXPECT_EQ(ran.load(), 1);
  std::vector<uint32_t> got = Download(stream_.get(), a, 12);
  EXPECT_EQ(got[0], 0xdeadbeefu);
  EXPECT_EQ(got[9], 0xdeadbeefu);
  EXPECT_EQ(got[10], 0x11111111u);
  EXPECT_EQ(got[11], 11u * 7);
}

TEST_F(CudaGpuTest, EventsAndPriorities) {
  auto [least, greatest] = exec_->StreamPriorityRange();
  EXPECT_LE(greatest, least);
  auto hi = exec_->CreateStream(StreamOptions{.priority = greatest - 100});
  ASSERT_THAT(hi, IsOk());
  EXPECT_EQ((*hi)->priority(), greatest);
  auto event = exec_->CreateEvent();
  ASSERT_THAT(event, IsOk());
  EXPECT_THAT((*event)->Query(), IsOk());  // never recorded: complete
  std::vector<float> big(1 << 22, 1.5f);
  float* a = Upload(exec_, stream_.get(), big);
  float* b = Upload(exec_, stream_.get(), std::vector<float>(big.size(), 0));
  ASSERT_THAT(stream_->MemcpyD2D(b, a, big.size() * 4), IsOk());
  ASSERT_THAT(stream_->RecordEvent(event->get()), IsOk());
  ASSERT_THAT((*hi)->WaitEvent(event->get()), IsOk());
  std::vector<float> out(big.size());
  ASSERT_THAT((*hi)->MemcpyD2H(out.data(), b, out.size() * 4), IsOk());
  ASSERT_THAT((*hi)->Synchronize(), IsOk());
  EXPECT_EQ(out, big);
  EXPECT_THAT((*event)->Synchronize(), IsOk());
}

TEST_F(CudaGpuTest, VirtualMemoryStitchesGranulesAndKernelsSeeThem) {
  auto g = exec_->VirtualMemoryGranularity();
  if (!g.ok()) GTEST_SKIP() << g.status();
  const uint64_t gran = *g;
  auto va = exec_->ReserveAddressRange(2 * gran);
  ASSERT_THAT(va, IsOk());
  auto m0 = exec_->CreatePhysicalMemory(gran);
  auto m1 = exec_->CreatePhysicalMemory(gran);
  ASSERT_THAT(m0, IsOk());
  ASSERT_THAT(m1, IsOk());
  char* base = static_cast<char*>(*va);
  // Reversed on purpose: the second physical granule first.
  ASSERT_THAT(exec_->Map(base, gran, *m1, 0), IsOk());
  ASSERT_THAT(exec_->Map(base + gran, gran, *m0, 0), IsOk());
  EXPECT_THAT(exec_->Map(base, gran + 1, *m0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("granularity")));
  const uint64_t n = 2 * gran / sizeof(float);
  Kernels* k = *exec_->GetKernels();
  ASSERT_THAT(k->Fill(stream_.get(), reinterpret_cast<float*>(base), n, 3.0f), IsOk());
  std::vector<float> out = Download(stream_.get(), reinterpret_cast<float*>(base), n);
  EXPECT_EQ(std::count(out.begin(), out.end(), 3.0f), static_cast<long>(n));
  EXPECT_THAT(exec_->Unmap(base, gran), IsOk());
  EXPECT_THAT(exec_->Unmap(base + gran, gran), IsOk());
  EXPECT_THAT(exec_->ReleasePhysicalMemory(*m0), IsOk());
  EXPECT_THAT(exec_->ReleasePhysicalMemory(*m1), IsOk());
  EXPECT_THAT(exec_->ReleasePhysicalMemory(*m1),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(exec_->FreeAddressRange(base, 2 * gran), IsOk());
}

TEST_F(CudaGpuTest, SumNMatchesHostAlignedAndNot) {
  for (uint64_t count : {1ull, 5ull, 1000ull, 1000003ull}) {
    for (int n : {1, 3, 16}) {
      std::vector<std::vector<float>> bufs;
      for (int j = 0; j < n; ++j) bufs.push_back(Random(count + 1, 100 + j));
      bufs.push_back(std::vector<float>(count + 1, 0));
      for (int offset : {0, 1}) {  // offset 1: not 16-byte aligned, the scalar kernel
        CompareWithHost(bufs, n, [&](Kernels* k, Stream* s, std::vector<float*>& b) {
          std::vector<const float*> in;
          for (int j = 0; j < n; ++j) in.push_back(b[j] + offset);
          return k->SumN(s, in, b[n] + offset, count, 0.5f);
        });
      }
    }
  }
}

TEST_F(CudaGpuTest, ElementwiseKernelsMatchHost) {
  const uint64_t n = 100003;
  CompareWithHost({std::vector<float>(n)}, 0,
                  [&](Kernels* k, Stream* s, auto& b) { return k->Fill(s, b[0], n, -1.25f); });
  CompareWithHost({Random(n, 1), std::vector<float>(n)}, 1,
                  [&](Kernels* k, Stream* s, auto& b) { return k->Relu(s, n, b[0], b[1]); });
  CompareWithHost(
      {Random(n, 2), Random(n, 3), std::vector<float>(n)}, 2,
      [&](Kernels* k, Stream* s, auto& b) { return k->ReluGrad(s, n, b[0], b[1], b[2]); });
  CompareWithHost({Random(n, 4), Random(n, 5)}, 1, [&](Kernels* k, Stream* s, auto& b) {
    return k->SgdUpdate(s, n, 0.1f, b[0], b[1]);
  });
  for (int buffer : {1, 2, 3}) {  // m, v and param all updated
    CompareWithHost({Random(n, 6), Random(n, 7), Random(n, 8, 0, 1), Random(n, 9)}, buffer,
                    [&](Kernels* k, Stream* s, auto& b) {
                      return k->AdamUpdate(s, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 3, b[0], b[1], b[2],
                                           b[3]);
                    });
  }
}

TEST_F(CudaGpuTest, BiasKernelsMatchHost) {
  for (auto [rows, cols] : {std::pair{1, 1}, {7, 10}, {256, 256}, {513, 33}}) {
    CompareWithHost(
        {Random(cols, 10), Random(size_t(rows) * cols, 11)}, 1,
        [&](Kernels* k, Stream* s, auto& b) { return k->BiasAdd(s, rows, cols, b[0], b[1]); });
    CompareWithHost(
        {Random(size_t(rows) * cols, 12), std::vector<float>(cols, 9)}, 1,
        [&](Kernels* k, Stream* s, auto& b) { return k->BiasGrad(s, rows, cols, b[0], b[1]); },
        1e-4f);
  }
}

TEST_F(CudaGpuTest, SoftmaxCrossEntropyMatchesHostAndRejectsBadLabels) {
  const int rows = 300, cols = 10;
  std::vector<float> logits = Random(size_t(rows) * cols, 13, -5, 5);
  std::vector<int32_t> labels(rows);
  for (int r = 0; r < rows; ++r) labels[r] = (r * 7) % cols;
  auto run = [&](Executor* e, Stream* s) {
    Kernels* k = *e->GetKernels();
    float* z = Upload(e, s, logits);
    int32_t* l = Upload(e, s, labels);
    float* d = Upload(e, s, std::vector<float>(logits.size(), 0));
    float* loss = Upload(e, s, std::vector<float>{123});
    int32_t* correct = Upload(e, s, std::vector<int32_t>{77});
    EXPECT_THAT(k->SoftmaxCrossEntropy(s, rows, cols, z, l, 0.5f, d, loss, correct), IsOk());
    auto dl = Download(s, d, logits.size());
    dl.push_back(Download(s, loss, 1)[0]);
    dl.push_back(static_cast<float>(Download(s, correct, 1)[0]));
    return dl;
  };
  std::vector<float> gpu = run(exec_, stream_.get());
  std::vector<float> host = run(host_exec_, host_stream_.get());
  ExpectNear(gpu, host, 1e-4f);

  labels[17] = cols;  // out of range
  Kernels* k = *exec_->GetKernels();
  float* z = Upload(exec_, stream_.get(), logits);
  int32_t* l = Upload(exec_, stream_.get(), labels);
  float* loss = Upload(exec_, stream_.get(), std::vector<float>{0});
  int32_t* correct = Upload(exec_, stream_.get(), std::vector<int32_t>{0});
  ASSERT_THAT(k->SoftmaxCrossEntropy(stream_.get(), rows, cols, z, l, 1, nullptr, loss, correct),
              IsOk());
  EXPECT_THAT(stream_->Synchronize(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("label 10 of row 17")));
  // Sticky, as on the host platform.
  EXPECT_THAT(stream_->Memset8(loss, 0, 4),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  stream_ = *exec_->CreateStream(StreamOptions{});  // for TearDown's frees: a fresh stream
}

TEST_F(CudaGpuTest, CublasSgemmMatchesReference) {
  const int m = 33, n = 17, k = 65;
  std::vector<float> a = Random(size_t(m) * k, 20), b = Random(size_t(k) * n, 21);
  float* da = Upload(exec_, stream_.get(), a);
  float* db = Upload(exec_, stream_.get(), b);
  float* dc = Upload(exec_, stream_.get(), std::vector<float>(size_t(m) * n, 1));
  auto blas = exec_->GetBlas();
  ASSERT_THAT(blas, IsOk());
  ASSERT_THAT((*blas)->Sgemm(stream_.get(), Transpose::kNo, Transpose::kNo, m, n, k, 2.0f, da, m,
                             db, k, 0.5f, dc, m),
              IsOk());
  std::vector<float> want(size_t(m) * n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int p = 0; p < k; ++p) acc += double(a[i + size_t(p) * m]) * b[p + size_t(j) * k];
      want[i + size_t(j) * m] = float(2 * acc + 0.5);
    }
  }
  ExpectNear(Download(stream_.get(), dc, want.size()), want, 1e-3f);
  ASSERT_THAT((*blas)->Sscal(stream_.get(), m * n, 2.0f, dc), IsOk());
  ASSERT_THAT((*blas)->Saxpy(stream_.get(), m * n, -1.0f, dc, dc), IsOk());
  auto zeros = Download(stream_.get(), dc, want.size());
  EXPECT_EQ(std::count(zeros.begin(), zeros.end(), 0.0f), long(zeros.size()));
}

TEST_F(CudaGpuTest, GreenContextPartitionsRunKernels) {
  auto info = exec_->Describe();
  ASSERT_THAT(info, IsOk());
  auto parts = exec_->PartitionSms({info->sm_count / 4, info->sm_count / 4});
  if (absl::IsUnimplemented(parts.status())) GTEST_SKIP() << parts.status();
  ASSERT_THAT(parts, IsOk());
  ASSERT_GE(parts->size(), 2u);
  int sum = 0;
  for (int c : *parts) sum += c;
  EXPECT_LE(sum, info->sm_count);
  EXPECT_GE((*parts)[0], info->sm_count / 4);
  EXPECT_THAT(exec_->PartitionSms({info->sm_count * 2}),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("SMs")));
  for (int i = 0; i < static_cast<int>(parts->size()); ++i) {
    auto s = exec_->CreateStream(StreamOptions{.priority = 0, .sm_partition = i});
    ASSERT_THAT(s, IsOk());
    EXPECT_EQ((*s)->sm_partition(), i);
    float* x = Upload(exec_, s->get(), std::vector<float>(1000, 0));
    ASSERT_THAT((*exec_->GetKernels())->Fill(s->get(), x, 1000, float(i + 1)), IsOk());
    auto out = Download(s->get(), x, 1000);
    EXPECT_EQ(std::count(out.begin(), out.end(), float(i + 1)), 1000);
  }
  EXPECT_THAT(exec_->CreateStream(StreamOptions{.priority = 0, .sm_partition = 99}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("partition 99")));
}

TEST_F(CudaGpuTest, NcclAllReduceOnOneRankAndDuplicateRejected) {
  std::vector<Executor*> twice = {exec_, exec_};
  EXPECT_THAT(NcclCommunicator::Create(twice),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("given twice")));
  std::vector<Executor*> all;
  for (int i = 0; i < platform_->DeviceCount(); ++i) all.push_back(*platform_->GetExecutor(i));
  auto comm = NcclCommunicator::Create(all);
  if (absl::IsFailedPrecondition(comm.status())) GTEST_SKIP() << comm.status();  // no libnccl
  ASSERT_THAT(comm, IsOk());
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<AllReduceBuffer> buffers;
  for (size_t i = 0; i < all.size(); ++i) {
    streams.push_back(*all[i]->CreateStream(StreamOptions{}));
    buffers.push_back({streams.back().get(),
                       Upload(all[i], streams.back().get(), std::vector<float>(1024, i + 1.0f))});
  }
  ASSERT_THAT((*comm)->AllReduce(buffers, 1024, AllReduceOp::kMean), IsOk());
  const float mean = (all.size() + 1) / 2.0f;
  for (size_t i = 0; i < all.size(); ++i) {
    auto out = Download(streams[i].get(), buffers[i].data, 1024);
    EXPECT_EQ(std::count(out.begin(), out.end(), mean), 1024) << "rank " << i;
  }
}

}  // namespace
}  // namespace vgpu
