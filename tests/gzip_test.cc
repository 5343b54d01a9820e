// Gzip input (runtime/gzip.h): what zlib compresses comes back byte for byte, concatenated
// members and padding as `gzip -d` reads them; truncated, corrupt and over-the-cap streams are
// clear errors naming the input.
#include "vgpu/runtime/gzip.h"

#include <zlib.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/gzip_testutil.h"

namespace vgpu {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::Gzip;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

// Text like a trace: compresses well, so the output buffer grows several times.
std::string TraceLikeText(int lines) {
  std::string s = "# peak_live_bytes 1\n";
  for (int i = 0; i < lines; ++i) {
    s += "a " + std::to_string(i) + " " + std::to_string((i * 7919) % 100000 + 1) + "\n";
    s += "f " + std::to_string(i) + "\n";
  }
  return s;
}

TEST(GzipTest, TellsGzipByItsFirstTwoBytes) {
  EXPECT_TRUE(IsGzip(Gzip("x")));
  EXPECT_TRUE(IsGzip("\x1f\x8b"));
  EXPECT_FALSE(IsGzip("\x1f"));
  EXPECT_FALSE(IsGzip(""));
  EXPECT_FALSE(IsGzip("a 1 2\n"));
  EXPECT_FALSE(IsGzip(std::string("\x80\x04", 2)));  // a pickle
}

TEST(GzipTest, InflatesWhatZlibCompressed) {
  for (const std::string& data : {std::string(), std::string("a 1 100\nf 1\n"),
                                  TraceLikeText(200000), std::string(3 << 20, '\0')}) {
    SCOPED_TRACE(data.size());
    absl::StatusOr<std::string> back = Gunzip(Gzip(data), 64 << 20, "x.gz");
    ASSERT_THAT(back, IsOk());
    EXPECT_TRUE(*back == data);
  }
}

TEST(GzipTest, ConcatenatedMembersAndZeroPaddingReadAsGzipDoes) {
  const std::string a = TraceLikeText(1000), b = "tail\n";
  absl::StatusOr<std::string> both = Gunzip(Gzip(a) + Gzip(b), 1 << 20, "x.gz");
  ASSERT_THAT(both, IsOk());
  EXPECT_TRUE(*both == a + b);
  absl::StatusOr<std::string> padded = Gunzip(Gzip(b) + std::string(512, '\0'), 1 << 20, "x.gz");
  ASSERT_THAT(padded, IsOk());
  EXPECT_EQ(*padded, b);
}

TEST(GzipTest, OtherDataAfterTheStreamIsAnError) {
  const std::string gz = Gzip("abc");
  EXPECT_THAT(Gunzip(gz + "junk", 1 << 20, "x.gz").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x.gz: data after the gzip stream, at byte " +
                                 std::to_string(gz.size()))));
}

TEST(GzipTest, TruncatedStreamIsAnErrorWhereverItIsCut) {
  const std::string gz = Gzip(TraceLikeText(5000));
  for (size_t keep : {size_t{2}, size_t{10}, gz.size() / 2, gz.size() - 4, gz.size() - 1}) {
    SCOPED_TRACE(keep);
    EXPECT_THAT(Gunzip(gz.substr(0, keep), 1 << 20, "log.csv.gz").status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("log.csv.gz: the gzip stream ends early (truncated after " +
                                   std::to_string(keep) + " bytes")));
  }
}

TEST(GzipTest, CorruptStreamIsAnErrorWithItsOffset) {
  std::string gz = Gzip(TraceLikeText(5000));
  std::string body = gz;
  body[gz.size() / 2] ^= 0x55;  // inside the deflate data
  EXPECT_THAT(Gunzip(body, 1 << 20, "x.gz").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x.gz: corrupt gzip stream")));
  std::string crc = gz;
  crc[gz.size() - 6] ^= 0x01;  // the CRC-32 of the trailer: the data are checked
  EXPECT_THAT(Gunzip(crc, 1 << 20, "x.gz").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("incorrect data check")));
  std::string method = gz;
  method[2] = 7;  // compression method other than deflate
  EXPECT_THAT(
      Gunzip(method, 1 << 20, "x.gz").status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("corrupt gzip stream at byte")));
}

// A small file that inflates to more than the cap is refused, not read: 8 MiB of zeros
// compress to ~8 KiB.
TEST(GzipTest, OutputStopsAtTheCap) {
  const std::string zeros(8 << 20, '\0');
  const std::string gz = Gzip(zeros);
  ASSERT_LT(gz.size(), 64u << 10);
  EXPECT_THAT(Gunzip(gz, 8 << 20, "bomb.gz"), IsOk()) << "exactly the cap is allowed";
  EXPECT_THAT(Gunzip(gz, (8 << 20) - 1, "bomb.gz").status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("bomb.gz: inflates to more than 8 MiB (8388607 bytes)")));
  EXPECT_THAT(Gunzip(gz, 0, "bomb.gz").status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("more than 0 B")));
  EXPECT_THAT(Gunzip(Gzip(""), 0, "empty.gz"), IsOk());
}

TEST(GzipTest, NotGzipIsAnErrorAndPassesThroughTheOptionalForm) {
  EXPECT_THAT(
      Gunzip("a 1 2\n", 1 << 20, "x.trace").status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x.trace: not a gzip stream")));
  bool was_gzip = true;
  absl::StatusOr<std::string> plain = GunzipIfCompressed("a 1 2\n", 1 << 20, "x", &was_gzip);
  ASSERT_THAT(plain, IsOk());
  EXPECT_EQ(*plain, "a 1 2\n");
  EXPECT_FALSE(was_gzip);
  absl::StatusOr<std::string> inflated =
      GunzipIfCompressed(Gzip("a 1 2\n"), 1 << 20, "x", &was_gzip);
  ASSERT_THAT(inflated, IsOk());
  EXPECT_EQ(*inflated, "a 1 2\n");
  EXPECT_TRUE(was_gzip);
}

// What GzipCompress writes is gzip: zlib's inflate and ours read it back, whatever its size.
TEST(GzipTest, CompressWritesWhatGunzipReads) {
  for (const std::string& data :
       {std::string(), std::string("a 1 8\nf 1\n"), TraceLikeText(100000)}) {
    SCOPED_TRACE(data.size());
    absl::StatusOr<std::string> gz = GzipCompress(data);
    ASSERT_THAT(gz, IsOk());
    EXPECT_TRUE(IsGzip(*gz));
    if (data.size() > 1000) EXPECT_LT(gz->size(), data.size() / 2);
    absl::StatusOr<std::string> back = Gunzip(*gz, 64 << 20, "x.gz");
    ASSERT_THAT(back, IsOk());
    EXPECT_TRUE(*back == data);
    // zlib's own reader, independent of Gunzip.
    std::string z(data.size() + 1, '\0');
    z_stream zs{};
    ASSERT_EQ(inflateInit2(&zs, 16 + MAX_WBITS), Z_OK);
    zs.next_in = reinterpret_cast<Bytef*>(gz->data());
    zs.avail_in = static_cast<uInt>(gz->size());
    zs.next_out = reinterpret_cast<Bytef*>(z.data());
    zs.avail_out = static_cast<uInt>(z.size());
    EXPECT_EQ(inflate(&zs, Z_FINISH), Z_STREAM_END);
    EXPECT_EQ(zs.total_out, data.size());
    inflateEnd(&zs);
  }
  EXPECT_THAT(GzipCompress("x", 10).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("level 10 is not in -1..9")));
}

// Gunzip is reentrant: no shared state between calls on several threads.
TEST(GzipTest, ThreadsInflateAtOnce) {
  const std::string data = TraceLikeText(20000);
  const std::string gz = Gzip(data);
  std::vector<std::thread> threads;
  std::atomic<int> same{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 5; ++k) {
        absl::StatusOr<std::string> back = Gunzip(gz, 16 << 20, "x.gz");
        if (back.ok() && *back == data) same.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(same.load(), 20);
}

}  // namespace
}  // namespace vgpu
