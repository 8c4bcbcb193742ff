// Global rank -> coordinates, from one ordered axis list (fastest first):
//   tp, ulysses, cp, dp (inside a stage), then pp.
//   rank = pp_idx * S + ((dp_idx * cp + cp_idx) * ulysses + u_idx) * tp + tp_idx,  S = devices/stage
// Layers of one stage may use different (tp, ulysses, cp, dp) factorisations of S; each layer has
// its own coordinates. tp is fastest so tensor-parallel groups stay inside a node.
#pragma once

#include <vector>

#include "weft/plan/strategy.h"

namespace weft {

struct RankCoords {
  int pp = 0, dp = 0, cp = 0, ulysses = 0, tp = 0;
  bool operator==(const RankCoords&) const = default;
};

// Coordinates of `rank` under strategy s, with `stage_size` devices per stage.
RankCoords coords_of(int rank, int stage_size, const LayerStrategy& s);
// Inverse of coords_of.
int rank_of(const RankCoords& c, int stage_size, const LayerStrategy& s);

// The axes of a layer's rank grid, and two composite axes:
//   kShard: ulysses x cp x dp, every rank of the stage with the same tp index (the group that sums a
//     replicated parameter's gradients and shards its ZeRO state);
//   kEp: the expert-parallel group of a MoE layer, ep ranks that hold different experts, on the
//     experts' own grid over the stage's ranks in order (Megatron-LM's expert grid, order tp-ep-dp
//     with tp = etp): etp fastest, then ep, then the expert data-parallel index. So the group is ep
//     ranks etp apart. With etp = tp and no Ulysses that is ep consecutive indices of
//     cp_idx + cp * dp_idx at one tp position, Megatron-LM's tp-cp-ep-dp order.
//   kEtp: the expert-tensor-parallel group on that grid (etp consecutive ranks: one expert's FFN
//     split by columns);
//   kEdp: the expert data-parallel group on that grid (stage_size / (ep * etp) ranks, ep * etp
//     apart, holding the same expert shard: they sum its gradients and shard its ZeRO state).
enum class Axis { kTp, kUlysses, kCp, kDp, kPp, kShard, kEp, kEtp, kEdp };
// The ranks in `rank`'s group along `axis` (sorted ascending), e.g. its tensor-parallel group.
std::vector<int> group_of(int rank, int stage_size, int pp, const LayerStrategy& s, Axis axis);
// All groups along `axis` for one stage group / all stages (each sorted), for building process groups.
std::vector<std::vector<int>> all_groups(int stage_size, int pp, const LayerStrategy& s, Axis axis);

}  // namespace weft
