#include "vgpu/tools/info_flags.h"

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "vgpu/devices/config.h"
#include "vgpu/runtime/platform_registry.h"
#include "vgpu/runtime/status.h"
#include "vgpu/tools/flags.h"

namespace vgpu_info {
namespace {

constexpr char kHelp[] =
    "usage: vgpu-info [flags] [--json] [--selftest [--memory-history FILE]]\n"
    "       vgpu-info timeline HISTORY.json --svg OUT.svg [--limit BYTES]\n"
    "Shows the platform, its physical devices, the logical devices the configuration makes of\n"
    "them (limit, in use, reserved, peak), the links between them, and where every setting\n"
    "came from (default, environment, flag).\n"
    "flags (each overrides its environment variable; --flag=VALUE or --flag VALUE):\n"
    "  --platform host|cuda|auto     VGPU_PLATFORM\n"
    "  --host-devices SPEC           VGPU_HOST_DEVICES, e.g. 2x16GiB or 16GiB,8GiB\n";
// Then one line per runtime setting (devices/settings.h), then:
constexpr char kHelpTail[] =
    "  --json[=BOOL]                 one JSON object (keys: docs/vgpu-info.md)\n"
    "  --selftest[=BOOL]             limits, memcpy, device-to-device copies, all-reduce on\n"
    "                                every logical GPU; exit 1 if a check fails\n"
    "  --memory-history FILE         with --selftest: write the allocators' memory history\n"
    "  --settings-table              print README.md's table of the settings (markdown)\n"
    "  --help, -h                    this text\n"
    "host platform fault injection (tests): VGPU_HOST_FAULTS=\"corrupt_memcpy_at=3,\n"
    "  fail_memcpy_at=K,fail_allocate_at=K,fail_stream_at=K,ignore_capacity=1\"\n"
    "exit status: 0 ok, 1 a selftest check or a device failed, 2 a bad flag or configuration\n"
    "examples:\n"
    "  vgpu-info --platform host --host-devices 1x8GiB --logical-devices 0:1GiB,1GiB,1GiB,1GiB\n"
    "  VGPU_PLATFORM=host VGPU_HOST_DEVICES=2x16GiB vgpu-info --json\n"
    "  vgpu-info --selftest --memory-history h.json && vgpu-info timeline h.json --svg h.svg\n";

constexpr char kTimelineHelp[] =
    "usage: vgpu-info timeline HISTORY.json --svg OUT.svg [--limit BYTES]\n"
    "Draws a memory history (vgpu-info --selftest --memory-history, vgpu-bench replay\n"
    "--memory-history, vgpu-train --memory-history; - reads standard input) as an SVG: in use,\n"
    "reserved and external fragmentation per allocator over time, with its limit (--svg - writes\n"
    "it to standard output). exit status: 0 ok, 1 a bad or unreadable file, 2 a bad flag\n";

}  // namespace

const char* InfoUsage() {
  static const std::string* usage =
      new std::string(absl::StrCat(kHelp, vgpu::flags::RuntimeSettingsUsage(), kHelpTail));
  return usage->c_str();
}
const char* TimelineUsage() { return kTimelineHelp; }

absl::StatusOr<TimelineFlags> ParseTimelineFlags(const std::vector<std::string>& args) {
  TimelineFlags f;
  vgpu::flags::FlagSet fs("vgpu-info timeline", kTimelineHelp);
  fs.Positional("HISTORY.json", &f.history_path, /*required=*/true, "the memory history to draw")
      .OutputPath("--svg", &f.svg_path,
                  "where to write the drawing (required; - for standard output)")
      .Bytes("--limit", &f.limit, 1, UINT64_MAX,
             "limit line for allocators the history gives none, e.g. 1GiB");
  VGPU_ASSIGN_OR_RETURN(vgpu::flags::ParseResult r, fs.Parse(args));
  if (r.help) {
    f.help = true;
    return f;
  }
  if (f.svg_path.empty())
    return absl::InvalidArgumentError("needs a history file and --svg OUT.svg");
  return f;
}

absl::StatusOr<InfoFlags> ParseInfoFlags(const std::vector<std::string>& args) {
  InfoFlags f;
  std::string host_devices;
  vgpu::flags::FlagSet fs("vgpu-info", InfoUsage());
  fs.Bool("--json", &f.json, "one JSON object")
      .Bool("--selftest", &f.selftest, "check every logical GPU")
      .Bool("--settings-table", &f.settings_table, "README's settings table")
      .OutputPath("--memory-history", &f.history_path, "with --selftest: the memory history",
                  "vgpu-info's report")
      .Enum("--platform", &f.platform, {"host", "cuda", "auto"}, "VGPU_PLATFORM")
      .String("--host-devices", &host_devices, "SPEC", "VGPU_HOST_DEVICES",
              [](absl::string_view v) {
                // The host platform parses its own setting: make one from it alone.
                return vgpu::CreatePlatform("host",
                                            [v](absl::string_view name) {
                                              return name == "VGPU_HOST_DEVICES"
                                                         ? std::optional<std::string>(v)
                                                         : std::nullopt;
                                            })
                    .status();
              })
      .RuntimeSettings(&f.settings);
  VGPU_ASSIGN_OR_RETURN(vgpu::flags::ParseResult r, fs.Parse(args));
  if (r.help) {
    f.help = true;
    return f;
  }
  if (r.seen.count("--host-devices")) f.host_devices = host_devices;
  if (!f.history_path.empty() && !f.selftest) {
    return absl::InvalidArgumentError("--memory-history needs --selftest");
  }
  return f;
}

}  // namespace vgpu_info
