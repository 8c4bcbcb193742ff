// The frameworks' one name list and parser (weft/cost/framework.h) and their analytic-model traits
// (framework_options).
#include "weft/cost/framework.h"

#include <gtest/gtest.h>

#include "contexts.h"
#include "weft/cost/analytic.h"

namespace weft {
namespace {

constexpr Framework kAll[] = {Framework::kMegatron, Framework::kMegatronDeepSpeed, Framework::kTorchtitan,
                              Framework::kTorchtitanCompile, Framework::kWeft};

TEST(Framework, NamesParseBackToTheirFramework) {
  EXPECT_EQ(framework_names(), "megatron, megatron-deepspeed, torchtitan, torchtitan-compile, weft");
  for (Framework f : kAll) {
    auto back = framework_from_string(to_string(f));
    ASSERT_TRUE(back.ok()) << to_string(f);
    EXPECT_EQ(*back, f);
  }
  EXPECT_STREQ(to_string(Framework::kMegatronDeepSpeed), "megatron-deepspeed");
  EXPECT_STREQ(to_string(Framework::kWeft), "weft");
}

TEST(Framework, AnUnknownNameListsTheKnownOnes) {
  auto r = framework_from_string("jax");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
  EXPECT_EQ(r.error().message,
            "--framework: unknown framework \"jax\" (known: megatron, megatron-deepspeed, torchtitan, "
            "torchtitan-compile, weft)");
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

// weft's own runtime is costed as Megatron-LM is: its traits are the analytic model's defaults,
// so `--framework weft` prices what no --framework does; only the name it reports differs.
TEST(Framework, WeftIsCostedWithMegatronsTraits) {
  const AnalyticOptions defaults;
  for (const AnalyticOptions& o : {framework_options(Framework::kWeft), framework_options(Framework::kMegatron)}) {
    EXPECT_EQ(o.flash_attention, defaults.flash_attention);
    EXPECT_EQ(o.attention_kernel, defaults.attention_kernel);  // differs from FlashAttention-2 on Hopper
    EXPECT_EQ(o.fused_elementwise, defaults.fused_elementwise);
    EXPECT_EQ(o.overlap_grad_sync, defaults.overlap_grad_sync);
    EXPECT_EQ(o.selective, defaults.selective);
    EXPECT_EQ(o.vocab_parallel_loss, defaults.vocab_parallel_loss);
    EXPECT_EQ(o.host_op_us, defaults.host_op_us);
    EXPECT_EQ(o.compute_time_scale, defaults.compute_time_scale);
  }
  EXPECT_EQ(framework_options(Framework::kWeft).framework, Framework::kWeft);
  EXPECT_EQ(AnalyticCostModel(framework_options(Framework::kWeft)).source(), "analytic, weft");
  EXPECT_EQ(AnalyticCostModel().source(), "analytic, megatron");
  // The same figures for a layer, selective recompute (whose policy is a trait) included.
  const testing::PresetSetup b("llama-2-7b", "a100-80gb");
  const LayerStrategy s{.tp = 2, .sp = true, .dp = 4, .zero = 1, .recompute = Recompute::kSelective};
  const LayerCost weft = AnalyticCostModel(framework_options(Framework::kWeft)).layer(b.layer(3), s);
  const LayerCost plain = AnalyticCostModel().layer(b.layer(3), s);
  EXPECT_EQ(weft.fwd.value(), plain.fwd.value());
  EXPECT_EQ(weft.bwd.value(), plain.bwd.value());
  EXPECT_EQ(weft.grad_sync.value(), plain.grad_sync.value());
  EXPECT_EQ(weft.mem().value(), plain.mem().value());
}

}  // namespace
}  // namespace weft
