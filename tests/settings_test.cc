// The settings table (devices/settings.h): every row is read from its environment variable,
// records where its value came from, formats and copies its own field, and a flag (source
// kFlag) wins over the environment. The flags' side is in flags_test (RuntimeSettingsFlags);
// README.md's table against the table: the readme_settings_table test (tests/vgpu_info.cmake).
#include "vgpu/devices/settings.h"

#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/devices/config.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

RuntimeConfig::EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(SettingsTableTest, RowsAreComplete) {
  std::set<std::string> names, envs, flags;
  for (const Setting& s : SettingsTable()) {
    EXPECT_TRUE(names.insert(std::string(s.name)).second) << s.name;
    EXPECT_TRUE(envs.insert(std::string(s.env)).second) << s.name;
    EXPECT_TRUE(flags.insert(std::string(s.flag)).second) << s.name;
    EXPECT_TRUE(absl::StartsWith(s.env, "VGPU_")) << s.name;
    EXPECT_TRUE(absl::StartsWith(s.flag, "--")) << s.name;
    EXPECT_FALSE(s.value_name.empty() || s.example.empty() || s.usage.empty() || s.doc.empty())
        << s.name;
    EXPECT_TRUE(s.parse && s.format && s.is_default && s.copy) << s.name;
    EXPECT_TRUE(s.is_default(RuntimeConfig())) << s.name;
    EXPECT_EQ(FindSetting(s.name), &s);
    EXPECT_EQ(SettingEnvVar(s.name), s.env);
  }
  EXPECT_EQ(AllSettings().size(), SettingsTable().size());
  EXPECT_EQ(FindSetting("no_such_setting"), nullptr);
  EXPECT_EQ(FormatSetting(RuntimeConfig(), "no_such_setting"), "");
}

// Every row's variable is read into its field, and the config says it came from there.
TEST(SettingsTableTest, EveryVariableIsReadAndItsSourceRecorded) {
  for (const Setting& s : SettingsTable()) {
    absl::StatusOr<RuntimeConfig> c =
        RuntimeConfig::FromEnvironment(Env({{std::string(s.env), std::string(s.example)}}));
    ASSERT_THAT(c, IsOk()) << s.env;
    EXPECT_EQ(c->SourceOf(s.name), ConfigSource::kEnvironment) << s.env;
    RuntimeConfig parsed;
    ASSERT_THAT(s.parse(s.example, parsed), IsOk()) << s.name;
    EXPECT_EQ(s.format(*c), s.format(parsed)) << s.name;
    // copy moves exactly this field.
    RuntimeConfig copied;
    s.copy(parsed, copied);
    EXPECT_EQ(s.format(copied), s.format(parsed)) << s.name;
    for (const Setting& other : SettingsTable()) {
      if (other.name == s.name) continue;
      EXPECT_EQ(c->SourceOf(other.name), ConfigSource::kDefault) << s.env << " " << other.name;
      EXPECT_TRUE(other.is_default(copied)) << s.name << " copied " << other.name;
    }
  }
}

TEST(SettingsTableTest, FlagsWinOverTheEnvironment) {
  RuntimeConfig flags;
  flags.allow_growth = true;
  flags.sources[std::string(kSettingAllowGrowth)] = ConfigSource::kFlag;
  flags.memory_fraction = 0.5;
  flags.sources[std::string(kSettingMemoryFraction)] = ConfigSource::kFlag;
  flags.log_placement = true;  // not from a flag: the environment's value is used
  absl::StatusOr<RuntimeConfig> c = RuntimeConfig::FromEnvironmentAndFlags(
      flags, Env({{"VGPU_ALLOW_GROWTH", "false"},
                  {"VGPU_MEMORY_FRACTION", "not a number"},  // overridden: never read
                  {"VGPU_ALLOCATOR", "vmm"}}));
  ASSERT_THAT(c, IsOk());
  EXPECT_TRUE(c->allow_growth);
  EXPECT_EQ(c->SourceOf(kSettingAllowGrowth), ConfigSource::kFlag);
  EXPECT_EQ(c->memory_fraction, 0.5);
  EXPECT_EQ(c->SourceOf(kSettingMemoryFraction), ConfigSource::kFlag);
  EXPECT_EQ(c->allocator, AllocatorKind::kVmm);
  EXPECT_EQ(c->SourceOf(kSettingAllocator), ConfigSource::kEnvironment);
  EXPECT_FALSE(c->log_placement);
  EXPECT_EQ(c->SourceOf(kSettingLogPlacement), ConfigSource::kDefault);
  EXPECT_EQ(ConfigSourceName(ConfigSource::kFlag), "flag");
  // A setting no flag gave is still checked in the environment.
  EXPECT_THAT(RuntimeConfig::FromEnvironmentAndFlags(flags, Env({{"VGPU_ALLOCATOR", "magic"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("VGPU_ALLOCATOR"), HasSubstr("magic"))));
}

TEST(SettingsTableTest, MarkdownTableHasOneRowPerSetting) {
  const std::string table = SettingsMarkdownTable();
  EXPECT_TRUE(absl::StartsWith(table, "| variable | flag | meaning |\n|---|---|---|\n"));
  for (const Setting& s : SettingsTable()) {
    EXPECT_THAT(table, HasSubstr(absl::StrCat("| `", s.env, "=")));
    EXPECT_THAT(table, HasSubstr(absl::StrCat("` | `", s.flag, "` | ", s.doc, " |\n")));
  }
  EXPECT_THAT(table, HasSubstr("`VGPU_ALLOCATOR=bfc\\|vmm\\|async`"));
}

}  // namespace
}  // namespace vgpu
