// weft_bench_published: weft's analytic model against published training throughput of real runs
// (data/reference/published_runs.json: torchtitan's FSDP2 runs on A100, NVIDIA's Megatron-Core FP8
// runs on H100 and B200). Prints, per run, the measured tokens/s/GPU, weft's estimate with the run's
// framework traits and with Megatron's, the errors, and the estimated peak memory against the device.
//
// Usage: weft_bench_published [--file PATH]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "reference/published_runs.h"
#include "weft/cost/estimate.h"

int main(int argc, char** argv) {
  using namespace weft;
  std::string path = std::string(WEFT_DATA_DIR) + "/reference/published_runs.json";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--file") && i + 1 < argc) {
      path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: weft_bench_published [--file PATH]\nunknown argument: %s\n", argv[i]);
      return 2;
    }
  }
  auto runs = published::load_runs(path);
  if (!runs.ok()) {
    std::fprintf(stderr, "weft_bench_published: %s\n", runs.error().message.c_str());
    return 2;
  }
  std::map<std::string, std::pair<double, int>> by_set, by_set_megatron;
  std::string set;
  for (const published::Run& r : *runs) {
    if (r.set != set) {
      set = r.set;
      std::printf("\n%s (framework %s)\n", set.c_str(), r.framework.c_str());
      std::printf("  %-44s %10s %10s %8s %10s %8s %14s\n", "run", "measured", "weft", "error", "megatron", "error",
                  "peak / device");
    }
    const Estimate e = estimate(r.plan, AnalyticCostModel(r.options));
    const Estimate m = estimate(r.plan, AnalyticCostModel());
    const double t = published::tokens_per_gpu(r, e), tm = published::tokens_per_gpu(r, m);
    const double err = 100 * (t / r.measured - 1), err_m = 100 * (tm / r.measured - 1);
    std::printf("  %-44s %10.0f %10.0f %+7.1f%% %10.0f %+7.1f%% %6.1f / %5.1f GiB\n", r.label.c_str(), r.measured, t,
                err, tm, err_m, e.peak_memory.value() / (1 << 30), r.plan.cluster.gpu.memory_gib);
    by_set[set].first += std::abs(err);
    by_set[set].second += 1;
    by_set_megatron[set].first += std::abs(err_m);
  }
  std::printf("\nmean absolute error (tokens/s/GPU):\n");
  for (const auto& [name, v] : by_set)
    std::printf("  %-20s %5.1f %% with its framework's traits, %5.1f %% with Megatron's (%d runs)\n", name.c_str(),
                v.first / v.second, by_set_megatron[name].first / v.second, v.second);
  return 0;
}
