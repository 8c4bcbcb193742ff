// ModelSpec: the shape of a transformer, as a list of layer groups. A plain value type with a JSON
// pair (docs/model-spec.md). Parameter and FLOP counts live in weft/spec/counts.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"

namespace weft {

// decoder: causal self-attention + FFN (GPT, Llama). encoder: bidirectional self-attention + FFN
// (BERT, T5 encoder). cross_decoder: causal self-attention + cross-attention + FFN (T5 decoder).
enum class LayerKind { kDecoder, kEncoder, kCrossDecoder };
// gelu: two matrices h->f->h with an elementwise activation (GELU or ReLU). swiglu: gated, three
// matrices (gate, up, down).
enum class FfnKind { kGelu, kSwiglu };
enum class NormKind { kLayerNorm, kRmsNorm };
enum class PositionKind { kLearned, kRope, kRelative };

// How a MoE router turns its logits into expert scores: softmax over all experts (Mixtral,
// Qwen-MoE, OLMoE, DeepSeek-V2) or an independent sigmoid per expert (DeepSeek-V3).
enum class RouterScore { kSoftmax, kSigmoid };

struct MoeSpec {
  int experts = 0;             // routed experts; 0 means a dense FFN
  int top_k = 0;               // experts each token is routed to
  std::int64_t expert_ffn = 0; // FFN size of one expert
  int shared_experts = 0;      // always-on experts of size expert_ffn (DeepSeek/Qwen-MoE style)
  // The router (what the runtime computes; the cost model reads none of these): scores, the top_k
  // highest chosen, their weights renormalised to sum to 1 (norm_topk: Mixtral, Qwen3-MoE,
  // DeepSeek-V3) or used as they are (Qwen2-MoE, OLMoE), then scaled by routed_scale (DeepSeek-V3's
  // routed_scaling_factor). aux_loss_coef: weight of the load-balancing loss (Switch Transformer /
  // GShard: experts * sum_e f_e * P_e, f_e the fraction of routed copies sent to expert e, P_e its
  // mean score), added to the training objective once per MoE layer; 0: none.
  RouterScore score = RouterScore::kSoftmax;
  bool norm_topk = true;
  double routed_scale = 1.0;
  double aux_loss_coef = 0.0;
  // The shared experts' output scaled per token by sigmoid(hidden . w), w one learned vector
  // (Qwen2-MoE's mlp.shared_expert_gate; Megatron-LM's --moe-shared-expert-gate).
  bool shared_gate = false;
  // Group-limited routing (DeepSeek-V2/V3's n_group and topk_group; Megatron-LM's
  // --moe-router-num-groups and --moe-router-group-topk): the experts in `groups` equal groups of
  // consecutive experts, each group scored per token by the sum of its group_score_top highest
  // scores (DeepSeek-V3 and Megatron-LM: top_k / group_top_k; DeepSeek-V2's group_limited_greedy: 1,
  // the highest), a token's top_k chosen from its group_top_k best groups only. groups 1: none.
  int groups = 1;
  int group_top_k = 1;
  int group_score_top = 1;
  // Auxiliary-loss-free balancing (DeepSeek-V3 section 2.1.2, topk_method noaux_tc; Megatron-LM's
  // --moe-router-enable-expert-bias): a bias per expert added to the sigmoid scores for choosing
  // the experts (and their groups), not for the gate weights; after every step each expert's bias
  // moves by bias_rate towards balance, +bias_rate where the expert took fewer than the mean
  // tokens of the step, -bias_rate where more (Megatron's --moe-router-bias-update-rate).
  bool expert_bias = false;
  double bias_rate = 1e-3;
  bool group_limited() const { return groups > 1 && group_top_k < groups; }
  bool enabled() const { return experts > 0; }
  bool operator==(const MoeSpec&) const = default;
};

// Multi-head latent attention (DeepSeek-V2/V3): keys and values are projected up per head from
// one latent of kv_lora_rank dims per token (plus qk_rope_dim decoupled rotary dims shared by
// every head), queries from a latent of q_lora_rank dims (0: projected directly from the hidden
// state, as DeepSeek-V2-Lite). A head's query and key have head_dim dims, qk_rope_dim of them
// rotary; its value v_head_dim. The down projections and the latents' norms are whole on every
// tensor-parallel rank; the up projections split by heads.
struct MlaSpec {
  int q_lora_rank = 0;
  int kv_lora_rank = 0;        // > 0: multi-head latent attention
  int qk_rope_dim = 0;
  int v_head_dim = 0;
  bool enabled() const { return kv_lora_rank > 0; }
  bool operator==(const MlaSpec&) const = default;
};

struct LayerShape {
  LayerKind kind = LayerKind::kDecoder;
  std::int64_t hidden = 0;
  int heads = 0;
  int kv_heads = 0;            // == heads for MHA, < heads for GQA, 1 for MQA
  int head_dim = 0;            // usually hidden / heads
  std::int64_t ffn = 0;        // dense FFN size (ignored when moe.enabled())
  FfnKind ffn_kind = FfnKind::kGelu;
  bool bias = false;           // biases on linear layers (GPT-2, BERT)
  bool qkv_bias = false;       // biases on the query, key and value projections only (Qwen2); implied by bias
  // Sliding-window attention: each token attends to itself and the window - 1 tokens before it
  // (GPT-OSS's banded layers, Mistral 7B v0.1); 0: the whole causal context.
  int window = 0;
  bool sinks = false;          // a learned attention-sink logit per head (GPT-OSS): one more softmax column
  MlaSpec mla;                 // multi-head latent attention (kv_heads == heads)
  MoeSpec moe;
  // RMSNorm of each head's query and key over its head_dim, before RoPE, one weight vector each
  // shared by the heads (Qwen3 and Qwen3-MoE: self_attn.q_norm / k_norm).
  bool qk_norm = false;
  // With qk_norm: the norms span all heads at once instead, the queries over heads x head_dim and
  // the keys over kv_heads x head_dim, with a weight per element (OLMoE's q_norm / k_norm, applied
  // to the projections' outputs before RoPE). JSON "qk_norm": "full".
  bool qk_norm_full = false;
  bool operator==(const LayerShape&) const = default;
};

struct LayerGroup {
  std::string name;            // e.g. "decoder", "encoder"
  int count = 0;
  LayerShape shape;
  bool operator==(const LayerGroup&) const = default;
};

// The RoPE base (theta) when a model or config names none: the value of the RoPE paper, of
// Hugging Face's Llama-family configs and of Megatron-LM's --rotary-base.
inline constexpr double kDefaultRopeTheta = 10000;
// The normalisation epsilon when a model names none: GPT-2's layer_norm_epsilon and Llama 2's
// rms_norm_eps (Hugging Face configs), Megatron-LM's --norm-epsilon default.
inline constexpr double kDefaultNormEps = 1e-5;

struct ModelSpec {
  std::string name;
  std::int64_t vocab = 0;
  std::int64_t hidden = 0;     // embedding width (== every group's hidden in the presets)
  bool tied_embeddings = false;
  NormKind norm = NormKind::kLayerNorm;
  PositionKind position = PositionKind::kLearned;
  int max_seq = 0;             // trained context length (the learned position table size for learned
                               // positions, where it bounds seq); 0 = unknown
  double rope_theta = kDefaultRopeTheta;  // RoPE base (Hugging Face rope_theta); read with rope positions
  double norm_eps = kDefaultNormEps;      // LayerNorm / RMSNorm epsilon (rms_norm_eps, layer_norm_epsilon)
  std::vector<LayerGroup> groups;

  int num_layers() const;
  // Whether any layer routes its tokens to experts.
  bool has_moe() const;
  // The shape of global layer index i (0-based, groups in order).
  const LayerShape& layer(int i) const;
  // The group index of global layer i.
  int group_of(int i) const;
  bool operator==(const ModelSpec&) const = default;
};

const char* to_string(LayerKind k);
const char* to_string(FfnKind k);
const char* to_string(NormKind k);
const char* to_string(PositionKind k);
const char* to_string(RouterScore k);

// Checks shapes: positive sizes, heads divisible by kv_heads, top_k <= experts, ... Messages name
// the field and the numbers.
Status validate(const ModelSpec& m);

Json to_json(const ModelSpec& m);
// Parses weft's own model format (docs/model-spec.md); `path` names the source in errors.
Result<ModelSpec> model_from_json(const Json& j, const std::string& path = "model");

}  // namespace weft
