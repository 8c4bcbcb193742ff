// weft_bench_vtrain: predicts the iteration time of every run in vTrain's measured data sets
// (reference/vtrain/ground_truth_{single,multi}.csv) with weft's analytic cost model and prints
// the mean absolute percentage error and the Spearman rank correlation per model and overall.
//
// Each row is a GPT-3-style model (FFN 4h, vocabulary 50257, learned positions, GELU, biases,
// tied embeddings) trained by Megatron-DeepSpeed with tensor, data and 1F1B pipeline parallelism,
// full activation recompute, fp16 mixed precision, no gradient bucketing (so the gradient
// all-reduce runs after the backward, not overlapped) and the fused softmax attention of that code
// (no flash attention). Cluster: the A100 preset (its GPU figures and NVLink rate), 8 GPUs per
// node, 800 Gb/s of network per node = 12.5 GB/s per GPU, as in vTrain's validation configs.
//
// It also prints how well weft ranks the configurations of one job: grouped by model, GPU count
// and global batch (the configurations differing in tp, pp, dp and micro-batch), how often weft's
// fastest predicted configuration is the measured fastest, the measured slow-down of its choice
// (regret) and the Spearman rank correlation within a group.
//
// Usage: weft_bench_vtrain [--dir DIR] [--gpu a100-80gb|a100-40gb] [--no-host-overhead] [--rows]
//                          [--groups] [--tables]
//                          [--host-op-us X] [--host-function-us Y] [--compute-time-scale Z]
//                          [--calibrate "h1024 a16 L12 s1024"]
// --groups prints every group, its configurations by measured time with weft's per-step breakdown;
// --tables the signed error by tp, pp, dp, micro-batch size and count, overall and relative to the
// configuration's group, and weft's choice against the best in the groups it gets wrong.
// --calibrate fits the two framework scales (host time, GPU kernel time) on one model's runs and
// reports every other run with them: what a user with a few measured runs of their own framework
// gets.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "weft/core/stats.h"
#include "weft/cost/analytic.h"
#include "weft/cost/estimate.h"
#include "weft/spec/presets.h"

namespace {

using namespace weft;

struct Row {
  int gpus = 0, global_batch = 0, micro_batch = 0, hidden = 0, heads = 0, layers = 0, seq = 0;
  int tp = 1, dp = 1, pp = 1;
  double measured_ms = 0, predicted_ms = 0, peak_gib = 0;
  std::string model;  // group key
  int micro_batches = 1;  // m = global / (dp * micro)
  TimeBreakdown time;     // weft's per-step breakdown (host overhead as configured)
  double gpu_ms = 0;      // predicted step with the host (framework) overhead off
};

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string f;
  while (std::getline(ss, f, ',')) out.push_back(f);
  return out;
}

// Reads a vTrain CSV; `offset` is 1 for the multi-node file (its first column is the size in B).
std::vector<Row> read_rows(const std::string& path, int offset) {
  std::ifstream in(path);
  std::vector<Row> rows;
  if (!in) {
    std::fprintf(stderr, "weft_bench_vtrain: cannot read %s\n", path.c_str());
    return rows;
  }
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto f = split(line);
    if (static_cast<int>(f.size()) < 11 + offset) continue;
    Row r;
    int i = offset;
    r.gpus = std::stoi(f[i++]);
    r.global_batch = std::stoi(f[i++]);
    r.micro_batch = std::stoi(f[i++]);
    r.hidden = std::stoi(f[i++]);
    r.heads = std::stoi(f[i++]);
    r.layers = std::stoi(f[i++]);
    r.seq = std::stoi(f[i++]);
    r.tp = std::stoi(f[i++]);
    r.dp = std::stoi(f[i++]);
    r.pp = std::stoi(f[i++]);
    r.measured_ms = std::stod(f[i++]);
    r.model = "h" + std::to_string(r.hidden) + " a" + std::to_string(r.heads) + " L" + std::to_string(r.layers) +
              " s" + std::to_string(r.seq);
    rows.push_back(r);
  }
  return rows;
}

ModelSpec gpt_model(const Row& r) {
  ModelSpec m;
  m.name = "gpt-" + r.model;
  m.vocab = 50257;
  m.hidden = r.hidden;
  m.tied_embeddings = true;
  m.norm = NormKind::kLayerNorm;
  m.position = PositionKind::kLearned;
  m.max_seq = r.seq;
  LayerGroup g;
  g.name = "decoder";
  g.count = r.layers;
  g.shape.kind = LayerKind::kDecoder;
  g.shape.hidden = r.hidden;
  g.shape.heads = r.heads;
  g.shape.kv_heads = r.heads;
  g.shape.head_dim = r.hidden / r.heads;
  g.shape.ffn = 4LL * r.hidden;
  g.shape.ffn_kind = FfnKind::kGelu;
  g.shape.bias = true;
  m.groups.push_back(g);
  return m;
}

// Builds the uniform Megatron-style plan of a row; returns false (with a message) if invalid.
bool build_plan(const Row& r, const ClusterSpec& base, Plan& p, std::string& why) {
  p = Plan{};
  p.model = gpt_model(r);
  p.cluster = base;
  p.cluster.gpus_per_node = 8;
  p.cluster.nodes = std::max(1, r.gpus / 8);
  if (r.gpus < 8) p.cluster.gpus_per_node = r.gpus;  // one partial node
  p.cluster.inter.gbps = 800.0 / 8 / 8;                // 800 Gb/s per node = 12.5 GB/s per GPU
  const int m = r.global_batch / (r.dp * r.micro_batch);
  if (m < 1 || r.global_batch % (r.dp * r.micro_batch) != 0) {
    why = "global batch not a multiple of dp * micro batch";
    return false;
  }
  p.train.seq = r.seq;
  p.train.global_batch = r.global_batch;
  p.train.micro_batches = m;
  p.train.pp = r.pp;
  p.train.vp = 1;
  p.train.schedule = Schedule::k1F1B;
  p.train.dtype = DType::kFp16;
  LayerStrategy s;
  s.tp = r.tp;
  s.dp = r.dp;
  s.recompute = Recompute::kFull;
  p.embedding = s;
  p.embedding.recompute = Recompute::kNone;
  int first = 0;
  for (int st = 0; st < r.pp; ++st) {
    const int n = r.layers / r.pp + (st < r.layers % r.pp ? 1 : 0);
    Stage stage;
    stage.first_layer = first;
    stage.layers.assign(n, s);
    first += n;
    p.stages.push_back(stage);
  }
  const Status ok = validate(p);
  if (!ok.ok()) {
    why = ok.error().message;
    return false;
  }
  return true;
}

struct Stats {
  double mape = 0, bias = 0, spearman = 0;
  int n = 0;
};

Stats stats(const std::vector<const Row*>& rows) {
  Stats s;
  std::vector<double> m, p;
  for (const Row* r : rows) {
    const double err = (r->predicted_ms - r->measured_ms) / r->measured_ms;
    s.mape += std::abs(err);
    s.bias += err;
    m.push_back(r->measured_ms);
    p.push_back(r->predicted_ms);
  }
  s.n = static_cast<int>(rows.size());
  if (s.n > 0) {
    s.mape = 100 * s.mape / s.n;
    s.bias = 100 * s.bias / s.n;
  }
  s.spearman = spearman(m, p);
  return s;
}

// Predicts every row (predicted_ms); false for rows that do not make a valid plan.
void predict(std::vector<Row>& rows, const ClusterSpec& base, const AnalyticCostModel& cm) {
  for (Row& r : rows) {
    Plan p;
    std::string why;
    r.predicted_ms = build_plan(r, base, p, why) ? estimate(p, cm).step_time.value() * 1e3 : -1;
  }
}

double mape_of(const std::vector<Row>& rows, const std::string& only) {
  double sum = 0;
  int n = 0;
  for (const Row& r : rows) {
    if (r.model != only || r.predicted_ms < 0) continue;
    sum += std::abs(r.predicted_ms - r.measured_ms) / r.measured_ms;
    ++n;
  }
  return n ? 100 * sum / n : 0;
}

// Calibration from measured runs of one model, as a user with a few measured runs of their own
// framework would do: the host scale (times both host constants) and the GPU time scale that
// minimise that model's MAPE, by alternating golden-section searches. Those rows are then left
// out of the figures.
AnalyticOptions calibrate(std::vector<Row>& rows, const ClusterSpec& base, AnalyticOptions opt,
                          const std::string& key) {
  const double op0 = opt.host_op_us, fn0 = opt.host_function_us;
  std::vector<Row> cal;
  for (const Row& r : rows)
    if (r.model == key) cal.push_back(r);
  double host = 1.0, gpu = 1.0;
  auto loss = [&](double hs, double gs) {
    AnalyticOptions o = opt;
    o.host_op_us = op0 * hs;
    o.host_function_us = fn0 * hs;
    o.compute_time_scale = gs;
    predict(cal, base, AnalyticCostModel(o));
    return mape_of(cal, key);
  };
  auto golden = [&](auto f, double lo, double hi) {
    const double g = (std::sqrt(5.0) - 1) / 2;
    double a = lo, b = hi, c = b - g * (b - a), d = a + g * (b - a), fc = f(c), fd = f(d);
    for (int i = 0; i < 24; ++i) {
      if (fc < fd) b = d, d = c, fd = fc, c = b - g * (b - a), fc = f(c);
      else a = c, c = d, fc = fd, d = a + g * (b - a), fd = f(d);
    }
    return (a + b) / 2;
  };
  for (int round = 0; round < 4; ++round) {
    host = golden([&](double x) { return loss(x, gpu); }, 0.25, 6.0);
    gpu = golden([&](double x) { return loss(host, x); }, 0.7, 2.0);
  }
  std::printf("calibrated on the %zu runs of %s: host constants x%.2f (%.1f us per operator, %.1f us per "
              "Function), GPU kernel time x%.3f; calibration MAPE %.1f %% (those runs are left out below)\n",
              cal.size(), key.c_str(), host, op0 * host, fn0 * host, gpu, loss(host, gpu));
  opt.host_op_us = op0 * host;
  opt.host_function_us = fn0 * host;
  opt.compute_time_scale = gpu;
  return opt;
}

// Predicts and prints one set; returns its predicted rows.
std::vector<const Row*> report(const char* title, std::vector<Row>& rows, const ClusterSpec& base,
                               const AnalyticCostModel& cm, bool print_rows, const std::string& exclude = "") {
  std::vector<const Row*> ok;
  int skipped = 0;
  // The same model with the host (framework) time off: what the host bound adds to each step.
  AnalyticOptions gpu_only = cm.options();
  gpu_only.framework_overhead = false;
  const AnalyticCostModel gpu_cm(gpu_only);
  for (Row& r : rows) {
    if (r.model == exclude) continue;
    Plan p;
    std::string why;
    if (!build_plan(r, base, p, why)) {
      ++skipped;
      std::fprintf(stderr, "skipped row (%s): %s\n", r.model.c_str(), why.c_str());
      continue;
    }
    const Estimate est = estimate(p, cm);
    r.predicted_ms = est.step_time.value() * 1e3;
    r.peak_gib = est.peak_memory.value() / (1024.0 * 1024 * 1024);
    r.micro_batches = p.train.micro_batches;
    r.time = est.breakdown;
    r.gpu_ms = estimate(p, gpu_cm).step_time.value() * 1e3;
    ok.push_back(&r);
    if (print_rows) {
      std::printf("  %-22s gpus %3d gb %4d mb %2d tp %2d dp %2d pp %2d  measured %9.1f ms  predicted %9.1f ms  %+6.1f%%  peak %5.1f GiB\n",
                  r.model.c_str(), r.gpus, r.global_batch, r.micro_batch, r.tp, r.dp, r.pp, r.measured_ms,
                  r.predicted_ms, 100 * (r.predicted_ms - r.measured_ms) / r.measured_ms, r.peak_gib);
    }
  }
  std::printf("\n%s: %zu runs (%d skipped)\n", title, ok.size(), skipped);
  std::printf("  %-24s %5s %9s %9s %9s\n", "model", "runs", "MAPE %", "bias %", "Spearman");
  std::map<std::string, std::vector<const Row*>> by_model;
  for (const Row* r : ok) by_model[r->model].push_back(r);
  double mean_rho = 0;
  int models = 0;
  for (auto& [name, rs] : by_model) {
    const Stats s = stats(rs);
    std::printf("  %-24s %5d %9.1f %+9.1f %9.3f\n", name.c_str(), s.n, s.mape, s.bias, s.spearman);
    if (!std::isnan(s.spearman)) mean_rho += s.spearman, ++models;
  }
  const Stats all = stats(ok);
  std::printf("  %-24s %5d %9.1f %+9.1f %9.3f   (mean per-model Spearman %.3f)\n", "overall", all.n, all.mape,
              all.bias, all.spearman, models ? mean_rho / models : std::nan(""));
  // Where the error sits: by micro-batch size and by tensor-parallel degree.
  std::map<int, std::vector<const Row*>> by_mb, by_tp;
  for (const Row* r : ok) by_mb[r->micro_batch].push_back(r), by_tp[r->tp].push_back(r);
  std::printf("  by micro-batch:");
  for (auto& [k, rs] : by_mb) {
    const Stats s = stats(rs);
    std::printf("  mb%d %.1f%% (%+.1f%%, n=%d)", k, s.mape, s.bias, s.n);
  }
  std::printf("\n  by tensor parallel:");
  for (auto& [k, rs] : by_tp) {
    const Stats s = stats(rs);
    std::printf("  tp%d %.1f%% (%+.1f%%, n=%d)", k, s.mape, s.bias, s.n);
  }
  std::printf("\n");
  return ok;
}

// --- Ranking within groups: what a planner needs from the model is the fastest configuration
// first. A group is one model (hidden, heads, layers, seq), one GPU count and one global batch;
// its configurations differ in tp, pp, dp and micro-batch.

// Measured times within this fraction of the group's best count as the best (run-to-run noise).
constexpr double kTie = 0.005;

struct Group {
  std::string name;
  std::vector<const Row*> rows;  // sorted by measured time
  const Row* choice = nullptr;   // weft's fastest predicted
  const Row* best = nullptr;     // measured fastest
  double regret = 0;             // measured(choice) / measured(best) - 1
  double rho = std::nan("");     // Spearman of measured vs predicted (>= 3 configurations)
  bool hit() const { return regret <= kTie; }
};

std::vector<Group> groups_of(const std::vector<const Row*>& rows) {
  std::map<std::tuple<int, int, int, int, int, int>, Group> by;
  for (const Row* r : rows) {
    Group& g = by[{r->hidden, r->heads, r->layers, r->seq, r->gpus, r->global_batch}];
    if (g.name.empty())
      g.name = r->model + ", " + std::to_string(r->gpus) + " GPUs, global batch " + std::to_string(r->global_batch);
    g.rows.push_back(r);
  }
  std::vector<Group> out;
  for (auto& [key, g] : by) {
    if (g.rows.size() < 2) continue;
    std::stable_sort(g.rows.begin(), g.rows.end(),
                     [](const Row* a, const Row* b) { return a->measured_ms < b->measured_ms; });
    g.best = g.rows.front();
    g.choice = g.rows.front();
    // Equal predictions (the same configuration measured twice) count as the slower measurement.
    for (const Row* r : g.rows)
      if (r->predicted_ms <= g.choice->predicted_ms) g.choice = r;
    g.regret = g.choice->measured_ms / g.best->measured_ms - 1;
    if (g.rows.size() >= 3) {
      std::vector<double> m, p;
      for (const Row* r : g.rows) m.push_back(r->measured_ms), p.push_back(r->predicted_ms);
      g.rho = spearman(m, p);
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::string config(const Row& r) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "tp%d pp%d dp%d mb%d (m=%d)", r.tp, r.pp, r.dp, r.micro_batch, r.micro_batches);
  return buf;
}

void print_ranking_line(const char* set, const std::vector<Group>& gs) {
  int hits = 0, strict = 0, nrho = 0;
  double regret = 0, rho = 0;
  const Group* worst = nullptr;
  for (const Group& g : gs) {
    hits += g.hit();
    strict += g.choice->measured_ms == g.best->measured_ms;
    regret += g.regret;
    if (!worst || g.regret > worst->regret) worst = &g;
    if (!std::isnan(g.rho)) rho += g.rho, ++nrho;
  }
  const double n = std::max<size_t>(1, gs.size());
  std::printf("  %-12s %6zu %8.1f%% %8.1f%% %10.1f%% %11.1f%% %9.3f (%d groups)\n", set, gs.size(), 100 * hits / n,
              100 * strict / n, 100 * regret / n, worst ? 100 * worst->regret : 0.0, nrho ? rho / nrho : std::nan(""),
              nrho);
}

void print_worst(const char* set, const std::vector<Group>& gs) {
  const Group* worst = nullptr;
  const Group* worst_rho = nullptr;
  for (const Group& g : gs) {
    if (!worst || g.regret > worst->regret) worst = &g;
    if (!std::isnan(g.rho) && (!worst_rho || g.rho < worst_rho->rho)) worst_rho = &g;
  }
  if (worst)
    std::printf("  %s, worst regret: %s: weft picks %s, measured %.1f ms (predicted %.1f); best %s, measured %.1f ms "
                "(predicted %.1f): +%.1f%%\n",
                set, worst->name.c_str(), config(*worst->choice).c_str(), worst->choice->measured_ms,
                worst->choice->predicted_ms, config(*worst->best).c_str(), worst->best->measured_ms,
                worst->best->predicted_ms, 100 * worst->regret);
  if (worst_rho)
    std::printf("  %s, worst Spearman: %s: %.3f over %zu configurations\n", set, worst_rho->name.c_str(),
                worst_rho->rho, worst_rho->rows.size());
}

void print_ranking(const std::vector<const Row*>& single, const std::vector<const Row*>& multi) {
  const std::vector<Group> gs = groups_of(single), gm = groups_of(multi);
  std::vector<Group> all = gs;
  all.insert(all.end(), gm.begin(), gm.end());
  std::printf("\nranking within groups (group = same model, GPU count and global batch, >= 2 configurations "
              "differing in tp, pp, dp, micro-batch):\n"
              "  hit = weft's fastest predicted configuration is measured within %.1f%% of the group's best "
              "(strict: is the best);\n"
              "  regret = measured time of weft's choice / measured best - 1; Spearman per group of >= 3, "
              "averaged\n",
              100 * kTie);
  std::printf("  %-12s %6s %9s %9s %11s %12s %9s\n", "set", "groups", "hit", "strict", "mean regret",
              "worst regret", "Spearman");
  print_ranking_line("single node", gs);
  print_ranking_line("multi node", gm);
  print_ranking_line("overall", all);
  print_worst("single node", gs);
  print_worst("multi node", gm);
}

// Breakdown terms printed per configuration (ms per step). compute includes the host-bound excess
// of the layers (a phase costs max(GPU, host)); host+ is what the host bound adds to the step.
struct Term {
  const char* name;
  double (*get)(const Row&);
};
double ms(Seconds s) { return s.value() * 1e3; }
const Term kTerms[] = {
    {"compute", [](const Row& r) { return ms(r.time.compute); }},
    {"recomp", [](const Row& r) { return ms(r.time.recompute); }},
    {"tp", [](const Row& r) { return ms(r.time.tp_comm); }},
    {"p2p", [](const Row& r) { return ms(r.time.p2p); }},
    {"bubble", [](const Row& r) { return ms(r.time.bubble); }},
    {"dp_exp", [](const Row& r) { return ms(r.time.dp_exposed); }},
    {"embed", [](const Row& r) { return ms(r.time.embedding); }},
    {"optim", [](const Row& r) { return ms(r.time.optimizer); }},
    {"other", [](const Row& r) {
       return ms(r.time.ulysses_comm + r.time.cp_comm + r.time.ep_comm + r.time.zero3_gather + r.time.redistribution);
     }},
    {"host+", [](const Row& r) { return r.predicted_ms - r.gpu_ms; }},
};

void print_groups(const char* set, const std::vector<const Row*>& rows) {
  std::printf("\n%s: groups (configurations by measured time; breakdown in ms per step, compute includes the "
              "host-bound excess, host+ = step with host time - step without)\n",
              set);
  for (const Group& g : groups_of(rows)) {
    std::printf("\n  %s: %zu configs, weft picks %s, %s (regret %+.1f%%), Spearman %.3f\n", g.name.c_str(),
                g.rows.size(), config(*g.choice).c_str(), g.hit() ? "hit" : "MISS", 100 * g.regret, g.rho);
    std::vector<double> m, p;
    for (const Row* r : g.rows) m.push_back(r->measured_ms), p.push_back(r->predicted_ms);
    const auto rm = average_ranks(m), rp = average_ranks(p);
    std::printf("    %3s %3s %3s %3s %4s %9s %9s %7s %5s %5s |", "tp", "pp", "dp", "mb", "m", "meas ms", "pred ms",
                "err%", "rk_m", "rk_p");
    for (const Term& t : kTerms) std::printf(" %8s", t.name);
    std::printf("\n");
    for (size_t i = 0; i < g.rows.size(); ++i) {
      const Row& r = *g.rows[i];
      std::printf("    %3d %3d %3d %3d %4d %9.1f %9.1f %+7.1f %5.1f %5.1f |", r.tp, r.pp, r.dp, r.micro_batch,
                  r.micro_batches, r.measured_ms, r.predicted_ms, 100 * (r.predicted_ms / r.measured_ms - 1), rm[i],
                  rp[i]);
      for (const Term& t : kTerms) std::printf(" %8.1f", t.get(r));
      std::printf("%s\n", g.rows[i] == g.choice ? "  <- weft" : "");
    }
  }
}

// Where the ordering goes wrong: the mean signed error (predicted / measured - 1) and the error
// relative to the rest of the configuration's group (exp of ln(pred/meas) minus its group mean,
// - 1; what matters for the order), by one property of the configuration.
void print_error_table(const char* what, const std::vector<Group>& gs, std::string (*key)(const Row&)) {
  struct Acc {
    double signed_err = 0, rel = 0, rel_missed = 0;
    int n = 0, n_missed = 0;
  };
  std::map<std::string, Acc> acc;
  std::vector<std::string> order;
  for (const Group& g : gs) {
    double mean_log = 0;
    for (const Row* r : g.rows) mean_log += std::log(r->predicted_ms / r->measured_ms);
    mean_log /= g.rows.size();
    for (const Row* r : g.rows) {
      const std::string k = key(*r);
      if (!acc.count(k)) order.push_back(k);
      Acc& a = acc[k];
      const double rel = std::exp(std::log(r->predicted_ms / r->measured_ms) - mean_log) - 1;
      a.signed_err += r->predicted_ms / r->measured_ms - 1;
      a.rel += rel;
      ++a.n;
      if (!g.hit()) a.rel_missed += rel, ++a.n_missed;
    }
  }
  std::sort(order.begin(), order.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  std::printf("    by %-16s %6s %9s %12s %8s %14s\n", what, "runs", "signed %", "vs group %", "missed", "vs group (m) %");
  for (const std::string& k : order) {
    const Acc& a = acc[k];
    std::printf("      %-18s %6d %+9.1f %+12.1f %8d", k.c_str(), a.n, 100 * a.signed_err / a.n, 100 * a.rel / a.n,
                a.n_missed);
    if (a.n_missed) std::printf(" %+14.1f", 100 * a.rel_missed / a.n_missed);
    std::printf("\n");
  }
}

void print_error_tables(const char* set, const std::vector<const Row*>& rows) {
  const std::vector<Group> gs = groups_of(rows);
  std::printf("\n%s: error by configuration over the grouped runs (signed = predicted/measured - 1; vs group = "
              "the same relative to the group's geometric mean error; missed = runs in groups where weft's first "
              "choice is wrong)\n",
              set);
  print_error_table("tp", gs, [](const Row& r) { return "tp" + std::to_string(r.tp); });
  print_error_table("pp", gs, [](const Row& r) { return "pp" + std::to_string(r.pp); });
  print_error_table("dp", gs, [](const Row& r) { return "dp" + std::to_string(r.dp); });
  print_error_table("micro-batch", gs, [](const Row& r) { return "mb" + std::to_string(r.micro_batch); });
  print_error_table("micro-batches", gs, [](const Row& r) { return "m" + std::to_string(r.micro_batches); });
  print_error_table("(pp, m)", gs, [](const Row& r) {
    return "pp" + std::to_string(r.pp) + " m" + std::to_string(r.micro_batches);
  });
  print_error_table("(tp, mb)", gs, [](const Row& r) {
    return "tp" + std::to_string(r.tp) + " mb" + std::to_string(r.micro_batch);
  });
  // Missed groups: weft's choice against the measured best, term by term (predicted choice - best,
  // summed), and which way the choice differs from the best.
  int missed = 0, tp_more = 0, tp_less = 0, pp_more = 0, pp_less = 0, mb_more = 0, mb_less = 0;
  double d_meas = 0, d_pred = 0;
  std::vector<double> d_term(std::size(kTerms), 0.0);
  for (const Group& g : gs) {
    if (g.hit()) continue;
    ++missed;
    const Row &c = *g.choice, &b = *g.best;
    tp_more += c.tp > b.tp, tp_less += c.tp < b.tp;
    pp_more += c.pp > b.pp, pp_less += c.pp < b.pp;
    mb_more += c.micro_batch > b.micro_batch, mb_less += c.micro_batch < b.micro_batch;
    d_meas += (c.measured_ms - b.measured_ms) / b.measured_ms;
    d_pred += (c.predicted_ms - b.predicted_ms) / b.measured_ms;
    for (size_t i = 0; i < std::size(kTerms); ++i) d_term[i] += (kTerms[i].get(c) - kTerms[i].get(b)) / b.measured_ms;
  }
  if (!missed) return;
  std::printf("    missed groups %d: weft's choice vs the measured best has more/less tp %d/%d, pp %d/%d, "
              "micro-batch %d/%d\n",
              missed, tp_more, tp_less, pp_more, pp_less, mb_more, mb_less);
  std::printf("    mean over them, in %% of the best's measured time: measured choice - best %+.1f, predicted %+.1f;"
              " predicted by term:",
              100 * d_meas / missed, 100 * d_pred / missed);
  for (size_t i = 0; i < std::size(kTerms); ++i) std::printf(" %s %+.1f", kTerms[i].name, 100 * d_term[i] / missed);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = WEFT_VTRAIN_DIR;
  std::string gpu = "a100-80gb";
  std::string calibrate_on;
  bool rows = false, groups = false, tables = false;
  // Megatron-DeepSpeed: fused scale-mask-softmax attention without flash, gradients all-reduced
  // after the backward (vTrain's runs used no gradient bucketing).
  AnalyticOptions opt = *framework_options("megatron-deepspeed");
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) {
      dir = argv[++i];
    } else if (!std::strcmp(argv[i], "--gpu") && i + 1 < argc) {
      gpu = argv[++i];
    } else if (!std::strcmp(argv[i], "--no-host-overhead")) {
      opt.framework_overhead = false;
    } else if (!std::strcmp(argv[i], "--host-op-us") && i + 1 < argc) {
      opt.host_op_us = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--host-function-us") && i + 1 < argc) {
      opt.host_function_us = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--compute-time-scale") && i + 1 < argc) {
      opt.compute_time_scale = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--calibrate") && i + 1 < argc) {
      calibrate_on = argv[++i];
    } else if (!std::strcmp(argv[i], "--rows")) {
      rows = true;
    } else if (!std::strcmp(argv[i], "--groups")) {
      groups = true;
    } else if (!std::strcmp(argv[i], "--tables")) {
      tables = true;
    } else {
      std::fprintf(stderr,
                   "usage: weft_bench_vtrain [--dir DIR] [--gpu a100-80gb|a100-40gb] [--no-host-overhead] [--rows]\n"
                   "                         [--groups] [--tables]\n"
                   "                         [--host-op-us X] [--host-function-us Y] [--compute-time-scale Z]\n"
                   "                         [--calibrate MODEL-KEY]\n"
                   "unknown argument: %s\n",
                   argv[i]);
      return 2;
    }
  }
  auto cluster = load_cluster(gpu);
  if (!cluster.ok()) {
    std::fprintf(stderr, "weft_bench_vtrain: --gpu: %s\n", cluster.error().message.c_str());
    return 2;
  }
  std::printf("weft analytic cost model vs vTrain measured A100 runs (%s; GPU preset %s, host overhead %s)\n",
              dir.c_str(), gpu.c_str(), opt.framework_overhead ? "on" : "off");
  auto single = read_rows(dir + "/ground_truth_single.csv", 0);
  auto multi = read_rows(dir + "/ground_truth_multi.csv", 1);
  if (single.empty() && multi.empty()) return 4;
  if (!calibrate_on.empty()) {
    bool found = false;
    for (const Row& r : single) found = found || r.model == calibrate_on;
    if (!found) {
      std::fprintf(stderr, "weft_bench_vtrain: --calibrate: no single-node runs of \"%s\" (a model key as printed, "
                   "e.g. \"h1024 a16 L12 s1024\")\n", calibrate_on.c_str());
      return 2;
    }
    opt = calibrate(single, *cluster, opt, calibrate_on);
  }
  const AnalyticCostModel cm(opt);
  const auto single_ok = report("single node (1-8 GPUs)", single, *cluster, cm, rows, calibrate_on);
  const auto multi_ok = report("multi node (64-512 GPUs)", multi, *cluster, cm, rows);
  print_ranking(single_ok, multi_ok);
  if (groups) {
    print_groups("single node", single_ok);
    print_groups("multi node", multi_ok);
  }
  if (tables) {
    print_error_tables("single node", single_ok);
    print_error_tables("multi node", multi_ok);
  }
  return 0;
}
