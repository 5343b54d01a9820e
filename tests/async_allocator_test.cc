// The async allocator (allocator/async_allocator.h) on the host platform's simulated
// stream-ordered pool: the conformance suite, the limit and its OOM message, bad frees that
// change nothing, stream order of frees, trim-and-retry when the card is full, stats and
// events, threads, and VGPU_ALLOCATOR=async for 4 logical devices on one card.
#include "vgpu/allocator/async_allocator.h"

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "vgpu/allocator/factory.h"
#include "vgpu/devices/config.h"
#include "vgpu/devices/runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/allocator_conformance.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::IsOkAndHolds;
using ::vgpu::testing::StatusIs;

constexpr char kName[] = "/job:localhost/replica:0/task:0/device:GPU:0 (physical GPU 0)";

Executor* DefaultHostExecutor() {
  auto p = GetPlatform("host");
  if (!p.ok()) return nullptr;
  auto e = (*p)->GetExecutor(0);
  return e.ok() ? *e : nullptr;
}

// Conformance: through the factory, with a stream of its own and with a given one.
struct AsyncOwnStream {
  static constexpr bool kRealMemory = true;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    DeviceAllocatorOptions o;
    o.kind = AllocatorKind::kAsync;
    o.device_name = kName;
    o.memory_limit = limit;
    auto a = CreateDeviceAllocator(DefaultHostExecutor(), o);
    EXPECT_THAT(a.status(), IsOk());
    return a.ok() ? std::move(*a) : nullptr;
  }
};
// Owns the stream it orders on, destroyed after the allocator.
class WithStream : public Allocator {
 public:
  explicit WithStream(uint64_t limit) {
    stream_ = *DefaultHostExecutor()->CreateStream(StreamOptions{});
    AsyncOptions o;
    o.name = kName;
    o.memory_limit = limit;
    inner_ = *AsyncAllocator::Create(DefaultHostExecutor(), stream_.get(), o);
  }
  std::string name() const override { return inner_->name(); }
  AllocatorStats DoStats() const override { return inner_->Stats(); }
  void DoResetPeakStats() override { inner_->ResetPeakStats(); }
  absl::Status DoReleaseCachedMemory() override { return inner_->ReleaseCachedMemory().status(); }
  std::string DumpMemoryLog() const override { return inner_->DumpMemoryLog(); }
  absl::Status CheckInvariants() const override { return inner_->CheckInvariants(); }

 private:
  absl::StatusOr<void*> DoAllocate(const AllocationRequest& request,
                                   uint64_t* /*wait_for*/) override {
    return inner_->AllocateRaw(request.bytes, SlotStream(request.slot), request.alignment);
  }
  absl::Status DoDeallocate(void* ptr) override { return inner_->Deallocate(ptr); }
  absl::Status DoRecordStream(void* ptr, int slot) override {
    return inner_->RecordStream(ptr, SlotStream(slot));
  }
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<AsyncAllocator> inner_;
};
struct AsyncGivenStream {
  static constexpr bool kRealMemory = true;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    return std::make_unique<WithStream>(limit);
  }
};
}  // namespace
}  // namespace vgpu

namespace vgpu::testing {
using AsyncTypes = ::testing::Types<AsyncOwnStream, AsyncGivenStream>;
INSTANTIATE_TYPED_TEST_SUITE_P(Async, AllocatorConformance, AsyncTypes);
}  // namespace vgpu::testing

namespace vgpu {
namespace {

// A card of its own for each test, so capacity and free bytes are exact.
class AsyncAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeCard(256 * kMiB); }
  void MakeCard(uint64_t bytes) {
    allocator_.reset();
    stream_.reset();
    auto p = HostPlatform::Create(HostPlatformOptions{{bytes}});
    ASSERT_THAT(p, IsOk());
    platform_ = *std::move(p);
    exec_ = *platform_->GetExecutor(0);
    stream_ = *exec_->CreateStream(StreamOptions{});
  }
  void MakeAllocator(uint64_t limit) {
    AsyncOptions o;
    o.name = kName;
    o.memory_limit = limit;
    auto a = AsyncAllocator::Create(exec_, stream_.get(), o);
    ASSERT_THAT(a, IsOk());
    allocator_ = *std::move(a);
  }
  uint64_t CardFree() { return exec_->Describe()->free_bytes; }
  void TearDown() override {
    allocator_.reset();
    stream_.reset();
  }

  std::unique_ptr<HostPlatform> platform_;
  Executor* exec_ = nullptr;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<AsyncAllocator> allocator_;
};

TEST_F(AsyncAllocatorTest, FactoryKnowsTheKind) {
  EXPECT_THAT(ParseAllocatorKind(" Async "), IsOkAndHolds(AllocatorKind::kAsync));
  EXPECT_EQ(AllocatorKindName(AllocatorKind::kAsync), "async");
  EXPECT_THAT(ParseAllocatorKind("tlsf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bfc, vmm or async")));
}

TEST_F(AsyncAllocatorTest, CreateChecksItsArguments) {
  AsyncOptions o;
  o.name = "GPU:0";
  EXPECT_THAT(AsyncAllocator::Create(exec_, stream_.get(), o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("limit must be > 0")));
  o.memory_limit = kMiB;
  EXPECT_THAT(AsyncAllocator::Create(nullptr, nullptr, o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no executor")));
  Executor* other = DefaultHostExecutor();
  EXPECT_THAT(AsyncAllocator::Create(other, stream_.get(), o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("another device")));
}

TEST_F(AsyncAllocatorTest, LimitHoldsAndOomNamesTheNumbers) {
  MakeAllocator(8 * kMiB);
  auto a = allocator_->AllocateRaw(5 * kMiB);
  ASSERT_THAT(a, IsOk());
  EXPECT_THAT(allocator_->AllocateRaw(4 * kMiB),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr(absl::StrCat(kName,
                                                    ": out of memory allocating 4 MiB "
                                                    "(4194304 bytes, rounded to 4194304): "
                                                    "it would pass the limit")),
                             HasSubstr("limit 8 MiB, in use 5 MiB, reserved 5 MiB"),
                             HasSubstr("Hint: raise the device's memory limit"))));
  EXPECT_THAT(allocator_->AllocateRaw(9 * kMiB),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("over the limit")));
  // Rounding and alignment padding count against the limit.
  auto b = allocator_->AllocateRaw(1000, 4096);
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*b) % 4096, 0u);
  EXPECT_EQ(allocator_->Stats().bytes_in_use, 5 * kMiB + 1024 + 4096 - 256);
  auto c = allocator_->AllocateRaw(3 * kMiB - 1024 - 4096 + 256);  // exactly to the limit
  ASSERT_THAT(c, IsOk());
  EXPECT_THAT(allocator_->AllocateRaw(1), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(allocator_->Stats().num_ooms, 3u);
  EXPECT_EQ(allocator_->Stats().bytes_in_use, 8 * kMiB);
  for (void* p : {*a, *b, *c}) ASSERT_THAT(allocator_->Deallocate(p), IsOk());
}

TEST_F(AsyncAllocatorTest, DoubleFreeAndForeignPointersChangeNothing) {
  MakeAllocator(8 * kMiB);
  auto a = allocator_->AllocateRaw(4096);
  ASSERT_THAT(a, IsOk());
  auto other = AsyncOwnStream::Make(8 * kMiB);
  auto foreign = other->AllocateRaw(4096);
  ASSERT_THAT(foreign, IsOk());
  const AllocatorStats before = allocator_->Stats();
  EXPECT_THAT(allocator_->Deallocate(*foreign),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not allocated by this")));
  EXPECT_THAT(allocator_->Deallocate(static_cast<char*>(*a) + 256),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(allocator_->Stats().bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(allocator_->Stats().num_frees, before.num_frees);
  ASSERT_THAT(allocator_->Deallocate(*a), IsOk());
  EXPECT_THAT(allocator_->Deallocate(*a),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("already freed")));
  EXPECT_EQ(allocator_->Stats().num_frees, before.num_frees + 1);
  EXPECT_THAT(allocator_->CheckInvariants(), IsOk());
  // The foreign block is still good in its own allocator.
  EXPECT_THAT(other->Deallocate(*foreign), IsOk());
}

// The driver's pool's rule: a freed block is reused at once on its own stream (work there after
// the allocation runs after the free), and on other streams only once its stream has reached
// the free.
TEST_F(AsyncAllocatorTest, FreedMemoryIsReusedAtOnceOnItsStreamAndElsewhereOnceReached) {
  MakeAllocator(64 * kMiB);
  auto other = exec_->CreateStream(StreamOptions{});
  ASSERT_THAT(other, IsOk());
  auto a = allocator_->AllocateRaw(kMiB);
  ASSERT_THAT(a, IsOk());
  // Work on the stream that still "uses" the block: the stream waits for the gate.
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  ASSERT_THAT(stream_->LaunchHostFunc([opened] { opened.wait(); }), IsOk());
  ASSERT_THAT(allocator_->Deallocate(*a), IsOk());
  EXPECT_EQ(allocator_->Stats().bytes_in_use, 0u);
  // Another stream: its work could run before the gated work, so not the same block.
  auto b = allocator_->AllocateRaw(kMiB, other->get());
  ASSERT_THAT(b, IsOk());
  EXPECT_NE(*b, *a);
  EXPECT_EQ(allocator_->Stats().bytes_reserved, 2 * kMiB);
  // The block's own stream takes it back before reaching the free, and frees it again.
  auto c = allocator_->AllocateRaw(kMiB);
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(*c, *a);
  EXPECT_EQ(allocator_->Stats().bytes_reserved, 2 * kMiB);
  ASSERT_THAT(allocator_->Deallocate(*c), IsOk());
  ASSERT_THAT(allocator_->Deallocate(*b), IsOk());
  gate.set_value();
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  ASSERT_THAT((*other)->Synchronize(), IsOk());
  // Both frees of the block landed (the first finds it taken again and does nothing): it is
  // cached once, for any stream.
  auto d = allocator_->AllocateRaw(kMiB, other->get());
  auto e = allocator_->AllocateRaw(kMiB, other->get());
  ASSERT_THAT(d, IsOk());
  ASSERT_THAT(e, IsOk());
  EXPECT_NE(*d, *e);
  EXPECT_TRUE(*d == *a || *e == *a);
  EXPECT_EQ(allocator_->Stats().bytes_reserved, 2 * kMiB);
  for (void* p : {*d, *e}) ASSERT_THAT(allocator_->Deallocate(p), IsOk());
  ASSERT_THAT(allocator_->ReleaseStream(other->get()), IsOk());  // it goes before the allocator
}

// A loop that allocates and frees faster than its stream runs reuses its own frees instead of
// growing the pool: the stream is held back for the whole loop.
TEST_F(AsyncAllocatorTest, AFastLoopOnOneStreamDoesNotGrowThePool) {
  MakeAllocator(64 * kMiB);
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  ASSERT_THAT(stream_->LaunchHostFunc([opened] { opened.wait(); }), IsOk());
  for (int i = 0; i < 20; ++i) {  // 80 MiB if each took a new block: within the card
    auto p = allocator_->AllocateRaw(4 * kMiB);
    ASSERT_THAT(p, IsOk()) << "iteration " << i;
    ASSERT_THAT(allocator_->Deallocate(*p), IsOk());
  }
  EXPECT_EQ(allocator_->Stats().bytes_reserved, 4 * kMiB);
  gate.set_value();
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  EXPECT_EQ(allocator_->Stats().bytes_reserved, 4 * kMiB);
}

TEST_F(AsyncAllocatorTest, FullCardTrimsThePoolAndRetriesOnce) {
  MakeCard(64 * kMiB);
  MakeAllocator(48 * kMiB);
  std::vector<void*> ptrs;
  for (int i = 0; i < 4; ++i) ptrs.push_back(*allocator_->AllocateRaw(10 * kMiB));
  for (void* p : ptrs) ASSERT_THAT(allocator_->Deallocate(p), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  EXPECT_EQ(allocator_->Stats().bytes_reserved, 40 * kMiB);  // cached
  EXPECT_EQ(CardFree(), 24 * kMiB);
  auto raw = exec_->Allocate(20 * kMiB);  // someone else on the card
  ASSERT_THAT(raw, IsOk());
  auto big = allocator_->AllocateRaw(30 * kMiB);  // no cached block fits, nor the card
  ASSERT_THAT(big, IsOk());
  AllocatorStats s = allocator_->Stats();
  EXPECT_EQ(s.bytes_reserved, 30 * kMiB);
  EXPECT_EQ(s.num_ooms, 0u);
  EXPECT_GE(s.regions_unmapped, 1u);
  EXPECT_EQ(s.peak_bytes_reserved, 40 * kMiB);
  // Within our limit, but the card is short even after trimming.
  EXPECT_THAT(allocator_->AllocateRaw(16 * kMiB),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("out of memory even after trimming the pool"),
                             HasSubstr("host GPU 0: out of memory allocating 16 MiB"),
                             HasSubstr("limit 48 MiB, in use 30 MiB, reserved 30 MiB"),
                             HasSubstr("Hint: other logical devices"))));
  EXPECT_EQ(allocator_->Stats().num_ooms, 1u);
  ASSERT_THAT(allocator_->Deallocate(*big), IsOk());
  ASSERT_THAT(exec_->Free(*raw), IsOk());
  ASSERT_THAT(allocator_->Trim(), IsOk());
  EXPECT_EQ(allocator_->Stats().bytes_reserved, 0u);
  EXPECT_EQ(CardFree(), 64 * kMiB);
}

// ReleaseCachedMemory (PyTorch's empty_cache) trims the pool: the card gets the cached blocks
// back, a live block keeps its memory.
TEST_F(AsyncAllocatorTest, ReleaseCachedMemoryTrimsThePool) {
  MakeCard(64 * kMiB);
  MakeAllocator(48 * kMiB);
  auto live = allocator_->AllocateRaw(10 * kMiB);
  auto cached = allocator_->AllocateRaw(20 * kMiB);
  ASSERT_THAT(live, IsOk());
  ASSERT_THAT(cached, IsOk());
  ASSERT_THAT(allocator_->Deallocate(*cached), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  EXPECT_EQ(allocator_->Stats().bytes_reserved, 30 * kMiB);
  EXPECT_THAT(allocator_->ReleaseCachedMemory(), IsOkAndHolds(20 * kMiB));
  EXPECT_EQ(allocator_->Stats().bytes_reserved, 10 * kMiB);
  EXPECT_EQ(CardFree(), 54 * kMiB);
  ASSERT_THAT(allocator_->Deallocate(*live), IsOk());
  EXPECT_THAT(allocator_->ReleaseCachedMemory(), IsOkAndHolds(10 * kMiB));
  EXPECT_EQ(CardFree(), 64 * kMiB);
}

TEST_F(AsyncAllocatorTest, ReleaseThresholdBoundsTheCache) {
  MakeAllocator(8 * kMiB);  // threshold = the limit
  std::vector<void*> ptrs;
  for (int i = 0; i < 8; ++i) ptrs.push_back(*allocator_->AllocateRaw(kMiB));
  for (void* p : ptrs) ASSERT_THAT(allocator_->Deallocate(p), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  // 8 MiB cached; a 4 MiB block fits no cached 1 MiB block, so the pool grows past the
  // threshold, and gives back cached blocks when the next free lands.
  auto big = allocator_->AllocateRaw(4 * kMiB);
  ASSERT_THAT(big, IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  EXPECT_EQ(allocator_->Stats().bytes_reserved, 12 * kMiB);
  auto small = allocator_->AllocateRaw(kMiB);
  ASSERT_THAT(small, IsOk());
  ASSERT_THAT(allocator_->Deallocate(*small), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  EXPECT_LE(allocator_->Stats().bytes_reserved, 8 * kMiB);
  ASSERT_THAT(allocator_->Deallocate(*big), IsOk());
}

class Recorder : public AllocatorObserver {
 public:
  void OnAllocatorEvent(const std::string& name, const AllocatorEvent& e) override {
    names.insert(name);
    kinds.push_back(e.kind);
    events.push_back(e);
  }
  std::set<std::string> names;
  std::vector<AllocatorEventKind> kinds;
  std::vector<AllocatorEvent> events;
};

TEST_F(AsyncAllocatorTest, StatsEventsAndDump) {
  MakeAllocator(8 * kMiB);
  Recorder rec;
  allocator_->AddObserver(&rec);
  auto a = allocator_->AllocateRaw(1000);
  ASSERT_THAT(a, IsOk());
  EXPECT_THAT(allocator_->DumpMemoryLog(),
              AllOf(HasSubstr(kName), HasSubstr("live blocks: 1"), HasSubstr("(requested 1000)")));
  EXPECT_THAT(allocator_->AllocateRaw(9 * kMiB), StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_THAT(allocator_->Deallocate(*a), IsOk());
  allocator_->RemoveObserver(&rec);
  ASSERT_THAT(stream_->Synchronize(), IsOk());  // the free lands: b reuses its page
  auto b = allocator_->AllocateRaw(1000);
  ASSERT_THAT(b, IsOk());
  ASSERT_THAT(allocator_->Deallocate(*b), IsOk());

  using K = AllocatorEventKind;
  ASSERT_EQ(rec.kinds, (std::vector<K>{K::kMap, K::kAlloc, K::kOom, K::kFree}));
  EXPECT_EQ(rec.names, std::set<std::string>{kName});
  EXPECT_EQ(rec.events[0].bytes, 4096u);  // the host pool's page
  EXPECT_EQ(rec.events[1].ptr, reinterpret_cast<uint64_t>(*a));
  EXPECT_EQ(rec.events[1].bytes_in_use, 1024u);
  EXPECT_EQ(rec.events[3].bytes, 1000u);
  EXPECT_EQ(rec.events[3].bytes_in_use, 0u);
  AllocatorStats s = allocator_->Stats();
  EXPECT_EQ(s.num_allocs, 2u);
  EXPECT_EQ(s.num_frees, 2u);
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(s.peak_bytes_in_use, 1024u);
  EXPECT_EQ(s.largest_alloc_size, 1000u);
  EXPECT_EQ(s.bytes_limit, 8 * kMiB);
  EXPECT_EQ(s.regions_mapped, 1u);
}

TEST_F(AsyncAllocatorTest, DestroyingGivesEverythingBack) {
  MakeAllocator(32 * kMiB);
  ASSERT_THAT(allocator_->AllocateRaw(3 * kMiB), IsOk());  // left live on purpose
  void* freed = *allocator_->AllocateRaw(5 * kMiB);
  ASSERT_THAT(allocator_->Deallocate(freed), IsOk());
  EXPECT_LT(CardFree(), 256 * kMiB);
  allocator_.reset();
  EXPECT_EQ(CardFree(), 256 * kMiB);
}

TEST_F(AsyncAllocatorTest, ThreadsNeverPassTheLimit) {
  MakeAllocator(16 * kMiB);
  constexpr int kThreads = 4;
  std::atomic<int> granted{0};
  std::vector<std::vector<void*>> held(kThreads);
  std::vector<std::thread> threads;
  // Everyone grabs 1 MiB blocks until refused: exactly 16 are granted in all.
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (true) {
        auto p = allocator_->AllocateRaw(kMiB);
        if (!p.ok()) {
          EXPECT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted));
          break;
        }
        held[t].push_back(*p);
        ++granted;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(granted.load(), 16);
  threads.clear();
  // Then all free and churn concurrently.
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (void* p : held[t]) EXPECT_THAT(allocator_->Deallocate(p), IsOk());
      for (int i = 0; i < 300; ++i) {
        auto p = allocator_->AllocateRaw(256 * (1 + (i * 7 + t) % 64));
        if (p.ok()) EXPECT_THAT(allocator_->Deallocate(*p), IsOk());
      }
    });
  }
  for (auto& th : threads) th.join();
  AllocatorStats s = allocator_->Stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.num_allocs, s.num_frees);
  EXPECT_LE(s.peak_bytes_in_use, 16 * kMiB);
  EXPECT_THAT(allocator_->CheckInvariants(), IsOk());
}

TEST(AsyncLogicalDevices, FourDevicesOnOneCardKeepTheirLimits) {
  auto platform = HostPlatform::Create(HostPlatformOptions{{kGiB}});
  ASSERT_THAT(platform, IsOk());
  std::map<std::string, std::string> env = {{"VGPU_ALLOCATOR", "async"},
                                            {"VGPU_LOGICAL_DEVICES", "0:64MiB,64MiB,64MiB,64MiB"}};
  auto config = RuntimeConfig::FromEnvironment([&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->allocator, AllocatorKind::kAsync);
  auto rt = Runtime::Create(*config, platform->get());
  ASSERT_THAT(rt, IsOk());
  std::vector<LogicalDevice*> gpus = (*rt)->gpus();
  ASSERT_EQ(gpus.size(), 4u);
  std::vector<std::vector<void*>> held(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(gpus[i]->info().allocator_kind, "async");
    threads.emplace_back([&, i] {
      LogicalDevice* d = gpus[i];
      while (true) {
        auto p = d->allocator()->AllocateRaw(4 * kMiB);
        if (!p.ok()) {
          EXPECT_THAT(p.status(),
                      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr(d->name())));
          break;
        }
        static_cast<char*>(*p)[0] = static_cast<char>(i);
        held[i].push_back(*p);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(held[i].size(), 16u) << gpus[i]->name();
    AllocatorStats s = gpus[i]->allocator()->Stats();
    EXPECT_EQ(s.bytes_in_use, 64 * kMiB);
    EXPECT_EQ(s.bytes_limit, 64 * kMiB);
    for (void* p : held[i]) {
      EXPECT_EQ(static_cast<char*>(p)[0], static_cast<char>(i));
      EXPECT_THAT(gpus[i]->allocator()->Deallocate(p), IsOk());
    }
  }
  EXPECT_EQ((*platform)->Describe(0)->free_bytes, kGiB - 4 * 64 * kMiB);  // cached in pools
  rt->reset();
  EXPECT_EQ((*platform)->Describe(0)->free_bytes, kGiB);
}

}  // namespace
}  // namespace vgpu
