// When nothing fits (search_internal.h): the plan of a configuration that needs the least memory,
// and the device memory that would make it fit.
#include <cmath>

#include "search_internal.h"
#include "weft/search/uniform.h"

namespace weft::planner {

namespace {

// Stage sizes minimising the largest stage memory, stage_mem(s, first layer, layers): a min-max DP
// over (stage, layers placed). Empty when no partition exists.
template <class StageMem>
std::vector<int> least_memory_sizes(int L, int P, const StageMem& stage_mem) {
  std::vector<std::vector<double>> best(P + 1, std::vector<double>(L + 1, kInf));
  std::vector<std::vector<int>> from(P + 1, std::vector<int>(L + 1, -1));
  best[0][0] = 0;
  for (int s = 0; s < P; ++s)
    for (int i = s; i <= L; ++i) {
      if (!std::isfinite(best[s][i])) continue;
      for (int n = 1; i + n <= L - (P - 1 - s); ++n) {
        const double v = std::max(best[s][i], stage_mem(s, i, n));
        if (v < best[s + 1][i + n]) best[s + 1][i + n] = v, from[s + 1][i + n] = i;
      }
    }
  std::vector<int> sizes(P, 0);
  int i = L;
  for (int s = P; s > 0; --s) {
    const int a = from[s][i];
    if (a < 0) return {};
    sizes[s - 1] = i - a;
    i = a;
  }
  return sizes;
}

}  // namespace

// Per layer the least-memory candidate at its position, the embedding with the least memory in
// total, stage sizes minimising the largest device memory (even chunks when interleaved or when
// the stages are even).
std::optional<Plan> closest_plan(const Problem& pb, const Work& w, double* measure) {
  const int P = w.P, G = static_cast<int>(w.groups.size());
  std::vector<std::vector<int>> least(P, std::vector<int>(G, -1));
  for (int s = 0; s < P; ++s)
    for (int g = 0; g < G; ++g) {
      if (!w.groups[g].cands) continue;
      const auto& mm = w.mem[s][g];
      least[s][g] = static_cast<int>(std::min_element(mm.begin(), mm.end()) - mm.begin());
    }
  int e = 0;
  double esum = kInf;
  for (size_t i = 0; i < w.embs.size(); ++i) {
    double t = 0;
    for (int s = 0; s < P; ++s) t += w.emem[i][s];
    if (t < esum) esum = t, e = static_cast<int>(i);
  }
  auto stage_mem = [&](int s, int a, int n) {
    double m = w.emem[e][s];
    for (int i = 0; i < n; ++i) {
      const int g = pb.group_of[a + i];
      m += w.mem[s][g][least[s][g]];
    }
    return m;
  };
  const bool even = w.cfg.vp > 1 || !pb.opt.uneven_stages;
  const std::vector<int> sizes = even ? even_stage_sizes(pb.L, P) : least_memory_sizes(pb.L, P, stage_mem);
  if (sizes.empty()) return std::nullopt;
  std::vector<double> dev(w.cfg.pp, 0.0);
  std::vector<std::vector<int>> idx(P);
  int next = 0;
  for (int s = 0; s < P; ++s) {
    dev[stage_group(w.train, s)] += stage_mem(s, next, sizes[s]);
    for (int i = 0; i < sizes[s]; ++i) idx[s].push_back(least[s][pb.group_of[next + i]]);
    next += sizes[s];
  }
  *measure = *std::max_element(dev.begin(), dev.end());
  return make_plan(pb, w, e, sizes, idx);
}

// Bisection on gpu.memory_gib (the budget grows with the device).
double memory_needed(const Problem& pb, double peak) {
  auto budget_at = [&](double gib) {
    ClusterSpec c = pb.cluster;
    c.gpu.memory_gib = gib;
    return pb.cm.memory_budget(c).value();
  };
  double lo = 0, hi = std::max(1.0, pb.cluster.gpu.memory_gib);
  while (budget_at(hi) < peak) {
    lo = hi;
    hi *= 2;
    if (hi > 1e9) return 0;
  }
  for (int i = 0; i < 60 && hi - lo > 1e-6; ++i) {
    const double mid = 0.5 * (lo + hi);
    (budget_at(mid) >= peak ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace weft::planner
