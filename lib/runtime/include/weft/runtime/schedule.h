// Pure scheduling arithmetic of the training loop: the order of forward and backward passes of a
// pipeline stage, and the learning-rate schedule. Torch-free, unit-tested without processes.
#pragma once

#include <vector>

#include "weft/plan/strategy.h"

namespace weft::runtime {

struct PipeAction {
  enum Kind { kForward, kBackward } kind = kForward;
  int micro_batch = 0;
  bool operator==(const PipeAction&) const = default;
};

// The actions stage `stage` (0-based, of `stages`) runs for `m` micro-batches in one step.
//   gpipe: F0 .. F(m-1), then B0 .. B(m-1).
//   1f1b:  w = min(stages - stage - 1, m) warm-up forwards, then alternate F(w+i), B(i) until every
//          forward has run, then the remaining backwards in order. With one stage this is
//          F0 B0 F1 B1 ...: gradient accumulation holding one micro-batch of activations.
// Every stage's sequence is deadlock-free when sends are asynchronous and receives block.
// Preconditions (WEFT_ASSERT): 0 <= stage < stages, m >= 1, and not the interleaved schedule, which
// callers refuse earlier (check_supported).
std::vector<PipeAction> pipeline_actions(Schedule s, int stages, int stage, int m);

// Largest number of micro-batches whose activations a stage holds at once under the schedule.
int in_flight(const std::vector<PipeAction>& actions);

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
