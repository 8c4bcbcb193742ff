// Megatron-LM, DeepSpeed and torchtitan exports: the expected flags for uniform plans (written out
// here from the frameworks' argument names, not from the exporter's output) and refusals that name
// what differs. export_reference_test.cc checks every export against the releases' own lists.
#include <gtest/gtest.h>

#include "report_test_util.h"
#include "weft/cost/analytic.h"
#include "weft/report/export.h"
#include "weft/search/search.h"
#include "weft/spec/hf_config.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

using namespace report_test;

bool contains(const std::string& s, const std::string& x) { return s.find(x) != std::string::npos; }

// 16 GPUs, pp=2 x vp=2 interleaved, 8 micro-batches of 8 samples, tp4+sp dp2 ZeRO-1, selective.
Plan interleaved_tp_plan() {
  return plan(gpt(8), cluster(2, 8), train(2, 8, 64, Schedule::kInterleaved, 2),
              LayerStrategy{.tp = 4, .sp = true, .dp = 2, .zero = 1, .recompute = Recompute::kSelective});
}

TEST(Megatron, UniformPlanGivesExactFlags) {
  Plan p = interleaved_tp_plan();
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto a = megatron_args(p);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const std::vector<std::string> expected{
      "--num-layers 8",
      "--hidden-size 1024",
      "--ffn-hidden-size 4096",
      "--num-attention-heads 16",
      "--seq-length 2048",
      "--max-position-embeddings 2048",
      "--untie-embeddings-and-output-weights",
      "--micro-batch-size 4",       // 64 samples / 8 micro-batches / dp 2
      "--global-batch-size 64",
      "--tensor-model-parallel-size 4",
      "--pipeline-model-parallel-size 2",
      "--num-layers-per-virtual-pipeline-stage 2",  // 8 layers / (pp 2 * vp 2)
      "--sequence-parallel",
      "--recompute-granularity selective",
      "--use-distributed-optimizer",
      "--overlap-grad-reduce",
      "--bf16",
  };
  EXPECT_EQ(a->lines, expected);
  // Megatron derives the micro-batch count as global / (micro * dp): it must give the plan's m.
  EXPECT_EQ(64 / (4 * 2), p.train.micro_batches);
  EXPECT_EQ(a->text().substr(0, 15), "--num-layers 8\n");
}

TEST(Megatron, LlamaWithUlyssesRingAndFullRecompute) {
  // 32 GPUs, pp=4, stage of 8 = tp2 x ulysses2 x cp2 x dp1, full recompute, no ZeRO.
  Plan p = plan(llama(8), cluster(4, 8), train(4, 32, 32, Schedule::k1F1B, 1, 4096),
                LayerStrategy{.tp = 2, .ulysses = 2, .cp = 2, .dp = 1, .recompute = Recompute::kFull});
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto a = megatron_args(p);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const std::vector<std::string> expected{
      "--num-layers 8",
      "--hidden-size 4096",
      "--ffn-hidden-size 11008",
      "--num-attention-heads 32",
      "--group-query-attention",
      "--num-query-groups 8",
      "--seq-length 4096",
      "--max-position-embeddings 4096",
      "--position-embedding-type rope",
      "--rotary-base 10000",  // the model's rope_theta (the default)
      "--normalization RMSNorm",
      "--swiglu",
      "--disable-bias-linear",
      "--untie-embeddings-and-output-weights",
      "--micro-batch-size 1",
      "--global-batch-size 32",
      "--tensor-model-parallel-size 2",
      "--pipeline-model-parallel-size 4",
      "--context-parallel-size 4",  // Ulysses 2 x ring 2
      "--cp-comm-type a2a+p2p",
      "--hierarchical-context-parallel-sizes 2 2",
      "--recompute-granularity full",
      "--recompute-method uniform",
      "--recompute-num-layers 1",
      "--overlap-grad-reduce",
      "--bf16",
  };
  EXPECT_EQ(a->lines, expected);
  // Tensor and context parallelism without FSDP: Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1.
  EXPECT_TRUE(std::any_of(a->notes.begin(), a->notes.end(), [](const std::string& n) {
    return contains(n, "set CUDA_DEVICE_MAX_CONNECTIONS=1");
  }));
}

TEST(Megatron, NamesTheReleaseItIsWrittenFor) {
  auto a = megatron_args(interleaved_tp_plan());
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_FALSE(a->notes.empty());
  EXPECT_TRUE(contains(a->notes.front(), "Megatron-LM core_v0.19.0")) << a->notes.front();
}

TEST(Megatron, FullRecomputeOfFirstLayersPerStageIsBlockMethod) {
  Plan p = plan(gpt(8), cluster(1, 8), train(2, 4, 16), LayerStrategy{.tp = 2, .dp = 2});
  for (auto& st : p.stages) st.layers[0].recompute = Recompute::kFull;  // first layer of each stage
  auto a = megatron_args(p);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const auto& l = a->lines;
  EXPECT_NE(std::find(l.begin(), l.end(), "--recompute-method block"), l.end());
  EXPECT_NE(std::find(l.begin(), l.end(), "--recompute-num-layers 1"), l.end());
  // A recomputed layer in the middle of a stage is not "the first k": refused, naming the layers.
  p.stages[1].layers[0].recompute = Recompute::kNone;
  p.stages[1].layers[2].recompute = Recompute::kFull;
  auto r = megatron_args(p);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "layer 6: recompute full")) << r.error().message;
}

TEST(Megatron, LayerwisePlanIsRefusedNamingTheLayers) {
  Plan p = plan(gpt(8), cluster(1, 8), train(2, 4, 16), LayerStrategy{.tp = 4, .sp = true, .dp = 1, .zero = 1});
  for (auto& l : p.stages[1].layers) l = LayerStrategy{.tp = 2, .dp = 2, .zero = 1};
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto r = megatron_args(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
  const std::string& m = r.error().message;
  EXPECT_TRUE(contains(m, "layer-wise")) << m;
  EXPECT_TRUE(contains(m, "layers 0-3: tp4+sp z1")) << m;
  EXPECT_TRUE(contains(m, "layers 4-7: tp2 dp2 z1")) << m;
  EXPECT_TRUE(contains(m, "`weft plan --framework megatron`")) << m;
  // A model Megatron-LM's flags cannot describe is not a matter of the plan: no such hint.
  Plan t5 = plan(gpt(8), cluster(1, 8), train(1, 4, 16), LayerStrategy{.dp = 8});
  t5.model.groups.front().shape.kind = LayerKind::kCrossDecoder;
  auto e = megatron_args(t5);
  ASSERT_FALSE(e.ok());
  EXPECT_FALSE(contains(e.error().message, "weft plan")) << e.error().message;
}

// MoE layers with the token dispatcher and expert GEMMs the cost model prices (all-to-all
// dispatch, one grouped GEMM); grouped GEMM needs compute capability 8.0, which GPUs without bf16
// predate.
TEST(Megatron, MoeUsesAllToAllDispatchAndGroupedGemm) {
  auto m = load_model("mixtral-8x7b");
  ASSERT_TRUE(m.ok());
  Plan p = plan(*m, cluster(4, 8), train(4, 16, 256, Schedule::k1F1B, 1, 4096),
                LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 1, .ep = 4});
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto a = megatron_args(p);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const auto& l = a->lines;
  for (const char* flag : {"--num-experts 8", "--moe-router-topk 2", "--expert-model-parallel-size 4",
                           "--moe-token-dispatcher-type alltoall", "--moe-grouped-gemm", "--rotary-base 1000000"})
    EXPECT_NE(std::find(l.begin(), l.end(), flag), l.end()) << flag << "\n" << a->text();
  // Dense layers before the MoE ones keep ep = 1 beside them: still one strategy for Megatron-LM.
  ModelSpec mixed = *m;
  LayerGroup dense = mixed.groups.front();
  dense.name = "dense";
  dense.count = 2;
  dense.shape.moe = MoeSpec{};
  dense.shape.ffn = 14336;
  mixed.groups.front().count = 30;
  mixed.groups.insert(mixed.groups.begin(), dense);
  Plan q = plan(mixed, cluster(4, 8), train(4, 16, 256, Schedule::k1F1B, 1, 4096),
                LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 1, .ep = 4});
  q.stages[0].layers[0].ep = q.stages[0].layers[1].ep = 1;
  ASSERT_TRUE(validate(q).ok()) << validate(q).error().message;
  auto d = megatron_args(q);
  ASSERT_TRUE(d.ok()) << d.error().message;
  for (const char* flag : {"--moe-layer-freq '[0]*2+[1]*30'", "--expert-model-parallel-size 4"})
    EXPECT_NE(std::find(d->lines.begin(), d->lines.end(), flag), d->lines.end()) << flag << "\n" << d->text();

  // Attention on tp 2 with whole experts (etp 1) over ep 8, tp x dp: Megatron-LM's expert tensor
  // degree, written only where it is not tp's (its default); torchtitan's written whenever ep > 1
  // (its default is 1).
  Plan e = plan(*m, cluster(4, 8), train(4, 16, 256, Schedule::k1F1B, 1, 4096),
                LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 1, .ep = 8, .etp = 1});
  ASSERT_TRUE(validate(e).ok()) << validate(e).error().message;
  auto ea = megatron_args(e);
  ASSERT_TRUE(ea.ok()) << ea.error().message;
  for (const char* flag : {"--expert-model-parallel-size 8", "--expert-tensor-parallel-size 1"})
    EXPECT_NE(std::find(ea->lines.begin(), ea->lines.end(), flag), ea->lines.end()) << flag << "\n" << ea->text();
  EXPECT_FALSE(contains(a->text(), "--expert-tensor-parallel-size")) << a->text();
  Plan et = e;
  for (Stage& st : et.stages)
    for (LayerStrategy& s : st.layers) s.zero = 2;
  et.embedding.zero = 2;
  auto tt = torchtitan_config(et);
  ASSERT_TRUE(tt.ok()) << tt.error().message;
  EXPECT_TRUE(contains(tt->toml, "expert_parallel_degree = 8\nexpert_tensor_parallel_degree = 1")) << tt->toml;

  p.cluster.gpu.tflops_bf16 = 0;  // a V100-like GPU
  p.cluster.gpu.name = "V100-SXM2-32GB";
  p.train.dtype = DType::kFp16;
  auto v = megatron_args(p);
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_EQ(std::find(v->lines.begin(), v->lines.end(), "--moe-grouped-gemm"), v->lines.end());
  EXPECT_TRUE(std::any_of(v->notes.begin(), v->notes.end(), [](const std::string& n) {
    return contains(n, "V100-SXM2-32GB has no bf16") && contains(n, "--moe-grouped-gemm");
  }));
}

// Multi-head latent attention (DeepSeek-V3's dims on Mixtral's layers): Megatron-LM's MLA flags at
// core_v0.19 (--qk-head-dim the non-rotary part of a head, --qk-pos-emb-head-dim the rotary part),
// and no --kv-channels or query groups.
TEST(Megatron, LatentAttentionFlags) {
  auto m = load_model("mixtral-8x7b");
  ASSERT_TRUE(m.ok());
  for (LayerGroup& g : m->groups) {
    g.shape.kv_heads = g.shape.heads;
    g.shape.head_dim = 192;
    g.shape.mla = MlaSpec{.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_rope_dim = 64, .v_head_dim = 128};
  }
  Plan p = plan(*m, cluster(4, 8), train(4, 16, 256, Schedule::k1F1B, 1, 4096),
                LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 1, .ep = 8, .etp = 1});
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto a = megatron_args(p);
  ASSERT_TRUE(a.ok()) << a.error().message;
  for (const char* flag : {"--multi-latent-attention", "--q-lora-rank 1536", "--kv-lora-rank 512",
                           "--qk-head-dim 128", "--qk-pos-emb-head-dim 64", "--v-head-dim 128"})
    EXPECT_NE(std::find(a->lines.begin(), a->lines.end(), flag), a->lines.end()) << flag << "\n" << a->text();
  EXPECT_FALSE(contains(a->text(), "--kv-channels")) << a->text();
  EXPECT_FALSE(contains(a->text(), "--group-query-attention")) << a->text();
  // Without a query latent (DeepSeek-V2-Lite) no --q-lora-rank.
  for (LayerGroup& g : p.model.groups) g.shape.mla.q_lora_rank = 0;
  auto b = megatron_args(p);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_FALSE(contains(b->text(), "--q-lora-rank")) << b->text();
}

// Megatron-LM's precision-aware optimizer: bf16 moments (NVIDIA's MoE recipes) and bf16 main
// gradients as its flags; torchtitan and DeepSpeed have no counterpart and refuse the plan.
TEST(Megatron, PrecisionAwareOptimizerFlags) {
  Plan p = interleaved_tp_plan();
  p.train.optimizer.exp_avg = DType::kBf16;
  p.train.optimizer.exp_avg_sq = DType::kBf16;
  auto a = megatron_args(p);
  ASSERT_TRUE(a.ok()) << a.error().message;
  for (const char* flag : {"--use-precision-aware-optimizer", "--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16"})
    EXPECT_NE(std::find(a->lines.begin(), a->lines.end(), flag), a->lines.end()) << flag << "\n" << a->text();
  EXPECT_FALSE(contains(a->text(), "--main-grads-dtype")) << a->text();
  p.train.optimizer.main_grads = DType::kBf16;
  auto b = megatron_args(p);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_TRUE(contains(b->text(), "--main-grads-dtype bf16")) << b->text();
  auto t = torchtitan_config(p);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(contains(t.error().message, "train.optimizer")) << t.error().message;
  auto d = deepspeed_config(p);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(contains(d.error().message, "train.optimizer")) << d.error().message;
}

// GPT-OSS: banded layers 1, 3, 5, ... (1-based) of 128 tokens with themselves, learned sinks,
// biases kept. Megatron-LM's flags at core_v0.19: --window-size (left, right) keeps keys
// j >= i - left; --window-attn-skip-freq N leaves layer n full when n % N == 0.
TEST(Megatron, SlidingWindowLayersAndAttentionSinks) {
  auto m = load_model("gpt-oss-20b");
  ASSERT_TRUE(m.ok());
  Plan p = plan(*m, cluster(1, 8), train(1, 8, 64, Schedule::k1F1B, 1, 4096), LayerStrategy{.dp = 8, .ep = 8});
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto a = megatron_args(p);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const auto& l = a->lines;
  for (const char* flag : {"--window-size 127,0", "--window-attn-skip-freq 2", "--softmax-type learnable",
                           "--num-experts 32", "--moe-router-topk 4"})
    EXPECT_NE(std::find(l.begin(), l.end(), flag), l.end()) << flag << "\n" << a->text();
  EXPECT_EQ(std::find(l.begin(), l.end(), "--disable-bias-linear"), l.end()) << a->text();
  // A pattern no N describes is written layer by layer; two windows are refused, naming both.
  ModelSpec odd = *m;
  odd.groups[1].shape.window = 128;  // layers 0 and 1 banded, then alternating
  Plan q = plan(odd, cluster(1, 8), train(1, 8, 64, Schedule::k1F1B, 1, 4096), LayerStrategy{.dp = 8, .ep = 8});
  auto b = megatron_args(q);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_TRUE(std::any_of(b->lines.begin(), b->lines.end(),
                          [](const std::string& x) { return x.rfind("--window-attn-skip-freq '[1,1,1,0,1,0", 0) == 0; }))
      << b->text();
  odd.groups[1].shape.window = 64;
  Plan r = plan(odd, cluster(1, 8), train(1, 8, 64, Schedule::k1F1B, 1, 4096), LayerStrategy{.dp = 8, .ep = 8});
  auto c = megatron_args(r);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(contains(c.error().message, "128") && contains(c.error().message, "64")) << c.error().message;
}

// Qwen2's biases on the query, key and value projections alone (--add-qkv-bias beside
// --disable-bias-linear), Qwen3's per-head query / key norms (--qk-layernorm) and Qwen2-MoE's gate on
// the shared experts (--moe-shared-expert-gate beside their width), each only where the model has it.
TEST(Megatron, QkvBiasesQueryKeyNormsAndSharedExpertGate) {
  auto m = load_model("qwen2-7b");
  ASSERT_TRUE(m.ok());
  auto args = [](const ModelSpec& model, int ep) {
    Plan p = plan(model, cluster(1, 8), train(1, 8, 64, Schedule::k1F1B, 1, 4096), LayerStrategy{.dp = 8, .ep = ep});
    EXPECT_TRUE(validate(p).ok()) << validate(p).error().message;
    auto a = megatron_args(p);
    EXPECT_TRUE(a.ok()) << a.error().message;
    return a.ok() ? a->lines : std::vector<std::string>{};
  };
  auto has = [](const std::vector<std::string>& l, const std::string& f) { return std::find(l.begin(), l.end(), f) != l.end(); };
  std::vector<std::string> l = args(*m, 1);
  EXPECT_TRUE(has(l, "--add-qkv-bias"));
  EXPECT_TRUE(has(l, "--disable-bias-linear"));
  EXPECT_FALSE(has(l, "--qk-layernorm"));
  ModelSpec q3 = *m;
  q3.groups[0].shape.qkv_bias = false;
  q3.groups[0].shape.qk_norm = true;
  l = args(q3, 1);
  EXPECT_TRUE(has(l, "--qk-layernorm"));
  EXPECT_FALSE(has(l, "--add-qkv-bias"));
  // OLMoE's norms over all heads have no Megatron-LM flag (--qk-layernorm norms each head).
  q3.groups[0].shape.qk_norm_full = true;
  auto full = megatron_args(plan(q3, cluster(1, 8), train(1, 8, 64, Schedule::k1F1B, 1, 4096), LayerStrategy{.dp = 8}));
  ASSERT_FALSE(full.ok());
  EXPECT_TRUE(contains(full.error().message, "qk_norm \"full\"")) << full.error().message;
  auto mix = load_model("mixtral-8x7b");
  ASSERT_TRUE(mix.ok());
  EXPECT_FALSE(has(args(*mix, 8), "--moe-shared-expert-gate"));
  mix->groups[0].shape.moe.shared_experts = 1;
  mix->groups[0].shape.moe.shared_gate = true;
  l = args(*mix, 8);
  EXPECT_TRUE(has(l, "--moe-shared-expert-intermediate-size 14336"));
  EXPECT_TRUE(has(l, "--moe-shared-expert-gate"));
}

// The plan's MoE dispatch: Megatron-LM's all-to-all dispatcher, or its flex dispatcher with the
// DeepEP or HybridEP backend; the expert all-to-all overlap as --overlap-moe-expert-parallel-comm.
// torchtitan's and DeepSpeed's exports refuse both, named.
TEST(Megatron, MoeDispatcherAndAllToAllOverlap) {
  auto mix = load_model("mixtral-8x7b");
  ASSERT_TRUE(mix.ok());
  Plan p = plan(*mix, cluster(1, 8), train(1, 8, 64, Schedule::k1F1B, 1, 4096), LayerStrategy{.dp = 8, .ep = 8});
  auto has = [](const std::vector<std::string>& l, const std::string& f) { return std::find(l.begin(), l.end(), f) != l.end(); };
  auto a = megatron_args(p);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(has(a->lines, "--moe-token-dispatcher-type alltoall"));
  EXPECT_FALSE(has(a->lines, "--overlap-moe-expert-parallel-comm"));
  p.train.moe_dispatcher = MoeDispatcher::kHybridEp;
  p.train.moe_a2a_overlap = true;
  a = megatron_args(p);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(has(a->lines, "--moe-token-dispatcher-type flex"));
  EXPECT_TRUE(has(a->lines, "--moe-flex-dispatcher-backend hybridep"));
  EXPECT_TRUE(has(a->lines, "--overlap-moe-expert-parallel-comm"));
  EXPECT_FALSE(has(a->lines, "--moe-token-dispatcher-type alltoall"));
  auto ds = deepspeed_config(p);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(contains(ds.error().message, "train.moe_a2a_overlap")) << ds.error().message;
}

// The router as Megatron-LM core_v0.19 takes it: Mixtral's (softmax after the top-k) needs no
// score flags; DeepSeek-V3's sigmoid router, scale, node groups and balancing bias each have one;
// what Megatron cannot run is refused, naming the field.
TEST(Megatron, RouterFlags) {
  auto mix = load_model("mixtral-8x7b");
  ASSERT_TRUE(mix.ok());
  auto has = [](const std::vector<std::string>& l, const std::string& f) { return std::find(l.begin(), l.end(), f) != l.end(); };
  auto starts = [](const std::vector<std::string>& l, const std::string& f) {
    return std::any_of(l.begin(), l.end(), [&](const std::string& x) { return x.rfind(f, 0) == 0; });
  };
  auto args = [&](const ModelSpec& m) {
    return megatron_args(plan(m, cluster(1, 8), train(1, 8, 64, Schedule::k1F1B, 1, 4096), LayerStrategy{.dp = 8, .ep = 8}));
  };
  auto a = args(*mix);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_FALSE(starts(a->lines, "--moe-router-score-function"));
  EXPECT_FALSE(starts(a->lines, "--moe-router-pre-softmax"));
  EXPECT_FALSE(starts(a->lines, "--moe-router-num-groups"));
  EXPECT_TRUE(has(a->lines, "--moe-aux-loss-coeff 0.02"));  // Mixtral's router_aux_loss_coef
  EXPECT_TRUE(has(a->lines, "--moe-router-dtype fp32"));
  ModelSpec m = *mix;
  for (LayerGroup& g : m.groups) {
    MoeSpec& r = g.shape.moe;
    r.score = RouterScore::kSigmoid;
    r.routed_scale = 2.5;
    r.groups = 4;
    r.group_top_k = 2;
    r.group_score_top = 1;
    r.expert_bias = true;
    r.bias_rate = 0.001;
  }
  a = args(m);
  ASSERT_TRUE(a.ok()) << a.error().message;
  for (const char* f : {"--moe-router-score-function sigmoid", "--moe-router-topk-scaling-factor 2.5",
                        "--moe-router-num-groups 4", "--moe-router-group-topk 2", "--moe-router-enable-expert-bias",
                        "--moe-router-bias-update-rate 0.001"})
    EXPECT_TRUE(has(a->lines, f)) << f;
  // A group scored otherwise than by its top_k / group_top_k best: Megatron has no flag for it.
  for (LayerGroup& g : m.groups) g.shape.moe.group_score_top = 2;
  a = args(m);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(contains(a.error().message, "group_score_top")) << a.error().message;
  // A sigmoid router's weights not renormalised: Megatron always renormalises them.
  for (LayerGroup& g : m.groups) g.shape.moe.group_score_top = 1, g.shape.moe.norm_topk = false;
  a = args(m);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(contains(a.error().message, "norm_topk")) << a.error().message;
  // A softmax router without renormalisation (Qwen2-MoE, OLMoE): softmax before the top-k.
  ModelSpec q = *mix;
  for (LayerGroup& g : q.groups) g.shape.moe.norm_topk = false;
  a = args(q);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(has(a->lines, "--moe-router-pre-softmax"));
}

// --rotary-base is the model's rope_theta: Llama 3's 500000 from the preset and from its
// Hugging Face config (rope_theta, or rope_parameters.rope_theta as newer configs write it).
TEST(Megatron, RotaryBaseFromTheModel) {
  auto rotary = [](const ModelSpec& m) {
    Plan p = plan(m, cluster(1, 8), train(1, 8, 64, Schedule::k1F1B, 1, 8192),
                  LayerStrategy{.tp = 8, .sp = true, .dp = 1, .recompute = Recompute::kFull});
    auto a = megatron_args(p);
    EXPECT_TRUE(a.ok()) << a.error().message;
    for (const auto& l : a->lines)
      if (l.rfind("--rotary-base ", 0) == 0) return l;
    return std::string("none");
  };
  EXPECT_EQ(rotary(load_model("llama-3-8b").value()), "--rotary-base 500000");
  EXPECT_EQ(rotary(load_model("llama-3-70b").value()), "--rotary-base 500000");
  EXPECT_EQ(rotary(load_model("llama-2-7b").value()), "--rotary-base 10000");
  auto hf = load_model(std::string(WEFT_DATA_DIR) + "/../tests/spec/data/llama-3-70b.config.json");
  ASSERT_TRUE(hf.ok()) << hf.error().message;
  EXPECT_EQ(rotary(*hf), "--rotary-base 500000");
  Json cfg = Json::parse(R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
      "num_hidden_layers": 8, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
      "max_position_embeddings": 8192, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})");
  auto nested = model_from_hf_config(cfg, "config.json");
  ASSERT_TRUE(nested.ok()) << nested.error().message;
  EXPECT_EQ(nested->rope_theta, 500000.0);
  EXPECT_EQ(rotary(*nested), "--rotary-base 500000");
  ModelSpec odd = *nested;
  odd.rope_theta = 10000.5;
  Plan p = plan(odd, cluster(1, 8), train(1, 8, 64), LayerStrategy{.tp = 8, .sp = true, .dp = 1});
  auto e = megatron_args(p);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(contains(e.error().message, "model.rope_theta=10000.5")) << e.error().message;
}

// ZeRO-2/3 are Megatron-FSDP (--use-megatron-fsdp with --data-parallel-sharding-strategy
// optim_grads / optim_grads_params), which validate_args only starts with --ckpt-format
// fsdp_dtensor and without CUDA_DEVICE_MAX_CONNECTIONS=1; gradient-accumulation fusion is off.
// Selective recompute mixed per layer is refused.
TEST(Megatron, FsdpForZero23AndRefusesMixedSelectiveRecompute) {
  for (int zero : {2, 3}) {
    for (int tp : {1, 2}) {
      Plan z = plan(gpt(8), cluster(1, 8), train(1, 4, 32),
                    LayerStrategy{.tp = tp, .sp = tp > 1, .dp = 8 / tp, .zero = zero});
      auto r = megatron_args(z);
      ASSERT_TRUE(r.ok()) << r.error().message;
      const std::string t = r->text();
      EXPECT_TRUE(contains(t, "--use-distributed-optimizer\n--use-megatron-fsdp\n--data-parallel-sharding-strategy " +
                                  std::string(zero == 3 ? "optim_grads_params" : "optim_grads") +
                                  "\n--ckpt-format fsdp_dtensor\n--no-gradient-accumulation-fusion\n"))
          << t;
      for (const auto& n : r->notes) EXPECT_FALSE(contains(n, "CUDA_DEVICE_MAX_CONNECTIONS=1 in")) << n;
      EXPECT_TRUE(std::any_of(r->notes.begin(), r->notes.end(), [](const std::string& n) {
        return contains(n, "leave CUDA_DEVICE_MAX_CONNECTIONS unset");
      }));
    }
  }
  Plan z1 = plan(gpt(8), cluster(1, 8), train(1, 4, 32), LayerStrategy{.dp = 8, .zero = 1});
  EXPECT_FALSE(contains(megatron_args(z1)->text(), "--ckpt-format"));
  Plan mixed = plan(gpt(8), cluster(1, 8), train(1, 4, 32), LayerStrategy{.dp = 8, .zero = 3});
  mixed.embedding.zero = 1;
  auto r = megatron_args(mixed);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "embedding.zero=1 but the layers use zero=3")) << r.error().message;
  // A plan searched for Megatron-LM is one it takes: the refusal says so.
  EXPECT_TRUE(contains(r.error().message, "`weft plan --framework megatron` gives a plan this export takes"))
      << r.error().message;

  Plan sel = plan(gpt(8), cluster(1, 8), train(1, 4, 32), LayerStrategy{.dp = 8});
  sel.stages[0].layers[3].recompute = Recompute::kSelective;
  auto r2 = megatron_args(sel);
  ASSERT_FALSE(r2.ok());
  EXPECT_TRUE(contains(r2.error().message, "layer 3: recompute selective")) << r2.error().message;
}

TEST(Megatron, UnevenStages) {
  // 8 layers over 3 stages as 2, 3, 3: only the first differs.
  Plan p = plan(gpt(8), cluster(3, 2), train(3, 6, 12), LayerStrategy{.tp = 2});
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto a = megatron_args(p);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const auto& l = a->lines;
  EXPECT_NE(std::find(l.begin(), l.end(), "--decoder-first-pipeline-num-layers 2"), l.end());
  EXPECT_EQ(std::find_if(l.begin(), l.end(), [](const std::string& x) { return contains(x, "last-pipeline"); }),
            l.end());
  // 1, 3, 2, 2 over 4 stages: the middle stages differ, Megatron cannot split that way.
  Plan q = plan(gpt(8), cluster(4, 2), train(4, 8, 16), LayerStrategy{.tp = 2}, {1, 3, 2, 2});
  ASSERT_TRUE(validate(q).ok()) << validate(q).error().message;
  auto r = megatron_args(q);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "hold 1, 3, 2, 2 layers")) << r.error().message;
}

TEST(DeepSpeed, DataParallelZeroPlan) {
  // 8 GPUs, dp 8, ZeRO-2, 4 micro-batches of 32 samples: 4 per GPU, accumulation 4.
  Plan p = plan(gpt(8), cluster(1, 8), train(1, 4, 128), LayerStrategy{.dp = 8, .zero = 2});
  auto c = deepspeed_config(p);
  ASSERT_TRUE(c.ok()) << c.error().message;
  const Json& j = c->config;
  EXPECT_EQ(j["train_batch_size"], 128);
  EXPECT_EQ(j["train_micro_batch_size_per_gpu"], 4);
  EXPECT_EQ(j["gradient_accumulation_steps"], 4);
  EXPECT_EQ(j["zero_optimization"]["stage"], 2);
  EXPECT_EQ(j["bf16"]["enabled"], true);
  EXPECT_FALSE(j.contains("fp16"));
  EXPECT_FALSE(j.contains("activation_checkpointing"));
  // DeepSpeed's own invariant: train_batch_size = micro * accumulation * data-parallel ranks.
  EXPECT_EQ(4 * 4 * 8, 128);

  Plan f = plan(gpt(8), cluster(1, 8), train(1, 2, 16), LayerStrategy{.dp = 8, .zero = 3, .recompute = Recompute::kFull});
  f.train.dtype = DType::kFp16;
  auto c3 = deepspeed_config(f);
  ASSERT_TRUE(c3.ok()) << c3.error().message;
  EXPECT_EQ(c3->config["zero_optimization"]["stage"], 3);
  EXPECT_EQ(c3->config["fp16"]["enabled"], true);
  EXPECT_TRUE(c3->config.contains("activation_checkpointing"));
}

TEST(DeepSpeed, TensorAndPipelineNeedMegatronDeepSpeed) {
  Plan p = plan(gpt(8), cluster(2, 8), train(2, 8, 64), LayerStrategy{.tp = 4, .dp = 2, .zero = 1});
  auto r = deepspeed_config(p);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "tp=4, pp=2")) << r.error().message;
  EXPECT_TRUE(contains(r.error().message, "Megatron-DeepSpeed")) << r.error().message;
  auto m = deepspeed_config(p, DeepSpeedTarget::kMegatronDeepSpeed);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->config["zero_optimization"]["stage"], 1);
  EXPECT_EQ(m->config["train_micro_batch_size_per_gpu"], 4);
  EXPECT_EQ(m->config["gradient_accumulation_steps"], 8);
  // DeepSpeed's pipeline engine takes ZeRO-0/1 only.
  Plan z2 = plan(gpt(8), cluster(2, 8), train(2, 8, 64), LayerStrategy{.tp = 4, .dp = 2, .zero = 2});
  auto r2 = deepspeed_config(z2, DeepSpeedTarget::kMegatronDeepSpeed);
  ASSERT_FALSE(r2.ok());
  EXPECT_TRUE(contains(r2.error().message, "zero=2 with pp=2")) << r2.error().message;
  EXPECT_TRUE(contains(r2.error().message, "`weft plan --framework megatron-deepspeed`")) << r2.error().message;
  // The note names the releases and the flags that hand Megatron-DeepSpeed the config.
  EXPECT_TRUE(contains(m->notes.front(), "DeepSpeed v0.19.5 and Megatron-DeepSpeed")) << m->notes.front();
  EXPECT_TRUE(std::any_of(m->notes.begin(), m->notes.end(), [](const std::string& n) {
    return contains(n, "--deepspeed --deepspeed_config <this file> --tensor-model-parallel-size 4 "
                       "--pipeline-model-parallel-size 2");
  }));
}

TEST(DeepSpeed, LayerwisePlanIsRefused) {
  Plan p = plan(gpt(8), cluster(1, 8), train(1, 4, 32), LayerStrategy{.dp = 8, .zero = 1});
  p.stages[0].layers[5].zero = 3;
  auto r = deepspeed_config(p);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "layers 0-4: dp8 z1; layer 5: dp8 z3; layers 6-7: dp8 z1"))
      << r.error().message;
}

TEST(Export, InvalidPlanIsAnErrorNotACrash) {
  Plan p = interleaved_tp_plan();
  p.stages[0].layers[0].tp = 3;
  auto r = megatron_args(p);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "stages[0].layers[0]")) << r.error().message;
  EXPECT_FALSE(deepspeed_config(p).ok());
}

// torchtitan: the tables written out here from torchtitan's job-config keys. 16 GPUs, pp 2 x
// (tp2+sp, dp 4, FSDP with resharding), 8 micro-batches of 64 samples: each data-parallel rank takes
// 16 samples per step in micro-batches of 2.
TEST(Torchtitan, FsdpPipelinePlanGivesExactTables) {
  Plan p = plan(llama(8), cluster(2, 8), train(2, 8, 64, Schedule::k1F1B, 1, 4096),
                LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 3, .recompute = Recompute::kSelective});
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto c = torchtitan_config(p);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->toml,
            "# torchtitan v0.2.2 job config (TOML); torchtitan's main branch no longer reads TOML job files\n"
            "[training]\n"
            "local_batch_size = 16\n"
            "global_batch_size = 64\n"
            "seq_len = 4096\n"
            "mixed_precision_param = \"bfloat16\"\n"
            "\n[parallelism]\n"
            "data_parallel_replicate_degree = 1\n"
            "data_parallel_shard_degree = 4\n"
            "fsdp_reshard_after_forward = \"always\"\n"
            "tensor_parallel_degree = 2\n"
            "context_parallel_degree = 1\n"
            "pipeline_parallel_degree = 2\n"
            "pipeline_parallel_schedule = \"1F1B\"\n"
            "pipeline_parallel_microbatch_size = 2\n"
            "pipeline_parallel_layers_per_stage = 4\n"
            "pipeline_parallel_first_stage_less_layers = 0\n"
            "pipeline_parallel_last_stage_less_layers = 0\n"
            "\n[activation_checkpoint]\n"
            "mode = \"selective\"\n"
            "selective_ac_option = \"op\"\n");
}

// train.rounds: the 8 micro-batches as 2 pipeline schedules of 4 each, torchtitan's gradient
// accumulation (global 64 / (local 8 x dp 4) = 2 steps of its schedule); Megatron-LM and DeepSpeed
// run one schedule per step and refuse it.
TEST(Torchtitan, PipelineRoundsAreGradientAccumulation) {
  Plan p = plan(llama(8), cluster(2, 8), train(2, 8, 64, Schedule::k1F1B, 1, 4096),
                LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 3, .recompute = Recompute::kSelective});
  p.train.rounds = 2;
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto c = torchtitan_config(p);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(contains(c->toml, "local_batch_size = 8\nglobal_batch_size = 64\n")) << c->toml;
  EXPECT_TRUE(contains(c->toml, "pipeline_parallel_microbatch_size = 2\n")) << c->toml;
  auto m = megatron_args(p);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.error().message, "train.rounds=2: Megatron-LM runs all 8 micro-batches of a step in one "
                                          "pipeline schedule"))
      << m.error().message;
  EXPECT_FALSE(deepspeed_config(p).ok());
}

// Without a pipeline the micro-batches are gradient accumulation: local_batch_size is one
// micro-batch of one rank. ZeRO 2 is FSDP2 without resharding after forward.
TEST(Torchtitan, AccumulationAndFsdpModes) {
  Plan z2 = plan(llama(8), cluster(1, 8), train(1, 4, 64), LayerStrategy{.dp = 8, .zero = 2});
  ASSERT_TRUE(validate(z2).ok()) << validate(z2).error().message;
  auto a = torchtitan_config(z2);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(contains(a->toml, "local_batch_size = 2\nglobal_batch_size = 64\n"));  // 64 / (4 * 8)
  EXPECT_TRUE(contains(a->toml, "data_parallel_replicate_degree = 1\ndata_parallel_shard_degree = 8\n"
                                "fsdp_reshard_after_forward = \"never\"\n"));
  EXPECT_TRUE(contains(a->toml, "mode = \"none\"\n"));
  EXPECT_FALSE(contains(a->toml, "pipeline_parallel_schedule"));
}

TEST(Torchtitan, RefusesWhatItCannotRun) {
  Plan z1 = plan(llama(8), cluster(1, 8), train(1, 4, 64), LayerStrategy{.dp = 8, .zero = 1});
  auto a = torchtitan_config(z1);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(contains(a.error().message, "torchtitan: zero=1: torchtitan's data parallelism is FSDP2")) << a.error().message;
  Plan no_sp = plan(llama(8), cluster(1, 8), train(1, 4, 64), LayerStrategy{.tp = 2, .dp = 4, .zero = 3});
  auto d = torchtitan_config(no_sp);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(contains(d.error().message, "tp=2 without sequence parallelism")) << d.error().message;
  Plan uly = plan(llama(8), cluster(1, 8), train(1, 4, 64), LayerStrategy{.ulysses = 2, .dp = 4, .zero = 3});
  auto b = torchtitan_config(uly);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(contains(b.error().message, "ulysses=2: torchtitan has no Ulysses")) << b.error().message;
  Plan mixed = plan(llama(8), cluster(1, 8), train(1, 4, 64), LayerStrategy{.dp = 8, .zero = 3});
  mixed.stages[0].layers[5].recompute = Recompute::kFull;
  auto c = torchtitan_config(mixed);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(contains(c.error().message, "this plan is layer-wise: layers 0-4: dp8 z3; layer 5:")) << c.error().message;
  EXPECT_TRUE(contains(c.error().message, "`weft plan --framework torchtitan` gives a plan this export takes"))
      << c.error().message;
  // torchtitan v0.2.2's mixed_precision_param is bfloat16 or float32.
  Plan fp16 = plan(llama(8), cluster(1, 8), train(1, 4, 64), LayerStrategy{.dp = 8, .zero = 3});
  fp16.train.dtype = DType::kFp16;
  auto h = torchtitan_config(fp16);
  ASSERT_FALSE(h.ok());
  EXPECT_TRUE(contains(h.error().message, "train.dtype=fp16")) << h.error().message;
}

TEST(Torchtitan, NamesTheTomlReleaseAndNotesFp8) {
  Plan p = plan(llama(8), cluster(1, 8), train(1, 4, 64), LayerStrategy{.dp = 8, .zero = 3});
  p.train.dtype = DType::kFp8;
  p.cluster.gpu.tflops_fp8 = 989;  // an H100-like GPU, which has fp8
  auto c = torchtitan_config(p);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(contains(c->notes.front(), "torchtitan v0.2.2, the last release that reads TOML")) << c->notes.front();
  EXPECT_TRUE(contains(c->toml, "mixed_precision_param = \"bfloat16\"\n"));
  EXPECT_TRUE(std::any_of(c->notes.begin(), c->notes.end(), [](const std::string& n) {
    return contains(n, "\"quantize.linear.float8\"");
  }));
}

// A plan searched for a framework exports to it (docs/search.md, "Frameworks"): Llama-2-7B on 16
// A100, two-stage pipelines, the ten best plans of each framework's search.
TEST(Export, PlansSearchedForAFrameworkExportToIt) {
  auto m = load_model("llama-2-7b");
  auto c = load_cluster("a100-80gb");
  ASSERT_TRUE(m.ok() && c.ok());
  ClusterSpec two = *c;
  two.nodes = 2;
  for (const char* fw : {"megatron", "megatron-deepspeed", "torchtitan"}) {
    SearchOptions opt;
    opt.seq = 4096;
    opt.global_batch = 64;
    opt.top_k = 10;
    opt.pp_degrees = {2};
    ASSERT_TRUE(restrict_to_framework(opt, fw).ok());
    auto traits = framework_options(fw);
    ASSERT_TRUE(traits.ok());
    auto r = search(*m, two, AnalyticCostModel(*traits), opt);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_FALSE(r->top.empty()) << fw;
    for (const Plan& p : r->top) {
      Status ok;
      if (std::string(fw) == "megatron") {
        auto a = megatron_args(p);
        if (!a.ok()) ok = a.error();
      } else if (std::string(fw) == "megatron-deepspeed") {
        auto a = deepspeed_config(p, DeepSpeedTarget::kMegatronDeepSpeed);
        if (!a.ok()) ok = a.error();
      } else {
        auto a = torchtitan_config(p);
        if (!a.ok()) ok = a.error();
      }
      EXPECT_TRUE(ok.ok()) << fw << ": " << ok.error().message;
    }
  }
}

// A zb-h1 plan with a pipeline: no export writes it (none of the frameworks runs ZB-H1); each
// refusal names the field and the framework. Without a pipeline zb-h1 is plain accumulation.
TEST(Export, ZbH1PlansAreRefusedNamingTheSchedule) {
  const Plan meg = plan(gpt(8), cluster(2, 8), train(2, 8, 64, Schedule::kZbH1), LayerStrategy{.tp = 4, .dp = 2, .zero = 1});
  ASSERT_TRUE(validate(meg).ok()) << validate(meg).error().message;
  auto a = megatron_args(meg);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(contains(a.error().message, "megatron: train.schedule=zb-h1 (pp=2): Megatron-LM mainline has no "
                                          "zero-bubble schedule"))
      << a.error().message;
  auto d = deepspeed_config(meg, DeepSpeedTarget::kMegatronDeepSpeed);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(contains(d.error().message, "train.schedule=zb-h1 (pp=2): Megatron-DeepSpeed's pipeline engine runs "
                                          "1F1B only"))
      << d.error().message;
  const Plan titan = plan(llama(8), cluster(2, 8), train(2, 8, 64, Schedule::kZbH1, 1, 4096),
                          LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 3});
  ASSERT_TRUE(validate(titan).ok()) << validate(titan).error().message;
  auto t = torchtitan_config(titan);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(contains(t.error().message, "torchtitan: train.schedule=zb-h1 (pp=2): torchtitan runs its zero-bubble "
                                          "schedule (InterleavedZeroBubble) with at least 2 stages per rank"))
      << t.error().message;
  const Plan flat = plan(llama(8), cluster(1, 8), train(1, 4, 64, Schedule::kZbH1), LayerStrategy{.dp = 8, .zero = 3});
  EXPECT_TRUE(torchtitan_config(flat).ok());
}

// A zb-v plan (Llama, 8 layers, pp 2: 4 stages of 2 layers in a V). torchtitan writes it as
// ZBVZeroBubble with 2 layers per stage (4 stages over 2 ranks: its "v" style's two per rank) and
// notes where the loss is logged; torchtitan-compile refuses it (ScheduleZBVZeroBubble refuses
// compiled stages); Megatron-LM and Megatron-DeepSpeed refuse it naming the field.
TEST(Export, ZbVPlansGoToTorchtitanOnly) {
  const Plan titan = plan(llama(8), cluster(2, 8), train(2, 8, 64, Schedule::kZbV, 2, 4096),
                          LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 3});
  ASSERT_TRUE(validate(titan).ok()) << validate(titan).error().message;
  auto t = torchtitan_config(titan);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_TRUE(contains(t->toml, "pipeline_parallel_degree = 2\n")) << t->toml;
  EXPECT_TRUE(contains(t->toml, "pipeline_parallel_schedule = \"ZBVZeroBubble\"\n")) << t->toml;
  EXPECT_TRUE(contains(t->toml, "pipeline_parallel_layers_per_stage = 2\n")) << t->toml;
  bool noted = false;
  for (const auto& n : t->notes) noted = noted || contains(n, "ZBVZeroBubble puts the first and the last stage on "
                                                               "pipeline rank 0");
  EXPECT_TRUE(noted);
  auto c = framework_export(titan, Framework::kTorchtitanCompile);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(contains(c.error().message, "torchtitan: train.schedule=zb-v (pp=2): torch.distributed.pipelining's "
                                          "ScheduleZBVZeroBubble refuses torch.compile'd stages"))
      << c.error().message;
  const Plan meg = plan(gpt(8), cluster(2, 8), train(2, 8, 64, Schedule::kZbV, 2), LayerStrategy{.tp = 4, .dp = 2, .zero = 1});
  ASSERT_TRUE(validate(meg).ok()) << validate(meg).error().message;
  auto a = megatron_args(meg);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(contains(a.error().message, "megatron: train.schedule=zb-v (pp=2): Megatron-LM mainline has no "
                                          "zero-bubble schedule"))
      << a.error().message;
  auto d = deepspeed_config(meg, DeepSpeedTarget::kMegatronDeepSpeed);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(contains(d.error().message, "train.schedule=zb-v (pp=2): Megatron-DeepSpeed's pipeline engine runs "
                                          "1F1B only"))
      << d.error().message;
}

}  // namespace
}  // namespace weft
