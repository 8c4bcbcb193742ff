// The self-contained HTML report (pictures described in weft/report/html.h).
#include "weft/report/html.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "svg.h"
#include "weft/core/format.h"
#include "weft/cost/estimate.h"
#include "weft/cost/schedule.h"
#include "weft/plan/pipeline_order.h"

namespace weft {

namespace {

using svg::esc;
using svg::Writer;


// Everything the pictures need about one plan.
struct Figures {
  const Plan* plan = nullptr;
  std::string name;      // "plan", "alternative 1", "uniform"
  Estimate est;
  Simulation sim;
  std::vector<StageTiming> timings;
};

Figures figures_of(const Plan& p, const std::string& name, const CostModel& cm) {
  Status v = validate(p);
  if (!v.ok()) throw InputError(name + ": " + v.error().message);
  Figures f;
  f.plan = &p;
  f.name = name;
  f.est = estimate(p, cm);
  f.timings = stage_timings(p, cm);
  auto sim = simulate_schedule(schedule_spec(p, cm), f.timings);
  if (!sim.ok()) throw InputError(name + ": " + sim.error().message);
  f.sim = std::move(sim).value();
  return f;
}

// --- colours -------------------------------------------------------------------------------------

const char* kForward[2] = {"#4e79a7", "#9fbfdf"};
const char* kBackward[2] = {"#59a14f", "#a6d49c"};
const char* kRecompute = "#f28e2b";
const char* kWeightGrad = "#edc948";  // ZB-H1's deferred weight-gradient passes (W)
const char* kP2p = "#8c8c8c";
const char* kOptimizer = "#b07aa1";
const char* kGradSync = "#e15759";
const char* kNeutral = "#eeeeee";

// Sequential blues for parallel degrees 1, 2, 4, 8, 16, 32, 64+.
std::string degree_color(int d) {
  static const char* pal[] = {"#eeeeee", "#c6dbef", "#9ecae1", "#6baed6", "#3182bd", "#08519c", "#08306b"};
  int i = d <= 1 ? 0 : static_cast<int>(std::lround(std::log2(static_cast<double>(d))));
  return pal[std::clamp(i, 0, 6)];
}
bool dark_degree(int d) { return d >= 16; }

std::string zero_color(int z) {
  static const char* pal[] = {"#eeeeee", "#c7e9c0", "#74c476", "#238b45"};
  return pal[std::clamp(z, 0, 3)];
}

std::string recompute_color(Recompute r) {
  switch (r) {
    case Recompute::kNone: return kNeutral;
    case Recompute::kSelective: return "#fdd0a2";
    case Recompute::kFull: return "#e6550d";
  }
  return kNeutral;
}

std::string seq_label(const LayerStrategy& s) {
  std::string o;
  auto add = [&](const std::string& x) { o += (o.empty() ? "" : "+") + x; };
  if (s.sp) add("sp");
  if (s.ulysses > 1) add("uly" + S(s.ulysses));
  if (s.cp > 1) add("cp" + S(s.cp));
  return o.empty() ? "none" : o;
}
std::string seq_color(const LayerStrategy& s) {
  if (s.ulysses > 1 && s.cp > 1) return "#d37295";
  if (s.cp > 1) return "#9c755f";
  if (s.ulysses > 1) return "#b07aa1";
  if (s.sp) return "#76b7b2";
  return kNeutral;
}

// --- the time breakdown's parts --------------------------------------------------------------

struct Part {
  const char* name;
  const char* color;
  double seconds;
  bool hatched = false;
  bool comm = false;
};

std::vector<Part> parts_of(const TimeBreakdown& t) {
  return {{"compute", "#4e79a7", t.compute.value()},
          {"recompute", kRecompute, t.recompute.value()},
          {"embedding / LM head", "#76b7b2", t.embedding.value()},
          {"TP comm", "#e15759", t.tp_comm.value(), false, true},
          {"Ulysses all-to-all", "#17becf", t.ulysses_comm.value(), false, true},
          {"context-parallel comm", "#9c755f", t.cp_comm.value(), false, true},
          {"expert all-to-all", "#ff9da7", t.ep_comm.value(), false, true},
          {"ZeRO-3 all-gather", "#edc948", t.zero3_gather.value(), false, true},
          {"re-distribution", "#bab0ac", t.redistribution.value(), false, true},
          {"pipeline p2p", kP2p, t.p2p.value(), false, true},
          {"DP sync (exposed)", "#d37295", t.dp_exposed.value(), false, true},
          {"bubble", "#dddddd", t.bubble.value(), true},
          {"optimizer", kOptimizer, t.optimizer.value()}};
}

double comm_seconds(const TimeBreakdown& t) {
  double c = 0;
  for (const auto& p : parts_of(t))
    if (p.comm) c += p.seconds;
  return c;
}

const std::string kHatchDefs =
    "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
    "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f4f4f4\"/>"
    "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#c8c8c8\" stroke-width=\"2\"/></pattern></defs>\n";

std::string hatch_defs(const std::string& id) {
  std::string d = kHatchDefs;
  const std::string from = "id=\"hatch\"";
  d.replace(d.find(from), from.size(), "id=\"" + id + "\"");
  return d;
}

// --- pictures ------------------------------------------------------------------------------------

void axis_ticks(Writer& w, double x0, double plot_w, double tmax, double y, double h_grid) {
  const double step = svg::tick_step(tmax, 8);
  for (double t = 0; t <= tmax * 1.0001; t += step) {
    const double x = x0 + t / tmax * plot_w;
    w.line(x, y - h_grid, x, y, "#e4e4e4", 1);
    w.text(x, y + 14, svg::dur(t), "middle", 10, "#555");
  }
}

std::string timeline_svg(const Figures& f) {
  const Plan& p = *f.plan;
  const Simulation& sim = f.sim;
  const int pp = sim.spec.pp;
  const double predicted = f.est.step_time.value();
  const double tmax = std::max({sim.makespan_s, predicted, 1e-12}) * 1.02;
  const double W = 1100, left = 118, right = 16, top = 34, row = 26, lane = 7, gap = 10;
  const double plot_w = W - left - right;
  const double H = top + pp * (row + lane + gap) + 30;
  auto X = [&](double t) { return left + t / tmax * plot_w; };
  Writer w("timeline", W, H, "pipeline schedule of one step, one row per stage");
  w.raw(hatch_defs("hatch-timeline"));
  const double rows_bottom = top + pp * (row + lane + gap) - gap;
  axis_ticks(w, left, plot_w, tmax, rows_bottom + 4, rows_bottom + 4 - top + 6);
  const int per_stage = p.devices_per_stage();
  for (int g = 0; g < pp; ++g) {
    const double y = top + g * (row + lane + gap);
    w.text(8, y + 12, "stage " + S(g), "start", 12, "#222", "font-weight=\"600\"");
    w.text(8, y + 25, "ranks " + S(g * per_stage) + "-" + S((g + 1) * per_stage - 1), "start", 9.5, "#666");
    // The hatched background shows through wherever the stage is idle: the bubbles.
    w.rect(X(0), y, X(sim.makespan_s) - X(0), row, "url(#hatch-timeline)",
           "stage " + S(g) + " idle (bubble) " + svg::dur(sim.bubble_s[g]) + " before its last backward");
    w.rect(X(0), y + row + 1, X(sim.makespan_s) - X(0), lane - 1, "#fafafa");
  }
  const int m = sim.spec.micro_batches;
  // Large steps: blocks narrower than a quarter pixel are not drawn (they would not show), and
  // tooltips are left out above 6000 events to keep the file small.
  const bool titles = sim.events.size() <= 6000;
  for (const ScheduleEvent& e : sim.events) {
    const double y = top + e.device_group * (row + lane + gap);
    if (X(e.end_s) - X(e.start_s) < 0.25) continue;
    const double x = X(e.start_s), wd = X(e.end_s) - x;
    const int chunk = stage_chunk(sim.spec.schedule, pp, e.stage);
    std::string color, label;
    switch (e.kind) {
      case EventKind::kForward: color = kForward[chunk % 2]; label = "F"; break;
      case EventKind::kBackward: color = kBackward[chunk % 2]; label = "B"; break;
      case EventKind::kRecompute: color = kRecompute; label = "R"; break;
      case EventKind::kWeightGrad: color = kWeightGrad; label = "W"; break;
      case EventKind::kP2p: color = kP2p; label = "p2p"; break;
      case EventKind::kOptimizer: color = kOptimizer; label = "optimizer"; break;
      case EventKind::kGradSync: color = kGradSync; label = "grad sync"; break;
    }
    std::string title;
    if (titles) {
      title = "stage " + S(e.device_group);
      if (sim.spec.vp > 1) title += " (virtual stage " + S(e.stage) + ")";
      title += ": " + std::string(to_string(e.kind));
      if (e.micro_batch >= 0) title += " of micro-batch " + S(e.micro_batch);
      title += ", " + svg::dur(e.duration()) + " (" + svg::dur(e.start_s) + " - " + svg::dur(e.end_s) + ")";
    }
    if (e.kind == EventKind::kGradSync) {
      w.rect(x, y + row + 1, wd, lane - 1, color, title);
      continue;
    }
    std::string extra = e.micro_batch >= 0 ? "data-mb=\"" + S(e.micro_batch) + "\"" : "";
    w.rect(x, y, wd, row, color, title, extra);
    if ((e.kind == EventKind::kForward || e.kind == EventKind::kBackward || e.kind == EventKind::kWeightGrad) &&
        wd >= 13 && m <= 999)
      w.text(x + wd / 2, y + 17, S(e.micro_batch), "middle", 10, e.kind == EventKind::kForward && chunk % 2 == 0 ? "#fff" : "#123",
             "pointer-events=\"none\"");
    else if (e.kind == EventKind::kOptimizer && wd >= 24)
      w.text(x + wd / 2, y + 17, "opt", "middle", 10, "#fff", "pointer-events=\"none\"");
  }
  // Step time markers: the cost model's prediction and the simulated end.
  w.line(X(predicted), 10, X(predicted), rows_bottom + 4, "#c0392b", 1.5, "5,3");
  w.text(X(predicted) - 3, 12, "predicted step " + svg::dur(predicted), "end", 11, "#c0392b");
  w.line(X(sim.makespan_s), 20, X(sim.makespan_s), rows_bottom + 4, "#222", 1.2);
  w.text(X(sim.makespan_s) - 3, 27, "simulated " + svg::dur(sim.makespan_s), "end", 10, "#222");
  return w.finish();
}

std::string memory_svg(const Figures& f, const CostModel& cm) {
  const Plan& p = *f.plan;
  const int pp = p.train.pp;
  std::vector<MemoryBreakdown> dev(pp);
  for (size_t s = 0; s < f.est.stages.size(); ++s) dev[stage_group(p, static_cast<int>(s))] += f.est.stages[s].memory;
  const double capacity = p.cluster.gpu.memory_gib;
  const double budget = to_gib(cm.memory_budget(p.cluster));
  double ymax = std::max(capacity, budget);
  for (const auto& d : dev) ymax = std::max(ymax, to_gib(d.total()));
  ymax *= 1.12;
  const double W = 1100, H = 320, left = 64, right = 150, top = 16, bottom = 40;
  const double plot_w = W - left - right, plot_h = H - top - bottom;
  auto Y = [&](double g) { return top + plot_h - g / ymax * plot_h; };
  Writer w("memory", W, H, "memory per device of each stage against the device limit");
  const double step = svg::tick_step(ymax, 6);
  for (double g = 0; g <= ymax; g += step) {
    w.line(left, Y(g), left + plot_w, Y(g), "#ececec");
    w.text(left - 6, Y(g) + 4, svg::num(g, g < 10 && step < 1 ? 1 : 0), "end", 10, "#555");
  }
  w.text(14, top + plot_h / 2, "GiB", "middle", 11, "#555", "transform=\"rotate(-90 14 " + svg::num(top + plot_h / 2) + ")\"");
  const double slot = plot_w / pp;
  const double bw = std::min(90.0, slot * 0.62);
  struct Seg {
    const char* name;
    const char* color;
    Bytes MemoryBreakdown::*field;
  };
  const Seg segs[] = {{"weights", "#4e79a7", &MemoryBreakdown::weights},
                      {"gradients", "#f28e2b", &MemoryBreakdown::grads},
                      {"optimizer states", "#59a14f", &MemoryBreakdown::optimizer},
                      {"activations", "#e15759", &MemoryBreakdown::activations},
                      {"other", "#bab0ac", &MemoryBreakdown::other}};
  for (int g = 0; g < pp; ++g) {
    const double x = left + g * slot + (slot - bw) / 2;
    double acc = 0;
    for (const auto& sg : segs) {
      const double v = to_gib(dev[g].*(sg.field));
      if (v <= 0) continue;
      w.rect(x, Y(acc + v), bw, Y(acc) - Y(acc + v), sg.color,
             "stage " + S(g) + " " + sg.name + ": " + svg::gib(v));
      acc += v;
    }
    w.text(x + bw / 2, Y(acc) - 5, svg::num(acc, 1), "middle", 10, acc > budget ? "#c0392b" : "#222");
    if (pp <= 32 || g % (pp / 16) == 0) w.text(x + bw / 2, top + plot_h + 16, "stage " + S(g), "middle", 10, "#333");
  }
  w.line(left, Y(capacity), left + plot_w, Y(capacity), "#c0392b", 1.5);
  w.text(left + plot_w + 6, Y(capacity) + 4, "device " + svg::gib(capacity), "start", 10.5, "#c0392b");
  if (std::fabs(budget - capacity) > 1e-6) {
    w.line(left, Y(budget), left + plot_w, Y(budget), "#e67e22", 1.2, "6,3");
    w.text(left + plot_w + 6, Y(budget) + (budget < capacity ? 12 : -4), "budget " + svg::gib(budget), "start", 10.5,
           "#e67e22");
  }
  w.line(left, top + plot_h, left + plot_w, top + plot_h, "#888");
  return w.finish();
}

struct MapRow {
  std::string name;
  std::function<std::string(const LayerStrategy&)> color, text, label;
  std::function<bool(const LayerStrategy&)> dark;
};

std::vector<MapRow> map_rows(const Plan& p) {
  std::vector<MapRow> rows;
  auto never = [](const LayerStrategy&) { return false; };
  rows.push_back({"tp", [](const LayerStrategy& s) { return degree_color(s.tp); },
                  [](const LayerStrategy& s) { return S(s.tp); }, [](const LayerStrategy& s) { return "tp " + S(s.tp); },
                  [](const LayerStrategy& s) { return dark_degree(s.tp); }});
  rows.push_back({"sequence", seq_color, [](const LayerStrategy& s) { return seq_label(s) == "none" ? "" : seq_label(s); },
                  seq_label, never});
  rows.push_back({"dp", [](const LayerStrategy& s) { return degree_color(s.dp); },
                  [](const LayerStrategy& s) { return S(s.dp); }, [](const LayerStrategy& s) { return "dp " + S(s.dp); },
                  [](const LayerStrategy& s) { return dark_degree(s.dp); }});
  rows.push_back({"ZeRO", [](const LayerStrategy& s) { return zero_color(s.zero); },
                  [](const LayerStrategy& s) { return S(s.zero); },
                  [](const LayerStrategy& s) { return "ZeRO-" + S(s.zero); },
                  [](const LayerStrategy& s) { return s.zero == 3; }});
  rows.push_back({"recompute", [](const LayerStrategy& s) { return recompute_color(s.recompute); },
                  [](const LayerStrategy& s) {
                    return s.recompute == Recompute::kFull ? "F" : s.recompute == Recompute::kSelective ? "S" : "";
                  },
                  [](const LayerStrategy& s) { return std::string("recompute ") + to_string(s.recompute); },
                  [](const LayerStrategy& s) { return s.recompute == Recompute::kFull; }});
  if (p.model.has_moe())
    rows.push_back({"ep", [](const LayerStrategy& s) { return degree_color(s.ep); },
                    [](const LayerStrategy& s) { return S(s.ep); }, [](const LayerStrategy& s) { return "ep " + S(s.ep); },
                    [](const LayerStrategy& s) { return dark_degree(s.ep); }});
  bool etp = false;
  for (const Stage& st : p.stages)
    for (const LayerStrategy& s : st.layers) etp = etp || s.expert_tp() != s.tp;
  if (etp)
    rows.push_back({"etp", [](const LayerStrategy& s) { return degree_color(s.expert_tp()); },
                    [](const LayerStrategy& s) { return S(s.expert_tp()); },
                    [](const LayerStrategy& s) { return "expert tp " + S(s.expert_tp()); },
                    [](const LayerStrategy& s) { return dark_degree(s.expert_tp()); }});
  return rows;
}

std::string strategy_map(const Figures& f) {
  const Plan& p = *f.plan;
  const int L = p.model.num_layers();
  const auto rows = map_rows(p);
  const double W = 1100, left = 86, right = 16, top = 36, rh = 22, rgap = 4;
  const double plot_w = W - left - right;
  const double emb_gap = 10;
  const double cw = std::clamp((plot_w - emb_gap) / (L + 1), 2.0, 30.0);
  const double H = top + rows.size() * (rh + rgap) + 24;
  Writer w("strategy-map", W, H, "parallel strategy of every layer");
  auto X = [&](int col) { return left + (col == 0 ? 0.0 : emb_gap + col * cw); };  // col 0 = embedding
  // Stage brackets above the cells.
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const auto& st = p.stages[s];
    const double x0 = X(st.first_layer + 1), x1 = X(st.first_layer + st.num_layers() + 1) - 1;
    w.rect(x0, 14, x1 - x0, 8, s % 2 ? "#cfd8e3" : "#9fb3c8",
           "stage " + S(s) + (p.train.vp > 1 ? " (device group " + S(stage_group(p, static_cast<int>(s))) + ")" : "") +
               ": layers " + S(st.first_layer) + "-" + S(st.first_layer + st.num_layers() - 1));
    if (x1 - x0 >= 34) w.text((x0 + x1) / 2, 11, "stage " + S(s), "middle", 9.5, "#445");
  }
  w.text(X(0) + cw / 2, 30, "emb", "middle", 9, "#445");
  const int label_every = cw >= 16 ? 1 : cw >= 6 ? 8 : 16;
  for (int l = 0; l < L; l += label_every) w.text(X(l + 1) + cw / 2, 31, S(l), "middle", 8.5, "#667");
  for (size_t r = 0; r < rows.size(); ++r) {
    const double y = top + r * (rh + rgap);
    w.text(left - 8, y + 15, rows[r].name, "end", 11, "#222");
    for (int col = 0; col <= L; ++col) {
      const LayerStrategy& s = col == 0 ? p.embedding : p.layer_strategy(col - 1);
      const std::string who = col == 0 ? "embedding / LM head" : "layer " + S(col - 1);
      w.rect(X(col), y, std::max(cw - (cw >= 4 ? 1 : 0), 1.0), rh, rows[r].color(s), who + ": " + label(s));
      const std::string t = rows[r].text(s);
      if (!t.empty() && cw >= 7.0 * t.size() && cw >= 14)
        w.text(X(col) + cw / 2, y + 15, t, "middle", 10, rows[r].dark(s) ? "#fff" : "#223", "pointer-events=\"none\"");
    }
  }
  return w.finish();
}

std::string strategy_legend(const Plan& p) {
  std::string o = "<div class=\"map-legend\">";
  std::vector<LayerStrategy> all{p.embedding};
  for (int l = 0; l < p.model.num_layers(); ++l) all.push_back(p.layer_strategy(l));
  for (const auto& row : map_rows(p)) {
    std::vector<svg::LegendItem> items;
    std::set<std::string> seen;
    for (const auto& s : all) {
      const std::string lab = row.label(s);
      if (seen.insert(lab).second) items.push_back({row.color(s), lab});
    }
    o += "<div><span class=\"legend-name\">" + esc(row.name) + "</span>" + svg::html_legend(items) + "</div>";
  }
  return o + "</div>\n";
}

std::string breakdown_svg(const std::vector<Figures>& figs) {
  double tmax = 1e-12;
  for (const auto& f : figs) {
    double sum = 0;
    for (const auto& p : parts_of(f.est.breakdown)) sum += p.seconds;
    tmax = std::max({tmax, sum, f.est.step_time.value()});
  }
  tmax *= 1.04;
  const double W = 1100, left = 130, right = 110, top = 10, bh = 24, gap = 12;
  const double plot_w = W - left - right;
  const double H = top + figs.size() * (bh + gap) + 26;
  auto X = [&](double t) { return left + t / tmax * plot_w; };
  Writer w("time-breakdown", W, H, "where the step time goes, for the plan and each alternative");
  w.raw(hatch_defs("hatch-breakdown"));
  axis_ticks(w, left, plot_w, tmax, top + figs.size() * (bh + gap) - gap + 6, figs.size() * (bh + gap) + 2);
  for (size_t i = 0; i < figs.size(); ++i) {
    const auto& f = figs[i];
    const double y = top + i * (bh + gap);
    w.text(left - 8, y + 16, f.name, "end", 11, "#222", i == 0 ? "font-weight=\"600\"" : "");
    double acc = 0;
    for (const auto& part : parts_of(f.est.breakdown)) {
      if (part.seconds <= 0) continue;
      const double step = f.est.step_time.value();
      w.rect(X(acc), y, X(acc + part.seconds) - X(acc), bh, part.hatched ? "url(#hatch-breakdown)" : part.color,
             f.name + ": " + part.name + " " + svg::dur(part.seconds) +
                 (step > 0 ? " (" + svg::pct(part.seconds / step) + " of the step)" : ""));
      acc += part.seconds;
    }
    const double step = f.est.step_time.value();
    w.line(X(step), y - 3, X(step), y + bh + 3, "#c0392b", 2);
    w.text(X(std::max(acc, step)) + 6, y + 16, svg::dur(step), "start", 11, "#222");
  }
  return w.finish();
}

std::string breakdown_legend(const Figures& best) {
  std::vector<svg::LegendItem> items;
  const double step = best.est.step_time.value();
  for (const auto& p : parts_of(best.est.breakdown)) {
    if (p.seconds <= 0 || (step > 0 && p.seconds < 5e-4 * step)) continue;  // under 0.05%: not drawn visibly
    items.push_back({p.hatched ? "#dddddd" : p.color,
                     std::string(p.name) + " " + svg::dur(p.seconds) + (step > 0 ? " (" + svg::pct(p.seconds / step) + ")" : ""),
                     p.hatched});
  }
  return svg::html_legend(items);
}

// "tp4+sp dp2 z1" for a uniform plan; "layer-wise: 3 strategies (...)" otherwise.
std::string layers_summary(const Plan& p) {
  std::map<std::string, int> count;
  std::vector<std::string> order;
  for (int l = 0; l < p.model.num_layers(); ++l) {
    const std::string lab = label(p.layer_strategy(l));
    if (count[lab]++ == 0) order.push_back(lab);
  }
  if (order.size() == 1) return order[0] + " (all layers)";
  std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) { return count[a] > count[b]; });
  std::string o = "layer-wise: ";
  for (size_t i = 0; i < order.size() && i < 3; ++i) o += (i ? ", " : "") + order[i] + " x" + S(count[order[i]]);
  if (order.size() > 3) o += ", +" + S(order.size() - 3) + " more";
  return o;
}

std::string pipeline_summary(const Plan& p) {
  std::string o = "pp " + S(p.train.pp);
  if (p.train.vp > 1) o += " x vp " + S(p.train.vp);
  o += " " + std::string(to_string(p.train.schedule));
  o += ", m=" + S(p.train.micro_batches);
  return o;
}

std::string alternatives_table(const std::vector<Figures>& figs) {
  const double best = figs.front().est.step_time.value();
  std::string o =
      "<table id=\"alternatives\"><thead><tr><th></th><th>pipeline</th><th>layers</th><th>step time</th>"
      "<th>vs plan</th><th>tokens/s</th><th>MFU</th><th>peak memory</th><th>bubble</th><th>communication</th>"
      "<th>fits</th></tr></thead><tbody>\n";
  for (const auto& f : figs) {
    const double step = f.est.step_time.value();
    const auto& b = f.est.breakdown;
    o += "<tr" + std::string(&f == &figs.front() ? " class=\"best\"" : "") + "><th>" + esc(f.name) + "</th><td>" +
         esc(pipeline_summary(*f.plan)) + "</td><td>" + esc(layers_summary(*f.plan)) + "</td><td>" + svg::dur(step) +
         "</td><td>" + (best > 0 ? svg::num(step / best, 3) + "x" : "-") + "</td><td>" +
         svg::num(f.est.tokens_per_s, 0) + "</td><td>" + svg::pct(f.est.mfu) + "</td><td>" +
         svg::gib(to_gib(f.est.peak_memory)) + "</td><td>" + (step > 0 ? svg::pct(b.bubble.value() / step) : "-") +
         "</td><td>" + (step > 0 ? svg::pct(comm_seconds(b) / step) : "-") + "</td><td>" +
         (f.est.fits ? "yes" : "<span class=\"bad\">no</span>") + "</td></tr>\n";
  }
  return o + "</tbody></table>\n";
}

const char* kStyle = R"(
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:24px auto;
max-width:1160px;color:#222;background:#fff;line-height:1.4}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd;padding-bottom:3px}
.sub{color:#555;margin:0 0 10px}.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:6px 12px;min-width:120px}
.card b{display:block;font-size:18px}.card span{color:#666;font-size:12px}
.note{color:#555;font-size:13px;margin:4px 0}
ul.legend{list-style:none;padding:0;margin:6px 0;display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12.5px}
ul.legend li{display:flex;align-items:center;gap:5px}
.swatch{display:inline-block;width:13px;height:13px;border:1px solid #999;border-radius:2px}
.swatch.hatched{background:repeating-linear-gradient(45deg,#f4f4f4 0 3px,#c8c8c8 3px 5px)!important}
.map-legend>div{display:flex;gap:10px;align-items:center}.legend-name{width:80px;font-size:12.5px;color:#555}
table{border-collapse:collapse;font-size:13px;width:100%}th,td{border-bottom:1px solid #e5e5e5;padding:5px 8px;text-align:right}
td:nth-child(2),td:nth-child(3),thead th{text-align:left}tr.best{background:#f3f8fd}tbody th{white-space:nowrap}.bad{color:#c0392b;font-weight:600}
svg rect.hl{stroke:#000;stroke-width:1.5}
footer{margin-top:30px;color:#777;font-size:12px}
)";

// Records script errors before anything else runs; checked by tests through the DOM.
const char* kHeadScript = R"(<script>
window.addEventListener('error',function(e){document.documentElement.setAttribute('data-errors',
(document.documentElement.getAttribute('data-errors')||'')+(e.message||'error')+';');});
</script>
)";

std::string tail_script() {
  std::string ids;
  for (const auto& id : report_picture_ids()) ids += (ids.empty() ? "'" : ",'") + id + "'";
  return "<script>\n(function(){\nvar ids=[" + ids +
         "];\nvar missing=ids.filter(function(id){return !document.getElementById(id);});\n"
         "document.body.setAttribute('data-check',missing.length?'missing:'+missing.join(','):'ok');\n"
         "var tl=document.getElementById('timeline');\nif(tl){tl.addEventListener('mouseover',function(e){\n"
         "var mb=e.target.getAttribute&&e.target.getAttribute('data-mb');if(mb===null)return;\n"
         "tl.querySelectorAll('rect[data-mb=\"'+mb+'\"]').forEach(function(r){r.classList.add('hl');});});\n"
         "tl.addEventListener('mouseout',function(){tl.querySelectorAll('rect.hl').forEach(function(r){"
         "r.classList.remove('hl');});});}\n})();\n</script>\n";
}

std::string card(const std::string& value, const std::string& what) {
  return "<div class=\"card\"><b>" + esc(value) + "</b><span>" + esc(what) + "</span></div>";
}

std::string render(const ReportInput& in) {
  if (!in.cost) throw InputError("report: no cost model given");
  const CostModel& cm = *in.cost;
  std::vector<Figures> figs;
  figs.push_back(figures_of(in.best, "plan", cm));
  for (size_t i = 0; i < in.alternatives.size(); ++i)
    figs.push_back(figures_of(in.alternatives[i], "alternative " + S(i + 1), cm));
  if (in.uniform) figs.push_back(figures_of(*in.uniform, "uniform", cm));
  const Figures& f = figs.front();
  const Plan& p = in.best;
  const std::string title = in.title.empty() ? p.model.name + " on " + p.cluster.name + " (" + S(p.world_size()) + " GPUs)"
                                             : in.title;
  const double step = f.est.step_time.value();
  const double sim = f.sim.makespan_s;

  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>weft report: " +
                  esc(title) + "</title>\n" + kHeadScript + "<style>" + kStyle + "</style>\n</head>\n<body>\n";
  h += "<header><h1>" + esc(title) + "</h1>\n<p class=\"sub\">" +
       esc(pipeline_summary(p) + " micro-batches of " + S(p.train.pipeline_micro_batch()) + " samples; global batch " +
           S(p.train.global_batch) + ", sequence " + S(p.train.seq) + ", " + to_string(p.train.dtype) + "; " +
           S(p.cluster.nodes) + " x " + S(p.cluster.gpus_per_node) + " " + p.cluster.gpu.name + "; layers " +
           layers_summary(p)) +
       "</p>\n<div class=\"cards\">" + card(svg::dur(step), "predicted step time") +
       card(svg::num(f.est.tokens_per_s, 0), "tokens / s") + card(svg::pct(f.est.mfu), "MFU") +
       (f.est.hfu > f.est.mfu * (1 + 1e-6) ? card(svg::pct(f.est.hfu), "HFU (with recompute)") : std::string()) +
       card(svg::num(f.est.model_tflops_per_gpu, 1), "model TFLOP/s per GPU") +
       card(svg::gib(to_gib(f.est.peak_memory)) + " / " + svg::gib(to_gib(f.est.memory_budget)),
            f.est.fits ? "peak memory / budget" : "peak memory / budget: DOES NOT FIT") +
       card(svg::dur(sim), "simulated step") + "</div></header>\n";

  h += "<section id=\"sec-timeline\"><h2>Pipeline schedule</h2>\n<p class=\"note\">One step as simulated from the "
       "cost model's per-stage times: a row per stage (device group), a block per micro-batch (numbered); hatched "
       "time is idle (bubbles); the thin lane under each row is the data-parallel gradient synchronisation. The "
       "dashed line marks the cost model's predicted step time.</p>\n";
  h += timeline_svg(f);
  // ZB-H1 and ZB-V split each backward: its input-gradient passes and, on their own, its
  // weight-gradient passes.
  const bool zb = f.sim.spec.schedule == Schedule::kZbH1 || f.sim.spec.schedule == Schedule::kZbV;
  std::vector<svg::LegendItem> legend{{kForward[0], "forward"},
                                      {kBackward[0], zb ? "backward (input gradient, B)" : "backward"}};
  if (zb) legend.push_back({kWeightGrad, "weight gradient (W)"});
  legend.insert(legend.end(), {{kRecompute, "recompute"},
                               {kP2p, "p2p send/recv"},
                               {kGradSync, "gradient sync"},
                               {kOptimizer, "optimizer"},
                               {"#dddddd", "bubble / idle", true}});
  h += svg::html_legend(legend);
  if (f.sim.spec.schedule == Schedule::kZbV)
    h += "<p class=\"note\">ZB-V: each device holds two model chunks in a V (device group g runs virtual stages g "
         "and 2pp-1-g, so the first and the last are on group 0); lighter blocks are the second chunk.</p>\n";
  else if (p.train.vp > 1)
    h += "<p class=\"note\">Interleaved: lighter blocks are the odd virtual stages (model chunks) of a device.</p>\n";
  h += "</section>\n";

  h += "<section id=\"sec-memory\"><h2>Memory per device</h2>\n<p class=\"note\">Peak memory of one device of each "
       "stage (all its virtual stages), against the device's capacity and the budget the cost model plans "
       "with.</p>\n";
  h += memory_svg(f, cm);
  h += svg::html_legend({{"#4e79a7", "weights"},
                         {"#f28e2b", "gradients"},
                         {"#59a14f", "optimizer states"},
                         {"#e15759", "activations"},
                         {"#bab0ac", "other"}});
  h += "</section>\n";

  h += "<section id=\"sec-strategy\"><h2>Per-layer strategy</h2>\n<p class=\"note\">Each column is a layer (the "
       "first is the embedding / LM head); the bars on top are the pipeline stages.</p>\n";
  h += strategy_map(f);
  h += strategy_legend(p);
  h += "</section>\n";

  h += "<section id=\"sec-breakdown\"><h2>Where the time goes</h2>\n<p class=\"note\">Per step, from the cost "
       "model; the red tick is the step time. Legend values are for the plan.</p>\n";
  h += breakdown_svg(figs);
  h += breakdown_legend(f);
  h += "</section>\n";

  h += "<section id=\"sec-alternatives\"><h2>Alternatives</h2>\n";
  h += alternatives_table(figs);
  h += "</section>\n";

  const double diff = step > 0 ? (sim - step) / step : 0;
  h += "<footer>weft report. Cost model: " + esc(cm.name()) + " (" + esc(cm.source()) +
       "). The simulated step differs from the predicted one by " + svg::pct(diff) + ".</footer>\n";
  h += tail_script();
  h += "</body></html>\n";
  return h;
}

}  // namespace

const std::vector<std::string>& report_picture_ids() {
  static const std::vector<std::string> ids{"timeline", "memory", "strategy-map", "time-breakdown", "alternatives"};
  return ids;
}

Result<ReportInput> make_report_input(const std::vector<Plan>& top, const std::optional<Plan>& uniform,
                                      const CostModel& cm) {
  if (top.empty()) return Error{ErrorKind::kBadInput, "report: no plan to report (the search returned none)"};
  ReportInput in;
  in.best = top.front();
  in.alternatives.assign(top.begin() + 1, top.end());
  in.uniform = uniform;
  in.cost = &cm;
  return in;
}

Result<std::string> render_html_report(const ReportInput& in) {
  return catch_errors([&]() -> Result<std::string> { return render(in); });
}

Status write_html_report(const std::string& path, const ReportInput& in) {
  return svg::write_page(path, render_html_report(in));
}

}  // namespace weft
