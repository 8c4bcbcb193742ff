// Hugging Face config.json -> ModelSpec. The key names per family follow the transformers
// configuration classes (LlamaConfig, MistralConfig, Qwen2Config, Qwen2MoeConfig, MixtralConfig,
// GPT2Config, BertConfig, T5Config); the mapping is tabulated in docs/model-spec.md.
#include "weft/spec/hf_config.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace weft {

namespace {

// Families weft reads. kGeneric is an unknown model_type that carries the Llama-style keys.
enum class Family {
  kLlama, kMistral, kQwen2, kQwen2Moe, kQwen3, kQwen3Moe, kOlmoe, kMixtral, kDeepseek, kGptOss, kGpt2, kBert, kT5, kGeneric
};

const char* kKnownTypes =
    "llama, mistral, qwen2, qwen2_moe, qwen3, qwen3_moe, olmoe, mixtral, deepseek_v2, deepseek_v3, gpt_oss, gpt2, bert, "
    "roberta, t5, mt5";

void warn(const std::string& msg) { std::fprintf(stderr, "weft: warning: %s\n", msg.c_str()); }

// HF configs write "key": null for "use the default"; treat null like an absent key.
bool present(const JsonObj& o, std::string_view key) {
  return o.has(key) && !o.json().at(std::string(key)).is_null();
}

std::optional<long long> opt_int(const JsonObj& o, std::string_view key) {
  if (!present(o, key)) return std::nullopt;
  return o.integer(key);
}

long long positive(const JsonObj& o, std::string_view key) {
  const long long v = o.integer(key);
  if (v <= 0) o.fail(key, "must be positive, got " + std::to_string(v));
  return v;
}

long long positive_or(const JsonObj& o, std::string_view key, long long dflt) {
  return present(o, key) ? positive(o, key) : dflt;
}

bool bool_or(const JsonObj& o, std::string_view key, bool dflt) {
  return present(o, key) ? o.boolean(key) : dflt;
}

// The normalisation epsilon under the first of `keys` the config has (default kDefaultNormEps).
double norm_eps(const JsonObj& o, std::initializer_list<std::string_view> keys) {
  for (std::string_view k : keys)
    if (present(o, k)) {
      const double e = o.number(k);
      if (!(e > 0) || e >= 1) o.fail(k, "must be in (0, 1), got " + std::to_string(e));
      return e;
    }
  return kDefaultNormEps;
}

double number_or(const JsonObj& o, std::string_view key, double dflt) { return present(o, key) ? o.number(key) : dflt; }

std::string str_or(const JsonObj& o, std::string_view key, const std::string& dflt) {
  return present(o, key) ? o.str(key) : dflt;
}

std::optional<Family> family_of(const std::string& t) {
  if (t == "llama") return Family::kLlama;
  if (t == "mistral") return Family::kMistral;
  if (t == "qwen2") return Family::kQwen2;
  if (t == "qwen2_moe") return Family::kQwen2Moe;
  if (t == "qwen3") return Family::kQwen3;
  if (t == "qwen3_moe") return Family::kQwen3Moe;
  if (t == "olmoe") return Family::kOlmoe;
  if (t == "mixtral") return Family::kMixtral;
  if (t == "deepseek_v2" || t == "deepseek_v3") return Family::kDeepseek;
  if (t == "gpt_oss") return Family::kGptOss;
  if (t == "gpt2") return Family::kGpt2;
  if (t == "bert" || t == "roberta") return Family::kBert;
  if (t == "t5" || t == "mt5") return Family::kT5;
  return std::nullopt;
}

// "LlamaForCausalLM" -> "llama" for configs that name only the architecture.
std::string type_from_architecture(const std::string& a) {
  const std::pair<const char*, const char*> prefixes[] = {
      {"Qwen3Moe", "qwen3_moe"}, {"Qwen3", "qwen3"}, {"Olmoe", "olmoe"},
      {"Qwen2Moe", "qwen2_moe"}, {"Qwen2", "qwen2"},     {"Llama", "llama"},   {"Mistral", "mistral"},
      {"Mixtral", "mixtral"},    {"DeepseekV3", "deepseek_v3"}, {"DeepseekV2", "deepseek_v2"}, {"GptOss", "gpt_oss"},
      {"GPT2", "gpt2"},          {"Bert", "bert"},       {"Roberta", "roberta"}, {"MT5", "mt5"},
      {"T5", "t5"}};
  for (const auto& [p, t] : prefixes) {
    if (a.rfind(p, 0) == 0) return t;
  }
  return a;
}

std::string model_name(const JsonObj& o, const std::string& path, const std::string& type) {
  std::string n = str_or(o, "_name_or_path", "");
  if (!n.empty()) {
    while (!n.empty() && n.back() == '/') n.pop_back();
    const auto slash = n.find_last_of('/');
    if (slash != std::string::npos) n = n.substr(slash + 1);
    if (!n.empty()) return n;
  }
  // ".../Llama-2-7b-hf/config.json" -> "Llama-2-7b-hf"; ".../mistral.config.json" -> "mistral".
  const auto slash = path.find_last_of('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base == "config.json") {
    if (slash != std::string::npos && slash > 0) {
      const std::string dir = path.substr(0, slash);
      const auto s2 = dir.find_last_of('/');
      const std::string last = s2 == std::string::npos ? dir : dir.substr(s2 + 1);
      if (!last.empty() && last != "." && last != "..") return last;
    }
    return type;
  }
  std::string stem = base;
  for (const char* suffix : {".json", ".config"}) {
    const std::string sfx = suffix;
    if (stem.size() > sfx.size() && stem.compare(stem.size() - sfx.size(), sfx.size(), sfx) == 0)
      stem.resize(stem.size() - sfx.size());
  }
  return stem.empty() ? type : stem;
}

int head_dim_of(const JsonObj& o, std::int64_t hidden, int heads, std::string_view hidden_key,
                std::string_view heads_key) {
  if (auto hd = opt_int(o, "head_dim")) {
    if (*hd <= 0) o.fail("head_dim", "must be positive, got " + std::to_string(*hd));
    return static_cast<int>(*hd);
  }
  if (hidden % heads != 0)
    o.fail(hidden_key, std::to_string(hidden) + " is not divisible by " + std::string(heads_key) + " " +
                           std::to_string(heads) + " (and no head_dim is given)");
  return static_cast<int>(hidden / heads);
}

// The RoPE base: `rope_theta`, or the `rope_theta` of a `rope_parameters` object (where newer
// transformers releases write it), else the default.
double rope_theta(const JsonObj& o) {
  double theta = kDefaultRopeTheta;
  if (present(o, "rope_theta")) {
    theta = o.number("rope_theta");
  } else if (present(o, "rope_parameters") && o.json().at("rope_parameters").is_object()) {
    const JsonObj rp = o.obj("rope_parameters");
    if (present(rp, "rope_theta")) theta = rp.number("rope_theta");
  }
  if (!(theta > 0)) o.fail("rope_theta", "must be positive, got " + std::to_string(theta));
  return theta;
}

// Splits `layers` into groups of consecutive dense / MoE layers.
void add_layer_runs(ModelSpec& m, int layers, const LayerShape& dense, const LayerShape& moe,
                    const std::vector<bool>& is_moe) {
  int i = 0;
  while (i < layers) {
    int j = i;
    while (j < layers && is_moe[j] == is_moe[i]) ++j;
    LayerGroup g;
    const bool all_same = (i == 0 && j == layers);
    g.name = all_same ? "decoder" : (is_moe[i] ? "decoder_moe" : "decoder_dense");
    g.count = j - i;
    g.shape = is_moe[i] ? moe : dense;
    m.groups.push_back(std::move(g));
    i = j;
  }
}

// GPT-OSS's attention pattern: layer_types[i] "sliding_attention" (a band of sliding_window
// tokens) or "full_attention"; absent, the config class's default: layers 0, 2, 4, ... banded.
// Sets each layer's window and merges runs of equal layers into groups.
void gpt_oss_layers(const JsonObj& o, ModelSpec& m, int layers, const LayerShape& moe) {
  const int window = static_cast<int>(positive(o, "sliding_window"));
  std::vector<int> w(static_cast<size_t>(layers), 0);
  if (present(o, "layer_types")) {
    const std::vector<std::string> types = o.array_of_str("layer_types");
    if (static_cast<int>(types.size()) != layers)
      o.fail("layer_types", std::to_string(types.size()) + " entries for num_hidden_layers " + std::to_string(layers));
    for (int i = 0; i < layers; ++i) {
      if (types[i] == "sliding_attention") w[i] = window;
      else if (types[i] != "full_attention")
        o.fail("layer_types[" + std::to_string(i) + "]", "\"" + types[i] +
                                                             "\" is neither sliding_attention nor full_attention");
    }
  } else {
    for (int i = 0; i < layers; i += 2) w[i] = window;
  }
  for (int i = 0; i < layers;) {
    int j = i;
    while (j < layers && w[j] == w[i]) ++j;
    LayerGroup g;
    g.name = w[i] > 0 ? "decoder_sliding" : "decoder_full";
    g.count = j - i;
    g.shape = moe;
    g.shape.window = w[i];
    m.groups.push_back(std::move(g));
    i = j;
  }
}

// Llama, Mistral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, Mixtral, DeepSeek, GPT-OSS and unknown decoders
// with the same keys.
ModelSpec llama_like(const JsonObj& o, Family fam, const std::string& type) {
  ModelSpec m;
  m.vocab = positive(o, "vocab_size");
  m.hidden = positive(o, "hidden_size");
  const int layers = static_cast<int>(positive(o, "num_hidden_layers"));
  LayerShape s;
  s.kind = LayerKind::kDecoder;
  s.hidden = m.hidden;
  s.heads = static_cast<int>(positive(o, "num_attention_heads"));
  s.kv_heads = static_cast<int>(positive_or(o, "num_key_value_heads", s.heads));
  if (s.heads % s.kv_heads != 0)
    o.fail("num_key_value_heads", std::to_string(s.kv_heads) + " does not divide num_attention_heads " +
                                      std::to_string(s.heads));
  if (present(o, "kv_lora_rank") && present(o, "v_head_dim") && !present(o, "head_dim")) {
    // DeepSeek's latent attention: a placeholder that needs no hidden / heads, set with the
    // latent attention's own dims below.
    s.head_dim = static_cast<int>(positive(o, "v_head_dim"));
  } else {
    s.head_dim = head_dim_of(o, m.hidden, s.heads, "hidden_size", "num_attention_heads");
  }
  // Qwen2's attention always has Q/K/V biases (0.002 % of a 7B model) and no other biases
  // (qkv_bias). Llama-style configs say so with attention_bias / mlp_bias.
  s.bias = bool_or(o, "attention_bias", false) || bool_or(o, "mlp_bias", false);
  s.qkv_bias = !s.bias && (fam == Family::kQwen2 || fam == Family::kQwen2Moe);
  // Qwen3's attention normalises each head's query and key (RMSNorm over head_dim, before RoPE);
  // OLMoE's normalises all heads' queries and all heads' keys at once (q_norm over hidden, k_norm
  // over kv heads x head_dim, on the projections' outputs).
  s.qk_norm = fam == Family::kQwen3 || fam == Family::kQwen3Moe || fam == Family::kOlmoe;
  s.qk_norm_full = fam == Family::kOlmoe;
  const std::string act = str_or(o, "hidden_act", "silu");
  if (fam == Family::kGeneric) {
    s.ffn_kind = (act == "silu" || act == "swish" || act == "swiglu") ? FfnKind::kSwiglu : FfnKind::kGelu;
  } else {
    s.ffn_kind = FfnKind::kSwiglu;  // gated MLP (gate, up, down) in every one of these families
  }
  m.norm = NormKind::kRmsNorm;
  if (fam == Family::kGeneric && present(o, "layer_norm_eps") && !present(o, "rms_norm_eps"))
    m.norm = NormKind::kLayerNorm;
  m.position = PositionKind::kRope;
  m.max_seq = static_cast<int>(opt_int(o, "max_position_embeddings").value_or(0));
  m.rope_theta = rope_theta(o);
  m.norm_eps = norm_eps(o, {"rms_norm_eps", "layer_norm_eps"});
  const bool dflt_tied = fam == Family::kGeneric;  // transformers' PretrainedConfig default
  m.tied_embeddings = bool_or(o, "tie_word_embeddings", dflt_tied);

  LayerShape dense = s;
  LayerShape moe = s;
  std::vector<bool> is_moe(static_cast<size_t>(layers), false);

  if (fam == Family::kMixtral || (fam == Family::kGeneric && present(o, "num_local_experts"))) {
    dense.ffn = positive(o, "intermediate_size");
    moe.moe.experts = static_cast<int>(positive(o, "num_local_experts"));
    moe.moe.top_k = static_cast<int>(positive(o, "num_experts_per_tok"));
    moe.moe.expert_ffn = dense.ffn;
    std::fill(is_moe.begin(), is_moe.end(), true);
  } else if (fam == Family::kGptOss) {
    // GPT-OSS: every layer routes to num_local_experts experts of intermediate_size (with biases:
    // attention_bias), top num_experts_per_tok (older configs: experts_per_token); a learned sink
    // logit per head; banded and full attention layers (gpt_oss_layers). Its YaRN rope scaling and
    // SwiGLU clamp (swiglu_limit) change no shape or FLOP count; its router's bias (experts
    // values) and its RMSNorms' lack of biases (bias adds 2 x hidden) differ from `bias` by a few
    // thousand parameters a layer (1e-6 of the model).
    dense.ffn = positive(o, "intermediate_size");
    moe.moe.experts = static_cast<int>(positive(o, "num_local_experts"));
    moe.moe.top_k = static_cast<int>(present(o, "num_experts_per_tok") ? positive(o, "num_experts_per_tok")
                                                                        : positive(o, "experts_per_token"));
    moe.moe.expert_ffn = dense.ffn;
    moe.sinks = true;
    std::fill(is_moe.begin(), is_moe.end(), true);
  } else if (fam == Family::kQwen2Moe || fam == Family::kQwen3Moe || fam == Family::kOlmoe) {
    // Qwen3-MoE has Qwen2-MoE's keys without the shared expert (and without Q/K/V biases, above;
    // its per-head Q/K norms: qk_norm, above). OLMoE (OlmoeConfig) has
    // Qwen3-MoE's keys with its experts' size in intermediate_size and no dense layers (its Q/K
    // norms over all heads: qk_norm_full, above).
    dense.ffn = positive(o, "intermediate_size");
    const long long experts = opt_int(o, "num_experts").value_or(0);
    if (experts > 0) {
      moe.moe.experts = static_cast<int>(experts);
      moe.moe.top_k = static_cast<int>(positive(o, "num_experts_per_tok"));
      moe.moe.expert_ffn = fam == Family::kOlmoe ? dense.ffn : positive(o, "moe_intermediate_size");
      const long long shared = opt_int(o, "shared_expert_intermediate_size").value_or(0);
      if (shared % moe.moe.expert_ffn != 0)
        o.fail("shared_expert_intermediate_size",
               std::to_string(shared) + " is not a multiple of moe_intermediate_size " +
                   std::to_string(moe.moe.expert_ffn) + " (weft models shared experts as whole experts)");
      moe.moe.shared_experts = static_cast<int>(shared / moe.moe.expert_ffn);
      // Qwen2-MoE gates its shared expert (mlp.shared_expert_gate: sigmoid of one projection).
      moe.moe.shared_gate = fam == Family::kQwen2Moe && moe.moe.shared_experts > 0;
      const long long step = positive_or(o, "decoder_sparse_step", 1);
      std::vector<bool> dense_only(static_cast<size_t>(layers), false);
      if (present(o, "mlp_only_layers")) {
        for (long long l : o.array_of_int("mlp_only_layers")) {
          if (l < 0 || l >= layers)
            o.fail("mlp_only_layers", "layer " + std::to_string(l) + " is outside 0.." + std::to_string(layers - 1));
          dense_only[static_cast<size_t>(l)] = true;
        }
      }
      for (int i = 0; i < layers; ++i) is_moe[i] = !dense_only[i] && (i + 1) % step == 0;
    }
  } else if (fam == Family::kDeepseek || (fam == Family::kGeneric && present(o, "n_routed_experts"))) {
    dense.ffn = positive(o, "intermediate_size");
    const long long experts = opt_int(o, "n_routed_experts").value_or(0);
    if (experts > 0) {
      moe.moe.experts = static_cast<int>(experts);
      moe.moe.top_k = static_cast<int>(positive(o, "num_experts_per_tok"));
      moe.moe.expert_ffn = positive(o, "moe_intermediate_size");
      moe.moe.shared_experts = static_cast<int>(opt_int(o, "n_shared_experts").value_or(0));
      const long long first_dense = opt_int(o, "first_k_dense_replace").value_or(0);
      const long long freq = positive_or(o, "moe_layer_freq", 1);
      for (int i = 0; i < layers; ++i) is_moe[i] = i >= first_dense && i % freq == 0;
    }
    if (present(o, "kv_lora_rank")) {
      // Multi-head latent attention: a head's query and key have qk_nope_head_dim +
      // qk_rope_head_dim dims, its value v_head_dim; q_lora_rank null projects queries directly
      // (DeepSeek-V2-Lite).
      MlaSpec mla;
      mla.kv_lora_rank = static_cast<int>(positive(o, "kv_lora_rank"));
      mla.q_lora_rank = static_cast<int>(present(o, "q_lora_rank") ? positive(o, "q_lora_rank") : 0);
      mla.qk_rope_dim = static_cast<int>(positive(o, "qk_rope_head_dim"));
      mla.v_head_dim = static_cast<int>(positive(o, "v_head_dim"));
      const long long qk = positive(o, "qk_nope_head_dim") + mla.qk_rope_dim;
      for (LayerShape* x : {&dense, &moe}) {
        x->mla = mla;
        x->head_dim = static_cast<int>(qk);
        x->kv_heads = x->heads;
      }
    }
  } else {
    dense.ffn = positive(o, "intermediate_size");
  }
  if (moe.moe.enabled()) {
    // The router, with each configuration class's defaults (transformers 4.57): DeepSeek's
    // scoring_func, norm_topk_prob, routed_scaling_factor and aux_loss_alpha; Mixtral's and
    // GPT-OSS's renormalised top-k (their routers take the softmax of the top-k logits); Qwen-MoE's
    // and OLMoE's norm_topk_prob. The load-balancing coefficient is the config's whether or not it
    // sets output_router_logits (what a user training the model from scratch runs with).
    MoeSpec& r = moe.moe;
    if (fam == Family::kDeepseek) {
      const std::string score = str_or(o, "scoring_func", "softmax");
      if (score != "softmax" && score != "sigmoid")
        o.fail("scoring_func", "expected \"softmax\" or \"sigmoid\", got \"" + score + "\"");
      r.score = score == "sigmoid" ? RouterScore::kSigmoid : RouterScore::kSoftmax;
      r.norm_topk = bool_or(o, "norm_topk_prob", false);
      r.routed_scale = number_or(o, "routed_scaling_factor", 1.0);
      r.aux_loss_coef = number_or(o, "aux_loss_alpha", 0.001);
      // The choice of experts (transformers 4.57's DeepseekV2Moe / DeepseekV3TopkRouter):
      // "greedy" the top_k of all; "group_limited_greedy" (DeepSeek-V2) from the topk_group groups
      // of n_group with the highest score; "noaux_tc" (DeepSeek-V3, the only one its code knows)
      // from the groups whose two highest biased scores sum highest, with the balancing bias
      // (e_score_correction_bias), moved by the paper's 0.001 a step (section 4.2, gamma).
      const std::string method = str_or(o, "topk_method", type == "deepseek_v3" ? "noaux_tc" : "greedy");
      if (method != "greedy" && method != "group_limited_greedy" && method != "noaux_tc")
        o.fail("topk_method", "expected \"greedy\", \"group_limited_greedy\" or \"noaux_tc\", got \"" + method + "\"");
      if (method != "greedy") {
        r.groups = static_cast<int>(present(o, "n_group") ? positive(o, "n_group") : 1);
        r.group_top_k = static_cast<int>(present(o, "topk_group") ? positive(o, "topk_group") : r.groups);
        r.group_score_top = method == "noaux_tc" ? 2 : 1;
        if (r.groups == 1) r.group_score_top = 1;
        if (r.experts % r.groups != 0)
          o.fail("n_group", std::to_string(r.groups) + " does not divide the " + std::to_string(r.experts) + " experts");
        if (r.group_top_k > r.groups)
          o.fail("topk_group", std::to_string(r.group_top_k) + " is more than the " + std::to_string(r.groups) + " groups");
      }
      r.expert_bias = method == "noaux_tc";
    } else if (fam == Family::kMixtral || fam == Family::kGptOss || fam == Family::kGeneric) {
      r.norm_topk = true;
      r.aux_loss_coef = number_or(o, "router_aux_loss_coef", fam == Family::kGptOss ? 0.9 : 0.001);
    } else {
      r.norm_topk = bool_or(o, "norm_topk_prob", false);
      r.aux_loss_coef = number_or(o, "router_aux_loss_coef", fam == Family::kOlmoe ? 0.01 : 0.001);
    }
    if (!(r.routed_scale > 0)) o.fail("routed_scaling_factor", "must be positive, got " + std::to_string(r.routed_scale));
    if (!(r.aux_loss_coef >= 0)) o.fail("router_aux_loss_coef", "must be >= 0, got " + std::to_string(r.aux_loss_coef));
  }
  if (moe.moe.enabled() && moe.moe.top_k > moe.moe.experts)
    o.fail("num_experts_per_tok", std::to_string(moe.moe.top_k) + " is more than the " +
                                      std::to_string(moe.moe.experts) + " experts");
  if (fam == Family::kGptOss) {
    gpt_oss_layers(o, m, layers, moe);
    return m;
  }
  add_layer_runs(m, layers, dense, moe, is_moe);
  return m;
}

// The key names of a GPT-2- or BERT-style config: one stack of one layer kind with LayerNorm,
// learned positions, a GELU FFN, biases and tied word embeddings.
struct ClassicKeys {
  const char* group;
  LayerKind kind;
  const char* hidden;
  const char* layers;
  const char* heads;
  const char* ffn;
  bool ffn_optional;               // absent or null: 4 * hidden (GPT-2's n_inner)
  const char* max_seq;
  const char* max_seq_fallback;    // read when max_seq is absent (GPT-2's n_ctx); null: none
};

ModelSpec classic(const JsonObj& o, const ClassicKeys& k) {
  ModelSpec m;
  m.vocab = positive(o, "vocab_size");
  m.hidden = positive(o, k.hidden);
  LayerGroup g;
  g.name = k.group;
  g.count = static_cast<int>(positive(o, k.layers));
  LayerShape& s = g.shape;
  s.kind = k.kind;
  s.hidden = m.hidden;
  s.heads = static_cast<int>(positive(o, k.heads));
  s.kv_heads = s.heads;
  s.head_dim = head_dim_of(o, m.hidden, s.heads, k.hidden, k.heads);
  s.ffn = k.ffn_optional ? positive_or(o, k.ffn, 4 * m.hidden) : positive(o, k.ffn);
  s.ffn_kind = FfnKind::kGelu;
  s.bias = true;
  m.norm = NormKind::kLayerNorm;
  m.position = PositionKind::kLearned;
  const bool fallback = k.max_seq_fallback && !present(o, k.max_seq);
  m.max_seq = static_cast<int>(positive(o, fallback ? k.max_seq_fallback : k.max_seq));
  m.tied_embeddings = bool_or(o, "tie_word_embeddings", true);
  m.norm_eps = norm_eps(o, {"layer_norm_epsilon", "layer_norm_eps"});
  m.groups.push_back(std::move(g));
  return m;
}

ModelSpec gpt2(const JsonObj& o) {
  return classic(o, {"decoder", LayerKind::kDecoder, "n_embd", "n_layer", "n_head", "n_inner", true, "n_positions",
                     "n_ctx"});
}

// The masked-LM decoder shares the word embeddings; token-type embeddings (type_vocab_size) and the
// pooler are not represented (about 0.3 % of BERT-large).
ModelSpec bert(const JsonObj& o) {
  return classic(o, {"encoder", LayerKind::kEncoder, "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", false, "max_position_embeddings", nullptr});
}

ModelSpec t5(const JsonObj& o) {
  ModelSpec m;
  m.vocab = positive(o, "vocab_size");
  m.hidden = positive(o, "d_model");
  LayerShape s;
  s.hidden = m.hidden;
  s.heads = static_cast<int>(positive(o, "num_heads"));
  s.kv_heads = s.heads;
  s.head_dim = static_cast<int>(positive(o, "d_kv"));  // T5 sets it independently of d_model
  s.ffn = positive(o, "d_ff");
  // "relu" (T5 v1.0) or "gelu": two matrices; "gated-gelu" (T5 v1.1, mT5), "gated-silu": three.
  const std::string proj = str_or(o, "feed_forward_proj", "relu");
  const bool gated = proj.rfind("gated-", 0) == 0;
  const std::string act = gated ? proj.substr(6) : proj;
  if (act != "relu" && act != "gelu" && act != "gelu_new" && act != "silu")
    o.fail("feed_forward_proj", "unknown value \"" + proj +
                                    "\" (expected relu, gelu, gated-gelu, gated-relu or gated-silu)");
  s.ffn_kind = gated ? FfnKind::kSwiglu : FfnKind::kGelu;
  s.bias = false;
  m.norm = NormKind::kRmsNorm;        // T5LayerNorm: scale only, no mean subtraction, no bias
  m.norm_eps = norm_eps(o, {"layer_norm_epsilon"});
  m.position = PositionKind::kRelative;
  m.max_seq = static_cast<int>(opt_int(o, "n_positions").value_or(0));
  m.tied_embeddings = bool_or(o, "tie_word_embeddings", true);
  const int enc = static_cast<int>(positive(o, "num_layers"));
  const int dec = static_cast<int>(positive_or(o, "num_decoder_layers", enc));
  LayerGroup e{"encoder", enc, s};
  e.shape.kind = LayerKind::kEncoder;
  LayerGroup d{"decoder", dec, s};
  d.shape.kind = LayerKind::kCrossDecoder;
  m.groups.push_back(std::move(e));
  m.groups.push_back(std::move(d));
  return m;
}

// Keys of a Mixture-of-Experts config that weft reads from an unknown model_type: Mixtral's
// (num_local_experts) and DeepSeek's (n_routed_experts) spellings.
constexpr std::string_view kReadMoeKeys[] = {"num_local_experts", "num_experts_per_tok", "n_routed_experts",
                                             "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace",
                                             "moe_layer_freq"};

// The keys of config j that speak of experts or routing (names with "expert", "moe" or "router").
std::vector<std::string> moe_keys(const Json& j) {
  std::vector<std::string> out;
  for (const auto& [key, value] : j.items()) {
    std::string k = key;
    for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (k.find("expert") != std::string::npos || k.find("moe") != std::string::npos ||
        k.find("router") != std::string::npos)
      out.push_back(key);
  }
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// An unknown model_type read as a Llama-style decoder must not silently drop its experts: with
// MoE keys weft does not read and no expert layer read, refuse naming the keys; with expert layers
// read, warn naming the keys left out.
void check_unknown_moe_keys(const JsonObj& o, const ModelSpec& m, const std::string& type) {
  const std::vector<std::string> keys = moe_keys(o.json());
  std::vector<std::string> ignored;
  for (const auto& k : keys) {
    bool read = false;
    for (auto r : kReadMoeKeys) read = read || k == r;
    if (!read) ignored.push_back(k);
  }
  const bool has_moe = m.has_moe();
  if (!has_moe && !keys.empty())
    o.fail(keys.front(),
           "model_type \"" + type + "\" is not one weft knows and its config has Mixture-of-Experts keys (" +
               joined(keys) +
               ") that a Llama-style reading would drop; weft reads experts from model_type mixtral, qwen2_moe, "
               "deepseek_v2 or deepseek_v3, or from an unknown type with Mixtral's num_local_experts or "
               "DeepSeek's n_routed_experts keys (or write a weft model JSON)");
  if (has_moe && !ignored.empty())
    warn("model_type \"" + type + "\": Mixture-of-Experts keys not read (costed without them): " + joined(ignored));
}

// The keys an unknown model_type must carry to be read as a Llama-style decoder.
constexpr std::string_view kStandardKeys[] = {"hidden_size", "num_hidden_layers", "num_attention_heads",
                                              "intermediate_size", "vocab_size"};

}  // namespace

bool is_hf_config(const Json& j) {
  return j.is_object() && (j.contains("model_type") || j.contains("architectures"));
}

Result<ModelSpec> model_from_hf_config(const Json& j, const std::string& path) {
  return catch_errors([&]() -> Result<ModelSpec> {
    JsonObj o(j, path);
    std::string type = str_or(o, "model_type", "");
    if (type.empty()) {
      if (!present(o, "architectures") || !o.json().at("architectures").is_array() ||
          o.json().at("architectures").empty() || !o.json().at("architectures")[0].is_string())
        o.fail("model_type", "missing, and no \"architectures\" list names the model class");
      type = type_from_architecture(o.json().at("architectures")[0].get<std::string>());
    }
    std::optional<Family> fam = family_of(type);
    if (!fam) {
      for (auto key : kStandardKeys) {
        if (!present(o, key))
          o.fail(key, "missing: model_type \"" + type + "\" is not one weft knows (" + kKnownTypes +
                          "), and it lacks the standard decoder key \"" + std::string(key) + "\"");
      }
      warn(path + ": model_type \"" + type + "\" is not one weft knows (" + kKnownTypes +
           "); reading it as a Llama-style decoder from its standard keys");
      fam = Family::kGeneric;
    }
    ModelSpec m;
    switch (*fam) {
      case Family::kGpt2: m = gpt2(o); break;
      case Family::kBert: m = bert(o); break;
      case Family::kT5: m = t5(o); break;
      default: m = llama_like(o, *fam, type); break;
    }
    if (*fam == Family::kGeneric) check_unknown_moe_keys(o, m, type);
    m.name = model_name(o, path, type);
    Status st = validate(m);
    if (!st.ok()) return st.error().with_context(path);
    return m;
  });
}

}  // namespace weft
