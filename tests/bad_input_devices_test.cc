// The bad-input catalogue, device layer: names, configuration grammars, validation against the
// card, the registry and placement. Rows of docs/bad-input.md (see bad_input_test.cc).
//   build/tests/bad_input_devices_test --gtest_also_run_disabled_tests --gtest_filter=*Print*
#include <map>
#include <optional>
#include <string>

#include "bad_input_catalogue.h"
#include "vgpu/devices/config.h"
#include "vgpu/devices/device_name.h"
#include "vgpu/devices/runtime.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/host/host_platform.h"

namespace vgpu::testing {
namespace {

using Code = absl::StatusCode;

// One 8 GiB simulated card, as in the examples.
Platform* Card() {
  static Platform* p = HostPlatform::Create(HostPlatformOptions{{8 * kGiB}})->release();
  return p;
}

// Builds a runtime from environment-style settings on the 8 GiB card.
absl::Status CreateWith(std::map<std::string, std::string> env) {
  auto config = RuntimeConfig::FromEnvironment([env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
  if (!config.ok()) return config.status();
  return Runtime::Create(*config, Card()).status();
}

Runtime& Four() {
  static Runtime* rt = [] {
    auto config = RuntimeConfig::FromEnvironment([](const char* name) -> std::optional<std::string> {
      if (std::string(name) == "VGPU_LOGICAL_DEVICES") return "0:1GiB,1GiB,1GiB,1GiB";
      if (std::string(name) == "VGPU_ALLOW_GROWTH") return "true";
      return std::nullopt;
    });
    return Runtime::Create(*config, Card())->release();
  }();
  return *rt;
}

std::vector<CatalogueCase> DeviceCases() {
  std::vector<CatalogueCase> c;
  auto name = [](std::string text) { return [text] { return DeviceName::Parse(text).status(); }; };
  c.push_back({"N01", "device name: unknown field", "`/device:GPU:0/foo:1`", Code::kInvalidArgument, "at \"foo:1\"", name("/device:GPU:0/foo:1")});
  c.push_back({"N02", "device name: bad id", "`/device:GPU:x`", Code::kInvalidArgument, "GPU:x", name("/device:GPU:x")});
  c.push_back({"N03", "device name: field given twice", "`/job:a/job:b`", Code::kInvalidArgument, "job given twice", name("/job:a/job:b")});
  c.push_back({"N04", "device name: negative id", "`GPU:-1`", Code::kInvalidArgument, "-1", name("GPU:-1")});
  auto env = [](std::string var, std::string value) {
    return [var, value] { return CreateWith({{var, value}}); };
  };
  c.push_back({"C01", "logical devices: unparsable size", "`VGPU_LOGICAL_DEVICES=0:1GiB,lots`", Code::kInvalidArgument, "lots",
               env("VGPU_LOGICAL_DEVICES", "0:1GiB,lots")});
  c.push_back({"C02", "logical devices: sum over the card", "`VGPU_LOGICAL_DEVICES=0:5GiB,5GiB` on 8 GiB", Code::kInvalidArgument, "exceed its capacity of 8 GiB",
               env("VGPU_LOGICAL_DEVICES", "0:5GiB,5GiB")});
  c.push_back({"C03", "logical devices: zero limit", "`VGPU_LOGICAL_DEVICES=0:0`", Code::kInvalidArgument, "zero memory limit",
               env("VGPU_LOGICAL_DEVICES", "0:0")});
  c.push_back({"C04", "logical devices: unknown physical device", "`VGPU_LOGICAL_DEVICES=3:1GiB` on 1 card", Code::kNotFound, "configured for physical device 3",
               env("VGPU_LOGICAL_DEVICES", "3:1GiB")});
  c.push_back({"C05", "logical devices: physical device listed twice", "`0:1GiB;0:1GiB`", Code::kInvalidArgument, "physical device 0 appears twice",
               env("VGPU_LOGICAL_DEVICES", "0:1GiB;0:1GiB")});
  c.push_back({"C06", "visible devices: unknown id", "`VGPU_VISIBLE_DEVICES=0,7`", Code::kNotFound, "physical device 7",
               env("VGPU_VISIBLE_DEVICES", "0,7")});
  c.push_back({"C07", "visible devices: duplicate id", "`VGPU_VISIBLE_DEVICES=0,0`", Code::kInvalidArgument, "physical device 0 appears twice",
               env("VGPU_VISIBLE_DEVICES", "0,0")});
  c.push_back({"C08", "memory fraction outside (0, 1]", "`VGPU_MEMORY_FRACTION=1.5`", Code::kInvalidArgument, "outside (0, 1]",
               env("VGPU_MEMORY_FRACTION", "1.5")});
  c.push_back({"C09", "memory fraction with explicit limits", "fraction 0.5 + `0:1GiB`", Code::kInvalidArgument, "both set",
               [] { return CreateWith({{"VGPU_MEMORY_FRACTION", "0.5"}, {"VGPU_LOGICAL_DEVICES", "0:1GiB"}}); }});
  c.push_back({"C10", "limits plus reserve over the card", "`0:4GiB,3GiB` + `VGPU_RESERVED_MEMORY=2GiB`", Code::kInvalidArgument, "+ reserve 2 GiB exceed its capacity of 8 GiB",
               [] { return CreateWith({{"VGPU_LOGICAL_DEVICES", "0:4GiB,3GiB"}, {"VGPU_RESERVED_MEMORY", "2GiB"}}); }});
  c.push_back({"C11", "bad boolean", "`VGPU_ALLOW_GROWTH=maybe`", Code::kInvalidArgument, "maybe",
               env("VGPU_ALLOW_GROWTH", "maybe")});
  c.push_back({"C12", "unknown allocator", "`VGPU_ALLOCATOR=tlsf`", Code::kInvalidArgument, "tlsf",
               env("VGPU_ALLOCATOR", "tlsf")});
  c.push_back({"C13", "SM partitions on the host platform", "`VGPU_SM_PARTITION=0:8`", Code::kUnimplemented, "need the cuda platform",
               [] { return CreateWith({{"VGPU_SM_PARTITION", "0:8"}}); }});
  c.push_back({"C14", "limits over free memory with growth off", "`0:4GiB,3GiB` while 6 GiB are taken", Code::kResourceExhausted, "exceed its free memory of 2 GiB",
               [] {
                 Executor* e = *Card()->GetExecutor(0);
                 void* hog = *e->Allocate(6 * kGiB);
                 absl::Status s = CreateWith({{"VGPU_LOGICAL_DEVICES", "0:4GiB,3GiB"}});
                 (void)e->Free(hog);
                 return s;
               }});
  // Issue 12: configuration, platform and allocators.
  c.push_back({"G01", "logical devices: hex percentage", "`VGPU_LOGICAL_DEVICES=0:0x10%`", Code::kInvalidArgument, "\"0x10%\" is not a percentage",
               env("VGPU_LOGICAL_DEVICES", "0:0x10%")});
  c.push_back({"G02", "memory fraction: hex float", "`VGPU_MEMORY_FRACTION=0x1p-1`", Code::kInvalidArgument, "bad memory fraction \"0x1p-1\": expected a decimal number",
               env("VGPU_MEMORY_FRACTION", "0x1p-1")});
  c.push_back({"G03", "empty value (any VGPU_* but VGPU_VISIBLE_DEVICES)", "`VGPU_SM_PARTITION=`", Code::kInvalidArgument, "VGPU_SM_PARTITION=\"\": empty value; unset VGPU_SM_PARTITION for the default, or give a value, e.g. VGPU_SM_PARTITION=0:33,33",
               env("VGPU_SM_PARTITION", "")});
  c.push_back({"G04", "SM partition: not ORDINAL:LIST", "`VGPU_SM_PARTITION=8`", Code::kInvalidArgument, "expected ORDINAL:LIST, e.g. \"0:33,33\"",
               env("VGPU_SM_PARTITION", "8")});
  c.push_back({"G05", "reserved memory as a percentage", "`VGPU_RESERVED_MEMORY=50%`", Code::kInvalidArgument, "a percentage is not accepted: the same reserve is left free on every card",
               env("VGPU_RESERVED_MEMORY", "50%")});
  c.push_back({"G06", "logical device below the minimum", "`VGPU_LOGICAL_DEVICES=0:1MiB`", Code::kInvalidArgument, "below the minimum logical device size of 2 MiB",
               env("VGPU_LOGICAL_DEVICES", "0:1MiB")});
  c.push_back({"G07", "huge value: the message quotes 80 characters", "`VGPU_ALLOCATOR=` 1 MiB of `a`", Code::kInvalidArgument, "aaaa\"... (1048576 bytes)",
               env("VGPU_ALLOCATOR", std::string(1 << 20, 'a'))});
  c.push_back({"G08", "more than 64 logical devices on a card", "`VGPU_LOGICAL_DEVICES=0:2MiB,...` (65 items)", Code::kInvalidArgument, "more than 64 logical devices on physical device 0",
               [] {
                 std::string list = "0:2MiB";
                 for (int i = 0; i < 64; ++i) list += ",2MiB";
                 return CreateWith({{"VGPU_LOGICAL_DEVICES", list}});
               }});
  c.push_back({"G09", "priority not a decimal integer", "`VGPU_LOGICAL_DEVICES=0:1GiB@0x1`", Code::kInvalidArgument, "priority \"0x1\" is not an integer in -1000..1000",
               env("VGPU_LOGICAL_DEVICES", "0:1GiB@0x1")});
  c.push_back({"G10", "visible device ordinal out of range", "`VGPU_VISIBLE_DEVICES=99999999999`", Code::kInvalidArgument, "expected a physical device ordinal (0, 1, ..., at most 1023)",
               env("VGPU_VISIBLE_DEVICES", "99999999999")});
  c.push_back({"G11", "simulated card past the address space", "`VGPU_HOST_DEVICES=1x200TiB`", Code::kInvalidArgument, "a simulated card may have at most 64 TiB",
               [] { return ParseHostDevices("1x200TiB").status(); }});
  c.push_back({"G12", "simulated cards past the address space together", "`VGPU_HOST_DEVICES=2x40TiB`", Code::kInvalidArgument, "the cards add up to 80 TiB, more than the 64 TiB all simulated cards may have together",
               [] { return ParseHostDevices("2x40TiB").status(); }});
  c.push_back({"R01", "unknown device, no soft placement", "`Find(\"GPU:7\")` with 4 GPUs", Code::kNotFound, "no device matches \"GPU:7\"",
               [] { return Four().Find("GPU:7").status(); }});
  c.push_back({"R02", "malformed device spec", "`Find(\"/gpu:zero\")`", Code::kInvalidArgument, "zero",
               [] { return Four().Find("/gpu:zero").status(); }});
  c.push_back({"R03", "placement on an unknown device, no soft placement", "`Place(\"GPU:9\")`", Code::kNotFound, "GPU:9",
               [] { return Four().Place("GPU:9").status(); }});
  c.push_back({"R04", "configuration after the runtime exists", "`SetDefaultRuntimeConfig` after `DefaultRuntime()`", Code::kFailedPrecondition, "cannot be modified after it has been initialized",
               [] {
                 setenv("VGPU_PLATFORM", "host", 1);
                 auto rt = DefaultRuntime();
                 if (!rt.ok()) return rt.status();
                 return SetDefaultRuntimeConfig(RuntimeConfig{});
               }});
  c.push_back({"R05", "over a logical device's limit while others are idle", "`Allocate(2 GiB)` on a 1 GiB GPU:0", Code::kResourceExhausted, "GPU:0",
               [] { return (*Four().Find("GPU:0"))->allocator()->Allocate(2 * kGiB).status(); }});
  return c;
}

TEST(BadInput, DeviceCases) { RunCatalogue(DeviceCases()); }
TEST(BadInput, DocumentListsDeviceCases) { CheckDocumented(DeviceCases()); }
TEST(BadInput, DISABLED_PrintDevices) { PrintCatalogue(DeviceCases()); }

}  // namespace
}  // namespace vgpu::testing
