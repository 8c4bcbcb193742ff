// What weft's own runtime (lib/runtime, `weft train`) executes today. Torch-free, so that the
// runtime (which refuses the rest before any process group exists) and the search (which keeps to
// it when a plan is meant for weft's runtime, docs/search.md "weft's runtime") share one rule.
//
// The runtime runs every combination of tp, sp, ulysses, dp, ZeRO 0-3, recompute and a pipeline
// under every schedule (gpipe, 1f1b, interleaved with any vp, zb-h1; uneven stages, a different
// layout per layer) for models of decoder layers of one hidden width with learned or rotary
// positions. It does not run yet: context parallelism (cp > 1), expert parallelism (ep > 1), MoE
// layers, encoder and cross-attention layers, relative position biases, the zb-v schedule.
#pragma once

#include <string>

#include "weft/core/error.h"
#include "weft/plan/plan.h"
#include "weft/plan/strategy.h"
#include "weft/spec/model.h"

namespace weft {

// Why the runtime cannot run a layer (or the embedding) with strategy s, as "FIELD: reason" naming
// the degree, e.g. "cp: context parallelism (cp=2) is not supported by the weft runtime yet; ...";
// empty when it can. Only cp and ep matter: every other field is run.
std::string runtime_strategy_refusal(const LayerStrategy& s);
inline bool runtime_runs_strategy(const LayerStrategy& s) { return runtime_strategy_refusal(s).empty(); }

// Whether the runtime can run model m at all, whatever the strategy: an error (kBadInput) naming
// the field or the layer, "model.position: ..." or "model layer 3: MoE layers (8 experts) ...".
Status runtime_runs_model(const ModelSpec& m);

// validate(p), then everything above: the first thing the runtime cannot run, its message starting
// with "plan: " and naming where it appears (the field, the layer, the stage and layer index).
// Ok means `weft train` executes the plan.
Status runtime_supports(const Plan& p);

}  // namespace weft
