// The stage partition minimises J = sum c + w * max c exactly, including the p2p coupling of
// neighbouring stages.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "weft/search/partition.h"

namespace weft::planner {
namespace {

// Stage cost = n * per_layer[s] (no p2p): with 6 layers over 2 stages, per-layer 1 and 2:
// sizes (4,2): costs 4, 4 -> J = 8 + w*4. (3,3): 3,6 -> 9 + 6w. (5,1): 5,2 -> 7 + 5w.
// w = 0 picks (5,1) (J 7: least sum); w = 3 picks (4,2) (J 20 vs 22 for (5,1)).
TEST(Partition, TradesSumAgainstBottleneck) {
  PartitionProblem p;
  p.layers = 6;
  p.stages = 2;
  p.p2p = {{0.0}};
  p.cost = [](int s, int, int n, int) { return n * (s == 0 ? 1.0 : 2.0); };
  p.weight_max = 0;
  PartitionResult r = solve_partition(p);
  ASSERT_TRUE(r.feasible);
  EXPECT_EQ(r.sizes, (std::vector<int>{5, 1}));
  EXPECT_DOUBLE_EQ(r.objective, 7.0);
  p.weight_max = 3;
  r = solve_partition(p);
  EXPECT_EQ(r.sizes, (std::vector<int>{4, 2}));
  EXPECT_DOUBLE_EQ(r.objective, 20.0);
  EXPECT_EQ(r.stage_cost, (std::vector<double>{4.0, 4.0}));
}

TEST(Partition, InfeasibleStagesAndBoundsAreRespected) {
  PartitionProblem p;
  p.layers = 4;
  p.stages = 2;
  p.p2p = {{0.0}};
  p.weight_max = 1;
  p.cost = [](int s, int, int n, int) { return n > 2 ? std::numeric_limits<double>::infinity() : 1.0 * n; };
  PartitionResult r = solve_partition(p);
  ASSERT_TRUE(r.feasible);
  EXPECT_EQ(r.sizes, (std::vector<int>{2, 2}));
  p.upper_bound = 6.0;  // J = 4 + 2 = 6 is not below the bound
  EXPECT_FALSE(solve_partition(p).feasible);
  p.upper_bound = 1e9;
  p.n_min = p.n_max = {1, 3};
  EXPECT_FALSE(solve_partition(p).feasible);  // stage 1 cannot take 3 layers
}

// Random instances against enumeration of all compositions and class choices.
TEST(Partition, MatchesEnumeration) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int P = 1 + rng() % 4, L = P + rng() % 5, Q = 1 + rng() % 3;
    PartitionProblem p;
    p.layers = L;
    p.stages = P;
    p.weight_max = rng() % 6;
    p.p2p.assign(P - 1, {});
    for (auto& v : p.p2p)
      for (int q = 0; q < Q; ++q) v.push_back((rng() % 5) / 2.0);
    std::vector<double> table(P * L * L * Q);
    for (double& x : table) x = rng() % 9 == 0 ? std::numeric_limits<double>::infinity() : (rng() % 40) / 4.0;
    auto cost = [&](int s, int a, int n, int q) { return table[((s * L + a) * L + (n - 1)) * Q + q]; };
    p.cost = cost;
    const PartitionResult r = solve_partition(p);
    // Enumerate.
    double best = std::numeric_limits<double>::infinity();
    std::vector<int> sizes;
    std::function<void(int, int)> rec = [&](int s, int used) {
      if (s == P) {
        if (used != L) return;
        std::vector<int> q(P, 0);
        while (true) {
          double mx = 0, sum = 0;
          int a = 0;
          bool ok = true;
          for (int t = 0; t < P; ++t) {
            double c = cost(t, a, sizes[t], t == P - 1 ? 0 : q[t]);
            if (t + 1 < P) c += p.p2p[t][q[t]];
            if (t > 0) c += p.p2p[t - 1][q[t - 1]];
            ok = ok && std::isfinite(c);
            mx = std::max(mx, c);
            sum += c;
            a += sizes[t];
          }
          if (ok) best = std::min(best, sum + p.weight_max * mx);
          int t = 0;
          while (t < P - 1 && ++q[t] == Q) q[t++] = 0;
          if (t >= P - 1) break;
        }
        return;
      }
      for (int n = 1; used + n <= L - (P - 1 - s); ++n) {
        sizes.push_back(n);
        rec(s + 1, used + n);
        sizes.pop_back();
      }
    };
    rec(0, 0);
    if (!std::isfinite(best)) {
      EXPECT_FALSE(r.feasible) << trial;
      continue;
    }
    ASSERT_TRUE(r.feasible) << trial;
    EXPECT_DOUBLE_EQ(r.objective, best) << trial;
    int total = 0;
    for (int n : r.sizes) total += n;
    EXPECT_EQ(total, L);
  }
}

}  // namespace
}  // namespace weft::planner
