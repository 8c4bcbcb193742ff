// Galvatron's model config YAML (galvatron/models/model_configs/*.yaml): reader and conversion to a
// weft ModelSpec. Keys: SEARCH_AND_COST_MODEL.md §3.
#pragma once

#include <string>

#include "weft/core/error.h"
#include "weft/spec/model.h"

namespace weft::galvatron {

struct ModelConfig {
  std::string path;
  std::string model_size;              // names the profile files ("llama2-7b")
  long long hidden_size = 0;
  int num_layers = 0;
  int num_attention_heads = 0;
  int num_query_groups = 0;            // 0 = null (multi-head attention: kv heads == heads)
  long long ffn_hidden_size = 0;       // 0 = absent
  long long vocab_size = 0;
  int kv_channels = 0;                 // 0 = absent (hidden / heads)
  std::string normalization = "LayerNorm";
  std::string activation_func;
  bool gated_linear_unit = false;
  std::string position_embedding_type = "learned_absolute";
  bool add_bias_linear = true;
  bool untie_embeddings_and_output_weights = false;
  int make_vocab_size_divisible_by = 1;
  int num_moe_experts = 0;
  long long moe_ffn_hidden_size = 0;
  int moe_router_topk = 0;
  int seq_length = 0;                  // search YAMLs only; 0 = absent
};

// Reads a model YAML. Required: model_size, hidden_size, num_layers, num_attention_heads,
// vocab_size, and ffn_hidden_size unless num_moe_experts > 0. Errors name the file and the key.
Result<ModelConfig> read_model_yaml(const std::string& path);
Result<ModelConfig> model_config_from_yaml(const std::string& text, const std::string& path);

// The weft model: one decoder group of num_layers layers. The embedding is tied exactly when the
// YAML says untie_embeddings_and_output_weights: false; the vocabulary is padded up to a multiple of
// make_vocab_size_divisible_by, as Megatron (and so Galvatron's runtime) pads it.
Result<ModelSpec> to_model_spec(const ModelConfig& c);

}  // namespace weft::galvatron
