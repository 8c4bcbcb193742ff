// `weft plan` (search the best plan) and `weft estimate` (cost one uniform strategy, or a plan file).
// docs/search.md §8 describes the flags; exit codes: 0 ok, 2 bad input, 3 nothing fits.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "inputs.h"
#include "weft/core/format.h"
#include "weft/cost/estimate.h"
#include "weft/plan/plan.h"
#include "weft/plan/runtime_support.h"
#include "weft/search/search.h"
#include "weft/search/uniform.h"
#include "weft/spec/counts.h"
#include "weft/galvatron/search.h"
#include "weft/galvatron/setup.h"
#include "weft/galvatron/strategy.h"
#include "weft/report/html.h"

namespace weft::cli {

namespace {

std::string seconds(double s) {
  if (s >= 100) return printf_str("%.1f s", s);
  if (s >= 1) return printf_str("%.3f s", s);
  return printf_str("%.1f ms", s * 1e3);
}

std::string pipeline_text(const TrainSettings& t) {
  std::string s = "pp" + S(t.pp) + " " + to_string(t.schedule);
  if (t.vp > 1) s += " vp" + S(t.vp);
  s += " m" + S(t.micro_batches);
  return s;
}

std::string cluster_text(const ClusterSpec& c) {
  return S(c.total_gpus()) + " x " + c.gpu.name + " (" + S(c.nodes) + (c.nodes == 1 ? " node" : " nodes") + " of " +
         S(c.gpus_per_node) + ")";
}

// Runs of identical strategies over the whole model: (first layer, last layer, strategy).
struct Run {
  int first, last;
  LayerStrategy s;
};
std::vector<Run> runs_of(const Stage& st) {
  std::vector<Run> out;
  for (int i = 0; i < st.num_layers(); ++i) {
    const int layer = st.first_layer + i;
    if (!out.empty() && out.back().s == st.layers[i]) out.back().last = layer;
    else out.push_back({layer, layer, st.layers[i]});
  }
  return out;
}

std::string layers_text(int a, int b) { return a == b ? "layer " + S(a) : "layers " + S(a) + "-" + S(b); }

// The per-stage listing of a plan: one line per run of identical strategies (80 columns).
void print_layers(const Plan& p) {
  std::printf("%-7s %-16s %-36s %8s\n", "stage", "layers", "strategy", "mem GiB");
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const Stage& st = p.stages[s];
    bool first = true;
    for (const Run& r : runs_of(st)) {
      std::printf("%-7s %-16s %-36s %8s\n", first ? S(static_cast<long long>(s)).c_str() : "",
                  layers_text(r.first, r.last).c_str(), label(r.s).c_str(),
                  first ? printf_str("%.1f", st.predicted.memory_gib).c_str() : "");
      first = false;
    }
  }
}

// The side-by-side summary of the best plan and the uniform baseline.
void print_comparison(const Plan& best, const Plan* uniform, const Estimate& eb, const Estimate* eu) {
  auto row = [&](const char* name, const std::string& a, const std::string& b) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%-20s %-29s %s", name, a.c_str(), b.c_str());
    std::string line = buf;
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
  };
  row("", "best plan", uniform ? "uniform baseline" : "uniform baseline: none fits");
  row("pipeline", pipeline_text(best.train), uniform ? pipeline_text(uniform->train) : "");
  row("layers", best.uniform() ? label(*best.uniform_strategy()) : "per layer (below)",
      uniform ? label(uniform->uniform_strategy().value_or(uniform->stages.front().layers.front())) : "");
  row("embedding / LM head", label(best.embedding), uniform ? label(uniform->embedding) : "");
  row("step time", seconds(eb.step_time.value()), eu ? seconds(eu->step_time.value()) : "");
  row("tokens/s", grouped(eb.tokens_per_s), eu ? grouped(eu->tokens_per_s) : "");
  row("model TFLOP/s / GPU", printf_str("%.1f", eb.model_tflops_per_gpu), eu ? printf_str("%.1f", eu->model_tflops_per_gpu) : "");
  row("MFU", printf_str("%.1f %%", 100 * eb.mfu), eu ? printf_str("%.1f %%", 100 * eu->mfu) : "");
  row("peak memory / GPU", printf_str("%.1f GiB", to_gib(eb.peak_memory)) + printf_str(" of %.1f", to_gib(eb.memory_budget)),
      eu ? printf_str("%.1f GiB", to_gib(eu->peak_memory)) : "");
  if (eu && eu->step_time.value() > 0)
    row("speed-up", printf_str("%.3fx", eu->step_time.value() / eb.step_time.value()), "1.000x");
}

// Notes: what the output means for weft's runtime (docs/search.md, "weft's runtime"). In a table
// they are lines of stdout, "note: " then the text wrapped at 80 columns; with --format json they
// go to a "notes" array of the JSON (add_notes) and to stderr, so stdout stays one JSON document.
void print_notes(const std::vector<std::string>& notes) {
  for (const std::string& n : notes) {
    std::string line = "note:";
    size_t pos = 0;
    while (pos < n.size()) {
      size_t end = n.find(' ', pos);
      if (end == std::string::npos) end = n.size();
      const std::string word = n.substr(pos, end - pos);
      if (line.size() + 1 + word.size() > 80 && line.size() > 5) {
        std::printf("%s\n", line.c_str());
        line = "     ";
      }
      line += " " + word;
      pos = end + 1;
    }
    std::printf("%s\n", line.c_str());
  }
}

void notes_to_stderr(const std::vector<std::string>& notes) {
  for (const std::string& n : notes) std::fprintf(stderr, "weft: note: %s\n", n.c_str());
}

// Adds the notes to a JSON output as "notes": [...], only when there are any (so the estimate JSON
// of a plan weft's runtime runs is what it always was).
void add_notes(Json& j, const std::vector<std::string>& notes) {
  if (notes.empty()) return;
  Json a = Json::array();
  for (const std::string& n : notes) a.push_back(n);
  j["notes"] = std::move(a);
}

Json plan_entry(const Plan& p, const Estimate& e) {
  Json j = to_json(e);
  j["plan"] = to_json(p);
  return j;
}

// --- weft plan --------------------------------------------------------------------------------

struct PlanFlags {
  InputFlags in;
  int seq = 0;
  int global_batch = 0;
  int top = 3;
  bool galvatron_space = false;  // --galvatron-space
  std::string out;
  std::string format = "table";
  std::string report;         // --report FILE: the HTML report of the result
  std::string galvatron_out;  // --galvatron-out FILE: the best plan as a Galvatron strategy
  std::string dtype = "bf16";         // --dtype
  std::vector<int> pp;                // --pp 1,2,4: pipeline degrees to consider (default all)
  std::vector<std::string> schedules; // --schedule gpipe,1f1b,interleaved (default all)
  int max_tp = 0;                     // --max-tp (default: GPUs per node)
  bool uniform = false;               // --uniform: one strategy for every layer
  bool all_strategies = false;        // --all-strategies: not only what weft's runtime runs
};

void run_plan(const PlanFlags& f) {
  Inputs in = unwrap(load_inputs(f.in));
  SearchOptions opt;
  opt.seq = f.seq;
  opt.global_batch = f.global_batch;
  opt.top_k = f.top;
  opt.dtype = unwrap(dtype_from_string(f.dtype));
  const int world = in.cluster.total_gpus();
  for (int p : f.pp) {
    if (p < 1 || world % p != 0)
      fail(Error{ErrorKind::kBadInput, "--pp: " + S(p) + " does not divide the " + S(world) + " GPUs"});
    if (p > in.model.num_layers())
      fail(Error{ErrorKind::kBadInput, "--pp: " + S(p) + " stages for " + S(in.model.num_layers()) + " layers"});
  }
  opt.pp_degrees = f.pp;
  for (const std::string& s : f.schedules) opt.schedules.push_back(unwrap(schedule_from_string(s)));
  if (f.max_tp < 0) fail(Error{ErrorKind::kBadInput, "--max-tp: must be >= 1, got " + S(f.max_tp)});
  opt.max_tp = f.max_tp;
  opt.layerwise = !f.uniform;
  if (f.galvatron_space) {
    check(galvatron::restrict_to_galvatron(opt));
  }
  // A named framework: only plans it can run (uniform, its ZeRO stages and schedules). Without
  // one the plan is meant for weft's runtime, and the search keeps to what `weft train` runs
  // unless --all-strategies lifts that, or the model cannot run there whatever the strategy (then
  // the whole space is searched and a note says why).
  std::vector<std::string> notes;
  bool runtime_only = false;
  if (!f.in.framework.empty()) {
    if (f.all_strategies)
      fail(Error{ErrorKind::kBadInput, "--all-strategies: not used with --framework (the search keeps to what " +
                                           f.in.framework + " runs)"});
    check(restrict_to_framework(opt, f.in.framework));
  } else if (Status model_runs = runtime_runs_model(in.model); !model_runs.ok()) {
    notes.push_back("weft train cannot run " + in.model.name + " yet: " + model_runs.error().message +
                    "; searched every strategy the cost model knows (planning only)");
  } else if (!f.all_strategies) {
    Status st = restrict_to_runtime(opt);
    if (!st.ok())
      fail(Error{ErrorKind::kBadInput, st.error().message +
                                           "; --all-strategies searches it anyway (for planning: weft train "
                                           "cannot run the plan)"});
    runtime_only = true;
    notes.push_back(
        "searched only what weft's runtime (weft train) runs: no context parallelism (cp), no expert "
        "parallelism (ep), no interleaved schedule; --all-strategies searches those too (for planning "
        "only), --framework NAME plans for another framework");
  }
  // Progress: only on a terminal, and only once the search has run for half a second.
  const bool tty = isatty(fileno(stderr));
  const auto t0 = std::chrono::steady_clock::now();
  bool printed = false;
  if (tty) {
    opt.progress = [&](long long done, long long total) {
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (el < 0.5) return;
      std::fprintf(stderr, "\rweft: searching %lld/%lld configurations (%.1f s)", done, total, el);
      printed = true;
    };
  }
  // Galvatron's model in Galvatron's space: its task loop, each plan scored with its exact accounting.
  const galvatron::GalvatronCostModel* gcm = galvatron::as_galvatron(*in.cost);
  SearchResult r = gcm && f.galvatron_space
                       ? galvatron::to_search_result(unwrap(galvatron::search_galvatron_space(in.model, in.cluster, *gcm, opt)))
                       : unwrap(search(in.model, in.cluster, *in.cost, opt));
  if (printed) std::fprintf(stderr, "\r%60s\r", "");

  if (r.top.empty()) {
    std::string msg = "nothing fits in " + printf_str("%.1f", in.cluster.gpu.memory_gib) + " GiB per GPU";
    if (r.closest) {
      const Plan& c = *r.closest;
      std::string layers = c.uniform() ? label(*c.uniform_strategy()) : "per-layer strategies";
      msg += ": the plan needing the least memory (" + pipeline_text(c.train) + ", " + layers +
             ", embedding " + label(c.embedding) + ") needs " + printf_str("%.1f", r.min_memory_gib) +
             " GiB per GPU; try --memory-gb " + S(static_cast<long long>(std::ceil(r.min_memory_gib))) +
             " or more GPUs";
      if (!f.out.empty() && write_plan_file(f.out, c).ok()) msg += " (closest plan written to " + f.out + ")";
    }
    if (runtime_only) msg += "; searched only what weft's runtime runs (--all-strategies searches more)";
    else notes_to_stderr(notes);
    fail(Error{ErrorKind::kNoFit, msg});
  }

  const Plan& best = r.top.front();
  if (f.in.framework.empty() && f.all_strategies) {
    const Status runs = runtime_supports(best);
    notes.push_back(runs.ok() ? "--all-strategies: searched everything the cost model knows; the best plan also "
                                "runs on weft's runtime"
                              : "--all-strategies: searched everything the cost model knows; weft train cannot "
                                "run the best plan yet (" + runs.error().message + ")");
  }
  const Estimate eb = estimate(best, *in.cost);
  std::optional<Estimate> eu;
  if (r.best_uniform) eu = estimate(*r.best_uniform, *in.cost);
  if (!f.out.empty()) check(write_plan_file(f.out, best));
  if (!f.report.empty()) {
    check(write_html_report(f.report, unwrap(make_report_input(r.top, r.best_uniform, *in.cost))));
  }

  if (!f.galvatron_out.empty()) {
    Json strategy = unwrap(galvatron::export_strategy(best));
    auto written = catch_errors([&] {
      write_text_file(f.galvatron_out, galvatron::dump_strategy(strategy));
      return 0;
    });
    if (!written.ok()) fail(written.error());
  }
  if (f.format == "json") {
    Json j = plan_entry(best, eb);
    Json top = Json::array();
    for (const Plan& p : r.top) top.push_back(plan_entry(p, estimate(p, *in.cost)));
    j["top"] = std::move(top);
    j["uniform"] = r.best_uniform ? plan_entry(*r.best_uniform, *eu) : Json(nullptr);
    Json rules = Json::object();
    for (const auto& [name, count] : r.stats.rules) rules[name] = count;
    j["search"] = {{"wall_s", r.stats.wall_s},          {"configurations", r.stats.configurations},
                   {"searched", r.stats.searched},      {"pruned", r.stats.pruned},
                   {"layer_costs", r.stats.layer_costs}, {"estimates", r.stats.estimates},
                   {"rules", rules}};
    add_notes(j, notes);
    std::printf("%s\n", j.dump(2).c_str());
    notes_to_stderr(notes);
    return;
  }

  std::printf("weft plan: %s on %s\n", in.model.name.c_str(), cluster_text(in.cluster).c_str());
  std::printf("seq %d, global batch %d, %s; cost model %s (%s)\n", f.seq, f.global_batch,
              to_string(best.train.dtype), in.cost->name().c_str(), in.cost->source().c_str());
  std::printf("searched %lld configurations in %s\n", r.stats.configurations, seconds(r.stats.wall_s).c_str());
  print_notes(notes);
  std::printf("\n");
  print_comparison(best, r.best_uniform ? &*r.best_uniform : nullptr, eb, eu ? &*eu : nullptr);
  std::printf("\n");
  print_layers(best);
  if (r.top.size() > 1) {
    std::printf("\n%-4s %-26s %-22s %10s %8s\n", "rank", "pipeline", "layers", "step", "vs best");
    for (size_t i = 0; i < r.top.size(); ++i) {
      const Plan& p = r.top[i];
      const std::string layers = p.uniform() ? label(*p.uniform_strategy()) : "per layer";
      std::printf("%-4zu %-26s %-22s %10s %7.1f%%\n", i + 1, pipeline_text(p.train).c_str(), layers.c_str(),
                  seconds(p.predicted.step_time_s).c_str(),
                  100 * (p.predicted.step_time_s / best.predicted.step_time_s - 1));
    }
  }
  if (!f.out.empty()) std::printf("\nplan written to %s\n", f.out.c_str());
}

// --- weft estimate ----------------------------------------------------------------------------

struct EstimateFlags {
  InputFlags in;
  std::string plan;
  int seq = 0, global_batch = 0, micro_batch = 0;
  int tp = 0, pp = 0, dp = 0, cp = 1, ulysses = 1, ep = 1, vp = 1, zero = 0;
  std::string recompute = "none";
  bool sequence_parallel = false;
  std::string schedule;
  std::string dtype = "bf16";
  std::string format = "table";
  std::string out;
};

[[noreturn]] void bad(const std::string& m) { fail(Error{ErrorKind::kBadInput, m}); }

// Checks the hand-given strategy against the model before building the plan, so messages name the
// flag: "--tp: tp=3 does not divide 32 attention heads".
void check_strategy(const EstimateFlags& f, const ModelSpec& m, int gpus) {
  auto pos = [&](const char* flag, int v) {
    if (v < 1) bad(std::string(flag) + ": must be >= 1, got " + S(v));
  };
  pos("--tp", f.tp);
  pos("--pp", f.pp);
  pos("--cp", f.cp);
  pos("--ulysses", f.ulysses);
  pos("--ep", f.ep);
  pos("--vp", f.vp);
  pos("--micro-batch", f.micro_batch);
  if (f.seq < 1) bad("--seq: must be positive, got " + S(f.seq));
  if (f.global_batch < 1) bad("--global-batch: must be positive, got " + S(f.global_batch));
  if (f.zero < 0 || f.zero > 3) bad("--zero: must be 0, 1, 2 or 3, got " + S(f.zero));
  if (f.sequence_parallel && f.tp == 1) bad("--sequence-parallel: needs --tp > 1 (tp=1)");
  for (const auto& g : m.groups) {
    const LayerShape& s = g.shape;
    if (s.heads % f.tp != 0) bad("--tp: tp=" + S(f.tp) + " does not divide " + S(s.heads) + " attention heads");
    if (s.heads % (f.tp * f.ulysses) != 0)
      bad("--ulysses: tp*ulysses = " + S(f.tp) + "*" + S(f.ulysses) + " = " + S(f.tp * f.ulysses) +
          " does not divide " + S(s.heads) + " attention heads");
    const int tu = f.tp * f.ulysses;
    if (s.kv_heads % tu != 0 && tu % s.kv_heads != 0)
      bad("--tp: tp*ulysses = " + S(tu) + " and " + S(s.kv_heads) +
          " key/value heads: one must divide the other (kv heads are split or replicated)");
    const long long ffn = s.moe.enabled() ? s.moe.expert_ffn : s.ffn;
    if (ffn % f.tp != 0)
      bad("--tp: tp=" + S(f.tp) + " does not divide the FFN size " + S(ffn));
    if (s.moe.enabled() && s.moe.experts % f.ep != 0)
      bad("--ep: ep=" + S(f.ep) + " does not divide " + S(s.moe.experts) + " experts");
  }
  bool moe = false;
  for (const auto& g : m.groups) moe = moe || g.shape.moe.enabled();
  if (f.ep > 1 && !moe) bad("--ep: ep=" + S(f.ep) + " needs a mixture-of-experts model (" + m.name + " has none)");
  if (f.seq % (f.ulysses * f.cp) != 0)
    bad("--cp: ulysses*cp = " + S(f.ulysses * f.cp) + " does not divide sequence length " + S(f.seq));
  if (gpus % f.pp != 0) bad("--pp: pp=" + S(f.pp) + " does not divide " + S(gpus) + " GPUs");
}

Plan plan_from_flags(const EstimateFlags& f, const Inputs& in) {
  const int gpus = in.cluster.total_gpus();
  check_strategy(f, in.model, gpus);
  const long long inner = static_cast<long long>(f.tp) * f.pp * f.cp * f.ulysses;
  int dp = f.dp;
  if (dp == 0) {
    if (gpus % inner != 0)
      bad("--dp: tp*pp*cp*ulysses = " + S(f.tp) + "*" + S(f.pp) + "*" + S(f.cp) + "*" + S(f.ulysses) + " = " +
          S(inner) + " does not divide " + S(gpus) + " GPUs");
    dp = static_cast<int>(gpus / inner);
  } else if (dp < 1) {
    bad("--dp: must be >= 1, got " + S(dp));
  } else if (inner * dp != gpus) {
    bad("--dp: tp*pp*cp*ulysses*dp = " + S(inner * dp) + " but the cluster has " + S(gpus) + " GPUs");
  }
  const long long per_step = static_cast<long long>(dp) * f.micro_batch;
  if (f.global_batch % per_step != 0)
    bad("--global-batch: " + S(f.global_batch) + " is not a multiple of dp*micro-batch = " + S(dp) + "*" +
        S(f.micro_batch) + " = " + S(per_step));
  if (f.ep > 1 && (dp * f.cp) % f.ep != 0)
    bad("--ep: ep=" + S(f.ep) + " does not divide dp*cp = " + S(dp * f.cp));
  TrainSettings t;
  t.seq = f.seq;
  t.global_batch = f.global_batch;
  t.micro_batches = static_cast<int>(f.global_batch / per_step);
  t.pp = f.pp;
  t.vp = f.vp;
  if (f.schedule.empty()) t.schedule = f.vp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  else t.schedule = unwrap(schedule_from_string(f.schedule));
  t.dtype = unwrap(dtype_from_string(f.dtype));
  LayerStrategy s;
  s.tp = f.tp;
  s.sp = f.sequence_parallel;
  s.ulysses = f.ulysses;
  s.cp = f.cp;
  s.dp = dp;
  s.zero = f.zero;
  s.recompute = unwrap(recompute_from_string(f.recompute));
  s.ep = f.ep;
  return unwrap(make_uniform_plan(in.model, in.cluster, t, s, embedding_for(s)));
}

void print_estimate_table(const Plan& p, const Estimate& e, const CostModel& cm) {
  std::printf("weft estimate: %s on %s\n", p.model.name.c_str(), cluster_text(p.cluster).c_str());
  std::printf("seq %d, global batch %d, %s, %s; cost model %s (%s)\n", p.train.seq, p.train.global_batch,
              to_string(p.train.dtype), pipeline_text(p.train).c_str(), cm.name().c_str(), cm.source().c_str());
  std::printf("layers %s, embedding %s\n\n", p.uniform() ? label(*p.uniform_strategy()).c_str() : "per layer",
              label(p.embedding).c_str());
  std::printf("%-22s %s\n", "step time", seconds(e.step_time.value()).c_str());
  std::printf("%-22s %s\n", "tokens/s", grouped(e.tokens_per_s).c_str());
  std::printf("%-22s %.1f\n", "model TFLOP/s / GPU", e.model_tflops_per_gpu);
  std::printf("%-22s %.1f %%\n", "MFU", 100 * e.mfu);
  std::printf("%-22s %.1f GiB of %.1f GiB%s\n", "peak memory / GPU", to_gib(e.peak_memory), to_gib(e.memory_budget),
              e.fits ? "" : "  DOES NOT FIT");
  std::printf("\n%-6s %7s %10s %9s %9s %9s %9s %9s\n", "stage", "layers", "busy", "mem GiB", "weights", "grads",
              "optim", "activ");
  for (size_t s = 0; s < e.stages.size(); ++s) {
    const auto& st = e.stages[s];
    const auto& m = st.memory;
    std::printf("%-6zu %7d %10s %9.1f %9.2f %9.2f %9.2f %9.2f%s\n", s, p.stages[s].num_layers(),
                seconds(st.time.value()).c_str(), p.stages[s].predicted.memory_gib, to_gib(m.weights),
                to_gib(m.grads), to_gib(m.optimizer), to_gib(m.activations), st.fits ? "" : " !");
  }
  const TimeBreakdown& b = e.breakdown;
  const std::pair<const char*, double> parts[] = {
      {"compute", b.compute.value()},       {"recompute", b.recompute.value()},   {"tp comm", b.tp_comm.value()},
      {"ulysses comm", b.ulysses_comm.value()}, {"cp comm", b.cp_comm.value()}, {"ep comm", b.ep_comm.value()},
      {"dp exposed", b.dp_exposed.value()}, {"zero3 gather", b.zero3_gather.value()}, {"p2p", b.p2p.value()},
      {"redistribution", b.redistribution.value()}, {"embedding", b.embedding.value()},
      {"bubble", b.bubble.value()},          {"optimizer", b.optimizer.value()}};
  std::printf("\nbreakdown per step (all stages):");
  int col = 0;
  for (const auto& [name, v] : parts) {
    if (v <= 0) continue;
    std::printf("%s%-15s %10s", col % 2 == 0 ? "\n  " : "   ", name, seconds(v).c_str());
    ++col;
  }
  std::printf("\n");
}

void run_estimate(const EstimateFlags& f, const CLI::App& cmd) {
  Plan p;
  std::unique_ptr<CostModel> cm;
  if (!f.plan.empty()) {
    for (const char* flag : {"--seq", "--global-batch", "--micro-batch", "--tp", "--pp", "--dp", "--cp", "--ulysses",
                             "--ep", "--vp", "--zero", "--recompute", "--sequence-parallel", "--schedule", "--dtype"})
      if (cmd.count(flag) > 0)
        bad(std::string(flag) + ": not used with --plan (the plan file fixes the strategy; edit it instead)");
    p = unwrap(read_plan_file(f.plan));
    Inputs in = unwrap(load_inputs(f.in, &p.model, &p.cluster));
    p.model = in.model;
    p.cluster = in.cluster;
    Status st = validate(p);
    if (!st.ok()) fail(st.error().with_context(f.plan));
    cm = std::move(in.cost);
  } else {
    for (const char* flag : {"--seq", "--global-batch", "--micro-batch", "--tp", "--pp"})
      if (cmd.count(flag) == 0) bad(std::string(flag) + ": required (or give --plan FILE)");
    Inputs in = unwrap(load_inputs(f.in));
    p = plan_from_flags(f, in);
    cm = std::move(in.cost);
  }
  // A plan for a named framework must be one it can run (the rules of restrict_to_framework).
  // Without one it is meant for weft's runtime: what that cannot run is costed all the same, with
  // a note naming it.
  std::vector<std::string> notes;
  if (!f.in.framework.empty()) {
    check(framework_runs(p, f.in.framework));
  } else if (Status runs = runtime_supports(p); !runs.ok()) {
    notes.push_back("weft train cannot run this plan yet (" + runs.error().message +
                    "); the estimate is for planning only");
  }
  // Galvatron's model: its exact accounting (the plan's own task and buffer).
  const galvatron::GalvatronCostModel* gcm = galvatron::as_galvatron(*cm);
  const Estimate e = gcm ? unwrap(gcm->estimate(p)) : estimate(p, *cm);
  annotate(p, e, *cm);
  if (!f.out.empty()) check(write_plan_file(f.out, p));
  if (f.format == "json") {
    Json j = gcm ? unwrap(galvatron::galvatron_estimate_json(*gcm, p)) : to_json(e);
    add_notes(j, notes);
    std::printf("%s\n", j.dump(2).c_str());
    notes_to_stderr(notes);
  } else {
    print_estimate_table(p, e, *cm);
    if (!notes.empty()) std::printf("\n");
    print_notes(notes);
    if (!f.out.empty()) std::printf("\nplan written to %s\n", f.out.c_str());
  }
  if (!e.fits)
    fail(Error{ErrorKind::kNoFit, "the plan needs " + printf_str("%.1f", to_gib(e.peak_memory)) +
                                      " GiB per GPU but the cost model allows " + printf_str("%.1f", to_gib(e.memory_budget)) +
                                      " GiB of the " + printf_str("%.1f", p.cluster.gpu.memory_gib) + " GiB device"});
}

}  // namespace

void register_plan_commands(CLI::App& app) {
  {
    auto fl = std::make_shared<PlanFlags>();
    auto* cmd = app.add_subcommand("plan", "Search the fastest hybrid-parallel plan that fits");
    add_input_flags(cmd, fl->in);
    cmd->add_option("--seq", fl->seq, "Sequence length (tokens per sample)")->required();
    cmd->add_option("--global-batch", fl->global_batch, "Samples per optimizer step")->required();
    cmd->add_option("--top", fl->top, "How many plans to list")->capture_default_str();
    cmd->add_option("--dtype", fl->dtype, "Compute dtype (fp32 master weights and Adam states either way)")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}))
        ->capture_default_str();
    cmd->add_option("--pp", fl->pp, "Pipeline degrees to consider, e.g. 1,2,4 (default: all that divide)")
        ->delimiter(',');
    cmd->add_option("--schedule", fl->schedules, "Pipeline schedules to consider: gpipe,1f1b,interleaved (default: all)")
        ->delimiter(',')
        ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}));
    cmd->add_option("--max-tp", fl->max_tp, "Largest tensor-parallel degree (default: GPUs per node)");
    cmd->add_flag("--uniform", fl->uniform, "One strategy for every layer (Megatron-style), no per-layer mix");
    cmd->add_flag("--all-strategies", fl->all_strategies,
                  "Without --framework: search everything the cost model knows, also what weft's runtime "
                  "cannot run yet (cp, ep, interleaved); for planning only");
    cmd->add_flag("--galvatron-space", fl->galvatron_space,
                  "Search only Galvatron's space (even stages, its strategy set, 1F1B, fixed global batch)");
    cmd->add_option("--out", fl->out, "Write the best plan to this file (plan.json)");
    cmd->add_option("--report", fl->report, "Write the HTML report of the result to this file");
    cmd->add_option("--galvatron-out", fl->galvatron_out, "Write the best plan as a Galvatron strategy JSON");
    cmd->add_option("--format", fl->format, "Output on stdout: table or json")
        ->check(CLI::IsMember({"table", "json"}))
        ->capture_default_str();
    cmd->callback([fl] { run_plan(*fl); });
  }
  {
    auto fl = std::make_shared<EstimateFlags>();
    auto* cmd = app.add_subcommand("estimate", "Cost one uniform strategy, or a plan file");
    add_input_flags(cmd, fl->in);
    cmd->add_option("--plan", fl->plan, "Cost this plan file instead of a strategy given by flags");
    cmd->add_option("--seq", fl->seq, "Sequence length");
    cmd->add_option("--global-batch", fl->global_batch, "Samples per optimizer step");
    cmd->add_option("--micro-batch", fl->micro_batch, "Samples per data-parallel replica per micro-batch");
    cmd->add_option("--tp", fl->tp, "Tensor-parallel degree");
    cmd->add_option("--pp", fl->pp, "Pipeline degree");
    cmd->add_option("--dp", fl->dp, "Data-parallel degree (default: GPUs / (tp*pp*cp*ulysses))");
    cmd->add_option("--cp", fl->cp, "Context-parallel degree")->capture_default_str();
    cmd->add_option("--ulysses", fl->ulysses, "Ulysses sequence-parallel degree")->capture_default_str();
    cmd->add_option("--ep", fl->ep, "Expert-parallel degree (MoE layers)")->capture_default_str();
    cmd->add_option("--vp", fl->vp, "Virtual stages per device group (interleaved)")->capture_default_str();
    cmd->add_option("--zero", fl->zero, "ZeRO stage 0-3")->capture_default_str();
    cmd->add_option("--recompute", fl->recompute, "Activation recompute")
        ->check(CLI::IsMember({"none", "selective", "full"}))
        ->capture_default_str();
    cmd->add_flag("--sequence-parallel", fl->sequence_parallel, "Megatron sequence parallelism on the tp group");
    cmd->add_option("--schedule", fl->schedule, "gpipe, 1f1b or interleaved (default: 1f1b, interleaved if vp > 1)")
        ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}));
    cmd->add_option("--dtype", fl->dtype, "Compute dtype")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}))
        ->capture_default_str();
    cmd->add_option("--format", fl->format, "Output on stdout: table or json")
        ->check(CLI::IsMember({"table", "json"}))
        ->capture_default_str();
    cmd->add_option("--out", fl->out, "Also write the costed plan to this file");
    cmd->callback([fl, cmd] { run_estimate(*fl, *cmd); });
  }
}

}  // namespace weft::cli
