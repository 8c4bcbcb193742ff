// weft against Metis's published search log for its T4 + A100 cluster (data/reference/metis; the
// reader is metis/metis_plans.h): the compute scale Metis's A100 profiles imply, weft's costs of the
// plans Metis lists that weft can express, how the two rankings agree, and weft's own search on the
// same devices. Metis publishes its cost model's estimates, not measured times.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "metis/metis_plans.h"
#include "weft/cost/analytic.h"
#include "weft/search/hetero.h"

namespace weft {
namespace {

const std::string kDir = std::string(WEFT_DATA_DIR) + "/reference/metis";

metis::Setup setup() {
  auto s = metis::load_setup(kDir);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return s.ok() ? *s : metis::Setup{};
}

TEST(MetisReference, TheA100ProfilesSetOneComputeScaleThatFitsEveryProfile) {
  const metis::Setup s = setup();
  // Metis's software ran a block at several times weft's kernel-model time (its profile's A100
  // sustains well under a fifth of the peak).
  EXPECT_GT(s.options.compute_time_scale, 3.0);
  EXPECT_LT(s.options.compute_time_scale, 10.0);
  const ClusterSpec a100 = s.devices.groups[1];
  for (int tp : {1, 2, 4})
    for (int bs : {1, 2, 4}) {
      const double measured = metis::profiled_block_ms(kDir, tp, bs);
      const double weft = metis::block_ms(s.model, a100, tp, bs, s.log.seq, s.dtype, s.options);
      std::printf("tp%d bs%d: Metis %.2f ms, weft %.2f ms\n", tp, bs, measured, weft);
      // Fitted on tp 1; tp 2 and 4 add weft's tensor-parallel traffic at Metis's 46 GB/s.
      EXPECT_NEAR(weft / measured, 1.0, 0.1) << "tp" << tp << " bs" << bs;
    }
}

TEST(MetisReference, EveryPlanWeftExpressesIsValidAndFitsAsMetisFoundIt) {
  const metis::Setup s = setup();
  const AnalyticCostModel cm(s.options);
  const metis::Comparison c = metis::compare(s, cm);
  EXPECT_EQ(static_cast<int>(c.costed.size()) + c.duplicates + c.unequal_stages + c.empty_stages,
            static_cast<int>(s.log.rows.size()));
  EXPECT_GE(c.costed.size(), 15u);
  for (const metis::Costed& k : c.costed) {
    EXPECT_TRUE(validate(k.plan).ok()) << "Metis rank " << k.row.rank;
    EXPECT_TRUE(k.estimate.total.fits) << "Metis rank " << k.row.rank << ": " << to_gib(k.estimate.total.peak_memory)
                                       << " GiB";
  }
}

TEST(MetisReference, WeftRanksMetisPlansAsMetisDoesAndOrdersMicroBatchesAlike) {
  const metis::Setup s = setup();
  const AnalyticCostModel cm(s.options);
  const metis::Comparison c = metis::compare(s, cm);
  std::printf("Spearman over %zu plans: %.3f\n", c.costed.size(), c.spearman);
  // 0.51 while a replica's only share was of every micro-batch (a T4 replica at one sample per
  // micro-batch took 1/8 of the batch at m16 and m32); its own micro-batch count
  // (train.dp_micro_batches) gives it the part it can do at any m, as Metis's estimates assume.
  EXPECT_GE(c.spearman, 0.8);
  int pairs = 0, agree = 0;
  for (size_t i = 0; i < c.costed.size(); ++i)
    for (size_t j = i + 1; j < c.costed.size(); ++j) {
      metis::Row a = c.costed[i].row, b = c.costed[j].row;
      if (a.micro_batches == b.micro_batches) continue;
      b.micro_batches = a.micro_batches;
      if (metis::key(a) != metis::key(b)) continue;
      ++pairs;
      const bool metis_i = c.costed[i].row.cost_ms < c.costed[j].row.cost_ms;
      const bool weft_i = c.costed[i].weft_ms() < c.costed[j].weft_ms();
      agree += metis_i == weft_i;
    }
  // weft's choice among them is one of Metis's first three, within 15 % of Metis's choice under
  // Metis's own figures. Not Metis's choice itself: that plan (T4s beside A100s in its first stage,
  // run with shares per device group as Metis runs it) is held back on weft's model by the T4s at
  // one sample per micro-batch and the LM head in its second stage (docs/search.md, "Against
  // Metis"); it now ranks within weft's first four.
  {
    const auto metis_first = std::find_if(c.costed.begin(), c.costed.end(), [](const auto& k) { return k.row.rank == 1; });
    ASSERT_NE(metis_first, c.costed.end());
    EXPECT_EQ(metis_first->plan.train.stage_dp_shares.size(), 2u) << shares_label(metis_first->plan.train);
    int ahead = 0;
    for (const metis::Costed& k : c.costed) ahead += k.weft_ms() < metis_first->weft_ms();
    EXPECT_LE(ahead, 3);
  }
  const auto first = std::min_element(c.costed.begin(), c.costed.end(), [](const auto& x, const auto& y) {
    return x.weft_ms() < y.weft_ms();
  });
  double metis_best = 1e30;
  for (const metis::Costed& k : c.costed) metis_best = std::min(metis_best, k.row.cost_ms);
  std::printf("weft's choice: Metis rank %d, %.1f ms on Metis's figures (its choice %.1f ms)\n", first->row.rank,
              first->row.cost_ms, metis_best);
  EXPECT_LE(first->row.rank, 3);
  EXPECT_LE(first->row.cost_ms, 1.15 * metis_best);
  std::printf("plans differing only in micro-batches: %d of %d pairs in Metis's order\n", agree, pairs);
  EXPECT_GE(pairs, 4);
  EXPECT_GE(agree, pairs - 1);
}

TEST(MetisReference, TheA100ProfilesSetTheOptimizerScaleApart) {
  const metis::Setup s = setup();
  // Metis's software ran its blocks at about a sixth of the kernel model's speed, its optimizer
  // near the HBM rate: one scale for both would slow the optimizer about fourfold.
  EXPECT_GT(s.options.optimizer_time_scale, 0.5);
  EXPECT_LT(s.options.optimizer_time_scale, 2.0);
  for (int tp : {1, 2, 4}) {
    const double measured = metis::profiled_optimizer_ms(kDir, tp);
    const double weft = metis::optimizer_ms(s.model, s.devices.groups[1], tp, s.log.seq, s.dtype, s.options);
    EXPECT_NEAR(weft / measured, 1.0, 0.1) << "tp" << tp;
  }
}

// Towards Metis's own figures (its T4 at the 4.7x its top plans imply, its head at its profiled
// time): weft's two fastest of the 19 are Metis's two fastest, within 2 % of each other, and weft's
// own search finds a plan faster than Metis's choice on the same figures.
TEST(MetisReference, TowardsMetissFiguresWeftsFirstTwoAreMetiss) {
  metis::Setup s = setup();
  metis::towards_metis_figures(s, 4.7, 0.015);
  const AnalyticCostModel cm(s.options);
  const metis::Comparison c = metis::compare(s, cm);
  std::vector<const metis::Costed*> order;
  for (const metis::Costed& k : c.costed) order.push_back(&k);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->weft_ms() < b->weft_ms(); });
  ASSERT_GE(order.size(), 2u);
  std::printf("weft's first two: Metis ranks %d (%.1f ms) and %d (%.1f ms); Spearman %.3f\n", order[0]->row.rank,
              order[0]->weft_ms(), order[1]->row.rank, order[1]->weft_ms(), c.spearman);
  EXPECT_EQ(std::min(order[0]->row.rank, order[1]->row.rank), 1);
  EXPECT_EQ(std::max(order[0]->row.rank, order[1]->row.rank), 2);
  EXPECT_LT(order[1]->weft_ms(), 1.02 * order[0]->weft_ms());
  EXPECT_GE(c.spearman, 0.8);
  // weft's own plan on the same figures is faster than Metis's choice there.
  auto r = metis::weft_search(s, cm);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->top.empty());
  const auto metis_first = std::find_if(c.costed.begin(), c.costed.end(), [](const auto& k) { return k.row.rank == 1; });
  ASSERT_NE(metis_first, c.costed.end());
  const double mine = r->top.front().predicted.step_time_s * 1e3;
  std::printf("weft's own plan %.1f ms, Metis's choice %.1f ms on the same figures\n", mine, metis_first->weft_ms());
  EXPECT_LT(mine, metis_first->weft_ms());
}

TEST(MetisReference, WeftsOwnSearchBeatsEveryPlanMetisListsOnWeftsModel) {
  const metis::Setup s = setup();
  const AnalyticCostModel cm(s.options);
  const metis::Comparison c = metis::compare(s, cm);
  auto r = metis::weft_search(s, cm);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->top.empty());
  double best = 1e30;
  for (const metis::Costed& k : c.costed) best = std::min(best, k.weft_ms());
  const double mine = r->top.front().predicted.step_time_s * 1e3;
  std::printf("weft's plan %.1f ms, the best Metis plan on weft's model %.1f ms\n", mine, best);
  EXPECT_LE(mine, best * 1.0001);
}

}  // namespace
}  // namespace weft
