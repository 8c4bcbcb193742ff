// restrict_to_framework and framework_runs by Framework (weft/search/search.h): the enum and its
// name give the same restriction, messages name the framework as the command line spells it, and
// weft (its own runtime) is the runtime's restriction and check.
#include <gtest/gtest.h>

#include <string>

#include "weft/plan/runtime_support.h"
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

// Mixtral-8x7B on 16 H100, one stage, 16 micro-batches: every MoE layer on `s`.
Plan mixtral_plan(const LayerStrategy& s) {
  TrainSettings t;
  t.seq = 4096;
  t.global_batch = 128;
  t.micro_batches = 16;
  ClusterSpec c = *load_cluster("h100-80gb");
  c.nodes = 2;
  auto p = make_uniform_plan(*load_model("mixtral-8x7b"), c, t, s, embedding_for(s));
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
  return *p;
}

// The expert degrees as each framework takes them: Megatron-LM any etp, ep with tp only under
// sequence parallelism (TransformerConfig); torchtitan etp 1 or tp, ep spanning cp (and tp with
// etp 1); DeepSpeed-MoE's experts follow tp.
TEST(FrameworkSpace, ExpertDegreesAsEachFrameworkTakesThem) {
  const Plan one = mixtral_plan(LayerStrategy{.tp = 2, .sp = true, .dp = 8, .zero = 2, .ep = 8, .etp = 1});
  EXPECT_TRUE(framework_runs(one, Framework::kMegatron).ok());
  EXPECT_TRUE(framework_runs(one, Framework::kTorchtitan).ok()) << framework_runs(one, Framework::kTorchtitan).error().message;
  const Plan no_sp = mixtral_plan(LayerStrategy{.tp = 2, .dp = 8, .zero = 2, .ep = 8, .etp = 1});
  const Status meg = framework_runs(no_sp, Framework::kMegatron);
  ASSERT_FALSE(meg.ok());
  EXPECT_NE(meg.error().message.find("ep=8 with tp=2 without sequence parallelism"), std::string::npos)
      << meg.error().message;
  const Plan odd = mixtral_plan(LayerStrategy{.tp = 4, .sp = true, .dp = 4, .zero = 2, .ep = 2, .etp = 1});
  EXPECT_TRUE(framework_runs(odd, Framework::kMegatron).ok());
  const Status titan = framework_runs(odd, Framework::kTorchtitan);
  ASSERT_FALSE(titan.ok());
  EXPECT_NE(titan.error().message.find("ep=2 not a multiple of cp*tp"), std::string::npos) << titan.error().message;
  const Plan two = mixtral_plan(LayerStrategy{.tp = 4, .sp = true, .dp = 4, .zero = 2, .ep = 2, .etp = 2});
  const Status titan2 = framework_runs(two, Framework::kTorchtitan);
  ASSERT_FALSE(titan2.ok());
  EXPECT_NE(titan2.error().message.find("etp=2 (it offers expert tensor degree 1 or tp=4)"), std::string::npos)
      << titan2.error().message;
  const Status ds = framework_runs(
      mixtral_plan(LayerStrategy{.tp = 2, .sp = true, .dp = 8, .zero = 1, .ep = 1, .etp = 1}),
      Framework::kMegatronDeepSpeed);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.error().message.find("etp=1 (DeepSpeed-MoE's experts follow tp)"), std::string::npos)
      << ds.error().message;
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

// `--framework weft` restricts as no --framework does: restrict_to_runtime(), per-layer plans and
// uneven stages kept, and the same strategies accepted.
TEST(FrameworkSpace, WeftIsTheRuntimesRestriction) {
  SearchOptions runtime, weft, by_name;
  ASSERT_TRUE(restrict_to_runtime(runtime).ok());
  ASSERT_TRUE(restrict_to_framework(weft, Framework::kWeft).ok());
  ASSERT_TRUE(restrict_to_framework(by_name, "weft").ok());
  for (const SearchOptions* o : {&weft, &by_name}) {
    EXPECT_TRUE(o->layerwise);
    EXPECT_TRUE(o->uneven_stages);
    EXPECT_EQ(o->schedules, runtime.schedules);
    EXPECT_EQ(o->allow_cp, runtime.allow_cp);
    EXPECT_EQ(o->allow_ulysses, runtime.allow_ulysses);
  }
  // Every schedule, zb-h1 and zb-v included.
  EXPECT_EQ(weft.schedules, (std::vector<Schedule>{Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved,
                                                   Schedule::kZbH1, Schedule::kZbV}));
  EXPECT_TRUE(weft.allow_cp);  // context parallelism runs (ring attention)
  // Every strategy runs, expert parallelism included (MoE layers in the runtime).
  for (int tp : {1, 2})
    for (int u : {1, 2})
      for (int cp : {1, 2})
        for (int ep : {1, 2})
          for (int zero = 0; zero <= 3; ++zero) {
            const LayerStrategy s{.tp = tp, .sp = tp > 1, .ulysses = u, .cp = cp, .dp = 2, .zero = zero, .ep = ep};
            const bool a = weft.accept(s, nullptr);
            EXPECT_EQ(a, runtime.accept(s, nullptr)) << label(s);
            EXPECT_TRUE(a) << label(s);
          }

  // Every schedule runs there: the ones asked for are kept.
  SearchOptions interleaved;
  interleaved.schedules = {Schedule::kInterleaved, Schedule::kZbH1};
  ASSERT_TRUE(restrict_to_framework(interleaved, Framework::kWeft).ok());
  EXPECT_EQ(interleaved.schedules, (std::vector<Schedule>{Schedule::kInterleaved, Schedule::kZbH1}));
}

// framework_runs(p, weft) is runtime_supports(p): a per-layer plan the runtime runs is accepted
// (Megatron refuses it), and so is context parallelism; a sequence its 2 cp chunks do not cut
// evenly is refused naming the layer and the numbers.
TEST(FrameworkSpace, WeftRunsWhatTheRuntimeRuns) {
  Plan mixed = llama_plan(LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 1});
  mixed.stages[0].layers[1] = LayerStrategy{.dp = 8, .zero = 3};
  EXPECT_TRUE(framework_runs(mixed, Framework::kWeft).ok());
  EXPECT_TRUE(framework_runs(mixed, "weft").ok());
  EXPECT_FALSE(framework_runs(mixed, Framework::kMegatron).ok());

  Plan cp = llama_plan(LayerStrategy{.tp = 2, .cp = 2, .dp = 2});
  EXPECT_TRUE(framework_runs(cp, Framework::kWeft).ok()) << framework_runs(cp, Framework::kWeft).error().message;
  cp.train.seq = 4098;
  const Status st = framework_runs(cp, Framework::kWeft);
  ASSERT_FALSE(st.ok());
  const Status rt = runtime_supports(cp);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(st.error().message, rt.error().message);
  EXPECT_NE(st.error().message.find("cp=2"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("4098"), std::string::npos) << st.error().message;
  EXPECT_TRUE(framework_runs(cp, Framework::kMegatron).ok());
}

}  // namespace
}  // namespace weft
