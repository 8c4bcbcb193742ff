// The plan search: pruning rules, a per-layer dynamic program with memory as state, a stage
// partition minimising the bottleneck stage, and the micro-batch / schedule sweep.
// A pure function of its inputs (the cost model is only read). docs/search.md describes the
// algorithm; weft/search/pruning.h lists every pruning rule.
//
// What the search assumes of the cost model (true of weft's analytic model and of the test fakes;
// a model that breaks them is still costed exactly by estimate() in the final ranking, but the
// search may then miss its optimum):
//   - layer() depends on the layer index only through the layer's shape (its group), so layers of a
//     group are costed once per (strategy, stage);
//   - transition() and p2p() depend on strategies only through how they lay activations out
//     (tp, sp, ulysses, cp, dp), not on ZeRO, recompute or ep, and transition() not on the stage;
//   - every time and memory figure is >= 0.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "weft/cost/cost_model.h"
#include "weft/cost/estimate.h"
#include "weft/plan/plan.h"

namespace weft {

struct SearchOptions {
  int seq = 4096;
  int global_batch = 512;
  DType dtype = DType::kBf16;
  int top_k = 3;

  // Restrict the space (0 / empty = search all).
  std::vector<int> pp_degrees;             // e.g. {1,2,4}
  std::vector<Schedule> schedules;         // default: gpipe, 1f1b, interleaved
  std::vector<int> micro_batches;          // m values; default: divisors of the batch that make sense
  int max_tp = 0;                          // default: GPUs per node
  bool allow_ulysses = true, allow_cp = true, allow_zero3 = true;
  // Further filter on candidate strategies (a layer of `shape`, or the embedding when null); empty
  // = accept all. restrict_to_framework() and restrict_to_runtime() set it.
  std::function<bool(const LayerStrategy&, const LayerShape* shape)> accept;
  bool layerwise = true;                   // per-layer strategies (false: uniform only)
  bool uneven_stages = true;               // stage boundaries chosen by the partition DP
  // Galvatron's space: even pipeline split, its strategy set (DDP/ZeRO-2/ZeRO-3, tp or Ulysses,
  // full or no recompute), 1F1B, no interleaving, fixed global batch.
  bool galvatron_space = false;
  double memory_step_mib = 64.0;           // memory discretisation of the layer DP
  // Context parallelism, and tensor x Ulysses groups wider than a node, are considered only for
  // sequences at least this long (rule "sequence-sharding-inside-node", weft/search/pruning.h).
  int long_seq = 16384;
  int max_vp = 4;                          // deepest interleaving considered (rule "interleave-depth")
  // Cost middle pipeline stages by interpolating between the first and the last stage (checked on
  // three strategies per stage; a stage that fails the check is costed in full). docs/search.md.
  bool interpolate_stages = true;
  // How many configurations (best by the search objective) are re-ranked with estimate(); 0 means
  // max(2 * top_k, 8).
  int rerank = 0;

  // Replace the candidate generators (weft/search/strategy_space.h) when set: the candidates of a
  // layer of `shape` / of the embedding on a stage of `stage_size` devices whose micro-batch holds
  // `pmb` samples. Every returned strategy must be valid there (validate()). The per-layer rules of
  // pruning.h are then not applied; the Pareto and bound rules are. For tests and experiments.
  std::function<std::vector<LayerStrategy>(const LayerShape& shape, int stage_size, int pmb)> layer_space;
  std::function<std::vector<LayerStrategy>(int stage_size, int pmb)> embedding_space;

  // Called with (done, total) from the search thread; may be empty.
  std::function<void(long long, long long)> progress;
};

struct SearchStats {
  long long configurations = 0;    // (pp, schedule, m, ...) combinations considered
  long long pruned = 0;            // removed by rules before costing
  long long layer_costs = 0;       // distinct layer costs computed (after memoisation)
  long long searched = 0;          // configurations whose layer DP and stage partition ran
  long long estimates = 0;         // full-plan estimate() calls in the final ranking
  long long interpolation_fallbacks = 0;  // middle stages costed in full (interpolation check failed)
  double wall_s = 0;
  std::vector<std::string> rules;  // the pruning rules that fired, with counts
};

struct SearchResult {
  std::vector<Plan> top;           // best first, each annotated with its prediction; empty if none fits
  std::optional<Plan> best_uniform;// best single-strategy plan (Megatron-style), if any fits
  // When nothing fits: the plan that needs the least memory (annotated), and the device memory per
  // GPU in GiB that would make it fit: the smallest gpu.memory_gib at which the cost model's
  // memory_budget() reaches the plan's peak (0 if no device size does).
  std::optional<Plan> closest;
  double min_memory_gib = 0;
  SearchStats stats;
};

// Searches plans for (model, cluster) under `cm`. Errors only for bad input (e.g. a batch that no
// configuration divides); "nothing fits" is a SearchResult with empty top and `closest` set.
// What a training framework can run (docs/search.md, "Frameworks"): every framework of
// framework_options() applies one strategy to all layers (expert parallelism on the MoE layers), so
// `opt` becomes uniform (with even stages, except for torchtitan). megatron runs everything else (Ulysses as all-to-all context parallelism,
// ZeRO-2/3 as Megatron FSDP); megatron-deepspeed has no ring context parallelism and no expert
// parallelism, no Ulysses together with Megatron-SP, ZeRO 0-1 (DeepSpeed's pipeline engine takes
// no more) and DeepSpeed's 1F1B pipeline only; torchtitan (and torchtitan-compile) has no Ulysses,
// shards data parallelism with FSDP2 (ZeRO 2 or 3) and always uses sequence parallelism with tensor
// parallelism. Schedules the user chose that the framework lacks are an error naming them.
Status restrict_to_framework(SearchOptions& opt, const std::string& framework);
// Whether plan p uses only what `framework` runs (the same rules); the error names the layer, the
// field and the framework.
Status framework_runs(const Plan& p, const std::string& framework);
// What weft's own runtime (`weft train`) runs (docs/search.md, "weft's runtime";
// weft/plan/runtime_support.h): no context parallelism, no expert parallelism (ep = 1 on every
// layer), gpipe and 1f1b only (no interleaving). Per-layer plans, uneven stages, Ulysses,
// Megatron-SP, ZeRO 0-3 and recompute all stay. A schedule the user chose that the runtime lacks is
// an error naming it. Only the space is restricted: whether the runtime can run the model at all
// (MoE, encoder layers, relative positions) is runtime_runs_model(), for the caller to check.
// A plan the restricted search returns satisfies runtime_supports().
Status restrict_to_runtime(SearchOptions& opt);

Result<SearchResult> search(const ModelSpec& model, const ClusterSpec& cluster, const CostModel& cm,
                            const SearchOptions& opt);

}  // namespace weft
