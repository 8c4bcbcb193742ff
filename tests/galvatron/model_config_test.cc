#include <gtest/gtest.h>

#include "test_util.h"

namespace weft::galvatron {
namespace {

using testing::ok;

TEST(GalvatronModelYaml, ReadsLlama27b) {
  const ModelConfig c = ok(read_model_yaml(testing::reference_dir() + "/llama2-7b.yaml"));
  EXPECT_EQ(c.model_size, "llama2-7b");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_query_groups, 0);  // null
  EXPECT_EQ(c.ffn_hidden_size, 11008);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_TRUE(c.gated_linear_unit);
  EXPECT_FALSE(c.add_bias_linear);
  const ModelSpec m = ok(to_model_spec(c));
  EXPECT_EQ(m.name, "llama2-7b");
  EXPECT_EQ(m.num_layers(), 32);
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.vocab, 32000);  // already a multiple of 128
  EXPECT_EQ(m.layer(0).kv_heads, 32);
  EXPECT_EQ(m.layer(0).head_dim, 128);
  EXPECT_EQ(m.layer(0).ffn_kind, FfnKind::kSwiglu);
  EXPECT_EQ(m.norm, NormKind::kRmsNorm);
  EXPECT_EQ(m.position, PositionKind::kRope);
  EXPECT_TRUE(m.tied_embeddings);  // the YAML says untie_embeddings_and_output_weights: false
}

TEST(GalvatronModelYaml, ReadsGqaAndMoe) {
  const ModelSpec l70 = ok(to_model_spec(ok(read_model_yaml(testing::reference_dir() + "/llama2-70b.yaml"))));
  EXPECT_EQ(l70.layer(0).heads, 64);
  EXPECT_EQ(l70.layer(0).kv_heads, 8);
  const ModelSpec mx = ok(to_model_spec(ok(read_model_yaml(testing::reference_dir() + "/mixtral-8x7b-e8k2.yaml"))));
  EXPECT_EQ(mx.layer(0).moe.experts, 8);
  EXPECT_EQ(mx.layer(0).moe.top_k, 2);
  EXPECT_EQ(mx.layer(0).moe.expert_ffn, 14336);
  EXPECT_FALSE(mx.tied_embeddings);
}

TEST(GalvatronModelYaml, PadsVocabulary) {
  const std::string y = "model_size: t\nhidden_size: 64\nnum_layers: 2\nnum_attention_heads: 4\n"
                        "ffn_hidden_size: 256\nvocab_size: 1000\nmake_vocab_size_divisible_by: 128\n";
  const ModelSpec m = ok(to_model_spec(ok(model_config_from_yaml(y, "t.yaml"))));
  EXPECT_EQ(m.vocab, 1024);
}

TEST(GalvatronModelYaml, ErrorsNameFileAndKey) {
  auto missing = model_config_from_yaml("model_size: x\nhidden_size: 64\nnum_layers: 2\n", "m.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("m.yaml: num_attention_heads: missing required field"), std::string::npos)
      << missing.error().message;

  auto bad = model_config_from_yaml("model_size: x\nhidden_size: big\n", "m.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("m.yaml: hidden_size: expected an integer, got \"big\""), std::string::npos)
      << bad.error().message;

  auto malformed = model_config_from_yaml("model_size: [unclosed\n", "m.yaml");
  ASSERT_FALSE(malformed.ok());
  EXPECT_NE(malformed.error().message.find("m.yaml: malformed YAML"), std::string::npos);

  auto nofile = read_model_yaml("/nonexistent/x.yaml");
  ASSERT_FALSE(nofile.ok());
  EXPECT_EQ(nofile.error().kind, ErrorKind::kIo);
  EXPECT_NE(nofile.error().message.find("/nonexistent/x.yaml"), std::string::npos);

  auto ffn = model_config_from_yaml("model_size: x\nhidden_size: 64\nnum_layers: 2\nnum_attention_heads: 4\n"
                                    "vocab_size: 10\n",
                                    "m.yaml");
  ASSERT_FALSE(ffn.ok());
  EXPECT_NE(ffn.error().message.find("ffn_hidden_size: missing required field"), std::string::npos);

  auto norm = to_model_spec(ok(model_config_from_yaml(
      "model_size: x\nhidden_size: 64\nnum_layers: 2\nnum_attention_heads: 4\nffn_hidden_size: 8\n"
      "vocab_size: 10\nnormalization: BatchNorm\n",
      "m.yaml")));
  ASSERT_FALSE(norm.ok());
  EXPECT_NE(norm.error().message.find("normalization"), std::string::npos);
}

}  // namespace
}  // namespace weft::galvatron
