// tools/history_reader.h: the timeline's strict history reader and bounded renderer (issue 12
// items 2 and 13: hangs on 1e999 / 5e-318, dropped -1, NUL in a name, index 1e999, 20 000
// names making a 44 MB SVG).
#include "vgpu/tools/history_reader.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu_info {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

std::string History(const std::string& t_ns, const std::string& extra = "",
                    const std::string& name = "\"a\"", const std::string& index = "0") {
  return absl::StrCat("{", extra, "\"allocators\":[", name, "],\"events\":[{\"t_ns\":", t_ns,
                      ",\"allocator\":", index, ",\"in_use\":1,\"reserved\":2}]}");
}

TEST(HistoryReaderTest, ReadsAValidHistory) {
  absl::StatusOr<MemoryHistoryData> h = ParseMemoryHistory(
      "\xEF\xBB\xBF{\"capacity\":8,\"recorded\":2,\"dropped\":3,\"limits\":{\"b\":1024},"
      "\"allocators\":[\"a\",\"b\",\"c\"],\"events\":[{\"t_ns\":2000000,\"allocator\":1,"
      "\"kind\":\"alloc\",\"ptr\":\"0x10\",\"bytes\":64,\"in_use\":64,\"reserved\":128},"
      "{\"t_ns\":1000000,\"allocator\":1,\"in_use\":0,\"reserved\":128}]}\r\n",
      /*default_limit=*/7);
  ASSERT_THAT(h.status(), IsOk());
  ASSERT_EQ(h->series.size(), 3u);
  EXPECT_EQ(h->dropped, 3u);
  EXPECT_EQ(h->events, 2u);
  EXPECT_EQ(h->series[1].limit, 1024u);
  EXPECT_EQ(h->series[0].limit, 7u);
  ASSERT_EQ(h->series[1].points.size(), 2u);
  EXPECT_DOUBLE_EQ(h->series[1].points[0].t_ms, 1.0);  // sorted by time
  EXPECT_DOUBLE_EQ(h->t_max_ms, 2.0);
  TimelineSvg svg = RenderTimelineSvg(*h);
  EXPECT_EQ(svg.panels, 1u);
  EXPECT_EQ(svg.without_events, 2u);
  EXPECT_THAT(svg.svg, HasSubstr("limit 1 KiB"));
  EXPECT_THAT(svg.svg, HasSubstr("2 allocator(s) without events not drawn"));
  EXPECT_THAT(svg.svg, HasSubstr("3 oldest events dropped"));
}

// 1e999 overflowed to inf and 5e-318 made the tick step 0: both looped forever.
TEST(HistoryReaderTest, HostileTimesNeverHang) {
  EXPECT_THAT(ParseMemoryHistory(History("1e999")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("event 0: \"t_ns\" is 1e999; expected a number in [0, 2^64]")));
  EXPECT_THAT(ParseMemoryHistory(History("-1")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"t_ns\" is -1")));
  EXPECT_THAT(ParseMemoryHistory(History("1e20")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[0, 2^64]")));
  for (const char* t : {"5e-318", "0", "1e-300", "4.9e-324", "18446744073709551615"}) {
    SCOPED_TRACE(t);
    absl::StatusOr<MemoryHistoryData> h = ParseMemoryHistory(History(t));
    ASSERT_THAT(h.status(), IsOk());
    TimelineSvg svg = RenderTimelineSvg(*h);
    EXPECT_EQ(svg.panels, 1u);
    EXPECT_LT(svg.svg.size(), 20000u);
    EXPECT_THAT(svg.svg, HasSubstr("</svg>"));
  }
}

TEST(HistoryReaderTest, CountsAndIndexesAreIntegers) {
  EXPECT_THAT(ParseMemoryHistory(History("1", "\"dropped\":-1,")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"dropped\" is -1; expected a non-negative integer")));
  EXPECT_THAT(ParseMemoryHistory(History("1", "\"dropped\":1.5,")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"dropped\" is 1.5")));
  EXPECT_THAT(ParseMemoryHistory(History("1", "\"dropped\":\"x\",")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a number")));
  for (const char* index : {"1e999", "-1", "1.5", "1e2", "\"0\"", "18446744073709551616"}) {
    SCOPED_TRACE(index);
    EXPECT_THAT(
        ParseMemoryHistory(History("1", "", "\"a\"", index)),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("event 0: \"allocator\" is")));
  }
  EXPECT_THAT(ParseMemoryHistory(History("1", "", "\"a\"", "1")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("allocator index 1 but only 1 allocator name(s)")));
  EXPECT_THAT(ParseMemoryHistory(History("1", "\"limits\":{\"a\":-5},")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the limit of \"a\" is -5")));
}

TEST(HistoryReaderTest, StrictJson) {
  for (const char* bad : {
           "{\"x\":[+-.e],\"allocators\":[],\"events\":[]}",  // not a number
           "{\"x\":[1.],\"allocators\":[],\"events\":[]}",    // no fraction digits
           "{\"x\":[01],\"allocators\":[],\"events\":[]}",    // leading zero
           "{\"allocators\":[\"a\tb\"],\"events\":[]}",       // raw control character
           "{\"allocators\":[\"\\x\"],\"events\":[]}",        // bad escape
           "{\"allocators\":[\"\\u12\"],\"events\":[]}",      // short \u
           "{\"allocators\":[\"\\ud800\"],\"events\":[]}",    // lone surrogate
           "{\"allocators\":[],\"events\":[]} x",             // trailing text
           "{\"allocators\":[],\"events\":[],}",              // trailing comma
           "{\"x\":[tru],\"allocators\":[],\"events\":[]}",   // bad literal
           "{\"allocators\":[],\"events\":[",                 // truncated
           "\v{\"allocators\":[],\"events\":[]}",             // not JSON whitespace
       }) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(ParseMemoryHistory(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  HasSubstr("malformed JSON at offset")));
  }
  std::string deep = "{\"x\":" + std::string(100, '[') + std::string(100, ']') +
                     ",\"allocators\":[],\"events\":[]}";
  EXPECT_THAT(ParseMemoryHistory(deep),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested too deeply")));
  EXPECT_THAT(ParseMemoryHistory("{\"allocators\":[]}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("needs \"allocators\" and \"events\"")));
  // \u escapes decode to UTF-8, surrogate pairs included.
  absl::StatusOr<MemoryHistoryData> h =
      ParseMemoryHistory(History("1", "", "\"\\u00e9\\ud83d\\ude00\\/\""));
  ASSERT_THAT(h.status(), IsOk());
  EXPECT_EQ(h->series[0].name, "\xC3\xA9\xF0\x9F\x98\x80/");
}

// A NUL (or any control character, or invalid UTF-8) in a name made invalid XML.
TEST(HistoryReaderTest, NamesBecomeValidXml) {
  absl::StatusOr<MemoryHistoryData> h =
      ParseMemoryHistory(History("1", "", "\"a\\u0000b\\u001b<&>\\\"'\""));
  ASSERT_THAT(h.status(), IsOk());
  TimelineSvg svg = RenderTimelineSvg(*h);
  EXPECT_EQ(svg.svg.find('\0'), std::string::npos);
  EXPECT_EQ(svg.svg.find('\x1b'), std::string::npos);
  EXPECT_THAT(svg.svg, HasSubstr("a\xEF\xBF\xBD"
                                 "b\xEF\xBF\xBD&lt;&amp;&gt;&quot;&apos;"));
  EXPECT_EQ(XmlEscape("\xC3\xA9\xFF\xC0\xAF\xED\xA0\x80x"),
            "\xC3\xA9\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDx");
  EXPECT_EQ(XmlEscape("abcdef", 3), "abc...");
}

// 20 000 names in an 80 KB file made a 44 MB SVG: panels are capped, the rest counted.
TEST(HistoryReaderTest, ManyAllocatorsStayBounded) {
  std::string names, events;
  for (int i = 0; i < 20000; ++i) {
    absl::StrAppend(&names, i ? "," : "", "\"n", i, "\"");
    absl::StrAppend(&events, i ? "," : "", "{\"t_ns\":", i * 1000, ",\"allocator\":", i,
                    ",\"in_use\":", i, ",\"reserved\":", i, "}");
  }
  absl::StatusOr<MemoryHistoryData> h =
      ParseMemoryHistory(absl::StrCat("{\"allocators\":[", names, "],\"events\":[", events, "]}"));
  ASSERT_THAT(h.status(), IsOk());
  TimelineSvg svg = RenderTimelineSvg(*h);
  EXPECT_EQ(svg.panels, kMaxTimelinePanels);
  EXPECT_EQ(svg.left_out, 20000 - kMaxTimelinePanels);
  EXPECT_LT(svg.svg.size(), 1u << 20);
  EXPECT_THAT(svg.svg, HasSubstr("19936 more allocator(s) with events not drawn (at most 64 "
                                 "panels)"));
  // Only names, no events: nothing drawn, said so.
  absl::StatusOr<MemoryHistoryData> empty =
      ParseMemoryHistory(absl::StrCat("{\"allocators\":[", names, "],\"events\":[]}"));
  ASSERT_THAT(empty.status(), IsOk());
  TimelineSvg none = RenderTimelineSvg(*empty);
  EXPECT_EQ(none.panels, 0u);
  EXPECT_THAT(none.svg, HasSubstr("no events to draw"));
  EXPECT_LT(none.svg.size(), 4096u);
}

// Fragmentation (events with "largest_free") has an axis of its own on the right, 0 to 1, and
// the legend a row of its own: a long device name ran into the legend beside it, and the
// fragmentation line, drawn against the bytes axis, read as bytes.
TEST(HistoryReaderTest, FragmentationHasItsOwnAxisAndTheLegendItsOwnRow) {
  const std::string name(120, 'n');
  absl::StatusOr<MemoryHistoryData> h = ParseMemoryHistory(absl::StrCat(
      "{\"limits\":{\"", name, "\":4096},\"allocators\":[\"", name,
      "\"],\"events\":[{\"t_ns\":1000,\"allocator\":0,\"in_use\":1024,\"reserved\":3072,"
      "\"largest_free\":512},{\"t_ns\":2000,\"allocator\":0,\"in_use\":0,\"reserved\":3072,"
      "\"largest_free\":3072}]}"));
  ASSERT_THAT(h.status(), IsOk());
  ASSERT_EQ(h->series.size(), 1u);
  EXPECT_DOUBLE_EQ(h->series[0].points[0].fragmentation, 0.75);  // 1 - 512 / (3072 - 1024)
  const std::string svg = RenderTimelineSvg(*h).svg;
  EXPECT_THAT(svg, HasSubstr(">fragmentation</text>"));  // the right axis's title
  for (const char* tick :
       {">0</text>", ">0.25</text>", ">0.5</text>", ">0.75</text>", ">1</text>"}) {
    EXPECT_THAT(svg, HasSubstr(tick));
  }
  EXPECT_THAT(svg, HasSubstr("fragmentation (right axis)"));
  // The name's baseline is above the legend's (text y of the name vs of "in use").
  auto y_of = [&](const std::string& text) {
    const size_t at = svg.find(">" + text + "</text>");
    EXPECT_NE(at, std::string::npos) << text;
    const size_t y = svg.rfind(" y=\"", at);
    return std::stod(svg.substr(y + 4));
  };
  EXPECT_LE(y_of(name), y_of("in use") - 14);
  // Without "largest_free" there is no fragmentation line and no right axis.
  absl::StatusOr<MemoryHistoryData> plain = ParseMemoryHistory(History("1"));
  ASSERT_THAT(plain.status(), IsOk());
  EXPECT_THAT(RenderTimelineSvg(*plain).svg, Not(HasSubstr("fragmentation")));
}

// The time axis starts at a round time before the first event when that comes after a tenth of
// the run (a replay's history begins while its trace is read: 80 % of the plot was empty), and
// at 0 otherwise; never where the span is too small for the magnitude.
TEST(HistoryReaderTest, TimeAxisStartsNearTheFirstEvent) {
  auto svg_of = [](const std::string& t1, const std::string& t2) {
    absl::StatusOr<MemoryHistoryData> h = ParseMemoryHistory(
        absl::StrCat("{\"allocators\":[\"a\"],\"events\":[{\"t_ns\":", t1,
                     ",\"allocator\":0,\"in_use\":1,\"reserved\":2},{\"t_ns\":", t2,
                     ",\"allocator\":0,\"in_use\":0,\"reserved\":2}]}"));
    EXPECT_THAT(h.status(), IsOk());
    return h.ok() ? RenderTimelineSvg(*h).svg : std::string();
  };
  const std::string late = svg_of("9050000", "10000000");  // 9.05 .. 10 ms
  EXPECT_THAT(late, HasSubstr(">9</text>"));
  EXPECT_THAT(late, HasSubstr(">10</text>"));
  EXPECT_THAT(late, Not(HasSubstr(">0</text>")));          // no tick at 0 (the y axis reads "0 B")
  const std::string early = svg_of("500000", "10000000");  // 0.5 .. 10 ms
  EXPECT_THAT(early, HasSubstr(">0</text>"));
  // 1.8e10 ms apart by 1 ns: the axis keeps 0 and every coordinate is a number.
  const std::string tiny = svg_of("18000000000000000000", "18000000000000000001");
  EXPECT_THAT(tiny, HasSubstr(">0</text>"));
  EXPECT_THAT(tiny, Not(HasSubstr("nan")));
  EXPECT_THAT(tiny, Not(HasSubstr("inf")));
}

// Many events of one allocator, in any order: points stay bounded by the plot's width.
TEST(HistoryReaderTest, ManyEventsStayBounded) {
  std::string events;
  for (int i = 0; i < 100000; ++i) {
    absl::StrAppend(&events, i ? "," : "", "{\"t_ns\":", (i * 7919) % 100000,
                    ",\"allocator\":0,\"in_use\":", i % 97, ",\"reserved\":", i % 101, "}");
  }
  absl::StatusOr<MemoryHistoryData> h =
      ParseMemoryHistory(absl::StrCat("{\"allocators\":[\"a\"],\"events\":[", events, "]}"));
  ASSERT_THAT(h.status(), IsOk());
  EXPECT_LT(RenderTimelineSvg(*h).svg.size(), 200000u);
}

}  // namespace
}  // namespace vgpu_info
