#include "vgpu/runtime/zip.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/gzip.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace {

// Record signatures (APPNOTE.TXT 4.3).
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;

constexpr size_t kEndSize = 22;  // without the comment
constexpr size_t kLocatorSize = 20;
constexpr size_t kZip64EndSize = 56;  // without its extensible data
constexpr size_t kCentralSize = 46;   // without name, extra field and comment
constexpr size_t kLocalSize = 30;     // without name and extra field

// Little-endian fields at an offset the caller has checked.
uint16_t U16(absl::string_view d, size_t at) {
  return static_cast<uint16_t>(static_cast<unsigned char>(d[at]) |
                               static_cast<unsigned char>(d[at + 1]) << 8);
}
uint32_t U32(absl::string_view d, size_t at) {
  return static_cast<uint32_t>(U16(d, at)) | static_cast<uint32_t>(U16(d, at + 2)) << 16;
}
uint64_t U64(absl::string_view d, size_t at) {
  return static_cast<uint64_t>(U32(d, at)) | static_cast<uint64_t>(U32(d, at + 4)) << 32;
}

absl::Status Bad(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": zip archive: ", what));
}

// Whether [at, at + n) lies inside `size` bytes, without overflow.
bool Fits(uint64_t at, uint64_t n, uint64_t size) { return at <= size && n <= size - at; }

// Where the directory is and how many records it holds (from the end record, or the ZIP64 one
// when a field of the end record says so).
struct Directory {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t count = 0;
  uint64_t end = 0;  // where the records after the directory start (nothing may overlap them)
};

absl::StatusOr<Directory> FindDirectory(absl::string_view d, absl::string_view source) {
  if (d.size() < kEndSize) {
    return Bad(source, absl::StrCat("", d.size(), " bytes, shorter than its end record"));
  }
  // The end record is the last thing in the file, followed only by its comment (at most
  // 65535 bytes): the last signature whose comment length reaches the end exactly.
  size_t end = std::string::npos;
  const size_t lowest = d.size() > kEndSize + 0xffff ? d.size() - kEndSize - 0xffff : 0;
  for (size_t at = d.size() - kEndSize + 1; at-- > lowest;) {
    if (U32(d, at) == kEndOfDirectory && at + kEndSize + U16(d, at + 20) == d.size()) {
      end = at;
      break;
    }
  }
  if (end == std::string::npos) {
    return Bad(source, "no end of central directory record (truncated, or not a zip archive)");
  }
  const uint16_t disk = U16(d, end + 4);
  const uint16_t directory_disk = U16(d, end + 6);
  const uint16_t on_disk = U16(d, end + 8);
  Directory dir;
  dir.count = U16(d, end + 10);
  dir.bytes = U32(d, end + 12);
  dir.offset = U32(d, end + 16);
  dir.end = end;
  const bool zip64 =
      dir.count == 0xffff || dir.bytes == 0xffffffff || dir.offset == 0xffffffff || disk == 0xffff;
  if (zip64) {
    if (end < kLocatorSize || U32(d, end - kLocatorSize) != kZip64Locator) {
      return Bad(source,
                 absl::StrCat("the end record at byte ", end,
                              " defers to a ZIP64 record but no ZIP64 locator precedes it"));
    }
    const size_t loc = end - kLocatorSize;
    const uint64_t rec = U64(d, loc + 8);
    if (U32(d, loc + 16) > 1 || U32(d, loc + 4) != 0) {
      return Bad(source, "split over several disks (multi-part archives are not read)");
    }
    if (!Fits(rec, kZip64EndSize, loc) ||
        U32(d, static_cast<size_t>(rec)) != kZip64EndOfDirectory) {
      return Bad(source, absl::StrCat("no ZIP64 end record at byte ", rec,
                                      ", where its locator at byte ", loc, " points"));
    }
    const size_t r = static_cast<size_t>(rec);
    if (U32(d, r + 16) != 0 || U32(d, r + 20) != 0) {
      return Bad(source, "split over several disks (multi-part archives are not read)");
    }
    if (U64(d, r + 24) != U64(d, r + 32)) {
      return Bad(source, "split over several disks (multi-part archives are not read)");
    }
    dir.count = U64(d, r + 32);
    dir.bytes = U64(d, r + 40);
    dir.offset = U64(d, r + 48);
    dir.end = r;
  } else if (disk != 0 || directory_disk != 0 || on_disk != dir.count) {
    return Bad(source, "split over several disks (multi-part archives are not read)");
  }
  if (!Fits(dir.offset, dir.bytes, dir.end)) {
    return Bad(source,
               absl::StrCat("the central directory (", dir.bytes, " bytes at byte ", dir.offset,
                            ") does not end before its end record at byte ", dir.end));
  }
  if (dir.count > dir.bytes / kCentralSize) {
    return Bad(source, absl::StrCat("the central directory says it holds ", dir.count,
                                    " members, more than its ", dir.bytes, " bytes can"));
  }
  return dir;
}

// The ZIP64 extra field's values replace, in this order, those of the record that read
// 0xffffffff (APPNOTE.TXT 4.5.3).
absl::Status ApplyZip64Extra(absl::string_view extra, ZipMember& m, bool size_full, bool csize_full,
                             bool offset_full, absl::string_view where) {
  size_t at = 0;
  while (at + 4 <= extra.size()) {
    const uint16_t id = U16(extra, at);
    const uint16_t n = U16(extra, at + 2);
    if (at + 4 + n > extra.size()) break;  // padding written by some tools: ignored
    if (id == kZip64ExtraId) {
      absl::string_view f = extra.substr(at + 4, n);
      size_t p = 0;
      for (auto [full, field] : {std::pair<bool, uint64_t*>{size_full, &m.bytes},
                                 {csize_full, &m.compressed_bytes},
                                 {offset_full, &m.local_header_offset}}) {
        if (!full) continue;
        if (p + 8 > f.size())
          return absl::InvalidArgumentError(absl::StrCat(where, ": ZIP64 extra field too short"));
        *field = U64(f, p);
        p += 8;
      }
      return absl::OkStatus();
    }
    at += 4 + n;
  }
  if (size_full || csize_full || offset_full) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": sizes deferred to a ZIP64 extra field it does not have"));
  }
  return absl::OkStatus();
}

std::string MemberWhere(absl::string_view source, const ZipMember& m) {
  return absl::StrCat(source, ": zip member \"", absl::CHexEscape(m.name), "\"");
}

const char* MethodName(uint16_t method) {
  switch (method) {
    case 1:
      return "shrunk";
    case 6:
      return "imploded";
    case 9:
      return "deflate64";
    case 12:
      return "bzip2";
    case 14:
      return "lzma";
    case 93:
      return "zstd";
    case 95:
      return "xz";
    case 99:
      return "AES-encrypted";
    default:
      return "unknown";
  }
}

uint32_t Crc32(absl::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t at = 0; at < data.size();) {
    const size_t n = std::min<size_t>(data.size() - at, UINT_MAX);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + at), static_cast<uInt>(n));
    at += n;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace

bool IsZip(absl::string_view data) {
  return data.size() >= 4 && data[0] == 'P' && data[1] == 'K' &&
         ((data[2] == 3 && data[3] == 4) || (data[2] == 5 && data[3] == 6));
}

absl::StatusOr<std::vector<ZipMember>> ListZip(absl::string_view d, absl::string_view source) {
  VGPU_ASSIGN_OR_RETURN(const Directory dir, FindDirectory(d, source));
  std::vector<ZipMember> members;
  members.reserve(static_cast<size_t>(dir.count));
  uint64_t at = dir.offset;
  const uint64_t stop = dir.offset + dir.bytes;
  for (uint64_t i = 0; i < dir.count; ++i) {
    if (!Fits(at, kCentralSize, stop) || U32(d, static_cast<size_t>(at)) != kCentralHeader) {
      return Bad(source, absl::StrCat("no directory record for member ", i, " of ", dir.count,
                                      " at byte ", at));
    }
    const size_t c = static_cast<size_t>(at);
    const uint64_t name_len = U16(d, c + 28), extra_len = U16(d, c + 30),
                   comment_len = U16(d, c + 32);
    if (!Fits(at + kCentralSize, name_len + extra_len + comment_len, stop)) {
      return Bad(source, absl::StrCat("the directory record of member ", i, " at byte ", at,
                                      " runs past the directory's end"));
    }
    ZipMember m;
    m.flags = U16(d, c + 8);
    m.method = U16(d, c + 10);
    m.crc32 = U32(d, c + 16);
    m.compressed_bytes = U32(d, c + 20);
    m.bytes = U32(d, c + 24);
    m.local_header_offset = U32(d, c + 42);
    m.name = std::string(d.substr(c + kCentralSize, name_len));
    const absl::string_view extra = d.substr(c + kCentralSize + name_len, extra_len);
    VGPU_RETURN_IF_ERROR(
        ApplyZip64Extra(extra, m, m.bytes == 0xffffffff, m.compressed_bytes == 0xffffffff,
                        m.local_header_offset == 0xffffffff, MemberWhere(source, m)));
    if (U16(d, c + 34) != 0 && U16(d, c + 34) != 0xffff) {
      return Bad(source, "split over several disks (multi-part archives are not read)");
    }
    members.push_back(std::move(m));
    at += kCentralSize + name_len + extra_len + comment_len;
  }
  return members;
}

absl::StatusOr<std::string> ReadZipMember(absl::string_view d, const ZipMember& m,
                                          uint64_t max_bytes, absl::string_view source) {
  const std::string where = MemberWhere(source, m);
  if (m.flags & 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is encrypted; archive it without a password"));
  }
  if (m.method != 0 && m.method != 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " is compressed with method ", m.method, " (", MethodName(m.method),
        "); only stored (0) and deflated (8) members are read: re-zip it with the default"));
  }
  if (m.bytes > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(where, " holds ", m.bytes, " bytes, more than ", FormatBytes(max_bytes), " (",
                     max_bytes, " bytes), the most this input may hold"));
  }
  const uint64_t at = m.local_header_offset;
  if (!Fits(at, kLocalSize, d.size()) || U32(d, static_cast<size_t>(at)) != kLocalHeader) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": no local header at byte ", at, ", where the directory points"));
  }
  const size_t l = static_cast<size_t>(at);
  const uint64_t start = at + kLocalSize + U16(d, l + 26) + U16(d, l + 28);
  if (!Fits(start, m.compressed_bytes, d.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": its ", m.compressed_bytes, " bytes at byte ", start,
                     " run past the archive's end (", d.size(), " bytes)"));
  }
  if (U16(d, l + 8) != m.method) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": its local header says method ",
                                                   U16(d, l + 8), ", the directory ", m.method));
  }
  const absl::string_view raw =
      d.substr(static_cast<size_t>(start), static_cast<size_t>(m.compressed_bytes));
  std::string out;
  if (m.method == 0) {
    if (m.compressed_bytes != m.bytes) {
      return absl::InvalidArgumentError(absl::StrCat(where, " is stored (not compressed) but says ",
                                                     m.compressed_bytes, " bytes stored and ",
                                                     m.bytes, " bytes long"));
    }
    out = std::string(raw);
  } else {
    VGPU_ASSIGN_OR_RETURN(out, InflateRaw(raw, m.bytes, where));
  }
  if (const uint32_t crc = Crc32(out); crc != m.crc32) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": CRC-32 ", absl::Hex(crc, absl::kZeroPad8), " where the directory says ",
        absl::Hex(m.crc32, absl::kZeroPad8), " (corrupt archive)"));
  }
  return out;
}

}  // namespace vgpu
