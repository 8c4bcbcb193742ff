// `weft plan` and `weft estimate` (bin/weft/cmd_plan.cc) driven through CLI11 in-process: outputs,
// files, and every bad-input path with its exit code.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_harness.h"
#include "inputs.h"
#include "profile_fixtures.h"
#include "weft/calibration/hardware_profile.h"
#include "weft/core/json.h"
#include "weft/plan/plan.h"
#include "weft/plan/runtime_support.h"

namespace weft::cli {

namespace {

using test::CliRun;

CliRun run(const std::vector<std::string>& args) { return test::run_cli(register_plan_commands, args); }

const std::vector<std::string> k7b{"--model", "llama-2-7b", "--cluster", "a100-80gb", "--seq", "4096",
                                   "--global-batch", "512"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::string tmp(const std::string& name) { return std::string(WEFT_BINARY_DIR) + "/" + name; }

// Every line of a terminal table fits 80 columns.
void expect_within_80_columns(const std::string& out) {
  for (size_t start = 0; start < out.size();) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    EXPECT_LE(end - start, 80u) << out.substr(start, end - start);
    start = end + 1;
  }
}

TEST(CliPlan, TableFitsIn80Columns) {
  auto args = with({"plan"}, k7b);
  CliRun r = run(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("best plan"), std::string::npos);
  EXPECT_NE(r.out.find("uniform baseline"), std::string::npos);
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos);
  EXPECT_NE(r.out.find("MFU"), std::string::npos);
  EXPECT_NE(r.out.find("mem GiB"), std::string::npos);
  size_t start = 0;
  while (start < r.out.size()) {
    size_t end = r.out.find('\n', start);
    if (end == std::string::npos) end = r.out.size();
    EXPECT_LE(end - start, 80u) << r.out.substr(start, end - start);
    start = end + 1;
  }
}

// weft plan --tasks: the waves and baselines of a multi-task model, as a table within 80 columns
// and as JSON (step_time_s, waves with their modules, baselines, plan_ms: relied on); --model,
// --seq or --global-batch beside it are errors naming the flag.
TEST(CliPlan, TasksWavesAndBaselines) {
  const std::string file = std::string(WEFT_DATA_DIR) + "/tasks/clip-4-tasks.json";
  const std::vector<std::string> base{"plan", "--tasks", file, "--cluster", "h100-80gb", "--gpus", "16"};
  CliRun t = run(base);
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("vision-text/vision"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("sequential"), std::string::npos);
  expect_within_80_columns(t.out);
  CliRun r = run(with(base, {"--format", "json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  const double step = j.at("step_time_s").get<double>();
  EXPECT_GT(step, 0);
  EXPECT_LE(j.at("baselines").at("bound_s").get<double>(), step * (1 + 1e-9));
  EXPECT_LE(j.at("waves_s").get<double>(), j.at("baselines").at("sequential_s").get<double>() * (1 + 1e-9));
  // The step as it runs (no barrier between waves) and the wider reductions after it; the run at
  // most the waves one after another with every crossing in series.
  EXPECT_NEAR(step, j.at("compute_s").get<double>() + j.at("shared_sync").at("time_s").get<double>(), 1e-12);
  EXPECT_LE(j.at("compute_s").get<double>(),
            (j.at("waves_s").get<double>() + j.at("traffic").at("time_s").get<double>()) * (1 + 1e-12));
  EXPECT_GT(j.at("baselines").at("task_greedy_s").get<double>(), 0);
  EXPECT_GE(j.at("plan_ms").get<double>(), 0);
  int vision_layers = 0;
  for (const Json& w : j.at("waves"))
    for (const Json& m : w.at("modules")) {
      EXPECT_GT(m.at("gpus").get<int>(), 0);
      EXPECT_LE(m.at("gpus").get<int>(), 16);
      if (m.at("name") == "vision-text/vision") vision_layers += m.at("layers").get<int>();
    }
  EXPECT_EQ(vision_layers, 32);  // ViT-H's 32 layers, all run once
  // --report: the step as a Gantt chart, two rectangles per piece (its forward and its backward).
  const std::string html = tmp("tasks_report.html");
  CliRun rep = run(with(base, {"--report", html}));
  ASSERT_EQ(rep.code, 0) << rep.err;
  const std::string page = read_text_file(html);
  EXPECT_NE(page.find("<svg"), std::string::npos);
  size_t pieces = 0;
  for (const Json& w : j.at("waves")) pieces += w.at("modules").size();
  size_t rects = 0;
  for (size_t at = page.find("<rect"); at != std::string::npos; at = page.find("<rect", at + 1)) ++rects;
  EXPECT_EQ(rects, 2 * pieces);
  EXPECT_NE(page.find("vision-text / vision"), std::string::npos);
  EXPECT_NE(page.find("sequential"), std::string::npos);
  std::filesystem::remove(html);
  CliRun m = run(with(base, {"--model", "llama-2-7b"}));
  EXPECT_NE(m.code, 0);
  EXPECT_NE(m.err.find("--tasks: the task file names its modules; leave out --model"), std::string::npos) << m.err;
  CliRun s = run(with(base, {"--seq", "4096"}));
  EXPECT_NE(s.code, 0);
  EXPECT_NE(s.err.find("leave out --seq"), std::string::npos) << s.err;
  CliRun missing = run({"plan", "--tasks", "/nonexistent/tasks.json"});
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.err.find("/nonexistent/tasks.json"), std::string::npos) << missing.err;
  CliRun nobatch = run({"plan", "--model", "llama-2-7b", "--seq", "4096"});
  EXPECT_NE(nobatch.code, 0);
  EXPECT_NE(nobatch.err.find("--global-batch: required"), std::string::npos) << nobatch.err;
}

// weft plan --tasks on an encoder feeding an LLM (one task): Optimus's schedule after the waves,
// an "optimus" object beside the waves' keys in the JSON, and --report drawing its timeline; a file
// of encoders only has no "optimus".
TEST(CliPlan, TasksOptimusSchedule) {
  const std::string file = std::string(WEFT_DATA_DIR) + "/tasks/vit-3b-gpt-11b.json";
  const std::vector<std::string> base{"plan", "--tasks", file, "--cluster", "h100-80gb", "--gpus", "8"};
  CliRun t = run(base);
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("Optimus: the encoder's work in the LLM's bubbles"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("bubbles, fine"), std::string::npos);
  EXPECT_NE(t.out.find("first stage"), std::string::npos);
  expect_within_80_columns(t.out);
  CliRun r = run(with(base, {"--format", "json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  for (const char* k : {"step_time_s", "waves", "baselines", "plan_ms"}) EXPECT_TRUE(j.contains(k)) << k;
  const Json& o = j.at("optimus");
  EXPECT_GE(o.at("step_time_s").get<double>(), o.at("llm_step_s").get<double>());
  EXPECT_GT(o.at("first_stage_s").get<double>(), 0);
  for (const char* k : {"eff_coarse", "eff_fine"}) {
    EXPECT_GE(o.at(k).get<double>(), 0) << k;
    EXPECT_LE(o.at(k).get<double>(), 1) << k;
  }
  const Json& e = o.at("encoder");
  EXPECT_EQ(e.at("dp").get<int>() * e.at("pp").get<int>() * e.at("tp").get<int>(), 8);
  const std::string html = tmp("optimus_report.html");
  CliRun rep = run(with(base, {"--report", html}));
  ASSERT_EQ(rep.code, 0) << rep.err;
  const std::string page = read_text_file(html);
  EXPECT_NE(page.find("<svg"), std::string::npos);
  EXPECT_NE(page.find("encoder forward"), std::string::npos);
  std::filesystem::remove(html);
  CliRun clip = run({"plan", "--tasks", std::string(WEFT_DATA_DIR) + "/tasks/clip-4-tasks.json", "--cluster",
                     "h100-80gb", "--gpus", "8", "--format", "json"});
  ASSERT_EQ(clip.code, 0) << clip.err;
  EXPECT_FALSE(Json::parse(clip.out).contains("optimus"));
}

TEST(CliPlan, DtypeDefaultsToWhatTheGpuRuns) {
  const std::vector<std::string> v100{"--model", "llama-2-7b", "--cluster", "v100-32gb", "--gpus", "32", "--seq",
                                      "2048", "--global-batch", "128", "--format", "json"};
  CliRun r = run(with({"plan"}, v100));
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["plan"]["train"]["dtype"], "fp16") << "a V100 has no bf16";
  EXPECT_LT(j["model_tflops_per_gpu"].get<double>(), 125.0) << "the V100's fp16 peak";
  CliRun bf16 = run(with(with({"plan"}, v100), {"--dtype", "bf16"}));
  EXPECT_EQ(bf16.code, 2);
  EXPECT_NE(bf16.err.find("--dtype: V100-SXM2-32GB has no bf16 (it runs fp32, fp16)"), std::string::npos) << bf16.err;
  CliRun a100 = run(with({"plan"}, with(k7b, {"--format", "json"})));
  ASSERT_EQ(a100.code, 0) << a100.err;
  EXPECT_EQ(Json::parse(a100.out)["plan"]["train"]["dtype"], "bf16");
}

TEST(CliPlan, JsonAndPlanFileRoundTripThroughEstimate) {
  const std::string out = tmp("cli_plan_test_plan.json");
  CliRun r = run(with(with({"plan"}, k7b), {"--format", "json", "--top", "2", "--out", out}));
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  for (const char* key : {"step_time_s", "tokens_per_s", "model_tflops_per_gpu", "mfu", "peak_memory_gib",
                          "stages", "breakdown", "fits", "plan", "top", "uniform", "search"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_LE(j["top"].size(), 2u);
  EXPECT_EQ(j["plan"]["format_version"], 1);
  // The plan file is the best plan; `weft estimate --plan` costs it to the same step time.
  auto p = read_plan_file(out);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(validate(*p).ok());
  CliRun e = run({"estimate", "--plan", out, "--format", "json"});
  ASSERT_EQ(e.code, 0) << e.err;
  const Json je = Json::parse(e.out);
  EXPECT_DOUBLE_EQ(je["step_time_s"].get<double>(), j["step_time_s"].get<double>());
  std::remove(out.c_str());
}

TEST(CliPlan, WritesReportAndGalvatronStrategy) {
  const std::string html = tmp("cli_plan_test_report.html"), strat = tmp("cli_plan_test_strategy.json");
  std::remove(html.c_str());
  std::remove(strat.c_str());
  // Galvatron's 36 GB setting: the best plan uses only what Galvatron can express.
  const std::vector<std::string> g{"--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "8", "--seq", "2048",
                                   "--global-batch", "64", "--memory-gb", "36"};
  CliRun r = run(with(with({"plan"}, g), {"--report", html, "--galvatron-out", strat}));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string page = read_text_file(html);
  EXPECT_NE(page.find("<svg"), std::string::npos);
  const Json sj = read_json_file(strat);
  EXPECT_TRUE(sj.contains("pp_deg"));
  EXPECT_TRUE(sj.contains("tp_sizes_enc"));
  // The 7B default at 80 GB picks ZeRO-1, which Galvatron lacks: refused, naming it, exit 2.
  CliRun z = run(with(with({"plan"}, k7b), {"--galvatron-out", strat}));
  EXPECT_EQ(z.code, 2);
  EXPECT_NE(z.err.find("ZeRO-1"), std::string::npos) << z.err;
  std::remove(html.c_str());
  std::remove(strat.c_str());
}

TEST(CliPlan, NothingFitsExitsWith3AndNamesTheMemoryNeeded) {
  CliRun r = run({"plan", "--model", "llama-2-70b", "--cluster", "a100-80gb", "--seq", "4096", "--global-batch",
                  "512"});
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("nothing fits in 80.0 GiB per GPU"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("GiB per GPU; try --memory-gb"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the plan needing the least memory (pp"), std::string::npos) << r.err;
}

TEST(CliPlan, BadInputExitsWith2) {
  auto expect2 = [](std::vector<std::string> args, const std::string& part) {
    CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << part << "\n" << r.out;
    if (!part.empty()) EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  };
  expect2({"plan", "--model", "no-such-model", "--cluster", "a100-80gb", "--seq", "4096", "--global-batch", "8"},
          "no-such-model");
  expect2(with({"plan"}, {"--model", "llama-2-7b", "--cluster", "a100-80gb", "--seq", "0", "--global-batch", "8"}),
          "seq: must be positive, got 0");
  expect2({"plan", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--global-batch", "8"}, "");  // --seq missing
  expect2(with(with({"plan"}, k7b), {"--format", "xml"}), "");
  expect2(with(with({"plan"}, k7b), {"--top", "0"}), "top: must be >= 1, got 0");
}

TEST(CliEstimate, UniformStrategyTableAndJson) {
  auto args = with({"estimate"}, k7b);
  CliRun r = run(with(args, {"--micro-batch", "1", "--tp", "2", "--pp", "2", "--sequence-parallel", "--zero", "1"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("tp2+sp dp2 z1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pp2 1f1b m256"), std::string::npos) << r.out;  // m = 512 / (dp 2 * b 1)
  CliRun j = run(with(args, {"--micro-batch", "1", "--tp", "1", "--pp", "1", "--zero", "1", "--format", "json"}));
  ASSERT_EQ(j.code, 0) << j.err;
  const Json e = Json::parse(j.out);
  for (const char* key : {"step_time_s", "tokens_per_s", "model_tflops_per_gpu", "mfu", "peak_memory_gib",
                          "stages", "breakdown", "fits"})
    EXPECT_TRUE(e.contains(key)) << key;
  ASSERT_EQ(e["stages"].size(), 1u);
  EXPECT_TRUE(e["stages"][0].contains("memory_gib"));
  EXPECT_TRUE(e["stages"][0].contains("time_s"));
  // --vp > 1 selects the interleaved schedule; --out writes the plan with its prediction.
  const std::string out = tmp("cli_estimate_test_plan.json");
  CliRun v = run(with(args, {"--micro-batch", "1", "--tp", "1", "--pp", "2", "--vp", "2", "--zero", "1", "--out", out}));
  ASSERT_EQ(v.code, 0) << v.err;
  auto p = read_plan_file(out);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->train.schedule, Schedule::kInterleaved);
  EXPECT_EQ(p->train.micro_batches, 128);
  EXPECT_EQ(p->stages.size(), 4u);
  EXPECT_GT(p->predicted.step_time_s, 0);
  std::remove(out.c_str());
}

TEST(CliEstimate, DoesNotFitExitsWith3) {
  CliRun r = run({"estimate", "--model", "llama-2-70b", "--cluster", "a100-80gb", "--seq", "4096", "--global-batch",
                  "512", "--micro-batch", "1", "--tp", "1", "--pp", "1", "--format", "json"});
  EXPECT_EQ(r.code, 3);
  EXPECT_FALSE(Json::parse(r.out)["fits"].get<bool>());
  // 80 GiB less the CUDA context and workspaces (1.0625 GiB) and the default margin (2.5 %): 76.9 GiB.
  EXPECT_NE(r.err.find("GiB per GPU but the cost model allows 76.9 GiB of the 80.0 GiB device"), std::string::npos)
      << r.err;
}

TEST(CliEstimate, BadInputNamesTheFlagAndNumbers) {
  const auto base = with({"estimate"}, k7b);
  auto expect2 = [&](const std::vector<std::string>& more, const std::string& part) {
    CliRun r = run(with(base, more));
    EXPECT_EQ(r.code, 2) << part;
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  };
  expect2({"--micro-batch", "1", "--tp", "3", "--pp", "1"}, "--tp: tp=3 does not divide 32 attention heads");
  expect2({"--micro-batch", "3", "--tp", "1", "--pp", "1"},
          "--global-batch: 512 is not a multiple of dp*micro-batch = 8*3 = 24");
  expect2({"--micro-batch", "1", "--tp", "1", "--pp", "3"}, "--pp: pp=3 does not divide 8 GPUs");
  expect2({"--micro-batch", "1", "--tp", "2", "--pp", "1", "--dp", "2"},
          "--dp: tp*pp*cp*ulysses*dp = 4 but the cluster has 8 GPUs");
  expect2({"--micro-batch", "1", "--tp", "1", "--pp", "1", "--zero", "4"}, "--zero: must be 0, 1, 2 or 3, got 4");
  expect2({"--micro-batch", "1", "--tp", "1", "--pp", "1", "--sequence-parallel"},
          "--sequence-parallel: needs --tp > 1");
  expect2({"--micro-batch", "1", "--tp", "1", "--pp", "1", "--ep", "2"}, "--ep: ep=2 needs a mixture-of-experts");
  expect2({"--micro-batch", "1", "--tp", "1", "--pp", "1", "--ulysses", "64"},
          "--ulysses: tp*ulysses = 1*64 = 64 does not divide 32 attention heads");
  expect2({"--micro-batch", "1", "--tp", "1", "--pp", "2", "--vp", "2", "--schedule", "1f1b"}, "vp");
  expect2({"--tp", "1", "--pp", "1"}, "--micro-batch: required");
  CliRun r = run({"estimate", "--plan", "/nonexistent/plan.json"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("/nonexistent/plan.json"), std::string::npos) << r.err;
}

// The framework flags reach the analytic model: a slower host and slower kernels give a slower
// step; bad values and combinations with measured profiles name the flag.
TEST(CliPlan, FrameworkFlagsChangeTheEstimate) {
  const std::vector<std::string> est{"estimate", "--model", "gpt3-1.3b", "--cluster", "a100-80gb", "--gpus", "8",
                                     "--seq", "1024", "--global-batch", "32", "--micro-batch", "1", "--tp", "8",
                                     "--pp", "1", "--format", "json"};
  auto step = [&](const std::vector<std::string>& more) {
    CliRun r = run(with(est, more));
    EXPECT_EQ(r.code, 0) << r.err;
    return Json::parse(r.out).at("step_time_s").get<double>();
  };
  const double base = step({});
  EXPECT_GT(step({"--host-op-us", "20", "--host-function-us", "50"}), 1.2 * base);
  EXPECT_GT(step({"--compute-time-scale", "1.5"}), 1.05 * base);
  CliRun bad = run(with(est, {"--compute-time-scale", "0"}));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--compute-time-scale: must be in"), std::string::npos) << bad.err;
  CliRun mixed = run(with(est, {"--host-op-us", "10", "--hardware-profile", "hw.json"}));
  EXPECT_EQ(mixed.code, 2);
  EXPECT_NE(mixed.err.find("cannot be combined with measured or Galvatron profiles"), std::string::npos) << mixed.err;
}

// --framework picks the framework traits (docs/cost-model.md §4.1): eager torchtitan costs a Llama
// layer's unfused norm, rotary and SwiGLU operators, so its step is slower than Megatron's fused
// one; op-level selective recompute keeps more than Megatron's and re-runs more; the plan file
// names the framework; an unknown name lists the known ones.
TEST(CliPlan, FrameworkPicksTheTraits) {
  const std::vector<std::string> est{"estimate", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "8",
                                     "--seq", "4096", "--global-batch", "16", "--micro-batch", "1", "--tp", "1",
                                     "--pp", "1", "--zero", "3", "--recompute", "selective", "--format", "json"};
  auto get = [&](const std::vector<std::string>& more) {
    CliRun r = run(with(est, more));
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? Json::parse(r.out) : Json::object();
  };
  const Json megatron = get({}), titan = get({"--framework", "torchtitan"}),
             compiled = get({"--framework", "torchtitan-compile"});
  const double t_meg = megatron.at("step_time_s").get<double>(), t_titan = titan.at("step_time_s").get<double>(),
               t_comp = compiled.at("step_time_s").get<double>();
  EXPECT_GT(t_titan, 1.05 * t_meg);
  EXPECT_LT(t_comp, t_titan);
  EXPECT_GT(t_comp, t_meg);  // fused kernels, but op-level selective recomputes half the matmuls
  EXPECT_LT(titan.at("peak_memory_gib").get<double>(), megatron.at("peak_memory_gib").get<double>());
  EXPECT_EQ(get({"--framework", "megatron"}).at("step_time_s").get<double>(), t_meg);

  std::filesystem::path dir = std::filesystem::temp_directory_path() / "weft_framework_test";
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "plan.json").string();
  ASSERT_EQ(run(with(est, {"--framework", "torchtitan", "--out", out})).code, 0);
  const Json plan = read_json_file(out);
  EXPECT_NE(plan.dump().find("analytic, torchtitan"), std::string::npos);

  CliRun bad = run(with(est, {"--framework", "jax"}));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--framework: unknown framework \"jax\" (known: megatron, megatron-deepspeed, torchtitan"),
            std::string::npos)
      << bad.err;
  CliRun mixed = run(with(est, {"--framework", "torchtitan", "--model-profile", "layers.json"}));
  EXPECT_EQ(mixed.code, 2);

  // What the framework cannot run is refused, naming it; a search returns a plan it can run.
  CliRun uly = run(with(est, {"--framework", "torchtitan", "--ulysses", "2"}));
  EXPECT_EQ(uly.code, 2);
  EXPECT_NE(uly.err.find("layer 0: ulysses=2 (no Ulysses): framework torchtitan cannot run it"), std::string::npos) << uly.err;
  CliRun searched = run({"plan", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "8", "--seq", "4096",
                         "--global-batch", "64", "--framework", "torchtitan", "--format", "json"});
  ASSERT_EQ(searched.code, 0) << searched.err;
  auto best = plan_from_json(Json::parse(searched.out).at("plan"));
  ASSERT_TRUE(best.ok());
  EXPECT_TRUE(best->uniform());
  const LayerStrategy& l = best->stages.front().layers.front();
  EXPECT_EQ(l.ulysses, 1);
  EXPECT_NE(l.zero, 1);
}

// The space flags restrict what the search returns; out-of-range values name the flag.
TEST(CliPlan, SpaceFlagsRestrictTheSearch) {
  const std::vector<std::string> small{"plan", "--model", "gpt3-1.3b", "--cluster", "a100-80gb", "--gpus", "8",
                                       "--seq", "2048", "--global-batch", "64", "--format", "json"};
  auto best = [&](const std::vector<std::string>& more) {
    CliRun r = run(with(small, more));
    EXPECT_EQ(r.code, 0) << r.err;
    auto p = plan_from_json(Json::parse(r.out).at("plan"));
    EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
    return p.ok() ? *p : Plan{};
  };
  const Plan pp2 = best({"--pp", "2", "--schedule", "gpipe"});
  EXPECT_EQ(pp2.train.pp, 2);
  EXPECT_EQ(pp2.train.schedule, Schedule::kGpipe);
  const Plan fp32 = best({"--dtype", "fp32", "--max-tp", "2"});
  EXPECT_EQ(fp32.train.dtype, DType::kFp32);
  for (const Stage& st : fp32.stages)
    for (const LayerStrategy& l : st.layers) EXPECT_LE(l.tp, 2);
  EXPECT_TRUE(best({"--uniform"}).uniform());

  CliRun bad = run(with(small, {"--pp", "3"}));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--pp: 3 does not divide the 8 GPUs"), std::string::npos) << bad.err;
  CliRun sched = run(with(small, {"--schedule", "zigzag"}));
  EXPECT_EQ(sched.code, 2);
}

// Without --framework the plan is meant for weft's runtime (docs/search.md, "weft's runtime"):
// Llama-2-7B on 16 A100-80GB at sequence 131,072, where the best plan uses context parallelism
// (tests/search/golden_test.cc derives why), which the runtime runs; the plan says so, and
// --all-strategies (which adds expert parallelism, here nothing) finds nothing faster.
TEST(CliPlan, WithoutFrameworkKeepsToWeftsRuntime) {
  const std::vector<std::string> longseq{"plan", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "16",
                                         "--seq", "131072", "--global-batch", "16"};
  const std::string kept_note = "searched only what weft's runtime (weft train) runs: no expert parallelism (ep); "
                                "--all-strategies searches it too (for planning only), "
                                "--framework NAME plans for another framework";
  CliRun r = run(with(longseq, {"--format", "json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  auto best = plan_from_json(j.at("plan"));
  ASSERT_TRUE(best.ok()) << best.error().message;
  const Status runs = runtime_supports(*best);
  EXPECT_TRUE(runs.ok()) << runs.error().message;
  int cp_layers = 0;
  for (int i = 0; i < best->model.num_layers(); ++i) cp_layers += best->layer_strategy(i).cp > 1;
  EXPECT_GT(cp_layers, 0) << "at 131,072 tokens the best plan the runtime runs uses context parallelism";
  for (const Json& t : j.at("top")) {
    auto p = plan_from_json(t.at("plan"));
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(runtime_supports(*p).ok());
  }
  ASSERT_EQ(j.at("notes").size(), 1u);
  EXPECT_EQ(j.at("notes")[0].get<std::string>(), kept_note);
  EXPECT_NE(r.err.find("weft: note: " + kept_note), std::string::npos) << r.err;

  // The table says it under the header, in 80 columns.
  CliRun table = run(longseq);
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("note: searched only what weft's runtime (weft train) runs: no expert"), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("--all-strategies searches"), std::string::npos) << table.out;
  for (size_t start = 0, end; start < table.out.size(); start = end + 1) {
    end = table.out.find('\n', start);
    if (end == std::string::npos) end = table.out.size();
    EXPECT_LE(end - start, 80u) << table.out.substr(start, end - start);
  }

  // --all-strategies: the whole space; its best runs on weft's runtime too, and the note says so.
  CliRun all = run(with(longseq, {"--format", "json", "--all-strategies"}));
  ASSERT_EQ(all.code, 0) << all.err;
  const Json ja = Json::parse(all.out);
  auto free = plan_from_json(ja.at("plan"));
  ASSERT_TRUE(free.ok());
  EXPECT_TRUE(runtime_supports(*free).ok());
  ASSERT_EQ(ja.at("notes").size(), 1u);
  EXPECT_EQ(ja.at("notes")[0].get<std::string>(),
            "--all-strategies: searched everything the cost model knows; the best plan also runs on weft's runtime");
  EXPECT_LE(ja.at("step_time_s").get<double>(), j.at("step_time_s").get<double>());
  // Where the best plan runs anyway, the note says that instead.
  CliRun short_all = run(with(with({"plan"}, k7b), {"--format", "json", "--all-strategies"}));
  ASSERT_EQ(short_all.code, 0) << short_all.err;
  EXPECT_EQ(Json::parse(short_all.out).at("notes")[0].get<std::string>(),
            "--all-strategies: searched everything the cost model knows; the best plan also runs on weft's runtime");

  // The interleaved schedule runs on weft's runtime: asked for, it is planned without
  // --all-strategies, and the plan runs there.
  CliRun inter = run(with(with({"plan"}, k7b), {"--schedule", "interleaved", "--pp", "2", "--format", "json"}));
  ASSERT_EQ(inter.code, 0) << inter.err;
  const Json ij = Json::parse(inter.out);
  EXPECT_EQ(ij.at("plan").at("train").at("schedule"), "interleaved");
  auto inter_plan = plan_from_json(ij.at("plan"));
  ASSERT_TRUE(inter_plan.ok()) << inter_plan.error().message;
  EXPECT_TRUE(runtime_supports(*inter_plan).ok()) << runtime_supports(*inter_plan).error().message;

  // A named framework decides the space: no note, and --all-strategies is not used with it.
  CliRun fw = run(with(with({"plan"}, k7b), {"--framework", "megatron", "--format", "json"}));
  ASSERT_EQ(fw.code, 0) << fw.err;
  EXPECT_FALSE(Json::parse(fw.out).contains("notes"));
  EXPECT_EQ(fw.err.find("note:"), std::string::npos) << fw.err;
  CliRun both = run(with(with({"plan"}, k7b), {"--framework", "megatron", "--all-strategies"}));
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("--all-strategies: not used with --framework"), std::string::npos) << both.err;
}

// A model weft's runtime cannot run whatever the strategy is still planned, with a note naming the
// layer and why.
TEST(CliPlan, ModelTheRuntimeCannotRunIsSearchedWithANote) {
  const std::string note = "weft train cannot run bert-large yet: model layer 0: encoder layers are not supported by "
                           "the weft runtime (decoder layers are); searched every strategy the cost model knows "
                           "(planning only)";
  const std::vector<std::string> bert{"plan", "--model", "bert-large", "--cluster", "a100-80gb", "--gpus", "8",
                                      "--seq", "512", "--global-batch", "64"};
  CliRun j = run(with(bert, {"--format", "json"}));
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_EQ(Json::parse(j.out).at("notes")[0].get<std::string>(), note);
  EXPECT_NE(j.err.find("weft: note: " + note), std::string::npos) << j.err;
  CliRun t = run(bert);
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("note: weft train cannot run bert-large yet: model layer 0: encoder layers are\n"),
            std::string::npos)
      << t.out;
}

// `weft estimate` without --framework costs what weft's runtime cannot run, with a note naming it.
TEST(CliEstimate, NotesWhatTheRuntimeCannotRun) {
  const auto base = with({"estimate"}, k7b);
  // Context parallelism needs 2 cp chunks of equal length: not at 2,050 tokens with cp 2.
  const std::vector<std::string> odd{"estimate", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--seq", "2050",
                                     "--global-batch", "512"};
  CliRun cp = run(with(odd, {"--micro-batch", "1", "--tp", "1", "--pp", "1", "--cp", "2", "--zero", "3"}));
  ASSERT_EQ(cp.code, 0) << cp.err;
  EXPECT_NE(cp.out.find("note: weft train cannot run this plan yet (plan: embedding.cp: context"), std::string::npos)
      << cp.out;
  EXPECT_NE(cp.out.find("does not divide sequence length 2050"), std::string::npos) << cp.out;
  CliRun ep = run(with(odd, {"--micro-batch", "1", "--tp", "1", "--pp", "1", "--cp", "2", "--zero", "3", "--format",
                              "json"}));
  ASSERT_EQ(ep.code, 0) << ep.err;
  const Json jv = Json::parse(ep.out);
  ASSERT_EQ(jv.at("notes").size(), 1u);
  EXPECT_NE(jv.at("notes")[0].get<std::string>().find("weft train cannot run this plan yet (plan: "),
            std::string::npos)
      << jv.at("notes")[0];
  EXPECT_NE(ep.err.find("weft: note: weft train cannot run this plan yet"), std::string::npos) << ep.err;
  // Context parallelism and the interleaved schedule run there: no note.
  CliRun cp_runs = run(with(base, {"--micro-batch", "1", "--tp", "1", "--pp", "1", "--cp", "2", "--zero", "3",
                                   "--format", "json"}));
  ASSERT_EQ(cp_runs.code, 0) << cp_runs.err;
  EXPECT_FALSE(Json::parse(cp_runs.out).contains("notes"));
  CliRun vp = run(with(base, {"--micro-batch", "1", "--tp", "1", "--pp", "2", "--vp", "2", "--zero", "1", "--format",
                              "json"}));
  ASSERT_EQ(vp.code, 0) << vp.err;
  EXPECT_FALSE(Json::parse(vp.out).contains("notes"));
  // What the runtime runs: no note; with --framework, that framework's rules instead.
  CliRun ok = run(with(base, {"--micro-batch", "1", "--tp", "1", "--pp", "1", "--zero", "1", "--format", "json"}));
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_FALSE(Json::parse(ok.out).contains("notes"));  // the estimate JSON as before
  EXPECT_EQ(ok.err.find("note:"), std::string::npos) << ok.err;
  CliRun meg = run(with(base, {"--micro-batch", "1", "--tp", "1", "--pp", "1", "--cp", "2", "--zero", "3",
                               "--framework", "megatron"}));
  ASSERT_EQ(meg.code, 0) << meg.err;
  EXPECT_EQ(meg.out.find("note:"), std::string::npos) << meg.out;
}

// Megatron-LM's flag names (megatron/training/arguments.py) are the same options as weft's: the
// same estimate, the same search, and a flag given under both names is refused.
TEST(CliEstimate, MegatronFlagNamesAreAliases) {
  const std::vector<std::string> model{"estimate", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "8",
                                       "--format", "json"};
  CliRun weft = run(with(model, {"--seq", "4096", "--global-batch", "16", "--micro-batch", "1", "--tp", "2", "--pp",
                                 "2", "--vp", "2", "--cp", "2"}));
  CliRun meg = run(with(model, {"--seq-length", "4096", "--global-batch-size", "16", "--micro-batch-size", "1",
                                "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                                "--num-virtual-stages-per-pipeline-rank", "2", "--context-parallel-size", "2"}));
  ASSERT_EQ(weft.code, 0) << weft.err;
  ASSERT_EQ(meg.code, 0) << meg.err;
  EXPECT_EQ(meg.out, weft.out);
  EXPECT_EQ(Json::parse(meg.out).at("stages").size(), 4u);  // pp 2 x vp 2

  const std::vector<std::string> moe{"estimate", "--model", "mixtral-8x7b", "--cluster", "h100-80gb", "--gpus", "32",
                                     "--seq", "4096", "--global-batch", "64", "--micro-batch", "1", "--tp", "2",
                                     "--pp", "4", "--format", "json"};
  CliRun ep = run(with(moe, {"--ep", "4"})), ep_meg = run(with(moe, {"--expert-model-parallel-size", "4"}));
  ASSERT_EQ(ep.code, 0) << ep.err;
  EXPECT_EQ(ep_meg.out, ep.out);

  // One option under two names: given twice; with --plan: refused by weft's name.
  CliRun twice = run(with(model, {"--seq", "4096", "--global-batch", "16", "--micro-batch", "1", "--tp", "2",
                                  "--tensor-model-parallel-size", "4", "--pp", "1"}));
  EXPECT_EQ(twice.code, 2);  // CLI11: "--tp: At Most 1 required but received 2"
  CliRun with_plan = run({"estimate", "--plan", "plan.json", "--tensor-model-parallel-size", "2"});
  EXPECT_EQ(with_plan.code, 2);
  EXPECT_NE(with_plan.err.find("--tp: not used with --plan"), std::string::npos) << with_plan.err;
}

// --etp: the experts' tensor degree apart from tp (Megatron-LM's --expert-tensor-parallel-size).
// With etp 1 the expert degree spans the tensor ranks: tp 2 x pp 4 on 32 GPUs leaves dp 4, yet ep 8
// runs (each rank one whole expert); the plan records etp, each GPU holds the same expert state as
// under ep 4 with etp 2 (an 8th of the experts either way), and the bad degrees are named.
TEST(CliEstimate, ExpertTensorDegreeApartFromTp) {
  const std::vector<std::string> moe{"estimate", "--model", "mixtral-8x7b", "--cluster", "h100-80gb", "--gpus", "32",
                                     "--seq", "4096", "--global-batch", "64", "--micro-batch", "1", "--tp", "2",
                                     "--sequence-parallel", "--pp", "4", "--format", "json"};
  const std::string out = ::testing::TempDir() + "etp_plan.json";
  CliRun one = run(with(moe, {"--etp", "1", "--ep", "8", "--out", out}));
  ASSERT_EQ(one.code, 0) << one.err;
  CliRun meg = run(with(moe, {"--expert-tensor-parallel-size", "1", "--expert-model-parallel-size", "8"}));
  EXPECT_EQ(meg.out, one.out);
  const Json plan = read_json_file(out);
  const Json& layer = plan.at("stages").at(0).at("layers").at(0);
  EXPECT_EQ(layer.at("ep").get<int>(), 8);
  EXPECT_EQ(layer.at("etp").get<int>(), 1);
  // etp as tp needs ep 8 x etp 2 = 16 of a stage's 8 GPUs.
  CliRun two = run(with(moe, {"--ep", "8"}));
  EXPECT_EQ(two.code, 2);
  EXPECT_NE(two.err.find("--ep: ep*etp = 8*2 = 16 does not divide the 8 GPUs of a pipeline stage"), std::string::npos)
      << two.err;
  CliRun four = run(with(moe, {"--ep", "4"}));
  ASSERT_EQ(four.code, 0) << four.err;
  // ep 8 x etp 1 and ep 4 x etp 2 both hold an 8th of the experts per GPU: the same weights.
  const auto weights = [](const CliRun& r) {
    return Json::parse(r.out).at("stages").at(0).at("memory").at("weights_gib").get<double>();
  };
  EXPECT_NEAR(weights(one), weights(four), 1e-6 * weights(four));
  CliRun bad = run(with(moe, {"--etp", "3"}));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--etp: etp=3 does not divide the expert FFN size 14336"), std::string::npos) << bad.err;
  CliRun dense = run({"estimate", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "8", "--seq", "4096",
                      "--global-batch", "16", "--micro-batch", "1", "--tp", "2", "--pp", "1", "--etp", "1"});
  EXPECT_EQ(dense.code, 2);
  EXPECT_NE(dense.err.find("--etp: etp=1 needs a mixture-of-experts model"), std::string::npos) << dense.err;
}

TEST(CliPlan, MegatronFlagNamesAreAliases) {
  const std::vector<std::string> model{"plan", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "8",
                                       "--format", "json"};
  CliRun weft = run(with(model, {"--seq", "4096", "--global-batch", "64", "--pp", "2"}));
  CliRun meg = run(with(model, {"--seq-length", "4096", "--global-batch-size", "64",
                                "--pipeline-model-parallel-size", "2"}));
  ASSERT_EQ(weft.code, 0) << weft.err;
  ASSERT_EQ(meg.code, 0) << meg.err;
  Json a = Json::parse(weft.out), b = Json::parse(meg.out);
  a["search"].erase("wall_s");
  b["search"].erase("wall_s");
  EXPECT_EQ(a, b);
  EXPECT_EQ(b.at("plan").at("train").at("pp").get<int>(), 2);
}

// `--framework weft` is weft's runtime by name: the search of no --framework (the runtime's
// strategies) without the note, costed with the runtime's own traits (eager kernels as measured on an
// H100, data/reference/h100), which price a step slower than Megatron's fused ones; a model the
// runtime cannot run, --all-strategies and a strategy it cannot run are errors.
TEST(CliPlan, FrameworkWeftPlansTheRuntimeWithItsOwnTraits) {
  const std::vector<std::string> longseq{"plan", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "16",
                                         "--seq", "131072", "--global-batch", "16", "--format", "json"};
  CliRun dflt = run(longseq), weft = run(with(longseq, {"--framework", "weft"}));
  ASSERT_EQ(dflt.code, 0) << dflt.err;
  ASSERT_EQ(weft.code, 0) << weft.err;
  Json a = Json::parse(dflt.out), b = Json::parse(weft.out);
  EXPECT_TRUE(a.contains("notes"));
  EXPECT_FALSE(b.contains("notes"));
  EXPECT_EQ(weft.err.find("note:"), std::string::npos) << weft.err;
  EXPECT_EQ(b.at("plan").at("predicted").at("source").get<std::string>(), "analytic, weft");
  EXPECT_EQ(a.at("plan").at("predicted").at("source").get<std::string>(), "analytic, megatron");
  // The same space searched; the eager runtime's step is the slower.
  EXPECT_EQ(a.at("search").at("configurations"), b.at("search").at("configurations"));
  for (const char* rule : {"options", "tp-inside-node", "zero-needs-shards"})  // the space's own rules
    EXPECT_EQ(a.at("search").at("rules").value(rule, 0), b.at("search").at("rules").value(rule, 0)) << rule;
  EXPECT_GT(b.at("plan").at("predicted").at("step_time_s").get<double>(),
            a.at("plan").at("predicted").at("step_time_s").get<double>());
  auto best = plan_from_json(b.at("plan"));
  ASSERT_TRUE(best.ok()) << best.error().message;
  EXPECT_TRUE(runtime_supports(*best).ok());

  // MoE layers run (with expert parallelism); GPT-OSS's biased experts and sinks do not yet.
  CliRun moe = run({"plan", "--model", "mixtral-8x7b", "--cluster", "h100-80gb", "--gpus", "32", "--seq", "4096",
                    "--global-batch", "64", "--framework", "weft", "--format", "json"});
  ASSERT_EQ(moe.code, 0) << moe.err;
  auto moe_best = plan_from_json(Json::parse(moe.out).at("plan"));
  ASSERT_TRUE(moe_best.ok()) << moe_best.error().message;
  EXPECT_TRUE(runtime_supports(*moe_best).ok());
  CliRun oss = run({"plan", "--model", "gpt-oss-20b", "--cluster", "h100-80gb", "--gpus", "32", "--seq", "4096",
                    "--global-batch", "64", "--framework", "weft"});
  EXPECT_EQ(oss.code, 2);
  EXPECT_NE(oss.err.find("--framework weft: weft train cannot run gpt-oss-20b yet: model layer 0: MoE layers with biases"),
            std::string::npos)
      << oss.err;
  CliRun all = run(with(longseq, {"--framework", "weft", "--all-strategies"}));
  EXPECT_EQ(all.code, 2);
  EXPECT_NE(all.err.find("--all-strategies: not used with --framework"), std::string::npos) << all.err;
  // Context parallelism runs there, but not with 2 cp chunks that do not cut the sequence evenly.
  CliRun cp = run(with(with({"estimate"}, k7b), {"--micro-batch", "1", "--tp", "1", "--pp", "1", "--cp", "2",
                                                 "--zero", "3", "--framework", "weft"}));
  EXPECT_EQ(cp.code, 0) << cp.err;
  CliRun odd = run({"estimate", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--seq", "2050", "--global-batch",
                    "512", "--micro-batch", "1", "--tp", "1", "--pp", "1", "--cp", "2", "--framework", "weft"});
  EXPECT_EQ(odd.code, 2);
  EXPECT_NE(odd.err.find("context parallelism (cp=2) cuts the sequence into 2*cp = 4 chunks"), std::string::npos)
      << odd.err;
}

// --schedule zb-v in both commands (relied on). `weft estimate` sets vp 2 itself and refuses another
// --vp; `weft plan` searches it for weft's runtime and for torchtitan, and frameworks without it
// refuse it.
TEST(CliPlan, ZbVSchedule) {
  auto args = with({"estimate"}, k7b);
  const std::vector<std::string> strategy{"--micro-batch", "1", "--tp", "2", "--pp", "4", "--zero", "1"};
  CliRun zb = run(with(with(args, strategy), {"--schedule", "zb-v", "--format", "json"}));
  ASSERT_EQ(zb.code, 0) << zb.err;
  CliRun one = run(with(with(args, strategy), {"--schedule", "1f1b", "--format", "json"}));
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_LT(Json::parse(zb.out).at("step_time_s").get<double>(), Json::parse(one.out).at("step_time_s").get<double>());
  CliRun table = run(with(with(args, strategy), {"--schedule", "zb-v"}));
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("pp4 zb-v vp2 m"), std::string::npos) << table.out;
  EXPECT_EQ((table.out + table.err).find("weft train cannot run this plan"), std::string::npos)
      << table.out << table.err;
  CliRun two = run(with(with(args, strategy), {"--schedule", "zb-v", "--vp", "2"}));
  EXPECT_EQ(two.code, 0) << two.err;
  CliRun three = run(with(with(args, strategy), {"--schedule", "zb-v", "--vp", "3"}));
  EXPECT_EQ(three.code, 2);
  EXPECT_NE(three.err.find("--vp: 3 with --schedule zb-v, which runs exactly 2 model chunks per device group (leave "
                           "--vp out or give 2)"),
            std::string::npos)
      << three.err;

  const std::vector<std::string> small{"plan", "--model", "gpt3-1.3b", "--cluster", "a100-80gb", "--gpus", "8",
                                       "--seq", "2048", "--global-batch", "64", "--format", "json"};
  CliRun runtime = run(with(small, {"--pp", "4", "--schedule", "zb-v"}));
  ASSERT_EQ(runtime.code, 0) << runtime.err;
  EXPECT_EQ(Json::parse(runtime.out).at("plan").at("train").at("schedule"), "zb-v");
  EXPECT_EQ(Json::parse(runtime.out).at("plan").at("train").at("vp"), 2);
  auto runs = plan_from_json(Json::parse(runtime.out).at("plan"));
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  EXPECT_TRUE(runtime_supports(*runs).ok());
  CliRun titan = run(with(small, {"--pp", "4", "--schedule", "zb-v", "--framework", "torchtitan"}));
  ASSERT_EQ(titan.code, 0) << titan.err;
  EXPECT_EQ(Json::parse(titan.out).at("plan").at("train").at("schedule"), "zb-v");
  for (const char* fw : {"megatron", "torchtitan-compile"}) {
    CliRun no = run(with(small, {"--schedule", "zb-v", "--framework", fw}));
    EXPECT_EQ(no.code, 2) << fw;
    EXPECT_NE(no.err.find(std::string("--schedule: framework ") + fw + " has no zb-v schedule ("), std::string::npos)
        << no.err;
  }
  CliRun vp3 = run(with(small, {"--schedule", "zb-v", "--vp", "3", "--all-strategies"}));
  EXPECT_EQ(vp3.code, 2);
  EXPECT_NE(vp3.err.find("--vp 3: the zb-v schedule runs exactly 2 model chunks per device group"), std::string::npos)
      << vp3.err;
}

}  // namespace
}  // namespace weft::cli

namespace weft::cli {
namespace {

// weft plan --lengths: the model-level strategy for a distribution of document lengths, every
// tensor-parallel degree and recompute policy ranked by mean step time over sampled batches
// (docs/varlen.md); without --seq or --lengths, an error that says which to give.
TEST(CliPlanLengths, RanksTpAndRecomputeForADistribution) {
  const std::string path = ::testing::TempDir() + "plan_lengths.txt";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    for (int i = 0; i < 400; ++i) std::fprintf(f, "%d\n", i % 50 == 0 ? 24000 + 10 * i : 150 + (i * 97) % 3000);
    std::fclose(f);
  }
  auto r = test::run_cli(register_plan_commands, {"plan", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus",
                                                   "16", "--global-batch", "64", "--lengths", path, "--steps", "4",
                                                   "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  const Json& c = j.at("candidates");
  ASSERT_EQ(c.size(), 24u);  // tp 1, 2, 4, 8 x ZeRO 3, 2 x none, selective, full
  double last = 0;
  for (const Json& x : c) {
    if (!x.at("fits").get<bool>()) continue;
    EXPECT_GE(x.at("mean_step_s").get<double>(), last);
    last = x.at("mean_step_s").get<double>();
    for (int g : x.at("group_gpus").get<std::vector<int>>()) EXPECT_EQ(g % x.at("tp").get<int>(), 0);
  }
  EXPECT_TRUE(c.front().at("fits").get<bool>());
  // --out writes the best candidate as a variable-length plan weft train runs.
  const std::string out = ::testing::TempDir() + "plan_lengths_out.json";
  auto w = test::run_cli(register_plan_commands, {"plan", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus",
                                                   "16", "--global-batch", "64", "--lengths", path, "--steps", "4",
                                                   "--max-seq", "32768", "--out", out});
  ASSERT_EQ(w.code, 0) << w.err;
  EXPECT_NE(w.out.find("plan written to " + out), std::string::npos) << w.out;
  auto p = read_plan_file(out);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->train.varlen);
  EXPECT_EQ(p->train.global_batch, 64);
  EXPECT_EQ(p->train.seq, 32768);
  EXPECT_EQ(p->train.pp, 1);
  const int tp = c.front().at("tp").get<int>();
  for (const LayerStrategy& l : p->stages.at(0).layers) {
    EXPECT_EQ(l.tp, tp);
    EXPECT_EQ(l.dp, 16 / tp);
    EXPECT_EQ(l.zero, c.front().at("zero").get<int>());
    EXPECT_EQ(to_string(l.recompute), c.front().at("recompute").get<std::string>());
  }
  EXPECT_NEAR(p->predicted.step_time_s, c.front().at("mean_step_s").get<double>(), 1e-9);
  // The batch need not divide by dp in a variable-length plan (documents, not samples); without
  // train.varlen it must.
  Plan odd = p.value();
  odd.train.global_batch = 61;
  EXPECT_TRUE(validate(odd).ok());
  odd.train.varlen = false;
  EXPECT_FALSE(validate(odd).ok());
  // Commands that cost fixed-length batches refuse it, naming what handles it.
  auto est = test::run_cli(register_plan_commands, {"estimate", "--plan", out});
  EXPECT_EQ(est.code, 2);
  EXPECT_NE(est.err.find("a variable-length plan (train.varlen: 64 documents of at most 32768 tokens"),
            std::string::npos)
      << est.err;
  auto none = test::run_cli(register_plan_commands,
                            {"plan", "--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "16", "--global-batch", "64"});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("--seq: required (or give --lengths FILE)"), std::string::npos) << none.err;
}

// Mixed and straggling devices (docs/search.md §9): the JSON keeps step_time_s and baselines
// {uniform_s, fastest_subset_s} (relied on), the plan carries its devices, and bad input names the
// field and the numbers.
TEST(CliPlan, MixedClusterReportsDeviceGroupsAndBaselines) {
  const std::string out = tmp("mixed_plan.json");
  CliRun r = run({"plan", "--model", "llama-2-7b", "--cluster", "a100-80gb:1,h100-80gb:1", "--seq", "4096",
                  "--global-batch", "64", "--format", "json", "--out", out});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  const double step = j.at("step_time_s").get<double>();
  ASSERT_TRUE(j.at("baselines").at("uniform_s").is_number()) << j["baselines"].dump();
  ASSERT_TRUE(j.at("baselines").at("fastest_subset_s").is_number()) << j["baselines"].dump();
  EXPECT_LT(step, j["baselines"]["uniform_s"].get<double>());
  EXPECT_LT(step, j["baselines"]["fastest_subset_s"].get<double>());
  EXPECT_EQ(j["baselines"]["fastest_subset"], "8 x H100-SXM5-80GB");
  ASSERT_EQ(j.at("device_groups").size(), 2u);
  int ranks = 0;
  for (const Json& g : j["device_groups"]) {
    ranks += g.at("ranks").get<int>();
    EXPECT_LE(g.at("memory_gib").get<double>(), g.at("memory_budget_gib").get<double>());
  }
  EXPECT_EQ(ranks, 16);
  auto plan = read_plan_file(out);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_TRUE(plan->devices.has_value());
  EXPECT_EQ(plan->devices->cluster.groups.size(), 2u);
  EXPECT_EQ(plan->world_size(), 16);
  // weft estimate costs the written plan on its devices: the same step time.
  CliRun e = run({"estimate", "--plan", out, "--format", "json"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NEAR(Json::parse(e.out).at("step_time_s").get<double>(), step, 1e-9 * step);
  // report, simulate and export draw one kind of device: refused, naming what handles the plan.
  for (const char* command : {"report", "simulate", "export"}) {
    auto refused = read_fixed_plan(out, command);
    ASSERT_FALSE(refused.ok()) << command;
    EXPECT_NE(refused.error().message.find("a plan for mixed or straggling devices (devices: 2 node groups, 16 ranks)"),
              std::string::npos)
        << refused.error().message;
  }
  EXPECT_TRUE(read_fixed_plan(out, "estimate").ok());
  std::filesystem::remove(out);
  // The table names each group and both baselines.
  CliRun t = run({"plan", "--model", "llama-2-7b", "--cluster", "a100-80gb:1,h100-80gb:1", "--seq", "4096",
                  "--global-batch", "64"});
  ASSERT_EQ(t.code, 0) << t.err;
  for (const char* want : {"device group", "A100-SXM4-80GB", "H100-SXM5-80GB", "the best uniform plan",
                           "fastest homogeneous subset (8 x H100-SXM5-80GB)"})
    EXPECT_NE(t.out.find(want), std::string::npos) << want << "\n" << t.out;
}

TEST(CliPlan, StragglerGivesTheSlowGpuLessWork) {
  CliRun r = run({"plan", "--model", "llama-2-7b", "--cluster", "h100-80gb", "--gpus", "8", "--straggler", "1:2",
                  "--seq", "4096", "--global-batch", "64", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_GT(j["baselines"]["uniform_s"].get<double>() / j["step_time_s"].get<double>(), 1.3) << j["baselines"].dump();
  const Json& devices = j["plan"]["devices"];
  EXPECT_EQ(devices["slowdown"][1], 2.0);
}

// A hardware profile's measured rank speeds (weft profile hardware) are stragglers of a cluster
// of as many GPUs: a rank at 2x is planned slow, one 2 % off is not (below kMeasuredStraggler),
// --straggler replaces a measurement; on a cluster of another size they are not applied, and the
// note says so.
TEST(CliPlan, AHardwareProfilesMeasuredRankSpeedsAreStragglers) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "weft_rank_speed_test";
  std::filesystem::create_directories(dir);
  HardwareProfile hw = testing::one_node_profile(4);
  hw.machine.rank_slowdown = {1.0, 2.0, 1.02, 0.99};
  const std::string profile = (dir / "hw.json").string();
  ASSERT_TRUE(write_hardware_profile(profile, hw).ok());
  const std::string model = (dir / "tiny.json").string();
  {
    std::FILE* f = std::fopen(model.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(R"({"name": "tiny", "vocab": 512, "hidden": 256, "tied_embeddings": false, "norm": "layernorm",
      "position": "learned", "max_seq": 128, "groups": [{"name": "decoder", "count": 4, "kind": "decoder",
      "hidden": 256, "heads": 4, "kv_heads": 4, "head_dim": 64, "ffn": 1024, "ffn_kind": "gelu", "bias": true}]})",
               f);
    std::fclose(f);
  }
  const std::vector<std::string> base{"plan", "--model", model, "--hardware-profile", profile, "--seq", "128",
                                      "--global-batch", "32", "--format", "json"};
  CliRun r = run(base);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("stragglers from " + profile + "'s measured rank speeds: GPU 1 2.00x"), std::string::npos)
      << r.err;
  const Json j = Json::parse(r.out);
  const Json& slowdown = j["plan"]["devices"]["slowdown"];
  ASSERT_EQ(slowdown.size(), 4u) << j["plan"]["devices"].dump();
  EXPECT_EQ(slowdown[1].get<double>(), 2.0);
  EXPECT_EQ(slowdown[2].get<double>(), 1.0);
  EXPECT_GT(j["baselines"]["uniform_s"].get<double>() / j["step_time_s"].get<double>(), 1.1) << j["baselines"].dump();

  // --straggler for the same GPU replaces the measurement.
  CliRun over = run(with(base, {"--straggler", "1:1.5"}));
  ASSERT_EQ(over.code, 0) << over.err;
  EXPECT_EQ(Json::parse(over.out)["plan"]["devices"]["slowdown"][1].get<double>(), 1.5);

  // Eight GPUs: the four measured ranks are not these devices.
  CliRun other = run(with(base, {"--gpus", "8"}));
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_NE(other.err.find("the cluster has 8 GPUs, so they are not applied"), std::string::npos) << other.err;
  EXPECT_FALSE(Json::parse(other.out)["plan"].contains("devices"));
  std::filesystem::remove_all(dir);
}

TEST(CliPlan, MixedAndStragglerBadInputNamesTheFieldAndNumbers) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--cluster", "h100-80gb", "--gpus", "8", "--straggler", "8:2"},
       "--straggler: GPU 8 is out of range (the cluster has GPUs 0-7)"},
      {{"--cluster", "h100-80gb", "--gpus", "8", "--straggler", "1:0"}, "the factor must be > 0, got 0"},
      {{"--cluster", "h100-80gb", "--gpus", "8", "--straggler", "1:-2"}, "the factor must be > 0, got -2"},
      {{"--cluster", "a100-80gb:1,q100:1"}, "unknown preset \"q100\""},
      {{"--cluster", "a100-80gb:1,h100-80gb:0"}, "nodes must be a positive integer"},
      {{"--cluster", "a100-80gb:1,h100-80gb:1", "--gpus", "8"}, "apply to one kind only"},
      {{"--cluster", "a100-80gb:1,h100-80gb:1", "--cost-model", "galvatron"}, "weft's model"}};
  for (const auto& [flags, want] : cases) {
    std::vector<std::string> args{"plan", "--model", "llama-2-7b", "--seq", "4096", "--global-batch", "64"};
    args.insert(args.end(), flags.begin(), flags.end());
    CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << want << "\n" << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  }
  // Node groups that cannot hold the model in any plan: the least memory it would need.
  CliRun nofit = run({"plan", "--model", "llama-2-70b", "--cluster", "v100-32gb:1,a100-40gb:1", "--seq", "4096",
                      "--global-batch", "64", "--dtype", "fp16"});
  EXPECT_EQ(nofit.code, 3) << nofit.err;
  EXPECT_NE(nofit.err.find("needs"), std::string::npos) << nofit.err;
  EXPECT_NE(nofit.err.find("GiB per GPU and the smallest devices hold 32.0 GiB"), std::string::npos) << nofit.err;
}

// --schedule zb-h1 in both commands: `weft estimate` costs it (faster than the same strategy under
// 1F1B at pp 4), `weft plan --schedule 1f1b,zb-h1` searches it, and a framework without it refuses.
TEST(CliPlan, ZbH1Schedule) {
  auto args = with({"estimate"}, k7b);
  const std::vector<std::string> strategy{"--micro-batch", "1", "--tp", "2", "--pp", "4", "--zero", "1",
                                          "--format", "json"};
  CliRun zb = run(with(with(args, strategy), {"--schedule", "zb-h1"}));
  ASSERT_EQ(zb.code, 0) << zb.err;
  CliRun one = run(with(with(args, strategy), {"--schedule", "1f1b"}));
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_LT(Json::parse(zb.out).at("step_time_s").get<double>(), Json::parse(one.out).at("step_time_s").get<double>());
  CliRun table = run(with(with(args, {"--micro-batch", "1", "--tp", "2", "--pp", "4"}), {"--schedule", "zb-h1"}));
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("pp4 zb-h1 m"), std::string::npos) << table.out;

  const std::vector<std::string> small{"plan", "--model", "gpt3-1.3b", "--cluster", "a100-80gb", "--gpus", "8",
                                       "--seq", "2048", "--global-batch", "64", "--format", "json"};
  CliRun p = run(with(small, {"--pp", "4", "--schedule", "1f1b,zb-h1"}));
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(Json::parse(p.out).at("plan").at("train").at("schedule"), "zb-h1");
  CliRun meg = run(with(small, {"--schedule", "zb-h1", "--framework", "megatron"}));
  EXPECT_EQ(meg.code, 2);
  EXPECT_NE(meg.err.find("--schedule: framework megatron has no zb-h1 schedule (Megatron-LM mainline has no "
                         "zero-bubble schedule)"),
            std::string::npos)
      << meg.err;
}

}  // namespace
}  // namespace weft::cli

namespace weft::cli {
namespace {

// --cp, --ulysses and --vp (relied on): the layers' degrees and the interleaving depth to consider.
TEST(CliPlan, DegreesTheUserLists) {
  const std::vector<std::string> longseq{"plan", "--model", "llama-3-70b", "--cluster", "h100-80gb", "--gpus", "64",
                                         "--seq", "131072", "--global-batch", "64"};
  // Every layer takes the listed degrees, even where the rules would fill Ulysses first (here
  // Ulysses 8 is what fills the 64 heads over tp 1) or keep cp for longer sequences; weft train
  // runs the plan.
  CliRun r = run(with(longseq, {"--cp", "8", "--ulysses", "8", "--format", "json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  auto p = plan_from_json(Json::parse(r.out).at("plan"));
  ASSERT_TRUE(p.ok()) << p.error().message;
  for (int i = 0; i < p->model.num_layers(); ++i) {
    EXPECT_EQ(p->layer_strategy(i).cp, 8) << "layer " << i;
    EXPECT_EQ(p->layer_strategy(i).ulysses, 8) << "layer " << i;
  }
  EXPECT_TRUE(runtime_supports(*p).ok()) << runtime_supports(*p).error().message;
  CliRun shortseq = run(with(with({"plan"}, k7b), {"--cp", "2", "--format", "json"}));
  ASSERT_EQ(shortseq.code, 0) << shortseq.err;
  auto ps = plan_from_json(Json::parse(shortseq.out).at("plan"));
  ASSERT_TRUE(ps.ok());
  EXPECT_EQ(ps->layer_strategy(0).cp, 2);

  // --schedule interleaved --vp 2: two virtual stages per device group, a plan weft train runs.
  CliRun v = run(with(with({"plan"}, k7b), {"--schedule", "interleaved", "--vp", "2", "--format", "json"}));
  ASSERT_EQ(v.code, 0) << v.err;
  auto pv = plan_from_json(Json::parse(v.out).at("plan"));
  ASSERT_TRUE(pv.ok());
  EXPECT_EQ(pv->train.schedule, Schedule::kInterleaved);
  EXPECT_EQ(pv->train.vp, 2);
  EXPECT_EQ(static_cast<int>(pv->stages.size()), 2 * pv->train.pp);
  EXPECT_TRUE(runtime_supports(*pv).ok());

  for (const char* flag : {"--cp", "--ulysses", "--vp"}) {
    CliRun bad = run(with(with({"plan"}, k7b), {flag, "0"}));
    EXPECT_EQ(bad.code, 2) << flag;
    EXPECT_NE(bad.err.find(std::string(flag) + ": must be >= 1, got 0"), std::string::npos) << bad.err;
  }
}

}  // namespace
}  // namespace weft::cli
