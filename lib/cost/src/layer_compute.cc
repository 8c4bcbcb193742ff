// The compute side of weft's analytic cost model: GPU kernel time and host time of a layer and of
// the embedding and LM head. Every formula and constant is derived in docs/cost-model.md; the section
// numbers below refer to it.
#include "layer_compute.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "weft/cost/compute.h"
#include "weft/spec/counts.h"

namespace weft {

namespace {

// §2.2 Fused attention: backward does 2.5x the forward matmul work (it recomputes Q.K^T; the
// FlashAttention papers count it so). Rates: flash_attention_rates (weft/cost/compute.h).
constexpr double kFlashBwdWork = 2.5;
// §2.1 FP8 GEMM operands (Transformer Engine, per-tensor current scaling): a pass reading the
// 16-bit tensor for its absolute maximum (2 bytes per element), then a cast reading it again (2)
// and writing the fp8 copy and its transpose for the other GEMM layout (1 + 1).
constexpr double kFp8QuantBytes = 2 + 2 + 1 + 1;
// §2 Backward of a memory-bound kernel moves about twice the forward bytes: it reads the saved input
// and the incoming gradient and writes the outgoing gradient (plus parameter-gradient reductions).
constexpr double kElementwiseBackward = 2.0;
// §2 Megatron's vocab-parallel cross entropy (tensor_parallel/cross_entropy.py) over the logits
// cast to fp32, bytes per local logit, one pass per eager operator: forward casts (e read, 4
// written), takes the row max (4), subtracts it in place (4 + 4), exponentiates in place (4 + 4),
// sums (4) and divides by the sum in place to keep the softmax for backward (4 + 4); backward
// scales the saved softmax by the incoming gradient in place (4 + 4) and casts it back (4 read,
// e written).
constexpr double kLossFwdBytesPerLogit = 4 + 4 + 8 + 8 + 4 + 8;  // + e, added where used
constexpr double kLossBwdBytesPerLogit = 8 + 4;                  // + e
// §2 PyTorch's F.cross_entropy (log_softmax + nll_loss) over an fp32 copy of the logits, as
// torchtitan computes its loss: forward casts (e read, 4 written) and runs log_softmax (two
// reading passes, one write: 12); backward writes nll's dense gradient (4), runs log_softmax's
// backward (reads gradient and output, a reduction pass and an elementwise pass: 16) and casts
// back (4 read, e written). Its peak holds three fp32 tensors per logit: the saved log-softmax,
// its gradient and the outgoing gradient.
constexpr double kTorchLossFwdBytesPerLogit = 4 + 12;  // + e
constexpr double kTorchLossBwdBytesPerLogit = 4 + 16 + 4;  // + e
constexpr double kTorchLossPeakBytesPerLogit = 12;
// §2.3 weft's runtime's vocab-parallel cross entropy (in fp32), per local logit in elements:
// forward takes the row max (1), shifts (2), exponentiates (2), sums (1) and divides in
// place to keep the softmax (2): 8; backward clones the softmax (2) and scales it in place (2): 4.
// Its forward holds the logits, the shifted copy and the exponentials at once: 3.
constexpr double kWeftLossFwdElems = 8;
constexpr double kWeftLossBwdElems = 4;
constexpr double kWeftLossPeakElems = 3;
// §2.3 PyTorch's AccumulateGrad per parameter per backward: read the new gradient and the buffer,
// write the buffer (3 e). Under weft's mixed precision (e < 4) the gradient first comes back
// through the weight's cast (read e, write 4) into the fp32 parameters' buffer (12): 18 bytes of
// contiguous traffic for bf16. Measured on the H100 (data/reference/h100, the same Llama-2-7B and
// GPT-3 2.7B layers profiled in pure bf16 and in mixed precision): the mixed backward is longer by
// 6.5-7.1 ps per parameter at every micro-batch, 20-21 bytes at the measured 3.0 TB/s streaming
// rate where 12 would be the contiguous difference; both kernels read the weight gradient
// transposed (the layout autograd hands them), so they run below the streaming rate. The path
// is priced at the 26 bytes measured (6 + 20), not at the 18 counted.
constexpr double kMixedGradPathBytes = 26;
double grad_accumulation_bytes(double e) { return e < 4 ? kMixedGradPathBytes : 3 * e; }
// §2.3 Eager RMSNorm in fp32 (Llama's reference implementation, as torchtitan runs it), bytes per
// element: 28 for the fp32 sides of the casts in and out (4 + 4), x^2 (4 read, 4 written), the mean
// (4 read) and x * rsqrt (4 + 4), plus 4e for the casts' compute-dtype sides and the weight
// product. Eager rotary embedding through complex numbers, per element of Q or K: 16 for the fp32
// sides of the casts (4 + 4) and the complex product (4 read, 4 written), plus 2e.
constexpr double kEagerRmsNormBytes = 28;
constexpr double kEagerRopeBytes = 16;
// The same operators in the compute dtype (weft's runtime), per element in units of e: the RMSNorm
// x^2 (read, write), the mean (read), x * rsqrt (read, write) and the weight product (read, write):
// 7; rotate-half rotary x * cos (2), the negated half (1), the concatenation (2), rot * sin (2) and
// the sum (3): 10.
constexpr double kEagerRmsNormElems = 7;
constexpr double kEagerRopeElems = 10;
// §4 Host (CPU) time of an eager framework: one ATen operator with autograd recording costs about
// 7 us (PyTorch issue #41383: 6.8 s per 10^6 scalar ops with requires_grad), one Python
// torch.autograd.Function.apply about 20 us (PyTorch issue #189573: 20.7 us median); backward
// nodes are costed alike. Defaults of AnalyticOptions::host_op_us / host_function_us.
// §4 Backward host time: the autograd engine dispatches every backward kernel through ATen
// (costed like a forward operator, opt.host_op_us) and calls each custom Function's Python backward
// (opt.host_function_us). Backward kernels of a layer: per linear a data-gradient and a weight-gradient
// GEMM (+ a bias-gradient reduction with biases); per LayerNorm 3 (input gradient, partial and final
// gamma/beta reduction: apex fused_layer_norm_cuda), per RMSNorm 2; per residual block 2 (dropout
// mask multiply, residual gradient add); the attention core 7 without flash (4 batched GEMMs,
// softmax backward, dropout backward, the re-layout copy) or 3 with (FlashAttention-2's
// preprocess, main and dQ-convert kernels); 1 for the activation; one gradient-accumulation kernel
// per parameter tensor (AccumulateGrad).
constexpr double kBwdKernelsPerLinear = 2;
constexpr double kBwdKernelsAttnCore = 7;
constexpr double kBwdKernelsFlash = 3;
// §6 Adam: reads and writes the fp32 master weight and both moments (24 bytes with fp32 moments:
// adam_state_traffic_bytes), reads the gradient, writes the compute-dtype weight.
// §2.3 A 16-bit GEMM with a dimension not a multiple of 8 (the unpadded 50257-token GPT vocabulary)
// over the same GEMM padded, on the H100: 785 / 113 TFLOP/s (data/reference/h100/torch_kernels.json).
constexpr double kUnalignedHeadGemmSlowdown = 785.0 / 113.0;
// The kernel model the optimizer step is timed on (AnalyticOptions::optimizer_time_scale).
KernelModel optimizer_kernels(const GpuSpec& gpu, DType dtype, const AnalyticOptions& opt) {
  return KernelModel(gpu, dtype, opt.optimizer_time_scale > 0 ? opt.optimizer_time_scale : opt.compute_time_scale);
}

// §6 What weft's runtime adds to each step per parameter besides its fused AdamW: the gradient
// norm reads the gradients (4), zeroing them writes them (4), and under mixed precision the first
// forward casts the updated fp32 parameters to the compute dtype (read 4, write e).
double weft_step_bytes(const AnalyticOptions& opt, double e) {
  if (opt.framework != Framework::kWeft) return 0;
  return 8 + (e < 4 ? 4 + e : 0);
}

// The backward of a linear layer Y[m,n] = X[m,k] W[k,n]: its input-gradient GEMM
// dX[m,k] = dY[m,n] W^T and its weight-gradient GEMM dW[k,n] = X^T dY (reduction over m).
double dx_gemm(const KernelModel& km, double m, double n, double k, double batch = 1) {
  return km.gemm(m, k, n, batch).value();
}
double dw_gemm(const KernelModel& km, double m, double n, double k, double batch = 1) {
  return km.gemm(k, n, m, batch).value();
}
double bwd_gemm(const KernelModel& km, double m, double n, double k, double batch = 1) {
  return dx_gemm(km, m, n, k, batch) + dw_gemm(km, m, n, k, batch);
}

double seconds(Seconds s) { return s.value(); }

// Bytes per element an eager RMSNorm moves (§2.3): in fp32 (cast in and out) or in the compute dtype.
double eager_rms_norm_bytes(const AnalyticOptions& opt, double e) {
  return opt.eager_fp32_math ? kEagerRmsNormBytes + 4 * e : kEagerRmsNormElems * e;
}
// Bytes per element an eager RMSNorm saves besides its input (§5.2): its fp32 input copy, or
// x * rsqrt(...) in the compute dtype.
double eager_rms_norm_copy_bytes(const AnalyticOptions& opt, double e) { return opt.eager_fp32_math ? 4 : e; }

}  // namespace

LayerCompute layer_compute(const LayerContext& ctx, const LayerStrategy& s, const AnalyticOptions& opt) {
  const LayerShape& L = ctx.shape();
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const KernelModel km(c.gpu, tr.dtype, opt.compute_time_scale);
  const double e = km.elem_bytes();

  const double t = safe(s.tp), u = safe(s.ulysses), cp = safe(s.cp), dp = safe(s.dp), ep = safe(s.ep);
  const double samples = tr.pipeline_micro_batch() / dp;       // per device per micro-batch
  const double seq = tr.seq;
  const double tokens = samples * seq / (u * cp);             // tokens through this device's GEMMs
  const double norm_tokens = s.sp ? tokens / t : tokens;      // tokens of norms and residual adds
  const double h = static_cast<double>(L.hidden);
  const AttentionWidths aw = attention_widths(L);
  const double q = aw.q, cw = aw.ctx;  // cw: the context's width (the output projection's input)
  const double kv = static_cast<double>(L.kv_heads) * L.head_dim;  // K's width (and V's without MLA)
  const bool mla = L.mla.enabled();
  const double blocks = L.kind == LayerKind::kCrossDecoder ? 2 : 1;
  const double norms = blocks + 1;
  const bool dropout = L.bias && opt.dropout;  // GPT-2/3 and BERT style layers train with dropout (§2)
  const bool causal = L.kind != LayerKind::kEncoder;
  // weft's runtime runs banded attention and attention sinks eagerly (the scores materialised:
  // runtime/ops.h banded_sink_attention), not through its fused kernel.
  const bool eager_core = opt.framework == Framework::kWeft && (L.window > 0 || L.sinks) && s.cp <= 1;
  const bool flash = (opt.flash_attention && !eager_core) || s.cp > 1;
  const bool moe = L.moe.enabled();
  const double mask = dropout ? 1.0 : 0.0;
  const bool eager = !opt.fused_elementwise;
  const bool rms = ctx.model != nullptr && ctx.model->norm == NormKind::kRmsNorm;
  const bool rope = ctx.model != nullptr && ctx.model->position == PositionKind::kRope;
  const bool swiglu = L.ffn_kind == FfnKind::kSwiglu;

  // §2.2 FP8 training (Transformer Engine's recipes) runs the GEMMs in fp8 and the attention core
  // in 16 bits.
  const bool fp8 = tr.dtype == DType::kFp8;
  const KernelModel km16 = fp8 ? KernelModel(c.gpu, DType::kBf16, opt.compute_time_scale) : km;

  Pass f, b;
  double recompute_gemm = 0;

  // --- attention projections (§2.1): Q, K, V fused and the output projection; multi-head latent
  // attention's down projections whole on every tp rank (queries' latent, keys' and values' latent
  // with the shared rotary key), its latents' RMSNorms, and up projections split by heads (§2.4)
  auto gemm_all = [&](double m, double n, double k) {
    f.gemm += blocks * seconds(km.gemm(m, n, k));
    b.gemm += blocks * bwd_gemm(km, m, n, k);
    b.wgrad += blocks * dw_gemm(km, m, n, k);
  };
  if (!mla) {
    gemm_all(tokens, (q + 2 * kv) / t, h);
  } else {
    const double rq = L.mla.q_lora_rank, rkv = L.mla.kv_lora_rank;
    const double nope = static_cast<double>(L.heads) * (L.head_dim - L.mla.qk_rope_dim);
    if (rq > 0) {
      gemm_all(tokens, rq, h);
      gemm_all(tokens, q / t, rq);
    } else {
      gemm_all(tokens, q / t, h);
    }
    gemm_all(tokens, aw.kv_latent, h);
    gemm_all(tokens, (nope + aw.v) / t, rkv);
    const double latent_norm = seconds(km.memory(Bytes(2 * e * tokens * (rq + rkv))));
    f.mem += blocks * latent_norm;
    b.mem += blocks * kElementwiseBackward * latent_norm;
  }
  gemm_all(tokens, h, cw / t);

  // --- attention core (§2.2): local heads, local queries, all keys
  const double heads_local = L.heads / (t * u);
  const double sq = seq / cp, sk = seq, hd = L.head_dim;
  const double core_batch = samples * heads_local;
  double core_f = 0, core_b = 0;
  if (flash) {
    // Query-key pairs a device computes: causal, half the square; a sliding window of w < seq
    // (L.window), w keys per query but the first w's (seq w - w (w - 1) / 2 over the sample),
    // which flash attention's banded masks skip block by block; each cp rank a cp-th.
    const bool banded = causal && L.window > 0 && L.window < seq;
    const double w = L.window;
    const double pairs = banded ? (w * seq - w * (w - 1) / 2) / cp : sq * sk * (causal ? 0.5 : 1.0);
    // Q.K^T over the query/key head dims, scores.V over the value's (MLA: v_head_dim).
    const double work = 2.0 * core_batch * pairs * (hd + (mla ? L.mla.v_head_dim : hd));
    // The kernel's length: the keys each query block runs over (one ring step's chunk under CP; a
    // window's keys).
    const double span = banded ? std::min(sk / cp, w) : sk / cp;
    const AttentionRates r = flash_attention_rates(c.gpu, opt.attention_kernel, span, hd, causal);
    core_f = seconds(km16.flops(work, r.fwd));
    core_b = seconds(km16.flops(kFlashBwdWork * work, r.bwd));
  } else {
    const double s2 = core_batch * sq * sk;
    const double vd = mla ? L.mla.v_head_dim : hd;
    core_f = seconds(km16.gemm(sq, sk, hd, core_batch)) + seconds(km16.gemm(sq, vd, sk, core_batch)) +
             seconds(km16.memory(Bytes(2 * e * s2))) +                               // scale-mask-softmax
             (dropout ? seconds(km16.memory(Bytes((2 * e + 1) * s2))) : 0.0) +       // dropout
             seconds(km16.memory(Bytes(2 * e * tokens * cw / t)));                    // context re-layout
    core_b = seconds(km16.gemm(sq, vd, sk, core_batch)) + seconds(km16.gemm(sk, vd, sq, core_batch)) +
             seconds(km16.gemm(sq, sk, hd, core_batch)) + seconds(km16.gemm(sk, hd, sq, core_batch)) +
             seconds(km16.memory(Bytes(3 * e * s2))) +
             (dropout ? seconds(km16.memory(Bytes((2 * e + 1) * s2))) : 0.0) +
             seconds(km16.memory(Bytes(2 * e * tokens * cw / t)));
  }
  f.core += blocks * core_f;
  b.core += blocks * core_b;

  // --- FFN (§2.1): dense, or routed experts (tokens spread evenly) + shared experts
  const double in_mats = L.ffn_kind == FfnKind::kSwiglu ? 2 : 1;
  // Per FFN element: fused SwiGLU reads gate and up and writes the product (3e), fused (bias-)GELU
  // reads and writes (2e); eager SwiGLU runs SiLU (2e) then the product (3e); eager GELU reads and
  // writes (2e): the FC1 bias is added by the GEMM itself (nn.Linear / at::linear, cuBLASLt's bias
  // epilogue), measured on an H100 (data/reference/h100: GPT-3 2.7B layer).
  const double act_bytes = (swiglu ? (eager ? 5 : 3) : 2) * e;
  auto dense_ffn = [&](double ff) {
    if (ff <= 0) return;
    f.gemm += seconds(km.gemm(tokens, in_mats * ff / t, h)) + seconds(km.gemm(tokens, h, ff / t));
    b.gemm += bwd_gemm(km, tokens, in_mats * ff / t, h) + bwd_gemm(km, tokens, h, ff / t);
    b.wgrad += dw_gemm(km, tokens, in_mats * ff / t, h) + dw_gemm(km, tokens, h, ff / t);
    f.mem += seconds(km.memory(Bytes(act_bytes * tokens * ff / t)));
    b.mem += kElementwiseBackward * seconds(km.memory(Bytes(act_bytes * tokens * ff / t)));
  };
  double routed = 0;
  double expert_ops_f = 0, expert_ops_b = 0;  // host operators of a loop over the experts
  if (moe) {
    // The experts' grid (weft/plan/strategy.h): each rank holds experts / ep experts at 1 / etp of
    // their width and computes the routed copies of etp / tp of its tensor-parallel group's tokens
    // (those its etp group gathered); so every rank computes a D-th of the routed work at any etp.
    const double experts = L.moe.experts, k = L.moe.top_k, ef = static_cast<double>(L.moe.expert_ffn);
    const double et = safe(s.expert_tp());
    // Token copies this device's experts process; under uneven routing (train.moe_imbalance) the
    // busiest ep rank's, which sets the layer's pace (its local experts' split among them does not:
    // a grouped GEMM's time follows its total rows, data/reference/h100).
    routed = tokens * et / t * k * tr.busiest_expert_rank(s.ep);
    const double local = experts / ep;
    const double per_expert = routed / local;
    f.gemm += seconds(km.gemm(tokens, experts, h));
    b.gemm += bwd_gemm(km, tokens, experts, h);
    b.wgrad += dw_gemm(km, tokens, experts, h);
    if (opt.moe_grouped_gemm) {
      f.gemm += seconds(km.gemm(per_expert, in_mats * ef / et, h, local)) + seconds(km.gemm(per_expert, h, ef / et, local));
      b.gemm += bwd_gemm(km, per_expert, in_mats * ef / et, h, local) + bwd_gemm(km, per_expert, h, ef / et, local);
      b.wgrad += dw_gemm(km, per_expert, in_mats * ef / et, h, local) + dw_gemm(km, per_expert, h, ef / et, local);
    } else {
      // A loop: each expert's projections are GEMMs of their own over its rows (SwiGLU's gate and up
      // two of them, as weft's runtime keeps them), each filling the GPU alone; per expert the host
      // issues the GEMMs, the activation (SwiGLU: SiLU and the product) and its slice of the rows,
      // and the backward their gradient kernels.
      const double first = swiglu ? 2 : 1;
      f.gemm += local * (first * seconds(km.gemm(per_expert, ef / et, h)) + seconds(km.gemm(per_expert, h, ef / et)));
      b.gemm += local * (first * bwd_gemm(km, per_expert, ef / et, h) + bwd_gemm(km, per_expert, h, ef / et));
      b.wgrad += local * (first * dw_gemm(km, per_expert, ef / et, h) + dw_gemm(km, per_expert, h, ef / et));
      const double linears_per_expert = first + 1, act_ops = swiglu ? 2 : 1;
      expert_ops_f = local * (linears_per_expert + act_ops + 1);
      expert_ops_b = local * (linears_per_expert * kBwdKernelsPerLinear + act_ops);
    }
    const double moe_bytes = act_bytes * routed * ef / et + 2 * 2 * e * routed * h + 3 * 4 * tokens * experts;
    f.mem += seconds(km.memory(Bytes(moe_bytes)));
    b.mem += kElementwiseBackward * seconds(km.memory(Bytes(moe_bytes)));
    dense_ffn(L.moe.shared_experts * ef);
  } else {
    dense_ffn(static_cast<double>(L.ffn));
  }

  // --- FP8 quantization (§2.1): every GEMM input (forward) and output gradient (backward) is cast
  // to fp8 row- and column-wise after a pass for its absolute maximum
  if (fp8) {
    // Per token of the device: a MoE layer's experts see routed / tokens copies of it at 1 / etp of
    // their width (+ once per shared expert, at 1 / tp).
    const double ef = static_cast<double>(L.moe.expert_ffn);
    const double ffn_rows = moe ? routed / tokens + L.moe.shared_experts : 1.0;
    const double ff_local = moe ? (routed / tokens) * ef / safe(s.expert_tp()) + L.moe.shared_experts * ef / t
                                : static_cast<double>(L.ffn) / t;
    // MLA: its latents feed (and get gradients from) the up projections, whole on every rank.
    const double latents = mla ? L.mla.q_lora_rank + L.mla.kv_lora_rank : 0.0;
    const double proj_out =
        mla ? L.mla.q_lora_rank + aw.kv_latent +
                  (q + static_cast<double>(L.heads) * (L.head_dim - L.mla.qk_rope_dim) + aw.v) / t
            : (q + 2 * kv) / t;
    const double inputs = blocks * (h + cw / t + latents) + ffn_rows * h + ff_local;
    const double grads = blocks * (proj_out + h) + in_mats * ff_local + ffn_rows * h;
    f.mem += seconds(km.memory(Bytes(kFp8QuantBytes * tokens * inputs)));
    b.mem += seconds(km.memory(Bytes(kFp8QuantBytes * tokens * grads)));
  }

  // --- norms and bias + dropout + residual (§2.3)
  // Fused: a norm reads x and writes y (2e per element), bias + dropout + residual add read x and
  // the residual and write the sum (3e, + the 1-byte mask). Eager: an RMSNorm in fp32 as plain
  // operators (cast, square, mean, rsqrt, scale, cast back, weight) moves 28 + 4e bytes (LayerNorm
  // stays one ATen kernel); a bias add (2e) and a dropout (2e + 1) are kernels of their own.
  const double norm_bytes = eager && rms ? eager_rms_norm_bytes(opt, e) : 2 * e;
  const double residual_bytes = eager ? 3 * e + (L.bias ? 2 * e : 0.0) + (dropout ? 2 * e + 1 : 0.0) : 3 * e + mask;
  const double norm_kernel = seconds(km.memory(Bytes(norm_bytes * norm_tokens * h)));
  const double residual_kernel = seconds(km.memory(Bytes(residual_bytes * norm_tokens * h)));
  f.mem += norms * (norm_kernel + residual_kernel);
  b.mem += kElementwiseBackward * norms * (norm_kernel + residual_kernel);
  // Per-head query / key norms (Qwen3's q_norm / k_norm; Megatron-LM's --qk-layernorm): one norm
  // of the same kind over the local query and key widths, before RoPE.
  const double qk_norms = L.qk_norm ? 2.0 * blocks : 0.0;
  if (L.qk_norm) {
    const double qk_kernel = seconds(km.memory(Bytes(norm_bytes * tokens * (q + kv) / t)));
    f.mem += blocks * qk_kernel;
    b.mem += blocks * kElementwiseBackward * qk_kernel;
  }
  // Rotary embedding of Q and K: fused, one read and write (2e per element); eager in fp32 through
  // complex numbers (cast, complex product, cast back: 16 + 2e). Eager attention also copies its
  // output out of the heads-first layout (2e per element) and, with GQA, repeats K and V to every
  // query head before the attention kernel (e per read element, e per written).
  double layout_bytes = 0;
  const double eager_rope_bytes = opt.eager_fp32_math ? kEagerRopeBytes + 2 * e : kEagerRopeElems * e;
  // MLA rotates its queries' rotary dims and the one rotary key every head shares.
  const double rotated = mla ? static_cast<double>(L.heads) * L.mla.qk_rope_dim / t + L.mla.qk_rope_dim : (q + kv) / t;
  if (rope) layout_bytes += (eager ? eager_rope_bytes : 2 * e) * rotated;
  if (eager && flash)
    layout_bytes += (opt.eager_attention_copy ? 2 * e * cw / t : 0.0) + (kv < q ? 2 * e * (kv + q) / t : 0.0);
  if (layout_bytes > 0) {
    const double layout_kernel = seconds(km.memory(Bytes(layout_bytes * tokens)));
    f.mem += blocks * layout_kernel;
    b.mem += blocks * kElementwiseBackward * layout_kernel;
  }

  // --- host time of an eager framework (§4): operators and autograd Functions per layer
  const double attn_ops = flash ? 7 : 21 + mask;
  // Eager operators that a fused implementation does not issue (§4): an RMSNorm's 7 more, the
  // rotary embedding's 7 per tensor (views included), the SwiGLU product, the attention kernel as
  // an ATen operator, its 4 layout operators and, with GQA, 3 per repeated K and V.
  const double eager_ops = eager ? norms * (rms ? 7 : 0) + blocks * ((rope ? 14 : 0) + (flash ? 5 : 0) +
                                                                     (kv < q ? 6 : 0)) + (swiglu ? 1 : 0)
                                 : 0;
  const double fwd_ops = blocks * attn_ops + 3 * (norms + qk_norms) + 3 + (moe ? 20 : 0) + expert_ops_f + eager_ops +
                        (eager && rms ? 7 * qk_norms : 0);
  // Python autograd Functions: the fused norms, attention kernel, activation and bias-dropout-add
  // (none when eager), then the parallel mappings.
  const double fused_fns = eager ? 0 : norms + qk_norms + blocks + 1 + (dropout ? norms : 0);
  const double fwd_fns = fused_fns + (s.tp > 1 ? 2 * (blocks + 1) : 0) + (s.ulysses > 1 ? 4 * blocks : 0) +
                         (s.cp > 1 ? blocks : 0) + (moe && s.ep > 1 ? 2 : 0) + (s.zero >= 3 ? 1 : 0);
  const double host_f = opt.framework_overhead ? (fwd_ops * opt.host_op_us + fwd_fns * opt.host_function_us) * 1e-6 : 0;
  // MLA: its down and up projections instead of the fused QKV (3 more linears, 2 without a query
  // latent).
  const double linears = 2 * blocks + 2 + (moe ? 3 : 0) + (mla ? blocks * (L.mla.q_lora_rank > 0 ? 3 : 2) : 0);
  const bool layer_norm = ctx.model == nullptr || ctx.model->norm == NormKind::kLayerNorm;
  const double param_tensors = linears * (L.bias ? 2 : 1) + (norms + qk_norms) * (layer_norm ? 2 : 1);
  const double bwd_kernels = linears * (kBwdKernelsPerLinear + (L.bias ? 1 : 0)) + norms * (layer_norm ? 3 : 2) +
                             2 * norms + blocks * (flash ? kBwdKernelsFlash : kBwdKernelsAttnCore) + 1 +
                             param_tensors + (moe ? 20 : 0) + expert_ops_b + eager_ops;
  double host_b = opt.framework_overhead
                      ? (bwd_kernels * opt.host_op_us + (fwd_fns + (s.zero >= 3 ? 1 : 0)) * opt.host_function_us) * 1e-6
                      : 0;

  // --- host time of a recompute (§2.4); its GPU time depends on the priced communication and is
  // added when the layer is assembled.
  if (s.recompute == Recompute::kFull) {
    if (opt.framework_overhead) host_b += host_f + (2 * opt.host_function_us + 4 * opt.host_op_us) * 1e-6;
  } else if (s.recompute == Recompute::kSelective && opt.selective == SelectivePolicy::kAlternateMatmuls) {
    // Op-level policy: the 2nd, 4th, ... matmul run again (with every elementwise kernel and the
    // tensor-parallel all-gathers, added at assembly).
    const std::vector<LayerMatmul> mm = layer_matmuls(L, t);
    for (size_t i = 1; i < mm.size(); i += 2) recompute_gemm += seconds(km.gemm(tokens, mm[i].n, mm[i].k));
    if (opt.framework_overhead) host_b += host_f;  // every forward operator passes the policy again
  } else if (s.recompute == Recompute::kSelective) {
    if (opt.framework_overhead) host_b += ((flash ? 2 : 10) * opt.host_op_us + 2 * opt.host_function_us) * 1e-6;
  }

  LayerCompute out;
  // --- optimizer (§6): Adam over the local shard, bound by HBM traffic
  const HeldParams& hp = out.held = held_params(L, s);
  const StateBytes per_param = state_bytes_per_param(tr.dtype, tr.optimizer);
  const double opt_params = hp.dense / (s.zero >= 1 ? safe(hp.shard) : 1.0) +
                            hp.expert / (s.zero >= 1 ? safe(hp.expert_shard) : 1.0);
  // --- weight-gradient accumulation (§2.3) as its own kernel: read the new gradient and the
  // buffer, write the buffer, per parameter this device holds
  if (!opt.fused_grad_accumulation) {
    const double accumulate = seconds(km.memory(Bytes(grad_accumulation_bytes(e) * (hp.dense + hp.expert))));
    b.mem += accumulate;
    b.wgrad += accumulate;  // runs with the weight gradient it accumulates
  }
  out.optimizer = optimizer_kernels(c.gpu, tr.dtype, opt)
                      .memory(Bytes((adam_state_traffic_bytes(tr.optimizer) + per_param.grads + per_param.weights) *
                                        opt_params +
                                    weft_step_bytes(opt, e) * (hp.dense + hp.expert)));
  out.f = f;
  out.b = b;
  out.core_f = core_f;
  out.core_b = core_b;
  out.recompute_gemm = recompute_gemm;
  out.host_f = host_f;
  out.host_b = host_b;
  ActivationOptions& ao = out.activations;
  ao.samples = samples;
  ao.expert_rows = tr.busiest_expert_rank(s.ep);
  ao.seq = seq;
  ao.elem_bytes = e;
  ao.flash_attention = flash;
  ao.dropout = dropout;
  ao.eager_elementwise = eager;
  ao.rms_norm = rms;
  ao.eager_norm_bytes = eager_rms_norm_copy_bytes(opt, e);
  ao.eager_attention_copy = opt.eager_attention_copy;
  ao.alternate_matmuls = opt.selective == SelectivePolicy::kAlternateMatmuls;
  ao.fp8_gemm_inputs = fp8;
  ao.sp_gathered_inputs = !opt.sp_regather_inputs;
  return out;
}

EdgeCompute edge_compute(const StageContext& ctx, const LayerStrategy& emb, const AnalyticOptions& opt) {
  const ModelSpec& model = *ctx.model;
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const KernelModel km(c.gpu, tr.dtype, opt.compute_time_scale);
  const double e = km.elem_bytes();
  EdgeCompute out;
  Pass& f = out.f;
  Pass& b = out.b;

  const double t = safe(emb.tp), u = safe(emb.ulysses), cp = safe(emb.cp);
  const double samples = tr.pipeline_micro_batch() / safe(emb.dp);
  const double tokens = samples * tr.seq / (u * cp);
  const double norm_tokens = emb.sp ? tokens / t : tokens;
  const double h = static_cast<double>(model.hidden), vocab = static_cast<double>(model.vocab);
  const bool dropout = model.num_layers() > 0 && model.layer(0).bias && opt.dropout;
  const double mask = dropout ? 1.0 : 0.0;
  if (ctx.first()) {
    // lookup: read rows and positions, write the sum (+ dropout); backward scatter-adds rows
    f.mem += seconds(km.memory(Bytes((3 * e + mask) * tokens * h)));
    b.mem += seconds(km.memory(Bytes(3 * e * tokens * h)));
    out.saved += mask * norm_tokens * h * micro_batches_in_flight(tr, ctx.stage);
    out.ops_f += 8;
    out.fns_f += 1 + (emb.tp > 1 ? 1 : 0);
  }
  if (ctx.last()) {
    // the final norm: fused (2e per element) or eager as in the layers
    const bool eager_rms = !opt.fused_elementwise && model.norm == NormKind::kRmsNorm;
    const double norm_bytes = eager_rms ? eager_rms_norm_bytes(opt, e) : 2 * e;
    f.mem += seconds(km.memory(Bytes(norm_bytes * norm_tokens * h)));
    b.mem += kElementwiseBackward * seconds(km.memory(Bytes(norm_bytes * norm_tokens * h)));
    // A 16-bit head GEMM whose vocabulary shard is not a multiple of 8 elements (16 bytes) has no
    // aligned tensor-core kernel: measured on the H100 (data/reference/h100/torch_kernels.json),
    // 2048 x 2560 x 50257 runs at 113 TFLOP/s where the padded 50304 runs at 785, 6.9 times slower.
    // Megatron pads the vocabulary for this (--make-vocab-size-divisible-by 128); weft's runtime
    // does not, and its backward's two GEMMs carry the same width as a leading dimension (taken at
    // the forward's measured rate).
    const double vshard = vocab / t;
    const double unaligned = opt.framework == Framework::kWeft && e < 4 && std::fmod(std::ceil(vshard), 8.0) != 0
                                 ? kUnalignedHeadGemmSlowdown
                                 : 1.0;
    f.gemm += unaligned * seconds(km.gemm(tokens, vshard, h));
    b.gemm += unaligned * bwd_gemm(km, tokens, vshard, h);
    const double local_logits = tokens * vocab / t;
    const bool megatron_loss = opt.vocab_parallel_loss;
    if (!opt.loss_in_fp32) {
      // weft's runtime: its own eager loss. Under mixed precision (a compute dtype narrower than
      // fp32) it casts the logits to fp32 first (read e, write 4; the backward casts the gradient
      // back) and runs the same operators on 4-byte elements, as Megatron's loss and autocast do.
      const double le = 4.0;  // every dtype the runtime trains in computes its loss in fp32
      const double cast = e < le ? e + le : 0.0;
      f.mem += seconds(km.memory(Bytes((kWeftLossFwdElems * le + cast) * local_logits)));
      b.mem += seconds(km.memory(Bytes((kWeftLossBwdElems * le + cast) * local_logits)));
      out.logits = kWeftLossPeakElems * le * local_logits;
    } else {
      f.mem += seconds(km.memory(
          Bytes(((megatron_loss ? kLossFwdBytesPerLogit : kTorchLossFwdBytesPerLogit) + e) * local_logits)));
      b.mem += seconds(km.memory(
          Bytes(((megatron_loss ? kLossBwdBytesPerLogit : kTorchLossBwdBytesPerLogit) + e) * local_logits)));
      // compute-dtype logits and their fp32 copy (Megatron's loss works in place on it), or
      // PyTorch's three fp32 tensors; one micro-batch
      out.logits = (megatron_loss ? e + 4 : kTorchLossPeakBytesPerLogit) * local_logits;
    }
    // the final norm's input (and an eager RMSNorm's own copy)
    out.saved += (e + (eager_rms ? eager_rms_norm_copy_bytes(opt, e) : 0.0)) * norm_tokens * h;
    // What a zero-bubble W of the head waits with (weft/cost/memory.h weight_grad_state_bytes): the
    // final norm's input and output gradient, the head GEMM's input, the logits' gradient (fp32 in
    // weft's own loss).
    out.weight_grad_state = 2 * e * norm_tokens * h + e * tokens * h + (opt.loss_in_fp32 ? e : 4.0) * local_logits;
    out.ops_f += 25;
    out.fns_f += 3 + (emb.tp > 1 ? 2 : 0);
  }
  // optimizer (§6) over the local shard of the parameters
  for (double n : edge_param_buckets(ctx, emb)) out.params += n;
  // weight-gradient accumulation as its own kernel (§2.3), as in the layers
  if (!opt.fused_grad_accumulation) b.mem += seconds(km.memory(Bytes(grad_accumulation_bytes(e) * out.params)));
  if (out.params > 0) {
    const StateBytes per_param = state_bytes_per_param(tr.dtype, tr.optimizer);
    const double opt_params = out.params / (emb.zero >= 1 ? safe(emb.shard_group()) : 1.0);
    out.optimizer = optimizer_kernels(c.gpu, tr.dtype, opt)
                        .memory(Bytes((adam_state_traffic_bytes(tr.optimizer) + per_param.grads + per_param.weights) * opt_params +
                                      weft_step_bytes(opt, e) * out.params));
  }
  return out;
}

}  // namespace weft
