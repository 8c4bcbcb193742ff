// Multi-task wave plans (weft/plan/wave_plan.h): validation against the task file, the samples a
// piece's ranks hold, and the activations that cross between pieces, by hand.
#include <gtest/gtest.h>

#include <array>

#include "weft/plan/wave_plan.h"

namespace weft {
namespace {

// Two tasks sharing a backbone: a (enc_a, 2 layers, hidden 8, 4 tokens) and b (enc_b, 1 layer,
// hidden 4, 4 tokens) each flow into `backbone` (2 layers, hidden 8, 6 tokens); batches 8 and 6.
multitask::TaskSpec two_tasks() {
  const Json j = Json::parse(R"({
    "name": "two",
    "modules": [
      {"name": "enc_a", "tokens": 4, "layers": 2, "hidden": 8, "heads": 2, "vocab": 16},
      {"name": "enc_b", "tokens": 4, "layers": 1, "hidden": 4, "heads": 1, "vocab": 16},
      {"name": "backbone", "kind": "decoder", "tokens": 6, "layers": 2, "hidden": 8, "heads": 2, "vocab": 16}
    ],
    "flows": [{"from": "enc_a", "to": "backbone"}, {"from": "enc_b", "to": "backbone"}],
    "tasks": [
      {"name": "a", "modules": ["enc_a", "backbone"], "batch": 8, "loss": "lm"},
      {"name": "b", "modules": ["enc_b", "backbone"], "batch": 6, "loss": "lm"}
    ]})");
  Result<multitask::TaskSpec> t = multitask::tasks_from_json(j);
  EXPECT_TRUE(t.ok()) << t.error().message;
  return *t;
}

WavePiece piece(const std::string& task, const std::string& module, int first_rank, int gpus, int first_layer,
                int layers) {
  WavePiece p;
  p.task = task, p.module = module, p.first_rank = first_rank, p.gpus = gpus, p.first_layer = first_layer,
  p.layers = layers;
  return p;
}

// Wave 0: enc_a on ranks 0-1 beside enc_b on 2-3; wave 1: a's backbone on all four; wave 2: b's
// backbone, its first layer on ranks 0-1; wave 3: its second layer on ranks 1-3.
WavePlan four_ranks() {
  WavePlan p;
  p.world = 4;
  p.waves = {{piece("a", "enc_a", 0, 2, 0, 2), piece("b", "enc_b", 2, 2, 0, 1)},
             {piece("a", "backbone", 0, 4, 0, 2)},
             {piece("b", "backbone", 0, 2, 0, 1)},
             {piece("b", "backbone", 1, 3, 1, 1)}};
  return p;
}

TEST(WavePlan, SamplesInConsecutiveShares) {
  // 8 samples on 4 ranks from rank 2: two each.
  for (int s = 0; s < 8; ++s) EXPECT_EQ(rank_of_sample(2, 4, 8, s), 2 + s / 2) << s;
  // 7 on 3: 3, 2, 2.
  const int want[7] = {0, 0, 0, 1, 1, 2, 2};
  for (int s = 0; s < 7; ++s) EXPECT_EQ(rank_of_sample(0, 3, 7, s), want[s]) << s;
  EXPECT_EQ(samples_of_rank(0, 3, 7, 0), std::make_pair(0, 3));
  EXPECT_EQ(samples_of_rank(0, 3, 7, 2), std::make_pair(5, 2));
  EXPECT_EQ(samples_of_rank(0, 3, 7, 3), std::make_pair(0, 0));  // not in the piece
  EXPECT_EQ(samples_of_rank(4, 4, 2, 7), std::make_pair(2, 0));   // more ranks than samples: none left
  // 7 samples from ranks 0-2 (shares 3, 2, 2) to ranks 1-2 (shares 4, 3): samples 0-2 go 0 -> 1,
  // 3 stays on 1, 4 goes 1 -> 2, 5-6 stay on 2.
  WavePiece a, b;
  a.first_rank = 0, a.gpus = 3, b.first_rank = 1, b.gpus = 2;
  const std::vector<SampleBlock> x = sample_blocks(7, a, b);
  const std::vector<std::array<int, 4>> want_blocks = {{0, 1, 0, 3}, {1, 1, 3, 1}, {1, 2, 4, 1}, {2, 2, 5, 2}};
  ASSERT_EQ(x.size(), want_blocks.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].src, want_blocks[i][0]) << i;
    EXPECT_EQ(x[i].dst, want_blocks[i][1]) << i;
    EXPECT_EQ(x[i].first, want_blocks[i][2]) << i;
    EXPECT_EQ(x[i].n, want_blocks[i][3]) << i;
  }
}

TEST(WavePlan, TransfersByHand) {
  const multitask::TaskSpec t = two_tasks();
  const WavePlan p = four_ranks();
  ASSERT_TRUE(validate(p, t).ok()) << validate(p, t).error().message;
  const std::vector<WaveTransfer> xs = wave_transfers(p, t);
  // a: enc_a holds samples 0-3 on rank 0, 4-7 on rank 1; the backbone 0-1, 2-3, 4-5, 6-7 on ranks
  // 0..3: samples 2-3 move 0 -> 1, 4-5 move 1 -> 2, 6-7 move 1 -> 3, each 2 x 4 tokens x 8.
  // b: enc_b holds 0-2 on rank 2, 3-5 on rank 3; the backbone's first piece 0-2 on rank 0, 3-5 on
  // rank 1: every sample moves, 3 x 4 tokens x 4 each block. Then the backbone moves from ranks 0-1
  // (0-2, 3-5) to 1-3 (0-1, 2-3, 4-5): 0-1 to rank 1, 2 to 2, 3 to 2, 4-5 to 3 (1 -> 3), each
  // sample 6 tokens x 8.
  struct Want {
    int wave;
    std::string from, to;
    int src, dst, first, n;
    std::int64_t elements;
  };
  const std::vector<Want> want = {
      {1, "enc_a", "backbone", 0, 1, 2, 2, 2 * 4 * 8},   {1, "enc_a", "backbone", 1, 2, 4, 2, 2 * 4 * 8},
      {1, "enc_a", "backbone", 1, 3, 6, 2, 2 * 4 * 8},   {2, "enc_b", "backbone", 2, 0, 0, 3, 3 * 4 * 4},
      {2, "enc_b", "backbone", 3, 1, 3, 3, 3 * 4 * 4},   {3, "backbone", "backbone", 0, 1, 0, 2, 2 * 6 * 8},
      {3, "backbone", "backbone", 0, 2, 2, 1, 1 * 6 * 8}, {3, "backbone", "backbone", 1, 2, 3, 1, 1 * 6 * 8},
      {3, "backbone", "backbone", 1, 3, 4, 2, 2 * 6 * 8}};
  ASSERT_EQ(xs.size(), want.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(xs[i].wave, want[i].wave) << i;
    EXPECT_EQ(xs[i].from, want[i].from) << i;
    EXPECT_EQ(xs[i].to, want[i].to) << i;
    EXPECT_EQ(xs[i].src_rank, want[i].src) << i;
    EXPECT_EQ(xs[i].dst_rank, want[i].dst) << i;
    EXPECT_EQ(xs[i].first_sample, want[i].first) << i;
    EXPECT_EQ(xs[i].samples, want[i].n) << i;
    EXPECT_EQ(xs[i].elements, want[i].elements) << i;
  }
}

TEST(WavePlan, SequentialPlanRunsEachModuleOnAllRanks) {
  const multitask::TaskSpec t = two_tasks();
  const WavePlan p = sequential_wave_plan(t, 3);
  ASSERT_TRUE(validate(p, t).ok());
  ASSERT_EQ(p.waves.size(), 4u);
  EXPECT_EQ(p.waves[0][0].module, "enc_a");
  EXPECT_EQ(p.waves[1][0].module, "backbone");
  EXPECT_EQ(p.waves[3][0].gpus, 3);
  EXPECT_EQ(p.waves[3][0].layers, 2);
}

TEST(WavePlan, RoundTripThroughJson) {
  const WavePlan p = four_ranks();
  Json j{{"kind", "tasks"}, {"format_version", 1}, {"world", p.world}, {"waves", Json::array()}};
  for (const auto& w : p.waves) {
    Json wj{{"modules", Json::array()}};
    for (const WavePiece& pc : w)
      wj["modules"].push_back({{"task", pc.task}, {"module", pc.module}, {"first_rank", pc.first_rank},
                               {"gpus", pc.gpus}, {"first_layer", pc.first_layer}, {"layers", pc.layers}});
    j["waves"].push_back(wj);
  }
  Result<WavePlan> back = wave_plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_EQ(back->waves.size(), p.waves.size());
  EXPECT_EQ(back->waves[3][0].first_rank, 1);
  EXPECT_EQ(back->waves[3][0].first_layer, 1);
  Json later = j;
  later["format_version"] = 2;
  Result<WavePlan> bad = wave_plan_from_json(later, "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("p.json.format_version: unsupported version 2 (this weft reads 1)"),
            std::string::npos)
      << bad.error().message;
  // A one-model plan (weft plan --out) where a multi-task one belongs.
  bad = wave_plan_from_json(Json{{"format_version", 1}, {"model", "llama-7b"}}, "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("p.json.kind: missing: this is the plan of one model"), std::string::npos)
      << bad.error().message;
  j["waves"][0]["modules"][0].erase("first_rank");
  bad = wave_plan_from_json(j, "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("first_rank"), std::string::npos) << bad.error().message;
}

TEST(WavePlan, BadPlansNameTheWaveTaskModuleAndNumbers) {
  const multitask::TaskSpec t = two_tasks();
  auto error_of = [&](const WavePlan& p) {
    Status s = validate(p, t);
    EXPECT_FALSE(s.ok());
    return s.ok() ? std::string() : s.error().message;
  };
  WavePlan p = four_ranks();
  p.waves[0][1].first_rank = 1;  // enc_b on ranks 1-2 beside enc_a on 0-1
  EXPECT_NE(error_of(p).find("wave 0, b/enc_b: rank 1 also runs a/enc_a"), std::string::npos) << error_of(p);
  p = four_ranks();
  p.waves[3][0].gpus = 4;  // ranks 1-4 of 4
  EXPECT_NE(error_of(p).find("ranks [1, 5) are not within the 4 ranks"), std::string::npos) << error_of(p);
  p = four_ranks();
  p.waves[3][0].first_layer = 0;  // layer 0 again
  EXPECT_NE(error_of(p).find("wave 3, b/backbone: layers [0, 1) do not continue the operator's layers [0, 1) of 2"),
            std::string::npos)
      << error_of(p);
  p = four_ranks();
  std::swap(p.waves[0][1], p.waves[2][0]);  // b's backbone before enc_b
  p.waves[0][1].first_rank = 2;
  p.waves[2][0].first_rank = 0;
  EXPECT_NE(error_of(p).find("b/backbone: starts before b/enc_b, which flows into it, has finished"),
            std::string::npos)
      << error_of(p);
  p = four_ranks();
  p.waves.pop_back();
  EXPECT_NE(error_of(p).find("b/backbone: the plan runs 1 of its 2 layers"), std::string::npos) << error_of(p);
  p = four_ranks();
  p.waves[1][0].module = "enc_b";
  EXPECT_NE(error_of(p).find("task \"a\" does not run module \"enc_b\""), std::string::npos) << error_of(p);
}

}  // namespace
}  // namespace weft
