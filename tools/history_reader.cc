#include "vgpu/tools/history_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/json_reader.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu_info {
namespace {

// 2^64: byte counts and nanoseconds in a history are uint64 values.
constexpr double kTwoTo64 = 18446744073709551616.0;

// A small JSON value: objects and arrays are built only where the history needs them (the
// names, the limits, one event at a time); everything else is validated and skipped, so
// memory follows what is kept, not the file. Numbers keep their text.
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  std::string text;  // number text or string value
  std::vector<Json> items;
  // Object members as two lists: a vector of pairs holding the incomplete Json does not compile
  // with every standard library.
  std::vector<std::string> keys;
  std::vector<Json> values;

  const Json* Get(absl::string_view key) const {
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return &values[i];
    return nullptr;
  }
};

// Strict RFC 8259 parser over the whole text.
class Parser {
 public:
  explicit Parser(absl::string_view s) : s_(s) {}

  absl::Status Error(absl::string_view why) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("malformed JSON at offset ", pos_, " (line ",
                                                   line, ", column ", col, "): ", why));
  }
  void Skip() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool Eat(char c) {
    Skip();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool AtEnd() {
    Skip();
    return pos_ == s_.size();
  }
  absl::Status Expect(char c) {
    if (Eat(c)) return absl::OkStatus();
    return Error(absl::StrCat("expected '", std::string(1, c), "'"));
  }
  bool Peek(char c) {
    Skip();
    return pos_ < s_.size() && s_[pos_] == c;
  }

  // A string; `out` may be null (validate only).
  absl::Status String(std::string* out) {
    if (!Eat('"')) return Error("expected a string");
    for (;;) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      const unsigned char c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') return absl::OkStatus();
      if (c < 0x20) return Error("control character in a string");
      if (c != '\\') {
        if (out) out->push_back(static_cast<char>(c));
        continue;
      }
      if (pos_ >= s_.size()) return Error("unterminated string");
      const char e = s_[pos_++];
      char plain = 0;
      switch (e) {
        case '"':
          plain = '"';
          break;
        case '\\':
          plain = '\\';
          break;
        case '/':
          plain = '/';
          break;
        case 'b':
          plain = '\b';
          break;
        case 'f':
          plain = '\f';
          break;
        case 'n':
          plain = '\n';
          break;
        case 'r':
          plain = '\r';
          break;
        case 't':
          plain = '\t';
          break;
        case 'u':
          break;
        default:
          return Error("bad escape in a string");
      }
      if (e != 'u') {
        if (out) out->push_back(plain);
        continue;
      }
      uint32_t cp;
      if (!Hex4(&cp)) return Error("bad \\u escape");
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        uint32_t lo;
        if (pos_ + 1 < s_.size() && s_[pos_] == '\\' && s_[pos_ + 1] == 'u') {
          pos_ += 2;
          if (!Hex4(&lo)) return Error("bad \\u escape");
          if (lo >= 0xDC00 && lo <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else {
            return Error("unpaired UTF-16 surrogate in \\u escape");
          }
        } else {
          return Error("unpaired UTF-16 surrogate in \\u escape");
        }
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        return Error("unpaired UTF-16 surrogate in \\u escape");
      }
      if (out) vgpu::AppendUtf8(cp, out);
    }
  }

  // Any value; `out` may be null (validate only, nothing kept).
  absl::Status Value(Json* out, int depth = 0) {
    if (depth >= kMaxJsonDepth) return Error("nested too deeply");
    Skip();
    if (pos_ >= s_.size()) return Error("expected a value");
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      if (out) out->kind = Json::kObject;
      if (Eat('}')) return absl::OkStatus();
      do {
        std::string key;
        absl::Status s = String(out ? &key : nullptr);
        if (!s.ok()) return s;
        if (!Eat(':')) return Error("expected ':'");
        Json v;
        s = Value(out ? &v : nullptr, depth + 1);
        if (!s.ok()) return s;
        if (out) {
          out->keys.push_back(std::move(key));
          out->values.push_back(std::move(v));
        }
      } while (Eat(','));
      return Expect('}');
    }
    if (c == '[') {
      ++pos_;
      if (out) out->kind = Json::kArray;
      if (Eat(']')) return absl::OkStatus();
      do {
        Json v;
        absl::Status s = Value(out ? &v : nullptr, depth + 1);
        if (!s.ok()) return s;
        if (out) out->items.push_back(std::move(v));
      } while (Eat(','));
      return Expect(']');
    }
    if (c == '"') {
      if (out) out->kind = Json::kString;
      return String(out ? &out->text : nullptr);
    }
    for (absl::string_view lit : {"true", "false", "null"}) {
      if (s_.substr(pos_, lit.size()) == lit) {
        pos_ += lit.size();
        if (out) out->kind = lit == "null" ? Json::kNull : Json::kBool;
        if (out && lit != "null") out->text = std::string(lit);
        return absl::OkStatus();
      }
    }
    return Number(out);
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  absl::Status Number(Json* out) {
    const size_t start = pos_;
    auto digits = [&] {
      size_t n = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_, ++n;
      return n;
    };
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      pos_ = start;
      return Error("expected a value");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return Error("expected digits after '.'");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) return Error("expected digits in the exponent");
    }
    if (out) {
      out->kind = Json::kNumber;
      out->text = std::string(s_.substr(start, pos_ - start));
    }
    return absl::OkStatus();
  }

 private:
  bool Hex4(uint32_t* cp) {
    if (!vgpu::JsonHex4(s_, pos_, cp)) return false;
    pos_ += 4;
    return true;
  }

  absl::string_view s_;
  size_t pos_ = 0;
};

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("not a valid memory history: ", what));
}

// A byte count or time: a finite number in [0, 2^64] (a uint64 written out rounds to 2^64).
absl::StatusOr<double> Magnitude(const Json* v, absl::string_view field, uint64_t event) {
  if (v == nullptr || v->kind != Json::kNumber) {
    return Bad(absl::StrCat("event ", event, ": \"", field, "\" is missing or not a number"));
  }
  // from_chars on validated JSON number text (locale-independent); out of range is refused.
  double d = 0;
  const std::from_chars_result r =
      std::from_chars(v->text.data(), v->text.data() + v->text.size(), d);
  if (r.ec != std::errc() || !std::isfinite(d) || d < 0 || d > kTwoTo64) {
    return Bad(absl::StrCat("event ", event, ": \"", field, "\" is ",
                            vgpu::EscapeUserText(v->text, vgpu::kMaxQuotedChars, false),
                            "; expected a number in [0, 2^64]"));
  }
  return d;
}

// A count or index: a non-negative integer written as one (no fraction or exponent).
absl::StatusOr<uint64_t> Count(const Json* v, absl::string_view what) {
  uint64_t n;
  absl::StatusOr<uint64_t> parsed = v != nullptr && v->kind == Json::kNumber
                                        ? vgpu::ParseUint64(v->text)
                                        : absl::StatusOr<uint64_t>(0);
  if (v == nullptr || v->kind != Json::kNumber || !parsed.ok()) {
    const std::string shown = v == nullptr ? std::string("missing")
                              : v->kind == Json::kNumber
                                  ? vgpu::EscapeUserText(v->text, vgpu::kMaxQuotedChars, false)
                                  : std::string("not a number");
    return Bad(absl::StrCat(what, " is ", shown, "; expected a non-negative integer below 2^64"));
  }
  n = *parsed;
  return n;
}

struct RawEvent {
  uint64_t allocator;
  HistoryPoint p;
};

}  // namespace

absl::StatusOr<MemoryHistoryData> ParseMemoryHistory(absl::string_view json,
                                                     uint64_t default_limit) {
  if (json.substr(0, 3) == "\xEF\xBB\xBF") json.remove_prefix(3);  // a UTF-8 byte order mark
  Parser p(json);
  Json names, limits;
  bool have_names = false, have_events = false;
  uint64_t dropped = 0;
  std::vector<RawEvent> events;
  absl::Status s;
  if (!p.Eat('{')) return p.Error("a memory history is a JSON object");
  if (!p.Eat('}')) {
    do {
      std::string key;
      if (s = p.String(&key); !s.ok()) return s;
      if (!p.Eat(':')) return p.Error("expected ':'");
      if (key == "allocators") {
        names = Json();
        if (s = p.Value(&names, 1); !s.ok()) return s;
        if (names.kind != Json::kArray) return Bad("\"allocators\" is not an array");
        if (names.items.size() > kMaxHistoryAllocators) {
          return Bad(absl::StrCat("\"allocators\" has ", names.items.size(), " names, more than ",
                                  kMaxHistoryAllocators));
        }
        for (const Json& n : names.items) {
          if (n.kind != Json::kString) return Bad("an allocator name is not a string");
        }
        have_names = true;
      } else if (key == "limits") {
        limits = Json();
        if (s = p.Value(&limits, 1); !s.ok()) return s;
        if (limits.kind != Json::kObject) return Bad("\"limits\" is not an object");
        for (size_t i = 0; i < limits.keys.size(); ++i) {
          absl::StatusOr<uint64_t> n =
              Count(&limits.values[i], absl::StrCat("the limit of \"", limits.keys[i], "\""));
          if (!n.ok()) return n.status();
        }
      } else if (key == "dropped") {
        Json d;
        if (s = p.Value(&d, 1); !s.ok()) return s;
        absl::StatusOr<uint64_t> n = Count(&d, "\"dropped\"");
        if (!n.ok()) return n.status();
        dropped = *n;
      } else if (key == "events") {
        // One event at a time: only the four numbers drawn are kept.
        if (!p.Eat('[')) return Bad("\"events\" is not an array");
        have_events = true;
        if (!p.Eat(']')) {
          do {
            Json e;
            if (s = p.Value(&e, 2); !s.ok()) return s;
            const uint64_t i = events.size();
            if (e.kind != Json::kObject) return Bad(absl::StrCat("event ", i, " is not an object"));
            absl::StatusOr<uint64_t> a =
                Count(e.Get("allocator"), absl::StrCat("event ", i, ": \"allocator\""));
            if (!a.ok()) return a.status();
            absl::StatusOr<double> t = Magnitude(e.Get("t_ns"), "t_ns", i);
            if (!t.ok()) return t.status();
            absl::StatusOr<double> u = Magnitude(e.Get("in_use"), "in_use", i);
            if (!u.ok()) return u.status();
            absl::StatusOr<double> r = Magnitude(e.Get("reserved"), "reserved", i);
            if (!r.ok()) return r.status();
            double frag = -1;  // optional: "largest_free" (vgpu-bench and allocators since #16)
            if (const Json* lf = e.Get("largest_free"); lf != nullptr) {
              absl::StatusOr<double> l = Magnitude(lf, "largest_free", i);
              if (!l.ok()) return l.status();
              const double free = *r - *u;
              frag = free > 0 ? std::clamp(1.0 - *l / free, 0.0, 1.0) : 0.0;
            }
            events.push_back({*a, {*t / 1e6, *u, *r, frag}});
          } while (p.Eat(','));
          if (s = p.Expect(']'); !s.ok()) return s;
        }
      } else {
        if (s = p.Value(nullptr, 1); !s.ok()) return s;
      }
    } while (p.Eat(','));
    if (s = p.Expect('}'); !s.ok()) return s;
  }
  if (!p.AtEnd()) return p.Error("text after the JSON value");
  if (!have_names || !have_events) return Bad("needs \"allocators\" and \"events\"");

  MemoryHistoryData h;
  h.dropped = dropped;
  h.events = events.size();
  h.series.resize(names.items.size());
  for (size_t i = 0; i < h.series.size(); ++i) {
    h.series[i].name = names.items[i].text;
    const Json* l = limits.Get(h.series[i].name);
    h.series[i].limit = l != nullptr ? *Count(l, "limit") : default_limit;
  }
  for (size_t i = 0; i < events.size(); ++i) {
    const RawEvent& e = events[i];
    if (e.allocator >= h.series.size()) {
      return Bad(absl::StrCat("event ", i, ": allocator index ", e.allocator, " but only ",
                              h.series.size(), " allocator name(s)"));
    }
    h.series[e.allocator].points.push_back(e.p);
    h.t_min_ms = i == 0 ? e.p.t_ms : std::min(h.t_min_ms, e.p.t_ms);
    h.t_max_ms = std::max(h.t_max_ms, e.p.t_ms);
  }
  // Drawing walks each series in time order; a file out of order still draws bounded lines.
  for (HistorySeries& s : h.series) {
    std::stable_sort(s.points.begin(), s.points.end(),
                     [](const HistoryPoint& a, const HistoryPoint& b) { return a.t_ms < b.t_ms; });
  }
  return h;
}

std::string XmlEscape(absl::string_view s, size_t max_bytes) {
  std::string out;
  const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  size_t i = 0;
  while (i < s.size()) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '&':
          out += "&amp;";
          break;
        case '"':
          out += "&quot;";
          break;
        case '\'':
          out += "&apos;";
          break;
        default:
          // XML 1.0 allows no control characters but tab, newline and carriage return; in a
          // one-line label those read better as a space.
          if (c < 0x20 || c == 0x7F) {
            out += c == '\t' || c == '\n' || c == '\r' ? " " : kReplacement;
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
      continue;
    }
    // A well-formed UTF-8 sequence (no overlongs, surrogates, or U+FFFE/U+FFFF) is kept.
    int len = c >= 0xF0 && c <= 0xF4   ? 4
              : c >= 0xE0 && c <= 0xEF ? 3
              : c >= 0xC2 && c <= 0xDF ? 2
                                       : 0;
    uint32_t cp = len == 4 ? c & 0x07 : len == 3 ? c & 0x0F : c & 0x1F;
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (ok) {
      ok = (len == 2 && cp >= 0x80) ||
           (len == 3 && cp >= 0x800 && !(cp >= 0xD800 && cp <= 0xDFFF) && cp != 0xFFFE &&
            cp != 0xFFFF) ||
           (len == 4 && cp >= 0x10000 && cp <= 0x10FFFF);
    }
    if (ok) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out += kReplacement;
      ++i;
    }
  }
  return out;
}

namespace {

// Binary units for the y axis: the largest unit that keeps the maximum >= 1.
std::pair<double, const char*> Unit(double max) {
  if (max >= double(uint64_t{1} << 60)) return {double(uint64_t{1} << 60), "EiB"};
  if (max >= double(uint64_t{1} << 50)) return {double(uint64_t{1} << 50), "PiB"};
  if (max >= double(uint64_t{1} << 40)) return {double(uint64_t{1} << 40), "TiB"};
  if (max >= double(uint64_t{1} << 30)) return {double(uint64_t{1} << 30), "GiB"};
  if (max >= double(1 << 20)) return {double(1 << 20), "MiB"};
  if (max >= 1024) return {1024, "KiB"};
  return {1, "B"};
}

// A "nice" tick step (1, 2, 2.5 or 5 x 10^k) giving about `ticks` steps over `range`. The
// callers pass a finite range >= 1e-3; anything else falls back to range itself.
double NiceStep(double range, int ticks) {
  const double raw = range / ticks;
  if (!std::isfinite(raw) || !(raw > 0) || !std::isnormal(raw)) return range > 0 ? range : 1;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

}  // namespace

TimelineSvg RenderTimelineSvg(const MemoryHistoryData& history) {
  TimelineSvg result;
  std::vector<const HistorySeries*> drawn;
  for (const HistorySeries& s : history.series) {
    if (s.points.empty()) {
      ++result.without_events;
    } else if (drawn.size() < kMaxTimelinePanels) {
      drawn.push_back(&s);
    } else {
      ++result.left_out;
    }
  }
  result.panels = drawn.size();
  // Each panel: its allocator's name, the legend on a row of its own below it (a long name
  // ran into a legend beside it), then the plot; fragmentation has an axis of its own on the
  // right, 0 to 1 (on the bytes axis its 0.9 read as bytes near the limit).
  const int W = 900, panel_h = 278, top = 60, left = 90, right = 70, plot_h = 190;
  const int H = top + panel_h * static_cast<int>(std::max<size_t>(drawn.size(), 1)) + 20;
  const int plot_w = W - left - right;
  std::string& o = result.svg;
  o = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">Device memory over time"
      "</text>\n",
      W, H, W, H, left);
  std::vector<std::string> notes;
  if (history.dropped > 0) notes.push_back(absl::StrCat(history.dropped, " oldest events dropped"));
  if (result.left_out > 0) {
    notes.push_back(absl::StrCat(result.left_out,
                                 " more allocator(s) with events not drawn (at most ",
                                 kMaxTimelinePanels, " panels)"));
  }
  if (result.without_events > 0) {
    notes.push_back(absl::StrCat(result.without_events, " allocator(s) without events not drawn"));
  }
  if (drawn.empty()) notes.push_back("no events to draw");
  if (!notes.empty()) {
    absl::StrAppendFormat(&o, "<text x=\"%d\" y=\"44\" fill=\"#a00\">%s</text>\n", left,
                          XmlEscape(absl::StrJoin(notes, "; ")));
  }
  // Below a microsecond the axis would have no readable ticks (and 5e-318 ms no finite step).
  const double t_max_ms = std::max(history.t_max_ms, 1e-3);
  // The time axis starts at 0 (the history's creation) unless the first event comes after a
  // tenth of the run: then at a round time before it, so the events are not squeezed into the
  // right end (a replay's history starts after the trace is read). Not where the span is too
  // small for the magnitude to give distinct round ticks.
  double t0 = 0;
  if (const double span = t_max_ms - history.t_min_ms;
      history.t_min_ms > t_max_ms / 10 && span >= 1e-3 && span > t_max_ms * 1e-6) {
    const double step = NiceStep(span, 8);
    t0 = std::floor(history.t_min_ms / step) * step;
    if (!(t0 >= 0 && t0 <= history.t_min_ms && t_max_ms - t0 >= 1e-3)) t0 = 0;
  }
  const double t_span = t_max_ms - t0;
  const int kMaxTicks = 32;  // per axis, whatever the steps come to
  for (size_t i = 0; i < drawn.size(); ++i) {
    const HistorySeries& s = *drawn[i];
    const int y0 = top + panel_h * static_cast<int>(i) + 38;  // top of the plot area
    double ymax = static_cast<double>(s.limit);
    for (const HistoryPoint& p : s.points) ymax = std::max({ymax, p.in_use, p.reserved});
    if (ymax < 1) ymax = 1;
    auto [unit, unit_name] = Unit(ymax);
    const double ystep = NiceStep(ymax / unit, 4);
    const double ytop = std::ceil(ymax / unit / ystep) * ystep * unit;
    auto X = [&](double t) { return left + (t - t0) / t_span * plot_w; };
    auto Y = [&](double b) { return y0 + plot_h - b / ytop * plot_h; };
    absl::StrAppendFormat(&o, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">%s</text>\n", left,
                          y0 - 24, XmlEscape(s.name, kMaxTimelineNameBytes));
    // Grid and y ticks: counted, not accumulated, so rounding cannot add or lose a tick.
    for (int k = 0; k <= kMaxTicks; ++k) {
      const double v = k * ystep;
      if (v > ytop / unit * (1 + 1e-9)) break;
      const double y = Y(v * unit);
      absl::StrAppendFormat(&o,
                            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                            "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g %s</text>\n",
                            left, y, left + plot_w, y, left - 6, y + 4, v, unit_name);
    }
    const double xstep = NiceStep(t_span, 8);
    for (int k = 0; k <= kMaxTicks; ++k) {
      const double t = t0 + k * xstep;
      if (t > t_max_ms * (1 + 1e-9)) break;
      absl::StrAppendFormat(&o,
                            "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#888\"/>"
                            "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
                            X(t), y0 + plot_h, X(t), y0 + plot_h + 4, X(t), y0 + plot_h + 16, t);
    }
    const bool has_frag = std::any_of(s.points.begin(), s.points.end(),
                                      [](const HistoryPoint& p) { return p.fragmentation >= 0; });
    if (has_frag) {  // its axis on the right: 0 at the bottom, 1 at the top
      for (int k = 0; k <= 4; ++k) {
        const double y = y0 + plot_h - k * plot_h / 4.0;
        absl::StrAppendFormat(&o,
                              "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                              "stroke=\"#009e73\"/><text x=\"%d\" y=\"%.1f\" "
                              "fill=\"#009e73\">%g</text>\n",
                              left + plot_w, y, left + plot_w + 4, y, left + plot_w + 6, y + 4,
                              k / 4.0);
      }
      absl::StrAppendFormat(&o,
                            "<text transform=\"translate(%d,%d) rotate(90)\" "
                            "text-anchor=\"middle\" fill=\"#009e73\">fragmentation</text>\n",
                            left + plot_w + 44, y0 + plot_h / 2);
    }
    absl::StrAppendFormat(&o,
                          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
                          "stroke=\"#444\"/>\n<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">"
                          "time (ms)</text>\n",
                          left, y0, plot_w, plot_h, left + plot_w / 2, y0 + plot_h + 32);
    // Step lines: a value holds until the next event. Events within one pixel column are
    // drawn as that column's min..max, so spikes stay visible and the points are bounded by
    // the plot's width (points are sorted by time).
    // Fragmentation (when the history has it) on the same plot, against the right axis.
    for (int which = 0; which < (has_frag ? 3 : 2); ++which) {
      std::string pts = absl::StrFormat("%.1f,%.1f", X(t0), Y(0));
      double last = 0;
      size_t k = 0;
      while (k < s.points.size()) {
        const double col = std::floor(X(s.points[k].t_ms));
        const double prev = last;
        double lo = last, hi = last;
        while (k < s.points.size() && std::floor(X(s.points[k].t_ms)) == col) {
          last = which == 0   ? s.points[k].reserved
                 : which == 1 ? s.points[k].in_use
                              : std::max(0.0, s.points[k].fragmentation) * ytop;
          lo = std::min(lo, last);
          hi = std::max(hi, last);
          ++k;
        }
        const double x = X(s.points[k - 1].t_ms);
        absl::StrAppendFormat(&pts, " %.1f,%.1f", x, Y(prev));
        if (hi != lo) absl::StrAppendFormat(&pts, " %.1f,%.1f %.1f,%.1f", x, Y(hi), x, Y(lo));
        absl::StrAppendFormat(&pts, " %.1f,%.1f", x, Y(last));
      }
      absl::StrAppendFormat(&pts, " %.1f,%.1f", X(t_max_ms), Y(last));
      absl::StrAppendFormat(&o,
                            "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" "
                            "points=\"%s\"/>\n",
                            which == 0   ? "#e69f00"
                            : which == 1 ? "#0072b2"
                                         : "#009e73",
                            which == 2 ? "1" : "1.5", pts);
    }
    if (s.limit > 0) {
      const double yl = Y(static_cast<double>(s.limit));
      absl::StrAppendFormat(&o,
                            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#d00\" "
                            "stroke-dasharray=\"6,4\" stroke-width=\"1.5\"/>\n",
                            left, yl, left + plot_w, yl);
    }
    // Legend, on its own row under the name, each item as wide as its label.
    const int ly = y0 - 6;
    struct Item {
      const char* color;
      const char* dash;
      std::string label;
    };
    std::vector<Item> items = {{"#0072b2", "", "in use"}, {"#e69f00", "", "reserved"}};
    if (has_frag) items.push_back({"#009e73", "", "fragmentation (right axis)"});
    items.push_back({"#d00", "6,4",
                     s.limit > 0 ? absl::StrCat("limit ", vgpu::FormatBytes(s.limit))
                                 : std::string("limit unknown")});
    int x = left;
    for (size_t k = 0; k < items.size(); ++k) {
      absl::StrAppendFormat(&o,
                            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                            "stroke-width=\"2\" stroke-dasharray=\"%s\"/><text x=\"%d\" y=\"%d\">"
                            "%s</text>\n",
                            x, ly - 4, x + 20, ly - 4, items[k].color, items[k].dash, x + 24, ly,
                            XmlEscape(items[k].label));
      // About 7 px a character at 12 px sans-serif, and a gap before the next item.
      x += 24 + 7 * static_cast<int>(items[k].label.size()) + 24;
    }
  }
  o += "</svg>\n";
  return result;
}

}  // namespace vgpu_info
