#include "weft/runtime/pipeline_executor.h"

#include <torch/autograd.h>

#include <algorithm>

namespace weft::runtime {

double run_pipeline_step(const std::vector<PipeAction>& actions, PipelineStage& stage, const StageLinks& links,
                         double loss_divisor) {
  Comm& comm = *links.comm;
  size_t last_backward = 0;  // the step's last backward on this stage: zero 0/1 reduce during it
  int m = 0;
  for (size_t i = 0; i < actions.size(); ++i) {
    if (actions[i].kind == PipeAction::kBackward) last_backward = i;
    m = std::max(m, actions[i].micro_batch + 1);
  }
  std::vector<at::Tensor> xin(m), yout(m);
  std::vector<Pending> sends;
  double loss_sum = 0;
  for (size_t ai = 0; ai < actions.size(); ++ai) {
    const PipeAction& a = actions[ai];
    const int k = a.micro_batch;
    if (a.kind == PipeAction::kForward) {
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
    } else {
      stage.begin_backward(ai == last_backward);
      if (stage.last_stage()) {
        yout[k].backward();
      } else {
        at::Tensor dy = at::empty(yout[k].sizes(), yout[k].options());
        comm.recv(dy, links.next, 2 * k + 1);
        torch::autograd::backward({yout[k]}, {dy});
      }
      if (!stage.first_stage()) {
        at::Tensor g = xin[k].grad().defined() ? xin[k].grad() : at::zeros_like(xin[k]);
        sends.push_back(comm.send(g, links.prev, 2 * k + 1));
      }
      xin[k] = at::Tensor();
      yout[k] = at::Tensor();
      stage.end_backward();
    }
  }
  for (auto& s : sends) s.wait();
  return loss_sum;
}

}  // namespace weft::runtime
