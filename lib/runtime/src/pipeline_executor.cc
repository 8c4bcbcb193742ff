#include "weft/runtime/pipeline_executor.h"

#include <torch/autograd.h>

#include <algorithm>

#include "weft/runtime/split_backward.h"

namespace weft::runtime {

double run_pipeline_step(const std::vector<PipeAction>& actions, PipelineStage& stage, const StageLinks& links,
                         double loss_divisor) {
  Comm& comm = *links.comm;
  // Where the gradients are final: the step's last backward, or its last weight-gradient pass
  // (on the first stage an input-gradient pass runs the whole backward, see below).
  size_t last_backward = 0;
  int m = 0;
  for (size_t i = 0; i < actions.size(); ++i) {
    const PipeAction::Kind k = actions[i].kind;
    const bool whole = k == PipeAction::kBackward || (k == PipeAction::kInputGrad && stage.first_stage());
    if (whole || (k == PipeAction::kWeightGrad && !stage.first_stage())) last_backward = i;
    m = std::max(m, actions[i].micro_batch + 1);
  }
  std::vector<at::Tensor> xin(m), yout(m);
  std::vector<WeightGradWork> pending(m);
  std::vector<Pending> sends;
  double loss_sum = 0;
  // The gradient of micro-batch k's output: from the loss on the last stage, else received.
  auto output_grad = [&](int k) {
    if (stage.last_stage()) return at::Tensor();
    at::Tensor dy = at::empty(yout[k].sizes(), yout[k].options());
    comm.recv(dy, links.next, 2 * k + 1);
    return dy;
  };
  auto send_input_grad = [&](int k, const at::Tensor& g) {
    sends.push_back(comm.send(g.defined() ? g : at::zeros_like(xin[k]), links.prev, 2 * k + 1));
  };
  for (size_t ai = 0; ai < actions.size(); ++ai) {
    const PipeAction& a = actions[ai];
    const int k = a.micro_batch;
    switch (a.kind) {
      case PipeAction::kForward: {
        at::Tensor x;
        if (stage.first_stage()) {
          x = stage.input(k);
        } else {
          x = stage.input_buffer();
          comm.recv(x, links.prev, 2 * k);
          x.requires_grad_(true);
          xin[k] = x;
        }
        at::Tensor y = stage.forward(x);
        if (stage.last_stage()) {
          at::Tensor l = stage.loss(y, k);
          loss_sum += l.item<double>();
          yout[k] = l / loss_divisor;
        } else {
          sends.push_back(comm.send(y.detach(), links.next, 2 * k));
          yout[k] = y;
        }
        break;
      }
      case PipeAction::kInputGrad:
        if (!stage.first_stage()) {
          // B: the input's gradient alone; the weights' gradients wait in pending[k] for W.
          stage.begin_input_grad();
          const at::Tensor dy = output_grad(k);
          const std::vector<at::Tensor> gx = backward_inputs({yout[k]}, {dy}, {xin[k]}, pending[k]);
          send_input_grad(k, gx[0]);
          xin[k] = at::Tensor();
          yout[k] = at::Tensor();
          stage.end_input_grad();
          break;
        }
        // The first stage sends no gradient: nothing waits for its B, which runs the whole backward
        // (its W follows at once in a zero-bubble schedule, and does nothing).
        [[fallthrough]];
      case PipeAction::kBackward: {
        stage.begin_backward(ai == last_backward);
        const at::Tensor dy = output_grad(k);
        if (dy.defined())
          torch::autograd::backward({yout[k]}, {dy});
        else
          yout[k].backward();
        if (!stage.first_stage()) send_input_grad(k, xin[k].grad());
        xin[k] = at::Tensor();
        yout[k] = at::Tensor();
        stage.end_backward();
        break;
      }
      case PipeAction::kWeightGrad:
        if (stage.first_stage()) break;
        stage.begin_backward(ai == last_backward);
        pending[k].run();
        stage.end_backward();
        break;
    }
  }
  for (auto& s : sends) s.wait();
  return loss_sum;
}

}  // namespace weft::runtime
