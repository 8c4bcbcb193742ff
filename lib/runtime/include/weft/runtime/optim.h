// Gradient synchronisation and the optimizer over a Model's units.
//   zero 0: gradients accumulate in the unit's flat buffer over micro-batches; each bucket is
//           all-reduced as soon as the last micro-batch's backward has finished it (GradSync);
//           every replica runs the same AdamW update on the whole unit.
//   zero 1: as zero 0 but each bucket is reduce-scattered onto the owned shard (a slice of the full
//           gradient buffer: no second gradient copy); each rank updates its shard; an all-gather
//           restores the full parameters.
//   zero 2: every micro-batch's gradients are reduce-scattered bucket by bucket during backward
//           into a shard accumulator; no full-size gradient is kept.
//   zero 3: parameters live only as shards; gather_shard's backward reduce-scatters per use.
// A table tied across the first and last stage has its two copies' gradients summed.
// Internal API of the runtime (needs libtorch): used by lib/runtime and lib/profiler, not torch-free code.
#pragma once

#include <memory>

#include "weft/runtime/grad_sync.h"
#include "weft/runtime/model.h"

namespace weft::runtime {

struct HeldBytes {
  int64_t params = 0, grads = 0, optimizer = 0;
};

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class Optimizer {
 public:
  Optimizer(Model& m, AdamWConfig c, GradSyncOptions g = {})
      : model_(m), cfg_(c), grad_sync_(std::make_unique<GradSync>(m, g)) {}
  void zero_grad();
  // Around each micro-batch's backward on this stage; `last`: the step's last backward here. The
  // data-parallel reduction runs during (and right after) these backward passes.
  void begin_backward(bool last, int chunk = -1) { grad_sync_->begin_backward(last, chunk); }
  void after_backward() { grad_sync_->end_backward(); }
  // After the last micro-batch: waits for the data-parallel reduction; the tied-table sum.
  void sync_grads();
  // Bytes of gradient storage this rank holds now (full buffers, shards, any parameter's own
  // gradient), each storage counted once.
  int64_t resident_grad_bytes();
  // Bytes of model state this rank holds now, each storage counted once: parameters (the local
  // flat buffers, or the ZeRO-3 shards), gradients (resident_grad_bytes()) and AdamW moments.
  // ZeRO-3's gathered buffers are not included (ops.h gathered_param_bytes()).
  HeldBytes held_bytes();
  const GradSync& grad_sync() const { return *grad_sync_; }
  // Sum of squares of this rank's share of the global gradient (each element counted on one rank).
  double local_norm_sq();
  // One AdamW step on every owned range with the gradients scaled by `grad_scale` (clipping), then
  // the ZeRO-1/2 parameter all-gather. Increments step(). On CUDA with PyTorch 2.x, PyTorch's fused
  // AdamW kernel (the gradients scaled in place); elsewhere the same update as eager operators.
  void step(double lr, double grad_scale);
  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }

 private:
  Model& model_;
  AdamWConfig cfg_;
  std::unique_ptr<GradSync> grad_sync_;
  int64_t t_ = 0;
};

}  // namespace weft::runtime
