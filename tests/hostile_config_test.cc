// Issue 12, configuration, host platform and allocators: hostile values for every VGPU_*
// setting (strict decimal numbers, empty values, CR/BOM, huge values and bounded messages),
// caps on simulated cards, overflow-safe sizes, reservations placed off-alignment, and the
// property "whatever validates, builds" over random configurations.
#include <bit>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/devices/config.h"
#include "vgpu/devices/runtime.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/runtime/user_text.h"
#include "vgpu/tests/fake_vmm_executor.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::IsOkAndHolds;
using ::vgpu::testing::StatusIs;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

absl::StatusOr<RuntimeConfig> FromEnv(std::map<std::string, std::string> vars) {
  return RuntimeConfig::FromEnvironment([vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

TEST(QuoteUserText, EscapesAndBounds) {
  EXPECT_EQ(QuoteUserText("abc"), "\"abc\"");
  EXPECT_EQ(QuoteUserText("a\rb\"\\"), "\"a\\rb\\\"\\\\\"");
  EXPECT_EQ(QuoteUserText(std::string("a\0b", 3)), "\"a\\x00b\"");
  EXPECT_EQ(QuoteUserText("\xEF\xBB\xBFx"), "\"\\xef\\xbb\\xbfx\"");
  std::string big(1 << 20, 'a');
  std::string q = QuoteUserText(big);
  EXPECT_LT(q.size(), 120u);
  EXPECT_THAT(q, HasSubstr("... (1048576 bytes)"));
  EXPECT_EQ(StripUserValue("\xEF\xBB\xBF 0.5\r\n"), "0.5");
}

// Issue item 12: decimal only, everywhere a configuration number is read.
TEST(HostileConfig, NumbersAreDecimalOnly) {
  EXPECT_THAT(ParseLogicalDevices("0:0x10%"), StatusIs(kInvalid, HasSubstr("not a percentage")));
  EXPECT_THAT(ParseLogicalDevices("0:1e1%"), IsOk());  // decimal exponent is decimal
  for (const char* bad : {"0:inf%", "0:nan%", "0:-5%", "0:+5%", "0:1e999%", "0:0x1p4%"}) {
    EXPECT_THAT(ParseLogicalDevices(bad), StatusIs(kInvalid)) << bad;
  }
  for (const char* bad : {"0x1p-1", "0x.8", "inf", "nan", "1e999", "0.5x", ".", "-"}) {
    EXPECT_THAT(ParseMemoryFraction(bad), StatusIs(kInvalid, HasSubstr("decimal"))) << bad;
  }
  EXPECT_THAT(ParseMemoryFraction(" 0.5\r"), IsOkAndHolds(0.5));
  EXPECT_THAT(ParseMemoryFraction("\xEF\xBB\xBF"
                                  "0.25"),
              IsOkAndHolds(0.25));
  for (const char* bad : {"0:1GiB@0x1", "0:1GiB@1e2", "0:1GiB@1.0", "0:1GiB@99999999999"}) {
    EXPECT_THAT(ParseLogicalDevices(bad), StatusIs(kInvalid, HasSubstr("priority"))) << bad;
  }
  for (const char* bad : {"0x1", "+1", "1e1", "99999999999", "1024"}) {
    EXPECT_THAT(ParseVisibleDevices(bad), StatusIs(kInvalid, HasSubstr("ordinal"))) << bad;
  }
  for (const char* bad : {"0:0x10", "0:1e2", "0:+8", "0:8.0", "0:99999999999"}) {
    EXPECT_THAT(ParseSmPartitions(bad), StatusIs(kInvalid, HasSubstr("SM count"))) << bad;
  }
  EXPECT_THAT(ParseHostDevices("0x2x1GiB"), StatusIs(kInvalid, HasSubstr("count before 'x'")));
  EXPECT_THAT(ParseHostDevices("1e1x1GiB"), StatusIs(kInvalid, HasSubstr("count before 'x'")));
  EXPECT_THAT(ParseHostDevices(" 2x1GiB\r"), IsOkAndHolds(ElementsAre(kGiB, kGiB)));
}

// One rule for every variable: empty (or blank) is an error naming it, except
// VGPU_VISIBLE_DEVICES, where empty means no GPUs (as CUDA_VISIBLE_DEVICES).
TEST(HostileConfig, EmptyValuesAreErrorsExceptVisibleDevices) {
  for (absl::string_view setting : AllSettings()) {
    std::string env(SettingEnvVar(setting));
    for (const char* empty : {"", "  ", "\r\n", "\xEF\xBB\xBF"}) {
      auto c = FromEnv({{env, empty}});
      if (setting == kSettingVisibleDevices) {
        ASSERT_THAT(c.status(), IsOk());
        EXPECT_THAT(c->visible_devices, ::testing::Optional(ElementsAre()));
      } else {
        EXPECT_THAT(c.status(), StatusIs(kInvalid, AllOf(HasSubstr(env), HasSubstr("empty value"),
                                                         HasSubstr("unset"))))
            << env;
      }
    }
  }
  // The SM example is an SM example.
  EXPECT_THAT(FromEnv({{"VGPU_SM_PARTITION", ""}}).status(),
              StatusIs(kInvalid, AllOf(HasSubstr("0:33,33"), Not(HasSubstr("GiB")))));
  EXPECT_THAT(ParseSmPartitions("8"),
              StatusIs(kInvalid, AllOf(HasSubstr("0:33,33"), Not(HasSubstr("GiB")))));
}

TEST(HostileConfig, CrAndBomAroundValuesAreIgnored) {
  auto c = FromEnv({{"VGPU_ALLOW_GROWTH", "true\r"},
                    {"VGPU_LOGICAL_DEVICES",
                     "\xEF\xBB\xBF"
                     "0:1GiB,25%@-1\r\n"},
                    {"VGPU_RESERVED_MEMORY", " 512MiB\r"},
                    {"VGPU_ALLOCATOR", "vmm\r"}});
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_TRUE(c->allow_growth);
  EXPECT_EQ(FormatLogicalDevices(c->logical_devices), "0:1GiB,25%@-1");
  EXPECT_EQ(c->reserved_memory, 512 * kMiB);
  EXPECT_EQ(c->allocator, AllocatorKind::kVmm);
}

// Item 7: a megabyte of junk (with control characters) gets a message of a line or two.
TEST(HostileConfig, MessagesStayBoundedForHugeValues) {
  std::string junk(1 << 20, 'z');
  junk[10] = '\0';
  junk[20] = '\r';
  std::string list = "0:";
  for (int i = 0; i < 100000; ++i) absl::StrAppend(&list, i ? "," : "", "1GiB");
  for (absl::string_view setting : AllSettings()) {
    std::string env(SettingEnvVar(setting));
    for (const std::string& value : {junk, absl::StrCat("0:", junk), list}) {
      auto c = FromEnv({{env, value}});
      if (c.ok()) continue;  // e.g. a long list that is valid for this variable
      EXPECT_LT(c.status().message().size(), 800u) << env;
      EXPECT_THAT(c.status().message(), Not(HasSubstr(std::string(1, '\0')))) << env;
    }
  }
  EXPECT_LT(ParseHostDevices(junk).status().message().size(), 800u);
  EXPECT_LT(ParseAllocatorKind(junk).status().message().size(), 800u);
  EXPECT_LT(ParseBytes(junk).status().message().size(), 800u);
}

TEST(HostileConfig, HugeCountsAreRefusedWhenParsed) {
  std::string list = "0:";
  for (size_t i = 0; i <= kMaxLogicalDevicesPerPhysicalDevice; ++i) {
    absl::StrAppend(&list, i ? "," : "", "2MiB");
  }
  EXPECT_THAT(ParseLogicalDevices(list), StatusIs(kInvalid, HasSubstr("more than 64")));
  EXPECT_THAT(ParseVisibleDevices("2147483648"), StatusIs(kInvalid, HasSubstr("ordinal")));
  EXPECT_THAT(ParseHostDevices("65x1GiB"), StatusIs(kInvalid, HasSubstr("1..64")));
  EXPECT_THAT(ParseHostDevices("64x1GiB,1GiB"), StatusIs(kInvalid, HasSubstr("more than 64")));
  EXPECT_THAT(ParseLogicalDevices("0:1GiB,,1GiB"), StatusIs(kInvalid, HasSubstr("empty")));
  EXPECT_THAT(ParseLogicalDevices("0:1GiB;;1:1GiB"), StatusIs(kInvalid));
}

TEST(HostileConfig, ReservedMemoryRefusesPercentWithoutPercentExamples) {
  auto c = FromEnv({{"VGPU_RESERVED_MEMORY", "50%"}});
  EXPECT_THAT(c.status(), StatusIs(kInvalid, AllOf(HasSubstr("percentage is not accepted"),
                                                   HasSubstr("512MiB"), Not(HasSubstr("40%")))));
  EXPECT_THAT(FromEnv({{"VGPU_RESERVED_MEMORY", "lots"}}).status(),
              StatusIs(kInvalid, Not(HasSubstr("%,"))));
}

// Issue item 6: cards the address space cannot hold are refused when parsed, never built.
TEST(HostileConfig, HostCardsAreCappedToTheAddressSpace) {
  EXPECT_THAT(ParseHostDevices("1x200TiB"), StatusIs(kInvalid, HasSubstr("at most 64 TiB")));
  EXPECT_THAT(ParseHostDevices("1x18446744073709551615"),
              StatusIs(kInvalid, HasSubstr("at most 64 TiB")));
  EXPECT_THAT(ParseHostDevices("2x40TiB"), StatusIs(kInvalid, HasSubstr("add up to 80 TiB")));
  EXPECT_THAT(ParseHostDevices("64TiB"), IsOk());
  EXPECT_THAT(HostPlatform::Create(HostPlatformOptions{{100 * (uint64_t{1} << 40)}}).status(),
              StatusIs(kInvalid, HasSubstr("larger than 64 TiB")));
  EXPECT_THAT(HostPlatform::Create(HostPlatformOptions{{kMiB}}).status(),
              StatusIs(kInvalid, HasSubstr("at least 2 MiB")));
}

TEST(HostileConfig, HostSizesNearTwoToThe64DoNotWrap) {
  auto p = *HostPlatform::Create(HostPlatformOptions{{64 * kMiB}});
  Executor* e = *p->GetExecutor(0);
  p->faults().ignore_capacity = true;
  for (uint64_t bytes : {~uint64_t{0}, ~uint64_t{0} - 4000, uint64_t{1} << 63}) {
    EXPECT_THAT(e->Allocate(bytes), StatusIs(absl::StatusCode::kResourceExhausted)) << bytes;
    EXPECT_THAT(e->HostAllocate(bytes), StatusIs(absl::StatusCode::kResourceExhausted)) << bytes;
  }
  p->faults().ignore_capacity = false;
  EXPECT_THAT(e->Allocate(~uint64_t{0}),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("out of memory")));
  auto h = e->CreatePhysicalMemory(kHostVmmGranularity);
  ASSERT_THAT(h.status(), IsOk());
  auto va = e->ReserveAddressRange(kHostVmmGranularity);
  ASSERT_THAT(va.status(), IsOk());
  EXPECT_THAT(e->Map(*va, kHostVmmGranularity, *h, ~uint64_t{0} - kHostVmmGranularity + 1),
              StatusIs(kInvalid));
  EXPECT_THAT(e->Map(static_cast<char*>(*va) + kHostVmmGranularity,
                     ~uint64_t{0} - kHostVmmGranularity + 1, *h, 0),
              StatusIs(kInvalid));
  EXPECT_THAT(e->ReserveAddressRange(~uint64_t{0} - kHostVmmGranularity + 1),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(e->FreeAddressRange(*va, kHostVmmGranularity), IsOk());
  EXPECT_THAT(e->ReleasePhysicalMemory(*h), IsOk());
}

TEST(HostileConfig, BfcSizesNearTwoToThe64DoNotWrap) {
  auto p = *HostPlatform::Create(HostPlatformOptions{{64 * kMiB}});
  Executor* e = *p->GetExecutor(0);
  BFCOptions o{.name = "GPU:0", .memory_limit = ~uint64_t{0}, .allow_growth = true};
  o.initial_region_bytes = ~uint64_t{0};
  auto a = BFCAllocator::Create(std::make_unique<DeviceSubAllocator>(e), o);
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_THAT((*a)->Allocate(1 << 20).status(), IsOk());  // backs off to what the card has
  EXPECT_THAT((*a)->Allocate(256, uint64_t{1} << 63).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

// Issue item 7: the kernel may return reservations that are not granule-aligned. The host
// platform aligns them anyway, and the vmm allocator works over it.
TEST(HostileConfig, ReservationsAreAlignedWhateverTheKernelReturns) {
  auto p = *HostPlatform::Create(HostPlatformOptions{{256 * kMiB}});
  p->faults().misalign_reservations_by = 4096 * 3;
  Executor* e = *p->GetExecutor(0);
  for (uint64_t n : {1, 2, 3, 8}) {
    auto va = e->ReserveAddressRange(n * kHostVmmGranularity);
    ASSERT_THAT(va.status(), IsOk());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*va) % kHostVmmGranularity, 0u) << n;
    EXPECT_THAT(e->FreeAddressRange(*va, n * kHostVmmGranularity), IsOk());
  }
  for (bool growth : {false, true}) {
    DeviceAllocatorOptions o;
    o.kind = AllocatorKind::kVmm;
    o.device_name = "GPU:0";
    o.memory_limit = 64 * kMiB;
    o.allow_growth = growth;
    auto a = CreateDeviceAllocator(e, o);
    ASSERT_THAT(a.status(), IsOk());
    std::vector<DeviceBuffer> held;
    for (uint64_t bytes : {uint64_t{4096}, 2 * kMiB, 4 * kMiB, 3 * kMiB + 5, 8 * kMiB}) {
      auto b = (*a)->Allocate(bytes);
      ASSERT_THAT(b.status(), IsOk()) << bytes;
      std::memset(b->data(), 0x5a, bytes);
      held.push_back(*std::move(b));
    }
  }
}

// A device that never aligns its reservations (a page past a granule): the vmm allocator
// must not assume an alignment it was not promised.
class MisalignedExecutor : public ::vgpu::testing::FakeVmmExecutor {
 public:
  explicit MisalignedExecutor(uint64_t g) : FakeVmmExecutor(g), g_(g) {}
  absl::StatusOr<void*> ReserveAddressRange(uint64_t bytes) override {
    VGPU_ASSIGN_OR_RETURN(void* p, FakeVmmExecutor::ReserveAddressRange(bytes + g_));
    char* out = static_cast<char*>(p) + kOffset;
    ranges_[out] = bytes;
    return out;
  }
  absl::Status FreeAddressRange(void* va, uint64_t bytes) override {
    auto it = ranges_.find(va);
    if (it == ranges_.end() || it->second != bytes) return absl::InvalidArgumentError("free");
    ranges_.erase(it);
    return FakeVmmExecutor::FreeAddressRange(static_cast<char*>(va) - kOffset, bytes + g_);
  }
  absl::Status Map(void* va, uint64_t bytes, PhysicalMemoryHandle h, uint64_t offset) override {
    VGPU_RETURN_IF_ERROR(Inside(va, bytes));
    return FakeVmmExecutor::Map(va, bytes, h, offset);
  }
  absl::Status Unmap(void* va, uint64_t bytes) override {
    VGPU_RETURN_IF_ERROR(Inside(va, bytes));
    return FakeVmmExecutor::Unmap(va, bytes);
  }

 private:
  static constexpr uint64_t kOffset = 4096;
  absl::Status Inside(void* va, uint64_t bytes) {
    auto it = ranges_.upper_bound(va);
    if (it != ranges_.begin()) {
      --it;
      auto base = reinterpret_cast<uintptr_t>(it->first), p = reinterpret_cast<uintptr_t>(va);
      if (p >= base && p + bytes <= base + it->second) return absl::OkStatus();
    }
    return absl::InvalidArgumentError("range is not inside a reserved address range");
  }
  uint64_t g_;
  std::map<void*, uint64_t> ranges_;
};

TEST(HostileConfig, VmmAllocatorDoesNotAssumeAlignedReservations) {
  constexpr uint64_t g = 2 * kMiB;
  for (bool growth : {false, true}) {
    VmmOptions o;
    o.name = "GPU:0";
    o.memory_limit = 64 * kMiB;
    o.allow_growth = growth;
    MisalignedExecutor device(g);
    auto a = VmmAllocator::Create(&device, o);
    ASSERT_THAT(a.status(), IsOk());
    std::vector<void*> held;
    for (uint64_t bytes : {g, 2 * g, 4 * g, 3 * g + 1, uint64_t{512}, g / 2 + 1, 16 * g}) {
      auto p = (*a)->AllocateRaw(bytes, 256);
      ASSERT_THAT(p.status(), IsOk()) << bytes << " growth " << growth;
      held.push_back(*p);
    }
    for (void* p : held) EXPECT_THAT((*a)->Deallocate(p), IsOk());
  }
}

// Issue item 4: whatever ResolveLogicalDevices accepts, Runtime::Create builds with growth
// off (the whole limit taken up front), over random cards and random configurations.
TEST(HostileConfig, WhateverValidatesBuilds) {
  std::mt19937_64 rng(12);
  auto pick = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  int accepted = 0, built = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::vector<uint64_t> cards(pick(1, 2));
    for (uint64_t& c : cards) {
      // Odd sizes too: not page multiples, not granule multiples.
      c = pick(0, 1) ? pick(2 * kMiB, 64 * kGiB)
                     : pick(1, 64) * kGiB + pick(0, 3) * 4096 + pick(0, 1);
    }
    auto platform = HostPlatform::Create(HostPlatformOptions{cards});
    ASSERT_THAT(platform.status(), IsOk());
    RuntimeConfig config;
    config.allow_growth = false;
    config.allocator = std::vector<AllocatorKind>{AllocatorKind::kBfc, AllocatorKind::kVmm,
                                                  AllocatorKind::kAsync}[pick(0, 2)];
    if (pick(0, 3) == 0)
      config.reserved_memory = pick(0, 1) ? pick(0, 512) * kMiB : pick(0, 1 << 30);
    const int mode = static_cast<int>(pick(0, 2));
    if (mode == 0) {
      config.memory_fraction = std::uniform_real_distribution<double>(0.0001, 1.0)(rng);
    } else if (mode == 1) {
      for (size_t o = 0; o < cards.size(); ++o) {
        PhysicalDeviceConfig p;
        p.ordinal = static_cast<int>(o);
        const int n = static_cast<int>(pick(1, 5));
        const int kind = static_cast<int>(pick(0, 2));
        double left = 100.0;
        for (int i = 0; i < n; ++i) {
          if (kind == 0 || (kind == 2 && pick(0, 1))) {
            // Percentages that add up to exactly 100 (the reported failure) or less.
            double pct = i + 1 == n
                             ? left
                             : std::max(0.01, std::floor(left / (n - i) * pick(50, 100)) / 100);
            pct = std::min(pct, left);
            if (pct <= 0) pct = 0.01;
            left -= pct;
            p.logical_devices.push_back(LogicalDeviceConfig::Percent(pct));
          } else {
            p.logical_devices.push_back(LogicalDeviceConfig::Bytes(
                pick(0, 1) ? pick(1, 4096) * kMiB : pick(1, 1) * pick(2 * kMiB, cards[o] / n)));
          }
        }
        config.logical_devices.push_back(std::move(p));
      }
    }
    std::vector<PhysicalDeviceInfo> infos;
    for (int o = 0; o < (*platform)->DeviceCount(); ++o) infos.push_back(*(*platform)->Describe(o));
    auto resolved = ResolveLogicalDevices(config, infos);
    if (!resolved.ok()) continue;
    ++accepted;
    auto rt = Runtime::Create(config, platform->get());
    EXPECT_THAT(rt.status(), IsOk())
        << "cards " << cards[0] << (cards.size() > 1 ? absl::StrCat(",", cards[1]) : "")
        << " fraction " << config.memory_fraction.value_or(0) << " devices "
        << FormatLogicalDevices(config.logical_devices) << " reserve " << config.reserved_memory
        << " allocator " << AllocatorKindName(config.allocator);
    if (rt.ok()) ++built;
  }
  EXPECT_GT(accepted, 100);  // the property is about something
  EXPECT_EQ(built, accepted);
}

TEST(HostileConfig, PercentSplitsOfWholeCardBuild) {
  for (const char* spec : {"0:40%,60%", "0:33%,33%,34%", "0:50%,50%", "0:1GiB,1GiB@-1;1:40%,60%"}) {
    for (AllocatorKind kind : {AllocatorKind::kBfc, AllocatorKind::kVmm}) {
      auto platform = *HostPlatform::Create(HostPlatformOptions{{8 * kGiB, 16 * kGiB + 4096 * 7}});
      RuntimeConfig config;
      config.logical_devices = *ParseLogicalDevices(spec);
      config.allocator = kind;
      EXPECT_THAT(Runtime::Create(config, platform.get()).status(), IsOk()) << spec;
    }
  }
}

TEST(HostileConfig, MinimumLogicalDeviceIsValidated) {
  std::vector<PhysicalDeviceInfo> card(1);
  card[0].total_bytes = card[0].free_bytes = 8 * kGiB;
  card[0].vmm_granularity = 2 * kMiB;
  RuntimeConfig c;
  c.logical_devices = *ParseLogicalDevices("0:1MiB");
  EXPECT_THAT(ResolveLogicalDevices(c, card),
              StatusIs(kInvalid, HasSubstr("below the minimum logical device size of 2 MiB")));
  c.logical_devices = *ParseLogicalDevices("0:0.01%");
  EXPECT_THAT(ResolveLogicalDevices(c, card),
              StatusIs(kInvalid, AllOf(HasSubstr("0.01% of 8 GiB"), HasSubstr("minimum"))));
  c.logical_devices = *ParseLogicalDevices("0:2MiB,2MiB");
  EXPECT_THAT(ResolveLogicalDevices(c, card), IsOk());
  c.logical_devices.clear();
  c.memory_fraction = 0.0001;
  EXPECT_THAT(ResolveLogicalDevices(c, card), StatusIs(kInvalid, HasSubstr("minimum")));
  // Derived limits are whole granules.
  c.memory_fraction = 0.4;
  auto r = ResolveLogicalDevices(c, card);
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ((*r)[0].memory_limit % (2 * kMiB), 0u);
  EXPECT_LE((*r)[0].memory_limit, 8 * kGiB * 4 / 10);
}

}  // namespace
}  // namespace vgpu
