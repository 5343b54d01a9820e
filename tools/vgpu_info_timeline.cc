// vgpu-info timeline: draws a memory history (allocator/memory_history.h's JSON) as an SVG,
// one panel per allocator: bytes in use and reserved over time, and the limit line.
// The limits come from the history's optional "limits" object (written by
// `vgpu-info --selftest --memory-history`) or from --limit.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/bytes.h"
#include "tools/vgpu_info.h"

namespace vgpu_info {
namespace {

// A small JSON value and parser: enough for the history files (objects, arrays, strings,
// numbers, literals). Numbers keep their text so 64-bit byte counts stay exact.
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  std::string text;  // number text or string value
  bool b = false;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> fields;

  const Json* Get(const std::string& key) const {
    for (const auto& [k, v] : fields)
      if (k == key) return &v;
    return nullptr;
  }
  double Number() const { return kind == kNumber ? std::strtod(text.c_str(), nullptr) : 0; }
};

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}
  absl::StatusOr<Json> Parse() {
    Json v;
    if (!Value(v)) return Error();
    Skip();
    if (pos_ != s_.size()) return Error();
    return v;
  }

 private:
  absl::Status Error() const {
    return absl::InvalidArgumentError(absl::StrCat("malformed JSON at offset ", pos_));
  }
  void Skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Eat(char c) {
    Skip();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool String(std::string& out) {
    if (!Eat('"')) return false;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size()) return false;
        char e = s_[pos_++];
        if (e == 'u') {
          if (pos_ + 4 > s_.size()) return false;
          out += '?';  // names in histories are ASCII; keep the parser small
          pos_ += 4;
          continue;
        }
        c = e == 'n'   ? '\n'
            : e == 't' ? '\t'
            : e == 'r' ? '\r'
            : e == 'b' ? '\b'
            : e == 'f' ? '\f'
                       : e;
      }
      out += c;
    }
    return Eat('"');
  }
  bool Value(Json& v) {
    if (++depth_ > 64) return false;
    Skip();
    if (pos_ >= s_.size()) return false;
    char c = s_[pos_];
    bool ok = true;
    if (c == '{') {
      v.kind = Json::kObject;
      ++pos_;
      if (!Eat('}')) {
        do {
          std::string k;
          Json x;
          if (!String(k) || !Eat(':') || !Value(x)) return false;
          v.fields.emplace_back(std::move(k), std::move(x));
        } while (Eat(','));
        ok = Eat('}');
      }
    } else if (c == '[') {
      v.kind = Json::kArray;
      ++pos_;
      if (!Eat(']')) {
        do {
          Json x;
          if (!Value(x)) return false;
          v.items.push_back(std::move(x));
        } while (Eat(','));
        ok = Eat(']');
      }
    } else if (c == '"') {
      v.kind = Json::kString;
      ok = String(v.text);
    } else if (s_.compare(pos_, 4, "true") == 0 || s_.compare(pos_, 5, "false") == 0) {
      v.kind = Json::kBool;
      v.b = s_[pos_] == 't';
      pos_ += v.b ? 4 : 5;
    } else if (s_.compare(pos_, 4, "null") == 0) {
      pos_ += 4;
    } else {
      size_t start = pos_;
      while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) ||
                                  std::strchr("+-.eE", s_[pos_]) != nullptr))
        ++pos_;
      if (pos_ == start) return false;
      v.kind = Json::kNumber;
      v.text = s_.substr(start, pos_ - start);
    }
    --depth_;
    return ok;
  }
  const std::string& s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

struct Point {
  double t_ms;
  double in_use;
  double reserved;
};

struct Series {
  std::string name;
  std::vector<Point> points;
  double limit = 0;  // 0 = unknown
};

// Binary units for the y axis: the largest unit that keeps the maximum >= 1.
std::pair<double, const char*> Unit(double max) {
  if (max >= double(uint64_t{1} << 30)) return {double(uint64_t{1} << 30), "GiB"};
  if (max >= double(1 << 20)) return {double(1 << 20), "MiB"};
  if (max >= 1024) return {1024, "KiB"};
  return {1, "B"};
}

double NiceStep(double range, int ticks) {
  double raw = range / ticks;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string Render(const std::vector<Series>& series, double t_max_ms, uint64_t dropped) {
  const int W = 900, panel_h = 260, top = 50, left = 90, right = 30, plot_h = 190;
  const int H = top + panel_h * static_cast<int>(series.size()) + 20;
  const int plot_w = W - left - right;
  std::string o = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">Device memory over time"
      "</text>\n",
      W, H, W, H, left);
  if (dropped > 0) {
    absl::StrAppendFormat(&o,
                          "<text x=\"%d\" y=\"40\" fill=\"#a00\">%d oldest events dropped"
                          "</text>\n",
                          left, dropped);
  }
  if (t_max_ms <= 0) t_max_ms = 1;
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    const int y0 = top + panel_h * static_cast<int>(i) + 20;  // top of the plot area
    double ymax = s.limit;
    for (const Point& p : s.points) ymax = std::max({ymax, p.in_use, p.reserved});
    if (ymax <= 0) ymax = 1;
    auto [unit, unit_name] = Unit(ymax);
    double ystep = NiceStep(ymax / unit, 4);
    double ytop = std::ceil(ymax / unit / ystep) * ystep * unit;
    auto X = [&](double t) { return left + t / t_max_ms * plot_w; };
    auto Y = [&](double b) { return y0 + plot_h - b / ytop * plot_h; };
    absl::StrAppendFormat(&o, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">%s</text>\n", left,
                          y0 - 6, Escape(s.name));
    // Grid and y ticks.
    for (double v = 0; v <= ytop / unit + 1e-9; v += ystep) {
      double y = Y(v * unit);
      absl::StrAppendFormat(&o,
                            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                            "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g %s</text>\n",
                            left, y, left + plot_w, y, left - 6, y + 4, v, unit_name);
    }
    double xstep = NiceStep(t_max_ms, 8);
    for (double t = 0; t <= t_max_ms + 1e-9; t += xstep) {
      absl::StrAppendFormat(&o,
                            "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#888\"/>"
                            "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
                            X(t), y0 + plot_h, X(t), y0 + plot_h + 4, X(t), y0 + plot_h + 16, t);
    }
    absl::StrAppendFormat(&o,
                          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
                          "stroke=\"#444\"/>\n<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">"
                          "time (ms)</text>\n",
                          left, y0, plot_w, plot_h, left + plot_w / 2, y0 + plot_h + 32);
    // Step lines: a value holds until the next event. Events within one pixel column are
    // drawn as that column's min..max, so spikes stay visible and the file stays small.
    for (int which = 0; which < 2; ++which) {
      std::string pts = absl::StrFormat("%.1f,%.1f", X(0), Y(0));
      double last = 0;
      size_t k = 0;
      while (k < s.points.size()) {
        const double col = std::floor(X(s.points[k].t_ms));
        const double prev = last;
        double lo = last, hi = last;
        while (k < s.points.size() && std::floor(X(s.points[k].t_ms)) == col) {
          last = which == 0 ? s.points[k].reserved : s.points[k].in_use;
          lo = std::min(lo, last);
          hi = std::max(hi, last);
          ++k;
        }
        double x = X(s.points[k - 1].t_ms);
        absl::StrAppendFormat(&pts, " %.1f,%.1f", x, Y(prev));
        if (hi != lo) absl::StrAppendFormat(&pts, " %.1f,%.1f %.1f,%.1f", x, Y(hi), x, Y(lo));
        absl::StrAppendFormat(&pts, " %.1f,%.1f", x, Y(last));
      }
      absl::StrAppendFormat(&pts, " %.1f,%.1f", X(t_max_ms), Y(last));
      absl::StrAppendFormat(&o,
                            "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                            "points=\"%s\"/>\n",
                            which == 0 ? "#e69f00" : "#0072b2", pts);
    }
    if (s.limit > 0) {
      absl::StrAppendFormat(&o,
                            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#d00\" "
                            "stroke-dasharray=\"6,4\" stroke-width=\"1.5\"/>\n",
                            left, Y(s.limit), left + plot_w, Y(s.limit));
    }
    // Legend.
    const int lx = left + plot_w - 330, ly = y0 - 6;
    struct Item {
      const char* color;
      const char* dash;
      std::string label;
    };
    std::vector<Item> items = {{"#0072b2", "", "in use"}, {"#e69f00", "", "reserved"}};
    items.push_back({"#d00", "6,4",
                     s.limit > 0 ? absl::StrCat("limit ", vgpu::FormatBytes(uint64_t(s.limit)))
                                 : std::string("limit unknown")});
    for (size_t k = 0; k < items.size(); ++k) {
      int x = lx + static_cast<int>(k) * 100;
      absl::StrAppendFormat(&o,
                            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                            "stroke-width=\"2\" stroke-dasharray=\"%s\"/><text x=\"%d\" y=\"%d\">"
                            "%s</text>\n",
                            x, ly - 4, x + 20, ly - 4, items[k].color, items[k].dash, x + 24, ly,
                            Escape(items[k].label));
    }
  }
  o += "</svg>\n";
  return o;
}

int Fail(const std::string& why, int code) {
  std::fprintf(stderr, "vgpu-info timeline: %s\n", why.c_str());
  if (code == 2) {
    std::fprintf(stderr, "usage: vgpu-info timeline HISTORY.json --svg OUT.svg [--limit BYTES]\n");
  }
  return code;
}

}  // namespace

int TimelineMain(int argc, char** argv) {
  std::string in, out;
  uint64_t limit_flag = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--svg" && i + 1 < argc) {
      out = argv[++i];
    } else if (a == "--limit" && i + 1 < argc) {
      absl::StatusOr<uint64_t> v = vgpu::ParseBytes(argv[++i]);
      if (!v.ok()) return Fail(absl::StrCat("--limit: ", v.status().message()), 2);
      limit_flag = *v;
    } else if (!a.empty() && a[0] != '-' && in.empty()) {
      in = a;
    } else {
      return Fail(absl::StrCat("unexpected argument \"", a, "\""), 2);
    }
  }
  if (in.empty() || out.empty()) return Fail("needs a history file and --svg OUT.svg", 2);
  std::ifstream f(in);
  if (!f) return Fail(absl::StrCat("cannot open ", in), 1);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  absl::StatusOr<Json> doc = Parser(text).Parse();
  if (!doc.ok()) return Fail(absl::StrCat(in, ": ", doc.status().message()), 1);
  const Json* names = doc->Get("allocators");
  const Json* events = doc->Get("events");
  if (doc->kind != Json::kObject || names == nullptr || events == nullptr ||
      names->kind != Json::kArray || events->kind != Json::kArray) {
    return Fail(absl::StrCat(in, ": not a memory history (needs \"allocators\" and \"events\")"),
                1);
  }
  std::vector<Series> series(names->items.size());
  const Json* limits = doc->Get("limits");
  for (size_t i = 0; i < series.size(); ++i) {
    series[i].name = names->items[i].text;
    const Json* l = limits != nullptr ? limits->Get(series[i].name) : nullptr;
    series[i].limit = l != nullptr ? l->Number() : double(limit_flag);
  }
  double t_max = 0;
  for (const Json& e : events->items) {
    const Json* t = e.Get("t_ns");
    const Json* a = e.Get("allocator");
    const Json* u = e.Get("in_use");
    const Json* r = e.Get("reserved");
    if (t == nullptr || a == nullptr || u == nullptr || r == nullptr) {
      return Fail(absl::StrCat(in, ": an event lacks t_ns, allocator, in_use or reserved"), 1);
    }
    size_t idx = static_cast<size_t>(a->Number());
    if (idx >= series.size())
      return Fail(absl::StrCat(in, ": event allocator index ", idx, " but only ", series.size(),
                               " allocator name(s)"),
                  1);
    double ms = t->Number() / 1e6;
    series[idx].points.push_back({ms, u->Number(), r->Number()});
    t_max = std::max(t_max, ms);
  }
  const Json* dropped = doc->Get("dropped");
  std::string svg = Render(series, t_max, dropped ? uint64_t(dropped->Number()) : 0);
  std::ofstream o(out);
  o << svg;
  if (!o.flush()) return Fail(absl::StrCat("cannot write ", out), 1);
  std::printf("%s: %zu allocator(s), %zu event(s), %.1f ms\n", out.c_str(), series.size(),
              events->items.size(), t_max);
  return 0;
}

}  // namespace vgpu_info
