// The frameworks' one name list and parser (weft/cost/framework.h) and their analytic-model traits
// (framework_options).
#include "weft/cost/framework.h"

#include <gtest/gtest.h>

#include "weft/cost/analytic.h"

namespace weft {
namespace {

constexpr Framework kAll[] = {Framework::kMegatron, Framework::kMegatronDeepSpeed, Framework::kTorchtitan,
                              Framework::kTorchtitanCompile};

TEST(Framework, NamesParseBackToTheirFramework) {
  EXPECT_EQ(framework_names(), "megatron, megatron-deepspeed, torchtitan, torchtitan-compile");
  for (Framework f : kAll) {
    auto back = framework_from_string(to_string(f));
    ASSERT_TRUE(back.ok()) << to_string(f);
    EXPECT_EQ(*back, f);
  }
  EXPECT_STREQ(to_string(Framework::kMegatronDeepSpeed), "megatron-deepspeed");
}

TEST(Framework, AnUnknownNameListsTheKnownOnes) {
  auto r = framework_from_string("jax");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
  EXPECT_EQ(r.error().message,
            "--framework: unknown framework \"jax\" (known: megatron, megatron-deepspeed, torchtitan, "
            "torchtitan-compile)");
  auto by_name = framework_options("Megatron");
  ASSERT_FALSE(by_name.ok());
  EXPECT_NE(by_name.error().message.find("unknown framework \"Megatron\""), std::string::npos);
}

TEST(Framework, TraitsByEnumAndByNameAgree) {
  AnalyticOptions base;
  base.host_op_us = 11;  // constants are kept
  for (Framework f : kAll) {
    const AnalyticOptions a = framework_options(f, base);
    auto b = framework_options(std::string(to_string(f)), base);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(a.framework, f);
    EXPECT_EQ(b->framework, a.framework);
    EXPECT_EQ(b->flash_attention, a.flash_attention);
    EXPECT_EQ(b->fused_elementwise, a.fused_elementwise);
    EXPECT_EQ(b->overlap_grad_sync, a.overlap_grad_sync);
    EXPECT_EQ(b->selective, a.selective);
    EXPECT_EQ(b->vocab_parallel_loss, a.vocab_parallel_loss);
    EXPECT_EQ(a.host_op_us, 11);
  }
  // The traits of docs/cost-model.md §4.1.
  const AnalyticOptions ds = framework_options(Framework::kMegatronDeepSpeed);
  EXPECT_FALSE(ds.flash_attention);
  EXPECT_FALSE(ds.overlap_grad_sync);
  const AnalyticOptions titan = framework_options(Framework::kTorchtitan);
  const AnalyticOptions compiled = framework_options(Framework::kTorchtitanCompile);
  EXPECT_FALSE(titan.fused_elementwise);
  EXPECT_TRUE(compiled.fused_elementwise);
  EXPECT_EQ(titan.selective, SelectivePolicy::kAlternateMatmuls);
  EXPECT_FALSE(titan.vocab_parallel_loss);
  EXPECT_EQ(framework_options(Framework::kMegatron).selective, SelectivePolicy::kAttentionCore);
}

}  // namespace
}  // namespace weft
