// Model YAML reader (yaml-cpp) and conversion to ModelSpec.
#include "weft/galvatron/model_config.h"

#include <yaml-cpp/yaml.h>

#include "weft/core/format.h"
#include "weft/core/json.h"

namespace weft::galvatron {

namespace {

struct Reader {
  const YAML::Node& root;
  const std::string& path;

  bool present(const char* key) const {
    const YAML::Node n = root[key];
    return n && !n.IsNull();
  }
  [[noreturn]] void fail(const char* key, const std::string& msg) const {
    throw InputError(path + ": " + key + ": " + msg);
  }
  std::string scalar(const char* key) const {
    const YAML::Node n = root[key];
    if (!n.IsScalar()) fail(key, "expected a value");
    return n.Scalar();
  }
  long long integer(const char* key) const {
    if (!present(key)) fail(key, "missing required field");
    return integer_or(key, 0);
  }
  long long integer_or(const char* key, long long dflt) const {
    if (!present(key)) return dflt;
    const std::string v = scalar(key);
    try {
      size_t used = 0;
      const long long x = std::stoll(v, &used);
      if (used != v.size()) throw std::invalid_argument(v);
      return x;
    } catch (const std::exception&) {
      fail(key, "expected an integer, got \"" + v + "\"");
    }
  }
  bool boolean_or(const char* key, bool dflt) const {
    if (!present(key)) return dflt;
    const std::string v = scalar(key);
    if (v == "true" || v == "True" || v == "TRUE") return true;
    if (v == "false" || v == "False" || v == "FALSE") return false;
    fail(key, "expected true or false, got \"" + v + "\"");
  }
  std::string string_or(const char* key, const std::string& dflt) const {
    return present(key) ? scalar(key) : dflt;
  }
};

}  // namespace

Result<ModelConfig> model_config_from_yaml(const std::string& text, const std::string& path) {
  return catch_errors([&]() -> ModelConfig {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      throw InputError(path + ": malformed YAML: " + e.what());
    }
    if (!root.IsMap()) throw InputError(path + ": expected a mapping of key: value lines");
    const Reader r{root, path};
    ModelConfig c;
    c.path = path;
    if (!r.present("model_size")) r.fail("model_size", "missing required field");
    c.model_size = r.scalar("model_size");
    c.hidden_size = r.integer("hidden_size");
    c.num_layers = static_cast<int>(r.integer("num_layers"));
    c.num_attention_heads = static_cast<int>(r.integer("num_attention_heads"));
    c.num_query_groups = static_cast<int>(r.integer_or("num_query_groups", 0));
    c.vocab_size = r.integer("vocab_size");
    c.kv_channels = static_cast<int>(r.integer_or("kv_channels", 0));
    c.normalization = r.string_or("normalization", c.normalization);
    c.activation_func = r.string_or("activation_func", "");
    c.gated_linear_unit = r.boolean_or("gated_linear_unit", false);
    c.position_embedding_type = r.string_or("position_embedding_type", c.position_embedding_type);
    c.add_bias_linear = r.boolean_or("add_bias_linear", true);
    c.untie_embeddings_and_output_weights = r.boolean_or("untie_embeddings_and_output_weights", false);
    c.make_vocab_size_divisible_by = static_cast<int>(r.integer_or("make_vocab_size_divisible_by", 1));
    c.num_moe_experts = static_cast<int>(r.integer_or("num_moe_experts", 0));
    c.moe_ffn_hidden_size = r.integer_or("moe_ffn_hidden_size", 0);
    c.moe_router_topk = static_cast<int>(r.integer_or("moe_router_topk", 0));
    c.seq_length = static_cast<int>(r.integer_or("seq_length", 0));
    if (c.num_moe_experts > 0) {
      if (c.moe_ffn_hidden_size <= 0) r.fail("moe_ffn_hidden_size", "missing required field (num_moe_experts > 0)");
      if (c.moe_router_topk <= 0) r.fail("moe_router_topk", "missing required field (num_moe_experts > 0)");
    } else {
      c.ffn_hidden_size = r.integer("ffn_hidden_size");
    }
    if (r.present("ffn_hidden_size")) c.ffn_hidden_size = r.integer("ffn_hidden_size");
    auto positive = [&](const char* key, long long v) {
      if (v <= 0) r.fail(key, "must be positive, got " + S(v));
    };
    positive("hidden_size", c.hidden_size);
    positive("num_layers", c.num_layers);
    positive("num_attention_heads", c.num_attention_heads);
    positive("vocab_size", c.vocab_size);
    positive("make_vocab_size_divisible_by", c.make_vocab_size_divisible_by);
    if (c.num_query_groups < 0) r.fail("num_query_groups", "must be positive or null, got " + S(c.num_query_groups));
    return c;
  });
}

Result<ModelConfig> read_model_yaml(const std::string& path) {
  auto text = catch_errors([&] { return read_text_file(path); });
  if (!text.ok()) return text.error();
  return model_config_from_yaml(*text, path);
}

Result<ModelSpec> to_model_spec(const ModelConfig& c) {
  auto m = catch_errors([&]() -> ModelSpec {
    ModelSpec m;
    m.name = c.model_size;
    const long long div = c.make_vocab_size_divisible_by;
    m.vocab = (c.vocab_size + div - 1) / div * div;
    m.hidden = c.hidden_size;
    m.tied_embeddings = !c.untie_embeddings_and_output_weights;
    if (c.normalization == "RMSNorm") m.norm = NormKind::kRmsNorm;
    else if (c.normalization == "LayerNorm") m.norm = NormKind::kLayerNorm;
    else throw InputError(c.path + ": normalization: expected RMSNorm or LayerNorm, got \"" + c.normalization + "\"");
    if (c.position_embedding_type == "rope") m.position = PositionKind::kRope;
    else if (c.position_embedding_type == "learned_absolute") m.position = PositionKind::kLearned;
    else if (c.position_embedding_type == "relative") m.position = PositionKind::kRelative;
    else
      throw InputError(c.path + ": position_embedding_type: expected rope, learned_absolute or relative, got \"" +
                       c.position_embedding_type + "\"");
    LayerShape s;
    s.kind = LayerKind::kDecoder;
    s.hidden = c.hidden_size;
    s.heads = c.num_attention_heads;
    s.kv_heads = c.num_query_groups > 0 ? c.num_query_groups : c.num_attention_heads;
    s.head_dim = c.kv_channels > 0 ? c.kv_channels : static_cast<int>(c.hidden_size / c.num_attention_heads);
    s.ffn = c.ffn_hidden_size;
    s.ffn_kind = c.gated_linear_unit ? FfnKind::kSwiglu : FfnKind::kGelu;
    s.bias = c.add_bias_linear;
    if (c.num_moe_experts > 0) {
      s.moe.experts = c.num_moe_experts;
      s.moe.top_k = c.moe_router_topk;
      s.moe.expert_ffn = c.moe_ffn_hidden_size;
      if (s.ffn <= 0) s.ffn = c.moe_ffn_hidden_size;
    }
    m.groups.push_back(LayerGroup{"decoder", c.num_layers, s});
    return m;
  });
  if (!m.ok()) return m;
  Status v = validate(*m);
  if (!v.ok()) return v.error().with_context(c.path);
  return m;
}

}  // namespace weft::galvatron
