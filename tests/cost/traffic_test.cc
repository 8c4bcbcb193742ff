// A layer's traffic (weft/cost/traffic.h) and its pricing (weft/cost/pricing.h): the transfers a
// strategy issues, the runtime's extras, exact sums under a pricer with fixed costs, and the
// analytic model's breakdown equal to its own traffic priced by the analytic pricer.
#include "weft/cost/traffic.h"

#include <gtest/gtest.h>

#include "contexts.h"
#include "tiny_specs.h"
#include "weft/cost/analytic.h"
#include "weft/cost/pricing.h"
#include "weft/cost/schedule.h"
#include "weft/spec/counts.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

// Llama-2-7B on one node of 8 A100-80GB, 4 micro-batches.
testing::PresetSetup llama7b() { return testing::PresetSetup("llama-2-7b", "a100-80gb", 1, 4); }

LayerStrategy strategy(int tp, int dp, int zero = 0, bool sp = false) {
  return LayerStrategy{.tp = tp, .sp = sp, .dp = dp, .zero = zero};
}

// One second per call, whatever the call: sums count calls.
class CountingPricer final : public CollectivePricer {
 public:
  Seconds price(Collective, Bytes, const CommGroup&) const override { return Seconds(1); }
};

int count(const LayerTraffic& t, CommAxis axis, Phase phase) {
  int n = 0;
  for (const Transfer& x : t.transfers) n += x.axis == axis && x.phase == phase;
  return n;
}

TEST(Traffic, TensorParallelIsAnAllReducePerBlockAndFfnEachWay) {
  const auto su = llama7b();
  const LayerTraffic t = layer_traffic(su.layer(0), strategy(4, 2));
  ASSERT_EQ(count(t, CommAxis::kTensor, Phase::kForward), 1);
  ASSERT_EQ(count(t, CommAxis::kTensor, Phase::kBackward), 1);
  const Transfer& fwd = t.transfers.front();
  EXPECT_EQ(fwd.repeat, 2);  // attention block + FFN
  ASSERT_EQ(fwd.calls.size(), 1);
  EXPECT_EQ(fwd.calls[0].kind, Collective::kAllReduce);
  // bf16 activations of 8/4/2 samples x 4096 tokens x 4096 hidden
  EXPECT_DOUBLE_EQ(fwd.calls[0].bytes.value(), 2.0 * 1 * 4096 * 4096);
  EXPECT_EQ(fwd.calls[0].group.size, 4);
  // ZeRO 0: one all-reduce of the gradients per step
  EXPECT_EQ(count(t, CommAxis::kData, Phase::kStep), 1);
  const PricedTraffic p = price_traffic(t, CountingPricer());
  EXPECT_EQ(p.fwd.tp, 2);
  EXPECT_EQ(p.bwd.tp, 2);
  EXPECT_EQ(p.grad_sync, 1);
}

// The runtime issues the small gradient all-reduces of tp-replicated weights, and (like FSDP) frees
// a ZeRO-3 layer's gathered weights after its forward and gathers them again for backward: once,
// whether or not a full recompute re-runs the forward there.
TEST(Traffic, RuntimeSumsReplicatedGradientsAndGathersZeroThreeAgainForBackward) {
  const auto su = llama7b();
  const LayerStrategy sp = strategy(4, 2, 3, true);
  const PricedTraffic analytic = price_traffic(layer_traffic(su.layer(0), sp), CountingPricer());
  const PricedTraffic runtime =
      price_traffic(layer_traffic(su.layer(0), sp, runtime_traffic(DType::kFp32)), CountingPricer());
  EXPECT_EQ(analytic.fwd.tp, 4);  // (all-gather + reduce-scatter) x 2
  EXPECT_EQ(analytic.bwd.tp, 4);
  EXPECT_EQ(runtime.bwd.tp, 4 + 2);  // + the two RMSNorm weights' gradient all-reduces
  EXPECT_EQ(analytic.gather_f, 1);
  EXPECT_EQ(analytic.gather_b, 1);  // gathered again for backward
  EXPECT_EQ(analytic.reduce_b, 1);
  EXPECT_EQ(runtime.gather_f, 1);
  EXPECT_EQ(runtime.gather_b, 1);
  LayerStrategy full = sp;
  full.recompute = Recompute::kFull;
  EXPECT_EQ(price_traffic(layer_traffic(su.layer(0), full, runtime_traffic(DType::kFp32)), CountingPricer()).gather_b,
            1);
}

TEST(Traffic, UlyssesSendsWholeKvHeadsCopiedUpToTheDegree) {
  LayerShape L = testing::swiglu_shape(8192, 64, 8, 28672);  // Llama-3-70B
  EXPECT_EQ(kv_heads_held(L, LayerStrategy{.tp = 2}), 4);
  EXPECT_EQ(ulysses_kv_heads(L, LayerStrategy{.tp = 2, .ulysses = 2}), 4);
  EXPECT_EQ(ulysses_kv_heads(L, LayerStrategy{.tp = 2, .ulysses = 8}), 8) << "4 held, copied to lcm(4, 8)";
  EXPECT_EQ(kv_heads_held(L, LayerStrategy{.tp = 16}), 1) << "tp > kv heads: one replicated head";
  EXPECT_EQ(ulysses_kv_heads(L, LayerStrategy{.tp = 16, .ulysses = 4}), 4);
  L.kv_heads = 6;
  EXPECT_EQ(ulysses_kv_heads(L, LayerStrategy{.ulysses = 4}), 12) << "lcm(6, 4)";
}

TEST(Traffic, HeldParamsKeepReplicatedBiasesAndKvHeadsWhole) {
  // A biased GELU decoder: the output projection's and the FFN's output biases are replicated over
  // tp, the rest is split.
  LayerShape g = testing::gpt_shape(1024, 16);
  const LayerParams lp = layer_params(g);
  const double split = lp.attention + lp.ffn - 2 * 1024;
  EXPECT_DOUBLE_EQ(held_params(g, LayerStrategy{.tp = 4}).dense, split / 4 + lp.norms + 2 * 1024);
  EXPECT_DOUBLE_EQ(held_params(g, LayerStrategy{}).dense, lp.total());
  // 2 kv heads on tp 8: each rank holds one whole head (K and V, weights and biases), 4x its share.
  g.kv_heads = 2;
  const LayerParams gq = layer_params(g);
  const double kv_full = 2.0 * 64 * (1024 + 1), kv_share = 2 * kv_full / 8;
  EXPECT_DOUBLE_EQ(held_params(g, LayerStrategy{.tp = 8}).dense,
                   (gq.attention + gq.ffn - 2 * 1024) / 8 + gq.norms + 2 * 1024 + kv_full - kv_share);
}

TEST(Traffic, EdgeBucketsAndPipelineSends) {
  auto su = llama7b();
  su.train.pp = 2;
  const LayerStrategy emb = strategy(2, 2, 2);
  // Analytic: one bucket per stage; the runtime: the embedding table, or the norm + untied head.
  EXPECT_EQ(edge_param_buckets(su.layer(0, 0, 2), emb).size(), 1);
  EXPECT_EQ(edge_param_buckets(su.layer(0, 1, 2), emb, runtime_traffic(DType::kBf16)).size(), 1);
  EXPECT_TRUE(edge_traffic(su.layer(0, 0, 3), emb).transfers.size() > 0);
  LayerContext middle = su.layer(0, 1, 3);
  EXPECT_TRUE(edge_traffic(middle, emb).transfers.empty());
  // ZeRO-2 runtime buckets reduce-scatter every micro-batch; the analytic bucket once per step.
  EXPECT_EQ(
      price_traffic(edge_traffic(su.layer(0, 0, 2), emb, runtime_traffic(DType::kBf16)), CountingPricer()).reduce_b, 1);
  EXPECT_EQ(price_traffic(edge_traffic(su.layer(0, 0, 2), emb), CountingPricer()).reduce_b, 0);
  // Megatron's scatter-gather without SP: send + all-gather, forward and backward.
  EXPECT_EQ(price_traffic(p2p_traffic(su.layer(0, 0, 2), emb), CountingPricer()).p2p, 4);
  EXPECT_EQ(price_traffic(p2p_traffic(su.layer(0, 0, 2), emb, runtime_traffic(DType::kBf16)), CountingPricer()).p2p, 2);
  EXPECT_TRUE(p2p_traffic(su.layer(0, 0, 1), emb).transfers.empty());
}

TEST(Traffic, AnalyticBreakdownIsItsTrafficPriced) {
  const auto su = llama7b();
  const AnalyticCostModel cm;
  for (const LayerStrategy& s : {strategy(4, 2), strategy(8, 1, 0, true), strategy(2, 4, 1)}) {
    const LayerContext ctx = su.layer(0);
    const PricedTraffic p = price_traffic(layer_traffic(ctx, s), AnalyticPricer(su.cluster, cm.options().comm));
    const LayerCost lc = cm.layer(ctx, s);
    EXPECT_EQ(lc.time.tp_comm.value(), p.fwd.tp + p.bwd.tp) << label(s);
    EXPECT_EQ(lc.grad_sync.value(), p.grad_sync) << label(s);
  }
}

TEST(Traffic, ScheduleFollowsTheModelsTraits) {
  AnalyticOptions o;
  o.overlap_grad_sync = false;
  o.overlap_slowdown = 1.3;
  TrainSettings t;
  t.pp = 2;
  t.micro_batches = 4;
  const ScheduleSpec spec = schedule_spec(t, 2, AnalyticCostModel(o));
  EXPECT_FALSE(spec.overlap_grad_sync);
  EXPECT_EQ(spec.overlap_slowdown, 1.3);
}

}  // namespace
}  // namespace weft
