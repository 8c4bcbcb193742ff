// What a plan search may consider: the training settings it plans for, the restrictions of its
// space, and its tuning knobs (weft/search/search.h runs it; docs/search.md). A plain value; the
// functions in it are only read.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "weft/plan/plan.h"

namespace weft {

// The fields of a candidate strategy in the order the candidate walk sets them
// (weft/search/strategy_space.h). A rule is asked once its field is set.
enum class StrategyField { kTp, kSp, kUlysses, kCp, kZero, kRecompute, kEp };

// A restriction of the candidate strategies counted under its own name in SearchStats::rules (for
// instance galvatron::restrict_to_galvatron, weft/galvatron/search.h). `refuses` sees the strategy
// as far as the walk has set it (the fields after `field` at their defaults; dp is set with cp, and
// for the embedding, which has no cp, with ulysses). It is asked right after the "options" rule of
// its field (weft/search/pruning.h; first, where the field has none); a refusal removes the
// strategy with every candidate the walk would build from it, counted once. Applies to layers and
// the embedding alike.
struct NamedRestriction {
  std::string name;
  StrategyField field = StrategyField::kTp;
  std::function<bool(const LayerStrategy& partial)> refuses;
};

struct SearchOptions {
  int seq = 4096;
  int global_batch = 512;
  DType dtype = DType::kBf16;
  OptimizerPrecision optimizer;  // the optimizer states' precision (plan.h; default fp32), as given
  double moe_imbalance = 1.0;    // MoE routing's busiest expert rank over the mean (TrainSettings)
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;  // MoE token dispatch (TrainSettings)
  // Megatron-Core's EP all-to-all overlap (TrainSettings::moe_a2a_overlap), on the pipelines that
  // allow it (pp 1, or interleaved).
  bool moe_a2a_overlap = false;
  int top_k = 3;

  // Restrict the space (0 / empty = search all).
  std::vector<int> pp_degrees;             // e.g. {1,2,4}
  std::vector<Schedule> schedules;         // default: gpipe, 1f1b, interleaved, zb-h1, zb-v
  std::vector<int> micro_batches;          // m values; default: divisors of the batch that make sense
  int max_tp = 0;                          // default: GPUs per node
  // Degrees the layers may take (empty: all the rules allow). A listed cp degree is considered at
  // any sequence length, and either list lifts the rule that fills Ulysses before cp (the user
  // chose); the embedding's Ulysses degree stays free. vp_degrees: virtual stages of the
  // interleaved schedule (default 2 .. max_vp).
  std::vector<int> cp_degrees, ulysses_degrees, vp_degrees;
  bool allow_ulysses = true, allow_cp = true, allow_zero3 = true;
  // Further filter on candidate strategies (a layer of `shape`, or the embedding when null); empty
  // = accept all. Each refused candidate counts under rule "options". restrict_to_framework() and
  // restrict_to_runtime() set it.
  std::function<bool(const LayerStrategy&, const LayerShape* shape)> accept;
  // Restrictions with their own rule names, asked while the candidates are built (above).
  std::vector<NamedRestriction> restrictions;
  bool layerwise = true;                   // per-layer strategies (false: uniform only)
  bool uneven_stages = true;               // stage boundaries chosen by the partition DP
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

// Checks `opt` for a search of `model` on `cluster` before anything runs (validate_options.cc), in
// this order; the first failure is a kBadInput error naming the field and the numbers:
//   pp_degrees   each divides the GPUs ("--pp: 3 does not divide the 8 GPUs") and is at most the
//                layers ("--pp: 64 stages for 32 layers");
//   max_tp       >= 0, 0 meaning GPUs per node ("--max-tp: must be >= 1, got -2");
//   seq, global_batch > 0; top_k >= 1 ("top: must be >= 1, got 0"); memory_step_mib > 0;
//   seq          at most a learned position table ("seq: 4096 exceeds the model's learned
//                position table of 2048");
//   micro_batches each divides global_batch;
//   cp_degrees, ulysses_degrees, vp_degrees each >= 1 ("--cp: must be >= 1, got 0").
// search() runs these checks too; a caller validates first to report them before any other work
// (restricting the space, loading files).
Status validate(const SearchOptions& opt, const ModelSpec& model, const ClusterSpec& cluster);

}  // namespace weft
