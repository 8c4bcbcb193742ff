// Galvatron strategy files (the JSON its runtime trains with): export a weft plan to one, import
// one into a weft plan. Field meanings: data/reference/galvatron/SEARCH_AND_COST_MODEL.md §3;
// the mapping both ways: docs/galvatron.md.
#pragma once

#include <string>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/plan/plan.h"

namespace weft::galvatron {

// Writes plan p as a Galvatron strategy JSON (keys in the order Galvatron writes them, world_size
// included; cp_sizes_enc and vcp only when a layer or the embedding uses context parallelism).
// Refuses (kBadInput, naming the reason and the layer) a plan Galvatron cannot express:
// interleaving, ZeRO-1, tp and Ulysses in one layer, selective recompute, expert parallelism, a
// recomputed embedding, tp layers with and without Megatron-SP in one plan (Galvatron's
// sequence_parallel is one switch), DDP and ZeRO-2 both on dp > 1 layers (one default_dp_type).
// Uneven stages are kept: Galvatron's runtime takes any pp_division.
Result<Json> export_strategy(const Plan& p);

struct ImportOptions {
  // Megatron sequence parallelism on the tp > 1 layers: Galvatron's runtime flag
  // --sequence_parallel, which the strategy file does not record (its shipped scripts set it).
  bool megatron_sp = true;
  DType dtype = DType::kBf16;  // the precision the strategy was searched for
};

// Builds a weft plan from a Galvatron strategy for the given model and cluster. Errors name the key
// and the numbers (list lengths, degrees that do not divide, world_size that differs from the
// cluster's GPUs, tp_consecutive_flags 0, unknown keys).
Result<Plan> import_strategy(const Json& strategy, const ModelSpec& model, const ClusterSpec& cluster,
                             int seq);
Result<Plan> import_strategy(const Json& strategy, const ModelSpec& model, const ClusterSpec& cluster,
                             int seq, const ImportOptions& opt);

// The text Galvatron's save_results writes (json.dump with indent 4, no trailing newline).
std::string dump_strategy(const Json& strategy);

}  // namespace weft::galvatron
