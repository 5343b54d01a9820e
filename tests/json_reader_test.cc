// The strict JSON reader (runtime/json_reader.h): every RFC 8259 form, the escapes and
// surrogate pairs, and each refusal with its byte offset and what was expected.
#include "vgpu/runtime/json_reader.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

JsonValue Parse(const std::string& text) {
  absl::StatusOr<JsonValue> v = ParseJson(text);
  EXPECT_THAT(v, IsOk()) << text;
  return v.ok() ? *std::move(v) : JsonValue();
}

auto Invalid(const std::string& fragment) {
  return StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(fragment));
}

TEST(JsonReader, Scalars) {
  EXPECT_TRUE(Parse("null").is_null());
  EXPECT_TRUE(Parse(" true ").bool_value());
  EXPECT_TRUE(Parse("false").is_bool());
  EXPECT_FALSE(Parse("false").bool_value());
  EXPECT_EQ(Parse("\"abc\"").string_value(), "abc");
  EXPECT_EQ(Parse("\t\r\n 12 \n").number_value(), 12);
  EXPECT_EQ(Parse("-0.5e2").number_value(), -50);
  EXPECT_EQ(Parse("1E+2").number_value(), 100);
  EXPECT_EQ(Parse("0").int_value(), 0);
  EXPECT_EQ(Parse("-7").int_value(), -7);
  EXPECT_EQ(Parse("1.0").int_value(), std::nullopt);
  EXPECT_EQ(Parse("1e2").int_value(), std::nullopt);
  EXPECT_EQ(Parse("99999999999999999999").int_value(), std::nullopt);  // over int64
  EXPECT_EQ(Parse("1.50").text(), "1.50");
}

TEST(JsonReader, ContainersKeepOrderAndOffsets) {
  JsonValue v = Parse(R"({"b": [1, {"x": null}], "a": "s", "c": {}})");
  ASSERT_TRUE(v.is_object());
  EXPECT_THAT(v.keys(), ElementsAre("b", "a", "c"));
  ASSERT_NE(v.Find("b"), nullptr);
  EXPECT_TRUE(v.Find("b")->is_array());
  EXPECT_EQ(v.Find("b")->size(), 2u);
  EXPECT_EQ(v.Find("b")->offset(), 6u);
  EXPECT_TRUE(v.Find("b")->elements()[1].Find("x")->is_null());
  EXPECT_EQ(v.Find("a")->string_value(), "s");
  EXPECT_EQ(v.Find("c")->size(), 0u);
  EXPECT_EQ(v.Find("missing"), nullptr);
  EXPECT_EQ(v.Find("a")->Find("a"), nullptr);  // not an object
  EXPECT_EQ(Parse("[]").size(), 0u);
  EXPECT_EQ(Parse("[[[]]]").elements()[0].elements()[0].type(), JsonValue::Type::kArray);
}

TEST(JsonReader, Escapes) {
  EXPECT_EQ(Parse(R"("\" \\ \/ \b \f \n \r \t")").string_value(), "\" \\ / \b \f \n \r \t");
  EXPECT_EQ(Parse(R"("\u0041\u00e9\u20AC")").string_value(), "A\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(Parse(R"("\u0000")").string_value(), std::string(1, '\0'));
  // U+1F600 as a surrogate pair; raw UTF-8 passes through.
  EXPECT_EQ(Parse(R"("\uD83D\uDE00")").string_value(), "\xF0\x9F\x98\x80");
  EXPECT_EQ(Parse("\"\xF0\x9F\x98\x80 \xC3\xA9\"").string_value(), "\xF0\x9F\x98\x80 \xC3\xA9");
}

TEST(JsonReader, BadSurrogates) {
  EXPECT_THAT(ParseJson(R"("\uDE00")"), Invalid("low surrogate \\uDE00 without a high"));
  EXPECT_THAT(ParseJson(R"("\uD83D")"), Invalid("must be followed by a low surrogate"));
  EXPECT_THAT(ParseJson(R"("\uD83Dx")"), Invalid("must be followed by a low surrogate"));
  EXPECT_THAT(ParseJson(R"("\uD83D\u0041")"),
              AllOf(Invalid("at byte 7"), Invalid("found \\u0041")));
  EXPECT_THAT(ParseJson(R"("\u12G4")"), Invalid("expected four hex digits after \\u"));
}

TEST(JsonReader, ErrorsNameTheOffsetAndWhatWasExpected) {
  EXPECT_THAT(ParseJson(""), Invalid("at byte 0 (line 1, column 1): expected a value"));
  EXPECT_THAT(ParseJson("   "), Invalid("found the end of the text"));
  EXPECT_THAT(ParseJson(R"({"a" 1})"), Invalid("at byte 5 (line 1, column 6): expected ':'"));
  EXPECT_THAT(ParseJson(R"({"a": 1,})"),
              Invalid("at byte 8 (line 1, column 9): expected a string key, found \"}\""));
  EXPECT_THAT(ParseJson(R"({a: 1})"), Invalid("expected a string key or '}'"));
  EXPECT_THAT(ParseJson("[1 2]"), Invalid("at byte 3 (line 1, column 4): expected ',' or ']'"));
  EXPECT_THAT(ParseJson("[1,]"), Invalid("at byte 3 (line 1, column 4): expected a value"));
  EXPECT_THAT(ParseJson(R"({"a": 1 "b": 2})"), Invalid("expected ',' or '}'"));
  EXPECT_THAT(ParseJson("{\n  \"a\": tru\n}"),
              Invalid("at byte 9 (line 2, column 8): expected a value (true?)"));
  EXPECT_THAT(ParseJson("nul"), Invalid("expected a value (null?)"));
  EXPECT_THAT(ParseJson("1 2"),
              Invalid("at byte 2 (line 1, column 3): expected the end of the text"));
  EXPECT_THAT(ParseJson("{} x"), Invalid("expected the end of the text after the value"));
  EXPECT_THAT(ParseJson("'a'"), Invalid("expected a value (an object, array, string"));
  EXPECT_THAT(ParseJson("\"abc"),
              Invalid("at byte 4 (line 1, column 5): expected '\"' to end the string"));
}

TEST(JsonReader, StrictNumbers) {
  EXPECT_THAT(ParseJson("01"), Invalid("leading zero"));
  EXPECT_THAT(ParseJson("-"), Invalid("at byte 1 (line 1, column 2): expected a digit"));
  EXPECT_THAT(ParseJson("+1"), Invalid("expected a value"));
  EXPECT_THAT(ParseJson(".5"), Invalid("expected a value"));
  EXPECT_THAT(ParseJson("1."), Invalid("expected a digit after '.'"));
  EXPECT_THAT(ParseJson("1e"), Invalid("expected a digit in the exponent"));
  EXPECT_THAT(ParseJson("1e+"), Invalid("expected a digit in the exponent"));
  EXPECT_THAT(ParseJson("0x10"), Invalid("expected the end of the text"));
  EXPECT_THAT(ParseJson("1e999"), Invalid("number \"1e999\" is out of range"));
  EXPECT_THAT(ParseJson("NaN"), Invalid("expected a value"));
  EXPECT_THAT(ParseJson("Infinity"), Invalid("expected a value"));
  EXPECT_THAT(ParseJson("[-Infinity]"), Invalid("at byte 2 (line 1, column 3): expected a digit"));
}

TEST(JsonReader, StringsRefuseControlCharactersBadEscapesAndBadUtf8) {
  EXPECT_THAT(ParseJson("\"a\nb\""), Invalid("control character \"\\n\" in a string"));
  EXPECT_THAT(ParseJson(std::string("\"a\0b\"", 5)), Invalid("control character"));
  EXPECT_THAT(ParseJson(R"("\x41")"), Invalid("unknown escape \"\\\\x\""));
  EXPECT_THAT(ParseJson(R"("\)"), Invalid("expected an escape after '\\'"));
  EXPECT_THAT(ParseJson("\"\xC3\""), Invalid("at byte 1 (line 1, column 2): invalid UTF-8"));
  EXPECT_THAT(ParseJson("\"\xC0\xAF\""), Invalid("invalid UTF-8"));          // overlong '/'
  EXPECT_THAT(ParseJson("\"\xED\xA0\x80\""), Invalid("invalid UTF-8"));      // a surrogate
  EXPECT_THAT(ParseJson("\"\xF4\x90\x80\x80\""), Invalid("invalid UTF-8"));  // over U+10FFFF
  EXPECT_THAT(ParseJson("\"\xFF\""), Invalid("invalid UTF-8"));
  EXPECT_THAT(ParseJson("\xEF\xBB\xBF{}"), Invalid("byte-order mark"));
  EXPECT_THAT(ParseJson("\xC3\xA9"), Invalid("expected a value"));  // non-ASCII outside a string
}

TEST(JsonReader, DuplicateKeysAreAnError) {
  EXPECT_THAT(
      ParseJson(R"({"a": 1, "b": 2, "a": 3})"),
      Invalid("at byte 17 (line 1, column 18): duplicate object key \"a\" (first at byte 1)"));
  // Keys are compared after decoding escapes.
  EXPECT_THAT(ParseJson(R"({"a": 1, "\u0061": 2})"), Invalid("duplicate object key \"a\""));
  // The same key in different objects is fine.
  EXPECT_THAT(ParseJson(R"({"a": {"a": 1}, "b": {"a": 2}})"), IsOk());
}

TEST(JsonReader, LimitsOnDepthSizeAndValues) {
  std::string deep_ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_THAT(ParseJson(deep_ok), IsOk());
  std::string too_deep = std::string(65, '[') + std::string(65, ']');
  EXPECT_THAT(
      ParseJson(too_deep),
      Invalid("at byte 64 (line 1, column 65): arrays and objects nested deeper than 64 levels"));
  // A hostile nesting a million levels deep fails fast without recursing.
  std::string hostile(1 << 20, '[');
  EXPECT_THAT(ParseJson(hostile), Invalid("nested deeper than 64 levels"));
  std::string objects;
  for (int i = 0; i < 70; ++i) objects += "{\"a\":";
  EXPECT_THAT(ParseJson(objects), Invalid("nested deeper than 64 levels"));

  JsonReadOptions small;
  small.max_bytes = 10;
  EXPECT_THAT(ParseJson("[1,2,3,4,5]", small), Invalid("11 bytes, over the limit of 10 bytes"));
  EXPECT_THAT(ParseJson(std::string((1 << 20) + 1, ' ')),
              Invalid("1048577 bytes, over the limit of 1048576 bytes"));
  JsonReadOptions few;
  few.max_values = 3;
  EXPECT_THAT(ParseJson("[1,2]", few), IsOk());
  EXPECT_THAT(ParseJson("[1,2,3]", few), Invalid("more than 3 values"));
  JsonReadOptions shallow;
  shallow.max_depth = 1;
  EXPECT_THAT(ParseJson("[1]", shallow), IsOk());
  EXPECT_THAT(ParseJson("[[1]]", shallow), Invalid("nested deeper than 1 levels"));
}

TEST(JsonReader, MessagesQuoteHostileBytesSafely) {
  absl::StatusOr<JsonValue> v = ParseJson("[\x01]");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("found \"\\x01\""));
  std::string long_key =
      "{\"" + std::string(10000, 'k') + "\":1,\"" + std::string(10000, 'k') + "\":2}";
  absl::StatusOr<JsonValue> dup = ParseJson(long_key);
  ASSERT_FALSE(dup.ok());
  EXPECT_LT(dup.status().message().size(), 300u);
}

TEST(JsonReader, TypeNames) {
  EXPECT_EQ(JsonValue::TypeName(JsonValue::Type::kObject), "an object");
  EXPECT_EQ(Parse("[1]").type_name(), "an array");
  EXPECT_EQ(Parse("1").type_name(), "a number");
  EXPECT_EQ(Parse("\"\"").type_name(), "a string");
  EXPECT_EQ(Parse("true").type_name(), "a boolean");
  EXPECT_EQ(Parse("null").type_name(), "null");
}

}  // namespace
}  // namespace vgpu
