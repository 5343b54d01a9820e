#include "vgpu/strategies/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/file_io.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace strategies {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

// Reads exactly `n` bytes; false on a short read.
bool ReadExact(gzFile f, void* dst, uint64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(n, 1u << 30));
    int got = gzread(f, p, chunk);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<uint64_t>(got);
  }
  return true;
}

}  // namespace

absl::Status CheckIdxShape(absl::string_view path, const std::vector<uint32_t>& dims,
                           uint64_t machine_bytes) {
  const std::string shape = absl::StrJoin(dims, " x ");
  uint64_t total = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    const uint32_t d = dims[i];
    if (d == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": IDX dimension ", i, " has size 0 (header ", shape, ")"));
    }
    if (i == 0 && d > kMaxIdxItems) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": IDX header promises ", d, " items, too large (at most ",
                       kMaxIdxItems, "; MNIST-style data sets have 60000 or 10000)"));
    }
    if (i > 0 && d > kMaxIdxDimension) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": IDX dimension ", i, " of size ", d,
                                                     " is too large (at most ", kMaxIdxDimension,
                                                     " per image dimension)"));
    }
    total *= d;  // <= 10^6 * 4096^3 < 2^62: cannot overflow
  }
  if (total > kMaxIdxBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": IDX header promises ", shape, " = ",
                                                   total, " bytes, too large (at most ",
                                                   FormatBytes(kMaxIdxBytes), ")"));
  }
  // Loading keeps the bytes and a float per byte (Dataset::x): 5 bytes per element.
  const uint64_t need = total * 5;
  if (machine_bytes != 0 && need > machine_bytes / 2) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": IDX header promises ", shape, " = ", total, " bytes; loading takes ",
                     FormatBytes(need), ", more than half of this machine's memory (",
                     FormatBytes(machine_bytes), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<IdxArray> ReadIdx(const std::string& path) {
  // Only a regular file (not a FIFO or device) is opened; a compressed file is never larger
  // than the largest payload it may hold.
  VGPU_ASSIGN_OR_RETURN(InputFile file, InputFile::Open(path, kMaxIdxBytes + 4096, "IDX file"));
  std::unique_ptr<gzFile_s, GzCloser> f(gzdopen(file.fd(), "rb"));
  if (f == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  file.Release();  // gzclose closes it now
  uint8_t magic[4];
  if (!ReadExact(f.get(), magic, 4)) {
    return absl::InvalidArgumentError(absl::StrCat(path,
                                                   ": not an IDX file (shorter than its "
                                                   "4-byte magic number, or corrupt gzip)"));
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an IDX file (magic number starts ",
                                                   static_cast<int>(magic[0]), " ",
                                                   static_cast<int>(magic[1]), ", expected 0 0)"));
  }
  if (magic[2] != 0x08) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": IDX element type 0x",
                                                   absl::Hex(magic[2]),
                                                   " is not supported (need 0x08, "
                                                   "unsigned bytes)"));
  }
  const int ndims = magic[3];
  if (ndims < 1 || ndims > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": IDX file with ", ndims, " dimensions (expected 1..4)"));
  }
  std::vector<uint32_t> dims;
  for (int i = 0; i < ndims; ++i) {
    uint8_t b[4];
    if (!ReadExact(f.get(), b, 4)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": truncated header (dimension ", i, " of ", ndims, ")"));
    }
    dims.push_back((uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3]);
  }
  // What the header promises is checked against what the data set can be and what this
  // machine has before anything is allocated (a decompression bomb promises gigabytes).
  VGPU_RETURN_IF_ERROR(CheckIdxShape(path, dims, PhysicalMemoryBytes()));
  IdxArray a;
  uint64_t total = 1;
  for (uint32_t d : dims) {
    a.dims.push_back(static_cast<int>(d));
    total *= d;
  }
  // Grow with the data actually read, never with what the header promises: a short file
  // must not make us take the whole promise (found by tests/fuzz/idx_fuzz.cc).
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  for (uint64_t done = 0; done < total;) {
    const uint64_t n = std::min(kChunk, total - done);
    a.data.resize(done + n);
    if (!ReadExact(f.get(), a.data.data() + done, n)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": truncated data (header promises [",
                                                     absl::StrJoin(a.dims, ","), "] = ", total,
                                                     " bytes)"));
    }
    done += n;
  }
  // Bytes past the promise mean the header does not describe the file.
  uint8_t extra;
  if (gzread(f.get(), &extra, 1) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": data is longer than the header promises ([", absl::StrJoin(a.dims, ","),
        "] = ", total, " bytes), or the gzip stream is corrupt"));
  }
  return a;
}

absl::StatusOr<Dataset> LoadIdxPair(const std::string& images_path,
                                    const std::string& labels_path) {
  VGPU_ASSIGN_OR_RETURN(IdxArray images, ReadIdx(images_path));
  VGPU_ASSIGN_OR_RETURN(IdxArray labels, ReadIdx(labels_path));
  if (images.dims.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(images_path, ": images need at least 2 dimensions, got ", images.dims.size()));
  }
  if (labels.dims.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels_path, ": labels need 1 dimension, got ", labels.dims.size()));
  }
  if (images.dims[0] != labels.dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat(images_path, " has ", images.dims[0],
                                                   " images but ", labels_path, " has ",
                                                   labels.dims[0], " labels"));
  }
  Dataset d;
  d.rows = images.dims[0];
  d.features = static_cast<int>(images.data.size() / d.rows);
  d.x.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) d.x[i] = images.data[i] * (1.0f / 255.0f);
  d.y.assign(labels.data.begin(), labels.data.end());
  return d;
}

absl::StatusOr<MnistLike> LoadMnistLike(const std::string& dir) {
  auto find = [&](const std::string& stem) -> absl::StatusOr<std::string> {
    for (const std::string& p :
         {absl::StrCat(dir, "/", stem, ".gz"), absl::StrCat(dir, "/", stem)}) {
      if (Exists(p)) return p;
    }
    return absl::NotFoundError(absl::StrCat(dir, "/", stem,
                                            "[.gz]: no such file (expected an "
                                            "MNIST-style IDX folder; Fashion-MNIST is in Debian's "
                                            "dataset-fashion-mnist package)"));
  };
  MnistLike m;
  VGPU_ASSIGN_OR_RETURN(std::string tri, find("train-images-idx3-ubyte"));
  VGPU_ASSIGN_OR_RETURN(std::string trl, find("train-labels-idx1-ubyte"));
  VGPU_ASSIGN_OR_RETURN(std::string tei, find("t10k-images-idx3-ubyte"));
  VGPU_ASSIGN_OR_RETURN(std::string tel, find("t10k-labels-idx1-ubyte"));
  VGPU_ASSIGN_OR_RETURN(m.train, LoadIdxPair(tri, trl));
  VGPU_ASSIGN_OR_RETURN(m.test, LoadIdxPair(tei, tel));
  // The model's output layer has one unit per class: a label outside it would only fail later,
  // inside the loss kernel, without naming the file.
  for (const auto& [split, path] :
       {std::pair<const Dataset*, const std::string*>{&m.train, &trl}, {&m.test, &tel}}) {
    for (size_t i = 0; i < split->y.size(); ++i) {
      if (split->y[i] < 0 || split->y[i] >= kMnistClasses) {
        return absl::InvalidArgumentError(
            absl::StrCat(*path, ": label ", split->y[i], " at index ", i, " is outside 0..",
                         kMnistClasses - 1, " (MNIST-style data has ", kMnistClasses, " classes)"));
      }
    }
  }
  if (m.train.features != m.test.features) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": train images have ", m.train.features,
                                                   " features, test images ", m.test.features));
  }
  return m;
}

}  // namespace strategies
}  // namespace vgpu
