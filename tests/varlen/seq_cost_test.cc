// FlexSP's published cost model, term by term (data/reference/flexsp/README.md).
#include <gtest/gtest.h>

#include <cmath>

#include "weft/spec/presets.h"
#include "weft/varlen/planner.h"
#include "weft/varlen/seq_cost.h"

namespace weft::varlen {
namespace {

TEST(FlexspCost, SequenceTimeByHand) {
  const FlexspConstants c = *flexsp_constants("gpt-7b");
  auto cost = flexsp_seq_cost(c, 64, 30);
  // s = 4096 on 8 GPUs: (5.128e-6 s^2 + 0.1839576 s) / 8 ms of compute; 4 x 2 x 32 x 4096 x 4096 x 2
  // bytes = 8192 MB of all-to-all / 8 / 96.5 GB/s.
  const double compute = (5.128e-6 * 4096.0 * 4096 + 0.1839576 * 4096) / 8;
  const double a2a = 8192.0 / 8 / 96.5;
  EXPECT_NEAR(cost->seq_time(4096, 8), (compute + a2a) * 1e-3, 1e-12);
  // Across nodes the bandwidth falls (16: 10.33 GB/s): a short sequence costs 16 GPUs more GPU-time
  // than it costs 8.
  EXPECT_GT(16 * cost->seq_time(1024, 16), 8 * cost->seq_time(1024, 8));
  // One GPU: no all-to-all.
  EXPECT_NEAR(cost->seq_time(100, 1), (5.128e-6 * 1e4 + 0.1839576 * 100) * 1e-3, 1e-12);
  EXPECT_NEAR(cost->group_overhead(4), 0.62936, 1e-12);
  // Memory: 30 GiB less 16 bytes per parameter over 64 GPUs, at 4.4804 MB per token.
  const double params = 12.0 * 32 * 4096.0 * 4096 + 2.0 * 50257 * 4096;
  const double budget = 30.0 * (1 << 30) - 16 * params / 64;
  EXPECT_NEAR(cost->capacity_tokens(), budget / (4.4804 * (1 << 20)), 1e-6);
  EXPECT_EQ(cost->gpus(), 64);
}

// A token cap lowers the capacity and the budget with it; times and the rest are the model's.
TEST(CappedCost, CapsCapacityOnly) {
  std::shared_ptr<const SeqCost> base = flexsp_seq_cost(*flexsp_constants("gpt-7b"), 64, 30);
  auto capped = capped_seq_cost(base, 1000);
  EXPECT_DOUBLE_EQ(capped->capacity_tokens(), 1000);
  EXPECT_DOUBLE_EQ(capped->activation_budget_bytes(), 1000 * base->bytes_per_token());
  EXPECT_DOUBLE_EQ(capped->seq_time(4096, 8), base->seq_time(4096, 8));
  EXPECT_DOUBLE_EQ(capped->group_overhead(4), base->group_overhead(4));
  EXPECT_EQ(capped->gpus(), 64);
  // A cap above what memory allows changes nothing.
  EXPECT_DOUBLE_EQ(capped_seq_cost(base, 1e12)->capacity_tokens(), base->capacity_tokens());
}

TEST(FlexspCost, BandwidthTableAndModels) {
  EXPECT_DOUBLE_EQ(flexsp_a2a_gbps(2), 119.54);
  EXPECT_DOUBLE_EQ(flexsp_a2a_gbps(8), 96.5);
  EXPECT_DOUBLE_EQ(flexsp_a2a_gbps(64), 4.87);
  EXPECT_DOUBLE_EQ(flexsp_a2a_gbps(128), 4.87);
  EXPECT_EQ(flexsp_models().size(), 3u);
  EXPECT_DOUBLE_EQ(flexsp_constants("gpt-30b")->beta_ms, 2789.36);
  auto bad = flexsp_constants("llama-2-7b");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("gpt-7b, gpt-13b, gpt-30b"), std::string::npos);
}

}  // namespace
}  // namespace weft::varlen

namespace weft::varlen {
namespace {

// weft's analytic model per document against FlexSP's measured constants, on FlexSP's GPT-7B
// (weft's gpt3-6.7b) over 64 A100-40GB: within 0.85-1.45x wherever a GPU holds at least 1K tokens
// of the document (docs/varlen.md); times grow with the length and fall with the group size while
// the group stays inside a node.
TEST(VarlenAnalytic, AgreesWithFlexspWhereTheyOverlap) {
  ClusterSpec c = *load_cluster("a100-40gb");
  c.nodes = 8;
  AnalyticSeqOptions o;
  o.max_seq = 65536;
  auto w = analytic_seq_cost(*load_model("gpt3-6.7b"), c, o);
  ASSERT_TRUE(w.ok()) << w.error().message;
  auto f = flexsp_seq_cost(*flexsp_constants("gpt-7b"), 64, 30);
  int n = 0;
  for (int d : {1, 2, 4, 8, 16, 32, 64})
    for (double s : {1024.0, 4096.0, 16384.0, 65536.0}) {
      if (s / d < 1024 || s / d > (*w)->capacity_tokens()) continue;
      const double r = (*w)->seq_time(s, d) / f->seq_time(s, d);
      EXPECT_GT(r, 0.85) << "d " << d << " s " << s;
      EXPECT_LT(r, 1.45) << "d " << d << " s " << s;
      ++n;
    }
  EXPECT_GE(n, 10);
  for (int d : {1, 8, 64}) EXPECT_LT((*w)->seq_time(2000, d), (*w)->seq_time(3000, d));
  EXPECT_LT((*w)->seq_time(16384, 8), (*w)->seq_time(16384, 4));
  EXPECT_GT((*w)->capacity_tokens(), 1000);
  EXPECT_GT((*w)->group_overhead(8), 0);
  EXPECT_EQ((*w)->gpus(), 64);
}

}  // namespace
}  // namespace weft::varlen

namespace weft::varlen {
namespace {

// ZeRO-2 holds the parameters (less room for activations than ZeRO-3) and reduces gradients once
// per step (a step overhead, and a smaller per-micro-batch overhead than ZeRO-3's gathers); a
// step's time is its micro-batches' plus that once.
TEST(VarlenAnalytic, ZeroTwoReducesOncePerStep) {
  ClusterSpec c = *load_cluster("a100-80gb");
  c.nodes = 2;
  AnalyticSeqOptions o;
  o.max_seq = 16384;
  auto z3 = analytic_seq_cost(*load_model("llama-2-7b"), c, o);
  o.zero = 2;
  auto z2 = analytic_seq_cost(*load_model("llama-2-7b"), c, o);
  ASSERT_TRUE(z3.ok() && z2.ok());
  EXPECT_EQ((*z3)->step_overhead(), 0);
  EXPECT_GT((*z2)->step_overhead(), 0);
  EXPECT_LT((*z2)->capacity_tokens(), (*z3)->capacity_tokens());
  EXPECT_LT((*z2)->group_overhead(1), (*z3)->group_overhead(1));
  const std::vector<std::int64_t> batch = {4096, 900, 300, 2000, 120, 7000, 512, 64};
  auto p = plan_step(batch, **z2);
  ASSERT_TRUE(p.ok()) << p.error().message;
  double mbs = 0;
  for (const MicroBatch& mb : p->micro_batches) mbs += mb.time;
  EXPECT_NEAR(p->time, mbs + (*z2)->step_overhead(), 1e-12 * p->time);
  o.zero = 0;
  EXPECT_FALSE(analytic_seq_cost(*load_model("llama-2-7b"), c, o).ok());
}

}  // namespace
}  // namespace weft::varlen
