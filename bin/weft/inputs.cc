#include "inputs.h"

#include "weft/calibration/calibrated.h"
#include "weft/cost/analytic.h"
#include "weft/spec/presets.h"
#include "weft/galvatron/model_config.h"
#include "weft/galvatron/setup.h"

namespace weft::cli {

void add_input_flags(CLI::App* cmd, InputFlags& f) {
  cmd->add_option("--model", f.model, "Model: preset name, weft model JSON, or Hugging Face config.json");
  cmd->add_option("--cluster", f.cluster, "Cluster: preset name or cluster JSON");
  cmd->add_option("--gpus", f.overrides.gpus, "Total GPUs (nodes = GPUs / GPUs per node)");
  cmd->add_option("--gpus-per-node", f.overrides.gpus_per_node, "GPUs per node (overrides the cluster)");
  cmd->add_option("--intra-node-gbps", f.overrides.intra_gbps, "Intra-node bandwidth, GB/s per GPU per direction");
  cmd->add_option("--inter-node-gbps", f.overrides.inter_gbps, "Inter-node bandwidth, GB/s per GPU per direction");
  cmd->add_option("--memory-gb", f.overrides.memory_gb, "Memory per GPU in GB (2^30 bytes)");
  cmd->add_option("--cost-model", f.cost_model, "Cost model: weft (default) or galvatron")
      ->check(CLI::IsMember({"weft", "galvatron"}));
  cmd->add_option("--galvatron-profiles", f.galvatron_profiles, "Directory of Galvatron profile files");
  cmd->add_option("--galvatron-model", f.galvatron_model, "Galvatron model YAML (supplies the model)");
  cmd->add_option("--hardware-profile", f.hardware_profile, "Measured hardware profile (weft profile hardware)");
  cmd->add_option("--model-profile", f.model_profile, "Measured per-layer profile (weft profile model)");
  cmd->add_option("--framework", f.framework,
                  "Training framework the plan runs on, for weft's analytic model: " + framework_names() +
                      " (default megatron)");
  cmd->add_option("--host-op-us", f.host_op_us,
                  "Host (CPU) time per eager operator in us, for weft's analytic model (default 7)");
  cmd->add_option("--host-function-us", f.host_function_us,
                  "Host time per Python autograd Function in us, for weft's analytic model (default 20)");
  cmd->add_option("--compute-time-scale", f.compute_time_scale,
                  "In-training / best-case GPU kernel time, for weft's analytic model (default 1.154)");
}

namespace {

// The analytic model's options from the framework flags; errors name the flag and the value.
Result<AnalyticOptions> analytic_options(const InputFlags& f) {
  AnalyticOptions o;
  const bool any = !f.framework.empty() || f.host_op_us >= 0 || f.host_function_us >= 0 || f.compute_time_scale >= 0;
  if (!any) return o;
  if (f.cost_model != "weft" || !f.galvatron_profiles.empty() || !f.hardware_profile.empty() ||
      !f.model_profile.empty())
    return Error{ErrorKind::kBadInput,
                 "--framework, --host-op-us, --host-function-us and --compute-time-scale set weft's analytic "
                 "model; they cannot be combined with measured or Galvatron profiles, which measure these costs"};
  if (!f.framework.empty()) {
    auto fw = framework_options(f.framework, o);
    if (!fw.ok()) return fw.error();
    o = *fw;
  }
  auto check = [](const char* name, double v, double lo, double hi) -> Status {
    if (v < 0) return Status{};
    if (!(v >= lo && v <= hi))
      return Error{ErrorKind::kBadInput, std::string(name) + ": must be in [" + std::to_string(lo) + ", " +
                                             std::to_string(hi) + "], got " + std::to_string(v)};
    return Status{};
  };
  for (const Status& st : {check("--host-op-us", f.host_op_us, 0, 10000),
                           check("--host-function-us", f.host_function_us, 0, 10000),
                           check("--compute-time-scale", f.compute_time_scale, 0.01, 100)})
    if (!st.ok()) return st.error();
  if (f.host_op_us >= 0) o.host_op_us = f.host_op_us;
  if (f.host_function_us >= 0) o.host_function_us = f.host_function_us;
  if (f.compute_time_scale >= 0) o.compute_time_scale = f.compute_time_scale;
  return o;
}

}  // namespace

Result<std::unique_ptr<CostModel>> make_cost_model(const InputFlags& f, const ModelSpec& m, const ClusterSpec& c) {
  auto opt = analytic_options(f);
  if (!opt.ok()) return opt.error();
  if (f.cost_model == "weft" && f.galvatron_profiles.empty()) {
    // --- measured profiles (weft profile hardware / model): weft's model calibrated by them ---
    if (!f.hardware_profile.empty() || !f.model_profile.empty())
      return make_calibrated_cost_model(f.hardware_profile, f.model_profile, m, c);
    return std::unique_ptr<CostModel>(std::make_unique<AnalyticCostModel>(*opt));
  }
  // --- Galvatron profiles (cost model "galvatron", or weft's model calibrated from them) ---
  {
    auto pc = galvatron::make_profile_cost_model(f.cost_model, f.galvatron_profiles, f.galvatron_model, m, c);
    if (!pc.ok()) return pc.error();
    return std::move(pc->cost);
  }
  return Error{ErrorKind::kBadInput, "--cost-model " + f.cost_model + " with --galvatron-profiles is not available in this build"};
}

Result<Inputs> load_inputs(const InputFlags& f, const ModelSpec* fallback_model, const ClusterSpec* fallback_cluster) {
  Inputs in;
  if (!f.model.empty()) {
    auto m = load_model(f.model);
    if (!m.ok()) return m.error();
    in.model = std::move(m).value();
  } else if (fallback_model) {
    in.model = *fallback_model;
  } else if (!f.galvatron_model.empty()) {  // Galvatron's model YAML
    auto mc = galvatron::read_model_yaml(f.galvatron_model);
    if (!mc.ok()) return mc.error();
    auto m = galvatron::to_model_spec(*mc);
    if (!m.ok()) return m.error();
    in.model = std::move(m).value();
  } else {
    return Error{ErrorKind::kBadInput, "--model: required (a preset name from `weft models`, or a file)"};
  }
  if (!f.cluster.empty()) {
    auto c = load_cluster(f.cluster);
    if (!c.ok()) return c.error();
    in.cluster = std::move(c).value();
  } else if (fallback_cluster) {
    in.cluster = *fallback_cluster;
  } else if (!f.hardware_profile.empty()) {  // the machine `weft profile hardware` measured
    auto c = read_profile_cluster(f.hardware_profile);
    if (!c.ok()) return c.error();
    in.cluster = std::move(c).value();
  } else if (!f.galvatron_profiles.empty()) {  // Galvatron's profiles were measured on A100s
    auto c = load_cluster("a100-80gb");
    if (!c.ok()) return c.error();
    in.cluster = std::move(c).value();
  } else {
    return Error{ErrorKind::kBadInput, "--cluster: required (a preset name from `weft clusters`, or a file)"};
  }
  auto c = apply_overrides(in.cluster, f.overrides);
  if (!c.ok()) return c.error();
  in.cluster = std::move(c).value();
  if (!f.galvatron_profiles.empty() || f.cost_model == "galvatron") {
    if (auto o = analytic_options(f); !o.ok()) return o.error();
    auto pc = galvatron::make_profile_cost_model(f.cost_model, f.galvatron_profiles, f.galvatron_model, in.model,
                                                 in.cluster);
    if (!pc.ok()) return pc.error();
    in.cluster = pc->cluster;  // weft's calibrated model: link figures from the measurements
    in.cost = std::move(pc->cost);
    return in;
  }
  auto cm = make_cost_model(f, in.model, in.cluster);
  if (!cm.ok()) return cm.error();
  in.cost = std::move(cm).value();
  return in;
}

}  // namespace weft::cli
