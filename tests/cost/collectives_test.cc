// Collective formulas against hand calculations (docs/cost-model.md §3).
#include "weft/cost/collectives.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

ClusterSpec two_level(int nodes) {
  ClusterSpec c;
  c.name = "test";
  c.nodes = nodes;
  c.gpus_per_node = 8;
  c.intra = {300.0, 3.0};   // GB/s per direction, us per hop
  c.inter = {25.0, 10.0};
  return c;
}

TEST(PlaceGroup, InsideAndAcrossNodes) {
  const ClusterSpec c = two_level(8);
  CommGroup tp8 = place_group(c, 8, 1);
  EXPECT_EQ(tp8.ranks_per_node, 8);
  EXPECT_FALSE(tp8.spans_nodes());
  CommGroup tp16 = place_group(c, 16, 1);
  EXPECT_EQ(tp16.ranks_per_node, 8);
  EXPECT_EQ(tp16.nodes(), 2);
  EXPECT_TRUE(tp16.spans_nodes());
  // dp group of 4 ranks 2 apart (tp2): ranks 0,2,4,6 -> one node
  EXPECT_FALSE(place_group(c, 4, 2).spans_nodes());
  // dp group of 8 ranks 2 apart: 4 per node on 2 nodes
  CommGroup dp8 = place_group(c, 8, 2);
  EXPECT_EQ(dp8.ranks_per_node, 4);
  EXPECT_EQ(dp8.nodes(), 2);
  // dp group of 4 ranks 8 apart (tp8): one rank per node
  CommGroup dp4 = place_group(c, 4, 8);
  EXPECT_EQ(dp4.ranks_per_node, 1);
  EXPECT_EQ(dp4.nodes(), 4);
  // degenerate input is clamped, not a crash
  EXPECT_EQ(place_group(c, 0, 0).size, 1);
}

TEST(BusFactor, RingFactors) {
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllGather, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllToAll, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kSendRecv, 2), 1.0);
}

TEST(CollectiveTime, AllReduceInsideNodeByHand) {
  const ClusterSpec c = two_level(1);
  CollectiveOptions o;
  o.call_latency_us = 50;
  o.intra_efficiency = 0.8;
  // 1 GiB over 8 ranks: 50 us + 2 * 7 ring steps of 3 us + 1.75 * 2^30 B / (240e9 B/s)
  const double expect = 92e-6 + 1.75 * 1073741824.0 / 240e9;
  const Seconds t = collective_time(Collective::kAllReduce, GiB(1), place_group(c, 8, 1), c, o);
  EXPECT_NEAR(t.value(), expect, 1e-9);
  // all-gather and reduce-scatter move half the bytes of an all-reduce in half the ring steps
  const double half = 71e-6 + 0.875 * 1073741824.0 / 240e9;
  EXPECT_NEAR(collective_time(Collective::kAllGather, GiB(1), place_group(c, 8, 1), c, o).value(), half, 1e-9);
  EXPECT_NEAR(collective_time(Collective::kReduceScatter, GiB(1), place_group(c, 8, 1), c, o).value(), half, 1e-9);
}

TEST(CollectiveTime, AcrossNodesLimitedByNetwork) {
  const ClusterSpec c = two_level(4);
  CollectiveOptions o;
  o.call_latency_us = 50;
  o.intra_efficiency = 0.8;
  o.inter_efficiency = 0.9;
  // 32 ranks, 8 per node on 4 nodes: bus bandwidth min(240, 8 * 22.5 = 180) GB/s; latency
  // 50 + 2 * 7 ring steps of 3 us inside each node + log2(4) * 10 us.
  const CommGroup g = place_group(c, 32, 1);
  const double expect = 112e-6 + 2.0 * 31 / 32 * 1e9 / 180e9;
  EXPECT_NEAR(collective_time(Collective::kAllReduce, GB(1), g, c, o).value(), expect, 1e-9);
  // one rank per node: the rank's own adapter, 22.5 GB/s
  const CommGroup g1 = place_group(c, 4, 8);
  const double expect1 = 73e-6 + 1.5 * 1e9 / 22.5e9;
  EXPECT_NEAR(collective_time(Collective::kAllReduce, GB(1), g1, c, o).value(), expect1, 1e-9);
  // the same group inside a node is faster
  EXPECT_LT(collective_time(Collective::kAllReduce, GB(1), place_group(c, 8, 1), c, o),
            collective_time(Collective::kAllReduce, GB(1), place_group(c, 16, 1), c, o));
}

TEST(CollectiveTime, AllToAllAcrossNodesByHand) {
  const ClusterSpec c = two_level(2);
  CollectiveOptions o;
  o.call_latency_us = 0;
  o.intra_efficiency = 1.0;
  o.inter_efficiency = 1.0;
  // 16 ranks on 2 nodes: 8/16 of each rank's 1 GB leaves the node at 25 GB/s; 7/16 stays at 300.
  const CommGroup g = place_group(c, 16, 1);
  const double expect = (3 + 10) * 1e-6 + 0.5 * 1e9 / 25e9;
  EXPECT_NEAR(collective_time(Collective::kAllToAll, GB(1), g, c, o).value(), expect, 1e-9);
}

TEST(CollectiveTime, OneHopPerCallWithoutPerStepLatency) {
  const ClusterSpec c = two_level(1);
  CollectiveOptions o;
  o.call_latency_us = 50;
  o.intra_efficiency = 0.8;
  o.per_step_latency = false;
  const double expect = 53e-6 + 1.75 * 1073741824.0 / 240e9;
  EXPECT_NEAR(collective_time(Collective::kAllReduce, GiB(1), place_group(c, 8, 1), c, o).value(), expect, 1e-9);
}

TEST(CollectiveTime, SmallMessageLatencyGrowsWithRingLength) {
  // vTrain's measured A100 all-reduce of 1 MiB (reference/vtrain/allreduce_a100): 44 us on 2 GPUs,
  // 51 us on 4, 93 us on 8. The per-step latency makes the 8-GPU call the slowest.
  const ClusterSpec c = two_level(1);
  const CollectiveOptions o;
  const Seconds t2 = collective_time(Collective::kAllReduce, MiB(1), place_group(c, 2, 1), c, o);
  const Seconds t8 = collective_time(Collective::kAllReduce, MiB(1), place_group(c, 8, 1), c, o);
  EXPECT_GT(t8.value() - t2.value(), 2 * 6 * 3e-6 - 1e-12);  // 12 more ring steps of the 3 us hop
}

TEST(CollectiveTime, SingleRankAndEmptyAreFree) {
  const ClusterSpec c = two_level(1);
  EXPECT_EQ(collective_time(Collective::kAllReduce, GB(1), place_group(c, 1, 1), c).value(), 0.0);
  EXPECT_EQ(collective_time(Collective::kAllGather, Bytes(0), place_group(c, 8, 1), c).value(), 0.0);
}

TEST(P2p, InsideAndAcrossNodes) {
  const ClusterSpec c = two_level(2);
  CollectiveOptions o;
  o.call_latency_us = 20;
  o.intra_efficiency = 1.0;
  o.inter_efficiency = 0.8;
  EXPECT_NEAR(p2p_time(GB(1), false, c, o).value(), 23e-6 + 1.0 / 300, 1e-9);
  EXPECT_NEAR(p2p_time(GB(1), true, c, o).value(), 30e-6 + 1.0 / 20, 1e-9);
}

}  // namespace
}  // namespace weft
