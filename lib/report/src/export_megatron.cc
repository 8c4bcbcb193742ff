// Megatron-LM flags (rules in weft/report/export.h and docs/report.md). Flag names and the start-up
// checks they must pass are those of kMegatronRelease (data/reference/megatron-args).
#include <algorithm>
#include <cmath>
#include <optional>

#include "export_common.h"
#include "weft/core/format.h"

namespace weft::export_detail {

namespace {

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
  // Selective recompute takes no --recompute-method (validate_args).
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
    refuse_plan(kMeg, "Megatron-LM applies selective recompute to every layer or to none, but this plan mixes it "
                      "per layer (" + rc_runs() + ")");
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
    refuse_plan(kMeg, "Megatron-LM recomputes either every layer or the first k layers of every pipeline stage "
                      "(--recompute-method block), but this plan recomputes " + rc_runs() +
                      " across stages of " + join_counts(counts) + " layers");
  return {"--recompute-granularity full", "--recompute-method block", "--recompute-num-layers " + S(k)};
}

// The router's flags (core_v0.19's topk_routing_with_score_function and group_limited_topk): the
// score function, the top-k weights renormalised (softmax after the top-k, Megatron's default) or
// not (--moe-router-pre-softmax; a sigmoid router always renormalises), their scale, the groups
// and the balancing bias. weft's router runs in fp32.
void router_args(const MoeSpec& r, std::vector<std::string>& out, std::vector<std::string>& notes) {
  const bool sigmoid = r.score == RouterScore::kSigmoid;
  if (sigmoid) {
    out.push_back("--moe-router-score-function sigmoid");
    if (!r.norm_topk && r.top_k > 1)
      refuse(kMeg, "model: a sigmoid router whose top-k weights are used as they are (norm_topk false); Megatron-LM's "
                   "sigmoid router always renormalises them");
  } else if (!r.norm_topk) {
    out.push_back("--moe-router-pre-softmax");
  }
  if (r.routed_scale != 1.0) out.push_back("--moe-router-topk-scaling-factor " + num(r.routed_scale));
  if (r.group_limited()) {
    if (r.group_score_top != r.top_k / r.group_top_k)
      refuse(kMeg, "model: groups scored by their " + S(r.group_score_top) +
                       " best experts (group_score_top); Megatron-LM scores a group by its top_k / group_top_k = " +
                       S(r.top_k / r.group_top_k) + " best");
    if (!sigmoid && r.norm_topk && r.group_score_top > 1)
      refuse(kMeg, "model: a softmax router choosing groups by the sum of their best scores; Megatron-LM's softmax "
                   "router with renormalised weights sums logits, not scores (--moe-router-pre-softmax sums scores "
                   "but does not renormalise)");
    out.push_back("--moe-router-num-groups " + S(r.groups));
    out.push_back("--moe-router-group-topk " + S(r.group_top_k));
  }
  if (r.expert_bias) {
    out.push_back("--moe-router-enable-expert-bias");
    out.push_back("--moe-router-bias-update-rate " + num(r.bias_rate));
  }
  if (r.aux_loss_coef > 0) {
    out.push_back("--moe-aux-loss-coeff " + num(r.aux_loss_coef));
    notes.push_back("--moe-aux-loss-coeff: Megatron-LM's aux_loss counts each data-parallel rank's tokens per "
                    "expert; weft's balancing loss counts those of the whole micro-batch on the stage");
  }
  out.push_back("--moe-router-dtype fp32");
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
        s.head_dim != a.head_dim || s.ffn_kind != a.ffn_kind || s.bias != a.bias || !(s.mla == a.mla))
      refuse(kMeg, "groups \"" + m.groups.front().name + "\" and \"" + g.name +
                   "\" differ in kind, hidden, heads, kv_heads, head_dim, ffn kind, bias or latent attention; "
                   "Megatron-LM's flags describe one layer shape");
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
  if (a.mla.enabled()) {
    // Multi-head latent attention (core_v0.19's MLATransformerConfig): --qk-head-dim is the
    // non-rotary part of a head's query and key, --qk-pos-emb-head-dim the rotary part; no
    // --q-lora-rank projects queries directly.
    out.push_back("--multi-latent-attention");
    if (a.mla.q_lora_rank > 0) out.push_back("--q-lora-rank " + S(a.mla.q_lora_rank));
    out.push_back("--kv-lora-rank " + S(a.mla.kv_lora_rank));
    out.push_back("--qk-head-dim " + S(a.head_dim - a.mla.qk_rope_dim));
    out.push_back("--qk-pos-emb-head-dim " + S(a.mla.qk_rope_dim));
    out.push_back("--v-head-dim " + S(a.mla.v_head_dim));
  } else if (a.head_dim > 0 && static_cast<long long>(a.head_dim) * a.heads != a.hidden) {
    out.push_back("--kv-channels " + S(a.head_dim));
  }
  if (a.kv_heads > 0 && a.kv_heads < a.heads) {
    out.push_back("--group-query-attention");
    out.push_back("--num-query-groups " + S(a.kv_heads));
  }
  out.push_back("--seq-length " + S(p.train.seq));
  out.push_back("--max-position-embeddings " + S(std::max(p.train.seq, m.max_seq)));
  switch (m.position) {
    case PositionKind::kRope: {
      out.push_back("--position-embedding-type rope");
      // --rotary-base is an integer flag.
      const double theta = m.rope_theta;
      if (theta != std::round(theta) || theta >= 9e18)
        refuse(kMeg, "model.rope_theta=" + num(theta) + " is not an integer; Megatron-LM's --rotary-base "
                     "takes one");
      out.push_back("--rotary-base " + S(static_cast<long long>(theta)));
      break;
    }
    case PositionKind::kLearned: break;  // Megatron's default, learned_absolute
    case PositionKind::kRelative:
      notes.push_back("relative position embeddings have no GPT flag in Megatron-LM; the default learned "
                      "absolute positions are used");
      break;
  }
  // Sliding-window layers (GPT-OSS): Megatron-LM's --window-size (left, right) keeps keys
  // j >= i - left, so a band of w tokens with itself is (w - 1, 0); --window-attn-skip-freq N makes
  // layer n (1-based) banded unless n % N == 0, a list names each layer (1 banded) (core_v0.19's
  // is_layer_window_attention). Learned attention sinks are --softmax-type learnable.
  {
    int window = 0;
    std::vector<int> banded;
    bool sinks = false, plain = false;
    for (int i = 0; i < m.num_layers(); ++i) {
      const LayerShape& s = m.layer(i);
      if (s.window > 0 && window > 0 && s.window != window)
        refuse(kMeg, "layers with windows of " + S(window) + " and " + S(s.window) +
                     " tokens; Megatron-LM's --window-size is one window for every banded layer");
      if (s.window > 0) window = s.window;
      banded.push_back(s.window > 0 ? 1 : 0);
      (s.sinks ? sinks : plain) = true;
    }
    if (sinks && plain)
      refuse(kMeg, "some layers have attention sinks and some do not; Megatron-LM's --softmax-type is one for all");
    if (window > 0) {
      out.push_back("--window-size " + S(window - 1) + ",0");
      if (std::find(banded.begin(), banded.end(), 0) != banded.end()) {
        int every = 0;  // N such that layer n is banded exactly when n % N != 0
        for (int n = 2; n <= static_cast<int>(banded.size()) && !every; ++n) {
          bool ok = true;
          for (size_t i = 0; i < banded.size() && ok; ++i) ok = banded[i] == ((i + 1) % n != 0 ? 1 : 0);
          if (ok) every = n;
        }
        if (every) {
          out.push_back("--window-attn-skip-freq " + S(every));
        } else {
          std::string list;
          for (int b : banded) list += (list.empty() ? "" : ",") + S(b);
          out.push_back("--window-attn-skip-freq '[" + list + "]'");
        }
      }
    }
    if (sinks) out.push_back("--softmax-type learnable");
  }
  if (m.norm == NormKind::kRmsNorm) out.push_back("--normalization RMSNorm");
  if (a.ffn_kind == FfnKind::kSwiglu) out.push_back("--swiglu");
  if (!a.bias) out.push_back("--disable-bias-linear");
  // Qwen2's query / key / value biases beside no other bias, and Qwen3's per-head query / key norms
  // (RMSNorm under --normalization RMSNorm): core_v0.19's --add-qkv-bias and --qk-layernorm.
  if (!a.bias && a.qkv_bias) out.push_back("--add-qkv-bias");
  if (a.qk_norm && a.qk_norm_full)
    refuse(kMeg, "model: query / key norms over all heads at once (qk_norm \"full\", OLMoE); Megatron-LM's "
                 "--qk-layernorm normalises each head");
  if (a.qk_norm) out.push_back("--qk-layernorm");
  if (!m.tied_embeddings) out.push_back("--untie-embeddings-and-output-weights");
  if (moe) {
    out.push_back("--num-experts " + S(moe->moe.experts));
    out.push_back("--moe-router-topk " + S(moe->moe.top_k));
    out.push_back("--moe-ffn-hidden-size " + S(moe->moe.expert_ffn));
    router_args(moe->moe, out, notes);
    if (moe->moe.shared_experts > 0) {
      out.push_back("--moe-shared-expert-intermediate-size " + S(moe->moe.shared_experts * moe->moe.expert_ffn));
      if (moe->moe.shared_gate) out.push_back("--moe-shared-expert-gate");  // Qwen2-MoE's sigmoid gate
    }
    if (dense) {
      // Which layers are MoE, as Megatron's Python-list pattern: '[0]*3+[1]*29'.
      std::string pattern;
      for (const auto& g : m.groups)
        pattern += std::string(pattern.empty() ? "" : "+") + "[" + (g.shape.moe.enabled() ? "1" : "0") + "]*" +
                   S(g.count);
      out.push_back("--moe-layer-freq '" + pattern + "'");
    }
    // The cost model prices the dispatch as all-to-alls (weft/cost/traffic.h) and the experts as one
    // grouped GEMM; Megatron's defaults are the all-gather dispatcher and a GEMM per expert.
    // A node-deduplicating dispatcher is the flex dispatcher with its backend; the expert all-to-all
    // overlap (combined 1F1B) takes either.
    if (p.train.moe_dispatcher == MoeDispatcher::kAllToAll) {
      out.push_back("--moe-token-dispatcher-type alltoall");
    } else {
      out.push_back("--moe-token-dispatcher-type flex");
      out.push_back(std::string("--moe-flex-dispatcher-backend ") + to_string(p.train.moe_dispatcher));
    }
    if (p.train.moe_a2a_overlap) out.push_back("--overlap-moe-expert-parallel-comm");
    if (p.cluster.gpu.tflops_bf16 > 0) {
      out.push_back("--moe-grouped-gemm");
    } else {
      // validate_args asserts compute capability 8.0 or newer for grouped GEMM; GPUs without bf16
      // predate it.
      notes.push_back("the " + p.cluster.gpu.name + " has no bf16, so it predates compute capability 8.0, which "
                      "Megatron-LM's --moe-grouped-gemm needs: the flag is left out, and each expert runs its own "
                      "GEMM, slower than the estimate (which assumes one grouped GEMM)");
    }
  }
  if (a.kind == LayerKind::kEncoder)
    notes.push_back("encoder layers (bidirectional attention): use these flags with Megatron-LM's BERT "
                    "pretraining script");
}

}  // namespace

MegatronArgs megatron_or_throw(const Plan& p) {
  require_valid(p);
  if (p.train.rounds > 1 && p.train.pp > 1)
    refuse_plan(kMeg, "train.rounds=" + S(p.train.rounds) + ": Megatron-LM runs all " + S(p.train.micro_batches) +
                          " micro-batches of a step in one pipeline schedule");
  MegatronArgs r;
  r.notes.push_back(std::string("written for ") + kMegatronRelease +
                    " (its flags: data/reference/megatron-args/arguments.txt)");
  auto& out = r.lines;
  // One parallel strategy for every layer (recompute aside, below); the expert degree is the MoE
  // layers' (--expert-model-parallel-size applies to them only).
  Plan no_rc = p;
  for (auto& st : no_rc.stages)
    for (auto& l : st.layers) l = without_recompute(l);
  const std::optional<LayerStrategy> one = no_rc.uniform_strategy();
  if (!one)
    refuse_plan(kMeg, "Megatron-LM applies one parallel strategy to every layer, but this plan is layer-wise: " +
                          describe(runs(p, without_recompute), 6));
  const LayerStrategy s = *one;
  require_embedding_like_layers(p, s, kMeg, kMeg,
                                "Megatron-LM runs the embedding and LM head on the layers' tensor-parallel group",
                                "Megatron-LM's distributed optimizer and Megatron FSDP cover all parameters or none");
  if (p.train.schedule == Schedule::kZbH1 && p.train.pp > 1)
    refuse_plan(kMeg, "train.schedule=zb-h1 (pp=" + S(p.train.pp) +
                          "): Megatron-LM mainline has no zero-bubble schedule (it lives in the sail-sg fork), and "
                          "running this plan as 1F1B would not be the plan the estimate prices");
  if (p.train.schedule == Schedule::kZbV)
    refuse_plan(kMeg, "train.schedule=zb-v (pp=" + S(p.train.pp) +
                          "): Megatron-LM mainline has no zero-bubble schedule (ZB-V lives in the sail-sg fork), and "
                          "its interleaved schedule places a rank's chunks as g + c pp, not in a V");
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
    // validate_args: with --num-layers-per-virtual-pipeline-stage, no first/last-stage sizes.
    if (!even)
      refuse_plan(kMeg, "the " + S(counts.size()) + " virtual stages hold " + join_counts(counts) +
                            " layers; with interleaving Megatron-LM needs the same number in each");
    out.push_back("--num-layers-per-virtual-pipeline-stage " + S(counts[0]));
  } else if (!even) {
    const int pp = p.train.pp;
    std::vector<int> middle(counts.begin() + 1, counts.end() - 1);
    const bool middle_even = std::all_of(middle.begin(), middle.end(), [&](int c) { return c == middle[0]; });
    if (!middle_even)
      refuse_plan(kMeg, "the " + S(pp) + " stages hold " + join_counts(counts) +
                            " layers; Megatron-LM splits layers evenly, only the first and last stage may differ");
    if (pp == 2 || counts.front() != middle[0]) out.push_back("--decoder-first-pipeline-num-layers " + S(counts.front()));
    if (pp == 2 || counts.back() != middle[0]) out.push_back("--decoder-last-pipeline-num-layers " + S(counts.back()));
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
  // Megatron-LM's default expert tensor degree is tp's (arguments.py: expert_tensor_parallel_size
  // None -> tensor_model_parallel_size).
  if (s.expert_tp() != s.tp) out.push_back("--expert-tensor-parallel-size " + S(s.expert_tp()));
  // Sequence parallelism needs tp > 1 (validate() holds it; Megatron drops the flag at tp = 1).
  if (s.sp && s.tp > 1) out.push_back("--sequence-parallel");
  out.insert(out.end(), rc.begin(), rc.end());
  const bool fsdp = s.zero >= 2;
  if (s.zero >= 1) out.push_back("--use-distributed-optimizer");
  if (fsdp) {
    // ZeRO-2/3: Megatron-FSDP, sharding gradients (and parameters) as well. validate_args requires
    // its checkpoint format, and warns that fused gradient accumulation needs Transformer Engine
    // support under it; the fusion is switched off.
    out.push_back("--use-megatron-fsdp");
    out.push_back(std::string("--data-parallel-sharding-strategy ") + (s.zero == 3 ? "optim_grads_params" : "optim_grads"));
    out.push_back("--ckpt-format fsdp_dtensor");
    out.push_back("--no-gradient-accumulation-fusion");
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
  if (const OptimizerPrecision& o = p.train.optimizer; o.precision_aware()) {
    // The precision-aware optimizer (Transformer Engine's FusedAdam) keeps the moments and, where
    // asked, the main gradients in lower precision; the master parameters stay fp32.
    out.push_back("--use-precision-aware-optimizer");
    if (o.exp_avg != DType::kFp32) out.push_back(std::string("--exp-avg-dtype ") + to_string(o.exp_avg));
    if (o.exp_avg_sq != DType::kFp32) out.push_back(std::string("--exp-avg-sq-dtype ") + to_string(o.exp_avg_sq));
    if (o.main_grads != DType::kFp32) out.push_back(std::string("--main-grads-dtype ") + to_string(o.main_grads));
  }
  // validate_args: Megatron-FSDP refuses CUDA_DEVICE_MAX_CONNECTIONS=1; without it, tensor or
  // context parallelism requires 1 on GPUs before Blackwell.
  if (fsdp) {
    r.notes.push_back("Megatron-FSDP: leave CUDA_DEVICE_MAX_CONNECTIONS unset (or above 1), Megatron-LM refuses 1 "
                      "with --use-megatron-fsdp; it takes --optimizer adam (the default) or sgd");
  } else if (s.tp > 1 || cpn > 1) {
    r.notes.push_back("set CUDA_DEVICE_MAX_CONNECTIONS=1 in the environment: Megatron-LM requires it for tensor or "
                      "context parallelism on GPUs before Blackwell");
  }
  r.notes.push_back("tokenizer, data, optimizer and learning-rate flags are not part of a plan; the vocabulary (" +
                    S(p.model.vocab) + ") comes from the tokenizer");
  return r;
}

}  // namespace weft::export_detail
