// A MoE layer on the experts' own grid (weft/plan/strategy.h): expert tensor degree etp apart from
// the attention's tp, the expert-parallel group over tp x dp, the dispatch as Megatron-LM's
// all-to-all dispatcher issues it, and the experts' states sharded over etp x ep.
#include <gtest/gtest.h>

#include "contexts.h"
#include "weft/cost/analytic.h"
#include "weft/cost/memory.h"
#include "weft/cost/traffic.h"
#include "weft/spec/counts.h"

namespace weft {
namespace {

// Mixtral-8x7B on 2 nodes of 8 H100, seq 4096, 64 samples per step in 8 micro-batches (one sample
// per micro-batch on each of 8 data-parallel ranks).
testing::PresetSetup mixtral() {
  testing::PresetSetup su("mixtral-8x7b", "h100-80gb", 2, 8);
  su.train.global_batch = 64;
  return su;
}

LayerStrategy moe(int tp, int dp, int ep, int etp = 0, int zero = 1) {
  return LayerStrategy{.tp = tp, .sp = tp > 1, .dp = dp, .zero = zero, .ep = ep, .etp = etp};
}

const Transfer* find(const LayerTraffic& t, CommAxis axis, Phase phase, Collective kind) {
  for (const Transfer& x : t.transfers)
    if (x.axis == axis && x.phase == phase)
      for (const CollectiveCall& c : x.calls)
        if (c.kind == kind) return &x;
  return nullptr;
}

const CollectiveCall* call_of(const Transfer* x, Collective kind) {
  if (!x) return nullptr;
  for (const CollectiveCall& c : x->calls)
    if (c.kind == kind) return &c;
  return nullptr;
}

TEST(MoeGrid, ExpertStatesAreShardedOverEtpTimesEp) {
  auto su = mixtral();
  const LayerShape& L = su.model.layer(0);
  const double experts = L.moe.experts * expert_params(L);
  // tp 2 on attention, 16 GPUs: etp 1 x ep 8 holds one whole expert per rank; etp 2 x ep 8 half of one.
  const HeldParams one = held_params(L, moe(2, 8, 8, 1));
  const HeldParams two = held_params(L, moe(2, 8, 8));
  EXPECT_DOUBLE_EQ(one.expert, experts / 8);
  EXPECT_DOUBLE_EQ(two.expert, experts / 16);
  // Their expert data-parallel groups: 16 / (1 x 8) and 16 / (2 x 8).
  EXPECT_EQ(one.expert_shard, 2);
  EXPECT_EQ(two.expert_shard, 1);
  // The dense part is the attention's tp shard either way.
  EXPECT_DOUBLE_EQ(one.dense, two.dense);
  // In the cost model's memory: ZeRO-1 shards the experts' optimizer over the 2 ranks of etp 1.
  const AnalyticCostModel cm;
  const MemoryBreakdown m1 = cm.layer(su.layer(0), moe(2, 8, 8, 1)).memory;
  const MemoryBreakdown m2 = cm.layer(su.layer(0), moe(2, 8, 8)).memory;
  EXPECT_NEAR(m1.weights.value() - m2.weights.value(), 2.0 * (experts / 8 - experts / 16), 1.0);
}

TEST(MoeGrid, DispatchIsMegatronsAllToAllThenTheEtpGather) {
  auto su = mixtral();
  const LayerShape& L = su.model.layer(0);
  const double e = 2, h = L.hidden, k = L.moe.top_k;
  // 1 sample per micro-batch per dp rank: 4096 tokens per tp group.
  const double tokens = 4096;
  // etp 1, tp 2 (sp), ep 8 over tp x dp: each rank dispatches its half of the sequence, k copies;
  // no gather after (each expert whole on one rank).
  {
    const LayerTraffic t = layer_traffic(su.layer(0), moe(2, 8, 8, 1));
    const CollectiveCall* a2a = call_of(find(t, CommAxis::kExpert, Phase::kForward, Collective::kAllToAll),
                                        Collective::kAllToAll);
    ASSERT_NE(a2a, nullptr);
    EXPECT_DOUBLE_EQ(a2a->bytes.value(), e * tokens / 2 * k * h);
    EXPECT_EQ(a2a->group.size, 8);
    EXPECT_EQ(find(t, CommAxis::kExpert, Phase::kForward, Collective::kAllGather), nullptr);
    // The attention's tp pairs only: the FFN's went with the experts.
    const Transfer* tp = find(t, CommAxis::kTensor, Phase::kForward, Collective::kAllGather);
    ASSERT_NE(tp, nullptr);
    EXPECT_EQ(tp->repeat, 1);
  }
  // etp 2 (= tp): the same all-to-all over ranks 2 apart, then the tp group gathers what its two
  // ranks received (k copies of the whole tp group's tokens) and reduce-scatters on combine.
  {
    const LayerTraffic t = layer_traffic(su.layer(0), moe(2, 8, 8));
    const CollectiveCall* a2a = call_of(find(t, CommAxis::kExpert, Phase::kForward, Collective::kAllToAll),
                                        Collective::kAllToAll);
    ASSERT_NE(a2a, nullptr);
    EXPECT_DOUBLE_EQ(a2a->bytes.value(), e * tokens / 2 * k * h);
    const CollectiveCall* ag = call_of(find(t, CommAxis::kExpert, Phase::kForward, Collective::kAllGather),
                                       Collective::kAllGather);
    ASSERT_NE(ag, nullptr);
    EXPECT_DOUBLE_EQ(ag->bytes.value(), e * tokens * k * h);
    EXPECT_EQ(ag->group.size, 2);
  }
  // ep 1, etp = tp: the experts are the FFN's tensor split, its tp pair as a dense layer's.
  {
    const LayerTraffic t = layer_traffic(su.layer(0), moe(2, 8, 1));
    EXPECT_EQ(find(t, CommAxis::kExpert, Phase::kForward, Collective::kAllToAll), nullptr);
    const Transfer* tp = find(t, CommAxis::kTensor, Phase::kForward, Collective::kAllGather);
    ASSERT_NE(tp, nullptr);
    EXPECT_EQ(tp->repeat, 2);
  }
}

TEST(MoeGrid, TheRoutedWorkIsADthOfTheLayersAtAnyEtp) {
  auto su = mixtral();
  const AnalyticCostModel cm;
  // The experts' GEMM FLOPs per rank do not depend on etp (each rank computes a 16th of the routed
  // work); a whole expert per rank runs longer GEMMs (more tokens, full width), which the kernel
  // model does not price slower.
  const LayerCost one = cm.layer(su.layer(0), moe(2, 8, 8, 1));
  const LayerCost two = cm.layer(su.layer(0), moe(2, 8, 8));
  EXPECT_NEAR(one.time.compute.value(), two.time.compute.value(), 0.05 * two.time.compute.value());
  // Less exchanged on the experts' behalf with etp 1: no gather of k copies over tp.
  EXPECT_LT(one.time.ep_comm.value(), two.time.ep_comm.value());
}

TEST(MoeGrid, CommunicatorsCountTheExpertTensorGroup) {
  // world, tp, shard, ep, expert dp, expert tp
  EXPECT_EQ(nccl_communicators(moe(4, 4, 4, 2), 1, false), 6);
  // etp as tp: no group of its own, and ep 4 x etp 4 leaves no expert data parallelism
  EXPECT_EQ(nccl_communicators(moe(4, 4, 4), 1, false), 4);
}

// Megatron-LM's precision-aware optimizer (train.optimizer): bf16 moments halve Adam's 8 bytes of
// moments per parameter, bf16 main gradients the 4 of the gradient, before ZeRO shards them, and the
// step moves 16 bytes of state instead of 24.
TEST(OptimizerPrecision, Bf16MomentsAndGradientsShrinkTheStatesAndTheStep) {
  const OptimizerPrecision fp32;
  const OptimizerPrecision bf16{.exp_avg = DType::kBf16, .exp_avg_sq = DType::kBf16};
  const OptimizerPrecision all{.exp_avg = DType::kBf16, .exp_avg_sq = DType::kBf16, .main_grads = DType::kBf16};
  const OptimizerPrecision fp8{.exp_avg = DType::kFp8, .exp_avg_sq = DType::kFp8};
  EXPECT_DOUBLE_EQ(state_bytes_per_param(DType::kBf16, fp32).optimizer, 12);
  EXPECT_DOUBLE_EQ(state_bytes_per_param(DType::kBf16, bf16).optimizer, 8);
  EXPECT_DOUBLE_EQ(state_bytes_per_param(DType::kBf16, fp8).optimizer, 6);
  EXPECT_DOUBLE_EQ(state_bytes_per_param(DType::kBf16, bf16).grads, 4);
  EXPECT_DOUBLE_EQ(state_bytes_per_param(DType::kBf16, all).grads, 2);
  EXPECT_DOUBLE_EQ(sharded_state_bytes(DType::kBf16, 1, 8, MasterWeights::kInOptimizer, bf16).optimizer, 1.0);
  EXPECT_DOUBLE_EQ(adam_state_traffic_bytes(fp32), 24);
  EXPECT_DOUBLE_EQ(adam_state_traffic_bytes(bf16), 16);
  // In the layer's cost: the optimizer memory falls by a third, the step's time too (its traffic,
  // 24 + 4 + 2 bytes a parameter, becomes 16 + 4 + 2).
  auto su = mixtral();
  const AnalyticCostModel cm;
  const LayerCost a = cm.layer(su.layer(0), moe(2, 8, 8, 1));
  su.train.optimizer = bf16;
  const LayerCost b = cm.layer(su.layer(0), moe(2, 8, 8, 1));
  EXPECT_NEAR(b.memory.optimizer.value() / a.memory.optimizer.value(), 8.0 / 12.0, 1e-9);
  EXPECT_DOUBLE_EQ(b.memory.weights.value(), a.memory.weights.value());
  EXPECT_NEAR(b.optimizer.value() / a.optimizer.value(), 22.0 / 30.0, 0.02);
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// A loop over the experts (AnalyticOptions::moe_grouped_gemm off, weft's runtime) against one
// grouped GEMM per projection: GPT-OSS-120B's 128 experts all local (ep 1, one sample of 4096 on
// each of 8 ranks) give each expert 128 rows, whose GEMMs fill few of the GPU's SMs alone, and the
// host issues 6 operators per expert forward (gate, up, down, SiLU, product, the rows' slice) and 8
// backward (two GEMMs per projection, the activation's two): at 7 us each, 5.4 ms forward and 7.2 ms
// backward at least, where the grouped layer is GPU-bound below that. With 16 local experts (ep 8)
// the loop's host part is an eighth.
TEST(MoeExperts, ALoopPaysEachExpertsGemmsAndOperators) {
  testing::PresetSetup su("gpt-oss-120b", "h100-80gb", 1, 1);  // 8 samples of 4096, one micro-batch
  const AnalyticOptions grouped;
  AnalyticOptions loop = grouped;
  loop.moe_grouped_gemm = false;
  const AnalyticCostModel g(grouped), l(loop);
  const LayerCost g1 = g.layer(su.layer(0), moe(1, 8, 1)), l1 = l.layer(su.layer(0), moe(1, 8, 1));
  const double op = grouped.host_op_us * 1e-6;
  EXPECT_GE(l1.fwd.value(), 128 * 6 * op);
  EXPECT_GE(l1.bwd.value(), 128 * 8 * op);
  EXPECT_LT(g1.fwd.value(), 128 * 6 * op);
  EXPECT_GT(l1.time.compute.value(), g1.time.compute.value());
  // Same FLOPs, same bytes: what the loop adds is its kernels' and the host's.
  EXPECT_EQ(l1.time.ep_comm.value(), g1.time.ep_comm.value());
  const LayerCost l8 = l.layer(su.layer(0), moe(1, 8, 8)), g8 = g.layer(su.layer(0), moe(1, 8, 8));
  EXPECT_LT(l8.fwd.value() - g8.fwd.value(), (l1.fwd.value() - g1.fwd.value()) / 4);
  // `--framework weft` runs the loop; Megatron's and torchtitan's traits group.
  EXPECT_FALSE(framework_options("weft")->moe_grouped_gemm);
  EXPECT_TRUE(framework_options("megatron")->moe_grouped_gemm);
  EXPECT_TRUE(framework_options("torchtitan")->moe_grouped_gemm);
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// Uneven routing between expert ranks (train.moe_imbalance): the busiest of Mixtral's 8 expert
// ranks receives 1.5x the mean, so its experts' GEMMs run 1.5x the rows, its all-to-all moves 1.5x
// the bytes (the exchange lasts as long as its part; the calls' latencies stay) and it saves 1.5x the routed activations; the
// attention and the router are untouched. At ep 1 one rank holds every expert: no effect. A factor
// beyond ep is every copy on one rank: capped.
TEST(MoeImbalance, TheBusiestExpertRankSetsThePace) {
  auto even = mixtral();
  auto skew = mixtral();
  skew.train.moe_imbalance = 1.5;
  const AnalyticCostModel cm;
  const LayerCost a = cm.layer(even.layer(0), moe(1, 16, 8)), b = cm.layer(skew.layer(0), moe(1, 16, 8));
  // 1.5x the bytes; the collectives' fixed latencies stay.
  EXPECT_GT(b.time.ep_comm.value(), 1.3 * a.time.ep_comm.value());
  EXPECT_LE(b.time.ep_comm.value(), 1.5 * a.time.ep_comm.value());
  EXPECT_GT(b.time.compute.value(), 1.2 * a.time.compute.value());
  EXPECT_LT(b.time.compute.value(), 1.5 * a.time.compute.value());  // attention and router unchanged
  EXPECT_GT(b.memory.activations.value(), a.memory.activations.value());
  const LayerCost c = cm.layer(even.layer(0), moe(1, 16, 1)), d = cm.layer(skew.layer(0), moe(1, 16, 1));
  EXPECT_EQ(c.time.compute.value(), d.time.compute.value());
  EXPECT_EQ(c.memory.activations.value(), d.memory.activations.value());
  auto all = mixtral();
  all.train.moe_imbalance = 8;
  auto beyond = mixtral();
  beyond.train.moe_imbalance = 40;
  EXPECT_EQ(cm.layer(all.layer(0), moe(1, 16, 8)).time.compute.value(),
            cm.layer(beyond.layer(0), moe(1, 16, 8)).time.compute.value());
}

// A node-deduplicating dispatcher (DeepEP, HybridEP): a token crosses to a remote node once for all
// its experts there. Expected copies per crossing, experts even over the group's nodes and each
// token's top k distinct and uniform: Qwen3-30B-A3B (128 experts, top 8) over 2 nodes puts 4 copies
// on the other node on average and misses it with probability C(64, 8) / C(128, 8) = 0.0035; Mixtral
// (8 experts, top 2) over 2 nodes: 1 copy there on average, missing it with probability 3 / 14.
TEST(MoeDispatcher, CopiesPerCrossingFollowTheExpertsPerNode) {
  MoeSpec q3{.experts = 128, .top_k = 8, .expert_ffn = 768};
  const CommGroup two_nodes{.size = 16, .ranks_per_node = 8};
  double none = 1;
  for (int i = 0; i < 8; ++i) none *= (64.0 - i) / (128.0 - i);
  EXPECT_NEAR(moe_copies_per_crossing(q3, two_nodes), 4.0 / (1 - none), 1e-12);
  EXPECT_NEAR(moe_copies_per_crossing(q3, two_nodes), 4.012, 0.001);
  MoeSpec mix{.experts = 8, .top_k = 2, .expert_ffn = 14336};
  EXPECT_NEAR(moe_copies_per_crossing(mix, two_nodes), 1.0 / (1 - 3.0 / 14.0), 1e-12);
  // Within a node nothing crosses; over 4 nodes (a quarter of the experts each) fewer copies share one.
  EXPECT_EQ(moe_copies_per_crossing(q3, CommGroup{.size = 8, .ranks_per_node = 8}), 1.0);
  const double four = moe_copies_per_crossing(q3, CommGroup{.size = 32, .ranks_per_node = 8});
  EXPECT_GT(four, 1.0);
  EXPECT_LT(four, moe_copies_per_crossing(q3, two_nodes));
}

// The dispatch over 2 nodes: the deduplicated exchange sends a 4th of the bytes that leave the node
// and forwards the arriving copies over NVLink, so the expert all-to-all of Qwen3-30B-A3B's layer at
// ep 16 costs less than Megatron-LM's all-to-all dispatcher (inter-node bound) but more than a
// quarter of it (the forwarding); the plan's dispatcher is what the layer's traffic carries.
TEST(MoeDispatcher, DeduplicationCutsTheInterNodeDispatch) {
  auto model = load_model(std::string(WEFT_DATA_DIR) + "/reference/moe/qwen3-30b-a3b.config.json");
  testing::PresetSetup plain("mixtral-8x7b", "h100-80gb", 2, 8);
  ASSERT_TRUE(model.ok()) << model.error().message;
  plain.model = *model;
  plain.train.global_batch = 64;
  testing::PresetSetup dedup = plain;
  dedup.train.moe_dispatcher = MoeDispatcher::kHybridEp;
  const LayerStrategy s = moe(1, 16, 16);
  const LayerTraffic at = layer_traffic(plain.layer(0), s);
  const CollectiveCall* a = call_of(find(at, CommAxis::kExpert, Phase::kForward, Collective::kAllToAll),
                                    Collective::kAllToAll);
  const LayerTraffic dt = layer_traffic(dedup.layer(0), s);
  const CollectiveCall* d = call_of(find(dt, CommAxis::kExpert, Phase::kForward, Collective::kAllToAll),
                                    Collective::kAllToAll);
  ASSERT_TRUE(a && d);
  EXPECT_EQ(a->group.copies_per_crossing, 1.0);
  EXPECT_NEAR(d->group.copies_per_crossing, 4.012, 0.001);
  EXPECT_EQ(a->bytes.value(), d->bytes.value());
  const AnalyticCostModel cm;
  const double ta = cm.layer(plain.layer(0), s).time.ep_comm.value();
  const double td = cm.layer(dedup.layer(0), s).time.ep_comm.value();
  EXPECT_LT(td, 0.8 * ta);
  EXPECT_GT(td, 0.25 * ta);
}

// Megatron-Core's expert all-to-all overlap (train.moe_a2a_overlap): the forward's dispatch and
// combine hide behind another micro-batch's backward compute and the backward's behind a forward's;
// the hidden part costs what overlapped traffic costs (overlap_slowdown - 1), what is not covered
// stays exposed.
TEST(MoeDispatcher, AllToAllOverlapHidesBehindTheOtherPass) {
  auto su = mixtral();
  auto over = mixtral();
  over.train.moe_a2a_overlap = true;
  const AnalyticCostModel cm;
  const LayerStrategy s = moe(1, 16, 8);
  const LayerCost a = cm.layer(su.layer(0), s), b = cm.layer(over.layer(0), s);
  ASSERT_GT(a.time.ep_comm.value(), 0);
  const double slow = cm.options().overlap_slowdown - 1.0;
  // Mixtral's experts are long GEMMs: both passes' compute covers the exchange, leaving its slowdown.
  EXPECT_LT(a.time.ep_comm.value(), a.time.compute.value());
  EXPECT_NEAR(b.time.ep_comm.value(), slow * a.time.ep_comm.value(), 1e-9 * a.time.ep_comm.value());
  EXPECT_NEAR(a.fwd.value() + a.bwd.value() - b.fwd.value() - b.bwd.value(),
              (1 - slow) * a.time.ep_comm.value(), 1e-6 * a.time.ep_comm.value());
}

}  // namespace
}  // namespace weft
