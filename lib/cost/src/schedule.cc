// The event-level step simulator (model in weft/cost/schedule.h).
#include "weft/cost/schedule.h"

#include <algorithm>
#include <tuple>

#include "weft/core/assert.h"
#include "weft/core/format.h"
#include "weft/cost/estimate.h"
#include "weft/plan/pipeline_order.h"

namespace weft {

const char* to_string(EventKind k) {
  switch (k) {
    case EventKind::kForward: return "forward";
    case EventKind::kBackward: return "backward";
    case EventKind::kRecompute: return "recompute";
    case EventKind::kWeightGrad: return "weight grad";
    case EventKind::kP2p: return "p2p";
    case EventKind::kGradSync: return "grad sync";
    case EventKind::kOptimizer: return "optimizer";
  }
  return "?";
}

namespace {

// One pass of a virtual stage: a forward, a whole backward, or (a zero-bubble schedule) the
// input-gradient part of one or its weight-gradient part.
struct Op {
  PipeAction::Kind kind = PipeAction::kForward;
  int stage = 0;
  int micro_batch = 0;
  bool forward() const { return kind == PipeAction::kForward; }
};

// The order in which device group g runs its ops: the runtime's (weft/plan/pipeline_order.h), chunk
// c of the group being virtual stage virtual_stage(schedule, pp, g, c) (g + c * pp, or zb-v's V).
std::vector<Op> device_order(const ScheduleSpec& sp, int g) {
  std::vector<Op> ops;
  for (const PipeAction& a : pipeline_actions(sp.schedule, sp.pp, g, sp.micro_batches, sp.vp))
    ops.push_back({a.kind, virtual_stage(sp.schedule, sp.pp, g, a.chunk), a.micro_batch});
  return ops;
}

void check_inputs(const ScheduleSpec& sp, const std::vector<StageTiming>& st) {
  require(sp.pp >= 1, "schedule.pp: must be >= 1, got " + S(sp.pp));
  require(sp.vp >= 1, "schedule.vp: must be >= 1, got " + S(sp.vp));
  require(sp.overlap_slowdown >= 1.0,
          "schedule.overlap_slowdown: must be >= 1, got " + std::to_string(sp.overlap_slowdown));
  require(sp.micro_batches >= 1, "schedule.micro_batches: must be >= 1, got " + S(sp.micro_batches));
  require(sp.vp == 1 || sp.schedule == Schedule::kInterleaved || sp.schedule == Schedule::kZbV,
          "schedule.vp: " + S(sp.vp) + " virtual stages need the interleaved or the zb-v schedule");
  require(sp.schedule != Schedule::kZbV || sp.vp == 2,
          "schedule.vp: zb-v runs exactly 2 model chunks per device group, got " + S(sp.vp));
  require(sp.vp == 1 || sp.schedule == Schedule::kZbV || sp.micro_batches % sp.pp == 0,
          "schedule.micro_batches: the interleaved schedule needs a multiple of pp=" + S(sp.pp) + ", got " +
              S(sp.micro_batches));
  require(st.size() == static_cast<size_t>(sp.pp) * sp.vp,
          "stages: " + S(st.size()) + " stage timings but pp*vp = " + S(sp.pp * sp.vp));
  for (size_t s = 0; s < st.size(); ++s) {
    const auto& t = st[s];
    const std::string w = "stages[" + S(s) + "]";
    for (auto [name, v] : {std::pair{"fwd", t.fwd}, {"bwd", t.bwd}, {"recompute", t.recompute}, {"wgrad", t.wgrad},
                           {"p2p", t.p2p}, {"grad_sync", t.grad_sync}, {"optimizer", t.optimizer}})
      require(v.value() >= 0, w + "." + name + ": negative duration " + std::to_string(v.value()) + " s");
    require(t.recompute <= t.bwd, w + ".recompute: " + std::to_string(t.recompute.value()) +
                                      " s exceeds the backward it is part of (" + std::to_string(t.bwd.value()) +
                                      " s)");
    require(t.wgrad <= t.bwd - t.recompute,
            w + ".wgrad: " + std::to_string(t.wgrad.value()) + " s exceeds the backward less its recompute (" +
                std::to_string(t.bwd.value()) + " - " + std::to_string(t.recompute.value()) + " s)");
  }
}

Simulation run(const ScheduleSpec& sp, const std::vector<StageTiming>& st) {
  check_inputs(sp, st);
  const int pp = sp.pp, m = sp.micro_batches;
  const int nstages = pp * sp.vp;
  Simulation sim;
  sim.spec = sp;
  sim.busy_s.assign(pp, 0.0);
  sim.compute_end_s.assign(pp, 0.0);
  sim.bubble_s.assign(pp, 0.0);
  sim.optimizer_start_s.assign(pp, 0.0);

  std::vector<std::vector<Op>> order(pp);
  for (int g = 0; g < pp; ++g) order[g] = device_order(sp, g);
  // done[index(forward, stage, mb)] = time its result (after the send block) is available; < 0
  // while it has not run.
  std::vector<double> done(2 * static_cast<size_t>(nstages) * m, -1.0);
  auto index = [&](bool fwd, int stage, int mb) {
    return (static_cast<size_t>(fwd ? 0 : 1) * nstages + stage) * m + mb;
  };
  // Start of each stage's last whole backward or weight-gradient pass (device order): its gradients
  // are final during that op, so the overlapped gradient sync may start.
  std::vector<double> last_bwd_start(nstages, 0.0);
  std::vector<size_t> next(pp, 0);
  std::vector<double> free_at(pp, 0.0);
  size_t remaining = 0;
  for (const auto& o : order) remaining += o.size();

  auto emit = [&](EventKind k, int g, int s, int j, double start, double dur) {
    if (dur <= 0) return start;
    if (sp.record_events) sim.events.push_back({k, g, s, j, start, start + dur});
    sim.busy_s[g] += dur;
    return start + dur;
  };

  while (remaining > 0) {
    bool progress = false;
    for (int g = 0; g < pp; ++g) {
      while (next[g] < order[g].size()) {
        const Op op = order[g][next[g]];
        double ready = 0;
        if (op.kind == PipeAction::kWeightGrad) {
          // After its own B on this device, which the order puts earlier; nothing to wait for.
        } else if (op.forward()) {
          if (op.stage > 0) {
            ready = done[index(true, op.stage - 1, op.micro_batch)];
            if (ready < 0) break;
          }
        } else {
          ready = op.stage == nstages - 1 ? done[index(true, op.stage, op.micro_batch)]
                                          : done[index(false, op.stage + 1, op.micro_batch)];
          if (ready < 0) break;
        }
        const StageTiming& t = st[op.stage];
        double at = std::max(free_at[g], ready);
        if (op.kind == PipeAction::kWeightGrad) {
          // The weight gradient sends nothing.
          last_bwd_start[op.stage] = at;
          free_at[g] = emit(EventKind::kWeightGrad, g, op.stage, op.micro_batch, at, t.wgrad.value());
          ++next[g];
          --remaining;
          progress = true;
          continue;
        }
        if (op.forward()) {
          at = emit(EventKind::kForward, g, op.stage, op.micro_batch, at, t.fwd.value());
        } else {
          // An input-gradient pass leaves the weight gradient to its W.
          const bool input_only = op.kind == PipeAction::kInputGrad;
          if (!input_only) last_bwd_start[op.stage] = at;
          const Seconds deferred = input_only ? t.wgrad : Seconds(0);
          at = emit(EventKind::kRecompute, g, op.stage, op.micro_batch, at, t.recompute.value());
          at = emit(EventKind::kBackward, g, op.stage, op.micro_batch, at, (t.bwd - t.recompute - deferred).value());
        }
        // A hand-off within the device sends nothing: zb-v's turn, virtual stage pp - 1's forward
        // to pp and pp's backward to pp - 1, both on group pp - 1. (Elsewhere the stage's p2p time
        // is split evenly between its forwards and backwards, as StageTiming::p2p counts it.)
        const int to = op.forward() ? op.stage + 1 : op.stage - 1;
        if (sp.schedule == Schedule::kZbV && to >= 0 && to < nstages && stage_device_group(sp.schedule, pp, to) == g) {
          done[index(op.forward(), op.stage, op.micro_batch)] = at;
        } else if (sp.overlap_p2p) {
          // The transfer runs beside the device's next operation: only the receiver waits for it.
          const double send = t.p2p.value() / 2;
          if (sp.record_events && send > 0) sim.events.push_back({EventKind::kP2p, g, op.stage, op.micro_batch, at, at + send});
          done[index(op.forward(), op.stage, op.micro_batch)] = at + send;
        } else {
          at = emit(EventKind::kP2p, g, op.stage, op.micro_batch, at, t.p2p.value() / 2);
          done[index(op.forward(), op.stage, op.micro_batch)] = at;
        }
        free_at[g] = at;
        ++next[g];
        --remaining;
        progress = true;
      }
    }
    // Every order above is deadlock-free by construction; a stall is a bug in device_order.
    WEFT_ASSERT(progress, "pipeline schedule deadlocked");
    if (!progress) throw InputError("schedule: the pipeline order deadlocked (pp=" + S(pp) + " vp=" + S(sp.vp) +
                                    " m=" + S(m) + ")");
  }

  for (int g = 0; g < pp; ++g) {
    sim.compute_end_s[g] = free_at[g];
    sim.bubble_s[g] = free_at[g] - sim.busy_s[g];
    // Gradient syncs of this device's stages, one after another on its communication stream.
    std::vector<std::pair<double, int>> syncs;
    double opt = 0;
    for (int c = 0; c < sp.vp; ++c) {
      const int s = virtual_stage(sp.schedule, pp, g, c);
      syncs.push_back({sp.overlap_grad_sync ? last_bwd_start[s] : free_at[g], s});
      opt += st[s].optimizer.value();
    }
    std::sort(syncs.begin(), syncs.end());
    double comm_free = 0, syncs_end = 0, hidden = 0;
    for (auto [ready, s] : syncs) {
      const double dur = st[s].grad_sync.value();
      if (dur <= 0) continue;
      const double start = std::max(comm_free, ready);
      if (sp.record_events) sim.events.push_back({EventKind::kGradSync, g, s, -1, start, start + dur});
      comm_free = syncs_end = start + dur;
      hidden += std::max(0.0, std::min(syncs_end, free_at[g]) - start);
    }
    const double opt_start = std::max(free_at[g], syncs_end) + (sp.overlap_slowdown - 1.0) * hidden;
    sim.optimizer_start_s[g] = opt_start;
    const double end = emit(EventKind::kOptimizer, g, g, -1, opt_start, opt);
    sim.makespan_s = std::max(sim.makespan_s, std::max(end, syncs_end));
  }
  std::stable_sort(sim.events.begin(), sim.events.end(), [](const ScheduleEvent& a, const ScheduleEvent& b) {
    return std::tie(a.device_group, a.start_s) < std::tie(b.device_group, b.start_s);
  });
  return sim;
}

}  // namespace

Result<Simulation> simulate_schedule(const ScheduleSpec& spec, const std::vector<StageTiming>& stages) {
  return catch_errors([&]() -> Result<Simulation> { return run(spec, stages); });
}

StageTiming stage_timing(const StageSums& s) {
  StageTiming t;
  t.fwd = s.fwd;
  t.bwd = s.bwd;
  t.recompute = std::clamp(s.time.recompute, Seconds(0), s.bwd);
  t.wgrad = std::clamp(s.wgrad, Seconds(0), s.bwd - t.recompute);
  t.p2p = s.p2p;
  t.grad_sync = s.grad_sync;
  t.optimizer = s.optimizer;
  t.detail = s.time;
  return t;
}

std::vector<StageTiming> stage_timings(const Plan& p, const CostModel& cm) {
  std::vector<StageTiming> out;
  for (const StageSums& s : stage_sums(p, cm)) out.push_back(stage_timing(s));
  return out;
}

ScheduleSpec schedule_spec(const TrainSettings& train, int stages, const CostModel& cm) {
  const int n = std::max(1, stages);
  int pp = std::max(1, std::min(train.pp, n));
  if (n % pp != 0) pp = n;  // not a pp x vp layout: one stage per device group
  ScheduleSpec sp;
  sp.pp = pp;
  sp.vp = n / pp;
  // zb-v holds 2 stages per group (validate()); a zb-v train with another layout is laid out as
  // the interleaved schedule (vp > 1) or, one stage per group, as zb-h1 (the same split backward).
  if (train.schedule == Schedule::kZbV)
    sp.schedule = sp.vp == 2 ? Schedule::kZbV : sp.vp > 1 ? Schedule::kInterleaved : Schedule::kZbH1;
  else
    sp.schedule = sp.vp > 1 ? Schedule::kInterleaved : train.schedule;
  sp.micro_batches = std::max(1, train.schedule_micro_batches());  // one of train.rounds schedules
  // Megatron-LM's interleaved schedule overlaps its sends; so does torch.distributed.pipelining's
  // schedule runtime, which zb-v runs in (ScheduleZBVZeroBubble is a _PipelineScheduleRuntime: its
  // SEND_F / SEND_B are asynchronous, and only the receiving pass waits for its RECV; pytorch/pytorch
  // torch/distributed/pipelining/schedules.py, read at commit 00722e64).
  sp.overlap_p2p = sp.schedule == Schedule::kInterleaved || sp.schedule == Schedule::kZbV;
  const ScheduleTraits traits = cm.schedule_traits();
  sp.overlap_grad_sync = traits.overlap_grad_sync;
  sp.overlap_slowdown = std::max(1.0, traits.overlap_slowdown);
  return sp;
}

ScheduleSpec schedule_spec(const Plan& p, const CostModel& cm) {
  return schedule_spec(p.train, static_cast<int>(p.stages.size()), cm);
}

Result<Simulation> simulate_plan(const Plan& p, const CostModel& cm) {
  Status v = validate(p);
  if (!v.ok()) return v.error();
  return simulate_schedule(schedule_spec(p, cm), stage_timings(p, cm));
}

}  // namespace weft
