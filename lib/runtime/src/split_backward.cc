#include "weft/runtime/split_backward.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "weft/core/assert.h"

namespace weft::runtime {

namespace {

using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Engine;
using torch::autograd::Node;
using torch::autograd::variable_list;

// Keeps the gradients a node receives (all of its inputs, summed over its consumers).
class KeepGrads final : public torch::autograd::FunctionPreHook {
 public:
  explicit KeepGrads(std::shared_ptr<variable_list> slot) : slot_(std::move(slot)) {}
  variable_list operator()(const variable_list& grads) override {
    *slot_ = grads;
    return grads;
  }

 private:
  std::shared_ptr<variable_list> slot_;
};

// Releases its node's saved tensors once the node has run (the hook belongs to the node).
class ReleaseSaved final : public torch::autograd::FunctionPostHook {
 public:
  explicit ReleaseSaved(Node* n) : node_(n) {}
  variable_list operator()(const variable_list& outputs, const variable_list&) override {
    node_->release_variables();
    return outputs;
  }

 private:
  Node* node_;
};

}  // namespace

std::vector<at::Tensor> backward_inputs(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& grad_outputs,
                                        const std::vector<at::Tensor>& inputs, WeightGradWork& work) {
  WEFT_ASSERT(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
              "backward_inputs: " + std::to_string(grad_outputs.size()) + " gradients for " +
                  std::to_string(outputs.size()) + " outputs");
  edge_list roots;
  variable_list root_grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    roots.push_back(torch::autograd::impl::gradient_edge(outputs[i]));
    const bool given = i < grad_outputs.size() && grad_outputs[i].defined();
    root_grads.push_back(given ? grad_outputs[i] : at::ones_like(outputs[i]));
  }
  edge_list input_edges;
  std::unordered_set<const Node*> input_nodes;
  for (const at::Tensor& x : inputs) {
    WEFT_ASSERT(x.requires_grad(), "backward_inputs: an input does not require a gradient");
    input_edges.push_back(torch::autograd::impl::gradient_edge(x));
    input_nodes.insert(input_edges.back().function.get());
  }

  // Which nodes lead to an input (x) and which to a weight (p: a gradient accumulator of another
  // leaf), in post-order of a depth-first walk of the graph (a DAG).
  struct Reach {
    bool x = false, p = false;
  };
  std::unordered_map<const Node*, Reach> reach;
  std::unordered_map<const Node*, std::shared_ptr<Node>> owner;
  std::vector<Node*> post;
  std::vector<std::pair<Node*, uint32_t>> stack;
  for (const Edge& r : roots) {
    if (!r.is_valid() || reach.count(r.function.get())) continue;
    reach[r.function.get()];
    owner[r.function.get()] = r.function;
    stack.push_back({r.function.get(), 0});
    while (!stack.empty()) {
      Node* n = stack.back().first;
      const uint32_t i = stack.back().second;
      if (i < n->num_outputs()) {
        ++stack.back().second;
        const Edge& e = n->next_edge(i);
        if (e.is_valid() && !reach.count(e.function.get())) {
          reach[e.function.get()];
          owner[e.function.get()] = e.function;
          stack.push_back({e.function.get(), 0});
        }
        continue;
      }
      Reach me;
      me.x = input_nodes.count(n) > 0;
      me.p = !me.x && dynamic_cast<torch::autograd::AccumulateGrad*>(n) != nullptr;
      for (const Edge& e : n->next_edges()) {
        if (!e.is_valid()) continue;
        const Reach& c = reach.at(e.function.get());
        me.x = me.x || c.x;
        me.p = me.p || c.p;
      }
      reach[n] = me;
      post.push_back(n);
      stack.pop_back();
    }
  }

  // Nodes on the input path with a branch that leads to weights only: B keeps what reaches them.
  std::unordered_set<const Node*> kept;
  for (Node* n : post) {
    if (!reach.at(n).x) continue;
    edge_list branches;
    for (const Edge& e : n->next_edges()) {
      if (!e.is_valid()) continue;
      const Reach& c = reach.at(e.function.get());
      if (c.p && !c.x) branches.push_back(e);
    }
    if (branches.empty()) continue;
    auto slot = std::make_shared<variable_list>();
    n->add_pre_hook(std::make_unique<KeepGrads>(slot));
    work.kept_.push_back({owner.at(n), slot, std::move(branches)});
    kept.insert(n);
  }

  // Whatever W does not run again gives its saved tensors back as soon as it has run, as a backward
  // that frees the graph does.
  for (Node* n : post) {
    if (!reach.at(n).x) continue;
    defer_recompute_weight_grads(n, &work);
    if (!kept.count(n)) n->add_post_hook(std::make_unique<ReleaseSaved>(n));
  }
  const variable_list grads = Engine::get_default_engine().execute(
      roots, root_grads, /*keep_graph=*/true, /*create_graph=*/false, /*accumulate_grad=*/false, input_edges);
  return grads;
}

void WeightGradWork::run() {
  Engine& engine = Engine::get_default_engine();
  // Each kept node once more, for its weight branches alone.
  std::map<std::pair<const Node*, uint32_t>, size_t> slot_of;
  edge_list heads;
  variable_list head_grads;
  for (Kept& k : kept_) {
    edge_list roots;
    variable_list gs;
    for (size_t i = 0; i < k.grads->size(); ++i) {
      if (!(*k.grads)[i].defined()) continue;
      roots.emplace_back(k.node, static_cast<uint32_t>(i));
      gs.push_back((*k.grads)[i]);
    }
    if (roots.empty()) continue;
    const variable_list out = engine.execute(roots, gs, /*keep_graph=*/false, /*create_graph=*/false,
                                             /*accumulate_grad=*/false, k.branches);
    for (size_t j = 0; j < k.branches.size(); ++j) {
      if (!out[j].defined()) continue;
      const Edge& e = k.branches[j];
      const auto key = std::make_pair(static_cast<const Node*>(e.function.get()), e.input_nr);
      auto [it, fresh] = slot_of.emplace(key, heads.size());
      if (fresh) {
        heads.push_back(e);
        head_grads.push_back(out[j]);
      } else {
        head_grads[it->second] = head_grads[it->second] + out[j];
      }
    }
    k.grads.reset();
  }
  // Then every weight branch, together: their gradient accumulators (and hooks) run here.
  if (!heads.empty())
    engine.execute(heads, head_grads, /*keep_graph=*/false, /*create_graph=*/false, /*accumulate_grad=*/true);
  kept_.clear();
}

}  // namespace weft::runtime
