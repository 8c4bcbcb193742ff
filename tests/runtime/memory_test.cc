// What each rank holds, measured by the runtime (`weft train` summary, "ranks"), against the
// plan's memory model (weft::estimate with the analytic cost model): parameters, gradients and
// optimizer states per rank under tensor parallelism, ZeRO-1/2/3 and pipeline parallelism; and
// ZeRO-3's gathered parameters, which live only while a layer computes (FSDP's schedule), so that
// its peak parameter memory stays below ZeRO-0's whatever the number of micro-batches in flight.
#include <algorithm>
#include <cstdio>

#include "rt_util.h"
#include "weft/cost/analytic.h"
#include "weft/cost/estimate.h"
#include "weft/cost/framework.h"

namespace weft::rttest {
namespace {

struct RankBytes {
  int64_t params = 0, grads = 0, optimizer = 0, gathered_peak = 0;
};

std::vector<RankBytes> held(const Plan& p, const std::string& name, int steps = 2) {
  const std::string dir = temp_dir(name);
  const RunResult r = train_plan(p, dir, name, steps);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.status, 0) << r.output;
  std::vector<RankBytes> out;
  if (!r.summary.is_object() || !r.summary.contains("ranks")) {
    ADD_FAILURE() << "no per-rank memory in the summary\n" << r.output;
    return out;
  }
  for (const Json& j : r.summary["ranks"])
    out.push_back({j.at("param_bytes").get<int64_t>(), j.at("grad_bytes").get<int64_t>(),
                   j.at("optimizer_bytes").get<int64_t>(), j.at("peak_gathered_param_bytes").get<int64_t>()});
  EXPECT_EQ(static_cast<int>(out.size()), p.world_size());
  return out;
}

// Parameters of one decoder layer of the model (full, unsharded).
int64_t layer_params(const ModelSpec& m) {
  const LayerShape& s = m.layer(0);
  const int64_t h = s.hidden, d = s.head_dim, q = s.heads * d, kv = s.kv_heads * d;
  const int64_t ffn_mats = s.ffn_kind == FfnKind::kSwiglu ? 3 : 2;
  int64_t n = h * q + 2 * h * kv + q * h + ffn_mats * h * s.ffn + 2 * h;  // matrices and two norms
  if (s.bias) n += q + 2 * kv + h + (ffn_mats - 1) * s.ffn + h + 2 * h;  // biases and norm biases
  return n;
}

// The runtime's bytes against the memory model's, rank by rank: equal up to the runtime's padding
// of each unit to a multiple of its sharding group (a few elements per unit) and the norms'
// weights, which tensor parallelism replicates on every member while the model divides every
// parameter by tp (2 * hidden per layer).
void expect_matches_model(const Plan& p, const std::vector<RankBytes>& got, const std::string& what) {
  const AnalyticCostModel cm;
  const Estimate e = estimate(p, cm);
  const int S = p.devices_per_stage();
  const int64_t units = p.model.num_layers() + 4;
  const int64_t slack_elems = units * 8 + (p.embedding.tp > 1 ? p.model.num_layers() * 2 * p.model.hidden + 64 : 0);
  for (int r = 0; r < static_cast<int>(got.size()); ++r) {
    const MemoryBreakdown& m = e.stages[r / S].memory;
    std::printf("%s rank %d: params %lld (model %.0f)  grads %lld (model %.0f)  optimizer %lld (model %.0f)\n",
                what.c_str(), r, static_cast<long long>(got[r].params), m.weights.value(),
                static_cast<long long>(got[r].grads), m.grads.value(), static_cast<long long>(got[r].optimizer),
                m.optimizer.value());
    // fp32 training: 4 bytes of weights, 4 of gradients and 8 of AdamW moments per parameter.
    EXPECT_NEAR(static_cast<double>(got[r].params), m.weights.value(), 4.0 * slack_elems) << what << " rank " << r;
    EXPECT_NEAR(static_cast<double>(got[r].grads), m.grads.value(), 4.0 * slack_elems) << what << " rank " << r;
    EXPECT_NEAR(static_cast<double>(got[r].optimizer), m.optimizer.value(), 8.0 * slack_elems) << what << " rank " << r;
  }
}

TEST(RuntimeMemory, TensorParallelRanksHoldTheirSliceAsTheModelSays) {
  const Plan p = uniform(tiny_llama(), 2, 1, strat(2, 1, 1, true));
  const auto got = held(p, "mem_tp2");
  ASSERT_EQ(got.size(), 2u);
  expect_matches_model(p, got, "tp2");
  EXPECT_EQ(got[0].params, got[1].params);
}

TEST(RuntimeMemory, ZeroStagesShardWhatTheModelSays) {
  int64_t params0 = 0, grads0 = 0, opt0 = 0;
  for (int z = 0; z <= 3; ++z) {
    const Plan p = uniform(tiny_llama(), 2, 1, strat(1, 2, 1, false, z));
    const auto got = held(p, "mem_zero" + std::to_string(z));
    ASSERT_EQ(got.size(), 2u);
    expect_matches_model(p, got, "zero" + std::to_string(z));
    if (z == 0) params0 = got[0].params, grads0 = got[0].grads, opt0 = got[0].optimizer;
    // Stage >= 1 halves the optimizer states over dp 2, >= 2 the gradients, 3 the parameters.
    EXPECT_NEAR(static_cast<double>(got[0].optimizer), z >= 1 ? opt0 / 2.0 : opt0, 64.0) << "zero " << z;
    EXPECT_NEAR(static_cast<double>(got[0].grads), z >= 2 ? grads0 / 2.0 : grads0, 64.0) << "zero " << z;
    EXPECT_NEAR(static_cast<double>(got[0].params), z == 3 ? params0 / 2.0 : params0, 64.0) << "zero " << z;
  }
}

TEST(RuntimeMemory, PipelineStagesHoldTheirLayers) {
  const Plan p = uniform(tiny_llama(6), 2, 2, strat(1, 1), {4, 2});
  const auto got = held(p, "mem_pp2");
  ASSERT_EQ(got.size(), 2u);
  expect_matches_model(p, got, "pp2");
  // Stage 0 holds four layers and the table, stage 1 two layers and the head.
  EXPECT_GT(got[0].params, got[1].params);
}

// ZeRO-3 with four micro-batches under 1F1B: stage 0 holds two micro-batches in flight. Each
// layer's gathered parameters are freed after its forward and gathered again for its backward, so
// at most one layer's full parameters are gathered at a time; keeping them until backward (what a
// linear layer's saved weight does) would hold 2 micro-batches x 2 layers of them.
TEST(RuntimeMemory, Zero3GathersOneLayerAtATimeUnder1F1B) {
  const ModelSpec m = tiny_llama(4);
  const Plan z3 = uniform(m, 4, 2, strat(1, 2, 1, false, 3), {2, 2}, Schedule::k1F1B, 8, 4);
  const Plan z0 = uniform(m, 4, 2, strat(1, 2, 1, false, 0), {2, 2}, Schedule::k1F1B, 8, 4);
  const auto a = held(z3, "mem_z3_1f1b"), b = held(z0, "mem_z0_1f1b");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  const int64_t layer = 4 * layer_params(m);
  for (int r = 0; r < 4; ++r) {
    std::printf("rank %d: zero-3 shards %lld + peak gathered %lld bytes; zero-0 parameters %lld; one layer %lld\n", r,
                static_cast<long long>(a[r].params), static_cast<long long>(a[r].gathered_peak),
                static_cast<long long>(b[r].params), static_cast<long long>(layer));
    EXPECT_GT(a[r].gathered_peak, 0) << "rank " << r;
    EXPECT_LE(a[r].gathered_peak, layer + 64) << "rank " << r << ": more than one layer's parameters gathered at once";
    EXPECT_LT(a[r].params + a[r].gathered_peak, b[r].params) << "rank " << r << ": ZeRO-3 peak above ZeRO-0";
  }
}

// The parameters are gathered again for backward from the same shards: the result equals ZeRO-0's
// to rounding (parity_test.cc checks every mode against one process; this pins the 1F1B case).
TEST(RuntimeMemory, Zero3RegatheringInBackwardChangesNoResult) {
  const ModelSpec m = tiny_llama(4);
  const Plan z3 = uniform(m, 4, 2, strat(1, 2, 1, false, 3), {2, 2}, Schedule::k1F1B, 8, 4);
  const std::string dir = temp_dir("mem_z3_parity");
  const RunResult a = train_plan(z3, dir, "z3", 3);
  const RunResult one = train_plan(reference_of(z3), dir, "one", 3);
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(one.status, 0) << one.output;
  auto d = runtime::compare_params(read_params(dir + "/z3.params"), read_params(dir + "/one.params"));
  ASSERT_TRUE(d.ok());
  EXPECT_LT(d->max_rel_norm, 1e-5) << d->worst;
  std::filesystem::remove_all(dir);
}


// Activations: what a step's forward and backward allocate beyond what the step began with
// (`--measure-memory`, each rank's step_peak_cpu_bytes) against the memory model's activations of
// the micro-batches in flight plus its transient peak, with the runtime's own traits (framework
// weft: eager elementwise operators, no dropout; libtorch 1.13's CPU attention is not fused, so
// the score matrices are kept: flash attention off there) in fp32.
ModelSpec activation_gpt() {
  ModelSpec m = tiny_gpt(4);
  m.hidden = 256;
  m.max_seq = 256;
  m.vocab = 512;
  m.groups[0].shape.hidden = 256;
  m.groups[0].shape.head_dim = 64;
  m.groups[0].shape.ffn = 1024;
  return m;
}

// A plan trained at sequence 256 for 2 steps with --measure-memory (bf16 plans under --precision
// bf16): the run, and what each rank's step allocated (step_peak_cpu_bytes; empty if the run failed,
// which is recorded as a failure).
struct StepPeaks {
  RunResult run;
  std::vector<double> bytes;
};
StepPeaks measure_steps(Plan& p, const std::string& name) {
  p.train.seq = 256;
  EXPECT_TRUE(validate(p).ok()) << validate(p).error().message;
  const std::string dir = temp_dir(name);
  const std::string precision = p.train.dtype == DType::kBf16 ? " --precision bf16" : "";
  StepPeaks out{train_plan(p, dir, name, 2, " --device cpu --measure-memory" + precision), {}};
  std::filesystem::remove_all(dir);
  EXPECT_EQ(out.run.status, 0) << out.run.output;
  EXPECT_TRUE(out.run.summary.is_object()) << out.run.output;
  if (out.run.status == 0 && out.run.summary.is_object())
    for (int rank = 0; rank < p.world_size(); ++rank)
      out.bytes.push_back(
          static_cast<double>(out.run.summary["ranks"][rank].at("step_peak_cpu_bytes").get<int64_t>()));
  return out;
}

// The memory model with the runtime's own traits: framework weft, and the attention kernel of this
// libtorch's CPU (unfused on 1.13: the score matrices kept).
Estimate priced(const Plan& p) {
  AnalyticOptions o = framework_options(Framework::kWeft, AnalyticOptions{});
  o.flash_attention = WEFT_TORCH_FUSED_ATTENTION;
  return estimate(p, AnalyticCostModel(o));
}

void expect_activations(Plan p, const std::string& name) {
  const StepPeaks m = measure_steps(p, name);
  ASSERT_EQ(m.bytes.size(), static_cast<size_t>(p.world_size()));
  const Json& r = m.run.summary;
  const Estimate e = priced(p);
  const int S = p.devices_per_stage();
  for (int rank = 0; rank < p.world_size(); ++rank) {
    const double got = m.bytes[rank];
    // The rank's device group: the activations of each of its (virtual) stages, the largest
    // transient of them.
    double act = 0, transient = 0;
    for (int s = 0; s < static_cast<int>(e.stages.size()); ++s)
      if (stage_group(p, s) == rank / S) {
        act += e.stages[s].memory.activations.value();
        transient = std::max(transient, e.stages[s].memory.transient.value());
      }
    // Mixed precision casts the fp32 parameters (the optimizer's master copy) to bf16 at the start
    // of each step and keeps the copies to its end: 2 bytes per parameter the rank holds (its
    // param_bytes are 4 per parameter, equal to the model's: ZeroStagesShardWhatTheModelSays).
    const double copies =
        p.train.dtype == DType::kBf16 ? r["ranks"][rank].at("param_bytes").get<int64_t>() / 2.0 : 0.0;
    const double want = act + transient + copies;
    std::printf("%s rank %d: step allocates %.1f MB, the model %.1f MB (activations %.1f, transient %.1f, bf16 "
                "weights %.1f): %+.1f %%\n",
                name.c_str(), rank, got / 1e6, want / 1e6, act / 1e6, transient / 1e6, copies / 1e6,
                100 * (got / want - 1));
    EXPECT_NEAR(got, want, 0.1 * want) << name << " rank " << rank;
  }
}

TEST(RuntimeMemory, ActivationsAsTheModelSaysOneRank) {
  expect_activations(uniform(activation_gpt(), 1, 1, strat(1, 1), {}, Schedule::k1F1B, 4, 1), "act_one");
}
// ZB-H1's last stage keeps, beside 1F1B's micro-batch of activations, the weight-gradient state of
// the micro-batch whose W waits (the inputs of its matmuls, the gradients of their outputs): what it
// allocates beyond 1F1B on that stage against what the memory model adds for that state
// (weight_grad_state_bytes x pending_weight_grads).
TEST(RuntimeMemory, ZeroBubbleWeightGradientStateAsTheModelSays) {
  auto measure = [](Schedule s, const std::string& name) {
    Plan p = uniform(activation_gpt(), 2, 2, strat(1, 1), {}, s, 8, 8);
    const StepPeaks m = measure_steps(p, name);
    return std::pair{m.bytes.size() == 2 ? m.bytes[1] : 0.0, priced(p).stages[1].memory.activations.value()};
  };
  const auto [zb, zb_priced] = measure(Schedule::kZbH1, "act_zbh1");
  const auto [ob, ob_priced] = measure(Schedule::k1F1B, "act_1f1b");
  const double got = zb - ob, want = zb_priced - ob_priced;
  std::printf("last stage: zb-h1 allocates %.1f MB, 1f1b %.1f MB: the W state %.1f MB, the model %.1f MB (%+.1f %%)\n",
              zb / 1e6, ob / 1e6, got / 1e6, want / 1e6, 100 * (got / want - 1));
  ASSERT_GT(want, 0);
  EXPECT_NEAR(got, want, 0.2 * want);  // measured +17 %: B's transients on top of the waiting state
}

// Context parallelism: ring attention keeps its output and log-sum-exp instead of the score
// matrices; each rank holds two mirrored chunks of the sequence (2 ranks x 2 samples of 256).
TEST(RuntimeMemory, ActivationsAsTheModelSaysContextParallel2) {
  LayerStrategy s = strat(1, 1);
  s.cp = 2;
  expect_activations(uniform(activation_gpt(), 2, 1, s, {}, Schedule::k1F1B, 4, 1), "act_cp2");
}

// ZB-V: each rank holds two chunks of the V; what a step allocates on it against the memory
// model's activations and transients of its group's two virtual stages (2 pp - 1 - g micro-batches
// of chunk 0 and g + 1 of chunk 1 at the end of the warm-up, plus the output gradients of one
// chunk-micro-batch waiting for its W).
TEST(RuntimeMemory, ZeroBubbleVActivationsAsTheModelSays) {
  expect_activations(uniform(activation_gpt(), 2, 2, strat(1, 1), {1, 1, 1, 1}, Schedule::kZbV, 8, 8), "act_zbv");
}

// Tensor parallelism with Megatron-SP: the column-parallel linears keep their all-gathered input
// for the weight gradient (ActivationOptions::sp_gathered_inputs), the FFN's backward gathers the
// arriving gradient (layer_backward_transient_bytes).
TEST(RuntimeMemory, ActivationsAsTheModelSaysTp2SequenceParallel) {
  expect_activations(uniform(activation_gpt(), 2, 1, strat(2, 1, 1, true), {}, Schedule::k1F1B, 4, 1), "act_tp2sp");
}
TEST(RuntimeMemory, ActivationsAsTheModelSaysTp2) {
  expect_activations(uniform(activation_gpt(), 2, 1, strat(2, 1), {}, Schedule::k1F1B, 4, 1), "act_tp2");
}
TEST(RuntimeMemory, ActivationsAsTheModelSaysUlysses2) {
  expect_activations(uniform(activation_gpt(), 2, 1, strat(1, 1, 2), {}, Schedule::k1F1B, 4, 1), "act_uly2");
}
// Full recompute: every layer's input, and in the backward of one layer its recomputed activations
// with the backward's working set on top.
TEST(RuntimeMemory, ActivationsAsTheModelSaysRecomputeFull) {
  const LayerStrategy rc = strat(1, 1, 1, false, 0, Recompute::kFull);
  expect_activations(uniform(activation_gpt(), 1, 1, rc, {}, Schedule::k1F1B, 4, 1), "act_rc_full");
}
TEST(RuntimeMemory, ActivationsAsTheModelSaysRecomputeSelective) {
  expect_activations(
      uniform(activation_gpt(), 1, 1, strat(1, 1, 1, false, 0, Recompute::kSelective), {}, Schedule::k1F1B, 4, 1),
      "act_rc_sel");
}
// 1F1B on two stages, 8 micro-batches of one sample: the first stage holds two micro-batches, the
// last one, each with the backward's working set (the first stage's peak is in a layer's FFN
// backward, not at the loss).
TEST(RuntimeMemory, ActivationsAsTheModelSaysPipeline2OneFOneB) {
  expect_activations(uniform(activation_gpt(), 2, 2, strat(1, 1), {}, Schedule::k1F1B, 8, 8), "act_pp2");
}

// bf16 mixed precision (--precision bf16): 2-byte activations, the loss's logits in fp32, and the
// bf16 copies of the parameters the step casts.
Plan in_bf16(Plan p) {
  p.train.dtype = DType::kBf16;
  return p;
}
TEST(RuntimeMemory, ActivationsAsTheModelSaysBf16OneRank) {
  expect_activations(in_bf16(uniform(activation_gpt(), 1, 1, strat(1, 1), {}, Schedule::k1F1B, 4, 1)), "act_bf16");
}
TEST(RuntimeMemory, ActivationsAsTheModelSaysBf16Tp2SequenceParallel) {
  expect_activations(in_bf16(uniform(activation_gpt(), 2, 1, strat(2, 1, 1, true), {}, Schedule::k1F1B, 4, 1)),
                     "act_bf16_tp2sp");
}
TEST(RuntimeMemory, ActivationsAsTheModelSaysBf16Pipeline2OneFOneB) {
  expect_activations(in_bf16(uniform(activation_gpt(), 2, 2, strat(1, 1), {}, Schedule::k1F1B, 8, 8)), "act_bf16_pp2");
}
TEST(RuntimeMemory, ActivationsAsTheModelSaysBf16RecomputeFull) {
  const LayerStrategy rc = strat(1, 1, 1, false, 0, Recompute::kFull);
  expect_activations(in_bf16(uniform(activation_gpt(), 1, 1, rc, {}, Schedule::k1F1B, 4, 1)), "act_bf16_rc");
}

// A stage lets go of each activation it sent once the next stage has it: what a step allocates
// does not grow with the micro-batches (it did by one micro-batch's output per micro-batch on the
// first stage, and one input gradient on the last, while every send was held to the step's end).
TEST(RuntimeMemory, PipelineSendsAreReleasedAsTheyArrive) {
  auto peaks = [](int m, const std::string& name) {
    Plan p = uniform(activation_gpt(), 2, 2, strat(1, 1), {}, Schedule::k1F1B, m, m);
    return measure_steps(p, name).bytes;
  };
  const std::vector<double> two = peaks(2, "sends_m2"), eight = peaks(8, "sends_m8");
  ASSERT_EQ(two.size(), 2u);
  ASSERT_EQ(eight.size(), 2u);
  const double block = 256.0 * 256 * 4;  // one micro-batch's activations between the stages
  for (int rank = 0; rank < 2; ++rank) {
    std::printf("rank %d: step allocates %.2f MB with 2 micro-batches, %.2f MB with 8\n", rank, two[rank] / 1e6,
                eight[rank] / 1e6);
    EXPECT_LT(eight[rank] - two[rank], block) << "rank " << rank;
  }
}

}  // namespace
}  // namespace weft::rttest
