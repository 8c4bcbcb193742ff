// Costs a whole plan with any CostModel: sums layer costs per stage, adds stage extras,
// transitions and p2p, and asks the model to combine them into a step.
#pragma once

#include <vector>

#include "weft/cost/cost_model.h"

namespace weft {

struct StageEstimate {
  Seconds time;                // busy time per step
  MemoryBreakdown memory;      // peak per device
  bool fits = true;
};

struct Estimate {
  Seconds step_time;
  double tokens_per_s = 0;
  // MFU: model FLOPs (weft/spec/counts.h: attention without the causal discount, no recompute;
  // Narayanan et al. 2021 and PaLM's convention) per GPU per second over the dtype's peak.
  double model_tflops_per_gpu = 0;  // / 1e12
  double mfu = 0;
  // HFU: the same count plus the FLOPs recompute re-runs (CostModel::recompute_flops); equals the
  // MFU when nothing is recomputed.
  double hardware_tflops_per_gpu = 0;  // / 1e12
  double hfu = 0;
  Bytes peak_memory;
  Bytes memory_budget;
  std::vector<StageEstimate> stages;  // per stage (pp*vp); memory is per device of its group
  TimeBreakdown breakdown;     // per step
  bool fits = true;
};

// Per-stage sums of plan p under cm (layers + transitions inside the stage + stage extras + p2p at
// both boundaries), the input of CostModel::step(); also used by the schedule simulator.
std::vector<StageSums> stage_sums(const Plan& p, const CostModel& cm);
// The same with stage s on the devices clusters[s] (one per stage; a plan over mixed or slowed
// devices costs each stage, or each data-parallel replica of it, on its own kind: weft/search/hetero.h).
std::vector<StageSums> stage_sums(const Plan& p, const CostModel& cm, const std::vector<ClusterSpec>& clusters);
// The context of stage s of plan p (on p.cluster, or on `cluster`, which must outlive the context).
StageContext stage_context(const Plan& p, int s);
StageContext stage_context(const Plan& p, int s, const ClusterSpec& cluster);

// Fills e's tokens/s, model and hardware TFLOP/s per GPU, MFU and HFU from e.step_time, for devices
// whose peaks in the plan's dtype add up to peak_flops (FLOP/s, all GPUs together).
void set_throughput(Estimate& e, const Plan& p, const CostModel& cm, double peak_flops);
// Costs plan p (which must pass validate()). Does not modify the plan.
Estimate estimate(const Plan& p, const CostModel& cm);
// Writes the estimate's figures into p.predicted and each stage's predicted fields.
void annotate(Plan& p, const Estimate& e, const CostModel& cm);
// JSON for `weft estimate --format json` (docs/search.md §8): step_time_s, tokens_per_s,
// model_tflops_per_gpu, mfu, peak_memory_gib, memory_budget_gib, fits, stages[], breakdown.
Json to_json(const Estimate& e);

}  // namespace weft
