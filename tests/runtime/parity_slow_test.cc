// The parity checks that need 4 or 8 ranks (label runtime_slow), same criteria as parity_test.cc.
#include "parity_util.h"

namespace weft::rttest {
namespace {

TEST(RuntimeParitySlow, Pipeline2xTensorParallel2) {
  expect_parity(uniform(tiny_gpt(), 4, 2, strat(2, 1), {2, 2}, Schedule::k1F1B, 8, 4), "pp2tp2");
}

// The tied table's two copies (first and last stage) are ZeRO-2 sharded over dp 2.
TEST(RuntimeParitySlow, Pipeline2xDp2TiedZero2Gpipe) {
  expect_parity(uniform(tiny_gpt(), 4, 2, strat(1, 2, 1, false, 2), {1, 3}, Schedule::kGpipe, 8, 2), "pp2dp2z2");
}

// Four shards and 1 KiB buckets: pieces of every size, including empty ones, per bucket.
TEST(RuntimeParitySlow, Zero1Dp4SmallBuckets) {
  expect_parity(uniform(tiny_gpt(), 4, 1, strat(1, 4, 1, false, 1)), "zero1dp4_buckets", " --bucket-mb 0.0009765625");
}
TEST(RuntimeParitySlow, Zero2Dp4SmallBucketsGqa) {
  expect_parity(uniform(tiny_llama(), 4, 1, strat(1, 4, 1, false, 2)), "zero2dp4_buckets",
                " --bucket-mb 0.0009765625");
}

TEST(RuntimeParitySlow, Dp2xTp2xPp2) {
  expect_parity(uniform(tiny_llama(), 8, 2, strat(2, 2, 1, true, 1), {2, 2}, Schedule::k1F1B, 8, 2), "dp2tp2pp2");
}

// Shares per device group with tensor parallelism: both tp ranks of a replica hold its rows (no
// sequence parallelism), each taking its re-split rows from the holder at its own place.
TEST(RuntimeParitySlow, StageSharesDp2xTp2xPp2) {
  Plan p = uniform(tiny_llama(), 8, 2, strat(2, 2), {2, 2}, Schedule::k1F1B, 8, 2);
  p.train.stage_dp_shares = {{1, 3}, {3, 1}};
  expect_parity(p, "stage_shares_dp2tp2pp2");
}

TEST(RuntimeParitySlow, Dp2xTp2Zero3Recompute) {
  expect_parity(uniform(tiny_gpt(), 4, 1, strat(2, 2, 1, true, 3, Recompute::kFull)), "dp2tp2z3");
}

// tp 4 with 2 key/value heads: each head replicated on two tp ranks.
TEST(RuntimeParitySlow, TensorParallel4Gqa) {
  expect_parity(uniform(tiny_llama(4, 2), 4, 1, strat(4, 1)), "tp4gqa");
}

// Ulysses 2 inside tp 2, and a layer-wise stage mixing tp4 / tp2 x dp2 / dp4 layers.
TEST(RuntimeParitySlow, Tp2Ulysses2Layerwise) {
  const LayerStrategy a = strat(2, 1, 2), b = strat(4, 1), c = strat(1, 4), d = strat(2, 2, 1, true, 2);
  expect_parity(make_plan(tiny_llama(), 4, 1, Schedule::k1F1B, strat(2, 2), {{a, b, c, d}}), "tp2u2mix");
}

}  // namespace
}  // namespace weft::rttest
