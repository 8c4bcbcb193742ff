// weft's optimizer against PyTorch's own: several real steps of single-process `weft train` (AdamW,
// weight decay, gradient-norm clipping, the warm-up + cosine learning rate, gradient accumulation
// over micro-batches) redone from the same initial parameters and batches with torch.optim.AdamW
// and torch.nn.utils.clip_grad_norm_ (tests/runtime/torch_adamw.py, on the decoder of
// torch_reference.py). Every parallel mode shares this optimizer, so the parity tests, which compare
// modes with the single-process run, cannot see a mistake in it; this test can.
#include "rt_util.h"

namespace weft::rttest {
namespace {

const char* kPython = "/usr/bin/python3";

struct OptCase {
  std::string name;
  ModelSpec model;
  int steps = 6, global_batch = 8, micro_batches = 2, warmup = 2;
  double lr = 1e-2, min_lr = 1e-3, weight_decay = 0.1, clip = 1.0;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
};

std::string num(double x) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", x);
  return b;
}

// The key biases' gradient is zero in exact arithmetic (adding q.b_k to every score of a row leaves
// the softmax unchanged), so they receive only rounding noise, which Adam divides by its own root
// mean square: their updates are noise of a size set by how the noise compares with eps (here they
// end near 1e-5, with differences of the same size and relative differences above 1). Their values
// say nothing about the optimizer, and they are left out of the comparison.
runtime::ParamsFile without_key_bias(runtime::ParamsFile f) {
  std::erase_if(f.params, [](const runtime::NamedParam& p) { return p.name.ends_with(".attn.bk"); });
  return f;
}

void check_against_torch_adamw(const OptCase& c) {
  if (run(std::string(kPython) + " -c 'import torch, numpy'").status != 0)
    GTEST_SKIP() << kPython << " with torch (Debian python3-torch) is not available";
  const std::string dir = temp_dir("adamw_" + c.name);
  const Plan p = uniform(c.model, 1, 1, LayerStrategy{}, {c.model.num_layers()}, Schedule::k1F1B, c.global_batch,
                         c.micro_batches);
  const std::string plan = write_plan(p, dir, "plan");
  write_json_file(dir + "/model.json", to_json(c.model));
  const std::string seed = "7";

  // The initial parameters, exactly: one step whose learning rate is 0 (without warm-up the
  // schedule of a 1-step run ends at --min-lr at its only step), so neither the decay nor the Adam
  // update moves anything.
  const RunResult init = run(driver() + " train --plan " + plan + " --steps 1 --warmup 0 --lr 1 --min-lr 0 --seed " +
                             seed + " --format json --save-params " + dir + "/init.params");
  ASSERT_EQ(init.status, 0) << init.output;
  ASSERT_EQ(init.lrs.size(), 1u);
  ASSERT_EQ(init.lrs[0], 0.0) << "the initial-parameter run must not move the parameters";

  const std::string opt_flags = " --steps " + std::to_string(c.steps) + " --lr " + num(c.lr) + " --min-lr " +
                                num(c.min_lr) + " --warmup " + std::to_string(c.warmup) + " --weight-decay " +
                                num(c.weight_decay) + " --beta1 " + num(c.beta1) + " --beta2 " + num(c.beta2) +
                                " --eps " + num(c.eps) + " --clip " + num(c.clip) + " --seed " + seed;
  const RunResult w = run(driver() + " train --plan " + plan + opt_flags + " --format json --save-params " + dir +
                          "/weft.params");
  ASSERT_EQ(w.status, 0) << w.output;
  ASSERT_EQ(w.losses.size(), static_cast<size_t>(c.steps)) << w.output;

  const RunResult t = run(std::string(kPython) + " " + WEFT_RT_TESTS_DIR + "/torch_adamw.py --model " + dir +
                          "/model.json --init " + dir + "/init.params --out " + dir + "/torch.params --seq " +
                          std::to_string(p.train.seq) + " --global-batch " + std::to_string(c.global_batch) +
                          " --micro-batches " + std::to_string(c.micro_batches) + opt_flags);
  ASSERT_EQ(t.status, 0) << t.output;
  ASSERT_EQ(t.losses.size(), static_cast<size_t>(c.steps)) << t.output;

  // Per step: the learning rate (the same formula evaluated in double: only rounding may differ),
  // the loss and the gradient norm before clipping (the model of the reference test; the loss and
  // norm of step s > 1 are computed from the parameters after s - 1 optimizer steps, so a wrong
  // update shows in the next step's loss too). A gradient scaled by a wrong normalisation of the
  // accumulated loss (per micro-batch instead of per step) would double the norm; a micro-batch
  // dropped or counted twice changes both loss and norm.
  int clipped = 0, unclipped = 0;
  for (int s = 0; s < c.steps; ++s) {
    EXPECT_NEAR(w.lrs[s], t.lrs[s], 1e-12 * t.lrs[s]) << "learning rate of step " << s + 1;
    EXPECT_NEAR(w.losses[s], t.losses[s], 1e-5 * t.losses[s]) << "loss of step " << s + 1;
    EXPECT_NEAR(w.grad_norms[s], t.grad_norms[s], 1e-4 * t.grad_norms[s]) << "gradient norm of step " << s + 1;
    if (c.clip > 0) ++(w.grad_norms[s] > c.clip ? clipped : unclipped);
  }
  if (c.clip > 0) {
    // Adam is nearly invariant to a gradient scale that is the same on every step, so clipping
    // shows only when its coefficient changes between steps: some step must be clipped and some not.
    EXPECT_GE(clipped, 1) << "no step was clipped; lower the case's clip";
    EXPECT_GE(unclipped, 1) << "every step was clipped; raise the case's clip";
  }

  const runtime::ParamsFile init_p = read_params(dir + "/init.params");
  const runtime::ParamsFile weft_p = read_params(dir + "/weft.params");
  const runtime::ParamsFile torch_p = read_params(dir + "/torch.params");
  auto moved = runtime::compare_params(weft_p, init_p);
  auto diff = runtime::compare_params(without_key_bias(weft_p), without_key_bias(torch_p));
  ASSERT_TRUE(moved.ok()) << moved.error().message;
  ASSERT_TRUE(diff.ok()) << diff.error().message;
  const runtime::ParamsDiff& d = diff.value();
  std::printf("%s: weft vs torch.optim.AdamW after %d steps: max |diff| %.3g (%s), max rel norm %.3g; "
              "moved from the initial parameters by up to %.3g\n",
              c.name.c_str(), c.steps, d.max_abs, d.worst.c_str(), d.max_rel_norm, moved.value().max_abs);
  for (int s = 0; s < c.steps; ++s)
    std::printf("  step %d: lr %.6g  loss %.8f / %.8f  grad_norm %.6f / %.6f%s\n", s + 1, w.lrs[s], w.losses[s],
                t.losses[s], w.grad_norms[s], t.grad_norms[s],
                c.clip > 0 && w.grad_norms[s] > c.clip ? "  (clipped)" : "");

  // Tolerances. Both sides do the same fp32 arithmetic in different orders (their own kernels, fp64
  // against fp32 norms), so they differ by rounding, which the steps carry forward: after 6 steps
  // at most 3.7e-6 absolute and 1.2e-5 relative (per-parameter norm of the difference over the norm
  // of PyTorch's parameter) in these cases, on this machine; the bounds leave a margin of 8. Adam
  // moves each element by up to about lr per step, and the parameters moved by 3e-2 (checked first,
  // so that the comparison means something); a real mistake in the optimizer moves them by far more
  // than the bounds:
  //   - the learning rate of any step (warm-up or cosine off by one, min_lr ignored), the bias
  //     corrections (without them step 1 moves by 0.45 lr instead of lr), eps (where it is added,
  //     or a flag not passed on), the betas, clipping skipped or with another coefficient, the
  //     accumulated loss scaled per micro-batch instead of per step (through clipping and eps), a
  //     micro-batch's gradient lost, the moments or the step count reset: differences of 1e-3 and
  //     more, caught by the absolute bound (and most by the per-step losses and norms above);
  //   - weight decay on a parameter that must not decay (biases, norm gains) or none on one that
  //     must (matrices, the embedding tables, the untied LM head): a relative change of that
  //     parameter of about wd * (sum of the learning rates) = 3e-3, caught by the relative bound
  //     also where the parameter is small (a bias of 0.05 changes by under 2e-4 absolute).
  EXPECT_GT(moved.value().max_abs, 1e-2) << "the parameters barely moved: the comparison would say nothing";
  EXPECT_LT(d.max_abs, 3e-5) << "worst parameter: " << d.worst;
  EXPECT_LT(d.max_rel_norm, 1e-4);
  std::filesystem::remove_all(dir);
}

TEST(RuntimeOptimizer, GptTiedLayerNormMatchesTorchAdamW) {
  OptCase c;
  c.name = "gpt";
  c.model = tiny_gpt(2);
  c.clip = 1.2;  // gradient norms 1.0 to 1.8: steps 1, 3, 4 and 5 clipped
  check_against_torch_adamw(c);
}

TEST(RuntimeOptimizer, LlamaUntiedRmsNormMatchesTorchAdamW) {
  OptCase c;
  c.name = "llama";
  c.model = tiny_llama(2, 2);
  c.clip = 0.8;  // gradient norms 0.76 to 1.18: all steps but step 2 clipped
  check_against_torch_adamw(c);
}

TEST(RuntimeOptimizer, NoClipOtherBetasEpsMatchesTorchAdamW) {
  OptCase c;
  c.name = "noclip";
  c.model = tiny_gpt(2);
  c.clip = 0;
  // Betas and eps other than the defaults, so that a flag not reaching the update shows (eps 1e-6
  // against the default 1e-8 moves these parameters by 1e-2).
  c.beta1 = 0.8;
  c.beta2 = 0.99;
  c.eps = 1e-6;
  check_against_torch_adamw(c);
}

}  // namespace
}  // namespace weft::rttest
