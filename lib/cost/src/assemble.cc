#include "weft/cost/assemble.h"

#include <algorithm>

namespace weft {

double overlapped(double compute, double comm, double slowdown) {
  const double hidden = std::min(compute, comm);
  return compute + (slowdown - 1.0) * hidden + std::max(0.0, comm - compute);
}

LayerCost layer_cost(const LayerTimes& t) {
  LayerCost out;
  out.fwd = Seconds(t.fwd);
  out.bwd = Seconds(t.bwd);
  out.wgrad = Seconds(std::clamp(t.wgrad, 0.0, std::max(0.0, t.bwd - t.recompute)));
  out.grad_sync = Seconds(t.grad_sync);
  TimeBreakdown& tb = out.time;
  tb.recompute = Seconds(t.recompute);
  tb.tp_comm = Seconds(t.tp);
  tb.ulysses_comm = Seconds(t.ulysses);
  tb.cp_comm = Seconds(t.cp);
  tb.ep_comm = Seconds(t.ep);
  tb.zero3_gather = Seconds(t.zero3_gather);
  // compute: GEMMs, attention, elementwise, the overlap slow-down and any host-bound excess, so that
  // the per-micro-batch fields add up to fwd + bwd.
  tb.compute = Seconds(
      std::max(0.0, t.fwd + t.bwd - t.recompute - t.tp - t.ulysses - t.cp - t.ep - t.zero3_gather));
  tb.dp_comm = Seconds(t.grad_sync + std::max(1, t.micro_batches) * t.reduce_per_micro_batch);
  return out;
}

}  // namespace weft
