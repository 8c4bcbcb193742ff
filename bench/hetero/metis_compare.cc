// weft_bench_metis: weft against Metis's published search log for its cluster of 4 T4 and 12 A100
// (data/reference/metis: SamsungLabs/Metis results/hetero_cost_model, its sample A100 profiles;
// outputs compared, no code used). Prints:
//   - the compute time scale Metis's nine A100 profiles imply (one factor over weft's kernel model,
//     fitted on the tensor-parallel-free ones) and every profile against weft with it;
//   - every plan of the log weft can express (stages of equal GPU counts, each with a transformer
//     block), with Metis's estimate and weft's, and both ranks; the Spearman correlation;
//   - the optimizer time scale Metis's profiles imply (its optimizer steps against weft's);
//   - weft's own search on the same devices against the best of those plans on weft's model.
// Metis's log holds its cost model's estimates, not measured times. Usage: weft_bench_metis [--dir DIR]
// [--t4-ratio R] [--vocab-scale F]: the last two a what-if towards Metis's own figures (a T4 R times
// slower than an A100 per block, the head and embedding at F of the vocabulary;
// metis::towards_metis_figures), never the default.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "metis/metis_plans.h"
#include "weft/core/stats.h"
#include "weft/cost/analytic.h"
#include "weft/plan/strategy.h"
#include "weft/search/hetero.h"

using namespace weft;

namespace {

std::string describe(const metis::Row& r) {
  std::string s;
  for (size_t i = 0; i < r.order.size(); ++i) s += (i ? ">" : "") + r.order[i];
  s += " [";
  for (size_t i = 0; i < r.gpus.size(); ++i)
    s += (i ? " " : "") + std::to_string(r.dp_tp[i].first) + "x" + std::to_string(r.dp_tp[i].second);
  s += "] m" + std::to_string(r.micro_batches) + " cut";
  for (int b : r.partition) s += " " + std::to_string(b);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = std::string(WEFT_DATA_DIR) + "/reference/metis";
  double t4_ratio = 0, vocab_scale = 0;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!std::strcmp(argv[i], "--t4-ratio") && i + 1 < argc) t4_ratio = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--vocab-scale") && i + 1 < argc) vocab_scale = std::atof(argv[++i]);
  auto s = metis::load_setup(dir);
  if (!s.ok()) {
    std::fprintf(stderr, "weft_bench_metis: %s\n", s.error().message.c_str());
    return 1;
  }
  metis::towards_metis_figures(*s, t4_ratio, vocab_scale);
  const AnalyticCostModel cm(s->options);
  std::printf("Metis's log: %zu plans for %s on %d GPUs (%s), global batch %d, seq %d\n", s->log.rows.size(),
              s->model.name.c_str(), s->devices.total_gpus(), s->devices.name.c_str(), s->log.global_batch,
              s->log.seq);
  std::printf("\nA100 profiles (one transformer block, forward + backward), compute time scale %.3f:\n",
              s->options.compute_time_scale);
  for (int tp : {1, 2, 4})
    for (int bs : {1, 2, 4}) {
      const double measured = metis::profiled_block_ms(dir, tp, bs);
      const double weft = metis::block_ms(s->model, s->devices.groups[1], tp, bs, s->log.seq, s->dtype, s->options);
      std::printf("  tp%d bs%d  Metis %7.2f ms  weft %7.2f ms  %+5.1f %%\n", tp, bs, measured, weft,
                  100 * (weft / measured - 1));
    }
  std::printf("\nA100 optimizer step (whole model, one GPU's shard), optimizer time scale %.3f:\n",
              s->options.optimizer_time_scale);
  for (int tp : {1, 2, 4}) {
    const double measured = metis::profiled_optimizer_ms(dir, tp);
    const double weft = metis::optimizer_ms(s->model, s->devices.groups[1], tp, s->log.seq, s->dtype, s->options);
    std::printf("  tp%d      Metis %7.2f ms  weft %7.2f ms  %+5.1f %%\n", tp, measured, weft, 100 * (weft / measured - 1));
  }
  const metis::Comparison c = metis::compare(*s, cm);
  std::vector<double> mt, wt;
  for (const metis::Costed& k : c.costed) mt.push_back(k.row.cost_ms), wt.push_back(k.weft_ms());
  const std::vector<double> wr = average_ranks(wt), mr = average_ranks(mt);
  std::printf("\nplans weft expresses: %zu (left out: %d repeats, %d with stages of different GPU counts, %d with a "
              "stage of no block)\n",
              c.costed.size(), c.duplicates, c.unequal_stages, c.empty_stages);
  std::printf("  %5s %5s %5s %10s %10s  %-48s %s\n", "Metis", "rank", "weft", "Metis ms", "weft ms", "plan",
              "weft shares");
  for (size_t i = 0; i < c.costed.size(); ++i) {
    const metis::Costed& k = c.costed[i];
    const std::string shares = shares_label(k.plan.train);
    std::printf("  %5d %5g %5g %10.1f %10.1f  %-48s %s\n", k.row.rank, mr[i], wr[i], k.row.cost_ms, k.weft_ms(),
                describe(k.row).c_str(), shares.empty() ? "even" : shares.c_str());
  }
  std::printf("Spearman (Metis's estimate against weft's): %.3f\n", c.spearman);

  auto r = metis::weft_search(*s, cm);
  if (!r.ok() || r->top.empty()) {
    std::fprintf(stderr, "weft_bench_metis: the search found no plan\n");
    return 1;
  }
  const Plan& p = r->top.front();
  double best = 1e30;
  int best_rank = 0;
  for (const metis::Costed& k : c.costed)
    if (k.weft_ms() < best) best = k.weft_ms(), best_rank = k.row.rank;
  const std::string shares = shares_label(p.train);
  std::printf("\nweft's search: %.1f ms (pp%d m%d, layers %s, shares %s) in %.0f ms; the best Metis plan on weft's "
              "model (Metis rank %d) %.1f ms: %.2fx\n",
              p.predicted.step_time_s * 1e3, p.train.pp, p.train.micro_batches, label(p.stages[0].layers[0]).c_str(),
              shares.empty() ? "even" : shares.c_str(), r->stats.wall_s * 1e3, best_rank, best,
              best / (p.predicted.step_time_s * 1e3));
  return 0;
}
