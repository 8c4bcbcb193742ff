// weft_bench_varlen: the batch planner on FlexSP's experiment (docs/varlen.md): FlexSP's published
// cost model and 7B constants, its published Wikipedia document lengths
// (data/reference/flexsp/wikipedia_lengths.txt), 20 consecutive global
// batches in four settings; per setting the summed step time of weft's plans, of one group size for
// every document (static: the smallest that fits the run's longest document) and of the best single
// size per batch (adaptive), their ratios, and weft's planning time per step (median, max).
//
//   build/bin/weft_bench_varlen [--lengths FILE] [--steps N] [--first-step K] [--memory-gb G]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "weft/varlen/lengths.h"
#include "weft/varlen/planner.h"
#include "weft/varlen/seq_cost.h"

using namespace weft;
using namespace weft::varlen;

namespace {

struct Setting {
  int gpus, global_batch;
  std::int64_t max_seq;
};

}  // namespace

int main(int argc, char** argv) {
  std::string path = std::string(WEFT_DATA_DIR) + "/reference/flexsp/wikipedia_lengths.txt";
  int steps = 20, first = 3;
  double memory_gb = 30;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--lengths") && i + 1 < argc) path = argv[++i];
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--first-step") && i + 1 < argc) first = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--memory-gb") && i + 1 < argc) memory_gb = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "usage: weft_bench_varlen [--lengths FILE] [--steps N] [--first-step K] [--memory-gb G]\n");
      return 2;
    }
  }
  auto lengths = read_lengths(path);
  if (!lengths.ok()) {
    std::fprintf(stderr, "weft_bench_varlen: %s\n", lengths.error().message.c_str());
    return 1;
  }
  const FlexspConstants c = *flexsp_constants("gpt-7b");
  const Setting settings[] = {{64, 512, 192 * 1024}, {64, 512, 384 * 1024}, {32, 256, 128 * 1024}, {16, 128, 64 * 1024}};
  std::printf("FlexSP's cost model (gpt-7b), memory limit %.0f GB, %d batches from batch %d of %s\n", memory_gb, steps,
              first, path.c_str());
  std::printf("%-22s %8s %10s %10s %10s %8s %8s %9s %9s\n", "GPUs / batch / max", "static", "static s", "adaptive s",
              "weft s", "vs stat", "vs adapt", "plan med", "plan max");
  for (const Setting& st : settings) {
    auto b = draw_batches(*lengths, st.global_batch, steps, first, st.max_seq, 0);
    if (!b.ok()) {
      std::fprintf(stderr, "weft_bench_varlen: %s\n", b.error().message.c_str());
      return 1;
    }
    auto cost = flexsp_seq_cost(c, st.gpus, memory_gb);
    PlannerOptions o;
    const int degree = min_group_size(*cost, b->longest, o);
    double t_static = 0, t_adapt = 0, t_weft = 0;
    std::vector<double> ms;
    for (const std::vector<std::int64_t>& batch : b->steps) {
      auto r = compare_step(batch, *cost, degree, o);
      if (!r.ok()) {
        std::fprintf(stderr, "weft_bench_varlen: %s\n", r.error().message.c_str());
        return 1;
      }
      t_static += r->stat.time, t_adapt += r->adaptive.time, t_weft += r->weft.time;
      ms.push_back(r->plan_ms);
    }
    std::sort(ms.begin(), ms.end());
    char name[64];
    std::snprintf(name, sizeof name, "%d / %d / %lldK", st.gpus, st.global_batch,
                  static_cast<long long>(st.max_seq / 1024));
    std::printf("%-22s %8s %10.1f %10.1f %10.1f %7.2fx %7.2fx %7.1fms %7.1fms\n", name,
                ("SP" + std::to_string(degree)).c_str(), t_static, t_adapt, t_weft, t_static / t_weft, t_adapt / t_weft,
                ms[ms.size() / 2], ms.back());
  }
  return 0;
}
