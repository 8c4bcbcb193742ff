// Each pruning rule of weft/search/pruning.h: what it removes, and for the exact ones that the
// optimum survives (the fake cost model's step time is the search objective).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.h"
#include "weft/search/pruning.h"

namespace weft {
namespace {

using namespace planner;
using testing::FakeCostModel;
using testing::FakeParams;

bool is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

SearchOptions base_options() {
  SearchOptions o;
  o.seq = 4096;
  o.global_batch = 16;
  o.memory_step_mib = 64;
  return o;
}

TEST(PruningRules, TensorParallelStaysInsideANode) {
  const LayerShape sh = testing::dense_shape(2048, 16, 16);
  RuleLog log;
  auto c = layer_candidates(sh, testing::small_cluster(16, 4), base_options(), 16, 16, log);
  ASSERT_FALSE(c.empty());
  for (const auto& s : c) EXPECT_LE(s.tp, 4) << label(s);
  EXPECT_GT(log.count(kRuleTpInNode), 0);
  // With 8 GPUs per node tp = 8 is a candidate.
  RuleLog log8;
  auto c8 = layer_candidates(sh, testing::small_cluster(16, 8), base_options(), 16, 16, log8);
  EXPECT_TRUE(std::any_of(c8.begin(), c8.end(), [](const LayerStrategy& s) { return s.tp == 8; }));
}

TEST(PruningRules, SequenceShardingStaysInsideANodeForShortSequences) {
  const LayerShape sh = testing::dense_shape(2048, 16, 16);
  const ClusterSpec cl = testing::small_cluster(16, 4);
  RuleLog log;
  auto c = layer_candidates(sh, cl, base_options(), 16, 16, log);
  for (const auto& s : c) {
    EXPECT_EQ(s.cp, 1) << label(s);
    EXPECT_LE(s.tp * s.ulysses, 4) << label(s);
  }
  EXPECT_GT(log.count(kRuleSeqShardInNode), 0);
  // A long sequence admits context parallelism and Ulysses across nodes.
  SearchOptions lo = base_options();
  lo.seq = 32768;
  RuleLog log2;
  auto c2 = layer_candidates(sh, cl, lo, 16, 16, log2);
  EXPECT_TRUE(std::any_of(c2.begin(), c2.end(), [](const LayerStrategy& s) { return s.cp > 1; }));
  EXPECT_TRUE(std::any_of(c2.begin(), c2.end(), [](const LayerStrategy& s) { return s.tp * s.ulysses > 4; }));
  EXPECT_EQ(log2.count(kRuleSeqShardInNode), 0);
}

TEST(PruningRules, UlyssesFillsTheNodeBeforeContextParallelism) {
  const LayerShape sh = testing::dense_shape(2048, 16, 4);  // 4 kv heads
  const ClusterSpec cl = testing::small_cluster(32, 8);
  SearchOptions lo = base_options();
  lo.seq = 65536;
  RuleLog log;
  auto c = layer_candidates(sh, cl, lo, 32, 32, log);
  int with_cp = 0;
  for (const auto& s : c) {
    EXPECT_TRUE(is_pow2(s.tp) && is_pow2(s.ulysses) && is_pow2(s.cp));
    if (s.cp == 1) continue;
    ++with_cp;
    // The largest valid Ulysses degree inside the node for this tp (divides heads, kv relation).
    int fill = 1;
    for (int u = 1; s.tp * u <= 8; u *= 2)
      if (16 % (s.tp * u) == 0 && (4 % (s.tp * u) == 0 || (s.tp * u) % 4 == 0)) fill = u;
    EXPECT_GE(s.ulysses, fill) << label(s);
  }
  EXPECT_GT(with_cp, 0);
  EXPECT_GT(log.count(kRuleUlyssesFirst), 0);
}

TEST(PruningRules, ZeroNeedsMoreThanOneShard) {
  const LayerShape sh = testing::dense_shape(2048, 16, 16);
  RuleLog log;
  auto c = layer_candidates(sh, testing::small_cluster(4, 4), base_options(), 4, 16, log);
  for (const auto& s : c)
    if (s.shard_group() == 1) EXPECT_EQ(s.zero, 0) << label(s);
  EXPECT_TRUE(std::any_of(c.begin(), c.end(), [](const LayerStrategy& s) { return s.shard_group() == 1; }));
  // tp4 and tp4+sp have dp = ulysses = cp = 1: ZeRO 1, 2 and 3 removed for each.
  EXPECT_EQ(log.count(kRuleZeroNeedsShards), 6);
}

TEST(PruningRules, OptionsRestrictTheSpace) {
  const LayerShape sh = testing::dense_shape(2048, 16, 16);
  SearchOptions o = base_options();
  o.seq = 65536;
  o.allow_ulysses = false;
  o.allow_cp = false;
  o.allow_zero3 = false;
  o.max_tp = 2;
  RuleLog log;
  auto c = layer_candidates(sh, testing::small_cluster(8, 8), o, 8, 16, log);
  ASSERT_FALSE(c.empty());
  for (const auto& s : c) {
    EXPECT_EQ(s.ulysses, 1);
    EXPECT_EQ(s.cp, 1);
    EXPECT_LT(s.zero, 3);
    EXPECT_LE(s.tp, 2);
  }
  EXPECT_GT(log.count(kRuleOptions), 0);
}

// A restriction with its own name (SearchOptions::restrictions; galvatron::restrict_to_galvatron
// is one) removes what it refuses, counted once per partial strategy under its name.
TEST(PruningRules, NamedRestrictionsCountUnderTheirName) {
  const LayerShape sh = testing::dense_shape(2048, 16, 16);
  SearchOptions o = base_options();
  o.seq = 65536;
  o.restrictions.push_back(
      NamedRestriction{"no-tp-with-ulysses", StrategyField::kUlysses, [](const LayerStrategy& s) {
                         return s.tp > 1 && s.ulysses > 1;
                       }});
  o.restrictions.push_back(
      NamedRestriction{"no-zero-1", StrategyField::kZero, [](const LayerStrategy& s) { return s.zero == 1; }});
  RuleLog log, free_log;
  auto c = layer_candidates(sh, testing::small_cluster(8, 8), o, 8, 16, log);
  auto all = layer_candidates(sh, testing::small_cluster(8, 8), base_options(), 8, 16, free_log);
  ASSERT_FALSE(c.empty());
  for (const auto& s : c) {
    EXPECT_NE(s.zero, 1) << label(s);
    EXPECT_FALSE(s.tp > 1 && s.ulysses > 1) << label(s);
  }
  // The restricted candidates are the others, in the same order.
  std::vector<LayerStrategy> kept;
  for (const auto& s : all)
    if (s.zero != 1 && !(s.tp > 1 && s.ulysses > 1)) kept.push_back(s);
  EXPECT_EQ(c, kept);
  // tp x Ulysses pairs are counted once each, before any cp, ZeRO or recompute is set.
  EXPECT_GT(log.count("no-tp-with-ulysses"), 0);
  EXPECT_LT(log.count("no-tp-with-ulysses"), static_cast<long long>(all.size() - kept.size()));
  EXPECT_GT(log.count("no-zero-1"), 0);
  // The embedding is restricted alike.
  const ModelSpec m = testing::small_model({{8, sh}});
  RuleLog elog;
  for (const auto& e : embedding_candidates(m, testing::small_cluster(8, 8), o, 8, 16, elog)) {
    EXPECT_NE(e.zero, 1) << label(e);
    EXPECT_FALSE(e.tp > 1 && e.ulysses > 1) << label(e);
  }
  EXPECT_GT(elog.count("no-zero-1"), 0);
}

TEST(PruningRules, CandidatesAreValidForValidate) {
  // Every candidate passes the plan validator's per-layer checks (a uniform plan with it validates).
  const LayerShape sh = testing::dense_shape(2048, 16, 4);
  const ModelSpec m = testing::small_model({{4, sh}});
  const ClusterSpec cl = testing::small_cluster(8, 8);
  SearchOptions o = base_options();
  o.seq = 32768;
  for (int pmb : {1, 2, 8, 16}) {
    RuleLog log;
    for (const auto& s : layer_candidates(sh, cl, o, 8, pmb, log)) {
      TrainSettings t{o.seq, pmb * 2, 2, 1, 1, Schedule::k1F1B, DType::kBf16};
      auto p = make_uniform_plan(m, cl, t, s, embedding_for(s));
      EXPECT_TRUE(p.ok()) << label(s) << ": " << (p.ok() ? "" : p.error().message);
    }
    for (const auto& e : embedding_candidates(m, cl, o, 8, pmb, log)) {
      LayerStrategy l;
      l.dp = 8;
      if (pmb % 8 != 0) continue;
      TrainSettings t{o.seq, pmb * 2, 2, 1, 1, Schedule::k1F1B, DType::kBf16};
      auto p = make_uniform_plan(m, cl, t, l, e);
      EXPECT_TRUE(p.ok()) << label(e);
    }
  }
}

// (ep, etp): ep divides the experts, etp is tp's or (under tp > 1) 1, and the experts' grid
// ep x etp divides the stage; with etp 1 the expert degree spans tensor ranks.
TEST(PruningRules, MoeExpertDegreesDivideExpertsAndTheStage) {
  LayerShape sh = testing::dense_shape(2048, 16, 16);
  sh.moe.experts = 8;
  sh.moe.top_k = 2;
  sh.moe.expert_ffn = 4096;
  RuleLog log;
  auto c = layer_candidates(sh, testing::small_cluster(8, 8), base_options(), 8, 16, log);
  bool some = false, over_tp = false;
  for (const auto& s : c) {
    EXPECT_EQ(8 % s.ep, 0);
    EXPECT_EQ(s.devices() % (s.ep * s.expert_tp()), 0) << label(s);
    EXPECT_TRUE(s.expert_tp() == s.tp || s.expert_tp() == 1) << label(s);
    some = some || s.ep == 8;
    over_tp = over_tp || (s.dp * s.cp) % s.ep != 0;
  }
  EXPECT_TRUE(some);
  EXPECT_TRUE(over_tp);
}

TEST(PruningRules, ConfigurationRules) {
  const ModelSpec m = testing::small_model({{12, testing::dense_shape(1024, 8, 8)}});
  const ClusterSpec cl = testing::small_cluster(8, 8);
  SearchOptions o = base_options();
  o.global_batch = 32;
  o.max_vp = 2;
  RuleLog log;
  auto cfgs = pipeline_configs(m, cl, o, log);
  bool interleaved = false;
  for (const auto& c : cfgs) {
    if (c.pp > 1) EXPECT_GE(c.m, c.pp);
    if (c.pp == 1) EXPECT_EQ(c.schedule, Schedule::k1F1B);
    if (c.schedule == Schedule::kInterleaved) {
      interleaved = true;
      EXPECT_LE(c.vp, 2);
      EXPECT_EQ(m.num_layers() % (c.pp * c.vp), 0);
      EXPECT_EQ(c.m % c.pp, 0);
    }
    EXPECT_EQ(o.global_batch % c.m, 0);
  }
  EXPECT_TRUE(interleaved);
  EXPECT_GT(log.count(kRuleFillPipeline), 0);
  EXPECT_GT(log.count(kRuleNoPipeline), 0);
  EXPECT_GT(log.count(kRuleInterleaveDepth), 0);  // vp 3 (12 = 2*2*3, 4*3) removed
}

TEST(PruningRules, ParetoIndices) {
  //          time: 5  3  3  4  1  1
  //        memory: 1  2  2  2  5  6
  // kept: 0 (least memory), 1 (first of the two equal points), 4; 3 is dominated by 1; 5 by 4.
  EXPECT_EQ(pareto_indices({5, 3, 3, 4, 1, 1}, {1, 2, 2, 2, 5, 6}), (std::vector<int>{0, 1, 4}));
}

TEST(PruningRules, ConvexHullIsALowerBound) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> mem, t;
    const int n = 1 + rng() % 8;
    for (int i = 0; i < n; ++i) mem.push_back(rng() % 50), t.push_back(rng() % 50);
    const TimeMemoryHull h(mem, t);
    for (double x = 0; x <= 60; x += 0.5) {
      double best = std::numeric_limits<double>::infinity();
      for (int i = 0; i < n; ++i)
        if (mem[i] <= x) best = std::min(best, t[i]);
      if (std::isinf(best)) {
        EXPECT_TRUE(std::isinf(h(x)));
        continue;
      }
      EXPECT_LE(h(x), best + 1e-12);
      // Non-increasing and convex (midpoint test).
      EXPECT_LE(h(x + 0.5), h(x) + 1e-12);
      if (x >= 0.5 && std::isfinite(h(x - 0.5))) EXPECT_LE(h(x), 0.5 * (h(x - 0.5) + h(x + 0.5)) + 1e-9);
    }
    // Pairs of points: the chord is above the hull.
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const double xm = 0.5 * (mem[i] + mem[j]), tm = 0.5 * (t[i] + t[j]);
        EXPECT_LE(h(xm), tm + 1e-9);
      }
  }
}

// --- rules inside search(): fire, and leave the optimum in place -----------------------------

struct SmallSearch {
  ModelSpec model = testing::small_model({{8, testing::dense_shape(2048, 16, 16)}});
  ClusterSpec cluster = testing::small_cluster(8, 4);
  FakeParams fake;
  SearchOptions opt = base_options();
  SmallSearch() {
    opt.global_batch = 32;
    opt.max_tp = 2;
    opt.allow_ulysses = false;
    fake.budget_units = 300;
  }
};

TEST(PruningRules, SearchCountsItsRules) {
  SmallSearch s;
  const FakeCostModel cm(s.fake);
  auto r = search(s.model, s.cluster, cm, s.opt);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->top.empty());
  auto count = [&](const char* rule) {
    for (const auto& [name, n] : r->stats.rules)
      if (name == rule) return n;
    return 0LL;
  };
  EXPECT_GT(count(kRuleParetoLayout), 0);
  EXPECT_GT(count(kRuleParetoEmbedding), 0);
  EXPECT_GT(count(kRuleParetoAcross), 0);
  EXPECT_GT(count(kRuleObjectiveBound), 0);
  EXPECT_GT(count(kRuleGpipeDominated), 0);  // the fake holds all m micro-batches under GPipe
  EXPECT_EQ(r->stats.pruned, [&] {
    long long t = 0;
    for (const auto& [name, n] : r->stats.rules) t += n;
    return t;
  }());
}

TEST(PruningRules, BoundAndGpipeRulesKeepTheOptimum) {
  SmallSearch s;
  const FakeCostModel cm(s.fake);
  auto pruned = search(s.model, s.cluster, cm, s.opt);
  // Without the bound (a re-rank pool larger than the number of configurations) and with GPipe
  // searched on its own.
  SearchOptions all = s.opt;
  all.rerank = 100000;
  auto full = search(s.model, s.cluster, cm, all);
  SearchOptions gp = all;
  gp.schedules = {Schedule::kGpipe};
  auto gpipe = search(s.model, s.cluster, cm, gp);
  ASSERT_TRUE(pruned.ok() && full.ok() && gpipe.ok());
  ASSERT_FALSE(pruned->top.empty());
  double best = full->top.front().predicted.step_time_s;
  if (!gpipe->top.empty()) best = std::min(best, gpipe->top.front().predicted.step_time_s);
  EXPECT_DOUBLE_EQ(pruned->top.front().predicted.step_time_s, best);
  for (const auto& [name, n] : full->stats.rules) EXPECT_NE(name, kRuleObjectiveBound);
}

// A model under which GPipe holds less memory than 1F1B: the rule must not fire.
class LightGpipe : public FakeCostModel {
 public:
  using FakeCostModel::FakeCostModel;
  LayerCost layer(const LayerContext& ctx, const LayerStrategy& s) const override {
    LayerCost c = FakeCostModel::layer(ctx, s);
    if (ctx.train.schedule == Schedule::kGpipe) c.memory.activations = Bytes(0);
    return c;
  }
};

TEST(PruningRules, GpipeKeptWhenTheModelSaysItIsLighter) {
  SmallSearch s;
  const LightGpipe cm(s.fake);
  auto r = search(s.model, s.cluster, cm, s.opt);
  ASSERT_TRUE(r.ok());
  for (const auto& [name, n] : r->stats.rules) EXPECT_NE(name, kRuleGpipeDominated);
}

TEST(PruningRules, MemoryLowerBoundSkipsConfigurationsThatCannotFit) {
  SmallSearch s;
  // Without ZeRO-3 each layer keeps its 128/tp units of weights: at pp = 1 (tp <= 2, dp 4) a GPU
  // holds 8 x (64 + 16 + 48) = 1024 units, at pp = 2 4 x (64 + 32 + 96) = 768, at pp = 4
  // 2 x (64 + 64 + 192) = 640: a 700-unit budget rules out pp = 1 and 2 before any DP runs.
  s.fake.weight_units = 64;
  s.fake.budget_units = 700;
  s.opt.allow_zero3 = false;
  const FakeCostModel cm(s.fake);
  auto r = search(s.model, s.cluster, cm, s.opt);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->top.empty());
  EXPECT_GE(r->top.front().train.pp, 4);
  bool fired = false;
  for (const auto& [name, n] : r->stats.rules) fired = fired || name == kRuleMemory;
  EXPECT_TRUE(fired);
}

TEST(PruningRules, NoValidStrategySkipsConfigurations) {
  SmallSearch s;
  s.opt.global_batch = 4;  // tp <= 2 on 8 GPUs: pp = 1 needs dp >= 4, so m = 2 and 4 have no strategy
  const FakeCostModel cm(s.fake);
  auto r = search(s.model, s.cluster, cm, s.opt);
  ASSERT_TRUE(r.ok());
  bool fired = false;
  for (const auto& [name, n] : r->stats.rules) fired = fired || name == kRuleNoCandidates;
  EXPECT_TRUE(fired);
  for (const auto& p : r->top)
    if (p.train.pp == 1) EXPECT_EQ(p.train.micro_batches, 1);
}

}  // namespace
}  // namespace weft
