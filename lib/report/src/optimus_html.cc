#include "weft/report/optimus_html.h"

#include <algorithm>
#include <map>

#include "svg.h"

namespace weft {
namespace {

struct Look {
  const char* fill;
  const char* label;
};

// Colours of the kinds; encoder work outside the LLM's idle time in a darker shade.
const std::map<std::string, Look>& looks() {
  static const std::map<std::string, Look> m = {
      {"llm-forward", {"#9ecae1", "LLM forward"}},
      {"llm-backward", {"#4a7fb0", "LLM backward"}},
      {"llm-other", {"#bbbbbb", "LLM transfer / update"}},
      {"encoder-fwd", {"#f5a34a", "encoder forward in a bubble"}},
      {"encoder-bwd", {"#e15759", "encoder backward in a bubble"}},
      {"encoder-optimizer", {"#b07aa1", "encoder update"}},
  };
  return m;
}

const char* outside_fill(const std::string& kind) {
  if (kind == "encoder-fwd") return "#a65c00";
  if (kind == "encoder-bwd") return "#8c1c1e";
  return nullptr;
}

Result<std::string> chart_svg(const OptimusChart& c, size_t index) {
  if (c.groups <= 0) return Error{ErrorKind::kBadInput, "optimus report: chart " + c.title + " has no device group"};
  double end = c.llm_end_s;
  for (const OptimusPictureEvent& e : c.events) {
    if (e.group < 0 || e.group >= c.groups)
      return Error{ErrorKind::kBadInput, "optimus report: chart " + c.title + ": an event on group " +
                                             std::to_string(e.group) + " of " + std::to_string(c.groups)};
    if (e.end_s < e.start_s)
      return Error{ErrorKind::kBadInput, "optimus report: chart " + c.title + ": an event ends at " +
                                             svg::dur(e.end_s) + " before it starts at " + svg::dur(e.start_s)};
    if (!looks().count(e.kind))
      return Error{ErrorKind::kBadInput, "optimus report: chart " + c.title + ": unknown event kind \"" + e.kind + "\""};
    end = std::max(end, e.end_s);
  }
  const double width = 900, left = 70, right = 10, top = 20, row = 14, gap = 6;
  const double height = top + c.groups * (2 * row + gap) + 26;
  const double xs = end > 0 ? (width - left - right) / end : 1;
  svg::Writer s("optimus-" + std::to_string(index), width, height, c.title);
  const double tick = svg::tick_step(end, 8);
  const double bottom = top + c.groups * (2 * row + gap);
  for (double t = 0; tick > 0 && t <= end * (1 + 1e-9); t += tick) {
    s.line(left + t * xs, top, left + t * xs, bottom, "#eee", 0.5);
    s.text(left + t * xs, bottom + 14, svg::dur(t), "middle", 9, "#555");
  }
  for (int g = 0; g < c.groups; ++g) {
    const double y = top + g * (2 * row + gap);
    s.text(left - 6, y + row * 0.8, "group " + std::to_string(g), "end", 9);
    s.text(left - 6, y + row * 1.8, "encoder", "end", 8, "#777");
  }
  // The LLM's own step: its start and end.
  for (double t : {c.llm_start_s, c.llm_end_s}) s.line(left + t * xs, top - 4, left + t * xs, bottom, "#333", 0.8, "3,2");
  for (const OptimusPictureEvent& e : c.events) {
    const bool enc = e.kind.rfind("encoder", 0) == 0;
    const double y = top + e.group * (2 * row + gap) + (enc ? row : 0);
    const char* fill = looks().at(e.kind).fill;
    if (enc && !e.in_bubble && outside_fill(e.kind)) fill = outside_fill(e.kind);
    std::string title = looks().at(e.kind).label;
    if (enc && !e.in_bubble && outside_fill(e.kind)) title = e.kind == "encoder-fwd" ? "encoder forward, outside the bubbles"
                                                                                 : "encoder backward, outside the bubbles";
    if (e.micro_batch >= 0) title += ", micro-batch " + std::to_string(e.micro_batch);
    title += ": " + svg::dur(e.start_s) + " to " + svg::dur(e.end_s);
    s.rect(left + e.start_s * xs, y + 1, std::max(0.3, (e.end_s - e.start_s) * xs), row - 2, fill, title);
  }
  return "<h2>" + svg::esc(c.title) + "</h2>\n" + s.finish();
}

}  // namespace

Result<std::string> render_optimus_html(const OptimusReportInput& in) {
  std::string h = svg::page_start("weft plan --tasks: " + in.title,
                                   "h2{font-size:15px;margin:18px 0 4px}ul.legend{list-style:none;padding:0;margin:6px 0}"
                                   "ul.legend li{display:inline-block;margin-right:14px}"
                                   ".swatch{display:inline-block;width:10px;height:10px;margin-right:4px}");
  for (const std::string& n : in.notes) h += "<p>" + svg::esc(n) + "</p>\n";
  std::vector<svg::LegendItem> legend;
  for (const char* k : {"llm-forward", "llm-backward", "llm-other", "encoder-fwd", "encoder-bwd", "encoder-optimizer"})
    legend.push_back({looks().at(k).fill, looks().at(k).label});
  legend.push_back({"#a65c00", "encoder forward outside the bubbles"});
  legend.push_back({"#8c1c1e", "encoder backward outside the bubbles"});
  h += "<p class=\"legend\">Time runs across; each pipeline device group of the LLM is two rows, its own "
       "operations above and the encoder's work on one of its lanes below (hover for the micro-batch and the "
       "times). The dashed lines mark the LLM's own step; encoder work before or after it lengthens the step.</p>\n";
  h += svg::html_legend(legend);
  for (size_t i = 0; i < in.charts.size(); ++i) {
    Result<std::string> c = chart_svg(in.charts[i], i);
    if (!c.ok()) return c.error();
    h += *c;
  }
  h += "</body></html>\n";
  return h;
}

Status write_optimus_html(const std::string& path, const OptimusReportInput& in) {
  return svg::write_page(path, render_optimus_html(in));
}

}  // namespace weft
