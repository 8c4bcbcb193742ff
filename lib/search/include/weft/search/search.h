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

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/cost/cost_model.h"
#include "weft/cost/estimate.h"
#include "weft/cost/framework.h"
#include "weft/plan/plan.h"
#include "weft/search/search_options.h"

namespace weft {

struct SearchStats {
  long long configurations = 0;    // (pp, schedule, m, ...) combinations considered
  long long pruned = 0;            // removed by rules before costing
  long long layer_costs = 0;       // distinct layer costs computed (after memoisation)
  long long searched = 0;          // configurations whose layer DP and stage partition ran
  long long estimates = 0;         // full-plan estimate() calls in the final ranking
  long long interpolation_fallbacks = 0;  // middle stages costed in full (interpolation check failed)
  double wall_s = 0;
  // The pruning rules that fired (weft/search/pruning.h names them) with what each removed, in the
  // order they first fired.
  std::vector<std::pair<std::string, long long>> rules;
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

// What a training framework can run (docs/search.md, "Frameworks"): every framework but weft
// (weft/cost/framework.h) applies one strategy to all layers (expert parallelism on the MoE
// layers), so `opt` becomes uniform (with even stages, except for torchtitan). megatron runs
// everything else (Ulysses as all-to-all context parallelism, ZeRO-2/3 as Megatron FSDP);
// megatron-deepspeed has no ring context parallelism and no expert parallelism, no Ulysses together
// with Megatron-SP, ZeRO 0-1 (DeepSpeed's pipeline engine takes no more) and DeepSpeed's 1F1B
// pipeline only; torchtitan (and torchtitan-compile) has no Ulysses, shards data parallelism with
// FSDP2 (ZeRO 2 or 3) and always uses sequence parallelism with tensor parallelism. No framework
// runs zb-h1; only torchtitan (without compile) runs zb-v, which its default space then includes.
// Schedules the user chose that the framework lacks are an error naming them. weft (its own runtime) is
// restrict_to_runtime() below: per-layer plans and uneven stages stay.
Status restrict_to_framework(SearchOptions& opt, Framework framework);
// Whether plan p uses only what `framework` runs (the same rules); the error names the layer, the
// field and the framework. For weft it is runtime_supports(p) (weft/plan/runtime_support.h).
Status framework_runs(const Plan& p, Framework framework);
// The two above for a framework given by name; the error of framework_from_string() if it names none.
Status restrict_to_framework(SearchOptions& opt, const std::string& framework);
Status framework_runs(const Plan& p, const std::string& framework);
// What weft's own runtime (`weft train`, the framework named weft) runs (docs/search.md, "weft's
// runtime"; weft/plan/runtime_support.h): no context parallelism, no expert parallelism (ep = 1 on every
// layer), every schedule but zb-v (its default space: gpipe, 1f1b, interleaved, zb-h1). Per-layer plans, uneven stages, Ulysses,
// Megatron-SP, ZeRO 0-3 and recompute all stay. A schedule the user chose that the runtime lacks is
// an error naming it. Only the space is restricted: whether the runtime can run the model at all
// (MoE, encoder layers, relative positions) is runtime_runs_model(), for the caller to check.
// A plan the restricted search returns satisfies runtime_supports().
Status restrict_to_runtime(SearchOptions& opt);

// Searches plans for (model, cluster) under `cm`. Errors only for bad input (e.g. a batch that no
// configuration divides); "nothing fits" is a SearchResult with empty top and `closest` set. The
// same inputs give the same result (stats.wall_s aside).
Result<SearchResult> search(const ModelSpec& model, const ClusterSpec& cluster, const CostModel& cm,
                            const SearchOptions& opt);

}  // namespace weft
