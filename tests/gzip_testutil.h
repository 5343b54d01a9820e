// Test helper: data compressed the way `gzip` writes it (one member), so tests make their own
// .gz inputs instead of keeping binary files. Not thread-safe to share a z_stream; each call
// uses its own.
#ifndef VGPU_TESTS_GZIP_TESTUTIL_H_
#define VGPU_TESTS_GZIP_TESTUTIL_H_

#include <zlib.h>

#include <string>

#include "gtest/gtest.h"

namespace vgpu::testing {

inline std::string Gzip(const std::string& data) {
  z_stream zs{};
  EXPECT_EQ(
      deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
      Z_OK);
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

}  // namespace vgpu::testing

#endif  // VGPU_TESTS_GZIP_TESTUTIL_H_
