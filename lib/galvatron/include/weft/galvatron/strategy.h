// Galvatron strategy files (the JSON its runtime trains with): export a weft plan to one, import
// one into a weft plan. Field meanings: ../shared/reference/galvatron/SEARCH_AND_COST_MODEL.md §3.
#pragma once

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/plan/plan.h"

namespace weft::galvatron {

// Writes plan p as a Galvatron strategy JSON. Refuses (kBadInput, naming the reason and the layer)
// a plan Galvatron cannot express: uneven stages, interleaving, ZeRO-1, context parallel, tp and
// Ulysses in one layer, selective recompute, ...
Result<Json> export_strategy(const Plan& p);

// Builds a weft plan from a Galvatron strategy for the given model and cluster.
Result<Plan> import_strategy(const Json& strategy, const ModelSpec& model, const ClusterSpec& cluster,
                             int seq);

}  // namespace weft::galvatron
