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

// weft's own runtime has its own traits, from what it measured on an H100 (data/reference/h100;
// tests/calibration/h100_reference_test.cc holds them to the measurements): eager operators in the
// compute dtype, PyTorch's fused attention read in place at cuDNN's rates, no dropout, an
// AccumulateGrad pass per backward; Megatron's selective policy and loss.
TEST(Framework, WeftIsCostedAsItsRuntimeRuns) {
  const AnalyticOptions w = framework_options(Framework::kWeft);
  EXPECT_EQ(w.framework, Framework::kWeft);
  EXPECT_TRUE(w.flash_attention);
  EXPECT_EQ(w.attention_kernel, AttentionKernel::kCudnn);
  EXPECT_FALSE(w.fused_elementwise);
  EXPECT_FALSE(w.eager_fp32_math);
  EXPECT_FALSE(w.eager_attention_copy);
  EXPECT_FALSE(w.dropout);
  EXPECT_FALSE(w.fused_grad_accumulation);
  EXPECT_TRUE(w.overlap_grad_sync);
  EXPECT_EQ(w.selective, SelectivePolicy::kAttentionCore);
  EXPECT_TRUE(w.vocab_parallel_loss);
  // The other frameworks keep the defaults of the traits weft's runtime introduced.
  for (Framework f : {Framework::kMegatron, Framework::kMegatronDeepSpeed, Framework::kTorchtitan,
                      Framework::kTorchtitanCompile}) {
    const AnalyticOptions o = framework_options(f);
    EXPECT_TRUE(o.eager_fp32_math) << to_string(f);
    EXPECT_TRUE(o.eager_attention_copy) << to_string(f);
    EXPECT_TRUE(o.dropout) << to_string(f);
    EXPECT_TRUE(o.fused_grad_accumulation) << to_string(f);
  }
  EXPECT_EQ(AnalyticCostModel(w).source(), "analytic, weft");
  EXPECT_EQ(AnalyticCostModel().source(), "analytic, megatron");
  // A Llama layer: slower than Megatron's fused one and slightly faster than torchtitan's fp32
  // elementwise math; it saves more than Megatron's and less than torchtitan's fp32 norm copies.
  const testing::PresetSetup b("llama-2-7b", "h100-80gb");
  const LayerStrategy s{.tp = 2, .sp = true, .dp = 4, .zero = 1};
  const LayerCost weft = AnalyticCostModel(w).layer(b.layer(3), s);
  const LayerCost mega = AnalyticCostModel().layer(b.layer(3), s);
  const LayerCost titan = AnalyticCostModel(framework_options(Framework::kTorchtitan)).layer(b.layer(3), s);
  EXPECT_GT(weft.fwd.value(), mega.fwd.value());
  EXPECT_GT(weft.bwd.value(), mega.bwd.value());
  EXPECT_LT(weft.fwd.value(), titan.fwd.value());
  EXPECT_GT(weft.memory.activations.value(), mega.memory.activations.value());
  EXPECT_LT(weft.memory.activations.value(), titan.memory.activations.value());
}

}  // namespace
}  // namespace weft
