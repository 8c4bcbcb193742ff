#include "weft/runtime/hf_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>

#include "weft/core/durable_file.h"
#include "weft/core/format.h"
#include "weft/plan/checkpoint_layout.h"
#include "weft/plan/geometry.h"
#include "weft/spec/hf_config.h"

namespace weft::runtime {

namespace fs = std::filesystem;

namespace {

Error bad(const std::string& m) { return Error{ErrorKind::kBadInput, m}; }

std::int64_t product(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s) n *= d;
  return n;
}

// Checkpoint tensors weft's model has no use for and loading leaves alone: buffers older exports
// kept (GPT-2's causal masks, rotary inverse frequencies).
bool is_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") || name.ends_with("rotary_emb.inv_freq");
}

// The Llama-family name of a layer tensor (after "model.layers.N.").
const std::map<std::string, std::string>& llama_layer_names() {
  static const std::map<std::string, std::string> k = {
      {"ln1.weight", "input_layernorm.weight"},      {"ln2.weight", "post_attention_layernorm.weight"},
      {"attn.wq", "self_attn.q_proj.weight"},        {"attn.bq", "self_attn.q_proj.bias"},
      {"attn.wk", "self_attn.k_proj.weight"},        {"attn.bk", "self_attn.k_proj.bias"},
      {"attn.wv", "self_attn.v_proj.weight"},        {"attn.bv", "self_attn.v_proj.bias"},
      {"attn.wo", "self_attn.o_proj.weight"},        {"attn.bo", "self_attn.o_proj.bias"},
      {"mlp.gate", "mlp.gate_proj.weight"},          {"mlp.gate_bias", "mlp.gate_proj.bias"},
      {"mlp.up", "mlp.up_proj.weight"},              {"mlp.up_bias", "mlp.up_proj.bias"},
      {"mlp.down", "mlp.down_proj.weight"},          {"mlp.down_bias", "mlp.down_proj.bias"},
      {"attn.q_norm", "self_attn.q_norm.weight"},    {"attn.k_norm", "self_attn.k_norm.weight"}};
  return k;
}

// The families weft reads, and those it writes (mistral's checkpoints are written as llama's).
constexpr const char* kReadFamilies = "llama, mistral, qwen2, qwen3, gpt2, mixtral, qwen2_moe, qwen3_moe and olmoe";
constexpr const char* kWrittenFamilies = "llama, qwen2, qwen3, gpt2, mixtral, qwen2_moe, qwen3_moe and olmoe";

Result<HfFamily> family_of_type(const std::string& t, const std::string& where) {
  if (t == "llama") return HfFamily::kLlama;
  if (t == "mistral") return HfFamily::kMistral;
  if (t == "qwen2") return HfFamily::kQwen2;
  if (t == "gpt2") return HfFamily::kGpt2;
  if (t == "mixtral") return HfFamily::kMixtral;
  if (t == "qwen3") return HfFamily::kQwen3;
  if (t == "qwen3_moe") return HfFamily::kQwen3Moe;
  if (t == "qwen2_moe") return HfFamily::kQwen2Moe;
  if (t == "olmoe") return HfFamily::kOlmoe;
  // MoE families whose layers hold what weft's do not (docs/runtime.md "Hugging Face checkpoints").
  if (t == "deepseek_v2" || t == "deepseek_v3")
    return bad(where + ": model_type \"" + t + "\": multi-head latent attention, which weft's runtime does not "
                       "build; weft loads mixtral, qwen2_moe, qwen3_moe and olmoe checkpoints");
  return bad(where + ": model_type \"" + t + "\": weft loads " + kReadFamilies + " checkpoints");
}

// A MoE layer tensor's name (after "model.layers.N.") in a checkpoint of family f: Mixtral's
// block_sparse_moe.gate (the router) and block_sparse_moe.experts.E.w1 / w3 / w2 (gate / up /
// down); Qwen2-MoE's and Qwen3-MoE's mlp.gate and mlp.experts.E.{gate,up,down}_proj, Qwen2-MoE's
// shared experts (one FFN) under mlp.shared_expert and their gate mlp.shared_expert_gate.
std::optional<std::string> moe_layer_name(const std::string& rest, HfFamily f) {
  const bool mix = f == HfFamily::kMixtral;
  const std::string block = mix ? "block_sparse_moe." : "mlp.";
  // weft's projection name gate / up / down in the family's checkpoints.
  auto proj = [mix](const std::string& w) -> std::optional<std::string> {
    if (w != "gate" && w != "up" && w != "down") return std::nullopt;
    if (!mix) return w + "_proj.weight";
    return std::string(w == "gate" ? "w1" : w == "up" ? "w3" : "w2") + ".weight";
  };
  if (rest == "mlp.router") return block + "gate.weight";
  if (!mix && rest == "mlp.shared_gate") return std::string("mlp.shared_expert_gate.weight");
  if (!mix && rest.starts_with("mlp.shared."))
    if (auto w = proj(rest.substr(11))) return "mlp.shared_expert." + *w;
  if (!rest.starts_with("experts.")) return std::nullopt;
  const size_t dot = rest.find('.', 8);
  if (dot == std::string::npos) return std::nullopt;
  auto w = proj(rest.substr(dot + 1));
  if (!w) return std::nullopt;
  return block + "experts." + rest.substr(8, dot - 8) + "." + *w;
}

// transformers' name of a saved dtype (config.json's torch_dtype).
const char* torch_dtype_of(SaveDType t) {
  return t == SaveDType::kF32 ? "float32" : t == SaveDType::kBF16 ? "bfloat16" : "float16";
}

// Whether checkpoint tensor e holds weft's tensor `name` of `shape` where `src` says: the same
// shape; stored transposed for GPT-2's Conv1D; a fused one exactly all its rows wide, weft's
// tensor its slice. The error names the file, both tensors and both shapes.
Status shape_matches(const HfSource& src, const SafetensorsFile& f, const SafetensorsEntry& e, const std::string& name,
                     const std::vector<std::int64_t>& shape) {
  const bool fused = src.out_len >= 0;
  const bool rows_ok = !fused || (!shape.empty() && shape[0] == src.out_len);
  bool ok;
  if (src.conv1d)
    ok = shape.size() == 2 && e.shape.size() == 2 && e.shape[0] == shape[1] &&
         e.shape[1] == (fused ? src.out_total : shape[0]) && rows_ok;
  else if (fused)
    ok = e.shape.size() == 1 && e.shape[0] == src.out_total && shape.size() == 1 && rows_ok;
  else
    ok = e.shape == shape;
  if (ok) return {};
  return bad(f.path() + ": tensor " + e.name + " is " + shape_label(e.shape) + " but weft's " + name + " is " +
             shape_label(shape) + (src.conv1d ? " (stored transposed, [in, out])" : "") +
             (fused ? " (rows " + std::to_string(src.out_begin) + " to " + std::to_string(src.out_begin + src.out_len) +
                          " of its " + std::to_string(src.out_total) + ")"
                    : ""));
}

}  // namespace

const char* to_string(HfFamily f) {
  switch (f) {
    case HfFamily::kLlama: return "llama";
    case HfFamily::kMistral: return "mistral";
    case HfFamily::kQwen2: return "qwen2";
    case HfFamily::kGpt2: return "gpt2";
    case HfFamily::kMixtral: return "mixtral";
    case HfFamily::kQwen3: return "qwen3";
    case HfFamily::kQwen3Moe: return "qwen3_moe";
    case HfFamily::kQwen2Moe: return "qwen2_moe";
    case HfFamily::kOlmoe: return "olmoe";
  }
  return "?";
}

Result<HfSource> hf_source(const std::string& name, HfFamily f, const ModelSpec& m) {
  const bool gpt2 = f == HfFamily::kGpt2;
  if (name == "embed.wte") return HfSource{gpt2 ? "wte.weight" : "model.embed_tokens.weight"};
  if (name == "embed.wpe" && gpt2) return HfSource{"wpe.weight"};
  if (name == "head.norm.weight") return HfSource{gpt2 ? "ln_f.weight" : "model.norm.weight"};
  if (name == "head.norm.bias" && gpt2) return HfSource{"ln_f.bias"};
  if (name == "head.lm_head") return HfSource{"lm_head.weight"};
  if (name.starts_with("layers.")) {
    const size_t dot = name.find('.', 7);
    const std::string idx = name.substr(7, dot - 7), rest = name.substr(dot + 1);
    if (!gpt2) {
      if (f == HfFamily::kMixtral || f == HfFamily::kQwen3Moe || f == HfFamily::kQwen2Moe || f == HfFamily::kOlmoe)
        if (auto moe = moe_layer_name(rest, f)) return HfSource{"model.layers." + idx + "." + *moe};
      auto it = llama_layer_names().find(rest);
      if (it != llama_layer_names().end()) return HfSource{"model.layers." + idx + "." + it->second};
    } else if (m.num_layers() > 0) {
      const LayerShape& s = m.layer(std::stoi(idx));
      const std::int64_t q = static_cast<std::int64_t>(s.heads) * s.head_dim;
      const std::int64_t kv = static_cast<std::int64_t>(s.kv_heads) * s.head_dim;
      const std::string h = "h." + idx + ".";
      if (rest == "ln1.weight") return HfSource{h + "ln_1.weight"};
      if (rest == "ln1.bias") return HfSource{h + "ln_1.bias"};
      if (rest == "ln2.weight") return HfSource{h + "ln_2.weight"};
      if (rest == "ln2.bias") return HfSource{h + "ln_2.bias"};
      const std::int64_t all = q + 2 * kv;
      if (rest == "attn.wq") return HfSource{h + "attn.c_attn.weight", true, 0, q, all};
      if (rest == "attn.wk") return HfSource{h + "attn.c_attn.weight", true, q, kv, all};
      if (rest == "attn.wv") return HfSource{h + "attn.c_attn.weight", true, q + kv, kv, all};
      if (rest == "attn.bq") return HfSource{h + "attn.c_attn.bias", false, 0, q, all};
      if (rest == "attn.bk") return HfSource{h + "attn.c_attn.bias", false, q, kv, all};
      if (rest == "attn.bv") return HfSource{h + "attn.c_attn.bias", false, q + kv, kv, all};
      if (rest == "attn.wo") return HfSource{h + "attn.c_proj.weight", true};
      if (rest == "attn.bo") return HfSource{h + "attn.c_proj.bias"};
      if (rest == "mlp.fc1") return HfSource{h + "mlp.c_fc.weight", true};
      if (rest == "mlp.fc1_bias") return HfSource{h + "mlp.c_fc.bias"};
      if (rest == "mlp.fc2") return HfSource{h + "mlp.c_proj.weight", true};
      if (rest == "mlp.fc2_bias") return HfSource{h + "mlp.c_proj.bias"};
    }
  }
  return bad("weft's tensor " + name + " has no place in a " + std::string(to_string(f)) + " checkpoint");
}

Result<std::unique_ptr<HfCheckpoint>> HfCheckpoint::open(const std::string& dir) {
  std::unique_ptr<HfCheckpoint> ck(new HfCheckpoint());
  ck->dir_ = dir;
  const std::string cfg = (fs::path(dir) / "config.json").string();
  if (!fs::exists(cfg)) return Error{ErrorKind::kIo, dir + ": no config.json (a Hugging Face checkpoint directory has one)"};
  try {
    ck->config_ = read_json_file(cfg);
  } catch (const std::exception& e) {
    return Error{ErrorKind::kBadInput, cfg + ": " + e.what()};
  }
  if (!ck->config_.is_object()) return bad(cfg + ": not a JSON object");
  if (!ck->config_.contains("model_type") || !ck->config_["model_type"].is_string())
    return bad(cfg + ": model_type: missing or not a string (weft loads " + kReadFamilies + ")");
  auto fam = family_of_type(ck->config_["model_type"].get<std::string>(), cfg);
  if (!fam.ok()) return fam.error();
  ck->family_ = *fam;
  auto m = model_from_hf_config(ck->config_, cfg);
  if (!m.ok()) return m.error();
  ck->model_ = *m;
  // The files: one, or the shards an index lists.
  const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> names;
  Json weight_map;
  std::int64_t total_size = -1;
  if (fs::exists(index)) {
    Json j;
    try {
      j = read_json_file(index.string());
    } catch (const std::exception& e) {
      return bad(index.string() + ": " + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      return bad(index.string() + ": no weight_map object");
    weight_map = j["weight_map"];
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      if (!it.value().is_string()) return bad(index.string() + ": weight_map." + it.key() + " is not a file name");
      const std::string f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos) return bad(index.string() + ": weight_map." + it.key() + ": \"" + f + "\" is not a file of the directory");
      if (std::find(names.begin(), names.end(), f) == names.end()) names.push_back(f);
    }
    if (j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("total_size") &&
        j["metadata"]["total_size"].is_number_integer())
      total_size = j["metadata"]["total_size"].get<std::int64_t>();
  } else if (fs::exists(single)) {
    names.push_back("model.safetensors");
  } else {
    return Error{ErrorKind::kIo, dir + ": neither model.safetensors nor model.safetensors.index.json"};
  }
  std::int64_t bytes = 0;
  for (const std::string& n : names) {
    auto f = SafetensorsFile::open((fs::path(dir) / n).string());
    if (!f.ok()) return f.error();
    const int k = static_cast<int>(ck->files_.size());
    for (const SafetensorsEntry& e : (*f)->entries()) {
      if (ck->where_.count(e.name))
        return bad(dir + ": tensor " + e.name + " is in both " + ck->files_[static_cast<size_t>(ck->where_[e.name])]->path() +
                   " and " + (*f)->path());
      if (!weight_map.is_null() && (!weight_map.contains(e.name) || weight_map[e.name].get<std::string>() != n))
        return bad(index.string() + ": " + (*f)->path() + " holds " + e.name + ", which weight_map " +
                   (weight_map.contains(e.name) ? "places in " + weight_map[e.name].get<std::string>() : "does not list"));
      ck->where_[e.name] = k;
      bytes += e.end - e.begin;
    }
    ck->files_.push_back(std::move(f).value());
  }
  if (!weight_map.is_null())
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it)
      if (!ck->where_.count(it.key()))
        return bad(index.string() + ": weight_map places " + it.key() + " in " + it.value().get<std::string>() +
                   ", which does not hold it");
  if (total_size >= 0 && total_size != bytes)
    return bad(index.string() + ": metadata.total_size " + std::to_string(total_size) + " but the shards hold " +
               std::to_string(bytes) + " bytes of tensors");
  if (ck->family_ == HfFamily::kGpt2)
    for (const auto& [n, k] : ck->where_)
      if (n.starts_with("transformer.")) {
        ck->prefix_ = "transformer.";
        break;
      }
  return ck;
}

const SafetensorsEntry* HfCheckpoint::entry(const std::string& hf_name, const SafetensorsFile** file) const {
  std::string n = hf_name;
  if (!prefix_.empty() && hf_name != "lm_head.weight") n = prefix_ + hf_name;
  auto it = where_.find(n);
  if (it == where_.end()) return nullptr;
  *file = files_[static_cast<size_t>(it->second)].get();
  return (*file)->find(n);
}

Status HfCheckpoint::check(const Plan& p) const {
  const ModelSpec& m = p.model;
  const std::string cfg = (fs::path(dir_) / "config.json").string();
  if (m.tied_embeddings != model_.tied_embeddings)
    return bad(cfg + ": tie_word_embeddings " + (model_.tied_embeddings ? "true" : "false") +
               " but the plan's model has tied_embeddings " + (m.tied_embeddings ? "true" : "false"));
  if (m.norm_eps != model_.norm_eps)
    return bad(cfg + ": norm epsilon " + num(model_.norm_eps) + " but the plan's model has " + num(m.norm_eps));
  if (m.position == PositionKind::kRope && m.rope_theta != model_.rope_theta)
    return bad(cfg + ": rope_theta " + num(model_.rope_theta) + " but the plan's model has " + num(m.rope_theta));
  if (config_.contains("rope_scaling") && !config_["rope_scaling"].is_null())
    return bad(cfg + ": rope_scaling " + config_["rope_scaling"].dump() +
               ": weft's RoPE has no scaling, so its logits would differ from the model's");
  // OLMoE's clip_qkv clamps the projections' outputs, which weft's attention does not.
  if (config_.contains("clip_qkv") && !config_["clip_qkv"].is_null())
    return bad(cfg + ": clip_qkv " + config_["clip_qkv"].dump() +
               ": weft's attention does not clamp its queries, keys and values, so its logits would differ from the "
               "model's");
  // Qwen2's and Qwen3's configs switch it on with use_sliding_window.
  bool use_window = family_ != HfFamily::kQwen2 && family_ != HfFamily::kQwen3 && family_ != HfFamily::kQwen3Moe &&
                    family_ != HfFamily::kQwen2Moe;
  if (config_.contains("use_sliding_window") && !config_["use_sliding_window"].is_null()) {
    if (!config_["use_sliding_window"].is_boolean()) return bad(cfg + ": use_sliding_window is not true or false");
    use_window = config_["use_sliding_window"].get<bool>();
  }
  const bool sliding = use_window && config_.contains("sliding_window") && config_["sliding_window"].is_number_integer();
  if (sliding && config_["sliding_window"].get<std::int64_t>() < p.train.seq)
    return bad(cfg + ": sliding_window " + std::to_string(config_["sliding_window"].get<std::int64_t>()) +
               " is shorter than the plan's sequence of " + std::to_string(p.train.seq) +
               " (weft's attention is full causal)");
  // The routers: what no tensor shape shows (the experts per token, and how their weights are
  // scored and normalised).
  if (model_.num_layers() == m.num_layers())
    for (int l = 0; l < m.num_layers(); ++l) {
      const MoeSpec &a = model_.layer(l).moe, &b = m.layer(l).moe;
      if (!a.enabled() || !b.enabled()) continue;
      if (a.top_k != b.top_k)
        return bad(cfg + ": num_experts_per_tok " + std::to_string(a.top_k) + " but the plan's model routes each token to " +
                   std::to_string(b.top_k) + " experts (layer " + std::to_string(l) + ")");
      if (a.score != b.score || a.norm_topk != b.norm_topk || a.routed_scale != b.routed_scale)
        return bad(cfg + ": the checkpoint's router (" + to_string(a.score) + (a.norm_topk ? ", top-k renormalised" : "") +
                   ") is not the plan's model's (" + to_string(b.score) + (b.norm_topk ? ", top-k renormalised" : "") +
                   ", scale " + num(b.routed_scale) + ") at layer " + std::to_string(l));
    }
  std::set<std::string> used;
  for (const ParamSpec& ps : model_params(p)) {
    auto src = hf_source(ps.name, family_, m);
    if (!src.ok()) return src.error();
    const SafetensorsFile* f = nullptr;
    const SafetensorsEntry* e = entry(src->name, &f);
    if (!e) return bad(dir_ + ": no tensor " + prefix_ + src->name + " (weft's " + ps.name + " " + shape_label(ps.full_shape) + ")");
    used.insert(e->name);
    if (Status st = shape_matches(*src, *f, *e, ps.name, ps.full_shape); !st.ok()) return st;
  }
  std::vector<std::string> unused;
  for (const auto& [n, k] : where_) {
    if (used.count(n) || is_buffer(n)) continue;
    if (n == "lm_head.weight" && m.tied_embeddings) continue;  // some exports keep the tied copy
    unused.push_back(n);
  }
  if (!unused.empty()) {
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 4; ++i) list += (i ? ", " : "") + unused[i];
    return bad(dir_ + ": holds " + std::to_string(unused.size()) + " tensor" + (unused.size() > 1 ? "s" : "") +
               " the plan's model lacks (" + list + (unused.size() > 4 ? ", ..." : "") +
               "): a checkpoint of another model?");
  }
  return {};
}

Result<std::vector<float>> HfCheckpoint::tensor(const std::string& name, const std::vector<std::int64_t>& shape) const {
  auto src = hf_source(name, family_, model_);
  if (!src.ok()) return src.error();
  const SafetensorsFile* f = nullptr;
  const SafetensorsEntry* e = entry(src->name, &f);
  if (!e) return bad(dir_ + ": no tensor " + prefix_ + src->name);
  // check() says so for a whole plan; a caller without it must not index past the tensor.
  if (Status st = shape_matches(*src, *f, *e, name, shape); !st.ok()) return st.error();
  auto v = f->read_float(e->name);
  if (!v.ok()) return v.error();
  if (!src->conv1d && src->out_len < 0) return v;
  std::vector<float> out(static_cast<size_t>(product(shape)));
  if (src->conv1d) {  // stored [in, out_total]; weft's [rows, in]
    const std::int64_t in = e->shape[0], total = e->shape[1], rows = shape[0];
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < in; ++c)
        out[static_cast<size_t>(r * in + c)] = (*v)[static_cast<size_t>(c * total + src->out_begin + r)];
  } else {
    std::copy_n(v->begin() + src->out_begin, out.size(), out.begin());
  }
  return out;
}

Result<ParamsFile> hf_rank_entries(const HfCheckpoint& ck, const Plan& p, int rank) {
  ParamsFile f;
  std::string cached;  // the last full tensor read: a rank's pieces of one tensor come together
  std::vector<float> values;
  for (const SavedEntry& e : saved_entries(p, rank)) {
    if (e.kind != StateKind::kParams) {
      f.params.push_back({e.name, {e.numel}, std::vector<float>(static_cast<size_t>(e.numel), 0.0f)});
      continue;
    }
    auto v = entry_from_full(e, [&](const SavedPiece& piece) -> Result<const std::vector<float>*> {
      if (piece.param != cached) {
        auto t = ck.tensor(piece.param, piece.full_shape);
        if (!t.ok()) return t.error();
        values = std::move(t).value();
        cached = piece.param;
      }
      return &values;
    });
    if (!v.ok()) return v.error();
    f.params.push_back({e.name, {e.numel}, std::move(v).value()});
  }
  return f;
}

Result<HfFamily> hf_family_of(const ModelSpec& m) {
  if (m.groups.size() != 1)
    return bad("--save-hf: the model has " + std::to_string(m.groups.size()) +
               " layer groups; weft writes models of one (" + kWrittenFamilies + ")");
  const LayerShape& s = m.groups[0].shape;
  // Llama's layers, which every family below but GPT-2 builds on: rope, RMSNorm, SwiGLU.
  const bool llama_layers = s.kind == LayerKind::kDecoder && m.position == PositionKind::kRope &&
                            m.norm == NormKind::kRmsNorm && s.ffn_kind == FfnKind::kSwiglu;
  if (s.moe.enabled()) {
    // Mixtral: every layer MoE (one group), no shared experts, softmax scores renormalised over the
    // top k, llama's attention and norms without biases. Qwen3-MoE: the same with per-head query /
    // key norms, its top k renormalised or not (norm_topk_prob).
    const MoeSpec& r = s.moe;
    // Qwen2-MoE: qwen2's attention (Q/K/V biases), softmax router, gated shared experts.
    if (r.shared_experts > 0 && r.shared_gate && llama_layers && s.qkv_bias && !s.bias && !s.qk_norm &&
        r.score == RouterScore::kSoftmax && r.routed_scale == 1.0)
      return HfFamily::kQwen2Moe;
    std::string differs;
    if (r.shared_experts > 0)
      differs = std::to_string(r.shared_experts) + " shared experts" +
                (r.shared_gate ? " in layers other than qwen2_moe's (rope, rmsnorm, swiglu, Q/K/V biases only)"
                               : " without a gate (qwen2_moe gates its shared expert)");
    else if (r.score != RouterScore::kSoftmax || (!r.norm_topk && !s.qk_norm) || r.routed_scale != 1.0)
      differs = std::string("a ") + to_string(r.score) + " router" + (r.norm_topk ? "" : " without renormalised top-k") +
                (r.routed_scale != 1.0 ? " scaled by " + num(r.routed_scale) : "");
    else if (!llama_layers || s.bias || s.qkv_bias)
      differs = "layers other than llama's (rope, rmsnorm, swiglu, no biases)";
    if (!differs.empty())
      return bad("--save-hf: a Mixture-of-Experts model with " + differs +
                 "; weft writes MoE models as mixtral (softmax top-k renormalised, no shared experts), qwen3_moe "
                 "(the same with per-head query / key norms), olmoe (query / key norms over all heads) or qwen2_moe (Q/K/V "
                 "biases, gated shared experts)");
    if (s.qk_norm_full) {
      // OLMoE: the top k as scored (norm_topk_prob false in its releases; either is written), its
      // head_dim always hidden / heads.
      if (static_cast<std::int64_t>(s.heads) * s.head_dim != m.hidden)
        return bad("--save-hf: query / key norms over all heads (olmoe) with head_dim " + std::to_string(s.head_dim) +
                   " x " + std::to_string(s.heads) + " heads != hidden " + std::to_string(m.hidden) +
                   "; OLMoE's heads are hidden / heads wide");
      return HfFamily::kOlmoe;
    }
    return s.qk_norm ? HfFamily::kQwen3Moe : HfFamily::kMixtral;
  }
  if (s.qk_norm_full)
    return bad("--save-hf: query / key norms over all heads in a dense model; weft writes them as olmoe, a MoE family");
  if (s.qk_norm) {
    if (!llama_layers || s.bias || s.qkv_bias)
      return bad("--save-hf: per-head query / key norms in layers other than qwen3's (rope, rmsnorm, swiglu, no biases)");
    return HfFamily::kQwen3;
  }
  if (s.kind != LayerKind::kDecoder)
    return bad(std::string("--save-hf: not a decoder; weft writes ") + kWrittenFamilies + " models");
  if (m.position == PositionKind::kLearned && m.norm == NormKind::kLayerNorm && s.ffn_kind == FfnKind::kGelu && s.bias)
    return HfFamily::kGpt2;
  if (llama_layers) return s.qkv_bias && !s.bias ? HfFamily::kQwen2 : HfFamily::kLlama;
  return bad(std::string("--save-hf: a model of ") + to_string(m.position) + " positions, " + to_string(m.norm) + ", " +
             to_string(s.ffn_kind) + " and " + (s.bias ? "" : "no ") +
             "biases is neither llama-style (rope, rmsnorm, swiglu) nor gpt2-style (learned, layernorm, gelu, biases)");
}

Json hf_config_of(const ModelSpec& m, HfFamily f, SaveDType dtype) {
  const LayerShape& s = m.groups[0].shape;
  const std::string torch_dtype = torch_dtype_of(dtype);
  if (f == HfFamily::kGpt2) {
    return Json{{"architectures", {"GPT2LMHeadModel"}},
                {"model_type", "gpt2"},
                {"vocab_size", m.vocab},
                {"n_embd", m.hidden},
                {"n_layer", m.num_layers()},
                {"n_head", s.heads},
                {"n_inner", s.ffn},
                {"n_positions", m.max_seq},
                {"n_ctx", m.max_seq},
                {"activation_function", "gelu_new"},
                {"layer_norm_epsilon", m.norm_eps},
                {"tie_word_embeddings", m.tied_embeddings},
                {"torch_dtype", torch_dtype}};
  }
  const bool qwen = f == HfFamily::kQwen2, mixtral = f == HfFamily::kMixtral;
  const bool qwen3 = f == HfFamily::kQwen3, qwen3_moe = f == HfFamily::kQwen3Moe, qwen2_moe = f == HfFamily::kQwen2Moe;
  const bool olmoe = f == HfFamily::kOlmoe;
  const char* arch = qwen        ? "Qwen2ForCausalLM"
                     : mixtral   ? "MixtralForCausalLM"
                     : qwen3     ? "Qwen3ForCausalLM"
                     : qwen3_moe ? "Qwen3MoeForCausalLM"
                     : qwen2_moe ? "Qwen2MoeForCausalLM"
                     : olmoe     ? "OlmoeForCausalLM"
                                 : "LlamaForCausalLM";
  Json j{{"architectures", {arch}},
         {"model_type", to_string(f)},
         {"vocab_size", m.vocab},
         {"hidden_size", m.hidden},
         {"intermediate_size", s.moe.enabled() && s.ffn <= 0 ? s.moe.expert_ffn : s.ffn},
         {"num_hidden_layers", m.num_layers()},
         {"num_attention_heads", s.heads},
         {"num_key_value_heads", s.kv_heads},
         {"head_dim", s.head_dim},
         {"hidden_act", "silu"},
         {"max_position_embeddings", m.max_seq},
         {"rms_norm_eps", m.norm_eps},
         {"rope_theta", m.rope_theta},
         {"tie_word_embeddings", m.tied_embeddings},
         {"torch_dtype", torch_dtype}};
  if (qwen3 || qwen3_moe) j["attention_bias"] = false;
  if (qwen3 || qwen3_moe || qwen2_moe) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
  if (qwen2_moe) j["shared_expert_intermediate_size"] = s.moe.shared_experts * s.moe.expert_ffn;
  if (qwen3_moe || qwen2_moe) {
    j["num_experts"] = s.moe.experts;
    j["num_experts_per_tok"] = s.moe.top_k;
    j["moe_intermediate_size"] = s.moe.expert_ffn;
    j["norm_topk_prob"] = s.moe.norm_topk;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = Json::array();
    j["router_aux_loss_coef"] = s.moe.aux_loss_coef;
    j["output_router_logits"] = s.moe.aux_loss_coef > 0;
  } else if (olmoe) {
    // OlmoeConfig: the experts' width in intermediate_size (above), no head_dim key.
    j.erase("head_dim");
    j["attention_bias"] = false;
    j["clip_qkv"] = nullptr;
    j["num_experts"] = s.moe.experts;
    j["num_experts_per_tok"] = s.moe.top_k;
    j["norm_topk_prob"] = s.moe.norm_topk;
    j["router_aux_loss_coef"] = s.moe.aux_loss_coef;
    j["output_router_logits"] = s.moe.aux_loss_coef > 0;
  } else if (mixtral) {
    j["num_local_experts"] = s.moe.experts;
    j["num_experts_per_tok"] = s.moe.top_k;
    j["router_aux_loss_coef"] = s.moe.aux_loss_coef;
    j["output_router_logits"] = s.moe.aux_loss_coef > 0;  // the balancing loss in transformers' training loss
    j["sliding_window"] = nullptr;                        // weft's attention is full causal
  } else if (!qwen && !qwen3) {  // llama
    j["attention_bias"] = j["mlp_bias"] = s.bias;
  }
  return j;
}

Status save_hf_checkpoint(const std::string& dir, const Plan& p, const ParamsFile& full, SaveDType dtype,
                          const std::string& source_dir, std::int64_t max_shard_bytes) {
  auto fam = hf_family_of(p.model);
  if (!fam.ok()) return fam.error();
  Json source_config;  // the source's config.json, its keys in their order
  if (!source_dir.empty()) {
    std::error_code same;
    if (fs::exists(dir) && fs::equivalent(dir, source_dir, same))
      return bad(dir + ": the directory the run started from (--hf-checkpoint); write the model elsewhere");
    const std::string cfg = (fs::path(source_dir) / "config.json").string();
    std::ifstream in(cfg);
    if (!in) return Error{ErrorKind::kIo, cfg + ": cannot read"};
    try {
      source_config = Json::parse(in);
    } catch (const std::exception& e) {
      return bad(cfg + ": " + e.what());
    }
    // The source's family names the tensors (a Mistral checkpoint stays one).
    if (!source_config.is_object() || !source_config.contains("model_type") || !source_config["model_type"].is_string())
      return bad(cfg + ": model_type: missing or not a string");
    auto f = family_of_type(source_config["model_type"].get<std::string>(), cfg);
    if (!f.ok()) return f.error();
    fam = *f;
    source_config["torch_dtype"] = torch_dtype_of(dtype);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error{ErrorKind::kIo, dir + ": cannot create: " + ec.message()};
  // Weights an earlier save left in the directory: a reader takes the index over model.safetensors
  // (weft) or the other way round (transformers), so none may stay beside the new ones.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    const bool shard = n.starts_with("model-") && n.ends_with(".safetensors") && n.find("-of-") != std::string::npos;
    if (n == "model.safetensors" || n == "model.safetensors.index.json" || shard) fs::remove(e.path(), ec);
  }
  // The HF tensors, each gathered from the weft tensors that map into it, in model order.
  struct Out {
    std::vector<std::int64_t> shape;
    std::vector<float> data;
  };
  std::vector<std::string> order;
  std::map<std::string, Out> outs;
  std::map<std::string, const NamedParam*> by;
  for (const NamedParam& np : full.params) by[np.name] = &np;
  for (const ParamSpec& ps : model_params(p)) {
    auto src = hf_source(ps.name, *fam, p.model);
    if (!src.ok()) return src.error();
    if (!by.count(ps.name)) return Error{ErrorKind::kIo, "--save-hf: the parameters lack " + ps.name};
    Out& o = outs[src->name];
    if (o.data.empty()) {  // first sight: the HF tensor's shape (a fused one: all its rows)
      order.push_back(src->name);
      const std::int64_t rows = src->out_len >= 0 ? src->out_total : ps.full_shape[0];
      o.shape = src->conv1d ? std::vector<std::int64_t>{ps.full_shape[1], rows}
                : src->out_len >= 0 ? std::vector<std::int64_t>{rows}
                                    : ps.full_shape;
      o.data.assign(static_cast<size_t>(product(o.shape)), 0.0f);
    }
    const std::vector<float>& v = by[ps.name]->data;
    if (src->conv1d) {
      const std::int64_t in = o.shape[0], total = o.shape[1], r0 = ps.full_shape[0];
      for (std::int64_t r = 0; r < r0; ++r)
        for (std::int64_t c = 0; c < in; ++c)
          o.data[static_cast<size_t>(c * total + src->out_begin + r)] = v[static_cast<size_t>(r * in + c)];
    } else {
      std::copy(v.begin(), v.end(), o.data.begin() + (src->out_len >= 0 ? src->out_begin : 0));
    }
  }
  const std::string prefix = *fam == HfFamily::kGpt2 ? "transformer." : "";
  auto hf_name = [&](const std::string& n) { return n == "lm_head.weight" ? n : prefix + n; };
  // Shards of at most max_shard_bytes (a tensor larger than that alone in its shard).
  std::vector<std::vector<std::string>> shards(1);
  std::int64_t in_shard = 0;
  for (const std::string& n : order) {
    const std::int64_t b = product(outs[n].shape) * dtype_bytes(dtype);
    if (!shards.back().empty() && in_shard + b > max_shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(n);
    in_shard += b;
  }
  auto shard_name = [&](size_t k) {
    if (shards.size() == 1) return std::string("model.safetensors");
    char b[64];
    std::snprintf(b, sizeof b, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    return std::string(b);
  };
  Json weight_map = Json::object();
  std::int64_t total = 0;
  for (size_t k = 0; k < shards.size(); ++k) {
    std::vector<TensorOut> ts;
    for (const std::string& n : shards[k]) {
      ts.push_back({hf_name(n), outs[n].shape, &outs[n].data});
      weight_map[hf_name(n)] = shard_name(k);
      total += product(outs[n].shape) * dtype_bytes(dtype);
    }
    Status st = write_safetensors((fs::path(dir) / shard_name(k)).string(), ts, dtype);
    if (!st.ok()) return st;
  }
  if (shards.size() > 1) {
    const Json idx{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    Status st = write_file_durably((fs::path(dir) / "model.safetensors.index.json").string(),
                                   [&](ByteSink& out) { out.write(idx.dump(2) + "\n"); });
    if (!st.ok()) return st;
  }
  // config.json and what a user needs beside it.
  if (!source_dir.empty()) {
    Status cs = write_file_durably((fs::path(dir) / "config.json").string(),
                                   [&](ByteSink& out) { out.write(source_config.dump(2) + "\n"); });
    if (!cs.ok()) return cs;
    for (const char* f : {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                          "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt"}) {
      const fs::path from = fs::path(source_dir) / f;
      if (!fs::exists(from)) continue;
      std::ifstream in(from, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      Status st = write_file_durably((fs::path(dir) / f).string(), [&](ByteSink& out) { out.write(bytes); });
      if (!st.ok()) return st;
    }
    return {};
  }
  ModelSpec m = p.model;
  if (m.max_seq <= 0) m.max_seq = p.train.seq;  // unknown: the positions the run trained (GPT-2's table)
  const Json cfg = hf_config_of(m, *fam, dtype);
  return write_file_durably((fs::path(dir) / "config.json").string(),
                            [&](ByteSink& out) { out.write(cfg.dump(2) + "\n"); });
}

}  // namespace weft::runtime
