#include "weft/cost/memory.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "weft/plan/pipeline_order.h"
#include "weft/spec/counts.h"

namespace weft {

StateBytes state_bytes_per_param(DType dtype) {
  switch (dtype) {
    case DType::kFp32:
    case DType::kTf32: return {4, 4, 8};
    case DType::kFp16: return {2, 2, 12};
    case DType::kBf16:
    case DType::kFp8: return {2, 4, 12};
  }
  return {2, 4, 12};
}

namespace {
// Bytes of one optimizer-state element (Megatron's precision-aware optimizer keeps fp8 moments in
// one byte, with per-tensor scales).
double state_element_bytes(DType d) { return d == DType::kFp8 ? 1.0 : dtype_bytes(d); }
}  // namespace

StateBytes state_bytes_per_param(DType dtype, const OptimizerPrecision& o) {
  StateBytes b = state_bytes_per_param(dtype);
  if (!o.precision_aware()) return b;
  b.optimizer += state_element_bytes(o.exp_avg) + state_element_bytes(o.exp_avg_sq) - 8;
  if (o.main_grads == DType::kBf16) b.grads = 2;
  return b;
}

double adam_state_traffic_bytes(const OptimizerPrecision& o) {
  return 2 * (4 + state_element_bytes(o.exp_avg) + state_element_bytes(o.exp_avg_sq));
}

StateBytes sharded_state_bytes(DType dtype, int zero, int shard, MasterWeights master, const OptimizerPrecision& o) {
  StateBytes b = state_bytes_per_param(dtype, o);
  const double moments = state_element_bytes(o.exp_avg) + state_element_bytes(o.exp_avg_sq);
  const double n = std::max(1, shard);
  if (master == MasterWeights::kShardedParams && zero >= 2) {
    // FSDP with a param_dtype: fp32 sharded parameters (the master) and fp32 sharded gradients,
    // Adam's two fp32 moments; under ZeRO-2 (reshard_after_forward=False) the compute-dtype copy
    // stays gathered from forward to backward.
    const double compute = b.weights;
    b.weights = 4 / n + (zero == 2 ? compute : 0.0);
    b.grads = 4 / n;
    b.optimizer = moments / n;
    return b;
  }
  if (master == MasterWeights::kFp32Params && b.weights < 4) {
    const double compute = b.weights;
    b.weights = zero >= 3 ? 4 / n : 4 + compute;
    b.grads = zero >= 2 ? 4 / n : 4;
    b.optimizer = zero >= 1 ? moments / n : moments;
    return b;
  }
  if (zero >= 1) b.optimizer /= n;
  if (zero >= 2) b.grads /= n;
  if (zero >= 3) b.weights /= n;
  return b;
}

double zero_buffer_bytes_per_param(DType dtype, int zero) {
  const StateBytes b = state_bytes_per_param(dtype);
  if (zero >= 3) return 2 * b.weights + b.grads;
  if (zero == 2) return b.grads;
  return 0;
}

int nccl_communicators(const LayerStrategy& s, int pp, bool tied_embeddings) {
  int n = 1;  // the world
  if (s.tp > 1) ++n;
  if (s.shard_group() > 1) ++n;
  if (s.ulysses > 1) ++n;
  if (s.cp > 1) ++n;
  if (s.ep > 1) {
    ++n;
    if (s.expert_shard_group() > 1) ++n;  // the expert data-parallel group
  }
  if (s.expert_tp() != s.tp && s.expert_tp() > 1) ++n;  // the expert tensor-parallel group
  if (pp > 1) {
    ++n;
    if (tied_embeddings) ++n;
  }
  return n;
}

Bytes nccl_communicator_bytes() { return MiB(kNcclChannels * kNcclConnectionsPerChannel * kNcclFifoMibPerConnection); }

Bytes MemoryMargin::of(Bytes device) const { return percent ? device * (value / 100) : GiB(value); }

Result<MemoryMargin> parse_memory_margin(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return Error{ErrorKind::kBadInput, "--memory-margin: " + why + ", got \"" + text + "\""};
  };
  size_t pos = 0;
  while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  const char* begin = text.c_str() + pos;
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(v))
    return bad("expected a share of the device memory (10%) or an amount (4GiB)");
  std::string unit(end);
  unit.erase(std::remove_if(unit.begin(), unit.end(), [](unsigned char c) { return std::isspace(c); }), unit.end());
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v < 0) return bad("must not be negative");
  MemoryMargin m;
  if (unit == "%") {
    if (v >= 90) return bad("a share of the device must be below 90%");
    m.percent = true;
    m.value = v;
  } else if (unit == "gib" || unit == "gb" || unit == "g") {
    m.percent = false;
    m.value = v;
  } else if (unit == "mib" || unit == "mb" || unit == "m") {
    m.percent = false;
    m.value = v / 1024;
  } else if (unit.empty() && v == 0) {
    m.percent = false;
    m.value = 0;
  } else {
    return bad(unit.empty() ? "needs a unit: a share of the device memory (10%) or an amount (4GiB)"
                            : "unknown unit \"" + std::string(end) + "\" (use %, GiB or MiB)");
  }
  return m;
}

std::string to_string(const MemoryMargin& m) {
  char buf[64];
  if (m.percent) std::snprintf(buf, sizeof buf, "%g%%", m.value);
  else std::snprintf(buf, sizeof buf, "%g GiB", m.value);
  return buf;
}

MemoryBudget memory_budget(const ClusterSpec& c, const MemoryMargin& margin, double process_gib) {
  MemoryBudget b;
  b.device = GiB(c.gpu.memory_gib);
  b.process = process_gib > 0 ? GiB(process_gib) : MiB(kCudaContextMib + kGemmWorkspaceMib);
  b.margin = margin.of(b.device);
  b.budget = std::max(Bytes(0), b.device - b.process - b.margin);
  return b;
}

std::vector<LayerMatmul> layer_matmuls(const LayerShape& s, double tp) {
  const double t = std::max(1.0, tp);
  const double h = static_cast<double>(s.hidden);
  const AttentionWidths w = attention_widths(s);
  std::vector<LayerMatmul> out;
  const int blocks = s.kind == LayerKind::kCrossDecoder ? 2 : 1;
  for (int b = 0; b < blocks; ++b) {
    if (!s.mla.enabled()) {
      out.push_back({w.q / t, h});
      out.push_back({w.k / t, h});
      out.push_back({w.v / t, h});
    } else {
      // Multi-head latent attention: down projections whole on every rank, up projections split.
      const double rq = s.mla.q_lora_rank, rkv = s.mla.kv_lora_rank;
      const double nope = static_cast<double>(s.heads) * (s.head_dim - s.mla.qk_rope_dim);
      if (rq > 0) {
        out.push_back({rq, h});
        out.push_back({w.q / t, rq});
      } else {
        out.push_back({w.q / t, h});
      }
      out.push_back({w.kv_latent, h});
      out.push_back({(nope + w.v) / t, rkv});
    }
    out.push_back({h, w.ctx / t});
  }
  const double ff = s.moe.enabled()
                        ? static_cast<double>(s.moe.expert_ffn) * (s.moe.top_k + s.moe.shared_experts)
                        : static_cast<double>(s.ffn);
  out.push_back({ff / t, h});
  if (s.ffn_kind == FfnKind::kSwiglu) out.push_back({ff / t, h});
  out.push_back({h, ff / t});
  return out;
}

namespace {

// What both models of a layer's kept tensors start from (per device, per micro-batch).
struct LayerDims {
  double t, u, cp;    // tensor, Ulysses and context-parallel degrees (at least 1)
  double e;           // bytes of an activation element
  double h, q, kv;    // hidden width, query and key widths (kv: K's and, without MLA, V's)
  double v, ctx;      // value and context widths (MLA: heads * v_head_dim; else kv and q)
  double latents;     // MLA: the latents a rank keeps per token, whole (0 without)
  double tokens;      // tokens of this device outside attention (sequence split by Ulysses and cp)
  double rep;         // share of a hidden-width tensor: 1 / t with sequence parallelism, else 1
  double blocks;      // attention blocks: 2 in a cross-attention decoder
};

LayerDims layer_dims(const LayerShape& s, const LayerStrategy& st, const ActivationOptions& o) {
  LayerDims d;
  d.t = std::max(1, st.tp), d.u = std::max(1, st.ulysses), d.cp = std::max(1, st.cp);
  d.e = o.elem_bytes;
  d.h = static_cast<double>(s.hidden);
  const AttentionWidths w = attention_widths(s);
  d.q = w.q;
  d.kv = w.k;
  d.v = w.v;
  d.ctx = w.ctx;
  // MLA keeps its query latent and key/value latent (the RMSNorms' inputs) and their normed copies
  // (the up projections' inputs), and the shared rotary key.
  d.latents = s.mla.enabled() ? 2.0 * s.mla.q_lora_rank + 2.0 * s.mla.kv_lora_rank + s.mla.qk_rope_dim : 0.0;
  d.tokens = o.samples * o.seq / (d.u * d.cp);
  d.rep = st.sp ? 1.0 / d.t : 1.0;
  d.blocks = s.kind == LayerKind::kCrossDecoder ? 2 : 1;
  return d;
}

}  // namespace

Bytes layer_activation_bytes(const LayerShape& s, const LayerStrategy& st, const ActivationOptions& o) {
  const auto [t, u, cp, e, h, q, kv, v, ctx, latents, tokens, rep, blocks] = layer_dims(s, st, o);
  const double mask = o.dropout ? 1.0 : 0.0;

  if (st.recompute == Recompute::kFull) return Bytes(e * tokens * h * rep);
  const double heads_local = static_cast<double>(s.heads) / (t * u);
  const double lse = 4.0 * o.samples * heads_local * (o.seq / cp);  // fp32 log-sum-exp per query and head

  if (st.recompute == Recompute::kSelective && o.alternate_matmuls) {
    // The layer input, the outputs of the 1st, 3rd, ... matmul and of each attention kernel (with
    // its log-sum-exp); everything else is recomputed in backward.
    const std::vector<LayerMatmul> mm = layer_matmuls(s, t);
    double kept = h * rep;
    for (size_t i = 0; i < mm.size(); i += 2) kept += mm[i].n;
    if (st.sp && t > 1) kept += (blocks + 1) * h / t;  // the policy also keeps reduce-scatter outputs
    return Bytes(e * tokens * (kept + blocks * ctx / t) + blocks * lse);
  }

  // Attention block: norm input and output, Q, K, V, the output projection's input, the
  // post-attention dropout mask; without flash attention the s x s softmax output, its dropout
  // mask and dropped output (per local head: heads / (t*u), queries s/cp, keys s).
  const double scores = o.samples * heads_local * (o.seq / cp) * o.seq;
  const double g = o.fp8_gemm_inputs ? 1.0 : e;  // bytes of a saved GEMM input element
  // A column-parallel linear's saved input: the shard, or the gathered sequence (sp_gathered_inputs).
  const double gemm_in = o.sp_gathered_inputs ? 1.0 : rep;
  double attn = e * tokens * h * rep + g * tokens * h * gemm_in + e * tokens * (q + kv + v) / t + e * tokens * ctx / t +
                (o.fp8_gemm_inputs ? g * tokens * ctx / t : 0.0) + mask * tokens * h * rep + e * tokens * latents;
  const bool keep_core = st.recompute == Recompute::kNone;
  if (o.flash_attention) {
    attn += lse;
    if (o.eager_elementwise) {
      // the kernel keeps its own heads-first output besides the projection's contiguous input, and
      // K, V repeated to every query head (GQA)
      attn += (o.eager_attention_copy ? e * tokens * ctx / t : 0.0) + (kv < q ? 2 * e * tokens * (q - kv) / t : 0.0);
    }
  } else if (keep_core && cp > 1) {
    // Ring attention (context parallelism) never holds the s x s scores beyond one block: it keeps
    // what FlashAttention's backward reads, the log-sum-exp and its output, which weft's CPU ring
    // (runtime/ops.cc RingAttention) computes in fp32: the projection's input is that tensor
    // itself in fp32 without Ulysses, a second copy otherwise.
    attn += lse + (e != 4.0 || u > 1 ? 4.0 * tokens * ctx / t : 0.0);
  } else if (keep_core) {
    attn += (e + mask + (o.dropout ? e : 0.0)) * scores;
  }
  if (o.eager_elementwise && o.rms_norm) attn += o.eager_norm_bytes * tokens * h * rep;  // the norm's own copy
  // Per-head query / key norms (Qwen3): their inputs, the projections' outputs, beside the Q and K
  // they feed RoPE (and eagerly the norms' own copies).
  if (s.qk_norm)
    attn += (e + (o.eager_elementwise && o.rms_norm ? o.eager_norm_bytes : 0.0)) * tokens * (q + kv) / t;
  if (s.kind == LayerKind::kCrossDecoder) attn *= 2;  // self- and cross-attention blocks

  // FFN block: norm input, FC1 input, activation inputs, the down projection's input, dropout mask.
  double ffn = e * tokens * h * rep + g * tokens * h * gemm_in + mask * tokens * h * rep;
  if (o.eager_elementwise && o.rms_norm) ffn += o.eager_norm_bytes * tokens * h * rep;
  // Per FFN element: the activation's inputs (gate and up, or the GELU input), the down
  // projection's input; eager SwiGLU also keeps the SiLU output for the product's backward.
  const double inner = (s.ffn_kind == FfnKind::kSwiglu ? (o.eager_elementwise ? 3.0 : 2.0) : 1.0) * e + g;
  if (s.moe.enabled()) {
    // The routed copies a rank's experts take (etp / tp of its tensor group's tokens' copies, as
    // layer_compute) at 1 / etp of the experts' width: the gathered copies themselves, the experts'
    // inner tensors; with ep 1 and etp tp (tokens kept in place) the copies of the tp group's tokens.
    const double et = std::max(1, st.expert_tp());
    const double routed = tokens * s.moe.top_k * et / t * o.expert_rows;
    const double ef = static_cast<double>(s.moe.expert_ffn);
    ffn += 4.0 * tokens * s.moe.experts * rep;            // fp32 router logits
    ffn += e * routed * h;                                 // dispatched token copies
    ffn += inner * routed * ef / et;
    ffn += inner * tokens * s.moe.shared_experts * ef / t;
    // A gate on the shared experts (Qwen2-MoE): the product keeps their output (the layer's output
    // layout) for the gate's gradient.
    if (s.moe.shared_gate) ffn += e * tokens * h * rep;
  } else {
    ffn += inner * tokens * static_cast<double>(s.ffn) / t;
  }
  return Bytes(attn + ffn);
}

Bytes ring_attention_transient_bytes(const LayerShape& s, const LayerStrategy& st, const ActivationOptions& o) {
  const LayerDims d = layer_dims(s, st, o);
  const double t = d.t, u = d.u, cp = d.cp, q = d.q, kv = d.kv, v = d.v, tokens = d.tokens, blocks = d.blocks;
  if (cp <= 1) return Bytes(0);
  // After Ulysses' all-to-all a rank holds its cp share of every token of its heads: the same
  // element counts as tokens x width / t. In fp32: k, v, dk, dv and the next step's copy of the
  // four in flight, the query gradient, and without flash attention four score-sized blocks
  // (scores, probabilities and their gradients) of one chunk pair (chunks of s / 2cp).
  double bytes = 4.0 * (4.0 * tokens * (kv + v) / t + tokens * q / t);
  if (!o.flash_attention) {
    const double chunk = o.seq / (2.0 * cp);
    bytes += 4.0 * 4.0 * o.samples * (static_cast<double>(s.heads) / (t * u)) * chunk * chunk;
  }
  return Bytes(blocks * bytes);
}

Bytes layer_backward_transient_bytes(const LayerShape& s, const LayerStrategy& st, const ActivationOptions& o,
                                     bool weight_grad_copy) {
  const LayerDims d = layer_dims(s, st, o);
  // The down projection's rows and width: every token over the FFN, or top_k routed copies over an
  // expert's.
  double rows = d.tokens, width = static_cast<double>(s.ffn);
  double split = d.t;  // the FFN's tensor split
  if (s.moe.enabled()) {
    split = std::max(1, st.expert_tp());
    rows = d.tokens * s.moe.top_k * split / d.t * o.expert_rows, width = static_cast<double>(s.moe.expert_ffn);
  }
  const double output_grad = d.tokens * d.h;  // gathered under SP: the whole local sequence
  const double input_grad = rows * width / split;
  const double weight_grad = weight_grad_copy ? d.h * width / split : 0.0;
  return Bytes(d.e * (output_grad + input_grad + weight_grad));
}

double micro_batches_in_flight(const TrainSettings& t, int stage) {
  const int m = std::max(1, t.schedule_micro_batches());
  const int pp = std::max(1, t.pp);
  const int g = stage_group(t, stage);
  switch (t.schedule) {
    case Schedule::kZbV:
      // At the group's peak, the end of its warm-up: 2 pp - 1 - g micro-batches of chunk 0 and g + 1
      // of chunk 1 (ScheduleZBVZeroBubble's order, weft/plan/pipeline_order.h), each capped at m.
      return stage_chunk(t.schedule, pp, stage) == 0 ? std::min(m, 2 * pp - 1 - g) : std::min(m, g + 1);
    case Schedule::kGpipe: return m;
    case Schedule::k1F1B:
    case Schedule::kZbH1: return std::min(m, pp - g);
    case Schedule::kInterleaved: {
      const int v = std::max(1, t.vp);
      if (v == 1) return std::min(m, pp - g);
      const int chunks = std::min(m * v, 2 * (pp - g - 1) + (v - 1) * pp + 1);
      return static_cast<double>(chunks) / v;
    }
  }
  return std::min(m, pp - g);
}

Bytes weight_grad_state_bytes(const LayerShape& s, const LayerStrategy& st, const ActivationOptions& o,
                              bool with_inputs) {
  const auto [t, u, cp, e, h, q, kv, v, ctx, latents, tokens, rep, blocks] = layer_dims(s, st, o);
  const double in_mats = s.ffn_kind == FfnKind::kSwiglu ? 2 : 1;
  const double in = with_inputs ? 1.0 : 0.0;  // the linears' inputs (and the norms')
  // Attention: QKV input and output gradient, output projection input and output gradient.
  // MLA: its latents and their gradients, whole.
  const double attn = blocks * (in * h * rep + (q + kv + v) / t + in * ctx / t + h * rep + (1 + in) * latents / 2);
  // A dense FFN of width ff over n token rows: its input, the gate/up output gradients, the down
  // projection's input and output gradient.
  auto ffn = [&](double rows, double ff) { return rows * (in * h * rep + in_mats * ff / t + in * ff / t + h * rep); };
  // weft's split backward keeps every node that leads to a weight, the norms' scales too: each norm
  // (one before each attention block, one before the FFN) keeps its input and output gradient.
  const double norms = (1 + in) * (blocks + 1) * h * rep;
  double per_layer = tokens * (attn + norms);
  if (s.moe.enabled()) {
    const double ef = static_cast<double>(s.moe.expert_ffn);
    per_layer += tokens * (in * h * rep + s.moe.experts * rep);                  // router
    // routed experts: the copies a rank's experts take, gathered (no sequence split), 1 / etp wide
    const double et = std::max(1, st.expert_tp());
    per_layer += tokens * s.moe.top_k * et / t * o.expert_rows * (in * h + in_mats * ef / et + in * ef / et + h);
    if (s.moe.shared_experts > 0) per_layer += ffn(tokens, s.moe.shared_experts * ef);
  } else {
    per_layer += ffn(tokens, static_cast<double>(s.ffn));
  }
  return Bytes(e * per_layer);
}

bool weight_grad_inputs_held(const TrainSettings& t) { return t.schedule != Schedule::kZbV; }

double pending_weight_grads(const TrainSettings& t, int stage) {
  const int m = std::max(1, t.schedule_micro_batches());
  // ZB-V's steady state runs each W right after its B: one chunk-micro-batch's W state per group
  // (its output gradients, weight_grad_inputs_held), counted half on each of its two chunks.
  if (t.schedule == Schedule::kZbV) return 0.5;
  if (t.schedule != Schedule::kZbH1) return 0;
  return std::min(stage_group(t, stage), m - 1);
}

}  // namespace weft
