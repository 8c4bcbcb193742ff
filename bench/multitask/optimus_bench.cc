// Optimus's cases (USENIX ATC'25, Tables 5 and 7 and its 8-GPU model) on weft's cost model: the
// encoder packed into the LLM's bubbles (weft/multitask/optimus.h) against the encoder's layers in
// the LLM's first pipeline stage (Megatron-LM's way), on the same LLM plan and the same simulator.
// ViT-22B + GPT-175B at a global batch of 1536 on 1536, 2048 and 3072 GPUs, and ViT-3B + GPT-11B
// on 8 GPUs at a batch of 16, beside the published figures: the strong-scaling runs on Hopper
// GPUs (H100-class: the first preset), the 8-GPU model on A100s as Optimus ran it (the second).
//
//   weft_bench_optimus [strong-scaling preset, default h100-80gb] [8-GPU preset, default a100-80gb]
#include <cstdio>
#include <string>

#include "weft/cost/analytic.h"
#include "weft/multitask/optimus.h"
#include "weft/spec/presets.h"

using namespace weft;
using namespace weft::multitask;

int main(int argc, char** argv) {
  const std::string presets[] = {argc > 1 ? argv[1] : "h100-80gb", argc > 2 ? argv[2] : "a100-80gb"};
  ClusterSpec bases[2];
  for (int k = 0; k < 2; ++k) {
    Result<ClusterSpec> b = load_cluster(presets[k]);
    if (!b.ok()) {
      std::fprintf(stderr, "%s\n", b.error().message.c_str());
      return 1;
    }
    bases[k] = *b;
  }
  // Published (Optimus, ATC'25): Table 5 (iteration s, Megatron-LM and Optimus), Table 7 (Eff
  // coarse / fine, micro-batches per pipeline), §5.3 (the 8-GPU model, on A100s).
  struct Case {
    const char* file;
    int gpus;
    double megatron_s, optimus_s, eff_coarse, eff_fine;  // < 0: not published
    int published_m;
    int preset;      // 0: strong scaling, 1: the 8-GPU model
    int llm_pp = 0;  // > 0: the LLM's search held to this pipeline degree
  };
  const Case cases[] = {{"vit-22b-gpt-175b.json", 1536, 10.65, 9.80, 0.343, 0.575, 32, 0},
                        {"vit-22b-gpt-175b.json", 2048, 8.26, 7.29, 0.458, 0.693, 24, 0},
                        {"vit-22b-gpt-175b.json", 3072, 5.91, 4.87, 0.687, 0.850, 16, 0},
                        {"vit-3b-gpt-11b.json", 8, 3.42, 2.78, -1, -1, 0, 1},
                        // weft's best LLM plan on 8 GPUs has no pipeline, so no bubbles: the same
                        // model with the LLM held to 4 stages, to show the schedule where there are.
                        {"vit-3b-gpt-11b.json", 8, 3.42, 2.78, -1, -1, 0, 1, 4}};
  const AnalyticCostModel cm;
  SearchOptions opt;
  opt.top_k = 1;
  std::printf("Optimus's cases on weft's analytic model (seconds per step)\n\n");
  std::printf("%-17s %-15s %5s  %-32s %-12s %9s %9s %7s %6s %6s %9s %8s %8s %8s %8s\n", "case", "GPU", "GPUs",
              "LLM plan", "encoder", "1st stage", "bubbles", "speedup", "Eff c", "Eff f", "LLM alone", "mem GiB", "1st mem", "plan ms", "search");
  for (const Case& c : cases) {
    Result<TaskSpec> t = load_tasks(std::string(WEFT_DATA_DIR) + "/tasks/" + c.file);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.error().message.c_str());
      return 1;
    }
    const ClusterSpec& base = bases[c.preset];
    ClusterOverrides o;
    o.gpus = c.gpus;
    if (c.gpus < base.gpus_per_node) o.gpus_per_node = c.gpus;
    Result<ClusterSpec> cl = apply_overrides(base, o);
    if (!cl.ok()) {
      std::fprintf(stderr, "%s\n", cl.error().message.c_str());
      return 1;
    }
    SearchOptions so = opt;
    if (c.llm_pp > 0) so.pp_degrees = {c.llm_pp};
    Result<OptimusPlan> p = plan_optimus(*t, *cl, cm, so);
    if (!p.ok()) {
      std::printf("%-17s %-15s %5d  %s\n", t->name.c_str(), base.gpu.name.c_str(), c.gpus, p.error().message.c_str());
      continue;
    }
    const TrainSettings& tr = p->llm_plan.train;
    const std::string llm = "pp" + std::to_string(tr.pp) + (tr.vp > 1 ? " vp" + std::to_string(tr.vp) : "") + " tp" +
                            std::to_string(p->llm_mp) + " dp" +
                            std::to_string(p->llm_plan.stages.front().layers.front().dp) + " m" +
                            std::to_string(tr.micro_batches) + " " + to_string(tr.schedule);
    const std::string enc = "dp" + std::to_string(p->layout.dp) + " pp" + std::to_string(p->layout.pp) + " tp" +
                            std::to_string(p->layout.tp) +
                            (p->layout.recompute == Recompute::kNone ? "" : " rc");
    std::printf("%-17s %-15s %5d  %-32s %-12s %9.3f %9.3f %6.3fx %5.1f%% %5.1f%% %9.3f %8.1f %7.1f%s %8.1f %8.0f\n",
                t->name.c_str(), base.gpu.name.c_str(), c.gpus, llm.c_str(), enc.c_str(), p->first_stage_s, p->step_time_s(),
                p->first_stage_s / p->step_time_s(), 100 * p->coarse.eff(), 100 * p->fine.eff(), p->fine.llm_step_s,
                p->llm_memory_gib + p->encoder_memory_gib, p->first_stage_memory_gib,
                p->first_stage_memory_gib > p->memory_budget_gib ? "*" : " ", p->plan_ms, p->search_ms);
    if (c.llm_pp > 0) std::printf("%-17s %-15s %5s  (the LLM held to pp %d)\n", "", "", "", c.llm_pp);
    std::printf("%-17s %-15s %5s  published: Megatron-LM %.2f s, Optimus %.2f s (%.3fx)", "", "", "", c.megatron_s, c.optimus_s,
                c.megatron_s / c.optimus_s);
    if (c.eff_fine >= 0)
      std::printf(", Eff %.1f%% / %.1f%% at %d micro-batches", 100 * c.eff_coarse, 100 * c.eff_fine, c.published_m);
    std::printf("\n");
  }
  std::printf("\n1st stage: the encoder's layers in the LLM's first pipeline stage (Megatron-LM's way); bubbles:\n"
              "weft's fine bubble schedule; Eff c / f: the share of the encoder's forward and backward compute\n"
              "inside the LLM's idle time, coarse (warm-up and cool-down only, whole layers) and fine (every\n"
              "gap, kernel chunks); mem GiB: per device with the encoder in the bubbles; 1st mem: the first\n"
              "stage's devices with the whole encoder on them (* over the device's budget: Megatron-LM would\n"
              "need another LLM plan). The published runs are measured; weft's are its model's\n"
              "(docs/multitask.md).\n");
  return 0;
}
