// Gzip-compressed input, told apart by content: users compress their allocator logs (a PyTorch
// snapshot or an RMM log of a long run is hundreds of megabytes, mostly repeated text), so the
// readers of traces and memory histories take a .gz file as it is, with no flag and no
// temporary file. Inflating is bounded: the output stops at a cap the caller picks for that
// kind of input (a small file that inflates to gigabytes is refused, not read). And output:
// `vgpu-bench convert` writes a .gz trace with GzipCompress.
//
// Thread safety: pure functions without shared state; safe from any thread.
#ifndef VGPU_RUNTIME_GZIP_H_
#define VGPU_RUNTIME_GZIP_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vgpu {

// Whether `data` starts with the gzip magic bytes 0x1f 0x8b (RFC 1952). No text format we read
// starts with them: 0x8b is not valid UTF-8 as a second byte after 0x1f.
bool IsGzip(absl::string_view data);

// Inflates a gzip stream: every member, as `gzip -d` does with concatenated files, and trailing
// zero bytes (tape padding) are allowed. Errors name `source`: InvalidArgument for data that is
// not gzip, a corrupt or truncated stream (with the byte offset), or other data after the last
// member; ResourceExhausted when the output would pass `max_bytes` (naming the cap).
absl::StatusOr<std::string> Gunzip(absl::string_view data, uint64_t max_bytes,
                                   absl::string_view source);

// Raw deflate data (RFC 1951, no gzip or zlib wrapper: a zip archive's member) that says it
// inflates to exactly `bytes`: InvalidArgument naming `source` when it is corrupt, ends early,
// has data after its end or inflates to more or fewer bytes. The output grows as it fills (a
// small input that claims a large size takes no memory on its word); the caller checks `bytes`
// against its cap first and the member's CRC-32 after.
absl::StatusOr<std::string> InflateRaw(absl::string_view data, uint64_t bytes,
                                       absl::string_view source);

// `data` itself when it is not gzip, else Gunzip(data, max_bytes, source). `*was_gzip` (when
// given) says which.
absl::StatusOr<std::string> GunzipIfCompressed(std::string data, uint64_t max_bytes,
                                               absl::string_view source, bool* was_gzip = nullptr);

// `data` compressed as one gzip member (what `gzip` writes; zlib level 6 by default), for
// output files whose name ends in .gz. ResourceExhausted if zlib runs out of memory.
absl::StatusOr<std::string> GzipCompress(absl::string_view data, int level = 6);

// What an output file named `path` holds: `contents` gzip-compressed (GzipCompress) when the
// name ends in .gz (`vgpu-bench convert`, every --memory-history), else `contents` itself.
absl::StatusOr<std::string> GzipIfNamed(absl::string_view path, std::string contents);

}  // namespace vgpu

#endif  // VGPU_RUNTIME_GZIP_H_
