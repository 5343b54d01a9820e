// IDX reader: gzip and plain files, clear errors naming the file and the problem, and a short
// training smoke test on a slice of Fashion-MNIST when it is installed.
#include "vgpu/strategies/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/host/host_kernels.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/strategies/mirrored.h"
#include "vgpu/strategies/nn.h"
#include "vgpu/tests/scoped_temp_dir.h"
#include "vgpu/tests/testing_runtime.h"

namespace vgpu::strategies {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::ScopedTempDir;
using ::vgpu::testing::StatusIs;

std::vector<uint8_t> Idx(std::vector<uint32_t> dims, uint8_t type = 0x08) {
  std::vector<uint8_t> out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  uint64_t n = 1;
  for (uint32_t d : dims) {
    out.push_back(d >> 24);
    out.push_back(d >> 16);
    out.push_back(d >> 8);
    out.push_back(d);
    n *= d;
  }
  for (uint64_t i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(i % 10));
  return out;
}

void WritePlain(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void WriteGz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
  gzclose(f);
}

TEST(IdxTest, ReadsGzipAndPlain) {
  const ScopedTempDir tmp("vgpu_idx_test");
  const std::string& dir = tmp.path();
  WriteGz(dir + "/a.gz", Idx({3, 2, 2}));
  WritePlain(dir + "/b", Idx({5}));
  auto a = ReadIdx(dir + "/a.gz");
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_THAT(a->dims, ::testing::ElementsAre(3, 2, 2));
  EXPECT_EQ(a->data.size(), 12u);
  EXPECT_EQ(a->data[11], 1);
  auto b = ReadIdx(dir + "/b");
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_THAT(b->data, ::testing::ElementsAre(0, 1, 2, 3, 4));
}

TEST(IdxTest, ClearErrors) {
  const ScopedTempDir tmp("vgpu_idx_test");
  const std::string& dir = tmp.path();
  EXPECT_THAT(ReadIdx(dir + "/missing").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(dir + "/missing: no such file")));
  WritePlain(dir + "/magic", {1, 2, 8, 1, 0, 0, 0, 1, 5});
  EXPECT_THAT(ReadIdx(dir + "/magic").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr(dir + "/magic"), HasSubstr("magic"))));
  WritePlain(dir + "/type", Idx({2}, 0x0D));
  EXPECT_THAT(ReadIdx(dir + "/type").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("element type 0xd")));
  std::vector<uint8_t> truncated = Idx({4, 4});
  truncated.resize(truncated.size() - 3);
  WriteGz(dir + "/trunc.gz", truncated);
  EXPECT_THAT(ReadIdx(dir + "/trunc.gz").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("truncated data")));
  WritePlain(dir + "/short", {0, 0});
  EXPECT_THAT(ReadIdx(dir + "/short").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  WritePlain(dir + "/hdr", {0, 0, 8, 2, 0, 0});
  EXPECT_THAT(ReadIdx(dir + "/hdr").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("truncated header")));

  // A pair whose counts differ, and a folder without the files.
  WriteGz(dir + "/train-images-idx3-ubyte.gz", Idx({4, 2, 2}));
  WriteGz(dir + "/train-labels-idx1-ubyte.gz", Idx({3}));
  WriteGz(dir + "/t10k-images-idx3-ubyte.gz", Idx({2, 2, 2}));
  WritePlain(dir + "/t10k-labels-idx1-ubyte", Idx({2}));
  EXPECT_THAT(LoadMnistLike(dir).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has 4 images but")));
  WriteGz(dir + "/train-labels-idx1-ubyte.gz", Idx({4}));
  auto ok = LoadMnistLike(dir);
  ASSERT_THAT(ok.status(), IsOk());
  EXPECT_EQ(ok->train.rows, 4);
  EXPECT_EQ(ok->train.features, 4);
  EXPECT_FLOAT_EQ(ok->train.x[1], 1.0f / 255.0f);
  EXPECT_EQ(ok->test.rows, 2);
  // A label the 10-way output cannot take names the file and where it is.
  std::vector<uint8_t> bad_labels = Idx({2});
  bad_labels.back() = 12;
  WritePlain(dir + "/t10k-labels-idx1-ubyte", bad_labels);
  EXPECT_THAT(LoadMnistLike(dir).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(dir + "/t10k-labels-idx1-ubyte: label 12 at index 1 is outside "
                                       "0..9")));
  EXPECT_THAT(LoadMnistLike(dir + "/nothing").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("train-images-idx3-ubyte")));
}

// Found by tests/fuzz/idx_fuzz.cc: a header promising gigabytes made the reader allocate them
// before reading any data. Now memory follows the bytes really read, and a product of large
// dimensions cannot overflow.
TEST(IdxTest, HostileHeadersTakeNoMemory) {
  const ScopedTempDir tmp("vgpu_idx_test");
  const std::string& dir = tmp.path();
  const std::string path = dir + "/huge";
  // 0x08, 2 dims of 1000000 x 1024 = ~1 GB promised (within the caps), 3 bytes present.
  WritePlain(path, {0, 0, 8, 2, 0, 0x0F, 0x42, 0x40, 0, 0, 4, 0, 1, 2, 3});
  EXPECT_THAT(strategies::ReadIdx(path),
              vgpu::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                      ::testing::HasSubstr("truncated data")));
  // 4 dims of 2^28 each: the product would overflow 64 bits.
  WritePlain(path, {0, 0, 8, 4, 16, 0, 0, 0, 16, 0, 0, 0, 16, 0, 0, 0, 16, 0, 0, 0});
  EXPECT_THAT(strategies::ReadIdx(path),
              vgpu::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                      ::testing::HasSubstr("too large")));
}

// Issue 12 item 4: a small .gz whose header promises 2^33 bytes (524288 images of 128 x 128)
// is refused from its header, before anything is allocated or decompressed.
TEST(IdxTest, DecompressionBombIsRefusedFromItsHeader) {
  const ScopedTempDir tmp("vgpu_idx_test");
  const std::string& dir = tmp.path();
  std::vector<uint8_t> bomb = {0, 0, 8, 3, 0, 8, 0, 0, 0, 0, 0, 128, 0, 0, 0, 128};
  bomb.resize(bomb.size() + (8 << 20), 0);  // 8 MiB of zeros: a few KiB compressed
  WriteGz(dir + "/bomb.gz", bomb);
  EXPECT_THAT(ReadIdx(dir + "/bomb.gz"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr(dir + "/bomb.gz"),
                                        HasSubstr("524288 x 128 x 128 = 8589934592 bytes, too "
                                                  "large (at most 1 GiB)"))));
  // Per-dimension caps: more items than any MNIST-style set, an image side past 4096.
  EXPECT_THAT(CheckIdxShape("f", {1'000'001}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("promises 1000001 items, too large (at most 1000000")));
  EXPECT_THAT(CheckIdxShape("f", {10, 4097, 2}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dimension 1 of size 4097 is too large (at most 4096")));
  EXPECT_THAT(CheckIdxShape("f", {60000, 28, 28}, 0), IsOk());
  // What the machine has: Fashion-MNIST's 47 MB take 235 MB loaded, too much for 256 MiB.
  EXPECT_THAT(CheckIdxShape("f", {60000, 28, 28}, uint64_t{256} << 20),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::AllOf(HasSubstr("more than half of this machine's memory"),
                                        HasSubstr("256 MiB"))));
  EXPECT_THAT(CheckIdxShape("f", {60000, 28, 28}, uint64_t{1} << 30), IsOk());
}

// A payload longer than the header promises is an error, not silently cut.
TEST(IdxTest, PayloadLongerThanHeaderIsAnError) {
  const ScopedTempDir tmp("vgpu_idx_test");
  const std::string& dir = tmp.path();
  std::vector<uint8_t> longer = Idx({4});
  longer.push_back(7);
  WriteGz(dir + "/long.gz", longer);
  EXPECT_THAT(ReadIdx(dir + "/long.gz"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("data is longer than the header promises ([4] = 4 bytes)")));
  WritePlain(dir + "/long", longer);
  EXPECT_THAT(ReadIdx(dir + "/long"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("longer than the header")));
}

// Only regular files are read: a FIFO without a writer or a directory fails at once.
TEST(IdxTest, NonRegularFilesAreRefused) {
  const ScopedTempDir tmp("vgpu_idx_test");
  const std::string& dir = tmp.path();
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  EXPECT_THAT(ReadIdx(dir + "/fifo"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
  EXPECT_THAT(ReadIdx(dir), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("is a directory, not an IDX file")));
  EXPECT_THAT(ReadIdx("/dev/zero"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a character device")));
}

TEST(IdxTest, FashionMnistSmoke) {
  auto data = LoadMnistLike(std::string(kFashionMnistDir));
  if (!data.ok()) GTEST_SKIP() << "Fashion-MNIST not installed: " << data.status();
  ASSERT_EQ(data->train.rows, 60000);
  ASSERT_EQ(data->test.rows, 10000);
  ASSERT_EQ(data->train.features, 784);
  SetHostBlasThreads(1);
  HostPlatformOptions po;
  po.device_bytes = {uint64_t{1} << 30};
  auto platform = HostPlatform::Create(po);
  ASSERT_THAT(platform.status(), IsOk());
  auto set = testing::CreateTestingRuntime(platform->get(), 0, {256u << 20, 256u << 20});
  ASSERT_THAT(set.status(), IsOk());
  StrategyOptions o;
  o.model = MakeMlp();
  o.global_batch = 128;
  o.seed = 1;
  auto m = MirroredStrategy::Create((*set)->gpus(), o);
  ASSERT_THAT(m.status(), IsOk());
  // 40 steps over the first 5120 images reach well above chance (0.1).
  for (int step = 0; step < 40; ++step) {
    ASSERT_THAT(
        (*m)->Step(data->train.x.data() + step * 128 * 784, data->train.y.data() + step * 128, 128),
        IsOk());
  }
  auto t = (*m)->Evaluate(data->test.x.data(), data->test.y.data(), 2000);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_GT(t->accuracy(), 0.6);
}

}  // namespace
}  // namespace vgpu::strategies
