#include "vgpu/runtime/pickle_reader.h"

#include <cstring>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "vgpu/runtime/json_reader.h"
#include "vgpu/runtime/status.h"

namespace vgpu {

const PickleValue* PickleValue::Get(absl::string_view key) const {
  if (kind != Kind::kDict) return nullptr;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->first->kind == Kind::kString && it->first->s == key) return it->second;
  }
  return nullptr;
}

const char* PickleKindName(PickleValue::Kind kind) {
  switch (kind) {
    case PickleValue::Kind::kNone:
      return "None";
    case PickleValue::Kind::kBool:
      return "bool";
    case PickleValue::Kind::kInt:
      return "int";
    case PickleValue::Kind::kFloat:
      return "float";
    case PickleValue::Kind::kString:
      return "str";
    case PickleValue::Kind::kBytes:
      return "bytes";
    case PickleValue::Kind::kList:
      return "list";
    case PickleValue::Kind::kTuple:
      return "tuple";
    case PickleValue::Kind::kDict:
      return "dict";
  }
  return "?";
}

namespace {

// Names of the opcodes the reader knows of (supported or not), for messages.
const char* OpName(uint8_t op) {
  switch (op) {
    case 0x80:
      return "PROTO";
    case 0x95:
      return "FRAME";
    case '.':
      return "STOP";
    case '(':
      return "MARK";
    case '}':
      return "EMPTY_DICT";
    case ']':
      return "EMPTY_LIST";
    case ')':
      return "EMPTY_TUPLE";
    case 't':
      return "TUPLE";
    case 0x85:
      return "TUPLE1";
    case 0x86:
      return "TUPLE2";
    case 0x87:
      return "TUPLE3";
    case 'l':
      return "LIST";
    case 'd':
      return "DICT";
    case 'a':
      return "APPEND";
    case 'e':
      return "APPENDS";
    case 's':
      return "SETITEM";
    case 'u':
      return "SETITEMS";
    case 'X':
      return "BINUNICODE";
    case 0x8c:
      return "SHORT_BINUNICODE";
    case 0x8d:
      return "BINUNICODE8";
    case 'B':
      return "BINBYTES";
    case 'C':
      return "SHORT_BINBYTES";
    case 0x8e:
      return "BINBYTES8";
    case 0x96:
      return "BYTEARRAY8";
    case 'J':
      return "BININT";
    case 'K':
      return "BININT1";
    case 'M':
      return "BININT2";
    case 0x8a:
      return "LONG1";
    case 0x8b:
      return "LONG4";
    case 'G':
      return "BINFLOAT";
    case 0x88:
      return "NEWTRUE";
    case 0x89:
      return "NEWFALSE";
    case 'N':
      return "NONE";
    case 0x94:
      return "MEMOIZE";
    case 'q':
      return "BINPUT";
    case 'r':
      return "LONG_BINPUT";
    case 'h':
      return "BINGET";
    case 'j':
      return "LONG_BINGET";
    case '0':
      return "POP";
    case '1':
      return "POP_MARK";
    case '2':
      return "DUP";
    case 'c':
      return "GLOBAL";
    case 0x93:
      return "STACK_GLOBAL";
    case 'R':
      return "REDUCE";
    case 'b':
      return "BUILD";
    case 0x81:
      return "NEWOBJ";
    case 0x92:
      return "NEWOBJ_EX";
    case 'i':
      return "INST";
    case 'o':
      return "OBJ";
    case 'P':
      return "PERSID";
    case 'Q':
      return "BINPERSID";
    case 0x8f:
      return "EMPTY_SET";
    case 0x90:
      return "ADDITEMS";
    case 0x91:
      return "FROZENSET";
    case 0x97:
      return "NEXT_BUFFER";
    case 0x98:
      return "READONLY_BUFFER";
    case 0x82:
      return "EXT1";
    case 0x83:
      return "EXT2";
    case 0x84:
      return "EXT4";
    case 'I':
      return "INT";
    case 'L':
      return "LONG";
    case 'F':
      return "FLOAT";
    case 'S':
      return "STRING";
    case 'T':
      return "BINSTRING";
    case 'U':
      return "SHORT_BINSTRING";
    case 'V':
      return "UNICODE";
    case 'g':
      return "GET";
    case 'p':
      return "PUT";
    default:
      return nullptr;
  }
}

std::string DescribeOp(uint8_t op) {
  const char* name = OpName(op);
  std::string printable = op >= 0x20 && op < 0x7f ? absl::StrFormat(" '%c'", op) : "";
  return absl::StrFormat("opcode 0x%02x%s (%s)", op, printable, name ? name : "unknown");
}

}  // namespace

class PickleParser {
 public:
  PickleParser(absl::string_view data, absl::string_view source, const PickleLimits& limits)
      : data_(data), source_(source), limits_(limits), doc_(new PickleDocument) {}

  absl::StatusOr<std::unique_ptr<PickleDocument>> Run() {
    // Protocols 2-5 start with PROTO; 0 and 1 (Python's text and first binary formats) start
    // with their first opcode.
    if (data_.empty()) return Err(0, "empty input (no pickle opcode)");
    while (true) {
      if (pos_ >= data_.size()) return Err(pos_, "input ends before STOP (truncated pickle)");
      op_at_ = pos_;
      op_ = static_cast<uint8_t>(data_[pos_++]);
      VGPU_ASSIGN_OR_RETURN(bool stop, Step());
      if (stop) break;
    }
    if (pos_ != data_.size()) {
      return Err(pos_, absl::StrCat(data_.size() - pos_, " bytes after STOP"));
    }
    if (stack_.size() != 1 || !marks_.empty()) {
      return Err(op_at_, absl::StrCat("STOP with ", stack_.size(), " values and ", marks_.size(),
                                      " marks on the stack (expected one value)"));
    }
    doc_->root_ = stack_.back();
    return std::move(doc_);
  }

 private:
  absl::Status Err(uint64_t offset, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": pickle at offset ", offset, ": ", what));
  }
  // An error about the current opcode.
  absl::Status OpErr(absl::string_view what) const {
    return Err(op_at_, absl::StrCat(DescribeOp(op_), ": ", what));
  }

  absl::StatusOr<absl::string_view> Take(uint64_t n) {
    if (n > data_.size() - pos_) {
      return OpErr(absl::StrCat("needs ", n, " bytes but ", data_.size() - pos_,
                                " remain (truncated pickle)"));
    }
    absl::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  // Little-endian unsigned integer of `n` bytes.
  absl::StatusOr<uint64_t> Uint(int n) {
    VGPU_ASSIGN_OR_RETURN(absl::string_view b, Take(n));
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = (v << 8) | static_cast<uint8_t>(b[k]);
    return v;
  }

  absl::StatusOr<PickleValue*> New(PickleValue::Kind kind) {
    if (doc_->values_.size() >= limits_.max_values) {
      return OpErr(absl::StrCat("more than ", limits_.max_values, " values", limits_.values_note));
    }
    PickleValue* v = &doc_->values_.emplace_back();
    v->kind = kind;
    return v;
  }
  absl::Status Push(absl::StatusOr<PickleValue*> v) {
    if (!v.ok()) return v.status();
    stack_.push_back(*v);
    return absl::OkStatus();
  }
  absl::StatusOr<PickleValue*> Pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) {
      return OpErr("needs a value but the stack (above the last MARK) is empty");
    }
    PickleValue* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  absl::StatusOr<PickleValue*> Top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) {
      return OpErr("needs a value but the stack (above the last MARK) is empty");
    }
    return stack_.back();
  }
  // The values above the last MARK, which is removed (they stay on the stack; the caller pops).
  absl::StatusOr<size_t> PopMark() {
    if (marks_.empty()) return OpErr("no MARK to pop to");
    size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }
  absl::Status Memo(uint64_t index) {
    VGPU_ASSIGN_OR_RETURN(PickleValue * v, Top());
    if (!memo_.contains(index) && memo_.size() >= limits_.max_memo) {
      return OpErr(absl::StrCat("more than ", limits_.max_memo, " memo entries"));
    }
    memo_[index] = v;
    return absl::OkStatus();
  }
  absl::Status Get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return OpErr(absl::StrCat("memo entry ", index, " was never stored"));
    stack_.push_back(it->second);
    return absl::OkStatus();
  }
  absl::Status Int(int64_t v) {
    VGPU_ASSIGN_OR_RETURN(PickleValue * p, New(PickleValue::Kind::kInt));
    p->i = v;
    stack_.push_back(p);
    return absl::OkStatus();
  }
  absl::Status Bool(bool v) {
    VGPU_ASSIGN_OR_RETURN(PickleValue * p, New(PickleValue::Kind::kBool));
    p->b = v;
    stack_.push_back(p);
    return absl::OkStatus();
  }
  absl::Status Float(double v) {
    VGPU_ASSIGN_OR_RETURN(PickleValue * p, New(PickleValue::Kind::kFloat));
    p->f = v;
    stack_.push_back(p);
    return absl::OkStatus();
  }
  absl::Status String(std::string v) {
    VGPU_ASSIGN_OR_RETURN(PickleValue * p, New(PickleValue::Kind::kString));
    p->s = std::move(v);
    stack_.push_back(p);
    return absl::OkStatus();
  }
  absl::Status Text(PickleValue::Kind kind, uint64_t len) {
    VGPU_ASSIGN_OR_RETURN(absl::string_view b, Take(len));
    VGPU_ASSIGN_OR_RETURN(PickleValue * p, New(kind));
    p->s = std::string(b);
    stack_.push_back(p);
    return absl::OkStatus();
  }
  // LONG1/LONG4: little-endian two's complement of `n` bytes; more than 64 bits is refused.
  absl::Status Long(uint64_t n) {
    VGPU_ASSIGN_OR_RETURN(absl::string_view b, Take(n));
    if (n == 0) return Int(0);
    // Bytes beyond the 8th must be sign extension of the 8th's top bit.
    size_t used = n;
    while (used > 8) {
      uint8_t top = static_cast<uint8_t>(b[used - 1]);
      uint8_t below = static_cast<uint8_t>(b[used - 2]);
      if (!((top == 0 && below < 0x80) || (top == 0xff && below >= 0x80))) {
        return OpErr(absl::StrCat("integer of ", n, " bytes does not fit in 64 bits"));
      }
      --used;
    }
    uint64_t v = 0;
    for (size_t k = used; k-- > 0;) v = (v << 8) | static_cast<uint8_t>(b[k]);
    if (used < 8 && (static_cast<uint8_t>(b[used - 1]) & 0x80)) {
      v |= ~uint64_t{0} << (8 * used);  // sign-extend
    }
    return Int(static_cast<int64_t>(v));
  }
  // Protocols 0 and 1: an argument that is a line of text, up to '\n'.
  absl::StatusOr<absl::string_view> Line() {
    const size_t end = data_.find('\n', pos_);
    if (end == absl::string_view::npos) {
      return OpErr("no newline ends its argument (truncated pickle)");
    }
    absl::string_view line = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return line;
  }
  // The first bytes of a text argument, escaped, for messages.
  static std::string Shown(absl::string_view s) {
    return absl::StrCat("\"", absl::CHexEscape(s.substr(0, 40)), s.size() > 40 ? "..." : "", "\"");
  }
  absl::StatusOr<int64_t> Decimal(absl::string_view s) {
    int64_t v;
    if (absl::SimpleAtoi(s, &v)) return v;
    absl::string_view digits = absl::StripAsciiWhitespace(s);
    if (!absl::ConsumePrefix(&digits, "-")) absl::ConsumePrefix(&digits, "+");
    const bool number =
        !digits.empty() && digits.find_first_not_of("0123456789") == absl::string_view::npos;
    return OpErr(absl::StrCat("integer ", Shown(s),
                              number ? " does not fit in 64 bits" : " is not a decimal number"));
  }
  absl::StatusOr<uint64_t> MemoIndex() {
    VGPU_ASSIGN_OR_RETURN(absl::string_view line, Line());
    VGPU_ASSIGN_OR_RETURN(int64_t i, Decimal(line));
    if (i < 0) return OpErr(absl::StrCat("memo index ", i, " is negative"));
    return static_cast<uint64_t>(i);
  }
  // UNICODE's argument: raw-unicode-escape (bytes are Latin-1 characters; \uXXXX and
  // \UXXXXXXXX escape the others), stored as UTF-8.
  absl::Status RawUnicode(absl::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t k = 0; k < s.size();) {
      uint32_t cp = static_cast<uint8_t>(s[k]);
      size_t used = 1;
      if (s[k] == '\\' && k + 1 < s.size() && (s[k + 1] == 'u' || s[k + 1] == 'U')) {
        const size_t n = s[k + 1] == 'u' ? 4 : 8;
        if (k + 2 + n > s.size()) return OpErr("truncated \\u or \\U escape");
        uint32_t high = 0, low = 0;
        if (!JsonHex4(s, k + 2, &high) || (n == 8 && !JsonHex4(s, k + 6, &low))) {
          return OpErr(absl::StrCat("bad escape ", Shown(s.substr(k, 2 + n))));
        }
        cp = n == 4 ? high : high << 16 | low;
        if (cp > 0x10FFFF) {
          return OpErr(absl::StrCat("code point ", CodePoint(cp), " is beyond U+10FFFF"));
        }
        used = 2 + n;
      }
      AppendUtf8(cp, &out);  // a lone surrogate (Python allows them) as its three-byte form
      k += used;
    }
    return String(std::move(out));
  }
  static std::string CodePoint(uint32_t v) { return absl::StrFormat("U+%04X", v); }
  absl::Status Tuple(size_t from) {
    VGPU_ASSIGN_OR_RETURN(PickleValue * t, New(PickleValue::Kind::kTuple));
    t->items.assign(stack_.begin() + from, stack_.end());
    stack_.resize(from);
    stack_.push_back(t);
    return absl::OkStatus();
  }
  // The container below the values from `from` on, which must be of `kind`.
  absl::StatusOr<PickleValue*> Target(size_t from, PickleValue::Kind kind) {
    if (from == 0 || from <= (marks_.empty() ? 0 : marks_.back())) {
      return OpErr("no container on the stack below the items");
    }
    PickleValue* c = stack_[from - 1];
    if (c->kind != kind) {
      return OpErr(absl::StrCat("adds items to a ", PickleKindName(c->kind), ", not a ",
                                PickleKindName(kind)));
    }
    return c;
  }
  absl::Status Append(size_t from) {
    VGPU_ASSIGN_OR_RETURN(PickleValue * list, Target(from, PickleValue::Kind::kList));
    list->items.insert(list->items.end(), stack_.begin() + from, stack_.end());
    stack_.resize(from);
    return absl::OkStatus();
  }
  absl::Status SetItems(size_t from) {
    if ((stack_.size() - from) % 2 != 0) return OpErr("odd number of keys and values");
    VGPU_ASSIGN_OR_RETURN(PickleValue * dict, Target(from, PickleValue::Kind::kDict));
    for (size_t k = from; k < stack_.size(); k += 2) {
      dict->entries.emplace_back(stack_[k], stack_[k + 1]);
    }
    stack_.resize(from);
    return absl::OkStatus();
  }

  // Runs the opcode op_ (its argument bytes follow at pos_); true at STOP.
  absl::StatusOr<bool> Step() {
    using K = PickleValue::Kind;
    switch (op_) {
      case 0x80: {  // PROTO
        if (op_at_ != 0) return OpErr("PROTO after the start");
        VGPU_ASSIGN_OR_RETURN(uint64_t v, Uint(1));
        if (v > 5) return OpErr(absl::StrCat("protocol ", v, " (supported: 0 to 5)"));
        return false;
      }
      case 0x95: {  // FRAME: a length hint; the frame's opcodes follow inline.
        VGPU_ASSIGN_OR_RETURN(uint64_t n, Uint(8));
        if (n > data_.size() - pos_) {
          return OpErr(absl::StrCat("frame of ", n, " bytes but ", data_.size() - pos_,
                                    " remain (truncated pickle)"));
        }
        return false;
      }
      case '.':  // STOP
        return true;
      case '(':  // MARK
        if (marks_.size() >= limits_.max_marks) {
          return OpErr(absl::StrCat("more than ", limits_.max_marks, " MARKs open"));
        }
        marks_.push_back(stack_.size());
        return false;
      case '}':
        VGPU_RETURN_IF_ERROR(Push(New(K::kDict)));
        return false;
      case ']':
        VGPU_RETURN_IF_ERROR(Push(New(K::kList)));
        return false;
      case ')':
        VGPU_RETURN_IF_ERROR(Push(New(K::kTuple)));
        return false;
      case 'N':
        VGPU_RETURN_IF_ERROR(Push(New(K::kNone)));
        return false;
      case 0x88:
      case 0x89: {
        VGPU_RETURN_IF_ERROR(Bool(op_ == 0x88));
        return false;
      }
      case 't': {
        VGPU_ASSIGN_OR_RETURN(size_t m, PopMark());
        VGPU_RETURN_IF_ERROR(Tuple(m));
        return false;
      }
      case 0x85:
      case 0x86:
      case 0x87: {
        const size_t n = op_ - 0x84;
        const size_t floor = marks_.empty() ? 0 : marks_.back();
        if (stack_.size() - floor < n) {
          return OpErr(absl::StrCat("needs ", n, " values above the last MARK, has ",
                                    stack_.size() - floor));
        }
        VGPU_RETURN_IF_ERROR(Tuple(stack_.size() - n));
        return false;
      }
      case 'l': {
        VGPU_ASSIGN_OR_RETURN(size_t m, PopMark());
        VGPU_ASSIGN_OR_RETURN(PickleValue * l, New(K::kList));
        l->items.assign(stack_.begin() + m, stack_.end());
        stack_.resize(m);
        stack_.push_back(l);
        return false;
      }
      case 'd': {
        VGPU_ASSIGN_OR_RETURN(size_t m, PopMark());
        if ((stack_.size() - m) % 2 != 0) return OpErr("odd number of keys and values");
        VGPU_ASSIGN_OR_RETURN(PickleValue * d, New(K::kDict));
        for (size_t k = m; k < stack_.size(); k += 2)
          d->entries.emplace_back(stack_[k], stack_[k + 1]);
        stack_.resize(m);
        stack_.push_back(d);
        return false;
      }
      case 'a':
        return AppendLast();
      case 'e': {
        VGPU_ASSIGN_OR_RETURN(size_t m, PopMark());
        VGPU_RETURN_IF_ERROR(Append(m));
        return false;
      }
      case 's': {
        const size_t floor = marks_.empty() ? 0 : marks_.back();
        if (stack_.size() - floor < 3) {
          return OpErr("needs a dict, a key and a value above the last MARK");
        }
        VGPU_RETURN_IF_ERROR(SetItems(stack_.size() - 2));
        return false;
      }
      case 'u': {
        VGPU_ASSIGN_OR_RETURN(size_t m, PopMark());
        VGPU_RETURN_IF_ERROR(SetItems(m));
        return false;
      }
      case 'X': {
        VGPU_ASSIGN_OR_RETURN(uint64_t n, Uint(4));
        VGPU_RETURN_IF_ERROR(Text(K::kString, n));
        return false;
      }
      case 0x8c: {
        VGPU_ASSIGN_OR_RETURN(uint64_t n, Uint(1));
        VGPU_RETURN_IF_ERROR(Text(K::kString, n));
        return false;
      }
      case 0x8d: {
        VGPU_ASSIGN_OR_RETURN(uint64_t n, Uint(8));
        VGPU_RETURN_IF_ERROR(Text(K::kString, n));
        return false;
      }
      case 'B': {
        VGPU_ASSIGN_OR_RETURN(uint64_t n, Uint(4));
        VGPU_RETURN_IF_ERROR(Text(K::kBytes, n));
        return false;
      }
      case 'C': {
        VGPU_ASSIGN_OR_RETURN(uint64_t n, Uint(1));
        VGPU_RETURN_IF_ERROR(Text(K::kBytes, n));
        return false;
      }
      case 0x8e:
      case 0x96: {
        VGPU_ASSIGN_OR_RETURN(uint64_t n, Uint(8));
        VGPU_RETURN_IF_ERROR(Text(K::kBytes, n));
        return false;
      }
      case 'J': {
        VGPU_ASSIGN_OR_RETURN(uint64_t v, Uint(4));
        VGPU_RETURN_IF_ERROR(Int(static_cast<int32_t>(static_cast<uint32_t>(v))));
        return false;
      }
      case 'K': {
        VGPU_ASSIGN_OR_RETURN(uint64_t v, Uint(1));
        VGPU_RETURN_IF_ERROR(Int(static_cast<int64_t>(v)));
        return false;
      }
      case 'M': {
        VGPU_ASSIGN_OR_RETURN(uint64_t v, Uint(2));
        VGPU_RETURN_IF_ERROR(Int(static_cast<int64_t>(v)));
        return false;
      }
      case 0x8a: {
        VGPU_ASSIGN_OR_RETURN(uint64_t n, Uint(1));
        VGPU_RETURN_IF_ERROR(Long(n));
        return false;
      }
      case 0x8b: {
        VGPU_ASSIGN_OR_RETURN(uint64_t n, Uint(4));
        VGPU_RETURN_IF_ERROR(Long(n));
        return false;
      }
      case 'G': {  // big-endian IEEE 754 double
        VGPU_ASSIGN_OR_RETURN(absl::string_view b, Take(8));
        uint64_t bits = 0;
        for (int k = 0; k < 8; ++k) bits = (bits << 8) | static_cast<uint8_t>(b[k]);
        double d;
        std::memcpy(&d, &bits, sizeof(d));
        VGPU_RETURN_IF_ERROR(Float(d));
        return false;
      }
      case 0x94:
        VGPU_RETURN_IF_ERROR(Memo(memo_.size()));
        return false;
      case 'q': {
        VGPU_ASSIGN_OR_RETURN(uint64_t i, Uint(1));
        VGPU_RETURN_IF_ERROR(Memo(i));
        return false;
      }
      case 'r': {
        VGPU_ASSIGN_OR_RETURN(uint64_t i, Uint(4));
        VGPU_RETURN_IF_ERROR(Memo(i));
        return false;
      }
      case 'h': {
        VGPU_ASSIGN_OR_RETURN(uint64_t i, Uint(1));
        VGPU_RETURN_IF_ERROR(Get(i));
        return false;
      }
      case 'j': {
        VGPU_ASSIGN_OR_RETURN(uint64_t i, Uint(4));
        VGPU_RETURN_IF_ERROR(Get(i));
        return false;
      }
      case '0':
        VGPU_RETURN_IF_ERROR(Pop().status());
        return false;
      case '1': {
        VGPU_ASSIGN_OR_RETURN(size_t m, PopMark());
        stack_.resize(m);
        return false;
      }
      case '2': {
        VGPU_ASSIGN_OR_RETURN(PickleValue * v, Top());
        stack_.push_back(v);
        return false;
      }
      // Protocols 0 and 1 (Python 2's str as STRING / BINSTRING / SHORT_BINSTRING is read as
      // str, as Python 3 reads it).
      case 'I': {  // INT: decimal; "01" and "00" are True and False
        VGPU_ASSIGN_OR_RETURN(absl::string_view line, Line());
        if (line == "01" || line == "00") {
          VGPU_RETURN_IF_ERROR(Bool(line == "01"));
          return false;
        }
        VGPU_ASSIGN_OR_RETURN(int64_t v, Decimal(line));
        VGPU_RETURN_IF_ERROR(Int(v));
        return false;
      }
      case 'L': {  // LONG: decimal, with Python 2's trailing L
        VGPU_ASSIGN_OR_RETURN(absl::string_view line, Line());
        absl::ConsumeSuffix(&line, "L");
        VGPU_ASSIGN_OR_RETURN(int64_t v, Decimal(line));
        VGPU_RETURN_IF_ERROR(Int(v));
        return false;
      }
      case 'F': {  // FLOAT: repr() of a float
        VGPU_ASSIGN_OR_RETURN(absl::string_view line, Line());
        double d;
        if (!absl::SimpleAtod(line, &d)) {
          return OpErr(absl::StrCat(Shown(line), " is not a float"));
        }
        VGPU_RETURN_IF_ERROR(Float(d));
        return false;
      }
      case 'S': {  // STRING: a quoted Python 2 str literal
        VGPU_ASSIGN_OR_RETURN(absl::string_view line, Line());
        if (line.size() < 2 || (line.front() != '\'' && line.front() != '"') ||
            line.back() != line.front()) {
          return OpErr(absl::StrCat("argument ", Shown(line), " is not quoted"));
        }
        std::string text;
        if (!absl::CUnescape(line.substr(1, line.size() - 2), &text)) {
          return OpErr(absl::StrCat("bad escape in ", Shown(line)));
        }
        VGPU_RETURN_IF_ERROR(String(std::move(text)));
        return false;
      }
      case 'T': {
        VGPU_ASSIGN_OR_RETURN(uint64_t n, Uint(4));
        if (n >= uint64_t{1} << 31) return OpErr(absl::StrCat("negative length ", n));
        VGPU_RETURN_IF_ERROR(Text(K::kString, n));
        return false;
      }
      case 'U': {
        VGPU_ASSIGN_OR_RETURN(uint64_t n, Uint(1));
        VGPU_RETURN_IF_ERROR(Text(K::kString, n));
        return false;
      }
      case 'V': {  // UNICODE
        VGPU_ASSIGN_OR_RETURN(absl::string_view line, Line());
        VGPU_RETURN_IF_ERROR(RawUnicode(line));
        return false;
      }
      case 'p': {  // PUT
        VGPU_ASSIGN_OR_RETURN(uint64_t i, MemoIndex());
        VGPU_RETURN_IF_ERROR(Memo(i));
        return false;
      }
      case 'g': {  // GET
        VGPU_ASSIGN_OR_RETURN(uint64_t i, MemoIndex());
        VGPU_RETURN_IF_ERROR(Get(i));
        return false;
      }
      default:
        return Err(op_at_, absl::StrCat(DescribeOp(op_),
                                        OpName(op_) != nullptr
                                            ? " is not supported: only plain data (dict, list, "
                                              "tuple, str, bytes, int, float, bool, None) is read, "
                                              "never objects or code"
                                            : " is not a pickle opcode"));
    }
  }
  // APPEND: the list below the top value gets it.
  absl::StatusOr<bool> AppendLast() {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() - floor < 2) return OpErr("needs a list and a value above the last MARK");
    VGPU_RETURN_IF_ERROR(Append(stack_.size() - 1));
    return false;
  }

  absl::string_view data_;
  absl::string_view source_;
  PickleLimits limits_;
  std::unique_ptr<PickleDocument> doc_;
  uint64_t pos_ = 0;
  uint64_t op_at_ = 0;
  uint8_t op_ = 0;
  std::vector<PickleValue*> stack_;
  std::vector<size_t> marks_;
  absl::flat_hash_map<uint64_t, PickleValue*> memo_;
};

absl::StatusOr<std::unique_ptr<PickleDocument>> ParsePickle(absl::string_view data,
                                                            absl::string_view source,
                                                            const PickleLimits& limits) {
  PickleParser p(data, source, limits);
  return p.Run();
}

}  // namespace vgpu
