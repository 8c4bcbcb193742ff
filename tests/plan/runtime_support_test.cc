// runtime_supports(): what weft's runtime executes, with the messages `weft train` prints when it
// refuses a plan (field, layer and numbers named).
#include <gtest/gtest.h>

#include "test_plans.h"
#include "weft/plan/runtime_support.h"

namespace weft {
namespace {

using testing::uniform_plan;

std::string refusal_of(const Plan& p) { return testing::message_of(runtime_supports(p)); }

TEST(RuntimeSupport, AcceptsWhatTheRuntimeRuns) {
  EXPECT_EQ(refusal_of(uniform_plan(LayerStrategy{.dp = 8}, 1)), "OK");
  EXPECT_EQ(refusal_of(uniform_plan(LayerStrategy{.tp = 4, .sp = true, .dp = 2, .zero = 3}, 1)), "OK");
  EXPECT_EQ(refusal_of(uniform_plan(LayerStrategy{.tp = 2, .ulysses = 2, .dp = 1, .recompute = Recompute::kFull}, 2)),
            "OK");
  // gpipe, uneven stages and a different strategy per layer.
  Plan p = uniform_plan(LayerStrategy{.dp = 4, .zero = 1}, 2);
  p.train.schedule = Schedule::kGpipe;
  p.stages[0].layers.pop_back();
  p.stages[1].layers.push_back(p.stages[1].layers.back());
  p.stages[1].first_layer = 3;
  p.stages[1].layers[0] = LayerStrategy{.tp = 2, .sp = true, .dp = 2, .recompute = Recompute::kSelective};
  EXPECT_EQ(refusal_of(p), "OK");
}

// Context parallelism runs (ring attention over 2 cp chunks, two per rank), alone and with the
// other degrees, on layers and on the embedding, where the chunks and the blocks cut the sequence
// evenly; otherwise the refusal names the layer and the numbers.
TEST(RuntimeSupport, RunsContextParallelismWhereItsChunksCutTheSequence) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8}, 1);
  p.stages[0].layers[2] = LayerStrategy{.cp = 2, .dp = 4};
  p.stages[0].layers[3] = LayerStrategy{.tp = 2, .sp = true, .ulysses = 2, .cp = 2};
  p.embedding = LayerStrategy{.cp = 4, .dp = 2};
  EXPECT_EQ(refusal_of(p), "OK");
  EXPECT_TRUE(runtime_runs_strategy(LayerStrategy{.cp = 2, .dp = 4}));
  p.train.seq = 4004;  // not a multiple of the embedding's 2 cp = 8
  EXPECT_EQ(refusal_of(p),
            "plan: embedding.cp: context parallelism (cp=4) cuts the sequence into 2*cp = 8 chunks (two per rank, "
            "for causal load balance), which does not divide sequence length 4004");
  p.embedding = LayerStrategy{.dp = 8};
  // 4004: layer 3's 2 cp = 4 chunks divide it, its cp x ulysses x tp = 8 blocks do not.
  EXPECT_EQ(refusal_of(p),
            "plan: stages[0].layers[3].cp: cp*ulysses*tp (sequence parallel) = 8 sequence blocks do not divide "
            "sequence length 4004");
  EXPECT_EQ(runtime_sequence_refusal(LayerStrategy{.dp = 8}, 7), "");
}

// 8 layers in 4 chunks of 2 on pp 2 (two chunks per device group) under schedule s.
Plan two_chunks_per_group(Schedule s) {
  Plan p = uniform_plan(LayerStrategy{.dp = 4}, 2);
  p.train.schedule = s;
  p.train.vp = 2;
  p.stages.clear();
  for (int k = 0; k < 4; ++k) {
    Stage st;
    st.first_layer = 2 * k;
    st.layers.assign(2, LayerStrategy{.dp = 4});
    p.stages.push_back(st);
  }
  return p;
}

TEST(RuntimeSupport, RunsTheInterleavedSchedule) {
  const Plan p = two_chunks_per_group(Schedule::kInterleaved);
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  EXPECT_TRUE(runtime_supports(p).ok()) << runtime_supports(p).error().message;
}

TEST(RuntimeSupport, RunsZbV) {
  const Plan p = two_chunks_per_group(Schedule::kZbV);
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  EXPECT_TRUE(runtime_supports(p).ok()) << runtime_supports(p).error().message;
}

TEST(RuntimeSupport, RefusesModelsItCannotRunNamingTheFieldOrLayer) {
  Plan rel = uniform_plan(LayerStrategy{.dp = 8}, 1);
  rel.model.position = PositionKind::kRelative;
  EXPECT_EQ(refusal_of(rel),
            "plan: model.position: relative position biases are not supported by the weft runtime (learned and rope "
            "are)");

  Plan enc = uniform_plan(LayerStrategy{.dp = 8}, 1);
  enc.model.groups[0].shape.kind = LayerKind::kEncoder;
  EXPECT_EQ(refusal_of(enc), "plan: model layer 0: encoder layers are not supported by the weft runtime (decoder "
                             "layers are)");

  // MoE layers run with any expert degree; with biases they do not.
  Plan moe = uniform_plan(LayerStrategy{.dp = 8, .ep = 4}, 1);
  moe.model.groups[0].shape.moe = MoeSpec{8, 2, 1408, 0};
  EXPECT_EQ(refusal_of(moe), "OK");
  moe.model.groups[0].shape.bias = true;
  EXPECT_EQ(refusal_of(moe), "plan: model layer 0: MoE layers with biases (8 experts) are not supported by the weft "
                             "runtime yet (MoE layers without are)");
  // Lower-precision optimizer states are Megatron-LM's, not the runtime's.
  Plan lowp = uniform_plan(LayerStrategy{.dp = 8}, 1);
  lowp.train.optimizer.exp_avg = DType::kBf16;
  EXPECT_EQ(refusal_of(lowp), "plan: train.optimizer: the weft runtime keeps AdamW's moments and the gradients in "
                              "fp32 (Megatron-LM's precision-aware optimizer is not built)");
  // Under tp without sequence parallelism each tp rank routes a tp-th of the sequence.
  Plan moe_tp = uniform_plan(LayerStrategy{.tp = 4, .dp = 2, .ep = 2}, 1);
  moe_tp.model.groups[0].shape.moe = MoeSpec{8, 2, 1408, 0};
  moe_tp.train.seq = 1026;
  EXPECT_EQ(refusal_of(moe_tp), "plan: stages[0].layers[0].tp: a MoE layer under tp 4 without sequence parallelism "
                                "routes a tp-th of each rank's 1026 tokens, which tp does not divide");
  moe_tp.train.seq = 1024;
  EXPECT_EQ(refusal_of(moe_tp), "OK");

  // Banded attention and sinks run, but not through the context-parallel ring.
  Plan banded = uniform_plan(LayerStrategy{.dp = 8}, 1);
  banded.model.groups[0].shape.window = 128;
  EXPECT_EQ(refusal_of(banded), "OK");
  Plan banded_cp = uniform_plan(LayerStrategy{.cp = 2, .dp = 4}, 1);
  banded_cp.model.groups[0].shape.window = 128;
  EXPECT_EQ(refusal_of(banded_cp), "plan: stages[0].layers[0].cp: sliding-window attention (window 128) under context "
                                   "parallelism (cp 2) are not supported by the weft runtime yet (cp 1 is)");
  Plan sinks = uniform_plan(LayerStrategy{.cp = 2, .dp = 4}, 1);
  sinks.model.groups[0].shape.sinks = true;
  EXPECT_EQ(refusal_of(sinks), "plan: stages[0].layers[0].cp: attention sinks under context parallelism (cp 2) are not "
                               "supported by the weft runtime yet (cp 1 is)");
  sinks.stages[0].layers.assign(sinks.stages[0].layers.size(), LayerStrategy{.tp = 2, .sp = true, .dp = 4});
  sinks.embedding = LayerStrategy{.tp = 2, .sp = true, .dp = 4};
  EXPECT_EQ(refusal_of(sinks), "OK");

  // Two groups of different widths: the second group's first layer is named.
  Plan wide = uniform_plan(LayerStrategy{.dp = 8}, 1);
  wide.model.groups[0].count = 4;
  LayerGroup g = wide.model.groups[0];
  g.name = "wide";
  g.shape.hidden = 2048;
  g.shape.head_dim = 128;
  wide.model.groups.push_back(g);
  const Status m = runtime_runs_model(wide.model);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().message,
            "model layer 4: hidden 2048 differs from the model's hidden 1024; the runtime needs one width");

  // The model predicate alone, without a plan.
  EXPECT_TRUE(runtime_runs_model(testing::small_model()).ok());
  EXPECT_EQ(runtime_runs_model(moe.model).error().message,
            "model layer 0: MoE layers with biases (8 experts) are not supported by the weft runtime yet (MoE layers "
            "without are)");
}

// Query / key norms over all heads (OLMoE) sum their squares over tp, so tp must hold whole key
// heads: tp 4 over 2 kv heads is refused with the numbers, tp 2 runs.
TEST(RuntimeSupport, NormsOverAllHeadsNeedWholeKeyHeadsPerTensorRank) {
  Plan p = uniform_plan(LayerStrategy{.tp = 4, .sp = true, .dp = 2}, 1);
  p.model.groups[0].shape.kv_heads = 2;
  p.model.groups[0].shape.qk_norm = p.model.groups[0].shape.qk_norm_full = true;
  EXPECT_EQ(refusal_of(p), "plan: stages[0].layers[0].tp: query / key norms over all heads (qk_norm \"full\") need "
                           "whole key heads on each tensor-parallel rank, but tp 4 does not divide the 2 key / value heads");
  Plan two = uniform_plan(LayerStrategy{.tp = 2, .sp = true, .dp = 4}, 1);
  two.model.groups[0].shape.kv_heads = 2;
  two.model.groups[0].shape.qk_norm = two.model.groups[0].shape.qk_norm_full = true;
  EXPECT_EQ(refusal_of(two), "OK");
}

// The runtime dispatches by all-to-all and runs each micro-batch's passes apart: a flex dispatcher or
// the expert all-to-all overlap is refused, named.
TEST(RuntimeSupport, RefusesTheFlexDispatcherAndTheAllToAllOverlap) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8}, 1);
  p.model.groups[0].shape.moe = MoeSpec{8, 2, 1408, 0};
  p.train.moe_dispatcher = MoeDispatcher::kDeepEp;
  EXPECT_EQ(refusal_of(p), "plan: train.moe_dispatcher: the weft runtime dispatches MoE tokens by all-to-all (deepep is "
                           "not built)");
  p.train.moe_dispatcher = MoeDispatcher::kAllToAll;
  p.train.moe_a2a_overlap = true;
  EXPECT_NE(refusal_of(p).find("plan: train.moe_a2a_overlap:"), std::string::npos) << refusal_of(p);
}

TEST(RuntimeSupport, ValidatesFirst) {
  Plan p = uniform_plan(LayerStrategy{.tp = 2, .dp = 2}, 1);  // 4 devices on a stage of 8
  p.model.position = PositionKind::kRelative;                  // refused too, but after validate()
  const std::string msg = refusal_of(p);
  EXPECT_EQ(msg.rfind("plan: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("tp*ulysses*cp*dp = 2*1*1*2 = 4 but each pipeline stage has 8 devices"), std::string::npos)
      << msg;
}

TEST(RuntimeSupport, PerStrategyAndScheduleRules) {
  EXPECT_TRUE(runtime_runs_strategy(LayerStrategy{.tp = 8, .sp = true, .ulysses = 1, .zero = 3}));
  EXPECT_TRUE(runtime_runs_strategy(LayerStrategy{.ulysses = 4, .dp = 2, .zero = 2, .recompute = Recompute::kFull}));
  EXPECT_EQ(runtime_strategy_refusal(LayerStrategy{.dp = 8, .ep = 4}), "");
  EXPECT_EQ(runtime_strategy_refusal(LayerStrategy{.dp = 8}), "");
}

}  // namespace
}  // namespace weft
