// `weft report`, `weft simulate` and `weft export`: pictures, a Perfetto trace and framework exports
// of a plan file (docs/report.md). The cost model is rebuilt from the plan's own model and cluster.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "inputs.h"
#include "weft/cost/estimate.h"
#include "weft/plan/plan.h"
#include "weft/report/export.h"
#include "weft/report/html.h"
#include "weft/report/plan_text.h"
#include "weft/cost/schedule.h"
#include "weft/report/summary.h"
#include "weft/report/trace.h"
#include "weft/galvatron/strategy.h"

namespace weft::cli {

namespace {

// The cost-model flags that make sense for an existing plan (its model and cluster are fixed).
void add_cost_flags(CLI::App* cmd, InputFlags& f) {
  cmd->add_option("--cost-model", f.cost_model, "Cost model: weft or galvatron")
      ->check(CLI::IsMember({"weft", "galvatron"}))
      ->capture_default_str();
  cmd->add_option("--galvatron-profiles", f.galvatron_profiles, "Galvatron profile directory");
  cmd->add_option("--hardware-profile", f.hardware_profile, "Measured collective profile (hw.json)");
  cmd->add_option("--model-profile", f.model_profile, "Measured layer profile (layers.json)");
}

void add_format_flag(CLI::App* cmd, std::string& format) {
  cmd->add_option("--format", format, "Output on stdout: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
}

std::unique_ptr<CostModel> cost_for(const InputFlags& f, const Plan& p) {
  return unwrap(load_cost_model(f, p.model, p.cluster));
}

void print_json(const Json& j) { std::printf("%s\n", j.dump(2).c_str()); }

// "weft: note: ..." on stderr, word-wrapped to 80 columns.
void note(const std::string& s) {
  const std::string prefix = "weft: note: ", indent(prefix.size(), ' ');
  std::string line = prefix, word;
  auto flush_word = [&] {
    if (word.empty()) return;
    if (line.size() > prefix.size() && line.size() + 1 + word.size() > 80) {
      std::fprintf(stderr, "%s\n", line.c_str());
      line = indent;
    }
    line += (line.size() > prefix.size() && line != indent ? " " : "") + word;
    word.clear();
  };
  for (char c : s) {
    if (c == ' ') {
      flush_word();
    } else {
      word += c;
    }
  }
  flush_word();
  std::fprintf(stderr, "%s\n", line.c_str());
}

// Writes `text` to `out`, or to stdout when out is empty.
void emit(const std::string& out, const std::string& text, const std::string& what) {
  if (out.empty()) {
    std::fputs(text.c_str(), stdout);
    return;
  }
  auto r = catch_errors([&]() -> Result<bool> {
    write_text_file(out, text);
    return true;
  });
  if (!r.ok()) fail(r.error());
  std::fprintf(stderr, "weft: wrote %s to %s\n", what.c_str(), out.c_str());
}

// --- weft report ---------------------------------------------------------------------------------

struct ReportFlags {
  std::string plan;
  std::string out = "report.html";
  std::string format = "text";
  std::vector<std::string> alternatives;
  std::string uniform;
  std::string title;
  InputFlags cost;
};

void run_report(const ReportFlags& fl) {
  ReportInput in;
  in.best = unwrap(read_fixed_plan(fl.plan, "report"));
  for (const auto& a : fl.alternatives) in.alternatives.push_back(unwrap(read_fixed_plan(a, "report")));
  if (!fl.uniform.empty()) in.uniform = unwrap(read_fixed_plan(fl.uniform, "report"));
  in.title = fl.title;
  auto cm = cost_for(fl.cost, in.best);
  in.cost = cm.get();
  check(write_html_report(fl.out, in));

  const Estimate e = estimate(in.best, *cm);
  const Simulation sim = unwrap(simulate_plan(in.best, *cm));
  if (fl.format == "json") {
    print_json(Json{{"report", fl.out}, {"estimate", to_json(e)}, {"simulation", simulation_json(sim, e.step_time.value())}});
    return;
  }
  std::printf("Wrote %s\n", fl.out.c_str());
  std::printf("  step %.4f s (simulated %.4f s), %.0f tokens/s, MFU %s\n", e.step_time.value(), sim.makespan_s,
              e.tokens_per_s, utilisation_text(e).c_str());
  std::printf("  peak memory %.2f GiB of a %.2f GiB budget%s\n", to_gib(e.peak_memory), to_gib(e.memory_budget),
              e.fits ? "" : "  (DOES NOT FIT)");
  std::printf("  pictures: pipeline timeline, memory per stage, per-layer strategy map,\n"
              "  time breakdown, alternatives table (%zu plan%s)\n",
              1 + in.alternatives.size() + (in.uniform ? 1 : 0),
              in.alternatives.empty() && !in.uniform ? "" : "s");
}

// --- weft simulate -------------------------------------------------------------------------------

struct SimulateFlags {
  std::string plan;
  std::string trace;
  std::string format = "text";
  InputFlags cost;
};

void run_simulate(const SimulateFlags& fl) {
  const Plan p = unwrap(read_fixed_plan(fl.plan, "simulate"));
  auto cm = cost_for(fl.cost, p);
  const Estimate e = estimate(p, *cm);
  const auto timings = stage_timings(p, *cm);
  const Simulation sim = unwrap(simulate_schedule(schedule_spec(p, *cm), timings));
  if (!fl.trace.empty()) {
    TraceInfo info;
    info.title = p.model.name + " on " + p.cluster.name;
    info.predicted_step_s = e.step_time.value();
    info.devices_per_stage = p.devices_per_stage();
    check(write_chrome_trace(fl.trace, sim, timings, info));
  }
  if (fl.format == "json") {
    Json j = simulation_json(sim, e.step_time.value());
    if (!fl.trace.empty()) j["trace"] = fl.trace;
    print_json(j);
    return;
  }
  std::fputs(simulation_text(sim, e.step_time.value(), p.devices_per_stage()).c_str(), stdout);
  if (!fl.trace.empty()) std::printf("\nWrote %s (open it in ui.perfetto.dev or chrome://tracing)\n", fl.trace.c_str());
}

// --- weft export ---------------------------------------------------------------------------------

struct ExportFlags {
  std::string target;
  std::string plan;
  std::string out;
  std::string format = "text";
  bool megatron_deepspeed = false;
};

void run_export(const ExportFlags& fl) {
  const Plan p = unwrap(read_fixed_plan(fl.plan, "export"));
  if (fl.target == "megatron") {
    const MegatronArgs a = unwrap(megatron_args(p));
    if (fl.format == "json") {
      emit(fl.out, Json{{"args", a.lines}, {"notes", a.notes}}.dump(2) + "\n", "Megatron-LM arguments");
    } else {
      for (const auto& n : a.notes) note(n);
      emit(fl.out, a.text(), "Megatron-LM arguments");
    }
    return;
  }
  if (fl.target == "deepspeed") {
    const DeepSpeedConfig c = unwrap(deepspeed_config(
        p, fl.megatron_deepspeed ? DeepSpeedTarget::kMegatronDeepSpeed : DeepSpeedTarget::kDeepSpeed));
    for (const auto& n : c.notes) note(n);
    emit(fl.out, c.config.dump(2) + "\n", "DeepSpeed config");
    return;
  }
  if (fl.target == "torchtitan") {
    const TorchtitanConfig c = unwrap(torchtitan_config(p));
    for (const auto& n : c.notes) note(n);
    emit(fl.out, c.toml, "torchtitan job config");
    return;
  }
  const Json g = unwrap(galvatron::export_strategy(p));
  emit(fl.out, g.dump(2) + "\n", "Galvatron strategy");
}

}  // namespace

void register_report_commands(CLI::App& app) {
  {
    auto fl = std::make_shared<ReportFlags>();
    auto* cmd = app.add_subcommand("report", "Write a self-contained HTML report (SVG pictures) of a plan");
    cmd->add_option("plan", fl->plan, "Plan file (weft plan ... --out plan.json)")->required();
    cmd->add_option("--out,-o", fl->out, "HTML file to write")->capture_default_str();
    cmd->add_option("--alternatives", fl->alternatives, "Other plan files to compare in the table");
    cmd->add_option("--uniform", fl->uniform, "A uniform (single-strategy) plan file to compare");
    cmd->add_option("--title", fl->title, "Report title (default: model on cluster)");
    add_format_flag(cmd, fl->format);
    add_cost_flags(cmd, fl->cost);
    cmd->callback([fl] { run_report(*fl); });
  }
  {
    auto fl = std::make_shared<SimulateFlags>();
    auto* cmd = app.add_subcommand("simulate", "Simulate one step of a plan; optionally write a Perfetto trace");
    cmd->add_option("plan", fl->plan, "Plan file")->required();
    cmd->add_option("--trace", fl->trace, "Chrome/Perfetto trace JSON to write");
    add_format_flag(cmd, fl->format);
    add_cost_flags(cmd, fl->cost);
    cmd->callback([fl] { run_simulate(*fl); });
  }
  {
    auto fl = std::make_shared<ExportFlags>();
    auto* cmd = app.add_subcommand("export", "Export a plan as Megatron-LM flags, a DeepSpeed config, torchtitan "
                                             "job-config tables or a Galvatron strategy");
    cmd->add_option("target", fl->target, "megatron, deepspeed, torchtitan or galvatron")
        ->required()
        ->check(CLI::IsMember({"megatron", "deepspeed", "torchtitan", "galvatron"}));
    cmd->add_option("plan", fl->plan, "Plan file")->required();
    cmd->add_option("--out,-o", fl->out, "File to write (default: stdout)");
    cmd->add_option("--format", fl->format, "megatron: text (one flag per line) or json")
        ->check(CLI::IsMember({"text", "json"}))
        ->capture_default_str();
    cmd->add_flag("--megatron-deepspeed", fl->megatron_deepspeed,
                  "deepspeed: a config for Megatron-DeepSpeed (tp/pp from its flags) instead of plain DeepSpeed");
    cmd->callback([fl] { run_export(*fl); });
  }
}

}  // namespace weft::cli
