// What a layer sends under a strategy: the one description of a layer's communication, which every
// cost model built on weft's (the analytic model, the calibrated one) prices with its own
// CollectivePricer (weft/cost/pricing.h). docs/cost-model.md §3 derives each term.
//
// A layer's traffic is a list of transfers. A transfer is a run of collective calls issued together
// (`repeat` times per phase), with the parallelism it serves (the breakdown term its exposed time is
// reported under), when it runs (forward or backward of every micro-batch, or once per step) and
// what it can hide behind. The calls are those weft's runtime issues (lib/runtime: ops, optim,
// trainer); TrafficOptions names the few places where the analytic model counts Megatron-LM's and
// DeepSpeed's schedule instead.
//
// Pure functions of their arguments; thread-safe.
#pragma once

#include <array>
#include <initializer_list>
#include <optional>
#include <string>

#include "weft/core/assert.h"
#include "weft/cost/collectives.h"
#include "weft/cost/cost_model.h"

namespace weft {

// The parallelism a transfer serves.
enum class CommAxis {
  kTensor,    // tensor parallel (Megatron's all-reduce, or all-gather / reduce-scatter with SP)
  kUlysses,   // Ulysses all-to-alls of q, k, v and the context
  kContext,   // context-parallel ring passing K and V blocks
  kExpert,    // expert dispatch and combine
  kData,      // data parallel / ZeRO over the ranks holding the same shard
  kPipeline,  // send/recv at a pipeline stage boundary
};
const char* to_string(CommAxis a);

// When a transfer runs: in the forward or the backward of every micro-batch, or once per step.
enum class Phase { kForward, kBackward, kStep };

// What a transfer can hide behind.
enum class Overlap {
  kNone,      // exposed: the compute waits for it
  kRingStep,  // one context-parallel ring step, behind the attention of the block in hand
  kCompute,   // ZeRO's per-micro-batch gathers and reduce-scatters, behind the layer's compute
  kBackward,  // the per-step gradient reduction, behind the last backward (the schedule, §7)
};

// A list of at most N values kept inline, so that costing a layer allocates nothing (the search
// costs thousands of them). Holding more than N is a broken invariant of the functions below.
template <class T, int N>
class InlineList {
 public:
  InlineList() = default;
  InlineList(std::initializer_list<T> values) {
    for (const T& v : values) push_back(v);
  }
  void push_back(const T& v) {
    WEFT_ASSERT(n_ < N, "an inline list holds at most " + std::to_string(N) + " values");
    items_[n_++] = v;
  }
  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  const T& operator[](int i) const { return items_[i]; }
  const T& front() const { return items_[0]; }
  const T* begin() const { return items_.data(); }
  const T* end() const { return items_.data() + n_; }

 private:
  std::array<T, N> items_;
  int n_ = 0;
};

// `times` calls in a row of collective `kind` with per-rank buffer `bytes` (the nccl-tests
// convention of collectives.h) on `group`.
struct CollectiveCall {
  Collective kind = Collective::kAllReduce;
  Bytes bytes;
  CommGroup group;
  double times = 1;
};

// The calls of one transfer: one, or two issued together (an all-gather and reduce-scatter pair,
// the dense and the expert shards, a send and its all-gather).
using CallList = InlineList<CollectiveCall, 2>;

// Calls issued back to back, `repeat` times per phase: priced as repeat * sum(times * call), the
// calls summed in order. A kCompute transfer holds calls of one kind.
struct Transfer {
  CommAxis axis = CommAxis::kTensor;
  Phase phase = Phase::kForward;
  Overlap overlap = Overlap::kNone;
  double repeat = 1;
  CallList calls;
};

struct LayerTraffic {
  InlineList<Transfer, 16> transfers;  // in issue order within each phase
};

// Where weft's runtime and the analytic model (which reads Megatron-LM and DeepSpeed) count a
// layer's traffic differently. The defaults are the analytic model's; runtime_traffic() sets all.
struct TrafficOptions {
  // Element type of activations, gradients and messages; the plan's dtype when unset.
  std::optional<DType> dtype;
  // The gradient all-reduces of weights replicated over the tensor-parallel group: norm weights and
  // biases with sequence parallelism, K/V projections when tp exceeds the kv heads, the learned
  // position table (weft's runtime issues them; the analytic model leaves these small calls out).
  bool replicated_grad_sums = false;
  // ZeRO-3 gathers the weights again for backward (FSDP, DeepSpeed, and weft's runtime, which frees
  // them after each layer's forward); false: only when a full recompute re-runs the forward.
  bool zero3_backward_gather = true;
  // Embedding and head: one reduction per parameter tensor at the strategy's ZeRO stage (weft's
  // runtime; tied tables' sum sharded from ZeRO-2), or one bucket reduced once per step as ZeRO-1
  // does whatever the stage (the analytic model, §5.3).
  bool per_tensor_edges = false;
  // Pipeline boundary: every rank sends the block of the boundary layer's activation layout
  // (weft's runtime), or Megatron's scatter-gather (1/tp each, all-gathered after the receive
  // when the layer has no sequence parallelism; §3.7).
  bool layout_p2p = false;
};
// The schedule of weft's runtime, messages in `wire`.
TrafficOptions runtime_traffic(DType wire);

// §3.4 The copies a node-deduplicating dispatcher (DeepEP, HybridEP) carries per crossing to a
// remote node (CommGroup::copies_per_crossing) for MoE layer `moe` over expert-parallel group g:
// the experts spread evenly over g's nodes (experts x ranks_per_node / size on each) and each
// token's top_k experts distinct and uniformly chosen (balanced routing), top_k / nodes copies go to
// a given remote node on average, in one crossing when at least one goes: 1 - C(E - E_node, top_k)
// / C(E, top_k). 1 when g lies in one node. Qwen3-30B-A3B over 2 nodes (8 of 128 experts): 4.01.
double moe_copies_per_crossing(const MoeSpec& moe, const CommGroup& g);

// Key/value heads one tensor-parallel rank holds: kv_heads / tp, or one (replicated) when tp does
// not divide them (tp > kv heads).
double kv_heads_held(const LayerShape& L, const LayerStrategy& s);
// Key/value heads one rank sends in a Ulysses all-to-all: those it holds, copied up to
// lcm(held, ulysses) when the Ulysses degree does not divide them (weft's runtime, as
// DeepSpeed-Ulysses does for GQA).
double ulysses_kv_heads(const LayerShape& L, const LayerStrategy& s);

// Parameters one device holds of a layer under s (§5.1) and the ranks sharing each part.
struct HeldParams {
  double dense = 0;       // attention, dense FFN, norms: split by tp
  double expert = 0;      // routed experts: split by tp and ep
  int shard = 1;          // dp * ulysses * cp ranks holding the same dense part
  int expert_shard = 1;   // shard / ep
};
HeldParams held_params(const LayerShape& L, const LayerStrategy& s);

// One layer's traffic (§3.1-3.5): tensor parallel, Ulysses, context ring, expert all-to-alls,
// data parallel / ZeRO. Empty for a strategy without parallelism.
LayerTraffic layer_traffic(const LayerContext& ctx, const LayerStrategy& s, const TrafficOptions& o = {});

// Parameters of the embedding (first stage) and of the final norm and LM head (last stage) under
// emb, as the buckets that are reduced: one bucket without per_tensor_edges, else one per tensor.
// Empty on a middle stage.
InlineList<double, 4> edge_param_buckets(const StageContext& ctx, const LayerStrategy& emb, const TrafficOptions& o = {});

// The embedding's and the LM head's traffic (§5.3): vocab-parallel lookup and loss, their
// gradient reductions, the tied tables' sum between the first and last stage. Empty on a middle
// stage.
LayerTraffic edge_traffic(const StageContext& ctx, const LayerStrategy& emb, const TrafficOptions& o = {});

// Send/recv per micro-batch at the boundary after stage ctx.stage, forward and backward, where the
// boundary layer runs under s (§3.7). Empty for a single stage.
LayerTraffic p2p_traffic(const StageContext& ctx, const LayerStrategy& s, const TrafficOptions& o = {});

}  // namespace weft
