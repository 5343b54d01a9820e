// Zip input (runtime/zip.h): stored and deflated members come back byte for byte whatever
// records the writer used (ZIP64, data descriptors, alignment padding, a comment); truncated,
// corrupt, encrypted, over-the-cap and otherwise unreadable archives are clear errors naming
// the input and the member.
#include "vgpu/runtime/zip.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/zip_testutil.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;
using ::vgpu::testing::Zip;
using ::vgpu::testing::ZipEntrySpec;
using ::vgpu::testing::ZipWriteOptions;

std::string Text(int lines) {
  std::string s;
  for (int i = 0; i < lines; ++i)
    s += "a " + std::to_string(i) + " " + std::to_string(i * 37) + "\n";
  return s;
}

void Poke(std::string& s, size_t at, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// Where the directory record of the first member starts (the classic end record's field).
size_t DirectoryOffset(const std::string& zip) {
  const size_t end = zip.rfind(std::string("PK\x05\x06", 4));
  return static_cast<unsigned char>(zip[end + 16]) |
         static_cast<unsigned char>(zip[end + 17]) << 8 |
         static_cast<unsigned char>(zip[end + 18]) << 16 |
         static_cast<size_t>(static_cast<unsigned char>(zip[end + 19])) << 24;
}

TEST(ZipTest, TellsZipByItsFirstBytes) {
  EXPECT_TRUE(IsZip(Zip({{"a", "x"}})));
  EXPECT_TRUE(IsZip(Zip({})));  // an empty archive is its end record alone
  EXPECT_FALSE(IsZip("PK"));
  EXPECT_FALSE(IsZip("PK\x01\x02"));
  EXPECT_FALSE(IsZip("a 1 2\n"));
  EXPECT_FALSE(IsZip(std::string("\x1f\x8b\x08\x00", 4)));
}

TEST(ZipTest, ReadsEveryMemberWhateverRecordsTheWriterUsed) {
  const std::vector<ZipEntrySpec> entries = {
      {"archive/data.pkl", Text(3000), false},
      {"archive/byteorder", "little", false},
      {"logs/", "", false},
      {"logs/rmm.csv", Text(20000), true},
      {"empty", "", true},
  };
  for (int mask = 0; mask < 16; ++mask) {
    ZipWriteOptions o;
    o.zip64 = mask & 1;
    o.zip64_end_records = mask & 2;
    o.data_descriptor = mask & 4;
    o.align = (mask & 8) ? 64 : 0;
    o.comment =
        (mask & 8) ? "made by a test \x50\x4b\x05\x06 (an end signature in the comment)" : "";
    SCOPED_TRACE(mask);
    const std::string zip = Zip(entries, o);
    absl::StatusOr<std::vector<ZipMember>> members = ListZip(zip, "x.zip");
    ASSERT_THAT(members, IsOk());
    ASSERT_EQ(members->size(), entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      const ZipMember& m = (*members)[i];
      EXPECT_EQ(m.name, entries[i].name);
      EXPECT_EQ(m.bytes, entries[i].data.size());
      EXPECT_EQ(m.method, entries[i].deflate ? 8 : 0);
      EXPECT_EQ(m.is_directory(), entries[i].name.back() == '/');
      absl::StatusOr<std::string> data = ReadZipMember(zip, m, 1 << 20, "x.zip");
      ASSERT_THAT(data, IsOk());
      EXPECT_TRUE(*data == entries[i].data);
    }
    // The deflated log really was compressed.
    EXPECT_LT((*members)[3].compressed_bytes, (*members)[3].bytes / 2);
  }
}

TEST(ZipTest, MemberOverTheCapIsRefusedBeforeInflating) {
  const std::string data(1 << 20, 'a');
  const std::string zip = Zip({{"big.trace", data, true}});
  auto members = ListZip(zip, "big.zip");
  ASSERT_THAT(members, IsOk());
  EXPECT_THAT(ReadZipMember(zip, (*members)[0], data.size(), "big.zip"), IsOk());
  EXPECT_THAT(ReadZipMember(zip, (*members)[0], data.size() - 1, "big.zip").status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("big.zip: zip member \"big.trace\" holds 1048576 bytes"),
                             HasSubstr("(1048575 bytes), the most this input may hold"))));
  // A directory claiming a terabyte is refused on its word, nothing allocated.
  ZipMember huge = (*members)[0];
  huge.bytes = uint64_t{1} << 40;
  EXPECT_THAT(ReadZipMember(zip, huge, uint64_t{1} << 30, "big.zip").status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("holds 1099511627776")));
}

TEST(ZipTest, EveryTruncationIsAnError) {
  const std::string zip = Zip({{"a.trace", Text(50), true}, {"b", "bbbb", false}});
  for (size_t n = 0; n < zip.size(); ++n) {
    const std::string cut = zip.substr(0, n);
    absl::StatusOr<std::vector<ZipMember>> members = ListZip(cut, "cut.zip");
    if (!members.ok()) {
      EXPECT_THAT(members.status(),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cut.zip: zip archive:")));
      continue;
    }
    // A cut that still parses (a comment-less end record found by chance) reads nothing
    // silently wrong.
    for (const ZipMember& m : *members) {
      absl::StatusOr<std::string> data = ReadZipMember(cut, m, 1 << 20, "cut.zip");
      if (data.ok()) EXPECT_TRUE(*data == Text(50) || *data == "bbbb");
    }
  }
  EXPECT_THAT(ListZip("", "e.zip").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("e.zip: zip archive: 0 bytes, shorter than its end record")));
  EXPECT_THAT(ListZip(zip.substr(0, zip.size() - 1), "t.zip").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no end of central directory record")));
}

TEST(ZipTest, CorruptDataFailsItsCrc) {
  const std::string text = Text(10);
  std::string zip = Zip({{"a.trace", text, false}});
  zip[30 + 7 + 3] ^= 0x20;  // a byte of the stored data
  auto members = ListZip(zip, "c.zip");
  ASSERT_THAT(members, IsOk());
  EXPECT_THAT(ReadZipMember(zip, (*members)[0], 1 << 20, "c.zip").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("c.zip: zip member \"a.trace\": CRC-32 "),
                             HasSubstr("(corrupt archive)"))));
  std::string deflated = Zip({{"d.trace", Text(400), true}});
  deflated[30 + 7 + 40] ^= 0x55;
  members = ListZip(deflated, "d.zip");
  ASSERT_THAT(members, IsOk());
  EXPECT_THAT(
      ReadZipMember(deflated, (*members)[0], 1 << 20, "d.zip").status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("d.zip: zip member \"d.trace\"")));
}

TEST(ZipTest, DeflatedDataMustInflateToItsStatedSize) {
  const std::string text = Text(100);
  const std::string zip = Zip({{"a", text, true}});
  auto members = ListZip(zip, "s.zip");
  ASSERT_THAT(members, IsOk());
  ZipMember shorter = (*members)[0];
  shorter.bytes = text.size() - 1;
  EXPECT_THAT(ReadZipMember(zip, shorter, 1 << 20, "s.zip").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inflates to more than the " + std::to_string(text.size() - 1) +
                                 " bytes it says it holds")));
  ZipMember longer = (*members)[0];
  longer.bytes = text.size() + 1;
  EXPECT_THAT(ReadZipMember(zip, longer, 1 << 20, "s.zip").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("s.zip: zip member \"a\"")));
  // A member that claims far more than it holds (a 26-byte archive could say 700 MiB) takes
  // memory as it inflates, not on its word.
  ZipMember liar = (*members)[0];
  liar.bytes = uint64_t{700} << 20;
  EXPECT_THAT(ReadZipMember(zip, liar, uint64_t{1} << 30, "s.zip").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(" bytes where it says 734003200")));
  ZipMember cut = (*members)[0];
  cut.compressed_bytes -= 5;
  EXPECT_THAT(ReadZipMember(zip, cut, 1 << 20, "s.zip").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ends early")));
}

TEST(ZipTest, UnreadableMembersAreNamed) {
  std::string zip = Zip({{"secret.csv", "x", false}});
  const size_t cd = DirectoryOffset(zip);
  {
    std::string enc = zip;
    Poke(enc, cd + 8, 1, 2);  // the directory's flags: encrypted
    auto members = ListZip(enc, "e.zip");
    ASSERT_THAT(members, IsOk());
    EXPECT_THAT(ReadZipMember(enc, (*members)[0], 1 << 20, "e.zip").status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("e.zip: zip member \"secret.csv\" is encrypted")));
  }
  {
    std::string bz = zip;
    Poke(bz, cd + 10, 12, 2);  // method 12
    auto members = ListZip(bz, "b.zip");
    ASSERT_THAT(members, IsOk());
    EXPECT_THAT(ReadZipMember(bz, (*members)[0], 1 << 20, "b.zip").status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("is compressed with method 12 (bzip2); only stored (0) and "
                                   "deflated (8) members are read")));
  }
  {
    std::string moved = zip;
    Poke(moved, cd + 42, 5, 4);  // local header offset
    auto members = ListZip(moved, "m.zip");
    ASSERT_THAT(members, IsOk());
    EXPECT_THAT(ReadZipMember(moved, (*members)[0], 1 << 20, "m.zip").status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("no local header at byte 5, where the directory points")));
  }
  {
    std::string big = zip;
    Poke(big, cd + 20, 0x7fffffff, 4);  // compressed size
    Poke(big, cd + 24, 0x7fffffff, 4);
    auto members = ListZip(big, "p.zip");
    ASSERT_THAT(members, IsOk());
    EXPECT_THAT(
        ReadZipMember(big, (*members)[0], uint64_t{1} << 32, "p.zip").status(),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("run past the archive's end")));
  }
}

TEST(ZipTest, MalformedDirectoriesAreErrors) {
  const std::string zip = Zip({{"a", "1", false}, {"b", "2", false}});
  const size_t end = zip.size() - 22;
  {
    std::string many = zip;
    Poke(many, end + 8, 60000, 2);
    Poke(many, end + 10, 60000, 2);
    EXPECT_THAT(ListZip(many, "n.zip").status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("says it holds 60000 members, more than its")));
  }
  {
    std::string disks = zip;
    Poke(disks, end + 4, 1, 2);
    EXPECT_THAT(ListZip(disks, "d.zip").status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                           HasSubstr("split over several disks")));
  }
  {
    std::string outside = zip;
    Poke(outside, end + 16, 0x10000000, 4);
    EXPECT_THAT(ListZip(outside, "o.zip").status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("does not end before its end record")));
  }
  {
    std::string name = zip;
    Poke(name, DirectoryOffset(zip) + 28, 0xffff, 2);
    EXPECT_THAT(
        ListZip(name, "l.zip").status(),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("runs past the directory's end")));
  }
  {
    std::string no_locator = zip;
    Poke(no_locator, end + 10, 0xffff, 2);
    EXPECT_THAT(ListZip(no_locator, "z.zip").status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no ZIP64 locator")));
  }
}

TEST(ZipTest, ReadsFromManyThreadsAtOnce) {
  const std::string text = Text(5000);
  const std::string zip = Zip({{"a", text, true}, {"b", text, false}});
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        auto members = ListZip(zip, "t.zip");
        if (!members.ok()) return;
        auto data = ReadZipMember(zip, (*members)[i % 2], 1 << 20, "t.zip");
        if (data.ok() && *data == text) ++ok[t];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 20);
}

}  // namespace
}  // namespace vgpu
