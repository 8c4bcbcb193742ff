// The layer DP on hand-checked examples and against exhaustive enumeration of random option sets.
#include <gtest/gtest.h>

#include <random>

#include "weft/search/layer_dp.h"

namespace weft::planner {
namespace {

TEST(LayerDp, FirstLayerTakesTheFastestOptionThatFits) {
  LayerDp dp(2, 10);
  const DpOption opts[] = {{5.0f, 2, 0, 0}, {3.0f, 6, 0, 1}, {4.0f, 4, 1, 2}};
  dp.start();
  dp.push(opts, 3, nullptr);
  EXPECT_EQ(dp.at(0, 1), kInfTime);  // nothing fits in 1 step
  EXPECT_EQ(dp.at(0, 2), 5.0f);
  EXPECT_EQ(dp.at(0, 6), 3.0f);
  EXPECT_EQ(dp.at(1, 3), kInfTime);
  EXPECT_EQ(dp.at(1, 4), 4.0f);
  EXPECT_EQ(dp.best(5), 4.0f);
  EXPECT_EQ(dp.best(10), 3.0f);
}

// Two layers, two layouts, transition 1.0 from layout 0 to 1 and 0.5 back.
//   options: A (layout 0): t=3 m=2;  B (layout 0): t=2 m=4;  C (layout 1): t=1 m=5
// Budget 8: AA = 6 (m 4), AB = 5 (m 6), BA = 5 (m 6), BB = 4 (m 8), AC = 3+1+1 = 5 (m 7),
// CA = 1+0.5+3 = 4.5 (m 7), CC needs 10. Best 4 (BB), ending in layout 0.
// Budget 7: best is CA = 4.5; ending in layout 1: AC = 5.
TEST(LayerDp, TwoLayersWithTransitionsByHand) {
  LayerDp dp(2, 10);
  const DpOption opts[] = {{3.0f, 2, 0, 0}, {2.0f, 4, 0, 1}, {1.0f, 5, 1, 2}};
  const float trans[] = {0.0f, 1.0f, 0.5f, 0.0f};
  dp.start(true);
  dp.push(opts, 3, nullptr);
  dp.push(opts, 3, trans);
  EXPECT_FLOAT_EQ(dp.at(0, 8), 4.0f);
  EXPECT_FLOAT_EQ(dp.at(0, 7), 4.5f);
  EXPECT_FLOAT_EQ(dp.at(1, 7), 5.0f);
  EXPECT_EQ(dp.at(1, 6), kInfTime);
  EXPECT_EQ(dp.backtrack(0, 8), (std::vector<int>{1, 1}));
  EXPECT_EQ(dp.backtrack(0, 7), (std::vector<int>{2, 0}));
  EXPECT_EQ(dp.backtrack(1, 7), (std::vector<int>{0, 2}));
}

// After a stage end (trans = nullptr) the previous layout costs nothing; offsets add per layout.
TEST(LayerDp, StageEndCollapsesLayoutsAndOffsetsAdd) {
  LayerDp dp(2, 6);
  const DpOption first[] = {{1.0f, 1, 0, 0}, {2.0f, 1, 1, 1}};
  const DpOption second[] = {{1.0f, 1, 1, 7}};
  dp.start(true);
  dp.push(first, 2, nullptr);
  dp.add_offsets({5.0f, 0.0f});  // leaving in layout 0 costs 5 more
  dp.push(second, 1, nullptr);
  EXPECT_FLOAT_EQ(dp.at(1, 2), 3.0f);  // 2 (layout 1) + 0 + 1
  EXPECT_EQ(dp.backtrack(1, 2), (std::vector<int>{1, 7}));
}

// Exhaustive check on random instances: f_n[k][v] equals the minimum over all assignments.
TEST(LayerDp, MatchesEnumerationOnRandomInstances) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const int K = 1 + rng() % 3, M = 4 + rng() % 12, layers = 1 + rng() % 4;
    std::vector<std::vector<DpOption>> opts(layers);
    for (int l = 0; l < layers; ++l) {
      const int n = 1 + rng() % 4;
      for (int i = 0; i < n; ++i)
        opts[l].push_back({static_cast<float>(rng() % 20) / 4.0f, static_cast<int>(rng() % 6),
                           static_cast<int>(rng() % K), i});
    }
    std::vector<float> trans(K * K);
    for (int a = 0; a < K; ++a)
      for (int b = 0; b < K; ++b) trans[a * K + b] = a == b ? 0.0f : static_cast<float>(rng() % 8) / 4.0f;
    LayerDp dp(K, M);
    dp.start(true);
    for (int l = 0; l < layers; ++l) dp.push(opts[l].data(), static_cast<int>(opts[l].size()), l ? trans.data() : nullptr);
    // Enumerate.
    std::vector<std::vector<float>> want(K, std::vector<float>(M + 1, kInfTime));
    std::vector<int> pick(layers, 0);
    while (true) {
      float t = 0;
      int m = 0;
      for (int l = 0; l < layers; ++l) {
        const DpOption& o = opts[l][pick[l]];
        t += o.time;
        m += o.mem;
        if (l) t += trans[opts[l - 1][pick[l - 1]].layout * K + o.layout];
      }
      const int k = opts[layers - 1][pick[layers - 1]].layout;
      for (int v = m; v <= M; ++v) want[k][v] = std::min(want[k][v], t);
      int l = 0;
      while (l < layers && ++pick[l] == static_cast<int>(opts[l].size())) pick[l++] = 0;
      if (l == layers) break;
    }
    for (int k = 0; k < K; ++k)
      for (int v = 0; v <= M; ++v) {
        ASSERT_FLOAT_EQ(dp.at(k, v), want[k][v]) << "trial " << trial << " k " << k << " v " << v;
        if (want[k][v] == kInfTime) continue;
        // The backtracked assignment reaches the value within the memory.
        const std::vector<int> idx = dp.backtrack(k, v);
        ASSERT_EQ(static_cast<int>(idx.size()), layers);
        float t = 0;
        int m = 0;
        for (int l = 0; l < layers; ++l) {
          const DpOption& o = opts[l][idx[l]];
          t += o.time;
          m += o.mem;
          if (l) t += trans[opts[l - 1][idx[l - 1]].layout * K + o.layout];
        }
        EXPECT_LE(m, v);
        EXPECT_FLOAT_EQ(t, want[k][v]);
        EXPECT_EQ(opts[layers - 1][idx[layers - 1]].layout, k);
      }
  }
}

}  // namespace
}  // namespace weft::planner
