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
#include "weft/multitask/optimus.h"
#include "weft/multitask/plan_tasks.h"
#include "weft/report/optimus_html.h"
#include "weft/report/tasks_html.h"
#include "weft/cost/estimate.h"
#include "weft/plan/plan.h"
#include "weft/plan/runtime_support.h"
#include "weft/search/hetero.h"
#include "weft/search/search.h"
#include "weft/search/uniform.h"
#include "weft/spec/counts.h"
#include "weft/galvatron/search.h"
#include "weft/galvatron/setup.h"
#include "weft/varlen/distribution.h"
#include "weft/galvatron/strategy.h"
#include "weft/report/html.h"
#include "weft/report/plan_text.h"

namespace weft::cli {

namespace {

// Notes: what the output means for weft's runtime (docs/search.md, "weft's runtime"). In a table
// they are lines of stdout (notes_text); with --format json they go to a "notes" array of the JSON
// (add_notes) and to stderr, so stdout stays one JSON document.
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

[[noreturn]] void bad(const std::string& m) { fail(Error{ErrorKind::kBadInput, m}); }

Json device_groups_json(const HeteroEstimate& e) {
  Json a = Json::array();
  for (const DeviceGroupUse& g : e.groups)
    a.push_back(Json{{"name", g.name},
                     {"gpu", g.gpu},
                     {"first_rank", g.first_rank},
                     {"ranks", g.ranks},
                     {"slowest", g.slowest},
                     {"layers", g.layers},
                     {"samples_per_step", g.samples},
                     {"time_s", g.time_s},
                     {"memory_gib", g.memory_gib},
                     {"memory_budget_gib", g.budget_gib}});
  return a;
}

std::string device_groups_table(const Plan& p, const HeteroEstimate& e) {
  std::string out = sprintf_str("%-22s %-24s %-9s %7s %6s %8s %10s %16s\n", "device group", "GPU", "ranks", "slowest",
                        "layers", "samples", "busy/step", "memory GiB");
  for (const DeviceGroupUse& g : e.groups) {
    out += sprintf_str("%-22s %-24s %-9s %6.2fx %6d %8d %10s %7.1f / %-6.1f\n", g.name.c_str(), g.gpu.c_str(),
               (S(g.first_rank) + "-" + S(g.first_rank + g.ranks - 1)).c_str(), g.slowest, g.layers, g.samples,
               duration_text(g.time_s).c_str(), g.memory_gib, g.budget_gib);
  }
  out += "samples: of each step's " + S(p.train.global_batch) +
         ", per stage its groups run; busy/step: the busiest data-parallel replica of a stage on it,\n"
         "compute and communication summed (gradient traffic that overlaps the backward included, so it can\n"
         "exceed the step)\n";
  if (!p.train.dp_shares.empty()) out += "data-parallel shares (train.dp_shares): " + shares_label(p.train) + "\n";
  return out;
}

std::string baseline_text(double best, double other) {
  if (other <= 0) return "does not fit";
  return duration_text(other) + " (" + printf_str("%.2fx", other / best) + " the time)";
}

struct PlanFlags {
  InputFlags in;
  int seq = -1;  // -1: not given (then --lengths or --data must be)
  int global_batch = 0;
  int top = 3;
  bool galvatron_space = false;  // --galvatron-space
  std::string out;
  std::string format = "table";
  std::string report;         // --report FILE: the HTML report of the result
  std::string galvatron_out;  // --galvatron-out FILE: the best plan as a Galvatron strategy
  std::string dtype;                 // --dtype; empty: default_dtype(gpu)
  std::string exp_avg_dtype = "fp32", exp_avg_sq_dtype = "fp32", main_grads_dtype = "fp32";
  double moe_imbalance = 1.0;         // --moe-imbalance
  std::string moe_dispatcher = "alltoall";  // --moe-dispatcher
  bool moe_a2a_overlap = false;             // --moe-a2a-overlap
  std::vector<int> pp;                // --pp 1,2,4: pipeline degrees to consider (default all)
  std::vector<std::string> schedules; // --schedule gpipe,1f1b,interleaved,zb-h1,zb-v (default all)
  int max_tp = 0;                     // --max-tp (default: GPUs per node)
  std::vector<int> cp, ulysses, vp;   // --cp 1,8, --ulysses 8, --vp 2: the layers' degrees to consider
  bool uniform = false;               // --uniform: one strategy for every layer
  bool all_strategies = false;        // --all-strategies: not only what weft's runtime runs
  // A distribution of document lengths instead of one --seq (docs/varlen.md).
  std::string lengths, data, data_format = "auto";  // --lengths FILE | --data TOKENS
  long long eos = -1;                                // --eos ID
  long long max_seq = 0;                             // --max-seq: longer documents dropped
  int steps = 8, first_step = 0;                     // --steps, --first-step: batches sampled
  unsigned long long seed = 0;                       // --seed
  // A multi-task model instead of --model (docs/multitask.md).
  std::string tasks;                                 // --tasks FILE
};

// --dtype as given, else bf16 where the GPU runs it and fp16 where it does not (a V100), as
// Megatron users choose --bf16 or --fp16 by GPU.
DType dtype_or_default(const std::string& flag, const GpuSpec& gpu) {
  if (!flag.empty()) return unwrap(dtype_from_string(flag));
  return gpu.runs(DType::kBf16) ? DType::kBf16 : DType::kFp16;
}

// --exp-avg-dtype, --exp-avg-sq-dtype, --main-grads-dtype (Megatron-LM's precision-aware optimizer),
// which need a 16- or 8-bit compute dtype.
template <class Flags>
OptimizerPrecision optimizer_precision(const Flags& f, DType compute) {
  OptimizerPrecision o;
  o.exp_avg = unwrap(dtype_from_string(f.exp_avg_dtype));
  o.exp_avg_sq = unwrap(dtype_from_string(f.exp_avg_sq_dtype));
  o.main_grads = unwrap(dtype_from_string(f.main_grads_dtype));
  if (o.precision_aware() && compute == DType::kFp32)
    bad("--exp-avg-dtype / --exp-avg-sq-dtype / --main-grads-dtype: the optimizer's states are fp32 under fp32 "
        "training (--dtype fp32); lower-precision states need a 16- or 8-bit compute dtype");
  return o;
}

// Adds Megatron-LM's precision-aware optimizer flags to cmd.
template <class Flags>
void add_optimizer_flags(CLI::App* cmd, Flags* fl) {
  cmd->add_option("--exp-avg-dtype", fl->exp_avg_dtype,
                  "Adam's first moment: fp32, bf16, fp16 or fp8 (Megatron-LM's precision-aware optimizer)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--exp-avg-sq-dtype", fl->exp_avg_sq_dtype, "Adam's second moment: fp32, bf16, fp16 or fp8")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--main-grads-dtype", fl->main_grads_dtype,
                  "Gradients accumulated and reduced: fp32 or bf16 (the master parameters stay fp32)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--moe-imbalance", fl->moe_imbalance,
                  "MoE layers: routed copies the busiest expert-parallel rank receives over the mean (1: even "
                  "routing; `weft train` reports the measured figure as moe[].rank_imbalance)")
      ->capture_default_str();
  cmd->add_option("--moe-dispatcher", fl->moe_dispatcher,
                  "MoE token dispatch: alltoall (Megatron-LM's all-to-all dispatcher), deepep or hybridep (its flex "
                  "dispatcher: a token crosses to a remote node once for all its experts there)")
      ->check(CLI::IsMember({"alltoall", "deepep", "hybridep"}))
      ->capture_default_str();
  cmd->add_flag("--moe-a2a-overlap", fl->moe_a2a_overlap,
                "MoE layers: overlap the expert all-to-all of one micro-batch with another's compute (Megatron-Core's "
                "--overlap-moe-expert-parallel-comm; with pp > 1 it needs an interleaved schedule)");
}

// weft plan --lengths FILE: the model-level strategy for a distribution of document lengths.
void run_plan_lengths(const PlanFlags& f) {
  if (f.in.cost_model != "weft" || !f.in.hardware_profile.empty() || !f.in.model_profile.empty())
    fail(Error{ErrorKind::kBadInput, "--lengths plans with weft's analytic model only (no --cost-model galvatron, "
                                     "--hardware-profile or --model-profile yet)"});
  Inputs in = unwrap(load_inputs(f.in));
  const std::vector<std::int64_t> lengths = unwrap(varlen::load_documents(f.lengths, f.data, f.eos, f.data_format));
  const varlen::Batches batches =
      unwrap(varlen::draw_batches(lengths, f.global_batch, f.steps, f.first_step, f.max_seq, f.seed));
  varlen::DistributionOptions o;
  if (in.framework) o.model = framework_options(*in.framework);
  if (in.margin) o.model.memory_margin = *in.margin;
  o.dtype = dtype_or_default(f.dtype, in.cluster.gpu);
  o.max_tp = f.max_tp;
  const auto candidates = unwrap(varlen::plan_distribution(in.model, in.cluster, batches, o));
  if (candidates.empty() || !candidates.front().fits)
    fail(Error{ErrorKind::kNoFit, "no tensor-parallel degree and recompute policy fits the documents" +
                                      (candidates.empty() ? std::string() : ": " + candidates.front().why)});
  if (!f.out.empty()) {
    const Plan plan = unwrap(varlen::distribution_plan(in.model, in.cluster, candidates.front(), f.global_batch,
                                                       f.max_seq > 0 ? f.max_seq : batches.longest, o.dtype, o.planner));
    check(write_plan_file(f.out, plan));
  }
  auto sizes_text = [](const std::vector<int>& v) {
    std::string o;
    for (int x : v) o += (o.empty() ? "" : ",") + std::to_string(x);
    return o;
  };
  if (f.format == "json") {
    Json list = Json::array();
    for (const varlen::DistributionCandidate& c : candidates) {
      Json j = {{"tp", c.tp}, {"recompute", to_string(c.recompute)}, {"zero", c.zero}, {"fits", c.fits}};
      if (c.fits) {
        j["mean_step_s"] = c.mean_step_s;
        j["tokens_per_s"] = c.tokens_per_s;
        j["mean_micro_batches"] = c.mean_micro_batches;
        j["group_gpus"] = c.group_gpus;
        j["plan_ms_max"] = c.plan_ms_max;
      } else {
        j["why"] = c.why;
      }
      list.push_back(j);
    }
    Json out = {{"model", in.model.name},
                {"gpus", in.cluster.total_gpus()},
                {"global_batch", f.global_batch},
                {"steps", f.steps},
                {"dropped", batches.dropped},
                {"longest", batches.longest},
                {"candidates", list}};
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("weft plan: %s on %d x %s (%d per node), %d documents per step, lengths from %s\n",
              in.model.name.c_str(), in.cluster.total_gpus(), in.cluster.gpu.name.c_str(), in.cluster.gpus_per_node,
              f.global_batch, (f.lengths.empty() ? f.data : f.lengths).c_str());
  std::printf("%d sampled batches; longest document %lld tokens; %lld over --max-seq dropped\n", f.steps,
              static_cast<long long>(batches.longest), static_cast<long long>(batches.dropped));
  std::printf("ZeRO over every GPU; per step the batch planner picks the micro-batches and sequence-parallel "
              "groups (Ulysses, context parallel beyond the heads) of mixed sizes\n\n");
  std::printf("%4s %-10s %4s %12s %12s %6s  %-24s %10s\n", "tp", "recompute", "zero", "step s", "tokens/s", "mbs",
              "group sizes (GPUs)", "plan ms");
  for (const varlen::DistributionCandidate& c : candidates) {
    if (c.fits)
      std::printf("%4d %-10s %4d %12.3f %12.0f %6.1f  %-24s %10.1f\n", c.tp, to_string(c.recompute), c.zero,
                  c.mean_step_s, c.tokens_per_s, c.mean_micro_batches, sizes_text(c.group_gpus).c_str(),
                  c.plan_ms_max);
    else
      std::printf("%4d %-10s %4d  does not fit: %s\n", c.tp, to_string(c.recompute), c.zero, c.why.c_str());
  }
  const varlen::DistributionCandidate& b = candidates.front();
  std::printf("\nbest: tp %d, recompute %s, ZeRO-%d, groups of %s GPUs; %.3f s per step, %.0f tokens/s "
              "(`weft varlen` plans the concrete batches)\n",
              b.tp, to_string(b.recompute), b.zero, sizes_text(b.group_gpus).c_str(), b.mean_step_s, b.tokens_per_s);
  if (!f.out.empty()) std::printf("plan written to %s (weft train --plan %s --data TOKENS --eos ID runs it)\n",
                                  f.out.c_str(), f.out.c_str());
}

// weft plan on mixed or straggling devices (weft/search/hetero.h).
void run_plan_mixed(const PlanFlags& f, const Inputs& in, const SearchOptions& opt, std::vector<std::string> notes,
                    bool runtime_only) {
  const MixedCluster& dev = *in.mixed;
  if (f.galvatron_space) bad("--galvatron-space: Galvatron plans one kind of device; drop it for a mixed cluster");
  if (!f.report.empty()) bad("--report: the HTML report draws one kind of device; not yet for a mixed cluster");
  if (!f.galvatron_out.empty()) bad("--galvatron-out: Galvatron runs one kind of device; not for a mixed cluster");
  for (const ClusterSpec& g : dev.groups) check(check_dtype(g.gpu, opt.dtype, "--dtype"));
  HeteroResult r = unwrap(hetero_search(in.model, dev, in.cost(), opt));
  if (r.top.empty()) {
    std::string msg = "nothing fits on these devices";
    double least = 1e300;
    for (const ClusterSpec& g : dev.groups) least = std::min(least, g.gpu.memory_gib);
    if (r.closest)
      msg += ": the plan needing the least memory needs " + printf_str("%.1f", r.min_memory_gib) +
             " GiB per GPU and the smallest devices hold " + printf_str("%.1f", least) + " GiB";
    if (runtime_only) msg += "; searched only what weft's runtime runs (--all-strategies searches more)";
    fail(Error{ErrorKind::kNoFit, msg});
  }
  const Plan& best = r.top.front();
  const HeteroEstimate& eb = r.top_estimates.front();
  if (!f.out.empty()) check(write_plan_file(f.out, best));
  auto or_null = [](double x) { return x > 0 ? Json(x) : Json(nullptr); };
  if (f.format == "json") {
    Json j = plan_entry(best, eb.total);
    j["device_groups"] = device_groups_json(eb);
    j["baselines"] = {{"uniform_s", or_null(r.uniform_s)},
                      {"fastest_subset_s", or_null(r.fastest_subset_s)},
                      {"fastest_subset", r.fastest_subset_label},
                      {"uniform", r.uniform ? to_json(*r.uniform) : Json(nullptr)}};
    Json top = Json::array();
    for (size_t i = 0; i < r.top.size(); ++i) {
      Json e = plan_entry(r.top[i], r.top_estimates[i].total);
      e["device_groups"] = device_groups_json(r.top_estimates[i]);
      top.push_back(std::move(e));
    }
    j["top"] = std::move(top);
    j["search"] = {{"wall_s", r.stats.wall_s}, {"configurations", r.stats.configurations},
                   {"searched", r.stats.searched}, {"placements", r.placements}};
    add_notes(j, notes);
    std::printf("%s\n", j.dump(2).c_str());
    notes_to_stderr(notes);
    return;
  }
  std::string groups;
  for (const ClusterSpec& g : dev.groups)
    groups += (groups.empty() ? "" : " + ") + S(g.total_gpus()) + " x " + g.gpu.name;
  std::printf("weft plan: %s on %s (%s)\n", in.model.name.c_str(), dev.name.c_str(), groups.c_str());
  for (int g = 0; g < dev.total_gpus(); ++g)
    if (dev.slowdown_of(g) != 1.0) std::printf("straggler: GPU %d computes %sx slower\n", g, num(dev.slowdown_of(g)).c_str());
  std::printf("seq %d, global batch %d, %s; cost model %s (%s)\n", f.seq, f.global_batch, to_string(best.train.dtype),
              in.cost().name().c_str(), in.cost().source().c_str());
  std::printf("searched %lld configurations, placed %lld plans on the devices, in %s\n", r.stats.configurations,
              r.placements, duration_text(r.stats.wall_s).c_str());
  std::fputs(notes_text(notes).c_str(), stdout);
  std::printf("\n");
  std::fputs(device_groups_table(best, eb).c_str(), stdout);
  std::printf("\nstep %s; the best uniform plan (ignoring the differences) on these devices: %s; the best plan on "
              "the fastest homogeneous subset (%s): %s\n\n",
              duration_text(eb.total.step_time.value()).c_str(),
              baseline_text(eb.total.step_time.value(), r.uniform_s).c_str(), r.fastest_subset_label.c_str(),
              baseline_text(eb.total.step_time.value(), r.fastest_subset_s).c_str());
  std::optional<Estimate> eu;
  if (r.uniform) eu = hetero_estimate(*r.uniform, in.cost()).total;
  std::fputs(plan_table(best, eb.total, r.uniform, eu, in.margin).c_str(), stdout);
  std::printf("\n");
  std::fputs(layers_table(best).c_str(), stdout);
  if (!f.out.empty()) std::printf("\nplan written to %s\n", f.out.c_str());
}

// One of Optimus's schedules as a chart of the report's records (the LLM's rows and lane 0's).
OptimusChart optimus_chart(const std::string& title, const multitask::BubbleSchedule& s, int groups) {
  OptimusChart c;
  c.title = title;
  c.groups = groups;
  c.llm_start_s = s.delay_s;
  c.llm_end_s = s.delay_s + s.llm_step_s;
  for (const multitask::OptimusEvent& e : s.events) {
    OptimusPictureEvent pe;
    pe.group = e.device_group;
    pe.start_s = e.start_s;
    pe.end_s = e.end_s;
    pe.micro_batch = e.micro_batch;
    pe.in_bubble = e.in_bubble;
    if (e.kind == multitask::OptimusEventKind::kLlm)
      pe.kind = e.llm_kind == EventKind::kForward ? "llm-forward"
                : e.llm_kind == EventKind::kBackward || e.llm_kind == EventKind::kRecompute ||
                        e.llm_kind == EventKind::kWeightGrad
                    ? "llm-backward"
                    : "llm-other";
    else
      pe.kind = multitask::to_string(e.kind);
    c.events.push_back(std::move(pe));
  }
  return c;
}

// The LLM's layout and the encoder's, as the Optimus table and report print them.
std::string optimus_llm_label(const multitask::OptimusPlan& o) {
  const TrainSettings& tr = o.llm_plan.train;
  return "pp" + S(tr.pp) + (tr.vp > 1 ? " vp" + S(tr.vp) : "") + " tp" + S(o.llm_mp) + " dp" +
         S(o.llm_plan.stages.front().layers.front().dp) + ", " + S(tr.micro_batches) + " micro-batches, " +
         to_string(tr.schedule);
}
std::string optimus_encoder_label(const multitask::OptimusPlan& o) {
  return "dp" + S(o.layout.dp) + " pp" + S(o.layout.pp) + " tp" + S(o.layout.tp) +
         (o.layout.recompute == Recompute::kNone ? "" : std::string(", recompute ") + to_string(o.layout.recompute));
}

// weft plan --tasks FILE: Spindle's waves for a multi-task model, beside the sequential and
// task-greedy baselines and the continuous bound, on the same curves (docs/multitask.md). A file
// whose one task runs an encoder feeding an LLM also gets Optimus's schedule (the encoder in the
// LLM's bubbles, beside the encoder in its first stage): a table after the waves, an "optimus"
// object in the JSON, and the report draws its timeline instead of the waves.
void run_plan_tasks(const PlanFlags& f) {
  if (!f.in.model.empty())
    fail(Error{ErrorKind::kBadInput, "--tasks: the task file names its modules; leave out --model"});
  if (f.in.cost_model != "weft" || !f.in.hardware_profile.empty() || !f.in.model_profile.empty() ||
      !f.in.stragglers.empty())
    fail(Error{ErrorKind::kBadInput, "--tasks plans with weft's analytic model on one kind of GPU only (no "
                                     "--cost-model galvatron, profiles or --straggler yet)"});
  if (!f.lengths.empty() || !f.data.empty() || f.seq >= 0 || f.global_batch > 0)
    fail(Error{ErrorKind::kBadInput, "--tasks: each module's tokens and each task's batch come from the task file; "
                                     "leave out --seq, --global-batch and --lengths"});
  const multitask::TaskSpec t = unwrap(multitask::load_tasks(f.tasks));
  Inputs in = unwrap(load_inputs(f.in, &t.modules.front().model));
  if (in.mixed) fail(Error{ErrorKind::kBadInput, "--tasks: one kind of GPU only (no node groups yet)"});
  SearchOptions base;
  base.top_k = 1;
  base.dtype = dtype_or_default(f.dtype, in.cluster.gpu);
  base.optimizer = optimizer_precision(f, base.dtype);
  const multitask::TasksPlan p = unwrap(multitask::plan_tasks(t, in.cluster, in.cost(), base));
  const int N = in.cluster.total_gpus();
  const double step = p.step_time_s();
  std::optional<Result<multitask::OptimusPlan>> optimus;
  if (t.tasks.size() == 1 && multitask::find_encoder_llm(t).ok())
    optimus = multitask::plan_optimus(t, in.cluster, in.cost(), base);
  if (!f.report.empty() && optimus && optimus->ok()) {
    const multitask::OptimusPlan& o = **optimus;
    OptimusReportInput r;
    r.title = t.name + " on " + S(N) + " x " + in.cluster.gpu.name;
    r.notes = {"LLM \"" + o.llm + "\": " + optimus_llm_label(o) + "; encoder \"" + o.encoder + "\": " +
                   optimus_encoder_label(o) + " (the lanes of a group run alike; one is drawn)",
               "step " + printf_str("%.4f", o.fine.step_time_s) + " s fine (Eff " + printf_str("%.1f", 100 * o.fine.eff()) +
                   " %), " + printf_str("%.4f", o.coarse.step_time_s) + " s coarse (Eff " +
                   printf_str("%.1f", 100 * o.coarse.eff()) + " %); encoder in the first stage " +
                   printf_str("%.4f", o.first_stage_s) + " s; LLM alone " + printf_str("%.4f", o.fine.llm_step_s) +
                   " s; Spindle's waves " + printf_str("%.4f", step) + " s"};
    const int groups = o.llm_plan.train.pp;
    r.charts = {optimus_chart("fine: every gap, kernel chunks", o.fine, groups),
                optimus_chart("coarse: warm-up and cool-down, whole layers", o.coarse, groups)};
    check(write_optimus_html(f.report, r));
  } else if (!f.report.empty()) {
    TasksReportInput r;
    r.title = t.name + " on " + S(N) + " x " + in.cluster.gpu.name;
    r.gpus = N;
    r.notes = {"step time " + printf_str("%.4f", step) + " s; sequential (each task on all " + S(N) +
                   " GPUs in turn) " + printf_str("%.4f", p.sequential_s) + " s; task greedy (whole tasks side by "
                   "side) " + printf_str("%.4f", p.task_greedy_s) + " s; bound " +
                   printf_str("%.4f", p.allocation.bound_s) + " s",
               S(static_cast<long long>(t.tasks.size())) + " tasks, " + S(static_cast<long long>(p.ops.size())) +
                   " operators, " + S(static_cast<long long>(p.allocation.waves.size())) + " waves; planned in " +
                   printf_str("%.2f", p.plan_ms) + " ms from the modules' curves"};
    for (size_t wi = 0; wi < p.allocation.waves.size(); ++wi) {
      const multitask::Wave& w = p.allocation.waves[wi];
      TasksPictureWave pw{w.start_s, w.time_s, {}};
      for (size_t k = 0; k < w.pieces.size(); ++k) {
        const multitask::Piece& pc = w.pieces[k];
        const WavePiece& at = p.placement.waves[wi][k];
        // Where the step runs its forward and its backward.
        const double fwd = pc.time_s * multitask::kForwardShare, bwd = pc.time_s * multitask::kBackwardShare;
        pw.pieces.push_back({at.task, at.module, pc.gpus, pc.layers, pc.time_s, at.first_rank,
                             p.run.fwd_end[wi][k] - fwd, fwd, p.run.bwd_end[wi][k] - bwd, bwd});
      }
      r.waves.push_back(std::move(pw));
    }
    check(write_tasks_html(f.report, r));
  }
  if (f.format == "json") {
    Json j = multitask::to_json(p);
    j["tasks"] = t.name;
    j["gpus"] = in.cluster.total_gpus();
    if (optimus) j["optimus"] = optimus->ok() ? multitask::to_json(**optimus) : Json{{"error", optimus->error().message}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("weft plan: %s on %d x %s (%d per node)\n%zu tasks, %zu operators (task/module)\n\n", t.name.c_str(), N,
              in.cluster.gpu.name.c_str(), in.cluster.gpus_per_node, t.tasks.size(), p.ops.size());
  std::printf("%-4s %8s %8s  %-24s %4s %7s %7s %8s\n", "wave", "start s", "time s", "operator", "GPUs", "ranks",
              "layers", "piece s");
  for (size_t w = 0; w < p.allocation.waves.size(); ++w) {
    const multitask::Wave& wave = p.allocation.waves[w];
    for (size_t i = 0; i < wave.pieces.size(); ++i) {
      const multitask::Piece& pc = wave.pieces[i];
      if (i == 0)
        std::printf("%-4zu %8.4f %8.4f  ", w + 1, wave.start_s, wave.time_s);
      else
        std::printf("%-4s %8s %8s  ", "", "", "");
      const WavePiece& at = p.placement.waves[w][i];
      const std::string ranks = at.gpus == 1 ? S(at.first_rank) : S(at.first_rank) + "-" + S(at.first_rank + at.gpus - 1);
      const std::string layers = S(at.first_layer) + "-" + S(at.first_layer + at.layers - 1);
      std::printf("%-24s %4d %7s %7s %8.4f\n", p.ops[static_cast<size_t>(pc.op)].name.c_str(), pc.gpus, ranks.c_str(),
                  layers.c_str(), pc.time_s);
    }
  }
  std::printf("\nstep time     %10.4f s  run %.4f + wider reductions %.4f\n", step, p.compute_s,
              p.shared_sync.time_s);
  std::printf("              (waves one after another %.4f, crossings in series %.4f)\n", p.allocation.makespan_s,
              p.traffic.time_s);
  if (p.in_turn)
    std::printf("plan kept     operators in turn: Spindle's waves, placed, take %.4f s\n", p.waves_step_s);
  std::printf("traffic       %d crossings, %.1f MB (operators moved, flows between modules)\n", p.traffic.crossings,
              p.traffic.bytes / 1e6);
  std::printf("reductions    %d rank sets, %.1f MB of gradients of layers run on several sets\n",
              p.shared_sync.groups, p.shared_sync.bytes / 1e6);
  std::printf("sequential    %10.4f s  each task on all %d GPUs in turn: weft %.2fx faster\n", p.sequential_s, N,
              p.sequential_s / step);
  std::printf("task greedy   %10.4f s  whole tasks side by side: weft %.2fx faster\n", p.task_greedy_s,
              p.task_greedy_s / step);
  std::printf("bound         %10.4f s  continuous relaxation: weft at %.3fx of it\n", p.allocation.bound_s,
              step / p.allocation.bound_s);
  std::printf("              the waves' run alone at %.3fx\n", p.waves_compute_s / p.allocation.bound_s);
  std::printf("run it        --format json > plan.json, then\n"
              "              weft launch -n %d -- weft train --tasks FILE --plan plan.json\n", N);
  std::printf("planned in %.1f ms from the modules' curves (%.0f ms of searches)\n", p.plan_ms, p.curve_ms);
  if (!optimus) return;
  std::printf("\nOptimus: the encoder's work in the LLM's bubbles (docs/multitask.md)\n");
  if (!optimus->ok()) {
    std::printf("not planned: %s\n", optimus->error().message.c_str());
    return;
  }
  const multitask::OptimusPlan& o = **optimus;
  std::printf("LLM %-10s %s\n", o.llm.c_str(), optimus_llm_label(o).c_str());
  std::printf("encoder %-6s %s\n", o.encoder.c_str(), optimus_encoder_label(o).c_str());
  std::printf("%-16s %10s %8s\n", "", "step s", "Eff");
  std::printf("%-16s %10.4f %6.1f %%  every gap, kernel chunks\n", "bubbles, fine", o.fine.step_time_s,
              100 * o.fine.eff());
  std::printf("%-16s %10.4f %6.1f %%  warm-up and cool-down only\n", "bubbles, coarse", o.coarse.step_time_s,
              100 * o.coarse.eff());
  std::printf("%-16s %10.4f %8s  the encoder's layers on the LLM's stage 0\n", "first stage", o.first_stage_s, "");
  std::printf("%-16s %10.4f\n", "LLM alone", o.fine.llm_step_s);
  std::printf("%.2fx the first stage's speed; %.1f GiB per device of %.1f (first stage: %.1f)\n",
              o.first_stage_s / o.step_time_s(), o.llm_memory_gib + o.encoder_memory_gib, o.memory_budget_gib,
              o.first_stage_memory_gib);
  std::printf("planned in %.1f ms (%.0f ms of the LLM's searches)\n", o.plan_ms, o.search_ms);
}

void run_plan(const PlanFlags& f) {
  if (!f.tasks.empty()) return run_plan_tasks(f);
  if (f.global_batch <= 0) fail(Error{ErrorKind::kBadInput, "--global-batch: required (samples per optimizer step)"});
  if (!f.lengths.empty() || !f.data.empty()) return run_plan_lengths(f);
  if (f.seq < 0) fail(Error{ErrorKind::kBadInput, "--seq: required (or give --lengths FILE)"});
  Inputs in = unwrap(load_inputs(f.in));
  notes_to_stderr(in.notes);
  SearchOptions opt;
  opt.seq = f.seq;
  opt.global_batch = f.global_batch;
  opt.top_k = f.top;
  opt.dtype = dtype_or_default(f.dtype, in.cluster.gpu);
  opt.optimizer = optimizer_precision(f, opt.dtype);
  opt.moe_imbalance = f.moe_imbalance;
  opt.moe_dispatcher = unwrap(moe_dispatcher_from_string(f.moe_dispatcher));
  opt.moe_a2a_overlap = f.moe_a2a_overlap;
  opt.pp_degrees = f.pp;
  for (const std::string& s : f.schedules) opt.schedules.push_back(unwrap(schedule_from_string(s)));
  opt.max_tp = f.max_tp;
  opt.cp_degrees = f.cp;
  opt.ulysses_degrees = f.ulysses;
  opt.vp_degrees = f.vp;
  opt.layerwise = !f.uniform;
  check(validate(opt, in.model, in.cluster));
  if (f.galvatron_space) {
    check(galvatron::restrict_to_galvatron(opt));
  }
  // A named framework: only plans it can run (uniform, its ZeRO stages and schedules; for weft,
  // what `weft train` runs, and a model it cannot run is an error). Without one the plan is meant
  // for weft's runtime, and the search keeps to what `weft train` runs unless --all-strategies
  // lifts that, or the model cannot run there whatever the strategy (then the whole space is
  // searched and a note says why).
  std::vector<std::string> notes;
  bool runtime_only = false;
  if (in.framework) {
    if (f.all_strategies)
      fail(Error{ErrorKind::kBadInput, std::string("--all-strategies: not used with --framework (the search keeps to "
                                                   "what ") + to_string(*in.framework) + " runs)"});
    if (*in.framework == Framework::kWeft)
      if (Status model_runs = runtime_runs_model(in.model); !model_runs.ok())
        fail(Error{ErrorKind::kBadInput, "--framework weft: weft train cannot run " + in.model.name + " yet: " +
                                             model_runs.error().message});
    check(restrict_to_framework(opt, *in.framework));
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
        "searched only what weft's runtime (weft train) runs: no expert parallelism (ep); "
        "--all-strategies searches it too (for planning only), --framework NAME plans for another framework");
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
  if (in.mixed) return run_plan_mixed(f, in, opt, notes, runtime_only);
  // Galvatron's model in Galvatron's space: its task loop, each plan scored with its exact accounting.
  SearchResult r = unwrap(galvatron::search_with(in.setup, in.model, in.cluster, opt, f.galvatron_space));
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
  if (!in.framework && f.all_strategies) {
    const Status runs = runtime_supports(best);
    notes.push_back(runs.ok() ? "--all-strategies: searched everything the cost model knows; the best plan also "
                                "runs on weft's runtime"
                              : "--all-strategies: searched everything the cost model knows; weft train cannot "
                                "run the best plan yet (" + runs.error().message + ")");
  }
  const Estimate eb = estimate(best, in.cost());
  std::optional<Estimate> eu;
  if (r.best_uniform) eu = estimate(*r.best_uniform, in.cost());
  if (!f.out.empty()) check(write_plan_file(f.out, best));
  if (!f.report.empty()) {
    check(write_html_report(f.report, unwrap(make_report_input(r.top, r.best_uniform, in.cost()))));
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
    for (const Plan& p : r.top) top.push_back(plan_entry(p, estimate(p, in.cost())));
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
              to_string(best.train.dtype), in.cost().name().c_str(), in.cost().source().c_str());
  std::printf("searched %lld configurations in %s\n", r.stats.configurations, duration_text(r.stats.wall_s).c_str());
  std::fputs(notes_text(notes).c_str(), stdout);
  std::printf("\n");
  std::fputs(plan_table(best, eb, r.best_uniform, eu, in.margin).c_str(), stdout);
  std::printf("\n");
  std::fputs(layers_table(best).c_str(), stdout);
  if (r.top.size() > 1) std::printf("\n%s", ranking_table(r.top).c_str());
  if (!f.out.empty()) std::printf("\nplan written to %s\n", f.out.c_str());
}

// --- weft estimate ----------------------------------------------------------------------------

struct EstimateFlags {
  InputFlags in;
  std::string plan;
  int seq = 0, global_batch = 0, micro_batch = 0;
  int tp = 0, pp = 0, dp = 0, cp = 1, ulysses = 1, ep = 1, vp = 1, zero = 0;
  int etp = 0;  // 0: as tp
  int rounds = 1;  // --pipeline-rounds
  std::string recompute = "none";
  bool sequence_parallel = false;
  std::string schedule;
  std::string dtype;  // empty: default_dtype(gpu)
  std::string exp_avg_dtype = "fp32", exp_avg_sq_dtype = "fp32", main_grads_dtype = "fp32";
  double moe_imbalance = 1.0;  // --moe-imbalance
  std::string moe_dispatcher = "alltoall";  // --moe-dispatcher
  bool moe_a2a_overlap = false;             // --moe-a2a-overlap
  std::string format = "table";
  std::string out;
};


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
  pos("--pipeline-rounds", f.rounds);
  pos("--ep", f.ep);
  if (f.etp != 0) pos("--etp", f.etp);
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
    const int etp = f.etp > 0 ? f.etp : f.tp;
    if (s.moe.enabled() && s.moe.expert_ffn % etp != 0)
      bad(std::string(f.etp > 0 ? "--etp: etp=" : "--tp: tp (the experts' tensor degree unless --etp) = ") + S(etp) +
          " does not divide the expert FFN size " + S(s.moe.expert_ffn));
    const long long ffn = s.moe.enabled() ? s.moe.shared_experts * s.moe.expert_ffn : s.ffn;
    if (ffn % f.tp != 0)
      bad("--tp: tp=" + S(f.tp) + " does not divide the " + (s.moe.enabled() ? "shared experts' " : "") +
          "FFN size " + S(ffn));
    if (s.moe.enabled() && s.moe.experts % f.ep != 0)
      bad("--ep: ep=" + S(f.ep) + " does not divide " + S(s.moe.experts) + " experts");
  }
  const bool moe = m.has_moe();
  if (f.ep > 1 && !moe) bad("--ep: ep=" + S(f.ep) + " needs a mixture-of-experts model (" + m.name + " has none)");
  if (f.etp > 0 && f.etp != f.tp && !moe)
    bad("--etp: etp=" + S(f.etp) + " needs a mixture-of-experts model (" + m.name + " has none)");
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
  {
    const long long stage = static_cast<long long>(f.tp) * f.ulysses * f.cp * dp;
    const int etp = f.etp > 0 ? f.etp : f.tp;
    if (stage % (static_cast<long long>(f.ep) * etp) != 0)
      bad("--ep: ep*etp = " + S(f.ep) + "*" + S(etp) + " = " + S(static_cast<long long>(f.ep) * etp) +
          " does not divide the " + S(stage) + " GPUs of a pipeline stage (tp*ulysses*cp*dp = " + S(f.tp) + "*" +
          S(f.ulysses) + "*" + S(f.cp) + "*" + S(dp) + ")");
  }
  TrainSettings t;
  t.seq = f.seq;
  t.global_batch = f.global_batch;
  t.micro_batches = static_cast<int>(f.global_batch / per_step);
  t.pp = f.pp;
  t.vp = f.vp;
  if (f.schedule.empty()) t.schedule = f.vp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  else t.schedule = unwrap(schedule_from_string(f.schedule));
  t.dtype = dtype_or_default(f.dtype, in.cluster.gpu);
  t.optimizer = optimizer_precision(f, t.dtype);
  check(check_moe_imbalance(f.moe_imbalance, in.model, "--moe-imbalance"));
  t.moe_imbalance = f.moe_imbalance;
  t.moe_dispatcher = unwrap(moe_dispatcher_from_string(f.moe_dispatcher));
  t.moe_a2a_overlap = f.moe_a2a_overlap;
  if (t.moe_a2a_overlap && !t.pairs_micro_batches())
    bad("--moe-a2a-overlap: with --pp " + S(t.pp) + " it needs an interleaved schedule (--vp > 1), as Megatron-LM's "
        "--overlap-moe-expert-parallel-comm does");
  check(check_moe_dispatch(t.moe_dispatcher, t.moe_a2a_overlap, in.model, "--moe-dispatcher", "--moe-a2a-overlap"));
  t.rounds = f.rounds;
  if (t.micro_batches % t.rounds != 0)
    bad("--pipeline-rounds: " + S(t.rounds) + " pipeline schedules do not divide the " + S(t.micro_batches) +
        " micro-batches of a step (global batch " + S(f.global_batch) + " / (micro-batch " + S(f.micro_batch) + " x dp " +
        S(dp) + "))");
  LayerStrategy s;
  s.tp = f.tp;
  s.sp = f.sequence_parallel;
  s.ulysses = f.ulysses;
  s.cp = f.cp;
  s.dp = dp;
  s.zero = f.zero;
  s.recompute = unwrap(recompute_from_string(f.recompute));
  s.ep = f.ep;
  s.etp = f.etp == f.tp ? 0 : f.etp;
  return unwrap(make_uniform_plan(in.model, in.cluster, t, s, embedding_for(s)));
}

void run_estimate(const EstimateFlags& f, const CLI::App& cmd) {
  Plan p;
  Inputs in;
  if (!f.plan.empty()) {
    for (const char* flag : {"--seq", "--global-batch", "--micro-batch", "--tp", "--pp", "--dp", "--cp", "--ulysses",
                             "--ep", "--etp", "--vp", "--zero", "--recompute", "--sequence-parallel", "--schedule", "--dtype",
                             "--exp-avg-dtype", "--exp-avg-sq-dtype", "--main-grads-dtype", "--pipeline-rounds",
                             "--moe-imbalance", "--moe-dispatcher", "--moe-a2a-overlap"})
      if (cmd.count(flag) > 0)
        bad(std::string(flag) + ": not used with --plan (the plan file fixes the strategy; edit it instead)");
    p = unwrap(read_fixed_plan(f.plan, "estimate"));
    in = unwrap(load_inputs(f.in, &p.model, &p.cluster));
    notes_to_stderr(in.notes);
    p.model = in.model;
    p.cluster = in.cluster;
    Status st = validate(p);
    if (!st.ok()) fail(st.error().with_context(f.plan));
  } else {
    for (const char* flag : {"--seq", "--global-batch", "--micro-batch", "--tp", "--pp"})
      if (cmd.count(flag) == 0) bad(std::string(flag) + ": required (or give --plan FILE)");
    in = unwrap(load_inputs(f.in));
    notes_to_stderr(in.notes);
    // zb-v holds exactly two model chunks per device group: vp 2 unless --vp says otherwise.
    EstimateFlags g = f;
    if (g.schedule == "zb-v") {
      if (cmd.count("--vp") > 0 && g.vp != 2)
        bad("--vp: " + S(g.vp) + " with --schedule zb-v, which runs exactly 2 model chunks per device group "
            "(leave --vp out or give 2)");
      g.vp = 2;
    }
    p = plan_from_flags(g, in);
  }
  // A plan for a named framework must be one it can run (the rules of restrict_to_framework).
  // Without one it is meant for weft's runtime: what that cannot run is costed all the same, with
  // a note naming it.
  std::vector<std::string> notes;
  if (in.framework) {
    check(framework_runs(p, *in.framework));
  } else if (Status runs = runtime_supports(p); !runs.ok()) {
    notes.push_back("weft train cannot run this plan yet (" + runs.error().message +
                    "); the estimate is for planning only");
  }
  // Mixed or straggling devices: the plan placed on them (as given, in the cluster's order) and costed
  // unit by unit (weft/search/hetero.h).
  if (in.mixed && !p.devices) {
    std::vector<int> order(in.mixed->groups.size());
    for (size_t g = 0; g < order.size(); ++g) order[g] = static_cast<int>(g);
    p = place(std::move(p), *in.mixed, order);
  } else if (in.mixed && p.devices && !(in.mixed->slowdown == p.devices->cluster.slowdown)) {
    notes.push_back(f.plan + " carries its own devices and slowdowns (devices); they are costed, not the "
                    "stragglers given here (--straggler, a cluster file or a profile's measured speeds)");
  }
  // Galvatron's model: its exact accounting (the plan's own task and buffer).
  // Uneven shares (with or without devices) are costed replica by replica.
  const Estimate e = p.devices || !p.train.dp_shares.empty() ? hetero_estimate(p, in.cost()).total
                                                             : unwrap(galvatron::estimate_with(in.setup, p));
  annotate(p, e, in.cost());
  if (!f.out.empty()) check(write_plan_file(f.out, p));
  if (f.format == "json") {
    Json j = unwrap(galvatron::estimate_json_with(in.setup, p, e));
    add_notes(j, notes);
    std::printf("%s\n", j.dump(2).c_str());
    notes_to_stderr(notes);
  } else {
    std::printf("weft estimate: %s on %s\n", p.model.name.c_str(), cluster_text(p.cluster).c_str());
    std::printf("seq %d, global batch %d, %s, %s; cost model %s (%s)\n", p.train.seq, p.train.global_batch,
                to_string(p.train.dtype), pipeline_text(p.train).c_str(), in.cost().name().c_str(),
                in.cost().source().c_str());
    // What the MoE exchange was priced as, where it is not the default.
    std::string moe;
    if (p.train.moe_imbalance != 1.0)
      moe += "; MoE routing: the busiest expert rank takes " + num(p.train.moe_imbalance) + "x the mean";
    if (p.train.moe_dispatcher != MoeDispatcher::kAllToAll)
      moe += std::string("; MoE dispatch: ") + to_string(p.train.moe_dispatcher) + " (a token per remote node)";
    if (p.train.moe_a2a_overlap) moe += "; expert all-to-all overlapped across micro-batches";
    std::printf("layers %s, embedding %s%s\n\n", p.uniform() ? label(*p.uniform_strategy()).c_str() : "per layer",
                label(p.embedding).c_str(), moe.c_str());
    std::fputs(estimate_table(p, e, in.margin).c_str(), stdout);
    if (!notes.empty()) std::printf("\n");
    std::fputs(notes_text(notes).c_str(), stdout);
    if (!f.out.empty()) std::printf("\nplan written to %s\n", f.out.c_str());
  }
  if (!e.fits) {
    // The device the figures are of: on mixed devices, the kind whose budget they name (the one with
    // the least room, weft/search/hetero.h).
    double device_gib = p.cluster.gpu.memory_gib;
    if (p.devices)
      for (const ClusterSpec& g : p.devices->cluster.groups)
        if (in.cost().memory_budget(g) == e.memory_budget) device_gib = g.gpu.memory_gib;
    fail(Error{ErrorKind::kNoFit, "the plan needs " + printf_str("%.1f", to_gib(e.peak_memory)) +
                                      " GiB per GPU but the cost model allows " + printf_str("%.1f", to_gib(e.memory_budget)) +
                                      " GiB of the " + printf_str("%.1f", device_gib) + " GiB device" +
                                      (in.margin ? " (its reserves and a margin of " + to_string(*in.margin) +
                                                       "; --memory-margin sets the margin)"
                                                 : "")});
  }
}

}  // namespace

void register_plan_commands(CLI::App& app) {
  {
    auto fl = std::make_shared<PlanFlags>();
    auto* cmd = app.add_subcommand("plan", "Search the fastest hybrid-parallel plan that fits");
    add_input_flags(cmd, fl->in);
    cmd->add_option("--seq,--seq-length", fl->seq, "Sequence length (tokens per sample); or --lengths");
    cmd->add_option("--tasks", fl->tasks,
                    "A multi-task model file (modules, data flow, tasks; docs/multitask.md) instead of --model: "
                    "Spindle's waves of modules on the GPUs, beside the sequential and task-greedy baselines");
    cmd->add_option("--lengths", fl->lengths,
                    "Plan for a distribution of document lengths (one per line) instead of one --seq: tensor "
                    "parallelism, recompute and the sequence-parallel group sizes (docs/varlen.md)");
    cmd->add_option("--data", fl->data,
                    "As --lengths, the documents of a token file split at --eos, or of a Megatron-LM indexed "
                    "dataset (PREFIX of PREFIX.idx + PREFIX.bin)");
    cmd->add_option("--eos", fl->eos, "End-of-document token id of --data");
    cmd->add_option("--data-format", fl->data_format,
                    "auto, uint16, uint32 or megatron (PREFIX.idx + PREFIX.bin: documents from the index, no --eos)")
        ->check(CLI::IsMember({"auto", "uint16", "uint32", "megatron"}));
    cmd->add_option("--max-seq", fl->max_seq, "With --lengths: longer documents are dropped (0: none)");
    cmd->add_option("--steps", fl->steps, "With --lengths: global batches sampled")->capture_default_str();
    cmd->add_option("--first-step", fl->first_step, "With --lengths: batches skipped before the first sampled");
    cmd->add_option("--seed", fl->seed, "With --lengths: shuffle the documents with this seed first (0: file order)");
    cmd->add_option("--global-batch,--global-batch-size", fl->global_batch,
                    "Samples per optimizer step (required, except with --tasks, whose tasks have their batches)");
    cmd->add_option("--top", fl->top, "How many plans to list")->capture_default_str();
    cmd->add_option("--dtype", fl->dtype,
                    "Compute dtype (default bf16, fp16 on a GPU without bf16; fp32 master weights and Adam states "
                    "either way)")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}));
    add_optimizer_flags(cmd, fl.get());
    cmd->add_option("--pp,--pipeline-model-parallel-size", fl->pp,
                    "Pipeline degrees to consider, e.g. 1,2,4 (default: all that divide)")
        ->delimiter(',');
    cmd->add_option("--schedule", fl->schedules, "Pipeline schedules to consider: gpipe,1f1b,interleaved,zb-h1,zb-v (default: all the target runs; zb-h1 splits each backward into its input- and weight-gradient passes, zb-v does too over two model chunks per device group in a V)")
        ->delimiter(',')
        ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"}));
    cmd->add_option("--max-tp", fl->max_tp, "Largest tensor-parallel degree (default: GPUs per node)");
    cmd->add_option("--cp,--context-parallel-size", fl->cp,
                    "Context-parallel (ring attention) degrees the layers may take, e.g. 1,8 (default: those the "
                    "rules allow; weft train runs no context parallelism yet: with cp > 1 add --all-strategies or "
                    "--framework)")
        ->delimiter(',');
    cmd->add_option("--ulysses", fl->ulysses, "Ulysses sequence-parallel degrees the layers may take, e.g. 1,8")
        ->delimiter(',');
    cmd->add_option("--vp,--num-virtual-stages-per-pipeline-rank", fl->vp,
                    "Virtual stages per device group the interleaved schedule may take, e.g. 2 (default: 2 to 4)")
        ->delimiter(',');
    cmd->add_flag("--uniform", fl->uniform, "One strategy for every layer (Megatron-style), no per-layer mix");
    cmd->add_flag("--all-strategies", fl->all_strategies,
                  "Without --framework: search everything the cost model knows, also what weft's runtime "
                  "cannot run yet (cp, ep); for planning only");
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
    cmd->add_option("--seq,--seq-length", fl->seq, "Sequence length");
    cmd->add_option("--global-batch,--global-batch-size", fl->global_batch, "Samples per optimizer step");
    cmd->add_option("--micro-batch,--micro-batch-size", fl->micro_batch,
                    "Samples per data-parallel replica per micro-batch");
    cmd->add_option("--tp,--tensor-model-parallel-size", fl->tp, "Tensor-parallel degree");
    cmd->add_option("--pp,--pipeline-model-parallel-size", fl->pp, "Pipeline degree");
    cmd->add_option("--dp", fl->dp, "Data-parallel degree (default: GPUs / (tp*pp*cp*ulysses))");
    cmd->add_option("--cp,--context-parallel-size", fl->cp, "Context-parallel (ring attention) degree")
        ->capture_default_str();
    cmd->add_option("--ulysses", fl->ulysses, "Ulysses sequence-parallel degree")->capture_default_str();
    cmd->add_option("--ep,--expert-model-parallel-size", fl->ep, "Expert-parallel degree (MoE layers)")
        ->capture_default_str();
    cmd->add_option("--etp,--expert-tensor-parallel-size", fl->etp,
                    "Expert tensor-parallel degree: each expert split over etp GPUs (MoE layers; default: tp, as "
                    "Megatron-LM). The experts lie on their own grid, etp x ep x expert data parallel, over the "
                    "GPUs of a stage, so with etp 1 ep may span the tp ranks");
    cmd->add_option("--vp,--num-virtual-stages-per-pipeline-rank", fl->vp,
                    "Virtual stages per device group (interleaved)")
        ->capture_default_str();
    cmd->add_option("--zero", fl->zero, "ZeRO stage 0-3")->capture_default_str();
    cmd->add_option("--recompute", fl->recompute, "Activation recompute")
        ->check(CLI::IsMember({"none", "selective", "full"}))
        ->capture_default_str();
    cmd->add_flag("--sequence-parallel", fl->sequence_parallel, "Megatron sequence parallelism on the tp group");
    cmd->add_option("--schedule", fl->schedule,
                    "gpipe, 1f1b, interleaved, zb-h1 or zb-v (default: 1f1b, interleaved if vp > 1; zb-v sets vp 2)")
        ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"}));
    cmd->add_option("--dtype", fl->dtype, "Compute dtype (default bf16, fp16 on a GPU without bf16)")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}));
    add_optimizer_flags(cmd, fl.get());
    cmd->add_option("--pipeline-rounds", fl->rounds,
                    "Run a step's micro-batches as this many separate pipeline schedules, each filling and draining "
                    "the pipeline (torchtitan's gradient accumulation with a local batch below global / dp)")
        ->capture_default_str();
    cmd->add_option("--format", fl->format, "Output on stdout: table or json")
        ->check(CLI::IsMember({"table", "json"}))
        ->capture_default_str();
    cmd->add_option("--out", fl->out, "Also write the costed plan to this file");
    cmd->callback([fl, cmd] { run_estimate(*fl, *cmd); });
  }
}

}  // namespace weft::cli
