// Plan geometry: the pure functions of a plan that say where every activation block, process group
// and parameter slice lives. The runtime builds its groups and buffers from them, the calibrated
// cost model prices layout changes with them, and the search keys its transitions on them; none of
// them needs torch, so each is tested here (tests/plan/geometry_test.cc) without a process group.
// Rank coordinates come from weft/plan/rank_map.h (tp fastest, then ulysses, cp, dp; pp outermost).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/plan/plan.h"
#include "weft/plan/rank_map.h"
#include "weft/plan/strategy.h"

namespace weft {

// ---- Activation layouts ----

// How a stage's activations [B, T, H] of one micro-batch are spread over its S ranks under a layer
// strategy: rank i holds batch block batch_idx[i] of batch_parts and sequence block seq_idx[i] of
// seq_parts; ranks with equal blocks hold identical copies (and identical gradients). The batch is
// split by dp, the sequence by cp, then ulysses and, with Megatron sequence parallelism, by tp (tp
// fastest). Context parallelism balances causal attention as Megatron-LM and torchtitan do: the
// sequence is cut into 2 cp chunks and cp rank c holds chunks c and 2 cp - 1 - c, so the sequence
// blocks are contiguous in that order (the "load-balanced order" of cp, seq_order below), not in
// the sample's: with cp > 1, block k of seq_parts holds positions seq_runs(T, cp, k * T /
// seq_parts, T / seq_parts) of the sample.
struct ActivationLayout {
  int batch_parts = 1, seq_parts = 1;
  int cp = 1;  // the load-balanced order the sequence blocks are cut from (1: the sample's order)
  std::vector<int> batch_idx, seq_idx;  // per stage rank
  // Samples of each batch block per micro-batch where a device group splits its micro-batches
  // its own way (train.stage_dp_shares: set by the runtime for the group that holds the layout);
  // empty: as train.dp_shares / dp_micro_batches say, or evenly.
  std::vector<int> rows;
  bool operator==(const ActivationLayout&) const = default;
  bool replicated() const { return batch_parts == 1 && seq_parts == 1; }
};
ActivationLayout layout_of(const LayerStrategy& s, int stage_size);

// Positions of a sample of T tokens as runs [start, start + len), in order.
struct SeqRun {
  int64_t start = 0, len = 0;
  bool operator==(const SeqRun&) const = default;
};
// The sample positions at places [begin, begin + len) of cp's load-balanced order (chunk c of 2 cp
// chunks, then chunk 2 cp - 1 - c, for c = 0 .. cp - 1), adjacent runs merged; cp 1 is the sample's
// order, one run. T must be a multiple of 2 cp when cp > 1 (runtime_supports checks it).
std::vector<SeqRun> seq_runs(int64_t T, int cp, int64_t begin, int64_t len);
// The positions stage rank `rank` holds under layout l, for samples of T tokens.
std::vector<SeqRun> block_runs(const ActivationLayout& l, int rank, int64_t T);

// The fields of a strategy that decide its layout: layout_of(s, S) depends on s only through
// layout_key(s), so strategies with equal keys exchange activations with a neighbour at equal cost
// (the search keys its transition and p2p tables on it).
struct LayoutKey {
  int tp = 1;
  bool sp = false;
  int ulysses = 1, cp = 1, dp = 1;
  bool operator==(const LayoutKey&) const = default;
};
LayoutKey layout_key(const LayerStrategy& s);
// A strategy with that key: ZeRO 0, no recompute, ep 1.
LayerStrategy representative(const LayoutKey& k);

// ---- Process groups ----

// The tensor-parallel ranks of `rank` that hold the same key/value heads when a layer has fewer
// kv heads than tp (each head then lives on tp / kv_heads ranks; their gradients are summed over
// this group); {rank} when kv_heads is a multiple of tp.
std::vector<int> kv_replica_group(int rank, int stage_size, int pp, const LayerStrategy& s, int kv_heads);

// Every process group some rank needs to run the plan, each sorted, in a fixed order that every
// rank computes alike (groups repeat; the runtime builds each distinct one once): the world; per
// stage the stage, and for every layer and the embedding / head of the first and last stage, each
// rank's tp, ulysses, cp, shard (gradient sums and ZeRO shards) and, for layers, kv-replica groups
// and, for MoE layers, the expert grid's ep, etp and expert data-parallel groups;
// then the pairs of ranks holding the two copies of an embedding tied across pipeline stages.
std::vector<std::vector<int>> process_groups(const Plan& p);

// The groups of the runtime's gradient channel: the shard group of every unit with ZeRO < 3 (a MoE
// layer's experts: the expert data-parallel group; whose
// gradients are reduced in buckets while backward runs), per rank, in the order of process_groups.
std::vector<std::vector<int>> grad_groups(const Plan& p);

// ---- Parameter units ----

// One parameter as one rank holds it: a slice [shard_start, shard_start + shard_len) along
// shard_dim of the full tensor (shard_dim -1: the whole tensor, replicated over tp).
struct ParamSpec {
  std::string name;                  // e.g. "layers.3.attn.wq"
  std::vector<int64_t> full_shape;
  std::vector<int64_t> local_shape;
  int shard_dim = -1;
  int64_t shard_start = 0, shard_len = 0;
  bool decay = false;                // AdamW weight decay applies (matrices and embeddings)
  bool counted = true;               // this rank's copy counts in the global gradient norm and is
                                     // the one written to consolidated files (one copy per element)
  double init_std = 0;               // > 0: normal(0, init_std); 0: zeros; < 0: ones
  int64_t offset = 0;                // in the unit's flat buffer
  int64_t numel() const;
};

// A group of parameters sharing one strategy (and so one gradient-sum group and ZeRO stage).
struct UnitSpec {
  std::string name;                  // "wte", "wpe", "layers.3", "layers.3.experts" (a MoE layer's
                                     // routed experts: this rank's experts, synced over the expert
                                     // data-parallel group), "head", "wte_copy"
  std::vector<ParamSpec> params;
  int zero = 0;
  std::vector<int> sync_ranks;       // the shard group (dp x ulysses x cp): sums gradients, shards ZeRO state
  std::vector<int> tied_ranks;       // non-empty for "wte" / "wte_copy" when the table is tied across stages
  int64_t numel = 0;                 // sum of params
  int64_t padded = 0;                // numel rounded up to a multiple of the sync group size
  int chunk = 0;                     // model chunk (interleaved schedule: virtual stage g + chunk * pp
                                     // of device group g); the embedding's units sit with the first
                                     // chunk, the head's with the last
};

// The units rank `rank` holds under the plan, in forward order (chunk by chunk under the interleaved
// schedule), without allocating anything (every
// rank can compute every other rank's units; consolidating a checkpoint uses that). Initialisation
// scales are GPT-2 / Megatron's: normal(0, 0.02), output projections 0.02 / sqrt(2 L), the learned
// position table 0.01, norms ones, biases zeros.
std::vector<UnitSpec> unit_specs(const Plan& p, int rank);

// Every parameter tensor of the plan's model once, in model order, as the first rank of its stage
// that holds it (one slice of each: callers read name and full_shape); a MoE layer's routed
// experts in ascending order after the layer's other parameters.
std::vector<ParamSpec> model_params(const Plan& p);

}  // namespace weft
