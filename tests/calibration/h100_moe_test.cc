// Mixture-of-experts layers on an H100 (data/reference/h100, README there) against weft's analytic
// h100-80gb model: the experts' grouped GEMMs at the expert shapes of published MoE runs, routing
// skew on one GPU, weft's own MoE layer (`--framework weft`), and the runtime's MoE parity on CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "h100_files.h"
#include "weft/calibration/model_profile.h"
#include "weft/core/json.h"
#include "weft/cost/analytic.h"
#include "weft/cost/compute.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

using testing::h100_file;
using testing::one_h100;

double rel(double predicted, double measured) { return predicted / measured - 1; }

// torch._grouped_mm (the grouped GEMM torchtitan runs, as Megatron-LM's --moe-grouped-gemm does with
// its own kernels) at one rank's expert shapes under the stated expert degree, even routing, bf16:
// the kernel model's batched GEMM (each expert a batch entry, at the in-training time scale) within
// 20 % for both projections of all nine cases (measured worst -17.6 %, the model fast where the
// experts are wide: DeepSeek-V3 at 8192 rows, Mixtral at expert degree 8). Grouping costs little
// against one GEMM of the same FLOPs: at most 25 % more for the whole expert MLP forward and
// backward (measured worst 1.50x: 128 experts of 256 rows), so grouped-GEMM efficiency is not what
// makes fine-grained MoE slow (docs/cost-model.md §8); a loop of one GEMM per expert from Python is
// slower wherever there are many experts (measured 3.9x to 94x at 16 to 128 experts, timed beside
// the 16-job build; moe_host.json's whole blocks, timed on an idle host, give the loop 2.4x to 42x).
TEST(H100Moe, GroupedGemmsRunAtTheKernelModelsRate) {
  const ClusterSpec c = one_h100();
  const KernelModel km(c.gpu, DType::kBf16, AnalyticOptions{}.compute_time_scale);
  const Json j = read_json_file(h100_file("moe_kernels.json"));
  ASSERT_TRUE(j.at("has_grouped_mm").get<bool>());
  int cases = 0;
  for (const Json& e : j.at("experts")) {
    const std::string name = e.at("name");
    const double h = e.at("hidden"), f = e.at("expert_ffn"), local = e.at("local_experts"), per = e.at("rows_per_expert");
    const double up = km.gemm(per, 2 * f, h, local).value(), down = km.gemm(per, h, f, local).value();
    const double mup = e.at("grouped_gemm_up_s"), mdown = e.at("grouped_gemm_down_s");
    std::printf("%-22s %3.0f experts x %5.0f rows: up %.3f ms model %+5.1f%%, down %.3f ms model %+5.1f%%; MLP fwd+bwd "
                "grouped %.2f ms = %.2fx one GEMM, loop %.2fx\n",
                name.c_str(), local, per, mup * 1e3, 100 * rel(up, mup), mdown * 1e3, 100 * rel(down, mdown),
                e.at("grouped_fwd_bwd_s").get<double>() * 1e3,
                e.at("grouped_fwd_bwd_s").get<double>() / e.at("dense_fwd_bwd_s").get<double>(),
                e.at("loop_fwd_bwd_s").get<double>() / e.at("grouped_fwd_bwd_s").get<double>());
    EXPECT_LE(std::fabs(rel(up, mup)), 0.20) << name;
    EXPECT_LE(std::fabs(rel(down, mdown)), 0.20) << name;
    EXPECT_LE(e.at("grouped_fwd_bwd_s").get<double>(), 1.6 * e.at("dense_fwd_bwd_s").get<double>()) << name;
    if (local >= 16) EXPECT_GT(e.at("loop_fwd_bwd_s").get<double>(), 3 * e.at("grouped_fwd_bwd_s").get<double>()) << name;
    ++cases;
  }
  EXPECT_EQ(cases, 9);
}

// Uneven routing among one GPU's local experts (the same copies, one expert taking 1.5x and 3x the
// mean): the grouped GEMM's time follows the total rows, not the busiest expert, within 11 % forward
// and backward at every case but one (measured: 128 experts of 256 rows at 3x, whose backward takes
// 1.75x: the busiest expert's weight gradient is a K = 768-row GEMM beside 127 of 250). So a
// device's expert time is its rows' time, as the cost model prices it; the imbalance that costs is
// between devices (the expert-parallel rank with the most rows sets the all-to-all's and the
// layer's pace).
TEST(H100Moe, SkewAmongOneGpusExpertsCostsLittle) {
  const Json j = read_json_file(h100_file("moe_kernels.json"));
  int checked = 0, outliers = 0;
  for (const Json& e : j.at("experts")) {
    if (!e.contains("grouped_skewed")) continue;
    for (const Json& s : e.at("grouped_skewed")) {
      const double rf = s.at("forward_s").get<double>() / e.at("grouped_forward_s").get<double>();
      const double rb = s.at("fwd_bwd_s").get<double>() / e.at("grouped_fwd_bwd_s").get<double>();
      EXPECT_GE(s.at("max_over_mean").get<double>(), 1.45);
      EXPECT_LE(rf, 1.12) << e.at("name") << " skew " << s.at("max_over_mean");
      if (rb > 1.12) ++outliers;
      else ++checked;
    }
  }
  EXPECT_EQ(checked + outliers, 16);
  EXPECT_LE(outliers, 1);
}

// weft's own MoE layer as `weft profile model` measured it in bf16 mixed precision (every expert
// local: Qwen3-30B-A3B's 128 experts of 256-512 rows; 16 experts of top 8, one rank's share under
// expert degree 8; Mixtral 8x7B's 8 experts of 1024 rows). The runtime runs its experts as a loop
// (AnalyticOptions::moe_grouped_gemm off for `weft`), which the model prices as one GEMM and one
// set of host operators per expert. For Mixtral's wide experts (GPU-bound) the model is within 25 %
// forward and 10 % backward; with many small experts the runtime measured 2.5-6.4x the model
// (docs/cost-model.md §4.2, "MoE layers": host-bound, not yet traced to its operators), which this
// holds as a bound: the model never prices the measured layer slower, and a grouped GEMM's price
// (`megatron`'s traits) is below the loop's.
TEST(H100Moe, WeftRuntimeMoeLayerAgainstTheLoopModel) {
  const ClusterSpec c = one_h100();
  const AnalyticCostModel weft(*framework_options("weft"));
  const AnalyticCostModel mega(*framework_options("megatron"));
  int points = 0;
  for (const char* f : {"qwen3-30b-a3b_bf16.json", "qwen3-30b-a3b-ep8-local_bf16.json", "mixtral-8x7b_bf16.json"}) {
    auto p = read_model_profile(h100_file(f));
    ASSERT_TRUE(p.ok()) << p.error().message;
    ASSERT_TRUE(p->model.groups.at(0).shape.moe.enabled());
    for (const PhaseSample& s : p->layers.at(0).samples) {
      if (s.zero != 0) continue;
      LayerContext ctx;
      ctx.model = &p->model;
      ctx.cluster = &c;
      ctx.train.seq = s.seq;
      ctx.train.global_batch = s.micro_batch;
      ctx.train.micro_batches = 1;
      ctx.train.dtype = DType::kBf16;
      const LayerCost lw = weft.layer(ctx, LayerStrategy{}), lm = mega.layer(ctx, LayerStrategy{});
      const double ef = rel(lw.fwd.value(), s.forward_s), eb = rel(lw.bwd.value(), s.backward_s);
      std::printf("%-36s mb %d: forward %6.2f ms model %6.2f (%+5.1f%%), backward %6.2f ms model %6.2f (%+5.1f%%)\n", f,
                  s.micro_batch, s.forward_s * 1e3, lw.fwd.value() * 1e3, 100 * ef, s.backward_s * 1e3,
                  lw.bwd.value() * 1e3, 100 * eb);
      const int local = p->model.groups.at(0).shape.moe.experts;
      if (local <= 8) {
        EXPECT_LE(std::fabs(ef), 0.25) << f;
        EXPECT_LE(std::fabs(eb), 0.10) << f;
      } else {
        EXPECT_LT(lw.fwd.value(), s.forward_s) << f;
        EXPECT_LT(lw.bwd.value(), s.backward_s) << f;
      }
      EXPECT_LT(lm.fwd.value() + lm.bwd.value(), lw.fwd.value() + lw.bwd.value()) << f;
      ++points;
    }
  }
  EXPECT_EQ(points, 2 + 2 + 1);
}

// The runtime's MoE layers on CUDA (data/reference/h100/moe_parity.json, fp32): one rank on the GPU
// gives the CPU run's losses within 1e-5 over 20 steps (measured 3.3e-6); expert-parallel plans of
// 2 ranks (ep 2) and 4 (tp 2 + SP, ep 4 with etp 1) sharing the GPU through Gloo give one rank's
// losses within 1e-5 over 10 steps (measured 1.4e-6) and train; each step's routing figures are
// reported (imbalance at least 1 in every layer).
TEST(H100Moe, CudaMoeParityWasMeasured) {
  const Json j = read_json_file(h100_file("moe_parity.json"));
  const Json& one = j.at("one_rank");
  EXPECT_EQ(one.at("cpu_loss").size(), 20u);
  EXPECT_LE(one.at("max_rel_loss").get<double>(), 1e-5);
  ASSERT_EQ(j.at("ranks_on_one_gpu").size(), 2u);
  for (const Json& r : j.at("ranks_on_one_gpu")) {
    ASSERT_EQ(r.at("loss").size(), 10u);
    double worst = 0;
    for (size_t i = 0; i < 10; ++i)
      worst = std::max(worst, std::fabs(r.at("loss")[i].get<double>() / r.at("reference_loss")[i].get<double>() - 1));
    EXPECT_LE(worst, 1e-5) << r.at("plan");
    EXPECT_GT(r.at("loss").front().get<double>() - r.at("loss").back().get<double>(), 0.05) << r.at("plan");
    ASSERT_EQ(r.at("imbalance_first_step").size(), 4u);
    for (const Json& x : r.at("imbalance_first_step")) EXPECT_GE(x.get<double>(), 1.0);
  }
}

}  // namespace
}  // namespace weft
