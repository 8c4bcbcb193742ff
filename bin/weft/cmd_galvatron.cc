// `weft import galvatron STRATEGY.json`: a Galvatron strategy file as a weft plan, costed with the
// Galvatron-compatible model over the same profiles (docs/galvatron.md).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "weft/cost/estimate.h"
#include "weft/galvatron/cost_model.h"
#include "weft/galvatron/model_config.h"
#include "weft/galvatron/setup.h"
#include "weft/galvatron/strategy.h"
#include "weft/spec/presets.h"

namespace weft::cli {

namespace {

struct ImportFlags {
  std::string strategy;
  std::string profiles;
  std::string model_yaml;
  std::string cluster = "a100-80gb";
  ClusterOverrides overrides;
  int seq = 0;
  std::string megatron_sp = "on";
  std::string out;
  std::string format = "text";
};

void run_import(const ImportFlags& f) {
  const Json strategy = unwrap(catch_errors([&] { return read_json_file(f.strategy); }));
  const galvatron::ModelConfig mc = unwrap(galvatron::read_model_yaml(f.model_yaml));
  const ModelSpec model = unwrap(galvatron::to_model_spec(mc));

  ClusterOverrides o = f.overrides;
  if (o.gpus <= 0 && strategy.is_object() && strategy.contains("world_size") && strategy["world_size"].is_number_integer())
    o.gpus = strategy["world_size"].get<int>();
  if (o.gpus <= 0)
    fail(Error{ErrorKind::kBadInput, f.strategy + ": no world_size; give --gpus N (and --gpus-per-node G)"});
  if (o.gpus_per_node <= 0) o.gpus_per_node = std::min(o.gpus, 8);
  const ClusterSpec cluster = unwrap(apply_overrides(unwrap(load_cluster(f.cluster)), o));

  galvatron::Profiles prof =
      unwrap(galvatron::load_profiles_for(f.profiles, mc.model_size, cluster, DType::kBf16, f.seq));
  for (const auto& n : prof.notes) std::fprintf(stderr, "weft: note: %s\n", n.c_str());
  const int seq = f.seq > 0 ? f.seq : prof.compute.seq;

  galvatron::ImportOptions io;
  io.megatron_sp = f.megatron_sp == "on";
  auto imported = galvatron::import_strategy(strategy, model, cluster, seq, io);
  if (!imported.ok()) fail(imported.error().with_context(f.strategy));
  Plan plan = std::move(imported).value();

  const galvatron::GalvatronCostModel cm(std::move(prof), mc.hidden_size);
  const galvatron::GalvatronEstimate ge = unwrap(cm.estimate_plan(plan));
  const Estimate e = unwrap(cm.estimate(plan));
  annotate(plan, e, cm);
  check(write_plan_file(f.out, plan));

  if (f.format == "json") {
    Json j = galvatron::to_json(ge);
    j["plan"] = f.out;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("imported %s -> %s\n", f.strategy.c_str(), f.out.c_str());
  std::printf("  pp %d, %d micro-batches of %d samples, %s, %d GPUs\n", plan.train.pp, plan.train.micro_batches,
              plan.train.pipeline_micro_batch(), to_string(plan.train.schedule), plan.world_size());
  std::printf("  Galvatron's cost model: %.4f s per iteration, %.2f samples/s (task %s", ge.iteration_s,
              ge.samples_per_s, galvatron::to_string(ge.mode));
  if (ge.buffer_tp > 0) std::printf(", buffer tp %d", ge.buffer_tp);
  std::printf(")\n  memory per stage, as Galvatron counts it (incl. the %lld MB reserve) of %lld MB:", ge.reserve_mb,
              ge.memory_mb);
  for (const auto& s : ge.stages) std::printf(" %lld%s", s.galvatron_mb, s.fits ? "" : " (does not fit)");
  std::printf("\n");
}

}  // namespace

void register_galvatron_commands(CLI::App& app) {
  auto* imp = app.add_subcommand("import", "Import a plan from another system's file");
  imp->require_subcommand(1);
  auto f = std::make_shared<ImportFlags>();
  auto* cmd = imp->add_subcommand("galvatron", "A Galvatron strategy JSON as a weft plan, costed with Galvatron's model");
  cmd->add_option("strategy", f->strategy, "Galvatron strategy JSON")->required();
  cmd->add_option("--galvatron-profiles", f->profiles, "Directory of Galvatron profile files")->required();
  cmd->add_option("--galvatron-model", f->model_yaml, "Galvatron model YAML")->required();
  cmd->add_option("--cluster", f->cluster, "Base cluster (preset or file) for the GPU figures")->capture_default_str();
  cmd->add_option("--gpus", f->overrides.gpus, "Total GPUs (default: the strategy's world_size)");
  cmd->add_option("--gpus-per-node", f->overrides.gpus_per_node, "GPUs per node (default 8)");
  cmd->add_option("--memory-gb", f->overrides.memory_gb,
                  "Memory per GPU in GB of 2^30 bytes: Galvatron's memory_constraint");
  cmd->add_option("--seq", f->seq, "Sequence length (default: the profiles')");
  cmd->add_option("--megatron-sp", f->megatron_sp,
                  "Megatron sequence parallelism on tp layers (Galvatron's --sequence_parallel): on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--out", f->out, "Plan file to write")->required();
  cmd->add_option("--format", f->format, "Summary on stdout: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([f] { run_import(*f); });
}

}  // namespace weft::cli
