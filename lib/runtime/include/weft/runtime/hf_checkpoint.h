// Hugging Face checkpoints (a directory with config.json and model.safetensors, or shards listed by
// model.safetensors.index.json) in and out of any plan: `weft train --hf-checkpoint DIR` starts from
// one, `weft train --save-hf DIR` writes one that transformers' from_pretrained loads
// (docs/runtime.md "Hugging Face checkpoints"). Torch-free: the names and layouts are mapped here,
// each rank's entries filled through weft/plan/checkpoint_layout.h, and the runtime loads them as it
// loads a re-sharded checkpoint.
//
// Families: llama, mistral and qwen2 (LlamaForCausalLM's names: model.layers.N.self_attn.q_proj,
// ...; weft's RoPE is the rotate-half form these checkpoints are stored for, so no permutation),
// gpt2 (GPT2LMHeadModel: Conv1D weights stored [in, out], the query, key and value fused in
// c_attn, with or without the "transformer." prefix), mixtral (MixtralForCausalLM: Llama's
// attention and norms, every layer a sparse MoE block: block_sparse_moe.gate the router,
// block_sparse_moe.experts.E.w1 / w3 / w2 each expert's gate / up / down projections; softmax over
// the experts, top num_experts_per_tok renormalised, as weft's router scores), qwen3 (Llama's
// names and self_attn.q_norm / k_norm, each head's RMSNorm of its query and key) and qwen3_moe
// (qwen3's attention, mlp.gate the router, mlp.experts.E.{gate,up,down}_proj the experts; top-k
// renormalised where norm_topk_prob says so) and qwen2_moe (qwen2's attention with Q/K/V biases,
// qwen3_moe's router and experts, mlp.shared_expert.*_proj the shared experts as one FFN and
// mlp.shared_expert_gate the sigmoid gate on their output) and olmoe (OlmoeForCausalLM: qwen3_moe's
// router and experts, every layer MoE, self_attn.q_norm / k_norm each one RMSNorm over all heads'
// queries / keys, weft's qk_norm "full").
//
// Other MoE families are refused naming what weft's layers lack: DeepSeek's latent attention.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/plan/plan.h"
#include "weft/runtime/params_file.h"
#include "weft/runtime/safetensors.h"

namespace weft::runtime {

enum class HfFamily { kLlama, kMistral, kQwen2, kGpt2, kMixtral, kQwen3, kQwen3Moe, kQwen2Moe, kOlmoe };
const char* to_string(HfFamily f);

// Where one of weft's tensors lives in a checkpoint of `family`: an HF tensor, or the rows (output
// features) [out_begin, out_begin + out_len) of a fused one; `conv1d`: stored transposed ([in,
// out], GPT-2's Conv1D), weft holding [out, in].
struct HfSource {
  std::string name;
  bool conv1d = false;
  std::int64_t out_begin = 0, out_len = -1;  // -1: the whole tensor
  std::int64_t out_total = -1;               // a fused tensor's rows in all (q + 2 kv)
};
// Errors (kBadInput) for a weft tensor the family has no place for.
Result<HfSource> hf_source(const std::string& weft_name, HfFamily family, const ModelSpec& m);

class HfCheckpoint {
 public:
  // Reads DIR/config.json (model_type llama, mistral, qwen2 or gpt2) and opens every safetensors
  // file (model.safetensors, or the shards of model.safetensors.index.json, whose weight_map must
  // name files that hold those tensors and whose metadata.total_size, when given, must equal their
  // bytes). Errors name the file and the numbers.
  static Result<std::unique_ptr<HfCheckpoint>> open(const std::string& dir);
  HfFamily family() const { return family_; }
  const std::string& dir() const { return dir_; }
  const Json& config() const { return config_; }
  const ModelSpec& model() const { return model_; }  // read from config.json
  std::int64_t tensor_count() const { return static_cast<std::int64_t>(where_.size()); }

  // Whether plan p's model is this checkpoint's: every tensor of p (model_params) present with its
  // shape, every checkpoint tensor used (buffers such as GPT-2's attn.bias masks and rotary
  // inv_freq aside, and a tied lm_head), the same norm epsilon and RoPE base, no RoPE scaling and
  // no sliding window shorter than p's sequence (weft's attention is full causal). Errors
  // (kBadInput) name the tensor and both shapes, or the config key and both values.
  Status check(const Plan& p) const;
  // The full tensor weft calls `name`, of shape `shape`, in weft's layout.
  Result<std::vector<float>> tensor(const std::string& name, const std::vector<std::int64_t>& shape) const;

 private:
  HfCheckpoint() = default;
  const SafetensorsEntry* entry(const std::string& hf_name, const SafetensorsFile** file) const;
  std::string dir_;
  HfFamily family_ = HfFamily::kLlama;
  Json config_;
  ModelSpec model_;
  std::string prefix_;  // "transformer." where a GPT-2 checkpoint's names carry it
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, int> where_;  // HF tensor name -> file
};

// Rank `rank`'s training state under plan p with its parameters from the checkpoint (AdamW moments
// zero): the entries weft/plan/checkpoint_layout.h saved_entries lists, for load_state. Reads only
// the tensors the rank holds a slice of.
Result<ParamsFile> hf_rank_entries(const HfCheckpoint& ck, const Plan& p, int rank);

// The family weft writes a model as: gpt2 (learned positions, LayerNorm, GELU, biases), qwen2
// (RoPE, RMSNorm, SwiGLU, query/key/value biases only), llama (the same without biases), qwen3
// (llama's with per-head query / key norms), mixtral (llama's layers, every one MoE without shared
// experts, softmax top-k renormalised), qwen3_moe (the same with qwen3's attention), olmoe (query /
// key norms over all heads) or qwen2_moe (qwen2's attention, gated shared experts); kBadInput
// naming what differs for any other (several layer groups, dense layers beside MoE ones, shared
// experts, a sigmoid router, T5's relative positions, ...).
Result<HfFamily> hf_family_of(const ModelSpec& m);

// The config.json a Hugging Face user loads the model with (architectures, model_type and the
// family's keys from the spec; torch_dtype the saved one).
Json hf_config_of(const ModelSpec& m, HfFamily f, SaveDType dtype);

// Writes `full` (every parameter of p's model at full size in weft's layout: consolidate's file) to
// DIR as a Hugging Face checkpoint: config.json (copied, with the tokenizer and generation files
// beside it, from `source_dir` when it is not empty, else hf_config_of), model.safetensors or, past
// `max_shard_bytes`, model-0000K-of-0000N.safetensors with model.safetensors.index.json. Tensors in
// `dtype`. A tied embedding is written once, as the family's checkpoints hold it. kIo naming the
// path on failure; a file is written whole or not at all.
Status save_hf_checkpoint(const std::string& dir, const Plan& p, const ParamsFile& full, SaveDType dtype,
                          const std::string& source_dir = "", std::int64_t max_shard_bytes = 5'000'000'000);

}  // namespace weft::runtime
