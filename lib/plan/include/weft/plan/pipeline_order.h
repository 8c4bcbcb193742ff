// The order in which a pipeline stage runs its forward and backward passes under each schedule:
// the one rule both the runtime (lib/runtime's executor runs these actions) and the cost model's
// event simulator (weft/cost/schedule.h lays these actions out in time) follow, so what is priced
// is what runs. Torch-free, unit-tested without processes.
#pragma once

#include <vector>

#include "weft/plan/strategy.h"

namespace weft {

struct PipeAction {
  // kBackward: the whole backward of the micro-batch. A zero-bubble schedule splits it in two:
  // kInputGrad (B), the gradient of the stage's input, which the previous stage waits for, and
  // kWeightGrad (W), the gradients of the weights, which nothing waits for until the step ends.
  enum Kind { kForward, kBackward, kInputGrad, kWeightGrad } kind = kForward;
  int micro_batch = 0;
  int chunk = 0;  // model chunk: virtual stage virtual_stage(schedule, stages, stage, chunk)
  bool operator==(const PipeAction&) const = default;
};

// The virtual stage model chunk `chunk` of device group `stage` (of `stages`) runs: stage + chunk *
// stages, or under zb-v chunk 0 is virtual stage `stage` and chunk 1 is 2 stages - 1 - stage.
int virtual_stage(Schedule s, int stages, int stage, int chunk);

// The inverse of virtual_stage(): the device group (0..stages-1) that runs virtual stage `vstage`
// (0..stages * vp - 1), vstage % stages, or under zb-v vstage before the turn (vstage < stages)
// and 2 stages - 1 - vstage after it, so that group 0 holds the first and the last virtual stage
// (the embedding and the head) and group stages - 1 the two at the turn. Every place that maps a
// virtual stage to its devices asks this (through stage_group(), weft/plan/plan.h, where a plan is
// at hand). Precondition (WEFT_ASSERT): stages >= 1, vstage >= 0 (and < 2 stages under zb-v).
int stage_device_group(Schedule s, int stages, int vstage);
// Which model chunk of its device group virtual stage `vstage` is: vstage / stages, or under zb-v
// 0 before the turn and 1 after it.
int stage_chunk(Schedule s, int stages, int vstage);

// The actions stage `stage` (0-based, of `stages`) runs for `m` micro-batches in one step.
//   gpipe: F0 .. F(m-1), then B0 .. B(m-1).
//   1f1b:  w = min(stages - stage - 1, m) warm-up forwards, then alternate F(w+i), B(i) until every
//          forward has run, then the remaining backwards in order. With one stage this is
//          F0 B0 F1 B1 ...: gradient accumulation holding one micro-batch of activations.
//   zb-h1: 1F1B's forwards and input-gradient passes B in the same order; the weight-gradient
//          pass W of micro-batch i runs after the B of micro-batch i + stage (on the first stage
//          right after B(i)), then after each cool-down B, then every W still pending (ZB-H1 of
//          Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24: stage s holds the W state of at
//          most s micro-batches beyond 1F1B's stages - s in flight).
//   zb-v:  (vp = 2) the order of torch.distributed.pipelining's ScheduleZBVZeroBubble (PyTorch
//          2.6+): 2 (stages - stage) - 1 forwards of chunk 0; stage times a forward of chunk 1 and
//          one of chunk 0; stages - stage times F, B, W of chunk 1; then F, B, W of chunk 0 and
//          F, B, W of chunk 1 until every forward has run; then stage times B of chunk 0 and of
//          chunk 1, stages - stage times B and W of chunk 0, and the W still pending, chunk 1's
//          first. Counted over max(m, 2 stages - 1) micro-batches, the ones past m dropped.
//   interleaved (vp model chunks per stage, Narayanan et al. 2021, in Megatron-LM's order): the
//          k-th forward works on chunk (k / stages) % vp and micro-batch (k / (stages * vp)) *
//          stages + k % stages, backwards walk the chunks in reverse; (stages - stage - 1) * 2 +
//          (vp - 1) * stages warm-up forwards (all of them when m == stages), then one forward one
//          backward, then the rest. m must be a multiple of stages.
// Every stage's sequence is deadlock-free when sends are asynchronous and receives block.
// Preconditions (WEFT_ASSERT): 0 <= stage < stages, m >= 1; vp >= 1, > 1 only with the
// interleaved schedule (and then m % stages == 0) or zb-v (and then vp == 2).
std::vector<PipeAction> pipeline_actions(Schedule s, int stages, int stage, int m, int vp = 1);

// Largest number of micro-batches a stage holds state of at once under the schedule: a forward
// takes one, a backward or a weight-gradient pass gives it back (an input-gradient pass keeps what
// the weight gradient needs: under zb-h1 min(pp, m) on every stage, stages - stage of them with
// their activations).
int in_flight(const std::vector<PipeAction>& actions);

}  // namespace weft
