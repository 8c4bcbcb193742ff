// Hugging Face config.json import. The fixtures in tests/spec/data/ are the published config.json
// files of the named checkpoints (unused keys kept, as users would pass them).
#include "weft/spec/hf_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>

#include "weft/spec/counts.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

const std::string kData = WEFT_SPEC_TEST_DATA;

ModelSpec load(const std::string& file) {
  Result<ModelSpec> r = load_model(kData + "/" + file);
  if (!r.ok()) ADD_FAILURE() << file << ": " << r.error().message;
  return r.ok() ? r.value() : ModelSpec{};
}

ModelSpec preset(const std::string& name) {
  Result<ModelSpec> r = load_model(name);
  if (!r.ok()) ADD_FAILURE() << name << ": " << r.error().message;
  return r.ok() ? r.value() : ModelSpec{};
}

// The HF import and the preset describe the same model; only the name differs.
void expect_same_as_preset(const std::string& file, const std::string& name) {
  ModelSpec m = load(file);
  m.name = name;
  EXPECT_EQ(to_json(m).dump(), to_json(preset(name)).dump()) << file;
  EXPECT_TRUE(m == preset(name)) << file;
}

TEST(HfConfig, DetectsConfigs) {
  EXPECT_TRUE(is_hf_config(Json::parse(R"({"model_type": "llama"})")));
  EXPECT_TRUE(is_hf_config(Json::parse(R"({"architectures": ["LlamaForCausalLM"]})")));
  EXPECT_FALSE(is_hf_config(Json::parse(R"({"vocab": 1, "hidden": 8, "groups": []})")));
  EXPECT_FALSE(is_hf_config(Json::parse("[1, 2]")));
}

TEST(HfConfig, LlamaMistralQwen2MixtralMatchPresets) {
  expect_same_as_preset("llama-2-7b.config.json", "llama-2-7b");
  expect_same_as_preset("llama-3-70b.config.json", "llama-3-70b");
  expect_same_as_preset("mistral-7b.config.json", "mistral-7b");
  expect_same_as_preset("qwen2-7b.config.json", "qwen2-7b");
  expect_same_as_preset("mixtral-8x7b.config.json", "mixtral-8x7b");
  expect_same_as_preset("gpt-oss-20b.config.json", "gpt-oss-20b");
  expect_same_as_preset("gpt-oss-120b.config.json", "gpt-oss-120b");
  expect_same_as_preset("deepseek-v3.config.json", "deepseek-v3");
}

TEST(HfConfig, BertAndT5MatchPresets) {
  expect_same_as_preset("bert-large-uncased.config.json", "bert-large");
  expect_same_as_preset("t5-large.config.json", "t5-large");
}

TEST(HfConfig, NameFromNameOrPathOrFile) {
  EXPECT_EQ(load("llama-2-7b.config.json").name, "Llama-2-7b-hf");  // "_name_or_path"
  EXPECT_EQ(load("mistral-7b.config.json").name, "mistral-7b");     // file name
}

TEST(HfConfig, Gpt2) {
  const ModelSpec m = load("gpt2.config.json");
  ASSERT_EQ(m.groups.size(), 1u);
  const LayerShape& s = m.groups[0].shape;
  EXPECT_EQ(m.hidden, 768);
  EXPECT_EQ(m.vocab, 50257);
  EXPECT_EQ(m.max_seq, 1024);
  EXPECT_EQ(m.groups[0].count, 12);
  EXPECT_EQ(s.heads, 12);
  EXPECT_EQ(s.kv_heads, 12);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_EQ(s.ffn, 4 * 768);  // n_inner absent
  EXPECT_EQ(s.ffn_kind, FfnKind::kGelu);
  EXPECT_TRUE(s.bias);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_EQ(m.norm, NormKind::kLayerNorm);
  EXPECT_EQ(m.position, PositionKind::kLearned);
  // gpt2 checkpoint: 124,439,808 parameters (GPT2Model; the LM head is tied).
  EXPECT_DOUBLE_EQ(total_params(m), 124439808.0);
}

TEST(HfConfig, Gpt2InnerSizeAndNull) {
  Json j = read_json_file(kData + "/gpt2.config.json");
  j["n_inner"] = nullptr;  // null: the 4 * n_embd default
  EXPECT_EQ(model_from_hf_config(j)->groups[0].shape.ffn, 3072);
  j["n_inner"] = 2048;
  EXPECT_EQ(model_from_hf_config(j)->groups[0].shape.ffn, 2048);
}

TEST(HfConfig, T5V11GatedGeluUntied) {
  const ModelSpec m = load("t5-v1_1-large.config.json");
  ASSERT_EQ(m.groups.size(), 2u);
  EXPECT_EQ(m.groups[0].shape.kind, LayerKind::kEncoder);
  EXPECT_EQ(m.groups[1].shape.kind, LayerKind::kCrossDecoder);
  EXPECT_EQ(m.groups[0].shape.ffn_kind, FfnKind::kSwiglu);  // gated: three matrices
  EXPECT_EQ(m.groups[0].shape.ffn, 2816);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_EQ(m.position, PositionKind::kRelative);
  // google/t5-v1_1-large: 783,150,080 parameters, of which 1,024 are relative-position tables.
  EXPECT_LT(std::abs(total_params(m) - 783150080.0) / 783150080.0, 1e-4) << total_params(m);
}

TEST(HfConfig, T5DecoderLayersDefaultToEncoderLayers) {
  Json j = read_json_file(kData + "/t5-large.config.json");
  j["num_decoder_layers"] = 6;
  const ModelSpec m = model_from_hf_config(j).value();
  EXPECT_EQ(m.groups[0].count, 24);
  EXPECT_EQ(m.groups[1].count, 6);
}

TEST(HfConfig, Qwen2MoeSharedExperts) {
  const ModelSpec m = load("qwen1.5-moe-a2.7b.config.json");
  ASSERT_EQ(m.groups.size(), 1u);
  const MoeSpec& e = m.groups[0].shape.moe;
  EXPECT_EQ(e.experts, 60);
  EXPECT_EQ(e.top_k, 4);
  EXPECT_EQ(e.expert_ffn, 1408);
  EXPECT_EQ(e.shared_experts, 4);  // shared_expert_intermediate_size 5632 = 4 x 1408
  EXPECT_TRUE(e.shared_gate);      // mlp.shared_expert_gate: hidden weights a layer
  EXPECT_FALSE(m.groups[0].shape.qk_norm);
  // Qwen1.5-MoE-A2.7B: "14.3B parameters in total and 2.7B activated" (Qwen blog, 2024).
  EXPECT_LT(std::abs(total_params(m) - 14.3e9) / 14.3e9, 0.005) << total_params(m);
  EXPECT_LT(std::abs(active_params(m) - 2.7e9) / 2.7e9, 0.01) << active_params(m);
}

// DeepSeek-V3 (deepseek-ai/DeepSeek-V3, its Hugging Face config.json): 61 layers, the first 3
// dense; 256 routed experts of 2048 and one shared, top 8; multi-head latent attention with a
// query latent of 1536, a key/value latent of 512, heads of 128 + 64 rotary dims and values of 128.
// The technical report (arXiv 2412.19437): 671B parameters, 37B activated per token (its 14B
// multi-token-prediction module apart, which the config's num_nextn_predict_layers adds and weft
// does not model). One attention block's projections: 187,105,280 parameters (1536 x 7168 +
// 128 x 192 x 1536 + 7168 x 576 + 128 x 256 x 512 + 128 x 128 x 7168) and the two latent norms.
TEST(HfConfig, DeepseekV3LatentAttention) {
  testing::internal::CaptureStderr();
  const ModelSpec m = load("deepseek-v3.config.json");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ASSERT_EQ(m.groups.size(), 2u);
  EXPECT_EQ(m.groups[0].count, 3);
  EXPECT_FALSE(m.groups[0].shape.moe.enabled());
  EXPECT_EQ(m.groups[1].count, 58);
  const LayerShape& s = m.groups[1].shape;
  EXPECT_EQ(s.moe, (MoeSpec{.experts = 256,
                           .top_k = 8,
                           .expert_ffn = 2048,
                           .shared_experts = 1,
                           .score = RouterScore::kSigmoid,
                           .norm_topk = true,
                           .routed_scale = 2.5,
                           .aux_loss_coef = 0.001,
                           .groups = 8,
                           .group_top_k = 4,
                           .group_score_top = 2,
                           .expert_bias = true,
                           .bias_rate = 0.001}));
  EXPECT_EQ(s.mla, (MlaSpec{.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_rope_dim = 64, .v_head_dim = 128}));
  EXPECT_EQ(s.head_dim, 192);
  EXPECT_EQ(s.kv_heads, 128);
  EXPECT_DOUBLE_EQ(layer_params(s).attention, 187105280.0 + 1536 + 512);
  EXPECT_DOUBLE_EQ(attention_replicated_params(s), 1536.0 * 7168 + 1536 + 7168.0 * 576 + 512);
  const AttentionWidths w = attention_widths(s);
  EXPECT_EQ(w.q, 128.0 * 192);
  EXPECT_EQ(w.k, 128.0 * 192);
  EXPECT_EQ(w.v, 128.0 * 128);
  EXPECT_EQ(w.ctx, 128.0 * 128);
  EXPECT_LT(std::abs(total_params(m) - 671e9) / 671e9, 0.002) << total_params(m);
  EXPECT_LT(std::abs(active_params(m) - 37e9) / 37e9, 0.02) << active_params(m);
  // Forward FLOPs of the projections per token: twice the multiply-adds of every weight but O's.
  const LayerFlops f = layer_forward_flops(s, 1, 1);
  EXPECT_DOUBLE_EQ(f.qkv, 2.0 * (187105280.0 - 128.0 * 128 * 7168));
  EXPECT_DOUBLE_EQ(f.attn_out, 2.0 * 128 * 128 * 7168);
  // The spec round-trips through weft's JSON with its latent attention.
  Result<ModelSpec> back = model_from_json(to_json(m), "round trip");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(back.value() == m);
}

// GPT-OSS (openai/gpt-oss-20b and -120b, their Hugging Face config.json): every layer routes to
// 32 / 128 experts of 2880 with biases, top 4; 64 query heads of 64 against hidden 2880, 8 key/value
// heads; a sink logit per head; banded (128-token window) and full attention layers alternating.
// The model card's parameter table: 20.91B and 116.83B in all, 3.61B and 5.13B active (its active
// count leaves out the input embedding, 0.58B, which weft's active_params counts).
TEST(HfConfig, GptOss) {
  for (const auto& [file, layers, experts, total, active] :
       {std::tuple{"gpt-oss-20b.config.json", 24, 32, 20.91e9, 3.61e9},
        std::tuple{"gpt-oss-120b.config.json", 36, 128, 116.83e9, 5.13e9}}) {
    testing::internal::CaptureStderr();
    const ModelSpec m = load(file);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "gpt_oss is a known model_type";
    ASSERT_EQ(static_cast<int>(m.groups.size()), layers) << file;
    EXPECT_EQ(m.num_layers(), layers);
    for (int i = 0; i < layers; ++i) {
      const LayerShape& s = m.layer(i);
      EXPECT_EQ(s.window, i % 2 == 0 ? 128 : 0) << file << " layer " << i;
      EXPECT_TRUE(s.sinks);
      EXPECT_TRUE(s.bias);
      EXPECT_EQ(s.heads, 64);
      EXPECT_EQ(s.kv_heads, 8);
      EXPECT_EQ(s.head_dim, 64);
      EXPECT_EQ(s.moe.experts, experts);
      EXPECT_EQ(s.moe.top_k, 4);
      EXPECT_EQ(s.moe.expert_ffn, 2880);
      EXPECT_EQ(s.ffn_kind, FfnKind::kSwiglu);
    }
    EXPECT_FALSE(m.tied_embeddings);
    EXPECT_EQ(m.vocab, 201088);
    EXPECT_DOUBLE_EQ(m.rope_theta, 150000);
    EXPECT_LT(std::abs(total_params(m) - total) / total, 0.001) << file << ": " << total_params(m);
    const double input_embedding = static_cast<double>(m.vocab) * m.hidden;
    EXPECT_LT(std::abs(active_params(m) - input_embedding - active) / active, 0.005) << file << ": " << active_params(m);
    // The JSON model format keeps the window and the sinks.
    auto back = model_from_json(to_json(m));
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(*back, m);
  }
  // A layer type weft does not know, and a pattern of the wrong length, name the field.
  Json j = read_json_file(kData + "/gpt-oss-20b.config.json");
  j["layer_types"][3] = "chunked_attention";
  auto bad = model_from_hf_config(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("layer_types[3]"), std::string::npos) << bad.error().message;
  j["layer_types"] = Json::array({"full_attention"});
  bad = model_from_hf_config(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("1 entries for num_hidden_layers 24"), std::string::npos) << bad.error().message;
  // Without layer_types: the config class's default, even layers banded.
  j.erase("layer_types");
  const ModelSpec d = model_from_hf_config(j).value();
  EXPECT_EQ(d.layer(0).window, 128);
  EXPECT_EQ(d.layer(1).window, 0);
}

// Qwen3-30B-A3B (its Hugging Face config.json): 128 experts of 768, top 8, no shared expert, head
// width 128 given apart from hidden / heads (32 x 128 = 4096 against hidden 2048), no Q/K/V biases.
TEST(HfConfig, Qwen3Moe) {
  testing::internal::CaptureStderr();
  const ModelSpec m = load("qwen3-30b-a3b.config.json");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "") << "qwen3_moe is a known model_type";
  ASSERT_EQ(m.groups.size(), 1u);
  const LayerShape& s = m.groups[0].shape;
  EXPECT_EQ(m.groups[0].count, 48);
  EXPECT_EQ(s.heads, 32);
  EXPECT_EQ(s.kv_heads, 4);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_FALSE(s.bias);
  EXPECT_FALSE(s.qkv_bias);
  EXPECT_EQ(s.moe.experts, 128);
  EXPECT_EQ(s.moe.top_k, 8);
  EXPECT_EQ(s.moe.expert_ffn, 768);
  EXPECT_EQ(s.moe.shared_experts, 0);
  EXPECT_TRUE(s.qk_norm);  // each head's query and key RMS-normalised (self_attn.q_norm / k_norm)
  EXPECT_FALSE(m.tied_embeddings);
  // "Number of Parameters: 30.5B in total and 3.3B activated" (the model card).
  EXPECT_LT(std::abs(total_params(m) - 30.5e9) / 30.5e9, 0.005) << total_params(m);
  EXPECT_LT(std::abs(active_params(m) - 3.3e9) / 3.3e9, 0.02) << active_params(m);
  // The dense Qwen3 reads as a Llama-style decoder with its own head width, the class name alone
  // naming the type too.
  Json dense = read_json_file(kData + "/qwen3-30b-a3b.config.json");
  dense.erase("model_type");
  dense["architectures"] = {"Qwen3ForCausalLM"};
  for (const char* k : {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step"})
    dense.erase(k);
  testing::internal::CaptureStderr();
  const ModelSpec d = model_from_hf_config(dense).value();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_FALSE(d.groups[0].shape.moe.enabled());
  EXPECT_EQ(d.groups[0].shape.ffn, 6144);
  EXPECT_EQ(d.groups[0].shape.head_dim, 128);
  EXPECT_FALSE(d.groups[0].shape.qkv_bias);
  EXPECT_TRUE(d.groups[0].shape.qk_norm);
  // The JSON model format keeps the norms, which are 2 x head_dim weights a layer.
  auto back = model_from_json(to_json(m));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, m);
  LayerShape plain = s;
  plain.qk_norm = false;
  EXPECT_DOUBLE_EQ(layer_params(s).norms - layer_params(plain).norms, 2.0 * 128);
}

TEST(HfConfig, Qwen2MoeDenseLayersBecomeSeparateGroups) {
  Json j = read_json_file(kData + "/qwen1.5-moe-a2.7b.config.json");
  j["mlp_only_layers"] = {0, 1};
  j["num_hidden_layers"] = 6;
  j["decoder_sparse_step"] = 2;  // layers 1, 3, 5 sparse; 0 and 1 forced dense
  const ModelSpec m = model_from_hf_config(j).value();
  // Layers: 0 dense, 1 dense, 2 dense, 3 moe, 4 dense, 5 moe.
  ASSERT_EQ(m.groups.size(), 4u);
  EXPECT_EQ(m.groups[0].count, 3);
  EXPECT_FALSE(m.groups[0].shape.moe.enabled());
  EXPECT_EQ(m.groups[0].shape.ffn, 5632);
  EXPECT_EQ(m.groups[1].count, 1);
  EXPECT_TRUE(m.groups[1].shape.moe.enabled());
  EXPECT_EQ(m.groups[2].count, 1);
  EXPECT_EQ(m.groups[3].count, 1);
  EXPECT_EQ(m.num_layers(), 6);
}

TEST(HfConfig, DeepseekStyleFirstDenseLayers) {
  Json j = read_json_file(kData + "/llama-2-7b.config.json");
  j["model_type"] = "deepseek_v2";
  j["n_routed_experts"] = 64;
  j["n_shared_experts"] = 2;
  j["num_experts_per_tok"] = 6;
  j["moe_intermediate_size"] = 1408;
  j["first_k_dense_replace"] = 1;
  // Latent attention as DeepSeek-V2-Lite has it: no query latent (q_lora_rank null).
  j["kv_lora_rank"] = 512;
  j["q_lora_rank"] = nullptr;
  j["qk_nope_head_dim"] = 128;
  j["qk_rope_head_dim"] = 64;
  j["v_head_dim"] = 96;
  j["num_key_value_heads"] = 32;
  const ModelSpec m = model_from_hf_config(j).value();
  for (const LayerGroup& g : m.groups) {
    EXPECT_EQ(g.shape.head_dim, 192);
    EXPECT_EQ(g.shape.kv_heads, 32);
    EXPECT_EQ(g.shape.mla, (MlaSpec{.q_lora_rank = 0, .kv_lora_rank = 512, .qk_rope_dim = 64, .v_head_dim = 96}));
  }
  ASSERT_EQ(m.groups.size(), 2u);
  EXPECT_EQ(m.groups[0].count, 1);
  EXPECT_EQ(m.groups[0].shape.ffn, 11008);
  EXPECT_EQ(m.groups[1].count, 31);
  EXPECT_EQ(m.groups[1].shape.moe.experts, 64);
  EXPECT_EQ(m.groups[1].shape.moe.shared_experts, 2);
  EXPECT_EQ(m.groups[1].shape.moe.top_k, 6);
}

TEST(HfConfig, ArchitecturesWithoutModelType) {
  Json j = read_json_file(kData + "/mistral-7b.config.json");
  j.erase("model_type");
  ModelSpec m = model_from_hf_config(j).value();
  m.name = "mistral-7b";
  EXPECT_TRUE(m == preset("mistral-7b"));
}

TEST(HfConfig, HeadDimKeyOverridesHiddenOverHeads) {
  Json j = read_json_file(kData + "/mistral-7b.config.json");
  j["head_dim"] = 96;
  EXPECT_EQ(model_from_hf_config(j)->groups[0].shape.head_dim, 96);
}

TEST(HfConfig, UnknownTypeWithStandardKeysIsADecoderWithWarning) {
  testing::internal::CaptureStderr();
  const ModelSpec m = load("unknown-decoder.config.json");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning"), std::string::npos) << err;
  EXPECT_NE(err.find("example_lm"), std::string::npos) << err;
  ASSERT_EQ(m.groups.size(), 1u);
  EXPECT_EQ(m.groups[0].shape.kind, LayerKind::kDecoder);
  EXPECT_EQ(m.groups[0].shape.ffn_kind, FfnKind::kSwiglu);  // hidden_act silu
  EXPECT_EQ(m.groups[0].shape.kv_heads, 4);
  EXPECT_EQ(m.norm, NormKind::kRmsNorm);
  // The fixture is TinyLlama-1.1B's shape under another name: 1,100,048,384 parameters.
  EXPECT_DOUBLE_EQ(total_params(m), 1100048384.0);
}

// An unknown model_type whose config speaks of experts in keys weft does not read (OLMoE's
// num_experts, Qwen-MoE's spelling) is refused, naming the keys, instead of read as a dense model.
TEST(HfConfig, UnknownTypeWithUnreadMoeKeysIsRefused) {
  Json j = read_json_file(kData + "/unknown-decoder.config.json");
  EXPECT_TRUE(model_from_hf_config(j).ok());  // dense: read, with the warning
  j["num_experts"] = 64;
  j["num_experts_per_tok"] = 8;
  j["router_aux_loss_coef"] = 0.01;
  testing::internal::CaptureStderr();
  const Result<ModelSpec> r = model_from_hf_config(j, "olmoe.json");
  testing::internal::GetCapturedStderr();
  ASSERT_FALSE(r.ok());
  const std::string msg = r.error().message;
  EXPECT_NE(msg.find("num_experts, num_experts_per_tok, router_aux_loss_coef"), std::string::npos) << msg;
  EXPECT_NE(msg.find("example_lm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("num_local_experts"), std::string::npos) << msg;  // says what weft does read
}

// With Mixtral's keys the experts are read; a routing key weft does not model is named in a warning.
TEST(HfConfig, UnknownTypeWithMixtralKeysNamesTheKeysItIgnores) {
  Json j = read_json_file(kData + "/unknown-decoder.config.json");
  j["num_local_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["router_jitter_noise"] = 0.1;
  testing::internal::CaptureStderr();
  const Result<ModelSpec> r = model_from_hf_config(j, "custom-moe.json");
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->groups[0].shape.moe.experts, 8);
  EXPECT_EQ(r->groups[0].shape.moe.top_k, 2);
  EXPECT_NE(err.find("not read"), std::string::npos) << err;
  EXPECT_NE(err.find("router_jitter_noise"), std::string::npos) << err;
  EXPECT_EQ(err.find("num_local_experts,"), std::string::npos) << err;  // read keys are not listed
}

// The router each family's configuration class describes: Mixtral's renormalised top-k and its
// router_aux_loss_coef; Qwen's norm_topk_prob (false in Qwen1.5-MoE, true in Qwen3-30B-A3B);
// OLMoE (OlmoeConfig: experts of intermediate_size in every layer, default coefficient 0.01).
TEST(HfConfig, RouterSettingsPerFamily) {
  const MoeSpec mixtral = load("mixtral-8x7b.config.json").groups[0].shape.moe;
  EXPECT_EQ(mixtral.score, RouterScore::kSoftmax);
  EXPECT_TRUE(mixtral.norm_topk);
  EXPECT_DOUBLE_EQ(mixtral.aux_loss_coef, 0.02);
  const ModelSpec q15 = load("qwen1.5-moe-a2.7b.config.json");
  EXPECT_FALSE(q15.groups.back().shape.moe.norm_topk);
  EXPECT_DOUBLE_EQ(q15.groups.back().shape.moe.aux_loss_coef, 0.001);
  const ModelSpec q3 = load("qwen3-30b-a3b.config.json");
  EXPECT_TRUE(q3.groups.back().shape.moe.norm_topk);
  auto olmoe = model_from_hf_config(Json::parse(R"({"model_type": "olmoe", "vocab_size": 50304, "hidden_size": 2048,
      "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 1024,
      "num_experts": 64, "num_experts_per_tok": 8, "norm_topk_prob": false, "max_position_embeddings": 4096,
      "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": false})"));
  ASSERT_TRUE(olmoe.ok()) << olmoe.error().message;
  ASSERT_EQ(olmoe->groups.size(), 1u);
  EXPECT_EQ(olmoe->groups[0].count, 16);
  const MoeSpec& o = olmoe->groups[0].shape.moe;
  EXPECT_EQ(o, (MoeSpec{.experts = 64, .top_k = 8, .expert_ffn = 1024, .norm_topk = false, .aux_loss_coef = 0.01}));
  // Its attention normalises all heads' queries (2048 weights) and keys (2048) at once: "6.9B total
  // and 1.3B active parameters" (OLMoE, Muennighoff et al. 2024, table 1).
  const LayerShape& os = olmoe->groups[0].shape;
  EXPECT_TRUE(os.qk_norm && os.qk_norm_full);
  LayerShape per_head = os;
  per_head.qk_norm_full = false;
  EXPECT_DOUBLE_EQ(layer_params(os).norms - layer_params(per_head).norms, 2048.0 + 2048.0 - 2.0 * 128);
  EXPECT_LT(std::abs(total_params(*olmoe) - 6.9e9) / 6.9e9, 0.01) << total_params(*olmoe);
  EXPECT_LT(std::abs(active_params(*olmoe) - 1.3e9) / 1.3e9, 0.02) << active_params(*olmoe);
  // The model JSON writes them as "qk_norm": "full" and reads them back; another string is refused.
  const Json oj = to_json(*olmoe);
  EXPECT_EQ(oj["groups"][0]["qk_norm"], "full");
  EXPECT_EQ(model_from_json(oj).value(), *olmoe);
  Json wrong = oj;
  wrong["groups"][0]["qk_norm"] = "per_token";
  auto refused = model_from_json(wrong);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("qk_norm"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("per_token"), std::string::npos) << refused.error().message;
  // A scoring function weft does not know is named.
  auto bad = model_from_hf_config(Json::parse(R"({"model_type": "deepseek_v3", "vocab_size": 1000, "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, "n_routed_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 32, "scoring_func": "tanh"})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("scoring_func: expected \"softmax\" or \"sigmoid\", got \"tanh\""),
            std::string::npos)
      << bad.error().message;
}

// DeepSeek's topk_method: noaux_tc (DeepSeek-V3) chooses from the topk_group groups whose two best
// biased scores sum highest and balances with a bias; group_limited_greedy (DeepSeek-V2) scores a
// group by its best expert, without a bias; greedy takes the top-k of all. Anything else is named.
TEST(HfConfig, DeepseekGroupLimitedRoutingAndBalancingBias) {
  Json j = read_json_file(kData + "/deepseek-v3.config.json");
  const MoeSpec v3 = model_from_hf_config(j).value().groups.back().shape.moe;
  EXPECT_TRUE(v3.group_limited());
  EXPECT_EQ(v3.group_score_top, 2);
  EXPECT_TRUE(v3.expert_bias);
  j["model_type"] = "deepseek_v2";
  j["scoring_func"] = "softmax";
  j["topk_group"] = 3;
  j["topk_method"] = "group_limited_greedy";
  const MoeSpec v2 = model_from_hf_config(j).value().groups.back().shape.moe;
  EXPECT_EQ(v2.groups, 8);
  EXPECT_EQ(v2.group_top_k, 3);
  EXPECT_EQ(v2.group_score_top, 1);
  EXPECT_FALSE(v2.expert_bias);
  j["topk_method"] = "greedy";
  EXPECT_FALSE(model_from_hf_config(j).value().groups.back().shape.moe.group_limited());
  // noaux_tc with a softmax router: the bias is for sigmoid scores.
  j["topk_method"] = "noaux_tc";
  auto soft = model_from_hf_config(j);
  ASSERT_FALSE(soft.ok());
  EXPECT_NE(soft.error().message.find("moe.expert_bias: balancing biases are added to sigmoid scores"),
            std::string::npos)
      << soft.error().message;
  j["topk_method"] = "sinkhorn";
  auto bad = model_from_hf_config(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("topk_method: expected \"greedy\", \"group_limited_greedy\" or \"noaux_tc\", got "
                                     "\"sinkhorn\""),
            std::string::npos)
      << bad.error().message;
  j["topk_method"] = "group_limited_greedy";
  j["n_group"] = 7;
  auto uneven = model_from_hf_config(j);
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.error().message.find("n_group: 7 does not divide the 256 experts"), std::string::npos)
      << uneven.error().message;
}

// The groups and the bias in weft's model JSON: round trip, and each bad value named with its numbers.
TEST(HfConfig, GroupLimitedRoutingInTheModelJson) {
  const ModelSpec m = load("deepseek-v3.config.json");
  const Json j = to_json(m);
  const Json& moe = j.at("groups").back().at("moe");
  EXPECT_EQ(moe.at("groups"), 8);
  EXPECT_EQ(moe.at("group_top_k"), 4);
  EXPECT_EQ(moe.at("group_score_top"), 2);
  EXPECT_EQ(moe.at("expert_bias"), true);
  auto back = model_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(*back == m);
  auto fails = [&](const std::string& key, const Json& value, const std::string& msg) {
    Json k = j;
    k["groups"].back()["moe"][key] = value;
    auto r = model_from_json(k);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_NE(r.error().message.find(msg), std::string::npos) << r.error().message;
  };
  fails("groups", 6, "moe.groups: 6 must be positive and divide the 256 experts");
  fails("group_top_k", 9, "moe.group_top_k: must be in 1..8 (the groups), got 9");
  fails("group_score_top", 33, "moe.group_score_top: must be in 1..32 (the experts of a group), got 33");
  fails("router", "softmax", "moe.expert_bias: balancing biases are added to sigmoid scores");
  fails("bias_rate", -1, "moe.bias_rate: must be >= 0");
  // Eight experts from one group of 32 is fine; 40 is not.
  Json k = j;
  k["groups"].back()["moe"]["group_top_k"] = 1;
  k["groups"].back()["moe"]["top_k"] = 40;
  auto r = model_from_json(k);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("moe.top_k: 40 experts from 1 groups of 32"), std::string::npos)
      << r.error().message;
  // The group score defaults to the top_k / group_top_k best (DeepSeek-V3's and Megatron-LM's).
  k["groups"].back()["moe"]["top_k"] = 8;
  k["groups"].back()["moe"]["group_top_k"] = 2;
  k["groups"].back()["moe"].erase("group_score_top");
  EXPECT_EQ(model_from_json(k).value().groups.back().shape.moe.group_score_top, 4);
}

// The router's fields round-trip through the model JSON, written only where they differ from the
// defaults, and bad values are named.
TEST(HfConfig, RouterFieldsInTheModelJson) {
  ModelSpec m = load("deepseek-v3.config.json");
  const Json j = to_json(m);
  const Json& moe = j.at("groups").back().at("moe");
  EXPECT_EQ(moe.at("router"), "sigmoid");
  EXPECT_DOUBLE_EQ(moe.at("routed_scale").get<double>(), 2.5);
  EXPECT_FALSE(moe.contains("norm_topk"));  // true, the default
  auto back = model_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(*back == m);
  Json k = j;
  k["groups"].back()["moe"]["routed_scale"] = 0;
  auto r = model_from_json(k);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("moe.routed_scale: must be positive, got 0"), std::string::npos) << r.error().message;
  k["groups"].back()["moe"]["routed_scale"] = 1;
  k["groups"].back()["moe"]["router"] = "relu";
  r = model_from_json(k);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("router: expected \"softmax\" or \"sigmoid\", got \"relu\""), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace weft
