#include "vgpu/runtime/gzip.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace {

// One zlib stream, inflating or deflating, ended when it goes out of scope; and the two chores
// both directions share: handing zlib the input in parts (it counts bytes in 32 bits) and
// pointing it at the free end of the output.
class ZStream {
 public:
  explicit ZStream(absl::string_view data) : data_(data) {}
  ZStream(const ZStream&) = delete;
  ZStream& operator=(const ZStream&) = delete;
  ~ZStream() {
    if (mode_ == Mode::kInflate) inflateEnd(&zs_);
    if (mode_ == Mode::kDeflate) deflateEnd(&zs_);
  }
  // 16 + MAX_WBITS: a gzip header and trailer (CRC-32 and length checked); -MAX_WBITS: raw
  // deflate data (a zip member, whose CRC-32 the caller checks).
  bool InitInflate(int window_bits = 16 + MAX_WBITS) {
    if (inflateInit2(&zs_, window_bits) != Z_OK) return false;
    mode_ = Mode::kInflate;
    return true;
  }
  bool InitDeflate(int level) {
    if (deflateInit2(&zs_, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      return false;
    }
    mode_ = Mode::kDeflate;
    return true;
  }
  z_stream& z() { return zs_; }
  // The next part of the input, once zlib has read what it had.
  void Feed() {
    if (zs_.avail_in != 0 || fed_ == data_.size()) return;
    const size_t n = std::min<size_t>(data_.size() - fed_, UINT_MAX);
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data_.data() + fed_));
    zs_.avail_in = static_cast<uInt>(n);
    fed_ += n;
  }
  // What an inflate() return code means for `what` ("gzip stream"): OK for the codes that ask
  // for more output room or input, or end the stream.
  absl::Status InflateError(int ret, absl::string_view source, absl::string_view what) const {
    if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT || ret == Z_STREAM_ERROR) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": corrupt ", what, " at byte ", consumed(), " of ", data_.size(),
                       zs_.msg != nullptr ? absl::StrCat(" (", zs_.msg, ")") : std::string()));
    }
    if (ret == Z_MEM_ERROR) {
      return absl::ResourceExhaustedError(
          absl::StrCat(source, ": zlib ran out of memory inflating the ", what));
    }
    return absl::OkStatus();
  }
  // Makes room past out[produced] when the output is full: doubling from ~4x the input (text
  // logs compress 5-20x), at most `limit` bytes in all; false when `out` already holds them.
  bool Room(std::string& out, uint64_t produced, uint64_t limit) const {
    if (produced < out.size()) return true;
    if (out.size() >= limit) return false;
    const uint64_t want = std::max<uint64_t>({out.size() * 2, data_.size() * 4, 64 * 1024});
    out.resize(static_cast<size_t>(std::min(want, limit)));
    return true;
  }
  bool all_fed() const { return fed_ == data_.size() && zs_.avail_in == 0; }
  size_t consumed() const { return fed_ - zs_.avail_in; }  // bytes of the input zlib has read
  // zlib writes from out[produced] on (at most 4 GiB at once); returns the room it was given.
  uInt PointOutput(std::string& out, uint64_t produced) {
    zs_.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs_.avail_out = static_cast<uInt>(std::min<uint64_t>(out.size() - produced, UINT_MAX));
    return zs_.avail_out;
  }

 private:
  enum class Mode { kNone, kInflate, kDeflate };
  absl::string_view data_;
  z_stream zs_{};
  Mode mode_ = Mode::kNone;
  size_t fed_ = 0;  // bytes handed to zlib so far (zs_.avail_in of them not yet read)
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
  ZStream stream(data);
  if (!stream.InitInflate()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(source, ": zlib could not start inflating (out of memory)"));
  }
  z_stream& zs = stream.z();
  // One byte past the cap tells "exactly the cap" from "more than the cap".
  const uint64_t limit = std::min<uint64_t>(max_bytes, SIZE_MAX / 2) + 1;
  std::string out;
  uint64_t produced = 0;
  auto over_cap = [&] {
    return absl::ResourceExhaustedError(absl::StrCat(
        source, ": inflates to more than ", FormatBytes(max_bytes), " (", max_bytes,
        " bytes), the most this input may hold; compressed it is ", data.size(), " bytes"));
  };
  for (;;) {
    stream.Feed();
    if (!stream.Room(out, produced, limit)) return over_cap();
    const uInt room = stream.PointOutput(out, produced);
    const int ret = inflate(&zs, Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (ret == Z_STREAM_END) {
      // A member ends here: another may follow (concatenated .gz files), or padding.
      const absl::string_view rest = data.substr(stream.consumed());
      if (rest.empty() || AllZero(rest)) break;
      if (!IsGzip(rest)) {
        return absl::InvalidArgumentError(absl::StrCat(source,
                                                       ": data after the gzip stream, at byte ",
                                                       stream.consumed(), " of ", data.size()));
      }
      if (inflateReset(&zs) != Z_OK) {
        return absl::InternalError(absl::StrCat(source, ": zlib could not start the next member"));
      }
      continue;
    }
    VGPU_RETURN_IF_ERROR(stream.InflateError(ret, source, "gzip stream"));
    // Z_OK or Z_BUF_ERROR: more output room (above), or more input; none left means the
    // stream was cut short.
    if (stream.all_fed() && zs.avail_out > 0) {
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

absl::StatusOr<std::string> InflateRaw(absl::string_view data, uint64_t bytes,
                                       absl::string_view source) {
  if (bytes > SIZE_MAX / 2) {
    return absl::ResourceExhaustedError(
        absl::StrCat(source, ": says it inflates to ", bytes, " bytes, more than memory holds"));
  }
  ZStream stream(data);
  if (!stream.InitInflate(-MAX_WBITS)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(source, ": zlib could not start inflating (out of memory)"));
  }
  z_stream& zs = stream.z();
  // Up to one byte past the stated size, so data that inflates to more is caught here; grown
  // as it fills, so a small member that claims a large size takes no memory on its word.
  const uint64_t limit = bytes + 1;
  std::string out;
  uint64_t produced = 0;
  for (;;) {
    stream.Feed();
    if (!stream.Room(out, produced, limit)) break;  // not reached: produced > bytes returns
    const uInt room = stream.PointOutput(out, produced);
    const int ret = inflate(&zs, Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (produced > bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": inflates to more than the ", bytes, " bytes it says it holds"));
    }
    if (ret == Z_STREAM_END) break;
    VGPU_RETURN_IF_ERROR(stream.InflateError(ret, source, "deflate data"));
    if (stream.all_fed() && (ret == Z_BUF_ERROR || zs.avail_out > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": the deflate data ends early (truncated after ", data.size(),
                       " bytes, ", produced, " of ", bytes, " bytes inflated)"));
    }
  }
  if (stream.consumed() != data.size()) {
    return absl::InvalidArgumentError(absl::StrCat(source,
                                                   ": data after the deflate stream, at byte ",
                                                   stream.consumed(), " of ", data.size()));
  }
  if (produced != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": inflates to ", produced, " bytes where it says ", bytes));
  }
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
  ZStream stream(data);
  if (!stream.InitDeflate(level)) {
    return absl::ResourceExhaustedError("zlib could not start compressing (out of memory)");
  }
  z_stream& zs = stream.z();
  std::string out(deflateBound(&zs, data.size()), '\0');
  uint64_t produced = 0;
  int ret = Z_OK;
  while (ret != Z_STREAM_END) {
    stream.Feed();
    if (produced == out.size()) out.resize(out.size() * 2 + 64);
    const uInt room = stream.PointOutput(out, produced);
    ret = deflate(&zs, stream.all_fed() ? Z_FINISH : Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (ret == Z_STREAM_ERROR) return absl::InternalError("zlib failed while compressing");
  }
  out.resize(static_cast<size_t>(produced));
  return out;
}

absl::StatusOr<std::string> GzipIfNamed(absl::string_view path, std::string contents) {
  if (!absl::EndsWith(path, ".gz")) return contents;
  return GzipCompress(contents);
}

}  // namespace vgpu
