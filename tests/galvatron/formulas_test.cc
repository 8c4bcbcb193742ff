// Galvatron's formulas on small hand-made profiles: every expected number is worked out here from
// SEARCH_AND_COST_MODEL.md §2, not taken from the code's output.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace weft::galvatron {
namespace {

Profiles toy_profiles() {
  Profiles p;
  p.model_name = "toy";
  p.precision = "bf16";
  p.compute.seq = 1024;
  TimeCurve layer;
  layer.ms_per_sample = {{1, 2.0}, {4, 1.5}};
  layer.first_batch = 1;
  p.compute.layer_types.push_back(layer);
  p.compute.other.ms_per_sample = {{1, 4.0}};
  p.compute.other.first_batch = 1;
  LayerMemory lm;
  lm.parameter_mb = 100.0;
  lm.act_per_sample_mb = {{1, 40.0}, {2, 20.0}, {4, 10.0}};
  lm.checkpoint_mb = 8.0;
  p.memory.layer_types.push_back(lm);
  p.memory.seq = 1024;
  OtherMemory o;
  o.model_states_mb = {{1, 400.0}, {2, 200.0}, {4, 100.0}};
  o.activation_mb = {{1, 30.0}, {2, 15.0}, {4, 7.5}};
  p.memory.pp_off = p.memory.pp_first = p.memory.pp_last = o;
  p.hardware.allreduce_busbw = {{{2, true}, 100.0}, {{2, false}, 50.0}, {{4, true}, 80.0}, {{4, false}, 40.0}};
  p.hardware.p2p_bw = {{2, 64.0}};
  p.hardware.overlap_coe = 1.25;
  CollectiveTable ar;
  ar.ms_by_mb = {{4.0, 0.5}, {8.0, 1.0}};
  ar.slope = 0.125;
  ar.intercept = 0.0;
  p.hardware.allreduce_ms[2] = ar;
  CollectiveTable a2a;
  a2a.ms_by_mb = {{4.0, 0.3}};
  a2a.slope = 0.075;
  a2a.intercept = 0.0;
  p.hardware.all2all_ms[2] = a2a;
  p.hardware.has_sp_time = true;
  return p;
}

constexpr long long kHidden = 1024;  // with seq 1024 and bf16: one sample of activations = 2 MB

TrainSettings train(int gbsz, int chunks, int pp) {
  TrainSettings t;
  t.seq = 1024;
  t.global_batch = gbsz;
  t.micro_batches = chunks;
  t.pp = pp;
  return t;
}

TEST(GalvatronFormulas, PipelineCostModel) {
  // pp = 1: c*chunks, plus the sync excess r - c.
  EXPECT_DOUBLE_EQ(GalvatronCostModel::pipeline_ms({10}, {12}, 4), 42.0);
  // pp = 2, c = (10, 10), chunks 4: sum + c_last*3 = 50; the other branch is
  // max(10/3, 10/3) + max(20/3, 20/3) + 10*3 = 40. Reduce: max(15 - 10, 5 - 20) = 5.
  EXPECT_DOUBLE_EQ(GalvatronCostModel::pipeline_ms({10, 10}, {15, 5}, 4), 55.0);
  // A slow first stage: c = (30, 10), chunks 2: branch 1 = 40 + 10 = 50; branch 2 =
  // max(30/3, 10/3) + max(60/3, 20/3) + 30*max(0, 1) = 10 + 20 + 30 = 60.
  EXPECT_DOUBLE_EQ(GalvatronCostModel::pipeline_ms({30, 10}, {0, 0}, 2), 60.0);
}

TEST(GalvatronFormulas, LayerTimeDataParallel) {
  GalvatronCostModel cm(toy_profiles(), kHidden);
  GStrategy g;
  g.dp = 2;  // tp 1: key "2_1" = 100 MB/ms
  g.dp_type = GStrategy::kZero2;
  const LayerTimeMs t = cm.layer_time(g, 0, 4, train(8, 2, 1));
  // lbsz = 8/2/2 = 2; fct = 2.0 * 2 = 4; bct = 8.
  EXPECT_DOUBLE_EQ(t.fct, 4.0);
  EXPECT_DOUBLE_EQ(t.bct, 8.0);
  // message = 2*(2-1)/2 * 100 MB / 2 (bf16) = 50 MB, dc = 1/100: 0.5 ms < bct:
  // bct + 0.5 * (1.25 - 1) = 8.125.
  EXPECT_DOUBLE_EQ(t.sync, 4.0 + 8.125);
  EXPECT_DOUBLE_EQ(t.nosync, 12.0);
}

TEST(GalvatronFormulas, LayerTimeTensorParallelZero3PipelineAndCheckpoint) {
  GalvatronCostModel cm(toy_profiles(), kHidden);
  GStrategy g;
  g.pp = 2;
  g.tp = 2;
  g.dp = 2;  // tp > 1: key "2_0" = 50 MB/ms
  g.dp_type = GStrategy::kZero3;
  g.ckpt = true;
  const LayerTimeMs t = cm.layer_time(g, 0, 4, train(8, 2, 2));
  // lbsz 2; fct = 2*2/2 = 2; bct = 4 + 2 (recompute) = 6.
  EXPECT_DOUBLE_EQ(t.fct, 2.0);
  EXPECT_DOUBLE_EQ(t.bct, 6.0);
  // TP: message 2 samples * 2 MB = 4 MB, all-gather = all-reduce(4 MB)/2 = 0.25; 6 x 1.5 = 9 of them.
  EXPECT_DOUBLE_EQ(t.tp_comm, 2.25);
  // DP message: 2*(1)/2 * (100/2) / 2 = 25 MB at 1/50 ms/MB = 0.5 ms; overlap: 6 + 0.5*0.25.
  // ZeRO-3: 0.5 * 25 * (1/50) = 0.25. p2p: pp*2*lbsz*S*H*4 B / 2 = 2*2*2*4 MB / 2 = 16 MB at
  // 1/64 ms/MB = 0.25 ms for the layer type, / 4 layers.
  EXPECT_DOUBLE_EQ(t.zero3, 0.25);
  EXPECT_DOUBLE_EQ(t.p2p, 0.0625);
  EXPECT_DOUBLE_EQ(t.sync, 2.0 + 6.125 + 2.25 + 0.25 + 0.0625);
  EXPECT_DOUBLE_EQ(t.nosync, 2.0 + 6.0 + 2.25 + 0.25 + 0.0625);
}

TEST(GalvatronFormulas, UlyssesWithoutDataParallelChargesNoGradientSync) {
  GalvatronCostModel cm(toy_profiles(), kHidden);
  GStrategy g;
  g.sp = 2;
  g.dp = 1;  // sdp = 2 but dp = 1: Galvatron's "pp+tp" branch, no gradient sync
  const LayerTimeMs t = cm.layer_time(g, 0, 4, train(4, 2, 1));
  // lbsz 2; fct = 2*2/2 = 2; bct 4; all-to-all of 4 MB = 0.3 (exact entry), 4 of them.
  EXPECT_DOUBLE_EQ(t.sync, 2.0 + 4.0 + 1.2);
  EXPECT_DOUBLE_EQ(t.nosync, t.sync);
}

TEST(GalvatronFormulas, LayerMemoryRatios) {
  GalvatronCostModel cm(toy_profiles(), kHidden);
  GStrategy g;
  g.pp = 2;
  g.dp = 4;
  g.dp_type = GStrategy::kZero2;
  // chunks > 1, async reduce, bf16: ZeRO-2 ratio 6/8*(1/4 + 0.003) + 2/8 = 0.43975.
  MemoryMb m = cm.layer_memory(g, 0, train(16, 4, 2), 0);
  EXPECT_NEAR(m.states, 400.0 * 0.43975, 1e-9);
  EXPECT_DOUBLE_EQ(m.activation, 40.0 * 1 * 2);  // lbsz 1, 1F1B stage 0 of 2: 2 in flight
  g.dp_type = GStrategy::kZero3;
  m = cm.layer_memory(g, 0, train(16, 4, 2), 1);
  EXPECT_NEAR(m.states, 400.0 * (7.0 / 8 * 0.253 + 1.0 / 8), 1e-9);
  EXPECT_DOUBLE_EQ(m.activation, 40.0);
  // chunks = 1: ZeRO-3 ratio 1/d + 0.003.
  GStrategy one = g;
  one.pp = 1;
  m = cm.layer_memory(one, 0, train(4, 1, 1), 0);
  EXPECT_NEAR(m.states, 400.0 * 0.253, 1e-9);
  // Checkpointed Megatron-SP layer: checkpoint MB / tp.
  GStrategy ck;
  ck.tp = 2;
  ck.dp = 2;
  ck.ckpt = true;
  ck.megatron_sp = true;
  m = cm.layer_memory(ck, 0, train(4, 1, 1), 0);
  EXPECT_DOUBLE_EQ(m.activation, 8.0 * 2 / 2);
  ck.megatron_sp = false;
  m = cm.layer_memory(ck, 0, train(4, 1, 1), 0);
  EXPECT_DOUBLE_EQ(m.activation, 8.0 * 2);
  EXPECT_DOUBLE_EQ(m.states, 4.0 * 100 / 2);  // DDP: ratio 1
}

TEST(GalvatronFormulas, EmbeddingTime) {
  GalvatronCostModel cm(toy_profiles(), kHidden);
  GStrategy g;
  g.pp = 2;
  g.dp = 2;
  g.dp_type = GStrategy::kZero3;
  const EmbeddingTimeMs t = cm.embedding_time(g, train(4, 2, 2));
  // lbsz 1; fct = 4 per sample, split 2 + 2 over the ends; backward 4 each.
  // DP message = 400/4/2 = 50 MB at 1/100 * (2-1)/2 = 0.005 ms/MB: 0.25 ms.
  // ZeRO-3 forward: comm 0.125 < 2*1.25 -> 0.125 + (2.5 - 0.125)/1.25 = 2.025.
  // no-sync backward: comm 0.25*(1.0-0.5) = 0.125 -> 0.125 + (5 - 0.125)/1.25 = 4.025.
  EXPECT_NEAR(t.nosync[0], 2.025 + 4.025, 1e-12);
  EXPECT_NEAR(t.nosync[1], 2.025 + 4.025, 1e-12);
  // with sync: backward comm 0.25 -> 0.25 + 4.75/1.25 = 4.05.
  EXPECT_NEAR(t.sync[0], 2.025 + 4.05, 1e-12);
}

TEST(GalvatronFormulas, GlobalBufferAndReserve) {
  GalvatronCostModel cm(toy_profiles(), kHidden);
  // gbsz/chunks = 4 samples over world/pp/tp = 2 ranks: 2 samples x 1024 x 1024 x 4 B / 2 = 4 MB.
  EXPECT_DOUBLE_EQ(cm.global_buffer_mb(train(8, 2, 1), 4, 2), 4.0);
  EXPECT_DOUBLE_EQ(cm.global_buffer_mb(train(8, 2, 1), 4, 0), 0.0);
  // max_dp = min(gbsz/chunks, world/pp) = min(4, 4): smallest buffer tp 1; with 2 samples per
  // micro-batch, max_dp = 2 and the smallest buffer tp is 2.
  EXPECT_EQ(cm.min_buffer_tp(train(8, 2, 1), 4), 1);
  EXPECT_EQ(cm.min_buffer_tp(train(8, 4, 1), 4), 2);
  ClusterSpec c;
  c.gpu.memory_gib = 16;
  EXPECT_EQ(cm.reserve_mb(c), 0);  // 16 GB is not above 20 GB
  c.gpu.memory_gib = 36;
  EXPECT_EQ(cm.reserve_mb(c), 7372);  // int(0.2 * 36864)
  EXPECT_DOUBLE_EQ(to_mib(cm.memory_budget(c)), 36864 - 7372 - 1);
}

TEST(GalvatronFormulas, InterLayerConversionKeepsTheUnitQuirk) {
  GalvatronCostModel cm(toy_profiles(), kHidden);
  GStrategy a, b;
  a.tp = 2;
  a.dp = 2;
  a.megatron_sp = true;
  b.dp = 4;
  // G = 2, lbsz_G = 8/2/(4/2) = 2; (G-1)/G * 2 * 1024 * 1024 * 2 B * (1/100 ms/MB) * 1e-7.
  const double expected = 0.5 * 2 * 1024 * 1024 * 2 * 0.01 * 1e-7;
  EXPECT_NEAR(cm.inter_layer_s(a, b, train(8, 2, 1), 4), expected, 1e-15);
  a.megatron_sp = false;
  EXPECT_EQ(cm.inter_layer_s(a, b, train(8, 2, 1), 4), 0.0);
}

TEST(GalvatronFormulas, MapsWeftStrategies) {
  LayerStrategy s;
  s.tp = 4;
  s.sp = true;
  s.dp = 2;
  s.zero = 3;
  s.recompute = Recompute::kFull;
  GStrategy g = testing::ok(to_gstrategy(s, 2));
  EXPECT_EQ(g.tp, 4);
  EXPECT_TRUE(g.megatron_sp);
  EXPECT_EQ(g.dp_type, GStrategy::kZero3);
  EXPECT_TRUE(g.ckpt);
  EXPECT_EQ(g.tp_sp(), 4);
  LayerStrategy u;
  u.ulysses = 4;
  u.dp = 2;
  u.zero = 2;
  g = testing::ok(to_gstrategy(u, 1));
  EXPECT_EQ(g.sp, 4);
  EXPECT_EQ(g.sdp(), 8);
  EXPECT_EQ(g.dp_type, GStrategy::kZero2);
  LayerStrategy z1;
  z1.dp = 8;
  z1.zero = 1;
  auto r = to_gstrategy(z1, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("zero=1"), std::string::npos);
  LayerStrategy both;
  both.tp = 2;
  both.ulysses = 2;
  both.dp = 2;
  EXPECT_FALSE(to_gstrategy(both, 1).ok());
  LayerStrategy sel;
  sel.recompute = Recompute::kSelective;
  EXPECT_FALSE(to_gstrategy(sel, 1).ok());
}

}  // namespace
}  // namespace weft::galvatron
