// Uniform (Megatron-style) plans: one strategy for every layer, stages split as evenly as possible.
// Used by the search for its uniform baseline, by `weft estimate` for a hand-given strategy, and by
// exporters and benches that need "the plan Megatron would run".
#pragma once

#include <vector>

#include "weft/core/error.h"
#include "weft/plan/plan.h"

namespace weft {

// Layers per stage for `layers` layers over `stages` stages: floor(layers / stages) each, and one
// more on each of the last (layers mod stages) stages. Precondition: 1 <= stages <= layers.
std::vector<int> even_stage_sizes(int layers, int stages);

// The embedding / LM-head strategy a uniform plan uses with layer strategy `layer`, as Megatron does:
// the same tp, sp, ulysses, cp, dp and ZeRO stage; no recompute; ep = 1.
LayerStrategy embedding_for(const LayerStrategy& layer);

// Builds the plan that runs every layer with `layer` (ep applies to MoE layers only: dense layers
// get ep = 1) and the embedding with `embedding`, over train.pp * train.vp stages split by
// even_stage_sizes(). The plan is validate()d: on success it is a valid plan with empty predictions;
// on failure the error names the field and the numbers (e.g. "tp=3 does not divide 32 attention
// heads", or pp*vp larger than the layer count).
Result<Plan> make_uniform_plan(const ModelSpec& model, const ClusterSpec& cluster, const TrainSettings& train,
                               const LayerStrategy& layer, const LayerStrategy& embedding);

}  // namespace weft
