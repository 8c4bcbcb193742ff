// Plans from weft's own search train (a plan is a promise): for a handful of real models and
// single-node clusters the search (restricted to what weft train runs, as `weft plan` does by
// default) picks its best plan; the plan is scaled down to tiny shapes with its structure kept
// (the stages and their layers, every layer's tp, sp, Ulysses, dp, ZeRO and recomputation, the
// embedding's strategy, the schedule and micro-batch count) and trained on as many processes as it
// has ranks, against one process on the same model, batch and seed.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>
#include <optional>

#include "rt_util.h"
#include "weft/cost/analytic.h"
#include "weft/plan/runtime_support.h"
#include "weft/search/search.h"
#include "weft/spec/presets.h"

namespace weft::rttest {
namespace {

struct Case {
  const char* model;
  const char* cluster;
  int gpus;
  int seq;
  int global_batch;
  // As `weft plan --schedule S --pp P` (none: every schedule and degree the search considers).
  std::optional<Schedule> schedule = std::nullopt;
  int pp = 0;
};

// The search's best plan for the case, as `weft plan` makes it for weft train.
Plan planned(const Case& c) {
  auto m = load_model(c.model);
  EXPECT_TRUE(m.ok());
  auto cl = load_cluster(c.cluster);
  EXPECT_TRUE(cl.ok());
  ClusterSpec cluster = *cl;
  cluster.nodes = 1;
  cluster.gpus_per_node = c.gpus;
  SearchOptions o;
  o.seq = c.seq;
  o.global_batch = c.global_batch;
  if (c.schedule) o.schedules = {*c.schedule};
  if (c.pp > 0) o.pp_degrees = {c.pp};
  EXPECT_TRUE(restrict_to_runtime(o).ok());
  const AnalyticCostModel cm{AnalyticOptions{}};
  auto r = search(*m, cluster, cm, o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  EXPECT_FALSE(r->top.empty()) << c.model << " fits nowhere";
  return r->top.front();
}

// The plan's structure on a tiny model of the same kind and depth: head counts kept (every tp and
// Ulysses degree divides them as in the real model), head width 4, FFN 4 x hidden, vocabulary 96,
// sequence 16 (divisible by any tp x Ulysses of 8 ranks); micro-batches of the largest dp's size,
// at most 4 of them.
Plan scaled_down(const Plan& real) {
  Plan p = real;
  ModelSpec& m = p.model;
  m.name = "tiny-" + real.model.name;
  m.vocab = 96;
  for (LayerGroup& g : m.groups) {
    g.shape.head_dim = 4;
    g.shape.hidden = static_cast<int64_t>(g.shape.heads) * 4;
    g.shape.ffn = 4 * g.shape.hidden;
  }
  m.hidden = m.groups[0].shape.hidden;
  if (m.max_seq > 0) m.max_seq = 64;
  p.train.seq = 16;
  int dp = p.embedding.dp;
  for (const Stage& s : p.stages)
    for (const LayerStrategy& l : s.layers) dp = std::lcm(dp, l.dp);
  p.train.micro_batches = std::min(real.train.micro_batches, 4);
  p.train.global_batch = p.train.micro_batches * dp;
  p.train.dp_shares.clear();
  p.devices.reset();
  p.cluster = cpu_cluster(real.world_size());
  p.predicted = {};
  for (Stage& s : p.stages) s.predicted = {};
  return p;
}

// "pp 2 m 8: [tp4sp/u1/dp1/z0 x12, tp2sp/u2/dp1/z1 x8] [...]": each stage's runs of equal layers.
std::string describe(const Plan& p) {
  auto label = [](const LayerStrategy& l) {
    return "tp" + std::to_string(l.tp) + (l.sp ? "sp" : "") + "/u" + std::to_string(l.ulysses) + "/dp" +
           std::to_string(l.dp) + "/z" + std::to_string(l.zero) +
           (l.recompute == Recompute::kFull ? "/rc" : l.recompute == Recompute::kSelective ? "/sel" : "");
  };
  std::string s = "pp " + std::to_string(p.train.pp) + " " + to_string(p.train.schedule) +
                  (p.train.vp > 1 ? " vp " + std::to_string(p.train.vp) : "") + " m " +
                  std::to_string(p.train.micro_batches) + ":";
  for (const Stage& st : p.stages) {
    s += " [";
    for (size_t i = 0; i < st.layers.size();) {
      size_t j = i;
      while (j < st.layers.size() && st.layers[j] == st.layers[i]) ++j;
      s += (i ? ", " : "") + label(st.layers[i]) + " x" + std::to_string(j - i);
      i = j;
    }
    s += "]";
  }
  return s;
}

class PlannedPlans : public ::testing::TestWithParam<Case> {};

TEST_P(PlannedPlans, TrainLikeOneProcess) {
  const Case c = GetParam();
  const Plan real = planned(c);
  ASSERT_TRUE(runtime_supports(real).ok()) << runtime_supports(real).error().message;
  const Plan tiny = scaled_down(real);
  ASSERT_TRUE(validate(tiny).ok()) << validate(tiny).error().message;
  const std::string dir = temp_dir(std::string("planned_") + c.model);
  constexpr int kSteps = 2;
  const RunResult got = train_plan(tiny, dir, "planned", kSteps);
  const RunResult ref = train_plan(reference_of(tiny), dir, "one", kSteps);
  ASSERT_EQ(got.status, 0) << describe(real) << "\n" << got.output;
  ASSERT_EQ(ref.status, 0) << ref.output;
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps)) << got.output;
  ASSERT_EQ(ref.losses.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-5 * ref.losses[i]) << describe(real) << " step " << i + 1;
    EXPECT_NEAR(got.grad_norms[i], ref.grad_norms[i], 1e-4 * ref.grad_norms[i]) << describe(real) << " step " << i + 1;
  }
  // Parameters: these plans are deeper and wider than the parity matrix's (up to 40 layers, 8 ranks,
  // other reduction orders), and AdamW's first steps move an element by about lr whatever its
  // gradient's size, so a gradient that is rounding noise in both runs moves its element by a
  // fraction of lr (3e-3 here). Which elements those are depends on the machine's BLAS kernels
  // (llama-2-7b's plan: one element 4.4e-4 apart on one machine, none beyond 3e-4 on another), so
  // the bounds are on how many elements move more than a tenth of lr (2 plus 1 in 100,000) and on
  // the worst (half of lr): both far below what a wrong gradient does (a step of lr on most
  // elements, besides the losses and gradient norms above).
  const runtime::ParamsFile got_params = read_params(dir + "/planned.params"), ref_params = read_params(dir + "/one.params");
  auto d = runtime::compare_params(got_params, ref_params);
  ASSERT_TRUE(d.ok()) << d.error().message;
  int64_t elements = 0, beyond = 0;
  ASSERT_EQ(got_params.params.size(), ref_params.params.size());
  for (size_t k = 0; k < got_params.params.size(); ++k)
    for (size_t i = 0; i < got_params.params[k].data.size(); ++i, ++elements)
      if (std::fabs(got_params.params[k].data[i] - ref_params.params[k].data[i]) > 3e-4) ++beyond;
  EXPECT_LE(beyond, 2 + elements / 100000) << beyond << " of " << elements << " elements more than 3e-4 apart";
  EXPECT_LE(d->max_abs, 1.5e-3) << d->worst;
  std::printf("%s on %d x %s, seq %d: %s; losses within %.1e, parameters within %.1e (%s; %lld of %lld beyond 3e-4)\n",
              c.model, c.gpus, c.cluster, c.seq, describe(real).c_str(),
              std::fabs(got.losses.back() - ref.losses.back()) / ref.losses.back(), d->max_abs, d->worst.c_str(),
              static_cast<long long>(beyond), static_cast<long long>(elements));
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Searched, PlannedPlans,
                         ::testing::Values(Case{"llama-2-7b", "a100-80gb", 8, 4096, 512},
                                           Case{"gpt3-1.3b", "a100-40gb", 4, 2048, 256},
                                           Case{"llama-2-13b", "a100-40gb", 8, 4096, 256},
                                           Case{"mistral-7b", "h100-80gb", 8, 32768, 64},
                                           Case{"qwen2-7b", "h100-80gb", 8, 8192, 128},
                                           // The schedules the search's best plans above do not pick.
                                           Case{"llama-2-13b", "a100-40gb", 8, 4096, 256, Schedule::kZbH1, 4},
                                           Case{"gpt3-1.3b", "a100-40gb", 4, 2048, 256, Schedule::kInterleaved, 2},
                                           Case{"gpt3-1.3b", "a100-40gb", 4, 2048, 256, Schedule::kZbV, 2}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = i.param.model;
                           if (i.param.schedule) n += std::string("_") + to_string(*i.param.schedule);
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// The relied-on path end to end: `weft plan ... --out P` with --schedule zb-v, --schedule
// interleaved --vp 2, --cp 2 and --ulysses 2 writes a plan that `weft launch -n N -- weft train
// --plan P` trains, on a tiny model given as a weft model JSON (4 ranks of a100-80gb: the runtime
// runs the plan's structure on the CPU).
TEST(PlannedCli, PlansWrittenWithOutTrainUnderLaunch) {
  const std::string dir = temp_dir("planned_cli");
  ModelSpec m = tiny_llama(8);
  m.name = "tiny-cli";
  {
    std::ofstream f(dir + "/model.json");
    f << to_json(m).dump(2);
  }
  struct Want {
    std::string name, flags, field;
    Json value;
  };
  const std::vector<Want> wants{
      {"zbv", " --pp 2 --schedule zb-v", "/train/schedule", "zb-v"},
      {"interleaved", " --pp 2 --schedule interleaved --vp 2", "/train/vp", 2},
      {"cp", " --pp 1 --cp 2", "/stages/0/layers/0/cp", 2},
      {"ulysses", " --pp 1 --ulysses 2", "/stages/0/layers/0/ulysses", 2},
  };
  for (const Want& w : wants) {
    const std::string plan = dir + "/" + w.name + ".json";
    const RunResult planned = run(std::string(WEFT_CLI) + " plan --model " + dir + "/model.json --cluster a100-80gb " +
                                  "--gpus 4 --seq 16 --global-batch 8" + w.flags + " --out " + plan);
    ASSERT_EQ(planned.status, 0) << w.name << "\n" << planned.output;
    auto p = read_plan_file(plan);
    ASSERT_TRUE(p.ok()) << w.name << ": " << p.error().message;
    EXPECT_EQ(to_json(*p).at(Json::json_pointer(w.field)), w.value) << w.name;
    const RunResult trained = run(std::string(WEFT_CLI) + " launch -n 4 -- " + WEFT_CLI + train_flags(2) +
                                  " --plan " + plan);
    ASSERT_EQ(trained.status, 0) << w.name << "\n" << trained.output;
    ASSERT_EQ(trained.losses.size(), 2u) << w.name << "\n" << trained.output;
    EXPECT_TRUE(std::isfinite(trained.losses.back())) << w.name;
  }
  std::filesystem::remove_all(dir);
}

// The relied-on MoE path: `weft estimate --model <Mixtral-style config.json> --ep 2 ... --out P`
// writes a plan with expert parallelism that `weft launch -n 2 -- weft train --plan P --model
// <config.json>` trains, each step reporting its MoE layers' load imbalance.
TEST(PlannedCli, MoeEstimateWithEpTrainsUnderLaunch) {
  const std::string dir = temp_dir("planned_moe");
  const std::string cfg = dir + "/config.json";
  {
    std::ofstream f(cfg);
    f << R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 64,
             "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
             "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "tie_word_embeddings": false, "router_aux_loss_coef": 0.02})";
  }
  const std::string plan = dir + "/plan.json";
  const RunResult est = run(std::string(WEFT_CLI) + " estimate --model " + cfg +
                            " --cluster a100-80gb --gpus 2 --seq 16 --global-batch 4 --tp 1 --pp 1 --micro-batch 1 --ep 2 --out " + plan);
  ASSERT_EQ(est.status, 0) << est.output;
  auto p = read_plan_file(plan);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->stages[0].layers[0].ep, 2);
  EXPECT_EQ(p->model.layer(0).moe.aux_loss_coef, 0.02);
  const RunResult trained =
      run(std::string(WEFT_CLI) + " launch -n 2 -- " + WEFT_CLI + train_flags(2) + " --plan " + plan + " --model " + cfg);
  ASSERT_EQ(trained.status, 0) << trained.output;
  ASSERT_EQ(trained.losses.size(), 2u) << trained.output;
  EXPECT_TRUE(std::isfinite(trained.losses.back()));
  EXPECT_NE(trained.output.find("\"imbalance\""), std::string::npos) << trained.output;
  std::filesystem::remove_all(dir);
}

// `weft moe-placement` on a synthetic skewed trace (each sample preferring one ep rank's experts)
// for a plan of 4 ranks on two nodes of 2: the inter-node bytes it prints fall, and the placement it
// writes trains under `weft train --moe-placement`.
TEST(PlannedCli, MoePlacementFromASyntheticTraceTrains) {
  const std::string dir = temp_dir("planned_placement");
  ModelSpec m = tiny_llama(2);
  m.name = "tiny-moe-cli";
  m.groups[0].shape.ffn = 0;
  m.groups[0].shape.moe = MoeSpec{8, 2, 16, 0};
  Plan p = uniform(m, 4, 1, strat(1, 4), {}, Schedule::k1F1B, 16, 2);
  for (LayerStrategy& s : p.stages[0].layers) s.ep = 4;
  p.cluster.nodes = 2;
  p.cluster.gpus_per_node = 2;
  p.cluster.inter = LinkSpec{1, 10};
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  const std::string plan = write_plan(p, dir, "plan");
  const RunResult placed = run(std::string(WEFT_CLI) + " moe-placement --plan " + plan +
                               " --synthetic 0.9 --steps 2 --format json --out " + dir + "/placement.json");
  ASSERT_EQ(placed.status, 0) << placed.output;
  const Json j = Json::parse(placed.output);
  ASSERT_EQ(j.at("steps").size(), 2u);
  for (const Json& s : j.at("steps")) {
    EXPECT_LT(s.at("inter_node_bytes_after").get<double>(), s.at("inter_node_bytes_before").get<double>()) << s.dump();
    EXPECT_LT(s.at("step_s_after").get<double>(), s.at("step_s_before").get<double>()) << s.dump();
  }
  const RunResult trained = run(std::string(WEFT_CLI) + " launch -n 4 -- " + WEFT_CLI + train_flags(2) + " --plan " +
                                plan + " --moe-placement " + dir + "/placement.json");
  ASSERT_EQ(trained.status, 0) << trained.output;
  ASSERT_EQ(trained.losses.size(), 2u) << trained.output;
  // A placement for another batch is refused, naming the numbers.
  p.train.global_batch = 8;
  const std::string other = write_plan(p, dir, "other");
  const RunResult refused = run(std::string(WEFT_CLI) + " launch -n 4 -- " + WEFT_CLI + train_flags(1) + " --plan " +
                                other + " --moe-placement " + dir + "/placement.json");
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.output.find("global batch 16 in 2 micro-batches, the plan's is 8 in 2"), std::string::npos)
      << refused.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weft::rttest
