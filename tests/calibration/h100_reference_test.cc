// weft's analytic h100-80gb model (`--framework weft`: the runtime's own kernels) against what weft's
// runtime measured on an H100 (data/reference/h100, README there): per layer forward and backward
// time within 10 %, saved activations within 5 %; the PyTorch GEMM and attention measurements
// against the kernel model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "weft/calibration/hardware_profile.h"
#include "h100_files.h"
#include "weft/calibration/model_profile.h"
#include "weft/core/json.h"
#include "weft/cost/analytic.h"
#include "weft/cost/compute.h"
#include "weft/cost/estimate.h"
#include "weft/plan/plan.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

using testing::h100_file;
using testing::one_h100;

TrainSettings settings(const PhaseSample& s, DType dt) {
  TrainSettings t;
  t.seq = s.seq;
  t.global_batch = s.micro_batch;
  t.micro_batches = 1;
  t.dtype = dt;
  return t;
}

double rel(double predicted, double measured) { return predicted / measured - 1; }

// The largest relative difference between two equally long arrays of losses.
double worst_rel(const Json& a, const Json& b) {
  EXPECT_EQ(a.size(), b.size());
  double w = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) w = std::max(w, std::fabs(a[i].get<double>() / b[i].get<double>() - 1));
  return w;
}

// Every layer point of the three profiles (Llama-2-7B and GPT-3 2.7B in bf16, GPT-3 1.3B in fp32;
// micro-batches 1-8, recompute none and full). The profiles' ZeRO-3 points are left out: on one
// device they time the runtime's gather bookkeeping, which the cost model prices as communication.
TEST(H100Reference, LayerTimeAndActivationsOfTheRuntime) {
  const ClusterSpec c = one_h100();
  const AnalyticCostModel cm(*framework_options("weft"));
  int points = 0;
  double worst_t = 0, worst_a = 0;
  for (const char* f : {"llama-2-7b_bf16.json", "gpt3-2.7b_bf16.json", "gpt3-1.3b_fp32.json"}) {
    auto p = read_model_profile(h100_file(f));
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_EQ(p->device, "cuda");
    const DType dt = p->runtime.dtype == "bf16" ? DType::kBf16 : DType::kFp32;
    for (const PhaseSample& s : p->layers.at(0).samples) {
      if (s.zero != 0) continue;
      LayerContext ctx;
      ctx.model = &p->model;
      ctx.cluster = &c;
      ctx.train = settings(s, dt);
      LayerStrategy st;
      st.recompute = s.recompute;
      const LayerCost lc = cm.layer(ctx, st);
      const double ef = rel(lc.fwd.value(), s.forward_s), eb = rel(lc.bwd.value(), s.backward_s);
      const double ea = rel(lc.memory.activations.value(), s.activation_bytes);
      std::printf("%-22s recompute %-4s mb %d: forward %6.2f ms (%+5.1f%%) backward %6.2f ms (%+5.1f%%) "
                  "activations %.3f GiB (%+5.1f%%)\n",
                  f, to_string(s.recompute), s.micro_batch, s.forward_s * 1e3, 100 * ef, s.backward_s * 1e3,
                  100 * eb, s.activation_bytes / 1073741824.0, 100 * ea);
      EXPECT_LE(std::fabs(ef), 0.10) << f << " mb " << s.micro_batch << " " << to_string(s.recompute) << " forward";
      EXPECT_LE(std::fabs(eb), 0.10) << f << " mb " << s.micro_batch << " " << to_string(s.recompute) << " backward";
      EXPECT_LE(std::fabs(ea), 0.05) << f << " mb " << s.micro_batch << " " << to_string(s.recompute) << " activations";
      worst_t = std::max({worst_t, std::fabs(ef), std::fabs(eb)});
      worst_a = std::max(worst_a, std::fabs(ea));
      ++points;
    }
  }
  EXPECT_EQ(points, 4 + 4 + 3);
  std::printf("%d layer points: worst time error %.1f%%, worst activation error %.1f%%\n", points, 100 * worst_t,
              100 * worst_a);
}

// Megatron's traits (fused kernels, no AccumulateGrad pass, dropout on GPT-3) price the runtime's
// Llama layer well below what it measured: the runtime's own traits are what closes the gap.
TEST(H100Reference, MegatronsTraitsUnderpriceTheEagerRuntime) {
  const ClusterSpec c = one_h100();
  auto p = read_model_profile(h100_file("llama-2-7b_bf16.json"));
  ASSERT_TRUE(p.ok()) << p.error().message;
  const PhaseSample& s = p->layers.at(0).samples.at(0);
  ASSERT_EQ(s.recompute, Recompute::kNone);
  LayerContext ctx;
  ctx.model = &p->model;
  ctx.cluster = &c;
  ctx.train = settings(s, DType::kBf16);
  const LayerCost mega = AnalyticCostModel(*framework_options("megatron")).layer(ctx, LayerStrategy{});
  const LayerCost weft = AnalyticCostModel(*framework_options("weft")).layer(ctx, LayerStrategy{});
  EXPECT_LT(mega.fwd.value(), 0.88 * s.forward_s);
  EXPECT_LT(mega.memory.activations.value(), 0.8 * s.activation_bytes);
  EXPECT_GT(weft.fwd.value(), mega.fwd.value());
  EXPECT_GT(weft.memory.activations.value(), mega.memory.activations.value());
}

// The kernel model's in-training GEMM rate (the MAMF figure over compute_time_scale) against cuBLAS
// sustained back to back at the layers' shapes, bf16 and fp32: within 20 % at every shape whose
// dimensions are multiples of 8 (measured: 15 % at worst, the padded GPT-3 head, which runs faster
// than the one-shape calibration gives). The LM head of GPT-3's 50257-token vocabulary
// is no such shape: cuBLAS runs it at a seventh of the rate of the padded 50304 (Megatron pads the
// vocabulary to a multiple of 128 for this; weft's runtime does not yet).
TEST(H100Reference, GemmRatesAtTheLayersShapes) {
  const ClusterSpec c = one_h100();
  const Json j = read_json_file(h100_file("torch_kernels.json"));
  int shapes = 0;
  for (const char* key : {"gemm_layers", "gemm_fp32"}) {
    const DType dt = std::string(key) == "gemm_fp32" ? DType::kFp32 : DType::kBf16;
    const KernelModel km(c.gpu, dt, AnalyticOptions{}.compute_time_scale);
    for (const Json& g : j.at(key)) {
      const double m = g.at("m"), k = g.at("k"), n = g.at("n"), measured = g.at("s");
      const double model = km.gemm(m, n, k).value();
      const bool aligned = std::fmod(n, 8) == 0 && std::fmod(k, 8) == 0;
      std::printf("%s %5.0f x %5.0f x %5.0f: measured %4.0f TFLOP/s, model %4.0f (%+5.1f%%)\n",
                  dt == DType::kFp32 ? "fp32" : "bf16", m, k, n, 2 * m * n * k / measured / 1e12,
                  2 * m * n * k / model / 1e12, 100 * rel(model, measured));
      if (!aligned) {
        EXPECT_GT(measured, 4 * model) << "the unaligned head GEMM " << m << "x" << k << "x" << n;
        continue;
      }
      EXPECT_LE(std::fabs(rel(model, measured)), 0.20) << m << "x" << k << "x" << n;
      ++shapes;
    }
  }
  EXPECT_GE(shapes, 35);
}

// PyTorch 2.11's scaled_dot_product_attention on the H100 runs at cuDNN attention's rates (the
// kernel `--framework weft` assumes there), not FlashAttention-2's: within 30 % of the cuDNN curves
// (at the in-training time scale) forward and backward at every measured bf16 shape (measured: the
// model's forward 18-22 % slow at seq 4096, head dim 128; one sample of GPT-3's head dim 80 at seq
// 2048 is 26 % slower than the curve backward), and faster than the FlashAttention-2 curves at seq
// 4096.
TEST(H100Reference, PyTorchAttentionRunsAtCudnnRates) {
  const ClusterSpec c = one_h100();
  const KernelModel km(c.gpu, DType::kBf16, AnalyticOptions{}.compute_time_scale);
  const Json j = read_json_file(h100_file("torch_kernels.json"));
  for (const Json& a : j.at("attention")) {
    const double b = a.at("b"), h = a.at("heads"), s = a.at("seq"), d = a.at("head_dim");
    const double work = 4.0 * b * h * s * s * d * 0.5;
    const AttentionRates cudnn = flash_attention_rates(c.gpu, AttentionKernel::kCudnn, s, d, true);
    const AttentionRates fa2 = flash_attention_rates(c.gpu, AttentionKernel::kFlash2, s, d, true);
    const double fwd = a.at("forward_s"), bwd = a.at("backward_s");
    const double ef = rel(km.flops(work, cudnn.fwd).value(), fwd), eb = rel(km.flops(2.5 * work, cudnn.bwd).value(), bwd);
    std::printf("attention b %.0f seq %.0f head dim %.0f: forward %+5.1f%% backward %+5.1f%%\n", b, s, d, 100 * ef, 100 * eb);
    EXPECT_LE(std::fabs(ef), 0.30) << "b " << b << " seq " << s;
    EXPECT_LE(std::fabs(eb), 0.30) << "b " << b << " seq " << s;
    if (s == 4096) EXPECT_LT(fwd, km.flops(work, fa2.fwd).value());
  }
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// The closed loop: single-GPU plans of GPT-3 1.3B (fp32, seq 1024; micro-batch 4-16, gradient
// accumulation 1-4 micro-batches, recompute none, selective and full) that weft's runtime trained on
// the H100, against `weft estimate --framework weft` of the same plans: step time within 15 % each
// and 10 % on average; the peak of allocated bytes (the model without its allocator reserve, which
// weft's printed peak adds) against the allocator's allocated peak within 5 %.
void closed_loop(const std::string& file) {
  const Json j = read_json_file(h100_file(file));
  AnalyticOptions o = *framework_options("weft");
  o.allocator_fragmentation = 0;
  const AnalyticCostModel cm(o);
  double sum = 0;
  int runs = 0;
  for (const Json& r : j.at("runs")) {
    auto plan = read_plan_file(h100_file(r.at("plan").get<std::string>()));
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    const Estimate e = estimate(*plan, cm);
    const double measured_s = r.at("mean_step_time_s"), measured_b = r.at("peak_device_bytes");
    const double et = rel(e.step_time.value(), measured_s), em = rel(e.peak_memory.value(), measured_b);
    std::printf("%-30s step %.3f s predicted %.3f (%+5.1f%%), peak %.2f GiB predicted %.2f (%+5.1f%%)\n",
                r.at("plan").get<std::string>().c_str(), measured_s, e.step_time.value(), 100 * et,
                measured_b / 1073741824.0, e.peak_memory.value() / 1073741824.0, 100 * em);
    EXPECT_LE(std::fabs(et), 0.15) << r.at("plan");
    EXPECT_LE(std::fabs(em), 0.05) << r.at("plan");
    sum += std::fabs(et);
    ++runs;
  }
  EXPECT_EQ(runs, 5);
  EXPECT_LE(sum / runs, 0.10);
  std::printf("closed loop (%s): mean step-time error %.1f%% over %d plans\n", j.at("dtype").get<std::string>().c_str(),
              100 * sum / runs, runs);
}

TEST(H100Reference, ClosedLoopStepTimeAndPeakMemory) { closed_loop("closed_loop.json"); }
TEST(H100Reference, ClosedLoopMixedPrecision) { closed_loop("closed_loop_bf16.json"); }

// The runtime's fp32 parity on CUDA (data/reference/h100/parity.json): one rank on the GPU gives the
// CPU run's losses within 2e-5 relative over 20 steps (the CPU parity tests' 1e-5 per mode; here
// different kernels, cuBLAS and cuDNN against OpenBLAS, over 20 steps); several ranks sharing the
// GPU through Gloo give the one-rank CUDA run's losses within 1e-5 over 10 steps, for every plan.
TEST(H100Reference, CudaParityWasMeasured) {
  const Json j = read_json_file(h100_file("parity.json"));
  ASSERT_EQ(j.at("one_rank").size(), 2u);
  for (const Json& r : j.at("one_rank")) {
    EXPECT_EQ(r.at("cpu_loss").size(), 20u);
    EXPECT_LE(worst_rel(r.at("cuda_loss"), r.at("cpu_loss")), 2e-5) << r.at("model");
  }
  ASSERT_EQ(j.at("ranks_on_one_gpu").size(), 6u);
  for (const Json& r : j.at("ranks_on_one_gpu")) {
    EXPECT_GE(r.at("ranks").get<int>(), 2);
    EXPECT_EQ(r.at("loss").size(), 10u);
    EXPECT_LE(worst_rel(r.at("loss"), r.at("reference_loss")), 1e-5) << r.at("plan");
    // the runs trained: the loss moved
    EXPECT_GT(r.at("loss").front().get<double>() - r.at("loss").back().get<double>(), 0.05) << r.at("plan");
  }
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {
// The embedding and the LM head with its loss (the stage's extra work; in bf16 as mixed precision
// trains it, the loss in fp32), forward and backward: within 12 % where the vocabulary is a
// multiple of 8 (Llama-2's 32000; measured worst -7.7 %). GPT-3's 50257-token vocabulary has no
// aligned tensor-core GEMM (H100Reference.GemmRatesAtTheLayersShapes measures the forward shape 6.9
// times slower than the padded one) and weft's runtime does not pad it (Megatron pads to a multiple
// of 128): the model prices the head's three GEMMs at that measured rate, which gives the forward
// within 12 % (measured worst +7.0 %) and overprices the backward, whose two GEMMs were not
// measured on their own and run only 4-5.5 times slower: held to within 35 %, an upper bound
// (measured +20 to +34 %).
TEST(H100Reference, EmbeddingAndHead) {
  const ClusterSpec c = one_h100();
  const AnalyticCostModel cm(*framework_options("weft"));
  int points = 0;
  for (const char* f : {"llama-2-7b_bf16.json", "gpt3-2.7b_bf16.json", "gpt3-1.3b_fp32.json"}) {
    auto p = read_model_profile(h100_file(f));
    ASSERT_TRUE(p.ok()) << p.error().message;
    const DType dt = p->runtime.dtype == "bf16" ? DType::kBf16 : DType::kFp32;
    const bool aligned = p->model.vocab % 8 == 0 || dt == DType::kFp32;  // fp32 runs CUDA-core SGEMM
    ASSERT_EQ(p->head.size(), p->embedding.size());
    for (size_t i = 0; i < p->head.size(); ++i) {
      const PhaseSample& h = p->head[i];
      const PhaseSample& e = p->embedding[i];
      if (h.zero != 0) continue;
      StageContext ctx;
      ctx.model = &p->model;
      ctx.cluster = &c;
      ctx.train = settings(h, dt);
      const LayerCost lc = cm.stage_extra(ctx, LayerStrategy{});
      const double fwd = h.forward_s + e.forward_s, bwd = h.backward_s + e.backward_s;
      const double ef = rel(lc.fwd.value(), fwd), eb = rel(lc.bwd.value(), bwd);
      std::printf("%-22s embedding + head mb %d: forward %6.2f ms (%+5.1f%%) backward %6.2f ms (%+5.1f%%)\n", f,
                  h.micro_batch, fwd * 1e3, 100 * ef, bwd * 1e3, 100 * eb);
      EXPECT_LE(std::fabs(ef), 0.12) << f << " mb " << h.micro_batch;
      if (aligned) {
        EXPECT_LE(std::fabs(eb), 0.12) << f << " mb " << h.micro_batch;
      } else {
        EXPECT_GT(lc.bwd.value(), bwd) << f << " mb " << h.micro_batch;
        EXPECT_LE(eb, 0.35) << f << " mb " << h.micro_batch;
      }
      ++points;
    }
  }
  EXPECT_EQ(points, 2 + 4 + 3);
}
}  // namespace
}  // namespace weft

namespace weft {
namespace {

// `weft profile hardware --device cuda` on the H100 (data/reference/h100/hardware.json): the GEMM
// rates it measured against the kernel model at the in-training time scale (within 20 % for the
// squares from 4096 and the shapes of a Llama-2-7B layer over 4096 tokens, as the PyTorch
// measurements above; measured worst -13.0 %), the smaller squares only held to being slower than
// the model (it has no fixed cost per GEMM: 2048-cubed bf16 takes 37 us, 30 % more than it gives,
// 1024-cubed 82 % more), the streaming rate against the
// model's achievable HBM rate (within 10 %), and the launch overhead against the host time the
// model charges per eager operator (never below it: an operator launches at least one kernel).
TEST(H100Reference, HardwareProfileOfOneGpu) {
  auto hp = read_hardware_profile(h100_file("hardware.json"));
  ASSERT_TRUE(hp.ok()) << hp.error().message;
  const ClusterSpec c = one_h100();
  EXPECT_EQ(hp->machine.device, "cuda");
  EXPECT_EQ(hp->machine.device_name, "NVIDIA H100 80GB HBM3");
  EXPECT_NEAR(hp->machine.memory_per_rank_gib, 79.2, 0.5);
  int shapes = 0;
  for (const GemmSample& g : hp->gemm) {
    const DType dt = g.dtype == "bf16" ? DType::kBf16 : DType::kFp32;
    const KernelModel km(c.gpu, dt, AnalyticOptions{}.compute_time_scale);
    const double model = km.gemm(g.m, g.n, g.k).value();
    std::printf("profile hardware %s %5lld x %5lld x %5lld: %4.0f TFLOP/s, model %+5.1f%%\n", g.dtype.c_str(),
                static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k), g.tflops(),
                100 * rel(model, g.seconds));
    if (g.m * g.n * g.k < 4096LL * 4096 * 4096) {
      EXPECT_GT(g.seconds, model) << g.m;
      continue;
    }
    EXPECT_LE(std::fabs(rel(model, g.seconds)), 0.20) << g.dtype << " " << g.m << "x" << g.n << "x" << g.k;
    ++shapes;
  }
  EXPECT_EQ(shapes, 12);
  const KernelModel km(c.gpu, DType::kBf16, 1.0);
  const double stream = km.hbm_bytes_per_s() / 1e9;
  std::printf("profile hardware: streaming %.0f GB/s, model %.0f GB/s; launch %.1f us, model's host time per "
              "operator %.1f us\n",
              hp->machine.memory_gbps, stream, hp->machine.launch_overhead_us, AnalyticOptions{}.host_op_us);
  EXPECT_LE(std::fabs(stream / hp->machine.memory_gbps - 1), 0.10);
  EXPECT_GT(hp->machine.launch_overhead_us, 1.0);
  EXPECT_LE(hp->machine.launch_overhead_us, AnalyticOptions{}.host_op_us);
}

// Mixed precision on the H100 (data/reference/h100/mixed_precision.json, `weft train --precision
// bf16`): one bf16 rank tracks the fp32 run within 1 % over 20 steps (measured worst 0.82 %: the
// trajectories part by bf16 rounding and the gap grows with the steps; the CPU tests hold 5 steps
// to 2^-8), and is not the fp32 run; several ranks sharing the GPU through Gloo track the one bf16
// rank within 2^-8 over 10 steps (measured worst 6.9e-4).
TEST(H100Reference, MixedPrecisionWasMeasured) {
  const Json j = read_json_file(h100_file("mixed_precision.json"));
  ASSERT_EQ(j.at("one_rank").size(), 2u);
  for (const Json& r : j.at("one_rank")) {
    EXPECT_EQ(r.at("bf16_loss").size(), 20u);
    const double w = worst_rel(r.at("bf16_loss"), r.at("fp32_loss"));
    EXPECT_LE(w, 0.01) << r.at("model");
    EXPECT_GT(w, 1e-4) << r.at("model");
    EXPECT_GT(r.at("bf16_loss").front().get<double>() - r.at("bf16_loss").back().get<double>(), 0.3) << r.at("model");
  }
  ASSERT_EQ(j.at("ranks_on_one_gpu").size(), 6u);
  for (const Json& r : j.at("ranks_on_one_gpu")) {
    EXPECT_EQ(r.at("loss").size(), 10u);
    EXPECT_LE(worst_rel(r.at("loss"), r.at("reference_loss")), 1.0 / 256) << r.at("plan");
  }
}

}  // namespace
}  // namespace weft
