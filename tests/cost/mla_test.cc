// Multi-head latent attention in the cost model (docs/cost-model.md §2.4): DeepSeek-V3's layer,
// its down projections whole on every tensor-parallel rank, keys of 192 and values of 128 dims
// per head in the attention kernel and in what context parallelism passes around.
#include <gtest/gtest.h>

#include "contexts.h"
#include "tiny_specs.h"
#include "weft/cost/analytic.h"
#include "weft/cost/traffic.h"
#include "weft/spec/counts.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

// DeepSeek-V3's MoE layer (deepseek-ai/DeepSeek-V3 config.json), 4 of them.
LayerShape deepseek_v3_layer(bool latent = true) {
  LayerShape s = testing::swiglu_shape(7168, 128, 128, 18432);
  s.head_dim = 192;
  s.moe = MoeSpec{.experts = 256, .top_k = 8, .expert_ffn = 2048, .shared_experts = 1};
  if (latent) s.mla = MlaSpec{.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_rope_dim = 64, .v_head_dim = 128};
  return s;
}

struct DsSlice {
  ModelSpec model;
  ClusterSpec cluster;
  TrainSettings train{.seq = 4096, .global_batch = 64, .micro_batches = 8, .pp = 1, .dtype = DType::kBf16};
  explicit DsSlice(bool latent = true) {
    model = testing::llama_model("dsv3-slice", 4, deepseek_v3_layer(latent), 129280);
    cluster = load_cluster("h100-80gb").value();
    cluster.nodes = 8;
  }
  LayerContext layer() const { return testing::make_layer_context(model, cluster, train, 0, 1, 64, 0); }
};

LayerStrategy strat(int tp, int cp, int dp, int ep) {
  return LayerStrategy{.tp = tp, .sp = tp > 1, .cp = cp, .dp = dp, .zero = 1, .ep = ep};
}

TEST(Mla, DownProjectionsAreWholeOnEveryTensorRank) {
  const LayerShape s = deepseek_v3_layer();
  const double replicated = attention_replicated_params(s);
  EXPECT_DOUBLE_EQ(replicated, 1536.0 * 7168 + 1536 + 7168.0 * 576 + 512);
  // What tp 8 divides: the attention's up and output projections, the shared expert and the router.
  const LayerParams lp = layer_params(s);
  const double split = lp.attention - replicated + expert_params(s) * s.moe.shared_experts + 7168.0 * 256;
  const HeldParams one = held_params(s, strat(1, 1, 64, 64));
  const HeldParams eight = held_params(s, strat(8, 1, 8, 8));
  EXPECT_NEAR(one.dense - eight.dense, split * (1 - 1.0 / 8), 1.0);
}

TEST(Mla, ContextParallelPassesKeysOf192AndValuesOf128) {
  const DsSlice su;
  const LayerTraffic t = layer_traffic(su.layer(), strat(2, 4, 8, 8));
  const Transfer* ring = nullptr;
  for (const Transfer& x : t.transfers)
    if (x.axis == CommAxis::kContext && x.phase == Phase::kForward) ring = &x;
  ASSERT_NE(ring, nullptr);
  // 8 samples per micro-batch over dp 8: one sample, 4096 / cp 4 tokens, heads over tp 2.
  EXPECT_DOUBLE_EQ(ring->calls[0].bytes.value(), 2.0 * 1024 * (128 * 192 + 128 * 128) / 2);
}

TEST(Mla, LatentAttentionCostsLessThanFullWidthHeads) {
  // The same layer read as ordinary attention of 128 heads of 192 (what weft did before it knew
  // MLA): more projection work and larger values; MLA keeps its latents besides.
  const DsSlice mla(true), full(false);
  const AnalyticCostModel cm;
  const LayerStrategy s = strat(8, 1, 8, 8);
  const LayerCost a = cm.layer(mla.layer(), s);
  const LayerCost b = cm.layer(full.layer(), s);
  EXPECT_LT(a.time.compute.value(), b.time.compute.value());
  const LayerFlops fm = layer_forward_flops(mla.model.layer(0), 1, 4096);
  const LayerFlops ff = layer_forward_flops(full.model.layer(0), 1, 4096);
  EXPECT_LT(fm.qkv, ff.qkv);
  EXPECT_LT(fm.attn_scores, ff.attn_scores);  // scores.V over 128 value dims, not 192
  EXPECT_LT(layer_params(mla.model.layer(0)).attention, layer_params(full.model.layer(0)).attention);
}

}  // namespace
}  // namespace weft
