// `weft train --tasks`: a multi-task model's waves on 4 ranks against one process running the same
// tasks, batches and seed (docs/multitask.md, "Running the waves"): losses, every parameter, the
// parameters each rank holds, and the bytes sent between pieces against the plan's transfers.
#include <gtest/gtest.h>

#include <fstream>

#include "rt_util.h"
#include "weft/plan/wave_plan.h"

namespace weft::rttest {
namespace {

// Two tasks sharing a decoder backbone: a runs enc_a (4 layers, hidden 32), b runs enc_b (1 layer,
// hidden 16, SwiGLU without biases), each flowing into the backbone (grouped key/value heads).
const char* kTwoTasks = R"({"name": "two",
 "modules": [
  {"name": "enc_a", "tokens": 6, "layers": 4, "hidden": 32, "heads": 4, "vocab": 64},
  {"name": "enc_b", "tokens": 4, "layers": 1, "hidden": 16, "heads": 2, "vocab": 64, "ffn_kind": "swiglu", "ffn": 24},
  {"name": "backbone", "kind": "decoder", "tokens": 8, "layers": 2, "hidden": 32, "heads": 4, "kv_heads": 2, "vocab": 64}
 ],
 "flows": [{"from": "enc_a", "to": "backbone"}, {"from": "enc_b", "to": "backbone"}],
 "tasks": [
  {"name": "a", "modules": ["enc_a", "backbone"], "batch": 8, "loss": "lm"},
  {"name": "b", "modules": ["enc_b", "backbone"], "batch": 8, "loss": "lm"}
 ]})";

// Wave 0: the two encoders side by side (enc_a on ranks 0-1, enc_b on 2-3); wave 1: a's backbone
// on all four; wave 2: b's backbone's first layer on ranks 0-1; wave 3: its second on ranks 1-3
// (shares of 3, 3 and 2 samples).
const char* kFourRanks = R"({"kind": "tasks", "format_version": 1, "world": 4, "waves": [
 {"modules": [{"task": "a", "module": "enc_a", "first_rank": 0, "gpus": 2, "first_layer": 0, "layers": 4},
              {"task": "b", "module": "enc_b", "first_rank": 2, "gpus": 2, "first_layer": 0, "layers": 1}]},
 {"modules": [{"task": "a", "module": "backbone", "first_rank": 0, "gpus": 4, "first_layer": 0, "layers": 2}]},
 {"modules": [{"task": "b", "module": "backbone", "first_rank": 0, "gpus": 2, "first_layer": 0, "layers": 1}]},
 {"modules": [{"task": "b", "module": "backbone", "first_rank": 1, "gpus": 3, "first_layer": 1, "layers": 1}]}
]})";

// The shapes packed groups give (weft/multitask/allocator.h, AllocateMode::kPacked): enc_a wrapped
// around, its first two layers on ranks 2-3 and its last two on rank 0 two waves later; the group of
// ranks 0-1 running enc_b, then cut into two single-rank slots (b's backbone's first layer on rank
// 1 beside enc_a's tail on rank 0); b's second backbone layer on ranks 2-3; a's backbone on all.
const char* kPackedShape = R"({"kind": "tasks", "format_version": 1, "world": 4, "waves": [
 {"modules": [{"task": "b", "module": "enc_b", "first_rank": 0, "gpus": 2, "first_layer": 0, "layers": 1},
              {"task": "a", "module": "enc_a", "first_rank": 2, "gpus": 2, "first_layer": 0, "layers": 2}]},
 {"modules": [{"task": "b", "module": "backbone", "first_rank": 1, "gpus": 1, "first_layer": 0, "layers": 1}]},
 {"modules": [{"task": "a", "module": "enc_a", "first_rank": 0, "gpus": 1, "first_layer": 2, "layers": 2},
              {"task": "b", "module": "backbone", "first_rank": 2, "gpus": 2, "first_layer": 1, "layers": 1}]},
 {"modules": [{"task": "a", "module": "backbone", "first_rank": 0, "gpus": 4, "first_layer": 0, "layers": 2}]}
]})";

// A small Multitask-CLIP: two contrastive tasks sharing the image encoder (img with txt, img with
// aud), each pairing its two encoders' embeddings over the batch. SwiGLU layers have no biases (a
// key bias's gradient is zero but for rounding, which AdamW would scale up to a step).
const char* kClip = R"({"name": "mini-clip",
 "modules": [
  {"name": "img", "tokens": 5, "layers": 2, "hidden": 32, "heads": 4, "vocab": 64, "ffn_kind": "swiglu", "ffn": 48},
  {"name": "txt", "tokens": 6, "layers": 2, "hidden": 24, "heads": 2, "vocab": 64, "ffn_kind": "swiglu", "ffn": 40},
  {"name": "aud", "tokens": 4, "layers": 1, "hidden": 16, "heads": 2, "vocab": 64, "ffn_kind": "swiglu", "ffn": 24}
 ],
 "tasks": [
  {"name": "img-txt", "modules": ["img", "txt"], "batch": 8, "loss": "contrastive"},
  {"name": "img-aud", "modules": ["img", "aud"], "batch": 8, "loss": "contrastive"}
 ]})";
// Wave 0: img-txt's encoders and img-aud's aud side by side; waves 1 and 2: img-aud's img, its
// first layer on all four ranks and its second on ranks 2-3 (the pair's embeddings then on ranks
// 2-3 and 3, img-txt's on 0-1 and 2).
const char* kClipPlan = R"({"kind": "tasks", "format_version": 1, "world": 4, "waves": [
 {"modules": [{"task": "img-txt", "module": "img", "first_rank": 0, "gpus": 2, "first_layer": 0, "layers": 2},
              {"task": "img-txt", "module": "txt", "first_rank": 2, "gpus": 1, "first_layer": 0, "layers": 2},
              {"task": "img-aud", "module": "aud", "first_rank": 3, "gpus": 1, "first_layer": 0, "layers": 1}]},
 {"modules": [{"task": "img-aud", "module": "img", "first_rank": 0, "gpus": 4, "first_layer": 0, "layers": 1}]},
 {"modules": [{"task": "img-aud", "module": "img", "first_rank": 2, "gpus": 2, "first_layer": 1, "layers": 1}]}
]})";

// An encoder + LLM, the encoder on every rank of the LLM's two pipeline stages (each stage two
// ranks, data parallel): Optimus's colocation, without its bubble scheduling.
const char* kVitGpt = R"({"name": "vit-gpt",
 "modules": [
  {"name": "vit", "tokens": 4, "layers": 2, "hidden": 16, "heads": 2, "vocab": 32},
  {"name": "gpt", "kind": "decoder", "tokens": 8, "layers": 4, "hidden": 32, "heads": 4, "vocab": 64, "tied": false}
 ],
 "flows": [{"from": "vit", "to": "gpt"}],
 "tasks": [{"name": "caption", "modules": ["vit", "gpt"], "batch": 8, "loss": "lm"}]})";
const char* kColocated = R"({"kind": "tasks", "format_version": 1, "world": 4, "waves": [
 {"modules": [{"task": "caption", "module": "vit", "first_rank": 0, "gpus": 4, "first_layer": 0, "layers": 2}]},
 {"modules": [{"task": "caption", "module": "gpt", "first_rank": 0, "gpus": 2, "first_layer": 0, "layers": 2}]},
 {"modules": [{"task": "caption", "module": "gpt", "first_rank": 2, "gpus": 2, "first_layer": 2, "layers": 2}]}
]})";

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

const std::string kFlags = " train --steps 5 --lr 3e-3 --clip 1.0 --weight-decay 0.1 --seed 7 --format json --timeout 60";

// Runs the plan on 4 ranks and the tasks in one process; compares them.
void expect_tasks_parity(const std::string& dir, const std::string& tasks, const std::string& plan) {
  const RunResult ref = run(driver() + kFlags + " --tasks " + tasks + " --save-params " + dir + "/ref.params");
  ASSERT_EQ(ref.status, 0) << ref.output;
  const RunResult got = run(driver() + " launch -n 4 -- " + driver() + kFlags + " --tasks " + tasks + " --plan " + plan +
                            " --save-params " + dir + "/p4.params");
  ASSERT_EQ(got.status, 0) << got.output;
  ASSERT_EQ(ref.losses.size(), 5u) << ref.output;
  ASSERT_EQ(got.losses.size(), 5u) << got.output;
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-5 * std::fabs(ref.losses[i])) << i;
  const runtime::ParamsFile a = read_params(dir + "/p4.params"), b = read_params(dir + "/ref.params");
  auto d = runtime::compare_params(a, b);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_LE(d->max_abs, 1e-5) << d->worst;
  // Trained: the parameters moved from their initial values (AdamW's first step alone moves each
  // weight by about the learning rate).
  const RunResult init = run(driver() + " train --steps 0 --seed 7 --format json --tasks " + tasks + " --save-params " +
                             dir + "/init.params");
  ASSERT_EQ(init.status, 0) << init.output;
  auto moved = runtime::compare_params(read_params(dir + "/init.params"), b);
  ASSERT_TRUE(moved.ok());
  EXPECT_GT(moved->max_abs, 1e-3);
  // The bytes sent between pieces are the plan's transfers, forward and back, fp32, every step.
  Result<multitask::TaskSpec> t = multitask::load_tasks(tasks);
  Result<WavePlan> p = load_wave_plan(plan);
  ASSERT_TRUE(t.ok() && p.ok());
  double elements = 0;
  for (const WaveTransfer& x : wave_transfers(*p, *t)) elements += static_cast<double>(x.elements);
  ASSERT_GT(elements, 0);
  EXPECT_EQ(got.summary.at("p2p_bytes").get<double>(), elements * 2 * 4 * 5);
  EXPECT_EQ(got.summary.at("p2p_bytes_predicted").get<double>(), elements * 2 * 4 * 5);
  std::printf("tasks parity: params max abs diff %.2e (%s); %.0f bytes sent between pieces; %.1f s\n", d->max_abs,
              d->worst.c_str(), got.summary.at("p2p_bytes").get<double>(), got.seconds);
}

TEST(RuntimeTasks, TwoEncodersSideBySideThenTheSharedBackbone) {
  const std::string dir = temp_dir("tasks_two");
  const std::string tasks = write(dir, "two.json", kTwoTasks), plan = write(dir, "plan.json", kFourRanks);
  expect_tasks_parity(dir, tasks, plan);
  // Rank 0 never runs enc_b: it holds every parameter but enc_b's.
  const RunResult got = run(driver() + " launch -n 4 -- " + driver() + " train --steps 1 --seed 7 --format json --tasks " +
                            tasks + " --plan " + plan);
  ASSERT_EQ(got.status, 0) << got.output;
  double total = 0, enc_b = 0;
  for (const runtime::NamedParam& p : read_params(dir + "/ref.params").params) {
    total += static_cast<double>(p.data.size());
    if (p.name.rfind("enc_b.", 0) == 0) enc_b += static_cast<double>(p.data.size());
  }
  EXPECT_GT(enc_b, 0);
  EXPECT_EQ(got.summary.at("local_params_rank0").get<double>(), total - enc_b);
  std::filesystem::remove_all(dir);
}

TEST(RuntimeTasks, WrappedAndSubdividedGroupsMatchOneProcess) {
  const std::string dir = temp_dir("tasks_packed");
  const std::string tasks = write(dir, "two.json", kTwoTasks), plan = write(dir, "plan.json", kPackedShape);
  Result<WavePlan> p = load_wave_plan(plan);
  ASSERT_TRUE(p.ok()) << p.error().message;
  Result<multitask::TaskSpec> t = multitask::load_tasks(tasks);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(validate(*p, *t).ok()) << validate(*p, *t).error().message;
  expect_tasks_parity(dir, tasks, plan);
  std::filesystem::remove_all(dir);
}

TEST(RuntimeTasks, ContrastiveTasksMatchOneProcess) {
  const std::string dir = temp_dir("tasks_clip");
  const std::string tasks = write(dir, "clip.json", kClip);
  expect_tasks_parity(dir, tasks, write(dir, "plan.json", kClipPlan));
  // The samples are random ids, so no pair can be told from another: a task's loss can only come
  // down to about ln 8 (every match equally likely), which training reaches from above.
  const RunResult ref = run(driver() + " train --steps 30 --lr 3e-3 --seed 7 --format json --tasks " + tasks);
  ASSERT_EQ(ref.status, 0) << ref.output;
  ASSERT_EQ(ref.losses.size(), 30u);
  EXPECT_GT(ref.losses.front(), 2 * std::log(8.0) + 0.5);
  EXPECT_NEAR(ref.losses.back(), 2 * std::log(8.0), 0.05);
  // The temperature is each task's own, held by the ranks of its two embeddings.
  const runtime::ParamsFile f = read_params(dir + "/p4.params");
  int temperatures = 0;
  for (const runtime::NamedParam& p : f.params)
    if (p.name.find("logit_scale") != std::string::npos) ++temperatures;
  EXPECT_EQ(temperatures, 2);
  // Three last modules, or one, is not a contrastive pair.
  const std::string three = write(dir, "three.json", R"({"name": "x", "modules": [
    {"name": "a", "tokens": 4, "layers": 1, "hidden": 16, "heads": 2, "vocab": 32},
    {"name": "b", "tokens": 4, "layers": 1, "hidden": 16, "heads": 2, "vocab": 32},
    {"name": "c", "tokens": 4, "layers": 1, "hidden": 16, "heads": 2, "vocab": 32}],
    "tasks": [{"name": "abc", "modules": ["a", "b", "c"], "batch": 4, "loss": "contrastive"}]})");
  const RunResult bad = run(driver() + " train --steps 1 --tasks " + three);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("task \"abc\": a contrastive loss pairs two modules"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("it has 3"), std::string::npos) << bad.output;
  std::filesystem::remove_all(dir);
}

TEST(RuntimeTasks, EncoderColocatedOnTheLlmsPipelineRanks) {
  const std::string dir = temp_dir("tasks_vit");
  expect_tasks_parity(dir, write(dir, "vit.json", kVitGpt), write(dir, "plan.json", kColocated));
  std::filesystem::remove_all(dir);
}

// The planner's own plan for the two tasks on 4 GPUs, run as written.
TEST(RuntimeTasks, PlannedWavesMatchOneProcess) {
  const std::string dir = temp_dir("tasks_planned");
  const std::string tasks = write(dir, "two.json", kTwoTasks);
  const RunResult planned = run(std::string(WEFT_CLI) + " plan --tasks " + tasks +
                                " --cluster a100-80gb --gpus 4 --format json > " + dir + "/plan.json");
  ASSERT_EQ(planned.status, 0) << planned.output;
  Result<WavePlan> p = load_wave_plan(dir + "/plan.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->world, 4);
  const RunResult ref = run(driver() + kFlags + " --tasks " + tasks + " --save-params " + dir + "/ref.params");
  const RunResult got = run(driver() + " launch -n 4 -- " + driver() + kFlags + " --tasks " + tasks + " --plan " + dir +
                            "/plan.json --save-params " + dir + "/p4.params");
  ASSERT_EQ(ref.status, 0) << ref.output;
  ASSERT_EQ(got.status, 0) << got.output;
  auto d = runtime::compare_params(read_params(dir + "/p4.params"), read_params(dir + "/ref.params"));
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_LE(d->max_abs, 1e-5) << d->worst;
  EXPECT_EQ(got.summary.at("p2p_bytes").get<double>(), got.summary.at("p2p_bytes_predicted").get<double>());
  std::filesystem::remove_all(dir);
}

TEST(RuntimeTasks, BadInputNamesTheTaskModuleAndNumbers) {
  const std::string dir = temp_dir("tasks_bad");
  const std::string tasks = write(dir, "two.json", kTwoTasks), plan = write(dir, "plan.json", kFourRanks);
  // A plan for 4 ranks on 1.
  RunResult r = run(driver() + kFlags + " --tasks " + tasks + " --plan " + plan);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("plan: world 4 ranks, but the job has 1"), std::string::npos) << r.output;
  // A loss the runtime does not train, and a contrastive task with one last module (enc_a flows
  // into the backbone).
  std::string text = kTwoTasks;
  text.replace(text.find("\"lm\""), 4, "\"mse\"");
  r = run(driver() + kFlags + " --tasks " + write(dir, "mse.json", text));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("task \"a\": loss \"mse\" is not one weft train --tasks runs"), std::string::npos)
      << r.output;
  text = kTwoTasks;
  text.replace(text.find("\"lm\""), 4, "\"contrastive\"");
  r = run(driver() + kFlags + " --tasks " + write(dir, "contrastive.json", text));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("task \"a\": a contrastive loss pairs two modules that flow into none of the task's "
                          "others; it has 1"),
            std::string::npos)
      << r.output;
  // Overlapping pieces.
  std::string bad = kFourRanks;
  bad.replace(bad.find("\"first_rank\": 2"), 15, "\"first_rank\": 1");
  r = run(driver() + " launch -n 4 -- " + driver() + kFlags + " --tasks " + tasks + " --plan " +
          write(dir, "bad.json", bad));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("wave 0, b/enc_b: rank 1 also runs a/enc_a in this wave"), std::string::npos) << r.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weft::rttest
