// The bad-input catalogue, device layer: names, configuration grammars, validation against the
// card, the registry and placement. Rows of docs/bad-input.md (see bad_input_test.cc).
//   build/tests/bad_input_devices_test --gtest_also_run_disabled_tests --gtest_filter=*Print*
#include <map>
#include <optional>
#include <string>

#include "bad_input_catalogue.h"
#include "devices/config.h"
#include "devices/device_name.h"
#include "devices/runtime.h"
#include "runtime/bytes.h"
#include "runtime/host/host_platform.h"

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
