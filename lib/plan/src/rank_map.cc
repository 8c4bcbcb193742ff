#include "weft/plan/rank_map.h"

#include <string>

#include "weft/core/assert.h"

namespace weft {

RankCoords coords_of(int rank, int stage_size, const LayerStrategy& s) {
  WEFT_ASSERT(s.devices() == stage_size, "strategy of " + std::to_string(s.devices()) + " devices on a stage of " +
                                             std::to_string(stage_size));
  RankCoords c;
  c.pp = rank / stage_size;
  int r = rank % stage_size;
  c.tp = r % s.tp;
  r /= s.tp;
  c.ulysses = r % s.ulysses;
  r /= s.ulysses;
  c.cp = r % s.cp;
  r /= s.cp;
  c.dp = r;
  return c;
}

int rank_of(const RankCoords& c, int stage_size, const LayerStrategy& s) {
  return c.pp * stage_size + ((c.dp * s.cp + c.cp) * s.ulysses + c.ulysses) * s.tp + c.tp;
}

std::vector<int> group_of(int rank, int stage_size, int pp, const LayerStrategy& s, Axis axis) {
  const RankCoords base = coords_of(rank, stage_size, s);
  std::vector<int> out;
  auto add = [&](const RankCoords& c) { out.push_back(rank_of(c, stage_size, s)); };
  RankCoords c = base;
  switch (axis) {
    case Axis::kTp:
      for (c.tp = 0; c.tp < s.tp; ++c.tp) add(c);
      break;
    case Axis::kUlysses:
      for (c.ulysses = 0; c.ulysses < s.ulysses; ++c.ulysses) add(c);
      break;
    case Axis::kCp:
      for (c.cp = 0; c.cp < s.cp; ++c.cp) add(c);
      break;
    case Axis::kDp:
      for (c.dp = 0; c.dp < s.dp; ++c.dp) add(c);
      break;
    case Axis::kPp:
      for (c.pp = 0; c.pp < pp; ++c.pp) add(c);
      break;
    case Axis::kShard:
      for (c.dp = 0; c.dp < s.dp; ++c.dp)
        for (c.cp = 0; c.cp < s.cp; ++c.cp)
          for (c.ulysses = 0; c.ulysses < s.ulysses; ++c.ulysses) add(c);
      break;
    case Axis::kEp: {
      // The experts' grid over the stage's ranks in order: etp fastest, then ep, then edp.
      const int ep = s.ep > 0 ? s.ep : 1, et = s.expert_tp();
      WEFT_ASSERT(stage_size % (ep * et) == 0, "ep*etp " + std::to_string(ep * et) + " does not divide the stage's " +
                                                   std::to_string(stage_size) + " ranks");
      const int local = rank % stage_size, first = rank - local;
      const int block = local / (ep * et) * (ep * et) + local % et;
      for (int k = 0; k < ep; ++k) out.push_back(first + block + k * et);
      break;
    }
    case Axis::kEtp:
    case Axis::kEdp: {
      const int ep = s.ep > 0 ? s.ep : 1, et = s.expert_tp();
      WEFT_ASSERT(stage_size % (ep * et) == 0, "ep*etp " + std::to_string(ep * et) + " does not divide the stage's " +
                                                   std::to_string(stage_size) + " ranks");
      const int local = rank % stage_size, first = rank - local;
      if (axis == Axis::kEtp) {
        const int block = local / et * et;
        for (int k = 0; k < et; ++k) out.push_back(first + block + k);
      } else {
        const int pos = local % (ep * et);
        for (int k = 0; k < stage_size / (ep * et); ++k) out.push_back(first + pos + k * ep * et);
      }
      break;
    }
  }
  return out;  // ascending: every axis index is a monotone term of rank_of, outer axes looped outermost
}

std::vector<std::vector<int>> all_groups(int stage_size, int pp, const LayerStrategy& s, Axis axis) {
  std::vector<std::vector<int>> out;
  const int world = stage_size * pp;
  std::vector<bool> seen(world, false);
  for (int r = 0; r < world; ++r) {
    if (seen[r]) continue;
    auto g = group_of(r, stage_size, pp, s, axis);
    for (int x : g) seen[x] = true;
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace weft
