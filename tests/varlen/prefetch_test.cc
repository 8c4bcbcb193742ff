// The planner running ahead of training: plans arrive in the source's order and equal plan_step's;
// when a step takes longer than planning, steps after the first do not wait; a batch that cannot be
// planned is its error and ends the stream; stopping early joins the thread.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "weft/varlen/prefetch.h"

namespace weft::varlen {
namespace {

std::vector<std::vector<std::int64_t>> batches(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> d(5.95, 1.26);
  std::vector<std::vector<std::int64_t>> out(n);
  for (auto& b : out)
    while (b.size() < 64) {
      const auto s = static_cast<std::int64_t>(d(rng)) + 1;
      if (s < 30000) b.push_back(s);
    }
  return out;
}

PlanPrefetcher::Source from(std::vector<std::vector<std::int64_t>> all) {
  auto shared = std::make_shared<std::vector<std::vector<std::int64_t>>>(std::move(all));
  auto i = std::make_shared<size_t>(0);
  return [shared, i]() -> std::optional<std::vector<std::int64_t>> {
    if (*i == shared->size()) return std::nullopt;
    return (*shared)[(*i)++];
  };
}

TEST(VarlenPrefetch, PlansInOrderAheadOfASlowerStep) {
  std::shared_ptr<const SeqCost> cost = flexsp_seq_cost(*flexsp_constants("gpt-7b"), 16, 30);
  const auto all = batches(5, 3);
  PlanPrefetcher p(from(all), cost, {}, 2);
  double later_waits = 0;
  for (size_t k = 0; k < all.size(); ++k) {
    auto item = p.next();
    ASSERT_TRUE(item.has_value());
    ASSERT_TRUE(item->ok()) << item->error().message;
    EXPECT_EQ(item->value().lengths, all[k]);
    EXPECT_NEAR(item->value().plan.time, plan_step(all[k], *cost)->time, 1e-12);
    if (k > 0) later_waits += item->value().waited_s;
    // A training step far longer than planning one batch (about a millisecond here).
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
  }
  EXPECT_FALSE(p.next().has_value());
  // The four later steps together waited less than one step lasts (they find their plans ready).
  EXPECT_LT(later_waits, 0.060) << "steps after the first waited for their plans";
  EXPECT_GE(p.total_wait_s(), later_waits);
}

TEST(VarlenPrefetch, AnUnplannableBatchIsItsErrorAndEndsTheStream) {
  std::shared_ptr<const SeqCost> cost = flexsp_seq_cost(*flexsp_constants("gpt-7b"), 8, 30);
  auto all = batches(3, 5);
  all[1].push_back(static_cast<std::int64_t>(9 * cost->capacity_tokens()));
  PlanPrefetcher p(from(all), cost);
  auto first = p.next();
  ASSERT_TRUE(first && first->ok());
  auto second = p.next();
  ASSERT_TRUE(second.has_value());
  ASSERT_FALSE(second->ok());
  EXPECT_NE(second->error().message.find("fits no group"), std::string::npos) << second->error().message;
  EXPECT_FALSE(p.next().has_value());
}

TEST(VarlenPrefetch, StoppingEarlyJoinsTheThread) {
  std::shared_ptr<const SeqCost> cost = flexsp_seq_cost(*flexsp_constants("gpt-7b"), 16, 30);
  auto p = std::make_unique<PlanPrefetcher>(from(batches(50, 9)), cost, PlannerOptions{}, 3);
  ASSERT_TRUE(p->next().has_value());
  p.reset();  // must return: the thread stops after at most the plan it is making
  SUCCEED();
}

}  // namespace
}  // namespace weft::varlen
