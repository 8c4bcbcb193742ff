// Plans for mixed and straggling devices (weft/search/hetero.h) under weft's analytic model: costing
// unit by unit, shares and stage cuts that follow the devices' speed, the two baselines, and the
// errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "weft/cost/analytic.h"
#include "weft/plan/checkpoint_layout.h"
#include "weft/search/hetero.h"
#include "weft/spec/presets.h"
#include "tiny_specs.h"

namespace weft {
namespace {

SearchOptions options(int seq, int batch) {
  SearchOptions o;
  o.seq = seq;
  o.global_batch = batch;
  o.top_k = 3;
  Status st = restrict_to_runtime(o);
  EXPECT_TRUE(st.ok());
  return o;
}

ModelSpec model() { return testing::small_model({{16, testing::dense_shape(2048, 16, 16)}}); }

// model() on cluster c in t.pp stages of equal layer counts, every layer and the embedding with s.
Plan even_pipeline(const ClusterSpec& c, const TrainSettings& t, const LayerStrategy& s) {
  Plan p;
  p.model = model();
  p.cluster = c;
  p.train = t;
  p.embedding = s;
  const int n = p.model.num_layers() / t.pp;
  for (int k = 0; k < t.pp; ++k) {
    Stage st;
    st.first_layer = n * k;
    st.layers.assign(n, s);
    p.stages.push_back(st);
  }
  return p;
}

MixedCluster with_straggler(ClusterSpec c, const std::string& arg) {
  MixedCluster m = mixed_of(c);
  EXPECT_TRUE(add_straggler(m, arg).ok());
  return m;
}

TEST(Hetero, OneKindWithoutStragglersCostsAsEstimateDoes) {
  const AnalyticCostModel cm;
  const ClusterSpec c = testing::small_cluster(8, 8);
  auto r = search(model(), c, cm, options(2048, 64));
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->top.empty());
  for (const Plan& p : r->top) {
    const Estimate e = estimate(p, cm);
    const Plan placed = place(p, mixed_of(c), {0});
    const HeteroEstimate h = hetero_estimate(placed, cm);
    EXPECT_NEAR(h.total.step_time.value(), e.step_time.value(), 1e-9 * e.step_time.value());
    EXPECT_NEAR(to_gib(h.total.peak_memory), to_gib(e.peak_memory), 1e-9);
    EXPECT_EQ(h.total.fits, e.fits);
    EXPECT_NEAR(h.total.mfu, e.mfu, 1e-9);
  }
}

TEST(Hetero, AStragglerSlowsTheUniformPlanAndTheAwarePlanRoutesAroundIt) {
  const AnalyticCostModel cm;
  const ClusterSpec c = testing::small_cluster(4, 4);
  const MixedCluster dev = with_straggler(c, "1:2");
  SearchOptions o = options(2048, 32);
  o.pp_degrees = {1};  // data parallelism only: the shares carry the difference
  auto r = hetero_search(model(), dev, cm, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->top.empty());
  ASSERT_TRUE(r->uniform.has_value());
  const Plan& best = r->top.front();
  EXPECT_TRUE(validate(best).ok()) << validate(best).error().message;
  ASSERT_TRUE(best.devices.has_value());
  // The uniform plan waits for GPU 1: about twice its homogeneous step.
  const Estimate even = estimate(*r->uniform, cm);
  EXPECT_GT(r->uniform_s, 1.6 * even.step_time.value());
  EXPECT_LE(r->uniform_s, 2.0 * even.step_time.value() * 1.0001);
  // The aware plan gives GPU 1's replica the smallest share and gains most of the ideal 1.75x.
  ASSERT_EQ(best.train.dp_shares.size(), 4u);
  const auto& x = best.train.dp_shares;
  EXPECT_EQ(std::accumulate(x.begin(), x.end(), 0), best.train.pipeline_micro_batch());
  for (int j : {0, 2, 3}) EXPECT_GT(x[j], x[1]) << "replica " << j;
  const double step = best.predicted.step_time_s;
  EXPECT_GT(r->uniform_s / step, 1.4);
  EXPECT_LE(r->uniform_s / step, 1.76);
  // Re-costing the written plan gives its prediction; every replica within a few percent of the
  // slowest (the shares balance them).
  const HeteroEstimate h = hetero_estimate(best, cm);
  EXPECT_NEAR(h.total.step_time.value(), step, 1e-9 * step);
  for (Seconds t : h.replica_time) EXPECT_GT(t.value(), 0.75 * step);
  // The fastest subset: the three GPUs at full speed do not divide the batch of 32; two do.
  EXPECT_EQ(r->fastest_subset_label, "2 x testgpu");
  EXPECT_GT(r->fastest_subset_s, step);
}

// A GPU 8 times slower than the rest would finish even one sample of each micro-batch after the
// others finish theirs: the aware plan suspends it (share 0; Malleus suspends such devices), and
// that beats giving it one sample, which the same plan with every replica working shows.
TEST(Hetero, AVerySlowGpuIsSuspended) {
  const AnalyticCostModel cm;
  const ClusterSpec c = testing::small_cluster(4, 4);
  const MixedCluster dev = with_straggler(c, "1:8");
  SearchOptions o = options(2048, 8);
  o.pp_degrees = {1};
  o.micro_batches = {1};
  auto r = hetero_search(model(), dev, cm, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->top.empty());
  const Plan& best = r->top.front();
  ASSERT_EQ(best.train.dp_shares.size(), 4u) << shares_label(best.train);
  EXPECT_EQ(best.train.dp_shares[1], 0) << shares_label(best.train);
  EXPECT_TRUE(validate(best).ok());
  const HeteroEstimate h = hetero_estimate(best, cm);
  // The suspended replica is the fastest: it only reduces gradients and steps its optimizer.
  EXPECT_LT(h.replica_time[1].value(), 0.5 * h.total.step_time.value());
  const Plan working = balance_shares(best, cm, /*suspend=*/false);
  ASSERT_EQ(working.train.dp_shares.size(), 4u);
  EXPECT_GE(working.train.dp_shares[1], 1);
  EXPECT_LT(h.total.step_time.value(), hetero_estimate(working, cm).total.step_time.value());
}

// With one sample per replica in each micro-batch there is no smaller share to give a slow GPU;
// micro-batch counts (train.dp_micro_batches) give it fewer micro-batches of that one sample
// instead, and gain nearly the ideal over the uniform plan, which waits for it.
TEST(Hetero, OneSampleReplicasTakeFewerMicroBatches) {
  const AnalyticCostModel cm;
  const ClusterSpec c = testing::small_cluster(8, 8);
  const MixedCluster dev = with_straggler(c, "1:2");
  auto r = search(model(), c, cm, options(2048, 64));
  ASSERT_TRUE(r.ok()) << r.error().message;
  Plan p;
  for (const Plan& q : r->top)
    if (q.train.pp == 1 && q.embedding.dp == 8) p = q;
  ASSERT_EQ(p.embedding.dp, 8) << "no data-parallel plan among the search's best";
  p.train.micro_batches = 8;  // one sample per replica per micro-batch
  const Plan even = place(p, dev, {0});
  const double even_s = hetero_estimate(even, cm).total.step_time.value();
  const Plan balanced = balance_shares(even, cm, /*suspend=*/false);
  ASSERT_TRUE(validate(balanced).ok()) << validate(balanced).error().message;
  ASSERT_EQ(balanced.train.dp_micro_batches.size(), 8u) << shares_label(balanced.train);
  const auto& n = balanced.train.dp_micro_batches;
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(balanced.train.dp_shares[j], 1);
    if (j != 1) EXPECT_GE(n[j], 2 * n[1] - 1) << shares_label(balanced.train);
  }
  EXPECT_EQ(balanced.train.micro_batches, *std::max_element(n.begin(), n.end()));
  const HeteroEstimate h = hetero_estimate(balanced, cm);
  // Ideal: 8 GPUs' work on 7.5 GPUs' speed against the uniform plan's twice the healthy step.
  EXPECT_GT(even_s / h.total.step_time.value(), 1.6) << shares_label(balanced.train);
  EXPECT_LE(even_s / h.total.step_time.value(), 2.0 * 7.5 / 8 * 1.0001);
  // What each rank computes per step: its samples times its layers.
  const std::vector<double> work = rank_work(balanced);
  EXPECT_DOUBLE_EQ(work[1] * n[0], work[0] * n[1]);
  // The plan round-trips through its file format.
  auto back = plan_from_json(to_json(balanced));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, balanced);
  // --adapt's rebalance re-balances the counts, keeping the micro-batches' size and their total:
  // GPU 1 at 4x takes fewer still; recovered, every replica runs every micro-batch again.
  std::vector<double> slow(8, 1.0);
  slow[1] = 4.0;
  auto worse = rebalance(balanced, slow, cm);
  ASSERT_TRUE(worse.ok()) << worse.error().message;
  const auto& w = worse->plan.train.dp_micro_batches;
  ASSERT_EQ(w.size(), 8u);
  EXPECT_LT(w[1], n[1]);
  EXPECT_EQ(std::accumulate(w.begin(), w.end(), 0), 64);
  EXPECT_LT(worse->predicted_s, worse->current_s);
  EXPECT_TRUE(validate(worse->plan).ok()) << validate(worse->plan).error().message;
  auto healed = rebalance(balanced, std::vector<double>(8, 1.0), cm);
  ASSERT_TRUE(healed.ok()) << healed.error().message;
  EXPECT_TRUE(healed->plan.train.dp_micro_batches.empty()) << shares_label(healed->plan.train);
  EXPECT_TRUE(healed->plan.train.dp_shares.empty()) << shares_label(healed->plan.train);
  EXPECT_EQ(healed->plan.train.micro_batches, 8);
  EXPECT_TRUE(validate(healed->plan).ok()) << validate(healed->plan).error().message;
}

TEST(Hetero, PipelineStagesOnFasterGpusTakeMoreLayers) {
  const AnalyticCostModel cm;
  auto dev = load_mixed_cluster("a100-80gb:1,h100-80gb:1");
  ASSERT_TRUE(dev.ok()) << dev.error().message;
  SearchOptions o = options(2048, 64);
  o.pp_degrees = {2};
  auto r = hetero_search(model(), *dev, cm, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->top.empty());
  const Plan& best = r->top.front();
  ASSERT_EQ(best.train.pp, 2);
  ASSERT_TRUE(best.devices.has_value());
  // Stage s runs on ranks [8s, 8s+8): the group placed there.
  const MixedCluster& placed = best.devices->cluster;
  const int fast_stage = placed.groups[0].gpu.name.find("H100") != std::string::npos ? 0 : 1;
  EXPECT_GT(best.stages[fast_stage].num_layers(), best.stages[1 - fast_stage].num_layers());
  // gpu_of_rank maps each rank to the GPU of the cluster as given (A100s are GPUs 0-7).
  for (int r8 = 0; r8 < 16; ++r8) {
    const bool h100_rank = placed.groups[r8 / 8].gpu.name.find("H100") != std::string::npos;
    EXPECT_EQ(best.devices->gpu_of_rank[r8] >= 8, h100_rank) << "rank " << r8;
  }
  EXPECT_LT(best.predicted.step_time_s, r->uniform_s);
  // The plan round-trips through its file format with its devices.
  auto back = plan_from_json(to_json(best));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, best);
  // The per-group report: every rank once, the fast group with more layers.
  const HeteroEstimate& e = r->top_estimates.front();
  ASSERT_EQ(e.groups.size(), 2u);
  EXPECT_EQ(e.groups[0].ranks + e.groups[1].ranks, 16);
  EXPECT_GT(e.groups[fast_stage].layers, e.groups[1 - fast_stage].layers);
  for (const DeviceGroupUse& g : e.groups) EXPECT_LE(g.memory_gib, g.budget_gib);
}

// Shares per pipeline device group (train.stage_dp_shares, Metis's split inside each stage): a
// 2-stage pipeline of 4 replicas with GPU 1 (stage 0, replica 1) 3x slow. Shares for the whole
// replica would idle GPU 5 (its stage-1 partner) as much as GPU 1; per group, stage 0 leans on its
// healthy GPUs while stage 1 stays even. The step beats both even shares and the same shares for
// every group, the work per rank follows the groups' shares, and re-balanced for a recovered GPU
// the plan goes back to even.
TEST(Hetero, AMixedStageSplitsItsMicroBatchesItsOwnWay) {
  const AnalyticCostModel cm;
  Plan p = even_pipeline(testing::small_cluster(8, 8),
                         TrainSettings{.seq = 2048, .global_batch = 64, .micro_batches = 4, .pp = 2},
                         LayerStrategy{.dp = 4});
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  Plan slow = place(p, with_straggler(p.cluster, "1:3"), {0});
  const double even = hetero_estimate(slow, cm).total.step_time.value();
  const Plan best = balance_shares(slow, cm, /*suspend=*/false);
  ASSERT_EQ(best.train.stage_dp_shares.size(), 2u) << shares_label(best.train);
  const auto& x = best.train.stage_dp_shares;
  EXPECT_EQ(x[1], std::vector<int>(4, 4)) << shares_label(best.train);
  EXPECT_LT(x[0][1], 4) << shares_label(best.train);
  for (int j : {0, 2, 3}) EXPECT_GT(x[0][j], x[0][1]) << shares_label(best.train);
  EXPECT_TRUE(validate(best).ok()) << validate(best).error().message;
  const HeteroEstimate e = hetero_estimate(best, cm);
  ASSERT_TRUE(e.total.fits);
  EXPECT_LT(e.total.step_time.value(), 0.9 * even);
  Plan whole = best;
  whole.train.stage_dp_shares.clear();
  whole.train.dp_shares = x[0];
  EXPECT_LT(e.total.step_time.value(), hetero_estimate(whole, cm).total.step_time.value());
  // Per rank: its group's share x the stage's layers.
  const std::vector<double> w = rank_work(best);
  ASSERT_EQ(w.size(), 8u);
  EXPECT_DOUBLE_EQ(w[1], x[0][1] * 4.0 * 8);
  EXPECT_DOUBLE_EQ(w[5], 4 * 4.0 * 8);
  // The per-group report counts each group's own samples.
  ASSERT_EQ(e.groups.size(), 1u);
  EXPECT_EQ(e.groups[0].samples, 64);
  // GPU 1 recovered: back to even shares, predicted faster than keeping the uneven ones.
  auto r = rebalance(best, std::vector<double>(8, 1.0), cm);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->plan.train.stage_dp_shares.empty()) << shares_label(r->plan.train);
  EXPECT_LT(r->predicted_s, r->current_s);
  // Slowed again, by re-measured speeds: stage 0 leans away from GPU 1, stage 1 stays even.
  std::vector<double> again(8, 1.0);
  again[1] = 4.0;
  auto r2 = rebalance(best, again, cm);
  ASSERT_TRUE(r2.ok()) << r2.error().message;
  ASSERT_EQ(r2->plan.train.stage_dp_shares.size(), 2u) << shares_label(r2->plan.train);
  EXPECT_LE(r2->plan.train.stage_dp_shares[0][1], x[0][1]);
  EXPECT_EQ(r2->plan.train.stage_dp_shares[1], std::vector<int>(4, 4));
}

// A 4-stage pipeline (dp 1: no shares to move) re-balanced for a rank computing 3x slower: the
// stage cuts are re-made so that the slow rank's stage holds fewer layers and the others more, the
// compute-bound step is predicted faster, and the layers that change ranks are what would move.
// Without a slowdown the cut stays.
TEST(Hetero, RebalanceRecutsAPipelineAroundASlowRank) {
  const AnalyticCostModel cm;
  Plan p = even_pipeline(testing::small_cluster(4, 4),
                         TrainSettings{.seq = 2048, .global_batch = 16, .micro_batches = 16, .pp = 4}, LayerStrategy{});
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto same = rebalance(p, {1, 1, 1, 1}, cm);
  ASSERT_TRUE(same.ok()) << same.error().message;
  for (int k = 0; k < 4; ++k) EXPECT_EQ(same->plan.stages[k].first_layer, 4 * k);
  EXPECT_EQ(*reshard_bytes_moved(p, same->plan), 0);

  auto r = rebalance(p, {1, 3, 1, 1}, cm);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const Plan& q = r->plan;
  ASSERT_EQ(q.stages.size(), 4u);
  EXPECT_LT(q.stages[1].num_layers(), 4);
  for (int k : {0, 2, 3}) EXPECT_GE(q.stages[k].num_layers(), 4) << "stage " << k;
  EXPECT_LT(r->predicted_s * 1.5, r->current_s) << r->predicted_s << " vs " << r->current_s;
  EXPECT_TRUE(validate(q).ok()) << validate(q).error().message;
  auto moved = reshard_bytes_moved(p, q);
  ASSERT_TRUE(moved.ok()) << moved.error().message;
  EXPECT_GT(*moved, 0);
  // Layers moved, each with its fp32 parameters and two moments: a multiple of one layer's state.
  const int64_t layer_bytes = 3 * 4 * (4 * 2048 * 2048 + 2 * 2048 * 8192 + 4 * 2048);
  EXPECT_EQ(*moved % layer_bytes, 0) << *moved;
}

// --adapt's re-plan beyond shares and cuts: a tensor-parallel plan over 4 GPUs (dp 1, pp 1) has no
// share or cut to move when GPU 1 slows 4x, so rebalance keeps it; the fresh search at the measured
// speeds finds another structure, predicted faster than the running plan at those speeds, which
// the runtime moves its state to in place.
TEST(Hetero, ReplanSearchesAnotherStructureWhenSharesCannotHelp) {
  const AnalyticCostModel cm;
  const ClusterSpec c = testing::small_cluster(4, 4);
  SearchOptions o = options(2048, 16);
  o.pp_degrees = {1};
  const auto runtime_accept = o.accept;
  o.accept = [runtime_accept](const LayerStrategy& l, const LayerShape* shape) {
    return l.tp == 4 && (!runtime_accept || runtime_accept(l, shape));
  };
  auto r = search(model(), c, cm, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->top.empty());
  const Plan tp4 = r->top.front();
  ASSERT_EQ(tp4.stages[0].layers[0].tp, 4);
  std::vector<double> slow(4, 1.0);
  slow[1] = 4.0;
  auto kept = rebalance(tp4, slow, cm);
  ASSERT_TRUE(kept.ok()) << kept.error().message;
  EXPECT_DOUBLE_EQ(kept->predicted_s, kept->current_s);  // nothing to move
  auto fresh = replan(tp4, slow, cm);
  ASSERT_TRUE(fresh.ok()) << fresh.error().message;
  EXPECT_TRUE(validate(fresh->plan).ok()) << validate(fresh->plan).error().message;
  EXPECT_EQ(fresh->plan.world_size(), 4);
  EXPECT_NE(checkpoint_index(fresh->plan), checkpoint_index(tp4)) << "a new structure";
  EXPECT_LT(fresh->predicted_s * kSearchGain, fresh->current_s);
  // Its prediction is the plan costed at the measured speeds.
  EXPECT_NEAR(hetero_estimate(fresh->plan, cm).total.step_time.value(), fresh->predicted_s, 1e-9 * fresh->predicted_s);
  // Healthy again: never a plan the cost model prices slower than tp4 (here the search's best,
  // which the tp4-only search above did not allow).
  auto healthy = replan(tp4, std::vector<double>(4, 1.0), cm);
  ASSERT_TRUE(healthy.ok()) << healthy.error().message;
  EXPECT_LE(hetero_estimate(healthy->plan, cm).total.step_time.value(),
            hetero_estimate(tp4, cm).total.step_time.value() * 1.0001);
}

TEST(Hetero, NothingFitsNamesTheMemoryNeeded) {
  const AnalyticCostModel cm;
  ClusterSpec small = testing::small_cluster(4, 4);
  small.gpu.memory_gib = 2;
  MixedCluster dev = with_straggler(small, "0:1.5");
  auto r = hetero_search(model(), dev, cm, options(2048, 32));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->top.empty());
  EXPECT_GT(r->min_memory_gib, 2.0);
}

TEST(Hetero, OneKindWithoutStragglersIsTheOrdinarySearch) {
  const AnalyticCostModel cm;
  auto r = hetero_search(model(), mixed_of(testing::small_cluster(8, 8)), cm, options(2048, 64));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
}

}  // namespace
}  // namespace weft
