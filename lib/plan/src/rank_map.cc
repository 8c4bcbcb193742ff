#include "weft/plan/rank_map.h"

#include <cassert>

namespace weft {

RankCoords coords_of(int rank, int stage_size, const LayerStrategy& s) {
  assert(s.devices() == stage_size);
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
  int n = 0;
  switch (axis) {
    case Axis::kTp: n = s.tp; break;
    case Axis::kUlysses: n = s.ulysses; break;
    case Axis::kCp: n = s.cp; break;
    case Axis::kDp: n = s.dp; break;
    case Axis::kPp: n = pp; break;
  }
  std::vector<int> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    RankCoords c = base;
    switch (axis) {
      case Axis::kTp: c.tp = i; break;
      case Axis::kUlysses: c.ulysses = i; break;
      case Axis::kCp: c.cp = i; break;
      case Axis::kDp: c.dp = i; break;
      case Axis::kPp: c.pp = i; break;
    }
    out.push_back(rank_of(c, stage_size, s));
  }
  return out;  // ascending: every axis index is a monotone term of rank_of
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
