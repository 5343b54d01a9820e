#include "vgpu/runtime/cuda/dynamic_library.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace vgpu::cuda {

std::vector<std::string> LibraryNames(const char* env_var, absl::Span<const char* const> defaults) {
  if (const char* env = std::getenv(env_var); env != nullptr && *env != '\0') return {env};
  return std::vector<std::string>(defaults.begin(), defaults.end());
}

absl::StatusOr<void*> OpenLibrary(const std::string& name) {
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    const std::string why = err != nullptr ? err : absl::StrCat(name, ": dlopen failed");
    // A path is missing when stat says so; a bare name (searched on the library path) when
    // dlerror does. Anything else exists but is not loadable ("invalid ELF header", "file
    // too short", a wrong architecture): a different fix, so a different code.
    struct stat st;
    const bool missing = name.find('/') != std::string::npos
                             ? stat(name.c_str(), &st) != 0
                             : absl::StrContains(why, "No such file or directory");
    if (missing) return absl::NotFoundError(why);
    return absl::FailedPreconditionError(why);
  }
  return handle;
}

void* FindSymbol(void* library, const char* symbol) { return dlsym(library, symbol); }

}  // namespace vgpu::cuda
