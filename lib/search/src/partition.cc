#include "weft/search/partition.h"

#include <algorithm>
#include <cmath>

namespace weft::planner {

namespace {

struct Point {
  double mx = 0, sm = 0;
  int parent = -1;  // index into the previous stage's point pool
  int n = 0, q = 0, prev_i = 0, prev_q = 0;
};

// A Pareto front of (mx, sm): no point has both mx and sm <= another's.
void insert(std::vector<int>& front, std::vector<Point>& pool, const Point& p) {
  for (int idx : front) {
    const Point& o = pool[idx];
    if (o.mx <= p.mx && o.sm <= p.sm) return;  // dominated (or equal)
  }
  front.erase(std::remove_if(front.begin(), front.end(),
                             [&](int idx) { return p.mx <= pool[idx].mx && p.sm <= pool[idx].sm; }),
              front.end());
  pool.push_back(p);
  front.push_back(static_cast<int>(pool.size()) - 1);
}

}  // namespace

PartitionResult solve_partition(const PartitionProblem& pr) {
  PartitionResult res;
  const int L = pr.layers, P = pr.stages;
  if (P < 1 || L < P) return res;
  const double w = pr.weight_max;
  auto classes = [&](int s) { return s < P - 1 ? static_cast<int>(pr.p2p[s].size()) : 1; };
  auto nmin = [&](int s) { return pr.n_min.empty() || pr.n_min[s] <= 0 ? 1 : pr.n_min[s]; };
  auto nmax = [&](int s) { return pr.n_max.empty() || pr.n_max[s] <= 0 ? L : pr.n_max[s]; };

  // With shift invariance, cost(s, ., n, q) is asked once per (n, q) of a stage.
  std::vector<double> memo;
  auto stage_cost = [&](int s, int a, int n, int q, int Q) {
    if (!pr.shift_invariant) return pr.cost(s, a, n, q);
    double& c = memo[static_cast<size_t>(n) * Q + q];
    if (std::isnan(c)) c = pr.cost(s, a, n, q);
    return c;
  };
  // fronts[i * Q + q] for the current stage; pools per stage for backtracking.
  std::vector<std::vector<Point>> pools(P);
  std::vector<std::vector<int>> prev_fronts, fronts;
  int prev_q = 1;
  prev_fronts.assign(static_cast<size_t>(L + 1) * prev_q, {});
  // A virtual stage -1 with one point at i = 0.
  std::vector<Point> root{Point{}};
  for (int s = 0; s < P; ++s) {
    const int Q = classes(s);
    fronts.assign(static_cast<size_t>(L + 1) * Q, {});
    std::vector<Point>& pool = pools[s];
    const int lo = nmin(s), hi = nmax(s);
    if (pr.shift_invariant) memo.assign(static_cast<size_t>(L + 1) * Q, std::numeric_limits<double>::quiet_NaN());
    std::vector<double> costs;  // stage_cost(s, i, n, q) at [(n - lo) * Q + q], asked once per i
    for (int i = (s == 0 ? 0 : s); i <= L - (P - s); ++i) {
      costs.clear();
      for (int qi = 0; qi < (s == 0 ? 1 : prev_q); ++qi) {
        const std::vector<int>* from = nullptr;
        std::vector<int> root_front{0};
        if (s == 0) {
          if (i != 0) continue;
          from = &root_front;
        } else {
          from = &prev_fronts[static_cast<size_t>(i) * prev_q + qi];
          if (from->empty()) continue;
        }
        const std::vector<Point>& from_pool = s == 0 ? root : pools[s - 1];
        const double pin = s > 0 ? pr.p2p[s - 1][qi] : 0.0;
        const int rest = P - 1 - s;  // stages after this one, one layer each at least
        for (int n = lo; n <= hi && i + n <= L - rest; ++n) {
          if (s == P - 1 && i + n != L) continue;
          for (int q = 0; q < Q; ++q) {
            const size_t at = static_cast<size_t>(n - lo) * Q + q;
            if (at >= costs.size()) costs.resize(at + 1, std::numeric_limits<double>::quiet_NaN());
            if (std::isnan(costs[at])) costs[at] = stage_cost(s, i, n, q, Q);
            double c = costs[at];
            if (!std::isfinite(c)) continue;
            c += pin + (s < P - 1 ? pr.p2p[s][q] : 0.0);
            for (int idx : *from) {
              const Point& f = from_pool[idx];
              Point p;
              p.mx = std::max(f.mx, c);
              p.sm = f.sm + c;
              if (p.sm + w * p.mx >= pr.upper_bound) continue;
              p.parent = idx;
              p.n = n;
              p.q = q;
              p.prev_i = i;
              p.prev_q = qi;
              insert(fronts[static_cast<size_t>(i + n) * Q + q], pool, p);
            }
          }
        }
      }
    }
    prev_fronts.swap(fronts);
    prev_q = Q;
  }
  // The answer: the best point at (L, class 0) of the last stage.
  const std::vector<int>& last = prev_fronts[static_cast<size_t>(L) * prev_q + 0];
  int best = -1;
  for (int idx : last) {
    const Point& p = pools[P - 1][idx];
    const double j = p.sm + w * p.mx;
    if (j < res.objective) res.objective = j, best = idx;
  }
  if (best < 0) return res;
  res.feasible = true;
  res.sizes.assign(P, 0);
  res.classes.assign(P, 0);
  res.stage_cost.assign(P, 0);
  int idx = best;
  for (int s = P - 1; s >= 0; --s) {
    const Point& p = pools[s][idx];
    res.sizes[s] = p.n;
    res.classes[s] = p.q;
    const double prev_sm = s > 0 ? pools[s - 1][p.parent].sm : 0.0;
    res.stage_cost[s] = p.sm - prev_sm;
    idx = p.parent;
  }
  return res;
}

}  // namespace weft::planner
