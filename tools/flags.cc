#include "vgpu/tools/flags.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "vgpu/allocator/allocator.h"
#include "vgpu/devices/config.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu::flags {
namespace {

// "--flag=VALUE" as a message shows it: quoted when empty or with spaces, always bounded.
std::string Shown(absl::string_view name, absl::string_view value) {
  const bool plain = !value.empty() && value.find_first_of(" \t\"") == absl::string_view::npos;
  return absl::StrCat(name, "=", plain ? Bounded(value) : Quote(value));
}

// A word that is a flag, not a value: "--x", "-h". "-" alone and negative numbers are values.
bool LooksLikeFlag(absl::string_view arg) { return absl::StartsWith(arg, "--") || arg == "-h"; }

}  // namespace

std::string Bounded(absl::string_view text, size_t max) { return EscapeUserText(text, max, true); }

std::string BoundedMessage(absl::string_view text, size_t max) {
  return EscapeUserText(text, max, false);
}

std::string Quote(absl::string_view text, size_t max) {
  return absl::StrCat("\"", Bounded(text, max), "\"");
}

std::string JoinBounded(absl::Span<const std::string> items, size_t max_items) {
  std::string out;
  const size_t shown = std::min(items.size(), max_items);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    out += Bounded(items[i]);
  }
  if (items.size() > shown) absl::StrAppend(&out, ", ... (", items.size() - shown, " more)");
  return out;
}

std::string Alternatives(absl::Span<const std::string> choices) {
  if (choices.empty()) return "";
  if (choices.size() == 1) return choices[0];
  return absl::StrCat(absl::StrJoin(choices.first(choices.size() - 1), ", "), " or ",
                      choices.back());
}

FlagSet::FlagSet(std::string program, std::string synopsis)
    : program_(std::move(program)), synopsis_(std::move(synopsis)) {}

FlagSet& FlagSet::Add(Spec spec) {
  specs_.push_back(std::move(spec));
  return *this;
}

const FlagSet::Spec* FlagSet::Find(absl::string_view name) const {
  for (const Spec& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

FlagSet& FlagSet::Bool(std::string name, bool* out, std::string help) {
  std::string n = name;
  return Add(
      {std::move(name), true, "", std::move(help), [n, out](absl::string_view v) -> absl::Status {
         absl::StatusOr<bool> b = ParseBool(v);
         if (!b.ok()) {
           return absl::InvalidArgumentError(
               absl::StrCat(Shown(n, v), ": expected true, false, 1, 0, yes, no, on or off"));
         }
         *out = *b;
         return absl::OkStatus();
       }});
}

FlagSet& FlagSet::String(std::string name, std::string* out, std::string value_name,
                         std::string help, Check check, bool allow_empty) {
  std::string n = name;
  std::string vn = value_name;
  return Add({std::move(name), false, std::move(value_name), std::move(help),
              [n, vn, out, check, allow_empty](absl::string_view v) -> absl::Status {
                if (v.empty() && !allow_empty) {
                  return absl::InvalidArgumentError(
                      absl::StrCat(n, " needs a non-empty value (", vn, ")"));
                }
                if (check) {
                  if (absl::Status s = check(v); !s.ok()) {
                    return absl::InvalidArgumentError(
                        absl::StrCat(Shown(n, v), ": ", BoundedMessage(s.message())));
                  }
                }
                *out = std::string(v);
                return absl::OkStatus();
              }});
}

FlagSet& FlagSet::Path(std::string name, std::string* out, std::string help) {
  return String(std::move(name), out, "FILE", std::move(help));
}

FlagSet& FlagSet::OutputPath(std::string name, std::string* out, std::string help,
                             std::string stdout_taken_by) {
  Check check = nullptr;
  if (!stdout_taken_by.empty()) {
    check = [taken = std::move(stdout_taken_by)](absl::string_view v) -> absl::Status {
      if (v != "-") return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat("standard output carries ", taken, "; name a file"));
    };
  }
  return String(std::move(name), out, "FILE", std::move(help), std::move(check));
}

FlagSet& FlagSet::Enum(std::string name, std::string* out, std::vector<std::string> choices,
                       std::string help) {
  std::string n = name;
  std::string vn = absl::StrJoin(choices, "|");
  return Add({std::move(name), false, vn, std::move(help),
              [n, out, choices](absl::string_view v) -> absl::Status {
                for (const std::string& c : choices) {
                  if (v == c) {
                    *out = c;
                    return absl::OkStatus();
                  }
                }
                return absl::InvalidArgumentError(
                    absl::StrCat(Shown(n, v), ": expected ", Alternatives(choices)));
              }});
}

namespace {
// A whole number in [min, max] stored into an integer of type T (int or int64_t).
template <typename T>
std::function<absl::Status(absl::string_view)> IntSetter(std::string n, T* out, int64_t min,
                                                         int64_t max) {
  return [n = std::move(n), out, min, max](absl::string_view v) -> absl::Status {
    absl::StatusOr<int64_t> i = ParseInt64InRange(v, min, max);
    if (!i.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Shown(n, v), ": expected a whole number in [", min, ", ", max, "]"));
    }
    *out = static_cast<T>(*i);
    return absl::OkStatus();
  };
}
}  // namespace

FlagSet& FlagSet::Int(std::string name, int64_t* out, int64_t min, int64_t max, std::string help) {
  auto set = IntSetter(name, out, min, max);
  return Add({std::move(name), false, "N", std::move(help), std::move(set)});
}

FlagSet& FlagSet::Int(std::string name, int* out, int64_t min, int64_t max, std::string help) {
  min = std::max<int64_t>(min, std::numeric_limits<int>::min());
  max = std::min<int64_t>(max, std::numeric_limits<int>::max());
  auto set = IntSetter(name, out, min, max);
  return Add({std::move(name), false, "N", std::move(help), std::move(set)});
}

FlagSet& FlagSet::Uint(std::string name, uint64_t* out, std::string help) {
  std::string n = name;
  return Add(
      {std::move(name), false, "N", std::move(help), [n, out](absl::string_view v) -> absl::Status {
         absl::StatusOr<uint64_t> i = ParseUint64(v);
         if (!i.ok()) {
           return absl::InvalidArgumentError(
               absl::StrCat(Shown(n, v), ": expected a whole number in [0, ",
                            std::numeric_limits<uint64_t>::max(), "]"));
         }
         *out = *i;
         return absl::OkStatus();
       }});
}

FlagSet& FlagSet::Decimal(std::string name, double* out, double min, double max, std::string help,
                          bool min_exclusive) {
  std::string n = name;
  return Add({std::move(name), false, "X", std::move(help),
              [n, out, min, max, min_exclusive](absl::string_view v) -> absl::Status {
                absl::StatusOr<double> d = ParseDecimal(v);
                const bool in = d.ok() && std::isfinite(*d) && *d <= max &&
                                (min_exclusive ? *d > min : *d >= min);
                if (!in) {
                  return absl::InvalidArgumentError(
                      absl::StrCat(Shown(n, v), ": expected a decimal number in ",
                                   min_exclusive ? "(" : "[", min, ", ", max, "]"));
                }
                *out = *d;
                return absl::OkStatus();
              }});
}

FlagSet& FlagSet::Percent(std::string name, double* out, double min, double max, std::string help) {
  std::string n = name;
  return Add({std::move(name), false, "PERCENT", std::move(help),
              [n, out, min, max](absl::string_view v) -> absl::Status {
                absl::string_view number = v;
                if (absl::EndsWith(number, "%")) number.remove_suffix(1);
                absl::StatusOr<double> d = ParseDecimal(number);
                if (!d.ok() || !std::isfinite(*d) || *d < min || *d > max) {
                  return absl::InvalidArgumentError(
                      absl::StrCat(Shown(n, v), ": expected a percentage in [", min, ", ", max,
                                   "], e.g. 10 or 10%"));
                }
                *out = *d;
                return absl::OkStatus();
              }});
}

FlagSet& FlagSet::Bytes(std::string name, std::optional<uint64_t>* out, uint64_t min, uint64_t max,
                        std::string help) {
  std::string n = name;
  return Add({std::move(name), false, "SIZE", std::move(help),
              [n, out, min, max](absl::string_view v) -> absl::Status {
                absl::StatusOr<uint64_t> b = ParseBytes(v);
                if (!b.ok()) {
                  return absl::InvalidArgumentError(
                      absl::StrCat(Shown(n, v), ": expected a size such as 64MiB or 1GiB (",
                                   BoundedMessage(b.status().message()), ")"));
                }
                if (*b < min || *b > max) {
                  return absl::InvalidArgumentError(
                      absl::StrCat(Shown(n, v), ": expected a size in [", FormatBytes(min), ", ",
                                   FormatBytes(max), "]"));
                }
                *out = *b;
                return absl::OkStatus();
              }});
}

FlagSet& FlagSet::Bytes(std::string name, uint64_t* out, uint64_t min, uint64_t max,
                        std::string help) {
  // Parse into an optional, then store: one set of rules for both destinations.
  auto tmp = std::make_shared<std::optional<uint64_t>>();
  Bytes(std::move(name), tmp.get(), min, max, std::move(help));
  Spec& s = specs_.back();
  s.set = [inner = std::move(s.set), tmp, out](absl::string_view v) -> absl::Status {
    VGPU_RETURN_IF_ERROR(inner(v));
    *out = **tmp;
    return absl::OkStatus();
  };
  return *this;
}

FlagSet& FlagSet::Positional(std::string name, std::string* out, bool required, std::string help) {
  positionals_.push_back({std::move(name), out, required, std::move(help)});
  return *this;
}

FlagSet& FlagSet::Rest(std::string name, std::vector<std::string>* out, std::string help) {
  rest_name_ = std::move(name);
  rest_out_ = out;
  rest_help_ = std::move(help);
  return *this;
}

FlagSet& FlagSet::PassThrough(std::string prefix, std::vector<std::string>* out, std::string help) {
  pass_prefix_ = std::move(prefix);
  pass_out_ = out;
  pass_help_ = std::move(help);
  return *this;
}

FlagSet& FlagSet::RuntimeSettings(vgpu::RuntimeConfig* config) {
  for (const vgpu::Setting& row : vgpu::SettingsTable()) {
    std::string n(row.flag);
    auto set = [n, &row, config](absl::string_view v) -> absl::Status {
      if (row.is_bool && !vgpu::ParseBool(v).ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(Shown(n, v), ": expected true, false, 1, 0, yes, no, on or off"));
      }
      if (v.empty() && !row.empty_allowed) {
        return absl::InvalidArgumentError(
            absl::StrCat(n, " needs a non-empty value (", row.value_name, ")"));
      }
      absl::Status s = row.parse(v, *config);
      if (s.ok() && row.check_flag) s = row.check_flag(*config);
      if (!s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(Shown(n, v), ": ", BoundedMessage(s.message())));
      }
      config->sources[std::string(row.name)] = vgpu::ConfigSource::kFlag;
      return absl::OkStatus();
    };
    Add({std::string(row.flag), row.is_bool, std::string(row.is_bool ? "" : row.value_name),
         std::string(row.env), std::move(set)});
  }
  return *this;
}

std::string RuntimeSettingsUsage() {
  std::string out;
  for (const vgpu::Setting& row : vgpu::SettingsTable()) {
    const std::string left = row.is_bool ? absl::StrCat(row.flag, "[=BOOL]")
                                         : absl::StrCat(row.flag, " ", row.value_name);
    const std::string right = row.is_bool
                                  ? absl::StrCat(row.env, " (BOOL: true|false|1|0|yes|no|on|off)")
                                  : absl::StrCat(row.env, ", e.g. ", row.usage);
    absl::StrAppend(&out, "  ", left, std::string(left.size() < 30 ? 30 - left.size() : 1, ' '),
                    right, "\n");
  }
  return out;
}

absl::StatusOr<ParseResult> FlagSet::Parse(absl::Span<const std::string> args) const {
  ParseResult r;
  // --help wins over any error, wherever it is (before a "--").
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      r.help = true;
      return r;
    }
  }
  size_t positional = 0;
  bool only_positional = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!only_positional && arg == "--") {
      only_positional = true;
      continue;
    }
    if (!only_positional && arg.size() > 1 && arg[0] == '-') {
      if (!pass_prefix_.empty() && absl::StartsWith(arg, pass_prefix_)) {
        pass_out_->push_back(arg);
        continue;
      }
      absl::string_view name = arg;
      std::optional<absl::string_view> value;
      if (size_t eq = name.find('='); absl::StartsWith(name, "--") && eq != name.npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      const Spec* spec = Find(name);
      if (spec == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown flag ", Quote(name), " (see --help)"));
      }
      if (spec->is_bool) {
        VGPU_RETURN_IF_ERROR(spec->set(value.value_or("true")));
      } else {
        if (!value.has_value()) {
          if (i + 1 >= args.size() || LooksLikeFlag(args[i + 1])) {
            return absl::InvalidArgumentError(
                absl::StrCat(spec->name, " needs a value (", spec->value_name, ")"));
          }
          value = args[++i];
        }
        VGPU_RETURN_IF_ERROR(spec->set(*value));
      }
      r.seen.insert(spec->name);
      continue;
    }
    if (positional >= positionals_.size() && rest_out_ != nullptr) {
      if (arg.empty())
        return absl::InvalidArgumentError(absl::StrCat(rest_name_, " must not be empty"));
      rest_out_->push_back(arg);
      r.seen.insert(rest_name_);
      continue;
    }
    if (positional >= positionals_.size()) {
      if (positionals_.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("unexpected argument ", Quote(arg), ": ",
                                                       program_, " takes no positional argument"));
      }
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument ", Quote(arg), ": ",
                                                     positionals_.back().name, " already given"));
    }
    if (arg.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(positionals_[positional].name, " must not be empty"));
    }
    *positionals_[positional].out = arg;
    r.seen.insert(positionals_[positional].name);
    ++positional;
  }
  for (size_t p = positional; p < positionals_.size(); ++p) {
    if (positionals_[p].required) {
      return absl::InvalidArgumentError(
          absl::StrCat(program_, " needs ", positionals_[p].name, " (see --help)"));
    }
  }
  return r;
}

std::string FlagSet::Usage() const {
  std::string out = synopsis_;
  if (!out.empty() && out.back() != '\n') out += '\n';
  if (specs_.empty() && positionals_.empty() && pass_out_ == nullptr && rest_out_ == nullptr) {
    return out;
  }
  out += "arguments:\n";
  auto line = [&out](const std::string& left, const std::string& help) {
    if (left.size() < 30) {
      absl::StrAppend(&out, "  ", left, std::string(30 - left.size(), ' '), help, "\n");
    } else {
      absl::StrAppend(&out, "  ", left, "\n", std::string(32, ' '), help, "\n");
    }
  };
  for (const Pos& p : positionals_) line(p.name, p.help);
  if (rest_out_ != nullptr) line(rest_name_, rest_help_);
  for (const Spec& s : specs_) {
    line(s.is_bool ? absl::StrCat(s.name, "[=BOOL]") : absl::StrCat(s.name, " ", s.value_name),
         s.help);
  }
  if (pass_out_ != nullptr) line(absl::StrCat(pass_prefix_, "*"), pass_help_);
  out +=
      "Flags take --flag=VALUE or --flag VALUE; BOOL is true|false|1|0|yes|no|on|off; --help "
      "prints this.\n";
  return out;
}

std::vector<std::string> Args(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) out.emplace_back(argv[i]);
  return out;
}

namespace {
const char* g_program = "vgpu";
bool g_stdout_was_closed = false;

void CheckStdoutAtExit() {
  // A closed descriptor makes the first write fail (EBADF), which sets the stream's error flag.
  const bool failed = g_stdout_was_closed || std::ferror(stdout) != 0;
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  const int flush_errno = errno;
  const bool close_failed = !failed && !flush_failed && std::fclose(stdout) != 0 && errno != EBADF;
  if (failed || flush_failed || close_failed) {
    const int e = g_stdout_was_closed ? EBADF : flush_failed ? flush_errno : errno;
    std::fprintf(stderr, "%s: cannot write standard output%s%s\n", g_program, e != 0 ? ": " : "",
                 e != 0 ? std::strerror(e) : "");
    std::_Exit(1);
  }
}
}  // namespace

void ReportLibraryErrorsToStderr() {
  SetAllocatorErrorSink([](absl::string_view m) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(m.size()), m.data());
  });
}

void ExitFailsOnStdoutError(const char* program) {
  g_program = program;
  // A standard descriptor the caller closed would be reused by the next open(), and the report
  // would land in, say, the SVG being written: hold each with /dev/null, and remember that
  // stdout was missing.
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      if (fd == 1) g_stdout_was_closed = true;
      const int null_fd = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (null_fd >= 0 && null_fd != fd) {
        dup2(null_fd, fd);
        close(null_fd);
      }
    }
  }
  static const bool registered = [] { return std::atexit(CheckStdoutAtExit) == 0; }();
  (void)registered;
}

}  // namespace vgpu::flags
