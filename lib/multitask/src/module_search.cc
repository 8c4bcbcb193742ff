#include "weft/multitask/module_search.h"

namespace weft::multitask {

Result<SearchResult> search_module(const Module& m, int batch, const ClusterSpec& cluster, int gpus,
                                   const CostModel& cm, const SearchOptions& base) {
  ClusterOverrides ov;
  ov.gpus = gpus;
  if (gpus < cluster.gpus_per_node) ov.gpus_per_node = gpus;
  Result<ClusterSpec> c = apply_overrides(cluster, ov);
  if (!c.ok()) return c.error();
  SearchOptions opt = base;
  opt.seq = m.tokens;
  opt.global_batch = batch;
  return search(m.model, *c, cm, opt);
}

}  // namespace weft::multitask
