// Golden estimates: `weft estimate --format json` for fixed plans across the presets, the
// frameworks and the cost models (weft's analytic model, its framework traits, the model
// calibrated by measured profiles, Galvatron's model), compared bit for bit with
// tests/golden/estimates.json. A refactoring must leave every figure identical; a change to the
// cost model that is meant to move figures regenerates the file on purpose:
//
//   WEFT_UPDATE_GOLDEN=1 build/bin/weft_golden_test     # rewrites tests/golden/estimates.json
//
// and the diff of that file is reviewed with the change. The test runs the weft binary itself, so
// it checks the whole path from flags and files to the printed figures.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "golden_file.h"
#include "run_weft.h"
#include "weft/core/json.h"

namespace weft {
namespace {

using namespace golden;

// Each case's arguments follow `weft estimate`.
std::vector<Case> cases() {
  const std::vector<std::string> l7 = llama2_7b_a100x8(), l70 = llama3_70b_h100x64(), g175 = gpt3_175b_a100x1024(),
                                 mix = mixtral_8x7b_h100x32(), gal = galvatron_llama2_7b();
  const std::vector<std::string> cal{"--hardware-profile", kDir + "/profiles/hw4.json", "--model-profile",
                                     kDir + "/profiles/layers.json", "--model", kDir + "/profiles/bench-gpt.json",
                                     "--cluster", kDir + "/profiles/cluster4.json", "--seq", "128",
                                     "--global-batch", "16", "--dtype", "fp32"};
  return {
      // weft's analytic model, Megatron traits (the default)
      {"l7-dp8-zero1", with(l7, {"--micro-batch", "1", "--zero", "1"})},
      {"l7-tp2sp-pp2-sel", with(l7, {"--tp", "2", "--pp", "2", "--sequence-parallel", "--micro-batch", "1",
                                     "--recompute", "selective"})},
      {"l7-tp8sp-full", with(l7, {"--tp", "8", "--sequence-parallel", "--micro-batch", "4", "--recompute", "full"})},
      {"l7-ulysses4-zero3", with(l7, {"--ulysses", "4", "--zero", "3", "--micro-batch", "2"})},
      {"l7-pp4-gpipe", with(l7, {"--pp", "4", "--micro-batch", "2", "--schedule", "gpipe", "--zero", "1"})},
      {"l7-fp32-dp8", with(l7, {"--micro-batch", "1", "--dtype", "fp32", "--recompute", "full"})},
      {"l7-fp16-tp4", with(l7, {"--tp", "4", "--micro-batch", "2", "--dtype", "fp16"})},
      {"l7-a100-40gb-zero2", {"--model", "llama-2-7b", "--cluster", "a100-40gb", "--gpus", "16", "--seq", "2048",
                              "--global-batch", "256", "--zero", "2", "--micro-batch", "2", "--recompute", "full"}},
      {"l70-tp8-pp4-interleaved", with(l70, {"--tp", "8", "--pp", "4", "--vp", "5", "--sequence-parallel",
                                             "--micro-batch", "1", "--zero", "1"})},
      {"l70-tp4-cp2-pp2", with(l70, {"--tp", "4", "--cp", "2", "--pp", "2", "--sequence-parallel",
                                     "--micro-batch", "1", "--recompute", "selective"})},
      {"l70-tp8-pp8-1f1b", with(l70, {"--tp", "8", "--pp", "8", "--sequence-parallel", "--micro-batch", "1"})},
      {"g175-tp8-pp16-interleaved", with(g175, {"--tp", "8", "--pp", "16", "--vp", "3", "--sequence-parallel",
                                                "--micro-batch", "1", "--zero", "1"})},
      {"g175-tp8-pp8-full", with(g175, {"--tp", "8", "--pp", "8", "--micro-batch", "2", "--recompute", "full"})},
      {"mixtral-tp2-ep8", with(mix, {"--tp", "2", "--ep", "8", "--sequence-parallel", "--micro-batch", "1",
                                     "--zero", "1"})},
      {"mixtral-ep4-pp2", with(mix, {"--ep", "4", "--pp", "2", "--micro-batch", "2", "--recompute", "full"})},
      {"l3-8b-h100-fp8", {"--model", "llama-3-8b", "--cluster", "h100-80gb", "--gpus", "8", "--seq", "8192",
                          "--global-batch", "128", "--tp", "2", "--sequence-parallel", "--dtype", "fp8",
                          "--micro-batch", "1", "--zero", "1"}},
      {"l3-405b-b200", {"--model", "llama-3-405b", "--cluster", "b200", "--gpus", "1024", "--seq", "8192",
                        "--global-batch", "1024", "--tp", "8", "--pp", "16", "--vp", "2", "--sequence-parallel",
                        "--micro-batch", "1", "--zero", "1", "--recompute", "selective"}},
      {"qwen2-h200-ulysses", {"--model", "qwen2-7b", "--cluster", "h200", "--gpus", "16", "--seq", "32768",
                              "--global-batch", "64", "--ulysses", "4", "--micro-batch", "1", "--zero", "3",
                              "--recompute", "full"}},
      {"gpt3-1.3b-v100", {"--model", "gpt3-1.3b", "--cluster", "v100-32gb", "--gpus", "8", "--seq", "2048",
                          "--global-batch", "128", "--micro-batch", "4", "--zero", "2", "--dtype", "fp16"}},
      {"t5-large-a100", {"--model", "t5-large", "--cluster", "a100-80gb", "--gpus", "8", "--seq", "512",
                         "--global-batch", "256", "--tp", "2", "--micro-batch", "8"}},
      {"bert-large-a100", {"--model", "bert-large", "--cluster", "a100-40gb", "--gpus", "8", "--seq", "512",
                           "--global-batch", "256", "--micro-batch", "32"}},
      {"l7-overrides", with(l7, {"--intra-node-gbps", "150", "--inter-node-gbps", "12.5", "--memory-gb", "40",
                                 "--tp", "2", "--micro-batch", "2", "--zero", "1"})},
      // per-layer plans searched by weft plan (fixed files)
      {"plan-l7-per-layer", {"--plan", kDir + "/plans/llama-2-7b-a100x8.json"}},
      {"plan-l70-per-layer", {"--plan", kDir + "/plans/llama-3-70b-h100x64.json"}},
      // framework traits
      {"l7-megatron", with(l7, {"--framework", "megatron", "--tp", "2", "--sequence-parallel", "--micro-batch",
                                "2", "--recompute", "selective", "--zero", "1"})},
      {"l7-megatron-deepspeed", with(l7, {"--framework", "megatron-deepspeed", "--tp", "2", "--micro-batch", "2",
                                          "--recompute", "full", "--zero", "1"})},
      {"l7-torchtitan", with(l7, {"--framework", "torchtitan", "--zero", "3", "--micro-batch", "1",
                                  "--recompute", "selective"})},
      {"l7-torchtitan-compile", with(l7, {"--framework", "torchtitan-compile", "--zero", "3", "--micro-batch",
                                          "2", "--recompute", "full"})},
      {"l70-torchtitan-tp8", with(l70, {"--framework", "torchtitan", "--tp", "8", "--sequence-parallel", "--zero",
                                        "3", "--micro-batch", "1", "--recompute", "full"})},
      {"l70-megatron-pp4", with(l70, {"--framework", "megatron", "--tp", "8", "--pp", "4", "--sequence-parallel",
                                      "--micro-batch", "1", "--zero", "1"})},
      {"l7-host-flags", with(l7, {"--host-op-us", "12", "--host-function-us", "30", "--compute-time-scale", "1.3",
                                  "--tp", "4", "--micro-batch", "4"})},
      // Galvatron's cost model on its own published profiles
      {"galvatron-dp8", with(gal, {"--micro-batch", "2"})},
      {"galvatron-tp2-pp2", with(gal, {"--tp", "2", "--pp", "2", "--micro-batch", "4", "--zero", "3"})},
      {"galvatron-tp4-full", with(gal, {"--tp", "4", "--micro-batch", "8", "--recompute", "full"})},
      // weft's model calibrated by measured profiles of a CPU machine (bench/profiler/closed_loop.sh)
      {"calibrated-dp4", with(cal, {"--micro-batch", "4"})},
      {"calibrated-tp2-dp2-zero1", with(cal, {"--tp", "2", "--micro-batch", "8", "--zero", "1"})},
      {"calibrated-pp2-zero3", with(cal, {"--pp", "2", "--micro-batch", "2", "--zero", "3"})},
      {"calibrated-tp4-sp-sel", with(cal, {"--tp", "4", "--sequence-parallel", "--micro-batch", "16",
                                           "--recompute", "selective"})},
  };
}

bool has(const std::vector<std::string>& args, const std::string& flag) {
  for (const auto& a : args)
    if (a == flag) return true;
  return false;
}

Output estimate(const Case& c) {
  std::vector<std::string> args{"estimate"};
  args.insert(args.end(), c.args.begin(), c.args.end());
  // A strategy given by flags names its tp and pp (1 unless the case says otherwise).
  if (!has(c.args, "--plan")) {
    if (!has(c.args, "--tp")) args.insert(args.end(), {"--tp", "1"});
    if (!has(c.args, "--pp")) args.insert(args.end(), {"--pp", "1"});
  }
  args.insert(args.end(), {"--format", "json"});
  return run_weft(args);
}

TEST(GoldenEstimates, EveryFigureIsUnchanged) {
  GoldenFile file(kDir + "/estimates.json");
  for (const Case& c : cases()) {
    const Output r = estimate(c);
    // 0, or 3 for a plan that does not fit (the estimate is printed all the same).
    ASSERT_TRUE(r.status == 0 || r.status == 3) << c.name << ": weft estimate failed (" << r.status << ")\n" << r.out;
    Json got;
    try {
      got = Json::parse(r.out);
    } catch (const std::exception& e) {
      FAIL() << c.name << ": not JSON: " << e.what() << "\n" << r.out;
    }
    if (file.updating()) {
      file.record(c.name, Json{{"args", c.args}, {"status", r.status}, {"estimate", got}});
      continue;
    }
    ASSERT_TRUE(file.has(c.name)) << file.missing(c.name);
    EXPECT_EQ(r.status, file.entry(c.name).at("status").get<int>()) << c.name << ": exit status";
    file.compare(c.name, file.entry(c.name).at("estimate"), got, "the estimate", "figures");
  }
  file.finish("estimates", 30);
}

}  // namespace
}  // namespace weft
