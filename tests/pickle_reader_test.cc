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

// The values both samples below hold: 'a': [1, -2, 300, 2**40, -(2**63)] and 'b': (1.5, True,
// None, 'é', x); returns b's last item (x), or null after a failure.
const PickleValue* ExpectSampleValues(const PickleValue& root) {
  const PickleValue* a = root.Get("a");
  if (a == nullptr || a->kind != Kind::kList || a->items.size() != 5) {
    ADD_FAILURE() << "'a' is not a list of 5";
    return nullptr;
  }
  EXPECT_EQ(a->items[0]->i, 1);
  EXPECT_EQ(a->items[1]->i, -2);
  EXPECT_EQ(a->items[2]->i, 300);
  EXPECT_EQ(a->items[3]->i, int64_t{1} << 40);
  EXPECT_EQ(a->items[4]->i, INT64_MIN);
  const PickleValue* b = root.Get("b");
  if (b == nullptr || b->kind != Kind::kTuple || b->items.size() != 5) {
    ADD_FAILURE() << "'b' is not a tuple of 5";
    return nullptr;
  }
  EXPECT_EQ(b->items[0]->f, 1.5);
  EXPECT_EQ(b->items[1]->kind, Kind::kBool);
  EXPECT_TRUE(b->items[1]->b);
  EXPECT_EQ(b->items[2]->kind, Kind::kNone);
  EXPECT_EQ(b->items[3]->s, "\xc3\xa9");  // UTF-8 (a Latin-1 byte in protocol 0)
  return b->items[4];
}

TEST(PickleReaderTest, ReadsProtocol4PlainData) {
  auto doc = ParsePickle(kProto4, "t.pickle");
  ASSERT_THAT(doc, IsOk());
  const PickleValue& root = (*doc)->root();
  ASSERT_TRUE(root.is_dict());
  ASSERT_EQ(root.entries.size(), 2u);
  const PickleValue* x = ExpectSampleValues(root);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->kind, Kind::kBytes);
  EXPECT_EQ(x->s, std::string(1, '\0'));
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

// Protocols 0 and 1 (no PROTO; text INT / LONG / FLOAT / UNICODE / PUT / GET): what
// pickle.dumps writes for {'a': [1, -2, 300, 2**40, -(2**63)], 'b': (1.5, True, None, 'é',
// '€\\\n'), 'c': False} with protocol 0, then 1.
TEST(PickleReaderTest, ReadsProtocols0And1) {
  const std::string p0 = PICKLE(
      "(dp0\nVa\np1\n(lp2\nI1\naI-2\naI300\naL1099511627776L\naL-9223372036854775808L\nasVb\n"
      "p3\n(F1.5\nI01\nNV\xe9\np4\nV\\u20ac\\u005c\\u000a\np5\ntp6\nsVc\np7\nI00\ns.");
  const std::string p1 = PICKLE(
      "\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x28\x4b\x01\x4a\xfe\xff\xff"
      "\xff\x4d\x2c\x01\x4c\x31\x30\x39\x39\x35\x31\x31\x36\x32\x37\x37\x37\x36\x4c\x0a\x4c\x2d"
      "\x39\x32\x32\x33\x33\x37\x32\x30\x33\x36\x38\x35\x34\x37\x37\x35\x38\x30\x38\x4c\x0a\x65"
      "\x58\x01\x00\x00\x00\x62\x71\x03\x28\x47\x3f\xf8\x00\x00\x00\x00\x00\x00\x49\x30\x31\x0a"
      "\x4e\x58\x02\x00\x00\x00\xc3\xa9\x71\x04\x58\x05\x00\x00\x00\xe2\x82\xac\x5c\x0a\x71\x05"
      "\x74\x71\x06\x58\x01\x00\x00\x00\x63\x71\x07\x49\x30\x30\x0a\x75\x2e");
  for (const std::string* p : {&p0, &p1}) {
    SCOPED_TRACE(p == &p0 ? "protocol 0" : "protocol 1");
    auto doc = ParsePickle(*p, "t.pickle");
    ASSERT_THAT(doc, IsOk());
    const PickleValue& root = (*doc)->root();
    ASSERT_TRUE(root.is_dict());
    const PickleValue* x = ExpectSampleValues(root);
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(x->s, "\xe2\x82\xac\\\n");  // \\u escapes in protocol 0
    const PickleValue* c = root.Get("c");
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->kind, Kind::kBool);
    EXPECT_FALSE(c->b);
  }
  // Python 2's str (STRING, quoted with escapes; SHORT_BINSTRING) is read as str.
  auto s = ParsePickle(PICKLE("(S'a\\'b\\n\\x41'\nU\x02hit."));
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ((*s)->root().items[0]->s, "a'b\nA");
  EXPECT_EQ((*s)->root().items[1]->s, "hi");
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
      {PICKLE("\x80\x06N."), "opcode 0x80 (PROTO): protocol 6 (supported: 0 to 5)"},
      {PICKLE("N\x80\x02."), "offset 1: opcode 0x80 (PROTO): PROTO after the start"},
      {PICKLE("I12"), "offset 0: opcode 0x49 'I' (INT): no newline ends its argument"},
      {PICKLE("I99999999999999999999\n."), "\"99999999999999999999\" does not fit in 64 bits"},
      {PICKLE("L-99999999999999999999L\n."), "(LONG): integer \"-99999999999999999999\" does"},
      {PICKLE("I0x10\n."), "(INT): integer \"0x10\" is not a decimal number"},
      {PICKLE("F1.5x\n."), "(FLOAT): \"1.5x\" is not a float"},
      {PICKLE("Sabc\n."), "(STRING): argument \"abc\" is not quoted"},
      {PICKLE("S'a\\q'\n."), "(STRING): bad escape in"},
      {PICKLE("V\\u12\n."), "(UNICODE): truncated \\u or \\U escape"},
      {PICKLE("V\\u12zz\n."), "(UNICODE): bad escape \"\\\\u12zz\""},
      {PICKLE("V\\U00110000\n."), "code point U+110000 is beyond U+10FFFF"},
      {PICKLE("Ng7\n."), "offset 1: opcode 0x67 'g' (GET): memo entry 7 was never stored"},
      {PICKLE("Np-1\n."), "opcode 0x70 'p' (PUT): memo index -1 is negative"},
      {PICKLE("T\xff\xff\xff\xff."), "(BINSTRING): negative length 4294967295"},
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
