// The search returns exactly the optimum of a brute-force enumeration over all per-layer
// assignments, stage partitions, embedding strategies and pipeline configurations, on many random
// small models and clusters with a fake cost model whose step time is the search objective.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.h"
#include "weft/plan/geometry.h"

namespace weft {
namespace {

using planner::PipelineConfig;
using testing::BruteSpace;
using testing::FakeCostModel;
using testing::FakeParams;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Case {
  ModelSpec model;
  ClusterSpec cluster;
  FakeParams fake;
  SearchOptions opt;
  BruteSpace space;
  std::string text;
};

// A random small case: 2..6 layers in one or two groups, 1..8 GPUs, a few candidates per layer.
Case random_case(std::uint64_t seed, bool interleaved) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::vector<int> v) { return v[rng() % v.size()]; };
  Case c;
  const int hidden = pick({1024, 2048});
  const int heads = pick({8, 16});
  const int kv = pick({heads, heads / 2, 2});
  std::vector<std::pair<int, LayerShape>> groups;
  if (interleaved) {
    groups.push_back({pick({4, 6}), testing::dense_shape(hidden, heads, kv)});
  } else if (rng() % 3 == 0) {
    groups.push_back({1 + static_cast<int>(rng() % 3), testing::dense_shape(hidden, heads, kv)});
    LayerShape other = testing::dense_shape(hidden, heads, heads);
    other.ffn = 2 * hidden;
    groups.push_back({1 + static_cast<int>(rng() % 3), other});
  } else {
    groups.push_back({2 + static_cast<int>(rng() % 4), testing::dense_shape(hidden, heads, kv)});
  }
  c.model = testing::small_model(groups, pick({32000, 64000}));
  const int gpus = interleaved ? pick({2, 4}) : pick({1, 2, 4, 8});
  c.cluster = testing::small_cluster(gpus, pick({2, 4, 8}));
  c.fake.budget_units = pick({60, 150, 400, 1000});
  c.fake.compute = 0.5 + (rng() % 100) / 100.0;
  c.fake.inefficiency = (rng() % 30) / 100.0;
  c.fake.tp_comm = (rng() % 10) / 100.0;
  c.fake.trans = rng() % 3 == 0 ? 0.0 : (rng() % 8) / 100.0;
  c.fake.p2p = (rng() % 8) / 100.0;
  c.fake.p2p_by_layout = !interleaved && rng() % 2;
  c.fake.weight_units = pick({4, 16, 32});
  c.fake.act_units = pick({1, 2, 3});
  c.fake.emb_units = pick({4, 12, 24});
  c.opt.seq = 2048;
  c.opt.global_batch = pick({4, 8, 16});
  c.opt.memory_step_mib = c.fake.unit_mib;
  c.opt.top_k = 2;
  c.opt.schedules = {interleaved ? Schedule::kInterleaved : Schedule::k1F1B};
  c.opt.long_seq = 1024;  // let cp and wide Ulysses into the candidate pool
  // Most cases are pipelines: without the restriction pp = 1 (no bubble) wins under the fake.
  if (!interleaved && gpus >= 2 && c.model.num_layers() >= 2 && rng() % 5 < 3) {
    c.opt.pp_degrees = {2};
    if (gpus >= 4 && c.model.num_layers() >= 4 && rng() % 2) c.opt.pp_degrees.push_back(4);
  }
  const std::uint64_t sub = seed * 7919;
  const ClusterSpec cl = c.cluster;
  SearchOptions full = c.opt;
  const int k = static_cast<int>(2 + rng() % 3);
  c.space.layer = [cl, full, sub, k](const LayerShape& sh, int S, int pmb) {
    planner::RuleLog log;
    auto all = planner::layer_candidates(sh, cl, full, S, pmb, log);
    const std::uint64_t h = testing::mix(sub, testing::mix(S * 1000 + pmb, sh.ffn + sh.kv_heads));
    if (h % 2) return testing::subset(all, k, h);
    // Half the time: two layouts with a few ZeRO / recompute variants each, where memory pressure
    // makes layers of one stage differ.
    std::vector<LayoutKey> layouts;
    for (const auto& s : all)
      if (std::find(layouts.begin(), layouts.end(), layout_key(s)) == layouts.end())
        layouts.push_back(layout_key(s));
    std::vector<LayerStrategy> out;
    for (const auto& l : testing::subset(layouts, 2, h + 1)) {
      std::vector<LayerStrategy> same;
      for (const auto& s : all)
        if (layout_key(s) == l) same.push_back(s);
      for (const auto& s : testing::subset(same, 2, h + 2)) out.push_back(s);
    }
    return out;
  };
  c.space.embedding = [cl, full, sub](int S, int pmb) {
    planner::RuleLog log;
    auto all = planner::embedding_candidates(ModelSpec{}, cl, full, S, pmb, log);
    return testing::subset(all, 3, testing::mix(sub + 1, S * 1000 + pmb));
  };
  c.opt.layer_space = c.space.layer;
  c.opt.embedding_space = c.space.embedding;
  c.text = "seed " + std::to_string(seed) + ": layers " + std::to_string(c.model.num_layers()) + ", gpus " +
           std::to_string(gpus) + ", budget " + std::to_string(c.fake.budget_units) + ", batch " +
           std::to_string(c.opt.global_batch);
  return c;
}

// The best layer-wise plan and the best uniform plan (the search also reports a uniform plan, whose
// embedding follows its layers and so may lie outside the embedding candidates).
std::pair<double, double> brute_force(const Case& c, const FakeCostModel& cm, bool uneven = true) {
  planner::RuleLog log;
  double best = kInf, uniform = kInf;
  for (const PipelineConfig& cfg : planner::pipeline_configs(c.model, c.cluster, c.opt, log)) {
    best = std::min(best, testing::brute_force_config(c.model, c.cluster, cm, c.opt, cfg, c.space, uneven));
    uniform = std::min(uniform, testing::brute_force_uniform(c.model, c.cluster, cm, c.opt, cfg, c.space));
  }
  return {best, uniform};
}

struct Found {
  int feasible = 0, pipelined = 0, uneven = 0, mixed = 0;
};

void check_case(const Case& c, Found* found) {
  SCOPED_TRACE(c.text);
  const FakeCostModel cm(c.fake);
  auto r = search(c.model, c.cluster, cm, c.opt);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto [layerwise, uniform] = brute_force(c, cm);
  if (std::isfinite(uniform)) {
    ASSERT_TRUE(r->best_uniform.has_value());
    EXPECT_NEAR(r->best_uniform->predicted.step_time_s, uniform, 1e-9 * uniform);
    EXPECT_TRUE(r->best_uniform->uniform());
  } else {
    EXPECT_FALSE(r->best_uniform.has_value());
  }
  const double want = std::min(layerwise, uniform);
  if (!std::isfinite(want)) {
    EXPECT_TRUE(r->top.empty());
    EXPECT_TRUE(r->closest.has_value());
    return;
  }
  ASSERT_FALSE(r->top.empty()) << "brute force found J = " << want;
  ++found->feasible;
  const double got = r->top.front().predicted.step_time_s;
  // The DP works in float: allow 1e-5 relative; the search can never beat the true optimum.
  EXPECT_NEAR(got, want, 1e-5 * want);
  EXPECT_GE(got, want * (1 - 1e-9));
  // The reported plan is valid, fits, and its estimate is what it reports.
  const Plan& p = r->top.front();
  EXPECT_TRUE(validate(p).ok());
  const Estimate e = estimate(p, cm);
  EXPECT_TRUE(e.fits);
  EXPECT_DOUBLE_EQ(e.step_time.value(), got);
  if (p.train.pp > 1) ++found->pipelined;
  for (const Stage& st : p.stages)
    if (st.num_layers() != p.stages.front().num_layers()) {
      ++found->uneven;
      break;
    }
  if (!p.uniform()) ++found->mixed;
}

TEST(SearchBruteForce, RandomPipelinesMatchEnumeration) {
  Found found;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) check_case(random_case(seed, false), &found);
  // The generator must exercise the feasible path, pipelines, uneven stages and mixed strategies,
  // not only "nothing fits".
  EXPECT_GT(found.feasible, 90);
  EXPECT_GT(found.pipelined, 10);
  EXPECT_GT(found.uneven, 5);
  EXPECT_GT(found.mixed, 10);
  std::printf("feasible %d, pipelined %d, uneven %d, mixed strategies %d of 200\n", found.feasible,
              found.pipelined, found.uneven, found.mixed);
}

TEST(SearchBruteForce, RandomInterleavedMatchEnumeration) {
  Found found;
  for (std::uint64_t seed = 1001; seed <= 1060; ++seed) check_case(random_case(seed, true), &found);
  EXPECT_GT(found.feasible, 20);
}

// Fully independent of the decomposition used above: enumerate whole plans and cost each with
// estimate() (the fake's step time is the objective), on tiny spaces.
TEST(SearchBruteForce, TinyCasesMatchEstimateOfEveryPlan) {
  int found = 0;
  for (std::uint64_t seed = 5001; seed <= 5040; ++seed) {
    Case c = random_case(seed, false);
    SCOPED_TRACE(c.text);
    const FakeCostModel cm(c.fake);
    planner::RuleLog log;
    double best = kInf;
    for (const PipelineConfig& cfg : planner::pipeline_configs(c.model, c.cluster, c.opt, log)) {
      const int L = c.model.num_layers(), P = cfg.stages();
      const int S = c.cluster.total_gpus() / cfg.pp, pmb = c.opt.global_batch / cfg.m;
      std::vector<std::vector<LayerStrategy>> cands(L);
      bool ok = true;
      for (int l = 0; l < L; ++l) ok = ok && !(cands[l] = c.space.layer(c.model.layer(l), S, pmb)).empty();
      if (!ok) continue;
      for (const LayerStrategy& e : c.space.embedding(S, pmb)) {
        std::vector<int> cur;
        testing::compositions(L, P, cur, [&](const std::vector<int>& sizes) {
          std::vector<int> pick(L, 0);
          while (true) {
            Plan p;
            p.model = c.model;
            p.cluster = c.cluster;
            p.train = cfg.train(c.opt);
            p.embedding = e;
            int next = 0;
            for (int n : sizes) {
              Stage st;
              st.first_layer = next;
              for (int i = 0; i < n; ++i) st.layers.push_back(cands[next + i][pick[next + i]]);
              next += n;
              p.stages.push_back(st);
            }
            const Estimate est = estimate(p, cm);
            if (est.fits) best = std::min(best, est.step_time.value());
            int i = 0;
            while (i < L && ++pick[i] == static_cast<int>(cands[i].size())) pick[i++] = 0;
            if (i == L) break;
          }
        });
      }
    }
    best = std::min(best, brute_force(c, cm).second);
    auto r = search(c.model, c.cluster, cm, c.opt);
    ASSERT_TRUE(r.ok());
    if (!std::isfinite(best)) {
      EXPECT_TRUE(r->top.empty());
      continue;
    }
    ++found;
    ASSERT_FALSE(r->top.empty());
    EXPECT_NEAR(r->top.front().predicted.step_time_s, best, 1e-5 * best);
  }
  EXPECT_GT(found, 20);
}

// Even stages only (SearchOptions::uneven_stages = false) is the optimum over even partitions.
TEST(SearchBruteForce, EvenStagesMatchEnumeration) {
  for (std::uint64_t seed = 7001; seed <= 7040; ++seed) {
    Case c = random_case(seed, false);
    c.opt.uneven_stages = false;
    SCOPED_TRACE(c.text);
    const FakeCostModel cm(c.fake);
    const auto [even, uniform] = brute_force(c, cm, false);
    const double want = std::min(even, uniform);
    auto r = search(c.model, c.cluster, cm, c.opt);
    ASSERT_TRUE(r.ok());
    if (!std::isfinite(want)) {
      EXPECT_TRUE(r->top.empty());
      continue;
    }
    ASSERT_FALSE(r->top.empty());
    EXPECT_NEAR(r->top.front().predicted.step_time_s, want, 1e-5 * want);
    for (const Plan& p : r->top) {
      std::vector<int> sizes;
      for (const auto& st : p.stages) sizes.push_back(st.num_layers());
      EXPECT_EQ(sizes, even_stage_sizes(c.model.num_layers(), static_cast<int>(p.stages.size())));
    }
  }
}

}  // namespace
}  // namespace weft
