// Planning in Galvatron's search space under its cost model: weft's search (weft/search/search.h,
// restricted by restrict_to_galvatron) run once per Galvatron task kind -- tp_only and tp_with_sp with
// each Megatron-SP buffer size, and sp_only -- each plan scored with Galvatron's exact accounting
// (GalvatronCostModel::estimate_plan), the fastest that fits kept. Galvatron's own engine runs the
// same tasks for every (chunks, pp) too; weft's search sweeps those inside each call.
#pragma once

#include <string>
#include <vector>

#include "weft/galvatron/cost_model.h"
#include "weft/search/search.h"

namespace weft::galvatron {

// Galvatron's space (docs/galvatron.md), the way restrict_to_framework() restricts to a framework:
// even pipeline stages (uneven_stages = false), the 1F1B schedule only, and its strategy set as the
// restriction "galvatron-space" (weft/search/pruning.h): DDP, ZeRO-2 or ZeRO-3 (no ZeRO-1); tp or
// Ulysses, not both; no context parallelism; no or full recompute (not selective); on layers and the
// embedding alike. The global batch stays as given. Schedules the caller chose without 1F1B are an
// error naming them; with 1F1B among them, 1F1B is kept.
Status restrict_to_galvatron(SearchOptions& opt);

struct TaskOutcome {
  TpSpMode mode = TpSpMode::kTpOnly;
  int buffer_tp = 0;            // 0 for sp_only
  bool found = false;           // a plan fits
  double iteration_s = 0;       // Galvatron's accounting of the task's best plan
  double wall_s = 0;
};

struct GalvatronSpaceResult {
  Plan best;                    // annotated with Galvatron's iteration time (cost model "galvatron")
  GalvatronEstimate estimate;   // its exact accounting
  std::vector<TaskOutcome> tasks;
  double wall_s = 0;            // all tasks
  long long configurations = 0; // pipeline configurations weft's search considered, over all tasks
};

// `opt` gives seq, global batch, dtype. With `galvatron_space` (the default) the search is restricted
// to Galvatron's space (restrict_to_galvatron: 1F1B, even stages, its strategy set);
// without it weft's own space is searched task by task under the same model (uneven stages, GPipe;
// what the model cannot cost -- ZeRO-1, cp, interleaving -- drops out). max_tp / allow_ulysses are
// set per task, and the layer DP's memory step is 4 MiB unless `opt` asks for another (a value
// other than weft's 64 MiB default). `base` supplies the profiles, hidden size,
// default_dp_type, sequence_parallel and max_tp_deg. Errors: bad input; kNoFit when no task finds
// a plan that fits.
Result<GalvatronSpaceResult> search_galvatron_space(const ModelSpec& model, const ClusterSpec& cluster,
                                                    const GalvatronCostModel& base, SearchOptions opt,
                                                    bool galvatron_space = true);

// The same as weft's SearchResult (top = {best}; stats: configurations and wall time of all tasks),
// for `weft plan --cost-model galvatron --galvatron-space`.
SearchResult to_search_result(const GalvatronSpaceResult& r);

}  // namespace weft::galvatron
