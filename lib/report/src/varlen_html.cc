#include "weft/report/varlen_html.h"

#include <algorithm>
#include <cmath>

#include "svg.h"

namespace weft {
namespace {

// Documents coloured by length on a log scale, short (light) to long (dark).
std::string doc_color(std::int64_t len) {
  const double x = std::clamp((std::log2(static_cast<double>(std::max<std::int64_t>(len, 1))) - 7) / 11, 0.0, 1.0);
  const int r = static_cast<int>(198 - 150 * x), g = static_cast<int>(219 - 120 * x), b = static_cast<int>(239 - 60 * x);
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

// The time of a micro-batch: its slowest group's overhead and documents.
double micro_batch_time(const std::vector<VarlenPictureGroup>& mb) {
  double t = 0;
  for (const VarlenPictureGroup& g : mb) {
    double gt = g.overhead_s;
    for (double x : g.times_s) gt += x;
    t = std::max(t, gt);
  }
  return t;
}

std::string step_svg(const VarlenPictureStep& st, int gpus, double scale_s) {
  const double w = 900, left = 70, right = 10, top = 20, band_gap = 14;
  const double col = (w - left - right) / gpus;
  double height = top;
  std::vector<double> mb_time;
  for (const auto& mb : st.micro_batches) {
    mb_time.push_back(micro_batch_time(mb));
    height += mb_time.back() / scale_s + band_gap;
  }
  height += 10;
  svg::Writer s("varlen-step-" + std::to_string(st.step), w, height,
                "step " + std::to_string(st.step) + ": groups and their documents");
  double y = top;
  for (size_t m = 0; m < st.micro_batches.size(); ++m) {
    s.text(left - 6, y + 11, "mb " + std::to_string(m), "end", 11);
    s.text(left - 6, y + 24, svg::dur(mb_time[m]), "end", 10, "#555");
    double x = left;
    for (const VarlenPictureGroup& g : st.micro_batches[m]) {
      const double gw = g.size * col;
      double gy = y;
      s.rect(x, gy, gw, g.overhead_s / scale_s, "#bbbbbb",
             "group of " + std::to_string(g.size) + " GPUs: overhead " + svg::dur(g.overhead_s));
      gy += g.overhead_s / scale_s;
      for (size_t d = 0; d < g.lengths.size(); ++d) {
        const double h = g.times_s[d] / scale_s;
        s.rect(x, gy, gw, h, doc_color(g.lengths[d]),
               std::to_string(g.lengths[d]) + " tokens on " + std::to_string(g.size) + " GPUs: " + svg::dur(g.times_s[d]),
               "stroke=\"#fff\" stroke-width=\"0.5\"");
        gy += h;
      }
      s.rect(x, y, gw, mb_time[m] / scale_s, "none", "", "stroke=\"#333\" stroke-width=\"0.8\"");
      if (gw >= 24) s.text(x + gw / 2, y + mb_time[m] / scale_s + 11, std::to_string(g.size), "middle", 9, "#333");
      x += gw;
    }
    y += mb_time[m] / scale_s + band_gap;
  }
  return s.finish();
}

}  // namespace

Result<std::string> render_varlen_html(const VarlenReportInput& in) {
  if (in.gpus <= 0) return Error{ErrorKind::kBadInput, "varlen report: no GPUs"};
  double longest = 0;
  for (const VarlenPictureStep& st : in.steps) {
    for (size_t m = 0; m < st.micro_batches.size(); ++m) {
      int used = 0;
      for (const VarlenPictureGroup& g : st.micro_batches[m]) {
        used += g.size;
        if (g.lengths.size() != g.times_s.size())
          return Error{ErrorKind::kBadInput, "varlen report: step " + std::to_string(st.step) +
                                                 " has a group whose documents and times differ in number"};
      }
      if (used != in.gpus)
        return Error{ErrorKind::kBadInput, "varlen report: step " + std::to_string(st.step) + " micro-batch " +
                                               std::to_string(m) + " uses " + std::to_string(used) + " of " +
                                               std::to_string(in.gpus) + " GPUs"};
    }
    for (const auto& mb : st.micro_batches) longest = std::max(longest, micro_batch_time(mb));
  }
  // One time scale for every picture: the slowest micro-batch 300 units high.
  const double scale = longest > 0 ? longest / 300 : 1;
  std::string h = svg::page_start("weft varlen: " + in.title, "h2{font-size:16px;margin:22px 0 4px}");
  for (const std::string& n : in.notes) h += "<p>" + svg::esc(n) + "</p>\n";
  h += "<p class=\"legend\">Each band is a micro-batch, as wide as the GPUs and as tall as its time (one scale for "
       "every picture). Each column is a sequence-parallel group, as wide as its GPUs: grey is its fixed time per "
       "micro-batch, then its documents by their times, darker for longer documents (hover for tokens and time). "
       "The number under a column is its GPUs.</p>\n";
  for (const VarlenPictureStep& st : in.steps) {
    h += "<h2>step " + std::to_string(st.step) + ": weft " + svg::dur(st.weft_s) + ", static " + svg::dur(st.static_s) +
         ", adaptive " + svg::dur(st.adaptive_s) + " (planned in " + svg::num(st.plan_ms, 1) + " ms)</h2>\n";
    h += step_svg(st, in.gpus, scale);
  }
  h += "</body></html>\n";
  return h;
}

Status write_varlen_html(const std::string& path, const VarlenReportInput& in) {
  return svg::write_page(path, render_varlen_html(in));
}

}  // namespace weft
