// The one command-line mechanism of the tools (vgpu-bench, vgpu-info, vgpu-train): a tool
// declares its flags (name, kind, range or choices, help, destination) in a FlagSet and calls
// Parse, which returns an error or what was seen; it never prints, exits or aborts.
//
// Rules, the same for every tool and sub-command:
//   * `--flag=VALUE` and `--flag VALUE` both work.
//   * A boolean flag is `--flag` (true) or `--flag=true|false|1|0|yes|no|on|off`; any other
//     value is refused. A separate word is never taken as a boolean's value.
//   * A flag that needs a value never takes the next flag as its value (`--out --quiet` is
//     "--out needs a value"); an empty value is refused unless the flag allows one.
//   * Numbers go through the strict parsers (runtime/numbers.h, runtime/bytes.h) and a range.
//   * Unknown flags and a positional argument beyond those declared are refused; `--` ends
//     the flags (what follows is positional).
//   * `--help` / `-h` anywhere: Parse returns with `help` set (the caller prints Usage() on
//     stdout and exits 0).
//   * Every message names the flag and what it expects, and quotes at most kMaxQuoted
//     characters of what the user typed (then "..."), with control bytes escaped.
//
// Thread safety: a FlagSet is not thread-safe; the free functions are pure.
#ifndef VGPU_TOOLS_FLAGS_H_
#define VGPU_TOOLS_FLAGS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "vgpu/devices/config.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu::flags {

// Exit status of a tool for a bad command line (and for a bad configuration).
inline constexpr int kExitUsage = 2;

// How much of a user's text a message quotes: the same bound as every runtime message.
inline constexpr size_t kMaxQuoted = kMaxQuotedChars;

// `text` for a message: control and non-ASCII bytes escaped (\n, \xNN), at most `max` bytes of
// the original, then "..." when cut (EscapeUserText). Never longer than about 4 * max + 3
// characters.
std::string Bounded(absl::string_view text, size_t max = kMaxQuoted);
// The same, for a message that may already quote a user's text: control bytes escaped, quotes
// kept, at most `max` bytes.
std::string BoundedMessage(absl::string_view text, size_t max = 300);
// Bounded(text) in double quotes.
std::string Quote(absl::string_view text, size_t max = kMaxQuoted);

// "a, b, c" for at most `max_items` items, then ", ... (N more)"; each item Bounded().
std::string JoinBounded(absl::Span<const std::string> items, size_t max_items = 8);

// "a, b or c", for "expected ..." messages.
std::string Alternatives(absl::Span<const std::string> choices);

// What Parse saw.
struct ParseResult {
  bool help = false;           // --help or -h: print Usage() on stdout, exit 0
  std::set<std::string> seen;  // the flags given (e.g. "--limit"), to tell "set" from default
};

class FlagSet {
 public:
  // `program` names the messages ("vgpu-bench replay"); `synopsis` is the usage's first lines.
  FlagSet(std::string program, std::string synopsis);

  // Validator for a string value after the kind's own checks; return an InvalidArgument
  // message (without the flag name) to refuse.
  using Check = std::function<absl::Status(absl::string_view value)>;

  FlagSet& Bool(std::string name, bool* out, std::string help);
  // Free text; refused when empty unless `allow_empty`.
  FlagSet& String(std::string name, std::string* out, std::string value_name, std::string help,
                  Check check = nullptr, bool allow_empty = false);
  // A file name: never empty.
  FlagSet& Path(std::string name, std::string* out, std::string help);
  // A file the tool writes. "-" is standard output (WriteOutputFile) unless `stdout_taken_by`
  // says what the tool already writes there (e.g. "vgpu-bench's report"): then "-" is refused
  // by name rather than mixed into that output or written to a file named "-".
  FlagSet& OutputPath(std::string name, std::string* out, std::string help,
                      std::string stdout_taken_by = "");
  FlagSet& Enum(std::string name, std::string* out, std::vector<std::string> choices,
                std::string help);
  FlagSet& Int(std::string name, int* out, int64_t min, int64_t max, std::string help);
  FlagSet& Int(std::string name, int64_t* out, int64_t min, int64_t max, std::string help);
  FlagSet& Uint(std::string name, uint64_t* out, std::string help);
  // A finite decimal in [min, max], or (min, max] when `min_exclusive`.
  FlagSet& Decimal(std::string name, double* out, double min, double max, std::string help,
                   bool min_exclusive = false);
  // A percentage in [min, max]: a decimal, with or without one trailing '%' ("10", "10%").
  FlagSet& Percent(std::string name, double* out, double min, double max, std::string help);
  // A size (runtime/bytes.h syntax) in [min, max].
  FlagSet& Bytes(std::string name, uint64_t* out, uint64_t min, uint64_t max, std::string help);
  FlagSet& Bytes(std::string name, std::optional<uint64_t>* out, uint64_t min, uint64_t max,
                 std::string help);
  // The next positional argument; `required` ones must be given.
  FlagSet& Positional(std::string name, std::string* out, bool required, std::string help);
  // The positional arguments after the fixed ones (e.g. "TRACE..."), in order; their count is
  // the caller's to check.
  FlagSet& Rest(std::string name, std::vector<std::string>* out, std::string help);
  // Arguments starting with `prefix` are collected verbatim (e.g. "--benchmark_").
  FlagSet& PassThrough(std::string prefix, std::vector<std::string>* out, std::string help);
  // One flag per runtime setting (devices/settings.h: --logical-devices, --allow-growth, ...):
  // each parses its value into its field of `config` and records ConfigSource::kFlag there;
  // RuntimeConfig::FromEnvironmentAndFlags(*config) then adds the environment.
  FlagSet& RuntimeSettings(vgpu::RuntimeConfig* config);

  // Parses `args` (without the program name).
  absl::StatusOr<ParseResult> Parse(absl::Span<const std::string> args) const;
  // The synopsis and one line per flag, for --help and after an error.
  std::string Usage() const;
  const std::string& program() const { return program_; }

 private:
  struct Spec {
    std::string name;
    bool is_bool = false;
    std::string value_name;
    std::string help;
    std::function<absl::Status(absl::string_view)> set;  // parses and stores
  };
  struct Pos {
    std::string name;
    std::string* out;
    bool required;
    std::string help;
  };
  FlagSet& Add(Spec spec);
  const Spec* Find(absl::string_view name) const;

  std::string program_;
  std::string synopsis_;
  std::vector<Spec> specs_;
  std::vector<Pos> positionals_;
  std::string rest_name_, rest_help_;
  std::vector<std::string>* rest_out_ = nullptr;
  std::string pass_prefix_;
  std::vector<std::string>* pass_out_ = nullptr;
  std::string pass_help_;
};

// The --help lines of the runtime-setting flags (FlagSet::RuntimeSettings), one per setting:
//   "  --logical-devices SPEC        VGPU_LOGICAL_DEVICES, e.g. ..."
std::string RuntimeSettingsUsage();

// Argv (without the program name) as strings.
std::vector<std::string> Args(int argc, char** argv);

// Library errors that have no caller to return to (allocator/allocator.h's error sink: a
// buffer freed in a destructor, an allocator destroyed with live allocations) go to stderr
// as "vgpu: ..." lines. Every tool calls this first.
void ReportLibraryErrorsToStderr();

// Makes a failed write to standard output a failure of the tool, as coreutils do: at exit,
// stdout is flushed and closed, and when that (or any earlier write) failed, for example a
// closed stdout or a full disk (/dev/full), "PROGRAM: cannot write standard output: REASON"
// goes to stderr and the process exits 1 instead of reporting success for output nobody got.
// Call once, first thing in main.
void ExitFailsOnStdoutError(const char* program);

}  // namespace vgpu::flags

#endif  // VGPU_TOOLS_FLAGS_H_
