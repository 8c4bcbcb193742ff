// Hugging Face config.json import: Llama, Mistral, Qwen2, Mixtral, GPT-2, BERT, T5 (and other
// model types with the same key names).
#pragma once

#include "weft/spec/model.h"

namespace weft {

// True if j looks like a Hugging Face config (has "model_type" or "architectures").
bool is_hf_config(const Json& j);
Result<ModelSpec> model_from_hf_config(const Json& j, const std::string& path = "config.json");

}  // namespace weft
