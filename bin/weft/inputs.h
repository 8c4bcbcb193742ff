// Flags shared by `weft plan` and `weft estimate`: which model, which cluster (and overrides), and
// which cost model backs the estimate.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "weft/cost/cost_model.h"
#include "weft/cost/framework.h"
#include "weft/cost/memory.h"
#include "weft/galvatron/setup.h"
#include "weft/plan/plan.h"
#include "weft/spec/cluster.h"
#include "weft/spec/mixed.h"
#include "weft/spec/model.h"

namespace weft::cli {

struct InputFlags {
  std::string model;             // preset name, weft model JSON or HF config.json
  std::string cluster;           // preset name or cluster JSON
  ClusterOverrides overrides;    // --gpus, --gpus-per-node, --intra-node-gbps, --inter-node-gbps, --memory-gb
  std::string cost_model = "weft";  // weft | galvatron
  std::string galvatron_profiles;   // --galvatron-profiles DIR
  std::string galvatron_model;      // --galvatron-model YAML (also supplies the model)
  std::string hardware_profile;     // --hardware-profile hw.json
  std::string model_profile;        // --model-profile layers.json
  // Framework the plan runs on (weft/cost/framework.h; docs/cost-model.md §4.1 for its traits);
  // empty = weft's runtime, costed with megatron's traits.
  std::string framework;            // --framework
  // Framework figures of weft's analytic model (docs/cost-model.md §4); < 0 = the default.
  double host_op_us = -1;           // --host-op-us
  double host_function_us = -1;     // --host-function-us
  double compute_time_scale = -1;   // --compute-time-scale
  // Memory per GPU kept free beyond the modelled reserves (weft/cost/memory.h, MemoryMargin): "10%"
  // or "4GiB"; empty = the default (kDefaultMemoryMarginPercent of the device).
  std::string memory_margin;        // --memory-margin
  // --straggler GPU:FACTOR, repeatable: GPU computes FACTOR times slower (weft/spec/mixed.h).
  std::vector<std::string> stragglers;
};

// Adds the flags above to cmd. `need_model` false for commands where a plan supplies them.
void add_input_flags(CLI::App* cmd, InputFlags& f);

struct Inputs {
  ModelSpec model;
  ClusterSpec cluster;                   // the one-kind view (MixedCluster::as_uniform()) when mixed
  // Several node groups (--cluster a100-80gb:2,h100-80gb:2 or a file with "groups") or stragglers
  // (--straggler): the devices as they are (weft/search/hetero.h plans and costs on them).
  std::optional<MixedCluster> mixed;
  galvatron::CostModelSetup setup;       // the cost model (galvatron::make_cost_model)
  std::optional<Framework> framework;    // --framework, when given
  // The margin weft's models keep free (--memory-margin or its default); none under Galvatron's
  // model, which keeps its own reserve.
  std::optional<MemoryMargin> margin;
  // What the inputs decided that the user should hear (stragglers taken from a hardware profile's
  // measured rank speeds, or why they were not); the commands print them to stderr.
  std::vector<std::string> notes;
  const CostModel& cost() const { return *setup.cost; }
};

// Loads model and cluster (presets, files, Galvatron profiles), reads every profile file once and
// builds the cost model from what was read. A model or cluster left unset is taken from
// `fallback_model` / `fallback_cluster` (a plan's own specs) when given.
Result<Inputs> load_inputs(const InputFlags& f, const ModelSpec* fallback_model = nullptr,
                           const ClusterSpec* fallback_cluster = nullptr);

// The cost model for an already loaded model and cluster (a plan's), from the cost-model flags.
// A plan file for a command that costs or exports fixed-length batches (estimate, report, simulate,
// export): a variable-length plan (train.varlen) is refused, naming what handles it instead, and so
// is a plan for mixed or straggling devices (devices) for any of them but estimate.
Result<Plan> read_fixed_plan(const std::string& path, const std::string& command);

Result<std::unique_ptr<CostModel>> load_cost_model(const InputFlags& f, const ModelSpec& m, const ClusterSpec& c);

}  // namespace weft::cli
