// AnalyticCostModel: memory against hand derivations, monotonicity of the trade-offs, the
// pipeline step formula on hand-made stage sums (docs/cost-model.md).
#include "weft/cost/analytic.h"

#include <gtest/gtest.h>

#include "contexts.h"
#include "weft/cost/compute.h"
#include "weft/cost/estimate.h"
#include "weft/cost/memory.h"
#include "weft/spec/counts.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

using Bench = testing::PresetSetup;

LayerStrategy strat(int tp, int dp, int zero = 0, Recompute rc = Recompute::kNone, bool sp = false) {
  return LayerStrategy{.tp = tp, .sp = sp, .dp = dp, .zero = zero, .recompute = rc};
}

double states(const MemoryBreakdown& m) { return (m.weights + m.grads + m.optimizer).value(); }

// Llama-2-7B per GPU, hand derivation: a layer has 4h^2 + 3*h*f = 202,375,168 matrix parameters
// (h 4096, f 11008) split by tp, plus 2*4096 RMSNorm weights kept whole; the embedding and the
// untied LM head each 32000*4096 split by tp; the final norm 4096.
double llama7b_local_params(int tp) {
  return 32 * (202375168.0 / tp + 8192) + 2 * 32000.0 * 4096 / tp + 4096;
}

double model_states(const Bench& s, const AnalyticCostModel& cm, const LayerStrategy& st) {
  double total = 0;
  for (int i = 0; i < s.model.num_layers(); ++i) total += states(cm.layer(s.layer(i), st).memory);
  return total + states(cm.stage_extra(s.stage(0, 1), st).memory);
}

TEST(AnalyticMemory, Llama7bStatesTp8) {
  Bench s("llama-2-7b", "a100-80gb");
  const AnalyticCostModel cm;
  // bf16 mixed precision Adam: 2 (weights) + 4 (fp32 main grads) + 12 (master, m, v) = 18 B/param
  EXPECT_NEAR(model_states(s, cm, strat(8, 1)), 18 * llama7b_local_params(8), 1.0);
}

TEST(AnalyticMemory, Llama7bStatesTp2Zero1) {
  Bench s("llama-2-7b", "a100-80gb");
  const AnalyticCostModel cm;
  // ZeRO-1 over dp 4: 2 + 4 + 12/4 = 9 B/param
  EXPECT_NEAR(model_states(s, cm, strat(2, 4, 1)), 9 * llama7b_local_params(2), 1.0);
  // ZeRO-3: everything / 4
  EXPECT_NEAR(model_states(s, cm, strat(2, 4, 3)), 18.0 / 4 * llama7b_local_params(2), 1.0);
}

TEST(AnalyticMemory, MoreTensorParallelLessMemory) {
  Bench s("llama-2-7b", "a100-80gb");
  s.train.global_batch = 16;
  s.train.micro_batches = 2;
  const AnalyticCostModel cm;
  // at a fixed data-parallel degree (the same samples per device)
  double prev = 1e300;
  for (int tp : {1, 2, 4, 8}) {
    const double mem = cm.layer(s.layer(0), strat(tp, 1)).memory.total().value();
    EXPECT_LT(mem, prev) << "tp " << tp;
    prev = mem;
  }
}

TEST(AnalyticMemory, SequenceParallelAndZeroReduceMemory) {
  Bench s("llama-2-7b", "a100-80gb");
  const AnalyticCostModel cm;
  EXPECT_LT(cm.layer(s.layer(0), strat(4, 2, 0, Recompute::kNone, true)).memory.activations,
            cm.layer(s.layer(0), strat(4, 2)).memory.activations);
  double prev = 1e300;
  for (int z = 0; z <= 3; ++z) {
    const double m = states(cm.layer(s.layer(0), strat(1, 8, z)).memory);
    EXPECT_LT(m, prev) << "zero " << z;
    prev = m;
  }
}

TEST(AnalyticRecompute, LessActivationMoreTime) {
  Bench s("gpt3-13b", "a100-80gb");
  s.train.seq = 2048;
  AnalyticOptions o;
  o.flash_attention = false;  // so that selective recompute has s x s tensors to drop
  const AnalyticCostModel cm(o);
  const LayerCost none = cm.layer(s.layer(0), strat(2, 4, 0, Recompute::kNone));
  const LayerCost sel = cm.layer(s.layer(0), strat(2, 4, 0, Recompute::kSelective));
  const LayerCost full = cm.layer(s.layer(0), strat(2, 4, 0, Recompute::kFull));
  EXPECT_LT(sel.memory.activations, none.memory.activations);
  EXPECT_LT(full.memory.activations, sel.memory.activations);
  EXPECT_GT(sel.bwd, none.bwd);
  EXPECT_GT(full.bwd, sel.bwd);
  EXPECT_EQ(none.fwd, full.fwd);
  EXPECT_GT(full.time.recompute.value(), 0.0);
}

TEST(AnalyticTime, ComputeNotFasterThanPeak) {
  Bench s("llama-2-7b", "a100-80gb");
  AnalyticOptions o;
  o.framework_overhead = false;
  const AnalyticCostModel cm(o);
  const LayerCost c = cm.layer(s.layer(0), strat(1, 8));
  const double samples = 1.0 / 8;  // one sample per micro-batch (8 micro-batches of 8) over dp 8
  const double flops = layer_forward_flops(s.model.layer(0), samples, s.train.seq).total();
  EXPECT_GT(c.fwd.value(), flops / 312e12);
  EXPECT_GT(c.bwd.value(), 2 * flops / 312e12 * 0.5);  // causal flash halves the attention work
}

TEST(AnalyticTime, TensorParallelAcrossNodesCostsMore) {
  Bench one("gpt3-175b", "a100-80gb", 1), two("gpt3-175b", "a100-80gb", 2);
  one.train.seq = two.train.seq = 2048;
  one.train.global_batch = two.train.global_batch = 1;
  one.train.micro_batches = two.train.micro_batches = 1;
  const AnalyticCostModel cm;
  const double tp8 = cm.layer(one.layer(0), strat(8, 1)).time.tp_comm.value();
  const double tp16 = cm.layer(two.layer(0), strat(16, 1)).time.tp_comm.value();
  EXPECT_GT(tp16, 1.1 * tp8);
}

TEST(AnalyticTime, Fp8ComputeFasterOnH100) {
  Bench s("llama-2-70b", "h100-80gb");
  AnalyticOptions o;
  o.framework_overhead = false;
  const AnalyticCostModel cm(o);
  Bench s8 = s;
  s8.train.dtype = DType::kFp8;
  const LayerCost bf = cm.layer(s.layer(0), strat(8, 1));
  const LayerCost f8 = cm.layer(s8.layer(0), strat(8, 1));
  EXPECT_LT(f8.time.compute, bf.time.compute);
  EXPECT_EQ(f8.memory.weights, bf.memory.weights);  // bf16 storage
}

// FP8 by hand (docs/cost-model.md §2.1-2.2), Llama-3-8B layer on one H100, 8192 tokens: the forward
// differs from bf16 only in its four GEMMs (fp8 rate) and the quantization of their inputs (6 bytes
// per element of h (QKV), q (output projection), h (gate/up), f (down)); the attention core stays
// 16-bit.
TEST(AnalyticTime, Fp8GemmsAndQuantizationByHand) {
  Bench s("llama-3-8b", "h100-80gb");
  s.train.global_batch = 2;
  s.train.micro_batches = 1;
  s.train.seq = 4096;
  AnalyticOptions o;
  o.framework_overhead = false;
  o.compute_time_scale = 1.0;
  const AnalyticCostModel cm(o);
  Bench s8 = s;
  s8.train.dtype = DType::kFp8;
  const double T = 8192, h = 4096, q = 4096, kv = 1024, f = 14336;
  const KernelModel k8(s.cluster.gpu, DType::kFp8, 1.0), k16(s.cluster.gpu, DType::kBf16, 1.0);
  auto gemms = [&](const KernelModel& k) {
    return k.gemm(T, q + 2 * kv, h).value() + k.gemm(T, h, q).value() + k.gemm(T, 2 * f, h).value() +
           k.gemm(T, h, f).value();
  };
  const double quant = 6 * T * (2 * h + q + f) / (s.cluster.gpu.hbm_gbps * 1e9 * 0.90);
  const double d = (cm.layer(s8.layer(0), strat(1, 1)).fwd - cm.layer(s.layer(0), strat(1, 1)).fwd).value();
  EXPECT_NEAR(d, gemms(k8) - gemms(k16) + quant, 1e-7);
  EXPECT_LT(d, 0);  // still faster overall
  // Saved activations: the QKV, gate/up and down projections keep 1-byte fp8 inputs (h, h, f)
  // instead of 2-byte ones, the output projection an fp8 copy (q) beside the attention output.
  const double saved_bf16 = cm.layer(s.layer(0), strat(1, 1)).memory.activations.value();
  const double saved_fp8 = cm.layer(s8.layer(0), strat(1, 1)).memory.activations.value();
  EXPECT_NEAR(saved_bf16 - saved_fp8, T * (2 * h + f - q), 1.0);
}

TEST(AnalyticTime, HostOverheadBoundsTinyLayers) {
  Bench s("gpt3-1.3b", "a100-80gb");
  s.train.seq = 128;
  s.train.global_batch = 8;
  AnalyticOptions on, off;
  off.framework_overhead = false;
  const LayerCost a = AnalyticCostModel(on).layer(s.layer(0), strat(8, 1));
  const LayerCost b = AnalyticCostModel(off).layer(s.layer(0), strat(8, 1));
  EXPECT_GT(a.fwd, b.fwd);
  // 21 + 1 operators, ... at 7 us and Functions at 20 us: at least 0.3 ms per forward
  EXPECT_GT(a.fwd.value(), 3e-4);
}

TEST(AnalyticStep, OneFOneBByHand) {
  AnalyticOptions o;
  o.overlap_grad_sync = false;
  const AnalyticCostModel cm(o);
  TrainSettings t;
  t.pp = 2;
  t.micro_batches = 4;
  t.schedule = Schedule::k1F1B;
  std::vector<StageSums> st(2);
  for (auto& s : st) {
    s.fwd = Seconds(1);
    s.bwd = Seconds(2);
  }
  // (m + p - 1) * (f + b) = 5 * 3
  EXPECT_DOUBLE_EQ(cm.step(t, st).step_time.value(), 15.0);
  EXPECT_DOUBLE_EQ(cm.step(t, st).time.bubble.value(), 3.0);
  t.schedule = Schedule::kGpipe;
  EXPECT_DOUBLE_EQ(cm.step(t, st).step_time.value(), 15.0);
  // an unbalanced pipeline runs at its slowest stage: (m - 1) * 4 + (4 + 3)
  st[1].bwd = Seconds(3);
  t.schedule = Schedule::k1F1B;
  EXPECT_DOUBLE_EQ(cm.step(t, st).step_time.value(), 3 * 4 + 7.0);
}

// Uneven stages laid out by hand, m = 3, no gradient sync; the closed form (m - 1) max T + sum T
// is 17 s for A and 15 s for B.
//  A: stage 0 (F 2, B 3), stage 1 (F 1, B 1).
//   GPipe: device 0 forwards 0-2, 2-4, 4-6; device 1 forwards 2-3, 4-5, 6-7, backwards 7-8, 8-9,
//   9-10; device 0 backwards 8-11, 11-14, 14-17 -> 17.
//   1F1B: device 0 runs F0 F1 B0 F2 B1 B2, device 1 F0 B0 F1 B1 F2 B2: D0 F0 0-2, F1 2-4; D1 F0 2-3,
//   B0 3-4, F1 4-5, B1 5-6; D0 B0 4-7, F2 7-9; D1 F2 9-10, B2 10-11; D0 B1 9-12, B2 12-15 -> 15,
//   which is m * max T: the closed form is 2 s pessimistic.
//  B: stage 0 (F 2, B 1), stage 1 (F 1, B 3).
//   GPipe: device 1 backwards 7-10, 10-13, 13-16; device 0's 10-11, 13-14, 16-17 -> 17
//   = sum (F + B) + (m - 1)(max F + max B): the closed form is 2 s optimistic.
//   1F1B: D0 F0 0-2, F1 2-4; D1 F0 2-3, B0 3-6, F1 6-7, B1 7-10; D0 B0 6-7, F2 7-9, B1 10-11;
//   D1 F2 10-11, B2 11-14; D0 B2 14-15 -> 15.
TEST(AnalyticStep, UnevenStagesByHand) {
  AnalyticOptions o;
  o.overlap_grad_sync = false;
  const AnalyticCostModel cm(o);
  TrainSettings t;
  t.pp = 2;
  t.micro_batches = 3;
  auto stages = [](double f0, double b0, double f1, double b1) {
    std::vector<StageSums> st(2);
    st[0].fwd = Seconds(f0);
    st[0].bwd = Seconds(b0);
    st[1].fwd = Seconds(f1);
    st[1].bwd = Seconds(b1);
    return st;
  };
  const auto A = stages(2, 3, 1, 1), B = stages(2, 1, 1, 3);
  t.schedule = Schedule::kGpipe;
  EXPECT_DOUBLE_EQ(cm.step(t, A).step_time.value(), 17.0);
  EXPECT_DOUBLE_EQ(cm.step(t, B).step_time.value(), 17.0);
  t.schedule = Schedule::k1F1B;
  EXPECT_DOUBLE_EQ(cm.step(t, A).step_time.value(), 15.0);
  EXPECT_DOUBLE_EQ(cm.step(t, A).time.bubble.value(), 0.0);
  EXPECT_DOUBLE_EQ(cm.step(t, B).step_time.value(), 15.0);
  EXPECT_DOUBLE_EQ(cm.step(t, B).time.bubble.value(), 3.0);
}

// The framework options scale what they say: host time per operator / Function on a host-bound
// layer, GPU kernel time on a GPU-bound one.
TEST(AnalyticTime, HostAndComputeScales) {
  Bench tiny("gpt3-1.3b", "a100-80gb");
  tiny.train.seq = 128;
  AnalyticOptions base, host2;
  host2.host_op_us = 2 * base.host_op_us;
  host2.host_function_us = 2 * base.host_function_us;
  const double a = AnalyticCostModel(base).layer(tiny.layer(0), strat(8, 1)).fwd.value();
  const double b = AnalyticCostModel(host2).layer(tiny.layer(0), strat(8, 1)).fwd.value();
  EXPECT_NEAR(b, 2 * a, 1e-9 * a);  // host-bound: all of it doubles

  Bench big("llama-2-7b", "a100-80gb");
  AnalyticOptions off, slow;
  off.framework_overhead = false;
  off.compute_time_scale = 1.0;
  slow.framework_overhead = false;
  slow.compute_time_scale = 1.5;
  const LayerCost c = AnalyticCostModel(off).layer(big.layer(0), strat(1, 1));
  const LayerCost d = AnalyticCostModel(slow).layer(big.layer(0), strat(1, 1));
  // tp 1, dp 1: no communication, every kernel well above the launch floor
  EXPECT_NEAR(d.fwd.value(), 1.5 * c.fwd.value(), 1e-6 * c.fwd.value());
  EXPECT_NEAR(d.bwd.value(), 1.5 * c.bwd.value(), 1e-6 * c.bwd.value());
}

TEST(AnalyticStep, InterleavedDividesBubble) {
  const AnalyticCostModel cm;
  TrainSettings t;
  t.pp = 2;
  t.vp = 2;
  t.micro_batches = 4;
  t.schedule = Schedule::kInterleaved;
  std::vector<StageSums> st(4);
  for (auto& s : st) {
    s.fwd = Seconds(0.5);
    s.bwd = Seconds(1);
  }
  // m * T + (p - 1) * T / v with T = 3 per device group
  EXPECT_DOUBLE_EQ(cm.step(t, st).step_time.value(), 4 * 3 + 3.0 / 2);
}

// train.rounds: a step's m micro-batches as R separate 1F1B schedules of m / R, each filling and
// draining the pipeline: R (m / R + p - 1) T, the gradient reduction and the update once after the
// last; the extra fills and drains are bubble. Activation memory in flight follows one schedule.
TEST(AnalyticStep, EachPipelineRoundFillsAndDrains) {
  const AnalyticCostModel cm;
  TrainSettings t;
  t.pp = 4;
  t.micro_batches = 8;
  std::vector<StageSums> st(4);
  for (auto& s : st) {
    s.fwd = Seconds(0.5);
    s.bwd = Seconds(1);
    s.optimizer = Seconds(0.25);
  }
  const StepCost one = cm.step(t, st);
  EXPECT_DOUBLE_EQ(one.step_time.value(), (8 + 3) * 1.5 + 0.25);
  t.rounds = 2;
  const StepCost two = cm.step(t, st);
  EXPECT_DOUBLE_EQ(two.step_time.value(), 2 * (4 + 3) * 1.5 + 0.25);
  EXPECT_DOUBLE_EQ(two.time.bubble.value() - one.time.bubble.value(), 3 * 1.5);
  t.rounds = 8;
  EXPECT_DOUBLE_EQ(cm.step(t, st).step_time.value(), 8 * (1 + 3) * 1.5 + 0.25);
  // GPipe holds one schedule's micro-batches.
  t.schedule = Schedule::kGpipe;
  t.rounds = 2;
  EXPECT_DOUBLE_EQ(micro_batches_in_flight(t, 0), 4);
}

TEST(AnalyticStep, GradientSyncExposure) {
  TrainSettings t;
  t.pp = 1;
  t.micro_batches = 4;
  std::vector<StageSums> st(1);
  st[0].fwd = Seconds(1);
  st[0].bwd = Seconds(2);
  st[0].grad_sync = Seconds(1.5);
  st[0].optimizer = Seconds(0.25);
  AnalyticOptions no;
  no.overlap_grad_sync = false;
  EXPECT_DOUBLE_EQ(AnalyticCostModel(no).step(t, st).step_time.value(), 12 + 1.5 + 0.25);
  // overlapped with the last backward (2 s): hidden, but that backward slows by (1.1256-1)*1.5
  AnalyticOptions yes;
  EXPECT_NEAR(AnalyticCostModel(yes).step(t, st).step_time.value(), 12 + 0.1256 * 1.5 + 0.25, 1e-12);
  st[0].grad_sync = Seconds(3);  // longer than the backward: 1 s exposed
  EXPECT_NEAR(AnalyticCostModel(yes).step(t, st).step_time.value(), 12 + 0.1256 * 2 + 1 + 0.25, 1e-12);
}

TEST(AnalyticLayout, TransitionAndP2p) {
  Bench s("llama-2-7b", "a100-80gb");
  const AnalyticCostModel cm;
  const LayerContext ctx = s.layer(1);
  EXPECT_EQ(cm.transition(ctx, strat(2, 4), strat(2, 4)).value(), 0.0);
  // tp2 (replicated activations) -> dp2: slicing is free, the gradient must be gathered back
  const double t = cm.transition(ctx, strat(8, 1), strat(4, 2)).value();
  EXPECT_GT(t, 0.0);
  // p2p: one stage -> nothing; a boundary between nodes is slower than inside one
  EXPECT_EQ(cm.p2p(s.stage(0, 1), strat(8, 1)).value(), 0.0);
  Bench a("llama-2-7b", "a100-80gb"), b("llama-2-7b", "a100-80gb");
  a.train.pp = b.train.pp = 2;
  b.cluster.gpus_per_node = 4;
  b.cluster.nodes = 2;
  EXPECT_LT(cm.p2p(a.stage(0, 2), strat(4, 1)), cm.p2p(b.stage(0, 2), strat(4, 1)));
}

// The budget keeps the process reserve (CUDA context 1024 MiB + GEMM workspaces 64 MiB) and the
// default margin, 2.5% of the device, free (docs/cost-model.md §5.4): 80 - 1.0625 - 2 GiB.
TEST(AnalyticMemory, BudgetKeepsReservesAndMargin) {
  Bench s("llama-2-7b", "a100-80gb");
  EXPECT_NEAR(AnalyticCostModel().memory_budget(s.cluster).value(), (80 - 1.0625 - 2) * 1073741824.0, 1.0);
}

// Framework traits (docs/cost-model.md §2.3, §4.1) against hand derivations on a Llama-3-8B layer
// (h 4096, q 4096, kv 1024 (GQA), SwiGLU f 14336, RMSNorm, rotary), one device, 4096 tokens, bf16,
// host time and the sustained factor off so that only the kernel model remains. Eager operators
// add, per forward, bytes/token of: 2 RMSNorms x (28 + 4e - 2e) x h, the rotary embedding's
// 16 x (q + kv), the attention output copy 2e x q and the repeated K and V 2e x (kv + q), the
// unfused SwiGLU 2e x f; backward twice that.
// One Llama-3-8B sample of 4096 tokens on one A100, and options that leave only the kernel model
// (no host time, no sustained factor): the set-up of the framework tests below.
Bench one_llama3_sample() {
  Bench s("llama-3-8b", "a100-80gb");
  s.train.global_batch = 1;
  s.train.micro_batches = 1;
  return s;
}
AnalyticOptions kernels_only() {
  AnalyticOptions o;
  o.framework_overhead = false;
  o.compute_time_scale = 1.0;
  return o;
}

TEST(AnalyticFramework, EagerElementwiseBytesByHand) {
  const Bench s = one_llama3_sample();
  const AnalyticOptions fused = kernels_only();
  AnalyticOptions eager = fused;
  eager.fused_elementwise = false;
  const LayerCost a = AnalyticCostModel(fused).layer(s.layer(0), strat(1, 1));
  const LayerCost b = AnalyticCostModel(eager).layer(s.layer(0), strat(1, 1));
  const double e = 2, h = 4096, q = 4096, kv = 1024, f = 14336, T = 4096;
  const double bytes = T * (2 * (28 + 2 * e) * h + 16 * (q + kv) + 2 * e * q + 2 * e * (kv + q) + 2 * e * f);
  const double hbm = s.cluster.gpu.hbm_gbps * 1e9 * 0.90;
  EXPECT_NEAR((b.fwd - a.fwd).value(), bytes / hbm, 1e-6);
  EXPECT_NEAR((b.bwd - a.bwd).value(), 2 * bytes / hbm, 2e-6);
  // Saved for backward, no recompute: the norms' fp32 input copies 2 x 4h, the SiLU output e*f, the
  // attention kernel's own output e*q and K, V repeated to the query width 2e(q - kv), per token.
  EXPECT_NEAR((b.memory.activations - a.memory.activations).value(),
              T * (8 * h + e * f + e * q + 2 * e * (q - kv)), 1.0);
}

// torchtitan's op-level selective checkpointing by hand: it keeps the layer input and the outputs
// of the 1st, 3rd, 5th and 7th matmul (wq: q, wv: kv, w1: f, w2: h) and of the attention kernel (q,
// with its fp32 log-sum-exp per head and query), and re-runs wk, wo and w3 plus every elementwise
// kernel of the forward.
TEST(AnalyticFramework, AlternateMatmulSelectiveByHand) {
  const Bench s = one_llama3_sample();
  AnalyticOptions o = kernels_only();
  o.selective = SelectivePolicy::kAlternateMatmuls;
  const LayerCost sel = AnalyticCostModel(o).layer(s.layer(0), strat(1, 1, 0, Recompute::kSelective));
  const double e = 2, h = 4096, q = 4096, kv = 1024, f = 14336, T = 4096, heads = 32;
  EXPECT_NEAR(sel.memory.activations.value(), e * T * (h + q + kv + f + h + q) + 4 * heads * T, 1.0);
  const KernelModel km(s.cluster.gpu, DType::kBf16, 1.0);
  const double gemms = km.gemm(T, kv, h).value() + km.gemm(T, h, q).value() + km.gemm(T, f, h).value();
  // the forward's memory-bound kernels: 2 norms + 2 residual adds, SwiGLU, fused rotary
  const double mem = 2 * (km.memory(Bytes(2 * e * T * h)) + km.memory(Bytes(3 * e * T * h))).value() +
                     km.memory(Bytes(3 * e * T * f)).value() + km.memory(Bytes(2 * e * T * (q + kv))).value();
  EXPECT_NEAR(sel.time.recompute.value(), gemms + mem, 1e-9);
  // Megatron's selective keeps far more (every tensor but the attention core) and re-runs only it.
  const LayerCost core = AnalyticCostModel().layer(s.layer(0), strat(1, 1, 0, Recompute::kSelective));
  EXPECT_GT(core.memory.activations.value(), 1.5 * sel.memory.activations.value());
  EXPECT_LT(core.time.recompute.value(), 0.5 * sel.time.recompute.value());
}

// The presets set the traits they document; an unknown name is refused with the known names.
TEST(AnalyticFramework, Presets) {
  auto ds = framework_options("megatron-deepspeed");
  ASSERT_TRUE(ds.ok());
  EXPECT_FALSE(ds->flash_attention);
  EXPECT_FALSE(ds->overlap_grad_sync);
  auto tt = framework_options("torchtitan");
  ASSERT_TRUE(tt.ok());
  EXPECT_FALSE(tt->fused_elementwise);
  EXPECT_EQ(tt->selective, SelectivePolicy::kAlternateMatmuls);
  EXPECT_TRUE(framework_options("torchtitan-compile")->fused_elementwise);
  AnalyticOptions slow;
  slow.host_op_us = 30;
  EXPECT_EQ(framework_options("torchtitan", slow)->host_op_us, 30);  // constants are kept
  EXPECT_EQ(AnalyticCostModel(*tt).source(), "analytic, torchtitan");
  auto bad = framework_options("colossal");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("known: megatron, megatron-deepspeed, torchtitan, torchtitan-compile"),
            std::string::npos);
}

// The loss's memory (docs/cost-model.md §5.3): Megatron's vocab-parallel cross entropy works in place
// on one fp32 copy of the logits (e + 4 bytes per logit); PyTorch's F.cross_entropy on an fp32 copy
// (torchtitan) holds three fp32 tensors per logit at its peak (12); the allocator's fragmentation
// adds 10 % to each (§5.4).
TEST(AnalyticFramework, LossMemoryByHand) {
  Bench s("llama-3-8b", "a100-80gb");
  s.train.global_batch = 2;
  s.train.micro_batches = 1;
  auto tt = framework_options("torchtitan");
  ASSERT_TRUE(tt.ok());
  const LayerStrategy st = strat(1, 1);
  const double logits = 2.0 * 4096 * 128256;
  const MemoryBreakdown m = AnalyticCostModel().stage_extra(s.stage(0, 1), st).memory;
  const MemoryBreakdown t = AnalyticCostModel(*tt).stage_extra(s.stage(0, 1), st).memory;
  // The loss's logits are a transient: Megatron's compute-dtype logits and one fp32 copy against
  // PyTorch's three fp32 tensors, each with the allocator's 10 %, which also covers torchtitan's
  // eager final RMSNorm saving its fp32 input copy (4 bytes per element of the 2 x 4096 x 4096 input).
  EXPECT_NEAR(t.transient.value() - m.transient.value(), (12 - (2 + 4)) * logits, 1.0);
  EXPECT_NEAR(t.activations.value() - m.activations.value(), 4.0 * 2 * 4096 * 4096, 1.0);
  EXPECT_NEAR(t.other.value() - m.other.value(), 0.10 * ((12 - (2 + 4)) * logits + 4.0 * 2 * 4096 * 4096), 1.0);
}

// MFU counts the model's FLOPs (full attention, no recompute); HFU adds what recompute re-runs
// (docs/cost-model.md §1). Llama-2-7B on 8 A100, dp 8, seq 4096, global batch 8.
Plan uniform_plan(const Bench& s, Recompute rc) {
  Plan p;
  p.model = s.model;
  p.cluster = s.cluster;
  p.train = s.train;
  p.embedding = strat(1, 8);
  Stage st;
  st.layers.assign(s.model.num_layers(), strat(1, 8, 0, rc));
  p.stages.push_back(st);
  return p;
}

TEST(AnalyticUtilisation, HfuAddsWhatRecomputeReruns) {
  const Bench s("llama-2-7b", "a100-80gb");
  const double B = s.train.global_batch, seq = s.train.seq, L = s.model.num_layers();
  const LayerFlops f = layer_forward_flops(s.model.layer(0), B, seq);
  const double model = model_step_flops(s.model, B, seq);
  const AnalyticCostModel megatron;
  for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    const Plan p = uniform_plan(s, rc);
    const Estimate e = estimate(p, megatron);
    const double step = e.step_time.value();
    EXPECT_NEAR(e.mfu, model / step / 8 / 312e12, 1e-12);
    const double extra = rc == Recompute::kFull ? L * f.total() : rc == Recompute::kSelective ? L * f.attn_scores : 0;
    EXPECT_NEAR(e.hfu, (model + extra) / step / 8 / 312e12, 1e-12) << to_string(rc);
    EXPECT_NEAR(e.hardware_tflops_per_gpu, (model + extra) / step / 8 / 1e12, 1e-9);
  }
  // torchtitan's op-level policy re-runs wk, wo and w3: 2 (h*kv + q*h + h*f) per token.
  const AnalyticCostModel titan(*framework_options("torchtitan"));
  const Plan p = uniform_plan(s, Recompute::kSelective);
  const Estimate e = estimate(p, titan);
  const double h = 4096, kv = 4096, q = 4096, ff = 11008;
  const double extra = L * 2 * (h * kv + q * h + h * ff) * B * seq;
  EXPECT_NEAR(e.hfu / e.mfu, (model + extra) / model, 1e-12);
}

// ZB-H1 memory: device group g holds 1F1B's activations plus g micro-batches' W state
// (weight_grad_state_bytes). Llama-2-7B, tp 2, one sample of 4096 tokens, bf16; per token:
// attention 4096 + 12288/2 + 4096/2 + 4096 = 16384, SwiGLU FFN 4096 + 2*11008/2 + 11008/2 + 4096
// = 24704, two norms' inputs and output gradients 4 * 4096 = 16384; 57472 * 4096 * 2 =
// 470,810,624 bytes per micro-batch. Group 0 keeps none.
TEST(AnalyticMemory, ZbH1KeepsWeightGradStateOnLaterGroups) {
  Bench s("llama-2-7b", "a100-80gb");
  s.train.pp = 4;
  const AnalyticCostModel cm;
  auto activations = [&](Schedule sch, int stage) {
    s.train.schedule = sch;
    return cm.layer(s.layer(0, stage, 4), strat(2, 1)).memory.activations.value();
  };
  EXPECT_DOUBLE_EQ(activations(Schedule::kZbH1, 0), activations(Schedule::k1F1B, 0));
  EXPECT_NEAR(activations(Schedule::kZbH1, 3) - activations(Schedule::k1F1B, 3), 3 * 470810624.0, 1.0);
  EXPECT_NEAR(activations(Schedule::kZbH1, 1) - activations(Schedule::k1F1B, 1), 1 * 470810624.0, 1.0);
}

// ZB-V memory, per layer (Llama-2-7B, tp 2, one sample of 4096 tokens a micro-batch, pp 4, m 8):
// a layer of group g's chunk 0 (virtual stage g) holds 7 - g micro-batches' activations, one of
// its chunk 1 (virtual stage 7 - g) g + 1, and each half of a micro-batch's W state less the
// linears' inputs, which are its activations still counted (output gradients per token: QKV 6144,
// output projection 4096, two norms 8192, gate and up 11008, down 4096 = 33,536; x 4096 tokens x
// 2 bytes = 274,726,912 bytes, against 470,810,624 with the inputs, as above). A layer of each
// chunk together: 8 micro-batches' activations, twice what a layer of 1F1B's first group holds
// (4), plus those gradients. With half the layers per chunk, a device holds 1F1B's first group's
// activations plus one chunk's W gradients.
TEST(AnalyticMemory, ZbVHoldsOneF1BsActivationsPlusOneWStatesGradients) {
  Bench s("llama-2-7b", "a100-80gb");
  s.train.pp = 4;
  s.train.micro_batches = 8;
  const AnalyticCostModel cm;
  s.train.schedule = Schedule::k1F1B;
  const double one = cm.layer(s.layer(0, 0, 4), strat(2, 1)).memory.activations.value();
  s.train.schedule = Schedule::kZbV;
  s.train.vp = 2;
  auto act = [&](int stage) { return cm.layer(s.layer(0, stage, 8), strat(2, 1)).memory.activations.value(); };
  for (int g = 0; g < 4; ++g) EXPECT_NEAR(act(g) + act(7 - g), 2 * one + 274726912.0, 2.0) << g;
  EXPECT_NEAR(act(0) - act(7), 6 * one / 4, 2.0);  // 7 against 1 micro-batch
}

// The deferrable part of the backward is the dW = X^T dY GEMM of each linear layer (tokens x
// tokens reduction), here Llama-2-7B at tp 2 with one sample of 4096 tokens; with a non-fused
// gradient accumulation its pass over the gradients joins it.
TEST(AnalyticCompute, WgradIsTheWeightGradientGemms) {
  Bench s("llama-2-7b", "a100-80gb");
  AnalyticOptions o;
  o.fused_grad_accumulation = true;
  const AnalyticCostModel cm(o);
  const LayerCost c = cm.layer(s.layer(0), strat(2, 1));
  const KernelModel km(s.cluster.gpu, DType::kBf16, o.compute_time_scale);
  const double tok = 4096, h = 4096, q = 4096, kv = 4096, ff = 11008, t = 2;
  const double dw = km.gemm(h, (q + 2 * kv) / t, tok).value() + km.gemm(q / t, h, tok).value() +
                    km.gemm(h, 2 * ff / t, tok).value() + km.gemm(ff / t, h, tok).value();
  EXPECT_NEAR(c.wgrad.value(), dw, 1e-12);
  EXPECT_GT(c.wgrad.value(), 0.2 * c.bwd.value());
  EXPECT_LT(c.wgrad.value(), 0.5 * c.bwd.value());
  o.fused_grad_accumulation = false;
  const LayerCost unfused = AnalyticCostModel(o).layer(s.layer(0), strat(2, 1));
  EXPECT_NEAR((unfused.wgrad - c.wgrad).value(), (unfused.bwd - c.bwd).value(), 1e-12);
  EXPECT_GT((unfused.wgrad - c.wgrad).value(), 0);
  // Stage extras run their backward whole in B.
  EXPECT_EQ(cm.stage_extra(s.stage(0, 1), strat(2, 1)).wgrad.value(), 0);
}

// A sliding window (LayerShape::window, GPT-OSS's banded layers) cuts the attention core to
// w keys a query where flash attention skips the masked blocks: at 32K tokens a 128-token band
// computes (w s - w (w - 1) / 2) / (s^2 / 2) = 0.8 % of the causal pairs; at a sequence no longer
// than the window the layer costs what a full one does. The MFU count (no causal discount) takes s w
// for s^2 in the score FLOPs.
TEST(AnalyticCompute, SlidingWindowAttentionComputesItsBand) {
  Bench s("llama-2-7b", "h100-80gb");
  s.train.seq = 32768;
  s.train.global_batch = 8;
  const AnalyticCostModel cm;
  const LayerCost full = cm.layer(s.layer(0), strat(8, 1));
  Bench w = s;
  for (auto& g : w.model.groups) g.shape.window = 128;
  const LayerCost band = cm.layer(w.layer(0), strat(8, 1));
  const LayerCost no_attention = [&] {
    // The same layer's GEMMs alone: a band of 1 token leaves about nothing of the core.
    Bench one = s;
    for (auto& g : one.model.groups) g.shape.window = 1;
    return cm.layer(one.layer(0), strat(8, 1));
  }();
  const double core_full = (full.fwd + full.bwd - no_attention.fwd - no_attention.bwd).value();
  const double core_band = (band.fwd + band.bwd - no_attention.fwd - no_attention.bwd).value();
  EXPECT_GT(core_full, 0.3 * (full.fwd + full.bwd).value());  // at 32K, attention is a large part
  EXPECT_LT(core_band, 0.05 * core_full);
  EXPECT_GT(core_band, 0);
  // At 4K tokens and a 4K window the band is the whole causal context.
  Bench s4 = s, w4 = s;
  s4.train.seq = w4.train.seq = 4096;
  for (auto& g : w4.model.groups) g.shape.window = 4096;
  EXPECT_DOUBLE_EQ((cm.layer(s4.layer(0), strat(8, 1)).fwd).value(), (cm.layer(w4.layer(0), strat(8, 1)).fwd).value());
  // FLOPs: s x w instead of s x s in the scores.
  const double b = 1, seq = 32768;
  const LayerFlops ff = layer_forward_flops(s.model.layer(0), b, seq), fw = layer_forward_flops(w.model.layer(0), b, seq);
  EXPECT_DOUBLE_EQ(fw.attn_scores, ff.attn_scores * 128 / seq);
  EXPECT_DOUBLE_EQ(fw.qkv, ff.qkv);
}

}  // namespace
}  // namespace weft
