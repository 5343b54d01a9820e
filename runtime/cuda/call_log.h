// The call log: with VGPU_CUDA_CALL_LOG=FILE set, the cuda platform's loaders wrap every
// Driver API, cuBLAS and NCCL entry point they hand out, so that each call the platform makes
// is written to FILE as one line with its arguments and result:
//
//   cuMemAlloc(0x7ffd5e0c8a10->0x7f3a00000000, 1048576) = CUDA_SUCCESS (0) [thread 3]
//
// The same lines come out against the CUDA simulator and against the real libraries, so a
// run of one test on each can be compared with scripts/cuda-call-log-diff (which numbers
// pointers and threads in order of first appearance). With VGPU_CUDA_CALL_LOG_TIMES=1 each
// line also ends in the call's duration, " {12.345 us}" (what a call costs on a card;
// scripts/cuda-call-log-diff --times sums them per entry point, and ignores them otherwise).
// Generic over the function pointer type; needs no CUDA header (the loaders pass a namer for their
// result type).
//
// Formatting: integers in decimal; CUdeviceptr (unsigned long long) and pointers in hex,
// null as NULL; enums as their integer; const char* as a quoted string; a non-const pointer
// to an integer, enum or pointer (an output parameter) as ADDRESS->VALUE once the call
// succeeded (floats and chars are never read through: they may be device arrays).
//
// Thread safety: Wrap and the wrapped functions are safe from any thread. Each line is one
// write(2) to a file opened with O_APPEND, so lines of several threads or processes never mix.
#ifndef VGPU_RUNTIME_CUDA_CALL_LOG_H_
#define VGPU_RUNTIME_CUDA_CALL_LOG_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace vgpu::cuda::call_log {

// Environment variable naming the log file; the log is on when it is set and not empty.
inline constexpr char kCallLogEnv[] = "VGPU_CUDA_CALL_LOG";
// "1": each line also gives the call's duration.
inline constexpr char kCallLogTimesEnv[] = "VGPU_CUDA_CALL_LOG_TIMES";

// How many distinct implementations of one entry point (libraries loaded in one process)
// can be logged; further ones are handed out unwrapped.
inline constexpr int kSlotsPerEntryPoint = 8;

// True when VGPU_CUDA_CALL_LOG names a file that could be opened (read once per process; an
// unwritable file leaves the log off, and OpenStatus says why).
bool Enabled();
// True when VGPU_CUDA_CALL_LOG_TIMES is "1" (read once per process).
bool TimesEnabled();
// Steady-clock nanoseconds, for the durations.
int64_t NowNanos();
// FailedPrecondition naming the file when VGPU_CUDA_CALL_LOG is set but cannot be opened;
// OK otherwise. The cuda platform's Summary() reports it.
absl::Status OpenStatus();

// Appends `line` and a newline to the log as one write; no-op when the log is off.
void WriteLine(absl::string_view line);

// A small number for the calling thread, 1, 2, ... in order of first logged call.
int ThreadNumber();

// One argument as it appears in the log (see the header comment). `after` is true when the
// call has returned successfully, so output parameters may be read.
std::string FormatPointer(const void* p);
std::string FormatQuoted(const char* s);

template <typename T>
std::string FormatArg(T value, bool after) {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_same_v<U, unsigned long long>) {  // NOLINT(runtime/int)
    // CUdeviceptr (and 64-bit flag words): hex, as addresses are.
    return absl::StrCat("0x", absl::Hex(value));
  } else if constexpr (std::is_enum_v<U>) {
    return absl::StrCat(static_cast<int64_t>(value));
  } else if constexpr (std::is_integral_v<U>) {
    return absl::StrCat(value);
  } else if constexpr (std::is_floating_point_v<U>) {
    return absl::StrCat(value);
  } else if constexpr (std::is_same_v<U, const char*>) {
    return FormatQuoted(value);
  } else if constexpr (std::is_pointer_v<U>) {
    using P = std::remove_pointer_t<U>;
    std::string s = FormatPointer(reinterpret_cast<const void*>(value));
    if constexpr (!std::is_const_v<P> &&
                  ((std::is_integral_v<P> && !std::is_same_v<P, char> &&
                    !std::is_same_v<P, signed char> && !std::is_same_v<P, unsigned char>) ||
                   std::is_enum_v<P> || std::is_pointer_v<P>)) {
      if (after && value != nullptr) absl::StrAppend(&s, "->", FormatArg<P>(*value, false));
    }
    return s;
  } else {
    // Structs passed by value (ncclUniqueId, CUlaunchConfig...): their size only.
    return absl::StrCat("{", sizeof(U), " bytes}");
  }
}

// "name(a, b, c) = RESULT [thread N]"
template <typename... A>
std::string FormatCall(absl::string_view name, absl::string_view result,
                       [[maybe_unused]] bool after, const A&... args) {
  std::string line = absl::StrCat(name, "(");
  [[maybe_unused]] bool first = true;
  (
      [&] {
        if (!first) line += ", ";
        first = false;
        line += FormatArg(args, after);
      }(),
      ...);
  absl::StrAppend(&line, ") = ", result, " [thread ", ThreadNumber(), "]");
  return line;
}

// A function that names a result of type R and says whether it means success.
template <typename R>
struct ResultNamer {
  std::string (*name)(R) = nullptr;
  bool (*ok)(R) = nullptr;
};

namespace internal {

template <typename Tag, int Slot, typename Fn>
struct Logged;

template <typename Tag, int Slot, typename R, typename... A>
struct Logged<Tag, Slot, R (*)(A...)> {
  static inline std::atomic<R (*)(A...)> real{nullptr};
  static inline const char* name = nullptr;
  static inline ResultNamer<R> namer;

  static R Call(A... args) {
    const int64_t start = TimesEnabled() ? NowNanos() : 0;
    R result = real.load(std::memory_order_acquire)(args...);
    const int64_t took = TimesEnabled() ? NowNanos() - start : -1;
    const bool ok = namer.ok != nullptr ? namer.ok(result) : true;
    std::string text;
    if constexpr (std::is_same_v<R, const char*>) {
      text = FormatQuoted(result);
    } else {
      text = namer.name != nullptr ? namer.name(result) : FormatArg(result, false);
    }
    std::string line = FormatCall(name, text, ok, args...);
    if (took >= 0) {
      absl::StrAppend(&line, " {", took / 1000, ".", absl::Dec(took % 1000, absl::kZeroPad3),
                      " us}");
    }
    WriteLine(line);
    return result;
  }
};

// Claims slot I..kSlotsPerEntryPoint-1 of Tag for `fn` (or finds the slot that already has
// it); returns the wrapper, or `fn` itself when every slot is taken.
template <typename Tag, typename R, typename... A, int... I>
R (*Claim(const char* name, R (*fn)(A...), ResultNamer<R> namer, std::integer_sequence<int, I...>))
(A...) {
  using Fn = R (*)(A...);
  Fn wrapped = nullptr;
  auto try_slot = [&](auto slot_constant) {
    using L = Logged<Tag, decltype(slot_constant)::value, Fn>;
    if (wrapped != nullptr) return;
    Fn expected = nullptr;
    if (L::real.load() == fn) {
      wrapped = &L::Call;
      return;
    }
    // The name and namer are written before `real` is published; readers load `real` first.
    if (L::real.load() == nullptr) {
      L::name = name;
      L::namer = namer;
      if (L::real.compare_exchange_strong(expected, fn) || expected == fn) wrapped = &L::Call;
    }
  };
  (try_slot(std::integral_constant<int, I>{}), ...);
  return wrapped != nullptr ? wrapped : fn;
}

}  // namespace internal

// Returns a function with `fn`'s type that calls `fn` and logs the call as `name`; `fn`
// itself when the log is off or `fn` is null. `Tag` is a distinct type per entry point
// (the wrappers' state is static, as a plain function pointer has nowhere else to keep it).
// Call it from one loader thread at a time per Tag (loaders run under a static initializer).
template <typename Tag, typename R, typename... A>
R (*Wrap(const char* name, R (*fn)(A...), ResultNamer<R> namer = {}))
(A...) {
  if (fn == nullptr || !Enabled()) return fn;
  return internal::Claim<Tag>(name, fn, namer,
                              std::make_integer_sequence<int, kSlotsPerEntryPoint>{});
}

}  // namespace vgpu::cuda::call_log

#endif  // VGPU_RUNTIME_CUDA_CALL_LOG_H_
