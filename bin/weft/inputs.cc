#include "inputs.h"

#include <cstdlib>
#include <set>

#include "weft/calibration/hardware_profile.h"
#include "weft/calibration/model_profile.h"
#include "weft/core/format.h"
#include "weft/cost/analytic.h"
#include "weft/cost/memory.h"
#include "weft/galvatron/model_config.h"
#include "weft/galvatron/setup.h"
#include "weft/spec/presets.h"

namespace weft::cli {

void add_input_flags(CLI::App* cmd, InputFlags& f) {
  cmd->add_option("--model", f.model, "Model: preset name, weft model JSON, or Hugging Face config.json");
  cmd->add_option("--cluster", f.cluster,
                  "Cluster: preset name, cluster JSON (node groups of several GPU kinds allowed), or presets with "
                  "nodes each, e.g. a100-80gb:2,h100-80gb:2");
  cmd->add_option("--straggler", f.stragglers,
                  "GPU:FACTOR, repeatable: that GPU (global index) computes FACTOR times slower, e.g. 1:2.0");
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
                  "Training framework the plan runs on: " + framework_names() +
                      ". Sets weft's analytic model's traits and keeps plans to what the framework runs (weft: "
                      "weft train, costed with its own eager kernels as measured on an H100; without --framework: what weft "
                      "train runs, costed as megatron, with a note)");
  cmd->add_option("--host-op-us", f.host_op_us,
                  "Host (CPU) time per eager operator in us, for weft's analytic model (default 7)");
  cmd->add_option("--host-function-us", f.host_function_us,
                  "Host time per Python autograd Function in us, for weft's analytic model (default 20)");
  cmd->add_option("--compute-time-scale", f.compute_time_scale,
                  "In-training / best-case GPU kernel time, for weft's analytic model (default 1.154)");
  cmd->add_option("--memory-margin", f.memory_margin,
                  "Memory per GPU kept free beyond the modelled reserves (CUDA context, NCCL buffers, allocator "
                  "fragmentation): a share of the device, e.g. 10%, or an amount, e.g. 4GiB (default " +
                      to_string(MemoryMargin{}) + ")");
}

namespace {

struct AnalyticFlags {
  AnalyticOptions options;
  std::optional<Framework> framework;  // --framework, when given
};

// The analytic model's options from the framework flags; errors name the flag and the value.
Result<AnalyticFlags> analytic_flags(const InputFlags& f) {
  AnalyticFlags out;
  const bool any = !f.framework.empty() || f.host_op_us >= 0 || f.host_function_us >= 0 || f.compute_time_scale >= 0;
  if (!any) return out;
  if (f.cost_model != "weft" || !f.galvatron_profiles.empty() || !f.hardware_profile.empty() ||
      !f.model_profile.empty())
    return Error{ErrorKind::kBadInput,
                 "--framework, --host-op-us, --host-function-us and --compute-time-scale set weft's analytic "
                 "model; they cannot be combined with measured or Galvatron profiles, which measure these costs"};
  if (!f.framework.empty()) {
    auto fw = framework_from_string(f.framework);
    if (!fw.ok()) return fw.error();
    out.framework = *fw;
    out.options = framework_options(*fw, out.options);
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
  if (f.host_op_us >= 0) out.options.host_op_us = f.host_op_us;
  if (f.host_function_us >= 0) out.options.host_function_us = f.host_function_us;
  if (f.compute_time_scale >= 0) out.options.compute_time_scale = f.compute_time_scale;
  return out;
}

// --memory-margin parsed (its default when not given); an error with Galvatron's cost model, whose
// budget keeps Galvatron's own reserve.
Result<MemoryMargin> memory_margin_flag(const InputFlags& f) {
  if (f.memory_margin.empty()) return MemoryMargin{};
  if (f.cost_model == "galvatron")
    return Error{ErrorKind::kBadInput, "--memory-margin: sets the budget of weft's cost models; Galvatron's "
                                       "(--cost-model galvatron) keeps its own reserve"};
  return parse_memory_margin(f.memory_margin);
}

// The margin for cluster c (memory_margin_flag); one that leaves nothing of the device for the
// plan is an error naming the flag.
Result<MemoryMargin> memory_margin_for(const InputFlags& f, const ClusterSpec& c) {
  auto m = memory_margin_flag(f);
  if (!m.ok() || f.memory_margin.empty()) return m;
  const MemoryBudget b = memory_budget(c, *m);
  if (b.budget.value() > 0) return m;
  return Error{ErrorKind::kBadInput, "--memory-margin: \"" + f.memory_margin + "\" leaves nothing of the " +
                                         printf_str("%.1f", c.gpu.memory_gib) + " GiB device once its reserves (" +
                                         printf_str("%.1f", to_gib(b.process)) + " GiB) are kept"};
}

// Reads the files the cost-model flags name, each once (`hw` and `yaml`: the hardware profile and
// Galvatron's model YAML when the caller read them already), and builds the cost model for m on c.
// With Galvatron's profiles the hardware and model profiles are not read.
Result<galvatron::CostModelSetup> build_cost_model(const InputFlags& f, const AnalyticOptions& analytic,
                                                   std::optional<HardwareProfile> hw,
                                                   std::optional<galvatron::ModelConfig> yaml, const ModelSpec& m,
                                                   const ClusterSpec& c) {
  galvatron::CostModelInputs in;
  auto kind = galvatron::cost_model_kind_from_string(f.cost_model);
  if (!kind.ok()) return kind.error();
  in.kind = *kind;
  in.analytic = analytic;
  if (!f.galvatron_profiles.empty()) {
    if (!yaml && !f.galvatron_model.empty()) {
      auto mc = galvatron::read_model_yaml(f.galvatron_model);
      if (!mc.ok()) return mc.error();
      yaml = std::move(mc).value();
    }
    auto prof = galvatron::load_profiles_for(f.galvatron_profiles, yaml ? yaml->model_size : m.name, c);
    if (!prof.ok()) return prof.error();
    in.galvatron = std::move(prof).value();
    if (yaml) in.galvatron_hidden = yaml->hidden_size;
  } else if (in.kind == galvatron::CostModelKind::kWeft) {
    if (!hw && !f.hardware_profile.empty()) {
      auto r = read_hardware_profile(f.hardware_profile);
      if (!r.ok()) return r.error();
      hw = std::move(r).value();
    }
    if (!f.model_profile.empty()) {
      auto r = read_model_profile(f.model_profile);
      if (!r.ok()) return r.error();
      in.model_profile = std::move(r).value();
    }
    in.hardware = std::move(hw);
  }
  return galvatron::make_cost_model(in, m, c);
}

}  // namespace

Result<std::unique_ptr<CostModel>> load_cost_model(const InputFlags& f, const ModelSpec& m, const ClusterSpec& c) {
  auto analytic = analytic_flags(f);
  if (!analytic.ok()) return analytic.error();
  auto margin = memory_margin_for(f, c);
  if (!margin.ok()) return margin.error();
  analytic->options.memory_margin = *margin;
  auto setup = build_cost_model(f, analytic->options, std::nullopt, std::nullopt, m, c);
  if (!setup.ok()) return setup.error();
  return std::move(setup->cost);
}

Result<Inputs> load_inputs(const InputFlags& f, const ModelSpec* fallback_model, const ClusterSpec* fallback_cluster) {
  Inputs in;
  std::optional<galvatron::ModelConfig> yaml;  // Galvatron's model YAML, once read
  std::optional<HardwareProfile> hw;           // the hardware profile, once read
  if (!f.model.empty()) {
    auto m = load_model(f.model);
    if (!m.ok()) return m.error();
    in.model = std::move(m).value();
  } else if (fallback_model) {
    in.model = *fallback_model;
  } else if (!f.galvatron_model.empty()) {  // Galvatron's model YAML
    auto mc = galvatron::read_model_yaml(f.galvatron_model);
    if (!mc.ok()) return mc.error();
    yaml = std::move(mc).value();
    auto m = galvatron::to_model_spec(*yaml);
    if (!m.ok()) return m.error();
    in.model = std::move(m).value();
  } else {
    return Error{ErrorKind::kBadInput, "--model: required (a preset name from `weft models`, or a file)"};
  }
  std::optional<MixedCluster> groups;  // a cluster of several node groups, as given
  if (!f.cluster.empty()) {
    auto m = load_mixed_cluster(f.cluster);
    if (!m.ok()) return m.error();
    if (m->groups.size() > 1 || !m->slowdown.empty()) {
      const ClusterOverrides& o = f.overrides;
      if (o.gpus || o.gpus_per_node || o.intra_gbps || o.inter_gbps || o.memory_gb)
        return Error{ErrorKind::kBadInput, "--cluster " + f.cluster + ": a cluster of " +
                                               std::to_string(m->groups.size()) +
                                               " node groups sets GPUs, links and memory per group; --gpus, "
                                               "--gpus-per-node, --intra-node-gbps, --inter-node-gbps and "
                                               "--memory-gb apply to one kind only (edit the groups instead)"};
      groups = *m;
      in.cluster = m->as_uniform();
    } else {
      in.cluster = m->groups[0];
    }
  } else if (fallback_cluster) {
    in.cluster = *fallback_cluster;
  } else if (!f.hardware_profile.empty()) {  // the machine `weft profile hardware` measured
    auto r = read_hardware_profile(f.hardware_profile);
    if (!r.ok()) return r.error();
    hw = std::move(r).value();
    auto c = cluster_from_hardware_profile(*hw);
    if (!c.ok()) return c.error().with_context(f.hardware_profile);
    in.cluster = std::move(c).value();
  } else if (!f.galvatron_profiles.empty()) {  // Galvatron's profiles were measured on A100s
    auto c = load_cluster("a100-80gb");
    if (!c.ok()) return c.error();
    in.cluster = std::move(c).value();
  } else {
    return Error{ErrorKind::kBadInput, "--cluster: required (a preset name from `weft clusters`, or a file)"};
  }
  if (!groups) {
    auto c = apply_overrides(in.cluster, f.overrides);
    if (!c.ok()) return c.error();
    in.cluster = std::move(c).value();
  }
  auto analytic = analytic_flags(f);  // its flag errors before any profile is read
  if (!analytic.ok()) return analytic.error();
  const bool galvatron = f.cost_model == "galvatron" || !f.galvatron_profiles.empty() || !f.galvatron_model.empty();
  // A hardware profile's measured rank speeds (Malleus-style: the same GEMMs on every rank) are
  // stragglers of a cluster of as many GPUs; a slowdown the cluster file or --straggler gives for
  // a GPU stays. Galvatron's inputs plan one kind of device at full speed (below): not applied.
  std::vector<std::pair<int, double>> measured;
  if (!f.hardware_profile.empty()) {
    if (!hw) {
      auto r = read_hardware_profile(f.hardware_profile);
      if (!r.ok()) return r.error();
      hw = std::move(r).value();
    }
    const std::vector<double>& rs = hw->machine.rank_slowdown;
    const int gpus = groups ? groups->total_gpus() : in.cluster.total_gpus();
    std::set<int> given;  // GPUs whose slowdown the user gave
    if (groups)
      for (int g = 0; g < groups->total_gpus(); ++g)
        if (groups->slowdown_of(g) != 1.0) given.insert(g);
    for (const std::string& s : f.stragglers) given.insert(std::atoi(s.c_str()));
    std::string slow;
    for (size_t r = 0; r < rs.size(); ++r)
      if (rs[r] >= kMeasuredStraggler && !given.count(static_cast<int>(r))) {
        measured.emplace_back(static_cast<int>(r), rs[r]);
        slow += (slow.empty() ? "" : ", ") + ("GPU " + std::to_string(r) + " " + printf_str("%.2fx", rs[r]));
      }
    if (!measured.empty() && galvatron) {
      in.notes.push_back(f.hardware_profile + " measured stragglers (" + slow +
                         "); Galvatron's inputs plan one kind of device at full speed, so they are not applied");
      measured.clear();
    } else if (!measured.empty() && static_cast<int>(rs.size()) != gpus) {
      in.notes.push_back(f.hardware_profile + " measured " + std::to_string(rs.size()) + " ranks with stragglers (" +
                         slow + "); the cluster has " + std::to_string(gpus) +
                         " GPUs, so they are not applied (give --straggler GPU:FACTOR)");
      measured.clear();
    } else if (!measured.empty()) {
      in.notes.push_back("stragglers from " + f.hardware_profile + "'s measured rank speeds: " + slow);
    }
  }
  if (groups || !f.stragglers.empty() || !measured.empty()) {
    MixedCluster m = groups ? *groups : mixed_of(in.cluster);
    for (const auto& [gpu, factor] : measured) {
      Status st = add_straggler(m, std::to_string(gpu) + ":" + printf_str("%.2f", factor));
      if (!st.ok()) return st.error();
    }
    for (const std::string& s : f.stragglers) {
      Status st = add_straggler(m, s);
      if (!st.ok()) return st.error();
    }
    if (m.heterogeneous()) {
      if (galvatron)
        return Error{ErrorKind::kBadInput, "--cost-model galvatron: Galvatron's model costs one kind of device; "
                                           "mixed or straggling devices are planned with weft's model"};
      if (m.groups.size() > 1 && (!f.model_profile.empty() || !f.hardware_profile.empty()))
        return Error{ErrorKind::kBadInput, "--cluster " + f.cluster + ": measured profiles describe one kind of "
                                           "device; plan node groups of several kinds with weft's analytic model "
                                           "(drop --model-profile / --hardware-profile)"};
      in.mixed = std::move(m);
    }
  }
  in.framework = analytic->framework;
  auto margin = memory_margin_for(f, in.cluster);
  if (!margin.ok()) return margin.error();
  analytic->options.memory_margin = *margin;
  if (f.cost_model != "galvatron") in.margin = *margin;
  auto setup = build_cost_model(f, analytic->options, std::move(hw), std::move(yaml), in.model, in.cluster);
  if (!setup.ok()) return setup.error();
  in.setup = std::move(setup).value();
  in.cluster = in.setup.cluster;  // weft's model from Galvatron's profiles: link figures from the measurements
  if (in.mixed && in.mixed->groups.size() == 1) in.mixed->groups[0] = in.cluster;
  return in;
}

Result<Plan> read_fixed_plan(const std::string& path, const std::string& command) {
  auto p = read_plan_file(path);
  if (!p.ok()) return p.error();
  if (p->train.varlen)
    return Error{ErrorKind::kBadInput,
                 path + ": a variable-length plan (train.varlen: " + std::to_string(p->train.global_batch) +
                     " documents of at most " + std::to_string(p->train.seq) + " tokens per step, grouped per batch); `weft " +
                     command + "` takes fixed-length plans. `weft varlen` costs its batches, `weft train --plan " + path +
                     "` runs it"};
  if (p->devices && command != "estimate")
    return Error{ErrorKind::kBadInput,
                 path + ": a plan for mixed or straggling devices (devices: " +
                     std::to_string(p->devices->cluster.groups.size()) + " node groups, " +
                     std::to_string(p->world_size()) + " ranks); `weft " + command +
                     "` draws and exports plans for one kind of device. `weft estimate --plan " + path +
                     "` costs it on its devices, `weft train --plan " + path + "` runs it"};
  return p;
}

}  // namespace weft::cli
