#include "svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "weft/core/json.h"

namespace weft::svg {

std::string esc(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string num(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string dur(double s) {
  const double a = std::fabs(s);
  if (a == 0.0) return "0";
  if (a >= 1.0) return num(s, a >= 100 ? 1 : 3) + " s";
  if (a >= 1e-3) return num(s * 1e3, a >= 0.1 ? 1 : 2) + " ms";
  return num(s * 1e6, 1) + " us";
}

std::string gib(double g) { return num(g, 2) + " GiB"; }

std::string pct(double f) { return num(100.0 * f, 1) + "%"; }

double tick_step(double span, int target) {
  if (span <= 0 || target <= 0) return 1.0;
  const double raw = span / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double k : {1.0, 2.0, 5.0, 10.0})
    if (k * p >= raw) return k * p;
  return 10.0 * p;
}

Writer::Writer(const std::string& id, double w, double h, const std::string& label) {
  out_ = "<svg id=\"" + esc(id) + "\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " + num(w, 0) + " " +
         num(h, 0) + "\" width=\"100%\" role=\"img\" aria-label=\"" + esc(label) + "\">\n";
}

void Writer::rect(double x, double y, double w, double h, const std::string& fill, const std::string& title,
                  const std::string& extra) {
  out_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(std::max(w, 0.0)) + "\" height=\"" +
          num(std::max(h, 0.0)) + "\" fill=\"" + fill + "\"" + (extra.empty() ? "" : " " + extra);
  if (title.empty()) {
    out_ += "/>\n";
  } else {
    out_ += "><title>" + esc(title) + "</title></rect>\n";
  }
}

void Writer::line(double x1, double y1, double x2, double y2, const std::string& stroke, double width,
                  const std::string& dash) {
  out_ += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) +
          "\" stroke=\"" + stroke + "\" stroke-width=\"" + num(width, 1) + "\"" +
          (dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"") + "/>\n";
}

void Writer::text(double x, double y, const std::string& s, const std::string& anchor, double size,
                  const std::string& fill, const std::string& extra) {
  out_ += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + num(size, 1) + "\" text-anchor=\"" +
          anchor + "\" fill=\"" + fill + "\"" + (extra.empty() ? "" : " " + extra) + ">" + esc(s) + "</text>\n";
}

std::string Writer::finish() {
  out_ += "</svg>\n";
  return std::move(out_);
}

std::string html_legend(const std::vector<LegendItem>& items) {
  std::string o = "<ul class=\"legend\">";
  for (const auto& it : items)
    o += "<li><span class=\"swatch" + std::string(it.hatched ? " hatched" : "") + "\" style=\"background:" +
         it.color + "\"></span>" + esc(it.label) + "</li>";
  return o + "</ul>\n";
}

std::string page_start(const std::string& heading, const std::string& extra_css) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" + esc(heading) +
         "</title>\n<style>body{font-family:system-ui,sans-serif;margin:24px auto;max-width:960px;color:#222}"
         "p{margin:4px 0}.legend{font-size:12px;color:#555}" +
         extra_css + "</style>\n</head>\n<body>\n<h1>" + esc(heading) + "</h1>\n";
}

Status write_page(const std::string& path, const Result<std::string>& page) {
  if (!page.ok()) return page.error();
  auto w = catch_errors([&]() -> Result<bool> {
    write_text_file(path, page.value());
    return true;
  });
  if (!w.ok()) return w.error();
  return {};
}

}  // namespace weft::svg
