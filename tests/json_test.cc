#include "vgpu/runtime/json.h"

#include <limits>

#include "gtest/gtest.h"

namespace vgpu {
namespace {

TEST(JsonWriter, NestedContainersAndCommas) {
  JsonWriter w;
  w.BeginObject().Field("a", 1).Field("b", "x").Key("c").BeginArray();
  w.Int(1).Uint(2).BeginObject().Field("d", true).EndObject().Null().EndArray();
  w.Field("e", 0.5).EndObject();
  EXPECT_EQ(w.str(), R"({"a":1,"b":"x","c":[1,2,{"d":true},null],"e":0.5})");
}

TEST(JsonWriter, EscapesStringsAndNonFinite) {
  EXPECT_EQ(JsonWriter::Escape("a\"b\\c\n\t\x01"), R"("a\"b\\c\n\t\u0001")");
  JsonWriter w;
  w.BeginArray().Double(std::numeric_limits<double>::infinity()).Double(1e-7).EndArray();
  EXPECT_EQ(w.str(), "[null,1e-07]");
}

}  // namespace
}  // namespace vgpu
