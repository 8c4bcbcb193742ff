// weft's search in Galvatron's space, under Galvatron's own cost model, on its four published
// cases: never slower than the plan Galvatron's search chose, and the plans export to strategy
// files that import back to the same plan.
#include <gtest/gtest.h>

#include "test_util.h"
#include "weft/galvatron/search.h"
#include "weft/galvatron/setup.h"
#include "weft/galvatron/strategy.h"
#include "weft/search/strategy_space.h"

namespace weft::galvatron {
namespace {

using testing::ok;

TEST(GalvatronSpaceSearch, NeverSlowerThanGalvatronsChoice) {
  const ModelConfig mc = ok(read_model_yaml(testing::reference_dir() + "/llama2-7b.yaml"));
  const ModelSpec model = ok(to_model_spec(mc));
  for (const testing::PublishedCase& c : testing::published_cases()) {
    SCOPED_TRACE(c.name);
    const ClusterSpec cluster = testing::cluster(c.nodes, c.memory_gb);
    const GalvatronCostModel cm(ok(load_profiles_for(testing::reference_dir(), mc.model_size, cluster)), mc.hidden_size);
    SearchOptions opt;
    opt.seq = 2048;
    opt.global_batch = 64;
    const GalvatronSpaceResult r = ok(search_galvatron_space(model, cluster, cm, opt));
    // Galvatron prints 4 digits: its time is within 0.0005 s of the printed one.
    EXPECT_LE(r.estimate.iteration_s, c.iteration_s + 0.0005);
    EXPECT_TRUE(r.estimate.fits);
    EXPECT_EQ(r.tasks.size(), 9u);  // tp_only x {1,2,4,8}, sp_only, tp_with_sp x {1,2,4,8}
    // Galvatron's space: 1F1B, even stages, the global batch kept.
    EXPECT_EQ(r.best.train.schedule, Schedule::k1F1B);
    EXPECT_EQ(r.best.train.global_batch, 64);
    for (const Stage& s : r.best.stages) EXPECT_EQ(s.num_layers(), 32 / r.best.train.pp);
    // It exports, and the strategy imports back to the same plan.
    const Json strategy = ok(export_strategy(r.best));
    Plan back = ok(import_strategy(strategy, model, cluster, 2048));
    Plan best = r.best;
    for (Plan* p : {&back, &best}) {
      p->predicted = {};
      for (Stage& s : p->stages) s.predicted = {};
    }
    EXPECT_EQ(back, best);
    // Re-costing the imported strategy gives the same time.
    EXPECT_NEAR(ok(cm.estimate_plan(back)).iteration_s, r.estimate.iteration_s, 1e-12);
  }
}

// Galvatron's space as a restriction of weft's (restrict_to_galvatron): its strategy set on layers
// and the embedding, counted under "galvatron-space"; 1F1B only; even stages.
TEST(GalvatronSpaceSearch, RestrictsTheSpace) {
  const ModelSpec model = ok(to_model_spec(ok(read_model_yaml(testing::reference_dir() + "/llama2-7b.yaml"))));
  const LayerShape& sh = model.groups[0].shape;
  SearchOptions o;
  o.seq = 65536;
  o.global_batch = 16;
  ASSERT_TRUE(restrict_to_galvatron(o).ok());
  EXPECT_EQ(o.schedules, std::vector<Schedule>{Schedule::k1F1B});
  EXPECT_FALSE(o.uneven_stages);
  ASSERT_TRUE(restrict_to_galvatron(o).ok());  // once is enough: the same restriction
  EXPECT_EQ(o.restrictions.size(), 4u);
  const ClusterSpec cluster = testing::cluster(1, 80);
  planner::RuleLog log;
  auto c = planner::layer_candidates(sh, cluster, o, 8, 16, log);
  ASSERT_FALSE(c.empty());
  for (const auto& s : c) {
    EXPECT_NE(s.zero, 1);
    EXPECT_NE(s.recompute, Recompute::kSelective);
    EXPECT_FALSE(s.tp > 1 && s.ulysses > 1);
    EXPECT_EQ(s.cp, 1);
  }
  EXPECT_GT(log.count(planner::kRuleGalvatronSpace), 0);
  // A schedule list without 1F1B is refused, naming the schedule.
  SearchOptions g;
  g.schedules = {Schedule::kGpipe};
  const Status refused = restrict_to_galvatron(g);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("no gpipe schedule"), std::string::npos) << refused.error().message;
}

TEST(GalvatronSetup, CostModelsFromAProfileFolder) {
  const std::string yaml = testing::reference_dir() + "/llama2-7b.yaml";
  const ModelSpec model = ok(to_model_spec(ok(read_model_yaml(yaml))));
  const ClusterSpec cluster = testing::cluster(1, 36);
  auto g = ok(make_profile_cost_model("galvatron", testing::reference_dir(), yaml, model, cluster));
  EXPECT_EQ(g.cost->name(), "galvatron");
  EXPECT_NE(dynamic_cast<const GalvatronCostModel*>(g.cost.get()), nullptr);
  auto none = make_profile_cost_model("galvatron", "", yaml, model, cluster);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("--galvatron-profiles: required"), std::string::npos);
  auto four = make_profile_cost_model("galvatron", testing::reference_dir(), yaml, model, testing::cluster(4, 36));
  ASSERT_FALSE(four.ok());
  EXPECT_NE(four.error().message.find("allreduce_bandwidth_4nodes_8gpus_per_node.json"), std::string::npos);
  auto w = ok(make_profile_cost_model("weft", testing::reference_dir(), yaml, model, cluster));
  EXPECT_EQ(w.cost->name(), "weft");
  EXPECT_EQ(dynamic_cast<const GalvatronCostModel*>(w.cost.get()), nullptr);
}

}  // namespace
}  // namespace weft::galvatron
