#include "weft/report/summary.h"

#include <cstdio>
#include <vector>

#include "svg.h"

namespace weft {

namespace {

// Per device group: the time of its weight-gradient passes (W events; ZB-H1 and ZB-V only).
std::vector<double> weight_grad_time(const Simulation& sim) {
  std::vector<double> w(sim.spec.pp, 0.0);
  for (const ScheduleEvent& e : sim.events)
    if (e.kind == EventKind::kWeightGrad) w[e.device_group] += e.duration();
  return w;
}

}  // namespace

std::string simulation_text(const Simulation& sim, double predicted, int per_stage) {
  const auto& sp = sim.spec;
  std::string o;
  char buf[160];
  std::snprintf(buf, sizeof buf, "simulated step  %10s   %s, pp=%d, vp=%d, m=%d\n", svg::dur(sim.makespan_s).c_str(),
                to_string(sp.schedule), sp.pp, sp.vp, sp.micro_batches);
  o += buf;
  if (predicted > 0) {
    std::snprintf(buf, sizeof buf, "predicted step  %10s   by the cost model (simulated %+.2f%%)\n",
                  svg::dur(predicted).c_str(), 100.0 * (sim.makespan_s - predicted) / predicted);
    o += buf;
  }
  // ZB-H1, ZB-V: the compute ends with the last weight-gradient pass (W), whose time is listed.
  const bool zb = sp.schedule == Schedule::kZbH1 || sp.schedule == Schedule::kZbV;
  const std::vector<double> wgrad = weight_grad_time(sim);
  o += zb ? "\nstage  ranks          busy         bubble   bubble%      last W ends     W time\n"
          : "\nstage  ranks          busy         bubble   bubble%   last backward ends\n";
  for (int g = 0; g < sp.pp; ++g) {
    std::string ranks = per_stage > 0 ? std::to_string(g * per_stage) + "-" + std::to_string((g + 1) * per_stage - 1) : "-";
    const double end = sim.compute_end_s[g];
    std::snprintf(buf, sizeof buf, "%5d  %-12s %10s  %12s  %7.1f%%  %12s", g, ranks.c_str(),
                  svg::dur(sim.busy_s[g]).c_str(), svg::dur(sim.bubble_s[g]).c_str(),
                  end > 0 ? 100.0 * sim.bubble_s[g] / end : 0.0, svg::dur(end).c_str());
    o += buf;
    if (zb) {
      std::snprintf(buf, sizeof buf, " %10s", svg::dur(wgrad[g]).c_str());
      o += buf;
    }
    o += "\n";
  }
  return o;
}

Json simulation_json(const Simulation& sim, double predicted) {
  Json stages = Json::array();
  const std::vector<double> wgrad = weight_grad_time(sim);
  for (int g = 0; g < sim.spec.pp; ++g) {
    const double end = sim.compute_end_s[g];
    Json st{{"stage", g},
            {"busy_s", sim.busy_s[g]},
            {"bubble_s", sim.bubble_s[g]},
            {"bubble_fraction", end > 0 ? sim.bubble_s[g] / end : 0.0},
            {"compute_end_s", end}};
    if (sim.spec.schedule == Schedule::kZbH1 || sim.spec.schedule == Schedule::kZbV) st["weight_grad_s"] = wgrad[g];
    stages.push_back(std::move(st));
  }
  return Json{{"schedule", to_string(sim.spec.schedule)},
              {"pp", sim.spec.pp},
              {"vp", sim.spec.vp},
              {"micro_batches", sim.spec.micro_batches},
              {"simulated_step_s", sim.makespan_s},
              {"predicted_step_s", predicted},
              {"difference", predicted > 0 ? (sim.makespan_s - predicted) / predicted : 0.0},
              {"events", sim.events.size()},
              {"stages", std::move(stages)}};
}

}  // namespace weft
