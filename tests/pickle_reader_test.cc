// The pickle reader (runtime/pickle_reader.h): the values pickle.dumps writes for plain data,
// shared memo entries, and hostile input refused with the offset and opcode named.
#include "vgpu/runtime/pickle_reader.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;
using Kind = PickleValue::Kind;

std::string Bytes(const char* s, size_t n) { return std::string(s, n); }
#define PICKLE(lit) Bytes(lit, sizeof(lit) - 1)

// pickle.dumps({'a': [1, -2, 300, 2**40, -(2**63)], 'b': (1.5, True, None, 'é', b'\x00')}, 4)
const std::string kProto4 = PICKLE(
    "\x80\x04\x95\x44\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61\x94\x5d\x94\x28\x4b\x01"
    "\x4a\xfe\xff\xff\xff\x4d\x2c\x01\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x08\x00\x00\x00\x00\x00"
    "\x00\x00\x80\x65\x8c\x01\x62\x94\x28\x47\x3f\xf8\x00\x00\x00\x00\x00\x00\x88\x4e\x8c\x02\xc3"
    "\xa9\x94\x43\x01\x00\x94\x74\x94\x75\x2e");

TEST(PickleReaderTest, ReadsProtocol4PlainData) {
  auto doc = ParsePickle(kProto4, "t.pickle");
  ASSERT_THAT(doc, IsOk());
  const PickleValue& root = (*doc)->root();
  ASSERT_TRUE(root.is_dict());
  ASSERT_EQ(root.entries.size(), 2u);
  const PickleValue* a = root.Get("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->kind, Kind::kList);
  ASSERT_EQ(a->items.size(), 5u);
  EXPECT_EQ(a->items[0]->i, 1);
  EXPECT_EQ(a->items[1]->i, -2);
  EXPECT_EQ(a->items[2]->i, 300);
  EXPECT_EQ(a->items[3]->i, int64_t{1} << 40);
  EXPECT_EQ(a->items[4]->i, INT64_MIN);
  const PickleValue* b = root.Get("b");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->kind, Kind::kTuple);
  ASSERT_EQ(b->items.size(), 5u);
  EXPECT_EQ(b->items[0]->f, 1.5);
  EXPECT_EQ(b->items[1]->kind, Kind::kBool);
  EXPECT_TRUE(b->items[1]->b);
  EXPECT_EQ(b->items[2]->kind, Kind::kNone);
  EXPECT_EQ(b->items[3]->s, "\xc3\xa9");
  EXPECT_EQ(b->items[4]->kind, Kind::kBytes);
  EXPECT_EQ(b->items[4]->s, std::string(1, '\0'));
  EXPECT_EQ(root.Get("missing"), nullptr);
}

TEST(PickleReaderTest, ReadsProtocol2) {
  // pickle.dumps({'a': [1, -2, 300, 2**40, -(2**63)], 'b': (1.5, True, None, 'é')}, 2)
  const std::string p2 = PICKLE(
      "\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x28\x4b\x01\x4a\xfe"
      "\xff\xff\xff\x4d\x2c\x01\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x08\x00\x00\x00\x00\x00\x00"
      "\x00\x80\x65\x58\x01\x00\x00\x00\x62\x71\x03\x28\x47\x3f\xf8\x00\x00\x00\x00\x00\x00\x88"
      "\x4e\x58\x02\x00\x00\x00\xc3\xa9\x71\x04\x74\x71\x05\x75\x2e");
  auto doc = ParsePickle(p2);
  ASSERT_THAT(doc, IsOk());
  EXPECT_EQ((*doc)->root().Get("a")->items[3]->i, int64_t{1} << 40);
  EXPECT_EQ((*doc)->root().Get("b")->items[3]->s, "\xc3\xa9");
}

TEST(PickleReaderTest, MemoEntriesAreShared) {
  // x = [1]; pickle.dumps([x, x], 4)
  const std::string p = PICKLE(
      "\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00\x5d\x94\x28\x5d\x94\x4b\x01\x61\x68\x01\x65"
      "\x2e");
  auto doc = ParsePickle(p);
  ASSERT_THAT(doc, IsOk());
  const PickleValue& root = (*doc)->root();
  ASSERT_EQ(root.items.size(), 2u);
  EXPECT_EQ(root.items[0], root.items[1]);
  EXPECT_EQ(root.items[0]->items[0]->i, 1);
}

TEST(PickleReaderTest, RefusesObjectsAndCode) {
  // pickle.dumps(complex(1, 2), 4): STACK_GLOBAL + REDUCE.
  const std::string p = PICKLE(
      "\x80\x04\x95\x2e\x00\x00\x00\x00\x00\x00\x00\x8c\x08\x62\x75\x69\x6c\x74\x69\x6e\x73\x94"
      "\x8c\x07\x63\x6f\x6d\x70\x6c\x65\x78\x94\x93\x94\x47\x3f\xf0\x00\x00\x00\x00\x00\x00\x47"
      "\x40\x00\x00\x00\x00\x00\x00\x00\x86\x94\x52\x94\x2e");
  EXPECT_THAT(ParsePickle(p, "t.pickle").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("t.pickle: pickle at offset 32: opcode 0x93 (STACK_GLOBAL)"),
                             HasSubstr("is not supported"))));
  EXPECT_THAT(ParsePickle(PICKLE("\x80\x02\x63os\nsystem\n.")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("offset 2: opcode 0x63 'c' (GLOBAL)")));
}

TEST(PickleReaderTest, HostileInputNamesOffsetAndOpcode) {
  struct Case {
    std::string data;
    std::string message;
  };
  const Case cases[] = {
      {"", "offset 0: empty input"},
      {PICKLE("(dp0\n."), "offset 0: starts with byte 0x28, not PROTO 0x80"},
      {PICKLE("\x80\x01N."), "opcode 0x80 (PROTO): protocol 1 (supported: 2 to 5)"},
      {PICKLE("\x80\x06N."), "protocol 6"},
      {kProto4.substr(0, 40), "truncated pickle"},
      {kProto4.substr(0, kProto4.size() - 1), "offset 2: opcode 0x95 (FRAME): frame of 68 bytes"},
      {PICKLE("\x80\x02N"), "offset 3: input ends before STOP (truncated pickle)"},
      {PICKLE("\x80\x04X\xff\xff\xff\x7f"), "offset 2: opcode 0x58 'X' (BINUNICODE): needs"},
      {PICKLE("\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N."), "frame of 255 bytes"},
      {PICKLE("\x80\x04h\x05."), "offset 2: opcode 0x68 'h' (BINGET): memo entry 5 was never"},
      {PICKLE("\x80\x04N.N"), "offset 4: 1 bytes after STOP"},
      {PICKLE("\x80\x04NN."), "STOP with 2 values"},
      {PICKLE("\x80\x04."), "STOP with 0 values"},
      {PICKLE("\x80\x04}K\x01"
              "a."),
       "opcode 0x61 'a' (APPEND): adds items to a dict, not a list"},
      {PICKLE("\x80\x04]K\x01K\x02s."), "(SETITEM): adds items to a list, not a dict"},
      {PICKLE("\x80\x04}(K\x01u."), "(SETITEMS): odd number of keys and values"},
      {PICKLE("\x80\x04"
              "e."),
       "(APPENDS): no MARK to pop to"},
      {PICKLE("\x80\x04\x85."), "(TUPLE1): needs 1 values above the last MARK, has 0"},
      {PICKLE("\x80\x04\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40."),
       "(LONG1): integer of 9 bytes does not fit in 64 bits"},
      {PICKLE("\x80\x04\xff."), "opcode 0xff (unknown) is not a pickle opcode"},
      {PICKLE("\x80\x04"
              "0."),
       "(POP): needs a value"},
      {PICKLE("\x80\x04N\x80\x04."), "(PROTO): PROTO after the start"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    EXPECT_THAT(ParsePickle(c.data, "h.pickle").status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("h.pickle: pickle at offset"), HasSubstr(c.message))));
  }
}

TEST(PickleReaderTest, LimitsAreEnforced) {
  PickleLimits few_values;
  few_values.max_values = 3;
  EXPECT_THAT(ParsePickle(PICKLE("\x80\x04(NNNNt."), "l", few_values).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("offset 6: opcode 0x4e 'N' (NONE): more than 3 values")));
  PickleLimits few_marks;
  few_marks.max_marks = 2;
  EXPECT_THAT(ParsePickle(PICKLE("\x80\x04(((N"), "l", few_marks).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("offset 4: opcode 0x28 '(' (MARK): more than 2 MARKs open")));
  PickleLimits few_memo;
  few_memo.max_memo = 1;
  EXPECT_THAT(ParsePickle(PICKLE("\x80\x04N\x94N\x94."), "l", few_memo).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than 1 memo entries")));
}

// A list that contains itself is stored without recursion or leaks.
TEST(PickleReaderTest, SelfReferenceIsRepresentable) {
  // x = []; x.append(x); pickle.dumps(x, 4) -> ] MEMOIZE h\x00 a .
  auto doc =
      ParsePickle(PICKLE("\x80\x04]\x94h\x00"
                         "a."));
  ASSERT_THAT(doc, IsOk());
  EXPECT_EQ((*doc)->root().items[0], &(*doc)->root());
}

}  // namespace
}  // namespace vgpu
