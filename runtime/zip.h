// Zip archives as input, read from memory: `torch.save(obj, f)` writes one (the object's pickle
// is the member "<name>/data.pkl"), and users zip their logs to send them. The subset that
// PyTorch's writer (miniz), Python's zipfile and Info-ZIP produce: stored or deflated members,
// ZIP64 sizes and offsets, data descriptors, archive comments and padding extra fields.
// Encrypted members, other compression methods and archives split over several disks are
// refused by name.
//
// Hostile input is expected: every offset, length and count is checked against the input
// before it is used, a member's stated size is checked against the caller's cap before any
// memory is taken, and its CRC-32 is checked after. Errors are InvalidArgument naming `source`,
// the member and the byte offset; ResourceExhausted for a member over the cap.
//
// Thread safety: pure functions without shared state; safe from any thread.
#ifndef VGPU_RUNTIME_ZIP_H_
#define VGPU_RUNTIME_ZIP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vgpu {

// One member, as the archive's central directory describes it.
struct ZipMember {
  std::string name;     // as stored ("archive/data.pkl"); a directory's ends in '/'
  uint16_t method = 0;  // 0 stored, 8 deflated; others are listed but not read
  uint16_t flags = 0;   // general purpose bits (bit 0: encrypted)
  uint32_t crc32 = 0;
  uint64_t compressed_bytes = 0;
  uint64_t bytes = 0;  // uncompressed
  uint64_t local_header_offset = 0;

  bool is_directory() const { return !name.empty() && name.back() == '/'; }
};

// Whether `data` starts like a zip archive: a local file header ("PK\3\4") or, for an empty
// archive, the end of central directory record ("PK\5\6"). No text format we read starts so.
bool IsZip(absl::string_view data);

// The members in the central directory's order. InvalidArgument when there is no end of
// central directory record, the directory lies outside the data or a record is malformed.
absl::StatusOr<std::vector<ZipMember>> ListZip(absl::string_view data, absl::string_view source);

// The member's uncompressed contents, checked against its CRC-32. ResourceExhausted when it
// says it holds more than `max_bytes` (before anything is inflated).
absl::StatusOr<std::string> ReadZipMember(absl::string_view data, const ZipMember& member,
                                          uint64_t max_bytes, absl::string_view source);

}  // namespace vgpu

#endif  // VGPU_RUNTIME_ZIP_H_
