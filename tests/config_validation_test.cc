// RuntimeConfig: the environment grammars and every validation rule of ResolveLogicalDevices.
#include <map>
#include <string>
#include <vector>

#include "vgpu/devices/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::IsOkAndHolds;
using ::vgpu::testing::StatusIs;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

RuntimeConfig::EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::vector<PhysicalDeviceInfo> Cards(std::vector<uint64_t> totals) {
  std::vector<PhysicalDeviceInfo> out;
  for (size_t i = 0; i < totals.size(); ++i) {
    PhysicalDeviceInfo p;
    p.ordinal = static_cast<int>(i);
    p.name = "Test GPU";
    p.total_bytes = totals[i];
    p.free_bytes = totals[i];
    p.sm_count = 132;
    out.push_back(p);
  }
  return out;
}

RuntimeConfig WithLogical(absl::string_view text) {
  RuntimeConfig c;
  absl::StatusOr<std::vector<PhysicalDeviceConfig>> d = ParseLogicalDevices(text);
  EXPECT_THAT(d, IsOk());
  if (d.ok()) c.logical_devices = *d;
  return c;
}

// ---- grammars ----

TEST(ConfigParseTest, VisibleDevices) {
  EXPECT_THAT(ParseVisibleDevices("0,1"), IsOkAndHolds(ElementsAre(0, 1)));
  EXPECT_THAT(ParseVisibleDevices(" 2 , 0 "), IsOkAndHolds(ElementsAre(2, 0)));
  EXPECT_THAT(ParseVisibleDevices(""), IsOkAndHolds(ElementsAre()));
  EXPECT_THAT(ParseVisibleDevices("0,x"), StatusIs(kInvalid, HasSubstr("\"x\"")));
  EXPECT_THAT(ParseVisibleDevices("-1"), StatusIs(kInvalid, HasSubstr("ordinal")));
  EXPECT_THAT(ParseVisibleDevices("0,"), StatusIs(kInvalid));
  EXPECT_THAT(ParseVisibleDevices("1,1"),
              StatusIs(kInvalid, HasSubstr("physical device 1 appears twice")));
}

TEST(ConfigParseTest, LogicalDevices) {
  absl::StatusOr<std::vector<PhysicalDeviceConfig>> d =
      ParseLogicalDevices("0:1GiB,512MiB@-1 ; 1:40%,60%@-5");
  ASSERT_THAT(d, IsOk());
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0].ordinal, 0);
  ASSERT_EQ((*d)[0].logical_devices.size(), 2u);
  EXPECT_EQ((*d)[0].logical_devices[0].memory_bytes, kGiB);
  EXPECT_EQ((*d)[0].logical_devices[0].priority, 0);
  EXPECT_EQ((*d)[0].logical_devices[1].memory_bytes, 512 * kMiB);
  EXPECT_EQ((*d)[0].logical_devices[1].priority, -1);
  EXPECT_EQ((*d)[1].ordinal, 1);
  EXPECT_EQ((*d)[1].logical_devices[0].memory_percent, 40.0);
  EXPECT_EQ((*d)[1].logical_devices[1].memory_percent, 60.0);
  EXPECT_EQ((*d)[1].logical_devices[1].priority, -5);
  EXPECT_EQ(FormatLogicalDevices(*d), "0:1GiB,512MiB@-1;1:40%,60%@-5");
  EXPECT_THAT(ParseLogicalDevices(FormatLogicalDevices(*d)), IsOk());
}

TEST(ConfigParseTest, LogicalDevicesErrorsNameThePart) {
  EXPECT_THAT(ParseLogicalDevices("1GiB,1GiB"),
              StatusIs(kInvalid, HasSubstr("expected ORDINAL:LIST")));
  EXPECT_THAT(ParseLogicalDevices("0:1GiB,1GiBs"), StatusIs(kInvalid));
  EXPECT_THAT(ParseLogicalDevices("0:1GiB,lots"),
              StatusIs(kInvalid, AllOf(HasSubstr("\"lots\""), HasSubstr("physical device 0"))));
  EXPECT_THAT(ParseLogicalDevices("0:"), StatusIs(kInvalid, HasSubstr("empty list")));
  EXPECT_THAT(ParseLogicalDevices("0:1GiB,"), StatusIs(kInvalid));
  EXPECT_THAT(ParseLogicalDevices("x:1GiB"), StatusIs(kInvalid, HasSubstr("ordinal")));
  EXPECT_THAT(ParseLogicalDevices("0:1GiB@high"),
              StatusIs(kInvalid, HasSubstr("priority \"high\"")));
  EXPECT_THAT(ParseLogicalDevices("0:abc%"), StatusIs(kInvalid, HasSubstr("not a percentage")));
  EXPECT_THAT(ParseLogicalDevices("0:-5%"), StatusIs(kInvalid, HasSubstr("not a percentage")));
  EXPECT_THAT(ParseLogicalDevices("0:1GiB;0:2GiB"),
              StatusIs(kInvalid, HasSubstr("physical device 0 appears twice")));
  EXPECT_THAT(ParseLogicalDevices("0:1GiB;"), StatusIs(kInvalid));
}

TEST(ConfigParseTest, SmPartitionsFractionsBools) {
  absl::StatusOr<std::vector<SmPartitionConfig>> s = ParseSmPartitions("0:33,33,66;1:8");
  ASSERT_THAT(s, IsOk());
  ASSERT_EQ(s->size(), 2u);
  EXPECT_THAT((*s)[0].sm_counts, ElementsAre(33, 33, 66));
  EXPECT_THAT((*s)[1].sm_counts, ElementsAre(8));
  EXPECT_THAT(ParseSmPartitions("0:0"), StatusIs(kInvalid, HasSubstr("positive SM count")));
  EXPECT_THAT(ParseSmPartitions("0:a"), StatusIs(kInvalid));

  EXPECT_THAT(ParseMemoryFraction("0.4"), IsOkAndHolds(0.4));
  EXPECT_THAT(ParseMemoryFraction("4O%"), StatusIs(kInvalid, HasSubstr("4O%")));
  EXPECT_THAT(ParseMemoryFraction("nan"), StatusIs(kInvalid));

  EXPECT_THAT(ParseBool("TRUE"), IsOkAndHolds(true));
  EXPECT_THAT(ParseBool("off"), IsOkAndHolds(false));
  EXPECT_THAT(ParseBool("maybe"), StatusIs(kInvalid, HasSubstr("\"maybe\"")));
}

TEST(ConfigEnvTest, ReadsEveryVariableAndRecordsTheSource) {
  absl::StatusOr<RuntimeConfig> c = RuntimeConfig::FromEnvironment(Env({
      {"VGPU_VISIBLE_DEVICES", "1,0"},
      {"VGPU_LOGICAL_DEVICES", "0:1GiB,1GiB"},
      {"VGPU_ALLOW_GROWTH", "true"},
      {"VGPU_RESERVED_MEMORY", "512MiB"},
      {"VGPU_ALLOCATOR", "bfc"},
      {"VGPU_SM_PARTITION", "0:16,16"},
      {"VGPU_SOFT_PLACEMENT", "1"},
      {"VGPU_LOG_PLACEMENT", "yes"},
  }));
  ASSERT_THAT(c, IsOk());
  EXPECT_THAT(*c->visible_devices, ElementsAre(1, 0));
  ASSERT_EQ(c->logical_devices.size(), 1u);
  EXPECT_EQ(c->logical_devices[0].logical_devices.size(), 2u);
  EXPECT_TRUE(c->allow_growth);
  EXPECT_EQ(c->reserved_memory, 512 * kMiB);
  EXPECT_EQ(c->allocator, AllocatorKind::kBfc);
  EXPECT_EQ(c->sm_partitions.size(), 1u);
  EXPECT_TRUE(c->soft_placement);
  EXPECT_TRUE(c->log_placement);
  EXPECT_EQ(c->SourceOf(kSettingAllowGrowth), ConfigSource::kEnvironment);
  EXPECT_EQ(c->SourceOf(kSettingMemoryFraction), ConfigSource::kDefault);
  // A field changed by the API afterwards counts as api when the env did not set it.
  c->memory_fraction = 0.5;
  EXPECT_EQ(c->SourceOf(kSettingMemoryFraction), ConfigSource::kApi);
}

TEST(ConfigEnvTest, UnsetEnvironmentIsAllDefaults) {
  absl::StatusOr<RuntimeConfig> c = RuntimeConfig::FromEnvironment(Env({}));
  ASSERT_THAT(c, IsOk());
  EXPECT_FALSE(c->visible_devices.has_value());
  EXPECT_TRUE(c->logical_devices.empty());
  for (absl::string_view s : AllSettings()) {
    EXPECT_EQ(c->SourceOf(s), ConfigSource::kDefault) << s;
    EXPECT_FALSE(SettingEnvVar(s).empty()) << s;
  }
}

TEST(ConfigEnvTest, ErrorsNameTheVariableAndValue) {
  struct Case {
    const char* var;
    const char* value;
  };
  for (const Case& c : std::vector<Case>{{"VGPU_VISIBLE_DEVICES", "zero"},
                                         {"VGPU_LOGICAL_DEVICES", "0:1GiB,oops"},
                                         {"VGPU_MEMORY_FRACTION", "half"},
                                         {"VGPU_ALLOW_GROWTH", "sometimes"},
                                         {"VGPU_RESERVED_MEMORY", "12XB"},
                                         {"VGPU_ALLOCATOR", "magic"},
                                         {"VGPU_SM_PARTITION", "0:-4"},
                                         {"VGPU_SOFT_PLACEMENT", "2"},
                                         {"VGPU_LOG_PLACEMENT", "loud"}}) {
    EXPECT_THAT(RuntimeConfig::FromEnvironment(Env({{c.var, c.value}})),
                StatusIs(kInvalid, AllOf(HasSubstr(c.var), HasSubstr(c.value))))
        << c.var;
  }
}

TEST(ConfigSourceTest, ApiSettingsAreReportedAsApi) {
  RuntimeConfig c;
  c.allow_growth = true;
  EXPECT_EQ(c.SourceOf(kSettingAllowGrowth), ConfigSource::kApi);
  EXPECT_EQ(c.SourceOf(kSettingSoftPlacement), ConfigSource::kDefault);
  EXPECT_EQ(ConfigSourceName(ConfigSource::kEnvironment), "environment");
}

// ---- validation ----

TEST(ResolveTest, DefaultIsOneDevicePerCardWithItsFreeMemoryLessReserve) {
  RuntimeConfig c;
  c.reserved_memory = kGiB;
  auto r = ResolveLogicalDevices(c, Cards({8 * kGiB, 16 * kGiB}));
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].memory_limit, 7 * kGiB);
  EXPECT_EQ((*r)[1].memory_limit, 15 * kGiB);
  EXPECT_EQ((*r)[1].physical_ordinal, 1);
  EXPECT_EQ((*r)[1].gpu_id, 1);
}

TEST(ResolveTest, IdsFollowPhysicalOrderThenListPosition) {
  RuntimeConfig c = WithLogical("1:25%,25%;0:1GiB@-1,2GiB,3GiB");
  auto r = ResolveLogicalDevices(c, Cards({8 * kGiB, 16 * kGiB}));
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->size(), 5u);
  std::vector<std::pair<int, uint64_t>> got;
  for (const auto& d : *r) got.emplace_back(d.physical_ordinal, d.memory_limit);
  EXPECT_THAT(got, ElementsAre(std::pair{0, kGiB}, std::pair{0, 2 * kGiB}, std::pair{0, 3 * kGiB},
                               std::pair{1, 4 * kGiB}, std::pair{1, 4 * kGiB}));
  EXPECT_EQ((*r)[0].priority, -1);
  for (int i = 0; i < 5; ++i) EXPECT_EQ((*r)[i].gpu_id, i);
}

TEST(ResolveTest, VisibleDevicesOrderAndUnlistedCardsGetOneDevice) {
  RuntimeConfig c = WithLogical("1:1GiB,1GiB");
  c.visible_devices = std::vector<int>{1, 0};
  auto r = ResolveLogicalDevices(c, Cards({8 * kGiB, 16 * kGiB}));
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].physical_ordinal, 1);
  EXPECT_EQ((*r)[1].physical_ordinal, 1);
  EXPECT_EQ((*r)[2].physical_ordinal, 0);
  EXPECT_EQ((*r)[2].memory_limit, 8 * kGiB);
}

TEST(ResolveTest, NoVisibleDevicesMeansNoGpus) {
  RuntimeConfig c;
  c.visible_devices = std::vector<int>{};
  EXPECT_THAT(ResolveLogicalDevices(c, Cards({8 * kGiB})), IsOkAndHolds(ElementsAre()));
}

TEST(ResolveTest, UnknownPhysicalIds) {
  RuntimeConfig c;
  c.visible_devices = std::vector<int>{0, 3};
  EXPECT_THAT(
      ResolveLogicalDevices(c, Cards({8 * kGiB, 8 * kGiB})),
      StatusIs(absl::StatusCode::kNotFound, AllOf(HasSubstr("physical device 3"), HasSubstr("0..1"),
                                                  HasSubstr("VGPU_VISIBLE_DEVICES"))));
  RuntimeConfig d = WithLogical("2:1GiB");
  EXPECT_THAT(ResolveLogicalDevices(d, Cards({8 * kGiB})),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("physical device 2"), HasSubstr("VGPU_LOGICAL_DEVICES"))));
  EXPECT_THAT(ResolveLogicalDevices(d, Cards({})),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no physical devices")));
}

TEST(ResolveTest, DuplicatePhysicalIds) {
  RuntimeConfig c;
  c.visible_devices = std::vector<int>{0, 0};
  EXPECT_THAT(ResolveLogicalDevices(c, Cards({8 * kGiB})),
              StatusIs(kInvalid, HasSubstr("physical device 0 twice")));
  RuntimeConfig d;
  d.logical_devices = {{0, {LogicalDeviceConfig::Bytes(kGiB)}},
                       {0, {LogicalDeviceConfig::Bytes(kGiB)}}};
  EXPECT_THAT(ResolveLogicalDevices(d, Cards({8 * kGiB})),
              StatusIs(kInvalid, HasSubstr("physical device 0 twice")));
}

TEST(ResolveTest, LogicalDevicesOnAnInvisibleCard) {
  RuntimeConfig c = WithLogical("1:1GiB");
  c.visible_devices = std::vector<int>{0};
  EXPECT_THAT(ResolveLogicalDevices(c, Cards({8 * kGiB, 8 * kGiB})),
              StatusIs(kInvalid, AllOf(HasSubstr("physical device 1"), HasSubstr("not visible"))));
}

TEST(ResolveTest, FractionOutsideZeroOne) {
  for (double f : {0.0, -0.1, 1.5}) {
    RuntimeConfig c;
    c.memory_fraction = f;
    EXPECT_THAT(ResolveLogicalDevices(c, Cards({8 * kGiB})),
                StatusIs(kInvalid, HasSubstr("outside (0, 1]")))
        << f;
  }
  RuntimeConfig ok;
  ok.memory_fraction = 0.25;
  auto r = ResolveLogicalDevices(ok, Cards({8 * kGiB, 16 * kGiB}));
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].memory_limit, 2 * kGiB);
  EXPECT_EQ((*r)[1].memory_limit, 4 * kGiB);
  ok.memory_fraction = 1.0;
  EXPECT_THAT(ResolveLogicalDevices(ok, Cards({8 * kGiB})), IsOk());
}

TEST(ResolveTest, FractionWithExplicitLimits) {
  RuntimeConfig c = WithLogical("0:1GiB");
  c.memory_fraction = 0.5;
  EXPECT_THAT(ResolveLogicalDevices(c, Cards({8 * kGiB})),
              StatusIs(kInvalid, AllOf(HasSubstr("both set"), HasSubstr("0:1GiB"))));
}

TEST(ResolveTest, ZeroLimit) {
  EXPECT_THAT(ResolveLogicalDevices(WithLogical("0:1GiB,0B"), Cards({8 * kGiB})),
              StatusIs(kInvalid, AllOf(HasSubstr("physical device 0"),
                                       HasSubstr("logical device 1 has a zero memory limit"))));
  EXPECT_THAT(ResolveLogicalDevices(WithLogical("0:0%"), Cards({8 * kGiB})),
              StatusIs(kInvalid, HasSubstr("(0, 100]")));
  EXPECT_THAT(ResolveLogicalDevices(WithLogical("0:150%"), Cards({8 * kGiB})),
              StatusIs(kInvalid, HasSubstr("150%")));
}

TEST(ResolveTest, SumOverCapacity) {
  EXPECT_THAT(
      ResolveLogicalDevices(WithLogical("0:5GiB,5GiB"), Cards({8 * kGiB})),
      StatusIs(kInvalid, AllOf(HasSubstr("physical device 0"), HasSubstr("5 GiB + 5 GiB = 10 GiB"),
                               HasSubstr("capacity of 8 GiB"))));
  // Exactly full is fine; the reserve counts.
  EXPECT_THAT(ResolveLogicalDevices(WithLogical("0:4GiB,4GiB"), Cards({8 * kGiB})), IsOk());
  RuntimeConfig c = WithLogical("0:4GiB,4GiB");
  c.reserved_memory = kMiB;
  EXPECT_THAT(ResolveLogicalDevices(c, Cards({8 * kGiB})),
              StatusIs(kInvalid, AllOf(HasSubstr("reserve 1 MiB"), HasSubstr("8 GiB"))));
  // Percentages too, and huge values do not wrap around.
  EXPECT_THAT(ResolveLogicalDevices(WithLogical("0:60%,50%"), Cards({8 * kGiB})),
              StatusIs(kInvalid, HasSubstr("exceed its capacity")));
  RuntimeConfig huge;
  huge.logical_devices = {
      {0, {LogicalDeviceConfig::Bytes(~uint64_t{0}), LogicalDeviceConfig::Bytes(~uint64_t{0})}}};
  EXPECT_THAT(ResolveLogicalDevices(huge, Cards({8 * kGiB})),
              StatusIs(kInvalid, HasSubstr("exceed its capacity")));
}

TEST(ResolveTest, ReserveAtLeastTheCard) {
  RuntimeConfig c;
  c.reserved_memory = 8 * kGiB;
  EXPECT_THAT(ResolveLogicalDevices(c, Cards({8 * kGiB})),
              StatusIs(kInvalid, HasSubstr("leaves nothing")));
}

TEST(ResolveTest, OverFreeMemoryFailsOnlyWithoutGrowth) {
  std::vector<PhysicalDeviceInfo> cards = Cards({8 * kGiB});
  cards[0].free_bytes = 3 * kGiB;
  RuntimeConfig c = WithLogical("0:2GiB,2GiB");
  EXPECT_THAT(ResolveLogicalDevices(c, cards),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("physical device 0"), HasSubstr("free memory of 3 GiB"),
                             HasSubstr("VGPU_ALLOW_GROWTH"))));
  c.allow_growth = true;
  EXPECT_THAT(ResolveLogicalDevices(c, cards), IsOk());
  // The default limit follows the free memory.
  RuntimeConfig d;
  auto r = ResolveLogicalDevices(d, cards);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].memory_limit, 3 * kGiB);
  d.reserved_memory = 3 * kGiB;
  EXPECT_THAT(ResolveLogicalDevices(d, cards),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("only 3 GiB free")));
}

TEST(ResolveTest, SmPartitions) {
  RuntimeConfig c = WithLogical("0:1GiB,1GiB,1GiB");
  c.sm_partitions = {{0, {32, 32, 64}}};
  auto r = ResolveLogicalDevices(c, Cards({8 * kGiB}));
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[2].sm_count, 64);
  c.sm_partitions = {{0, {32, 32}}};
  EXPECT_THAT(ResolveLogicalDevices(c, Cards({8 * kGiB})),
              StatusIs(kInvalid, HasSubstr("2 SM partitions for 3 logical devices")));
  c.sm_partitions = {{0, {100, 100, 100}}};
  EXPECT_THAT(ResolveLogicalDevices(c, Cards({8 * kGiB})),
              StatusIs(kInvalid, HasSubstr("exceed its 132 SMs")));
  c.sm_partitions = {{4, {1}}};
  EXPECT_THAT(ResolveLogicalDevices(c, Cards({8 * kGiB})),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("VGPU_SM_PARTITION")));
}

// Issue 13, bug 6: 33,33,66 fits 132 SMs as written but not as an H100 rounds it (a minimum
// partition of 8 and multiples of 8: 40+40+72 = 152), so validation must fail, with the
// rounded numbers, before any green context is made.
TEST(ResolveTest, SmPartitionsCountTheRoundedSum) {
  RuntimeConfig c = WithLogical("0:1GiB,1GiB,1GiB");
  c.sm_partitions = {{0, {33, 33, 66}}};
  std::vector<PhysicalDeviceInfo> cards = Cards({8 * kGiB});
  cards[0].sm_partition_min = 8;
  cards[0].sm_partition_alignment = 8;
  EXPECT_THAT(ResolveLogicalDevices(c, cards),
              StatusIs(kInvalid, AllOf(HasSubstr("33+33+66"), HasSubstr("40+40+72 = 152"),
                                       HasSubstr("exceed its 132 SMs"))));
  c.sm_partitions = {{0, {32, 32, 64}}};
  EXPECT_THAT(ResolveLogicalDevices(c, cards), IsOk());
  c.sm_partitions = {{0, {1, 1, 120}}};  // 8 + 8 + 120 = 136 > 132
  EXPECT_THAT(ResolveLogicalDevices(c, cards), StatusIs(kInvalid, HasSubstr("8+8+120 = 136")));
}

// Issue 13, bug 1: with no reserve set, "all free memory" leaves the platform's default
// reserve free; a reserve set explicitly (0 included) replaces it.
TEST(ResolveTest, DefaultReserveWhenNoneIsSet) {
  std::vector<PhysicalDeviceInfo> cards = Cards({80 * kGiB});
  cards[0].default_reserve = 4 * kGiB;
  RuntimeConfig c;
  auto r = ResolveLogicalDevices(c, cards);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].memory_limit, 76 * kGiB);
  c.reserved_memory = 0;
  c.sources[std::string(kSettingReservedMemory)] = ConfigSource::kEnvironment;
  r = ResolveLogicalDevices(c, cards);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].memory_limit, 80 * kGiB);
  c.reserved_memory = kGiB;
  r = ResolveLogicalDevices(c, cards);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ((*r)[0].memory_limit, 79 * kGiB);
}

}  // namespace
}  // namespace vgpu
