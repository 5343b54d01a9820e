// The allocators' locks (allocator/locks.h): mutual exclusion under contention, the futex
// mutex's sleep/wake path, early release. Run under TSan in CI (unit label).
#include "vgpu/allocator/locks.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace vgpu {
namespace {

// Each thread adds 1 to a plain counter many times under the lock, and checks that nobody
// else is inside with it: a lost update or an overlap fails.
template <class Lock, class Guard>
void ContendedCounter(Lock& mu, int threads, int iterations) {
  uint64_t counter = 0;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < iterations; ++i) {
        Guard g(mu);
        if (inside.fetch_add(1, std::memory_order_relaxed) != 0) overlaps.fetch_add(1);
        ++counter;
        inside.fetch_sub(1, std::memory_order_relaxed);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  EXPECT_EQ(counter, uint64_t{static_cast<uint64_t>(threads) * iterations});
  EXPECT_EQ(overlaps.load(), 0);
}

struct FutexGuard {
  explicit FutexGuard(FutexMutex& mu) : l(&mu) {}
  FutexMutexLock l;
};
struct SpinGuard {
  explicit SpinGuard(SpinLock& mu) : l(mu) {}
  SpinLockGuard l;
};

TEST(FutexMutexTest, ExcludesUnderContention) {
  FutexMutex mu;
  ContendedCounter<FutexMutex, FutexGuard>(mu, 8, 20000);
}

TEST(SpinLockTest, ExcludesUnderContention) {
  SpinLock mu;
  ContendedCounter<SpinLock, SpinGuard>(mu, 8, 20000);
}

// Waiters that sleep in the kernel (the holder keeps the lock far longer than the spin) are
// all woken, one per Unlock, and each gets the lock exactly once.
TEST(FutexMutexTest, SleepersAreWokenOneByOne) {
  FutexMutex mu;
  mu.Lock();
  constexpr int kWaiters = 6;
  std::atomic<int> started{0};
  std::atomic<int> done{0};
  std::vector<std::thread> waiters;
  for (int t = 0; t < kWaiters; ++t) {
    waiters.emplace_back([&] {
      started.fetch_add(1);
      FutexMutexLock l(&mu);
      done.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
  }
  while (started.load() < kWaiters) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // long past the spin: asleep
  EXPECT_EQ(done.load(), 0);                                   // nobody got in while it was held
  mu.Unlock();
  for (std::thread& w : waiters) w.join();
  EXPECT_EQ(done.load(), kWaiters);
  // Free again afterwards: an uncontended Lock does not block.
  mu.Lock();
  mu.Unlock();
}

TEST(FutexMutexTest, ReleaseUnlocksEarly) {
  FutexMutex mu;
  {
    FutexMutexLock l(&mu);
    l.Release();
    std::thread other([&] {
      FutexMutexLock inner(&mu);  // would block forever if Release had not unlocked
    });
    other.join();
  }  // the destructor after Release unlocks nothing more
  std::atomic<bool> got{false};
  std::thread t([&] {
    FutexMutexLock l(&mu);
    got = true;
  });
  t.join();
  EXPECT_TRUE(got.load());
}

}  // namespace
}  // namespace vgpu
