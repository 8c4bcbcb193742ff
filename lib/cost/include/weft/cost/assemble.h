// Assembling a layer's cost from its parts, shared by weft's analytic model and the model
// calibrated by profiles (docs/cost-model.md §3.5): the overlap rule, and the LayerCost of a layer's
// times with its breakdown. Pure functions; thread-safe.
#pragma once

#include "weft/cost/cost_model.h"

namespace weft {

// The overlap rule: compute `compute` overlapping communication `comm` takes
// compute + (slowdown - 1) * min(compute, comm) + max(0, comm - compute) seconds; the hidden
// communication slows the compute it hides behind, the rest is exposed.
double overlapped(double compute, double comm, double slowdown);

// A layer's times in seconds, per micro-batch unless noted, exposed communication included.
struct LayerTimes {
  double fwd = 0, bwd = 0;   // forward; backward with its recompute
  double grad_sync = 0;      // per step: the gradient reduction (overlappable)
  double recompute = 0;      // part of bwd re-running forward work
  double wgrad = 0;          // part of bwd computing weight gradients (LayerCost::wgrad)
  double tp = 0, ulysses = 0, cp = 0, ep = 0;  // exposed communication by parallelism, fwd + bwd
  double zero3_gather = 0;   // exposed part of ZeRO's per-micro-batch traffic
  double reduce_per_micro_batch = 0;  // ZeRO-2/3 gradient reduce-scatter (in dp_comm, x micro-batches)
  int micro_batches = 1;
};

// The LayerCost of t (optimizer and memory left at zero). The breakdown's compute is what fwd + bwd
// leave after recompute, communication and zero3_gather (never below zero); dp_comm is grad_sync +
// micro_batches * reduce_per_micro_batch.
LayerCost layer_cost(const LayerTimes& t);

}  // namespace weft
