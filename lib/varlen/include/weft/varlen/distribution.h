// The model-level strategy for a distribution of document lengths (`weft plan --lengths`,
// docs/varlen.md): every tensor-parallel degree (with sequence parallelism, inside a node) and
// recompute policy, each costed by weft's analytic model per sequence-parallel group size and run
// through the batch planner over sampled global batches; ranked by their mean step time.
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/varlen/lengths.h"
#include "weft/varlen/planner.h"
#include "weft/varlen/seq_cost.h"

namespace weft::varlen {

struct DistributionCandidate {
  int tp = 1;
  Recompute recompute = Recompute::kNone;
  int zero = 3;                 // ZeRO stage over every sequence-parallel rank
  bool fits = false;
  std::string why;              // when it does not fit: what does not
  double mean_step_s = 0;       // over the sampled batches
  double tokens_per_s = 0;
  double mean_micro_batches = 0;
  std::vector<int> group_gpus;  // the group sizes (in GPUs) its plans use, smallest first
  double plan_ms_max = 0;       // the slowest batch's planning time
};

struct DistributionOptions {
  AnalyticOptions model;            // framework traits
  DType dtype = DType::kBf16;
  int max_tp = 0;                   // 0: GPUs per node
  std::vector<Recompute> recompute = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  // ZeRO-3 gathers parameters per micro-batch; ZeRO-2 holds them and reduces gradients once per
  // step. ZeRO-1 is not ranked: it moves ZeRO-2's gradient bytes and holds more.
  std::vector<int> zero = {3, 2};
  PlannerOptions planner;
};

// Every candidate, fastest first (those that do not fit last, with the reason).
Result<std::vector<DistributionCandidate>> plan_distribution(const ModelSpec& model, const ClusterSpec& cluster,
                                                             const Batches& batches, const DistributionOptions& o);

// The plan `weft train` runs for a candidate (`weft plan --lengths --out`): one stage, the
// candidate's tp (with Megatron-SP when > 1), recompute and ZeRO stage (over the rest of the GPUs)
// in every layer, train.varlen on with the planner's group sizes; `documents` per step of at most
// `max_seq` tokens. Validated; the prediction holds the candidate's step time and throughput.
Result<Plan> distribution_plan(const ModelSpec& model, const ClusterSpec& cluster, const DistributionCandidate& c,
                               int documents, std::int64_t max_seq, DType dtype, const PlannerOptions& planner);

}  // namespace weft::varlen
