// The pipeline executor: runs one training step's forward and backward passes of one stage in the
// order of its schedule (weft/plan/pipeline_order.h pipeline_actions), with the point-to-point
// transfers between neighbouring stages. It knows nothing of the model: what a stage computes comes
// through PipelineStage, and the transfers go through a Comm, so both can be fakes in a test.
//
// Transfers of micro-batch k: the activations from virtual stage s to s + 1 have tag 2 (s m + k)
// (m micro-batches), their gradient from s + 1 back to s has tag 2 (s m + k) + 1. Sends are
// asynchronous and receives block, which every schedule of pipeline_actions() allows without
// deadlock.
// Internal API of the runtime (needs libtorch), like comm.h.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "weft/runtime/comm.h"
#include "weft/plan/pipeline_order.h"

namespace weft::runtime {

// What one pipeline stage computes. first_stage() / last_stage() say which of input() and loss()
// are called; begin_backward() / end_backward() bracket every backward pass (the data-parallel
// gradient reduction runs during them).
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  virtual bool first_stage() const = 0;
  virtual bool last_stage() const = 0;
  // Model chunks of the stage (its virtual stages, see StageLinks); first_stage() concerns chunk 0,
  // last_stage() the last chunk.
  virtual int chunks() const { return 1; }
  // First stage: the hidden states that micro-batch k's tokens enter the layers with.
  virtual at::Tensor input(int k) = 0;
  // Other stages: an empty tensor of the shape, dtype and device of the activations chunk c receives
  // for micro-batch k (its rows may differ by micro-batch: train.dp_micro_batches).
  virtual at::Tensor input_buffer(int chunk, int k) = 0;
  // The layers of chunk c.
  virtual at::Tensor forward(const at::Tensor& x, int chunk) = 0;
  // Last stage: the summed token losses of micro-batch k for the layers' output y (a scalar).
  virtual at::Tensor loss(const at::Tensor& y, int k) = 0;
  // Around each backward pass of chunk c; `last`: the step's last backward pass of that chunk on
  // this stage. Under a zero-bubble schedule they bracket the weight-gradient passes (W), where the
  // weights receive their gradients, and the whole backward of the first stage.
  virtual void begin_backward(bool last, int chunk) = 0;
  virtual void end_backward() = 0;
  // Around an input-gradient pass (B) of a zero-bubble schedule, which gives no weight a gradient.
  virtual void begin_input_grad() {}
  virtual void end_input_grad() {}
};

// Where a stage's transfers go: `comm` carries them; `peers[h]` is the rank in comm of this rank's
// counterpart (the same position) in device group h, so peers[group] is this rank. This stage is
// device group `group` of peers.size(); chunk c is virtual stage virtual_stage(schedule, groups,
// group, c), and its input comes from the group of the virtual stage before it, its output goes to
// the group of the one after (stage_device_group(); round a ring under the interleaved schedule).
// Where that group is this one (zb-v's turn, chunk 0 of the last group feeding its chunk 1) the
// activations and their gradient are handed over in memory, not sent.
struct StageLinks {
  Comm* comm = nullptr;
  std::vector<int> peers;
  int group = 0;
  Schedule schedule = Schedule::k1F1B;
};

// Runs `actions` (one step of this stage) and waits for its sends. Forward of micro-batch k: the
// input (first stage) or the activations received from prev, which then require a gradient; the
// layers; then the loss (last stage) or a send of the activations to next. Backward of k: from the
// loss divided by `loss_divisor` (last stage), else from the gradient received from next; then
// the input's gradient is sent to prev (zeros if it got none), except on the first stage.
// Zero-bubble schedules (kInputGrad, kWeightGrad): B sends the input's gradient and keeps what the
// weights' gradients need (split_backward.h); W of the same micro-batch accumulates them later.
// On the first stage B runs the whole backward and W does nothing.
// Returns the sum of the last stage's token losses over the micro-batches (0 on other stages).
// Errors of the transfers propagate as exceptions (Comm's contract).
double run_pipeline_step(const std::vector<PipeAction>& actions, PipelineStage& stage, const StageLinks& links,
                         double loss_divisor);

}  // namespace weft::runtime
