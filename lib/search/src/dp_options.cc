// The options the layer DP sees (search_internal.h): per layer group and stage position, the
// candidates that fit the budget and survive the Pareto rules pareto-per-layout and
// pareto-across-layouts (weft/search/pruning.h).
#include <array>

#include "search_internal.h"

namespace weft::planner {

namespace {

// For layouts A, B the most that replacing a layer of group g in A by one in B can add in
// transitions and p2p, whatever its neighbours: D[A][B] = max(0, max_x T[x][B] - T[x][A]) +
// max(0, max_y T[B][y] - T[A][y]) + 2 max(0, p2p(B) - p2p(A)) over every transition table into and
// out of group g and every stage boundary (the boundary's p2p is paid by both neighbours).
std::vector<double> replacement_penalty(const Problem& pb, Work& w, int g) {
  const int K = static_cast<int>(w.layouts.size());
  std::vector<const std::vector<float>*> in, out;
  if (!w.t_within[g].empty()) in.push_back(&w.t_within[g]), out.push_back(&w.t_within[g]);
  if (!w.t_into[g].empty()) in.push_back(&w.t_into[g]);
  for (size_t h = g + 1; h < w.groups.size(); ++h)
    if (w.groups[h].cands) {
      if (!w.t_into[h].empty()) out.push_back(&w.t_into[h]);
      break;
    }
  std::vector<double> d(static_cast<size_t>(K) * K, 0.0);
  for (int a = 0; a < K; ++a)
    for (int b = 0; b < K; ++b) {
      if (a == b) continue;
      double din = 0, dout = 0, dp = 0;
      for (const auto* t : in)
        for (int x = 0; x < K; ++x) din = std::max(din, double((*t)[x * K + b]) - (*t)[x * K + a]);
      for (const auto* t : out)
        for (int y = 0; y < K; ++y) dout = std::max(dout, double((*t)[b * K + y]) - (*t)[a * K + y]);
      for (int s = 0; s + 1 < w.P; ++s) dp = std::max(dp, p2p_at(pb, w, s, b) - p2p_at(pb, w, s, a));
      d[static_cast<size_t>(a) * K + b] = din + dout + 2 * dp;
    }
  return d;
}

// The options of group g at stage position pos: candidates not dominated by another that is no
// larger in memory steps and faster by at least the replacement penalty (0 within a layout).
std::vector<DpOption> group_options(const Problem& pb, Tally& t, const Work& w, int pos, int g,
                                    const std::vector<double>& penalty) {
  const auto& uu = w.u[pos][g];
  const auto& mm = w.mem[pos][g];
  const auto& lay = w.groups[g].layout;
  const int K = static_cast<int>(w.layouts.size());
  std::vector<DpOption> all;
  for (size_t c = 0; c < uu.size(); ++c) {
    const int st = pb.steps(mm[c]);
    if (st > pb.M) continue;
    all.push_back(DpOption{static_cast<float>(uu[c]), st, lay[c], static_cast<int>(c)});
  }
  std::vector<DpOption> out;
  long long within = 0, across = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const DpOption& a = all[i];
    bool dominated = false, by_same = false;
    for (size_t j = 0; j < all.size() && !dominated; ++j) {
      if (j == i) continue;
      const DpOption& b = all[j];
      if (b.mem > a.mem) continue;
      const double pen = b.layout == a.layout ? 0.0 : penalty[static_cast<size_t>(a.layout) * K + b.layout];
      const double tb = static_cast<double>(b.time) + pen, ta = a.time;
      if (tb > ta) continue;
      if (b.mem < a.mem || tb < ta || j < i) dominated = true, by_same = b.layout == a.layout;
    }
    if (!dominated) out.push_back(a);
    else if (by_same) ++within;
    else ++across;
  }
  t.log.add(kRuleParetoLayout, within);
  t.log.add(kRuleParetoAcross, across);
  return out;
}

}  // namespace

DpOptions dp_options(const Problem& pb, Tally& t, Work& w) {
  const int G = static_cast<int>(w.groups.size());
  DpOptions opts(w.P, std::vector<std::vector<DpOption>>(G));
  // A group's options depend on its candidates' costs and its replacement penalty, which depends
  // on the transition tables into, within and out of it: a group whose shape and neighbours'
  // shapes repeat an earlier group's (and so those tables) takes that group's options.
  auto next_of = [&](int g) {
    for (int h = g + 1; h < G; ++h)
      if (w.groups[h].cands) return h;
    return -1;
  };
  auto prev_of = [&](int g) {
    for (int h = g - 1; h >= 0; --h)
      if (w.groups[h].cands) return h;
    return -1;
  };
  auto key_of = [&](int g) {
    const int p = prev_of(g), n = next_of(g);
    return std::array<int, 4>{pb.same_as[g], p < 0 ? -1 : pb.same_as[p], n < 0 ? -1 : pb.same_as[n],
                              pb.ranges[g].count > 1 ? 1 : 0};
  };
  std::vector<std::array<int, 4>> keys;
  std::vector<int> done;
  for (int g = 0; g < G; ++g) {
    if (!w.groups[g].cands) continue;
    const std::array<int, 4> k = key_of(g);
    const auto it = std::find(keys.begin(), keys.end(), k);
    if (it != keys.end() && w.groups[done[it - keys.begin()]].cands == w.groups[g].cands) {
      const int same = done[it - keys.begin()];
      for (int pos = 0; pos < w.P; ++pos) opts[pos][g] = opts[pos][same];
      continue;
    }
    const std::vector<double> penalty = replacement_penalty(pb, w, g);
    for (int pos = 0; pos < w.P; ++pos) opts[pos][g] = group_options(pb, t, w, pos, g, penalty);
    keys.push_back(k);
    done.push_back(g);
  }
  return opts;
}

}  // namespace weft::planner
