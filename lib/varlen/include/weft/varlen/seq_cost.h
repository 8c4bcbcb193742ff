// What one sequence costs on a sequence-parallel group (docs/varlen.md): the batch planner's view of
// a cost model. A step runs micro-batches one after another; in a micro-batch every group of `d`
// GPUs runs its sequences one after another, each in `seq_time(s, d)`, after a fixed
// `group_overhead(d)`; a GPU holds at most `capacity_tokens()` tokens of activations (a group of d
// GPUs, d times that).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/cost/analytic.h"
#include "weft/plan/strategy.h"
#include "weft/spec/cluster.h"
#include "weft/spec/model.h"

namespace weft::varlen {

class SeqCost {
 public:
  virtual ~SeqCost() = default;
  virtual std::string name() const = 0;
  // Seconds of one sequence of `tokens` tokens, forward and backward through every layer, on a
  // sequence-parallel group of `d` GPUs.
  virtual double seq_time(double tokens, int d) const = 0;
  // Seconds a group spends per micro-batch whatever it runs (ZeRO-3 gathers and reductions, launch).
  virtual double group_overhead(int d) const = 0;
  // Seconds a step spends once whatever its micro-batches (the exposed gradient reduction of ZeRO
  // stages below 3, which reduce once per step); 0 for ZeRO-3 and FlexSP's model.
  virtual double step_overhead() const { return 0; }
  // Tokens of activations one GPU holds under its memory limit.
  virtual double capacity_tokens() const = 0;
  // Bytes of activations per token and per GPU and the bytes a GPU has for them (error messages).
  virtual double bytes_per_token() const = 0;
  virtual double activation_budget_bytes() const = 0;
  // The GPUs of the cluster the model was built for.
  virtual int gpus() const = 0;
};

// FlexSP's published cost model (Wang et al., ASPLOS'25; PKU-DAIR/Hetu-Galvatron branch flexsp,
// galvatron/flexsp_solver/solver.py): per sequence (alpha1 s^2 + alpha2 s) / d ms of compute and
// 4 all-to-alls per layer, forward and backward, of 2 L H s bytes (bf16) at the measured bandwidth
// of a group of d; beta ms per group and micro-batch; activations of act_per_token MB per token
// over d GPUs, beside model states of 16 bytes per parameter sharded over every GPU (ZeRO-3).
struct FlexspConstants {
  std::string model;            // gpt-7b, gpt-13b, gpt-30b
  double act_per_token_mb = 0;  // MB of activations per token
  double alpha1 = 0;            // ms per token^2
  double alpha2 = 0;            // ms per token
  double beta_ms = 0;           // ms per group and micro-batch
  int hidden = 0, layers = 0;
};
// The three models FlexSP publishes constants for; an error names them for any other name.
Result<FlexspConstants> flexsp_constants(const std::string& model);
// The model names flexsp_constants knows, for help texts and errors.
std::vector<std::string> flexsp_models();
// All-to-all bandwidth of a group of d GPUs in GB/s as FlexSP measured it (2 InfiniBand NICs per
// node of 8): 2: 119.54, 4: 104.07, 8: 96.5, 16: 10.33, 32: 5.94, 64: 4.87; larger groups at 64's.
double flexsp_a2a_gbps(int d);

// `memory_limit_gib`: what a GPU may hold (FlexSP's runs used 28-30 GB); `gpus`: the cluster.
std::unique_ptr<SeqCost> flexsp_seq_cost(const FlexspConstants& c, int gpus, double memory_limit_gib);

// weft's own model (docs/varlen.md, "weft's cost model"): for every group size d, the analytic
// model costs a uniform plan of one sequence per group (ZeRO-3 over every GPU, Ulysses over d, or
// over the largest power of two that divides the heads with context parallelism over the rest)
// at sequence lengths from max(128, d) to max_seq by doubling; a sequence's time is its layers'
// compute, recompute, embedding and sequence-parallel traffic there, interpolated between those
// lengths (time per token linear in log length between them, in length beyond them); a group's
// overhead per micro-batch is what the plan spends beside those at the shortest length (host time
// of launching the layers, ZeRO-3 gathers and reductions left exposed; with ZeRO 1 or 2 the exposed
// gradient reduction is the step's instead). Memory: the plan's peak at one GPU as a line in
// the sequence length, against the model's budget.
struct AnalyticSeqOptions {
  AnalyticOptions model;                       // framework traits (weft/cost/framework.h)
  Recompute recompute = Recompute::kSelective;
  DType dtype = DType::kBf16;
  // The longest document costed (the grid's end; longer ones extrapolate). A model with learned
  // positions gets a table this long.
  std::int64_t max_seq = 1 << 21;
  // Tensor parallelism (with sequence parallelism) inside every sequence-parallel rank: the planner
  // then sees gpus / tp units, a group of d units being d x tp GPUs.
  int tp = 1;
  // ZeRO stage over every sequence-parallel rank. 3 (FlexSP's): parameters gathered per micro-batch,
  // in the group overhead. 1 or 2: full parameters held (less room for activations), gradients
  // reduced once per step: the exposed part of that reduction at the shortest length on one GPU
  // (the least backward to hide it behind) is the step overhead.
  int zero = 3;
};
Result<std::unique_ptr<SeqCost>> analytic_seq_cost(const ModelSpec& model, const ClusterSpec& cluster,
                                                   const AnalyticSeqOptions& o);

// `cost` with at most `tokens` tokens of activations per GPU (a user's cap, e.g. `weft train
// --max-tokens-per-gpu`, as Megatron's and FlexSP's token budgets): capacity_tokens() is the smaller
// of the two, the activation budget scaled with it; times unchanged.
std::unique_ptr<SeqCost> capped_seq_cost(std::shared_ptr<const SeqCost> cost, double tokens);

}  // namespace weft::varlen
