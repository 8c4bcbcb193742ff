// What weft's own runtime (lib/runtime, `weft train`) executes today. Torch-free, so that the
// runtime (which refuses the rest before any process group exists) and the search (which keeps to
// it when a plan is meant for weft's runtime, docs/search.md "weft's runtime") share one rule.
//
// The runtime runs every combination of tp, sp, ulysses, cp (ring attention), dp, ZeRO 0-3,
// recompute and a pipeline under gpipe, 1f1b, interleaved with any vp, zb-h1 and zb-v (uneven
// stages, a different layout per layer) for models of decoder layers of one hidden width with
// learned or rotary positions, MoE layers (without biases) with any expert degree ep and expert
// tensor degree etp the plan validates. It does not run yet: encoder and cross-attention layers,
// relative position biases, sliding windows, attention sinks, latent attention.
#pragma once

#include <cstdint>
#include <string>

#include "weft/core/error.h"
#include "weft/plan/plan.h"
#include "weft/plan/strategy.h"
#include "weft/spec/model.h"

namespace weft {

// Why the runtime cannot run a layer (or the embedding) with strategy s, as "FIELD: reason" naming
// the degree; empty when it can. Every field is run today (the function stays the one place the
// search asks).
std::string runtime_strategy_refusal(const LayerStrategy& s);
inline bool runtime_runs_strategy(const LayerStrategy& s) { return runtime_strategy_refusal(s).empty(); }
// Why the runtime cannot cut sequences of `seq` tokens as s asks, or empty: context parallelism
// holds two of 2 cp chunks per rank (seq a multiple of 2 cp), and cp x ulysses x tp (with
// sequence parallelism) blocks of equal length.
std::string runtime_sequence_refusal(const LayerStrategy& s, int64_t seq);

// Whether the runtime can run model m at all, whatever the strategy: an error (kBadInput) naming
// the field or the layer, "model.position: ..." or "model layer 3: MoE layers (8 experts) ...".
Status runtime_runs_model(const ModelSpec& m);

// validate(p), then everything above: the first thing the runtime cannot run, its message starting
// with "plan: " and naming where it appears (the field, the layer, the stage and layer index).
// Ok means `weft train` executes the plan.
Status runtime_supports(const Plan& p);

}  // namespace weft
