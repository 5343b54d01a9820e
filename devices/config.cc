#include "vgpu/devices/config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {
namespace {

absl::StatusOr<int> ParseOrdinal(absl::string_view text, absl::string_view what) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  // Digits only (no sign), and a bound so a huge number is refused here, not wrapped.
  absl::StatusOr<int64_t> v = ParseInt64InRange(t, 0, kMaxPhysicalOrdinal);
  if (t.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(t[0])) || !v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("bad ", what, " ", QuoteUserText(text),
                                                   ": expected a physical device ordinal (0, 1, "
                                                   "..., at most ",
                                                   kMaxPhysicalOrdinal, ")"));
  }
  return static_cast<int>(*v);
}

// Splits "ORD:rest" groups separated by ';'.
// `example` is a valid value of the grammar being parsed, for the error.
absl::StatusOr<std::vector<std::pair<int, absl::string_view>>> SplitGroups(
    absl::string_view text, absl::string_view what, absl::string_view example) {
  std::vector<std::pair<int, absl::string_view>> groups;
  std::set<int> seen;
  for (absl::string_view group : absl::StrSplit(text, ';')) {
    absl::string_view g = absl::StripAsciiWhitespace(group);
    size_t colon = g.find(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad ", what, " group ", QuoteUserText(g), " in ", QuoteUserText(text),
          ": expected ORDINAL:LIST, e.g. \"", example, "\"; groups are separated by ';'"));
    }
    VGPU_ASSIGN_OR_RETURN(int ordinal, ParseOrdinal(g.substr(0, colon), what));
    if (!seen.insert(ordinal).second) {
      return absl::InvalidArgumentError(absl::StrCat("bad ", what, " ", QuoteUserText(text),
                                                     ": physical device ", ordinal,
                                                     " appears twice; list it once"));
    }
    absl::string_view rest = absl::StripAsciiWhitespace(g.substr(colon + 1));
    if (rest.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("bad ", what, " group ", QuoteUserText(g),
                                                     " in ", QuoteUserText(text),
                                                     ": empty list for physical device ", ordinal));
    }
    groups.emplace_back(ordinal, rest);
  }
  return groups;
}

std::string FormatPercent(double p) {
  std::string s = absl::StrFormat("%.4f", p);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// "1GiB", "512MiB", "3KiB", or plain bytes: exact and accepted by ParseBytes.
std::string CompactBytes(uint64_t b) {
  if (b != 0 && b % kGiB == 0) return absl::StrCat(b / kGiB, "GiB");
  if (b != 0 && b % kMiB == 0) return absl::StrCat(b / kMiB, "MiB");
  if (b != 0 && b % kKiB == 0) return absl::StrCat(b / kKiB, "KiB");
  return absl::StrCat(b);
}

std::string DescribeLimit(const LogicalDeviceConfig& d) {
  if (d.memory_percent) return absl::StrCat(FormatPercent(*d.memory_percent), "%");
  return FormatBytes(d.memory_bytes);
}

}  // namespace

ConfigSource RuntimeConfig::SourceOf(absl::string_view setting) const {
  auto it = sources.find(setting);
  if (it != sources.end()) return it->second;
  const Setting* s = FindSetting(setting);
  return s == nullptr || s->is_default(*this) ? ConfigSource::kDefault : ConfigSource::kApi;
}

absl::StatusOr<std::vector<int>> ParseVisibleDevices(absl::string_view text) {
  std::vector<int> out;
  if (StripUserValue(text).empty()) return out;
  std::set<int> seen;
  for (absl::string_view item : absl::StrSplit(StripUserValue(text), ',')) {
    VGPU_ASSIGN_OR_RETURN(int ordinal, ParseOrdinal(item, "visible device"));
    if (!seen.insert(ordinal).second) {
      return absl::InvalidArgumentError(absl::StrCat("bad visible devices ", QuoteUserText(text),
                                                     ": physical device ", ordinal,
                                                     " appears twice; list it once"));
    }
    out.push_back(ordinal);
  }
  return out;
}

absl::StatusOr<std::vector<PhysicalDeviceConfig>> ParseLogicalDevices(absl::string_view text) {
  VGPU_ASSIGN_OR_RETURN(auto groups,
                        SplitGroups(StripUserValue(text), "logical devices", "0:1GiB,1GiB"));
  std::vector<PhysicalDeviceConfig> out;
  for (const auto& [ordinal, list] : groups) {
    PhysicalDeviceConfig p;
    p.ordinal = ordinal;
    for (absl::string_view entry : absl::StrSplit(list, ',')) {
      if (p.logical_devices.size() == kMaxLogicalDevicesPerPhysicalDevice) {
        return absl::InvalidArgumentError(absl::StrCat(
            "bad logical devices ", QuoteUserText(text), ": more than ",
            kMaxLogicalDevicesPerPhysicalDevice, " logical devices on physical device ", ordinal));
      }
      absl::string_view e = absl::StripAsciiWhitespace(entry);
      const std::string where =
          absl::StrCat("bad logical device ", QuoteUserText(e), " of physical device ", ordinal,
                       " in ", QuoteUserText(text), ": ");
      LogicalDeviceConfig d;
      absl::string_view size = e;
      size_t at = e.find('@');
      if (at != absl::string_view::npos) {
        size = absl::StripAsciiWhitespace(e.substr(0, at));
        absl::string_view prio = absl::StripAsciiWhitespace(e.substr(at + 1));
        absl::StatusOr<int64_t> v = ParseInt64InRange(prio, kMinStreamPriority, kMaxStreamPriority);
        if (!v.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, "priority ", QuoteUserText(prio), " is not an integer in ", kMinStreamPriority,
              "..", kMaxStreamPriority, " (SIZE@PRIORITY, e.g. 1GiB@-1)"));
        }
        d.priority = static_cast<int>(*v);
        d.priority_given = true;
      }
      if (absl::ConsumeSuffix(&size, "%")) {
        absl::string_view num = absl::StripAsciiWhitespace(size);
        // Decimal only: "0x10%" is not 16 %, and a sign is not a percentage.
        absl::StatusOr<double> pct = ParseDecimal(num);
        if (num.empty() || !pct.ok() ||
            !(absl::ascii_isdigit(static_cast<unsigned char>(num[0])) || num[0] == '.')) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, QuoteUserText(absl::StrCat(size, "%")),
              " is not a percentage (a decimal number in (0, 100] followed by %, e.g. 40%)"));
        }
        d.memory_percent = *pct;
      } else {
        absl::StatusOr<uint64_t> bytes = ParseBytes(size);
        if (!bytes.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, bytes.status().message(), " (sizes: 1GiB, 512MiB, 4GB, 40%)"));
        }
        d.memory_bytes = *bytes;
      }
      p.logical_devices.push_back(d);
    }
    out.push_back(std::move(p));
  }
  return out;
}

absl::StatusOr<std::vector<SmPartitionConfig>> ParseSmPartitions(absl::string_view text) {
  VGPU_ASSIGN_OR_RETURN(auto groups, SplitGroups(StripUserValue(text), "SM partition", "0:33,33"));
  std::vector<SmPartitionConfig> out;
  for (const auto& [ordinal, list] : groups) {
    SmPartitionConfig p;
    p.ordinal = ordinal;
    for (absl::string_view entry : absl::StrSplit(list, ',')) {
      if (p.sm_counts.size() == kMaxLogicalDevicesPerPhysicalDevice) {
        return absl::InvalidArgumentError(absl::StrCat(
            "bad SM partition ", QuoteUserText(text), ": more than ",
            kMaxLogicalDevicesPerPhysicalDevice, " SM counts for physical device ", ordinal));
      }
      absl::string_view e = absl::StripAsciiWhitespace(entry);
      absl::StatusOr<int64_t> count = ParseInt64InRange(e, 1, kMaxSmCount);
      if (e.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(e[0])) || !count.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad SM partition ", QuoteUserText(e), " of physical device ", ordinal,
                         " in ", QuoteUserText(text), ": expected a positive SM count (1..",
                         kMaxSmCount, "), e.g. 0:33,33"));
      }
      p.sm_counts.push_back(static_cast<int>(*count));
    }
    out.push_back(std::move(p));
  }
  return out;
}

absl::StatusOr<double> ParseMemoryFraction(absl::string_view text) {
  absl::StatusOr<double> v = ParseDecimal(StripUserValue(text));
  if (!v.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad memory fraction ", QuoteUserText(text),
                     ": expected a decimal number in (0, 1], e.g. 0.4"));
  }
  return *v;
}

absl::StatusOr<uint64_t> ParseReservedMemory(absl::string_view text) {
  absl::string_view t = StripUserValue(text);
  // One reserve applies to every card, so it is bytes: a percentage would mean a different
  // amount per card and is refused rather than guessed.
  absl::StatusOr<uint64_t> v =
      absl::EndsWith(t, "%") ? absl::InvalidArgumentError("") : ParseBytes(t);
  if (!v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad reserved memory ", QuoteUserText(text),
        ": expected a size in bytes such as 512MiB, 1GiB or 1073741824 (a percentage is not "
        "accepted: the same reserve is left free on every card)"));
  }
  return *v;
}

absl::StatusOr<bool> ParseBool(absl::string_view text) {
  std::string t = absl::AsciiStrToLower(StripUserValue(text));
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  return absl::InvalidArgumentError(absl::StrCat("bad boolean ", QuoteUserText(text),
                                                 ": expected true/false, 1/0, yes/no or on/off"));
}

std::string FormatLogicalDevices(absl::Span<const PhysicalDeviceConfig> devices) {
  std::vector<std::string> groups;
  for (const PhysicalDeviceConfig& p : devices) {
    std::vector<std::string> items;
    for (const LogicalDeviceConfig& d : p.logical_devices) {
      std::string item = d.memory_percent ? absl::StrCat(FormatPercent(*d.memory_percent), "%")
                                          : CompactBytes(d.memory_bytes);
      if (d.priority != 0) absl::StrAppend(&item, "@", d.priority);
      items.push_back(std::move(item));
    }
    groups.push_back(absl::StrCat(p.ordinal, ":", absl::StrJoin(items, ",")));
  }
  return absl::StrJoin(groups, ";");
}

namespace {
std::optional<std::string> ProcessEnvironment(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}
}  // namespace

absl::StatusOr<RuntimeConfig> RuntimeConfig::FromEnvironment() {
  return FromEnvironment(ProcessEnvironment);
}

absl::StatusOr<RuntimeConfig> RuntimeConfig::FromEnvironment(const EnvLookup& getenv) {
  return FromEnvironmentAndFlags(RuntimeConfig(), getenv);
}

absl::StatusOr<RuntimeConfig> RuntimeConfig::FromEnvironmentAndFlags(const RuntimeConfig& flags) {
  return FromEnvironmentAndFlags(flags, ProcessEnvironment);
}

absl::StatusOr<RuntimeConfig> RuntimeConfig::FromEnvironmentAndFlags(const RuntimeConfig& flags,
                                                                     const EnvLookup& getenv) {
  RuntimeConfig c;
  for (const Setting& s : SettingsTable()) {
    if (flags.SourceOf(s.name) == ConfigSource::kFlag) {
      s.copy(flags, c);
      c.sources[std::string(s.name)] = ConfigSource::kFlag;
      continue;
    }
    std::string env(s.env);
    std::optional<std::string> value = getenv(env.c_str());
    if (!value) continue;
    // An empty value is an error, never a silent default: "VGPU_X=" in a script is usually a
    // variable that expanded to nothing. The exception (VGPU_VISIBLE_DEVICES, where empty
    // means "no GPUs", as CUDA_VISIBLE_DEVICES="" does) says so in its row.
    if (StripUserValue(*value).empty() && !s.empty_allowed) {
      return absl::InvalidArgumentError(
          absl::StrCat(env, "=", QuoteUserText(*value), ": empty value; unset ", env,
                       " for the default, or give a value, e.g. ", env, "=", s.example));
    }
    if (absl::Status st = s.parse(*value, c); !st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat(env, "=", QuoteUserText(*value), ": ", st.message()));
    }
    c.sources[std::string(s.name)] = ConfigSource::kEnvironment;
  }
  return c;
}

// ---- ResolveLogicalDevices, step by step ---------------------------------------------------
// 1. the visible physical devices; 2. the memory fraction; 3. the explicit logical devices
// and 4. the SM partitions, each checked against them; then, per visible card, 5. its logical
// devices' limits, 6. their sum against the card and 7. its SM partition.
namespace {

// What the platform has, for the "unknown ordinal" messages.
struct PhysicalDevices {
  int count = 0;
  bool Known(int ordinal) const { return ordinal >= 0 && ordinal < count; }
  std::string List() const {
    return count == 0 ? std::string("the platform has no physical devices")
                      : absl::StrCat("the platform has physical devices 0..", count - 1);
  }
};

bool Contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Step 1: the visible physical devices (known, each once), in the configured order.
absl::StatusOr<std::vector<int>> VisibleOrdinals(const RuntimeConfig& config,
                                                 const PhysicalDevices& have) {
  std::vector<int> visible;
  if (!config.visible_devices) {
    for (int o = 0; o < have.count; ++o) visible.push_back(o);
    return visible;
  }
  std::set<int> seen;
  for (int o : *config.visible_devices) {
    if (!have.Known(o)) {
      return absl::NotFoundError(absl::StrCat("visible devices name physical device ", o, ", but ",
                                              have.List(), "; fix VGPU_VISIBLE_DEVICES"));
    }
    if (!seen.insert(o).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("visible devices list physical device ", o, " twice; list it once"));
    }
    visible.push_back(o);
  }
  return visible;
}

// Step 2: a memory fraction is in (0, 1] and not given together with logical devices.
absl::Status CheckMemoryFraction(const RuntimeConfig& config) {
  if (!config.memory_fraction) return absl::OkStatus();
  const double f = *config.memory_fraction;
  if (!(f > 0.0 && f <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory fraction ", f, " is outside (0, 1]; use e.g. VGPU_MEMORY_FRACTION=0.4"));
  }
  if (!config.logical_devices.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory fraction ", f, " and explicit logical devices (",
                     FormatLogicalDevices(config.logical_devices),
                     ") both set; use one: VGPU_MEMORY_FRACTION or VGPU_LOGICAL_DEVICES"));
  }
  return absl::OkStatus();
}

// Step 3: explicit logical devices, by physical ordinal: known, visible, each once, non-empty.
absl::StatusOr<std::map<int, const PhysicalDeviceConfig*>> ExplicitDevices(
    const RuntimeConfig& config, const PhysicalDevices& have, const std::vector<int>& visible) {
  std::map<int, const PhysicalDeviceConfig*> by_ordinal;
  for (const PhysicalDeviceConfig& p : config.logical_devices) {
    if (!have.Known(p.ordinal)) {
      return absl::NotFoundError(absl::StrCat("logical devices are configured for physical device ",
                                              p.ordinal, ", but ", have.List(),
                                              "; fix VGPU_LOGICAL_DEVICES"));
    }
    if (!Contains(visible, p.ordinal)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logical devices are configured for physical device ", p.ordinal,
                       ", which is not visible (visible: ", absl::StrJoin(visible, ","),
                       "); add it to VGPU_VISIBLE_DEVICES or drop its group"));
    }
    if (!by_ordinal.emplace(p.ordinal, &p).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("logical devices list physical device ", p.ordinal, " twice; list it once"));
    }
    if (p.logical_devices.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("physical device ", p.ordinal, " has an empty logical device list"));
    }
  }
  return by_ordinal;
}

// Step 4: SM partitions, by physical ordinal: known, visible, each once.
absl::StatusOr<std::map<int, const SmPartitionConfig*>> SmPartitions(
    const RuntimeConfig& config, const PhysicalDevices& have, const std::vector<int>& visible) {
  std::map<int, const SmPartitionConfig*> by_ordinal;
  for (const SmPartitionConfig& s : config.sm_partitions) {
    if (!have.Known(s.ordinal)) {
      return absl::NotFoundError(absl::StrCat("SM partitions are configured for physical device ",
                                              s.ordinal, ", but ", have.List(),
                                              "; fix VGPU_SM_PARTITION"));
    }
    if (!Contains(visible, s.ordinal)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SM partitions are configured for physical device ", s.ordinal,
                       ", which is not visible; add it to VGPU_VISIBLE_DEVICES or drop its group"));
    }
    if (!by_ordinal.emplace(s.ordinal, &s).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("SM partitions list physical device ", s.ordinal, " twice; list it once"));
    }
  }
  return by_ordinal;
}

// One visible card as steps 5-7 see it.
struct Card {
  int ordinal = 0;
  const PhysicalDeviceInfo* info = nullptr;
  std::string dev;  // "physical device 0 (NAME)", the messages' subject
  uint64_t total = 0;
  uint64_t reserve = 0;    // the configured reserved memory
  uint64_t unit = 1;       // derived limits are whole multiples of this (a granule)
  uint64_t page = 1;       // the platform rounds every Allocate up to this
  uint64_t min_bytes = 0;  // the smallest logical device

  Card(int o, const PhysicalDeviceInfo& i, const RuntimeConfig& config)
      : ordinal(o),
        info(&i),
        dev(absl::StrCat("physical device ", o, " (", i.name, ")")),
        total(i.total_bytes),
        reserve(config.reserved_memory),
        unit(std::max<uint64_t>({i.vmm_granularity, i.allocation_granularity, uint64_t{1}})),
        page(std::max<uint64_t>(i.allocation_granularity, 1)),
        min_bytes(std::max(kMinLogicalDeviceBytes, i.vmm_granularity)) {}

  // Limits the runtime derives (percentages, fractions, all of the free memory) are rounded
  // DOWN to a whole granule: the platform rounds every region it gives UP (a page for
  // Allocate, a granule for physical memory), so an exact 40% + 60% would no longer fit once
  // rounded. Limits given in bytes are kept; the capacity check (step 6) counts them as the
  // platform rounds them. So whatever validates here, builds.
  uint64_t RoundDown(long double bytes) const {
    if (!(bytes > 0)) return 0;
    if (bytes >= static_cast<long double>(total)) return total / unit * unit;
    return static_cast<uint64_t>(bytes) / unit * unit;
  }
};

// Step 5a: the card's listed logical devices (bytes, or a percentage of the card).
absl::StatusOr<std::vector<ResolvedLogicalDevice>> ListedLimits(
    const Card& card, const std::vector<LogicalDeviceConfig>& list) {
  std::vector<ResolvedLogicalDevice> mine;
  for (size_t i = 0; i < list.size(); ++i) {
    const LogicalDeviceConfig& d = list[i];
    ResolvedLogicalDevice r;
    r.physical_ordinal = card.ordinal;
    r.priority = d.priority;
    if (d.memory_percent) {
      double pct = *d.memory_percent;
      if (!(pct > 0.0 && pct <= 100.0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(card.dev, ": logical device ", i, " asks for ", FormatPercent(pct),
                         "% of the card; a percentage must be in (0, 100]"));
      }
      r.memory_limit = card.RoundDown(static_cast<long double>(card.total) * pct / 100.0L);
    } else {
      r.memory_limit = d.memory_bytes;
    }
    if (r.memory_limit == 0 && !d.memory_percent) {
      return absl::InvalidArgumentError(
          absl::StrCat(card.dev, ": logical device ", i, " has a zero memory limit (",
                       DescribeLimit(d), "); give every logical device a positive size"));
    }
    if (r.memory_limit < card.min_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          card.dev, ": logical device ", i, " gets ", FormatBytes(r.memory_limit),
          d.memory_percent
              ? absl::StrCat(" (", DescribeLimit(d), " of ", FormatBytes(card.total), ")")
              : std::string(),
          ", below the minimum logical device size of ", FormatBytes(card.min_bytes),
          "; give it at least ", CompactBytes(card.min_bytes)));
    }
    mine.push_back(r);
  }
  return mine;
}

// Step 5b: one logical device of `fraction` x the card's total.
absl::StatusOr<ResolvedLogicalDevice> FractionLimit(const Card& card, double fraction) {
  ResolvedLogicalDevice r;
  r.physical_ordinal = card.ordinal;
  r.memory_limit =
      card.RoundDown(static_cast<long double>(card.total) * static_cast<long double>(fraction));
  if (r.memory_limit < card.min_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(card.dev, ": memory fraction ", fraction, " of ", FormatBytes(card.total),
                     " is ", FormatBytes(r.memory_limit),
                     ", below the minimum logical device size of ", FormatBytes(card.min_bytes)));
  }
  return r;
}

// Step 5c: one logical device with all of the free memory but the reserve, as TensorFlow does
// by default. With no reserve set, the platform's default reserve (cuda: room for the context,
// module and libraries, see PhysicalDeviceInfo::default_reserve) stays free.
absl::StatusOr<ResolvedLogicalDevice> FreeMemoryLimit(const Card& card,
                                                      const RuntimeConfig& config) {
  const uint64_t free = card.info->free_bytes;
  const bool reserve_set = config.SourceOf(kSettingReservedMemory) != ConfigSource::kDefault;
  const uint64_t kept = reserve_set ? config.reserved_memory : card.info->default_reserve;
  if (free <= kept) {
    return absl::ResourceExhaustedError(
        absl::StrCat(card.dev, ": only ", FormatBytes(free), " free, not more than the reserve ",
                     FormatBytes(kept), reserve_set ? "" : " (the platform's default)",
                     "; lower VGPU_RESERVED_MEMORY or free memory on the card"));
  }
  ResolvedLogicalDevice r;
  r.physical_ordinal = card.ordinal;
  r.memory_limit = (free - kept) / card.unit * card.unit;
  if (r.memory_limit < card.min_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        card.dev, ": only ", FormatBytes(free - kept),
        " free after the reserve, below the minimum logical device size of ",
        FormatBytes(card.min_bytes), "; lower VGPU_RESERVED_MEMORY or free memory on the card"));
  }
  return r;
}

// Step 5: the card's logical devices and their limits, from whichever setting decides them.
absl::StatusOr<std::vector<ResolvedLogicalDevice>> CardLimits(
    const Card& card, const RuntimeConfig& config,
    const std::map<int, const PhysicalDeviceConfig*>& listed) {
  if (auto it = listed.find(card.ordinal); it != listed.end()) {
    return ListedLimits(card, it->second->logical_devices);
  }
  VGPU_ASSIGN_OR_RETURN(ResolvedLogicalDevice r, config.memory_fraction
                                                     ? FractionLimit(card, *config.memory_fraction)
                                                     : FreeMemoryLimit(card, config));
  return std::vector<ResolvedLogicalDevice>{r};
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return b > std::numeric_limits<uint64_t>::max() - a ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

// Step 6: the limits (as the platform rounds them) and the reserve fit in the card, and in
// its free memory when growth is off (the whole limit is then taken at start).
absl::Status CheckCapacity(const Card& card, const RuntimeConfig& config,
                           const std::vector<ResolvedLogicalDevice>& mine) {
  const uint64_t total = card.total, reserve = card.reserve, free = card.info->free_bytes;
  uint64_t sum = 0, taken = 0;  // as configured; as the platform rounds it
  std::vector<std::string> parts;
  for (const ResolvedLogicalDevice& r : mine) {
    // Saturating: absurd sizes must still fail the capacity check, not wrap around.
    sum = SaturatingAdd(sum, r.memory_limit);
    const uint64_t rounded = r.memory_limit % card.page == 0
                                 ? r.memory_limit
                                 : SaturatingAdd(r.memory_limit / card.page * card.page, card.page);
    taken = SaturatingAdd(taken, rounded);
    parts.push_back(FormatBytes(r.memory_limit));
  }
  std::string sum_text = absl::StrCat(
      mine.size() > 1 ? absl::StrCat(absl::StrJoin(parts, " + "), " = ") : "", FormatBytes(sum),
      reserve > 0 ? absl::StrCat(" + reserve ", FormatBytes(reserve)) : "");
  std::string rounding = taken != sum ? absl::StrCat(", ", taken, " once rounded up to whole ",
                                                     FormatBytes(card.page), " pages")
                                      : "";
  if (taken > total - reserve) {
    return absl::InvalidArgumentError(absl::StrCat(
        card.dev, ": logical device limits ", sum_text, " exceed its capacity of ",
        FormatBytes(total), " (", sum, reserve > 0 ? absl::StrCat(" + ", reserve) : "", " > ",
        total, " bytes", rounding, "); shrink the limits in VGPU_LOGICAL_DEVICES or the reserve"));
  }
  if (!config.allow_growth && taken > (free > reserve ? free - reserve : 0)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(card.dev, ": logical device limits ", sum_text, " exceed its free memory of ",
                     FormatBytes(free), " (", sum, reserve > 0 ? absl::StrCat(" + ", reserve) : "",
                     " > ", free, " bytes", rounding,
                     "), and without growth the whole limit is taken at start; free memory on the "
                     "card, shrink the limits or set VGPU_ALLOW_GROWTH=true"));
  }
  return absl::OkStatus();
}

// Step 7: one SM count per logical device of the card, which together fit in its SMs as the
// device rounds them (green contexts: at least the minimum partition, a multiple of the
// alignment), so a split that cannot be made fails here, not late. Sets each sm_count.
absl::Status ApplySmPartition(const Card& card, const std::vector<int>& counts,
                              std::vector<ResolvedLogicalDevice>& mine) {
  const PhysicalDeviceInfo& info = *card.info;
  if (counts.size() != mine.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        card.dev, ": ", counts.size(), " SM partitions for ", mine.size(),
        " logical devices; give one SM count per logical device in VGPU_SM_PARTITION"));
  }
  const int64_t min_sms = std::max(info.sm_partition_min, 1);
  const int64_t align = std::max(info.sm_partition_alignment, 1);
  int64_t sm_sum = 0;
  std::vector<int64_t> rounded;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          card.dev, ": SM count ", counts[i], " of logical device ", i, " must be positive"));
    }
    rounded.push_back(std::max<int64_t>(min_sms, (counts[i] + align - 1) / align * align));
    sm_sum += rounded.back();
    mine[i].sm_count = counts[i];
  }
  if (info.sm_count > 0 && sm_sum > info.sm_count) {
    const bool rounds = rounded != std::vector<int64_t>(counts.begin(), counts.end());
    return absl::InvalidArgumentError(absl::StrCat(
        card.dev, ": SM partitions ", absl::StrJoin(counts, "+"),
        rounds ? absl::StrCat(", rounded to the device's minimum partition of ", min_sms,
                              " SMs and multiple of ", align, " as ", absl::StrJoin(rounded, "+"))
               : std::string(),
        " = ", sm_sum, " exceed its ", info.sm_count, " SMs; shrink VGPU_SM_PARTITION"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ResolvedLogicalDevice>> ResolveLogicalDevices(
    const RuntimeConfig& config, absl::Span<const PhysicalDeviceInfo> physical) {
  const PhysicalDevices have{static_cast<int>(physical.size())};
  VGPU_ASSIGN_OR_RETURN(std::vector<int> visible, VisibleOrdinals(config, have));
  VGPU_RETURN_IF_ERROR(CheckMemoryFraction(config));
  VGPU_ASSIGN_OR_RETURN(auto listed, ExplicitDevices(config, have, visible));
  VGPU_ASSIGN_OR_RETURN(auto partitions, SmPartitions(config, have, visible));

  std::vector<ResolvedLogicalDevice> out;
  for (int o : visible) {
    const Card card(o, physical[o], config);
    if (card.reserve >= card.total) {
      return absl::InvalidArgumentError(absl::StrCat(
          card.dev, ": reserved memory ", FormatBytes(card.reserve), " leaves nothing of its ",
          FormatBytes(card.total), "; lower VGPU_RESERVED_MEMORY"));
    }
    VGPU_ASSIGN_OR_RETURN(std::vector<ResolvedLogicalDevice> mine,
                          CardLimits(card, config, listed));
    VGPU_RETURN_IF_ERROR(CheckCapacity(card, config, mine));
    if (auto p = partitions.find(o); p != partitions.end()) {
      VGPU_RETURN_IF_ERROR(ApplySmPartition(card, p->second->sm_counts, mine));
    }
    for (ResolvedLogicalDevice& r : mine) {
      r.gpu_id = static_cast<int>(out.size());
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace vgpu
