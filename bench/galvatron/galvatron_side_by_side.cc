// Galvatron vs weft on Galvatron's four published Llama-2-7B cases (global batch 64, seq 2048,
// bf16; reference/galvatron/SEARCH_AND_COST_MODEL.md §4). One row per case:
//   Galvatron     its chosen plan's throughput and its search's wall time (from the reference file;
//                 the throughput is also recomputed here from its strategy file with weft's
//                 Galvatron-compatible model, column "check")
//   weft G-space  weft's search restricted to Galvatron's space, under the Galvatron-compatible model
//   weft G-model  weft's own space (uneven stages, GPipe) under the same model, task by task; what
//                 that model cannot cost (ZeRO-1, cp, interleaving) drops out; the better of this
//                 search and the G-space one (time: both)
//   weft own      weft's own space under weft's own model calibrated from the same profiles, with
//                 Galvatron's plan costed by that model beside it
// Usage: weft_bench_galvatron [--repeat N] [--memory-step MIB] [--rerank K]
//   search times: the best of N runs (default 3); the layer DP's memory step (default 4 MiB); K plans
//   re-ranked by the own-space searches (0: the search's default)
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "weft/galvatron/calibrate.h"
#include "weft/galvatron/cost_model.h"
#include "weft/galvatron/model_config.h"
#include "weft/galvatron/search.h"
#include "weft/galvatron/strategy.h"
#include "weft/spec/presets.h"

using namespace weft;
using namespace weft::galvatron;

namespace {

struct Case {
  const char* name;
  int nodes;
  double memory_gb;
  const char* file;
  // SEARCH_AND_COST_MODEL.md §4 (Galvatron's engine at cea12ff on a 2-core machine).
  double galvatron_samples_per_s;
  double galvatron_wall_lo, galvatron_wall_hi;
};

const Case kCases[] = {
    {"A36", 1, 36, "galvatron_config_llama2-7b_1nodes_8gpus_per_node_36GB_bf16.json", 16.53, 118.4, 124.9},
    {"A80", 1, 80, "galvatron_config_llama2-7b_1nodes_8gpus_per_node_80GB_bf16.json", 18.14, 281.8, 300.1},
    {"B36", 2, 36, "galvatron_config_llama2-7b_2nodes_8gpus_per_node_36GB_bf16.json", 31.19, 183.6, 190.5},
    {"B80", 2, 80, "galvatron_config_llama2-7b_2nodes_8gpus_per_node_80GB_bf16.json", 35.38, 417.1, 447.1},
};

template <class T>
T must(Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, r.error().message.c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string describe(const Plan& p) {
  std::string s = "pp" + std::to_string(p.train.pp) + " m" + std::to_string(p.train.micro_batches);
  if (p.train.vp > 1) s += " vp" + std::to_string(p.train.vp);
  std::string first = label(p.stages[0].layers[0]);
  bool uniform = p.uniform();
  s += " " + first + (uniform ? "" : " ...");
  if (p.train.pp > 1) {
    s += " [";
    for (size_t i = 0; i < p.stages.size(); ++i) s += (i ? "," : "") + std::to_string(p.stages[i].num_layers());
    s += "]";
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 3;
  double step = 0;
  int rerank = 0;  // 0: search_galvatron_space's default (Galvatron's 1 MB)
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--memory-step") == 0) step = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--rerank") == 0) rerank = std::atoi(argv[i + 1]);
  }
  const std::string dir = WEFT_GALVATRON_DIR;
  const ModelConfig mc = must(read_model_yaml(dir + "/llama2-7b.yaml"), "model");
  const ModelSpec model = must(to_model_spec(mc), "model");

  std::printf("Galvatron vs weft, Llama-2-7B, global batch 64, seq 2048, bf16 (samples/s; search wall s)\n\n");
  std::printf("%-4s | %-8s %-7s %-11s | %-8s %-7s %-7s %-8s %-8s | %-8s %-7s | %-8s %-8s %-7s\n", "case", "Galv",
              "check", "Galv s", "G-space", "s", "cpu s", "speedup", "vs Galv", "G-model", "s", "own", "Galv@own",
              "s");
  std::vector<std::string> details;
  for (const Case& c : kCases) {
    auto base = must(load_cluster("a100-80gb"), "cluster");
    ClusterOverrides o;
    o.gpus = c.nodes * 8;
    o.gpus_per_node = 8;
    o.memory_gb = c.memory_gb;
    const ClusterSpec cluster = must(apply_overrides(base, o), "cluster");
    ProfileQuery q;
    q.model_name = mc.model_size;
    q.nodes = c.nodes;
    q.gpus_per_node = 8;
    const Profiles prof = must(load_profiles(dir, q), "profiles");
    const GalvatronCostModel gcm(prof, mc.hidden_size);

    // Galvatron's own plan under the Galvatron-compatible model.
    const Plan gplan = must(import_strategy(read_json_file(dir + "/searched/" + c.file), model, cluster, 2048), "import");
    const GalvatronEstimate gest = must(gcm.estimate_plan(gplan), "estimate");

    SearchOptions so;
    so.seq = 2048;
    so.global_batch = 64;
    so.dtype = DType::kBf16;
    if (step > 0) so.memory_step_mib = step;

    // weft in Galvatron's space.
    double best_wall = 1e30, best_cpu = 1e30;
    GalvatronSpaceResult gs;
    for (int r = 0; r < repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::clock_t c0 = std::clock();
      gs = must(search_galvatron_space(model, cluster, gcm, so), "galvatron-space search");
      best_wall = std::min(best_wall, seconds_since(t0));
      best_cpu = std::min(best_cpu, static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
    }
    const double gs_tput = 64.0 / gs.estimate.iteration_s;

    // weft's own space under the Galvatron-compatible model (task by task, as above).
    double own_g_wall = 1e30;
    GalvatronSpaceResult og;
    for (int r = 0; r < repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      SearchOptions wo = so;
      wo.rerank = rerank;
      og = must(search_galvatron_space(model, cluster, gcm, wo, /*galvatron_space=*/false), "weft-space search");
      own_g_wall = std::min(own_g_wall, seconds_since(t0));
    }
    // weft's space contains Galvatron's: its best is the better of the two searches (the wider
    // search alone can rank a plan of the narrower space out), and its time is both searches'.
    if (gs.estimate.iteration_s < og.estimate.iteration_s) og.best = gs.best, og.estimate = gs.estimate;
    own_g_wall += best_wall;
    const double own_g_tput = 64.0 / og.estimate.iteration_s;
    const Plan& own_g_plan = og.best;

    // weft's own model calibrated from the same profiles, weft's own space.
    const auto own = must(make_calibrated_model(prof, model, cluster), "calibrated model");
    double own_wall = 1e30, own_tput = 0;
    Plan own_plan;
    for (int r = 0; r < repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      auto res = must(search(model, own.cluster, *own.model, so), "own-model search");
      own_wall = std::min(own_wall, seconds_since(t0));
      if (!res.top.empty()) {
        own_plan = res.top[0];
        own_tput = 64.0 / res.top[0].predicted.step_time_s;
      }
    }
    Plan gplan_own = gplan;
    gplan_own.cluster = own.cluster;
    const Estimate galv_at_own = estimate(gplan_own, *own.model);
    const double galv_at_own_tput = 64.0 / galv_at_own.step_time.value();

    char wall[32];
    std::snprintf(wall, sizeof wall, "%.0f-%.0f", c.galvatron_wall_lo, c.galvatron_wall_hi);
    std::printf(
        "%-4s | %-8.2f %-7.2f %-11s | %-8.2f %-7.3f %-7.3f %-7.0fx %+7.2f%% | %-8.2f %-7.3f | %-8.2f %-8.2f %-7.3f\n",
                c.name, c.galvatron_samples_per_s, gest.samples_per_s, wall, gs_tput, best_wall, best_cpu,
                c.galvatron_wall_lo / best_wall, 100.0 * (gs_tput / gest.samples_per_s - 1), own_g_tput, own_g_wall,
                own_tput, galv_at_own_tput, own_wall);
    details.push_back(std::string(c.name) + "  Galvatron: " + describe(gplan) + "\n      weft G-space: " +
                      describe(gs.best) + " (" + to_string(gs.estimate.mode) + ")\n      weft G-model: " +
                      describe(own_g_plan) + "\n      weft own:     " + describe(own_plan));
  }
  std::printf("\nGalv: Galvatron's reported throughput; check: its strategy file under weft's Galvatron-compatible"
              " model.\nspeedup: Galvatron's fastest search wall time / weft's wall time (best of %d runs, this machine);\n"
              "cpu s: weft's search CPU time (the wall time includes waiting on a loaded machine).\n"
              "vs Galv: weft G-space throughput over Galvatron's, same model. Galv@own: Galvatron's plan under"
              " weft's own model.\n\n",
              repeat);
  for (const auto& d : details) std::printf("%s\n", d.c_str());
  return 0;
}
