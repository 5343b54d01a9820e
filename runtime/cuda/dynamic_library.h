// Run-time loading of the vendor libraries the cuda platform never links (libcuda, cuBLAS,
// NCCL): which names to try, dlopen, and typed dlsym. Only the mechanics are shared; each
// loader keeps its own error texts, since they tell the user which variable to set.
//
// Internal to runtime/cuda. Thread safety: the free functions are safe from any thread (as
// dlopen and dlsym are); a SymbolLoader belongs to one thread.
#ifndef VGPU_RUNTIME_CUDA_DYNAMIC_LIBRARY_H_
#define VGPU_RUNTIME_CUDA_DYNAMIC_LIBRARY_H_

#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace vgpu::cuda {

// The library names to try, in order: the value of `env_var` alone when it is set and not
// empty (an explicit choice gets no silent fallback), else `defaults`.
std::vector<std::string> LibraryNames(const char* env_var, absl::Span<const char* const> defaults);

// dlopen(name, RTLD_NOW | RTLD_LOCAL); RTLD_LOCAL so that a vendor library's symbols never
// satisfy anyone else's lookups. Callers never dlclose: other threads of the library may
// outlive any one object. Errors carry dlerror()'s text (it names the file): NotFound when
// the file does not exist, FailedPrecondition when it exists but cannot be loaded.
absl::StatusOr<void*> OpenLibrary(const std::string& name);

// dlsym(library, symbol), or null.
void* FindSymbol(void* library, const char* symbol);

// Sets the function pointer `fn` to `symbol` in `library`; false (and fn null) when absent.
template <typename FnPtr>
bool LoadSymbol(void* library, const char* symbol, FnPtr& fn) {
  static_assert(std::is_pointer_v<FnPtr> && std::is_function_v<std::remove_pointer_t<FnPtr>>,
                "LoadSymbol sets a function pointer");
  fn = reinterpret_cast<FnPtr>(FindSymbol(library, symbol));
  return fn != nullptr;
}

// Fills a table of function pointers from one library, remembering the symbols it lacks so
// that one error can name them all.
class SymbolLoader {
 public:
  explicit SymbolLoader(void* library) : library_(library) {}

  template <typename FnPtr>
  void operator()(FnPtr& fn, const char* symbol) {
    if (!LoadSymbol(library_, symbol, fn)) missing_.push_back(symbol);
  }

  // The symbols not found, in the order asked for.
  const std::vector<std::string>& missing() const { return missing_; }

 private:
  void* library_;
  std::vector<std::string> missing_;
};

}  // namespace vgpu::cuda

#endif  // VGPU_RUNTIME_CUDA_DYNAMIC_LIBRARY_H_
