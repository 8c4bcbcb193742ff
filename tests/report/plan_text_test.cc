// The terminal tables of plans and estimates (weft/report/plan_text.h): exact text for small,
// hand-built plans and estimates.
#include "weft/report/plan_text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace weft {
namespace {

LayerStrategy strategy(int tp, bool sp, int dp, int zero = 0, Recompute rc = Recompute::kNone) {
  return LayerStrategy{.tp = tp, .sp = sp, .dp = dp, .zero = zero, .recompute = rc};
}

// Six layers on two stages: layers 0-1 tp2+sp dp4 and layer 2 with full recompute on stage 0,
// layers 3-5 tp2+sp dp4 on stage 1.
Plan two_stage_plan() {
  Plan p;
  p.cluster.name = "test";
  p.cluster.nodes = 2;
  p.cluster.gpus_per_node = 8;
  p.cluster.gpu.name = "A100";
  p.cluster.gpu.memory_gib = 80;
  p.train.seq = 4096;
  p.train.global_batch = 64;
  p.train.micro_batches = 8;
  p.train.pp = 2;
  p.embedding = strategy(2, true, 4);
  const LayerStrategy s = strategy(2, true, 4);
  Stage a;
  a.first_layer = 0;
  a.layers = {s, s, strategy(2, true, 4, 1, Recompute::kFull)};
  a.predicted.memory_gib = 61.25;
  Stage b;
  b.first_layer = 3;
  b.layers = {s, s, s};
  b.predicted.memory_gib = 48.04;
  p.stages = {a, b};
  return p;
}

Plan uniform_plan() {
  Plan p = two_stage_plan();
  for (Stage& st : p.stages)
    for (LayerStrategy& l : st.layers) l = strategy(1, false, 8, 1);
  p.embedding = strategy(1, false, 8, 1);
  p.train.pp = 1;
  p.train.micro_batches = 4;
  return p;
}

Estimate estimate_of(double step_s, double tokens_per_s, double tflops, double mfu, double peak_gib, double budget_gib) {
  Estimate e;
  e.step_time = Seconds(step_s);
  e.tokens_per_s = tokens_per_s;
  e.model_tflops_per_gpu = tflops;
  e.mfu = mfu;
  e.peak_memory = GiB(peak_gib);
  e.memory_budget = GiB(budget_gib);
  return e;
}

TEST(PlanText, ShortFormsOfDurationsPipelinesAndClusters) {
  EXPECT_EQ(duration_text(150), "150.0 s");
  EXPECT_EQ(duration_text(2.5), "2.500 s");
  EXPECT_EQ(duration_text(0.0123), "12.3 ms");
  TrainSettings t;
  t.pp = 4;
  t.vp = 2;
  t.schedule = Schedule::kInterleaved;
  t.micro_batches = 8;
  EXPECT_EQ(pipeline_text(t), "pp4 interleaved vp2 m8");
  EXPECT_EQ(pipeline_text(TrainSettings{}), "pp1 1f1b m1");
  const Plan p = two_stage_plan();
  EXPECT_EQ(cluster_text(p.cluster), "16 x A100 (2 nodes of 8)");
  ClusterSpec one = p.cluster;
  one.nodes = 1;
  EXPECT_EQ(cluster_text(one), "8 x A100 (1 node of 8)");
}

TEST(PlanText, LayersTableHasOneRowPerRunOfEqualStrategies) {
  EXPECT_EQ(layers_table(two_stage_plan()),
            "stage   layers           strategy                              mem GiB\n"
            "0       layers 0-1       tp2+sp dp4                               61.2\n"
            "        layer 2          tp2+sp dp4 z1 rc=full                        \n"
            "1       layers 3-5       tp2+sp dp4                               48.0\n");
}

TEST(PlanText, PlanTableSetsTheBestPlanBesideTheUniformOne) {
  const Plan best = two_stage_plan(), uni = uniform_plan();
  const Estimate eb = estimate_of(2.0, 131072, 150.25, 0.4816, 61.25, 72.5);
  const Estimate eu = estimate_of(2.5, 104857.6, 120.2, 0.3853, 70.04, 72.5);
  EXPECT_EQ(plan_table(best, eb, uni, eu, MemoryMargin{.percent = true, .value = 5}),
            "                     best plan                     uniform baseline\n"
            "pipeline             pp2 1f1b m8                   pp1 1f1b m4\n"
            "layers               per layer (below)             dp8 z1\n"
            "embedding / LM head  tp2+sp dp4                    dp8 z1\n"
            "step time            2.000 s                       2.500 s\n"
            "tokens/s             131,072                       104,858\n"
            "model TFLOP/s / GPU  150.2                         120.2\n"
            "MFU                  48.2 %                        38.5 %\n"
            "peak memory / GPU    61.2 GiB of 72.5              70.0 GiB\n"
            "room / GPU           11.2 GiB                      2.5 GiB\n"
            "speed-up             1.250x                        1.000x\n"
            "memory budget        80.0 GiB - 3.5 reserves - 4.0 margin (5%) = 72.5 GiB\n");
  // Without a uniform plan its column is empty, trailing spaces trimmed, and there is no speed-up.
  EXPECT_EQ(plan_table(best, eb, std::nullopt, std::nullopt),
            "                     best plan                     uniform baseline: none fits\n"
            "pipeline             pp2 1f1b m8\n"
            "layers               per layer (below)\n"
            "embedding / LM head  tp2+sp dp4\n"
            "step time            2.000 s\n"
            "tokens/s             131,072\n"
            "model TFLOP/s / GPU  150.2\n"
            "MFU                  48.2 %\n"
            "peak memory / GPU    61.2 GiB of 72.5\n"
            "room / GPU           11.2 GiB\n"
            "memory budget        80.0 GiB - 7.5 reserves = 72.5 GiB\n");
}

TEST(PlanText, RankingTableComparesEachPlanWithTheFirst) {
  Plan a = two_stage_plan(), b = uniform_plan();
  a.predicted.step_time_s = 2.0;
  b.predicted.step_time_s = 2.5;
  EXPECT_EQ(ranking_table({a, b}),
            "rank pipeline                   layers                       step  vs best\n"
            "1    pp2 1f1b m8                per layer                 2.000 s     0.0%\n"
            "2    pp1 1f1b m4                dp8 z1                    2.500 s    25.0%\n");
  EXPECT_EQ(ranking_table({}), "");
}

TEST(PlanText, EstimateTableListsFiguresStagesAndTheNonZeroParts) {
  Plan p = uniform_plan();
  p.stages.resize(1);
  p.stages[0].layers.resize(6);
  Estimate e = estimate_of(0.5, 524288, 180.0, 0.577, 80.5, 72.5);
  e.fits = false;
  StageEstimate st;
  st.time = Seconds(0.45);
  st.memory.weights = GiB(1.5);
  st.memory.grads = GiB(3.0);
  st.memory.optimizer = GiB(6.25);
  st.memory.activations = GiB(60.0);
  st.memory.other = GiB(0.75);
  st.fits = false;
  e.stages = {st};
  e.breakdown.compute = Seconds(0.4);
  e.breakdown.dp_exposed = Seconds(0.05);
  e.breakdown.optimizer = Seconds(0.002);
  // 80 GiB device, a margin of 4 GiB, a 72.5 GiB budget: 3.5 GiB of reserves; 8.0 GiB over.
  EXPECT_EQ(estimate_table(p, e, MemoryMargin{.percent = false, .value = 4}),
            "step time              500.0 ms\n"
            "tokens/s               524,288\n"
            "model TFLOP/s / GPU    180.0\n"
            "MFU                    57.7 %\n"
            "peak memory / GPU      80.5 GiB of 72.5 GiB: 8.0 GiB over  DOES NOT FIT\n"
            "memory budget          80.0 GiB - 3.5 reserves - 4.0 margin = 72.5 GiB\n"
            "\n"
            "stage layers       busy  mem GiB  weights    grads    optim    activ    other\n"
            "0          6   450.0 ms     61.2     1.50     3.00     6.25    60.00     0.75 !\n"
            "\n"
            "breakdown per step (all stages):\n"
            "  compute           400.0 ms   dp exposed         50.0 ms\n"
            "  optimizer           2.0 ms\n");
}

TEST(PlanText, NotesWrapAtEightyColumns) {
  EXPECT_EQ(notes_text({}), "");
  // The first line of the second note is 81 columns with "parallelism": it moves to the next line.
  const std::string long_note =
      "searched only what weft's runtime (weft train) runs: no context parallelism (cp), no expert parallelism";
  EXPECT_EQ(notes_text({"short one", long_note}),
            "note: short one\n"
            "note: searched only what weft's runtime (weft train) runs: no context\n"
            "      parallelism (cp), no expert parallelism\n");
  // Exactly 80 columns stay on one line.
  EXPECT_EQ(notes_text({"searched only what weft's runtime (weft train) runs: no context 1234567890 more"}),
            "note: searched only what weft's runtime (weft train) runs: no context 1234567890\n"
            "      more\n");
}

}  // namespace
}  // namespace weft
