// A small SVG/HTML writer for the report: escaping, number formatting and the few shapes the
// pictures use. Private to lib/report.
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft::svg {

// Escapes &, <, >, " and ' for text and attribute values.
std::string esc(const std::string& s);
// Fixed-point number with `digits` decimals ("1.50").
std::string num(double v, int digits = 2);
// A duration with a unit chosen for its size: "1.23 s", "45.6 ms", "789 us".
std::string dur(double seconds);
// Bytes as GiB with two decimals: "12.34 GiB".
std::string gib(double gib_value);
// Percentage with one decimal: "12.3%".
std::string pct(double fraction);
// Nice tick spacing for an axis of length `span` with about `target` ticks (1, 2, 5 x 10^k).
double tick_step(double span, int target);

class Writer {
 public:
  // Opens <svg> with a viewBox of w x h, drawn at 100% of the page width.
  Writer(const std::string& id, double w, double h, const std::string& label);
  void rect(double x, double y, double w, double h, const std::string& fill, const std::string& title = "",
            const std::string& extra = "");
  void line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
            const std::string& dash = "");
  // anchor: start | middle | end.
  void text(double x, double y, const std::string& s, const std::string& anchor = "start", double size = 11,
            const std::string& fill = "#222", const std::string& extra = "");
  void raw(const std::string& s) { out_ += s; }
  // Closes the element and returns the SVG text.
  std::string finish();

 private:
  std::string out_;
};

// A legend entry: colour swatch + label, for HTML legends under the pictures.
struct LegendItem {
  std::string color;
  std::string label;
  bool hatched = false;
};
std::string html_legend(const std::vector<LegendItem>& items);

// The opening of a standalone page (the varlen and multi-task pages): doctype, <title> and <h1>
// `heading` (escaped), a plain style for body, paragraphs and .legend, and `extra_css` after it.
std::string page_start(const std::string& heading, const std::string& extra_css = "");
// Writes a rendered page atomically (weft/core/json.h's write_text_file), or passes its error on.
Status write_page(const std::string& path, const Result<std::string>& page);

}  // namespace weft::svg
