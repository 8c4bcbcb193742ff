// Plans for mixed and straggling devices (docs/search.md, "Mixed and slow devices").
//
// A plan over a MixedCluster (weft/spec/mixed.h) is an ordinary plan (its structure, per-layer
// strategies, stages and train.dp_shares) with PlanDevices: which GPU each rank runs on. It is costed
// unit by unit: a unit is one data-parallel replica of one pipeline stage (the whole stage when its
// layers lay activations out differently), on the slowest of its devices, with that replica's share
// of each micro-batch; a replica's step is its pipeline over its units (CostModel::step), and the
// step waits for the slowest replica. With shares per device group (train.stage_dp_shares) each
// unit takes its group's share, a stage waits for its slowest unit, and the step is one pipeline
// over those stages. Tensor parallelism stays inside a unit, so inside a node of one kind.
//
// The search: weft's homogeneous search on the cluster's one-kind view (MixedCluster::as_uniform())
// proposes structures; each is then placed on the real devices: the node groups in every order
// (which kind runs the first stages), stage boundaries re-cut by a partition DP over the units'
// own layer times and memory, data-parallel shares that balance the replicas (integer min-max water
// filling over a per-replica linear time model, checked exactly; or per device group where a stage
// mixes unlike devices), and fewer, larger micro-batches where shares need the granularity. Every
// placed plan is costed exactly and ranked.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "weft/cost/cost_model.h"
#include "weft/cost/estimate.h"
#include "weft/plan/plan.h"
#include "weft/search/search.h"
#include "weft/search/search_options.h"
#include "weft/spec/mixed.h"

namespace weft {

// What one node group of a placed plan does (the report's per-group table).
struct DeviceGroupUse {
  std::string name;           // the group's cluster name
  std::string gpu;            // its GPU
  int first_rank = 0, ranks = 0;
  double slowest = 1.0;       // the largest slowdown among its GPUs
  int layers = 0;             // layers its pipeline stages hold (summed over its stages)
  int samples = 0;            // samples per step its data-parallel replicas take, summed
  double time_s = 0;          // busiest unit on it: compute time per step
  double memory_gib = 0;      // peak per device
  double budget_gib = 0;      // what its devices may fill
};

struct HeteroEstimate {
  Estimate total;                      // step time, throughput, MFU over the nominal peaks, fits;
                                       // peak_memory and memory_budget: of the device with the
                                       // least room (each kind has its own budget)
  std::vector<Seconds> replica_time;   // per data-parallel replica (one when layouts differ)
  std::vector<DeviceGroupUse> groups;  // in the plan's rank order
};

// Costs plan p on its devices (p.devices; without them, on p.cluster as estimate() does).
HeteroEstimate hetero_estimate(const Plan& p, const CostModel& cm);
// Writes the figures into p.predicted and the stages' predictions (each stage: its slowest unit).
void annotate(Plan& p, const HeteroEstimate& e, const CostModel& cm);

struct HeteroResult {
  std::vector<Plan> top;               // placed plans, best first (annotated); empty if none fits
  std::vector<HeteroEstimate> top_estimates;
  // The best plan of the homogeneous search that ignores the differences (even shares, its own
  // stages, the cluster's own order), costed on the real devices; absent if it does not fit them.
  std::optional<Plan> uniform;
  double uniform_s = 0;
  // The best plan on the largest homogeneous subset of the fastest devices (same global batch);
  // absent if none fits there.
  std::optional<Plan> fastest_subset;
  double fastest_subset_s = 0;
  std::string fastest_subset_label;    // e.g. "16 x H100-SXM5-80GB"
  SearchStats stats;                   // of the homogeneous search, with wall_s of the whole
  long long placements = 0;            // placed plans costed
  // When nothing fits: the homogeneous search's closest plan and the memory it would need.
  std::optional<Plan> closest;
  double min_memory_gib = 0;
};

// Searches plans for `model` on the mixed devices `devices`. Errors as search() does, and for a
// cluster of one kind with no slowdown (use search()).
Result<HeteroResult> hetero_search(const ModelSpec& model, const MixedCluster& devices, const CostModel& cm,
                                   const SearchOptions& opt);

// Per rank: the work plan p gives it per step, in sample-layers (the samples its replica computes
// per step times the layers of its stages): what the runtime's straggler check and --adapt compare
// each rank's measured compute with (only ratios between ranks matter).
std::vector<double> rank_work(const Plan& p);

// Plan p re-balanced for measured `slowdown` per rank (1 = full speed), as Malleus re-balances on
// measured speeds: the data-parallel shares set so each replica's samples x its slowest rank's
// slowdown is as even as integers allow (min-max, one sample at a time; the running shares stay
// unless that is better), and for a pipeline the stage cuts re-made for the slowdowns (the
// search's partition DP over each stage's slowest unit, within memory: a slow rank's stage takes
// fewer layers) when that is predicted at least 2 % faster than new shares alone; a plan with
// micro-batch counts per replica (train.dp_micro_batches) has its counts re-balanced instead (the
// size of each replica's micro-batches and their total kept; equal counts drop them), and one with
// shares per device group (train.stage_dp_shares) each group's shares on its own units' slowdowns
// (all even: dropped). Strategies
// and placement are kept, and micro-batches but for counts. A new cut moves layers' state between ranks (the runtime
// re-shards in place; weft/plan/checkpoint_layout.h reshard_bytes_moved says how much); new
// shares move none. predicted_s / current_s: the compute-bound step of the new and the running
// plan, sum + (m - 1) x max over stages of layers x the slowest replica's share x slowdown (in
// units of one layer of one full-speed sample; only their ratio is meant); the cost model checks
// the new plan's memory (kNoFit naming the numbers when it does not fit).
struct Rebalanced {
  Plan plan;
  HeteroEstimate estimate;
  double predicted_s = 0, current_s = 0;
};
Result<Rebalanced> rebalance(const Plan& p, const std::vector<double>& slowdown, const CostModel& cm);

// weft train --adapt's re-plan for measured `slowdown` per rank: rebalance() (shares, counts or
// stage cuts: no state or only layers move) when that is predicted at least kRebalanceGain faster
// than the running plan; otherwise (nothing to re-balance: dp 1 and pp 1, or layouts that take no
// shares) a fresh search on p's devices at those speeds (hetero_search, or search() when they are
// alike; what weft's runtime runs, p's batch, sequence and dtype), which may change degrees, ZeRO
// stages, the schedule or micro-batches, whose state the runtime then moves in place. The search's
// plan is taken when the cost model prices it at least kSearchGain faster than the running plan
// at the same speeds (predicted_s / current_s are then its seconds); the rebalance's otherwise. A
// re-balance is preferred where it helps: it moves little or nothing, and its compute-bound model
// holds on any machine, while the search trusts the cost model's view of the devices.
inline constexpr double kRebalanceGain = 1.05, kSearchGain = 1.10;
Result<Rebalanced> replan(const Plan& p, const std::vector<double>& slowdown, const CostModel& cm);

// Plan p (placed: p.devices set) with data-parallel shares that balance its replicas on their
// devices, as the search sets them (min-max water filling over each replica's exact share curve,
// within memory; micro-batch counts; or, in a pipeline where a device group mixes unlike units,
// shares per group over each unit's own stage times), the fastest kept when it beats even shares:
// otherwise p unchanged with even shares.
// Plans whose layers lay activations out differently keep even shares. Its structure is kept.
// `suspend`: a replica may get share 0 (suspended: it computes nothing, still reduces gradients
// and steps its optimizer) when its first sample would make it the slowest; off, every replica
// takes at least one sample (comparing plans that give every device work, as Metis's do).
Plan balance_shares(Plan p, const CostModel& cm, bool suspend = true);

// The plan p placed on `devices` with the node groups in `order` (indices into devices.groups):
// p.devices set, p.cluster = the placed devices' as_uniform(). No re-cutting, no shares.
Plan place(Plan p, const MixedCluster& devices, const std::vector<int>& order);

}  // namespace weft
