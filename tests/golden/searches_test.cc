// Golden searches: `weft plan --format json` for fixed model / cluster pairs across the presets,
// the frameworks, the space restrictions and the cost models, compared bit for bit with
// tests/golden/searches.json: the best plan and its estimate, the top plans, the best uniform
// plan, the notes and the search's counts (every pruning rule with what it removed). Only the
// search's wall time (search.wall_s) is left out. A case where nothing fits records the exit code
// and the message instead (the plan needing the least memory, and how much it needs).
//
// A refactoring of the search must leave every line identical; a change meant to move plans or
// counts regenerates the file on purpose:
//
//   WEFT_UPDATE_GOLDEN=1 build/bin/weft_golden_searches_test   # rewrites tests/golden/searches.json
//
// and the diff of that file is reviewed with the change. The test runs the weft binary itself.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "golden_file.h"
#include "run_weft.h"
#include "weft/core/error.h"
#include "weft/core/json.h"

namespace weft {
namespace {

using namespace golden;

// Each case's arguments follow `weft plan`.
std::vector<Case> cases() {
  const std::vector<std::string> l7 = llama2_7b_a100x8(), l70 = llama3_70b_h100x64(), gal = galvatron_llama2_7b();
  return {
      // weft's analytic model, kept to what weft's runtime runs (the default)
      {"l7-a100x8", l7},
      {"l70-h100x64", l70},
      {"g175-a100x1024", gpt3_175b_a100x1024()},
      // a model the runtime cannot run: the whole space, with a note
      {"mixtral-h100x32", mixtral_8x7b_h100x32()},
      {"qwen2-h200x16-long", {"--model", "qwen2-7b", "--cluster", "h200", "--gpus", "16", "--seq", "32768",
                              "--global-batch", "64"}},
      // the whole space: context parallelism at a long sequence, interleaving
      {"l7-a100x16-long-all", {"--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "16", "--seq",
                               "131072", "--global-batch", "16", "--all-strategies"}},
      {"l70-interleaved-all", with(l70, {"--all-strategies", "--schedule", "interleaved", "--pp", "4,8"})},
      // frameworks
      {"l7-torchtitan", with(l7, {"--framework", "torchtitan"})},
      {"l70-megatron", with(l70, {"--framework", "megatron"})},
      {"l70-megatron-deepspeed", with(l70, {"--framework", "megatron-deepspeed"})},
      // restrictions of the space
      {"l7-uniform", with(l7, {"--uniform"})},
      {"l70-pp-schedule-maxtp", with(l70, {"--pp", "2,4", "--schedule", "gpipe,1f1b", "--max-tp", "4", "--top",
                                           "5"})},
      {"l7-a100-40gb-fp16", {"--model", "llama-2-7b", "--cluster", "a100-40gb", "--gpus", "16", "--seq", "2048",
                             "--global-batch", "256", "--dtype", "fp16", "--memory-gb", "24"}},
      // Galvatron's space, under weft's model and under Galvatron's own
      {"l7-galvatron-space", {"--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "8", "--seq", "2048",
                              "--global-batch", "64", "--galvatron-space"}},
      {"galvatron-model", gal},
      {"galvatron-model-space", with(gal, {"--galvatron-space"})},
      // nothing fits: the plan needing the least memory
      {"l2-70b-a100x8-nofit", {"--model", "llama-2-70b", "--cluster", "a100-80gb", "--gpus", "8", "--seq", "4096",
                               "--global-batch", "64"}},
  };
}

Output plan(const Case& c) {
  std::vector<std::string> args{"plan"};
  args.insert(args.end(), c.args.begin(), c.args.end());
  args.insert(args.end(), {"--format", "json"});
  return run_weft(args);
}

// What is compared: the JSON less the search's wall time, or for a failed search its exit code and
// message.
Result<Json> comparable(const Case& c, const Output& r) {
  if (r.status != 0) return Json{{"exit", r.status}, {"stderr", r.err}};
  try {
    Json j = Json::parse(r.out);
    if (j.contains("search")) j["search"].erase("wall_s");
    return j;
  } catch (const std::exception& e) {
    return Error{ErrorKind::kBadInput, c.name + ": not JSON: " + e.what() + "\n" + r.out};
  }
}

TEST(GoldenSearches, EveryPlanAndCountIsUnchanged) {
  GoldenFile file(kDir + "/searches.json");
  for (const Case& c : cases()) {
    const Output r = plan(c);
    ASSERT_TRUE(r.status == 0 || r.status == 3) << c.name << ": weft plan failed (" << r.status << ")\n" << r.err;
    auto got = comparable(c, r);
    ASSERT_TRUE(got.ok()) << got.error().message;
    if (file.updating()) {
      file.record(c.name, Json{{"args", c.args}, {"search", *got}});
      continue;
    }
    ASSERT_TRUE(file.has(c.name)) << file.missing(c.name);
    file.compare(c.name, file.entry(c.name).at("search"), *got, "the search's output", "output");
  }
  file.finish("searches", 15);
}

}  // namespace
}  // namespace weft
