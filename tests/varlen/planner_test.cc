// The batch planner: every plan is a valid grouping (each document once, every GPU used, memory
// kept), its time is what the cost model says of it, it is never slower than one group size for
// the whole batch, and a document no group holds is an error that says what it would need.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "weft/varlen/planner.h"

namespace weft::varlen {
namespace {

std::unique_ptr<SeqCost> cost7b(int gpus, double gib = 30) { return flexsp_seq_cost(*flexsp_constants("gpt-7b"), gpus, gib); }

// Long-tailed lengths like FlexSP's Wikipedia sample (lognormal, median about 380).
std::vector<std::int64_t> lognormal_batch(int n, std::uint64_t seed, std::int64_t max_len) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> d(5.95, 1.26);
  std::vector<std::int64_t> out;
  while (static_cast<int>(out.size()) < n) {
    const auto s = static_cast<std::int64_t>(d(rng)) + 1;
    if (s <= max_len) out.push_back(s);
  }
  return out;
}

void expect_valid(const std::vector<std::int64_t>& lengths, const StepPlan& p, const SeqCost& cost) {
  std::vector<int> seen(lengths.size(), 0);
  double total = 0;
  for (const MicroBatch& mb : p.micro_batches) {
    int gpus = 0;
    for (const Group& g : mb.groups) {
      gpus += g.size;
      EXPECT_EQ(g.size & (g.size - 1), 0) << "group size " << g.size << " is not a power of two";
      std::int64_t tokens = 0;
      for (int i : g.docs) ++seen[i], tokens += lengths[i];
      EXPECT_EQ(tokens, g.tokens);
      EXPECT_LE(static_cast<double>(tokens), g.size * cost.capacity_tokens() + 1e-6);
    }
    EXPECT_EQ(gpus, cost.gpus());
    MicroBatch copy = mb;
    EXPECT_NEAR(micro_batch_time(lengths, copy, cost), mb.time, 1e-9 * mb.time);
    total += mb.time;
  }
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "document " << i;
  EXPECT_NEAR(total, p.time, 1e-9 * p.time);
}

TEST(VarlenPlanner, PlansAreValidAndNoSlowerThanOneGroupSize) {
  for (int gpus : {8, 16, 64}) {
    auto cost = cost7b(gpus);
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      const auto batch = lognormal_batch(gpus * 8, seed, static_cast<std::int64_t>(gpus * cost->capacity_tokens() / 2));
      auto w = plan_step(batch, *cost);
      auto a = plan_adaptive(batch, *cost);
      ASSERT_TRUE(w.ok() && a.ok());
      expect_valid(batch, *w, *cost);
      expect_valid(batch, *a, *cost);
      const std::int64_t longest = *std::max_element(batch.begin(), batch.end());
      const int degree = min_group_size(*cost, longest, {});
      auto s = plan_uniform(batch, *cost, degree);
      ASSERT_TRUE(s.ok()) << s.error().message;
      expect_valid(batch, *s, *cost);
      for (const MicroBatch& mb : s->micro_batches)
        for (const Group& g : mb.groups) EXPECT_EQ(g.size, degree);
      EXPECT_LE(w->time, a->time * (1 + 1e-9)) << gpus << " GPUs, seed " << seed;
      EXPECT_LE(a->time, s->time * (1 + 1e-9)) << gpus << " GPUs, seed " << seed;
    }
  }
}

// One document that needs a group across nodes beside many short ones: the long one gets a wide
// group, the short ones small groups inside a node beside it, which no single size can do (one
// size for all makes every short document pay the inter-node all-to-all).
TEST(VarlenPlanner, MixesGroupSizesWhereOneSizeCannotServeBoth) {
  auto cost = cost7b(32);
  const double cap = cost->capacity_tokens();
  std::vector<std::int64_t> batch = {static_cast<std::int64_t>(12 * cap)};  // needs 16 GPUs
  for (int i = 0; i < 150; ++i) batch.push_back(1000 + 7 * i);
  auto w = plan_step(batch, *cost);
  auto a = plan_adaptive(batch, *cost);
  ASSERT_TRUE(w.ok() && a.ok());
  expect_valid(batch, *w, *cost);
  std::vector<int> sizes;
  for (const MicroBatch& mb : w->micro_batches)
    for (const Group& g : mb.groups) sizes.push_back(g.size);
  std::sort(sizes.begin(), sizes.end());
  EXPECT_GT(std::unique(sizes.begin(), sizes.end()) - sizes.begin(), 1) << "one group size only";
  EXPECT_LT(w->time, 0.9 * a->time);
}

TEST(VarlenPlanner, ADocumentNoGroupHoldsIsAnErrorWithTheMemoryItNeeds) {
  auto cost = cost7b(8);
  const auto too_long = static_cast<std::int64_t>(8 * cost->capacity_tokens()) + 100;
  auto r = plan_step({100, too_long, 200}, *cost);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kNoFit);
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("document 1 of the batch (" + std::to_string(too_long) + " tokens)"), std::string::npos) << m;
  EXPECT_NE(m.find("8 GPUs"), std::string::npos) << m;
  EXPECT_NE(m.find("GiB) of activations per GPU"), std::string::npos) << m;
  EXPECT_NE(m.find("it needs " + std::to_string((too_long + 7) / 8) + " tokens"), std::string::npos) << m;
  EXPECT_NE(m.find("where a GPU holds " + std::to_string(static_cast<std::int64_t>(cost->capacity_tokens()))),
            std::string::npos)
      << m;
  EXPECT_FALSE(plan_step({}, *cost).ok());
  EXPECT_FALSE(plan_step({5, 0}, *cost).ok());
  EXPECT_FALSE(plan_uniform({100}, *cost, 3).ok());
}

// A batch larger than the GPUs' memory runs as several micro-batches; FlexSP's smallest group
// size (2) is an option.
TEST(VarlenPlanner, SplitsIntoMicroBatchesAndKeepsTheSmallestSize) {
  auto cost = cost7b(8);
  const double cap = cost->capacity_tokens();
  std::vector<std::int64_t> batch(40, static_cast<std::int64_t>(0.6 * cap));  // 24 GPUs' worth
  auto w = plan_step(batch, *cost);
  ASSERT_TRUE(w.ok());
  expect_valid(batch, *w, *cost);
  EXPECT_GE(w->micro_batches.size(), 3u);
  PlannerOptions o;
  o.min_group = 2;
  auto two = plan_step(batch, *cost, o);
  ASSERT_TRUE(two.ok());
  expect_valid(batch, *two, *cost);
  for (const MicroBatch& mb : two->micro_batches)
    for (const Group& g : mb.groups) EXPECT_GE(g.size, 2);
}

}  // namespace
}  // namespace weft::varlen
