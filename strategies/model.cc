#include "vgpu/strategies/model.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace vgpu {
namespace strategies {

absl::StatusOr<OptimizerKind> ParseOptimizer(absl::string_view text) {
  std::string t = absl::AsciiStrToLower(text);
  if (t == "sgd") return OptimizerKind::kSgd;
  if (t == "adam") return OptimizerKind::kAdam;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", text, "'; use adam or sgd"));
}

}  // namespace strategies
}  // namespace vgpu
