// Search wall time on the five cases of docs/search.md ("Speed"), with weft's analytic cost model,
// one thread; then the mixed-device cases of docs/search.md §9 (hetero_search). Built with Google Benchmark when it is installed (then the usual --benchmark_* flags
// apply), otherwise as a plain program; either way it ends with a summary table that includes the
// ratio to Galvatron's own search time on its own Llama-2-7B / 8-GPU settings (118-125 s and 282-300 s
// measured on this machine class, data/reference/galvatron/README.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "weft/cost/analytic.h"
#include "weft/search/hetero.h"
#include "weft/search/search.h"
#include "weft/spec/mixed.h"
#include "weft/spec/presets.h"

#ifdef WEFT_HAVE_BENCHMARK
#include <benchmark/benchmark.h>
#endif

namespace {

struct Case {
  const char* name;
  const char* model;
  const char* cluster;
  int gpus, seq, batch;
  double memory_gb = 0;       // --memory-gb (0: the preset's)
  double galvatron_s = 0;     // Galvatron's own search time for this exact setting, if measured
};

// Batch sizes as trained by the models' authors where published (GPT-3: 1536 x 2048 tokens, Brown
// et al. 2020; Llama-3-405B: 16M tokens at 8192, Dubey et al. 2024); Llama-2: 4M tokens (1024 x 4096,
// Touvron et al. 2023) at scale, the README default 512 x 4096 on one node.
const Case kCases[] = {
    {"llama-2-7b/8xA100", "llama-2-7b", "a100-80gb", 8, 4096, 512},
    {"llama-2-70b/64xA100", "llama-2-70b", "a100-80gb", 64, 4096, 1024},
    {"llama-2-70b/1024xA100", "llama-2-70b", "a100-80gb", 1024, 4096, 1024},
    {"gpt3-175b/1024xA100", "gpt3-175b", "a100-80gb", 1024, 2048, 1536},
    {"llama-3-405b/16384xH100", "llama-3-405b", "h100-80gb", 16384, 8192, 2048},
    // A MoE of alternating banded and full attention layers (36 layer groups of two shapes).
    {"gpt-oss-120b/64xH100", "gpt-oss-120b", "h100-80gb", 64, 4096, 512},
    {"deepseek-v3/2048xH100", "deepseek-v3", "h100-80gb", 2048, 4096, 4096},
    // Galvatron's own settings (seq 2048, global batch 64, bf16, one node of 8; 36 GB and 80 GB
    // per GPU), where reference/galvatron/README.md measured its search at 118-125 s and 282-300 s
    // on this machine class. (Its space is narrower: fixed batch, even stages, no ZeRO-1 / cp.)
    {"galvatron-A36 7b/8 2k/64", "llama-2-7b", "a100-80gb", 8, 2048, 64, 36, 121.0},
    {"galvatron-A80 7b/8 2k/64", "llama-2-7b", "a100-80gb", 8, 2048, 64, 80, 291.0},
};

struct Loaded {
  weft::ModelSpec model;
  weft::ClusterSpec cluster;
  weft::SearchOptions opt;
};

Loaded load(const Case& c) {
  Loaded l;
  auto m = weft::load_model(c.model);
  auto cl = weft::load_cluster(c.cluster);
  if (!m.ok() || !cl.ok()) {
    std::fprintf(stderr, "cannot load %s / %s\n", c.model, c.cluster);
    std::exit(1);
  }
  l.model = *m;
  weft::ClusterOverrides o;
  o.gpus = c.gpus;
  o.memory_gb = c.memory_gb;
  auto co = weft::apply_overrides(*cl, o);
  if (!co.ok()) {
    std::fprintf(stderr, "%s\n", co.error().message.c_str());
    std::exit(1);
  }
  l.cluster = *co;
  l.opt.seq = c.seq;
  l.opt.global_batch = c.batch;
  return l;
}

struct Figures {
  double best_s = 1e30, median_s = 0, cpu_s = 0;  // wall (best, median) and median CPU time
  weft::SearchResult last;
};

Figures run_case(const Case& c, int reps) {
  const Loaded l = load(c);
  const weft::AnalyticCostModel cm;
  std::vector<double> t, cpu;
  Figures f;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    auto r = weft::search(l.model, l.cluster, cm, l.opt);
    cpu.push_back(static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name, r.error().message.c_str());
      std::exit(1);
    }
    f.last = std::move(r).value();
  }
  std::sort(t.begin(), t.end());
  f.best_s = t.front();
  f.median_s = t[t.size() / 2];
  std::sort(cpu.begin(), cpu.end());
  f.cpu_s = cpu[cpu.size() / 2];
  return f;
}

void summary(int reps) {
  std::printf("\n%-24s %8s %8s %8s %7s %7s %6s  %s\n", "case", "median_s", "best_s", "cpu_s", "configs",
              "costs", "DPs", "best plan");
  for (const Case& c : kCases) {
    const Figures f = run_case(c, reps);
    std::string best = "nothing fits";
    if (!f.last.top.empty()) {
      const weft::Plan& p = f.last.top.front();
      char buf[160];
      std::snprintf(buf, sizeof buf, "pp%d %s m%d, %.3f s/step, MFU %.1f%%", p.train.pp,
                    weft::to_string(p.train.schedule), p.train.micro_batches, p.predicted.step_time_s,
                    100 * p.predicted.mfu);
      best = buf;
    }
    std::printf("%-24s %8.4f %8.4f %8.4f %7lld %7lld %6lld  %s\n", c.name, f.median_s, f.best_s, f.cpu_s,
                f.last.stats.configurations, f.last.stats.layer_costs, f.last.stats.searched, best.c_str());
    if (c.galvatron_s > 0)
      std::printf("%-24s Galvatron's search: %.0f s; weft is %.0fx faster (median wall)\n", "", c.galvatron_s,
                  c.galvatron_s / f.median_s);
  }
}

// Mixed devices (docs/search.md §9): hetero_search, its wall time (it runs its three homogeneous
// searches on threads) and the step against its two baselines.
struct MixedCase {
  const char* name;
  const char* model;
  const char* cluster;  // --cluster as given
  const char* straggler;  // --straggler values separated by spaces, or ""
  int seq, batch;
  int gpus = 8;           // for a one-kind preset: its GPU count
};
// The last five: straggler situations of the kind Malleus (arXiv 2410.13333) plans for, per-GPU
// straggling rates on a 64-GPU job (its own scenarios' figures are not public beyond the abstract):
// one GPU mildly and badly slow, a whole node slow, slow GPUs spread over four nodes.
const MixedCase kMixed[] = {
    {"llama-2-7b/8xA100+8xH100", "llama-2-7b", "a100-80gb:1,h100-80gb:1", "", 4096, 64},
    {"llama-2-70b/512xA100+512xH100", "llama-2-70b", "a100-80gb:64,h100-80gb:64", "", 4096, 1024},
    {"llama-2-7b/8xH100, GPU 1 2x slow", "llama-2-7b", "h100-80gb", "1:2", 4096, 64},
    {"llama-2-70b/64xH100, 1 GPU 1.5x", "llama-2-70b", "h100-80gb", "9:1.5", 4096, 512, 64},
    {"llama-2-70b/64xH100, 1 GPU 4x", "llama-2-70b", "h100-80gb", "9:4", 4096, 512, 64},
    {"llama-2-70b/64xH100, node 1 2x", "llama-2-70b", "h100-80gb",
     "8:2 9:2 10:2 11:2 12:2 13:2 14:2 15:2", 4096, 512, 64},
    {"llama-2-70b/64xH100, 4 nodes 1 GPU 3x", "llama-2-70b", "h100-80gb", "3:3 19:3 35:3 51:3", 4096, 512, 64},
};

void mixed_summary(int reps) {
  std::printf("\n%-38s %8s %8s %9s %9s %9s %9s  %s\n", "mixed devices", "median_s", "best_s", "step_s", "uniform_s",
              "subset_s", "healthy_s", "best plan");
  const weft::AnalyticCostModel cm;
  for (const MixedCase& c : kMixed) {
    auto m = weft::load_model(c.model);
    auto d = weft::load_mixed_cluster(c.cluster);
    if (!m.ok() || !d.ok()) {
      std::fprintf(stderr, "cannot load %s / %s\n", c.model, c.cluster);
      std::exit(1);
    }
    weft::MixedCluster dev = *d;
    if (dev.groups.size() == 1) {  // a one-kind preset: a node of 8
      weft::ClusterOverrides o;
      o.gpus = c.gpus;
      dev.groups[0] = *weft::apply_overrides(dev.groups[0], o);
    }
    {
      std::istringstream in(c.straggler);
      for (std::string one; in >> one;)
        if (!weft::add_straggler(dev, one).ok()) std::exit(1);
    }
    weft::SearchOptions opt;
    opt.seq = c.seq;
    opt.global_batch = c.batch;
    std::vector<double> t;
    weft::HeteroResult last;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      auto r = weft::hetero_search(*m, dev, cm, opt);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.name, r.error().message.c_str());
        std::exit(1);
      }
      last = std::move(r).value();
    }
    std::sort(t.begin(), t.end());
    std::string best = "nothing fits";
    double step = 0;
    if (!last.top.empty()) {
      const weft::Plan& p = last.top.front();
      step = p.predicted.step_time_s;
      char buf[160];
      std::snprintf(buf, sizeof buf, "pp%d m%d %s", p.train.pp, p.train.micro_batches,
                    p.train.dp_shares.empty() ? "even shares" : "uneven shares");
      best = buf;
    }
    // With stragglers on one kind: the best plan with every GPU at full speed (what the aware plan
    // can at most recover).
    std::string healthy = "-";
    if (dev.groups.size() == 1) {
      auto h = weft::search(*m, dev.groups[0], cm, opt);
      if (h.ok() && !h->top.empty()) healthy = std::to_string(h->top.front().predicted.step_time_s).substr(0, 6);
    }
    std::printf("%-38s %8.4f %8.4f %9.3f %9.3f %9.3f %9s  %s\n", c.name, t[t.size() / 2], t.front(), step,
                last.uniform_s, last.fastest_subset_s, healthy.c_str(), best.c_str());
  }
}

}  // namespace

#ifdef WEFT_HAVE_BENCHMARK
static void BM_Search(benchmark::State& state) {
  const Case& c = kCases[state.range(0)];
  const Loaded l = load(c);
  const weft::AnalyticCostModel cm;
  weft::SearchStats stats;
  for (auto _ : state) {
    auto r = weft::search(l.model, l.cluster, cm, l.opt);
    benchmark::DoNotOptimize(r);
    if (r.ok()) stats = r->stats;
  }
  state.SetLabel(c.name);
  state.counters["configs"] = static_cast<double>(stats.configurations);
  state.counters["layer_costs"] = static_cast<double>(stats.layer_costs);
  state.counters["searched"] = static_cast<double>(stats.searched);
}
BENCHMARK(BM_Search)->DenseRange(0, static_cast<int>(std::size(kCases)) - 1)->Unit(benchmark::kMillisecond)->MinTime(1.0);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  summary(5);
  mixed_summary(3);
  return 0;
}
#else
int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  summary(reps);
  mixed_summary(std::max(1, reps / 2));
  return 0;
}
#endif
