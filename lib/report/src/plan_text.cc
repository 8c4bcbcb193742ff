// Terminal tables of plans and estimates (weft/report/plan_text.h).
#include "weft/report/plan_text.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "weft/core/format.h"

namespace weft {

namespace {

// Runs of identical strategies in a stage: (first layer, last layer, strategy), model numbering.
struct Run {
  int first, last;
  LayerStrategy s;
};
std::vector<Run> runs_of(const Stage& st) {
  std::vector<Run> out;
  for (int i = 0; i < st.num_layers(); ++i) {
    const int layer = st.first_layer + i;
    if (!out.empty() && out.back().s == st.layers[i]) out.back().last = layer;
    else out.push_back({layer, layer, st.layers[i]});
  }
  return out;
}

// Budget minus peak of e: "1.6 GiB" + `suffix`, or "2.3 GiB over".
std::string room_text(const Estimate& e, const char* suffix) {
  const double gib = to_gib(e.memory_budget - e.peak_memory);
  return gib >= 0 ? printf_str("%.1f GiB", gib) + suffix : printf_str("%.1f GiB over", -gib);
}

std::string layers_text(int a, int b) { return a == b ? "layer " + S(a) : "layers " + S(a) + "-" + S(b); }

}  // namespace

std::string duration_text(double s) {
  if (s >= 100) return printf_str("%.1f s", s);
  if (s >= 1) return printf_str("%.3f s", s);
  return printf_str("%.1f ms", s * 1e3);
}

std::string pipeline_text(const TrainSettings& t) {
  std::string s = "pp" + S(t.pp) + " " + to_string(t.schedule);
  if (t.vp > 1) s += " vp" + S(t.vp);
  s += " m" + S(t.micro_batches);
  if (t.rounds > 1) s += " in " + S(t.rounds) + " schedules";
  return s;
}

std::string cluster_text(const ClusterSpec& c) {
  return S(c.total_gpus()) + " x " + c.gpu.name + " (" + S(c.nodes) + (c.nodes == 1 ? " node" : " nodes") + " of " +
         S(c.gpus_per_node) + ")";
}

std::string utilisation_text(const Estimate& e) {
  std::string out = printf_str("%.1f %%", 100 * e.mfu);
  if (e.hfu > e.mfu * (1 + 1e-6)) out += printf_str(" (HFU %.1f %%)", 100 * e.hfu);
  return out;
}

std::string plan_table(const Plan& best, const Estimate& eb, const std::optional<Plan>& uniform,
                       const std::optional<Estimate>& eu, const std::optional<MemoryMargin>& margin) {
  std::string out;
  auto row = [&](const char* name, const std::string& a, const std::string& b) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%-20s %-29s %s", name, a.c_str(), b.c_str());
    std::string line = buf;
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  row("", "best plan", uniform ? "uniform baseline" : "uniform baseline: none fits");
  row("pipeline", pipeline_text(best.train), uniform ? pipeline_text(uniform->train) : "");
  row("layers", best.uniform() ? label(*best.uniform_strategy()) : "per layer (below)",
      uniform ? label(uniform->uniform_strategy().value_or(uniform->stages.front().layers.front())) : "");
  row("embedding / LM head", label(best.embedding), uniform ? label(uniform->embedding) : "");
  row("step time", duration_text(eb.step_time.value()), eu ? duration_text(eu->step_time.value()) : "");
  row("tokens/s", grouped(eb.tokens_per_s), eu ? grouped(eu->tokens_per_s) : "");
  row("model TFLOP/s / GPU", printf_str("%.1f", eb.model_tflops_per_gpu),
      eu ? printf_str("%.1f", eu->model_tflops_per_gpu) : "");
  row("MFU", utilisation_text(eb), eu ? utilisation_text(*eu) : "");
  row("peak memory / GPU",
      printf_str("%.1f GiB", to_gib(eb.peak_memory)) + printf_str(" of %.1f", to_gib(eb.memory_budget)),
      eu ? printf_str("%.1f GiB", to_gib(eu->peak_memory)) : "");
  row("room / GPU", room_text(eb, ""), eu ? room_text(*eu, "") : "");
  if (eu && eu->step_time.value() > 0)
    row("speed-up", printf_str("%.3fx", eu->step_time.value() / eb.step_time.value()), "1.000x");
  out += sprintf_str("%-20s %s\n", "memory budget", memory_budget_text(best, eb, margin).c_str());
  return out;
}

std::string layers_table(const Plan& p) {
  std::string out = sprintf_str("%-7s %-16s %-36s %8s\n", "stage", "layers", "strategy", "mem GiB");
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const Stage& st = p.stages[s];
    bool first = true;
    for (const Run& r : runs_of(st)) {
      out += sprintf_str("%-7s %-16s %-36s %8s\n", first ? S(static_cast<long long>(s)).c_str() : "",
                         layers_text(r.first, r.last).c_str(), label(r.s).c_str(),
                         first ? printf_str("%.1f", st.predicted.memory_gib).c_str() : "");
      first = false;
    }
  }
  return out;
}

std::string ranking_table(const std::vector<Plan>& top) {
  if (top.empty()) return "";
  const Plan& best = top.front();
  std::string out = sprintf_str("%-4s %-26s %-22s %10s %8s\n", "rank", "pipeline", "layers", "step", "vs best");
  for (size_t i = 0; i < top.size(); ++i) {
    const Plan& p = top[i];
    const std::string layers = p.uniform() ? label(*p.uniform_strategy()) : "per layer";
    out += sprintf_str("%-4zu %-26s %-22s %10s %7.1f%%\n", i + 1, pipeline_text(p.train).c_str(), layers.c_str(),
                       duration_text(p.predicted.step_time_s).c_str(),
                       100 * (p.predicted.step_time_s / best.predicted.step_time_s - 1));
  }
  return out;
}

std::string memory_room_text(const Estimate& e) { return room_text(e, " room"); }

std::string memory_budget_text(const Plan& p, const Estimate& e, const std::optional<MemoryMargin>& margin) {
  const Bytes device = GiB(p.cluster.gpu.memory_gib);
  const Bytes kept = margin ? margin->of(device) : Bytes(0);
  const Bytes reserves = std::max(Bytes(0), device - kept - e.memory_budget);
  std::string out = printf_str("%.1f GiB", p.cluster.gpu.memory_gib) + printf_str(" - %.1f reserves", to_gib(reserves));
  if (margin) {
    out += printf_str(" - %.1f margin", to_gib(kept));
    if (margin->percent) out += " (" + to_string(*margin) + ")";
  }
  return out + printf_str(" = %.1f GiB", to_gib(e.memory_budget));
}

std::string estimate_table(const Plan& p, const Estimate& e, const std::optional<MemoryMargin>& margin) {
  std::string out;
  out += sprintf_str("%-22s %s\n", "step time", duration_text(e.step_time.value()).c_str());
  out += sprintf_str("%-22s %s\n", "tokens/s", grouped(e.tokens_per_s).c_str());
  out += sprintf_str("%-22s %.1f\n", "model TFLOP/s / GPU", e.model_tflops_per_gpu);
  out += sprintf_str("%-22s %s\n", "MFU", utilisation_text(e).c_str());
  out += sprintf_str("%-22s %.1f GiB of %.1f GiB: %s%s\n", "peak memory / GPU", to_gib(e.peak_memory),
                     to_gib(e.memory_budget), memory_room_text(e).c_str(), e.fits ? "" : "  DOES NOT FIT");
  out += sprintf_str("%-22s %s\n", "memory budget", memory_budget_text(p, e, margin).c_str());
  out += sprintf_str("\n%-5s %6s %10s %8s %8s %8s %8s %8s %8s\n", "stage", "layers", "busy", "mem GiB", "weights",
                     "grads", "optim", "activ", "other");
  for (size_t s = 0; s < e.stages.size(); ++s) {
    const auto& st = e.stages[s];
    const auto& m = st.memory;
    out += sprintf_str("%-5zu %6d %10s %8.1f %8.2f %8.2f %8.2f %8.2f %8.2f%s\n", s, p.stages[s].num_layers(),
                       duration_text(st.time.value()).c_str(), p.stages[s].predicted.memory_gib, to_gib(m.weights),
                       to_gib(m.grads), to_gib(m.optimizer), to_gib(m.activations), to_gib(m.other + m.transient),
                       st.fits ? "" : " !");
  }
  const TimeBreakdown& b = e.breakdown;
  const std::pair<const char*, double> parts[] = {
      {"compute", b.compute.value()},       {"recompute", b.recompute.value()},   {"tp comm", b.tp_comm.value()},
      {"ulysses comm", b.ulysses_comm.value()}, {"cp comm", b.cp_comm.value()}, {"ep comm", b.ep_comm.value()},
      {"dp exposed", b.dp_exposed.value()}, {"zero3 gather", b.zero3_gather.value()}, {"p2p", b.p2p.value()},
      {"redistribution", b.redistribution.value()}, {"embedding", b.embedding.value()},
      {"bubble", b.bubble.value()},          {"optimizer", b.optimizer.value()}};
  out += "\nbreakdown per step (all stages):";
  int col = 0;
  for (const auto& [name, v] : parts) {
    if (v <= 0) continue;
    out += sprintf_str("%s%-15s %10s", col % 2 == 0 ? "\n  " : "   ", name, duration_text(v).c_str());
    ++col;
  }
  return out + "\n";
}

std::string notes_text(const std::vector<std::string>& notes) {
  std::string out;
  for (const std::string& n : notes) {
    std::string line = "note:";
    size_t pos = 0;
    while (pos < n.size()) {
      size_t end = n.find(' ', pos);
      if (end == std::string::npos) end = n.size();
      const std::string word = n.substr(pos, end - pos);
      if (line.size() + 1 + word.size() > 80 && line.size() > 5) {
        out += line + "\n";
        line = "     ";
      }
      line += " " + word;
      pos = end + 1;
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace weft
