// search(): memory limits, nothing-fits, top-k and uniform results, statistics and bad input.
#include <gtest/gtest.h>

#include <algorithm>

#include "test_util.h"
#include "weft/cost/analytic.h"
#include "weft/plan/runtime_support.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

using testing::FakeCostModel;
using testing::FakeParams;

struct Scenario {
  ModelSpec model = testing::small_model({{8, testing::dense_shape(2048, 16, 16)}});
  ClusterSpec cluster = testing::small_cluster(8, 8);
  FakeParams fake;
  SearchOptions opt;
  Scenario() {
    opt.seq = 4096;
    opt.global_batch = 32;
    opt.memory_step_mib = fake.unit_mib;
    opt.top_k = 3;
  }
};

TEST(Search, EveryPlanFitsTheMemoryBudget) {
  for (int budget : {300, 500, 1000, 4000}) {
    Scenario s;
    s.fake.budget_units = budget;
    const FakeCostModel cm(s.fake);
    auto r = search(s.model, s.cluster, cm, s.opt);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_FALSE(r->top.empty()) << "budget " << budget;
    const double budget_gib = to_gib(cm.memory_budget(s.cluster));
    for (const Plan& p : r->top) {
      EXPECT_TRUE(validate(p).ok());
      const Estimate e = estimate(p, cm);
      EXPECT_TRUE(e.fits);
      EXPECT_LE(to_gib(e.peak_memory), budget_gib);
      EXPECT_DOUBLE_EQ(p.predicted.peak_memory_gib, to_gib(e.peak_memory));
      for (const Stage& st : p.stages) EXPECT_LE(st.predicted.memory_gib, budget_gib + 1e-12);
    }
  }
}

TEST(Search, TighterMemoryNeverMakesThePlanFaster) {
  double prev = 0;
  for (int budget : {4000, 1000, 500, 300}) {
    Scenario s;
    s.fake.budget_units = budget;
    const FakeCostModel cm(s.fake);
    auto r = search(s.model, s.cluster, cm, s.opt);
    ASSERT_TRUE(r.ok());
    ASSERT_FALSE(r->top.empty()) << budget;
    const double t = r->top.front().predicted.step_time_s;
    EXPECT_GE(t, prev * (1 - 1e-9)) << budget;
    prev = t;
  }
}

TEST(Search, TopKIsSortedDistinctAndAnnotated) {
  Scenario s;
  const FakeCostModel cm(s.fake);
  auto r = search(s.model, s.cluster, cm, s.opt);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->top.size(), 3u);
  for (size_t i = 0; i + 1 < r->top.size(); ++i) {
    EXPECT_LE(r->top[i].predicted.step_time_s, r->top[i + 1].predicted.step_time_s);
    EXPECT_FALSE(r->top[i] == r->top[i + 1]);
  }
  for (const Plan& p : r->top) {
    EXPECT_EQ(p.predicted.cost_model, "fake");
    EXPECT_GT(p.predicted.tokens_per_s, 0);
    EXPECT_NEAR(p.predicted.tokens_per_s, 32.0 * 4096 / p.predicted.step_time_s, 1e-6 * p.predicted.tokens_per_s);
  }
  ASSERT_TRUE(r->best_uniform.has_value());
  EXPECT_TRUE(r->best_uniform->uniform());
  EXPECT_LE(r->top.front().predicted.step_time_s, r->best_uniform->predicted.step_time_s);
  // Statistics.
  EXPECT_GT(r->stats.configurations, 0);
  EXPECT_GT(r->stats.layer_costs, 0);
  EXPECT_GT(r->stats.searched, 0);
  EXPECT_GE(r->stats.estimates, 3);
  EXPECT_GT(r->stats.wall_s, 0);
  EXPECT_FALSE(r->stats.rules.empty());
}

TEST(Search, UniformOnlyWhenNotLayerwise) {
  Scenario s;
  s.opt.layerwise = false;
  const FakeCostModel cm(s.fake);
  auto r = search(s.model, s.cluster, cm, s.opt);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->top.empty());
  for (const Plan& p : r->top) EXPECT_TRUE(p.uniform());
  EXPECT_EQ(r->stats.searched, 0);
  ASSERT_TRUE(r->best_uniform);
  EXPECT_EQ(r->top.front(), *r->best_uniform);
}

TEST(Search, RestrictionsAreHonoured) {
  Scenario s;
  s.opt.pp_degrees = {2};
  s.opt.schedules = {Schedule::kInterleaved};
  s.opt.micro_batches = {8};
  s.fake.budget_units = 1000;
  const FakeCostModel cm(s.fake);
  auto r = search(s.model, s.cluster, cm, s.opt);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->top.empty());
  for (const Plan& p : r->top) {
    EXPECT_EQ(p.train.pp, 2);
    EXPECT_EQ(p.train.schedule, Schedule::kInterleaved);
    EXPECT_GT(p.train.vp, 1);
    EXPECT_EQ(p.train.micro_batches, 8);
  }
}

// A named framework (docs/search.md, "Frameworks"): the search returns only plans it can run.
TEST(Search, FrameworkRestrictsTheSpace) {
  for (const char* fw : {"megatron", "megatron-deepspeed", "torchtitan"}) {
    Scenario s;
    s.opt.top_k = 40;
    s.fake.budget_units = 1000;
    ASSERT_TRUE(restrict_to_framework(s.opt, fw).ok());
    EXPECT_FALSE(s.opt.layerwise);
    const FakeCostModel cm(s.fake);
    auto r = search(s.model, s.cluster, cm, s.opt);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_FALSE(r->top.empty()) << fw;
    for (const Plan& p : r->top) {
      const Status ok = framework_runs(p, fw);
      EXPECT_TRUE(ok.ok()) << fw << ": " << ok.error().message;
    }
  }
  // Without the restriction the same search returns plans some framework cannot run.
  Scenario s;
  s.opt.top_k = 40;
  s.fake.budget_units = 1000;
  const FakeCostModel cm(s.fake);
  auto r = search(s.model, s.cluster, cm, s.opt);
  ASSERT_TRUE(r.ok());
  int refused = 0;
  for (const Plan& p : r->top) refused += !framework_runs(p, "torchtitan").ok();
  EXPECT_GT(refused, 0);
  // A schedule the framework lacks is an error naming it.
  SearchOptions o;
  o.schedules = {Schedule::kInterleaved};
  const Status bad = restrict_to_framework(o, "megatron-deepspeed");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("framework megatron-deepspeed has no interleaved schedule"), std::string::npos);
}

TEST(Search, FrameworkRunsNamesWhatItCannotRun) {
  Plan p;
  p.model = testing::small_model({{4, testing::dense_shape(2048, 16, 16)}});
  p.cluster = testing::small_cluster(8, 8);
  p.train.seq = 4096;
  p.train.global_batch = 8;
  p.train.micro_batches = 1;
  LayerStrategy s;
  s.dp = 4;
  s.ulysses = 2;
  s.zero = 1;
  Stage st;
  st.layers.assign(4, s);
  p.stages.push_back(st);
  p.embedding = embedding_for(s);
  const Status valid = validate(p);
  ASSERT_TRUE(valid.ok()) << valid.error().message;
  EXPECT_TRUE(framework_runs(p, "megatron-deepspeed").ok());  // DeepSpeed-Ulysses, ZeRO-1
  const Status titan = framework_runs(p, "torchtitan");
  ASSERT_FALSE(titan.ok());
  EXPECT_NE(titan.error().message.find("layer 0: ulysses=2 (no Ulysses): framework torchtitan cannot run it"),
            std::string::npos)
      << titan.error().message;
  p.stages[0].layers[2].ulysses = 1;
  p.stages[0].layers[2].dp = 8;
  const Status mix = framework_runs(p, "megatron-deepspeed");
  ASSERT_FALSE(mix.ok());
  EXPECT_NE(mix.error().message.find("layer 2: a strategy other than layer 0's"), std::string::npos);
  for (LayerStrategy& l : p.stages[0].layers) l = p.stages[0].layers[2];
  for (LayerStrategy& l : p.stages[0].layers) l.zero = 2;
  p.embedding.zero = 2;
  p.embedding.ulysses = 1;
  p.embedding.dp = 8;
  const Status z2 = framework_runs(p, "megatron-deepspeed");
  ASSERT_FALSE(z2.ok());
  EXPECT_NE(z2.error().message.find("zero=2 (it offers ZeRO 0, 1)"), std::string::npos) << z2.error().message;
  EXPECT_TRUE(framework_runs(p, "torchtitan").ok());
  EXPECT_TRUE(framework_runs(p, "megatron").ok());  // Megatron FSDP
  for (LayerStrategy& l : p.stages[0].layers) l.tp = 2, l.dp = 4;
  p.embedding.tp = 2;
  p.embedding.dp = 4;
  const Status no_sp = framework_runs(p, "torchtitan");
  ASSERT_FALSE(no_sp.ok());
  EXPECT_NE(no_sp.error().message.find("tp=2 without sequence parallelism"), std::string::npos) << no_sp.error().message;
}

// weft's runtime (docs/search.md, "weft's runtime"): the restricted search returns only plans
// runtime_supports() accepts, context parallelism among them where the sequence asks for it.
TEST(Search, RuntimeRestrictsTheSpace) {
  auto run = [](bool restricted) {
    Scenario s;
    s.opt.top_k = 40;
    s.opt.long_seq = 1;  // consider context parallelism at this sequence length
    s.fake.budget_units = 1000;
    if (restricted) {
      EXPECT_TRUE(restrict_to_runtime(s.opt).ok());
      EXPECT_TRUE(s.opt.allow_cp);
      EXPECT_TRUE(s.opt.layerwise);       // per-layer plans stay
      EXPECT_TRUE(s.opt.uneven_stages);
    }
    const FakeCostModel cm(s.fake);
    auto r = search(s.model, s.cluster, cm, s.opt);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r->top : std::vector<Plan>{};
  };
  const std::vector<Plan> kept = run(true);
  ASSERT_FALSE(kept.empty());
  for (const Plan& p : kept) {
    const Status ok = runtime_supports(p);
    EXPECT_TRUE(ok.ok()) << ok.error().message;
  }
  // (At sequence 131,072 the runtime's best plan uses context parallelism:
  // SearchGolden.RuntimeRestrictionAtLongSequence.)

  // Every schedule runs there: the ones the user chose are kept.
  SearchOptions o;
  o.schedules = {Schedule::k1F1B, Schedule::kInterleaved};
  ASSERT_TRUE(restrict_to_runtime(o).ok());
  EXPECT_EQ(o.schedules, (std::vector<Schedule>{Schedule::k1F1B, Schedule::kInterleaved}));
  // A filter set before still applies: both must accept. (torchtitan's restriction lists the
  // schedules it runs, interleaved among them, which the runtime would refuse: one both run.)
  SearchOptions both;
  both.schedules = {Schedule::k1F1B};
  ASSERT_TRUE(restrict_to_framework(both, "torchtitan").ok());
  ASSERT_TRUE(restrict_to_runtime(both).ok());
  EXPECT_FALSE(both.accept(LayerStrategy{.ulysses = 2, .dp = 4, .zero = 2}, nullptr));  // torchtitan: no Ulysses
  EXPECT_TRUE(both.accept(LayerStrategy{.cp = 2, .dp = 4, .zero = 2}, nullptr));        // both run cp
  EXPECT_TRUE(both.accept(LayerStrategy{.dp = 8, .zero = 2}, nullptr));
}

TEST(Search, NothingFitsGivesTheClosestPlanAndTheMemoryItNeeds) {
  Scenario s;
  s.fake.budget_units = 12;  // less than one layer's states under any strategy
  const FakeCostModel cm(s.fake);
  auto r = search(s.model, s.cluster, cm, s.opt);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->top.empty());
  EXPECT_FALSE(r->best_uniform.has_value());
  ASSERT_TRUE(r->closest.has_value());
  EXPECT_TRUE(validate(*r->closest).ok());
  const double budget_gib = to_gib(cm.memory_budget(s.cluster));
  // The memory needed: the device size at which the fake's budget (proportional to the device)
  // reaches the closest plan's peak.
  const double peak = r->closest->predicted.peak_memory_gib;
  EXPECT_GT(peak, budget_gib);
  EXPECT_NEAR(r->min_memory_gib, 80.0 * peak / budget_gib, 1e-4);
  // On a device that large the closest plan fits, and a search finds a plan.
  const ClusterSpec bigger = testing::small_cluster(8, 8);
  ClusterSpec big = bigger;
  big.gpu.memory_gib = r->min_memory_gib;
  Plan c = *r->closest;
  c.cluster = big;
  EXPECT_TRUE(estimate(c, cm).fits);
  const FakeCostModel& cm2 = cm;
  s.cluster = big;
  auto r2 = search(s.model, s.cluster, cm2, s.opt);
  ASSERT_TRUE(r2.ok());
  EXPECT_FALSE(r2->top.empty());
}

TEST(Search, ProgressIsReported) {
  Scenario s;
  long long calls = 0, last_done = -1, last_total = 0;
  s.opt.progress = [&](long long done, long long total) {
    ++calls;
    EXPECT_GE(done, last_done);
    EXPECT_LE(done, total);
    last_done = done;
    last_total = total;
  };
  const FakeCostModel cm(s.fake);
  auto r = search(s.model, s.cluster, cm, s.opt);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(calls, 0);
  EXPECT_EQ(last_done, last_total);
}

TEST(Search, BadInputNamesTheFieldAndNumbers) {
  Scenario s;
  const FakeCostModel cm(s.fake);
  auto expect_error = [&](SearchOptions o, const std::string& part) {
    auto r = search(s.model, s.cluster, cm, o);
    ASSERT_FALSE(r.ok()) << part;
    EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(r.error().message.find(part), std::string::npos) << r.error().message;
  };
  SearchOptions o = s.opt;
  o.seq = 0;
  expect_error(o, "seq: must be positive, got 0");
  o = s.opt;
  o.global_batch = -4;
  expect_error(o, "global_batch: must be positive, got -4");
  o = s.opt;
  o.pp_degrees = {3};
  expect_error(o, "--pp: 3 does not divide the 8 GPUs");
  o = s.opt;
  o.micro_batches = {5};
  expect_error(o, "micro_batches: 5 does not divide global batch 32");
  o = s.opt;
  o.global_batch = 1;
  o.max_tp = 1;
  o.allow_ulysses = false;
  expect_error(o, "no valid strategy for global batch 1 on 8 GPUs");
  ModelSpec bad = s.model;
  bad.groups[0].shape.kv_heads = 5;
  auto r = search(bad, s.cluster, cm, s.opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("kv_heads"), std::string::npos) << r.error().message;
}

// Middle stages are interpolated between the first and the last (docs/search.md); the result is the
// same as costing every stage, and a model whose memory is not affine in the micro-batches in
// flight is detected and costed in full.
// Full recompute keeps at most 2 micro-batches' inputs whatever is in flight: memory is no longer
// one common factor of the stage times a per-strategy constant.
class CappedRecompute : public FakeCostModel {
 public:
  using FakeCostModel::FakeCostModel;
  LayerCost layer(const LayerContext& ctx, const LayerStrategy& s) const override {
    LayerCost c = FakeCostModel::layer(ctx, s);
    if (s.recompute == Recompute::kFull)
      c.memory.activations = c.memory.activations / in_flight(ctx) * std::min(2, in_flight(ctx));
    return c;
  }
};

TEST(Search, StageInterpolationIsExactOrFallsBack) {
  Scenario s;
  s.opt.pp_degrees = {4};
  s.fake.budget_units = 400;
  {
    const FakeCostModel cm(s.fake);
    SearchOptions full = s.opt;
    full.interpolate_stages = false;
    auto a = search(s.model, s.cluster, cm, s.opt);
    auto b = search(s.model, s.cluster, cm, full);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_FALSE(a->top.empty());
    EXPECT_EQ(a->stats.interpolation_fallbacks, 0);
    EXPECT_LT(a->stats.layer_costs, b->stats.layer_costs);
    EXPECT_DOUBLE_EQ(a->top.front().predicted.step_time_s, b->top.front().predicted.step_time_s);
  }
  {
    const CappedRecompute cm(s.fake);
    SearchOptions full = s.opt;
    full.interpolate_stages = false;
    auto a = search(s.model, s.cluster, cm, s.opt);
    auto b = search(s.model, s.cluster, cm, full);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_FALSE(b->top.empty());
    EXPECT_GT(a->stats.interpolation_fallbacks, 0);
    ASSERT_FALSE(a->top.empty());
    EXPECT_DOUBLE_EQ(a->top.front().predicted.step_time_s, b->top.front().predicted.step_time_s);
  }
}

TEST(Search, IsDeterministic) {
  Scenario s;
  const FakeCostModel cm(s.fake);
  auto a = search(s.model, s.cluster, cm, s.opt);
  auto b = search(s.model, s.cluster, cm, s.opt);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->top, b->top);
  EXPECT_EQ(a->best_uniform, b->best_uniform);
}

// ZB-H1 in a deep pipeline (Llama-2-7B, pp 8 on 8 A100s, m 8, no recompute), at the same memory
// budget: the search prefers it to 1F1B, beats the best plan of a search kept to 1F1B, and the same
// plan under 1F1B is slower by the bubble ZB-H1 fills with weight gradients. Its peak memory is
// higher (by 22 % here, within the budget): the last device group keeps 7 micro-batches' W state,
// each about one micro-batch of activations (flash attention, no recompute) plus the LM head's
// input and the logits' gradient.
TEST(Search, ZbH1WinsInADeepPipelineAtEqualMemory) {
  auto model = load_model("llama-2-7b");
  auto cluster = load_cluster("a100-80gb");
  ASSERT_TRUE(model.ok() && cluster.ok());
  cluster->nodes = 1;
  SearchOptions o;
  o.seq = 4096;
  o.global_batch = 16;
  o.pp_degrees = {8};
  o.micro_batches = {8};
  o.schedules = {Schedule::k1F1B, Schedule::kZbH1};
  o.top_k = 4;
  o.accept = [](const LayerStrategy& s, const LayerShape*) { return s.recompute == Recompute::kNone; };
  const AnalyticCostModel cm;
  auto r = search(*model, *cluster, cm, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->top.empty());
  const Plan& best = r->top.front();
  EXPECT_EQ(best.train.schedule, Schedule::kZbH1);
  Plan twin = best;
  twin.train.schedule = Schedule::k1F1B;
  const Estimate zb = estimate(best, cm), one = estimate(twin, cm);
  EXPECT_TRUE(zb.fits);
  EXPECT_LT(zb.step_time.value(), 0.97 * one.step_time.value());
  EXPECT_GT(zb.peak_memory.value(), one.peak_memory.value());
  EXPECT_LT(zb.peak_memory.value(), 1.3 * one.peak_memory.value());
  // Every 1F1B plan the search kept is slower than the best, and so is a search kept to 1F1B.
  for (const Plan& p : r->top)
    if (p.train.schedule == Schedule::k1F1B) EXPECT_GT(p.predicted.step_time_s, best.predicted.step_time_s);
  o.schedules = {Schedule::k1F1B};
  auto r1 = search(*model, *cluster, cm, o);
  ASSERT_TRUE(r1.ok() && !r1->top.empty());
  EXPECT_LT(best.predicted.step_time_s, 0.97 * r1->top.front().predicted.step_time_s);
}

// Framework fw has no schedule s: asked for, it is refused naming both; its default space leaves
// it out.
void expect_no_schedule(const char* fw, Schedule s) {
  SearchOptions o;
  o.schedules = {Schedule::k1F1B, s};
  const Status bad = restrict_to_framework(o, fw);
  ASSERT_FALSE(bad.ok()) << fw;
  EXPECT_NE(bad.error().message.find(std::string("--schedule: framework ") + fw + " has no " + to_string(s) +
                                     " schedule ("),
            std::string::npos)
      << bad.error().message;
  SearchOptions any;
  ASSERT_TRUE(restrict_to_framework(any, fw).ok());
  EXPECT_EQ(std::count(any.schedules.begin(), any.schedules.end(), s), 0) << fw;
}

// Frameworks without ZB-H1 refuse it by name; their default space leaves it out; weft runs it.
TEST(Search, ZbH1OnlyWhereAFrameworkRunsIt) {
  for (const char* fw : {"megatron", "megatron-deepspeed", "torchtitan", "torchtitan-compile"})
    expect_no_schedule(fw, Schedule::kZbH1);
  SearchOptions titan;
  titan.schedules = {Schedule::kZbH1};
  EXPECT_NE(restrict_to_framework(titan, "torchtitan").error().message.find("at least 2 stages per rank"),
            std::string::npos);
  SearchOptions weft;
  weft.schedules = {Schedule::kZbH1};
  EXPECT_TRUE(restrict_to_framework(weft, "weft").ok());

  // A zb-h1 plan with a pipeline: refused by framework_runs naming the field.
  Scenario s;
  s.opt.pp_degrees = {2};
  s.opt.schedules = {Schedule::kZbH1};
  const FakeCostModel cm(s.fake);
  auto r = search(s.model, s.cluster, cm, s.opt);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->top.empty());
  const Plan& p = r->top.front();
  ASSERT_EQ(p.train.schedule, Schedule::kZbH1);
  ASSERT_EQ(p.train.pp, 2);
  const Status meg = framework_runs(p, "megatron");
  ASSERT_FALSE(meg.ok());
  EXPECT_NE(meg.error().message.find("train.schedule zb-h1 (Megatron-LM mainline has no zero-bubble schedule): "
                                     "framework megatron cannot run it"),
            std::string::npos)
      << meg.error().message;
  EXPECT_FALSE(framework_runs(p, "torchtitan").ok());
}

// ZB-V in a deep pipeline (Llama-2-7B, pp 8 on 8 A100s, m 16, no recompute): searched beside 1F1B,
// interleaved (vp 2) and zb-h1, it is the best plan, its two chunks per group in a V (group 0
// holds the first and the last 2 layers), faster than the best plan of each other schedule searched
// alone, and its peak memory is within 1F1B's plus a chunk's W state.
TEST(Search, ZbVWinsInADeepPipeline) {
  auto model = load_model("llama-2-7b");
  auto cluster = load_cluster("a100-80gb");
  ASSERT_TRUE(model.ok() && cluster.ok());
  cluster->nodes = 1;
  SearchOptions o;
  o.seq = 4096;
  o.global_batch = 16;
  o.pp_degrees = {8};
  o.micro_batches = {16};
  o.vp_degrees = {2};
  o.schedules = {Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1, Schedule::kZbV};
  o.top_k = 4;
  o.accept = [](const LayerStrategy& s, const LayerShape*) { return s.recompute == Recompute::kNone; };
  const AnalyticCostModel cm;
  auto r = search(*model, *cluster, cm, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->top.empty());
  const Plan& best = r->top.front();
  EXPECT_EQ(best.train.schedule, Schedule::kZbV);
  EXPECT_EQ(best.train.vp, 2);
  ASSERT_EQ(best.stages.size(), 16u);
  EXPECT_EQ(stage_group(best, 0), 0);
  EXPECT_EQ(stage_group(best, 15), 0);
  EXPECT_EQ(stage_group(best, 8), 7);
  for (Schedule other : {Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1}) {
    o.schedules = {other};
    auto r1 = search(*model, *cluster, cm, o);
    ASSERT_TRUE(r1.ok() && !r1->top.empty()) << to_string(other);
    EXPECT_LT(best.predicted.step_time_s, r1->top.front().predicted.step_time_s) << to_string(other);
  }
}

// Frameworks without ZB-V refuse it by name, and leave it out of their default space; torchtitan
// runs it (its default space includes it); weft's runtime does not yet.
TEST(Search, ZbVOnlyWhereAFrameworkRunsIt) {
  for (const char* fw : {"megatron", "megatron-deepspeed", "torchtitan-compile"}) expect_no_schedule(fw, Schedule::kZbV);
  SearchOptions titan;
  ASSERT_TRUE(restrict_to_framework(titan, "torchtitan").ok());
  EXPECT_EQ(titan.schedules, (std::vector<Schedule>{Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved,
                                                    Schedule::kZbV}));
  SearchOptions weft;
  weft.schedules = {Schedule::kZbV};
  ASSERT_TRUE(restrict_to_runtime(weft).ok());
  EXPECT_EQ(weft.schedules, std::vector<Schedule>{Schedule::kZbV});
  SearchOptions runtime;
  ASSERT_TRUE(restrict_to_runtime(runtime).ok());
  EXPECT_EQ(runtime.schedules, (std::vector<Schedule>{Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved,
                                                      Schedule::kZbH1, Schedule::kZbV}));

  // A zb-v plan (8 layers, pp 2: 4 stages of 2 layers): torchtitan and weft's runtime run it, the
  // others refuse it naming the field. (Group 0 holds the embedding and the head: at the default 200 units it needs
  // 12.7 GiB of 12.5, so the budget is doubled.)
  Scenario s;
  s.fake.budget_units = 400;
  s.opt.pp_degrees = {2};
  s.opt.schedules = {Schedule::kZbV};
  s.opt.layerwise = false;
  const FakeCostModel cm(s.fake);
  auto r = search(s.model, s.cluster, cm, s.opt);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->top.empty());
  const Plan& p = r->top.front();
  ASSERT_EQ(p.train.schedule, Schedule::kZbV);
  ASSERT_EQ(p.stages.size(), 4u);
  const Status meg = framework_runs(p, "megatron");
  ASSERT_FALSE(meg.ok());
  EXPECT_NE(meg.error().message.find("train.schedule zb-v (Megatron-LM mainline has no zero-bubble schedule): "
                                     "framework megatron cannot run it"),
            std::string::npos)
      << meg.error().message;
  EXPECT_NE(framework_runs(p, "torchtitan-compile").error().message.find("refuses torch.compile'd stages"),
            std::string::npos);
  EXPECT_TRUE(framework_runs(p, "torchtitan").ok());
  const Status weft_runs = framework_runs(p, "weft");
  EXPECT_TRUE(weft_runs.ok()) << weft_runs.error().message;
}

// --vp without 2 cannot hold zb-v's two chunks: refused naming both flags.
TEST(Search, ZbVNeedsVp2) {
  Scenario s;
  s.opt.schedules = {Schedule::kZbV};
  s.opt.vp_degrees = {3, 4};
  const FakeCostModel cm(s.fake);
  auto r = search(s.model, s.cluster, cm, s.opt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "--vp 3,4: the zb-v schedule runs exactly 2 model chunks per device group (vp 2); add "
                               "2 to --vp or leave zb-v out of --schedule");
}

}  // namespace
}  // namespace weft
