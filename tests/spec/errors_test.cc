// Every bad-input path of the spec loaders returns an error (never a crash) whose message names the
// field and the numbers.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "weft/spec/hf_config.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

const std::string kData = WEFT_SPEC_TEST_DATA;

// Asserts r failed with kind and a message containing every one of `parts`.
template <class T>
void expect_error(const Result<T>& r, ErrorKind kind, const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.ok()) << "expected an error containing " << parts.front();
  EXPECT_EQ(r.error().kind, kind) << r.error().message;
  for (const auto& p : parts)
    EXPECT_NE(r.error().message.find(p), std::string::npos) << "\"" << p << "\" not in: " << r.error().message;
}

Json llama_json() { return model_preset_json("llama-2-7b").value(); }
Json hf(const std::string& file) { return read_json_file(kData + "/" + file); }

TEST(SpecErrors, ModelMissingField) {
  Json j = llama_json();
  j.erase("vocab");
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"m.json.vocab", "missing"});
  j = llama_json();
  j["groups"][0].erase("heads");
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"groups[0].heads", "missing"});
}

TEST(SpecErrors, ModelWrongType) {
  Json j = llama_json();
  j["hidden"] = "4096";
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"hidden", "expected an integer", "\"4096\""});
  j = llama_json();
  j["groups"] = Json::object();
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"groups", "expected an array"});
  j = llama_json();
  j["groups"][0]["ffn_kind"] = "relu2";
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"ffn_kind", "relu2", "gelu", "swiglu"});
}

TEST(SpecErrors, ModelHeadsNotDivisibleByKvHeads) {
  Json j = llama_json();
  j["groups"][0]["kv_heads"] = 5;
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"kv_heads", "5", "32"});
}

TEST(SpecErrors, ModelNonPositiveSizesAndUnknownKeys) {
  Json j = llama_json();
  j["groups"][0]["count"] = 0;
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"count", "0"});
  j = llama_json();
  j["groups"][0]["hiden"] = 4096;
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"hiden", "unknown field"});
  j = model_preset_json("mixtral-8x7b").value();
  j["groups"][0]["moe"]["top_k"] = 9;
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"top_k", "9", "8"});
  // A gate on shared experts the layer does not have (Mixtral has none).
  j = model_preset_json("mixtral-8x7b").value();
  j["groups"][0]["moe"]["shared_gate"] = true;
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"moe.shared_gate", "shared_experts 0"});
}

TEST(SpecErrors, ModelWindowNegativeOrOnAnEncoder) {
  Json j = llama_json();
  j["groups"][0]["window"] = -4;
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"window", "must be >= 0", "-4"});
  j = model_preset_json("bert-large").value();
  j["groups"][0]["window"] = 128;
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"window", "encoder"});
}

// Latent attention projects keys and values per head: kv_heads must equal heads, the rotary dims
// lie inside the head, and a key/value latent is required.
TEST(SpecErrors, ModelLatentAttentionFields) {
  Json j = llama_json();  // 32 heads of 128, 32 key/value heads
  j["groups"][0]["mla"] = {{"q_lora_rank", 1536}, {"kv_lora_rank", 512}, {"qk_rope_dim", 64}, {"v_head_dim", 128}};
  EXPECT_TRUE(model_from_json(j, "m.json").ok());
  j["groups"][0]["kv_heads"] = 8;
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"kv_heads", "8", "latent", "32"});
  j["groups"][0]["kv_heads"] = 32;
  j["groups"][0]["mla"]["qk_rope_dim"] = 128;
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"mla.qk_rope_dim", "below head_dim 128", "128"});
  j["groups"][0]["mla"]["qk_rope_dim"] = 64;
  j["groups"][0]["mla"]["kv_lora_rank"] = 0;
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"kv_lora_rank", "must be positive", "0"});
  j["groups"][0]["mla"] = {{"kv_lora_rank", 512}, {"qk_rope_dim", 64}};
  expect_error(model_from_json(j, "m.json"), ErrorKind::kBadInput, {"v_head_dim"});
  // DeepSeek's config without the rotary dims: the key is named.
  Json h = hf("deepseek-v3.config.json");
  h.erase("qk_rope_head_dim");
  expect_error(model_from_hf_config(h, "c.json"), ErrorKind::kBadInput, {"qk_rope_head_dim"});
}

TEST(SpecErrors, HfMissingKey) {
  Json j = hf("llama-2-7b.config.json");
  j.erase("intermediate_size");
  expect_error(model_from_hf_config(j, "config.json"), ErrorKind::kBadInput, {"intermediate_size", "missing"});
  j = hf("t5-large.config.json");
  j.erase("d_kv");
  expect_error(model_from_hf_config(j, "config.json"), ErrorKind::kBadInput, {"d_kv", "missing"});
  j = hf("gpt2.config.json");
  j.erase("n_positions");
  j.erase("n_ctx");
  expect_error(model_from_hf_config(j, "config.json"), ErrorKind::kBadInput, {"n_ctx", "missing"});
}

TEST(SpecErrors, HfWrongType) {
  Json j = hf("bert-large-uncased.config.json");
  j["hidden_size"] = "big";
  expect_error(model_from_hf_config(j, "config.json"), ErrorKind::kBadInput, {"hidden_size", "expected an integer"});
  j = hf("llama-2-7b.config.json");
  j["num_hidden_layers"] = -2;
  expect_error(model_from_hf_config(j, "config.json"), ErrorKind::kBadInput, {"num_hidden_layers", "-2"});
}

TEST(SpecErrors, HfKvHeadsAndHiddenDivisibility) {
  Json j = hf("mistral-7b.config.json");
  j["num_key_value_heads"] = 5;
  expect_error(model_from_hf_config(j, "config.json"), ErrorKind::kBadInput,
               {"num_key_value_heads", "5", "num_attention_heads 32"});
  j = hf("mistral-7b.config.json");
  j["num_attention_heads"] = 30;
  j["num_key_value_heads"] = 10;
  expect_error(model_from_hf_config(j, "config.json"), ErrorKind::kBadInput, {"hidden_size", "4096", "30"});
}

TEST(SpecErrors, HfMoeAndT5Values) {
  Json j = hf("mixtral-8x7b.config.json");
  j["num_experts_per_tok"] = 9;
  expect_error(model_from_hf_config(j, "config.json"), ErrorKind::kBadInput, {"num_experts_per_tok", "9", "8"});
  j = hf("qwen1.5-moe-a2.7b.config.json");
  j["shared_expert_intermediate_size"] = 5000;
  expect_error(model_from_hf_config(j, "config.json"), ErrorKind::kBadInput,
               {"shared_expert_intermediate_size", "5000", "1408"});
  j = hf("t5-large.config.json");
  j["feed_forward_proj"] = "gated-tanh";
  expect_error(model_from_hf_config(j, "config.json"), ErrorKind::kBadInput, {"feed_forward_proj", "gated-tanh"});
}

TEST(SpecErrors, HfUnknownModelTypeWithoutStandardKeys) {
  const Json j = Json::parse(R"({"model_type": "whisper", "d_model": 1280, "encoder_layers": 32})");
  expect_error(model_from_hf_config(j, "config.json"), ErrorKind::kBadInput,
               {"whisper", "hidden_size", "llama"});
  const Json k = Json::parse(R"({"architectures": []})");
  expect_error(model_from_hf_config(k, "config.json"), ErrorKind::kBadInput, {"model_type"});
}

TEST(SpecErrors, UnknownPresetNamesTheKnownOnes) {
  expect_error(load_model("llama-9-7b"), ErrorKind::kBadInput, {"llama-9-7b", "llama-2-7b", "gpt3-175b"});
  expect_error(load_cluster("tpu-v5"), ErrorKind::kBadInput, {"tpu-v5", "a100-80gb", "h100-80gb"});
  expect_error(model_preset_json("nope"), ErrorKind::kBadInput, {"nope", "mixtral-8x7b"});
  expect_error(cluster_preset_json("nope"), ErrorKind::kBadInput, {"nope", "b200"});
}

TEST(SpecErrors, MissingAndMalformedFiles) {
  expect_error(load_model("/nonexistent/model.json"), ErrorKind::kIo, {"/nonexistent/model.json"});
  expect_error(load_cluster("no_such_dir/cluster.json"), ErrorKind::kIo, {"no_such_dir/cluster.json"});
  const std::string path = std::string(WEFT_BINARY_DIR) + "/spec_errors_malformed.json";
  write_text_file(path, "{\"vocab\": 5,");
  expect_error(load_model(path), ErrorKind::kBadInput, {path, "malformed JSON"});
  std::remove(path.c_str());
}

TEST(SpecErrors, ClusterFields) {
  Json j = cluster_preset_json("a100-80gb").value();
  j["gpu"].erase("memory_gib");
  expect_error(cluster_from_json(j, "c.json"), ErrorKind::kBadInput, {"gpu.memory_gib", "missing"});
  j = cluster_preset_json("a100-80gb").value();
  j["gpus_per_node"] = "eight";
  expect_error(cluster_from_json(j, "c.json"), ErrorKind::kBadInput, {"gpus_per_node", "expected an integer"});
  j = cluster_preset_json("a100-80gb").value();
  j["nodes"] = 4;
  j["inter_node"]["gbps"] = 0;
  expect_error(cluster_from_json(j, "c.json"), ErrorKind::kBadInput, {"inter_node.gbps", "4 nodes"});
  j = cluster_preset_json("a100-80gb").value();
  j["gpu"]["tflops"]["int8"] = 624;
  expect_error(cluster_from_json(j, "c.json"), ErrorKind::kBadInput, {"int8", "unknown field"});
}

}  // namespace
}  // namespace weft
