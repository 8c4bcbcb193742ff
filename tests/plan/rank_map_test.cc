#include "weft/plan/rank_map.h"

#include <gtest/gtest.h>

#include <set>

namespace weft {
namespace {

TEST(RankMap, TpIsFastestThenUlyssesCpDp) {
  LayerStrategy s{.tp = 2, .ulysses = 2, .cp = 1, .dp = 2};
  // stage size 8, pp 2: rank 13 = stage 1, local 5 = tp 1, ulysses 0, dp 1
  RankCoords c = coords_of(13, 8, s);
  EXPECT_EQ(c, (RankCoords{.pp = 1, .dp = 1, .cp = 0, .ulysses = 0, .tp = 1}));
  EXPECT_EQ(rank_of(c, 8, s), 13);
}

TEST(RankMap, RoundTripEveryRank) {
  for (LayerStrategy s : {LayerStrategy{.tp = 4, .dp = 2}, LayerStrategy{.tp = 2, .ulysses = 2, .cp = 2},
                          LayerStrategy{.cp = 4, .dp = 2}, LayerStrategy{.dp = 8}}) {
    for (int r = 0; r < 32; ++r) EXPECT_EQ(rank_of(coords_of(r, 8, s), 8, s), r) << label(s) << " rank " << r;
  }
}

TEST(RankMap, GroupsPartitionTheWorld) {
  LayerStrategy s{.tp = 2, .cp = 2, .dp = 2};
  for (Axis a : {Axis::kTp, Axis::kCp, Axis::kDp, Axis::kPp, Axis::kUlysses}) {
    auto groups = all_groups(8, 2, s, a);
    std::set<int> seen;
    for (const auto& g : groups) {
      for (size_t i = 1; i < g.size(); ++i) EXPECT_LT(g[i - 1], g[i]);
      for (int r : g) EXPECT_TRUE(seen.insert(r).second) << "rank " << r << " in two groups";
    }
    EXPECT_EQ(seen.size(), 16u);
  }
  EXPECT_EQ(group_of(5, 8, 2, s, Axis::kTp), (std::vector<int>{4, 5}));
  EXPECT_EQ(group_of(5, 8, 2, s, Axis::kCp), (std::vector<int>{5, 7}));
  EXPECT_EQ(group_of(5, 8, 2, s, Axis::kDp), (std::vector<int>{1, 5}));
  EXPECT_EQ(group_of(5, 8, 2, s, Axis::kPp), (std::vector<int>{5, 13}));
}

TEST(RankMap, ShardGroupIsEveryRankOfTheStageWithTheSameTpIndex) {
  const LayerStrategy s{.tp = 2, .ulysses = 2, .cp = 2};
  EXPECT_EQ(group_of(13, 8, 2, s, Axis::kShard), (std::vector<int>{9, 11, 13, 15}));
  for (const auto& g : all_groups(8, 2, s, Axis::kShard)) {
    ASSERT_EQ(g.size(), 4u);
    for (int r : g) EXPECT_EQ(coords_of(r, 8, s).tp, coords_of(g[0], 8, s).tp);
  }
}

TEST(RankMap, ExpertGroupsAreEtpApartOnTheExpertsGrid) {
  // tp 2, cp 2, dp 2 on 8 ranks; rank 5 = tp 1, cp 0, dp 1: cp-dp index 2.
  LayerStrategy s{.tp = 2, .cp = 2, .dp = 2, .ep = 4};
  EXPECT_EQ(group_of(5, 8, 1, s, Axis::kEp), (std::vector<int>{1, 3, 5, 7}));
  s.ep = 2;
  EXPECT_EQ(group_of(5, 8, 1, s, Axis::kEp), (std::vector<int>{5, 7}));
  EXPECT_EQ(group_of(0, 8, 1, s, Axis::kEp), (std::vector<int>{0, 2}));
  // Ulysses ranks hold different tokens outside attention: the experts' grid spans them too.
  s = LayerStrategy{.ulysses = 2, .dp = 4, .ep = 2};
  EXPECT_EQ(group_of(3, 8, 1, s, Axis::kEp), (std::vector<int>{2, 3}));
  // etp 1 under tp 2: the ep group spans the tp ranks (ep need not divide dp * cp).
  s = LayerStrategy{.tp = 2, .dp = 4, .ep = 4, .etp = 1};
  EXPECT_EQ(group_of(6, 8, 1, s, Axis::kEp), (std::vector<int>{4, 5, 6, 7}));
  s = LayerStrategy{.tp = 4, .dp = 2, .ep = 2, .etp = 2};
  EXPECT_EQ(group_of(5, 8, 1, s, Axis::kEp), (std::vector<int>{5, 7}));
  EXPECT_EQ(group_of(13, 8, 2, s, Axis::kEp), (std::vector<int>{13, 15}));
  // Expert tensor groups: etp consecutive ranks; expert data-parallel groups: ep * etp apart.
  EXPECT_EQ(group_of(5, 8, 1, s, Axis::kEtp), (std::vector<int>{4, 5}));
  EXPECT_EQ(group_of(5, 8, 1, s, Axis::kEdp), (std::vector<int>{1, 5}));
  EXPECT_EQ(group_of(13, 8, 2, s, Axis::kEdp), (std::vector<int>{9, 13}));
  for (Axis a : {Axis::kEp, Axis::kShard, Axis::kEtp, Axis::kEdp}) {
    std::set<int> seen;
    for (const auto& g : all_groups(8, 2, s, a))
      for (int r : g) EXPECT_TRUE(seen.insert(r).second) << "rank " << r << " in two groups";
    EXPECT_EQ(seen.size(), 16u);
  }
}

}  // namespace
}  // namespace weft
