// Mixture-of-Experts layers in the runtime: every expert layout (expert parallelism alone, with data
// parallelism and ZeRO, with tensor parallelism on attention, expert tensor parallelism, Ulysses,
// pipelines, recomputation) against a single-process run of the same model, batch and seed (5
// AdamW steps: losses within 1e-5 relative, parameters within 1e-5 absolute), the routing figures
// of each step, and a Hugging Face MoE config planned by `weft estimate --ep 2 --out` and trained
// under `weft launch`.
#include <cmath>
#include <fstream>
#include <sstream>

#include "parity_util.h"
#include "weft/cost/collectives.h"
#include "weft/plan/routing_trace.h"
#include "weft/search/moe_placement.h"

namespace weft::rttest {
namespace {

// tiny-llama (hidden 32, 4 heads, 2 kv heads) with its first layer dense and three MoE layers of 8
// experts of FFN 16, top 2, the load-balancing loss at 0.01.
ModelSpec tiny_moe(int shared = 0, RouterScore score = RouterScore::kSoftmax, bool norm_topk = true) {
  ModelSpec m = tiny_llama(4);
  m.name = "tiny-moe";
  m.groups[0].count = 1;
  LayerGroup g = m.groups[0];
  g.name = "moe";
  g.count = 3;
  g.shape.ffn = 0;
  g.shape.moe.experts = 8;
  g.shape.moe.top_k = 2;
  g.shape.moe.expert_ffn = 16;
  g.shape.moe.shared_experts = shared;
  g.shape.moe.score = score;
  g.shape.moe.norm_topk = norm_topk;
  g.shape.moe.aux_loss_coef = 0.01;
  m.groups.push_back(g);
  return m;
}

// AdamW's epsilon for these runs: 1e-5 instead of 1e-8. Its steps move a parameter by about
// lr * g / (|g| + eps), whose sensitivity to g grows as lr / eps where |g| is near eps: in the
// shared-expert model single elements of the embedding table and of two attention output
// projections have gradients that cancel to about that size, and the rounding differences of
// tensor parallelism (1e-9 in their gradients) moved them 1.4e-5 (eps 1e-8) and 4.6e-6 (eps 1e-6)
// after one step, every other element staying within 1e-7; at eps 1e-5 the worst is 9e-7 after
// five steps.
const char* kEps = " --eps 1e-5";
void expect_moe_parity(const Plan& p, const std::string& name) { expect_parity(p, name, "", kEps); }

// `s` on every layer, with expert degree ep (and expert tensor degree etp, 0: as tp) on the MoE
// layers.
Plan moe_plan(const ModelSpec& m, int world, int pp, const LayerStrategy& s, int ep, int etp = 0,
              Schedule sched = Schedule::k1F1B) {
  Plan p = uniform(m, world, pp, s, {}, sched);
  for (Stage& st : p.stages)
    for (int i = 0; i < st.num_layers(); ++i)
      if (m.layer(st.first_layer + i).moe.enabled()) {
        st.layers[i].ep = ep;
        st.layers[i].etp = etp;
      }
  const Status v = validate(p);
  EXPECT_TRUE(v.ok()) << v.error().message;
  return p;
}

TEST(RuntimeMoe, ExpertParallel2) { expect_moe_parity(moe_plan(tiny_moe(), 2, 1, strat(1, 2), 2), "moe_ep2"); }
TEST(RuntimeMoe, ExpertParallel4) { expect_moe_parity(moe_plan(tiny_moe(), 4, 1, strat(1, 4), 4), "moe_ep4"); }
// ep 2 inside dp 4: two copies of each expert, their gradients summed over the expert data-parallel
// group, ZeRO-1 sharding the experts' states over it.
TEST(RuntimeMoe, ExpertParallel2Dp4Zero1) {
  expect_moe_parity(moe_plan(tiny_moe(), 4, 1, strat(1, 4, 1, false, 1), 2), "moe_ep2_dp4_z1");
}
TEST(RuntimeMoe, ExpertParallel2Dp4Zero3SharedExpert) {
  expect_moe_parity(moe_plan(tiny_moe(1), 4, 1, strat(1, 4, 1, false, 3), 2), "moe_ep2_dp4_z3_shared");
}
// Qwen2-MoE's sigmoid gate on the shared expert's output (one replicated vector): under tp 2 with
// sequence parallelism (each rank gates its sequence shard, the gate's gradient summed over tp) and
// without (every tp rank gates all tokens alike), with ep 2 and etp 1.
ModelSpec gated_shared_moe() {
  ModelSpec m = tiny_moe(1);
  m.groups[1].shape.moe.shared_gate = true;
  return m;
}
TEST(RuntimeMoe, Tp2SpGatedSharedExpertEp2) {
  expect_moe_parity(moe_plan(gated_shared_moe(), 2, 1, strat(2, 1, 1, true), 2, 1), "moe_tp2sp_shared_gate");
}
TEST(RuntimeMoe, Tp2GatedSharedExpertEp2) {
  expect_moe_parity(moe_plan(gated_shared_moe(), 2, 1, strat(2, 1), 2, 1), "moe_tp2_shared_gate");
}
// tp 2 with sequence parallelism on attention; the experts on their own grid: etp 1 with ep 4
// spanning the tensor ranks (Megatron's common MoE layout), or etp 2 (as tp) with ep 2.
TEST(RuntimeMoe, Tp2SpExpertParallel4Etp1) {
  expect_moe_parity(moe_plan(tiny_moe(1), 4, 1, strat(2, 2, 1, true), 4, 1), "moe_tp2sp_ep4_etp1");
}
TEST(RuntimeMoe, Tp2SpExpertParallel2Etp2) {
  expect_moe_parity(moe_plan(tiny_moe(), 4, 1, strat(2, 2, 1, true), 2), "moe_tp2sp_ep2_etp2");
}
// tp 2 without sequence parallelism: each tensor rank routes half of its replicated block.
TEST(RuntimeMoe, Tp2ExpertParallel2Etp1) {
  expect_moe_parity(moe_plan(tiny_moe(1), 2, 1, strat(2, 1), 2, 1), "moe_tp2_ep2_etp1");
}
TEST(RuntimeMoe, Tp2ExpertTensorParallel2) { expect_moe_parity(moe_plan(tiny_moe(), 2, 1, strat(2, 1), 1), "moe_tp2_etp2"); }
TEST(RuntimeMoe, Ulysses2ExpertParallel2) {
  expect_moe_parity(moe_plan(tiny_moe(), 2, 1, strat(1, 1, 2), 2), "moe_ulysses2_ep2");
}
TEST(RuntimeMoe, Pipeline2ExpertParallel2) {
  expect_moe_parity(moe_plan(tiny_moe(), 4, 2, strat(1, 2, 1, false, 1), 2), "moe_pp2_ep2");
}
TEST(RuntimeMoe, ZeroBubblePipeline2ExpertParallel2) {
  expect_moe_parity(moe_plan(tiny_moe(), 4, 2, strat(1, 2), 2, 0, Schedule::kZbH1), "moe_zbh1_ep2");
}
// Full recomputation re-runs the routing inside the backward: the balancing loss's gradient is
// applied once. DeepSeek-V3's sigmoid scores; Qwen2-MoE's unnormalised top-k weights.
TEST(RuntimeMoe, RecomputeSigmoidRouterExpertParallel2) {
  expect_moe_parity(moe_plan(tiny_moe(0, RouterScore::kSigmoid), 2, 1, strat(1, 2, 1, false, 0, Recompute::kFull), 2),
                "moe_recompute_sigmoid_ep2");
}
TEST(RuntimeMoe, UnnormalisedTopKExpertParallel2) {
  expect_moe_parity(moe_plan(tiny_moe(0, RouterScore::kSoftmax, false), 2, 1, strat(1, 2), 2), "moe_rawtopk_ep2");
}

// The "moe" field of each step's JSON line on rank 0, in step order.
std::vector<Json> moe_fields(const std::string& output) {
  std::vector<Json> out;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("[0] ", 0) == 0) line = line.substr(4);
    if (line.empty() || line[0] != '{' || line.find("\"moe\"") == std::string::npos) continue;
    const Json j = Json::parse(line);
    if (j.contains("step")) out.push_back(j);
  }
  return out;
}

// Each step reports every MoE layer's tokens per expert (all the step's routed copies: global batch
// x sequence x top-k), its imbalance (max over mean), the imbalance between the plan's expert ranks
// (the busiest rank's block of E / ep experts over the mean: 1 in one process) and balancing loss;
// expert parallelism and recomputation route exactly as one process does, so they report the same
// figures.
TEST(RuntimeMoe, StepsReportEachLayersImbalance) {
  const Plan one = reference_of(moe_plan(tiny_moe(), 2, 1, strat(1, 2), 2));
  const Plan ep2 = moe_plan(tiny_moe(), 2, 1, strat(1, 2, 1, false, 0, Recompute::kFull), 2);
  const std::string dir = temp_dir("moe_stats");
  const RunResult a = train_plan(one, dir, "one", 3);
  const RunResult b = train_plan(ep2, dir, "ep2", 3);
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  const std::vector<Json> fa = moe_fields(a.output), fb = moe_fields(b.output);
  ASSERT_EQ(fa.size(), 3u) << a.output;
  ASSERT_EQ(fb.size(), 3u) << b.output;
  const int64_t copies = static_cast<int64_t>(one.train.global_batch) * one.train.seq * 2;
  for (size_t s = 0; s < 3; ++s) {
    const Json& la = fa[s].at("moe");
    const Json& lb = fb[s].at("moe");
    ASSERT_EQ(la.size(), 3u);
    ASSERT_EQ(lb.size(), 3u);
    double aux_sum = 0;
    for (size_t l = 0; l < 3; ++l) {
      EXPECT_EQ(la[l].at("layer").get<int>(), static_cast<int>(l) + 1);
      const std::vector<int64_t> ta = la[l].at("tokens_per_expert").get<std::vector<int64_t>>();
      ASSERT_EQ(ta.size(), 8u);
      int64_t sum = 0, most = 0;
      for (int64_t t : ta) sum += t, most = std::max(most, t);
      EXPECT_EQ(sum, copies) << "step " << s + 1 << " layer " << l + 1;
      EXPECT_NEAR(la[l].at("imbalance").get<double>(), static_cast<double>(most) * 8 / static_cast<double>(sum), 1e-9);
      EXPECT_GE(la[l].at("imbalance").get<double>(), 1.0);
      EXPECT_EQ(la[l].at("rank_imbalance").get<double>(), 1.0);  // ep 1: one rank holds every expert
      const int64_t low = ta[0] + ta[1] + ta[2] + ta[3], high = sum - low;  // ep 2's two ranks' experts
      EXPECT_NEAR(lb[l].at("rank_imbalance").get<double>(),
                  static_cast<double>(std::max(low, high)) * 2 / static_cast<double>(sum), 1e-9);
      EXPECT_GE(lb[l].at("rank_imbalance").get<double>(), 1.0);
      EXPECT_LE(lb[l].at("rank_imbalance").get<double>(), lb[l].at("imbalance").get<double>() + 1e-9);
      // The balancing loss is at least its balanced value, coef x experts x sum_e (1/E)(1/E).
      EXPECT_GE(la[l].at("aux_loss").get<double>(), 0.01 * (1 - 1e-6));
      aux_sum += la[l].at("aux_loss").get<double>();
      // Same routing under ep 2 with recomputation (each micro-batch counted once).
      EXPECT_EQ(lb[l].at("tokens_per_expert").get<std::vector<int64_t>>(), ta) << "step " << s + 1;
      EXPECT_NEAR(lb[l].at("aux_loss").get<double>(), la[l].at("aux_loss").get<double>(), 1e-6);
    }
    EXPECT_NEAR(fa[s].at("moe_aux_loss").get<double>(), aux_sum, 1e-9);
  }
  std::filesystem::remove_all(dir);
}

// DeepSeek-V3's router on the tiny model: sigmoid scores, the 8 experts in 4 groups of 2, a
// token's top 2 from its best 2 groups by their summed scores, and the balancing bias moving 0.05
// a step (so that it changes the routing within a few steps).
ModelSpec deepseek_router_moe() {
  ModelSpec m = tiny_moe(0, RouterScore::kSigmoid);
  MoeSpec& r = m.groups[1].shape.moe;
  r.groups = 4;
  r.group_top_k = 2;
  r.group_score_top = 1;
  r.expert_bias = true;
  r.bias_rate = 0.05;
  r.routed_scale = 2.5;
  return m;
}

// The biases are parameters of the layer, compared with the one-process run's as every other.
TEST(RuntimeMoe, GroupLimitedBiasedRouterExpertParallel2) {
  expect_moe_parity(moe_plan(deepseek_router_moe(), 2, 1, strat(1, 2), 2), "moe_groups_bias_ep2");
}
// ZeRO-3: the bias is put together from the shards for each choice and moved in each shard.
TEST(RuntimeMoe, GroupLimitedBiasedRouterEp2Dp4Zero3) {
  expect_moe_parity(moe_plan(deepseek_router_moe(), 4, 1, strat(1, 4, 1, false, 3), 2), "moe_groups_bias_z3");
}
TEST(RuntimeMoe, GroupLimitedBiasedRouterTp2SpEp2Pipeline2) {
  expect_moe_parity(moe_plan(deepseek_router_moe(), 4, 2, strat(2, 1, 1, true), 2, 1), "moe_groups_bias_tp2sp_pp2");
}

// The rule: after each step a layer's bias moves +0.05 for each expert that took fewer than the
// mean copies of the step, -0.05 for one that took more; summed over the reported steps it is the
// saved bias. And it picks: the same run with the bias kept at zero (bias_rate 0) routes the first
// step alike and the later ones otherwise.
TEST(RuntimeMoe, BalancingBiasFollowsTheStepsLoads) {
  const Plan p = moe_plan(deepseek_router_moe(), 2, 1, strat(1, 2), 2);
  const std::string dir = temp_dir("moe_bias");
  const int steps = 6;
  const RunResult a = train_plan(p, dir, "a", steps);
  ASSERT_EQ(a.status, 0) << a.output;
  const std::vector<Json> f = moe_fields(a.output);
  ASSERT_EQ(f.size(), static_cast<size_t>(steps)) << a.output;
  const runtime::ParamsFile params = read_params(dir + "/a.params");
  ModelSpec still = deepseek_router_moe();
  still.groups[1].shape.moe.bias_rate = 0;
  const RunResult b = train_plan(moe_plan(still, 2, 1, strat(1, 2), 2), dir, "b", steps);
  ASSERT_EQ(b.status, 0) << b.output;
  const std::vector<Json> fb = moe_fields(b.output);
  ASSERT_EQ(fb.size(), static_cast<size_t>(steps)) << b.output;
  auto tokens = [](const Json& step, int l) { return step.at("moe")[l - 1].at("tokens_per_expert").get<std::vector<int64_t>>(); };
  int differ = 0;
  for (int l = 1; l <= 3; ++l) {
    std::vector<double> expect(8, 0.0);
    for (const Json& step : f) {
      const std::vector<int64_t> t = step.at("moe")[l - 1].at("tokens_per_expert").get<std::vector<int64_t>>();
      double mean = 0;
      for (int64_t x : t) mean += static_cast<double>(x) / 8;
      for (int e = 0; e < 8; ++e) expect[e] += t[e] < mean ? 0.05 : t[e] > mean ? -0.05 : 0.0;
    }
    const runtime::NamedParam* b = nullptr;
    for (const auto& q : params.params)
      if (q.name == "layers." + std::to_string(l) + ".mlp.expert_bias") b = &q;
    ASSERT_NE(b, nullptr) << "layer " << l;
    ASSERT_EQ(b->data.size(), 8u);
    double moved = 0;
    for (int e = 0; e < 8; ++e) {
      EXPECT_NEAR(b->data[e], expect[e], 1e-6) << "layer " << l << " expert " << e;
      moved += std::abs(b->data[e]);
    }
    EXPECT_GT(moved, 0.1) << "layer " << l;
    EXPECT_EQ(tokens(f.front(), l), tokens(fb.front(), l)) << "layer " << l;
    for (int s = 1; s < steps; ++s) differ += tokens(f[s], l) != tokens(fb[s], l);
  }
  EXPECT_GT(differ, 0);
  std::filesystem::remove_all(dir);
}

// NetMoE's sample placement in the runtime: a 4-rank run on two "nodes" of 2 ranks traces its
// routing (every sample's copies per expert summing to seq x top-k); the placement planned from
// that trace runs the same steps with the same losses (samples move only between the replicas of
// their micro-batch), and the copies each step's dispatches send across nodes are what the
// planner counts for the unplaced and the placed run (exactly on the first step, whose parameters
// are the same in both; after it the two runs' parameters differ in rounding only).
TEST(RuntimeMoe, SamplePlacementKeepsTheLossesAndTheCountedTraffic) {
  Plan p = moe_plan(tiny_moe(), 4, 1, strat(1, 4), 4);
  p.cluster.nodes = 2;
  p.cluster.gpus_per_node = 2;
  p.cluster.inter = LinkSpec{1, 10};
  const std::string dir = temp_dir("moe_place");
  const RunResult a = train_plan(p, dir, "a", 3, " --moe-trace " + dir + "/trace.json");
  ASSERT_EQ(a.status, 0) << a.output;
  auto trace = read_routing_trace(dir + "/trace.json");
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  ASSERT_EQ(trace->steps.size(), 3u);
  EXPECT_EQ(trace->steps[0].layers, (std::vector<int>{1, 2, 3}));
  ASSERT_TRUE(check_trace(*trace, p).ok()) << check_trace(*trace, p).error().message;
  std::vector<PlacedStepReport> reports;
  auto placed = place_trace(p, *trace, &reports);
  ASSERT_TRUE(placed.ok()) << placed.error().message;
  ASSERT_TRUE(write_sample_placement(dir + "/placement.json", *placed).ok());
  const RunResult b = train_plan(p, dir, "b", 3, " --moe-placement " + dir + "/placement.json");
  ASSERT_EQ(b.status, 0) << b.output;
  ASSERT_EQ(a.losses.size(), 3u);
  ASSERT_EQ(b.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(b.losses[i], a.losses[i], kLossRel * std::fabs(a.losses[i])) << "step " << i + 1;
  const std::vector<Json> fa = moe_fields(a.output), fb = moe_fields(b.output);
  ASSERT_EQ(fa.size(), 3u);
  ASSERT_EQ(fb.size(), 3u);
  double before = 0, after = 0;
  for (size_t s = 0; s < 3; ++s) {
    const double ca = fa[s].at("moe_inter_node_copies").get<double>(), cb = fb[s].at("moe_inter_node_copies").get<double>();
    if (s == 0) {
      EXPECT_DOUBLE_EQ(ca, reports[s].before.inter_copies);
      EXPECT_DOUBLE_EQ(cb, reports[s].after.inter_copies);
    } else {
      EXPECT_NEAR(ca, reports[s].before.inter_copies, 0.02 * reports[s].before.inter_copies);
      EXPECT_NEAR(cb, reports[s].after.inter_copies, 0.02 * reports[s].before.inter_copies);
    }
    EXPECT_LE(reports[s].after.inter_copies, reports[s].before.inter_copies);
    before += ca, after += cb;
  }
  std::printf("sample placement: inter-node copies per 3 steps %.0f -> %.0f (planner: %.0f -> %.0f on step 1)\n",
              before, after, reports[0].before.inter_copies, reports[0].after.inter_copies);
  std::filesystem::remove_all(dir);
}

// The step time a placement saves on a slow inter-node link, measured against the planner's
// prediction. A 4-rank run on two "nodes" of 2 (ep 4 over dp 4) whose expert all-to-all is held for
// each rank's bytes to or from the other node at an emulated rate (--throttle-inter-node, the
// plan's cluster.gpus_per_node a node), unplaced and placed by `place_trace` from the run's own
// routing trace: the drop in the mean step time (steps 2-6) is the drop in the all-to-all time the
// planner predicts for those steps at that rate (placement_traffic: per pass the slowest rank's
// inter-node bytes at the link's achieved rate), within 20 %. The data are runs of one repeated
// token (a uint16 file): every position of such a sample holds the same hidden state (attention
// averages identical values), so all its copies go to the same top-2 experts, the sample locality
// NetMoE exploits (one MoE layer: a sample's experts differ from layer to layer, and one placement
// serves every layer). The rate is chosen from the trace so that the predicted saving is 0.4 s a
// step, well above the compute of this model and its noise.
TEST(RuntimeMoe, PlacementShortensAThrottledStepByThePredictedTime) {
  ModelSpec m = tiny_moe();
  m.groups[1].count = 1;
  Plan p = moe_plan(m, 4, 1, strat(1, 4), 4);
  p.train.global_batch = 16;
  p.cluster.nodes = 2;
  p.cluster.gpus_per_node = 2;
  p.cluster.inter = LinkSpec{1, 10};
  p.cluster.intra = LinkSpec{1e6, 1};  // the emulation holds inter-node bytes only
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  const std::string dir = temp_dir("moe_throttle");
  {
    std::ofstream f(dir + "/runs.bin", std::ios::binary);
    uint64_t x = 12345;
    for (int run = 0; run < 500; ++run) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      const uint16_t tok = static_cast<uint16_t>((x >> 33) % 64);
      for (int i = 0; i < 200; ++i) f.write(reinterpret_cast<const char*>(&tok), sizeof tok);
    }
  }
  const std::string data = " --data " + dir + "/runs.bin --data-format uint16";
  constexpr int kSteps = 6;
  const RunResult traced = train_plan(p, dir, "trace", kSteps, data + " --moe-trace " + dir + "/trace.json");
  ASSERT_EQ(traced.status, 0) << traced.output;
  auto trace = read_routing_trace(dir + "/trace.json");
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  std::vector<PlacedStepReport> reports;
  auto placed = place_trace(p, *trace, &reports);
  ASSERT_TRUE(placed.ok()) << placed.error().message;
  ASSERT_EQ(reports.size(), static_cast<size_t>(kSteps));
  ASSERT_TRUE(write_sample_placement(dir + "/placement.json", *placed).ok());
  // The planner's times at 1 GB/s (achieved: CollectiveOptions' inter-node efficiency of it), over
  // steps 2..6; every time scales as 1 / rate.
  double before_1 = 0, after_1 = 0;
  for (int s = 1; s < kSteps; ++s) before_1 += reports[s].before.time.value(), after_1 += reports[s].after.time.value();
  before_1 /= kSteps - 1, after_1 /= kSteps - 1;
  ASSERT_GT(before_1, 0);
  ASSERT_LT(after_1, 0.9 * before_1) << "the placement should cut the repeated-token samples' inter-node traffic";
  const double achieved_1 = 1e9 * CollectiveOptions{}.inter_efficiency;  // bytes/s at 1 GB/s
  const double rate = achieved_1 * (before_1 - after_1) / 0.4;            // bytes/s: 0.4 s a step saved
  const double scale = achieved_1 / rate;
  const double predicted = (before_1 - after_1) * scale;
  char gbps[32];
  std::snprintf(gbps, sizeof gbps, "%.9g", rate / 1e9);
  const std::string throttle = data + " --throttle-inter-node " + gbps;
  const RunResult a = train_plan(p, dir, "unplaced", kSteps, throttle);
  const RunResult b = train_plan(p, dir, "placed", kSteps, throttle + " --moe-placement " + dir + "/placement.json");
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  const std::vector<Json> fa = moe_fields(a.output), fb = moe_fields(b.output);
  ASSERT_EQ(fa.size(), static_cast<size_t>(kSteps)) << a.output;
  ASSERT_EQ(fb.size(), static_cast<size_t>(kSteps)) << b.output;
  double ta = 0, tb = 0;
  for (int s = 1; s < kSteps; ++s) ta += fa[s].at("step_time_s").get<double>(), tb += fb[s].at("step_time_s").get<double>();
  ta /= kSteps - 1, tb /= kSteps - 1;
  for (int s = 0; s < kSteps; ++s) EXPECT_NEAR(b.losses[s], a.losses[s], kLossRel * std::fabs(a.losses[s])) << s + 1;
  const double measured = ta - tb;
  std::printf("throttled inter-node link %.3g MB/s: step %.3f -> %.3f s, saved %.3f s; predicted all-to-all %.3f -> %.3f s, "
              "saved %.3f s (measured / predicted %.2f)\n",
              rate / 1e6, ta, tb, measured, before_1 * scale, after_1 * scale, predicted, measured / predicted);
  EXPECT_NEAR(measured, predicted, 0.2 * predicted);
  std::filesystem::remove_all(dir);
}

// Bad input: experts that the expert degree does not divide, named with the numbers.
TEST(RuntimeMoe, RefusesAnExpertDegreeThatDoesNotDivideTheExperts) {
  ModelSpec m = tiny_moe();
  m.groups[1].shape.moe.experts = 6;
  Plan p = uniform(m, 4, 1, strat(1, 4));
  for (LayerStrategy& s : p.stages[0].layers) s.ep = 4;
  p.stages[0].layers[0].ep = 1;
  const std::string dir = temp_dir("moe_bad");
  const std::string plan = write_plan(p, dir, "p");
  const RunResult r = run("RANK=0 WORLD_SIZE=4 " + driver() + train_flags() + " --plan " + plan);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("6 experts"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ep"), std::string::npos) << r.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weft::rttest
