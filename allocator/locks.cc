#include "vgpu/allocator/locks.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace vgpu {
namespace {

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, nullptr, nullptr, 0);
}

}  // namespace

void FutexMutex::LockSlow() {
  // A short spin first: on the host the holder is usually done within a few hundred ns.
  for (int i = 0; i < 100; ++i) {
    uint32_t c = state_.load(std::memory_order_relaxed);
    if (c == 0 &&
        state_.compare_exchange_weak(c, 1, std::memory_order_acquire, std::memory_order_relaxed)) {
      return;
    }
    if (c == 2) break;  // others already sleep: queue behind them
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  // Mark "held with sleepers" and sleep until the word is no longer 2; whoever takes the lock
  // from here keeps it at 2, since it cannot know whether others still sleep.
  while (state_.exchange(2, std::memory_order_acquire) != 0) {
    Futex(&state_, FUTEX_WAIT_PRIVATE, 2);  // EAGAIN when it changed first: just retry
  }
}

void FutexMutex::WakeOne() { Futex(&state_, FUTEX_WAKE_PRIVATE, 1); }

}  // namespace vgpu
