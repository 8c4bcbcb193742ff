// NetMoE's sample placement: the assignment solver against brute force, the traffic of a
// placement counted by hand, the gain on skewed routing and none on uniform routing, and the
// trace and placement files' checks.
#include "weft/search/moe_placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>

#include "tiny_specs.h"

namespace weft {
namespace {

// One strategy on every layer of small_model(), pp 1.
Plan uniform_plan(const LayerStrategy& s, int m, int batch) {
  Plan p;
  p.model = testing::llama_model("small", 8, testing::swiglu_shape(1024, 16, 4, 2816), 32000);
  p.cluster = testing::a100_cluster("test", 1, 8, "G", 3, 8);
  p.train = TrainSettings{.seq = 1024, .global_batch = batch, .micro_batches = m, .pp = 1};
  p.embedding = s;
  p.embedding.ep = 1;
  Stage st;
  st.layers.assign(p.model.num_layers(), s);
  p.stages.push_back(st);
  return p;
}

// 8 layers of small_model() with 8 experts of 256, top 2; 4 GPUs on 2 nodes of 2 (NVLink 300 GB/s
// in a node, 25 GB/s per GPU between nodes), dp 4 with ep 4: ep rank r holds experts 2r, 2r + 1.
Plan moe_plan(int micro_batches = 2, int batch = 8, int seq = 64) {
  Plan p = uniform_plan(LayerStrategy{.dp = 4, .ep = 4}, micro_batches, batch);
  p.model.groups[0].shape.moe = MoeSpec{8, 2, 256, 0};
  p.cluster = testing::a100_cluster("test", 2, 2, "G", 3, 8);
  p.train.seq = seq;
  EXPECT_TRUE(validate(p).ok()) << validate(p).error().message;
  return p;
}

TEST(MoePlacement, AssignmentMatchesBruteForce) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 30; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 6);
    std::vector<double> c(static_cast<size_t>(n) * n);
    for (double& x : c) x = static_cast<double>(rng() % 100);
    const std::vector<int> got = min_cost_assignment(c, n);
    std::vector<int> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    double best = 1e300;
    do {
      double s = 0;
      for (int i = 0; i < n; ++i) s += c[static_cast<size_t>(i) * n + perm[i]];
      best = std::min(best, s);
    } while (std::next_permutation(perm.begin(), perm.end()));
    double s = 0;
    std::vector<bool> used(n, false);
    for (int i = 0; i < n; ++i) {
      ASSERT_GE(got[i], 0);
      ASSERT_LT(got[i], n);
      EXPECT_FALSE(used[got[i]]);
      used[got[i]] = true;
      s += c[static_cast<size_t>(i) * n + got[i]];
    }
    EXPECT_DOUBLE_EQ(s, best) << "n " << n;
  }
}

// One traced layer, one micro-batch of 4 samples on ranks 0-3 (nodes 0, 0, 1, 1), each sending all
// its 2 x 64 copies to the experts of one ep rank. To rank (i + 2) % 4: unplaced, every sample
// crosses nodes; placed, each sits on its experts' rank. To rank i ^ 1: every sample stays in its
// node but changes rank; placed, none moves.
TEST(MoePlacement, TrafficOfAPlacementCountedByHand) {
  const Plan p = moe_plan(1, 4);
  const double copy = 1024 * 2;  // hidden 1024 in bf16
  for (const bool across : {true, false}) {
    RoutingStep s;
    s.step = 1;
    s.layers = {0};
    s.counts.assign(1, std::vector<std::vector<int64_t>>(4, std::vector<int64_t>(8, 0)));
    for (int i = 0; i < 4; ++i) s.counts[0][i][2 * (across ? (i + 2) % 4 : i ^ 1)] = 128;
    auto before = placement_traffic(p, s);
    ASSERT_TRUE(before.ok()) << before.error().message;
    EXPECT_DOUBLE_EQ(before->inter_copies, across ? 512 : 0);
    EXPECT_DOUBLE_EQ(before->inter_bytes, across ? 4 * 512 * copy : 0);
    EXPECT_DOUBLE_EQ(before->intra_bytes, across ? 0 : 4 * 512 * copy);
    EXPECT_GT(before->time.value(), 0);
    auto placed = place_samples(p, s);
    ASSERT_TRUE(placed.ok()) << placed.error().message;
    EXPECT_EQ(*placed, across ? (std::vector<int>{2, 3, 0, 1}) : (std::vector<int>{1, 0, 3, 2}));
    auto after = placement_traffic(p, s, &*placed);
    ASSERT_TRUE(after.ok());
    EXPECT_DOUBLE_EQ(after->inter_bytes, 0);
    EXPECT_DOUBLE_EQ(after->intra_bytes, 0);
    EXPECT_DOUBLE_EQ(after->time.value(), 0);
  }
}

// Skewed routing (each sample prefers one ep rank's experts 80 % of the time), one micro-batch of 64
// samples: placement cuts the inter-node bytes by more than half (what is left: the copies routed
// uniformly, and the samples more of whose experts sit on one node than it has places for);
// uniform routing leaves little to gain.
TEST(MoePlacement, SkewedRoutingGainsUniformDoesNot) {
  const Plan p = moe_plan(1, 64, 16);
  std::vector<PlacedStepReport> skewed, even;
  auto a = place_trace(p, synthetic_trace(p, 2, 0.8, 11), &skewed);
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto b = place_trace(p, synthetic_trace(p, 2, 0.0, 11), &even);
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_EQ(skewed.size(), 2u);
  for (const PlacedStepReport& r : skewed) {
    EXPECT_LT(r.after.inter_bytes, 0.5 * r.before.inter_bytes) << "step " << r.step;
    EXPECT_LT(r.after.time.value(), r.before.time.value());
  }
  // (The assignment weighs intra-node bytes too, a tenth as much here: it may trade a little.)
  for (const PlacedStepReport& r : even) EXPECT_LE(r.after.inter_bytes, r.before.inter_bytes * 1.05);
  // Each step's placement keeps every sample in its micro-batch, and the file round-trips.
  ASSERT_TRUE(check_placement(*a, p).ok());
  const std::string path = (std::filesystem::temp_directory_path() / "weft_placement_test.json").string();
  ASSERT_TRUE(write_sample_placement(path, *a).ok());
  auto back = read_sample_placement(path);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, *a);
  std::filesystem::remove(path);
}

TEST(MoePlacement, TraceAndPlacementFilesNameWhatIsWrong) {
  const Plan p = moe_plan(2, 8, 16);
  RoutingTrace t = synthetic_trace(p, 1, 0.5, 1);
  ASSERT_TRUE(check_trace(t, p).ok());
  auto back = routing_trace_from_json(to_json(t));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, t);
  // A sample whose copies do not sum to seq * top_k.
  Json j = to_json(t);
  j["steps"][0]["counts"][0][3][0] = j["steps"][0]["counts"][0][3][0].get<int>() + 1;
  auto bad = routing_trace_from_json(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("trace.steps[0].counts[0][3]: the sample's copies sum to 33, not seq * top_k = 16 * 2"),
            std::string::npos)
      << bad.error().message;
  // A trace of another model: 6 experts.
  RoutingTrace other = t;
  other.experts = 6;
  EXPECT_NE(check_trace(other, p).error().message.find("layer 0 has 8 experts, top 2; the trace 6, top 2"),
            std::string::npos);
  other = t;
  other.seq = 32;
  EXPECT_NE(check_trace(other, p).error().message.find("trace.seq: 32 tokens per sample, the plan's sequence is 16"),
            std::string::npos);
  // A placement moving a sample out of its micro-batch.
  Json pl = to_json(SamplePlacement{8, 2, {{1, {4, 1, 2, 3, 0, 5, 6, 7}}}});
  auto q = sample_placement_from_json(pl);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.error().message.find("position 0 (micro-batch 0) holds sample 4 of micro-batch 1"), std::string::npos)
      << q.error().message;
  // Ulysses layers are refused, naming the layer.
  Plan u = uniform_plan(LayerStrategy{.ulysses = 2, .dp = 2, .ep = 4}, 2, 8);
  u.model.groups[0].shape.moe = MoeSpec{8, 2, 256, 0};
  u.cluster = p.cluster;
  u.train.seq = 16;
  auto r = place_samples(u, t.steps[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("stages[0].layers[0] (layer 0): ulysses 2, cp 1"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace weft
