// tools/flags.h (the tools' one command-line mechanism) and each tool's parse function built on
// it: the rules of issue 12 item 10, the tuning knobs (item 1), vgpu-train's counts and
// hyper-parameters (items 5 and 11).
#include "vgpu/tools/flags.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/devices/settings.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/bad_input_catalogue.h"
#include "vgpu/tools/info_flags.h"
#include "vgpu/tools/train_flags.h"
#include "vgpu/tools/vgpu_bench.h"

namespace vgpu::flags {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

// A set with one flag of each kind.
struct Sample {
  bool b = false;
  std::string s;
  std::string opt = "x";
  std::string path;
  std::string e = "a";
  int i = 0;
  double d = 0;
  std::optional<uint64_t> bytes;
  std::string pos1, pos2;
  FlagSet fs{"tool", "usage: tool"};
  Sample() {
    fs.Bool("--b", &b, "a bool")
        .String("--s", &s, "TEXT", "a string")
        .String("--opt", &opt, "TEXT", "may be empty", nullptr, /*allow_empty=*/true)
        .Path("--path", &path, "a file")
        .Enum("--e", &e, {"a", "b", "c"}, "an enum")
        .Int("--i", &i, -5, 10, "an int")
        .Decimal("--d", &d, 0, 1, "a fraction", /*min_exclusive=*/true)
        .Bytes("--bytes", &bytes, 1, uint64_t{1} << 40, "a size")
        .Positional("FIRST", &pos1, /*required=*/true, "first")
        .Positional("SECOND", &pos2, /*required=*/false, "second");
  }
  absl::StatusOr<ParseResult> Parse(std::vector<std::string> args) { return fs.Parse(args); }
};

TEST(FlagsTest, BoolForms) {
  for (const char* t : {"--b", "--b=true", "--b=1", "--b=yes", "--b=on"}) {
    Sample x;
    ASSERT_THAT(x.Parse({"p", t}), IsOk()) << t;
    EXPECT_TRUE(x.b) << t;
  }
  for (const char* f : {"--b=false", "--b=0", "--b=no", "--b=off"}) {
    Sample x;
    x.b = true;
    ASSERT_THAT(x.Parse({"p", f}), IsOk()) << f;
    EXPECT_FALSE(x.b) << f;
  }
  Sample x;
  EXPECT_THAT(x.Parse({"p", "--b=maybe"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--b=maybe: expected true")));
  EXPECT_THAT(x.Parse({"p", "--b="}), StatusIs(absl::StatusCode::kInvalidArgument));
  // A separate word is never a boolean's value: "false" here is the second positional.
  Sample y;
  ASSERT_THAT(y.Parse({"p", "--b", "false"}), IsOk());
  EXPECT_TRUE(y.b);
  EXPECT_EQ(y.pos2, "false");
}

TEST(FlagsTest, BothValueForms) {
  Sample x;
  ASSERT_THAT(x.Parse({"--s=one", "p", "--i", "-3", "--e", "b", "--path=f.json"}), IsOk());
  EXPECT_EQ(x.s, "one");
  EXPECT_EQ(x.i, -3);
  EXPECT_EQ(x.e, "b");
  EXPECT_EQ(x.path, "f.json");
  EXPECT_EQ(x.pos1, "p");
  Sample y;
  ASSERT_THAT(y.Parse({"p", "--s", "a=b"}), IsOk());  // '=' inside a separate value is kept
  EXPECT_EQ(y.s, "a=b");
}

TEST(FlagsTest, AValueNeverSwallowsTheNextFlag) {
  Sample x;
  EXPECT_THAT(x.Parse({"p", "--path", "--b"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--path needs a value")));
  EXPECT_THAT(x.Parse({"p", "--path", "-h2"}), IsOk());  // not a flag: a value
  EXPECT_THAT(x.Parse({"p", "--s"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--s needs a value")));
  EXPECT_FALSE(x.b);
}

TEST(FlagsTest, EmptyValuesRefusedUnlessAllowed) {
  Sample x;
  EXPECT_THAT(x.Parse({"p", "--path", ""}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--path needs a non-empty")));
  EXPECT_THAT(x.Parse({"p", "--path="}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(x.Parse({"p", "--s="}), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_THAT(x.Parse({"p", "--opt="}), IsOk());
  EXPECT_EQ(x.opt, "");
  EXPECT_THAT(x.Parse({""}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("FIRST")));
}

TEST(FlagsTest, UnknownFlagsAndExtraPositionalsRefused) {
  Sample x;
  EXPECT_THAT(x.Parse({"p", "--bogus"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown flag \"--bogus\"")));
  EXPECT_THAT(x.Parse({"p", "--bogus=1"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"--bogus\"")));
  EXPECT_THAT(x.Parse({"p", "-x"}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(x.Parse({"p", "q", "r"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unexpected argument \"r\": SECOND already given")));
  EXPECT_THAT(x.Parse({}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tool needs FIRST")));
}

TEST(FlagsTest, DoubleDashEndsFlags) {
  Sample x;
  ASSERT_THAT(x.Parse({"--", "--b"}), IsOk());
  EXPECT_EQ(x.pos1, "--b");
  EXPECT_FALSE(x.b);
}

TEST(FlagsTest, HelpAnywhereWins) {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--help"}, {"-h"}, {"--bogus", "--help"}, {"p", "--i=99", "-h"}}) {
    Sample x;
    absl::StatusOr<ParseResult> r = x.Parse(args);
    ASSERT_THAT(r, IsOk());
    EXPECT_TRUE(r->help);
  }
  Sample x;
  absl::StatusOr<ParseResult> r = x.Parse({"--", "--help"});
  ASSERT_THAT(r, IsOk());
  EXPECT_FALSE(r->help);
  EXPECT_THAT(x.fs.Usage(), HasSubstr("--bytes SIZE"));
  EXPECT_THAT(x.fs.Usage(), HasSubstr("--b[=BOOL]"));
}

TEST(FlagsTest, NumbersAreStrictAndRanged) {
  Sample x;
  for (const char* bad : {"--i=11", "--i=-6", "--i=0x5", "--i=1.0", "--i= ", "--i=5x"}) {
    EXPECT_THAT(x.Parse({"p", bad}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[-5, 10]")))
        << bad;
  }
  for (const char* bad : {"--d=0", "--d=1.5", "--d=inf", "--d=nan", "--d=0x1p-1", "--d=1e999",
                          "--d=5e-318", "--d=0,5", "--d=-0.5"}) {
    EXPECT_THAT(x.Parse({"p", bad}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(0, 1]")))
        << bad;
  }
  ASSERT_THAT(x.Parse({"p", "--d", "0.25"}), IsOk());
  EXPECT_EQ(x.d, 0.25);
  ASSERT_THAT(x.Parse({"p", "--bytes=1MiB"}), IsOk());
  EXPECT_EQ(x.bytes, uint64_t{1} << 20);
  for (const char* bad : {"--bytes=-1", "--bytes=nan", "--bytes=0", "--bytes=1MiBx", "--bytes=2TiB",
                          "--bytes=18446744073709551616"}) {
    EXPECT_THAT(x.Parse({"p", bad}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--bytes=")))
        << bad;
  }
}

TEST(FlagsTest, EnumNamesItsChoices) {
  Sample x;
  EXPECT_THAT(x.Parse({"p", "--e=d"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--e=d: expected a, b or c")));
}

TEST(FlagsTest, MessagesAreBounded) {
  Sample x;
  const std::string huge(100000, 'z');
  for (std::vector<std::string> args : {std::vector<std::string>{"p", "--e=" + huge},
                                        {"p", "--i", huge},
                                        {"p", "--" + huge},
                                        {"p", "q", huge},
                                        {"p", "--bytes=" + huge},
                                        {"p", "--b=" + huge}}) {
    absl::StatusOr<ParseResult> r = x.Parse(args);
    ASSERT_FALSE(r.ok());
    EXPECT_LT(r.status().message().size(), 800u) << r.status().message().substr(0, 200);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("..."));
  }
  // Control bytes never reach the terminal raw.
  absl::StatusOr<ParseResult> r = x.Parse({"p", std::string("--e=\x1b[2J\n")});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), Not(HasSubstr("\x1b")));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("\\x1b[2J\\n"));
}

TEST(FlagsTest, HelpersBoundTheirOutput) {
  EXPECT_EQ(Quote("ab\"c"), "\"ab\\\"c\"");
  EXPECT_EQ(Bounded(std::string(100, 'a'), 3), "aaa...");
  std::vector<std::string> names;
  for (int i = 0; i < 12; ++i) names.push_back("GPU:" + std::to_string(i));
  EXPECT_EQ(JoinBounded(names, 8),
            "GPU:0, GPU:1, GPU:2, GPU:3, GPU:4, GPU:5, GPU:6, GPU:7, ... (4 more)");
  EXPECT_EQ(JoinBounded({"a", "b"}), "a, b");
  EXPECT_EQ(Alternatives({"x", "y", "z"}), "x, y or z");
}

// ---- vgpu-bench ------------------------------------------------------------------------------

// replay --limit: a size, or a percentage of the trace's peak live (resolved after reading it).
TEST(BenchFlagsTest, ReplayLimitIsASizeOrAPercentOfPeakLive) {
  absl::StatusOr<bench::BenchArgs> a = bench::ParseBenchArgs({"replay", "t", "--limit", "12GiB"});
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(a->limit, uint64_t{12} << 30);
  EXPECT_FALSE(a->limit_percent.has_value());
  a = bench::ParseBenchArgs({"replay", "t", "--limit=120%"});
  ASSERT_THAT(a, IsOk());
  EXPECT_FALSE(a->limit.has_value());
  EXPECT_EQ(a->limit_percent, 120.0);
  a = bench::ParseBenchArgs({"replay", "t", "--limit", "2.5%"});
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(a->limit_percent, 2.5);
  for (const char* bad : {"0%", "-5%", "%", "abc%", "100001%", "1e999%", "nan%"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(bench::ParseBenchArgs({"replay", "t", "--limit", bad}).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("a percentage of the trace's peak live bytes such as 120%")));
  }
  EXPECT_THAT(bench::ParseBenchArgs({"replay", "t", "--limit", "0"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--limit=0: must be in")));
}

TEST(BenchFlagsTest, BooleansTakeTheirValue) {
  absl::StatusOr<bench::BenchArgs> a =
      bench::ParseBenchArgs({"replay", "t.trace", "--allow-growth=false", "--min-limit=no"});
  ASSERT_THAT(a, IsOk());
  EXPECT_FALSE(a->allow_growth);
  EXPECT_FALSE(a->min_limit);
  a = bench::ParseBenchArgs(
      {"replay", "--allow-growth", "t.trace", "--min-limit=on", "--no-baseline"});
  ASSERT_THAT(a, IsOk());
  EXPECT_TRUE(a->allow_growth);
  EXPECT_TRUE(a->min_limit);
  EXPECT_FALSE(a->baseline);
  EXPECT_EQ(a->trace_path, "t.trace");
}

TEST(BenchFlagsTest, MemoryHistoryNeedsARealValue) {
  EXPECT_THAT(
      bench::ParseBenchArgs({"replay", "t", "--memory-history", "--no-baseline"}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--memory-history needs a value")));
  EXPECT_THAT(bench::ParseBenchArgs({"replay", "t", "--memory-history", ""}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--memory-history")));
  EXPECT_THAT(bench::ParseBenchArgs({"replay", "t", "--memory-history="}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--memory-history")));
}

// Issue 16: replay --allocators/--device, convert IN OUT, plan --card TRACE... (FlagSet::Rest).
TEST(BenchFlagsTest, ImportConvertAndPlan) {
  auto r =
      bench::ParseBenchArgs({"replay", "s.pickle", "--allocators", "bfc,vmm", "--device", "1"});
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(r->allocators, ElementsAre("bfc", "vmm"));
  EXPECT_EQ(r->device, 1);
  EXPECT_FALSE(bench::ParseBenchArgs({"replay", "t"})->device.has_value());
  EXPECT_THAT(
      bench::ParseBenchArgs({"replay", "t", "--allocators", "bfc,tlsf"}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown allocator \"tlsf\"")));
  EXPECT_THAT(bench::ParseBenchArgs({"replay", "t", "--allocators", "async"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--platform")));
  auto c = bench::ParseBenchArgs({"convert", "in.csv", "out.trace"});
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->trace_path, "in.csv");
  EXPECT_EQ(c->output_path, "out.trace");
  EXPECT_THAT(bench::ParseBenchArgs({"convert", "in.csv"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("OUT")));
  auto p = bench::ParseBenchArgs(
      {"plan", "a.trace", "--card", "80GiB", "b.pickle", "--headroom", "10", "c.csv"});
  ASSERT_THAT(p, IsOk());
  EXPECT_THAT(p->trace_paths, ElementsAre("a.trace", "b.pickle", "c.csv"));
  EXPECT_EQ(p->card, uint64_t{80} << 30);
  EXPECT_EQ(p->headroom_percent, 10);
  EXPECT_EQ(p->reserve, 0u);
  EXPECT_EQ(p->prefer, "speed");
  auto pm = bench::ParseBenchArgs({"plan", "--card", "1GiB", "--prefer", "memory", "a"});
  ASSERT_THAT(pm, IsOk());
  EXPECT_EQ(pm->prefer, "memory");
  EXPECT_THAT(bench::ParseBenchArgs({"plan", "--card", "1GiB", "--prefer", "fast", "a"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--prefer")));
  EXPECT_THAT(bench::ParseBenchArgs({"plan", "a.trace"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs --card SIZE")));
  EXPECT_THAT(bench::ParseBenchArgs({"plan", "--card", "1GiB"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least one TRACE")));
  EXPECT_THAT(bench::ParseBenchArgs({"plan", "--card", "1GiB", "a", "--headroom", "-1"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--headroom")));
  // A percentage may carry its sign; only one, and nothing after it.
  auto pct = bench::ParseBenchArgs({"plan", "--card", "1GiB", "a", "--headroom", "12.5%"});
  ASSERT_THAT(pct, IsOk());
  EXPECT_EQ(pct->headroom_percent, 12.5);
  for (const char* bad : {"10%%", "%", "10% ", "1001%", "-1%", "ten%", "10%x", "nan%"}) {
    EXPECT_THAT(bench::ParseBenchArgs({"plan", "--card", "1GiB", "a", "--headroom", bad}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("expected a percentage in [0, 1000]")))
        << bad;
  }
  std::vector<std::string> many = {"plan", "--card", "1GiB"};
  for (int i = 0; i < 65; ++i) many.push_back("t" + std::to_string(i));
  EXPECT_THAT(bench::ParseBenchArgs(many), StatusIs(absl::StatusCode::kInvalidArgument,
                                                    HasSubstr("at most 64 logical devices")));
}

TEST(BenchFlagsTest, CommandsAndArguments) {
  EXPECT_THAT(bench::ParseBenchArgs({}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bench::ParseBenchArgs({"replya"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown command")));
  EXPECT_THAT(bench::ParseBenchArgs({"replay"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("TRACE")));
  EXPECT_THAT(bench::ParseBenchArgs({"replay", "a", "b"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unexpected argument")));
  EXPECT_THAT(bench::ParseBenchArgs({"allreduce", "--devices", "17"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[1, 16]")));
  EXPECT_THAT(bench::ParseBenchArgs({"alloc", "--min-limit"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown flag")));
  absl::StatusOr<bench::BenchArgs> a =
      bench::ParseBenchArgs({"alloc", "--benchmark_filter=x", "--limit", "1GiB"});
  ASSERT_THAT(a, IsOk());
  EXPECT_THAT(a->passthrough, ElementsAre("--benchmark_filter=x"));
  EXPECT_EQ(a->limit, uint64_t{1} << 30);
  for (const char* cmd : {"replay", "alloc", "allreduce"}) {
    a = bench::ParseBenchArgs({cmd, "--help"});
    ASSERT_THAT(a, IsOk()) << cmd;
    EXPECT_TRUE(a->help);
    EXPECT_THAT(a->usage, HasSubstr("usage: vgpu-bench"));
  }
  a = bench::ParseBenchArgs({"-h"});
  ASSERT_THAT(a, IsOk());
  EXPECT_TRUE(a->help);
}

// The tuning knobs, read from a fake environment.
absl::StatusOr<bench::BenchTuning> Tuning(std::map<std::string, std::string> env) {
  return bench::ReadBenchTuning([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(BenchFlagsTest, TuningKnobsAreStrict) {
  absl::StatusOr<bench::BenchTuning> t =
      Tuning({{"VGPU_BFC_MIN_SPLIT_BYTES", "1MiB"},
              {"VGPU_BFC_SMALL_REQUEST_BYTES", "65536"},
              {"VGPU_BFC_MIN_SPLIT_FRACTION", "0.5"},
              {"VGPU_BFC_PARK_SLIVERS", "1"},
              {"VGPU_BFC_SEGMENT_BYTES", "0"},
              {"VGPU_BFC_SEGMENT_WASTE_DIVISOR", "8"},
              {"VGPU_BFC_SEGMENT_WASTE_DIVISOR_BEFORE_FREE", "0"},
              {"VGPU_BFC_SMALL_FROM_TOP_BYTES", "1MiB"},
              {"VGPU_BFC_SMALL_FROM_TOP_HOLE_BYTES", "4MiB"},
              {"VGPU_VMM_SLAB_BYTES", "4MiB"},
              {"VGPU_VMM_PAGE_BYTES", "8MiB"},
              {"VGPU_VMM_SMALL_BLOCK_MAX", "1MiB"}});
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->bfc_min_split_bytes, uint64_t{1} << 20);  // 1MiB is 1 MiB, not 1
  EXPECT_EQ(t->bfc_small_request_bytes, 65536u);
  EXPECT_EQ(t->bfc_min_split_fraction, 0.5);
  EXPECT_EQ(t->bfc_park_slivers, true);
  EXPECT_EQ(t->bfc_segment_bytes, 0u);  // 0 is a value (off), not "unset"
  EXPECT_EQ(t->bfc_segment_waste_divisor, 8u);
  EXPECT_EQ(t->bfc_segment_waste_divisor_before_free, 0u);  // 0 is a value (off)
  EXPECT_EQ(t->bfc_small_from_top_bytes, uint64_t{1} << 20);
  EXPECT_EQ(t->bfc_small_from_top_hole_bytes, uint64_t{4} << 20);
  EXPECT_EQ(t->vmm_slab_bytes, uint64_t{4} << 20);
  EXPECT_EQ(t->vmm_page_bytes, uint64_t{8} << 20);
  EXPECT_EQ(t->vmm_small_block_max, uint64_t{1} << 20);
  ASSERT_THAT(Tuning({}), IsOk());
  EXPECT_FALSE(Tuning({})->bfc_min_split_bytes.has_value());

  EXPECT_THAT(Tuning({{"VGPU_BFC_MIN_SPLIT_BYTES", "1MiBx"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("VGPU_BFC_MIN_SPLIT_BYTES=\"1MiBx\": invalid byte size")));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"VGPU_BFC_MIN_SPLIT_BYTES", "-1"},
      {"VGPU_BFC_MIN_SPLIT_BYTES", ""},
      {"VGPU_BFC_MIN_SPLIT_BYTES", "0"},
      {"VGPU_BFC_MIN_SPLIT_BYTES", "99999999999999999999999"},
      {"VGPU_BFC_SMALL_REQUEST_BYTES", "lots"},
      {"VGPU_BFC_SMALL_REQUEST_BYTES", "2TiB"},
      {"VGPU_BFC_MIN_SPLIT_FRACTION", "nan"},
      {"VGPU_BFC_MIN_SPLIT_FRACTION", "inf"},
      {"VGPU_BFC_MIN_SPLIT_FRACTION", "1.5"},
      {"VGPU_BFC_PARK_SLIVERS", "yes"},
      {"VGPU_BFC_SEGMENT_BYTES", "-1"},
      {"VGPU_BFC_SEGMENT_BYTES", "2TiB"},
      {"VGPU_BFC_SEGMENT_WASTE_DIVISOR", "-1"},
      {"VGPU_BFC_SEGMENT_WASTE_DIVISOR", "4.5"},
      {"VGPU_BFC_SEGMENT_WASTE_DIVISOR", "2000000"},
      {"VGPU_BFC_SEGMENT_WASTE_DIVISOR_BEFORE_FREE", "many"},
      {"VGPU_BFC_SMALL_FROM_TOP_BYTES", "top"},
      {"VGPU_BFC_SMALL_FROM_TOP_BYTES", "2TiB"},
      {"VGPU_BFC_SMALL_FROM_TOP_HOLE_BYTES", "-1MiB"},
      {"VGPU_BFC_SMALL_FROM_TOP_HOLE_BYTES", "2TiB"},
      {"VGPU_BFC_MIN_SPLIT_FRACTION", "-0.1"},
      {"VGPU_BFC_MIN_SPLIT_FRACTION", "0x1p-1"},
      {"VGPU_VMM_SLAB_BYTES", "3MiB"},
      {"VGPU_VMM_SLAB_BYTES", "0"},
      {"VGPU_VMM_SMALL_BLOCK_MAX", "0"},
      {"VGPU_VMM_SMALL_BLOCK_MAX", "4MiB"},  // above the default 2 MiB slab
      {"VGPU_VMM_PAGE_BYTES", "6MiB"},       // not a power of two
      {"VGPU_VMM_PAGE_BYTES", "1MiB"},       // below the device's granule
      {"VGPU_VMM_PAGE_BYTES", "2GiB"},       // above 1 GiB
  };
  for (const auto& [name, value] : bad) {
    EXPECT_THAT(Tuning({{name, value}}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(name)))
        << name << "=" << value;
  }
  const std::string huge(100000, '9');
  absl::StatusOr<bench::BenchTuning> h = Tuning({{"VGPU_VMM_SLAB_BYTES", huge}});
  ASSERT_FALSE(h.ok());
  EXPECT_LT(h.status().message().size(), 800u);
}

TEST(BenchFlagsTest, TuningFlagsAreCheckedAsTheirVariables) {
  absl::StatusOr<bench::BenchArgs> a =
      bench::ParseBenchArgs({"replay", "t", "--bfc-min-split-bytes", "1MiB"});
  ASSERT_THAT(a, IsOk());
  ASSERT_EQ(a->tuning.size(), 1u);
  EXPECT_EQ(a->tuning[0].first, "VGPU_BFC_MIN_SPLIT_BYTES");
  EXPECT_THAT(
      bench::ParseBenchArgs({"replay", "t", "--bfc-min-split-fraction=nan"}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--bfc-min-split-fraction=nan")));
  EXPECT_THAT(
      bench::ParseBenchArgs({"replay", "t", "--vmm-slab-bytes=2MiB", "--vmm-small-block-max=3MiB"}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exceeds the slab")));
}

// ---- vgpu-train ------------------------------------------------------------------------------

absl::StatusOr<TrainFlags> Train(std::vector<std::string> args) {
  return ParseTrainFlags(args, "/data");
}

TEST(TrainFlagsTest, DeviceCountsAreBoundedBeforeAnythingIsBuilt) {
  for (const char* bad : {"2147483647", "100000000", "0", "-1", "1025", "GPU:99999", "GPU:-1", "4x",
                          "GPU:0,,GPU:zz"}) {
    absl::StatusOr<TrainFlags> f = Train({"--devices", bad});
    EXPECT_THAT(f, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--devices"))) << bad;
    if (!f.ok()) EXPECT_LT(f.status().message().size(), 600u);
  }
  absl::StatusOr<TrainFlags> f = Train({"--devices", "3"});
  ASSERT_THAT(f, IsOk());
  EXPECT_EQ(f->device_count, 3);
  f = Train({"--devices", "GPU:2,GPU:0"});
  ASSERT_THAT(f, IsOk());
  EXPECT_EQ(f->device_count, 0);
  EXPECT_EQ(f->gpus_needed, 3);
  EXPECT_THAT(f->device_specs, ElementsAre("GPU:2", "GPU:0"));
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "GPU:0,";
  EXPECT_THAT(Train({"--devices", many}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TrainFlagsTest, HyperParametersAreFiniteAndSane) {
  for (const char* bad : {"inf", "1e30", "nan", "0", "-1", "11", "0x1p-3", "1e-12", ""}) {
    EXPECT_THAT(Train({"--lr", bad}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--lr")))
        << bad;
  }
  absl::StatusOr<TrainFlags> f = Train({"--lr=0.5", "--epochs", "3", "--quiet=off", "--compare=yes",
                                        "--layers", "GPU:0,GPU:1,GPU:0"});
  ASSERT_THAT(f, IsOk());
  EXPECT_FLOAT_EQ(f->lr, 0.5f);
  EXPECT_EQ(f->epochs, 3);
  EXPECT_FALSE(f->quiet);
  EXPECT_TRUE(f->compare);
  EXPECT_EQ(f->placement, "explicit");
  EXPECT_EQ(f->data, "/data");
  EXPECT_THAT(Train({"--epochs", "0"}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Train({"--batch", "-5"}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Train({"--strategy", "ring"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expected single, mirrored, model-parallel, central-storage, "
                                 "multi-worker-mirrored or parameter-server")));
  EXPECT_THAT(Train({"--record-trace", "--quiet"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a value")));
  EXPECT_THAT(Train({"--memory-history="}), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_THAT(Train({"--help"}), IsOk());
  EXPECT_TRUE(Train({"--help"})->help);
}

TEST(TrainFlagsTest, ANonFiniteLossStopsTheRunNamingWhere) {
  EXPECT_THAT(CheckTrainingLoss(1.5, "single", 1, 1, 64, 100, 0.1), IsOk());
  EXPECT_THAT(CheckTrainingLoss(std::nan(""), "mirrored", 2, 65, 100, 100, 10),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("mirrored: epoch 2, steps 65-100 of 100: the training loss is "
                                 "not finite (nan)")));
  EXPECT_THAT(
      CheckTrainingLoss(std::numeric_limits<double>::infinity(), "single", 1, 1, 64, 64, 10),
      StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("lower --lr")));
}

// ---- vgpu-info -------------------------------------------------------------------------------

TEST(InfoFlagsTest, FlagsFollowTheRules) {
  absl::StatusOr<vgpu_info::InfoFlags> f = vgpu_info::ParseInfoFlags(
      {"--allow-growth=false", "--json", "--platform", "host", "--memory-fraction=0.5"});
  ASSERT_THAT(f, IsOk());
  ASSERT_EQ(f->settings.SourceOf(kSettingAllowGrowth), ConfigSource::kFlag);
  EXPECT_FALSE(f->settings.allow_growth);
  EXPECT_TRUE(f->json);
  EXPECT_EQ(f->platform, "host");
  EXPECT_EQ(f->settings.memory_fraction, 0.5);
  EXPECT_EQ(f->settings.sources.size(), 2u);
  EXPECT_THAT(vgpu_info::ParseInfoFlags({"--memory-fraction=1.5"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--memory-fraction=1.5: must be in (0, 1]")));
  EXPECT_THAT(vgpu_info::ParseInfoFlags({"--json=maybe"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--json=maybe")));
  EXPECT_THAT(vgpu_info::ParseInfoFlags({"--memory-history", "h.json"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs --selftest")));
  EXPECT_THAT(vgpu_info::ParseInfoFlags({"--selftest", "--memory-history", "--json"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a value")));
  EXPECT_THAT(vgpu_info::ParseInfoFlags({"extra"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unexpected argument")));
  ASSERT_THAT(vgpu_info::ParseInfoFlags({"-h"}), IsOk());
  EXPECT_TRUE(vgpu_info::ParseInfoFlags({"-h"})->help);
}

// Every runtime setting has its flag (devices/settings.h), parsed into its field with source
// "flag", with the rules of every flag (a boolean takes no separate word, errors name the flag).
TEST(InfoFlagsTest, EveryRuntimeSettingHasAFlag) {
  for (const Setting& s : SettingsTable()) {
    absl::StatusOr<vgpu_info::InfoFlags> f =
        vgpu_info::ParseInfoFlags({absl::StrCat(s.flag, "=", s.example)});
    ASSERT_THAT(f, IsOk()) << s.flag;
    EXPECT_EQ(f->settings.SourceOf(s.name), ConfigSource::kFlag) << s.flag;
    EXPECT_EQ(f->settings.sources.size(), 1u) << s.flag;
    RuntimeConfig expected;
    ASSERT_THAT(s.parse(s.example, expected), IsOk());
    EXPECT_EQ(s.format(f->settings), s.format(expected)) << s.flag;
    // A bad value is refused naming the flag.
    EXPECT_THAT(vgpu_info::ParseInfoFlags({absl::StrCat(s.flag, "=\x01?")}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(std::string(s.flag))))
        << s.flag;
    EXPECT_THAT(vgpu_info::InfoUsage(), HasSubstr(std::string(s.flag)));
  }
  absl::StatusOr<vgpu_info::InfoFlags> f = vgpu_info::ParseInfoFlags({"--soft-placement"});
  ASSERT_THAT(f, IsOk());
  EXPECT_TRUE(f->settings.soft_placement);
  EXPECT_THAT(vgpu_info::ParseInfoFlags({"--soft-placement", "yes"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unexpected argument")));
  EXPECT_THAT(vgpu_info::ParseInfoFlags({"--allocator", ""}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--allocator needs a non-empty value")));
  f = vgpu_info::ParseInfoFlags({"--visible-devices="});  // "": no GPUs, as the variable
  ASSERT_THAT(f, IsOk());
  EXPECT_THAT(f->settings.visible_devices, ::testing::Optional(::testing::IsEmpty()));
}

// "-" for an output file is standard output where the tool writes nothing else there (the
// timeline's --svg); where its report is there, "-" is refused by name (it made a file named
// "-" before).
TEST(FlagsTest, StandardOutputAsAnOutputFile) {
  EXPECT_THAT(bench::ParseBenchArgs({"replay", "t", "--memory-history", "-"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--memory-history=-: standard output carries vgpu-bench's "
                                 "report; name a file")));
  EXPECT_THAT(bench::ParseBenchArgs({"replay", "t", "--failure-log", "-"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--failure-log=-: standard output carries vgpu-bench's report")));
  absl::StatusOr<bench::BenchArgs> failure_log =
      bench::ParseBenchArgs({"replay", "t", "--failure-log", "f.log"});
  ASSERT_THAT(failure_log, IsOk());
  EXPECT_EQ(failure_log->failure_log_path, "f.log");
  EXPECT_THAT(vgpu_info::ParseInfoFlags({"--selftest", "--memory-history=-"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("standard output carries vgpu-info's report")));
  EXPECT_THAT(Train({"--memory-history", "-"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("standard output carries vgpu-train's report")));
  EXPECT_THAT(Train({"--record-trace", "-"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--record-trace=-")));
  absl::StatusOr<vgpu_info::TimelineFlags> t =
      vgpu_info::ParseTimelineFlags({"h.json", "--svg", "-"});
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->svg_path, "-");
  // A file that merely starts with "-" is a name like any other (after "--" or as "--svg=-x").
  ASSERT_THAT(bench::ParseBenchArgs({"replay", "t", "--memory-history=-h.json"}), IsOk());
  // Standard input can be read once: plan takes "-" for one of its workloads, not two.
  ASSERT_THAT(bench::ParseBenchArgs({"plan", "--card", "80GiB", "a.trace", "-"}), IsOk());
  EXPECT_THAT(bench::ParseBenchArgs({"plan", "--card", "80GiB", "-", "a.trace", "-"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"-\" (standard input) is given more than once")));
}

// ---- docs/bad-input.md, section "Command lines" ------------------------------------

std::vector<testing::CatalogueCase> CommandLineCases() {
  using absl::StatusCode;
  auto bench = [](std::vector<std::string> args) {
    return [args] { return bench::ParseBenchArgs(args).status(); };
  };
  auto knob = [](std::string name, std::string value) {
    return [name, value] { return Tuning({{name, value}}).status(); };
  };
  auto train = [](std::vector<std::string> args) {
    return [args] { return Train(args).status(); };
  };
  auto info = [](std::vector<std::string> args) {
    return [args] { return vgpu_info::ParseInfoFlags(args).status(); };
  };
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  return {
      {"L01", "boolean flag: not a boolean", "`vgpu-bench replay T --allow-growth=maybe`", kInvalid,
       "--allow-growth=maybe: expected true, false, 1, 0, yes, no, on or off",
       bench({"replay", "T", "--allow-growth=maybe"})},
      {"L02", "value flag followed by a flag",
       "`vgpu-bench replay T --memory-history --no-baseline`", kInvalid,
       "--memory-history needs a value (FILE)",
       bench({"replay", "T", "--memory-history", "--no-baseline"})},
      {"L03", "empty file name", "`vgpu-bench replay T --memory-history \"\"`", kInvalid,
       "--memory-history needs a non-empty value (FILE)",
       bench({"replay", "T", "--memory-history", ""})},
      {"L04", "a second positional argument", "`vgpu-bench replay A B`", kInvalid,
       "unexpected argument \"B\": TRACE already given", bench({"replay", "A", "B"})},
      {"L05", "unknown flag", "`vgpu-bench replay T --bogus=1`", kInvalid,
       "unknown flag \"--bogus\" (see --help)", bench({"replay", "T", "--bogus=1"})},
      {"L06", "tuning knob: not a size", "`VGPU_BFC_MIN_SPLIT_BYTES=1MiBx`", kInvalid,
       "VGPU_BFC_MIN_SPLIT_BYTES=\"1MiBx\": invalid byte size \"1MiBx\"",
       knob("VGPU_BFC_MIN_SPLIT_BYTES", "1MiBx")},
      {"L07", "tuning knob: negative", "`VGPU_BFC_MIN_SPLIT_BYTES=-1`", kInvalid,
       "VGPU_BFC_MIN_SPLIT_BYTES=\"-1\": invalid byte size \"-1\": negative",
       knob("VGPU_BFC_MIN_SPLIT_BYTES", "-1")},
      {"L08", "tuning knob: not a finite fraction", "`VGPU_BFC_MIN_SPLIT_FRACTION=nan`", kInvalid,
       "VGPU_BFC_MIN_SPLIT_FRACTION=\"nan\":", knob("VGPU_BFC_MIN_SPLIT_FRACTION", "nan")},
      {"L09", "tuning knob: slab not a whole number of granules", "`VGPU_VMM_SLAB_BYTES=3MiB`",
       kInvalid, "VGPU_VMM_SLAB_BYTES=\"3MiB\": must be a whole number of 2 MiB granules",
       knob("VGPU_VMM_SLAB_BYTES", "3MiB")},
      {"L10", "tuning knob: small blocks above the slab", "`VGPU_VMM_SMALL_BLOCK_MAX=4MiB`",
       kInvalid, "VGPU_VMM_SMALL_BLOCK_MAX=4 MiB exceeds the slab size 2 MiB",
       knob("VGPU_VMM_SMALL_BLOCK_MAX", "4MiB")},
      {"L11", "device count past any machine", "`vgpu-train --devices 2147483647`", kInvalid,
       "--devices=2147483647: expected a count in [1, 1024]", train({"--devices", "2147483647"})},
      {"L12", "device id past any machine", "`vgpu-train --devices GPU:99999`", kInvalid,
       "--devices=GPU:99999: \"GPU:99999\": device ids go up to 1023",
       train({"--devices", "GPU:99999"})},
      {"L13", "learning rate not finite", "`vgpu-train --lr inf`", kInvalid,
       "--lr=inf: expected a decimal number in [1e-09, 10]", train({"--lr", "inf"})},
      {"L14", "learning rate absurd", "`vgpu-train --lr 1e30`", kInvalid,
       "--lr=1e30: expected a decimal number in [1e-09, 10]", train({"--lr", "1e30"})},
      {"L15", "diverged training", "the loss of steps 65-100 is nan (`CheckTrainingLoss`)",
       StatusCode::kOutOfRange,
       "single: epoch 2, steps 65-100 of 100: the training loss is not finite (nan)",
       [] { return CheckTrainingLoss(std::nan(""), "single", 2, 65, 100, 100, 10); }},
      {"L16", "memory fraction out of range", "`vgpu-info --memory-fraction=1.5`", kInvalid,
       "--memory-fraction=1.5: must be in (0, 1]", info({"--memory-fraction=1.5"})},
      {"L17", "a flag that needs another", "`vgpu-info --memory-history h.json`", kInvalid,
       "--memory-history needs --selftest", info({"--memory-history", "h.json"})},
      {"L18", "a 100000-character value", "`vgpu-info --platform=zzz...`", kInvalid,
       "zzzzzzzz...: expected host, cuda or auto",
       info({"--platform=" + std::string(100000, 'z')})},
      {"L19", "tuning knob: vmm page not a power-of-two multiple", "`VGPU_VMM_PAGE_BYTES=6MiB`",
       kInvalid, "VGPU_VMM_PAGE_BYTES=\"6MiB\": must be a power-of-two multiple of 2 MiB",
       knob("VGPU_VMM_PAGE_BYTES", "6MiB")},
      {"L20", "a second output on standard output", "`vgpu-bench replay T --memory-history -`",
       kInvalid, "--memory-history=-: standard output carries vgpu-bench's report; name a file",
       bench({"replay", "T", "--memory-history", "-"})},
  };
}

TEST(CommandLineCatalogue, EveryCaseFailsAsListed) { testing::RunCatalogue(CommandLineCases()); }
TEST(CommandLineCatalogue, EveryCaseIsDocumented) { testing::CheckDocumented(CommandLineCases()); }
TEST(CommandLineCatalogue, DISABLED_Print) { testing::PrintCatalogue(CommandLineCases()); }

}  // namespace
}  // namespace vgpu::flags
