#include "vgpu/devices/device_name.h"

#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {
namespace {

absl::Status BadName(absl::string_view text, absl::string_view why, absl::string_view rest) {
  if (rest.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad device name ", QuoteUserText(text), ": ", why, " at the end"));
  }
  return absl::InvalidArgumentError(absl::StrCat("bad device name ", QuoteUserText(text), ": ", why,
                                                 " at ", QuoteUserText(rest)));
}

// [a-z][a-z0-9_]*, as TensorFlow's job names.
bool ConsumeJob(absl::string_view* s, std::string* out) {
  size_t n = 0;
  while (n < s->size()) {
    char c = (*s)[n];
    bool ok = (c >= 'a' && c <= 'z') || (n > 0 && ((c >= '0' && c <= '9') || c == '_'));
    if (!ok) break;
    ++n;
  }
  if (n == 0) return false;
  *out = std::string(s->substr(0, n));
  s->remove_prefix(n);
  return true;
}

// [A-Za-z][A-Za-z0-9_]*
bool ConsumeType(absl::string_view* s, std::string* out) {
  size_t n = 0;
  while (n < s->size()) {
    char c = (*s)[n];
    bool ok = absl::ascii_isalpha(static_cast<unsigned char>(c)) ||
              (n > 0 && (absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '_'));
    if (!ok) break;
    ++n;
  }
  if (n == 0) return false;
  *out = std::string(s->substr(0, n));
  s->remove_prefix(n);
  return true;
}

// Decimal digits that fit in an int.
bool ConsumeNumber(absl::string_view* s, int* out) {
  size_t n = 0;
  int64_t v = 0;
  while (n < s->size() && absl::ascii_isdigit(static_cast<unsigned char>((*s)[n]))) {
    v = v * 10 + ((*s)[n] - '0');
    if (v > INT32_MAX) return false;
    ++n;
  }
  if (n == 0) return false;
  *out = static_cast<int>(v);
  s->remove_prefix(n);
  return true;
}

// `*` (leaves `field` unset) or a number.
absl::Status ConsumeNumberField(absl::string_view text, absl::string_view what,
                                absl::string_view* s, std::optional<int>* field) {
  if (absl::ConsumePrefix(s, "*")) return absl::OkStatus();
  int v = 0;
  if (!ConsumeNumber(s, &v)) {
    return BadName(text, absl::StrCat("expected a ", what, " number or *"), *s);
  }
  *field = v;
  return absl::OkStatus();
}

// After "device:": TYPE[:ID] with `*` allowed for either.
absl::Status ConsumeDevicePart(absl::string_view text, absl::string_view* s, DeviceName* n) {
  if (!absl::ConsumePrefix(s, "*")) {
    std::string type;
    if (!ConsumeType(s, &type)) return BadName(text, "expected a device type or *", *s);
    n->type = type;
  }
  if (absl::ConsumePrefix(s, ":")) {
    return ConsumeNumberField(text, "device id", s, &n->id);
  }
  return absl::OkStatus();
}

// Legacy "cpu:N" / "gpu:N" (any case of the two spellings TensorFlow accepts).
bool ConsumeLegacyPrefix(absl::string_view* s, std::string* type) {
  for (absl::string_view t : {"cpu", "CPU", "gpu", "GPU"}) {
    if (absl::StartsWith(*s, t) && s->size() > t.size() && (*s)[t.size()] == ':') {
      s->remove_prefix(t.size() + 1);
      *type = absl::AsciiStrToUpper(t);
      return true;
    }
  }
  return false;
}

absl::StatusOr<DeviceName> ParseLocal(absl::string_view text) {
  absl::string_view s = text;
  DeviceName n;
  std::string legacy;
  if (absl::ConsumePrefix(&s, "device:")) {
    if (absl::Status st = ConsumeDevicePart(text, &s, &n); !st.ok()) return st;
  } else if (ConsumeLegacyPrefix(&s, &legacy)) {
    n.type = legacy;
    if (absl::Status st = ConsumeNumberField(text, "device id", &s, &n.id); !st.ok()) return st;
  } else {
    if (absl::Status st = ConsumeDevicePart(text, &s, &n); !st.ok()) return st;
  }
  if (!s.empty()) return BadName(text, "unexpected text", s);
  return n;
}

}  // namespace

absl::StatusOr<DeviceName> DeviceName::Parse(absl::string_view text) {
  if (text.empty() || text == "/") return DeviceName();
  if (text[0] != '/') return ParseLocal(text);
  absl::string_view s = text;
  DeviceName n;
  bool seen_device = false;
  while (!s.empty()) {
    if (!absl::ConsumePrefix(&s, "/")) return BadName(text, "expected '/'", s);
    std::string legacy;
    if (absl::ConsumePrefix(&s, "job:")) {
      if (n.job.has_value()) return BadName(text, "job given twice", s);
      if (!absl::ConsumePrefix(&s, "*")) {
        std::string job;
        if (!ConsumeJob(&s, &job)) {
          return BadName(text, "expected a job name ([a-z][a-z0-9_]*) or *", s);
        }
        n.job = job;
      }
    } else if (absl::ConsumePrefix(&s, "replica:")) {
      if (n.replica.has_value()) return BadName(text, "replica given twice", s);
      if (absl::Status st = ConsumeNumberField(text, "replica", &s, &n.replica); !st.ok()) {
        return st;
      }
    } else if (absl::ConsumePrefix(&s, "task:")) {
      if (n.task.has_value()) return BadName(text, "task given twice", s);
      if (absl::Status st = ConsumeNumberField(text, "task", &s, &n.task); !st.ok()) return st;
    } else if (absl::ConsumePrefix(&s, "device:")) {
      if (seen_device) return BadName(text, "device given twice", s);
      seen_device = true;
      if (absl::Status st = ConsumeDevicePart(text, &s, &n); !st.ok()) return st;
    } else if (ConsumeLegacyPrefix(&s, &legacy)) {
      if (seen_device) return BadName(text, "device given twice", s);
      seen_device = true;
      n.type = legacy;
      if (absl::Status st = ConsumeNumberField(text, "device id", &s, &n.id); !st.ok()) {
        return st;
      }
    } else {
      return BadName(text, "expected job:, replica:, task:, device:, cpu: or gpu:", s);
    }
    if (!s.empty() && s[0] != '/') return BadName(text, "unexpected text", s);
  }
  return n;
}

DeviceName DeviceName::Local(absl::string_view type, int id) {
  return ForTask("localhost", 0, type, id);
}

DeviceName DeviceName::ForTask(absl::string_view job, int task, absl::string_view type, int id) {
  DeviceName n;
  n.job = std::string(job);
  n.replica = 0;
  n.task = task;
  n.type = std::string(type);
  n.id = id;
  return n;
}

std::string DeviceName::ToString() const {
  std::string out;
  if (job) absl::StrAppend(&out, "/job:", *job);
  if (replica) absl::StrAppend(&out, "/replica:", *replica);
  if (task) absl::StrAppend(&out, "/task:", *task);
  if (type || id) {
    absl::StrAppend(&out, "/device:", type ? *type : "*");
    absl::StrAppend(&out, ":", id ? absl::StrCat(*id) : "*");
  }
  return out.empty() ? "/" : out;
}

std::string DeviceName::ShortString() const {
  if (!type && !id) return "*";
  return absl::StrCat(type ? *type : "*", ":", id ? absl::StrCat(*id) : "*");
}

bool IsSpecification(const DeviceName& spec, const DeviceName& name) {
  if (spec.job && (!name.job || *spec.job != *name.job)) return false;
  if (spec.replica && (!name.replica || *spec.replica != *name.replica)) return false;
  if (spec.task && (!name.task || *spec.task != *name.task)) return false;
  if (spec.type && (!name.type || *spec.type != *name.type)) return false;
  if (spec.id && (!name.id || *spec.id != *name.id)) return false;
  return true;
}

bool IsCompleteSpecification(const DeviceName& spec, const DeviceName& name) {
  return name.IsFullySpecified() && IsSpecification(spec, name);
}

bool Matches(absl::string_view spec, absl::string_view concrete_name) {
  absl::StatusOr<DeviceName> s = DeviceName::Parse(spec);
  absl::StatusOr<DeviceName> c = DeviceName::Parse(concrete_name);
  return s.ok() && c.ok() && IsSpecification(*s, *c);
}

absl::Status MergeDeviceNames(DeviceName* target, const DeviceName& other,
                              bool allow_soft_placement) {
  DeviceName t = *target;
  auto conflict = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot merge device specifications ", target->ToString(), " and ", other.ToString(),
        ": incompatible ", what,
        allow_soft_placement ? "" : " (soft placement would clear a conflicting type or id)"));
  };
  if (other.job) {
    if (t.job && *t.job != *other.job) return conflict("jobs");
    t.job = other.job;
  }
  if (other.replica) {
    if (t.replica && *t.replica != *other.replica) return conflict("replicas");
    t.replica = other.replica;
  }
  if (other.task) {
    if (t.task && *t.task != *other.task) return conflict("tasks");
    t.task = other.task;
  }
  if (other.type) {
    if (t.type && *t.type != *other.type) {
      if (!allow_soft_placement) return conflict("device types");
      t.type.reset();
      t.id.reset();
      *target = t;
      return absl::OkStatus();
    }
    t.type = other.type;
  }
  if (other.id) {
    if (t.id && *t.id != *other.id) {
      if (!allow_soft_placement) return conflict("device ids");
      t.id.reset();
      *target = t;
      return absl::OkStatus();
    }
    t.id = other.id;
  }
  *target = t;
  return absl::OkStatus();
}

}  // namespace vgpu
