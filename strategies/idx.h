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

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vgpu {
namespace strategies {

struct IdxArray {
  std::vector<int> dims;      // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;  // unsigned bytes (type 0x08), row-major
};

// Reads an IDX file of unsigned bytes.
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
