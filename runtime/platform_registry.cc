#include "vgpu/runtime/platform_registry.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {
namespace {

struct Entry {
  std::string name;
  int priority = 0;
  PlatformFactory factory;
};

class Registry {
 public:
  absl::Status Add(absl::string_view name, PlatformFactory factory, int priority)
      ABSL_LOCKS_EXCLUDED(mu_) {
    if (name.empty() || name == "auto") {
      return absl::InvalidArgumentError(
          absl::StrCat("RegisterPlatform: ", QuoteUserText(name), " cannot name a platform"));
    }
    vgpu::MutexLock l(&mu_);
    for (const Entry& e : entries_) {
      if (e.name == name) {
        return absl::AlreadyExistsError(
            absl::StrCat("RegisterPlatform: platform ", QuoteUserText(name), " already exists"));
      }
    }
    entries_.push_back({std::string(name), priority, std::move(factory)});
    // Highest priority first; equal priorities keep their registration order.
    std::stable_sort(entries_.begin(), entries_.end(),
                     [](const Entry& a, const Entry& b) { return a.priority > b.priority; });
    return absl::OkStatus();
  }

  std::vector<Entry> Entries() const ABSL_LOCKS_EXCLUDED(mu_) {
    vgpu::MutexLock l(&mu_);
    return entries_;
  }

 private:
  mutable vgpu::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// The process-wide platforms: created on first use from the environment, never destroyed (a
// failed creation is remembered, so every caller sees the same error).
class Singletons {
 public:
  absl::StatusOr<Platform*> Get(const Entry& e) ABSL_LOCKS_EXCLUDED(mu_) {
    vgpu::MutexLock l(&mu_);
    auto it = platforms_.find(e.name);
    if (it == platforms_.end()) {
      absl::StatusOr<std::unique_ptr<Platform>> p = e.factory(ProcessEnvironment());
      absl::StatusOr<Platform*> result =
          p.ok() ? absl::StatusOr<Platform*>(p->release()) : p.status();
      it = platforms_.emplace(e.name, std::move(result)).first;
    }
    return it->second;
  }

 private:
  vgpu::Mutex mu_;
  absl::flat_hash_map<std::string, absl::StatusOr<Platform*>> platforms_ ABSL_GUARDED_BY(mu_);
};

Singletons& GetSingletons() {
  static Singletons* singletons = new Singletons();
  return *singletons;
}

// The registry itself; built-in backends add to it while Populated() runs.
Registry& Raw() {
  static Registry* registry = new Registry();
  return *registry;
}

// The registry with the built-in backends in it (registered once, on first use).
Registry& Populated() {
  static const bool registered = [] {
    internal::RegisterBuiltinPlatforms();
    return true;
  }();
  (void)registered;
  return Raw();
}

absl::StatusOr<Entry> Find(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(StripUserValue(name));
  std::vector<Entry> entries = Populated().Entries();
  for (Entry& e : entries) {
    if (e.name == lower) return std::move(e);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown platform ", QuoteUserText(name),
                                                 " (expected ", PlatformChoices(), ")"));
}

}  // namespace

SettingLookup ProcessEnvironment() {
  return [](absl::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::Status RegisterPlatform(absl::string_view name, PlatformFactory factory, int priority) {
  return Populated().Add(name, std::move(factory), priority);
}

std::vector<std::string> PlatformNames() {
  std::vector<std::string> names;
  for (const Entry& e : Populated().Entries()) names.push_back(e.name);
  return names;
}

std::string PlatformChoices() {
  std::vector<std::string> names = PlatformNames();
  // Lowest priority first, then "auto": "host, cuda or auto".
  std::reverse(names.begin(), names.end());
  names.push_back("auto");
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " or ", last);
}

absl::StatusOr<std::unique_ptr<Platform>> CreatePlatform(absl::string_view name,
                                                         const SettingLookup& settings) {
  VGPU_ASSIGN_OR_RETURN(Entry e, Find(name));
  return e.factory(settings);
}

absl::StatusOr<Platform*> GetPlatform(absl::string_view name) {
  VGPU_ASSIGN_OR_RETURN(Entry e, Find(name));
  return GetSingletons().Get(e);
}

absl::StatusOr<Platform*> AutoPlatform() {
  std::vector<Entry> entries = Populated().Entries();
  absl::StatusOr<Platform*> last = absl::NotFoundError("no platform is registered");
  for (const Entry& e : entries) {
    last = GetSingletons().Get(e);
    if (!last.ok() || (*last)->DeviceCount() > 0) return last;
  }
  return last;
}

absl::StatusOr<Platform*> DefaultPlatform() {
  const char* env = std::getenv("VGPU_PLATFORM");
  std::string choice = env == nullptr ? "auto" : absl::AsciiStrToLower(StripUserValue(env));
  if (env != nullptr && choice.empty()) {
    // Empty is an error for every VGPU_* variable (docs/devices.md), not a silent default.
    return absl::InvalidArgumentError(absl::StrCat(
        "VGPU_PLATFORM=", QuoteUserText(env),
        ": empty value; unset VGPU_PLATFORM for the default (auto), or give a value, e.g. "
        "VGPU_PLATFORM=host"));
  }
  if (choice == "auto") return AutoPlatform();
  std::vector<std::string> names = PlatformNames();
  if (std::find(names.begin(), names.end(), choice) == names.end()) {
    // Highest priority first: "auto, cuda or host".
    names.insert(names.begin(), "auto");
    const std::string last = names.back();
    names.pop_back();
    return absl::InvalidArgumentError(absl::StrCat("VGPU_PLATFORM=", QuoteUserText(env),
                                                   ": expected ", absl::StrJoin(names, ", "),
                                                   " or ", last));
  }
  return GetPlatform(choice);
}

namespace internal {
void RegisterBuiltinPlatform(absl::string_view name, PlatformFactory factory, int priority) {
  Raw().Add(name, std::move(factory), priority).IgnoreError();
}
}  // namespace internal

}  // namespace vgpu
