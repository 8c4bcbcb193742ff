// Parameter and FLOP counts from shapes (see counts.h for the conventions).
//
// Parameters per layer, with q = heads * head_dim and k = kv_heads * head_dim:
//   self-attention   h*q (Q) + 2*h*k (K, V) + q*h (O), biases q + 2k + h, attention sinks one per head;
//                    multi-head latent attention (DeepSeek-V2/V3) with query latent r_q, key/value
//                    latent r_kv, rotary dims d_r and value dims d_v: h*r_q + r_q + r_q*q (queries
//                    through their normed latent; h*q without one) + h*(r_kv + d_r) + r_kv (the
//                    key/value latent, the shared rotary key, the latent's norm) +
//                    r_kv*heads*(head_dim - d_r + d_v) (keys' other dims and values) + heads*d_v*h (O)
//   cross-attention  the same again (T5 decoder: queries from the decoder, keys/values from the
//                    encoder output, which has the same width)
//   FFN gelu         2*h*f, biases f + h;  swiglu 3*h*f, biases 2f + h
//   MoE              (experts + shared_experts) FFNs of size expert_ffn + a router h*experts
//   norms            2 per layer (3 with cross-attention), each h weights, plus h biases when the
//                    layer has biases (LayerNorm in GPT-2/GPT-3/BERT; RMSNorm and T5's norm have none)
// Forward FLOPs for T = batch*seq tokens (one multiply-add = 2 FLOPs):
//   qkv         2*T*h*(q + 2k); MLA its down and up projections (attention_projection_macs)
//   attn_scores 2*batch*seq*seq*q for Q.K^T plus 2*batch*seq*seq*ctx for scores.V (ctx = q without
//               MLA, heads*d_v with; no causal discount); a sliding window w < seq: seq*w key
//               positions per query row instead of seq
//   attn_out    2*T*ctx*h
//   ffn         2*T*h*f * (2 for gelu, 3 for swiglu), times (top_k + shared) experts for MoE
//   router      2*T*h*experts
// Biases, norms, softmax and activations are elementwise and left out of the FLOP count, as in
// Narayanan et al. 2021 (Megatron-LM, appendix) and Kaplan et al. 2020 (table 1).
#include "weft/spec/counts.h"

namespace weft {

namespace {

double d(std::int64_t x) { return static_cast<double>(x); }


int attention_blocks(const LayerShape& s) { return s.kind == LayerKind::kCrossDecoder ? 2 : 1; }
int norms_per_layer(const LayerShape& s) { return s.kind == LayerKind::kCrossDecoder ? 3 : 2; }

// Query / key norm weights: one head_dim vector each (Qwen3), or a weight per query and key element
// (OLMoE's norms over all heads).
double qk_norm_params(const LayerShape& s) {
  if (!s.qk_norm) return 0;
  return s.qk_norm_full ? d(s.heads) * s.head_dim + d(s.kv_heads) * s.head_dim : 2.0 * s.head_dim;
}

// Parameters of one FFN of width f (a dense FFN or one expert).
double ffn_params(const LayerShape& s, std::int64_t f) {
  const double h = d(s.hidden), ff = d(f);
  if (s.ffn_kind == FfnKind::kSwiglu) return 3 * h * ff + (s.bias ? 2 * ff + h : 0);
  return 2 * h * ff + (s.bias ? ff + h : 0);
}

// Forward FLOPs of one FFN of width f over `tokens` tokens.
double ffn_flops(const LayerShape& s, std::int64_t f, double tokens) {
  const double mats = s.ffn_kind == FfnKind::kSwiglu ? 3 : 2;
  return 2 * tokens * d(s.hidden) * d(f) * mats;
}

double final_norms(const ModelSpec& m) {
  // One final norm per stack: an encoder-decoder model has one after each.
  bool enc = false, dec = false;
  for (const auto& g : m.groups) {
    if (g.shape.kind == LayerKind::kEncoder) enc = true; else dec = true;
  }
  const int stacks = (enc && dec) ? 2 : 1;
  const double per = d(m.hidden) * (m.norm == NormKind::kLayerNorm ? 2 : 1);
  return stacks * per;
}

}  // namespace

AttentionWidths attention_widths(const LayerShape& s) {
  AttentionWidths w;
  w.q = static_cast<double>(s.heads) * s.head_dim;
  if (!s.mla.enabled()) {
    w.k = w.v = static_cast<double>(s.kv_heads) * s.head_dim;
    w.ctx = w.q;
    return w;
  }
  w.k = w.q;
  w.v = w.ctx = static_cast<double>(s.heads) * s.mla.v_head_dim;
  w.q_latent = s.mla.q_lora_rank;
  w.kv_latent = static_cast<double>(s.mla.kv_lora_rank) + s.mla.qk_rope_dim;
  return w;
}

double attention_replicated_params(const LayerShape& s) {
  if (!s.mla.enabled()) return 0;
  const double h = d(s.hidden), rq = s.mla.q_lora_rank;
  return (rq > 0 ? h * rq + rq : 0.0) + h * (s.mla.kv_lora_rank + s.mla.qk_rope_dim) + s.mla.kv_lora_rank;
}

double attention_projection_macs(const LayerShape& s) {
  const AttentionWidths w = attention_widths(s);
  const double h = d(s.hidden);
  if (!s.mla.enabled()) return h * (w.q + w.k + w.v);
  const double rq = s.mla.q_lora_rank, rkv = s.mla.kv_lora_rank;
  const double nope = static_cast<double>(s.heads) * (s.head_dim - s.mla.qk_rope_dim);
  return (rq > 0 ? h * rq + rq * w.q : h * w.q) + h * w.kv_latent + rkv * (nope + w.v);
}

LayerParams layer_params(const LayerShape& s) {
  LayerParams p;
  const double h = d(s.hidden);
  const AttentionWidths w = attention_widths(s);
  const double q = w.q, k = w.k;
  // Latent norms: one weight per latent dim (RMSNorm).
  const double latent_norms = s.mla.enabled() ? (s.mla.q_lora_rank > 0 ? s.mla.q_lora_rank : 0) + s.mla.kv_lora_rank
                                              : 0.0;
  const double one_attention = attention_projection_macs(s) + latent_norms + w.ctx * h +
                               (s.bias ? q + 2 * k + h : s.qkv_bias ? q + 2 * k : 0) + (s.sinks ? s.heads : 0);
  p.attention = attention_blocks(s) * one_attention;
  if (s.moe.enabled()) {
    p.ffn = (s.moe.experts + s.moe.shared_experts) * ffn_params(s, s.moe.expert_ffn) +
            h * (s.moe.experts + (s.moe.shared_gate ? 1 : 0));
  } else {
    p.ffn = ffn_params(s, s.ffn);
  }
  p.norms = norms_per_layer(s) * h * (s.bias ? 2 : 1) + qk_norm_params(s);
  return p;
}

double expert_params(const LayerShape& s) {
  return s.moe.enabled() ? ffn_params(s, s.moe.expert_ffn) : 0.0;
}

double embedding_params(const ModelSpec& m) {
  double p = d(m.vocab) * d(m.hidden);
  if (m.position == PositionKind::kLearned) p += static_cast<double>(m.max_seq) * d(m.hidden);
  return p + final_norms(m);
}

double lm_head_params(const ModelSpec& m) {
  return m.tied_embeddings ? 0.0 : d(m.vocab) * d(m.hidden);
}

double total_params(const ModelSpec& m) {
  double p = embedding_params(m) + lm_head_params(m);
  for (const auto& g : m.groups) p += g.count * layer_params(g.shape).total();
  return p;
}

double active_params(const ModelSpec& m) {
  double p = embedding_params(m) + lm_head_params(m);
  for (const auto& g : m.groups) {
    const LayerShape& s = g.shape;
    const LayerParams lp = layer_params(s);
    double layer = lp.total();
    if (s.moe.enabled()) {
      // Only top_k routed experts run per token; the shared experts and the router always do.
      layer -= (s.moe.experts - s.moe.top_k) * expert_params(s);
    }
    p += g.count * layer;
  }
  return p;
}

LayerFlops layer_forward_flops(const LayerShape& s, double batch, double seq) {
  LayerFlops f;
  const double tokens = batch * seq;
  const double h = d(s.hidden);
  const AttentionWidths w = attention_widths(s);
  const int blocks = attention_blocks(s);
  f.qkv = blocks * 2 * tokens * attention_projection_macs(s);
  const double keys = s.window > 0 && s.window < seq ? s.window : seq;
  f.attn_scores = blocks * (2 * batch * seq * keys * w.q + 2 * batch * seq * keys * w.ctx);
  f.attn_out = blocks * 2 * tokens * w.ctx * h;
  if (s.moe.enabled()) {
    f.ffn = (s.moe.top_k + s.moe.shared_experts) * ffn_flops(s, s.moe.expert_ffn, tokens);
    f.router = 2 * tokens * h * (s.moe.experts + (s.moe.shared_gate ? 1 : 0));  // and Qwen2-MoE's shared gate
  } else {
    f.ffn = ffn_flops(s, s.ffn, tokens);
  }
  return f;
}

double lm_head_forward_flops(const ModelSpec& m, double batch, double seq) {
  return 2 * batch * seq * d(m.hidden) * d(m.vocab);
}

double model_step_flops(const ModelSpec& m, double global_batch, double seq) {
  double fwd = lm_head_forward_flops(m, global_batch, seq);
  for (const auto& g : m.groups) fwd += g.count * layer_forward_flops(g.shape, global_batch, seq).total();
  return 3 * fwd;
}

}  // namespace weft
