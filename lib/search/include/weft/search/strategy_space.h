// The search space: pipeline configurations (pp, schedule, vp, micro-batch count) and the candidate
// strategies of a layer or of the embedding on one stage, after the rules in pruning.h.
#pragma once

#include <vector>

#include "weft/plan/plan.h"
#include "weft/search/pruning.h"
#include "weft/search/search_options.h"

namespace weft::planner {

// One point of the global sweep.
struct PipelineConfig {
  int pp = 1;
  int vp = 1;
  Schedule schedule = Schedule::k1F1B;
  int m = 1;  // micro-batches per step
  bool operator==(const PipelineConfig&) const = default;
  int stages() const { return pp * vp; }
  TrainSettings train(const SearchOptions& opt) const {
    TrainSettings t;
    t.seq = opt.seq;
    t.global_batch = opt.global_batch;
    t.micro_batches = m;
    t.pp = pp;
    t.vp = vp;
    t.schedule = schedule;
    t.dtype = opt.dtype;
    t.optimizer = opt.optimizer;
    t.moe_imbalance = opt.moe_imbalance;
    t.moe_dispatcher = opt.moe_dispatcher;
    t.moe_a2a_overlap = opt.moe_a2a_overlap && t.pairs_micro_batches();
    return t;
  }
};

// All configurations that survive the configuration rules, in enumeration order (pp ascending,
// then schedule gpipe / 1f1b / interleaved by vp / zb-h1 / zb-v, then m ascending). The GPipe-dominance rule needs
// the cost model and is applied by the search, not here.
// pp: divisors of the world size (or opt.pp_degrees) with pp*vp <= layers; m: divisors of the global
// batch (or opt.micro_batches) with m >= pp (and m % pp == 0 when interleaved); zb-v with pp >= 2,
// vp = 2 and layers divisible by 2 pp (equal chunks, as the interleaved schedule's).
std::vector<PipelineConfig> pipeline_configs(const ModelSpec& model, const ClusterSpec& cluster,
                                             const SearchOptions& opt, RuleLog& log);

// Candidate strategies for a layer of `shape` on a stage of `stage_size` devices whose micro-batch
// holds `pmb` samples, in a fixed order (tp, sp, ulysses, cp, zero, recompute, ep ascending). Every
// candidate passes validate()'s per-layer checks; rules remove the rest (counted in `log`).
// One walk builds them: it sets the fields in that order, each to the values the stage admits (the
// factorisations tp*ulysses*cp*dp = stage_size with dp dividing pmb), and asks the rules of a field
// (pruning.h, then SearchOptions::restrictions after the field's options rule) as soon as it is
// set, so a rule counts once per partial strategy it removes. SearchOptions::accept is asked last,
// of each complete candidate.
std::vector<LayerStrategy> layer_candidates(const LayerShape& shape, const ClusterSpec& cluster,
                                            const SearchOptions& opt, int stage_size, int pmb, RuleLog& log);

// Candidate strategies for the embedding / LM head: tp (vocab parallel), sp, ulysses, dp and ZeRO
// stage by the same walk and rules; no cp (so dp is fixed, and checked, with ulysses), no
// recompute, ep 1.
std::vector<LayerStrategy> embedding_candidates(const ModelSpec& model, const ClusterSpec& cluster,
                                                const SearchOptions& opt, int stage_size, int pmb, RuleLog& log);

}  // namespace weft::planner
