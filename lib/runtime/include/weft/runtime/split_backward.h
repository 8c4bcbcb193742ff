// A backward pass split into its input-gradient part (B) and its weight-gradient part (W), for the
// zero-bubble schedules (weft/plan/pipeline_order.h, zb-h1). Any autograd graph works, not only
// layers written for it: B runs the engine towards the inputs alone, so every node computes only
// the outputs that lead there (a matmul's dX, not its dW); at each node where a branch towards
// the weights leaves that path (a matmul reading a weight, a norm's scale) a pre-hook keeps the
// gradient the node received. W runs each of those nodes again for its weight outputs alone, then
// the weight branches (views of a gathered ZeRO-3 buffer, the tensor-parallel copy of a
// replicated weight, the AccumulateGrad nodes with the data-parallel reduction's hooks) in one
// engine call, so a weight reached from several nodes gets its gradient once, summed.
// (torch.distributed.pipelining's stage_backward_input/_weight find the same nodes; they run W per
// group of weights, which would run a ZeRO-3 gather's backward once per group.)
//
// What W needs stays alive until it runs: the kept nodes' saved tensors (a linear's input, the
// gradient of its output) and the weight branches. Every other node of the graph gives its saved
// tensors back as soon as it has run in B (as a backward that frees its graph does), so between B
// and W a micro-batch holds its weight-gradient state, not its activations (without fused
// attention, not the score matrices).
//
// Recomputation (ops.h recompute) runs an inner backward inside its node's backward: under a split
// B it splits that inner graph into the same work (defer_recompute_weight_grads()).
// Internal API of the runtime (needs libtorch), like ops.h.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/function.h>

#include <memory>
#include <vector>

namespace weft::runtime {

// The W part of one or more split graphs (one micro-batch of a stage), run once.
class WeightGradWork {
 public:
  bool empty() const { return kept_.empty(); }
  // Accumulates the weight gradients the graphs lead to (AccumulateGrad nodes and their hooks run
  // here) and releases the graphs.
  void run();

 private:
  friend std::vector<at::Tensor> backward_inputs(const std::vector<at::Tensor>&, const std::vector<at::Tensor>&,
                                                 const std::vector<at::Tensor>&, WeightGradWork&);
  struct Kept {
    std::shared_ptr<torch::autograd::Node> node;
    std::shared_ptr<std::vector<at::Tensor>> grads;  // what reached the node in B (its pre-hook)
    torch::autograd::edge_list branches;             // its next edges that lead to weights only
  };
  std::vector<Kept> kept_;
};

// B: the gradients of `inputs` (tensors that require grad, in order; undefined where none reached
// one) for `grad_outputs` of `outputs` (undefined: ones, for a scalar loss). The weight-gradient
// work is added to `work`; no weight receives a gradient here.
std::vector<at::Tensor> backward_inputs(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& grad_outputs,
                                        const std::vector<at::Tensor>& inputs, WeightGradWork& work);

// Marks node n, if it is a recomputation's (ops.cc), so that its backward splits its inner graph
// and adds the W part to `work`; returns whether it was one. backward_inputs calls it for every
// node B runs. (A mark on the node, not a thread-local setting: with CUDA tensors the engine runs
// the backward on its device threads.)
bool defer_recompute_weight_grads(torch::autograd::Node* n, WeightGradWork* work);

}  // namespace weft::runtime
