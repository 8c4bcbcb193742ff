// The compute side of the analytic model (docs/cost-model.md §2 and §4): GPU kernel time of a
// layer, or of the embedding and LM head, on the kernel model, and the host time of an eager
// framework launching them. analytic.cc adds the priced traffic (weft/cost/traffic.h) and
// assembles the cost. Internal to lib/cost; pure functions.
#pragma once

#include <algorithm>

#include "weft/cost/analytic.h"
#include "weft/cost/memory.h"
#include "weft/cost/traffic.h"

namespace weft {

// A parallel degree as a divisor (at least 1).
inline double safe(int x) { return static_cast<double>(std::max(1, x)); }

// One forward or backward pass on one device, split by kind (seconds).
struct Pass {
  double gemm = 0, core = 0, mem = 0;      // GPU compute
  // Backward only: the part of gemm + mem that computes the weight gradients (the dW = X^T dY GEMM
  // of every linear layer and the non-fused gradient accumulation), which a zero-bubble schedule
  // runs as its own W pass (docs/cost-model.md §7). Already counted in gemm and mem.
  double wgrad = 0;
  double tp = 0, uly = 0, cp = 0, ep = 0;  // exposed communication
  double gpu() const { return gemm + core + mem + tp + uly + cp + ep; }
  double compute() const { return gemm + core + mem; }
};

struct LayerCompute {
  Pass f, b;                      // GPU compute of one micro-batch; communication left at 0
  double core_f = 0, core_b = 0;  // attention core of one block (what a ring step hides behind)
  double recompute_gemm = 0;      // GEMMs an op-level selective recompute re-runs (§2.4)
  double host_f = 0, host_b = 0;  // host time of an eager framework (§4), recompute included
  Seconds optimizer;              // per step: Adam over the local shard (§6)
  HeldParams held;                // parameters this device holds (§5.1)
  ActivationOptions activations;  // how the layer saves activations (§5.2), per micro-batch
};
LayerCompute layer_compute(const LayerContext& ctx, const LayerStrategy& s, const AnalyticOptions& opt);

struct EdgeCompute {
  Pass f, b;                     // embedding lookup, final norm, LM head and loss
  double ops_f = 0, fns_f = 0;   // eager operators and Python autograd Functions, forward
  double logits = 0;             // bytes of the logits and the loss's copies, one micro-batch
  double saved = 0;              // bytes saved for backward (dropout mask already x in flight)
  double weight_grad_state = 0;  // last stage: bytes a zero-bubble W of one micro-batch waits with
                                 // (the final norm's input and output gradient, the LM head's input
                                 // and the logits' gradient)
  double params = 0;             // parameters held (edge_param_buckets, one bucket)
  Seconds optimizer;             // per step: Adam over the local shard of them (§6)
};
EdgeCompute edge_compute(const StageContext& ctx, const LayerStrategy& emb, const AnalyticOptions& opt);

}  // namespace weft
