// The transformer as this rank holds it: parameters grouped into units (the embedding table, the
// position table, each decoder layer, the head), each unit a flat buffer that ZeRO shards and that
// the data-parallel gradient reduction cuts into buckets (grad_sync.h). Forward functions for GPT-2-style
// (LayerNorm, learned positions, GELU) and LLaMA-style (RMSNorm, RoPE, SwiGLU, GQA) decoders with
// tensor, sequence (Megatron-SP, Ulysses) and data parallelism per layer.
// Internal API of the runtime (needs libtorch): used by lib/runtime and lib/profiler, not torch-free code.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "weft/runtime/comm.h"
#include "weft/runtime/ops.h"
#include "weft/plan/geometry.h"
#include "weft/plan/plan.h"
#include "weft/plan/rank_map.h"

namespace weft::runtime {

// Runtime state of a unit.
struct Unit {
  UnitSpec spec;
  Comm* sync = nullptr;
  Comm* grad_sync = nullptr;         // zero < 3: the sync ranks' gradient channel (bucket reductions);
                                     // the main channel's group if the channel was not built
  Comm* tied = nullptr;              // the pair of ranks holding the two copies of a tied table
  int shard_rank = 0, shard_size = 1;
  int64_t shard = 0;                 // padded / shard_size
  at::Tensor flat;                   // zero < 3: [padded] local parameters (leaves share it)
  at::Tensor grad;                   // zero 0, 1: [padded] gradients (leaves' .grad share it); zero 2
                                     // keeps no full-size gradient (GradSync reduce-scatters each
                                     // bucket as its gradients arrive and drops them)
  std::vector<at::Tensor> leaves;    // zero < 3: one per param
  at::Tensor shard_leaf;             // zero 3: [shard] the parameter shard (a leaf)
  at::Tensor shard_grad;             // zero >= 1: [shard] reduced gradient of the owned shard (zero 1:
                                     // the owned slice of `grad`)
  at::Tensor m, v;                   // AdamW moments of the owned range
  // Parts of the owned range, [begin, len) from owned_begin(): parameters AdamW decays, and those
  // whose gradient this rank counts in the global norm (one copy of every element in the job).
  std::vector<std::pair<int64_t, int64_t>> decay_ranges, count_ranges;
  // The dtype weights() gives (mixed precision: bf16 copies of the fp32 parameters, cast inside the
  // autograd graph so their gradients arrive in fp32); the parameters' own dtype when equal.
  at::ScalarType compute = at::kFloat;
  // Local parameters (zero < 3, or ZeRO-3 on one rank) with a compute dtype of their own: the cast
  // weights of the current parameter values (the parameters' version when cast), made by the
  // step's first forward and shared by every micro-batch and recomputation until the parameters
  // change (the optimizer also drops them): 2 bytes per parameter held through the step, as
  // Megatron holds its bf16 parameters beside the fp32 main copy.
  std::vector<at::Tensor> cast;
  int64_t cast_version = -1;

  // The range this rank updates: [owned_begin, owned_begin + owned_len) of the padded buffer.
  int64_t owned_begin() const;
  int64_t owned_len() const;
  // The parameters to compute with, in spec order, in the compute dtype (zero 3: views of a buffer
  // gathered from all shards in that dtype, differentiable; `gathered`, if given, receives that
  // buffer, undefined for zero < 3).
  std::vector<at::Tensor> weights(at::Tensor* gathered = nullptr);
  // Ends the forward use of a buffer weights() gathered (zero 3: frees it until backward gathers
  // it again; ops.h release_gathered); returns y unchanged otherwise.
  at::Tensor release(const at::Tensor& y, const at::Tensor& gathered);
  // Parameter values of the owned range (a view; zero 3: the shard leaf's data).
  at::Tensor owned_params();
  // Gradient of the owned range after synchronisation (zero 0: a view of grad; else the shard).
  at::Tensor owned_grad();
};

struct LayerCtx {
  int index = 0;                     // global layer index
  LayerStrategy st;
  RankCoords co;
  LayerShape shape;
  Comm* tp = nullptr;
  Comm* ulysses = nullptr;
  Comm* kvrep = nullptr;             // tp ranks holding the same key/value heads (tp > kv heads)
  Comm* cp = nullptr;                // context-parallel ranks (ring attention)
  const ActivationLayout* layout = nullptr;
  int unit = 0;
  int chunk = 0;                     // model chunk (virtual stage group_stage(plan, stage, chunk))
  int64_t heads_local = 0, kv_local = 0, ffn_local = 0;
  // MoE layers: the experts' grid (rank_map.h): the expert-parallel and expert-tensor-parallel
  // groups, the unit of this rank's routed experts, and the first of them (global index).
  Comm* ep = nullptr;
  Comm* etp = nullptr;
  int expert_unit = -1;
  int expert0 = 0, experts_local = 0;
  int stats = -1;                    // index in Model::moe_stats()
};

// What a MoE layer's router did in a step, over the stage's tokens (every rank of the stage holds
// the same figures).
struct MoeLayerStats {
  int layer = 0;
  std::vector<int64_t> tokens;       // routed copies per expert, summed over the step's micro-batches
  double aux_loss = 0;               // the load-balancing loss (coefficient included), summed likewise
  int micro_batches = 0;
  // Token copies this rank's dispatches sent to ranks of other nodes (plan.cluster.gpus_per_node
  // ranks a node), over the step's micro-batches.
  int64_t inter_node_copies = 0;
  // With trace_routing(true): [global_batch, experts] copies each sample of the step routed to each
  // expert, from this rank's tokens.
  at::Tensor sample_counts;
  // Load imbalance: the busiest expert's tokens over the mean (1: perfectly balanced).
  double imbalance() const;
  // Between the ranks of an ep-way expert-parallel group (rank r holds experts [r E/ep, (r+1) E/ep)):
  // the busiest rank's copies over the mean, the figure the cost model takes as train.moe_imbalance.
  double rank_imbalance(int ep) const;
};

// Which rows of a micro-batch's tokens this rank reads: batch block / sequence block. The rows of
// batch block batch_idx in micro-batch k are Model::micro_batch_rows(k) (uneven with
// train.dp_shares, differing by micro-batch with train.dp_micro_batches); the sequence block is the
// sample positions `runs`, in order (under context parallelism two mirrored chunks, geometry.h
// seq_runs).
struct TokenBlock {
  int batch_parts = 1, batch_idx = 0, seq_parts = 1, seq_idx = 0;
  std::vector<SeqRun> runs;
};

class Model {
 public:
  // Builds this rank's units and initialises every parameter from (seed, parameter name), so any
  // plan starts from the same full model (generated on the CPU, then moved to `device`). All
  // process groups the model needs must be built.
  // `dtype`: of parameters, gradients and optimizer state; `compute`: of the weights the layers
  // compute with and of activations (Undefined: `dtype`). Mixed precision is dtype fp32 with compute
  // bf16 (Megatron's bf16 with fp32 main parameters and gradients): every forward casts the
  // weights, the gradients come back through the casts in fp32 and are reduced in fp32, the loss
  // is computed in fp32 from the logits.
  Model(const Plan& p, int rank, GroupSet& groups, uint64_t seed, at::Device device = at::kCPU,
        at::ScalarType dtype = at::kFloat, at::ScalarType compute = at::ScalarType::Undefined);
  // Where parameters, gradients, optimizer state and activations live.
  at::Device device() const { return device_; }
  // The dtype of activations (what flows between layers and stages).
  at::ScalarType compute_dtype() const { return compute_; }

  // Whether this rank's device group holds the first virtual stage (the embedding) / the last (the
  // head and loss). Under the interleaved and zb-v schedules a device group holds `chunks()` model
  // chunks, chunk c being virtual stage group_stage(plan, stage(), c) (stage() + c * pp, or zb-v's
  // V, whose last virtual stage is group 0's chunk 1); the head is always in the last chunk.
  bool first_stage() const { return stage_ == 0; }
  bool last_stage() const { return stage_ == head_group(plan_); }
  int stage() const { return stage_; }
  int chunks() const { return std::max(1, plan_.train.vp); }
  // Activation layout chunk c receives / sends between stages (the previous virtual stage's / its
  // own last layer).
  const ActivationLayout& input_layout(int chunk = 0) const;
  const ActivationLayout& output_layout(int chunk = 0) const;
  // Shape of the activation block chunk c receives from the previous virtual stage, micro-batch k.
  std::vector<int64_t> input_shape(int chunk = 0, int k = 0) const;
  TokenBlock token_block() const;
  // This rank's token rows of micro-batch k: the global-batch index of its first row and the rows
  // (none in the micro-batches its replica passes through: train.dp_micro_batches).
  std::pair<int64_t, int64_t> micro_batch_rows(int k) const;

  // Packed documents (docs/varlen.md): doc_ids [b, seq] numbers the document of every token of this
  // rank's samples over the whole sequence (equal ids, contiguous); attention then stays inside each
  // document and positions restart at each document's first token. An undefined tensor: one
  // document per sample. Set before a micro-batch's forward; single-stage plans only (a recomputed
  // layer reads them again in its backward).
  Status set_documents(const at::Tensor& doc_ids);
  // Variable-length steps (docs/varlen.md, "Running a step"): the sequence-parallel group this
  // rank's next micro-batch runs on, replacing the plan's Ulysses groups in every layer; its
  // samples' sequence is cut in group.size() blocks, block group.rank() here (with Megatron-SP
  // cut again over tp). nullptr: the plan's groups again. One-stage plans with Ulysses 1 and the
  // same tp and sp in every layer. Keep it until the micro-batch's backward has run (a recomputed
  // layer reads it again).
  Status set_sequence_group(Comm* group);
  // First stage: tokens [b, t] of this rank's token block -> hidden states in the input layout.
  at::Tensor embed(const at::Tensor& tokens);
  // The layers of model chunk c: from input_layout(c) to output_layout(c).
  at::Tensor forward_layers(at::Tensor x, int chunk = 0);
  // Last stage: the summed token losses of this rank's targets [b, t] (identical over tp); with
  // packed documents, targets < 0 (padding, a document's last token) count nothing.
  at::Tensor head_loss(const at::Tensor& x, const at::Tensor& targets);

  // The MoE layers of this rank's chunks (layer order), what their routers did since the last
  // reset (a recomputed forward is not counted twice).
  const std::vector<MoeLayerStats>& moe_stats() const { return moe_stats_; }
  void reset_moe_stats();
  // After a step's optimizer update, before reset_moe_stats(): every MoE layer with a balancing
  // bias (MoeSpec::expert_bias) moves it by bias_rate towards balance from the step's routed
  // copies per expert (Megatron-LM's get_updated_expert_bias, from the step's tokens of the whole
  // stage: every rank moves its copy alike).
  void update_expert_bias();
  // The weight of one micro-batch's load-balancing losses in the objective (the LM loss is the
  // mean over the step's tokens; the balancing loss the mean over its micro-batches, as Megatron
  // scales it): 1 / micro-batches of the step; set by the trainer, 1 / train.micro_batches at first.
  void set_moe_loss_scale(double s) { moe_loss_scale_ = s; }
  // Routing traces (weft train --moe-trace): record each sample's copies per expert
  // (MoeLayerStats::sample_counts, reset with the other figures).
  void trace_routing(bool on);
  // The samples the step's positions hold (a sample placement, weft/plan/routing_trace.h; nullptr:
  // position i holds sample i), for the trace.
  void set_sample_order(const std::vector<int>* samples) { sample_order_ = samples; }

  std::vector<Unit>& units() { return units_; }
  const Plan& plan() const { return plan_; }
  // Whether this rank's head losses are counted in the job's loss (one copy per token).
  bool counts_loss() const { return last_stage() && emb_co_.tp == 0; }
  int64_t local_param_count() const;

 private:
  // release: free the layer's gathered ZeRO-3 parameters after its forward (off inside a
  // recomputation, which gathers and uses them within one backward).
  at::Tensor layer_forward(const LayerCtx& L, const at::Tensor& x, bool release);
  at::Tensor attention(const LayerCtx& L, const std::vector<at::Tensor>& w, const at::Tensor& h);
  // A MoE layer's routed experts on the normalised hidden states hn (the layer's layout): router,
  // dispatch over the expert grid, experts, combine; returns the routed output in hn's layout.
  // release: as layer_forward's, for the experts' gathered ZeRO-3 parameters.
  at::Tensor routed_experts(const LayerCtx& L, const std::vector<at::Tensor>& w, const at::Tensor& hn, bool release);
  at::Tensor norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor* b) const;
  // MoE layer L's balancing bias in fp32 [E] (under ZeRO-3 put together from the shards: an
  // all-reduce of E values over the unit's ranks).
  at::Tensor expert_bias(const LayerCtx& L);
  Unit* find_unit(const std::string& name);
  // Strategy s's activation layout on device group `group` (its rows: train.stage_dp_shares).
  ActivationLayout group_layout(const LayerStrategy& s, int group) const;

  const Plan& plan_;
  at::Device device_;
  at::ScalarType dtype_, compute_;
  int rank_ = 0, stage_ = 0, S_ = 1;
  GroupSet& groups_;
  std::vector<Unit> units_;
  std::vector<LayerCtx> layers_;
  std::deque<ActivationLayout> layouts_;       // stable addresses (ops keep pointers)
  const ActivationLayout* emb_layout_ = nullptr;
  std::vector<const ActivationLayout*> prev_layouts_;  // per chunk: the previous virtual stage's
                                                      // output layout (nullptr: the first)
  RankCoords emb_co_;
  Comm* emb_tp_ = nullptr;
  Comm* stage_comm_ = nullptr;
  int64_t vocab_start_ = 0;
  // set_documents(): the document of every token [b, seq] and its position in it (undefined: none).
  at::Tensor doc_ids_, doc_pos_;
  Comm* seq_group_ = nullptr;  // set_sequence_group()
  std::vector<MoeLayerStats> moe_stats_;
  double moe_loss_scale_ = 1.0;
  bool trace_routing_ = false;
  const std::vector<int>* sample_order_ = nullptr;
};

}  // namespace weft::runtime
