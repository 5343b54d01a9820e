// A reader for the plain-data subset of Python's pickle format (protocols 0 to 5), so vgpu can
// read files Python tools write without Python: PyTorch's memory snapshots
// (`torch.cuda.memory._dump_snapshot()` is `pickle.dump` of dicts, lists, tuples, str, int,
// float, bool and None). Objects, globals and REDUCE are refused: reading never runs code.
//
// Hostile input is expected: every length and memo index is checked against the input, the
// number of values and the MARK depth are bounded, and errors are InvalidArgument naming the
// byte offset and the opcode ("pickle at offset 12: opcode 0x63 'c' (GLOBAL) is not supported:
// ..."). Values live in the returned PickleDocument (an arena); containers point at their
// elements, so a memoized value shared in several places is stored once, and a pickle whose
// containers contain themselves is representable (a walker must not recurse without a bound).
//
// Thread safety: ParsePickle is reentrant; a PickleDocument is immutable once returned and may
// be read from several threads.
#ifndef VGPU_RUNTIME_PICKLE_READER_H_
#define VGPU_RUNTIME_PICKLE_READER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vgpu {

struct PickleValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kList, kTuple, kDict };
  Kind kind = Kind::kNone;
  bool b = false;
  int64_t i = 0;                          // kInt (LONG1/LONG4 wider than 64 bits are refused)
  double f = 0;                           // kFloat
  std::string s;                          // kString (UTF-8 as written, not validated) and kBytes
  std::vector<const PickleValue*> items;  // kList, kTuple
  std::vector<std::pair<const PickleValue*, const PickleValue*>> entries;  // kDict, in order

  bool is_int() const { return kind == Kind::kInt; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList || kind == Kind::kTuple; }
  bool is_dict() const { return kind == Kind::kDict; }
  // kDict: the value of the last entry whose key is the string `key`; nullptr when none (or
  // when this is not a dict).
  const PickleValue* Get(absl::string_view key) const;
};

// "int", "str", "list", ...: Python's names, for messages.
const char* PickleKindName(PickleValue::Kind kind);

struct PickleLimits {
  uint64_t max_values = uint64_t{1} << 25;  // values created (each opcode makes at most one)
  uint64_t max_marks = 4096;                // MARKs open at once
  uint64_t max_memo = uint64_t{1} << 25;    // memo entries
  // Appended to the error when max_values is reached: what the caller's user can do about it
  // (e.g. record a shorter history).
  std::string values_note;
};

class PickleDocument {
 public:
  const PickleValue& root() const { return *root_; }
  uint64_t values() const { return values_.size(); }

 private:
  friend class PickleParser;
  // In blocks (a deque never moves what it holds): no allocation of its own per value, ~40
  // bytes less each than one heap object apiece.
  std::deque<PickleValue> values_;
  const PickleValue* root_ = nullptr;
};

// Parses one pickle (PROTO 2..5 first, or protocol 0/1's first opcode; STOP last; bytes after
// STOP are refused). `source` names the input in errors ("snap.pickle: pickle at offset 7: ...").
absl::StatusOr<std::unique_ptr<PickleDocument>> ParsePickle(absl::string_view data,
                                                            absl::string_view source = "input",
                                                            const PickleLimits& limits = {});

}  // namespace vgpu

#endif  // VGPU_RUNTIME_PICKLE_READER_H_
