#include "weft/report/tasks_html.h"

#include <algorithm>
#include <map>

#include "svg.h"

namespace weft {
namespace {

// A colour per module, in the order the modules first appear.
const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                          "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

}  // namespace

Result<std::string> render_tasks_html(const TasksReportInput& in) {
  if (in.gpus <= 0) return Error{ErrorKind::kBadInput, "tasks report: no GPUs"};
  double end = 0;
  std::map<std::string, std::string> color;
  std::vector<std::string> modules;
  for (size_t w = 0; w < in.waves.size(); ++w) {
    int used = 0;
    for (const TasksPicturePiece& p : in.waves[w].pieces) {
      used += p.gpus;
      if (p.first_rank + p.gpus > in.gpus)
        return Error{ErrorKind::kBadInput, "tasks report: wave " + std::to_string(w + 1) + ": " + p.task + "/" +
                                               p.module + " on ranks " + std::to_string(p.first_rank) + " to " +
                                               std::to_string(p.first_rank + p.gpus - 1) + " of " +
                                               std::to_string(in.gpus) + " GPUs"};
      if (!color.count(p.module)) {
        color[p.module] = kPalette[modules.size() % (sizeof kPalette / sizeof *kPalette)];
        modules.push_back(p.module);
      }
    }
    if (used > in.gpus)
      return Error{ErrorKind::kBadInput, "tasks report: wave " + std::to_string(w + 1) + " uses " +
                                             std::to_string(used) + " of " + std::to_string(in.gpus) + " GPUs"};
  }
  bool timed = !in.waves.empty();  // every piece says when it runs
  for (const TasksPictureWave& w : in.waves)
    for (const TasksPicturePiece& p : w.pieces) timed = timed && p.forward_s >= 0 && p.backward_s >= 0;
  for (const TasksPictureWave& w : in.waves) {
    if (!timed) end = std::max(end, w.start_s + w.time_s);
    for (const TasksPicturePiece& p : w.pieces)
      if (timed) end = std::max({end, p.forward_s + p.forward_len_s, p.backward_s + p.backward_len_s});
  }
  const double width = 900, left = 60, right = 10, top = 24, row = std::clamp(480.0 / in.gpus, 3.0, 22.0);
  const double height = top + row * in.gpus + 30;
  const double xs = end > 0 ? (width - left - right) / end : 1;
  svg::Writer s("tasks-waves", width, height, "waves: device groups over time");
  // GPU axis and time ticks.
  const int gstep = std::max(1, in.gpus / 16);
  for (int g = 0; g < in.gpus; g += gstep) s.text(left - 6, top + g * row + row * 0.8, "GPU " + std::to_string(g), "end", 9);
  const double tick = svg::tick_step(end, 8);
  for (double t = 0; tick > 0 && t <= end * (1 + 1e-9); t += tick) {
    s.line(left + t * xs, top, left + t * xs, top + row * in.gpus, "#ddd", 0.5);
    s.text(left + t * xs, top + row * in.gpus + 14, svg::dur(t), "middle", 9, "#555");
  }
  for (size_t w = 0; w < in.waves.size(); ++w) {
    const TasksPictureWave& wave = in.waves[w];
    const double x = left + wave.start_s * xs;
    int g = 0;
    for (const TasksPicturePiece& p : wave.pieces) {
      if (p.first_rank >= 0) g = p.first_rank;
      const double y = top + g * row, h = p.gpus * row;
      const std::string what = p.task + " / " + p.module + ": " + std::to_string(p.layers) + " layers on " +
                               std::to_string(p.gpus) + " GPUs (from GPU " + std::to_string(g) + ")";
      if (timed) {
        const double fx = left + p.forward_s * xs, fl = p.forward_len_s * xs;
        const double bx = left + p.backward_s * xs, bl = p.backward_len_s * xs;
        s.rect(fx, y, fl, h, color[p.module], what + ", wave " + std::to_string(w + 1) + ", forward " +
                   svg::dur(p.forward_len_s) + " from " + svg::dur(p.forward_s),
               "stroke=\"#fff\" stroke-width=\"0.6\"");
        s.rect(bx, y, bl, h, color[p.module], what + ", wave " + std::to_string(w + 1) + ", backward " +
                   svg::dur(p.backward_len_s) + " from " + svg::dur(p.backward_s),
               "stroke=\"#fff\" stroke-width=\"0.6\" fill-opacity=\"0.6\"");
        if (h >= 10 && bl >= 40) s.text(bx + 3, y + std::min(h, 12.0) - 2, p.module, "start", 9, "#fff");
      } else {
        const double len = p.time_s * xs;
        s.rect(x, y, len, h, color[p.module], what + ", " + svg::dur(p.time_s), "stroke=\"#fff\" stroke-width=\"0.6\"");
        if (h >= 10 && len >= 40) s.text(x + 3, y + std::min(h, 12.0) - 2, p.module, "start", 9, "#fff");
      }
      g += p.gpus;
    }
    if (timed) continue;
    s.line(x, top, x, top + row * in.gpus, "#333", 0.8);
    s.text(x + 2, top - 6, std::to_string(w + 1), "start", 9, "#333");
  }
  std::string h = svg::page_start("weft plan --tasks: " + in.title,
                                   ".swatch{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}");
  for (const std::string& n : in.notes) h += "<p>" + svg::esc(n) + "</p>\n";
  h += timed ? "<p class=\"legend\">Time runs across, the GPUs down: the step as it runs, without barriers between "
               "waves. Each piece is a device group as tall as its GPUs, drawn twice: its forward, and paler its "
               "backward (hover for the task, the layers, the wave and the times); white is idle. Modules:"
             : "<p class=\"legend\">Time runs across, the GPUs down. Each wave (numbered at its start) runs modules side "
               "by side, each on a device group as tall as its GPUs and as long as its time (hover for the task, the "
               "layers and the time); white is idle. Modules:";
  for (const std::string& m : modules)
    h += "<span class=\"swatch\" style=\"background:" + color[m] + "\"></span>" + svg::esc(m);
  h += "</p>\n" + s.finish() + "</body></html>\n";
  return h;
}

Status write_tasks_html(const std::string& path, const TasksReportInput& in) {
  return svg::write_page(path, render_tasks_html(in));
}

}  // namespace weft
