// Pure scheduling arithmetic of the training loop: the learning-rate schedule, and (from lib/plan,
// weft/plan/pipeline_order.h) the order of a pipeline stage's passes. Torch-free, unit-tested
// without processes.
#pragma once

#include <vector>

#include "weft/plan/pipeline_order.h"

namespace weft::runtime {

struct LrSchedule {
  double peak = 1e-3;      // reached at the end of the warm-up
  double min = 1e-4;       // reached at the last step
  int warmup = 0;          // linear warm-up steps (from peak/warmup at step 1)
  int total = 1;           // number of optimizer steps of the whole run
  // Learning rate of optimizer step `step` (1-based): peak * step / warmup during the warm-up, then
  // a half cosine from peak to min over the remaining steps.
  double at(int step) const;
};

}  // namespace weft::runtime
