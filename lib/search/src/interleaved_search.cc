// The layer-wise search of one configuration with an interleaved schedule (search_internal.h,
// docs/search.md).
#include <cmath>

#include "search_internal.h"
#include "weft/plan/pipeline_order.h"

namespace weft::planner {

void search_interleaved(const Problem& pb, const Work& w, const DpOptions& opts, Pool& pool) {
  const int P = w.P, pp = w.cfg.pp, vp = w.cfg.vp, K = static_cast<int>(w.layouts.size());
  // Chunk j of device group g: virtual stage g + j pp, or zb-v's V (g, then 2 pp - 1 - g).
  auto vs = [&](int g, int j) { return virtual_stage(w.cfg.schedule, pp, g, j); };
  const int E = static_cast<int>(w.embs.size());
  const int n0 = pb.L / P;
  LayerDp dp(K, pb.M);
  std::vector<std::vector<float>> offsets(std::max(0, P - 1), std::vector<float>(K));
  for (int s = 0; s + 1 < P; ++s)
    for (int k = 0; k < K; ++k) offsets[s][k] = static_cast<float>(w.p2p[s][k]);
  auto min_in = [&](int s) {  // incoming p2p of stage s: the least over layouts (a lower bound)
    if (s == 0) return 0.0;
    return *std::min_element(w.p2p[s - 1].begin(), w.p2p[s - 1].end());
  };
  auto run_group = [&](int g, bool history) {
    dp.start(history);
    for (int j = 0; j < vp; ++j) {
      const int s = vs(g, j);
      for (int i = 0; i < n0; ++i) {
        const int layer = s * n0 + i;
        const int grp = pb.group_of[layer];
        dp.push(opts[s][grp].data(), static_cast<int>(opts[s][grp].size()),
                i == 0 ? nullptr : transitions_into(pb, w, layer));
      }
      if (s + 1 < P) dp.add_offsets(offsets[s]);
    }
  };
  auto group_col = [&](int g, int e) {
    double extra = 0;
    for (int j = 0; j < vp; ++j) extra += w.emem[e][vs(g, j)];
    return pb.col(pb.budget - extra);
  };
  auto group_fixed = [&](int g, int e) {
    double t = 0;
    for (int j = 0; j < vp; ++j) t += w.eu[e][vs(g, j)] + min_in(vs(g, j));
    return t;
  };
  std::vector<std::vector<double>> value(pp, std::vector<double>(E, kInf));  // [device group][e]
  for (int g = 0; g < pp; ++g) {
    run_group(g, false);
    for (int e = 0; e < E; ++e) {
      const int c = group_col(g, e);
      if (c < 0) continue;
      const float b = dp.best(c);
      if (b < kInfTime) value[g][e] = b + group_fixed(g, e);
    }
  }
  int best_e = -1;
  double best_j = pool.worst();
  for (int e = 0; e < E; ++e) {
    std::vector<double> cg(pp);
    bool ok = true;
    for (int g = 0; g < pp; ++g) ok = ok && std::isfinite(cg[g] = value[g][e]);
    if (!ok) continue;
    const double j = objective(cg, w.cfg.m, vp);
    if (j < best_j) best_j = j, best_e = e;
  }
  if (best_e < 0) return;
  std::vector<std::vector<int>> idx(P);
  for (int g = 0; g < pp; ++g) {
    run_group(g, true);
    const int c = group_col(g, best_e);
    int bk = -1;
    float bv = kInfTime;
    for (int k = 0; k < K; ++k)
      if (dp.at(k, c) < bv) bv = dp.at(k, c), bk = k;
    if (bk < 0) return;
    const std::vector<int> all = dp.backtrack(bk, c);
    for (int j = 0; j < vp; ++j) idx[vs(g, j)].assign(all.begin() + j * n0, all.begin() + (j + 1) * n0);
  }
  pool.add(best_j, make_plan(pb, w, best_e, std::vector<int>(P, n0), idx));
}

}  // namespace weft::planner
