// Differentiable collectives, as conjugate forward/backward pairs (Megatron's mappings), plus
// the re-distribution step between layouts, recomputation and the vocab-parallel cross-entropy.
// A group of size 1 makes every op the identity (no autograd node is created).
// Internal API of the runtime (needs libtorch): used by lib/runtime and lib/profiler, not torch-free code.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <vector>

#include "weft/plan/geometry.h"
#include "weft/runtime/comm.h"

namespace weft::runtime {

// Tensor parallel, replicated activations (Megatron f / g):
// copy_to: forward identity, backward all-reduce (enter a tp region; also sums the gradient of a
// parameter that is replicated over the group but sees different data on each member).
at::Tensor copy_to(const at::Tensor& x, Comm& c);
// reduce_from: forward all-reduce, backward identity (leave a tp region after a row-parallel GEMM).
at::Tensor reduce_from(const at::Tensor& x, Comm& c);

// Sequence parallel along dim 1 (Megatron-SP): gather_seq: forward all-gather, backward
// reduce-scatter; scatter_seq: forward reduce-scatter, backward all-gather. Chunk r of the
// sequence belongs to group rank r.
at::Tensor gather_seq(const at::Tensor& x, Comm& c);
at::Tensor reduce_scatter_seq(const at::Tensor& x, Comm& c);

// Ulysses: [b, t/u, h, d] (sequence-split) <-> [b, t, h/u, d] (head-split) by an equal-split
// all-to-all; each is the other's backward.
at::Tensor seq_to_heads(const at::Tensor& x, Comm& c);
at::Tensor heads_to_seq(const at::Tensor& x, Comm& c);

// Mixture-of-Experts dispatch (Megatron's all-to-all token dispatcher):
// alltoall_rows: rows of x [n, ...] by an uneven all-to-all over c (send_rows[j] rows to member j,
// recv_rows[j] from it, Comm::alltoall_v); the backward sends the gradients back the same way.
at::Tensor alltoall_rows(const at::Tensor& x, Comm& c, const std::vector<int64_t>& send_rows,
                         const std::vector<int64_t>& recv_rows);
// Expert tensor parallelism, uneven rows: gather_rows concatenates every member's x [rows[i], ...]
// in member order (backward: the rank-order sum over members of the gradient of this member's
// rows); reduce_scatter_rows is its conjugate (forward: this member's rows[rank] rows of the
// rank-order sum over members of x [sum rows, ...]; backward: gather_rows of the gradient).
at::Tensor gather_rows(const at::Tensor& x, Comm& c, const std::vector<int64_t>& rows);
at::Tensor reduce_scatter_rows(const at::Tensor& x, Comm& c, const std::vector<int64_t>& rows);
// Tensor parallelism without sequence parallelism around a MoE layer, whose tp ranks route a
// tp-th of their replicated block each (Megatron's scatter_to / gather_from_sequence_parallel_region
// without the reduction): split_seq takes member r's block r of c.size() along dim 1 (backward:
// all-gather); gather_seq_copy is its inverse (forward: all-gather along dim 1; backward: this
// member's block).
at::Tensor split_seq(const at::Tensor& x, Comm& c);
at::Tensor gather_seq_copy(const at::Tensor& x, Comm& c);
// A loss computed inside the layers (the MoE load-balancing loss), added to the objective without
// changing the pipeline: returns x unchanged, and its backward hands `scale` to loss as loss's
// gradient (Megatron's MoEAuxLossAutoScaler). loss: a scalar.
at::Tensor attach_loss(const at::Tensor& x, const at::Tensor& loss, double scale);
// Whether this thread is re-running a recomputed forward inside a backward pass (recompute()).
bool recomputing();

// Context parallelism: causal attention of this cp rank's share of the sequence (T / cp tokens:
// chunks r and 2 cp - 1 - r of 2 cp, geometry.h seq_runs) against every share, the keys and values
// passed round the ring of `cp`. q [b, T / cp, h, d], k and v [b, T / cp, hkv, d] (h a multiple of
// hkv, query head i using key/value head i / (h / hkv)), positions already applied; returns
// [b, T / cp, h, d], differentiable (its backward runs the ring again). A group of one rank is plain
// causal attention.
at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Comm& cp, int64_t T);

// Moves a stage's activations from one layout to another (forward), and their gradients back
// (backward), through an all-gather over the stage group. x is this rank's [b, t, H] block under
// `from`; returns its block under `to`.
at::Tensor redistribute(const at::Tensor& x, Comm& stage, const ActivationLayout& from, const ActivationLayout& to);

// ZeRO-3 as FSDP runs it: the full parameters live only while a computation uses them.
// gather_shard all-gathers the flat parameter shard of every member into a new full flat buffer
// ([size * shard.numel()]); it is differentiable, and its backward reduce-scatters the gradient
// (summed in rank order) and then frees the buffer. release_gathered(y, full, shard, c) marks the
// end of the forward computation from `full` to its output y: it frees the buffer's memory at once
// (the views the autograd graph saved keep an empty storage) and returns y through an identity
// node whose backward all-gathers the buffer again, before the backward of that computation reads
// it. Without grad mode (or when y needs no gradient) it returns y and the buffer is freed with its
// last reference. Peak parameter memory of a stage is then its shards plus the gathered buffers of
// the units computing at that moment, whatever the number of micro-batches in flight.
// `compute` (mixed precision, FSDP's param_dtype): the shard is cast to it before the all-gather,
// so the buffer and the traffic are in the compute dtype, and the backward's reduce-scatter runs in
// the shard's dtype (fp32 gradient reduction); Undefined: the shard's own dtype.
at::Tensor gather_shard(const at::Tensor& shard, Comm& c, at::ScalarType compute = at::ScalarType::Undefined);
at::Tensor release_gathered(const at::Tensor& y, const at::Tensor& full, const at::Tensor& shard, Comm& c);
// Frees a gathered buffer (from gather_shard) whose values no backward reads (an embedding
// lookup's table); undefined tensors are ignored.
void drop_gathered(const at::Tensor& full);

// Bytes of gathered ZeRO-3 buffers backed by memory in this process: now, and at most since the
// last reset_gathered_peak() (measured at allocation and free of the buffers themselves).
struct GatheredBytes {
  int64_t live = 0, peak = 0;
};
GatheredBytes gathered_param_bytes();
void reset_gathered_peak();

// Activation recomputation: runs fn(inputs) without saving activations; in backward re-runs it with
// grad enabled on detached copies of the inputs and back-propagates through it (parameters used by
// fn receive their gradients then). fn must be deterministic (no dropout here).
using TensorFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;
at::Tensor recompute(const TensorFn& fn, const std::vector<at::Tensor>& inputs);

// A MoE router's choice (Megatron-LM core_v0.19 topk_routing_with_score_function and
// group_limited_topk; DeepSeek-V2/V3): for each row of scores [n, E] (fp32) the top_k experts by
// scores + bias (bias [E], undefined: none; it picks, it does not weigh), and with groups > 1 and
// group_top_k < groups only from the row's group_top_k groups (E / groups consecutive experts)
// with the highest sum of their group_score_top best biased scores. Returns the chosen experts'
// unbiased scores [n, top_k] (differentiable through scores) and their indices, highest first.
std::pair<at::Tensor, at::Tensor> route_top_k(const at::Tensor& scores, const at::Tensor& bias, int top_k, int groups,
                                              int group_top_k, int group_score_top);

// The runtime's attention core: causal attention, over a band of `window` keys when window > 0
// (each query attends to itself and the window - 1 keys before it; 0: the whole causal context),
// with, when `with_sinks`, a learned sink logit per head as one more softmax column that takes
// weight but adds no value (GPT-OSS: softmax over [scores, sink], the sink's column dropped).
// in: q, k, v [b, T, h, d] (k, v with fewer heads: repeated to the query heads, grouped), then the
// sinks [h] when with_sinks, then document ids [b, T] for packed documents (attention stays inside a
// document). Returns [b, T, h, d]. Plain causal attention runs PyTorch 2's fused kernel where the
// build has it; otherwise the T x T scores are materialised.
at::Tensor banded_sink_attention(const std::vector<at::Tensor>& in, int64_t window, bool with_sinks);

// Vocab-parallel cross-entropy. logits: [N, v] columns [start, start + v) of the full vocabulary
// on this member of `c`; targets: [N] global ids. Returns the per-token loss [N], identical on every
// member. With a group of size 1 it is the ordinary (max-shifted) cross-entropy.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t start, Comm& c);

}  // namespace weft::runtime
