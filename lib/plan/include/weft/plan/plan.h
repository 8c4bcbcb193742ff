// Plan: the versioned contract between the planner and the runtime (docs/plan-format.md).
// A plain value type; to_json / plan_from_json are exact inverses (round-trip tested).
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/plan/strategy.h"
#include "weft/spec/cluster.h"
#include "weft/spec/mixed.h"
#include "weft/spec/model.h"

namespace weft {

inline constexpr int kPlanFormatVersion = 1;

// The precision of the optimizer's states where it is not fp32: Megatron-LM's precision-aware
// optimizer (--use-precision-aware-optimizer with --exp-avg-dtype, --exp-avg-sq-dtype,
// --main-grads-dtype; NVIDIA's MoE performance recipes keep both Adam moments in bf16). The master
// parameters stay fp32. JSON "optimizer": {"exp_avg", "exp_avg_sq", "main_grads"}, absent when
// all are fp32.
struct OptimizerPrecision {
  DType exp_avg = DType::kFp32;      // Adam's first moment: fp32, bf16, fp16 or fp8
  DType exp_avg_sq = DType::kFp32;   // Adam's second moment: fp32, bf16, fp16 or fp8
  DType main_grads = DType::kFp32;   // the gradients accumulated and reduced: fp32 or bf16
  bool precision_aware() const { return exp_avg != DType::kFp32 || exp_avg_sq != DType::kFp32 || main_grads != DType::kFp32; }
  bool operator==(const OptimizerPrecision&) const = default;
};

// Global training settings.
struct TrainSettings {
  int seq = 0;                 // sequence length (tokens per sample)
  int global_batch = 0;        // samples per optimizer step
  int micro_batches = 1;       // m: micro-batches per step through the pipeline
  int pp = 1;                  // pipeline degree (device groups)
  int vp = 1;                  // virtual stages (model chunks) per device group: interleaved, or 2 (zb-v)
  Schedule schedule = Schedule::k1F1B;
  DType dtype = DType::kBf16;  // compute dtype; fp32 master weights and Adam states
  // Variable-length steps (docs/varlen.md; JSON "varlen": {"min_group", "max_group"}, absent when
  // off): global_batch counts documents of at most seq tokens, and each step's micro-batches and
  // sequence-parallel groups (min_group to max_group ranks of the layers' tp each; max 0: as many
  // as the heads allow) come from the batch planner, so the batch need not divide by dp.
  bool varlen = false;
  int min_group = 1, max_group = 0;
  // Uneven data parallelism (slower or smaller devices take fewer samples; JSON "dp_shares", absent
  // when even): the samples of a micro-batch each data-parallel replica takes, in replica order;
  // they sum to pipeline_micro_batch(), and every layer and the embedding then share one dp and
  // one activation layout. Empty: pipeline_micro_batch() / dp each.
  std::vector<int> dp_shares;
  // Micro-batches per data-parallel replica (JSON "dp_micro_batches", absent when every replica runs
  // all micro_batches; needs dp_shares): replica j computes its first dp_micro_batches[j]
  // micro-batches, dp_shares[j] samples each, and passes through the others with none, so a slower
  // replica takes fewer micro-batches of its size rather than smaller ones (the granularity a
  // replica of one sample per micro-batch lacks). micro_batches is the largest count, and the
  // shares times the counts sum to global_batch.
  std::vector<int> dp_micro_batches;
  // Data-parallel shares per pipeline device group (JSON "stage_dp_shares", absent when every group
  // splits a micro-batch alike; instead of dp_shares, never with dp_micro_batches; pp > 1): list g
  // is the samples of each micro-batch that replica j of device group g takes (stage g of a 1F1B
  // pipeline), summing to pipeline_micro_batch(), so a group mixing fast and slow devices splits
  // its micro-batches by their speed while the next group splits them by its own (Metis's
  // intra-stage data split). The activations are re-split between groups (the receiving group
  // exchanges rows among its ranks); every layer and the embedding share one dp and one layout.
  std::vector<std::vector<int>> stage_dp_shares;
  // Separate pipeline schedules per step (JSON "rounds", absent when 1): the m micro-batches run as
  // `rounds` schedules of m / rounds each, gradients accumulated over them, each filling and
  // draining the pipeline (torchtitan with local_batch_size below global_batch_size / dp under
  // pipeline parallelism: gradient accumulation steps, each a pipeline schedule's step()).
  int rounds = 1;
  // The optimizer states' precision where not fp32 (mixed precision only; JSON "optimizer").
  OptimizerPrecision optimizer;
  // MoE load imbalance between expert-parallel ranks (JSON "moe_imbalance", absent when 1): the
  // routed copies the busiest of a layer's ep ranks receives over the mean, which sets the pace of
  // its experts and of the all-to-all (capped at the layer's ep: every copy on one rank). 1 is even
  // routing (Megatron-LM's --moe-router-force-load-balancing, as NVIDIA's performance recipes run);
  // `weft train` reports each layer's measured figure (its step JSON's moe[].rank_imbalance).
  double moe_imbalance = 1.0;
  // MoE token dispatch (JSON "moe_dispatcher", absent when "alltoall"): Megatron-LM's all-to-all
  // dispatcher, or a node-deduplicating flex dispatcher (DeepEP, HybridEP) whose inter-node traffic
  // is a token per remote node holding any of its experts (docs/cost-model.md §3.4).
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // Expert-parallel communication overlapped across micro-batches (JSON "moe_a2a_overlap", absent
  // when false): Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm) runs the
  // forward of one micro-batch and the backward of another as one schedule, each's dispatch and
  // combine behind the other's compute. Megatron-LM needs interleaving (vp > 1) with pp > 1.
  bool moe_a2a_overlap = false;
  // Whether this pipeline pairs micro-batches for moe_a2a_overlap: one stage, or interleaved.
  bool pairs_micro_batches() const { return pp == 1 || vp > 1; }
  // Samples per micro-batch across the whole stage: global_batch / micro_batches. A layer with
  // data-parallel degree d processes pipeline_micro_batch() / d samples per device. With
  // dp_micro_batches a micro-batch's samples differ by micro-batch: micro_batch_rows().
  int pipeline_micro_batch() const { return micro_batches > 0 ? global_batch / micro_batches : 0; }
  // The busiest rank's routed copies over the mean in an ep-way expert-parallel layer: moe_imbalance,
  // at most ep (1 at ep 1: one rank holds every expert).
  double busiest_expert_rank(int ep) const { return ep > 1 ? std::min(moe_imbalance, static_cast<double>(ep)) : 1.0; }
  // Micro-batches one pipeline schedule runs: m / rounds.
  int schedule_micro_batches() const { return rounds > 1 ? micro_batches / rounds : micro_batches; }
  // Samples replica j of `replicas` takes in micro-batch k on device group `group` (shares, stage
  // shares and counts as above; even: pipeline_micro_batch() / replicas).
  int replica_rows(int replicas, int j, int k, int group = 0) const;
  // Samples of micro-batch k over all replicas, and the global-batch index of its first sample
  // (micro-batches are consecutive runs of the global batch, replica after replica).
  int micro_batch_rows(int replicas, int k) const;
  int micro_batch_offset(int replicas, int k) const;
  // Samples replica j of device group `group` computes per step: its rows summed over the
  // micro-batches.
  int replica_samples(int replicas, int j, int group = 0) const;
  bool operator==(const TrainSettings&) const = default;
};

// The data-parallel shares as people read them, "5:1:5:5" ("5:1:5:5 x 4:2:4:4 micro-batches" with
// dp_micro_batches; "2:2:6:6 | 4:4:4:4" per device group with stage_dp_shares); "" when they are
// even (no dp_shares).
std::string shares_label(const TrainSettings& t);

// Predicted figures written by the planner; the runtime ignores them.
struct StagePrediction {
  double time_s = 0;           // busy time of this stage in one step (forward+backward of m micro-batches)
  double memory_gib = 0;       // peak memory per device
  double weights_gib = 0, grads_gib = 0, optimizer_gib = 0, activations_gib = 0, other_gib = 0;
  bool operator==(const StagePrediction&) const = default;
};

struct Prediction {
  double step_time_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;              // model FLOPs utilisation, 0..1 (weft/cost/estimate.h)
  double hfu = 0;              // hardware FLOPs utilisation (with recompute), 0..1
  double peak_memory_gib = 0;
  std::string cost_model;      // "weft" or "galvatron"
  std::string source;          // which figures were used: "analytic, <framework>" (weft's model and the
                               // framework traits), "measured", "mixed", ...
  bool operator==(const Prediction&) const = default;
};

// A pipeline stage: a contiguous run of layers on one device group. With vp > 1 there are pp*vp
// (virtual) stages and stage s runs on device group stage_group(plan, s): s % pp (interleaved), or
// zb-v's V (s before the turn, 2 pp - 1 - s after it).
struct Stage {
  int first_layer = 0;         // global layer index
  std::vector<LayerStrategy> layers;  // one per layer, in order
  StagePrediction predicted;
  int num_layers() const { return static_cast<int>(layers.size()); }
  bool operator==(const Stage&) const = default;
};

// The devices of a plan for a mixed or straggling cluster (JSON "devices", absent otherwise):
// the node groups in the plan's rank order (rank r runs on the r-th GPU of `cluster`, with its
// slowdown) and, per rank, the index of that GPU in the cluster as the user gave it (the search may
// order the groups differently). The runtime runs any placement; `weft launch` and the user's
// launcher give rank r the GPU gpu_of_rank[r]. Plan::cluster is then cluster.as_uniform().
struct PlanDevices {
  MixedCluster cluster;
  std::vector<int> gpu_of_rank;
  bool operator==(const PlanDevices&) const = default;
};

struct Plan {
  int format_version = kPlanFormatVersion;
  ModelSpec model;
  ClusterSpec cluster;
  std::optional<PlanDevices> devices;
  TrainSettings train;
  // Embedding, LM head and loss: tp (vocab parallel), dp, zero; on the first and last stage.
  LayerStrategy embedding;
  std::vector<Stage> stages;
  Prediction predicted;
  bool operator==(const Plan&) const = default;

  int world_size() const { return cluster.total_gpus(); }
  int devices_per_stage() const { return train.pp > 0 ? world_size() / train.pp : 0; }
  // The strategy of global layer i.
  const LayerStrategy& layer_strategy(int i) const;
  // The one strategy every layer runs (Megatron-style, exportable to Megatron/DeepSpeed), if there
  // is one. A uniform plan puts expert parallelism on the MoE layers only: dense layers keep ep = 1
  // beside them, and the result carries the MoE layers' expert degree.
  std::optional<LayerStrategy> uniform_strategy() const;
  bool uniform() const { return uniform_strategy().has_value(); }
};

Json to_json(const Plan& p);
Result<Plan> plan_from_json(const Json& j, const std::string& path = "plan");
Result<Plan> read_plan_file(const std::string& path);
Status write_plan_file(const std::string& path, const Plan& p);

// Validates a plan against its own model and cluster without searching: layer coverage, degrees
// that multiply to the stage size and divide heads / kv-heads / hidden / ffn / experts / batch,
// pipeline and schedule constraints. Every message names the field and the numbers.
Status validate(const Plan& p);

// The MoE load-imbalance factor (train.moe_imbalance, --moe-imbalance) against its model: finite,
// at least 1, and other than 1 only for a model with MoE layers. `field` starts each message.
Status check_moe_imbalance(double factor, const ModelSpec& model, const std::string& field);

// The MoE dispatch settings (train.moe_dispatcher and train.moe_a2a_overlap, or their flags) against
// the model: other than Megatron-LM's all-to-all, and the overlap, only for a model with MoE layers.
// `dispatcher_field` and `overlap_field` start the messages.
Status check_moe_dispatch(MoeDispatcher dispatcher, bool overlap, const ModelSpec& model,
                          const std::string& dispatcher_field, const std::string& overlap_field);

// The device group (0..pp-1) that holds (virtual) stage s under the schedule of `t`: s % pp, or
// under zb-v s before the turn and 2 pp - 1 - s after it (stage_device_group(),
// weft/plan/pipeline_order.h). The one place a stage is mapped to its devices.
int stage_group(const TrainSettings& t, int s);
inline int stage_group(const Plan& p, int s) { return stage_group(p.train, s); }
// Its inverse: the (virtual) stage that model chunk c (0..vp-1) of device group g runs, g + c pp or
// zb-v's V (virtual_stage(), weft/plan/pipeline_order.h).
int group_stage(const TrainSettings& t, int g, int c);
inline int group_stage(const Plan& p, int g, int c) { return group_stage(p.train, g, c); }
// The device group of the last (virtual) stage, which holds the head and the loss: pp - 1, or 0
// under zb-v (whose V ends where it began).
inline int head_group(const Plan& p) { return stage_group(p, static_cast<int>(p.stages.size()) - 1); }

}  // namespace weft
