// Chrome trace-event output of a simulated step (layout in weft/report/trace.h).
#include "weft/report/trace.h"

#include <algorithm>

#include "weft/plan/pipeline_order.h"

namespace weft {

namespace {

constexpr int kPid = 1;
constexpr int kStepTid = 0;
int compute_tid(int g) { return 1 + 2 * g; }
int comm_tid(int g) { return 2 + 2 * g; }
double us_of(double s) { return s * 1e6; }

Json meta(const char* what, int tid, const Json& args) {
  return Json{{"ph", "M"}, {"pid", kPid}, {"tid", tid}, {"name", what}, {"args", args}};
}

Json complete(const std::string& name, const char* cat, int tid, double start_s, double dur_s, Json args) {
  return Json{{"ph", "X"},  {"pid", kPid},          {"tid", tid},        {"name", name},
              {"cat", cat}, {"ts", us_of(start_s)}, {"dur", us_of(dur_s)}, {"args", std::move(args)}};
}

// The parts of a forward or backward block, in the order they are drawn: (name, seconds).
std::vector<std::pair<const char*, double>> block_parts(const TimeBreakdown& t, bool forward) {
  const double c = forward ? 1.0 / 3.0 : 2.0 / 3.0;  // backward is twice the forward FLOPs
  const double h = 0.5;                              // collectives: as many in backward as in forward
  return {{"compute", c * t.compute.value()},
          {"embedding / lm head", c * t.embedding.value()},
          {"tp comm", h * t.tp_comm.value()},
          {"ulysses all-to-all", h * t.ulysses_comm.value()},
          {"context-parallel comm", h * t.cp_comm.value()},
          {"expert all-to-all", h * t.ep_comm.value()},
          {"zero-3 all-gather", h * t.zero3_gather.value()},
          {"re-distribution", h * t.redistribution.value()}};
}

void add_detail(Json& events, const ScheduleEvent& e, const TimeBreakdown& t) {
  auto parts = block_parts(t, e.kind == EventKind::kForward);
  double sum = 0;
  for (auto& [n, v] : parts) sum += v;
  if (sum <= 0) return;
  const double scale = e.duration() / sum;
  double at = e.start_s;
  for (auto& [name, v] : parts) {
    if (v <= 0) continue;
    const double d = v * scale;
    events.push_back(complete(name, "detail", compute_tid(e.device_group), at, d,
                              Json{{"stage", e.stage}, {"micro_batch", e.micro_batch}}));
    at += d;
  }
}

std::string event_name(const ScheduleEvent& e) {
  const std::string mb = std::to_string(e.micro_batch);
  switch (e.kind) {
    case EventKind::kForward: return "F" + mb;
    case EventKind::kBackward: return "B" + mb;
    case EventKind::kRecompute: return "R" + mb;
    case EventKind::kWeightGrad: return "W" + mb;
    case EventKind::kP2p: return "p2p " + mb;
    case EventKind::kGradSync: return "grad sync stage " + std::to_string(e.stage);
    case EventKind::kOptimizer: return "optimizer";
  }
  return "?";
}

}  // namespace

Json chrome_trace(const Simulation& sim, const std::vector<StageTiming>& stages, const TraceInfo& info) {
  const int pp = sim.spec.pp;
  const double span = sim.makespan_s;
  Json ev = Json::array();
  ev.push_back(meta("process_name", kStepTid, {{"name", "weft step" + (info.title.empty() ? "" : ": " + info.title)}}));
  ev.push_back(meta("thread_name", kStepTid, {{"name", "step"}}));
  ev.push_back(meta("thread_sort_index", kStepTid, {{"sort_index", 0}}));
  for (int g = 0; g < pp; ++g) {
    std::string name = "stage " + std::to_string(g);
    if (info.devices_per_stage > 0)
      name += " (ranks " + std::to_string(g * info.devices_per_stage) + "-" +
              std::to_string((g + 1) * info.devices_per_stage - 1) + ")";
    ev.push_back(meta("thread_name", compute_tid(g), {{"name", name}}));
    ev.push_back(meta("thread_sort_index", compute_tid(g), {{"sort_index", compute_tid(g)}}));
    ev.push_back(meta("thread_name", comm_tid(g), {{"name", "stage " + std::to_string(g) + " dp comm"}}));
    ev.push_back(meta("thread_sort_index", comm_tid(g), {{"sort_index", comm_tid(g)}}));
  }
  ev.push_back(complete("step", "step", kStepTid, 0, span,
                        Json{{"schedule", to_string(sim.spec.schedule)},
                             {"pp", pp},
                             {"vp", sim.spec.vp},
                             {"micro_batches", sim.spec.micro_batches},
                             {"simulated_step_s", span},
                             {"predicted_step_s", info.predicted_step_s}}));
  if (info.predicted_step_s > 0)
    ev.push_back(Json{{"ph", "i"},
                      {"pid", kPid},
                      {"tid", kStepTid},
                      {"s", "g"},
                      {"name", "predicted step time"},
                      {"ts", us_of(info.predicted_step_s)}});

  // Compute tracks: the events in time order, with bubbles filling the gaps up to the span.
  std::vector<double> cursor(pp, 0.0);
  // Idle time on a compute track: "bubble" inside the pipeline, "grad sync wait" before the
  // optimizer, "idle" after it while other stages finish.
  auto bubble_until = [&](int g, double t, const char* name = "bubble") {
    if (t - cursor[g] > 1e-12 * std::max(1.0, span))
      ev.push_back(complete(name, "bubble", compute_tid(g), cursor[g], t - cursor[g], Json::object()));
    cursor[g] = std::max(cursor[g], t);
  };
  for (const ScheduleEvent& e : sim.events) {
    const int g = e.device_group;
    Json args{{"stage", e.stage}, {"device_group", g}};
    // Which of the group's model chunks (interleaved: stage / pp; zb-v: 0 before the turn, 1 after).
    if (sim.spec.vp > 1) args["chunk"] = stage_chunk(sim.spec.schedule, pp, e.stage);
    if (e.micro_batch >= 0) args["micro_batch"] = e.micro_batch;
    if (e.kind == EventKind::kGradSync) {
      ev.push_back(complete(event_name(e), to_string(e.kind), comm_tid(g), e.start_s, e.duration(), args));
      continue;
    }
    bubble_until(g, e.start_s, e.kind == EventKind::kOptimizer ? "grad sync wait" : "bubble");
    ev.push_back(complete(event_name(e), to_string(e.kind), compute_tid(g), e.start_s, e.duration(), args));
    if (e.kind == EventKind::kForward || e.kind == EventKind::kBackward)
      add_detail(ev, e, stages[e.stage].detail);
    cursor[g] = e.end_s;
  }
  for (int g = 0; g < pp; ++g) bubble_until(g, span, "idle");

  return Json{{"traceEvents", std::move(ev)},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"generator", "weft"},
                {"title", info.title},
                {"simulated_step_s", span},
                {"predicted_step_s", info.predicted_step_s}}}};
}

Status write_chrome_trace(const std::string& path, const Simulation& sim, const std::vector<StageTiming>& stages,
                          const TraceInfo& info) {
  auto r = catch_errors([&]() -> Result<bool> {
    write_json_file(path, chrome_trace(sim, stages, info));
    return true;
  });
  if (!r.ok()) return r.error();
  return {};
}

}  // namespace weft
