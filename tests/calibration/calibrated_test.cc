// CalibratedCostModel: measured figures replace analytic ones exactly where a profile covers the
// case (values derived by hand from hand-made profiles), and the analytic model fills the rest.
#include "weft/calibration/calibrated.h"

#include <gtest/gtest.h>

#include "profile_fixtures.h"
#include "tiny_specs.h"
#include "weft/cost/estimate.h"

namespace weft {
namespace {

using testing::phase_sample;
using testing::two_point_table;

// The tiny model (tiny_specs.h: 784 parameters per layer; fp32 gradients: 3136 bytes) up to seq 64.
ModelSpec tiny_model(int layers = 1) { return testing::tiny_model(layers, 64); }

ClusterSpec two_rank_node() {
  ClusterSpec c;
  c.name = "test";
  c.nodes = 1;
  c.gpus_per_node = 2;
  c.gpu.name = "cpu";
  c.gpu.tflops_fp32 = c.gpu.tflops_tf32 = c.gpu.tflops_bf16 = c.gpu.tflops_fp16 = 0.05;
  c.gpu.memory_gib = 8;
  c.gpu.hbm_gbps = 10;
  c.intra.gbps = 1;
  c.inter.gbps = 1;
  return c;
}

ModelProfile layers_profile() {
  ModelProfile p;
  p.model = tiny_model();
  p.runtime.optimizer_s_per_param = 1e-8;
  LayerProfile l;
  l.group = "decoder";
  l.shape = p.model.groups[0].shape;
  l.samples = {phase_sample(1, Recompute::kNone, 2, 64, 0.010, 0.020, 1e6),
               phase_sample(1, Recompute::kFull, 2, 64, 0.010, 0.031, 2e5)};
  p.layers.push_back(l);
  p.embedding = {phase_sample(1, Recompute::kNone, 2, 64, 0.001, 0.002, 1e4)};
  p.head = {phase_sample(1, Recompute::kNone, 2, 64, 0.003, 0.004, 3e4)};
  return p;
}

HardwareProfile hw_profile() {
  HardwareProfile h;
  h.machine.world_size = 2;
  h.machine.ranks_per_node = 2;
  h.machine.memory_per_rank_gib = 8;
  // Each table: 1000 B -> 200 us, 5000 B -> 600 us (line: 100 us + S * 1e-7 s/B).
  h.collectives = {two_point_table(Collective::kAllReduce), two_point_table(Collective::kReduceScatter),
                   two_point_table(Collective::kAllGather)};
  return h;
}

// A 2-rank data-parallel plan of the tiny model: micro-batch of 4 samples (2 per rank), seq 64.
Plan dp_plan(int zero = 0, Recompute rc = Recompute::kNone) {
  Plan p;
  p.model = tiny_model();
  p.cluster = two_rank_node();
  p.train = TrainSettings{.seq = 64, .global_batch = 4, .micro_batches = 1, .pp = 1, .dtype = DType::kFp32};
  p.embedding.dp = 2;
  p.embedding.zero = zero;
  LayerStrategy s;
  s.dp = 2;
  s.zero = zero;
  s.recompute = rc;
  Stage st;
  st.first_layer = 0;
  st.layers = {s};
  p.stages = {st};
  EXPECT_TRUE(validate(p).ok()) << validate(p).error().message;
  return p;
}

LayerContext layer_ctx(const Plan& p, int layer) {
  LayerContext ctx;
  static_cast<StageContext&>(ctx) = stage_context(p, 0);
  ctx.layer = layer;
  return ctx;
}

// The all-reduce table at the byte counts used below (interpolation / extension by hand).
constexpr double kLayerGrads = 2e-4 + (3136.0 - 1000) * 1e-7;  // 3136 B, inside the table
constexpr double kWte = 2e-4 - (1000 - 512.0) * 1e-7;          // 16*8 params * 4 B, below
constexpr double kWpe = 2e-4 + (2048.0 - 1000) * 1e-7;         // 64*8 * 4 B
constexpr double kHead = 2e-4 - (1000 - 576.0) * 1e-7;         // (2*8 + 16*8) * 4 B
constexpr double kStats = 2e-4 - (1000 - 16.0) * 1e-7;         // the per-step loss/norm all-reduce

TEST(Calibrated, LayerUsesTheMeasuredFigures) {
  const Plan p = dp_plan();
  CalibratedCostModel cm(hw_profile(), layers_profile(), p.model, p.cluster);
  const LayerCost c = cm.layer(layer_ctx(p, 0), p.stages[0].layers[0]);
  EXPECT_DOUBLE_EQ(c.fwd.value(), 0.010);
  EXPECT_DOUBLE_EQ(c.bwd.value(), 0.020);
  EXPECT_NEAR(c.grad_sync.value(), kLayerGrads, 1e-15);
  EXPECT_NEAR(c.optimizer.value(), 784 * 1e-8, 1e-18);
  EXPECT_DOUBLE_EQ(c.memory.activations.value(), 1e6);  // one micro-batch in flight
  EXPECT_EQ(cm.source(), "measured");
  EXPECT_TRUE(cm.coverage(p).empty()) << cm.coverage(p).front();
}

// The weight-gradient share of the measured backward is the analytic model's share: bwd 20 ms
// measured, so wgrad = 20 ms * analytic wgrad / analytic bwd.
TEST(Calibrated, WgradScalesWithTheBackward) {
  const Plan p = dp_plan();
  CalibratedCostModel cm(hw_profile(), layers_profile(), p.model, p.cluster);
  const LayerCost c = cm.layer(layer_ctx(p, 0), p.stages[0].layers[0]);
  const LayerCost a = cm.analytic().layer(layer_ctx(p, 0), p.stages[0].layers[0]);
  ASSERT_GT(a.wgrad.value(), 0);
  EXPECT_NEAR(c.wgrad.value(), 0.020 * a.wgrad.value() / a.bwd.value(), 1e-15);
}

TEST(Calibrated, ZeroOneAndRecomputeUseTheirTables) {
  const Plan p = dp_plan(1, Recompute::kFull);
  CalibratedCostModel cm(hw_profile(), layers_profile(), p.model, p.cluster);
  const LayerCost c = cm.layer(layer_ctx(p, 0), p.stages[0].layers[0]);
  EXPECT_DOUBLE_EQ(c.bwd.value(), 0.031);
  EXPECT_NEAR(c.time.recompute.value(), 0.011, 1e-15);  // full-recompute backward minus plain backward
  // reduce-scatter of 3136 B of gradients + all-gather of 3136 B of weights (same tables).
  EXPECT_NEAR(c.grad_sync.value(), 2 * kLayerGrads, 1e-15);
  // ZeRO-1 over 2 ranks: each rank updates half of the 784 parameters.
  EXPECT_NEAR(c.optimizer.value(), 392 * 1e-8, 1e-18);
}

TEST(Calibrated, ZeroThreeAddsItsMeasuredOwnWorkAndBlockingCollectives) {
  const Plan p = dp_plan(3);
  ModelProfile mp = layers_profile();
  PhaseSample z3 = mp.layers[0].samples[0];  // tp 1, none, mb 2, seq 64: 0.010 / 0.020
  z3.zero = 3;
  z3.forward_s = 0.013;
  z3.backward_s = 0.026;
  mp.layers[0].samples.push_back(z3);
  CalibratedCostModel cm(hw_profile(), mp, p.model, p.cluster);
  const LayerCost c = cm.layer(layer_ctx(p, 0), p.stages[0].layers[0]);
  // forward: 0.010 + 0.003 of view work + the all-gather of 3136 B of weights; backward: 0.020 +
  // 0.006 + the same all-gather again (the runtime frees the gathered weights after the forward)
  // and the reduce-scatter of 3136 B of gradients (the runtime blocks on all three).
  EXPECT_NEAR(c.fwd.value(), 0.013 + kLayerGrads, 1e-15);
  EXPECT_NEAR(c.bwd.value(), 0.026 + 2 * kLayerGrads, 1e-15);
  EXPECT_EQ(c.grad_sync.value(), 0.0);
  // Without zero-3 samples the view work is left out and coverage says so.
  CalibratedCostModel plain(hw_profile(), layers_profile(), p.model, p.cluster);
  EXPECT_NEAR(plain.layer(layer_ctx(p, 0), p.stages[0].layers[0]).fwd.value(), 0.010 + kLayerGrads, 1e-15);
  bool noted = false;
  for (const auto& n : plain.coverage(p)) noted = noted || n.find("no zero=3 samples") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Calibrated, WholeStepFromHandMadeProfiles) {
  const Plan p = dp_plan();
  CalibratedCostModel cm(hw_profile(), layers_profile(), p.model, p.cluster);
  const Estimate e = estimate(p, cm);
  // One micro-batch: layer 0.010 + 0.020, embedding and head 0.004 + 0.006; the runtime reduces
  // gradients after backward without overlap (wte, wpe, layer, head buckets), then the optimizer
  // over 784 + 128 + 512 + 144 parameters, then the loss/norm all-reduce.
  const double compute = 0.010 + 0.020 + 0.001 + 0.002 + 0.003 + 0.004;
  const double sync = kLayerGrads + kWte + kWpe + kHead;
  const double opt = (784 + 128 + 512 + 144) * 1e-8;
  EXPECT_NEAR(e.step_time.value(), compute + sync + opt + kStats, 1e-12);
  Plan annotated = p;
  annotate(annotated, e, cm);
  EXPECT_EQ(annotated.predicted.source, "measured");
}

TEST(Calibrated, ComputeSharingScalesMeasuredCompute) {
  const Plan p = dp_plan();
  HardwareProfile hw = hw_profile();
  hw.sharing = {{2, 1.5}};
  CalibratedCostModel cm(hw, layers_profile(), p.model, p.cluster);
  const LayerCost c = cm.layer(layer_ctx(p, 0), p.stages[0].layers[0]);
  EXPECT_DOUBLE_EQ(c.fwd.value(), 0.015);
  EXPECT_DOUBLE_EQ(c.bwd.value(), 0.030);
}

// Two ranks as a 2-stage pipeline (one layer each), 4 micro-batches of 2 samples. With a node
// that computes two ranks at half speed (sharing 2.0) the schedule's bubble is time in which the
// waiting rank's share goes to the other: the step is the larger of the mean device group's work
// and the schedule at full speed, when that is shorter than the schedule (then + the per-step
// loss/norm all-reduce, which the calibrated step always adds).
TEST(Calibrated, OversubscribedPipelineConservesTheNodesWork) {
  Plan p;
  p.model = tiny_model(2);
  p.cluster = two_rank_node();
  p.train = TrainSettings{.seq = 64, .global_batch = 8, .micro_batches = 4, .pp = 2, .dtype = DType::kFp32};
  for (int st = 0; st < 2; ++st) {
    Stage stage;
    stage.first_layer = st;
    stage.layers = {LayerStrategy{}};
    p.stages.push_back(stage);
  }
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  for (double share : {1.0, 2.0}) {
    HardwareProfile hw = hw_profile();
    hw.sharing = {{2, share}};
    CalibratedCostModel cm(hw, layers_profile(), p.model, p.cluster);
    const StepCost sched = cm.analytic().step(p.train, stage_sums(p, cm));
    const double mean = (sched.stage_time[0].value() + sched.stage_time[1].value()) / 2;
    const double makespan = sched.step_time.value();
    const double want = share > 1 ? std::min(makespan, std::max(mean, makespan / share)) : makespan;
    EXPECT_NEAR(estimate(p, cm).step_time.value(), want + kStats, 1e-12) << "sharing " << share;
    if (share > 1) EXPECT_LT(want, makespan - 1e-4);  // the bubble (first/last stage imbalance) is absorbed
  }
}

TEST(Calibrated, FallsBackToAnalyticWithoutProfiles) {
  const Plan p = dp_plan();
  AnalyticOptions ao;
  ao.overlap_grad_sync = false;
  CalibratedCostModel cm(std::nullopt, std::nullopt, p.model, p.cluster, ao);
  AnalyticCostModel an(ao);
  EXPECT_EQ(cm.source(), "analytic");
  const LayerContext ctx = layer_ctx(p, 0);
  const LayerCost c = cm.layer(ctx, p.stages[0].layers[0]);
  const LayerCost a = an.layer(ctx, p.stages[0].layers[0]);
  // Nothing to communicate inside the layer at dp 2 / zero 0: the same forward + backward.
  EXPECT_NEAR((c.fwd + c.bwd).value(), (a.fwd + a.bwd).value(), 1e-15);
  EXPECT_NEAR(c.grad_sync.value(), a.grad_sync.value(), 1e-15);
  EXPECT_EQ(c.memory.activations, a.memory.activations);
  EXPECT_FALSE(cm.coverage(p).empty());
}

TEST(Calibrated, UncoveredCasesFallBackPerTerm) {
  Plan p = dp_plan();
  // tp 2 instead of dp 2: the model profile has no tp=2 samples, the hardware profile has the
  // all-reduce over 2 ranks.
  p.stages[0].layers[0].dp = 1;
  p.stages[0].layers[0].tp = 2;
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  CalibratedCostModel cm(hw_profile(), layers_profile(), p.model, p.cluster);
  const auto notes = cm.coverage(p);
  bool compute_note = false;
  for (const auto& n : notes) compute_note = compute_note || n.find("compute analytic: no tp=2") != std::string::npos;
  EXPECT_TRUE(compute_note);
  // Its 2 forward and 2 backward all-reduces of the [4 samples x 64 tokens x 8] fp32 activation
  // (8192 B, beyond the table) are measured: 600 us + 3192 * 0.1 us each.
  const LayerCost c = cm.layer(layer_ctx(p, 0), p.stages[0].layers[0]);
  EXPECT_NEAR(c.time.tp_comm.value(), 4 * (6e-4 + 3192 * 1e-7), 1e-15);

  // A bf16 plan run by the fp32 runtime that measured the profile: the messages are fp32.
  Plan half = p;
  half.train.dtype = DType::kBf16;
  CalibratedCostModel ch(hw_profile(), layers_profile(), half.model, half.cluster);
  EXPECT_NEAR(ch.layer(layer_ctx(half, 0), half.stages[0].layers[0]).time.tp_comm.value(), 4 * (6e-4 + 3192 * 1e-7),
              1e-15);

  // A hardware profile without the all-gather table: ZeRO-1's all-gather falls back.
  HardwareProfile hw = hw_profile();
  hw.collectives.pop_back();
  const Plan z = dp_plan(1);
  CalibratedCostModel cz(hw, layers_profile(), z.model, z.cluster);
  bool ag_note = false;
  for (const auto& n : cz.coverage(z)) ag_note = ag_note || n.find("all_gather over 2 ranks") != std::string::npos;
  EXPECT_TRUE(ag_note);
}

TEST(Calibrated, SourceSaysMixedWhenAProfileIsMissingOrPartial) {
  const Plan p = dp_plan();
  EXPECT_EQ(CalibratedCostModel(hw_profile(), std::nullopt, p.model, p.cluster).source(), "mixed");
  EXPECT_EQ(CalibratedCostModel(std::nullopt, layers_profile(), p.model, p.cluster).source(), "mixed");
  ModelSpec other = p.model;
  other.groups[0].shape.ffn = 64;
  EXPECT_EQ(CalibratedCostModel(hw_profile(), layers_profile(), other, p.cluster).source(), "mixed");
}

TEST(Calibrated, PricerReadsTablesAndNotesFallBacks) {
  const HardwareProfile hw = hw_profile();
  const ClusterSpec c = two_rank_node();
  const CollectiveOptions o;
  std::vector<std::string> notes;
  const ProfilePricer pricer(&hw, c, o, &notes);
  const CommGroup two = place_group(c, 2, 1);
  bool measured = false;
  EXPECT_NEAR(pricer.price(Collective::kAllReduce, Bytes(3136), two, &measured).value(), kLayerGrads, 1e-15);
  EXPECT_TRUE(measured);
  EXPECT_TRUE(notes.empty());
  // No all-to-all table: the analytic formula, and one note.
  EXPECT_EQ(pricer.price(Collective::kAllToAll, Bytes(4096), two, &measured).value(),
            collective_time(Collective::kAllToAll, Bytes(4096), two, c, o).value());
  EXPECT_FALSE(measured);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("all_to_all over 2 ranks"), std::string::npos);
  // Nothing to price: an empty buffer, a group of one.
  EXPECT_EQ(pricer.price(Collective::kAllReduce, Bytes(0), two).value(), 0);
  EXPECT_EQ(pricer.price(Collective::kAllReduce, Bytes(64), place_group(c, 1, 1)).value(), 0);
}

TEST(Calibrated, SimulationsUseTheScheduleTraitsOfItsStep) {
  HardwareProfile hw = hw_profile();
  hw.overlap.group_size = 2;
  hw.overlap.compute_slowdown = 1.25;
  ModelProfile mp = layers_profile();
  mp.runtime.grad_sync_overlaps_backward = false;
  const Plan p = dp_plan();
  const CalibratedCostModel cm(hw, mp, p.model, p.cluster);
  const ScheduleTraits t = cm.schedule_traits();
  EXPECT_FALSE(t.overlap_grad_sync);
  EXPECT_EQ(t.overlap_slowdown, 1.25);
  EXPECT_EQ(t.overlap_slowdown, cm.analytic().schedule_traits().overlap_slowdown);
}

}  // namespace
}  // namespace weft
