// The analytic model against measured and published figures (reads data/reference).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "reference/published_runs.h"
#include "weft/core/json.h"
#include "weft/cost/analytic.h"
#include "weft/cost/collectives.h"
#include "weft/cost/estimate.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

// vTrain's measured all-reduce on 2-8 A100 of one node (nccl-tests columns: size, count, type,
// out-of-place time ns, busbw, in-place time ns, busbw). The collective model with the A100
// preset's NVLink rate and the default efficiency and call latency must follow them.
TEST(ReferenceCollectives, VtrainAllReduceTables) {
  auto cl = load_cluster("a100-80gb");
  ASSERT_TRUE(cl.ok());
  const ClusterSpec c = *cl;
  std::vector<double> errors;
  for (int n = 2; n <= 8; ++n) {
    const std::string path = std::string(WEFT_DATA_DIR) + "/reference/vtrain/allreduce_a100/AR_GPU" +
                             std::to_string(n) + "_1M_1024M_LUT.csv";
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path;
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::stringstream ss(line);
      std::string f[7];
      for (auto& x : f) std::getline(ss, x, ',');
      const double size = std::stod(f[0]);
      const double measured = (std::stod(f[3]) + std::stod(f[5])) * 0.5e-9;
      const double model = collective_time(Collective::kAllReduce, Bytes(size), place_group(c, n, 1), c).value();
      errors.push_back(std::abs(model - measured) / measured);
    }
  }
  ASSERT_FALSE(errors.empty());
  std::sort(errors.begin(), errors.end());
  const double median = errors[errors.size() / 2];
  const double p95 = errors[errors.size() * 95 / 100];
  EXPECT_LT(median, 0.05);
  EXPECT_LT(p95, 0.20);
}

// Narayanan et al. 2021 (SC'21, "Efficient Large-Scale Language Model Training on GPU Clusters
// Using Megatron-LM"), section 5: GPT-3 175B trained on 1024 A100 GPUs (Selene, 8x 200 Gb/s HDR
// per node) at batch 1536 achieves about 140 teraFLOP/s per GPU, counted with their formula
// 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) that includes the recomputed forward. The paper does not
// state every setting of that run; this test uses tp 8, pp 16, dp 8, micro-batch 1, 1F1B and full
// recompute. The analytic model has no stragglers, clock throttling under the power cap or
// framework work outside the layers, so it is expected to be optimistic: the band is
// -10% .. +35% of the reported throughput (docs/cost-model.md §8 has the figure).
TEST(ReferenceMegatron, Gpt3_175bOn1024A100) {
  auto m = load_model("gpt3-175b");
  auto c = load_cluster("a100-80gb");
  ASSERT_TRUE(m.ok() && c.ok());
  Plan p;
  p.model = *m;
  p.model.vocab = 51200;  // the paper's vocabulary
  p.cluster = *c;
  p.cluster.nodes = 128;
  p.train.seq = 2048;
  p.train.global_batch = 1536;
  p.train.micro_batches = 1536 / 8;
  p.train.pp = 16;
  p.train.schedule = Schedule::k1F1B;
  p.train.dtype = DType::kFp16;
  LayerStrategy s;
  s.tp = 8;
  s.dp = 8;
  s.recompute = Recompute::kFull;
  p.embedding = s;
  p.embedding.recompute = Recompute::kNone;
  for (int st = 0; st < 16; ++st) {
    Stage stage;
    stage.first_layer = st * 6;
    stage.layers.assign(6, s);
    p.stages.push_back(stage);
  }
  const Status ok = validate(p);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  const Estimate e = estimate(p, AnalyticCostModel());
  const double B = 1536, S = 2048, l = 96, h = 12288, V = 51200;
  const double flops = 96 * B * S * l * h * h * (1 + S / (6 * h) + V / (16 * l * h));
  const double tflops = flops / e.step_time.value() / 1024 / 1e12;
  EXPECT_GT(tflops, 0.90 * 140.0);
  EXPECT_LT(tflops, 1.35 * 140.0) << "step " << e.step_time.value() << " s; breakdown "
                                           << to_json(e.breakdown).dump();
}

// Galvatron's measured forward time of one Llama-2-7B layer on an A100 (bf16, flash attention,
// seq 2048; reference/galvatron computation profile: the per-layer time is the difference between
// the 4- and 2-layer models, halved). The kernel model's sustained factor (compute_time_scale,
// 1.154) was derived from the two largest batches (docs/cost-model.md §2.5); the smaller batches
// are the check: within -10% .. +2% of the measurements at every batch, and without the factor
// the model is 13-22% optimistic.
TEST(ReferenceGalvatron, Llama7bLayerForwardOnA100) {
  const Json prof = read_json_file(std::string(WEFT_DATA_DIR) +
                                   "/reference/galvatron/computation_profiling_bf16_llama2-7b_all.json");
  auto m = load_model("llama-2-7b");
  auto c = load_cluster("a100-80gb");
  ASSERT_TRUE(m.ok() && c.ok());
  ClusterSpec one = *c;
  one.nodes = 1;
  one.gpus_per_node = 1;
  AnalyticOptions plain;
  plain.compute_time_scale = 1.0;
  for (int b : {1, 2, 4, 8, 12}) {
    const std::string k = "_bsz" + std::to_string(b) + "_seq2048";
    const double measured =
        (prof.at("layernum[4]" + k).get<double>() - prof.at("layernum[2]" + k).get<double>()) / 2 * 1e-3;
    LayerContext ctx;
    ctx.model = &*m;
    ctx.cluster = &one;
    ctx.train.seq = 2048;
    ctx.train.global_batch = b;
    ctx.train.micro_batches = 1;
    ctx.train.dtype = DType::kBf16;
    const LayerStrategy s;
    const double model = AnalyticCostModel().layer(ctx, s).fwd.value();
    const double best_case = AnalyticCostModel(plain).layer(ctx, s).fwd.value();
    EXPECT_GT(model, 0.90 * measured) << "batch " << b;
    EXPECT_LT(model, 1.02 * measured) << "batch " << b;
    EXPECT_LT(best_case, 0.88 * measured) << "batch " << b;
    EXPECT_GT(best_case, 0.75 * measured) << "batch " << b;
  }
}

// Published runs (data/reference/published_runs.json, sources in the file): each costed as the
// uniform plan it describes with its framework's traits (docs/cost-model.md §4.1, §8).
std::vector<published::Run> published_runs() {
  auto runs = published::load_runs(std::string(WEFT_DATA_DIR) + "/reference/published_runs.json");
  EXPECT_TRUE(runs.ok()) << (runs.ok() ? "" : runs.error().message);
  return runs.ok() ? *runs : std::vector<published::Run>{};
}

// torchtitan's FSDP2 runs on 64 A100 (eager norm, rotary and SwiGLU operators; op-level selective
// checkpointing). Every run within 20% and the mean error within 8%; costed with Megatron's traits
// (fused kernels, attention-core selective recompute) the same runs are 9-38% optimistic, so the
// framework's traits must at least halve the summed error.
TEST(ReferencePublished, TorchtitanFsdp2On64A100) {
  double sum = 0, sum_megatron = 0;
  int n = 0;
  for (const published::Run& r : published_runs()) {
    if (r.set != "torchtitan-a100") continue;
    const double err = published::tokens_per_gpu(r, estimate(r.plan, AnalyticCostModel(r.options))) / r.measured - 1;
    const double err_megatron = published::tokens_per_gpu(r, estimate(r.plan, AnalyticCostModel())) / r.measured - 1;
    EXPECT_LT(std::abs(err), 0.20) << r.label;
    sum += std::abs(err);
    sum_megatron += std::abs(err_megatron);
    ++n;
  }
  ASSERT_EQ(n, 6);
  EXPECT_LT(sum / n, 0.08);
  EXPECT_LT(sum, 0.5 * sum_megatron);
}

// NVIDIA's Megatron-Core FP8 runs on H100 and B200. Every run within 20%, the mean within 10%, and
// no plan's estimated peak above its device (NVIDIA ran them). FP8 is costed with its GEMMs at the
// fp8 rate, the attention in 16 bits and the quantization passes (docs/cost-model.md §2.1-2.2);
// with the attention at the fp8 rate and no quantization cost the 8B H100 run came out 30% fast.
TEST(ReferencePublished, NemoFp8OnH100AndB200) {
  double sum = 0;
  int n = 0;
  for (const published::Run& r : published_runs()) {
    if (r.set != "nemo-fp8") continue;
    const Estimate e = estimate(r.plan, AnalyticCostModel(r.options));
    const double err = published::tokens_per_gpu(r, e) / r.measured - 1;
    EXPECT_LT(std::abs(err), 0.20) << r.label << ": " << published::tokens_per_gpu(r, e);
    EXPECT_LE(e.peak_memory.value(), GiB(r.plan.cluster.gpu.memory_gib).value())
        << r.label << ": " << e.peak_memory.value() / (1 << 30) << " GiB";
    sum += std::abs(err);
    ++n;
  }
  ASSERT_EQ(n, 5);
  EXPECT_LT(sum / n, 0.10);
}

}  // namespace
}  // namespace weft
