// Sample placement for MoE all-to-all (NetMoE, ICLR'25; docs/moe-placement.md). Tokens of one
// sample tend to choose the same experts, so where a sample is computed decides how much of its
// layers' dispatch and combine crosses the inter-node network. Given the routers' choices for a
// step's samples (a routing trace, weft/plan/routing_trace.h), choose which data-parallel replica
// computes which sample of each micro-batch so that the all-to-all time falls: per micro-batch an
// assignment problem (samples x the replicas' places), solved exactly by the Hungarian algorithm.
#pragma once

#include <cstdint>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/units.h"
#include "weft/plan/plan.h"
#include "weft/plan/routing_trace.h"

namespace weft {

// The expert all-to-all of one step under a placement: every traced MoE layer's dispatch and
// combine, forward and backward (4 all-to-alls a layer and micro-batch), each copy one hidden
// vector in the plan's compute dtype.
struct PlacementTraffic {
  double inter_bytes = 0;  // bytes crossing nodes, summed over ranks
  double inter_copies = 0; // token copies one dispatch sends across nodes (every layer and micro-batch)
  double intra_bytes = 0;  // bytes between ranks of one node
  // Sum over layers, micro-batches and the 4 passes of the slowest rank's time: its bytes to (or
  // from, the larger) other nodes at the inter-node rate plus those inside its node at the
  // intra-node rate (NetMoE's hierarchical all-to-all time), at NCCL's achieved efficiencies
  // (weft/cost/collectives.h).
  Seconds time;
};

// The traffic of `step` with the samples at `samples` (positions -> samples; nullptr: unplaced).
// Layers whose tokens of one sample are spread beyond their replica's tensor ranks (Ulysses, cp)
// are refused, naming the layer.
Result<PlacementTraffic> placement_traffic(const Plan& p, const RoutingStep& step,
                                           const std::vector<int>* samples = nullptr);

// The placement of one step: positions -> samples, each micro-batch's samples assigned to its
// positions (the replicas' places) at the least all-to-all time summed over ranks (bytes to
// other nodes at the inter-node rate, inside a node at the intra-node rate).
Result<std::vector<int>> place_samples(const Plan& p, const RoutingStep& step);

struct PlacedStepReport {
  int step = 0;
  PlacementTraffic before, after;
};

// Every step of the trace placed (check_trace first); `reports` (optional) receives the traffic
// before and after, per step.
Result<SamplePlacement> place_trace(const Plan& p, const RoutingTrace& t, std::vector<PlacedStepReport>* reports = nullptr);

// A synthetic skewed trace for the plan's MoE layers: each sample draws its tokens' experts from
// a preferred group of experts (the experts of one ep rank, chosen per sample) with probability
// `locality`, else uniformly; top-k distinct experts per token. Deterministic in `seed`.
RoutingTrace synthetic_trace(const Plan& p, int steps, double locality, uint64_t seed);

// The least-cost perfect matching of an n x n cost matrix (row-major): column of each row.
// O(n^3) (the Hungarian algorithm with potentials).
std::vector<int> min_cost_assignment(const std::vector<double>& cost, int n);

}  // namespace weft
