#include "weft/spec/model.h"

#include <algorithm>
#include <string>

#include "weft/core/assert.h"

namespace weft {

int ModelSpec::num_layers() const {
  int n = 0;
  for (const auto& g : groups) n += g.count;
  return n;
}

bool ModelSpec::has_moe() const {
  for (const auto& g : groups)
    if (g.shape.moe.enabled()) return true;
  return false;
}

int ModelSpec::group_of(int i) const {
  WEFT_ASSERT(i >= 0 && i < num_layers(),
              "layer " + std::to_string(i) + " of a model with " + std::to_string(num_layers()) + " layers");
  int g = 0;
  for (int first = 0; i >= first + groups[g].count; ++g) first += groups[g].count;
  return g;
}

const LayerShape& ModelSpec::layer(int i) const { return groups[group_of(i)].shape; }

const char* to_string(LayerKind k) {
  switch (k) {
    case LayerKind::kDecoder: return "decoder";
    case LayerKind::kEncoder: return "encoder";
    case LayerKind::kCrossDecoder: return "cross_decoder";
  }
  return "?";
}
const char* to_string(FfnKind k) { return k == FfnKind::kGelu ? "gelu" : "swiglu"; }
const char* to_string(NormKind k) { return k == NormKind::kLayerNorm ? "layernorm" : "rmsnorm"; }
const char* to_string(RouterScore k) { return k == RouterScore::kSigmoid ? "sigmoid" : "softmax"; }

const char* to_string(PositionKind k) {
  switch (k) {
    case PositionKind::kLearned: return "learned";
    case PositionKind::kRope: return "rope";
    case PositionKind::kRelative: return "relative";
  }
  return "?";
}

namespace {

template <class E>
E parse_enum(const JsonObj& o, std::string_view key, std::initializer_list<std::pair<const char*, E>> opts, E dflt,
             bool required) {
  if (!o.has(key)) {
    if (required) o.fail(key, "missing required field");
    return dflt;
  }
  const std::string v = o.str(key);
  std::string list;
  for (const auto& [name, e] : opts) {
    if (v == name) return e;
    list += (list.empty() ? "" : ", ") + std::string(name);
  }
  o.fail(key, "unknown value \"" + v + "\" (expected one of: " + list + ")");
}

std::string gpath(const ModelSpec& m, size_t g) { return "groups[" + std::to_string(g) + "]"; }

}  // namespace

Status validate(const ModelSpec& m) {
  auto fail = [](const std::string& msg) { return Status(Error{ErrorKind::kBadInput, msg}); };
  if (m.vocab <= 0) return fail("vocab: must be positive, got " + std::to_string(m.vocab));
  if (m.hidden <= 0) return fail("hidden: must be positive, got " + std::to_string(m.hidden));
  if (m.groups.empty()) return fail("groups: a model needs at least one layer group");
  for (size_t g = 0; g < m.groups.size(); ++g) {
    const auto& grp = m.groups[g];
    const auto& s = grp.shape;
    const std::string p = gpath(m, g);
    if (grp.count <= 0) return fail(p + ".count: must be positive, got " + std::to_string(grp.count));
    if (s.hidden <= 0) return fail(p + ".hidden: must be positive, got " + std::to_string(s.hidden));
    if (s.heads <= 0) return fail(p + ".heads: must be positive, got " + std::to_string(s.heads));
    if (s.kv_heads <= 0) return fail(p + ".kv_heads: must be positive, got " + std::to_string(s.kv_heads));
    if (s.heads % s.kv_heads != 0)
      return fail(p + ".kv_heads: " + std::to_string(s.kv_heads) + " does not divide " + std::to_string(s.heads) +
                  " attention heads");
    if (s.head_dim <= 0) return fail(p + ".head_dim: must be positive, got " + std::to_string(s.head_dim));
    if (s.window < 0) return fail(p + ".window: must be >= 0 (0: the whole context), got " + std::to_string(s.window));
    if (s.window > 0 && s.kind == LayerKind::kEncoder)
      return fail(p + ".window: sliding-window attention is causal; an encoder layer attends both ways");
    if (s.mla.enabled()) {
      const std::string q = p + ".mla.";
      if (s.kv_heads != s.heads)
        return fail(p + ".kv_heads: " + std::to_string(s.kv_heads) + " with multi-head latent attention, whose keys "
                    "and values are projected per head: must equal heads " + std::to_string(s.heads));
      if (s.mla.q_lora_rank < 0) return fail(q + "q_lora_rank: must be >= 0 (0: no query latent), got " +
                                             std::to_string(s.mla.q_lora_rank));
      if (s.mla.qk_rope_dim < 0 || s.mla.qk_rope_dim >= s.head_dim)
        return fail(q + "qk_rope_dim: must be in 0.." + std::to_string(s.head_dim - 1) + " (below head_dim " +
                    std::to_string(s.head_dim) + "), got " + std::to_string(s.mla.qk_rope_dim));
      if (s.mla.v_head_dim <= 0)
        return fail(q + "v_head_dim: must be positive, got " + std::to_string(s.mla.v_head_dim));
      if (s.kind != LayerKind::kDecoder)
        return fail(p + ".mla: multi-head latent attention on a " + std::string(to_string(s.kind)) +
                    " layer (decoder layers only)");
    } else if (s.mla != MlaSpec{}) {
      return fail(p + ".mla.kv_lora_rank: must be positive, got " + std::to_string(s.mla.kv_lora_rank));
    }
    if (!s.moe.enabled() && s.ffn <= 0) return fail(p + ".ffn: must be positive, got " + std::to_string(s.ffn));
    if (s.moe.enabled()) {
      if (s.moe.top_k <= 0 || s.moe.top_k > s.moe.experts)
        return fail(p + ".moe.top_k: must be in 1.." + std::to_string(s.moe.experts) + ", got " +
                    std::to_string(s.moe.top_k));
      if (s.moe.expert_ffn <= 0)
        return fail(p + ".moe.expert_ffn: must be positive, got " + std::to_string(s.moe.expert_ffn));
      if (s.moe.shared_experts < 0)
        return fail(p + ".moe.shared_experts: must be >= 0, got " + std::to_string(s.moe.shared_experts));
      if (!(s.moe.routed_scale > 0))
        return fail(p + ".moe.routed_scale: must be positive, got " + std::to_string(s.moe.routed_scale));
      if (!(s.moe.aux_loss_coef >= 0))
        return fail(p + ".moe.aux_loss_coef: must be >= 0, got " + std::to_string(s.moe.aux_loss_coef));
      if (s.moe.shared_gate && s.moe.shared_experts == 0)
        return fail(p + ".moe.shared_gate: a gate on the shared experts, and the layer has none (shared_experts 0)");
      const MoeSpec& r = s.moe;
      const std::string n = p + ".moe.";
      if (r.groups < 1 || r.experts % r.groups != 0)
        return fail(n + "groups: " + std::to_string(r.groups) + " must be positive and divide the " +
                    std::to_string(r.experts) + " experts");
      if (r.group_top_k < 1 || r.group_top_k > r.groups)
        return fail(n + "group_top_k: must be in 1.." + std::to_string(r.groups) + " (the groups), got " +
                    std::to_string(r.group_top_k));
      if (r.group_limited()) {
        const int per = r.experts / r.groups;
        if (r.top_k > r.group_top_k * per)
          return fail(n + "top_k: " + std::to_string(r.top_k) + " experts from " + std::to_string(r.group_top_k) +
                      " groups of " + std::to_string(per) + " (group_top_k x experts / groups = " +
                      std::to_string(r.group_top_k * per) + ")");
        if (r.group_score_top < 1 || r.group_score_top > per)
          return fail(n + "group_score_top: must be in 1.." + std::to_string(per) + " (the experts of a group), got " +
                      std::to_string(r.group_score_top));
      }
      if (r.expert_bias && r.score != RouterScore::kSigmoid)
        return fail(n + "expert_bias: balancing biases are added to sigmoid scores (DeepSeek-V3; Megatron-LM "
                    "refuses them with softmax); set \"router\": \"sigmoid\"");
      if (r.expert_bias && !(r.bias_rate >= 0))
        return fail(n + "bias_rate: must be >= 0, got " + std::to_string(r.bias_rate));
    }
    if (s.hidden != m.hidden)
      return fail(p + ".hidden: " + std::to_string(s.hidden) + " differs from the model's hidden " +
                  std::to_string(m.hidden) + " (all groups share the residual width)");
  }
  if (m.max_seq < 0) return fail("max_seq: must be >= 0, got " + std::to_string(m.max_seq));
  if (!(m.rope_theta > 0)) return fail("rope_theta: must be positive, got " + std::to_string(m.rope_theta));
  if (!(m.norm_eps > 0) || m.norm_eps >= 1)
    return fail("norm_eps: must be in (0, 1), got " + std::to_string(m.norm_eps));
  return {};
}

Json to_json(const ModelSpec& m) {
  Json j;
  j["name"] = m.name;
  j["vocab"] = m.vocab;
  j["hidden"] = m.hidden;
  j["tied_embeddings"] = m.tied_embeddings;
  j["norm"] = to_string(m.norm);
  j["position"] = to_string(m.position);
  j["max_seq"] = m.max_seq;
  // Written when it is not the default, so that files of models without it stay as they were.
  if (m.rope_theta != kDefaultRopeTheta) j["rope_theta"] = m.rope_theta;
  if (m.norm_eps != kDefaultNormEps) j["norm_eps"] = m.norm_eps;
  Json groups = Json::array();
  for (const auto& g : m.groups) {
    Json o;
    o["name"] = g.name;
    o["count"] = g.count;
    o["kind"] = to_string(g.shape.kind);
    o["hidden"] = g.shape.hidden;
    o["heads"] = g.shape.heads;
    o["kv_heads"] = g.shape.kv_heads;
    o["head_dim"] = g.shape.head_dim;
    o["ffn"] = g.shape.ffn;
    o["ffn_kind"] = to_string(g.shape.ffn_kind);
    o["bias"] = g.shape.bias;
    if (g.shape.qkv_bias && !g.shape.bias) o["qkv_bias"] = true;
    if (g.shape.window > 0) o["window"] = g.shape.window;
    if (g.shape.sinks) o["sinks"] = true;
    if (g.shape.qk_norm) o["qk_norm"] = g.shape.qk_norm_full ? Json("full") : Json(true);
    if (g.shape.mla.enabled())
      o["mla"] = {{"q_lora_rank", g.shape.mla.q_lora_rank},
                  {"kv_lora_rank", g.shape.mla.kv_lora_rank},
                  {"qk_rope_dim", g.shape.mla.qk_rope_dim},
                  {"v_head_dim", g.shape.mla.v_head_dim}};
    if (g.shape.moe.enabled()) {
      o["moe"] = {{"experts", g.shape.moe.experts},
                  {"top_k", g.shape.moe.top_k},
                  {"expert_ffn", g.shape.moe.expert_ffn},
                  {"shared_experts", g.shape.moe.shared_experts}};
      const MoeSpec dflt;
      if (g.shape.moe.score != dflt.score) o["moe"]["router"] = to_string(g.shape.moe.score);
      if (g.shape.moe.norm_topk != dflt.norm_topk) o["moe"]["norm_topk"] = g.shape.moe.norm_topk;
      if (g.shape.moe.routed_scale != dflt.routed_scale) o["moe"]["routed_scale"] = g.shape.moe.routed_scale;
      if (g.shape.moe.aux_loss_coef != dflt.aux_loss_coef) o["moe"]["aux_loss_coef"] = g.shape.moe.aux_loss_coef;
      if (g.shape.moe.shared_gate) o["moe"]["shared_gate"] = true;
      if (g.shape.moe.groups > 1) {
        o["moe"]["groups"] = g.shape.moe.groups;
        o["moe"]["group_top_k"] = g.shape.moe.group_top_k;
        o["moe"]["group_score_top"] = g.shape.moe.group_score_top;
      }
      if (g.shape.moe.expert_bias) {
        o["moe"]["expert_bias"] = true;
        o["moe"]["bias_rate"] = g.shape.moe.bias_rate;
      }
    }
    groups.push_back(std::move(o));
  }
  j["groups"] = std::move(groups);
  return j;
}

Result<ModelSpec> model_from_json(const Json& j, const std::string& path) {
  return catch_errors([&]() -> Result<ModelSpec> {
    JsonObj o(j, path);
    o.reject_unknown(
        {"name", "vocab", "hidden", "tied_embeddings", "norm", "position", "max_seq", "rope_theta", "norm_eps", "groups"});
    ModelSpec m;
    m.name = o.str_or("name", "custom");
    m.vocab = o.integer("vocab");
    m.hidden = o.integer("hidden");
    m.tied_embeddings = o.boolean_or("tied_embeddings", false);
    m.norm = parse_enum<NormKind>(o, "norm", {{"layernorm", NormKind::kLayerNorm}, {"rmsnorm", NormKind::kRmsNorm}},
                                  NormKind::kLayerNorm, false);
    m.position = parse_enum<PositionKind>(
        o, "position",
        {{"learned", PositionKind::kLearned}, {"rope", PositionKind::kRope}, {"relative", PositionKind::kRelative}},
        PositionKind::kLearned, false);
    m.max_seq = static_cast<int>(o.integer_or("max_seq", 0));
    m.rope_theta = o.number_or("rope_theta", kDefaultRopeTheta);
    m.norm_eps = o.number_or("norm_eps", kDefaultNormEps);
    for (const auto& g : o.array_of_obj("groups")) {
      g.reject_unknown({"name", "count", "kind", "hidden", "heads", "kv_heads", "head_dim", "ffn", "ffn_kind", "bias",
                        "qkv_bias", "window", "sinks", "mla", "moe", "qk_norm"});
      LayerGroup grp;
      grp.name = g.str_or("name", "layers");
      grp.count = static_cast<int>(g.integer("count"));
      auto& s = grp.shape;
      s.kind = parse_enum<LayerKind>(g, "kind",
                                     {{"decoder", LayerKind::kDecoder},
                                      {"encoder", LayerKind::kEncoder},
                                      {"cross_decoder", LayerKind::kCrossDecoder}},
                                     LayerKind::kDecoder, false);
      s.hidden = g.integer_or("hidden", m.hidden);
      s.heads = static_cast<int>(g.integer("heads"));
      s.kv_heads = static_cast<int>(g.integer_or("kv_heads", s.heads));
      if (s.heads > 0 && !g.has("head_dim") && s.hidden % s.heads != 0)
        g.fail("head_dim", "missing, and hidden " + std::to_string(s.hidden) + " is not divisible by " +
                               std::to_string(s.heads) + " heads");
      s.head_dim = static_cast<int>(g.integer_or("head_dim", s.heads > 0 ? s.hidden / s.heads : 0));
      s.ffn_kind = parse_enum<FfnKind>(g, "ffn_kind", {{"gelu", FfnKind::kGelu}, {"swiglu", FfnKind::kSwiglu}},
                                       FfnKind::kGelu, false);
      s.bias = g.boolean_or("bias", false);
      s.qkv_bias = g.boolean_or("qkv_bias", false) && !s.bias;
      s.window = static_cast<int>(g.integer_or("window", 0));
      s.sinks = g.boolean_or("sinks", false);
      // "qk_norm": true (each head's query and key normed over head_dim) or "full" (all heads at once).
      if (g.has("qk_norm") && g.json().at("qk_norm").is_string()) {
        const std::string v = g.str("qk_norm");
        if (v != "full") g.fail("qk_norm", "must be true, false or \"full\", got \"" + v + "\"");
        s.qk_norm = s.qk_norm_full = true;
      } else {
        s.qk_norm = g.boolean_or("qk_norm", false);
      }
      if (g.has("mla")) {
        JsonObj ml = g.obj("mla");
        ml.reject_unknown({"q_lora_rank", "kv_lora_rank", "qk_rope_dim", "v_head_dim"});
        s.mla.q_lora_rank = static_cast<int>(ml.integer_or("q_lora_rank", 0));
        s.mla.kv_lora_rank = static_cast<int>(ml.integer("kv_lora_rank"));
        s.mla.qk_rope_dim = static_cast<int>(ml.integer("qk_rope_dim"));
        s.mla.v_head_dim = static_cast<int>(ml.integer("v_head_dim"));
        if (s.mla.kv_lora_rank <= 0)
          ml.fail("kv_lora_rank", "must be positive, got " + std::to_string(s.mla.kv_lora_rank));
      }
      if (g.has("moe")) {
        JsonObj mo = g.obj("moe");
        mo.reject_unknown({"experts", "top_k", "expert_ffn", "shared_experts", "router", "norm_topk", "routed_scale",
                           "aux_loss_coef", "shared_gate", "groups", "group_top_k", "group_score_top", "expert_bias",
                           "bias_rate"});
        s.moe.experts = static_cast<int>(mo.integer("experts"));
        s.moe.top_k = static_cast<int>(mo.integer("top_k"));
        s.moe.expert_ffn = mo.integer("expert_ffn");
        s.moe.shared_experts = static_cast<int>(mo.integer_or("shared_experts", 0));
        const std::string router = mo.str_or("router", "softmax");
        if (router != "softmax" && router != "sigmoid")
          mo.fail("router", "expected \"softmax\" or \"sigmoid\", got \"" + router + "\"");
        s.moe.score = router == "sigmoid" ? RouterScore::kSigmoid : RouterScore::kSoftmax;
        s.moe.norm_topk = mo.boolean_or("norm_topk", true);
        s.moe.routed_scale = mo.number_or("routed_scale", 1.0);
        s.moe.aux_loss_coef = mo.number_or("aux_loss_coef", 0.0);
        s.moe.shared_gate = mo.boolean_or("shared_gate", false);
        s.moe.groups = static_cast<int>(mo.integer_or("groups", 1));
        s.moe.group_top_k = static_cast<int>(mo.integer_or("group_top_k", s.moe.groups));
        // DeepSeek-V3's and Megatron-LM's group score: the sum of the top_k / group_top_k best.
        const int score_top = s.moe.groups > 1 ? std::max(1, s.moe.top_k / std::max(1, s.moe.group_top_k)) : 1;
        s.moe.group_score_top = static_cast<int>(mo.integer_or("group_score_top", score_top));
        s.moe.expert_bias = mo.boolean_or("expert_bias", false);
        s.moe.bias_rate = mo.number_or("bias_rate", MoeSpec{}.bias_rate);
        if (s.moe.experts <= 0) mo.fail("experts", "must be positive, got " + std::to_string(s.moe.experts));
      }
      s.ffn = g.has("ffn") ? g.integer("ffn") : (s.moe.enabled() ? 0 : g.integer("ffn"));
      m.groups.push_back(std::move(grp));
    }
    Status st = validate(m);
    if (!st.ok()) return st.error().with_context(path);
    return m;
  });
}

}  // namespace weft
