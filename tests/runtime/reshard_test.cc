// Checkpoints that move between plans: a run checkpointed under one plan and world size continues
// under another (`weft train --plan B --resume`, or `weft checkpoint convert` first) with the losses
// of the run that never stopped, within 1e-5; `weft checkpoint inspect` says what a checkpoint
// holds and refuses a damaged one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "rt_util.h"

namespace weft::rttest {
namespace {

constexpr int kSteps = 8, kSaved = 4;

std::string launch(int n) { return n > 1 ? driver() + " launch -n " + std::to_string(n) + " -- " : ""; }

// Runs plan a for kSteps, and again with a checkpoint at step kSaved where rank 0 exits at step
// kSaved + 1 (the schedule is the kSteps run's); returns the uninterrupted run's losses.
std::vector<double> checkpointed(const Plan& a, const std::string& dir) {
  const std::string pa = write_plan(a, dir, "a");
  const std::string base = launch(a.world_size()) + driver() + train_flags(kSteps) + " --plan " + pa;
  const RunResult whole = run(base);
  EXPECT_EQ(whole.status, 0) << whole.output;
  EXPECT_EQ(whole.losses.size(), static_cast<size_t>(kSteps)) << whole.output;
  const RunResult cut = run(base + " --checkpoint-dir " + dir + "/ck --checkpoint-every " + std::to_string(kSaved) +
                            " --fault 0:" + std::to_string(kSaved + 1) + ":exit");
  EXPECT_NE(cut.status, 0) << cut.output;
  return whole.losses;
}

// Resumes (a copy of) the checkpoint in `ck` under plan b; its losses must be the uninterrupted run's.
RunResult resume_under(const Plan& b, const std::string& dir, const std::string& name, const std::string& ck,
                       const std::vector<double>& whole) {
  const std::string pb = write_plan(b, dir, name);
  // The resumed run saves its last step there too; the next resume starts from the original.
  const std::string copy = dir + "/ck_" + name;
  std::filesystem::remove_all(copy);
  std::filesystem::copy(ck, copy, std::filesystem::copy_options::recursive);
  const RunResult r = run(launch(b.world_size()) + driver() + train_flags(kSteps) + " --plan " + pb +
                          " --checkpoint-dir " + copy + " --resume");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.losses.size(), static_cast<size_t>(kSteps - kSaved)) << r.output;
  double worst = 0;
  for (size_t i = 0; i < r.losses.size() && kSaved + i < whole.size(); ++i) {
    EXPECT_NEAR(r.losses[i], whole[kSaved + i], 1e-5) << name << ": step " << kSaved + i + 1;
    worst = std::max(worst, std::abs(r.losses[i] - whole[kSaved + i]));
  }
  std::printf("resumed under %s: largest |loss - uninterrupted| over steps %d-%d: %.2e\n", name.c_str(), kSaved + 1,
              kSteps, worst);
  return r;
}

// 4 ranks, tp 2 + Megatron-SP on a 2-stage pipeline (Llama-style: GQA, SwiGLU, untied head).
Plan tp_pp() { return uniform(tiny_llama(), 4, 2, strat(2, 1, 1, true), {2, 2}, Schedule::k1F1B, 8, 4); }

TEST(RuntimeReshard, TensorPipelineResumesUnderZero3OneRankAndTensorData) {
  const std::string dir = temp_dir("reshard_tp_pp");
  const std::vector<double> whole = checkpointed(tp_pp(), dir);
  ASSERT_EQ(whole.size(), static_cast<size_t>(kSteps));
  const std::string ck = dir + "/ck";
  // 2 ranks, ZeRO-3: parameters and moments cut into flat shards of each layer.
  const RunResult z3 = resume_under(uniform(tiny_llama(), 2, 1, strat(1, 2, 1, false, 3)), dir, "z3", ck, whole);
  EXPECT_NE(z3.output.find("re-sharded from a checkpoint of 4 ranks under plan "), std::string::npos) << z3.output;
  // One process.
  resume_under(uniform(tiny_llama(), 1, 1, strat(1, 1)), dir, "one", ck, whole);
  // 4 ranks again, per layer: tp 2 x dp 2 ZeRO-2, then Ulysses 2 x dp 2 ZeRO-1.
  resume_under(make_plan(tiny_llama(), 4, 1, Schedule::k1F1B, strat(2, 2, 1, true, 1),
                         {{strat(2, 2, 1, true, 2), strat(1, 2, 2, false, 1), strat(2, 2, 1, true, 2),
                           strat(1, 2, 2, false, 1)}},
                         8, 2),
               dir, "mixed", ck, whole);
  std::filesystem::remove_all(dir);
}

TEST(RuntimeReshard, TiedPipelineResumesOnDataParallelAndConvertsOffline) {
  // GPT-2 style with the embedding tied across a 2-stage pipeline (the table on stage 0, its copy
  // on stage 1) and ZeRO-1 over dp 2.
  const std::string dir = temp_dir("reshard_tied");
  const Plan a = uniform(tiny_gpt(), 4, 2, strat(1, 2, 1, false, 1), {2, 2}, Schedule::k1F1B, 8, 2);
  const std::vector<double> whole = checkpointed(a, dir);
  ASSERT_EQ(whole.size(), static_cast<size_t>(kSteps));
  const Plan b = uniform(tiny_gpt(), 2, 1, strat(2, 1, 1, true));
  const RunResult on_load = resume_under(b, dir, "b", dir + "/ck", whole);

  // Offline: convert, inspect, resume from the converted directory: the same losses exactly (the
  // same values loaded), and the converted checkpoint is one of plan b's own.
  const RunResult cv = run(driver() + " checkpoint convert " + dir + "/ck --plan " + dir + "/b.json --out " + dir + "/ck2");
  ASSERT_EQ(cv.status, 0) << cv.output;
  const RunResult in = run(driver() + " checkpoint inspect " + dir + "/ck2");
  ASSERT_EQ(in.status, 0) << in.output;
  EXPECT_NE(in.output.find("step 4, optimizer steps 4, written by 2 ranks, format 2"), std::string::npos) << in.output;
  EXPECT_NE(in.output.find("each held whole (parameters and both AdamW moments)"), std::string::npos) << in.output;
  EXPECT_NE(in.output.find("    embed.wte [64,32]  ranks 0-1\n"), std::string::npos) << in.output;
  const RunResult conv = resume_under(b, dir, "b2", dir + "/ck2", whole);
  EXPECT_EQ(conv.output.find("re-sharded"), std::string::npos) << conv.output;
  ASSERT_EQ(conv.losses.size(), on_load.losses.size());
  for (size_t i = 0; i < conv.losses.size(); ++i) EXPECT_EQ(conv.losses[i], on_load.losses[i]) << "step " << kSaved + i + 1;

  // The original, as written: 4 ranks, the tied table on ranks 0-1 and its copy on 2-3.
  const RunResult orig = run(driver() + " checkpoint inspect " + dir + "/ck");
  ASSERT_EQ(orig.status, 0) << orig.output;
  EXPECT_NE(orig.output.find("written by 4 ranks"), std::string::npos) << orig.output;
  EXPECT_NE(orig.output.find("    embed.wte [64,32]  ranks 0-3\n"), std::string::npos) << orig.output;
  EXPECT_NE(orig.output.find("    layers.0.attn.wq [32,32]  ranks 0-1\n"), std::string::npos) << orig.output;
  std::filesystem::remove_all(dir);
}

TEST(RuntimeReshard, RefusesAnotherModelAndADamagedCheckpoint) {
  const std::string dir = temp_dir("reshard_bad");
  // ZeRO-1: each rank's file holds half of the moments.
  const Plan a = uniform(tiny_llama(), 2, 1, strat(1, 2, 1, false, 1));
  const std::string pa = write_plan(a, dir, "a");
  ASSERT_EQ(run(launch(2) + driver() + train_flags(2) + " --plan " + pa + " --checkpoint-dir " + dir + "/ck").status, 0);

  // Six layers where the checkpoint has four.
  const std::string pb = write_plan(uniform(tiny_llama(6), 1, 1, strat(1, 1), {6}), dir, "b");
  const RunResult deeper = run(driver() + train_flags(4) + " --plan " + pb + " --checkpoint-dir " + dir + "/ck --resume");
  EXPECT_EQ(deeper.status, 2) << deeper.output;
  EXPECT_NE(deeper.output.find("checkpoint has no layers.4.ln1.weight [32], which the plan's model (tiny-llama) holds"),
            std::string::npos)
      << deeper.output;

  // A rank file gone: inspect and convert say which, and convert leaves nothing behind.
  std::filesystem::remove(dir + "/ck/step-00000002/rank-1.bin");
  const std::string pc = write_plan(uniform(tiny_llama(), 1, 1, strat(1, 1)), dir, "c");
  const RunResult in = run(driver() + " checkpoint inspect " + dir + "/ck");
  EXPECT_EQ(in.status, 4) << in.output;
  EXPECT_NE(in.output.find("step-00000002/rank-1.bin"), std::string::npos) << in.output;
  const RunResult cv = run(driver() + " checkpoint convert " + dir + "/ck --plan " + pc + " --out " + dir + "/ck2");
  EXPECT_EQ(cv.status, 4) << cv.output;
  EXPECT_NE(cv.output.find("step-00000002/rank-1.bin"), std::string::npos) << cv.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/ck2/step-00000002")) << "a failed convert left its step directory";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weft::rttest
