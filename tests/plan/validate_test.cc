#include <gtest/gtest.h>

#include <vector>

#include "test_plans.h"

namespace weft {
namespace {

using testing::uniform_plan;

std::string error_of(const Plan& p) { return testing::message_of(validate(p)); }

TEST(Validate, AcceptsGoodPlans) {
  EXPECT_EQ(error_of(uniform_plan(LayerStrategy{.dp = 8}, 1)), "OK");
  EXPECT_EQ(error_of(uniform_plan(LayerStrategy{.tp = 4, .sp = true, .dp = 2, .zero = 3}, 1)), "OK");
  EXPECT_EQ(error_of(uniform_plan(LayerStrategy{.tp = 2, .ulysses = 2, .dp = 1}, 2)), "OK");
  EXPECT_EQ(error_of(uniform_plan(LayerStrategy{.tp = 8}, 1)), "OK");  // tp 8 > 4 kv heads: replicated
}

TEST(Validate, DegreesMustFillTheStage) {
  EXPECT_EQ(error_of(uniform_plan(LayerStrategy{.tp = 2, .dp = 2}, 1)),
            "stages[0].layers[0]: tp*ulysses*cp*dp = 2*1*1*2 = 4 but each pipeline stage has 8 devices (8 GPUs / "
            "pp=1)");
}

TEST(Validate, TpMustDivideHeads) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8}, 1);
  p.model.groups[0].shape.heads = 12;
  p.model.groups[0].shape.kv_heads = 12;
  p.model.groups[0].shape.head_dim = 64;
  p.stages[0].layers[5] = LayerStrategy{.tp = 8};
  EXPECT_EQ(error_of(p), "stages[0].layers[5].tp: 8 does not divide 12 attention heads");
}

TEST(Validate, SequenceParallelNeedsTp) {
  EXPECT_EQ(error_of(uniform_plan(LayerStrategy{.sp = true, .dp = 8}, 1)),
            "stages[0].layers[0].sp: Megatron sequence parallelism needs tp > 1 (tp=1)");
}

TEST(Validate, DpMustDivideMicroBatch) {
  // 32 samples / 8 micro-batches = 4 samples; dp 8 cannot split them.
  EXPECT_EQ(error_of(uniform_plan(LayerStrategy{.dp = 8}, 1, /*m=*/8, /*batch=*/32)),
            "stages[0].layers[0].dp: 8 does not divide the 4 samples of a micro-batch (global batch 32 / 8 "
            "micro-batches)");
}

TEST(Validate, MicroBatchesDivideBatch) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8}, 1, 8, 64);
  p.train.micro_batches = 3;
  EXPECT_EQ(error_of(p), "train.micro_batches: 3 does not divide global batch 64");
}

TEST(Validate, PipelineDividesWorldAndCoversLayers) {
  Plan p = uniform_plan(LayerStrategy{.dp = 4}, 2);
  p.train.pp = 3;
  EXPECT_EQ(error_of(p), "train.pp: 3 does not divide 8 GPUs");
  Plan q = uniform_plan(LayerStrategy{.dp = 4}, 2);
  q.stages[1].first_layer = 5;
  EXPECT_EQ(error_of(q), "stages[1].first_layer: 5 but the previous stage ends at 4 (stages must cover the layers in "
                         "order)");
  Plan r = uniform_plan(LayerStrategy{.dp = 4}, 2);
  r.stages[1].layers.pop_back();
  EXPECT_EQ(error_of(r), "stages: cover 7 layers but the model has 8");
}

TEST(Validate, InterleavedNeedsVirtualStages) {
  Plan p = uniform_plan(LayerStrategy{.dp = 4}, 2);
  p.train.schedule = Schedule::kInterleaved;
  EXPECT_EQ(error_of(p), "train.vp: the interleaved schedule needs vp > 1 virtual stages per device group, got 1");
  Plan q = uniform_plan(LayerStrategy{.dp = 4}, 2);
  q.train.vp = 2;
  EXPECT_EQ(error_of(q), "train.vp: 2 virtual stages need schedule \"interleaved\" or \"zb-v\" (schedule is 1f1b)");
}

// The plan of `pp` device groups and `stages` equal stages of the 8-layer model under `sched`.
Plan chunked_plan(Schedule sched, int pp, int vp) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8 / pp}, pp);
  p.train.schedule = sched;
  p.train.vp = vp;
  p.stages.clear();
  const int n = pp * vp, L = p.model.num_layers();
  for (int k = 0; k < n; ++k) {
    Stage st;
    st.first_layer = k * L / n;
    st.layers.assign((k + 1) * L / n - st.first_layer, LayerStrategy{.dp = 8 / pp});
    p.stages.push_back(st);
  }
  return p;
}

// zb-v: pp >= 2 device groups of exactly 2 chunks (stages = 2 pp), any micro-batch count.
TEST(Validate, ZbVNeedsTwoChunksPerGroup) {
  EXPECT_EQ(error_of(chunked_plan(Schedule::kZbV, 2, 2)), "OK");
  EXPECT_EQ(error_of(chunked_plan(Schedule::kZbV, 4, 2)), "OK");
  EXPECT_EQ(error_of(chunked_plan(Schedule::kZbV, 2, 1)),
            "train.vp: the zb-v schedule runs exactly 2 model chunks per device group (vp = 2), got 1");
  EXPECT_EQ(error_of(chunked_plan(Schedule::kZbV, 2, 3)),
            "train.vp: the zb-v schedule runs exactly 2 model chunks per device group (vp = 2), got 3");
  EXPECT_EQ(error_of(chunked_plan(Schedule::kZbV, 1, 2)),
            "train.pp: the zb-v schedule needs pp >= 2 device groups (two model chunks each, in a V), got 1");
  Plan three = chunked_plan(Schedule::kZbV, 2, 2);
  three.train.micro_batches = 2;  // fewer than 2 pp - 1 = 3: runs, with a longer warm-up bubble
  EXPECT_EQ(error_of(three), "OK");
  Plan short_stages = chunked_plan(Schedule::kZbV, 2, 2);
  short_stages.stages.pop_back();
  EXPECT_EQ(error_of(short_stages), "stages: 3 stages listed but pp*vp = 2*2 = 4");
}

// stage_group: the device group of each virtual stage, s % pp or zb-v's V.
TEST(StageGroup, InterleavedLoopsAndZbVTurns) {
  std::vector<int> loop, v;
  for (int s = 0; s < 8; ++s) {
    loop.push_back(stage_group(chunked_plan(Schedule::kInterleaved, 4, 2), s));
    v.push_back(stage_group(chunked_plan(Schedule::kZbV, 4, 2), s));
  }
  EXPECT_EQ(loop, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(v, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(stage_group(uniform_plan(LayerStrategy{.dp = 2}, 4), 3), 3);
  // The plan file names each stage's device group and first rank (2 ranks per group at pp 4).
  const Json j = to_json(chunked_plan(Schedule::kZbV, 4, 2));
  EXPECT_EQ(j["stages"][7]["device_group"], 0);
  EXPECT_EQ(j["stages"][4]["device_group"], 3);
  EXPECT_EQ(j["stages"][5]["first_rank"], 4);
}

TEST(Validate, UlyssesAndCpDivideSequence) {
  Plan p = uniform_plan(LayerStrategy{.cp = 8}, 1);
  p.train.seq = 1020;
  EXPECT_EQ(error_of(p), "stages[0].layers[0]: ulysses*cp = 8 does not divide sequence length 1020");
}

TEST(Validate, ExpertParallelOnlyOnMoe) {
  EXPECT_EQ(error_of(uniform_plan(LayerStrategy{.dp = 8, .ep = 2}, 1)),
            "stages[0].layers[0].ep: 2 on a dense layer (expert parallelism needs MoE)");
  Plan p = uniform_plan(LayerStrategy{.dp = 8, .ep = 4}, 1);
  p.model.groups[0].shape.moe = MoeSpec{8, 2, 2816, 0};
  EXPECT_EQ(error_of(p), "OK");
  p.stages[0].layers[0].ep = 3;
  EXPECT_EQ(error_of(p), "stages[0].layers[0].ep: 3 does not divide 8 experts");
  EXPECT_EQ(error_of(uniform_plan(LayerStrategy{.dp = 8, .etp = 2}, 1)),
            "stages[0].layers[0].etp: 2 on a dense layer (expert tensor parallelism needs MoE)");
}

// The experts' grid (etp x ep x expert dp) covers the stage's devices: with etp 1 the expert
// degree may span the tensor ranks (Megatron-LM's tp 2 attention, etp 1, ep 8 on 8 GPUs).
TEST(Validate, ExpertGridOverTheStage) {
  Plan p = uniform_plan(LayerStrategy{.tp = 2, .sp = true, .dp = 4, .ep = 8, .etp = 1}, 1);
  p.model.groups[0].shape.moe = MoeSpec{8, 2, 2816, 0};
  EXPECT_EQ(error_of(p), "OK");
  p.stages[0].layers[0].etp = 0;  // as tp: 8 x 2 = 16 ranks of the stage's 8
  EXPECT_EQ(error_of(p), "stages[0].layers[0].ep: ep*etp = 8*2 = 16 does not divide the 8 devices of the stage "
                         "(tp*ulysses*cp*dp; the experts' grid is etp x ep x expert data parallel)");
  p.stages[0].layers[0].ep = 4;
  EXPECT_EQ(error_of(p), "OK");
  p.stages[0].layers[0].etp = 3;
  p.stages[0].layers[0].ep = 1;
  EXPECT_EQ(error_of(p), "stages[0].layers[0].etp: 3 does not divide expert FFN size 2816");
}

TEST(Validate, KvHeadsSplitOrReplicated) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8}, 1);
  p.model.groups[0].shape.heads = 24;
  p.model.groups[0].shape.kv_heads = 6;
  p.model.groups[0].shape.head_dim = 64;
  p.model.hidden = p.model.groups[0].shape.hidden = 1536;
  p.model.groups[0].shape.ffn = 4096;
  p.stages[0].layers[0] = LayerStrategy{.tp = 4, .dp = 2};
  EXPECT_EQ(error_of(p),
            "stages[0].layers[0]: tp*ulysses = 4 and 6 key/value heads: one must divide the other (kv heads are split "
            "or replicated)");
}

}  // namespace
}  // namespace weft
