// restrict_to_framework and framework_runs by Framework (weft/search/search.h): the enum and its
// name give the same restriction, and messages name the framework as the command line spells it.
#include <gtest/gtest.h>

#include <string>

#include "weft/search/search.h"
#include "weft/search/uniform.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

// Llama-2-7B on 8 A100s, one stage, 8 micro-batches: every layer and the embedding on `s`.
Plan llama_plan(const LayerStrategy& s) {
  TrainSettings t;
  t.seq = 4096;
  t.global_batch = 64;
  t.micro_batches = 8;
  auto p = make_uniform_plan(*load_model("llama-2-7b"), *load_cluster("a100-80gb"), t, s, embedding_for(s));
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
  return *p;
}

TEST(FrameworkSpace, TheEnumAndItsNameRestrictAlike) {
  for (Framework f : {Framework::kMegatron, Framework::kMegatronDeepSpeed, Framework::kTorchtitan,
                      Framework::kTorchtitanCompile}) {
    SearchOptions by_enum, by_name;
    ASSERT_TRUE(restrict_to_framework(by_enum, f).ok());
    ASSERT_TRUE(restrict_to_framework(by_name, to_string(f)).ok());
    EXPECT_FALSE(by_enum.layerwise);
    EXPECT_EQ(by_enum.uneven_stages, by_name.uneven_stages);
    EXPECT_EQ(by_enum.schedules, by_name.schedules);
    EXPECT_EQ(by_enum.allow_cp, by_name.allow_cp);
    EXPECT_EQ(by_enum.allow_ulysses, by_name.allow_ulysses);
  }
  // torchtitan-compile is torchtitan's space: any split points, no Ulysses.
  SearchOptions o;
  ASSERT_TRUE(restrict_to_framework(o, Framework::kTorchtitanCompile).ok());
  EXPECT_TRUE(o.uneven_stages);
  EXPECT_FALSE(o.allow_ulysses);
  EXPECT_FALSE(o.accept(LayerStrategy{.tp = 2, .dp = 4, .zero = 3}, nullptr));  // tp without sp
  EXPECT_TRUE(o.accept(LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 3}, nullptr));
}

TEST(FrameworkSpace, MessagesNameTheFramework) {
  SearchOptions o;
  o.schedules = {Schedule::kGpipe};
  const Status st = restrict_to_framework(o, Framework::kMegatronDeepSpeed);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "--schedule: framework megatron-deepspeed has no gpipe schedule");

  const Plan z1 = llama_plan(LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 1});
  EXPECT_TRUE(framework_runs(z1, Framework::kMegatron).ok());
  const Status titan = framework_runs(z1, Framework::kTorchtitanCompile);
  ASSERT_FALSE(titan.ok());
  EXPECT_EQ(titan.error().message,
            "layer 0: zero=1 (it offers ZeRO 2, 3: FSDP2): framework torchtitan-compile cannot run it");

  SearchOptions any;
  const Status unknown = restrict_to_framework(any, "jax");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message.rfind("--framework: unknown framework \"jax\" (known: megatron", 0), 0u);
  EXPECT_FALSE(framework_runs(z1, "jax").ok());
}

}  // namespace
}  // namespace weft
