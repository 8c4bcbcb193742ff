// weft's analytic cost model. Every formula and constant is derived in docs/cost-model.md; the
// section numbers below refer to it.
#include "weft/cost/analytic.h"

#include <algorithm>
#include <cmath>

#include "weft/cost/collectives.h"
#include "weft/cost/compute.h"
#include "weft/cost/memory.h"
#include "weft/cost/schedule.h"
#include "weft/spec/counts.h"

namespace weft {

namespace {

// §2 Fused attention (FlashAttention-2, Dao 2023): forward reaches 50-73% of the A100 dense peak,
// backward less; backward does 2.5x the forward matmul work (it recomputes Q.K^T).
constexpr double kFlashFwdEfficiency = 0.60;
constexpr double kFlashBwdEfficiency = 0.50;
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
// §2.3 Eager RMSNorm in fp32 (Llama's reference implementation, as torchtitan runs it), bytes per
// element: 28 for the fp32 sides of the casts in and out (4 + 4), x^2 (4 read, 4 written), the mean
// (4 read) and x * rsqrt (4 + 4), plus 4e for the casts' compute-dtype sides and the weight
// product. Eager rotary embedding through complex numbers, per element of Q or K: 16 for the fp32
// sides of the casts (4 + 4) and the complex product (4 read, 4 written), plus 2e.
constexpr double kEagerRmsNormBytes = 28;
constexpr double kEagerRopeBytes = 16;
// §4 Host (CPU) time of an eager framework: one ATen operator with autograd recording costs about
// 7 us (PyTorch issue #41383: 6.8 s per 10^6 scalar ops with requires_grad), one Python
// torch.autograd.Function.apply about 20 us (PyTorch issue #189573: 20.7 us median); backward
// nodes are costed alike. Defaults of AnalyticOptions::host_op_us / host_function_us.
// §4 Backward host time: the autograd engine dispatches every backward kernel through ATen
// (costed like a forward operator, opt_.host_op_us) and calls each custom Function's Python backward
// (opt_.host_function_us). Backward kernels of a layer: per linear a data-gradient and a weight-gradient
// GEMM (+ a bias-gradient reduction with biases); per LayerNorm 3 (input gradient, partial and final
// gamma/beta reduction: apex fused_layer_norm_cuda), per RMSNorm 2; per residual block 2 (dropout
// mask multiply, residual gradient add); the attention core 7 without flash (4 batched GEMMs,
// softmax backward, dropout backward, the re-layout copy) or 3 with (FlashAttention-2's
// preprocess, main and dQ-convert kernels); 1 for the activation; one gradient-accumulation kernel
// per parameter tensor (AccumulateGrad).
constexpr double kBwdKernelsPerLinear = 2;
constexpr double kBwdKernelsAttnCore = 7;
constexpr double kBwdKernelsFlash = 3;
// §5 Runtime overhead per device: CUDA context, cuBLAS workspaces and the allocator's own use
// (Galvatron's measured A100 `pytorch_context_mem`, 1024 MiB) plus NCCL buffers (NCCL_BUFFSIZE
// 4 MiB x 2 directions x up to 32 channels x 2 communicators = 0.5 GiB).
constexpr double kRuntimeOverheadGib = 1.5;
// §5 Share of device memory kept free for the caching allocator's fragmentation.
constexpr double kAllocatorReserve = 0.10;
// §6 Adam: reads and writes the fp32 master weight and both moments (24 bytes), reads the gradient,
// writes the compute-dtype weight.
constexpr double kAdamStateBytes = 24;

double safe(int x) { return static_cast<double>(std::max(1, x)); }

// Compute time `compute` that overlaps communication `comm` (§3.5): hidden communication slows the
// overlapped compute by `slowdown` (Galvatron's measured A100 coefficient); the rest is exposed.
double overlapped(double compute, double comm, double slowdown) {
  const double hidden = std::min(compute, comm);
  return compute + (slowdown - 1.0) * hidden + std::max(0.0, comm - compute);
}

// One forward or backward pass of a layer on one device, split by kind (seconds).
struct Pass {
  double gemm = 0, core = 0, mem = 0;   // GPU compute
  double tp = 0, uly = 0, cp = 0, ep = 0;  // exposed communication
  double gpu() const { return gemm + core + mem + tp + uly + cp + ep; }
  double compute() const { return gemm + core + mem; }
};

double bwd_gemm(const KernelModel& km, double m, double n, double k, double batch = 1) {
  // dX[m,k] = dY[m,n] W^T ; dW[k,n] = X^T dY (reduction over m)
  return km.gemm(m, k, n, batch).value() + km.gemm(k, n, m, batch).value();
}

double seconds(Seconds s) { return s.value(); }

}  // namespace

AnalyticCostModel::AnalyticCostModel(AnalyticOptions opt) : opt_(opt) {}
AnalyticCostModel::~AnalyticCostModel() = default;

std::string AnalyticCostModel::source() const { return "analytic, " + opt_.framework; }

Bytes AnalyticCostModel::memory_budget(const ClusterSpec& c) const {
  return GiB(c.gpu.memory_gib) * (1.0 - kAllocatorReserve);
}

LayerCost AnalyticCostModel::layer(const LayerContext& ctx, const LayerStrategy& s) const {
  const LayerShape& L = ctx.shape();
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const CollectiveOptions& co = opt_.comm;
  const KernelModel km(c.gpu, tr.dtype, opt_.compute_time_scale);
  const double e = km.elem_bytes();

  const double t = safe(s.tp), u = safe(s.ulysses), cp = safe(s.cp), dp = safe(s.dp), ep = safe(s.ep);
  const double samples = tr.pipeline_micro_batch() / dp;       // per device per micro-batch
  const double seq = tr.seq;
  const double tokens = samples * seq / (u * cp);             // tokens through this device's GEMMs
  const double norm_tokens = s.sp ? tokens / t : tokens;      // tokens of norms and residual adds
  const double h = static_cast<double>(L.hidden);
  const double q = static_cast<double>(L.heads) * L.head_dim;
  const double kv = static_cast<double>(L.kv_heads) * L.head_dim;
  const double blocks = L.kind == LayerKind::kCrossDecoder ? 2 : 1;
  const double norms = blocks + 1;
  const bool dropout = L.bias;     // GPT-2/3 and BERT style layers train with dropout (§2)
  const bool causal = L.kind != LayerKind::kEncoder;
  const bool flash = opt_.flash_attention || s.cp > 1;
  const bool moe = L.moe.enabled();
  const double mask = dropout ? 1.0 : 0.0;
  const bool eager = !opt_.fused_elementwise;
  const bool rms = ctx.model != nullptr && ctx.model->norm == NormKind::kRmsNorm;
  const bool rope = ctx.model != nullptr && ctx.model->position == PositionKind::kRope;
  const bool swiglu = L.ffn_kind == FfnKind::kSwiglu;

  // §2.2 FP8 training (Transformer Engine's recipes) runs the GEMMs in fp8 and the attention core
  // in 16 bits.
  const bool fp8 = tr.dtype == DType::kFp8;
  const KernelModel km16 = fp8 ? KernelModel(c.gpu, DType::kBf16, opt_.compute_time_scale) : km;

  Pass f, b;

  // --- attention projections (§2.1)
  f.gemm += blocks * (seconds(km.gemm(tokens, (q + 2 * kv) / t, h)) + seconds(km.gemm(tokens, h, q / t)));
  b.gemm += blocks * (bwd_gemm(km, tokens, (q + 2 * kv) / t, h) + bwd_gemm(km, tokens, h, q / t));

  // --- attention core (§2.2): local heads, local queries, all keys
  const double heads_local = L.heads / (t * u);
  const double sq = seq / cp, sk = seq, hd = L.head_dim;
  const double core_batch = samples * heads_local;
  double core_f = 0, core_b = 0;
  if (flash) {
    const double work = 4.0 * core_batch * sq * sk * hd * (causal ? 0.5 : 1.0);
    core_f = seconds(km16.flops(work, kFlashFwdEfficiency));
    core_b = seconds(km16.flops(kFlashBwdWork * work, kFlashBwdEfficiency));
  } else {
    const double s2 = core_batch * sq * sk;
    core_f = seconds(km16.gemm(sq, sk, hd, core_batch)) + seconds(km16.gemm(sq, hd, sk, core_batch)) +
             seconds(km16.memory(Bytes(2 * e * s2))) +                               // scale-mask-softmax
             (dropout ? seconds(km16.memory(Bytes((2 * e + 1) * s2))) : 0.0) +       // dropout
             seconds(km16.memory(Bytes(2 * e * tokens * q / t)));                     // context re-layout
    core_b = seconds(km16.gemm(sq, hd, sk, core_batch)) + seconds(km16.gemm(sk, hd, sq, core_batch)) +
             seconds(km16.gemm(sq, sk, hd, core_batch)) + seconds(km16.gemm(sk, hd, sq, core_batch)) +
             seconds(km16.memory(Bytes(3 * e * s2))) +
             (dropout ? seconds(km16.memory(Bytes((2 * e + 1) * s2))) : 0.0) +
             seconds(km16.memory(Bytes(2 * e * tokens * q / t)));
  }
  f.core += blocks * core_f;
  b.core += blocks * core_b;

  // --- FFN (§2.1): dense, or routed experts (tokens spread evenly) + shared experts
  const double in_mats = L.ffn_kind == FfnKind::kSwiglu ? 2 : 1;
  // Per FFN element: fused SwiGLU reads gate and up and writes the product (3e), fused (bias-)GELU
  // reads and writes (2e); eager SwiGLU runs SiLU (2e) then the product (3e), eager GELU with a
  // bias adds it first (2e: the bias itself is one row).
  const double act_bytes = (swiglu ? (eager ? 5 : 3) : (eager && L.bias ? 4 : 2)) * e;
  auto dense_ffn = [&](double ff) {
    if (ff <= 0) return;
    f.gemm += seconds(km.gemm(tokens, in_mats * ff / t, h)) + seconds(km.gemm(tokens, h, ff / t));
    b.gemm += bwd_gemm(km, tokens, in_mats * ff / t, h) + bwd_gemm(km, tokens, h, ff / t);
    f.mem += seconds(km.memory(Bytes(act_bytes * tokens * ff / t)));
    b.mem += kElementwiseBackward * seconds(km.memory(Bytes(act_bytes * tokens * ff / t)));
  };
  double routed = 0;
  if (moe) {
    const double experts = L.moe.experts, k = L.moe.top_k, ef = static_cast<double>(L.moe.expert_ffn);
    routed = tokens * k;                          // token copies this device's experts process
    const double local = experts / ep;
    const double per_expert = routed / local;
    f.gemm += seconds(km.gemm(tokens, experts, h));
    b.gemm += bwd_gemm(km, tokens, experts, h);
    f.gemm += seconds(km.gemm(per_expert, in_mats * ef / t, h, local)) + seconds(km.gemm(per_expert, h, ef / t, local));
    b.gemm += bwd_gemm(km, per_expert, in_mats * ef / t, h, local) + bwd_gemm(km, per_expert, h, ef / t, local);
    const double moe_bytes = act_bytes * routed * ef / t + 2 * 2 * e * routed * h + 3 * 4 * tokens * experts;
    f.mem += seconds(km.memory(Bytes(moe_bytes)));
    b.mem += kElementwiseBackward * seconds(km.memory(Bytes(moe_bytes)));
    dense_ffn(L.moe.shared_experts * ef);
  } else {
    dense_ffn(static_cast<double>(L.ffn));
  }

  // --- FP8 quantization (§2.1): every GEMM input (forward) and output gradient (backward) is cast
  // to fp8 row- and column-wise after a pass for its absolute maximum
  if (fp8) {
    const double ff_local = static_cast<double>(moe ? L.moe.expert_ffn * (L.moe.top_k + L.moe.shared_experts) : L.ffn) / t;
    // a MoE layer's experts see each token top_k times (+ once per shared expert)
    const double ffn_rows = moe ? L.moe.top_k + L.moe.shared_experts : 1.0;
    const double inputs = blocks * (h + q / t) + ffn_rows * h + ff_local;
    const double grads = blocks * ((q + 2 * kv) / t + h) + in_mats * ff_local + ffn_rows * h;
    f.mem += seconds(km.memory(Bytes(kFp8QuantBytes * tokens * inputs)));
    b.mem += seconds(km.memory(Bytes(kFp8QuantBytes * tokens * grads)));
  }

  // --- norms and bias + dropout + residual (§2.3)
  // Fused: a norm reads x and writes y (2e per element), bias + dropout + residual add read x and
  // the residual and write the sum (3e, + the 1-byte mask). Eager: an RMSNorm in fp32 as plain
  // operators (cast, square, mean, rsqrt, scale, cast back, weight) moves 28 + 4e bytes (LayerNorm
  // stays one ATen kernel); a bias add (2e) and a dropout (2e + 1) are kernels of their own.
  const double norm_bytes = eager && rms ? kEagerRmsNormBytes + 4 * e : 2 * e;
  const double residual_bytes = eager ? 3 * e + (L.bias ? 2 * e : 0.0) + (dropout ? 2 * e + 1 : 0.0) : 3 * e + mask;
  const double norm_kernel = seconds(km.memory(Bytes(norm_bytes * norm_tokens * h)));
  const double residual_kernel = seconds(km.memory(Bytes(residual_bytes * norm_tokens * h)));
  f.mem += norms * (norm_kernel + residual_kernel);
  b.mem += kElementwiseBackward * norms * (norm_kernel + residual_kernel);
  // Rotary embedding of Q and K: fused, one read and write (2e per element); eager in fp32 through
  // complex numbers (cast, complex product, cast back: 16 + 2e). Eager attention also copies its
  // output out of the heads-first layout (2e per element) and, with GQA, repeats K and V to every
  // query head before the attention kernel (e per read element, e per written).
  double layout_bytes = 0;
  if (rope) layout_bytes += (eager ? kEagerRopeBytes + 2 * e : 2 * e) * (q + kv) / t;
  if (eager && flash) layout_bytes += 2 * e * q / t + (kv < q ? 2 * e * (kv + q) / t : 0.0);
  if (layout_bytes > 0) {
    const double layout_kernel = seconds(km.memory(Bytes(layout_bytes * tokens)));
    f.mem += blocks * layout_kernel;
    b.mem += blocks * kElementwiseBackward * layout_kernel;
  }

  // --- tensor parallel communication (§3.1): per block and FFN one all-reduce, or with sequence
  // parallelism an all-gather + reduce-scatter pair; the same again in backward.
  if (s.tp > 1) {
    const CommGroup g = place_group(c, s.tp, 1);
    const Bytes act(e * tokens * h);
    double per = 0;
    if (s.sp) {
      per = seconds(collective_time(Collective::kAllGather, act, g, c, co)) +
            seconds(collective_time(Collective::kReduceScatter, act, g, c, co));
    } else {
      per = seconds(collective_time(Collective::kAllReduce, act, g, c, co));
    }
    f.tp += (blocks + 1) * per;
    b.tp += (blocks + 1) * per;
  }
  // --- Ulysses (§3.2): all-to-all of Q, K, V in and of the context out, per attention block
  if (s.ulysses > 1) {
    const CommGroup g = place_group(c, s.ulysses, s.tp);
    const double a2a = 2 * seconds(collective_time(Collective::kAllToAll, Bytes(e * tokens * q / t), g, c, co)) +
                       2 * seconds(collective_time(Collective::kAllToAll, Bytes(e * tokens * kv / t), g, c, co));
    f.uly += blocks * a2a;
    b.uly += blocks * a2a;
  }
  // --- context parallel (§3.3): K,V blocks passed around the ring, overlapped with the attention
  // of the block in hand; backward passes K,V and their gradients.
  if (s.cp > 1) {
    const CommGroup g = place_group(c, s.cp, s.tp * s.ulysses);
    const Bytes kv_bytes(e * tokens * 2 * kv / t);
    const double step_f = seconds(p2p_time(kv_bytes, g.spans_nodes(), c, co));
    const double step_b = seconds(p2p_time(kv_bytes * 2.0, g.spans_nodes(), c, co));
    f.cp += blocks * (cp - 1) * std::max(0.0, step_f - core_f / cp);
    b.cp += blocks * (cp - 1) * std::max(0.0, step_b - core_b / cp);
  }
  // --- expert parallel (§3.4): dispatch and combine all-to-all of the routed token copies
  if (moe && s.ep > 1) {
    const CommGroup g = place_group(c, s.ep, s.tp * s.ulysses * s.cp);
    const double a2a = seconds(collective_time(Collective::kAllToAll, Bytes(e * routed * h), g, c, co));
    f.ep += 2 * a2a;
    b.ep += 2 * a2a;
  }

  // --- parameters held by this device (§5.1)
  const LayerParams lp = layer_params(L);
  const double expert_total = moe ? L.moe.experts * expert_params(L) : 0.0;
  const double dense_local = (lp.attention + lp.ffn - expert_total) / t + lp.norms;
  const double expert_local = expert_total / (t * ep);
  const int shard = s.shard_group();
  const int expert_shard = std::max(1, static_cast<int>(shard / ep));
  const StateBytes per_param = state_bytes_per_param(tr.dtype);
  const double wbytes = per_param.weights, gbytes = per_param.grads;
  const CommGroup dgroup = place_group(c, shard, s.tp);
  const CommGroup egroup = place_group(c, expert_shard, static_cast<int>(s.tp * s.ulysses * s.cp * ep));

  // --- data parallel / ZeRO traffic (§3.5)
  auto coll = [&](Collective k, double bytes_dense, double bytes_expert) {
    return seconds(collective_time(k, Bytes(bytes_dense), dgroup, c, co)) +
           seconds(collective_time(k, Bytes(bytes_expert), egroup, c, co));
  };
  double grad_sync = 0, mb_rs = 0, mb_ag_f = 0, mb_ag_b = 0;
  const double m = std::max(1, tr.micro_batches);
  switch (s.zero) {
    case 0:
      grad_sync = coll(Collective::kAllReduce, gbytes * dense_local, gbytes * expert_local);
      break;
    case 1:
      grad_sync = coll(Collective::kReduceScatter, gbytes * dense_local, gbytes * expert_local) +
                  coll(Collective::kAllGather, wbytes * dense_local, wbytes * expert_local);
      break;
    case 2:
      mb_rs = coll(Collective::kReduceScatter, gbytes * dense_local, gbytes * expert_local);
      grad_sync = coll(Collective::kAllGather, wbytes * dense_local, wbytes * expert_local);
      break;
    default:
      mb_rs = coll(Collective::kReduceScatter, gbytes * dense_local, gbytes * expert_local);
      mb_ag_f = coll(Collective::kAllGather, wbytes * dense_local, wbytes * expert_local);
      mb_ag_b = mb_ag_f;
      break;
  }

  // --- host time of an eager framework (§4): operators and autograd Functions per layer
  const double attn_ops = flash ? 7 : 21 + mask;
  // Eager operators that a fused implementation does not issue (§4): an RMSNorm's 7 more, the
  // rotary embedding's 7 per tensor (views included), the SwiGLU product, the attention kernel as
  // an ATen operator, its 4 layout operators and, with GQA, 3 per repeated K and V.
  const double eager_ops = eager ? norms * (rms ? 7 : 0) + blocks * ((rope ? 14 : 0) + (flash ? 5 : 0) +
                                                                     (kv < q ? 6 : 0)) + (swiglu ? 1 : 0)
                                 : 0;
  const double fwd_ops = blocks * attn_ops + 3 * norms + 3 + (moe ? 20 : 0) + eager_ops;
  // Python autograd Functions: the fused norms, attention kernel, activation and bias-dropout-add
  // (none when eager), then the parallel mappings.
  const double fused_fns = eager ? 0 : norms + blocks + 1 + (dropout ? norms : 0);
  const double fwd_fns = fused_fns + (s.tp > 1 ? 2 * (blocks + 1) : 0) + (s.ulysses > 1 ? 4 * blocks : 0) +
                         (s.cp > 1 ? blocks : 0) + (moe && s.ep > 1 ? 2 : 0) + (s.zero >= 3 ? 1 : 0);
  const double host_f = opt_.framework_overhead ? (fwd_ops * opt_.host_op_us + fwd_fns * opt_.host_function_us) * 1e-6 : 0;
  const double linears = 2 * blocks + 2 + (moe ? 3 : 0);
  const bool layer_norm = ctx.model == nullptr || ctx.model->norm == NormKind::kLayerNorm;
  const double param_tensors = linears * (L.bias ? 2 : 1) + norms * (layer_norm ? 2 : 1);
  const double bwd_kernels = linears * (kBwdKernelsPerLinear + (L.bias ? 1 : 0)) + norms * (layer_norm ? 3 : 2) +
                             2 * norms + blocks * (flash ? kBwdKernelsFlash : kBwdKernelsAttnCore) + 1 +
                             param_tensors + (moe ? 20 : 0) + eager_ops;
  double host_b = opt_.framework_overhead
                      ? (bwd_kernels * opt_.host_op_us + (fwd_fns + (s.zero >= 3 ? 1 : 0)) * opt_.host_function_us) * 1e-6
                      : 0;

  // --- recompute (§2.4): full re-runs the forward (with its communication) inside backward;
  // selective re-runs the attention core.
  double recompute = 0;
  if (s.recompute == Recompute::kFull) {
    recompute = f.gpu();
    if (opt_.framework_overhead) host_b += host_f + (2 * opt_.host_function_us + 4 * opt_.host_op_us) * 1e-6;
  } else if (s.recompute == Recompute::kSelective && opt_.selective == SelectivePolicy::kAlternateMatmuls) {
    // Op-level policy: the 2nd, 4th, ... matmul, every elementwise kernel and the tensor-parallel
    // all-gathers (reduce-scatter outputs are kept) run again; the attention kernel's output is kept.
    const std::vector<LayerMatmul> mm = layer_matmuls(L, t);
    for (size_t i = 1; i < mm.size(); i += 2) recompute += seconds(km.gemm(tokens, mm[i].n, mm[i].k));
    recompute += f.mem + (s.sp ? 0.5 : 0.0) * f.tp;
    if (opt_.framework_overhead) host_b += host_f;  // every forward operator passes the policy again
  } else if (s.recompute == Recompute::kSelective) {
    recompute = f.core;
    if (opt_.framework_overhead) host_b += ((flash ? 2 : 10) * opt_.host_op_us + 2 * opt_.host_function_us) * 1e-6;
  }

  // --- assemble: GPU time with ZeRO traffic overlapped, then the host bound
  const double slow = opt_.overlap_slowdown;
  const double gpu_f = overlapped(f.gpu(), mb_ag_f, slow);
  const double gpu_b = overlapped(b.gpu() + recompute, mb_ag_b + mb_rs, slow);
  const double fwd = std::max(gpu_f, host_f);
  const double bwd = std::max(gpu_b, host_b);

  LayerCost out;
  out.fwd = Seconds(fwd);
  out.bwd = Seconds(bwd);
  out.grad_sync = Seconds(grad_sync);
  TimeBreakdown& tb = out.time;
  tb.recompute = Seconds(recompute);
  tb.tp_comm = Seconds(f.tp + b.tp);
  tb.ulysses_comm = Seconds(f.uly + b.uly);
  tb.cp_comm = Seconds(f.cp + b.cp);
  tb.ep_comm = Seconds(f.ep + b.ep);
  tb.zero3_gather = Seconds(std::max(0.0, mb_ag_f - f.gpu()) + std::max(0.0, mb_ag_b + mb_rs - b.gpu() - recompute));
  // compute: GEMMs, attention, elementwise, the overlap slow-down and any host-bound excess, so
  // that the per-micro-batch fields add up to fwd + bwd.
  tb.compute = Seconds(fwd + bwd - seconds(tb.recompute) - seconds(tb.tp_comm) - seconds(tb.ulysses_comm) -
                       seconds(tb.cp_comm) - seconds(tb.ep_comm) - seconds(tb.zero3_gather));
  tb.dp_comm = Seconds(grad_sync + m * mb_rs);

  // --- optimizer (§6): Adam over the local shard, bound by HBM traffic
  const double opt_params = dense_local / (s.zero >= 1 ? safe(shard) : 1.0) +
                            expert_local / (s.zero >= 1 ? safe(expert_shard) : 1.0);
  out.optimizer = km.memory(Bytes((kAdamStateBytes + gbytes + wbytes) * opt_params));
  tb.optimizer = out.optimizer;

  // --- memory (§5)
  const StateBytes sd = sharded_state_bytes(tr.dtype, s.zero, shard);
  const StateBytes se = sharded_state_bytes(tr.dtype, s.zero, expert_shard);
  MemoryBreakdown& mem = out.memory;
  mem.weights = Bytes(sd.weights * dense_local + se.weights * expert_local);
  mem.grads = Bytes(sd.grads * dense_local + se.grads * expert_local);
  mem.optimizer = Bytes(sd.optimizer * dense_local + se.optimizer * expert_local);
  ActivationOptions ao;
  ao.samples = samples;
  ao.seq = seq;
  ao.elem_bytes = e;
  ao.flash_attention = flash;
  ao.dropout = dropout;
  ao.eager_elementwise = eager;
  ao.rms_norm = rms;
  ao.alternate_matmuls = opt_.selective == SelectivePolicy::kAlternateMatmuls;
  ao.fp8_gemm_inputs = fp8;
  mem.activations = layer_activation_bytes(L, s, ao) * micro_batches_in_flight(tr, ctx.stage);
  return out;
}

LayerCost AnalyticCostModel::stage_extra(const StageContext& ctx, const LayerStrategy& emb) const {
  const ModelSpec& model = *ctx.model;
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const CollectiveOptions& co = opt_.comm;
  const KernelModel km(c.gpu, tr.dtype, opt_.compute_time_scale);
  const double e = km.elem_bytes();
  LayerCost out;

  const double t = safe(emb.tp), u = safe(emb.ulysses), cp = safe(emb.cp), dp = safe(emb.dp);
  const double samples = tr.pipeline_micro_batch() / dp;
  const double tokens = samples * tr.seq / (u * cp);
  const double norm_tokens = emb.sp ? tokens / t : tokens;
  const double h = static_cast<double>(model.hidden), vocab = static_cast<double>(model.vocab);
  const bool dropout = model.num_layers() > 0 && model.layer(0).bias;
  const double mask = dropout ? 1.0 : 0.0;
  const CommGroup tp_group = place_group(c, emb.tp, 1);
  const Bytes act(e * tokens * h);

  Pass f, b;
  double params = 0, ops_f = 0, fns_f = 0, logits = 0, saved = 0;
  if (ctx.first()) {
    params += vocab * h / t + (model.position == PositionKind::kLearned ? model.max_seq * h : 0.0);
    // lookup: read rows and positions, write the sum (+ dropout); backward scatter-adds rows
    f.mem += seconds(km.memory(Bytes((3 * e + mask) * tokens * h)));
    b.mem += seconds(km.memory(Bytes(3 * e * tokens * h)));
    if (emb.tp > 1) {  // vocab-parallel lookup: partial rows summed (reduce-scattered with SP)
      f.tp += seconds(collective_time(emb.sp ? Collective::kReduceScatter : Collective::kAllReduce, act, tp_group, c, co));
      if (emb.sp) b.tp += seconds(collective_time(Collective::kAllGather, act, tp_group, c, co));
    }
    saved += mask * norm_tokens * h * micro_batches_in_flight(tr, ctx.stage);
    ops_f += 8;
    fns_f += 1 + (emb.tp > 1 ? 1 : 0);
  }
  if (ctx.last()) {
    const double norm_params = h * (model.norm == NormKind::kLayerNorm ? 2 : 1);
    params += norm_params;
    if (!model.tied_embeddings || !ctx.first()) params += vocab * h / t;  // head (or its tied copy)
    f.mem += seconds(km.memory(Bytes(2 * e * norm_tokens * h)));
    b.mem += kElementwiseBackward * seconds(km.memory(Bytes(2 * e * norm_tokens * h)));
    f.gemm += seconds(km.gemm(tokens, vocab / t, h));
    b.gemm += bwd_gemm(km, tokens, vocab / t, h);
    const double local_logits = tokens * vocab / t;
    const bool megatron_loss = opt_.vocab_parallel_loss;
    f.mem += seconds(km.memory(
        Bytes(((megatron_loss ? kLossFwdBytesPerLogit : kTorchLossFwdBytesPerLogit) + e) * local_logits)));
    b.mem += seconds(km.memory(
        Bytes(((megatron_loss ? kLossBwdBytesPerLogit : kTorchLossBwdBytesPerLogit) + e) * local_logits)));
    if (emb.tp > 1) {
      // input copied to (or with SP gathered on) every rank; max, exp-sum and target logit summed
      if (emb.sp) {
        f.tp += seconds(collective_time(Collective::kAllGather, act, tp_group, c, co));
        b.tp += seconds(collective_time(Collective::kReduceScatter, act, tp_group, c, co));
      } else {
        b.tp += seconds(collective_time(Collective::kAllReduce, act, tp_group, c, co));
      }
      f.tp += 3 * seconds(collective_time(Collective::kAllReduce, Bytes(4 * tokens), tp_group, c, co));
    }
    // compute-dtype logits and their fp32 copy (Megatron's loss works in place on it), or PyTorch's
    // three fp32 tensors; one micro-batch
    logits = (megatron_loss ? e + 4 : kTorchLossPeakBytesPerLogit) * local_logits;
    saved += e * norm_tokens * h;
    ops_f += 25;
    fns_f += 3 + (emb.tp > 1 ? 2 : 0);
  }

  const StateBytes per_param = state_bytes_per_param(tr.dtype);
  const int shard = emb.shard_group();
  double grad_sync = 0;
  if (params > 0) {
    const CommGroup dgroup = place_group(c, shard, emb.tp);
    const Bytes grads(per_param.grads * params);
    switch (emb.zero) {
      case 0: grad_sync = seconds(collective_time(Collective::kAllReduce, grads, dgroup, c, co)); break;
      default:
        grad_sync = seconds(collective_time(Collective::kReduceScatter, grads, dgroup, c, co)) +
                    seconds(collective_time(Collective::kAllGather, Bytes(per_param.weights * params), dgroup, c, co));
        break;
    }
    // Tied embeddings split over the first and last stage: their gradients are summed between the
    // two (Megatron's embedding group).
    if (model.tied_embeddings && ctx.num_stages > 1 && (ctx.first() || ctx.last())) {
      const int span = ctx.stage_size * std::max(0, tr.pp - 1);
      CommGroup pair;
      pair.size = 2;
      pair.ranks_per_node = span >= c.gpus_per_node ? 1 : 2;
      grad_sync += seconds(collective_time(Collective::kAllReduce, Bytes(per_param.grads * vocab * h / t), pair, c, co));
    }
    const double opt_params = params / (emb.zero >= 1 ? safe(shard) : 1.0);
    out.optimizer = km.memory(Bytes((kAdamStateBytes + per_param.grads + per_param.weights) * opt_params));
    const StateBytes sb = sharded_state_bytes(tr.dtype, emb.zero, shard);
    out.memory.weights = Bytes(sb.weights * params);
    out.memory.grads = Bytes(sb.grads * params);
    out.memory.optimizer = Bytes(sb.optimizer * params);
  }
  out.memory.activations = Bytes(saved);
  // Runtime overhead once per device: on the first virtual stage of each device group.
  const double overhead_gib = opt_.runtime_overhead_gib > 0 ? opt_.runtime_overhead_gib : kRuntimeOverheadGib;
  out.memory.other = Bytes(logits) + (ctx.stage < std::max(1, tr.pp) ? GiB(overhead_gib) : Bytes(0));

  const double host_f = opt_.framework_overhead ? (ops_f * opt_.host_op_us + fns_f * opt_.host_function_us) * 1e-6 : 0;
  const double fwd = std::max(f.gpu(), host_f);
  const double bwd = std::max(b.gpu(), host_f);
  out.fwd = Seconds(fwd);
  out.bwd = Seconds(bwd);
  out.grad_sync = Seconds(grad_sync);
  out.time.tp_comm = Seconds(f.tp + b.tp);
  out.time.embedding = Seconds(fwd + bwd - f.tp - b.tp);
  out.time.dp_comm = out.grad_sync;
  out.time.optimizer = out.optimizer;
  return out;
}

Seconds AnalyticCostModel::transition(const LayerContext& ctx, const LayerStrategy& a, const LayerStrategy& b) const {
  // §3.6 Activations between layers are split over the batch by dp and over the sequence by
  // cp * ulysses (* tp with sequence parallelism), replicated otherwise. Moving to a finer split
  // is a local slice; to a coarser one each device gathers what it lacks (and the gradient goes
  // back the other way).
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  auto batch_split = [](const LayerStrategy& s) { return safe(s.dp); };
  auto seq_split = [](const LayerStrategy& s) { return safe(s.cp) * safe(s.ulysses) * (s.sp ? safe(s.tp) : 1.0); };
  const double ba = batch_split(a), bb = batch_split(b), sa = seq_split(a), sb = seq_split(b);
  if (ba == bb && sa == sb) return Seconds(0);
  const double e = dtype_bytes(tr.dtype);
  const double whole = e * tr.pipeline_micro_batch() * tr.seq * static_cast<double>(ctx.model->hidden);
  const double common = whole / (std::max(ba, bb) * std::max(sa, sb));
  const double need_f = std::max(0.0, whole / (bb * sb) - common);
  const double need_b = std::max(0.0, whole / (ba * sa) - common);
  if (need_f <= 0 && need_b <= 0) return Seconds(0);
  const double na = ba * sa, nb = bb * sb;
  const int ratio = std::max(2, static_cast<int>(std::lround(std::max(na, nb) / std::min(na, nb))));
  const CommGroup g = place_group(c, ratio, std::max(1, ctx.stage_size / ratio));
  const double bw = group_bandwidth(g, c, opt_.comm).value();
  if (bw <= 0) return Seconds(0);
  const double lat = (opt_.comm.call_latency_us + c.intra.latency_us) * 1e-6;
  double t = 0;
  if (need_f > 0) t += lat + need_f / bw;
  if (need_b > 0) t += lat + need_b / bw;
  return Seconds(t);
}

Seconds AnalyticCostModel::p2p(const StageContext& ctx, const LayerStrategy& s) const {
  // §3.7 Activation forward and gradient backward across the boundary after ctx.stage, each tensor
  // parallel rank sending its 1/tp share (Megatron's scatter-gather; re-gathered when the layer has
  // no sequence parallelism).
  if (ctx.num_stages <= 1) return Seconds(0);
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const int pp = std::max(1, tr.pp), S = std::max(1, ctx.stage_size), G = std::max(1, c.gpus_per_node);
  const int g1 = ctx.stage % pp, g2 = (ctx.stage + 1) % pp;
  const bool cross = S >= G || (g1 * S) / G != (g2 * S) / G;
  const double e = dtype_bytes(tr.dtype);
  const double tokens = tr.pipeline_micro_batch() / safe(s.dp) * tr.seq / (safe(s.ulysses) * safe(s.cp));
  const double full = e * tokens * static_cast<double>(ctx.model->hidden);
  double one = seconds(p2p_time(Bytes(full / safe(s.tp)), cross, c, opt_.comm));
  if (s.tp > 1 && !s.sp)
    one += seconds(collective_time(Collective::kAllGather, Bytes(full), place_group(c, s.tp, 1), c, opt_.comm));
  return Seconds(2 * one);
}

StepCost AnalyticCostModel::step(const TrainSettings& train, const std::vector<StageSums>& stages) const {
  // §7 Pipeline: the step is the makespan of the event-level schedule (weft/cost/schedule.h):
  // every forward, backward and send of every stage and micro-batch in the order the schedule
  // prescribes, then each device group's gradient syncs (overlapping its last backwards when
  // enabled) and its optimizer update. For equal stages that is the textbook
  // (m + p - 1) * T of GPipe and 1F1B and m * T + (p - 1) * T / v interleaved.
  StepCost out;
  const int n = static_cast<int>(stages.size());
  if (n == 0) return out;
  ScheduleSpec spec = schedule_spec(train, n, *this);
  spec.record_events = false;
  const int p = spec.pp;
  std::vector<StageTiming> timing;
  for (const StageSums& s : stages) timing.push_back(stage_timing(s));
  const Result<Simulation> sim = simulate_schedule(spec, timing);
  if (!sim.ok()) throw InputError("pipeline step: " + sim.error().message);
  const double m = spec.micro_batches;

  // Overlapped sends (interleaved schedule) do not occupy the device.
  const double p2p_busy = spec.overlap_p2p ? 0.0 : 1.0;
  std::vector<double> busy(p, 0.0), opt(p, 0.0);
  for (int s = 0; s < n; ++s) {
    busy[s % p] += (stages[s].fwd + stages[s].bwd + p2p_busy * stages[s].p2p).value();
    opt[s % p] += stages[s].optimizer.value();
  }
  int crit = 0, last = 0;
  double pipeline = 0, last_end = -1;
  for (int g = 0; g < p; ++g) {
    if (busy[g] > busy[crit]) crit = g;
    pipeline = std::max(pipeline, sim->compute_end_s[g]);
    const double end = sim->optimizer_start_s[g] + opt[g];
    if (end > last_end) last_end = end, last = g;
  }
  const double step = sim->makespan_s;

  out.step_time = Seconds(step);
  out.stage_time.resize(n);
  for (int s = 0; s < n; ++s) {
    out.stage_time[s] = (stages[s].fwd + stages[s].bwd + stages[s].p2p) * m + stages[s].grad_sync + stages[s].optimizer;
  }
  // Breakdown along the busiest device group: its per-micro-batch parts times m, then the bubble
  // (the rest of the pipeline), the exposed gradient reduction and the last group's optimizer.
  TimeBreakdown per_mb;
  Seconds dp_total;
  for (int s = crit; s < n; s += p) {
    per_mb += stages[s].time;
    dp_total += stages[s].time.dp_comm;
  }
  if (spec.overlap_p2p) per_mb.p2p = Seconds(0);  // hidden behind computation
  out.time = per_mb.scaled(m);
  out.time.dp_comm = dp_total;
  out.time.bubble = Seconds(std::max(0.0, pipeline - m * busy[crit]));
  out.time.optimizer = Seconds(opt[last]);
  out.time.dp_exposed = Seconds(std::max(0.0, step - pipeline - opt[last]));
  return out;
}

}  // namespace weft
