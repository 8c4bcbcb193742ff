// weft_bench_published: weft's analytic model against published training throughput of real runs
// (data/reference/published_runs.json: torchtitan's FSDP2 runs on A100, NVIDIA's Megatron-Core FP8
// runs on H100 and B200, MosaicML llm-foundry's MPT runs with FSDP on H100 and A100). Prints, per
// run, the measured tokens/s/GPU, weft's estimate with the run's framework traits and with
// Megatron's, the errors, the MFU (published, the measurement's under weft's FLOP count, weft's
// prediction) and the estimated peak memory against the device; per set the mean absolute and mean
// signed errors (for llm-foundry also by sequence length); then the plan of README.md's example
// (`weft plan --model llama-2-7b --cluster a100-80gb --gpus 8 --seq 4096 --global-batch 512`) with
// its predicted MFU beside the published MFU of comparable runs.
//
// MFU conventions: weft counts model FLOPs as model_step_flops does (3 x the forward's matmuls,
// attention in full without a causal discount, LM head included, recompute not counted), which is
// Megatron's and PaLM's convention. torchtitan counts 6 x parameters without the token embedding +
// 12 x layers x hidden x seq per token; llm-foundry 6 x all parameters (embeddings and learned
// positions included) + 12 x layers x hidden x seq. "MFU meas." recomputes the published one from
// the measured tokens/s with weft's count; it is printed where no MFU is published or where the
// two differ by more than a point.
//
// Usage: weft_bench_published [--file PATH] [--no-example]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reference/published_runs.h"
#include "weft/cost/estimate.h"
#include "weft/cost/framework.h"
#include "weft/galvatron/setup.h"
#include "weft/plan/runtime_support.h"
#include "weft/plan/strategy.h"
#include "weft/report/plan_text.h"
#include "weft/search/search.h"

namespace {

using namespace weft;

struct Errors {
  double abs = 0, signed_sum = 0;
  int n = 0;
  void add(double err) {
    abs += std::abs(err);
    signed_sum += err;
    ++n;
  }
  double mae() const { return n ? abs / n : 0; }
  double mean() const { return n ? signed_sum / n : 0; }
};

struct SetSummary {
  std::string framework;
  Errors own, megatron;
  Errors mfu_points;  // weft's MFU minus the measurement's (both weft's count), in points
  std::map<int, Errors> by_seq;  // bucket index -> errors with the set's framework traits
  Errors memory;                 // peak memory against the source's reading, where it gives one
};

// Sequence-length buckets of the llm-foundry summaries.
const char* const kBuckets[] = {"<= 4K", "8-16K", "32-64K"};
int bucket(int seq) { return seq <= 4096 ? 0 : seq <= 16384 ? 1 : 2; }

std::string pct(const std::optional<double>& v) {
  if (!v) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", *v);
  return b;
}

// The best plan `weft plan` finds for README.md's example, through the calls the CLI makes
// (bin/weft/cmd_plan.cc: make_cost_model, then restrict_to_runtime without --framework or
// restrict_to_framework with it, then search_with); prints it with its estimate.
bool readme_example(const char* what, const std::optional<Framework>& framework, double* mfu_out) {
  const int gpus = 8, seq = 4096, global_batch = 512;
  auto model = load_model("llama-2-7b");
  auto cluster = load_cluster("a100-80gb");
  if (!model.ok() || !cluster.ok()) return false;
  ClusterSpec c = *cluster;
  c.nodes = std::max(1, gpus / c.gpus_per_node);
  galvatron::CostModelInputs in;
  if (framework) in.analytic = framework_options(*framework);
  auto setup = galvatron::make_cost_model(in, *model, c);
  if (!setup.ok()) {
    std::fprintf(stderr, "weft_bench_published: %s\n", setup.error().message.c_str());
    return false;
  }
  SearchOptions opt;
  opt.seq = seq;
  opt.global_batch = global_batch;
  opt.top_k = 3;
  opt.dtype = DType::kBf16;
  Status st = framework ? restrict_to_framework(opt, *framework)
                        : (runtime_runs_model(*model).ok() ? restrict_to_runtime(opt) : Status{});
  if (!st.ok()) {
    std::fprintf(stderr, "weft_bench_published: %s\n", st.error().message.c_str());
    return false;
  }
  auto r = galvatron::search_with(*setup, *model, setup->cluster, opt, false);
  if (!r.ok() || r->top.empty()) {
    std::fprintf(stderr, "weft_bench_published: README example: %s\n",
                 r.ok() ? "nothing fits" : r.error().message.c_str());
    return false;
  }
  const Plan& best = r->top.front();
  const Estimate e = estimate(best, *setup->cost);
  std::printf("  %s (cost model %s):\n", what, setup->cost->source().c_str());
  std::printf("    %s, embedding %s\n", pipeline_text(best.train).c_str(), label(best.embedding).c_str());
  const std::string layers = layers_table(best);  // the table `weft plan` prints
  for (size_t a = 0, b; a < layers.size(); a = b + 1) {
    b = layers.find('\n', a);
    std::printf("      %s\n", layers.substr(a, b - a).c_str());
  }
  std::printf("    step %.2f s, %.0f tokens/s/GPU, %.1f model TFLOP/s/GPU, MFU %.1f %%, peak %.1f GiB\n",
              e.step_time.value(), e.tokens_per_s / best.cluster.total_gpus(), e.model_tflops_per_gpu, 100 * e.mfu,
              to_gib(e.peak_memory));
  *mfu_out = 100 * e.mfu;
  return true;
}

// min .. max of the published MFU of the runs `pick` selects, with weft's predictions of them.
void mfu_range(const char* what, const std::vector<published::Run>& runs,
               const std::function<bool(const published::Run&)>& pick) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, plo = lo, phi = -lo;
  int n = 0;
  for (const published::Run& r : runs) {
    if (!pick(r) || !r.published_mfu) continue;
    lo = std::min(lo, *r.published_mfu);
    hi = std::max(hi, *r.published_mfu);
    const double p = 100 * estimate(r.plan, AnalyticCostModel(r.options)).mfu;
    plo = std::min(plo, p);
    phi = std::max(phi, p);
    ++n;
  }
  if (n == 0) return;
  if (n == 1)
    std::printf("    %-52s published %4.1f %%;         weft predicts %4.1f %% (1 run)\n", what, lo, plo);
  else
    std::printf("    %-52s published %4.1f .. %4.1f %%; weft predicts %4.1f .. %4.1f %% (%d runs)\n", what, lo, hi,
                plo, phi, n);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace weft;
  std::string path = std::string(WEFT_DATA_DIR) + "/reference/published_runs.json";
  bool example = true;
  bool breakdown = false;
  double overlap_slowdown = 0;  // > 0: replaces AnalyticOptions::overlap_slowdown (2 = nothing hidden)  // per run: the step's breakdown terms (s) under the set's traits
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--file") && i + 1 < argc) {
      path = argv[++i];
    } else if (!std::strcmp(argv[i], "--no-example")) {
      example = false;
    } else if (!std::strcmp(argv[i], "--breakdown")) {
      breakdown = true;
    } else if (!std::strcmp(argv[i], "--overlap-slowdown") && i + 1 < argc) {
      overlap_slowdown = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: weft_bench_published [--file PATH] [--no-example] [--breakdown]\nunknown argument: %s\n",
                   argv[i]);
      return 2;
    }
  }
  auto runs = published::load_runs(path);
  if (!runs.ok()) {
    std::fprintf(stderr, "weft_bench_published: %s\n", runs.error().message.c_str());
    return 2;
  }
  std::printf("tokens/s/GPU: measured, weft's with the set's framework traits, weft's with Megatron's (error: + = weft "
              "too fast)\n"
              "MFU %%: publ. = published (the source's FLOP count), meas. = the measured tokens/s under weft's count "
              "(shown where\n"
              "       none is published or the two differ by more than a point), weft = predicted (Estimate::mfu)\n"
              "peak / device: weft's estimated peak memory per GPU; over budget: above the part of the device weft "
              "lets a plan use\n");
  std::map<std::string, SetSummary> sets;
  std::vector<std::string> order;
  std::string set;
  for (const published::Run& r : *runs) {
    if (r.set != set) {
      set = r.set;
      std::printf("\n%s (framework %s)\n", set.c_str(), r.framework.c_str());
      std::printf("  %-50s %8s %8s %7s %8s %7s | %5s %5s %5s | %s\n", "run", "measured", "weft", "error", "megatron",
                  "error", "publ.", "meas.", "weft", "peak / device");
    }
    if (!sets.count(set)) order.push_back(set);
    SetSummary& sum = sets[set];
    sum.framework = r.framework;
    AnalyticOptions own = r.options;
    if (overlap_slowdown > 0) own.overlap_slowdown = overlap_slowdown;
    const Estimate e = estimate(r.plan, AnalyticCostModel(own));
    const Estimate m = estimate(r.plan, AnalyticCostModel());
    const double t = published::tokens_per_gpu(r, e), tm = published::tokens_per_gpu(r, m);
    const double err = 100 * (t / r.measured - 1), err_m = 100 * (tm / r.measured - 1);
    const double meas_mfu = published::measured_mfu(r);
    const bool show_meas = !r.published_mfu || std::abs(meas_mfu - *r.published_mfu) > 1.0;
    std::printf("  %-50s %8.0f %8.0f %+6.1f%% %8.0f %+6.1f%% | %5s %5s %5.1f | %5.1f / %5.1f GiB%s\n", r.label.c_str(),
                r.measured, t, err, tm, err_m, pct(r.published_mfu).c_str(),
                show_meas ? pct(meas_mfu).c_str() : "", 100 * e.mfu, to_gib(e.peak_memory),
                r.plan.cluster.gpu.memory_gib, e.fits ? "" : " (over budget)");
    if (r.measured_memory_gib) {
      const double est = to_gib(e.peak_memory);
      std::printf("      memory: measured %.1f GiB, weft %.1f GiB (%+.1f%%)\n", *r.measured_memory_gib, est,
                  100 * (est / *r.measured_memory_gib - 1));
      sum.memory.add(100 * (est / *r.measured_memory_gib - 1));
    }
    if (breakdown) {
      const TimeBreakdown& b = e.breakdown;
      std::printf("      step %.3f s = compute %.3f, recompute %.3f, tp %.3f, cp %.3f, dp %.3f (exposed %.3f), zero3 "
                  "gather exposed %.3f, p2p %.3f, embedding %.3f, bubble %.3f, optimizer %.3f; measured step %.3f s\n",
                  e.step_time.value(), b.compute.value(), b.recompute.value(), b.tp_comm.value(), b.cp_comm.value(),
                  b.dp_comm.value(), b.dp_exposed.value(), b.zero3_gather.value(), b.p2p.value(), b.embedding.value(),
                  b.bubble.value(), b.optimizer.value(), e.step_time.value() * t / r.measured);
    }
    sum.own.add(err);
    sum.megatron.add(err_m);
    sum.mfu_points.add(100 * e.mfu - meas_mfu);
    sum.by_seq[bucket(r.plan.train.seq)].add(err);
  }

  std::printf("\nerror of the predicted tokens/s/GPU, per set: mean absolute, mean signed (+ = weft too fast)\n");
  for (const std::string& name : order) {
    const SetSummary& s = sets.at(name);
    std::printf("  %-18s %3d runs  %s traits: %5.1f %%, %+6.1f %%   Megatron's: %5.1f %%, %+6.1f %%   MFU weft - "
                "measured %+5.1f points\n",
                name.c_str(), s.own.n, s.framework.c_str(), s.own.mae(), s.own.mean(), s.megatron.mae(),
                s.megatron.mean(), s.mfu_points.mean());
    if (s.memory.n > 0)
      std::printf("  %-18s %3d runs  peak memory against the measured reading: mean %+5.1f %%, mean absolute %4.1f %%\n",
                  name.c_str(), s.memory.n, s.memory.mean(), s.memory.mae());
  }
  std::printf("\nllm-foundry by sequence length (the set's traits): mean absolute, mean signed\n");
  for (const std::string& name : order) {
    if (name.rfind("llm-foundry", 0) != 0) continue;
    const SetSummary& s = sets.at(name);
    for (int b = 0; b < 3; ++b) {
      auto it = s.by_seq.find(b);
      if (it == s.by_seq.end()) continue;
      std::printf("  %-18s seq %-7s %3d runs  %5.1f %%, %+6.1f %%\n", name.c_str(), kBuckets[b], it->second.n,
                  it->second.mae(), it->second.mean());
    }
  }

  if (example) {
    std::printf("\nREADME example: weft plan --model llama-2-7b --cluster a100-80gb --gpus 8 --seq 4096 "
                "--global-batch 512\n");
    double mfu = 0, mfu_tt = 0;
    const bool ok = readme_example("as the CLI runs it (no --framework: Megatron's traits, weft's runtime's space)",
                                   std::nullopt, &mfu);
    const bool ok_tt = readme_example("with --framework torchtitan", Framework::kTorchtitan, &mfu_tt);
    if (!ok || !ok_tt) return 1;
    std::printf("  published MFU of comparable runs (bf16 on A100-80GB; each source's own FLOP count):\n");
    mfu_range("torchtitan, Llama 2 and 3 (8B-70B), 64 A100, FSDP2", *runs,
              [](const published::Run& r) { return r.set == "torchtitan-a100"; });
    mfu_range("llm-foundry, MPT-7B, 8 A100, FSDP, seq 1-64K", *runs, [](const published::Run& r) {
      return r.set == "llm-foundry-a100" && r.plan.model.name == "mpt-7b";
    });
    mfu_range("llm-foundry, MPT-7B, 8 A100, FSDP, seq 4K", *runs, [](const published::Run& r) {
      return r.set == "llm-foundry-a100" && r.plan.model.name == "mpt-7b" && r.plan.train.seq == 4096;
    });
    mfu_range("llm-foundry, MPT 1B-13B, 8 A100, FSDP, seq 2-8K", *runs, [](const published::Run& r) {
      const std::string& n = r.plan.model.name;
      return r.set == "llm-foundry-a100" && (n == "mpt-1b" || n == "mpt-3b" || n == "mpt-7b" || n == "mpt-13b") &&
             r.plan.train.seq >= 2048 && r.plan.train.seq <= 8192;
    });
    mfu_range("flash-attn GPT3-2.7B, 8 A100, ZeRO-1, fused, seq 2K", *runs,
              [](const published::Run& r) { return r.set == "flash-attention-a100"; });
    // The highest A100 MFU weft knows of, a headline without the run's settings (so not costed):
    // FlashAttention-2 (Dao 2023, abstract): GPT-style training "up to 225 TFLOPs/s per A100 GPU
    // (72% model FLOPs utilization)", fused kernels on 8 A100-80GB, GPT3-2.7B at seq 8K.
    std::printf("    %-52s published 72 %% (225 TFLOP/s; the highest published A100 MFU)\n",
                "FlashAttention-2 paper, GPT3-2.7B, 8 A100, seq 8K");
  }
  return 0;
}
