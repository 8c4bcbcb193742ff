// `--memory-margin` (and `--moe-imbalance`) on `weft plan` and `weft estimate` (bin/weft/cmd_plan.cc,
// inputs.cc) driven through CLI11 in-process: the budget it leaves, the room the tables print, and its errors (exit
// code 2, naming the flag and the value). Budgets by hand (docs/cost-model.md §5.4): an A100 of
// 80 GiB less the CUDA context (1024 MiB) and the GEMM workspaces (64 MiB) = 78.9375 GiB, less the
// margin.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_harness.h"
#include "weft/core/json.h"

namespace weft::cli {

namespace {

using test::CliRun;

CliRun run(const std::vector<std::string>& args) { return test::run_cli(register_plan_commands, args); }

// Llama-2-7B on 8 A100 80 GB, dp 8 under ZeRO-3, one sample of 4096 tokens per device.
const std::vector<std::string> kEstimate{"estimate", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "8",
                                         "--seq", "4096", "--global-batch", "8", "--micro-batch", "1", "--tp", "1",
                                         "--pp", "1", "--zero", "3"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

TEST(CliMemoryMargin, DefaultIsTwoAndAHalfPercentOfTheDevice) {
  CliRun r = run(kEstimate);
  ASSERT_EQ(r.code, 0) << r.err;
  // 80 - 1.0625 - 2 = 76.9375
  EXPECT_NE(r.out.find("memory budget          80.0 GiB - 1.1 reserves - 2.0 margin (2.5%) = 76.9 GiB\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" GiB room\n"), std::string::npos) << r.out;
  CliRun j = run(with(kEstimate, {"--format", "json"}));
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_NEAR(Json::parse(j.out)["memory_budget_gib"].get<double>(), 76.9375, 1e-9);
}

TEST(CliMemoryMargin, ShareOrAmountSetsTheBudget) {
  // 10 % of 80 GiB: 80 - 1.0625 - 8 = 70.9375
  CliRun pct = run(with(kEstimate, {"--memory-margin", "10%", "--format", "json"}));
  ASSERT_EQ(pct.code, 0) << pct.err;
  EXPECT_NEAR(Json::parse(pct.out)["memory_budget_gib"].get<double>(), 70.9375, 1e-9);
  // 3 GiB: 80 - 1.0625 - 3 = 75.9375
  CliRun gib = run(with(kEstimate, {"--memory-margin", "3GiB", "--format", "json"}));
  ASSERT_EQ(gib.code, 0) << gib.err;
  EXPECT_NEAR(Json::parse(gib.out)["memory_budget_gib"].get<double>(), 75.9375, 1e-9);
  CliRun table = run(with(kEstimate, {"--memory-margin", "3 GiB"}));
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("80.0 GiB - 1.1 reserves - 3.0 margin = 75.9 GiB\n"), std::string::npos)
      << table.out;
}

// A plan that fits under one margin and not under a larger one: weft estimate exits 3 and says why.
TEST(CliMemoryMargin, LargerMarginRefusesWhatNoLongerFits) {
  CliRun ok = run(with(kEstimate, {"--format", "json"}));
  ASSERT_EQ(ok.code, 0) << ok.err;
  const double peak = Json::parse(ok.out)["peak_memory_gib"].get<double>();
  // a margin that leaves 1 GiB less than the peak: 80 - 1.0625 - margin = peak - 1
  const double margin = 80 - 1.0625 - (peak - 1);
  ASSERT_GT(margin, 0);
  CliRun over = run(with(kEstimate, {"--memory-margin", std::to_string(margin) + "GiB"}));
  EXPECT_EQ(over.code, 3) << over.out;
  EXPECT_NE(over.out.find("1.0 GiB over  DOES NOT FIT"), std::string::npos) << over.out;
  EXPECT_NE(over.err.find("--memory-margin sets the margin"), std::string::npos) << over.err;
}

TEST(CliMemoryMargin, PlanPrintsRoomAndBudget) {
  CliRun r = run({"plan", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "8", "--seq", "4096",
                  "--global-batch", "64", "--memory-margin", "20%"});
  ASSERT_EQ(r.code, 0) << r.err;
  // 80 - 1.0625 - 16 = 62.9375
  EXPECT_NE(r.out.find("memory budget        80.0 GiB - 1.1 reserves - 16.0 margin (20%) = 62.9 GiB\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("room / GPU           "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak memory / GPU"), std::string::npos) << r.out;
}

TEST(CliMemoryMargin, BadValuesNameTheFlag) {
  const struct {
    std::string value, why;
  } bad[] = {{"10", "needs a unit"}, {"-5%", "must not be negative"}, {"95%", "below 90%"}, {"lots", "expected"},
             {"3TB", "unknown unit"}, {"100GiB", "leaves nothing of the 80.0 GiB device"}};
  for (const auto& b : bad) {
    for (const char* cmd : {"estimate", "plan"}) {
      std::vector<std::string> args = std::string(cmd) == "plan"
                                          ? std::vector<std::string>{"plan", "--model", "llama-2-7b", "--cluster",
                                                                     "a100-80gb", "--gpus", "8", "--seq", "4096",
                                                                     "--global-batch", "64"}
                                          : kEstimate;
      CliRun r = run(with(args, {"--memory-margin=" + b.value}));
      EXPECT_EQ(r.code, 2) << cmd << " " << b.value;
      EXPECT_NE(r.err.find("--memory-margin: "), std::string::npos) << r.err;
      EXPECT_NE(r.err.find(b.why), std::string::npos) << r.err;
      EXPECT_NE(r.err.find(b.value), std::string::npos) << r.err;
    }
  }
  // Galvatron's model keeps its own reserve.
  CliRun g = run(with(kEstimate, {"--memory-margin", "10%", "--cost-model", "galvatron"}));
  EXPECT_EQ(g.code, 2);
  EXPECT_NE(g.err.find("--memory-margin: sets the budget of weft's cost models"), std::string::npos) << g.err;
}

}  // namespace
}  // namespace weft::cli

namespace weft::cli {
namespace {

// `--moe-imbalance F` on `weft estimate` and `weft plan` (docs/cost-model.md §3.4): Mixtral 8x7B on
// 32 H100 with ep 8 (ZeRO-3) runs slower, holds more and writes train.moe_imbalance into its plan when its busiest
// expert rank takes 1.5x the mean; values below 1 and dense models are refused naming the flag.
TEST(CliMoeImbalance, SlowsTheStepAndReachesThePlan) {
  const std::vector<std::string> est{"estimate", "--model", "mixtral-8x7b", "--cluster", "h100-80gb", "--gpus", "32",
                                     "--seq", "4096", "--global-batch", "64", "--micro-batch", "1", "--tp", "2",
                                     "--sequence-parallel", "--pp", "1", "--ep", "8", "--etp", "1", "--zero", "3",
                                     "--format", "json"};
  CliRun even = test::run_cli(register_plan_commands, est);
  CliRun skew = test::run_cli(register_plan_commands, with(est, {"--moe-imbalance", "1.5"}));
  ASSERT_EQ(even.code, 0) << even.err;
  ASSERT_EQ(skew.code, 0) << skew.err;
  const Json a = Json::parse(even.out), b = Json::parse(skew.out);
  EXPECT_GT(b["step_time_s"].get<double>(), a["step_time_s"].get<double>());
  EXPECT_GT(b["peak_memory_gib"].get<double>(), a["peak_memory_gib"].get<double>() + 1);  // its routed activations
  // The all-to-alls' bytes grow 1.5x (their fixed latencies do not).
  EXPECT_GT(b["breakdown"]["ep_comm_s"].get<double>(), 1.3 * a["breakdown"]["ep_comm_s"].get<double>());
  EXPECT_LE(b["breakdown"]["ep_comm_s"].get<double>(), 1.5 * a["breakdown"]["ep_comm_s"].get<double>());
  const std::string out = (std::filesystem::temp_directory_path() / "weft_moe_imbalance_plan.json").string();
  CliRun w = test::run_cli(register_plan_commands, with(est, {"--moe-imbalance", "1.5", "--out", out}));
  ASSERT_EQ(w.code, 0) << w.err;
  EXPECT_EQ(read_json_file(out)["train"]["moe_imbalance"].get<double>(), 1.5);
  std::filesystem::remove(out);
  CliRun low = test::run_cli(register_plan_commands, with(est, {"--moe-imbalance", "0.5"}));
  EXPECT_EQ(low.code, 2);
  EXPECT_NE(low.err.find("--moe-imbalance: the busiest expert-parallel rank's routed copies over the mean, at least 1, "
                         "got 0.5"),
            std::string::npos)
      << low.err;
  CliRun dense = run(with(kEstimate, {"--moe-imbalance", "1.2"}));
  EXPECT_EQ(dense.code, 2);
  EXPECT_NE(dense.err.find("--moe-imbalance: 1.2 for a model without MoE layers (llama-2-7b)"), std::string::npos)
      << dense.err;
  CliRun plan = run({"plan", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "8", "--seq", "4096",
                     "--global-batch", "64", "--moe-imbalance", "1.2"});
  EXPECT_EQ(plan.code, 2);
  EXPECT_NE(plan.err.find("--moe-imbalance: 1.2 for a model without MoE layers"), std::string::npos) << plan.err;
}

// `--moe-dispatcher hybridep` and `--moe-a2a-overlap` on `weft estimate` (docs/cost-model.md §3.4):
// Qwen3-30B-A3B's expert degree 16 spans 2 nodes of H100 (NVIDIA's plan of the set nemo-moe-h100);
// deduplicating the crossing cuts its exposed expert traffic, and overlapping it with the other
// pass's compute cuts it further. Both
// reach the plan file and the table's header; a dense model, and the overlap on a pipeline without
// interleaving, are refused naming the flag.
TEST(CliMoeDispatcher, CutsTheExposedExpertTrafficAndReachesThePlan) {
  const std::vector<std::string> est{
      "estimate", "--model", std::string(WEFT_DATA_DIR) + "/reference/moe/qwen3-30b-a3b.config.json", "--cluster",
      "h100-80gb", "--gpus", "16", "--seq", "4096", "--global-batch", "1024", "--micro-batch", "1", "--tp", "1",
      "--pp", "1", "--ep", "16", "--zero", "1", "--dtype", "fp8", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype",
      "bf16", "--format", "json"};
  CliRun plain = test::run_cli(register_plan_commands, est);
  CliRun flex = test::run_cli(register_plan_commands, with(est, {"--moe-dispatcher", "hybridep"}));
  CliRun both = test::run_cli(register_plan_commands, with(est, {"--moe-dispatcher", "hybridep", "--moe-a2a-overlap"}));
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(flex.code, 0) << flex.err;
  ASSERT_EQ(both.code, 0) << both.err;
  const double a = Json::parse(plain.out)["breakdown"]["ep_comm_s"].get<double>();
  const double b = Json::parse(flex.out)["breakdown"]["ep_comm_s"].get<double>();
  const double c = Json::parse(both.out)["breakdown"]["ep_comm_s"].get<double>();
  EXPECT_LT(b, a);
  EXPECT_LT(c, b);
  const std::string out = (std::filesystem::temp_directory_path() / "weft_moe_dispatcher_plan.json").string();
  // The same estimate as a table (est without its trailing --format json).
  const std::vector<std::string> table = with(std::vector<std::string>(est.begin(), est.end() - 2),
                                              {"--moe-dispatcher", "hybridep", "--moe-a2a-overlap", "--out", out});
  CliRun w = test::run_cli(register_plan_commands, table);
  ASSERT_EQ(w.code, 0) << w.err;
  EXPECT_NE(w.out.find("MoE dispatch: hybridep"), std::string::npos) << w.out;
  EXPECT_NE(w.out.find("expert all-to-all overlapped across micro-batches"), std::string::npos) << w.out;
  const Json written = read_json_file(out);
  EXPECT_EQ(written["train"]["moe_dispatcher"], "hybridep");
  EXPECT_EQ(written["train"]["moe_a2a_overlap"], true);
  std::filesystem::remove(out);
  CliRun dense = run(with(kEstimate, {"--moe-dispatcher", "deepep"}));
  EXPECT_EQ(dense.code, 2);
  EXPECT_NE(dense.err.find("--moe-dispatcher: deepep needs a mixture-of-experts model (llama-2-7b has none)"), std::string::npos)
      << dense.err;
  std::vector<std::string> pp2 = est;
  *(std::find(pp2.begin(), pp2.end(), "--pp") + 1) = "2";
  *(std::find(pp2.begin(), pp2.end(), "--ep") + 1) = "8";
  CliRun flat = test::run_cli(register_plan_commands, with(pp2, {"--moe-a2a-overlap"}));
  EXPECT_EQ(flat.code, 2);
  EXPECT_NE(flat.err.find("--moe-a2a-overlap: with --pp 2 it needs an interleaved schedule (--vp > 1)"), std::string::npos)
      << flat.err;
}

}  // namespace
}  // namespace weft::cli
