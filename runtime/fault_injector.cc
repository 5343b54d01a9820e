#include "vgpu/runtime/fault_injector.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {
namespace {

std::string Quoted(absl::string_view text) {
  return absl::StrCat("\"", EscapeUserText(text, kMaxQuotedChars, true), "\"");
}

}  // namespace

absl::Status ApplyFaultSpec(FaultInjector& faults, absl::string_view variable,
                            absl::string_view spec) {
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    absl::StatusOr<int64_t> n =
        kv.size() == 2 ? ParseInt64(kv[1]) : absl::InvalidArgumentError("no value");
    if (!n.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(variable, "=", Quoted(spec), ": ", Quoted(item), " is not NAME=NUMBER"));
    }
    if (absl::Status s = faults.Set(kv[0], *n); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(variable, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace vgpu
