// Test helper: zip archives written the ways real writers write them (stored or deflated
// members, ZIP64 records, data descriptors, torch.save's 64-byte data alignment, a comment), so
// tests make their own .zip / .pt inputs instead of keeping binary files. Each call is
// self-contained (thread-safe).
#ifndef VGPU_TESTS_ZIP_TESTUTIL_H_
#define VGPU_TESTS_ZIP_TESTUTIL_H_

#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "vgpu/tests/gzip_testutil.h"

namespace vgpu::testing {

struct ZipEntrySpec {
  std::string name;
  std::string data;
  bool deflate = false;
};

struct ZipWriteOptions {
  bool zip64 = false;  // ZIP64 end records, and every size and offset in ZIP64 extras
  // ZIP64 end records before a classic end record that still holds the real values: what
  // miniz writes "always ZIP64" (PyTorch's writer) for a small archive.
  bool zip64_end_records = false;
  bool data_descriptor = false;  // CRC and sizes after the data (bit 3), zero in local headers
  size_t align = 0;              // each member's data at a multiple of this (torch.save: 64)
  std::string comment;           // the archive's comment
};

namespace zip_internal {
inline void Put(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
}  // namespace zip_internal

inline std::string Zip(const std::vector<ZipEntrySpec>& entries,
                       const ZipWriteOptions& options = {}) {
  using zip_internal::Put;
  std::string out, central;
  for (const ZipEntrySpec& e : entries) {
    const std::string stored = e.deflate ? Deflate(e.data, -MAX_WBITS, 6) : e.data;
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(e.data.data()), static_cast<uInt>(e.data.size())));
    const uint64_t offset = out.size();
    const uint16_t flags = options.data_descriptor ? 8 : 0;
    const uint16_t method = e.deflate ? 8 : 0;
    // Local header; PyTorch's writer pads its extra field ("FB") so the data starts aligned.
    std::string extra;
    if (options.align > 0) {
      const size_t unpadded = offset + 30 + e.name.size() + 4;
      const size_t pad = (options.align - unpadded % options.align) % options.align;
      Put(extra, 0x4246, 2);
      Put(extra, pad, 2);
      extra.append(pad, 'Z');
    }
    Put(out, 0x04034b50, 4);
    Put(out, 20, 2);
    Put(out, flags, 2);
    Put(out, method, 2);
    Put(out, 0, 4);  // time, date
    Put(out, options.data_descriptor ? 0 : crc, 4);
    Put(out, options.data_descriptor ? 0 : stored.size(), 4);
    Put(out, options.data_descriptor ? 0 : e.data.size(), 4);
    Put(out, e.name.size(), 2);
    Put(out, extra.size(), 2);
    out += e.name;
    out += extra;
    out += stored;
    if (options.data_descriptor) {
      Put(out, 0x08074b50, 4);
      Put(out, crc, 4);
      Put(out, stored.size(), 4);
      Put(out, e.data.size(), 4);
    }
    // Central directory record.
    std::string cextra;
    if (options.zip64) {
      Put(cextra, 0x0001, 2);
      Put(cextra, 24, 2);
      Put(cextra, e.data.size(), 8);
      Put(cextra, stored.size(), 8);
      Put(cextra, offset, 8);
    }
    const uint64_t full = 0xffffffff;
    Put(central, 0x02014b50, 4);
    Put(central, options.zip64 ? 45 : 20, 2);
    Put(central, options.zip64 ? 45 : 20, 2);
    Put(central, flags, 2);
    Put(central, method, 2);
    Put(central, 0, 4);
    Put(central, crc, 4);
    Put(central, options.zip64 ? full : stored.size(), 4);
    Put(central, options.zip64 ? full : e.data.size(), 4);
    Put(central, e.name.size(), 2);
    Put(central, cextra.size(), 2);
    Put(central, 0, 2);  // comment
    Put(central, 0, 2);  // disk
    Put(central, 0, 2);  // internal attributes
    Put(central, 0, 4);  // external attributes
    Put(central, options.zip64 ? full : offset, 4);
    central += e.name;
    central += cextra;
  }
  const uint64_t cd_offset = out.size();
  out += central;
  if (options.zip64 || options.zip64_end_records) {
    const uint64_t record = out.size();
    Put(out, 0x06064b50, 4);
    Put(out, 44, 8);
    Put(out, 45, 2);
    Put(out, 45, 2);
    Put(out, 0, 4);
    Put(out, 0, 4);
    Put(out, entries.size(), 8);
    Put(out, entries.size(), 8);
    Put(out, central.size(), 8);
    Put(out, cd_offset, 8);
    Put(out, 0x07064b50, 4);
    Put(out, 0, 4);
    Put(out, record, 8);
    Put(out, 1, 4);
  }
  Put(out, 0x06054b50, 4);
  Put(out, 0, 2);
  Put(out, 0, 2);
  Put(out, options.zip64 ? 0xffff : entries.size(), 2);
  Put(out, options.zip64 ? 0xffff : entries.size(), 2);
  Put(out, options.zip64 ? 0xffffffff : central.size(), 4);
  Put(out, options.zip64 ? 0xffffffff : cd_offset, 4);
  Put(out, options.comment.size(), 2);
  out += options.comment;
  return out;
}

// The layout torch.save writes for an object without tensors: "<archive>/data.pkl" (its
// pickle) first, then the archive's byte order and version, every member stored, each one's
// data at a multiple of 64 bytes, ZIP64 end records (PyTorch's writer asks miniz for ZIP64).
inline std::string TorchSave(const std::string& pickle, const std::string& archive = "archive") {
  return Zip({{archive + "/data.pkl", pickle},
              {archive + "/byteorder", "little"},
              {archive + "/version", "3\n"},
              {archive + "/.data/serialization_id", "1234567890123456789012345678901234567890"}},
             {.zip64 = false,
              .zip64_end_records = true,
              .data_descriptor = false,
              .align = 64,
              .comment = ""});
}

}  // namespace vgpu::testing

#endif  // VGPU_TESTS_ZIP_TESTUTIL_H_
