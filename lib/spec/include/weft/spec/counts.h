// Parameter and FLOP counts from shapes. Conventions (docs/cost-model.md §1): one multiply-add = 2
// FLOPs; forward only; attention score/context matmuls counted in full (causal masking is not
// subtracted, as in Megatron's and vTrain's MFU accounting).
#pragma once

#include <cstdint>

#include "weft/spec/model.h"

namespace weft {

struct LayerParams {
  double attention = 0;  // Q, K, V, O projections (+ cross-attention for cross_decoder), biases
  double ffn = 0;        // dense FFN, or all experts + shared experts + router for MoE
  double norms = 0;
  double total() const { return attention + ffn + norms; }
};

// The widths of one attention block, unsplit, per token: queries, keys, values, the context the
// output projection reads; multi-head latent attention's query latent and key/value latent (with
// its shared rotary dims); 0 without MLA. Without MLA keys and values are kv_heads * head_dim and
// the context is the queries' width; with MLA keys are heads * head_dim, values and the context
// heads * v_head_dim.
struct AttentionWidths {
  double q = 0, k = 0, v = 0, ctx = 0;
  double q_latent = 0, kv_latent = 0;
};
AttentionWidths attention_widths(const LayerShape& s);
// Parameters of one attention block whole on every tensor-parallel rank: MLA's down projections
// and its latents' norms (0 without MLA).
double attention_replicated_params(const LayerShape& s);
// Forward multiply-adds per token of one attention block's projections (queries, keys, values;
// the output projection apart): h * (q + k + v) without MLA; MLA's down and up projections.
double attention_projection_macs(const LayerShape& s);

LayerParams layer_params(const LayerShape& s);
// Parameters of one expert (its FFN only); 0 for dense layers.
double expert_params(const LayerShape& s);
// Embedding table (+ learned positions); the LM head when untied; the final norm.
double embedding_params(const ModelSpec& m);
double lm_head_params(const ModelSpec& m);  // 0 when tied
double total_params(const ModelSpec& m);
// Parameters one token touches (MoE: top_k + shared experts instead of all experts).
double active_params(const ModelSpec& m);

struct LayerFlops {
  double qkv = 0, attn_scores = 0, attn_out = 0, ffn = 0, router = 0;
  double total() const { return qkv + attn_scores + attn_out + ffn + router; }
};
// Forward FLOPs of one layer for `tokens` = batch * seq tokens at sequence length seq.
LayerFlops layer_forward_flops(const LayerShape& s, double batch, double seq);
// Forward FLOPs of the LM head (logits) for batch*seq tokens.
double lm_head_forward_flops(const ModelSpec& m, double batch, double seq);
// Model FLOPs of one training step (forward + backward = 3x forward, no recompute), for MFU.
double model_step_flops(const ModelSpec& m, double global_batch, double seq);

}  // namespace weft
