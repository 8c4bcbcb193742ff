#include "weft/runtime/pipeline_executor.h"

#include <torch/autograd.h>

#include <algorithm>
#include <utility>

#include "weft/runtime/split_backward.h"

namespace weft::runtime {

double run_pipeline_step(const std::vector<PipeAction>& actions, PipelineStage& stage, const StageLinks& links,
                         double loss_divisor) {
  Comm& comm = *links.comm;
  const int chunks = std::max(1, stage.chunks());
  int m = 0;
  for (const PipeAction& a : actions) m = std::max(m, a.micro_batch + 1);
  // Chunk c is virtual stage vs(c); it takes the embedding's output on the first virtual stage
  // and ends in the loss on the last. The neighbouring virtual stages run on the device groups
  // group_of(vs(c) -+ 1): on a peer, or on this group itself (zb-v's turn: handed over in memory).
  const int groups = static_cast<int>(links.peers.size());
  auto vs = [&](int c) { return virtual_stage(links.schedule, groups, links.group, c); };
  auto group_of = [&](int v) { return stage_device_group(links.schedule, groups, v); };
  auto peer = [&](int v) { return links.peers.at(group_of(v)); };
  auto local = [&](int v) { return group_of(v) == links.group; };
  auto first = [&](int c) { return stage.first_stage() && c == 0; };
  auto last = [&](int c) { return stage.last_stage() && c == chunks - 1; };
  // Per chunk, where its gradients are final: its step's last backward, or its last
  // weight-gradient pass (on the first virtual stage an input-gradient pass runs the whole
  // backward, see below).
  std::vector<size_t> last_backward(chunks, 0);
  for (size_t i = 0; i < actions.size(); ++i) {
    const PipeAction& a = actions[i];
    const bool whole = a.kind == PipeAction::kBackward || (a.kind == PipeAction::kInputGrad && first(a.chunk));
    if (whole || (a.kind == PipeAction::kWeightGrad && !first(a.chunk))) last_backward[a.chunk] = i;
  }
  const size_t slots = static_cast<size_t>(chunks) * m;
  std::vector<at::Tensor> xin(slots), yout(slots);
  std::vector<WeightGradWork> pending(slots);
  std::vector<Pending> sends;
  // Handed over in memory at zb-v's turn, by micro-batch: chunk 0's output, chunk 1's input gradient.
  std::vector<at::Tensor> handed_act(m), handed_grad(m);
  double loss_sum = 0;
  // Transfers across the boundary after virtual stage s: activations of micro-batch k with tag
  // 2 (s m + k), their gradient with that + 1.
  auto tag = [&](int boundary, int k) { return 2 * (boundary * m + k); };
  // The gradient of the output of (c, k): from the loss on the last virtual stage, else received.
  auto output_grad = [&](int c, int k) {
    if (last(c)) return at::Tensor();
    if (local(vs(c) + 1)) return std::exchange(handed_grad[k], at::Tensor());
    const at::Tensor& y = yout[c * m + k];
    at::Tensor dy = at::empty(y.sizes(), y.options());
    comm.recv(dy, peer(vs(c) + 1), tag(vs(c), k) + 1);
    return dy;
  };
  auto send_input_grad = [&](int c, int k, const at::Tensor& g) {
    const at::Tensor& x = xin[c * m + k];
    at::Tensor dx = g.defined() ? g : at::zeros_like(x);
    if (local(vs(c) - 1)) handed_grad[k] = dx;
    else sends.push_back(comm.send(dx, peer(vs(c) - 1), tag(vs(c) - 1, k) + 1));
  };
  // A send keeps its tensor until it is waited on: let go of those the peer has received, so a
  // stage holds no more than the micro-batches in flight (1F1B's first stage would otherwise keep
  // every micro-batch's output until the step ends).
  auto release_sent = [&] {
    for (Pending& s : sends)
      if (!s.done() && s.completed()) s.wait();
    sends.erase(std::remove_if(sends.begin(), sends.end(), [](const Pending& s) { return s.done(); }), sends.end());
  };
  for (size_t ai = 0; ai < actions.size(); ++ai) {
    release_sent();
    const PipeAction& a = actions[ai];
    const int k = a.micro_batch, c = a.chunk;
    const size_t i = static_cast<size_t>(c) * m + k;
    switch (a.kind) {
      case PipeAction::kForward: {
        at::Tensor x;
        if (first(c)) {
          x = stage.input(k);
        } else {
          if (local(vs(c) - 1)) {
            x = std::exchange(handed_act[k], at::Tensor());
          } else {
            x = stage.input_buffer(c, k);
            comm.recv(x, peer(vs(c) - 1), tag(vs(c) - 1, k));
          }
          x.requires_grad_(true);
          xin[i] = x;
        }
        at::Tensor y = stage.forward(x, c);
        if (last(c)) {
          at::Tensor l = stage.loss(y, k);
          loss_sum += l.item<double>();
          yout[i] = l / loss_divisor;
        } else {
          if (local(vs(c) + 1)) handed_act[k] = y.detach();
          else sends.push_back(comm.send(y.detach(), peer(vs(c) + 1), tag(vs(c), k)));
          yout[i] = y;
        }
        break;
      }
      case PipeAction::kInputGrad:
        if (!first(c)) {
          // B: the input's gradient alone; the weights' gradients wait in pending[i] for W.
          stage.begin_input_grad();
          const at::Tensor dy = output_grad(c, k);
          const std::vector<at::Tensor> gx = backward_inputs({yout[i]}, {dy}, {xin[i]}, pending[i]);
          send_input_grad(c, k, gx[0]);
          xin[i] = at::Tensor();
          yout[i] = at::Tensor();
          stage.end_input_grad();
          break;
        }
        // The first virtual stage sends no gradient: nothing waits for its B, which runs the whole
        // backward (its W follows at once in a zero-bubble schedule, and does nothing).
        [[fallthrough]];
      case PipeAction::kBackward: {
        stage.begin_backward(ai == last_backward[c], c);
        const at::Tensor dy = output_grad(c, k);
        if (dy.defined())
          torch::autograd::backward({yout[i]}, {dy});
        else
          yout[i].backward();
        if (!first(c)) send_input_grad(c, k, xin[i].grad());
        xin[i] = at::Tensor();
        yout[i] = at::Tensor();
        stage.end_backward();
        break;
      }
      case PipeAction::kWeightGrad:
        if (first(c)) break;
        stage.begin_backward(ai == last_backward[c], c);
        pending[i].run();
        stage.end_backward();
        break;
    }
  }
  for (auto& s : sends) s.wait();
  return loss_sum;
}

}  // namespace weft::runtime
