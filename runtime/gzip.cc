#include "vgpu/runtime/gzip.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "vgpu/runtime/bytes.h"

namespace vgpu {
namespace {

// Owns an inflate stream for one Gunzip call.
class Inflater {
 public:
  Inflater() = default;
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  ~Inflater() {
    if (ready_) inflateEnd(&zs_);
  }
  // 16 + MAX_WBITS: a gzip header and trailer (CRC-32 and length checked), not zlib or raw.
  bool Init() { return ready_ = inflateInit2(&zs_, 16 + MAX_WBITS) == Z_OK; }
  z_stream& z() { return zs_; }

 private:
  z_stream zs_{};
  bool ready_ = false;
};

bool AllZero(absl::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == 0; });
}

}  // namespace

bool IsGzip(absl::string_view data) {
  return data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
         static_cast<unsigned char>(data[1]) == 0x8b;
}

absl::StatusOr<std::string> Gunzip(absl::string_view data, uint64_t max_bytes,
                                   absl::string_view source) {
  if (!IsGzip(data)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a gzip stream (gzip starts with the bytes 1f 8b)"));
  }
  Inflater inflater;
  if (!inflater.Init()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(source, ": zlib could not start inflating (out of memory)"));
  }
  z_stream& zs = inflater.z();
  // One byte past the cap tells "exactly the cap" from "more than the cap".
  const uint64_t limit = std::min<uint64_t>(max_bytes, SIZE_MAX / 2) + 1;
  std::string out;
  uint64_t produced = 0;
  size_t fed = 0;  // bytes of `data` handed to zlib so far (zs.avail_in of them not yet read)
  auto consumed = [&] { return fed - zs.avail_in; };
  auto* const in = reinterpret_cast<const Bytef*>(data.data());
  auto over_cap = [&] {
    return absl::ResourceExhaustedError(absl::StrCat(
        source, ": inflates to more than ", FormatBytes(max_bytes), " (", max_bytes,
        " bytes), the most this input may hold; compressed it is ", data.size(), " bytes"));
  };
  for (;;) {
    if (zs.avail_in == 0 && fed < data.size()) {  // zlib counts input in 32 bits
      const size_t n = std::min<size_t>(data.size() - fed, UINT_MAX);
      zs.next_in = const_cast<Bytef*>(in + fed);
      zs.avail_in = static_cast<uInt>(n);
      fed += n;
    }
    if (produced == out.size()) {
      if (out.size() >= limit) return over_cap();
      // Doubling from ~4x the compressed size (text logs compress 5-20x).
      const uint64_t want = std::max<uint64_t>({out.size() * 2, data.size() * 4, 64 * 1024});
      out.resize(static_cast<size_t>(std::min(want, limit)));
    }
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(std::min<uint64_t>(out.size() - produced, UINT_MAX));
    const uInt room = zs.avail_out;
    const int ret = inflate(&zs, Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (ret == Z_STREAM_END) {
      // A member ends here: another may follow (concatenated .gz files), or padding.
      const absl::string_view rest = data.substr(consumed());
      if (rest.empty() || AllZero(rest)) break;
      if (!IsGzip(rest)) {
        return absl::InvalidArgumentError(absl::StrCat(
            source, ": data after the gzip stream, at byte ", consumed(), " of ", data.size()));
      }
      if (inflateReset(&zs) != Z_OK) {
        return absl::InternalError(absl::StrCat(source, ": zlib could not start the next member"));
      }
      continue;
    }
    if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT || ret == Z_STREAM_ERROR) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": corrupt gzip stream at byte ", consumed(), " of ", data.size(),
                       zs.msg != nullptr ? absl::StrCat(" (", zs.msg, ")") : std::string()));
    }
    if (ret == Z_MEM_ERROR) {
      return absl::ResourceExhaustedError(
          absl::StrCat(source, ": zlib ran out of memory inflating the gzip stream"));
    }
    // Z_OK or Z_BUF_ERROR: more output room (above), or more input; none left means the
    // stream was cut short.
    if (zs.avail_in == 0 && fed == data.size() && zs.avail_out > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": the gzip stream ends early (truncated after ", data.size(),
                       " bytes, ", produced, " bytes inflated)"));
    }
  }
  // The byte past the cap may have come with the stream's end.
  if (produced > max_bytes) return over_cap();
  out.resize(static_cast<size_t>(produced));
  return out;
}

absl::StatusOr<std::string> GunzipIfCompressed(std::string data, uint64_t max_bytes,
                                               absl::string_view source, bool* was_gzip) {
  const bool gz = IsGzip(data);
  if (was_gzip != nullptr) *was_gzip = gz;
  if (!gz) return data;
  return Gunzip(data, max_bytes, source);
}

absl::StatusOr<std::string> GzipCompress(absl::string_view data, int level) {
  if (level < Z_DEFAULT_COMPRESSION || level > Z_BEST_COMPRESSION) {
    return absl::InvalidArgumentError(
        absl::StrCat("gzip compression level ", level, " is not in -1..9"));
  }
  z_stream zs{};
  if (deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return absl::ResourceExhaustedError("zlib could not start compressing (out of memory)");
  }
  std::string out(deflateBound(&zs, data.size()), '\0');
  auto* const in = reinterpret_cast<const Bytef*>(data.data());
  size_t fed = 0;
  uint64_t produced = 0;
  int ret = Z_OK;
  while (ret != Z_STREAM_END) {  // zlib counts in 32 bits: fed and drained in chunks
    if (zs.avail_in == 0 && fed < data.size()) {
      const size_t n = std::min<size_t>(data.size() - fed, UINT_MAX);
      zs.next_in = const_cast<Bytef*>(in + fed);
      zs.avail_in = static_cast<uInt>(n);
      fed += n;
    }
    if (produced == out.size()) out.resize(out.size() * 2 + 64);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(std::min<uint64_t>(out.size() - produced, UINT_MAX));
    const uInt room = zs.avail_out;
    ret = deflate(&zs, fed == data.size() && zs.avail_in == 0 ? Z_FINISH : Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (ret == Z_STREAM_ERROR) {
      deflateEnd(&zs);
      return absl::InternalError("zlib failed while compressing");
    }
  }
  deflateEnd(&zs);
  out.resize(static_cast<size_t>(produced));
  return out;
}

}  // namespace vgpu
