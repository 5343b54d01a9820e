// Test helper: data compressed the way `gzip` writes it (one member), so tests make their own
// .gz inputs instead of keeping binary files. Not thread-safe to share a z_stream; each call
// uses its own.
#ifndef VGPU_TESTS_GZIP_TESTUTIL_H_
#define VGPU_TESTS_GZIP_TESTUTIL_H_

#include <zlib.h>

#include <string>

#include "gtest/gtest.h"

namespace vgpu::testing {

// zlib's deflate with `window_bits` as deflateInit2 takes them: 16 + MAX_WBITS for a gzip
// member, -MAX_WBITS for raw deflate data (a zip member).
inline std::string Deflate(const std::string& data, int window_bits, int level) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, level, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, data.size()) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

inline std::string Gzip(const std::string& data) {
  return Deflate(data, 16 + MAX_WBITS, Z_BEST_COMPRESSION);
}

}  // namespace vgpu::testing

#endif  // VGPU_TESTS_GZIP_TESTUTIL_H_
