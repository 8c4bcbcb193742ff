// Every parallel mode against a single-process run of the same model, batch and seed: 5 steps of
// AdamW must give losses within 1e-5 relative and final parameters within 1e-5 absolute.
#include <algorithm>

#include "parity_util.h"

namespace weft::rttest {
namespace {

TEST(RuntimeParity, DataParallel2) { expect_parity(uniform(tiny_gpt(), 2, 1, strat(1, 2)), "dp2"); }

// Uneven data-parallel shares (train.dp_shares): each replica takes its share of every micro-batch,
// and the loss divided by the global batch's tokens makes the summed gradient the one-process one.
Plan with_shares(Plan p, std::vector<int> shares) {
  p.train.dp_shares = std::move(shares);
  return p;
}
TEST(RuntimeParity, UnevenSharesDp2) {
  expect_parity(with_shares(uniform(tiny_gpt(), 2, 1, strat(1, 2)), {3, 1}), "shares_dp2");
}
TEST(RuntimeParity, UnevenSharesZero3Dp4) {
  expect_parity(with_shares(uniform(tiny_llama(), 4, 1, strat(1, 4, 1, false, 3), {}, Schedule::k1F1B, 16, 2),
                            {1, 2, 4, 1}),
                "shares_zero3_dp4");
}
TEST(RuntimeParity, UnevenSharesTp2SpDp2) {
  expect_parity(with_shares(uniform(tiny_gpt(), 4, 1, strat(2, 2, 1, true)), {3, 1}), "shares_tp2_dp2");
}
TEST(RuntimeParity, UnevenSharesPipeline2Dp2) {
  expect_parity(with_shares(uniform(tiny_gpt(), 4, 2, strat(1, 2, 1, false, 1)), {1, 3}), "shares_pp2_dp2");
}

// A replica with share 0 is suspended: it holds its parameters, runs its forward and backward on
// no rows (so its gradient hooks fire with zeros), joins every reduction and steps its optimizer.
TEST(RuntimeParity, SuspendedReplicaDp2) {
  expect_parity(with_shares(uniform(tiny_gpt(), 2, 1, strat(1, 2)), {4, 0}), "suspended_dp2");
}
TEST(RuntimeParity, SuspendedReplicaZero3Dp4) {
  expect_parity(with_shares(uniform(tiny_llama(), 4, 1, strat(1, 4, 1, false, 3), {}, Schedule::k1F1B, 16, 2),
                            {3, 0, 4, 1}),
                "suspended_zero3_dp4");
}
TEST(RuntimeParity, SuspendedReplicaTp2SpDp2) {
  expect_parity(with_shares(uniform(tiny_gpt(), 4, 1, strat(2, 2, 1, true)), {0, 4}), "suspended_tp2_dp2");
}
TEST(RuntimeParity, SuspendedReplicaUlysses2Dp2) {
  expect_parity(with_shares(uniform(tiny_llama(), 4, 1, strat(1, 2, 2)), {0, 4}), "suspended_ulysses2_dp2");
}
TEST(RuntimeParity, SuspendedReplicaPipeline2Dp2Zero1) {
  expect_parity(with_shares(uniform(tiny_gpt(), 4, 2, strat(1, 2, 1, false, 1)), {4, 0}), "suspended_pp2_dp2");
}

// Micro-batches per replica (train.dp_micro_batches): replica j computes its first counts[j]
// micro-batches of shares[j] samples and passes the rest through with none, every replica running
// the plan's micro_batches (the largest count) through the schedule, so every mode's collectives
// stay matched. The global batch (shares x counts) need not divide by the micro-batches.
Plan with_counts(Plan p, std::vector<int> shares, std::vector<int> counts) {
  p.train.dp_shares = std::move(shares);
  p.train.micro_batches = *std::max_element(counts.begin(), counts.end());
  p.train.dp_micro_batches = std::move(counts);
  return p;
}
TEST(RuntimeParity, MicroBatchCountsDp2) {
  expect_parity(with_counts(uniform(tiny_gpt(), 2, 1, strat(1, 2)), {2, 2}, {3, 1}), "counts_dp2");
}
TEST(RuntimeParity, MicroBatchCountsZero3Dp4) {
  expect_parity(with_counts(uniform(tiny_llama(), 4, 1, strat(1, 4, 1, false, 3), {}, Schedule::k1F1B, 16, 2),
                            {1, 1, 1, 1}, {6, 2, 5, 3}),
                "counts_zero3_dp4");
}
TEST(RuntimeParity, MicroBatchCountsTp2SpDp2) {
  expect_parity(with_counts(uniform(tiny_gpt(), 4, 1, strat(2, 2, 1, true)), {1, 1}, {5, 3}), "counts_tp2_dp2");
}
TEST(RuntimeParity, MicroBatchCountsPipeline2Dp2Zero1) {
  expect_parity(with_counts(uniform(tiny_gpt(), 4, 2, strat(1, 2, 1, false, 1)), {2, 2}, {3, 1}), "counts_pp2_dp2");
}
TEST(RuntimeParity, MicroBatchCountsZeroBubblePipeline2Dp2) {
  expect_parity(with_counts(uniform(tiny_llama(), 4, 2, strat(1, 2), {}, Schedule::kZbH1), {2, 2}, {1, 3}),
                "counts_zbh1_pp2_dp2");
}

// Shares per pipeline device group (train.stage_dp_shares): each group splits a micro-batch its own
// way, and the receiving group re-splits the activations (and their gradients, backwards) among its
// ranks by an all-to-all, so a replica of one group feeds parts of several of the next.
Plan with_stage_shares(Plan p, std::vector<std::vector<int>> shares) {
  p.train.stage_dp_shares = std::move(shares);
  return p;
}
TEST(RuntimeParity, StageSharesPipeline2Dp2) {
  expect_parity(with_stage_shares(uniform(tiny_gpt(), 4, 2, strat(1, 2)), {{3, 1}, {1, 3}}), "stage_shares_pp2_dp2");
}
TEST(RuntimeParity, StageSharesSuspendedZeroBubblePipeline2Dp2Zero1) {
  expect_parity(with_stage_shares(uniform(tiny_llama(), 4, 2, strat(1, 2, 1, false, 1), {}, Schedule::kZbH1),
                                  {{4, 0}, {1, 3}}),
                "stage_shares_zbh1_pp2_dp2");
}
TEST(RuntimeParity, StageSharesInterleavedPipeline2Dp2) {
  expect_parity(with_stage_shares(uniform(tiny_gpt(), 4, 2, strat(1, 2), {1, 1, 1, 1}, Schedule::kInterleaved, 8, 2),
                                  {{1, 3}, {3, 1}}),
                "stage_shares_pp2_vp2_dp2");
}

TEST(RuntimeParity, Zero1Dp2) { expect_parity(uniform(tiny_gpt(), 2, 1, strat(1, 2, 1, false, 1)), "zero1"); }
TEST(RuntimeParity, Zero2Dp2) { expect_parity(uniform(tiny_gpt(), 2, 1, strat(1, 2, 1, false, 2)), "zero2"); }
TEST(RuntimeParity, Zero3Dp2) { expect_parity(uniform(tiny_llama(), 2, 1, strat(1, 2, 1, false, 3)), "zero3"); }

// Buckets of at most 1 KiB (256 floats): most parameters are a bucket of their own, the small ones
// share one, and ZeRO buckets straddle shard boundaries (uneven reduce-scatter pieces, some empty).
constexpr const char* kSmallBuckets = " --bucket-mb 0.0009765625";
TEST(RuntimeParity, DataParallel2SmallBuckets) {
  expect_parity(uniform(tiny_gpt(), 2, 1, strat(1, 2)), "dp2_buckets", kSmallBuckets);
}
TEST(RuntimeParity, Zero1Dp2SmallBuckets) {
  expect_parity(uniform(tiny_llama(), 2, 1, strat(1, 2, 1, false, 1)), "zero1_buckets", kSmallBuckets);
}
TEST(RuntimeParity, Zero2Dp2SmallBuckets) {
  expect_parity(uniform(tiny_gpt(), 2, 1, strat(1, 2, 1, false, 2)), "zero2_buckets", kSmallBuckets);
}
// The same buckets reduced after backward instead of during it.
TEST(RuntimeParity, Zero2Dp2SmallBucketsNoOverlap) {
  expect_parity(uniform(tiny_gpt(), 2, 1, strat(1, 2, 1, false, 2)), "zero2_no_overlap",
                std::string(kSmallBuckets) + " --grad-overlap off");
}

TEST(RuntimeParity, TensorParallel2) { expect_parity(uniform(tiny_llama(), 2, 1, strat(2, 1)), "tp2"); }
TEST(RuntimeParity, TensorParallel2SequenceParallel) {
  expect_parity(uniform(tiny_gpt(), 2, 1, strat(2, 1, 1, true)), "tp2sp");
}
// One key/value head and tp 2: the head is replicated on both tp ranks and its gradient summed.
TEST(RuntimeParity, TensorParallel2ReplicatedKvHead) {
  expect_parity(uniform(tiny_llama(4, 1), 2, 1, strat(2, 1)), "tp2mqa");
}
// Qwen3's per-head query / key norms (one weight vector for all heads) under tp 2 with sequence
// parallelism and a kv head on both ranks, and under Ulysses 2 with ZeRO-3: the norms' gradients are
// summed over the tp ranks' heads and kv copies, reduced over the sequence shards. The Ulysses run
// takes AdamW's epsilon at 1e-5 (as the MoE tests, moe_test.cc, say why): a normalised query is
// blind to its scale, so some elements of wq get gradients that cancel to about 1e-8, where a step
// of lr * g / (|g| + 1e-8) turns rounding into 3.5e-5 of one element after five steps (losses
// within 1e-7 all the while); at 1e-5 every parameter is within 1.5e-7.
ModelSpec qk_norm_llama(int kv_heads) {
  ModelSpec m = tiny_llama(4, kv_heads);
  m.groups[0].shape.qk_norm = true;
  return m;
}
TEST(RuntimeParity, TensorParallel2SpQueryKeyNormsReplicatedKvHead) {
  expect_parity(uniform(qk_norm_llama(1), 2, 1, strat(2, 1, 1, true)), "tp2sp_qknorm_mqa");
}
TEST(RuntimeParity, Ulysses2Zero3QueryKeyNorms) {
  expect_parity(uniform(qk_norm_llama(2), 4, 1, strat(1, 2, 2, false, 3)), "ulysses2_zero3_qknorm", "", " --eps 1e-5");
}
// GPT-OSS's attention: a band of 5 keys and a learned sink logit per head, its gradient through the
// recomputed attention core; the sinks split by heads over tp, and of those by Ulysses rank.
ModelSpec banded_sink_llama() {
  ModelSpec m = tiny_llama(4, 2);
  m.groups[0].shape.window = 5;
  m.groups[0].shape.sinks = true;
  return m;
}
TEST(RuntimeParity, TensorParallel2SpWindowAndSinksSelectiveRecompute) {
  LayerStrategy s = strat(2, 1, 1, true);
  s.recompute = Recompute::kSelective;
  expect_parity(uniform(banded_sink_llama(), 2, 1, s), "tp2sp_window_sinks");
}
TEST(RuntimeParity, Ulysses2WindowAndSinks) {
  expect_parity(uniform(banded_sink_llama(), 4, 1, strat(1, 2, 2)), "ulysses2_window_sinks");
}

// OLMoE's norms over all heads' queries and keys: each tp rank holds its heads' part of the
// weights, and the squares are summed over tp in forward and backward.
TEST(RuntimeParity, TensorParallel2SpQueryKeyNormsOverAllHeads) {
  ModelSpec m = qk_norm_llama(2);
  m.groups[0].shape.qk_norm_full = true;
  expect_parity(uniform(m, 2, 1, strat(2, 1, 1, true)), "tp2sp_qknorm_full");
}
TEST(RuntimeParity, TensorParallel2ReplicatedKvHeadWithBiases) {
  ModelSpec m = tiny_gpt();
  m.groups[0].shape.kv_heads = 1;  // K/V weights and biases summed over the pair in one all-reduce
  expect_parity(uniform(m, 2, 1, strat(2, 1, 1, true)), "tp2mqa_bias");
}
TEST(RuntimeParity, Ulysses2CopiesOneKvHeadTwice) {
  // 4 query heads, 1 kv head, ulysses 2: each rank receives one copy of the kv head.
  expect_parity(uniform(tiny_llama(4, 1), 2, 1, strat(1, 1, 2)), "ulysses2mqa");
}
TEST(RuntimeParity, Ulysses2) { expect_parity(uniform(tiny_llama(), 2, 1, strat(1, 1, 2)), "ulysses2"); }
TEST(RuntimeParity, Ulysses2GptLearnedPositions) {
  expect_parity(uniform(tiny_gpt(), 2, 1, strat(1, 1, 2)), "ulysses2gpt");
}

TEST(RuntimeParity, Pipeline2OneFOneBUneven) {
  expect_parity(uniform(tiny_gpt(), 2, 2, strat(1, 1), {3, 1}, Schedule::k1F1B, 8, 4), "pp2_1f1b");
}
TEST(RuntimeParity, Pipeline2GpipeUneven) {
  expect_parity(uniform(tiny_llama(), 2, 2, strat(1, 1), {1, 3}, Schedule::kGpipe, 8, 4), "pp2_gpipe");
}

// Interleaved 1F1B: two model chunks per device group (virtual stages g and g + 2), transfers
// round the ring of groups.
TEST(RuntimeParity, Pipeline2Interleaved2) {
  expect_parity(uniform(tiny_gpt(), 2, 2, strat(1, 1), {1, 1, 1, 1}, Schedule::kInterleaved, 8, 4), "pp2_vp2");
}

// Three chunks of uneven sizes, 8 micro-batches (two rounds of the schedule's groups of pp).
TEST(RuntimeParity, Pipeline2Interleaved3Uneven) {
  expect_parity(uniform(tiny_llama(7), 2, 2, strat(1, 1), {2, 1, 1, 1, 1, 1}, Schedule::kInterleaved, 8, 8),
                "pp2_vp3");
}
// With data parallelism: ZeRO-1 reduces each chunk's buckets during that chunk's last backward;
// ZeRO-2 each chunk's on every backward of it (1 KiB buckets).
TEST(RuntimeParity, Pipeline2Interleaved2Zero1Dp2SmallBuckets) {
  expect_parity(uniform(tiny_gpt(), 4, 2, strat(1, 2, 1, false, 1), {1, 1, 1, 1}, Schedule::kInterleaved, 8, 4),
                "pp2_vp2_zero1", kSmallBuckets);
}
TEST(RuntimeParity, Pipeline2Interleaved2Zero2Dp2SmallBuckets) {
  expect_parity(uniform(tiny_llama(), 4, 2, strat(1, 2, 1, false, 2), {1, 1, 1, 1}, Schedule::kInterleaved, 8, 4),
                "pp2_vp2_zero2", kSmallBuckets);
}
TEST(RuntimeParity, Pipeline2Interleaved2Zero3Dp2) {
  expect_parity(uniform(tiny_gpt(), 4, 2, strat(1, 2, 1, false, 3), {1, 1, 1, 1}, Schedule::kInterleaved, 8, 4),
                "pp2_vp2_zero3");
}
TEST(RuntimeParity, Pipeline2Interleaved2Tp2SpRecomputeFull) {
  expect_parity(
      uniform(tiny_llama(), 4, 2, strat(2, 1, 1, true, 0, Recompute::kFull), {1, 1, 1, 1}, Schedule::kInterleaved, 8, 4),
      "pp2_vp2_tp2sp_rc");
}
// Chunks whose layers differ: virtual stage 1 runs tp 2, the others dp 2 (re-distributed).
TEST(RuntimeParity, Pipeline2Interleaved2MixedLayouts) {
  const LayerStrategy tp = strat(2, 1), dp = strat(1, 2);
  expect_parity(make_plan(tiny_gpt(), 4, 2, Schedule::kInterleaved, dp, {{dp}, {tp}, {dp}, {dp}}, 8, 4),
                "pp2_vp2_mixed");
}

// ZB-H1: each backward split into the input-gradient pass and the weight-gradient pass, the latter
// postponed (weft/runtime/schedule.h); the weights' gradients must be those of one process.
TEST(RuntimeParity, Pipeline2ZeroBubbleH1Uneven) {
  expect_parity(uniform(tiny_gpt(), 2, 2, strat(1, 1), {3, 1}, Schedule::kZbH1, 8, 4), "pp2_zbh1");
}
TEST(RuntimeParity, Pipeline4ZeroBubbleH1) {
  expect_parity(uniform(tiny_llama(), 4, 4, strat(1, 1), {1, 1, 1, 1}, Schedule::kZbH1, 8, 8), "pp4_zbh1");
}
// ZeRO-2 reduces each micro-batch's gradients in its weight-gradient pass; small buckets.
TEST(RuntimeParity, Pipeline2ZeroBubbleH1Zero2Dp2SmallBuckets) {
  expect_parity(uniform(tiny_gpt(), 4, 2, strat(1, 2, 1, false, 2), {}, Schedule::kZbH1, 8, 4), "pp2_zbh1_zero2",
                kSmallBuckets);
}
// ZeRO-3: the gathered weights' views lead to one gather whose backward reduce-scatters in W.
TEST(RuntimeParity, Pipeline2ZeroBubbleH1Zero3Dp2) {
  expect_parity(uniform(tiny_llama(), 4, 2, strat(1, 2, 1, false, 3), {}, Schedule::kZbH1, 8, 4), "pp2_zbh1_zero3");
}
// Tensor parallel with SP (replicated norm weights summed over the pair in W) and full recompute
// (the recomputed layer's inner graph split too).
TEST(RuntimeParity, Pipeline2ZeroBubbleH1Tp2SpRecomputeFull) {
  expect_parity(uniform(tiny_gpt(), 4, 2, strat(2, 1, 1, true, 0, Recompute::kFull), {}, Schedule::kZbH1, 8, 4),
                "pp2_zbh1_tp2sp_rc");
}
TEST(RuntimeParity, Pipeline2ZeroBubbleH1Ulysses2RecomputeSelective) {
  expect_parity(uniform(tiny_llama(), 4, 2, strat(1, 1, 2, false, 0, Recompute::kSelective), {}, Schedule::kZbH1, 8, 4),
                "pp2_zbh1_uly2_rc");
}

// ZB-V: two model chunks per device group in a V (group g runs virtual stages g and 2 pp - 1 - g),
// split backwards as under zb-h1. Group 0 holds the embedding and the head (GPT-2's tied table is
// used by both its chunks, its gradient reduced once); the last group hands its chunk 0's output
// to its chunk 1 in memory.
TEST(RuntimeParity, Pipeline2ZeroBubbleV) {
  expect_parity(uniform(tiny_gpt(), 2, 2, strat(1, 1), {1, 1, 1, 1}, Schedule::kZbV, 8, 4), "pp2_zbv");
}
// Four groups, uneven chunks, fewer micro-batches than the V's 2 pp - 1 warm-up (its slots past m
// are skipped).
TEST(RuntimeParity, Pipeline4ZeroBubbleVUnevenFewMicroBatches) {
  expect_parity(uniform(tiny_llama(10), 4, 4, strat(1, 1), {2, 1, 1, 1, 1, 1, 1, 2}, Schedule::kZbV, 8, 4),
                "pp4_zbv");
}
TEST(RuntimeParity, Pipeline2ZeroBubbleVZero2Dp2SmallBuckets) {
  expect_parity(uniform(tiny_gpt(), 4, 2, strat(1, 2, 1, false, 2), {1, 1, 1, 1}, Schedule::kZbV, 8, 2),
                "pp2_zbv_zero2", kSmallBuckets);
}
TEST(RuntimeParity, Pipeline2ZeroBubbleVZero3Dp2) {
  expect_parity(uniform(tiny_gpt(), 4, 2, strat(1, 2, 1, false, 3), {1, 1, 1, 1}, Schedule::kZbV, 8, 4),
                "pp2_zbv_zero3");
}
TEST(RuntimeParity, Pipeline2ZeroBubbleVTp2SpRecomputeFull) {
  expect_parity(
      uniform(tiny_llama(), 4, 2, strat(2, 1, 1, true, 0, Recompute::kFull), {1, 1, 1, 1}, Schedule::kZbV, 8, 4),
      "pp2_zbv_tp2sp_rc");
}

// Context parallelism: ring attention over mirrored chunks (rank c holds chunks c and 2 cp - 1 - c
// of the sample), the embedding and the loss on the same chunks; gradients summed over cp as over
// dp.
LayerStrategy with_cp(LayerStrategy s, int cp) {
  s.cp = cp;
  return s;
}
TEST(RuntimeParity, ContextParallel2) { expect_parity(uniform(tiny_llama(), 2, 1, with_cp(strat(1, 1), 2)), "cp2"); }
TEST(RuntimeParity, ContextParallel2GptLearnedPositions) {
  expect_parity(uniform(tiny_gpt(), 2, 1, with_cp(strat(1, 1), 2)), "cp2gpt");
}
TEST(RuntimeParity, ContextParallel4OneKvHead) {
  expect_parity(uniform(tiny_llama(4, 1), 4, 1, with_cp(strat(1, 1), 4)), "cp4mqa");
}
// Ulysses inside cp (torchtitan and Megatron nest them the same way): each cp rank's share is cut
// again by Ulysses, whose all-to-all hands the ring whole shares.
TEST(RuntimeParity, ContextParallel2Ulysses2) {
  expect_parity(uniform(tiny_llama(), 4, 1, with_cp(strat(1, 1, 2), 2)), "cp2_uly2");
}
TEST(RuntimeParity, ContextParallel2Tp2Sp) {
  expect_parity(uniform(tiny_gpt(), 4, 1, with_cp(strat(2, 1, 1, true), 2)), "cp2_tp2sp");
}
TEST(RuntimeParity, ContextParallel2Zero3Dp2) {
  expect_parity(uniform(tiny_llama(), 4, 1, with_cp(strat(1, 2, 1, false, 3), 2)), "cp2_zero3_dp2");
}
// The ring inside recomputation: selective recompute runs it again in backward.
TEST(RuntimeParity, ContextParallel2RecomputeSelective) {
  expect_parity(uniform(tiny_llama(), 2, 1, with_cp(strat(1, 1, 1, false, 0, Recompute::kSelective), 2)), "cp2_rc_sel");
}
TEST(RuntimeParity, ContextParallel2Pipeline2ZeroBubbleH1RecomputeFull) {
  expect_parity(uniform(tiny_gpt(), 4, 2, with_cp(strat(1, 1, 1, false, 0, Recompute::kFull), 2), {}, Schedule::kZbH1, 8, 4),
                "cp2_pp2_zbh1_rc");
}
// A plan that switches layouts layer by layer: cp 2, Ulysses 2, tp 2 + SP and dp 2 on one stage
// of 2 ranks; the activations are re-distributed between the cp order and the sample's.
TEST(RuntimeParity, LayerwiseContextParallelUlyssesTp) {
  const LayerStrategy cp = with_cp(strat(1, 1), 2), uly = strat(1, 1, 2), tp = strat(2, 1, 1, true), dp = strat(1, 2);
  expect_parity(make_plan(tiny_llama(), 2, 1, Schedule::k1F1B, dp, {{cp, uly, tp, cp}}), "layerwise_cp");
}

// ZB-V whose chunks switch layouts, across the turn too (group 1's chunk 0 runs tp 2 + SP, its
// chunk 1 context parallelism): the handed-over activations are re-distributed as a received
// block would be.
TEST(RuntimeParity, Pipeline2ZeroBubbleVMixedLayouts) {
  const LayerStrategy cp = with_cp(strat(1, 1), 2), uly = strat(1, 1, 2), tp = strat(2, 1, 1, true), dp = strat(1, 2);
  expect_parity(make_plan(tiny_llama(), 4, 2, Schedule::kZbV, dp, {{uly}, {tp}, {cp}, {dp}}, 8, 4), "pp2_zbv_mixed");
}

TEST(RuntimeParity, RecomputeFullTp2Sp) {
  expect_parity(uniform(tiny_gpt(), 2, 1, strat(2, 1, 1, true, 0, Recompute::kFull)), "rc_full");
}
TEST(RuntimeParity, RecomputeSelectiveUlysses2) {
  expect_parity(uniform(tiny_llama(), 2, 1, strat(1, 1, 2, false, 0, Recompute::kSelective)), "rc_sel");
}
// Full recompute runs the layer's gradient accumulators (and so the bucket hooks) inside the
// re-entrant backward of each recomputed layer.
TEST(RuntimeParity, RecomputeFullZero1Dp2SmallBuckets) {
  expect_parity(uniform(tiny_gpt(), 2, 1, strat(1, 2, 1, false, 1, Recompute::kFull)), "rc_zero1_buckets",
                kSmallBuckets);
}
TEST(RuntimeParity, RecomputeFullZero3) {
  expect_parity(uniform(tiny_gpt(), 2, 1, strat(1, 2, 1, false, 3, Recompute::kFull)), "rc_zero3");
}

// Layer-wise: tp 2 and dp 2 layers alternate inside one stage; activations are re-distributed.
TEST(RuntimeParity, LayerwiseTp2Dp2) {
  const LayerStrategy tp = strat(2, 1), dp = strat(1, 2);
  expect_parity(make_plan(tiny_gpt(), 2, 1, Schedule::k1F1B, dp, {{tp, dp, tp, dp}}), "layerwise");
}

}  // namespace
}  // namespace weft::rttest
