// MemoryHistory: events from an allocator, ring-buffer wrap-around, JSON export.
#include "vgpu/allocator/memory_history.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/runtime/file_io.h"
#include "vgpu/runtime/gzip.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;

TEST(MemoryHistoryTest, RecordsAllocatorEvents) {
  BFCAllocator a(std::make_unique<FakeSubAllocator>(),
                 BFCOptions{.name = "GPU:1", .memory_limit = 4 << 20, .allow_growth = true});
  MemoryHistory h(100);
  AttachMemoryHistory(a, &h);
  void* p = *a.AllocateRaw(1000);
  EXPECT_FALSE(a.AllocateRaw(8 << 20).ok());
  ASSERT_THAT(a.Deallocate(p), IsOk());
  ASSERT_THAT(a.ReleaseEmptyRegions(), IsOk());
  DetachMemoryHistory(a, &h);
  (void)*a.AllocateRaw(256);  // not recorded
  auto events = h.Events();
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].event.kind, AllocatorEventKind::kMap);
  EXPECT_EQ(events[1].event.kind, AllocatorEventKind::kAlloc);
  EXPECT_EQ(events[1].event.bytes_reserved, 2u << 20);
  EXPECT_EQ(events[2].event.kind, AllocatorEventKind::kOom);
  EXPECT_EQ(events[3].event.kind, AllocatorEventKind::kFree);
  EXPECT_EQ(events[4].event.kind, AllocatorEventKind::kUnmap);
  for (size_t i = 1; i < events.size(); ++i) EXPECT_GE(events[i].t_ns, events[i - 1].t_ns);
  EXPECT_EQ(h.allocator_names(), std::vector<std::string>{"GPU:1"});
  std::string json = h.ToJson();
  EXPECT_THAT(json, HasSubstr("\"allocators\":[\"GPU:1\"]"));
  EXPECT_THAT(json, HasSubstr("\"kind\":\"oom\""));
  EXPECT_THAT(json, HasSubstr("\"bytes\":1000"));
  EXPECT_THAT(json, HasSubstr("\"dropped\":0"));
}

TEST(MemoryHistoryTest, RingKeepsTheNewest) {
  MemoryHistory h(3);
  for (uint64_t i = 0; i < 5; ++i) {
    h.OnAllocatorEvent(i % 2 ? "b" : "a", AllocatorEvent{AllocatorEventKind::kAlloc, i, i});
  }
  auto events = h.Events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].event.ptr, 2u);
  EXPECT_EQ(events[2].event.ptr, 4u);
  EXPECT_EQ(h.recorded(), 5u);
  EXPECT_EQ(h.dropped(), 2u);
  EXPECT_EQ(h.allocator_names().size(), 2u);
  std::string path = ::testing::TempDir() + "/history.json";
  ASSERT_THAT(h.WriteJson(path), IsOk());
  // A name ending in .gz: the same JSON, gzip-compressed.
  ASSERT_THAT(h.WriteJson(path + ".gz"), IsOk());
  absl::StatusOr<std::string> plain = ReadInputFile(path, 1 << 20, "memory history");
  absl::StatusOr<std::string> gz = ReadInputFile(path + ".gz", 1 << 20, "memory history");
  ASSERT_THAT(plain, IsOk());
  ASSERT_THAT(gz, IsOk());
  EXPECT_TRUE(IsGzip(*gz));
  absl::StatusOr<std::string> inflated = Gunzip(*gz, 1 << 20, "history.json.gz");
  ASSERT_THAT(inflated, IsOk());
  EXPECT_EQ(*inflated, *plain);
  EXPECT_EQ(*plain, h.ToJson() + "\n");
  h.Clear();
  EXPECT_TRUE(h.Events().empty());
}

}  // namespace
}  // namespace vgpu
