// The plan search: pruning rules, a per-layer dynamic program with memory as state, a stage
// partition minimising the bottleneck stage, and the micro-batch / schedule sweep.
// A pure function of its inputs (the cost model is only read).
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
  bool layerwise = true;                   // per-layer strategies (false: uniform only)
  bool uneven_stages = true;               // stage boundaries chosen by the partition DP
  // Galvatron's space: even pipeline split, its strategy set (DDP/ZeRO-2/ZeRO-3, tp or Ulysses,
  // full or no recompute), 1F1B, no interleaving, fixed global batch.
  bool galvatron_space = false;
  double memory_step_mib = 64.0;           // memory discretisation of the layer DP

  // Called with (done, total) from the search thread; may be empty.
  std::function<void(long long, long long)> progress;
};

struct SearchStats {
  long long configurations = 0;    // (pp, schedule, m, ...) combinations considered
  long long pruned = 0;            // removed by rules before costing
  long long layer_costs = 0;       // distinct layer costs computed (after memoisation)
  double wall_s = 0;
  std::vector<std::string> rules;  // the pruning rules that fired, with counts
};

struct SearchResult {
  std::vector<Plan> top;           // best first, each annotated with its prediction; empty if none fits
  std::optional<Plan> best_uniform;// best single-strategy plan (Megatron-style), if any fits
  // When nothing fits: the plan that needs the least memory, and that memory per GPU.
  std::optional<Plan> closest;
  double min_memory_gib = 0;
  SearchStats stats;
};

// Searches plans for (model, cluster) under `cm`. Errors only for bad input (e.g. a batch that no
// configuration divides); "nothing fits" is a SearchResult with empty top and `closest` set.
Result<SearchResult> search(const ModelSpec& model, const ClusterSpec& cluster, const CostModel& cm,
                            const SearchOptions& opt);

}  // namespace weft
