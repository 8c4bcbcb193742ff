// Gradient synchronisation and the optimizer over a Model's units.
//   zero 0: gradients accumulate in the unit's flat buffer over micro-batches; one all-reduce per
//           unit (bucket) per step; every replica runs the same AdamW update on the whole unit.
//   zero 1: as zero 0 but a reduce-scatter; each rank updates its shard; an all-gather restores the
//           full parameters.
//   zero 2: the reduce-scatter runs after every micro-batch into a shard accumulator.
//   zero 3: parameters live only as shards; gather_shard's backward reduce-scatters per use.
// A table tied across the first and last stage has its two copies' gradients summed.
#pragma once

#include "model.h"

namespace weft::runtime {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class Optimizer {
 public:
  Optimizer(Model& m, AdamWConfig c) : model_(m), cfg_(c) {}
  void zero_grad();
  // After a micro-batch's backward on this stage (zero 2 reduce-scatters here).
  void after_micro_batch();
  // After the last micro-batch: the data-parallel reduction and the tied-table sum.
  void sync_grads();
  // Sum of squares of this rank's share of the global gradient (each element counted on one rank).
  double local_norm_sq();
  // One AdamW step on every owned range with the gradients scaled by `grad_scale` (clipping), then
  // the ZeRO-1/2 parameter all-gather. Increments step().
  void step(double lr, double grad_scale);
  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }

 private:
  Model& model_;
  AdamWConfig cfg_;
  int64_t t_ = 0;
};

}  // namespace weft::runtime
