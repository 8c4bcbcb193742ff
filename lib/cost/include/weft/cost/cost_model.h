// The cost model interface: the only thing the search knows about time and memory. Implementations:
// AnalyticCostModel (weft's own, weft/cost/analytic.h), the model calibrated by measured profiles
// (weft/calibration/calibrated.h), the Galvatron-compatible model (weft/galvatron/cost_model.h) and
// deterministic fakes in tests.
//
// Contract: every method is a pure function of its arguments (no hidden state changes), so the
// search can memoise results and tests can assert exact totals. Thread-safe for concurrent reads.
#pragma once

#include <string>
#include <vector>

#include "weft/cost/breakdown.h"
#include "weft/plan/plan.h"
#include "weft/plan/strategy.h"
#include "weft/spec/cluster.h"
#include "weft/spec/model.h"

namespace weft {

// Where a layer (or a stage's extra work) sits and how it is driven.
struct StageContext {
  const ModelSpec* model = nullptr;
  const ClusterSpec* cluster = nullptr;
  TrainSettings train;
  int stage = 0;               // 0 .. num_stages-1 (num_stages = pp * vp)
  int num_stages = 1;
  int stage_size = 1;          // devices per stage = world / pp
  bool first() const { return stage == 0; }
  bool last() const { return stage == num_stages - 1; }
  int device_group() const { return stage_group(train, stage); }  // weft/plan/plan.h
};

struct LayerContext : StageContext {
  int layer = 0;               // global layer index
  const LayerShape& shape() const { return model->layer(layer); }
};

// Cost of one layer (or of a stage's extra work) under one strategy.
struct LayerCost {
  Seconds fwd;                 // one micro-batch forward, compute + exposed communication
  Seconds bwd;                 // one micro-batch backward (+ recompute), compute + exposed communication
  // Part of bwd that a zero-bubble schedule can defer (its W pass, docs/cost-model.md §7): the
  // weight-gradient GEMMs dW = X^T dY of the layer's linears and the non-fused gradient accumulation,
  // 0 <= wgrad <= bwd - time.recompute. Stage extras (embedding, LM head, loss) keep 0: their
  // backward runs whole in B.
  Seconds wgrad;
  Seconds grad_sync;           // per step: gradient reduction (overlappable with backward)
  Seconds optimizer;           // per step: optimizer update of the local shard
  TimeBreakdown time;          // per micro-batch detail of fwd+bwd; dp_comm/optimizer per step
  MemoryBreakdown memory;      // per device at peak (activations already x micro-batches in flight)
  // What the search adds up per layer: memory.transient counts once per stage, at its largest, when
  // breakdowns are combined (estimate()); the search's plain sums take this share of it instead
  // (a layer's share of its device's layers; the edges all of it), which over-counts a stage whose
  // transients would not coexist, never under-counts. Negative: all of it.
  Bytes transient_share = Bytes(-1);
  Bytes mem() const {
    return memory.total() - memory.transient + (transient_share.value() >= 0 ? transient_share : memory.transient);
  }
};

// Per-stage sums the pipeline model combines.
struct StageSums {
  Seconds fwd, bwd;            // per micro-batch
  Seconds wgrad;               // per micro-batch: the deferrable part of bwd (LayerCost::wgrad)
  Seconds grad_sync, optimizer;// per step
  Seconds p2p;                 // per micro-batch send+recv at this stage's boundaries
  TimeBreakdown time;          // per micro-batch
  MemoryBreakdown memory;
};

struct StepCost {
  Seconds step_time;
  std::vector<Seconds> stage_time;  // busy time per stage
  TimeBreakdown time;               // per step, with bubble, dp_exposed and optimizer filled in
};

// How a model's step() runs the per-step work of the pipeline schedule, for simulations of its
// plans (weft/cost/schedule.h, ScheduleSpec): gradient syncs overlapping the last backwards, and the
// slow-down of the compute that hides them (>= 1).
struct ScheduleTraits {
  bool overlap_grad_sync = true;
  double overlap_slowdown = 1.0;
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual std::string name() const = 0;
  // "analytic", "measured" or "mixed": which figures back this model.
  virtual std::string source() const { return "analytic"; }

  virtual LayerCost layer(const LayerContext& ctx, const LayerStrategy& s) const = 0;
  // Work and memory a stage carries besides its layers: embedding / LM head / loss on the first and
  // last stage under strategy `emb`, runtime overheads on every stage.
  virtual LayerCost stage_extra(const StageContext& ctx, const LayerStrategy& emb) const = 0;
  // Re-layout of activations between consecutive layers with strategies a then b, per micro-batch
  // (forward + backward). Zero when a and b lay activations out the same way.
  virtual Seconds transition(const LayerContext& ctx, const LayerStrategy& a, const LayerStrategy& b) const = 0;
  // Pipeline send+recv per micro-batch at the boundary after stage ctx.stage (forward + backward),
  // where the boundary layer runs under strategy s.
  virtual Seconds p2p(const StageContext& ctx, const LayerStrategy& s) const = 0;
  // Combines per-stage sums into the step time for the plan's schedule.
  virtual StepCost step(const TrainSettings& train, const std::vector<StageSums>& stages) const = 0;
  // Memory a device may fill with the above (device capacity minus reserves the model keeps).
  virtual Bytes memory_budget(const ClusterSpec& c) const = 0;
  // The schedule traits step() assumes; by default gradient syncs overlap without slow-down.
  virtual ScheduleTraits schedule_traits() const { return {}; }
  // FLOPs that recompute policy r re-runs in the backward of one layer of shape s, for `batch`
  // samples of `seq` tokens, counted as model_step_flops counts them (weft/spec/counts.h). Hardware
  // FLOPs = model FLOPs + these (Korthikanti et al. 2022, section 6; the HFU of PaLM, Chowdhery et
  // al. 2022, appendix B). Default: full re-runs the layer's forward, selective its attention core.
  virtual double recompute_flops(const LayerShape& s, Recompute r, double batch, double seq) const;
};

}  // namespace weft
