// MoE routing traces and sample placements (NetMoE, ICLR'25; docs/moe-placement.md): the two files
// between the runtime and the placement planner, torch-free so that both read them.
//
// A routing trace holds what the routers of a model's MoE layers chose in training steps: per step,
// MoE layer and sample of the global batch, the copies routed to each expert. `weft train
// --moe-trace FILE` writes one; `weft moe-placement --trace FILE` reads it.
//
// A sample placement says, per step, which sample of the global batch each position holds: the
// runtime's data-parallel replica that computes position i of micro-batch k then computes sample
// samples[i] instead. Samples move only inside their micro-batch (so every micro-batch, and with it
// the load-balancing loss of each, is the same as unplaced), and only where they are computed: the
// gradients are sums over samples, so the losses and the updates are those of the unplaced run.
// `weft moe-placement --out FILE` writes one; `weft train --moe-placement FILE` runs it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/plan/plan.h"

namespace weft {

struct RoutingStep {
  int step = 0;
  std::vector<int> layers;  // the MoE layers traced, ascending (global layer indices)
  // counts[l][i][e]: copies of sample i (its index in the step's global batch) that layer layers[l]
  // routed to expert e; each sample's copies sum to seq * top_k.
  std::vector<std::vector<std::vector<int64_t>>> counts;
  bool operator==(const RoutingStep&) const = default;
};

struct RoutingTrace {
  std::string model;        // the model's name
  int experts = 0, top_k = 0;
  int64_t seq = 0;          // tokens per sample
  int global_batch = 0;     // samples per step
  std::vector<RoutingStep> steps;
  bool operator==(const RoutingTrace&) const = default;
};

Json to_json(const RoutingTrace& t);
Result<RoutingTrace> routing_trace_from_json(const Json& j, const std::string& where = "trace");
Result<RoutingTrace> read_routing_trace(const std::string& path);
Status write_routing_trace(const std::string& path, const RoutingTrace& t);  // durable, whole or nothing
// That the trace belongs to the plan's model and batch: the experts and top-k of every traced
// layer, a MoE layer at every index, the sequence and the global batch, and every sample's copies
// summing to seq * top_k. The error names the field and the numbers.
Status check_trace(const RoutingTrace& t, const Plan& p);

struct PlacedStep {
  int step = 0;
  std::vector<int> samples;  // per position of the global batch: the sample it holds
  bool operator==(const PlacedStep&) const = default;
};

struct SamplePlacement {
  int global_batch = 0, micro_batches = 0;
  std::vector<PlacedStep> steps;
  // The step's positions -> samples, or nullptr where the placement says nothing (identity).
  const std::vector<int>* for_step(int step) const;
  bool operator==(const SamplePlacement&) const = default;
};

Json to_json(const SamplePlacement& s);
Result<SamplePlacement> sample_placement_from_json(const Json& j, const std::string& where = "placement");
Result<SamplePlacement> read_sample_placement(const std::string& path);
Status write_sample_placement(const std::string& path, const SamplePlacement& s);
// That the placement fits the plan's batch: its global batch and micro-batches, and each step a
// permutation of the global batch that keeps every sample in its micro-batch (micro-batch k holds
// positions [k B / m, (k + 1) B / m); even micro-batches only).
Status check_placement(const SamplePlacement& s, const Plan& p);

}  // namespace weft
