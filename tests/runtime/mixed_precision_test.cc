// Mixed precision (`weft train --precision bf16`, docs/runtime.md "Precision"): layers compute in
// bf16 from fp32 parameters; gradients, their reduction, AdamW and the loss stay fp32.
//
// Tolerance: bf16 keeps 8 significant bits, so one rounding of a value moves it by up to 2^-9 of
// itself. Runs that differ only in where bf16 rounds (a parallel plan against one rank, or bf16
// against fp32) are held to 2^-8 relative on every step's loss: two such roundings' worth, far
// below the change of the loss over the run (at least 5 times the tolerance, asserted, so a run that does not
// train cannot pass), and far above fp32 parity's 1e-5 (asserted the other way: bf16 must differ
// from fp32, or the run did not compute in bf16).
#include <gtest/gtest.h>

#include <cmath>

#include "parity_util.h"
#include "weft/plan/geometry.h"
#include "weft/runtime/comm.h"
#include "weft/runtime/model.h"

namespace weft::rttest {
namespace {

constexpr double kBf16Rel = 1.0 / 256;  // 2^-8
constexpr const char* kBf16 = " --precision bf16";

// One rank's losses, in `precision`: p itself when it is a one-rank plan, else its single-process
// reference (the same model, batch and micro-batches).
RunResult one_rank(const Plan& p, const std::string& name, const std::string& precision) {
  const std::string dir = temp_dir(name);
  RunResult r = train_plan(p.world_size() == 1 ? p : reference_of(p), dir, name, kSteps, " --precision " + precision);
  std::filesystem::remove_all(dir);
  return r;
}

double worst_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double w = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) w = std::max(w, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  return w;
}

// bf16 on one rank tracks fp32 on one rank within bf16 tolerance, and is not fp32.
void expect_tracks_fp32(const Plan& p, const std::string& name) {
  const RunResult fp32 = one_rank(p, name + "_fp32", "fp32");
  const RunResult bf16 = one_rank(p, name + "_bf16", "bf16");
  ASSERT_EQ(fp32.status, 0) << fp32.output;
  ASSERT_EQ(bf16.status, 0) << bf16.output;
  ASSERT_EQ(bf16.losses.size(), static_cast<size_t>(kSteps)) << bf16.output;
  const double w = worst_rel(bf16.losses, fp32.losses);
  EXPECT_LE(w, kBf16Rel) << bf16.output;
  EXPECT_GT(w, 1e-5) << "bf16 losses equal fp32's: the layers did not compute in bf16";
  EXPECT_GT(std::fabs(bf16.losses.front() - bf16.losses.back()), 5 * kBf16Rel * bf16.losses.front());
  EXPECT_NE(bf16.output.find("bf16 mixed precision on cpu (Gloo)"), std::string::npos) << bf16.output;
  std::printf("bf16 vs fp32 %s: loss max rel diff %.2e (tolerance %.2e)\n", name.c_str(), w, kBf16Rel);
}

TEST(MixedPrecision, OneRankTracksFp32Gpt) { expect_tracks_fp32(uniform(tiny_gpt(), 1, 1, strat(1, 1)), "gpt"); }
TEST(MixedPrecision, OneRankTracksFp32Llama) {
  expect_tracks_fp32(uniform(tiny_llama(), 1, 1, strat(1, 1)), "llama");
}
// ZeRO-3 on one rank keeps its whole unit in the shard; full recompute's first pass runs without
// grad mode and its backward pass with it: both use the step's one cast.
TEST(MixedPrecision, OneRankZero3RecomputeFullTracksFp32) {
  expect_tracks_fp32(uniform(tiny_llama(), 1, 1, strat(1, 1, 1, false, 3, Recompute::kFull)), "llama_z3_full");
}

// A parallel plan in bf16 against one bf16 rank of the same model, batch and seed; the saved
// parameters are the fp32 master copy.
void expect_bf16_parity(const Plan& p, const std::string& name, const std::string& extra = "") {
  const RunResult ref = one_rank(p, name + "_ref", "bf16");
  ASSERT_EQ(ref.status, 0) << ref.output;
  const std::string dir = temp_dir(name);
  const RunResult got = train_plan(p, dir, name, kSteps, kBf16 + extra);
  ASSERT_EQ(got.status, 0) << got.output;
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps)) << got.output;
  const double w = worst_rel(got.losses, ref.losses);
  EXPECT_LE(w, kBf16Rel) << got.output;
  EXPECT_GT(std::fabs(got.losses.front() - got.losses.back()), 5 * kBf16Rel * got.losses.front());
  const runtime::ParamsFile params = read_params(dir + "/" + name + ".params");
  EXPECT_FALSE(params.params.empty());
  std::printf("bf16 parity %s: %d ranks, loss max rel diff %.2e (tolerance %.2e)\n", name.c_str(), p.world_size(), w,
              kBf16Rel);
  std::filesystem::remove_all(dir);
}

TEST(MixedPrecision, DataParallel2Zero1SmallBuckets) {
  expect_bf16_parity(uniform(tiny_gpt(), 2, 1, strat(1, 2, 1, false, 1)), "bf16_zero1", " --bucket-mb 0.0009765625");
}
// ZeRO-3 gathers the bf16 casts of the shards and reduce-scatters fp32 gradients.
TEST(MixedPrecision, Zero3Dp2RecomputeFull) {
  expect_bf16_parity(uniform(tiny_llama(), 2, 1, strat(1, 2, 1, false, 3, Recompute::kFull)), "bf16_zero3");
}
// bf16 activations through Gloo (carried as fp32) in tensor, sequence and Ulysses collectives.
TEST(MixedPrecision, TensorParallel2SequenceParallel) {
  expect_bf16_parity(uniform(tiny_llama(), 2, 1, strat(2, 1, 1, true)), "bf16_tp2sp");
}
TEST(MixedPrecision, Ulysses2RecomputeSelective) {
  expect_bf16_parity(uniform(tiny_llama(), 2, 1, strat(1, 1, 2, false, 0, Recompute::kSelective)), "bf16_ulysses2");
}
// bf16 activations and their gradients between pipeline stages.
TEST(MixedPrecision, Pipeline2OneFOneB) {
  expect_bf16_parity(uniform(tiny_gpt(), 2, 2, strat(1, 1), {1, 3}, Schedule::k1F1B, 8, 4), "bf16_pp2");
}

// A bf16 run stopped after its step-3 checkpoint and resumed gives the uninterrupted run's losses
// exactly: the checkpoint holds the fp32 parameters, and loading them makes the casts again.
TEST(MixedPrecision, ResumeGivesTheUninterruptedLosses) {
  const std::string dir = temp_dir("bf16_resume");
  const std::string base = driver() + " train --steps 6 --seed 7 --format json --precision bf16";
  const RunResult whole = run(base);
  ASSERT_EQ(whole.status, 0) << whole.output;
  ASSERT_EQ(whole.losses.size(), 6u);
  const std::string ck = " --checkpoint-dir " + dir + "/ck";
  const RunResult first = run(base + ck + " --checkpoint-every 3 --fault 0:4:exit");
  EXPECT_NE(first.status, 0);
  ASSERT_EQ(first.losses.size(), 3u) << first.output;
  const RunResult rest = run(base + ck + " --resume");
  ASSERT_EQ(rest.status, 0) << rest.output;
  ASSERT_EQ(rest.losses.size(), 3u) << rest.output;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(first.losses[i], whole.losses[i]) << "step " << i + 1;
    EXPECT_EQ(rest.losses[i], whole.losses[i + 3]) << "step " << i + 4;
  }
  std::filesystem::remove_all(dir);
}

// The layers' weights are bf16 casts of the fp32 parameters, made once for all micro-batches and
// made again after the parameters change; gradients arrive in the fp32 buffers.
TEST(MixedPrecision, WeightsAreCastOncePerParameterVersion) {
  const Plan plan = uniform(tiny_llama(), 1, 1, strat(1, 1), {4}, Schedule::k1F1B, 2, 1);
  runtime::GroupSet groups(runtime::CommConfig{});
  groups.build(process_groups(plan));
  groups.build(grad_groups(plan), runtime::Channel::kGrad);
  runtime::Model m(plan, 0, groups, 7, at::kCPU, at::kFloat, at::kBFloat16);
  EXPECT_EQ(m.compute_dtype(), at::kBFloat16);
  runtime::Unit* layer = nullptr;
  for (runtime::Unit& x : m.units())
    if (!layer && x.spec.name.rfind("layers.", 0) == 0) layer = &x;
  ASSERT_NE(layer, nullptr);
  runtime::Unit& u = *layer;
  EXPECT_EQ(u.flat.scalar_type(), at::kFloat);
  EXPECT_EQ(u.grad.scalar_type(), at::kFloat);
  const std::vector<at::Tensor> w1 = u.weights();
  ASSERT_FALSE(w1.empty());
  EXPECT_EQ(w1[0].scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::allclose(w1[0].to(at::kFloat), u.leaves[0].detach(), 0, 1.0 / 128));
  EXPECT_TRUE(u.weights()[0].is_same(w1[0]));  // the same cast, not a new one
  {
    at::NoGradGuard no_grad;
    u.flat.mul_(2);  // what an optimizer step does to the parameters
  }
  const std::vector<at::Tensor> w2 = u.weights();
  EXPECT_FALSE(w2[0].is_same(w1[0]));
  EXPECT_TRUE(at::allclose(w2[0].to(at::kFloat), 2 * w1[0].to(at::kFloat)));

  const at::Tensor tokens = at::randint(plan.model.vocab, {2, plan.train.seq}, at::kLong);
  at::Tensor loss = m.head_loss(m.forward_layers(m.embed(tokens)), tokens);
  EXPECT_EQ(loss.scalar_type(), at::kFloat);  // the loss in fp32
  loss.backward();
  EXPECT_GT(u.grad.abs().sum().item<double>(), 0.0);
  EXPECT_EQ(u.grad.scalar_type(), at::kFloat);
}

}  // namespace
}  // namespace weft::rttest
