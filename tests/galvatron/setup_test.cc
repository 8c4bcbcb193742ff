// The cost-model factory (weft/galvatron/setup.h): which model each combination of parsed inputs
// builds, and the search and estimate that follow the model built. Reads Galvatron's published
// Llama-2-7B profiles (data/reference/galvatron).
#include <gtest/gtest.h>

#include <string>

#include "weft/calibration/calibrated.h"
#include "weft/galvatron/calibrate.h"
#include "weft/galvatron/search.h"
#include "weft/galvatron/setup.h"
#include "weft/search/uniform.h"
#include "weft/spec/presets.h"

namespace weft::galvatron {
namespace {

const std::string kDir = std::string(WEFT_DATA_DIR) + "/reference/galvatron";

struct Specs {
  ModelConfig yaml = *read_model_yaml(kDir + "/llama2-7b.yaml");
  ModelSpec model = *to_model_spec(yaml);
  ClusterSpec cluster = *load_cluster("a100-80gb");  // 1 node of 8, as the profiles
  Profiles profiles = *load_profiles_for(kDir, yaml.model_size, cluster);
};

// Llama-2-7B, seq 2048, global batch 64, pp 2, 8 micro-batches, tp2 dp2 on every layer.
Plan plan_for(const Specs& s) {
  TrainSettings t;
  t.seq = 2048;
  t.global_batch = 64;
  t.micro_batches = 8;
  t.pp = 2;
  const LayerStrategy l{.tp = 2, .dp = 2};
  auto p = make_uniform_plan(s.model, s.cluster, t, l, embedding_for(l));
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
  return *p;
}

TEST(CostModelFactory, WeftsAnalyticModelWithoutProfiles) {
  const Specs s;
  CostModelInputs in;
  in.analytic = framework_options(Framework::kTorchtitan);
  auto setup = make_cost_model(in, s.model, s.cluster);
  ASSERT_TRUE(setup.ok()) << setup.error().message;
  EXPECT_EQ(setup->cost->name(), "weft");
  EXPECT_EQ(setup->cost->source(), "analytic, torchtitan");
  EXPECT_EQ(setup->galvatron, nullptr);
  EXPECT_EQ(setup->cluster, s.cluster);
}

TEST(CostModelFactory, NoEstimateInADtypeTheGpuDoesNotRun) {
  const Specs s;
  auto setup = make_cost_model(CostModelInputs{}, s.model, s.cluster);
  ASSERT_TRUE(setup.ok()) << setup.error().message;
  Plan p = plan_for(s);
  ASSERT_TRUE(estimate_with(*setup, p).ok());
  p.train.dtype = DType::kFp8;  // an A100 has no fp8 tensor cores
  auto e = estimate_with(*setup, p);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, "train.dtype: " + s.cluster.gpu.name + " has no fp8 (it runs fp32, tf32, bf16, fp16)");
}

TEST(CostModelFactory, MeasuredProfilesCalibrateWeftsModel) {
  const Specs s;
  CostModelInputs in;
  in.hardware = *to_hardware_profile(s.profiles, s.cluster);
  auto setup = make_cost_model(in, s.model, s.cluster);
  ASSERT_TRUE(setup.ok()) << setup.error().message;
  const auto* cal = dynamic_cast<const CalibratedCostModel*>(setup->cost.get());
  ASSERT_NE(cal, nullptr);
  EXPECT_EQ(cal->hardware(), in.hardware);
  EXPECT_FALSE(cal->model_profile().has_value());
  EXPECT_EQ(setup->galvatron, nullptr);
  EXPECT_EQ(setup->cluster, s.cluster);
}

TEST(CostModelFactory, GalvatronsProfiles) {
  const Specs s;
  CostModelInputs in;
  in.kind = CostModelKind::kGalvatron;
  auto none = make_cost_model(in, s.model, s.cluster);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().kind, ErrorKind::kBadInput);
  EXPECT_EQ(none.error().message, "--galvatron-profiles: required with --cost-model galvatron");

  in.galvatron = s.profiles;
  auto g = make_cost_model(in, s.model, s.cluster);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->cost->name(), "galvatron");
  ASSERT_NE(g->galvatron, nullptr);
  EXPECT_EQ(static_cast<const CostModel*>(g->galvatron), g->cost.get());
  EXPECT_EQ(g->galvatron->hidden_size(), s.model.hidden);
  in.galvatron_hidden = 2048;
  EXPECT_EQ(make_cost_model(in, s.model, s.cluster)->galvatron->hidden_size(), 2048);

  // weft's model calibrated from them plans on the measured links (make_calibrated_model).
  in.kind = CostModelKind::kWeft;
  auto w = make_cost_model(in, s.model, s.cluster);
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ(w->cost->name(), "weft");
  EXPECT_EQ(w->galvatron, nullptr);
  EXPECT_EQ(w->cluster, make_calibrated_model(s.profiles, s.model, s.cluster)->cluster);
}

TEST(CostModelFactory, KindNames) {
  EXPECT_EQ(*cost_model_kind_from_string("weft"), CostModelKind::kWeft);
  EXPECT_EQ(*cost_model_kind_from_string("galvatron"), CostModelKind::kGalvatron);
  EXPECT_STREQ(to_string(CostModelKind::kGalvatron), "galvatron");
  auto bad = cost_model_kind_from_string("vtrain");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "--cost-model: expected weft or galvatron, got \"vtrain\"");
}

TEST(CostModelFactory, EstimateAndSearchFollowTheModelBuilt) {
  const Specs s;
  const Plan p = plan_for(s);
  CostModelInputs in;
  auto weft = make_cost_model(in, s.model, s.cluster);
  ASSERT_TRUE(weft.ok());
  const Estimate ew = *estimate_with(*weft, p);
  EXPECT_EQ(ew.step_time.value(), estimate(p, *weft->cost).step_time.value());
  EXPECT_EQ(*estimate_json_with(*weft, p, ew), to_json(ew));

  in.kind = CostModelKind::kGalvatron;
  in.galvatron = s.profiles;
  auto g = make_cost_model(in, s.model, s.cluster);
  ASSERT_TRUE(g.ok());
  const Estimate eg = *estimate_with(*g, p);  // Galvatron's exact accounting
  EXPECT_EQ(eg.step_time.value(), g->galvatron->estimate(p)->step_time.value());
  EXPECT_EQ(*estimate_json_with(*g, p, eg), *galvatron_estimate_json(*g->galvatron, p));

  // In Galvatron's space its task loop runs: one rule-log entry per task.
  SearchOptions opt;
  opt.seq = 2048;
  opt.global_batch = 64;
  opt.pp_degrees = {2};
  auto loop = search_with(*g, s.model, s.cluster, opt, true);
  ASSERT_TRUE(loop.ok()) << loop.error().message;
  ASSERT_FALSE(loop->stats.rules.empty());
  EXPECT_EQ(loop->stats.rules.front().first.rfind("galvatron task ", 0), 0u);
  auto plain = search_with(*g, s.model, s.cluster, opt, false);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  for (const auto& [name, count] : plain->stats.rules) EXPECT_EQ(name.rfind("galvatron task ", 0), std::string::npos);
}

}  // namespace
}  // namespace weft::galvatron
