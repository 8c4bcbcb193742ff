// The checks of a search's options against its model and cluster (weft/search/search_options.h).
#include <algorithm>
#include <cmath>

#include "weft/core/format.h"
#include "weft/search/search_options.h"

namespace weft {

namespace {

Error bad(const std::string& s) { return Error{ErrorKind::kBadInput, s}; }

}  // namespace

Status validate(const SearchOptions& opt, const ModelSpec& model, const ClusterSpec& cluster) {
  const int world = cluster.total_gpus(), L = model.num_layers();
  for (int p : opt.pp_degrees) {
    if (p < 1 || world % p != 0) return bad("--pp: " + S(p) + " does not divide the " + S(world) + " GPUs");
    if (p > L) return bad("--pp: " + S(p) + " stages for " + S(L) + " layers");
  }
  if (Status d = check_dtype(cluster.gpu, opt.dtype, "--dtype"); !d.ok()) return d;
  if (opt.max_tp < 0) return bad("--max-tp: must be >= 1, got " + S(opt.max_tp));
  if (opt.seq <= 0) return bad("seq: must be positive, got " + S(opt.seq));
  if (opt.global_batch <= 0) return bad("global_batch: must be positive, got " + S(opt.global_batch));
  if (opt.top_k < 1) return bad("top: must be >= 1, got " + S(opt.top_k));
  if (Status m = check_moe_imbalance(opt.moe_imbalance, model, "--moe-imbalance"); !m.ok()) return m;
  if (Status d = check_moe_dispatch(opt.moe_dispatcher, opt.moe_a2a_overlap, model, "--moe-dispatcher",
                                    "--moe-a2a-overlap");
      !d.ok())
    return d;
  if (!(opt.memory_step_mib > 0)) return bad("memory_step_mib: must be positive");
  if (model.position == PositionKind::kLearned && model.max_seq > 0 && opt.seq > model.max_seq)
    return bad("seq: " + S(opt.seq) + " exceeds the model's learned position table of " + S(model.max_seq));
  for (auto [name, list] : {std::pair{"--cp", &opt.cp_degrees}, {"--ulysses", &opt.ulysses_degrees}, {"--vp", &opt.vp_degrees}})
    for (int d : *list)
      if (d < 1) return bad(std::string(name) + ": must be >= 1, got " + S(d));
  // zb-v runs exactly two chunks per device group, whatever --vp lists for the interleaved schedule.
  const bool zbv = std::find(opt.schedules.begin(), opt.schedules.end(), Schedule::kZbV) != opt.schedules.end();
  if (zbv && !opt.vp_degrees.empty() &&
      std::find(opt.vp_degrees.begin(), opt.vp_degrees.end(), 2) == opt.vp_degrees.end()) {
    std::string list;
    for (int v : opt.vp_degrees) list += (list.empty() ? "" : ",") + S(v);
    return bad("--vp " + list + ": the zb-v schedule runs exactly 2 model chunks per device group (vp 2); add 2 "
               "to --vp or leave zb-v out of --schedule");
  }
  for (int m : opt.micro_batches)
    if (m < 1 || opt.global_batch % m != 0)
      return bad("micro_batches: " + S(m) + " does not divide global batch " + S(opt.global_batch));
  return Status{};
}

}  // namespace weft
