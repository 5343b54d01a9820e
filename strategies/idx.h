// Reader for the IDX format of MNIST / Fashion-MNIST (gzip-compressed or plain; zlib reads
// both), and the dataset loader vgpu-train uses. Errors name the file and the problem: a
// missing file is NotFound, a bad magic number, a wrong element type, truncated data or
// mismatched image/label counts are InvalidArgument.
//
// Thread safety: free functions without shared state.
#ifndef VGPU_STRATEGIES_IDX_H_
#define VGPU_STRATEGIES_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vgpu {
namespace strategies {

struct IdxArray {
  std::vector<int> dims;      // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;  // unsigned bytes (type 0x08), row-major
};

// What an IDX header may promise, from what MNIST-style data can be (60000 or 10000 images of
// 28 x 28), generously: at most kMaxIdxItems items, kMaxIdxDimension per other dimension and
// kMaxIdxBytes in all.
inline constexpr uint32_t kMaxIdxItems = 1'000'000;
inline constexpr uint32_t kMaxIdxDimension = 4096;
inline constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 30;

// Checks a header's dimensions against the caps above (InvalidArgument) and against
// `machine_bytes` of memory (ResourceExhausted when loading, 5 bytes per element with the
// floats, takes more than half of it; 0 = unknown, not checked).
absl::Status CheckIdxShape(absl::string_view path, const std::vector<uint32_t>& dims,
                           uint64_t machine_bytes);

// Reads an IDX file of unsigned bytes (a regular file, runtime/file_io.h). The header is
// checked with CheckIdxShape against this machine's memory before anything is allocated; data
// shorter or longer than the header promises is InvalidArgument.
absl::StatusOr<IdxArray> ReadIdx(const std::string& path);

struct Dataset {
  int rows = 0;
  int features = 0;
  std::vector<float> x;    // rows x features, scaled to [0, 1]
  std::vector<int32_t> y;  // rows labels
};

struct MnistLike {
  Dataset train, test;
};

// Classes of MNIST-style data (digits, Fashion-MNIST): labels are 0..kMnistClasses-1.
inline constexpr int kMnistClasses = 10;
// DIR/{train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-...}[.gz] (gz preferred); labels
// outside 0..9 are InvalidArgument naming the file and the index.
absl::StatusOr<MnistLike> LoadMnistLike(const std::string& dir);
// One split: images + labels files.
absl::StatusOr<Dataset> LoadIdxPair(const std::string& images_path, const std::string& labels_path);

inline constexpr absl::string_view kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_IDX_H_
