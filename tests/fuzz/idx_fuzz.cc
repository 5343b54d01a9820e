// Fuzzes the IDX reader (plain and gzip input through zlib): never crashes, never takes memory
// the file does not hold, and an accepted array has exactly the bytes its dimensions promise.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "vgpu/strategies/idx.h"

namespace {
// The input file, removed when the fuzzer exits (its static objects are destroyed then).
struct InputPath {
  std::string path = "/tmp/vgpu_idx_fuzz_" + std::to_string(getpid());
  ~InputPath() { std::remove(path.c_str()); }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const InputPath input;
  const std::string& path = input.path;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto a = vgpu::strategies::ReadIdx(path);
  if (a.ok()) {
    uint64_t total = 1;
    for (int d : a->dims) total *= static_cast<uint64_t>(d);
    if (a->dims.empty() || total != a->data.size()) std::abort();
  } else if (a.status().message().find(path) == std::string::npos) {
    std::abort();  // errors name the file
  }
  return 0;
}
