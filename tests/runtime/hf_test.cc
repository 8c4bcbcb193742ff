// Hugging Face checkpoints in and out of weft train (docs/runtime.md "Hugging Face checkpoints").
// Each test writes a small checkpoint of one family itself (config.json as the family's configs
// read, weights drawn from a fixed seed, safetensors), computes the loss of one token window with
// the family's own forward written out here from its modeling code (at:: ops, double precision),
// and checks that weft's first-step loss on that window, under one process and under parallel
// plans, is that loss: names, layouts (GPT-2's transposed Conv1D, its fused QKV), RoPE, norm
// epsilons and biases all have to be right for it to agree. Saving writes back what was trained.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <random>

#include "rt_util.h"
#include "weft/plan/geometry.h"
#include "weft/runtime/hf_checkpoint.h"
#include "weft/runtime/safetensors.h"
#include "weft/spec/presets.h"

namespace weft::rttest {
namespace {

using runtime::HfCheckpoint;
using runtime::SaveDType;
using runtime::TensorOut;

constexpr int kSeq = 16;

struct Family {
  std::string type;  // llama, mistral, qwen2, gpt2, mixtral
  int layers = 2, vocab = 64, hidden = 32, heads = 4, kv_heads = 2, ffn = 64, max_pos = 32;
  int experts = 4, top_k = 2;  // mixtral, qwen3_moe
  int dim = 0;                 // head_dim where not hidden / heads (qwen3)
  int shared = 0;              // qwen2_moe: shared_expert_intermediate_size in experts' widths
  bool norm_topk = true;       // qwen*_moe: norm_topk_prob
  double eps = 1e-6, theta = 500000;
  bool tied = false;
  bool qkv_bias = false;
  bool gpt2_prefix = false;  // GPT2LMHeadModel's "transformer." names
  int head_dim() const { return dim > 0 ? dim : hidden / heads; }
  bool moe() const { return type == "mixtral" || type == "qwen3_moe" || type == "qwen2_moe" || type == "olmoe"; }
  bool qk_norm() const { return type == "qwen3" || type == "qwen3_moe"; }
  bool olmoe() const { return type == "olmoe"; }  // query / key norms over all heads
};

Json config_of(const Family& f) {
  if (f.type == "gpt2")
    return Json{{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"},   {"vocab_size", f.vocab},
                {"n_embd", f.hidden},                   {"n_layer", f.layers},    {"n_head", f.heads},
                {"n_positions", f.max_pos},             {"n_ctx", f.max_pos},     {"n_inner", nullptr},
                {"activation_function", "gelu_new"},    {"layer_norm_epsilon", f.eps}, {"tie_word_embeddings", true}};
  Json j{{"architectures", {f.type == "qwen2" ? "Qwen2ForCausalLM" : f.type == "mistral" ? "MistralForCausalLM" : "LlamaForCausalLM"}},
         {"model_type", f.type},
         {"vocab_size", f.vocab},
         {"hidden_size", f.hidden},
         {"intermediate_size", f.ffn},
         {"num_hidden_layers", f.layers},
         {"num_attention_heads", f.heads},
         {"num_key_value_heads", f.kv_heads},
         {"hidden_act", "silu"},
         {"max_position_embeddings", f.max_pos},
         {"rms_norm_eps", f.eps},
         {"rope_theta", f.theta},
         {"tie_word_embeddings", f.tied}};
  if (f.type == "mistral") j["sliding_window"] = 4096;
  if (f.dim > 0) j["head_dim"] = f.dim;
  if (f.qk_norm()) {
    j["architectures"] = {f.type == "qwen3" ? "Qwen3ForCausalLM" : "Qwen3MoeForCausalLM"};
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
  if (f.olmoe()) {  // OlmoeConfig: the experts' width in intermediate_size, no moe_intermediate_size
    j["architectures"] = {"OlmoeForCausalLM"};
    j["num_experts"] = f.experts;
    j["num_experts_per_tok"] = f.top_k;
    j["norm_topk_prob"] = f.norm_topk;
    j["router_aux_loss_coef"] = 0.0;
    j["clip_qkv"] = nullptr;
  }
  if (f.type == "qwen3_moe" || f.type == "qwen2_moe") {
    j["num_experts"] = f.experts;
    j["num_experts_per_tok"] = f.top_k;
    j["moe_intermediate_size"] = f.ffn;
    j["norm_topk_prob"] = f.norm_topk;
    j["router_aux_loss_coef"] = 0.0;
  }
  if (f.type == "qwen2_moe") {
    j["architectures"] = {"Qwen2MoeForCausalLM"};
    j["shared_expert_intermediate_size"] = f.shared * f.ffn;
    j["use_sliding_window"] = false;
  }
  if (f.type == "mixtral") {
    j["architectures"] = {"MixtralForCausalLM"};
    j["num_local_experts"] = f.experts;
    j["num_experts_per_tok"] = f.top_k;
    j["sliding_window"] = nullptr;
    j["router_aux_loss_coef"] = 0.0;  // the loss compared is the language model's alone
    j["output_router_logits"] = false;
  }
  if (f.type == "qwen2") j["sliding_window"] = 8, j["use_sliding_window"] = false;
  return j;
}

// The family's tensors: HF name -> shape.
std::vector<std::pair<std::string, std::vector<int64_t>>> hf_tensors(const Family& f) {
  const int64_t H = f.hidden, V = f.vocab, F = f.ffn, d = f.head_dim(), q = f.heads * d, kv = f.kv_heads * d;
  std::vector<std::pair<std::string, std::vector<int64_t>>> t;
  if (f.type == "gpt2") {
    const std::string p = f.gpt2_prefix ? "transformer." : "";
    const int64_t F4 = 4 * H;
    t.push_back({p + "wte.weight", {V, H}});
    t.push_back({p + "wpe.weight", {f.max_pos, H}});
    for (int l = 0; l < f.layers; ++l) {
      const std::string h = p + "h." + std::to_string(l) + ".";
      t.push_back({h + "ln_1.weight", {H}});
      t.push_back({h + "ln_1.bias", {H}});
      t.push_back({h + "attn.c_attn.weight", {H, 3 * H}});
      t.push_back({h + "attn.c_attn.bias", {3 * H}});
      t.push_back({h + "attn.c_proj.weight", {H, H}});
      t.push_back({h + "attn.c_proj.bias", {H}});
      t.push_back({h + "ln_2.weight", {H}});
      t.push_back({h + "ln_2.bias", {H}});
      t.push_back({h + "mlp.c_fc.weight", {H, F4}});
      t.push_back({h + "mlp.c_fc.bias", {F4}});
      t.push_back({h + "mlp.c_proj.weight", {F4, H}});
      t.push_back({h + "mlp.c_proj.bias", {H}});
      t.push_back({h + "attn.bias", {1, 1, f.max_pos, f.max_pos}});  // the causal-mask buffer old exports keep
    }
    t.push_back({p + "ln_f.weight", {H}});
    t.push_back({p + "ln_f.bias", {H}});
    return t;
  }
  t.push_back({"model.embed_tokens.weight", {V, H}});
  for (int l = 0; l < f.layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    t.push_back({h + "input_layernorm.weight", {H}});
    t.push_back({h + "self_attn.q_proj.weight", {q, H}});
    t.push_back({h + "self_attn.k_proj.weight", {kv, H}});
    t.push_back({h + "self_attn.v_proj.weight", {kv, H}});
    if (f.qkv_bias) {
      t.push_back({h + "self_attn.q_proj.bias", {q}});
      t.push_back({h + "self_attn.k_proj.bias", {kv}});
      t.push_back({h + "self_attn.v_proj.bias", {kv}});
    }
    if (f.qk_norm()) {
      t.push_back({h + "self_attn.q_norm.weight", {d}});
      t.push_back({h + "self_attn.k_norm.weight", {d}});
    }
    if (f.olmoe()) {
      t.push_back({h + "self_attn.q_norm.weight", {q}});
      t.push_back({h + "self_attn.k_norm.weight", {kv}});
    }
    t.push_back({h + "self_attn.o_proj.weight", {H, q}});
    t.push_back({h + "post_attention_layernorm.weight", {H}});
    if (f.moe()) {
      // Mixtral's block_sparse_moe.{gate, experts.E.w1 / w3 / w2}; the Qwens' mlp.{gate,
      // experts.E.gate_proj / up_proj / down_proj}, Qwen2-MoE's gated shared expert beside them.
      const bool mix = f.type == "mixtral";
      const std::string b = h + (mix ? "block_sparse_moe." : "mlp.");
      t.push_back({b + "gate.weight", {f.experts, H}});
      if (f.shared > 0) {
        const int64_t Fs = f.shared * F;
        t.push_back({b + "shared_expert.gate_proj.weight", {Fs, H}});
        t.push_back({b + "shared_expert.up_proj.weight", {Fs, H}});
        t.push_back({b + "shared_expert.down_proj.weight", {H, Fs}});
        t.push_back({b + "shared_expert_gate.weight", {1, H}});
      }
      for (int e = 0; e < f.experts; ++e) {
        const std::string x = b + "experts." + std::to_string(e) + ".";
        t.push_back({x + (mix ? "w1" : "gate_proj") + ".weight", {F, H}});
        t.push_back({x + (mix ? "w3" : "up_proj") + ".weight", {F, H}});
        t.push_back({x + (mix ? "w2" : "down_proj") + ".weight", {H, F}});
      }
      continue;
    }
    t.push_back({h + "mlp.gate_proj.weight", {F, H}});
    t.push_back({h + "mlp.up_proj.weight", {F, H}});
    t.push_back({h + "mlp.down_proj.weight", {H, F}});
  }
  t.push_back({"model.norm.weight", {H}});
  if (!f.tied) t.push_back({"lm_head.weight", {V, H}});
  return t;
}

using Weights = std::map<std::string, at::Tensor>;  // HF name -> double tensor

// Writes the checkpoint (into `shards` files when > 1) and returns its weights. Norm weights near
// 1, everything else N(0, 0.2): large enough that a wrong layout moves the loss.
Weights write_checkpoint(const Family& f, const std::string& dir, int shards = 1) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config_of(f).dump(2);
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 0.2f);
  Weights w;
  std::vector<std::pair<std::string, std::vector<float>>> data;
  for (const auto& [name, shape] : hf_tensors(f)) {
    int64_t count = 1;
    for (int64_t s : shape) count *= s;
    std::vector<float> v(static_cast<size_t>(count));
    const bool norm = name.find("norm") != std::string::npos || name.find("ln_") != std::string::npos;
    const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    for (auto& x : v) x = norm && !is_bias ? 1.0f + n(rng) : n(rng);
    w[name] = torch::from_blob(v.data(), shape, at::kFloat).to(at::kDouble).clone();
    data.emplace_back(name, std::move(v));
  }
  Json weight_map = Json::object();
  const size_t per = (data.size() + shards - 1) / shards;
  for (int k = 0; k < shards; ++k) {
    const std::string file = shards == 1 ? "model.safetensors"
                                         : "model-0000" + std::to_string(k + 1) + "-of-0000" + std::to_string(shards) +
                                               ".safetensors";
    std::vector<TensorOut> out;
    for (size_t i = k * per; i < std::min(data.size(), (k + 1) * per); ++i) {
      out.push_back({data[i].first, hf_tensors(f)[i].second, &data[i].second});
      weight_map[data[i].first] = file;
    }
    EXPECT_TRUE(runtime::write_safetensors(dir + "/" + file, out, SaveDType::kF32).ok());
  }
  if (shards > 1) std::ofstream(dir + "/model.safetensors.index.json") << Json{{"weight_map", weight_map}}.dump();
  return w;
}

at::Tensor rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

at::Tensor causal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {  // [h, T, d]
  const int64_t T = q.size(1);
  at::Tensor s = at::matmul(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(q.size(2)));
  s = s.masked_fill(at::ones({T, T}, at::kBool).triu(1), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(s, -1), v);
}

// The family's forward (transformers' modeling_llama / modeling_qwen2 / modeling_gpt2) and the mean
// next-token loss of tokens[0..T) predicting tokens[1..T].
double reference_loss(const Family& f, const Weights& w, const std::vector<int64_t>& tokens) {
  at::NoGradGuard ng;
  const int64_t T = static_cast<int64_t>(tokens.size()) - 1, d = f.head_dim(), nh = f.heads;
  at::Tensor ids = torch::tensor(std::vector<int64_t>(tokens.begin(), tokens.end() - 1));
  at::Tensor tgt = torch::tensor(std::vector<int64_t>(tokens.begin() + 1, tokens.end()));
  auto W = [&](const std::string& n) { return w.at(n); };
  at::Tensor x, logits;
  if (f.type == "gpt2") {
    const std::string p = f.gpt2_prefix ? "transformer." : "";
    auto ln = [&](const at::Tensor& v, const std::string& n) {
      return at::layer_norm(v, {f.hidden}, W(p + n + ".weight"), W(p + n + ".bias"), f.eps);
    };
    x = W(p + "wte.weight").index_select(0, ids) + W(p + "wpe.weight").narrow(0, 0, T);
    for (int l = 0; l < f.layers; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      at::Tensor qkv = at::matmul(ln(x, h + "ln_1"), W(p + h + "attn.c_attn.weight")) + W(p + h + "attn.c_attn.bias");
      auto heads = [&](int k) { return qkv.narrow(1, k * f.hidden, f.hidden).view({T, nh, d}).transpose(0, 1); };
      at::Tensor a = causal(heads(0), heads(1), heads(2)).transpose(0, 1).reshape({T, f.hidden});
      x = x + at::matmul(a, W(p + h + "attn.c_proj.weight")) + W(p + h + "attn.c_proj.bias");
      at::Tensor m = at::gelu(at::matmul(ln(x, h + "ln_2"), W(p + h + "mlp.c_fc.weight")) + W(p + h + "mlp.c_fc.bias"), "tanh");
      x = x + at::matmul(m, W(p + h + "mlp.c_proj.weight")) + W(p + h + "mlp.c_proj.bias");
    }
    logits = at::matmul(ln(x, "ln_f"), W(p + "wte.weight").t());
  } else {
    const int64_t nkv = f.kv_heads, half = d / 2;
    at::Tensor inv = at::pow(f.theta, -at::arange(0, half, at::kDouble) * 2.0 / static_cast<double>(d));
    at::Tensor ang = at::arange(0, T, at::kDouble).unsqueeze(1) * inv.unsqueeze(0);  // [T, d/2]
    at::Tensor cos = at::cat({ang, ang}, -1).cos().unsqueeze(0), sin = at::cat({ang, ang}, -1).sin().unsqueeze(0);
    auto rotate_half = [&](const at::Tensor& v) { return at::cat({-v.narrow(-1, half, half), v.narrow(-1, 0, half)}, -1); };
    auto lin = [&](const at::Tensor& v, const std::string& n) {
      at::Tensor y = at::matmul(v, W(n + ".weight").t());
      return w.count(n + ".bias") ? y + W(n + ".bias") : y;
    };
    x = W("model.embed_tokens.weight").index_select(0, ids);
    for (int l = 0; l < f.layers; ++l) {
      const std::string h = "model.layers." + std::to_string(l) + ".";
      at::Tensor hn = rms(x, W(h + "input_layernorm.weight"), f.eps);
      at::Tensor q = lin(hn, h + "self_attn.q_proj"), k = lin(hn, h + "self_attn.k_proj");
      if (f.olmoe()) {  // OlmoeAttention: q_norm over all heads' queries, k_norm over all keys
        q = rms(q, W(h + "self_attn.q_norm.weight"), f.eps);
        k = rms(k, W(h + "self_attn.k_norm.weight"), f.eps);
      }
      q = q.view({T, nh, d}).transpose(0, 1);
      k = k.view({T, nkv, d}).transpose(0, 1);
      at::Tensor v = lin(hn, h + "self_attn.v_proj").view({T, nkv, d}).transpose(0, 1);
      if (f.qk_norm()) {  // Qwen3: each head's query and key RMS-normalised over head_dim, before RoPE
        q = rms(q, W(h + "self_attn.q_norm.weight"), f.eps);
        k = rms(k, W(h + "self_attn.k_norm.weight"), f.eps);
      }
      q = q * cos + rotate_half(q) * sin;
      k = k * cos + rotate_half(k) * sin;
      k = k.repeat_interleave(nh / nkv, 0);  // repeat_kv
      v = v.repeat_interleave(nh / nkv, 0);
      x = x + lin(causal(q, k, v).transpose(0, 1).reshape({T, nh * d}), h + "self_attn.o_proj");
      at::Tensor h2 = rms(x, W(h + "post_attention_layernorm.weight"), f.eps);
      if (f.moe()) {
        // MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock / Qwen2MoeSparseMoeBlock: softmax over the
        // router's logits, the top k renormalised (Mixtral always, the Qwens as norm_topk_prob
        // says), each token the weighted sum of its experts' SwiGLU outputs.
        const bool mix = f.type == "mixtral";
        const std::string b = h + (mix ? "block_sparse_moe." : "mlp.");
        at::Tensor probs = at::softmax(lin(h2, b + "gate"), -1);
        auto [topv, topi] = probs.topk(f.top_k, -1);
        if (mix || f.norm_topk) topv = topv / topv.sum(-1, true);
        at::Tensor weight = at::zeros({T, f.experts}, at::kDouble).scatter(1, topi, topv);
        at::Tensor y = at::zeros_like(h2);
        for (int e = 0; e < f.experts; ++e) {
          const std::string xe = b + "experts." + std::to_string(e) + ".";
          const at::Tensor out = mix ? lin(at::silu(lin(h2, xe + "w1")) * lin(h2, xe + "w3"), xe + "w2")
                                     : lin(at::silu(lin(h2, xe + "gate_proj")) * lin(h2, xe + "up_proj"), xe + "down_proj");
          y = y + weight.narrow(1, e, 1) * out;
        }
        if (f.shared > 0) {  // Qwen2MoeSparseMoeBlock: the shared expert times sigmoid(shared_expert_gate(h))
          const std::string se = b + "shared_expert.";
          y = y + at::sigmoid(lin(h2, b + "shared_expert_gate")) *
                      lin(at::silu(lin(h2, se + "gate_proj")) * lin(h2, se + "up_proj"), se + "down_proj");
        }
        x = x + y;
        continue;
      }
      x = x + lin(at::silu(lin(h2, h + "mlp.gate_proj")) * lin(h2, h + "mlp.up_proj"), h + "mlp.down_proj");
    }
    x = rms(x, W("model.norm.weight"), f.eps);
    logits = at::matmul(x, (f.tied ? W("model.embed_tokens.weight") : W("lm_head.weight")).t());
  }
  return at::cross_entropy_loss(logits, tgt).item<double>();
}

// A token file of exactly one sample (kSeq + 1 tokens): every sample of every step is that window.
std::vector<int64_t> write_window(const std::string& path, int vocab) {
  std::vector<int64_t> t;
  std::vector<uint16_t> u;
  std::mt19937 rng(3);
  for (int i = 0; i <= kSeq; ++i) t.push_back(static_cast<int64_t>(rng() % vocab)), u.push_back(static_cast<uint16_t>(t.back()));
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(u.data()), static_cast<std::streamsize>(u.size() * 2));
  return t;
}

ModelSpec model_of(const std::string& dir) {
  auto m = load_model(dir + "/config.json");
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? *m : ModelSpec{};
}

Plan plan_of(const ModelSpec& m, int world, int pp, const LayerStrategy& s) {
  Plan p = uniform(m, world, pp, s, {}, Schedule::k1F1B, 4, 2);
  p.train.seq = kSeq;
  return p;
}

class HfCheckpoints : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name()); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes family f, then checks weft's first-step loss under each plan against the reference.
  void expect_first_loss(const Family& f, const std::vector<std::pair<std::string, Plan>>& plans, int shards = 1) {
    const std::string ck = dir_ + "/" + f.type;
    const Weights w = write_checkpoint(f, ck, shards);
    const std::vector<int64_t> window = write_window(dir_ + "/window.bin", f.vocab);
    const double want = reference_loss(f, w, window);
    for (const auto& [name, p] : plans) {
      const RunResult r = train_plan(p, dir_, name, 1, " --data " + dir_ + "/window.bin --hf-checkpoint " + ck);
      ASSERT_EQ(r.status, 0) << name << ": " << r.output;
      ASSERT_EQ(r.losses.size(), 1u) << r.output;
      EXPECT_NEAR(r.losses[0], want, 1e-5 * want) << f.type << " " << name;
      std::printf("%s %s: loss %.7f, the family's forward %.7f\n", f.type.c_str(), name.c_str(), r.losses[0], want);
    }
  }
  // Trains plan p for two steps on the window (`flags` more) and saves it to dir_/out: a checkpoint
  // of `family`, every trained parameter read back exactly, the HF tensors `names` among its
  // tensors, and a config.json weft's reader turns back into p's model. Returns the parameters.
  runtime::ParamsFile expect_saves_back(const Plan& p, runtime::HfFamily family, const std::string& flags,
                                        const std::vector<std::string>& names) {
    const std::string out = dir_ + "/out";
    const RunResult r = train_plan(p, dir_, "save", 2, " --data " + dir_ + "/window.bin --save-hf " + out + flags);
    EXPECT_EQ(r.status, 0) << r.output;
    auto ck = HfCheckpoint::open(out);
    if (!ck.ok()) {
      ADD_FAILURE() << ck.error().message;
      return {};
    }
    EXPECT_EQ((*ck)->family(), family);
    EXPECT_EQ(model_of(out).groups[0].shape, p.model.groups[0].shape);
    const Status c = (*ck)->check(p);
    EXPECT_TRUE(c.ok()) << c.error().message;
    const runtime::ParamsFile params = read_params(dir_ + "/save.params");
    for (const auto& np : params.params) {
      auto t = (*ck)->tensor(np.name, np.shape);
      EXPECT_TRUE(t.ok()) << t.error().message;
      if (t.ok()) EXPECT_EQ(*t, np.data) << np.name;
    }
    auto file = runtime::SafetensorsFile::open(out + "/model.safetensors");
    EXPECT_TRUE(file.ok());
    for (const std::string& n : names)
      if (file.ok()) EXPECT_NE((*file)->find(n), nullptr) << n;
    return params;
  }
  std::string dir_;
};

TEST_F(HfCheckpoints, LlamaLoadsIntoAnyPlanWithTheFamilysLoss) {
  Family f{"llama"};
  const ModelSpec m = model_of((write_checkpoint(f, dir_ + "/cfg"), dir_ + "/cfg"));
  EXPECT_EQ(m.norm_eps, 1e-6);
  EXPECT_EQ(m.rope_theta, 500000);
  expect_first_loss(f, {{"one", plan_of(m, 1, 1, LayerStrategy{})},
                        {"tp2_sp", plan_of(m, 2, 1, strat(2, 1, 1, true))},
                        {"pp2", plan_of(m, 2, 2, LayerStrategy{})},
                        {"zero3_dp2", plan_of(m, 2, 1, strat(1, 2, 1, false, 3))}},
                    /*shards=*/3);
}

TEST_F(HfCheckpoints, Qwen2WithQkvBiasesAndTiedHeadLoads) {
  Family f{"qwen2"};
  f.qkv_bias = true;
  f.tied = true;
  f.theta = 1e6;
  const ModelSpec m = model_of((write_checkpoint(f, dir_ + "/cfg"), dir_ + "/cfg"));
  EXPECT_TRUE(m.groups[0].shape.qkv_bias);
  EXPECT_FALSE(m.groups[0].shape.bias);
  expect_first_loss(f, {{"one", plan_of(m, 1, 1, LayerStrategy{})}, {"tp2", plan_of(m, 2, 1, strat(2, 1))}});
}

TEST_F(HfCheckpoints, MistralLoadsUnderItsSlidingWindow) {
  Family f{"mistral"};
  f.eps = 1e-5;
  f.theta = 10000;
  const ModelSpec m = model_of((write_checkpoint(f, dir_ + "/cfg"), dir_ + "/cfg"));
  expect_first_loss(f, {{"one", plan_of(m, 1, 1, LayerStrategy{})}});
}

TEST_F(HfCheckpoints, Gpt2FusedTransposedWeightsLoad) {
  Family f{"gpt2"};
  f.kv_heads = f.heads;
  f.eps = 1e-5;
  f.tied = true;
  const ModelSpec m = model_of((write_checkpoint(f, dir_ + "/cfg"), dir_ + "/cfg"));
  expect_first_loss(f, {{"one", plan_of(m, 1, 1, LayerStrategy{})},
                        {"tp2", plan_of(m, 2, 1, strat(2, 1))},
                        {"pp2_dp", plan_of(m, 2, 2, LayerStrategy{})}});
  f.gpt2_prefix = true;  // GPT2LMHeadModel's own names
  expect_first_loss(f, {{"prefixed", plan_of(m, 1, 1, LayerStrategy{})}});
}

// Mixtral: the router (block_sparse_moe.gate) and each expert's w1 / w3 / w2 load into weft's MoE
// layers under one process, expert parallelism (ep 2 over dp 2) and tensor parallelism on the
// attention with ep 2 (tp 2, etp 1), with the family's first-step loss; --save-hf after ep 2
// training writes a mixtral checkpoint weft reads back to the trained parameters exactly, with a
// config weft's reader turns into the same model.
Plan with_ep(Plan p, int ep, int etp = 0) {
  for (Stage& st : p.stages)
    for (int i = 0; i < st.num_layers(); ++i)
      if (p.model.layer(st.first_layer + i).moe.enabled()) st.layers[i].ep = ep, st.layers[i].etp = etp;
  EXPECT_TRUE(validate(p).ok()) << validate(p).error().message;
  return p;
}

TEST_F(HfCheckpoints, MixtralExpertsLoadUnderExpertParallelismAndSaveBack) {
  Family f{"mixtral"};
  f.eps = 1e-5;
  f.theta = 1e6;
  f.ffn = 24;
  const std::string src = dir_ + "/cfg";
  write_checkpoint(f, src);
  const ModelSpec m = model_of(src);
  ASSERT_TRUE(m.groups[0].shape.moe.enabled());
  EXPECT_EQ(m.groups[0].shape.moe.experts, 4);
  EXPECT_EQ(m.groups[0].shape.moe.expert_ffn, 24);
  EXPECT_EQ(m.groups[0].shape.moe.aux_loss_coef, 0.0);
  expect_first_loss(f, {{"one", plan_of(m, 1, 1, LayerStrategy{})},
                        {"ep2", with_ep(plan_of(m, 2, 1, strat(1, 2)), 2)},
                        {"tp2_ep2", with_ep(plan_of(m, 2, 1, strat(2, 1, 1, true)), 2, 1)}});
  // Save after two steps under ep 2 (the config copied from the source), read back.
  const Plan p = with_ep(plan_of(m, 2, 1, strat(1, 2)), 2);
  const runtime::ParamsFile params =
      expect_saves_back(p, runtime::HfFamily::kMixtral, " --hf-checkpoint " + src,
                        {"model.layers.1.block_sparse_moe.experts.3.w2.weight", "model.layers.0.block_sparse_moe.gate.weight"});
  int experts = 0;
  for (const auto& np : params.params) experts += np.name.find(".experts.") != std::string::npos;
  EXPECT_EQ(experts, 2 * 4 * 3);  // every expert's three projections in both layers
  // A model trained from scratch gets a mixtral config weft's reader turns back into the model.
  const RunResult fresh = train_plan(p, dir_, "fresh", 1, " --data " + dir_ + "/window.bin --save-hf " + dir_ + "/fresh");
  ASSERT_EQ(fresh.status, 0) << fresh.output;
  const ModelSpec back = model_of(dir_ + "/fresh");
  EXPECT_EQ(back.groups[0].shape, m.groups[0].shape);
  EXPECT_EQ(read_json_file(dir_ + "/fresh/config.json").at("model_type"), "mixtral");
}

// Qwen3: each head's query and key RMS-normalised (self_attn.q_norm / k_norm, one weight vector
// for all heads) before RoPE, a head width apart from hidden / heads; under tensor parallelism
// (tp 2, and tp 4 over 2 kv heads: each kv head on two ranks) with the family's first-step loss.
// Qwen3-MoE adds mlp.gate and mlp.experts.E.*_proj, loaded under ep 2 and saved back after
// training as a qwen3_moe checkpoint.
TEST_F(HfCheckpoints, Qwen3QueryKeyNormsLoadUnderTensorParallelism) {
  Family f{"qwen3"};
  f.dim = 16;  // 4 heads of 16 against hidden 32
  f.theta = 1e6;
  const ModelSpec m = model_of((write_checkpoint(f, dir_ + "/cfg"), dir_ + "/cfg"));
  EXPECT_TRUE(m.groups[0].shape.qk_norm);
  EXPECT_EQ(m.groups[0].shape.head_dim, 16);
  expect_first_loss(f, {{"one", plan_of(m, 1, 1, LayerStrategy{})},
                        {"tp2_sp", plan_of(m, 2, 1, strat(2, 1, 1, true))},
                        {"tp4_kv_copies", plan_of(m, 4, 1, strat(4, 1))}});
}

TEST_F(HfCheckpoints, Qwen3MoeLoadsUnderExpertParallelismAndSavesBack) {
  Family f{"qwen3_moe"};
  f.dim = 16;
  f.theta = 1e6;
  f.ffn = 24;
  const std::string src = dir_ + "/cfg";
  write_checkpoint(f, src);
  const ModelSpec m = model_of(src);
  ASSERT_TRUE(m.groups[0].shape.moe.enabled());
  EXPECT_TRUE(m.groups[0].shape.qk_norm);
  expect_first_loss(f, {{"one", plan_of(m, 1, 1, LayerStrategy{})}, {"ep2", with_ep(plan_of(m, 2, 1, strat(1, 2)), 2)}});
  expect_saves_back(with_ep(plan_of(m, 2, 1, strat(1, 2)), 2), runtime::HfFamily::kQwen3Moe, "",
                    {"model.layers.1.mlp.experts.3.down_proj.weight", "model.layers.0.self_attn.k_norm.weight"});
}

// Qwen2-MoE (Qwen1.5-MoE's layout): Q/K/V biases, the top k used as scored (norm_topk_prob false),
// two experts' width of shared expert whose output passes sigmoid(mlp.shared_expert_gate(h)); loaded
// under one process and under tp 2 + SP with ep 2 (the gate on each rank's sequence shard), saved
// back as qwen2_moe.
TEST_F(HfCheckpoints, Qwen2MoeGatedSharedExpertLoadsAndSavesBack) {
  Family f{"qwen2_moe"};
  f.qkv_bias = true;
  f.theta = 1e6;
  f.ffn = 24;
  f.shared = 2;
  f.norm_topk = false;
  const std::string src = dir_ + "/cfg";
  write_checkpoint(f, src);
  const ModelSpec m = model_of(src);
  const MoeSpec& moe = m.groups[0].shape.moe;
  ASSERT_TRUE(moe.enabled());
  EXPECT_EQ(moe.shared_experts, 2);
  EXPECT_TRUE(moe.shared_gate);
  EXPECT_FALSE(moe.norm_topk);
  expect_first_loss(f, {{"one", plan_of(m, 1, 1, LayerStrategy{})},
                        {"tp2_sp_ep2", with_ep(plan_of(m, 2, 1, strat(2, 1, 1, true)), 2, 1)}});
  expect_saves_back(with_ep(plan_of(m, 2, 1, strat(2, 1, 1, true)), 2, 1), runtime::HfFamily::kQwen2Moe, "",
                    {"model.layers.1.mlp.shared_expert_gate.weight", "model.layers.0.mlp.shared_expert.down_proj.weight"});
}

// OLMoE: its query and key norms span all heads (q_norm over heads x head_dim, k_norm over kv
// heads x head_dim, on the projections' outputs), the top k used as scored; loaded under one
// process, under tp 2 (each rank's heads' part of the norms, the squares summed over tp) with ep 2,
// and under ep 2 alone; saved back as olmoe. A config that clamps q, k and v (clip_qkv) is refused.
TEST_F(HfCheckpoints, OlmoeNormsOverAllHeadsLoadUnderTensorParallelismAndSaveBack) {
  Family f{"olmoe"};
  f.kv_heads = 4;  // OLMoE's attention is multi-head
  f.eps = 1e-5;
  f.theta = 10000;
  f.ffn = 24;
  f.norm_topk = false;
  const std::string src = dir_ + "/cfg";
  write_checkpoint(f, src);
  const ModelSpec m = model_of(src);
  const LayerShape& sh = m.groups[0].shape;
  ASSERT_TRUE(sh.moe.enabled());
  EXPECT_TRUE(sh.qk_norm && sh.qk_norm_full);
  EXPECT_FALSE(sh.moe.norm_topk);
  expect_first_loss(f, {{"one", plan_of(m, 1, 1, LayerStrategy{})},
                        {"tp2_sp_ep2", with_ep(plan_of(m, 2, 1, strat(2, 1, 1, true)), 2, 1)},
                        {"ep2", with_ep(plan_of(m, 2, 1, strat(1, 2)), 2)}});
  expect_saves_back(with_ep(plan_of(m, 2, 1, strat(2, 1, 1, true)), 2, 1), runtime::HfFamily::kOlmoe, "",
                    {"model.layers.1.self_attn.q_norm.weight", "model.layers.0.self_attn.k_norm.weight"});
  Json cfg = config_of(f);
  cfg["clip_qkv"] = 8.0;
  std::ofstream(src + "/config.json") << cfg.dump();
  auto ck = HfCheckpoint::open(src);
  const Status st = ck.ok() ? (*ck)->check(plan_of(m, 1, 1, LayerStrategy{})) : ck.error();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("clip_qkv 8"), std::string::npos) << st.error().message;
}

// MoE checkpoints of families whose layers hold what weft's do not are refused by name.
TEST_F(HfCheckpoints, MoeFamiliesWeftCannotReproduceAreRefusedByName) {
  for (const auto& [type, what] : std::vector<std::pair<std::string, std::string>>{
           {"deepseek_v3", "latent attention"}}) {
    const std::string d = dir_ + "/" + type;
    std::filesystem::create_directories(d);
    std::ofstream(d + "/config.json") << Json{{"model_type", type}}.dump();
    auto ck = HfCheckpoint::open(d);
    ASSERT_FALSE(ck.ok()) << type;
    EXPECT_NE(ck.error().message.find(what), std::string::npos) << ck.error().message;
    EXPECT_NE(ck.error().message.find("mixtral"), std::string::npos) << ck.error().message;
  }
}

// --save-hf writes what was trained: every tensor read back through the family's names equals the
// consolidated parameters; config.json (and the tokenizer beside it) come from the source.
TEST_F(HfCheckpoints, SaveWritesTheTrainedWeightsUnderTheFamilysNames) {
  Family f{"llama"};
  const std::string src = dir_ + "/src", out = dir_ + "/out";
  write_checkpoint(f, src);
  std::ofstream(src + "/tokenizer.json") << "{\"version\": \"1.0\"}";
  const ModelSpec m = model_of(src);
  write_window(dir_ + "/window.bin", f.vocab);
  const Plan p = plan_of(m, 2, 1, strat(2, 1, 1, true));
  // What an earlier save left: an index a reader would take over the new model.safetensors.
  std::filesystem::create_directories(out);
  std::ofstream(out + "/model.safetensors.index.json") << R"({"weight_map": {}})";
  const RunResult r =
      train_plan(p, dir_, "tp2", 2, " --data " + dir_ + "/window.bin --hf-checkpoint " + src + " --save-hf " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const runtime::ParamsFile params = read_params(dir_ + "/tp2.params");
  auto ck = HfCheckpoint::open(out);
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  ASSERT_TRUE((*ck)->check(p).ok());
  for (const auto& np : params.params) {
    auto t = (*ck)->tensor(np.name, np.shape);
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(*t, np.data) << np.name;
  }
  EXPECT_FALSE(std::filesystem::exists(out + "/model.safetensors.index.json"));
  Json want = read_json_file(src + "/config.json");
  want["torch_dtype"] = "float32";  // the dtype written
  EXPECT_EQ(read_json_file(out + "/config.json"), want);
  EXPECT_TRUE(std::filesystem::exists(out + "/tokenizer.json"));
  // Saving over the checkpoint the run started from is refused.
  const RunResult over =
      train_plan(p, dir_, "over", 1, " --data " + dir_ + "/window.bin --hf-checkpoint " + src + " --save-hf " + src);
  EXPECT_NE(over.status, 0);
  EXPECT_NE(over.output.find("the directory the run started from"), std::string::npos) << over.output;
  // It trained: the saved weights are not the source's.
  auto first = HfCheckpoint::open(src);
  ASSERT_TRUE(first.ok());
  EXPECT_NE(*(*first)->tensor("layers.0.attn.wq", {32, 32}), *(*ck)->tensor("layers.0.attn.wq", {32, 32}));
}

// A model trained from scratch: config.json made from the spec (GPT-2 here, with the prefix and no
// lm_head), readable by weft's own config reader, in bf16 (values rounded to nearest even).
TEST_F(HfCheckpoints, SaveMakesAConfigForAModelTrainedFromScratch) {
  const Plan p = plan_of(tiny_gpt(2), 2, 1, strat(1, 2));
  const std::string out = dir_ + "/out";
  const RunResult r = train_plan(p, dir_, "dp2", 2, " --save-hf " + out + " --save-hf-dtype bf16");
  ASSERT_EQ(r.status, 0) << r.output;
  const ModelSpec back = model_of(out);
  EXPECT_EQ(back.num_layers(), 2);
  EXPECT_EQ(back.groups[0].shape, p.model.groups[0].shape);
  EXPECT_EQ(back.max_seq, p.model.max_seq);
  auto ck = HfCheckpoint::open(out);
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  EXPECT_EQ((*ck)->family(), runtime::HfFamily::kGpt2);
  Plan same = p;
  same.model = back;
  ASSERT_TRUE((*ck)->check(same).ok());
  const runtime::ParamsFile params = read_params(dir_ + "/dp2.params");
  for (const auto& np : params.params) {
    auto t = (*ck)->tensor(np.name, np.shape);
    ASSERT_TRUE(t.ok()) << t.error().message;
    for (size_t i = 0; i < np.data.size(); ++i)
      ASSERT_EQ((*t)[i], runtime::bf16_to_float(runtime::float_to_bf16(np.data[i]))) << np.name << " " << i;
  }
  auto f = runtime::SafetensorsFile::open(out + "/model.safetensors");
  ASSERT_TRUE(f.ok());
  EXPECT_NE((*f)->find("transformer.h.1.attn.c_attn.weight"), nullptr);
  EXPECT_EQ((*f)->find("lm_head.weight"), nullptr);  // tied: written once, as GPT-2's checkpoints hold it
}

// Bad input: a checkpoint of another model, a truncated shard, a config weft cannot reproduce; each
// stops the run before training with the file, the tensor and the numbers (exit code 2 or 4).
TEST_F(HfCheckpoints, ACheckpointOfAnotherModelOrADamagedShardIsRefused) {
  Family f{"llama"};
  const std::string ck = dir_ + "/ck";
  write_checkpoint(f, ck, 2);
  write_window(dir_ + "/window.bin", f.vocab);
  const std::string flags = " --data " + dir_ + "/window.bin --hf-checkpoint " + ck;
  ModelSpec m = model_of(ck);
  // More layers than the checkpoint holds.
  m.groups[0].count = 3;
  RunResult r = train_plan(plan_of(m, 1, 1, LayerStrategy{}), dir_, "deeper", 1, flags);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("no tensor model.layers.2.input_layernorm.weight"), std::string::npos) << r.output;
  // Another vocabulary: the tensor and both shapes.
  m = model_of(ck);
  m.vocab = 80;
  r = train_plan(plan_of(m, 1, 1, LayerStrategy{}), dir_, "vocab", 1, flags);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("model.embed_tokens.weight is [64,32] but weft's embed.wte is [80,32]"), std::string::npos)
      << r.output;
  // Fewer layers: the checkpoint's extra tensors are named.
  m = model_of(ck);
  m.groups[0].count = 1;
  r = train_plan(plan_of(m, 1, 1, LayerStrategy{}), dir_, "shallower", 1, flags);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("the plan's model lacks (model.layers.1."), std::string::npos) << r.output;
  // A tied head where the checkpoint has its own lm_head.
  m = model_of(ck);
  m.tied_embeddings = true;
  r = train_plan(plan_of(m, 1, 1, LayerStrategy{}), dir_, "tied", 1, flags);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("tie_word_embeddings false but the plan's model has tied_embeddings true"), std::string::npos)
      << r.output;
  // Another norm epsilon in the plan's model.
  m = model_of(ck);
  m.norm_eps = 1e-5;
  r = train_plan(plan_of(m, 1, 1, LayerStrategy{}), dir_, "eps", 1, flags);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("norm epsilon 1e-06 but the plan's model has 1e-05"), std::string::npos) << r.output;
  // A truncated shard: named, before anything loads.
  const std::string shard = ck + "/model-00002-of-00002.safetensors";
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 10);
  r = train_plan(plan_of(model_of(ck), 1, 1, LayerStrategy{}), dir_, "truncated", 1, flags);
  EXPECT_EQ(r.status, 4) << r.output;
  EXPECT_NE(r.output.find("model-00002-of-00002.safetensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(truncated)"), std::string::npos) << r.output;
  // An index that disagrees with its shards: the total size, a tensor in another file.
  {
    const std::string sharded = dir_ + "/sharded";
    write_checkpoint(f, sharded, 2);
    const std::string idx = sharded + "/model.safetensors.index.json";
    Json j = read_json_file(idx);
    j["metadata"] = Json{{"total_size", 12345}};
    std::ofstream(idx) << j.dump();
    auto o = HfCheckpoint::open(sharded);
    ASSERT_FALSE(o.ok());
    EXPECT_NE(o.error().message.find("metadata.total_size 12345 but the shards hold"), std::string::npos)
        << o.error().message;
    j.erase("metadata");
    j["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
    std::ofstream(idx) << j.dump();
    o = HfCheckpoint::open(sharded);
    ASSERT_FALSE(o.ok());
    EXPECT_NE(o.error().message.find("holds model.norm.weight, which weight_map places in model-00001-of-00002"),
              std::string::npos)
        << o.error().message;
  }
  // RoPE scaling weft does not apply.
  Json c = config_of(f);
  c["rope_scaling"] = Json{{"rope_type", "llama3"}, {"factor", 8.0}};
  write_checkpoint(f, ck);
  std::filesystem::remove(ck + "/model.safetensors.index.json");
  std::ofstream(ck + "/config.json") << c.dump();
  r = train_plan(plan_of(model_of(ck), 1, 1, LayerStrategy{}), dir_, "scaled", 1, flags);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("rope_scaling"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace weft::rttest
