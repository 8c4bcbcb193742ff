// framework_export (weft/report/export.h): the export a framework runs a plan from, chosen by the
// Framework enum, and refusals that name the framework.
#include <gtest/gtest.h>

#include <string>

#include "weft/report/export.h"
#include "weft/search/uniform.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

// Llama-2-7B on 8 A100s in `pp` stages, 8 micro-batches: every layer and the embedding on `s`.
Plan llama_plan(const LayerStrategy& s, int pp = 1) {
  auto m = load_model("llama-2-7b");
  auto c = load_cluster("a100-80gb");
  EXPECT_TRUE(m.ok() && c.ok());
  TrainSettings t;
  t.seq = 4096;
  t.global_batch = 64;
  t.micro_batches = 8;
  t.pp = pp;
  auto p = make_uniform_plan(*m, *c, t, s, embedding_for(s));
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
  return *p;
}

TEST(FrameworkExport, EachFrameworkGetsItsOwnExport) {
  const Plan z1 = llama_plan(LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 1});
  auto meg = framework_export(z1, Framework::kMegatron);
  ASSERT_TRUE(meg.ok()) << meg.error().message;
  EXPECT_EQ(meg->text, megatron_args(z1)->text());
  EXPECT_EQ(meg->notes, megatron_args(z1)->notes);
  auto mds = framework_export(z1, Framework::kMegatronDeepSpeed);
  ASSERT_TRUE(mds.ok()) << mds.error().message;
  EXPECT_EQ(mds->text, deepspeed_config(z1, DeepSpeedTarget::kMegatronDeepSpeed)->config.dump(2) + "\n");

  const Plan z3 = llama_plan(LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 3});
  auto titan = framework_export(z3, Framework::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.error().message;
  EXPECT_EQ(titan->text, torchtitan_config(z3)->toml);
  EXPECT_EQ(titan->notes, torchtitan_config(z3)->notes);
  // torchtitan-compile: the same tables and a [compile] table that switches torch.compile on.
  auto compiled = framework_export(z3, Framework::kTorchtitanCompile);
  ASSERT_TRUE(compiled.ok()) << compiled.error().message;
  EXPECT_EQ(compiled->text, titan->text + "\n[compile]\nenable = true\n");
  EXPECT_EQ(compiled->notes, titan->notes);
}

TEST(FrameworkExport, RefusalsNameTheFramework) {
  // ZeRO-1 is not torchtitan's (FSDP2 is ZeRO 2 or 3); ZeRO-3 under a pipeline is not
  // Megatron-DeepSpeed's.
  auto titan = framework_export(llama_plan(LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 1}),
                                Framework::kTorchtitanCompile);
  ASSERT_FALSE(titan.ok());
  EXPECT_EQ(titan.error().kind, ErrorKind::kBadInput);
  EXPECT_EQ(titan.error().message.rfind("torchtitan: zero=1: ", 0), 0u) << titan.error().message;
  auto sp = framework_export(llama_plan(LayerStrategy{.tp = 2, .dp = 4, .zero = 3}), Framework::kTorchtitan);
  ASSERT_FALSE(sp.ok());
  EXPECT_NE(sp.error().message.find("; `weft plan --framework torchtitan` gives a plan this export takes"),
            std::string::npos)
      << sp.error().message;
  // For torchtitan-compile the hint names the framework the plan would be searched for.
  EXPECT_NE(titan.error().message.find("`weft plan --framework torchtitan-compile`"), std::string::npos)
      << titan.error().message;
  auto ds = framework_export(llama_plan(LayerStrategy{.tp = 2, .sp = true, .dp = 2, .zero = 3}, 2),
                             Framework::kMegatronDeepSpeed);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.error().message.rfind("deepspeed: zero=3 with pp=2: ", 0), 0u) << ds.error().message;
}

}  // namespace
}  // namespace weft
