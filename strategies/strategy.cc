#include "vgpu/strategies/strategy.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace vgpu {
namespace strategies {
namespace {

struct KindName {
  StrategyKind kind;
  absl::string_view name;
};
// The one place a strategy's name is written.
constexpr KindName kKindNames[] = {
    {StrategyKind::kSingle, "single"},
    {StrategyKind::kMirrored, "mirrored"},
    {StrategyKind::kModelParallel, "model-parallel"},
    {StrategyKind::kCentralStorage, "central-storage"},
    {StrategyKind::kMultiWorkerMirrored, "multi-worker-mirrored"},
    {StrategyKind::kParameterServer, "parameter-server"},
};

}  // namespace

absl::string_view StrategyKindName(StrategyKind kind) {
  for (const KindName& k : kKindNames) {
    if (k.kind == kind) return k.name;
  }
  return "unknown";
}

absl::StatusOr<StrategyKind> ParseStrategyKind(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  for (const KindName& k : kKindNames) {
    if (k.name == lower) return k.kind;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown strategy '", text, "'; use ",
      absl::StrJoin(kKindNames, ", ",
                    [](std::string* out, const KindName& k) { absl::StrAppend(out, k.name); })));
}

absl::Status CheckModel(const StrategyOptions& options, absl::string_view strategy) {
  if (options.model == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(strategy, ": StrategyOptions::model is null"));
  }
  absl::Status valid = options.model->Validate();
  if (!valid.ok()) {
    return absl::Status(valid.code(), absl::StrCat(strategy, ": ", valid.message()));
  }
  return absl::OkStatus();
}

const std::vector<StrategyKind>& AllStrategyKinds() {
  static const std::vector<StrategyKind>* const kinds = [] {
    auto* v = new std::vector<StrategyKind>();
    for (const KindName& k : kKindNames) v->push_back(k.kind);
    return v;
  }();
  return *kinds;
}

std::string ParamsChecksum(absl::Span<const float> params) {
  uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(params.data());
  for (size_t i = 0; i < params.size() * sizeof(float); ++i) {
    h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

bool IsClusterStrategy(StrategyKind kind) {
  return kind == StrategyKind::kMultiWorkerMirrored || kind == StrategyKind::kParameterServer;
}

}  // namespace strategies
}  // namespace vgpu
