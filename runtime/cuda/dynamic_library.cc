#include "runtime/cuda/dynamic_library.h"

#include <dlfcn.h>

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace vgpu::cuda {

std::vector<std::string> LibraryNames(const char* env_var, absl::Span<const char* const> defaults) {
  if (const char* env = std::getenv(env_var); env != nullptr && *env != '\0') return {env};
  return std::vector<std::string>(defaults.begin(), defaults.end());
}

absl::StatusOr<void*> OpenLibrary(const std::string& name) {
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::NotFoundError(why != nullptr ? why : absl::StrCat(name, ": dlopen failed"));
  }
  return handle;
}

void* FindSymbol(void* library, const char* symbol) { return dlsym(library, symbol); }

}  // namespace vgpu::cuda
