// Megatron-LM and DeepSpeed exports (rules in weft/report/export.h and docs/report.md).
#include "weft/report/export.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "weft/core/format.h"

namespace weft {

namespace {

LayerStrategy without_recompute(LayerStrategy s) {
  s.recompute = Recompute::kNone;
  return s;
}

std::string layer_range(int a, int b) { return a == b ? "layer " + S(a) : "layers " + S(a) + "-" + S(b); }

// Runs of consecutive layers whose strategies are equal under `key`.
struct Run {
  int first = 0, last = 0;
  LayerStrategy s;
};
std::vector<Run> runs(const Plan& p, const std::function<LayerStrategy(const LayerStrategy&)>& key) {
  std::vector<Run> out;
  const int L = p.model.num_layers();
  for (int i = 0; i < L; ++i) {
    LayerStrategy k = key(p.layer_strategy(i));
    if (!out.empty() && out.back().s == k) {
      out.back().last = i;
    } else {
      out.push_back({i, i, k});
    }
  }
  return out;
}

std::string describe(const std::vector<Run>& rs, int max_runs) {
  std::string out;
  const int n = static_cast<int>(rs.size());
  for (int i = 0; i < std::min(n, max_runs); ++i)
    out += (i ? "; " : "") + layer_range(rs[i].first, rs[i].last) + ": " + label(rs[i].s);
  if (n > max_runs) out += "; ... and " + S(n - max_runs) + " more runs";
  return out;
}

std::vector<int> stage_layer_counts(const Plan& p) {
  std::vector<int> c;
  for (const auto& st : p.stages) c.push_back(st.num_layers());
  return c;
}

std::string join_counts(const std::vector<int>& c) {
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) out += (i ? ", " : "") + S(c[i]);
  return out;
}

// A refusal, "<who>: <msg>": `who` is the framework (its name, weft/cost/framework.h) or the
// export target.
[[noreturn]] void refuse(const std::string& who, const std::string& msg) { throw InputError(who + ": " + msg); }
[[noreturn]] void refuse(Framework who, const std::string& msg) { refuse(std::string(to_string(who)), msg); }

// The embedding must share the layers' tensor-parallel degree and ZeRO stage (`tp_why`, `zero_why`
// say why, for the framework `who`).
void require_embedding_like_layers(const Plan& p, const LayerStrategy& s, Framework who,
                                   const std::string& tp_why, const std::string& zero_why) {
  if (p.embedding.tp != s.tp)
    refuse(who, "embedding.tp=" + S(p.embedding.tp) + " but the layers use tp=" + S(s.tp) + "; " + tp_why);
  if (p.embedding.zero != s.zero)
    refuse(who, "embedding.zero=" + S(p.embedding.zero) + " but the layers use zero=" + S(s.zero) + "; " + zero_why);
}

void require_valid(const Plan& p) {
  Status v = validate(p);
  if (!v.ok()) throw InputError(v.error().message);
}

// --- Megatron-LM ---------------------------------------------------------------------------------

constexpr Framework kMeg = Framework::kMegatron;

// The recompute flags for the layers, or a refusal naming the layers that differ.
std::vector<std::string> megatron_recompute(const Plan& p) {
  const int L = p.model.num_layers();
  bool any_none = false, any_sel = false, any_full = false;
  for (int i = 0; i < L; ++i) {
    switch (p.layer_strategy(i).recompute) {
      case Recompute::kNone: any_none = true; break;
      case Recompute::kSelective: any_sel = true; break;
      case Recompute::kFull: any_full = true; break;
    }
  }
  if (any_sel && !any_none && !any_full) return {"--recompute-granularity selective"};
  if (any_full && !any_none && !any_sel)
    return {"--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"};
  if (!any_full && !any_sel) return {};
  auto rc_runs = [&] {
    std::string out;
    auto rs = runs(p, [](const LayerStrategy& s) {
      LayerStrategy k;
      k.recompute = s.recompute;
      return k;
    });
    for (size_t i = 0; i < rs.size() && i < 8; ++i)
      out += std::string(i ? "; " : "") + layer_range(rs[i].first, rs[i].last) + ": recompute " +
             to_string(rs[i].s.recompute);
    if (rs.size() > 8) out += "; ... and " + S(rs.size() - 8) + " more runs";
    return out;
  };
  if (any_sel)
    refuse(kMeg, "Megatron-LM applies selective recompute to every layer or to none, but this plan mixes it per "
                 "layer (" + rc_runs() + ")");
  // Full recompute of the first k layers of every (virtual) stage: Megatron's "block" method.
  const auto counts = stage_layer_counts(p);
  int k = -1;
  bool block = std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts[0]; });
  for (const auto& st : p.stages) {
    if (!block) break;
    int prefix = 0;
    while (prefix < st.num_layers() && st.layers[prefix].recompute == Recompute::kFull) ++prefix;
    for (int i = prefix; i < st.num_layers(); ++i)
      if (st.layers[i].recompute != Recompute::kNone) block = false;
    if (k >= 0 && prefix != k) block = false;
    k = prefix;
  }
  if (!block)
    refuse(kMeg, "Megatron-LM recomputes either every layer or the first k layers of every pipeline stage "
                 "(--recompute-method block), but this plan recomputes " + rc_runs() +
                 " across stages of " + join_counts(counts) + " layers");
  return {"--recompute-granularity full", "--recompute-method block", "--recompute-num-layers " + S(k)};
}

// Model-shape flags; refuses models Megatron's GPT/BERT flags cannot describe.
void megatron_model(const Plan& p, std::vector<std::string>& out, std::vector<std::string>& notes) {
  const ModelSpec& m = p.model;
  const LayerShape& a = m.groups.front().shape;
  const LayerShape* dense = nullptr;
  const LayerShape* moe = nullptr;
  for (const auto& g : m.groups) {
    const LayerShape& s = g.shape;
    if (s.kind == LayerKind::kCrossDecoder)
      refuse(kMeg, "group \"" + g.name + "\" has cross-attention (encoder-decoder); this export writes GPT/BERT "
                   "flags for one stack of self-attention layers");
    if (s.kind != a.kind || s.hidden != a.hidden || s.heads != a.heads || s.kv_heads != a.kv_heads ||
        s.head_dim != a.head_dim || s.ffn_kind != a.ffn_kind || s.bias != a.bias)
      refuse(kMeg, "groups \"" + m.groups.front().name + "\" and \"" + g.name +
                   "\" differ in kind, hidden, heads, kv_heads, head_dim, ffn kind or bias; Megatron-LM's flags "
                   "describe one layer shape");
    if (s.moe.enabled()) {
      if (moe && !(moe->moe == s.moe)) refuse(kMeg, "MoE groups with different expert settings (group \"" + g.name + "\")");
      moe = &s;
    } else {
      if (dense && dense->ffn != s.ffn)
        refuse(kMeg, "dense groups with different FFN sizes (" + S(dense->ffn) + " and " + S(s.ffn) + ")");
      dense = &s;
    }
  }
  out.push_back("--num-layers " + S(m.num_layers()));
  out.push_back("--hidden-size " + S(a.hidden));
  out.push_back("--ffn-hidden-size " + S(dense ? dense->ffn : moe->moe.expert_ffn));
  out.push_back("--num-attention-heads " + S(a.heads));
  if (a.head_dim > 0 && static_cast<long long>(a.head_dim) * a.heads != a.hidden)
    out.push_back("--kv-channels " + S(a.head_dim));
  if (a.kv_heads > 0 && a.kv_heads < a.heads) {
    out.push_back("--group-query-attention");
    out.push_back("--num-query-groups " + S(a.kv_heads));
  }
  out.push_back("--seq-length " + S(p.train.seq));
  out.push_back("--max-position-embeddings " + S(std::max(p.train.seq, m.max_seq)));
  switch (m.position) {
    case PositionKind::kRope: out.push_back("--position-embedding-type rope"); break;
    case PositionKind::kLearned: break;  // Megatron's default, learned_absolute
    case PositionKind::kRelative:
      notes.push_back("relative position embeddings have no GPT flag in Megatron-LM; the default learned "
                      "absolute positions are used");
      break;
  }
  if (m.norm == NormKind::kRmsNorm) out.push_back("--normalization RMSNorm");
  if (a.ffn_kind == FfnKind::kSwiglu) out.push_back("--swiglu");
  if (!a.bias) out.push_back("--disable-bias-linear");
  if (!m.tied_embeddings) out.push_back("--untie-embeddings-and-output-weights");
  if (moe) {
    out.push_back("--num-experts " + S(moe->moe.experts));
    out.push_back("--moe-router-topk " + S(moe->moe.top_k));
    out.push_back("--moe-ffn-hidden-size " + S(moe->moe.expert_ffn));
    if (moe->moe.shared_experts > 0)
      out.push_back("--moe-shared-expert-intermediate-size " + S(moe->moe.shared_experts * moe->moe.expert_ffn));
    if (dense) {
      // Which layers are MoE, as Megatron's Python-list pattern: '[0]*3+[1]*29'.
      std::string pattern;
      for (const auto& g : m.groups)
        pattern += std::string(pattern.empty() ? "" : "+") + "[" + (g.shape.moe.enabled() ? "1" : "0") + "]*" +
                   S(g.count);
      out.push_back("--moe-layer-freq '" + pattern + "'");
    }
  }
  if (a.kind == LayerKind::kEncoder)
    notes.push_back("encoder layers (bidirectional attention): use these flags with Megatron-LM's BERT "
                    "pretraining script");
}

MegatronArgs megatron_or_throw(const Plan& p) {
  require_valid(p);
  MegatronArgs r;
  auto& out = r.lines;
  const LayerStrategy s = p.layer_strategy(0);
  {
    auto rs = runs(p, without_recompute);
    if (rs.size() > 1)
      refuse(kMeg, "Megatron-LM applies one parallel strategy to every layer, but this plan is layer-wise: " +
                       describe(rs, 6));
  }
  require_embedding_like_layers(p, s, kMeg, "Megatron-LM runs the embedding and LM head on the layers' tensor-parallel group",
                                "Megatron-LM's distributed optimizer and Megatron FSDP cover all parameters or none");
  std::vector<std::string> rc = megatron_recompute(p);

  megatron_model(p, out, r.notes);

  const int pmb = p.train.pipeline_micro_batch();
  out.push_back("--micro-batch-size " + S(pmb / s.dp));
  out.push_back("--global-batch-size " + S(p.train.global_batch));
  out.push_back("--tensor-model-parallel-size " + S(s.tp));
  out.push_back("--pipeline-model-parallel-size " + S(p.train.pp));

  const auto counts = stage_layer_counts(p);
  const bool even = std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts[0]; });
  if (p.train.vp > 1) {
    if (!even)
      refuse(kMeg, "the " + S(counts.size()) + " virtual stages hold " + join_counts(counts) +
                       " layers; with interleaving Megatron-LM needs the same number in each");
    out.push_back("--num-layers-per-virtual-pipeline-stage " + S(counts[0]));
    if (p.train.pp == 2) r.notes.push_back("older Megatron-LM releases accept the interleaved schedule only with pp > 2");
  } else if (!even) {
    const int pp = p.train.pp;
    std::vector<int> middle(counts.begin() + 1, counts.end() - 1);
    const bool middle_even = std::all_of(middle.begin(), middle.end(), [&](int c) { return c == middle[0]; });
    if (!middle_even)
      refuse(kMeg, "the " + S(pp) + " stages hold " + join_counts(counts) +
                       " layers; Megatron-LM splits layers evenly, only the first and last stage may differ");
    if (pp == 2 || counts.front() != middle[0]) out.push_back("--decoder-first-pipeline-num-layers " + S(counts.front()));
    if (pp == 2 || counts.back() != middle[0]) out.push_back("--decoder-last-pipeline-num-layers " + S(counts.back()));
    r.notes.push_back("uneven first/last stages need a Megatron-LM release with --decoder-first-pipeline-num-layers");
  }
  if (p.train.schedule == Schedule::kGpipe && p.train.pp > 1)
    r.notes.push_back("Megatron-LM has no GPipe schedule; it runs 1F1B, which keeps fewer micro-batches in flight");

  const int cpn = s.ulysses * s.cp;
  if (cpn > 1) {
    out.push_back("--context-parallel-size " + S(cpn));
    if (s.ulysses > 1 && s.cp > 1) {
      out.push_back("--cp-comm-type a2a+p2p");
      out.push_back("--hierarchical-context-parallel-sizes " + S(s.ulysses) + " " + S(s.cp));
    } else if (s.ulysses > 1) {
      out.push_back("--cp-comm-type a2a");
    }
  }
  if (s.ep > 1) out.push_back("--expert-model-parallel-size " + S(s.ep));
  if (s.sp) {
    out.push_back("--sequence-parallel");
    r.notes.push_back("sequence parallelism: set CUDA_DEVICE_MAX_CONNECTIONS=1 in the environment");
  }
  out.insert(out.end(), rc.begin(), rc.end());
  if (s.zero >= 1) out.push_back("--use-distributed-optimizer");
  if (s.zero >= 2) {
    // ZeRO-2/3: Megatron FSDP, sharding gradients (and parameters) as well.
    out.push_back("--use-megatron-fsdp");
    out.push_back(std::string("--data-parallel-sharding-strategy ") + (s.zero == 3 ? "optim_grads_params" : "optim_grads"));
    r.notes.push_back("ZeRO-" + S(s.zero) + " is Megatron FSDP (Megatron-Core releases before it was renamed take "
                      "--use-custom-fsdp)");
  }
  if (s.shard_group() > 1) out.push_back("--overlap-grad-reduce");
  switch (p.train.dtype) {
    case DType::kBf16: out.push_back("--bf16"); break;
    case DType::kFp16: out.push_back("--fp16"); break;
    case DType::kFp8:
      out.push_back("--bf16");
      out.push_back("--fp8-format hybrid");
      break;
    case DType::kFp32:
    case DType::kTf32: break;
  }
  r.notes.push_back("tokenizer, data, optimizer and learning-rate flags are not part of a plan; the vocabulary (" +
                    S(p.model.vocab) + ") comes from the tokenizer");
  return r;
}

// --- DeepSpeed -----------------------------------------------------------------------------------

const char* kDs = "deepspeed";

DeepSpeedConfig deepspeed_or_throw(const Plan& p, DeepSpeedTarget target) {
  require_valid(p);
  DeepSpeedConfig r;
  {
    auto rs = runs(p, [](const LayerStrategy& s) { return s; });
    if (rs.size() > 1)
      refuse(kDs, "a DeepSpeed config applies one strategy to every layer, but this plan is layer-wise: " +
                      describe(rs, 6));
  }
  const LayerStrategy s = p.layer_strategy(0);
  const bool plain = target == DeepSpeedTarget::kDeepSpeed;
  if (plain) {
    std::string what;
    auto add = [&](bool cond, const std::string& x) {
      if (cond) what += (what.empty() ? "" : ", ") + x;
    };
    add(s.tp > 1, "tp=" + S(s.tp));
    add(p.train.pp > 1, "pp=" + S(p.train.pp));
    add(s.ulysses > 1, "ulysses=" + S(s.ulysses));
    add(s.cp > 1, "cp=" + S(s.cp));
    add(s.ep > 1, "ep=" + S(s.ep));
    if (!what.empty())
      refuse(kDs, "a plain DeepSpeed config expresses data parallelism and ZeRO only, but this plan uses " + what +
                      "; Megatron-DeepSpeed takes tensor, pipeline and Ulysses degrees from its own flags "
                      "(export with --megatron-deepspeed, and see weft export megatron)");
  } else {
    if (s.cp > 1) refuse(kDs, "cp=" + S(s.cp) + ": ring context parallelism is not expressible for Megatron-DeepSpeed");
    if (s.ep > 1)
      refuse(kDs, "ep=" + S(s.ep) + ": DeepSpeed-MoE sets the expert-parallel size in the model code, not the config");
    if (s.ulysses > 1 && s.sp)
      refuse(kDs, "ulysses=" + S(s.ulysses) + " with Megatron sequence parallelism (sp): Megatron-DeepSpeed's "
                  "--ds-sequence-parallel-size cannot be combined with --sequence-parallel");
    if (p.train.pp > 1 && s.zero >= 2)
      refuse(kDs, "zero=" + S(s.zero) + " with pp=" + S(p.train.pp) +
                      ": DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 only");
  }
  if (p.embedding.zero != s.zero)
    refuse(kDs, "embedding.zero=" + S(p.embedding.zero) + " but the layers use zero=" + S(s.zero) +
                    "; DeepSpeed applies one ZeRO stage to all parameters");
  if (s.recompute == Recompute::kSelective && plain)
    refuse(kDs, "selective recompute has no DeepSpeed config setting (it is a model-code choice; "
                "Megatron-DeepSpeed: --recompute-granularity selective)");

  Json c;
  c["train_batch_size"] = p.train.global_batch;
  c["train_micro_batch_size_per_gpu"] = p.train.pipeline_micro_batch() / s.dp;
  c["gradient_accumulation_steps"] = p.train.micro_batches;
  Json zero{{"stage", s.zero}};
  if (s.zero > 0) zero["overlap_comm"] = true;
  c["zero_optimization"] = zero;
  switch (p.train.dtype) {
    case DType::kBf16: c["bf16"] = {{"enabled", true}}; break;
    case DType::kFp16: c["fp16"] = {{"enabled", true}, {"loss_scale", 0}}; break;
    case DType::kFp8:
      c["bf16"] = {{"enabled", true}};
      r.notes.push_back("fp8 GEMMs come from Transformer Engine in the model code; the config sets bf16");
      break;
    case DType::kFp32:
    case DType::kTf32: break;
  }
  if (s.recompute == Recompute::kFull) {
    c["activation_checkpointing"] = {{"partition_activations", !plain && s.tp > 1},
                                     {"cpu_checkpointing", false},
                                     {"contiguous_memory_optimization", false},
                                     {"synchronize_checkpoint_boundary", false},
                                     {"profile", false}};
    r.notes.push_back("activation_checkpointing takes effect where the model calls "
                      "deepspeed.checkpointing.checkpoint on each layer");
  }
  if (s.recompute == Recompute::kSelective)
    r.notes.push_back("selective recompute: pass --recompute-granularity selective to Megatron-DeepSpeed");
  if (!plain) {
    std::string flags = "--tensor-model-parallel-size " + S(s.tp) + " --pipeline-model-parallel-size " + S(p.train.pp);
    if (s.ulysses > 1) flags += " --ds-sequence-parallel-size " + S(s.ulysses);
    if (s.sp) flags += " --sequence-parallel";
    if (p.train.pp == 1) flags += " --no-pipeline-parallel";
    r.notes.push_back("Megatron-DeepSpeed flags for the parallel degrees: " + flags);
  }
  r.config = std::move(c);
  return r;
}

// --- torchtitan ----------------------------------------------------------------------------------

constexpr Framework kTitan = Framework::kTorchtitan;

TorchtitanConfig torchtitan_or_throw(const Plan& p) {
  require_valid(p);
  TorchtitanConfig r;
  // One strategy for every layer; the expert degree applies to the MoE layers only.
  const std::optional<LayerStrategy> one = p.uniform_strategy();
  if (!one)
    refuse(kTitan, "torchtitan applies one strategy to every layer, but this plan is layer-wise: " +
                       describe(runs(p, [](const LayerStrategy& s) { return s; }), 6));
  const LayerStrategy s = *one;
  if (s.ulysses > 1) refuse(kTitan, "ulysses=" + S(s.ulysses) + ": torchtitan has no Ulysses sequence parallelism");
  if (s.zero < 2 && s.shard_group() > 1)
    refuse(kTitan, "zero=" + S(s.zero) + ": torchtitan's data parallelism is FSDP2 (ZeRO-2 without resharding "
                   "after forward, or ZeRO-3); it has no optimizer-only sharding, and plain DDP drops mixed "
                   "precision under tensor or pipeline parallelism");
  if (s.tp > 1 && !s.sp)
    refuse(kTitan, "tp=" + S(s.tp) + " without sequence parallelism: torchtitan's tensor parallelism always "
                   "shards the norms over the sequence (plan with --framework " + to_string(kTitan) + ")");
  require_embedding_like_layers(p, s, kTitan, "torchtitan shards the embedding and output over the same tensor-parallel mesh",
                                "torchtitan applies one data-parallel mode to all parameters");
  const int B = p.train.global_batch, m = std::max(1, p.train.micro_batches), dp = std::max(1, s.dp);
  const int pp = std::max(1, p.train.pp), vp = std::max(1, p.train.vp);
  const int per_micro = B / (m * dp);  // samples of one micro-batch on one data-parallel rank
  std::string t;
  auto line = [&](const std::string& k, const std::string& v) { t += k + " = " + v + "\n"; };
  auto q = [](const std::string& v) { return "\"" + v + "\""; };
  t += "[training]\n";
  // Without a pipeline, micro-batches are gradient accumulation: torchtitan runs global / (local * dp)
  // steps of local_batch_size samples. With one, the local batch is split into pipeline micro-batches.
  line("local_batch_size", S(pp > 1 ? B / dp : per_micro));
  line("global_batch_size", S(B));
  line("seq_len", S(p.train.seq));
  switch (p.train.dtype) {
    case DType::kFp32:
    case DType::kTf32: line("mixed_precision_param", q("float32")); break;
    case DType::kFp16:
      line("mixed_precision_param", q("float16"));
      break;
    case DType::kBf16:
    case DType::kFp8: line("mixed_precision_param", q("bfloat16")); break;
  }
  t += "\n[parallelism]\n";
  line("data_parallel_replicate_degree", "1");
  line("data_parallel_shard_degree", S(dp));
  if (s.zero >= 2) line("fsdp_reshard_after_forward", q(s.zero == 3 ? "always" : "never"));
  if (s.shard_group() == 1 && p.train.dtype != DType::kFp32 && p.train.dtype != DType::kTf32)
    r.notes.push_back("no data or context parallelism: torchtitan applies its bf16 mixed precision through FSDP "
                      "only, so this runs in fp32 there unless a data or context parallel degree is added");
  line("tensor_parallel_degree", S(s.tp));
  line("context_parallel_degree", S(s.cp));
  if (s.ep > 1) line("expert_parallel_degree", S(s.ep));
  line("pipeline_parallel_degree", S(pp));
  if (pp > 1) {
    const char* sched = p.train.schedule == Schedule::kGpipe ? "GPipe"
                        : p.train.schedule == Schedule::kInterleaved && vp > 1 ? "Interleaved1F1B"
                                                                                : "1F1B";
    line("pipeline_parallel_schedule", q(sched));
    line("pipeline_parallel_microbatch_size", S(per_micro));
    const auto counts = stage_layer_counts(p);
    if (std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts[0]; })) {
      // torchtitan counts the embedding and the output as one layer each unless told not to.
      line("pipeline_parallel_layers_per_stage", S(counts[0]));
      line("pipeline_parallel_first_stage_less_layers", "0");
      line("pipeline_parallel_last_stage_less_layers", "0");
    } else {
      r.notes.push_back("uneven stages (" + join_counts(counts) +
                        " layers): give torchtitan the split points (pipeline_parallel_split_points)");
    }
  }
  t += "\n[activation_checkpoint]\n";
  line("mode", q(s.recompute == Recompute::kFull ? "full" : s.recompute == Recompute::kSelective ? "selective" : "none"));
  if (s.recompute == Recompute::kSelective) line("selective_ac_option", q("op"));
  if (p.train.dtype == DType::kFp8)
    r.notes.push_back("fp8: enable torchtitan's Float8 linear converter; the tables set bf16 parameters");
  if (p.train.dtype == DType::kFp16)
    r.notes.push_back("fp16: torchtitan trains in bf16 or fp32; fp16 needs a loss scaler it does not provide");
  r.notes.push_back("model, tokenizer, data, optimizer and learning-rate settings are not part of a plan");
  r.toml = std::move(t);
  return r;
}

}  // namespace

Result<TorchtitanConfig> torchtitan_config(const Plan& p) {
  return catch_errors([&]() -> Result<TorchtitanConfig> { return torchtitan_or_throw(p); });
}

std::string MegatronArgs::text() const {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

Result<MegatronArgs> megatron_args(const Plan& p) {
  return catch_errors([&]() -> Result<MegatronArgs> { return megatron_or_throw(p); });
}

Result<DeepSpeedConfig> deepspeed_config(const Plan& p, DeepSpeedTarget target) {
  return catch_errors([&]() -> Result<DeepSpeedConfig> { return deepspeed_or_throw(p, target); });
}

Result<FrameworkExport> framework_export(const Plan& p, Framework f) {
  switch (f) {
    case Framework::kMegatron: {
      auto a = megatron_args(p);
      if (!a.ok()) return a.error();
      return FrameworkExport{a->text(), a->notes};
    }
    case Framework::kMegatronDeepSpeed: {
      auto c = deepspeed_config(p, DeepSpeedTarget::kMegatronDeepSpeed);
      if (!c.ok()) return c.error();
      return FrameworkExport{c->config.dump(2) + "\n", c->notes};
    }
    case Framework::kTorchtitan:
    case Framework::kTorchtitanCompile: {
      auto c = torchtitan_config(p);
      if (!c.ok()) return c.error();
      FrameworkExport out{c->toml, c->notes};
      if (f == Framework::kTorchtitanCompile)
        out.notes.push_back("torch.compile is not part of a plan: turn it on in the job config");
      return out;
    }
  }
  return Error{ErrorKind::kBadInput, "framework: no export for this framework"};
}

std::string describe_layer_runs(const Plan& p, int max_runs) {
  return describe(runs(p, [](const LayerStrategy& s) { return s; }), max_runs);
}

}  // namespace weft
