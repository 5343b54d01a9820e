#include "vgpu/runtime/host/host_faults.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {

std::vector<std::string> HostFaultInjector::FaultNames() const {
  return {"corrupt_memcpy_at", "fail_memcpy_at", "fail_allocate_at", "fail_stream_at",
          "ignore_capacity"};
}

absl::Status HostFaultInjector::Set(absl::string_view name, int64_t value) {
  if (name == "corrupt_memcpy_at") {
    faults_->corrupt_memcpy_at = value;
  } else if (name == "fail_memcpy_at") {
    faults_->fail_memcpy_at = value;
  } else if (name == "fail_allocate_at") {
    faults_->fail_allocate_at = value;
  } else if (name == "fail_stream_at") {
    faults_->fail_stream_at = value;
  } else if (name == "ignore_capacity") {
    faults_->ignore_capacity = value != 0;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown fault ", QuoteUserText(name), " (",
                                                   absl::StrJoin(FaultNames(), ", "), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> HostFaultInjector::Get(absl::string_view name) const {
  if (name == "corrupt_memcpy_at") return faults_->corrupt_memcpy_at.load();
  if (name == "fail_memcpy_at") return faults_->fail_memcpy_at.load();
  if (name == "fail_allocate_at") return faults_->fail_allocate_at.load();
  if (name == "fail_stream_at") return faults_->fail_stream_at.load();
  if (name == "ignore_capacity") return faults_->ignore_capacity.load() ? 1 : 0;
  if (name == "allocate_calls") return faults_->allocate_calls.load();
  if (name == "memcpy_calls") return faults_->memcpy_calls.load();
  if (name == "stream_calls") return faults_->stream_calls.load();
  return absl::InvalidArgumentError(absl::StrCat("unknown fault or counter ", QuoteUserText(name),
                                                 " (", absl::StrJoin(FaultNames(), ", "),
                                                 ", allocate_calls, memcpy_calls, stream_calls)"));
}

}  // namespace vgpu
