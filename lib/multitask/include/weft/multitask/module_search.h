// One module of a task file searched alone: the model, sequence and batch search() needs, on a
// group of the cluster's GPUs. Torch-free.
#pragma once

#include "weft/cost/cost_model.h"
#include "weft/search/search.h"
#include "weft/search/search_options.h"
#include "weft/spec/cluster.h"
#include "weft/spec/tasks.h"

namespace weft::multitask {

// search() on module m alone (its model, m.tokens per sample, `batch` samples per step) over
// `gpus` GPUs of `cluster` (its GPU and links; one partial node when gpus is fewer than a node
// holds), with `base`'s other options. Errors: a GPU count the cluster's overrides reject, and
// search()'s own (a batch no configuration divides); "nothing fits" is a result with an empty top.
Result<SearchResult> search_module(const Module& m, int batch, const ClusterSpec& cluster, int gpus,
                                   const CostModel& cm, const SearchOptions& base);

}  // namespace weft::multitask
